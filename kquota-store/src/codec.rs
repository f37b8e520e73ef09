//! How one entity's quotas are stored: the value of its entry in the quota table.

use kquota::QuotaKey;

use crate::error::CorruptEntry;

/// `[len u8][key text][value f64 LE]` per key: small, fast to read, and spelled with the public key
/// names so that the layout does not depend on internal indices.
pub(crate) fn encode(quotas: &[(QuotaKey, f64)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(quotas.len() * 32);
    for (key, value) in quotas {
        let text = key.to_string();
        out.push(text.len() as u8);
        out.extend_from_slice(text.as_bytes());
        out.extend_from_slice(&value.to_le_bytes());
    }
    out
}

/// The quotas of one stored value, or what is wrong with it.
pub(crate) fn decode(mut bytes: &[u8]) -> Result<Vec<(QuotaKey, f64)>, CorruptEntry> {
    let mut out = Vec::new();
    while let Some((&len, rest)) = bytes.split_first() {
        let len = len as usize;
        if rest.len() < len + 8 {
            return Err(CorruptEntry::Truncated);
        }
        let text = std::str::from_utf8(&rest[..len]).map_err(CorruptEntry::NotUtf8)?;
        let key: QuotaKey = text.parse().map_err(CorruptEntry::Key)?;
        let value = f64::from_le_bytes(rest[len..len + 8].try_into().expect("8 bytes"));
        out.push((key, value));
        bytes = &rest[len + 8..];
    }
    if out.is_empty() {
        return Err(CorruptEntry::NoQuotas);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoding_round_trips_and_rejects_garbage() {
        let quotas = vec![
            (QuotaKey::CONSUMER_SHARES, 200.0),
            (QuotaKey::REQUEST_PERCENTAGE, 12.5),
        ];
        assert_eq!(decode(&encode(&quotas)).unwrap(), quotas);
        assert!(decode(&[]).is_err());
        assert!(decode(&[5, b'a']).is_err());
        let mut bad = encode(&quotas);
        bad[1] = b'X';
        assert!(decode(&bad).is_err());
    }
}
