//! A certificate's subject as Kafka names an SSL principal: the distinguished name in RFC 2253
//! form, as Java's `X500Principal.getName()` writes it (`CN=alice,OU=eng,O=acme`), which is what
//! `ssl.principal.mapping.rules=DEFAULT` keeps.
//!
//! The certificate is read with a small DER walker that bounds every length by the bytes present;
//! only the path to the subject is decoded.

use std::fmt::Write as _;

/// Why a subject could not be read: what is wrong with the certificate's DER.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum DnError {
    /// The DER ends inside an element.
    Truncated,
    /// A tag of more than one byte (certificates use none).
    MultiByteTag,
    /// A length in the indefinite form, of more than four bytes, or cut short.
    BadLength,
    /// An element other than the one the certificate's structure has there.
    UnexpectedElement,
    /// An object identifier arc above 2^32.
    OidArcTooLarge,
    /// An object identifier ends inside an arc.
    TruncatedOid,
    /// An empty object identifier.
    EmptyOid,
}

impl std::fmt::Display for DnError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let why = match self {
            DnError::Truncated => "truncated",
            DnError::MultiByteTag => "multi-byte tags are not used in certificates",
            DnError::BadLength => "bad length",
            DnError::UnexpectedElement => "unexpected element",
            DnError::OidArcTooLarge => "OID arc too large",
            DnError::TruncatedOid => "truncated OID",
            DnError::EmptyOid => "empty OID",
        };
        write!(f, "cannot read the certificate subject: {why}")
    }
}

impl std::error::Error for DnError {}

const SEQUENCE: u8 = 0x30;
const SET: u8 = 0x31;
const OID: u8 = 0x06;

/// One DER element: its tag, its content, and the whole encoding.
struct Tlv<'a> {
    tag: u8,
    content: &'a [u8],
    whole: &'a [u8],
}

/// Reads one element from the front of `input`, returning it and the rest.
fn read(input: &[u8]) -> Result<(Tlv<'_>, &[u8]), DnError> {
    let (&tag, rest) = input.split_first().ok_or(DnError::Truncated)?;
    if tag & 0x1f == 0x1f {
        return Err(DnError::MultiByteTag);
    }
    let (&first, mut rest) = rest.split_first().ok_or(DnError::Truncated)?;
    let len = if first < 0x80 {
        first as usize
    } else {
        let n = (first & 0x7f) as usize;
        if n == 0 || n > 4 || rest.len() < n {
            return Err(DnError::BadLength);
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |acc, b| (acc << 8) | *b as usize);
        rest = &rest[n..];
        len
    };
    if rest.len() < len {
        return Err(DnError::Truncated);
    }
    let header = input.len() - rest.len();
    Ok((
        Tlv {
            tag,
            content: &rest[..len],
            whole: &input[..header + len],
        },
        &rest[len..],
    ))
}

fn expect(input: &[u8], tag: u8) -> Result<(Tlv<'_>, &[u8]), DnError> {
    let (tlv, rest) = read(input)?;
    if tlv.tag != tag {
        return Err(DnError::UnexpectedElement);
    }
    Ok((tlv, rest))
}

/// The subject of a DER certificate, in RFC 2253 form.
pub fn subject_dn(certificate_der: &[u8]) -> Result<String, DnError> {
    let (cert, _) = expect(certificate_der, SEQUENCE)?;
    let (tbs, _) = expect(cert.content, SEQUENCE)?;
    let mut rest = tbs.content;
    let (first, after) = read(rest)?;
    if first.tag == 0xa0 {
        rest = after; // the explicit version
    }
    let (_serial, rest) = expect(rest, 0x02)?;
    let (_signature, rest) = expect(rest, SEQUENCE)?;
    let (_issuer, rest) = expect(rest, SEQUENCE)?;
    let (_validity, rest) = expect(rest, SEQUENCE)?;
    let (subject, _) = expect(rest, SEQUENCE)?;
    name_rfc2253(subject.content)
}

/// Formats the content of a DER `Name` (a sequence of RDN sets), last RDN first as RFC 2253
/// requires.
pub(crate) fn name_rfc2253(mut rdns: &[u8]) -> Result<String, DnError> {
    let mut parts = Vec::new();
    while !rdns.is_empty() {
        let (set, rest) = expect(rdns, SET)?;
        rdns = rest;
        let mut avas = Vec::new();
        let mut inner = set.content;
        while !inner.is_empty() {
            let (ava, rest) = expect(inner, SEQUENCE)?;
            inner = rest;
            let (oid, rest) = expect(ava.content, OID)?;
            let (value, _) = read(rest)?;
            avas.push(format_ava(oid.content, &value)?);
        }
        parts.push(avas.join("+"));
    }
    parts.reverse();
    Ok(parts.join(","))
}

/// The keywords RFC 2253 (and Java) write by name.
fn keyword(oid: &[u8]) -> Option<&'static str> {
    Some(match oid {
        [0x55, 0x04, 0x03] => "CN",
        [0x55, 0x04, 0x06] => "C",
        [0x55, 0x04, 0x07] => "L",
        [0x55, 0x04, 0x08] => "ST",
        [0x55, 0x04, 0x0a] => "O",
        [0x55, 0x04, 0x0b] => "OU",
        [0x55, 0x04, 0x09] => "STREET",
        [0x09, 0x92, 0x26, 0x89, 0x93, 0xf2, 0x2c, 0x64, 0x01, 0x19] => "DC",
        [0x09, 0x92, 0x26, 0x89, 0x93, 0xf2, 0x2c, 0x64, 0x01, 0x01] => "UID",
        _ => return None,
    })
}

fn dotted(oid: &[u8]) -> Result<String, DnError> {
    let mut arcs = Vec::new();
    let mut acc: u64 = 0;
    for (i, b) in oid.iter().enumerate() {
        if acc > (u64::MAX >> 7) {
            return Err(DnError::OidArcTooLarge);
        }
        acc = (acc << 7) | u64::from(b & 0x7f);
        if b & 0x80 == 0 {
            arcs.push(acc);
            acc = 0;
        } else if i + 1 == oid.len() {
            return Err(DnError::TruncatedOid);
        }
    }
    let Some(&first) = arcs.first() else {
        return Err(DnError::EmptyOid);
    };
    let (a, b) = if first < 80 {
        (first / 40, first % 40)
    } else {
        (2, first - 80)
    };
    let mut s = format!("{a}.{b}");
    for arc in &arcs[1..] {
        let _ = write!(s, ".{arc}");
    }
    Ok(s)
}

/// The value as text when it is one of the string types.
fn string_value(value: &Tlv<'_>) -> Option<String> {
    match value.tag {
        // UTF8String, PrintableString, TeletexString, IA5String
        0x0c | 0x13 | 0x14 | 0x16 => Some(
            String::from_utf8(value.content.to_vec())
                .unwrap_or_else(|_| value.content.iter().map(|&b| b as char).collect()),
        ),
        // BMPString
        0x1e if value.content.len().is_multiple_of(2) => char::decode_utf16(
            value
                .content
                .chunks(2)
                .map(|c| u16::from_be_bytes([c[0], c[1]])),
        )
        .collect::<Result<String, _>>()
        .ok(),
        _ => None,
    }
}

fn format_ava(oid: &[u8], value: &Tlv<'_>) -> Result<String, DnError> {
    match (keyword(oid), string_value(value)) {
        (Some(k), Some(v)) => Ok(format!("{k}={}", escape(&v))),
        (k, _) => {
            // Java writes other attributes (and non-string values) as the OID and the value's
            // DER encoding in hex.
            let name = match k {
                Some(k) => k.to_owned(),
                None => dotted(oid)?,
            };
            let mut s = format!("{name}=#");
            for b in value.whole {
                let _ = write!(s, "{b:02x}");
            }
            Ok(s)
        }
    }
}

/// RFC 2253 escaping as Java does it: `,=+<>#;"\` anywhere, a space at either end.
fn escape(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    let last = v.chars().count().saturating_sub(1);
    for (i, c) in v.chars().enumerate() {
        if ",=+<>#;\"\\".contains(c) || (c == ' ' && (i == 0 || i == last)) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tlv(tag: u8, content: &[u8]) -> Vec<u8> {
        let mut v = vec![tag];
        if content.len() < 128 {
            v.push(content.len() as u8);
        } else {
            v.push(0x82);
            v.extend_from_slice(&(content.len() as u16).to_be_bytes());
        }
        v.extend_from_slice(content);
        v
    }

    fn rdn(oid: &[u8], tag: u8, value: &[u8]) -> Vec<u8> {
        let mut ava = tlv(OID, oid);
        ava.extend(tlv(tag, value));
        tlv(SET, &tlv(SEQUENCE, &ava))
    }

    #[test]
    fn reverse_order_keywords_and_escapes() {
        let mut name = Vec::new();
        name.extend(rdn(&[0x55, 4, 6], 0x13, b"US"));
        name.extend(rdn(&[0x55, 4, 10], 0x0c, b"acme, inc"));
        name.extend(rdn(&[0x55, 4, 11], 0x0c, b"eng"));
        name.extend(rdn(&[0x55, 4, 3], 0x0c, b" al+ice "));
        assert_eq!(
            name_rfc2253(&name).unwrap(),
            "CN=\\ al\\+ice\\ ,OU=eng,O=acme\\, inc,C=US"
        );
    }

    #[test]
    fn unknown_attributes_are_hex() {
        // emailAddress (1.2.840.113549.1.9.1) as an IA5String.
        let email = [0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x09, 0x01];
        let mut name = rdn(&email, 0x16, b"a@b");
        name.extend(rdn(&[0x55, 4, 3], 0x1e, &[0, b'x', 0, b'y']));
        assert_eq!(
            name_rfc2253(&name).unwrap(),
            "CN=xy,1.2.840.113549.1.9.1=#1603614062"
        );
    }

    #[test]
    fn multi_valued_rdn() {
        let mut ava1 = tlv(OID, &[0x55, 4, 3]);
        ava1.extend(tlv(0x0c, b"a"));
        let mut ava2 = tlv(OID, &[0x55, 4, 11]);
        ava2.extend(tlv(0x0c, b"b"));
        let mut set = tlv(SEQUENCE, &ava1);
        set.extend(tlv(SEQUENCE, &ava2));
        assert_eq!(name_rfc2253(&tlv(SET, &set)).unwrap(), "CN=a+OU=b");
    }

    #[test]
    fn truncated_input_is_an_error() {
        let name = rdn(&[0x55, 4, 3], 0x0c, b"alice");
        for cut in 0..name.len() {
            if cut == 0 {
                assert_eq!(name_rfc2253(&name[..0]).unwrap(), "");
            } else {
                assert!(name_rfc2253(&name[..cut]).is_err(), "cut at {cut}");
            }
        }
        assert!(subject_dn(&[0x30, 0x84, 0xff, 0xff, 0xff, 0xff]).is_err());
    }
}
