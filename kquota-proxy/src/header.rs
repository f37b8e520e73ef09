//! What the proxy reads of every request: its api key, version, correlation id and client id,
//! where its body starts, and for Produce whether an answer will come (`acks=0` gets none).
//! Nothing else is parsed here; the few bodies enforcing quotas reads are `enforce`'s.

use std::fmt;

use kafka_protocol::messages::ApiKey;

/// The head of one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RequestHead {
    pub(crate) api_key: i16,
    pub(crate) version: i16,
    pub(crate) correlation_id: i32,
    /// False only for a Produce request with `acks=0`, which Kafka does not answer.
    pub(crate) expects_response: bool,
    /// Where the client id is in the frame, as (offset, length); (0, 0) when it is null.
    client_id: (u32, u32),
    /// Where the body starts (`None` for an API the proxy does not know: its header version is
    /// unknown, and so is the length of its tagged fields).
    pub(crate) body_at: Option<usize>,
}

impl RequestHead {
    /// The request's client id from `frame`, the frame it was parsed from (lossy for a client id
    /// that is not UTF-8; null is empty, as Kafka takes it).
    pub(crate) fn client_id<'a>(&self, frame: &'a [u8]) -> std::borrow::Cow<'a, str> {
        let (at, len) = (self.client_id.0 as usize, self.client_id.1 as usize);
        String::from_utf8_lossy(frame.get(at..at + len).unwrap_or_default())
    }
}

/// A request too short for its header, or a Produce request cut short before its `acks`.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct HeaderError(&'static str);

impl fmt::Display for HeaderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

/// The head of the request `frame` (its bytes after the size prefix).
pub(crate) fn parse(frame: &[u8]) -> Result<RequestHead, HeaderError> {
    let mut r = Reader(frame);
    let api_key = r
        .i16()
        .ok_or(HeaderError("a request shorter than its header"))?;
    let version = r
        .i16()
        .ok_or(HeaderError("a request shorter than its header"))?;
    let correlation_id = r
        .i32()
        .ok_or(HeaderError("a request shorter than its header"))?;
    let mut head = RequestHead {
        api_key,
        version,
        correlation_id,
        expects_response: true,
        client_id: (0, 0),
        body_at: None,
    };
    // Request header v1 and v2: a nullable client id (never compact); v2 adds tagged fields. The
    // header versions are those of the API's version; an unknown API is taken to have v1's
    // client id (every API but ControlledShutdown v0 has one), and its body is not looked for.
    let known = ApiKey::try_from(api_key).ok();
    if known.is_some_and(|k| k.request_header_version(version) == 0) {
        head.body_at = Some(frame.len() - r.0.len());
        return Ok(head);
    }
    // A header the proxy cannot read past is still forwarded (the broker judges it), with no
    // client id and no body: only Produce must be read further, for its acks.
    let Some(len) = r.i16() else {
        return produce_unreadable(head);
    };
    if len > 0 {
        let at = frame.len() - r.0.len();
        if r.skip(len as usize).is_none() {
            return produce_unreadable(head);
        }
        head.client_id = (at as u32, len as u32);
    }
    if let Some(key) = known {
        if key.request_header_version(version) >= 2 && r.tagged_fields().is_none() {
            return produce_unreadable(head);
        }
        head.body_at = Some(frame.len() - r.0.len());
    }
    if api_key == ApiKey::Produce as i16 {
        let acks = produce_acks(&mut r, version)
            .ok_or(HeaderError("a Produce request cut short before its acks"))?;
        head.expects_response = acks != 0;
    }
    Ok(head)
}

/// The head of a request whose header does not read to its end: an error for Produce (whether
/// an answer comes depends on its acks), else forwarded as it is.
fn produce_unreadable(head: RequestHead) -> Result<RequestHead, HeaderError> {
    if head.api_key == ApiKey::Produce as i16 {
        return Err(HeaderError("a Produce request cut short before its acks"));
    }
    Ok(head)
}

/// The `acks` of a Produce request, `r` at its body.
fn produce_acks(r: &mut Reader<'_>, version: i16) -> Option<i16> {
    // The body: a nullable transactional id from v3 (compact from v9), then acks.
    if version >= 9 {
        let len = r.uvarint()?;
        if len > 1 {
            r.skip(len as usize - 1)?;
        }
    } else if version >= 3 {
        let len = r.i16()?;
        if len > 0 {
            r.skip(len as usize)?;
        }
    }
    r.i16()
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let (head, rest) = self.0.split_first_chunk::<N>()?;
        self.0 = rest;
        Some(*head)
    }
    fn i16(&mut self) -> Option<i16> {
        self.take().map(i16::from_be_bytes)
    }
    fn i32(&mut self) -> Option<i32> {
        self.take().map(i32::from_be_bytes)
    }
    fn skip(&mut self, n: usize) -> Option<()> {
        self.0 = self.0.get(n..)?;
        Some(())
    }
    fn uvarint(&mut self) -> Option<u32> {
        let mut value = 0u32;
        for shift in (0..35).step_by(7) {
            let [b] = self.take::<1>()?;
            value |= u32::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Some(value);
            }
        }
        None
    }
    fn tagged_fields(&mut self) -> Option<()> {
        for _ in 0..self.uvarint()? {
            self.uvarint()?;
            let size = self.uvarint()?;
            self.skip(size as usize)?;
        }
        Some(())
    }
}

#[cfg(test)]
mod tests {
    use bytes::BytesMut;
    use kafka_protocol::messages::{ProduceRequest, RequestHeader};
    use kafka_protocol::protocol::{Encodable, StrBytes};

    use super::*;

    fn produce(version: i16, acks: i16, transactional_id: Option<&str>) -> Vec<u8> {
        let header = RequestHeader::default()
            .with_request_api_key(ApiKey::Produce as i16)
            .with_request_api_version(version)
            .with_correlation_id(42)
            .with_client_id(Some(StrBytes::from_static_str("producer-1")));
        let body = ProduceRequest::default()
            .with_acks(acks)
            .with_timeout_ms(1000)
            .with_transactional_id(
                transactional_id.map(|t| StrBytes::from_string(t.into()).into()),
            );
        let mut out = BytesMut::new();
        header
            .encode(&mut out, ApiKey::Produce.request_header_version(version))
            .unwrap();
        body.encode(&mut out, version).unwrap();
        out.to_vec()
    }

    #[test]
    fn produce_acks_at_every_version() {
        for version in 3..=13 {
            for acks in [-1, 0, 1] {
                for tx in [None, Some("tx-1")] {
                    let head = parse(&produce(version, acks, tx)).unwrap();
                    assert_eq!(head.api_key, 0);
                    assert_eq!(head.version, version);
                    assert_eq!(head.correlation_id, 42);
                    assert_eq!(head.expects_response, acks != 0, "v{version} acks {acks}");
                    let frame = produce(version, acks, tx);
                    assert_eq!(head.client_id(&frame), "producer-1");
                    assert!(head.body_at.is_some());
                }
            }
        }
    }

    #[test]
    fn produce_cut_short_is_an_error() {
        let frame = produce(9, 0, Some("tx"));
        for len in 8..frame.len() - 20 {
            // Every prefix that ends before acks fails; none panics.
            let _ = parse(&frame[..len]);
        }
        assert!(parse(&frame[..10]).is_err());
    }

    #[test]
    fn short_header_is_an_error() {
        assert!(parse(&[0, 3, 0, 1, 0, 0, 0]).is_err());
        let head = parse(&[0, 99, 0, 7, 0, 0, 0, 5]).unwrap();
        assert_eq!(
            (head.api_key, head.version, head.correlation_id),
            (99, 7, 5)
        );
        assert!(head.expects_response);
    }
}
