//! What the proxy reads of every request: its api key, version, correlation id and client id,
//! where its body starts, and for Produce whether an answer will come (`acks=0` gets none).
//! Nothing else is parsed here; the few bodies enforcing quotas reads are `enforce`'s.

use std::fmt;

use kafka_protocol::messages::ApiKey;
use kquota_wire::Reader;

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

/// The head of the request `frame` (its bytes after the size prefix), read with kquota-wire's
/// codec. A header the proxy cannot read past is still forwarded (the broker judges it), with no
/// client id and no body: only Produce must be read further, for its acks.
pub(crate) fn parse(frame: &[u8]) -> Result<RequestHead, HeaderError> {
    let short = |_| HeaderError("a request shorter than its header");
    let mut r = Reader::new(frame);
    let api_key = r.i16("request_api_key").map_err(short)?;
    let version = r.i16("request_api_version").map_err(short)?;
    let correlation_id = r.i32("correlation_id").map_err(short)?;
    let mut head = RequestHead {
        api_key,
        version,
        correlation_id,
        expects_response: true,
        client_id: (0, 0),
        body_at: None,
    };
    let Ok(wire) = kquota_wire::parse_request_head(frame) else {
        return produce_unreadable(head);
    };
    if let Some((at, len)) = wire.client_id {
        head.client_id = (at as u32, len as u32);
    }
    head.body_at = wire.body_at;
    if api_key == ApiKey::Produce as i16 {
        let acks = wire
            .body_at
            .and_then(|at| produce_acks(frame, at, version))
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

/// The `acks` of the Produce request `frame` whose body starts at `body_at`: after a nullable
/// transactional id from v3 (compact from v9).
fn produce_acks(frame: &[u8], body_at: usize, version: i16) -> Option<i16> {
    let mut r = Reader::at(frame, body_at);
    if version >= 3 {
        r.string(version >= 9, true, "transactional_id").ok()?;
    }
    r.i16("acks").ok()
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
