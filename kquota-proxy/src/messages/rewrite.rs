//! The responses the proxy changes: every broker endpoint they carry is replaced by the proxy's
//! listener for that broker (Metadata, FindCoordinator, DescribeCluster, and the KIP-951
//! `node_endpoints` of Produce v10+ and Fetch v16+), and ApiVersions is capped to what this module
//! can decode and encode. Every other response is left as it came.
//!
//! A response is decoded from a [`Bytes`], so the record batches of a Fetch response are slices of
//! the frame, not copies; a Produce or Fetch response is re-encoded only when its `node_endpoints`
//! is not empty (Kafka fills it only with NOT_LEADER_OR_FOLLOWER errors), and only then are its
//! records copied, once, into the new frame.

use std::fmt;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsResponse, DescribeClusterResponse, FetchResponse, FindCoordinatorResponse,
    MetadataResponse, ProduceResponse, ResponseHeader,
};
use kafka_protocol::protocol::{Decodable, Encodable, Message, StrBytes};
use kquota_wire::SUPPORTED_APIS;

use crate::messages::walk;

/// Produce responses carry `node_endpoints` from this version (KIP-951).
pub(crate) const PRODUCE_ENDPOINTS_FROM: i16 = 10;
/// Fetch responses carry `node_endpoints` from this version (KIP-951).
pub(crate) const FETCH_ENDPOINTS_FROM: i16 = 16;
/// Kafka's UNSUPPORTED_VERSION error code.
pub(crate) const UNSUPPORTED_VERSION: i16 = kquota_wire::ErrorCode::UNSUPPORTED_VERSION.0;

/// Where clients are to reach a broker: given a broker's node id and upstream endpoint, the
/// proxy's endpoint for it (or why there is none).
pub(crate) trait Advertise {
    /// The host and port to put in place of `host`:`port` for broker `node_id`.
    fn advertise(&mut self, node_id: i32, host: &str, port: i32) -> Result<(String, i32), String>;

    /// A topic a Metadata answer names, with its partition count (for counting the partitions a
    /// DeleteTopics or CreatePartitions request mutates).
    fn topic(&mut self, _name: Option<&str>, _id: [u8; 16], _partitions: u32) {}
}

impl<F: FnMut(i32, &str, i32) -> Result<(String, i32), String>> Advertise for F {
    fn advertise(&mut self, node_id: i32, host: &str, port: i32) -> Result<(String, i32), String> {
        self(node_id, host, port)
    }
}

/// Why a response could not be rewritten: the connection it came on is closed.
#[derive(Debug)]
pub(crate) enum RewriteError {
    /// It does not decode at the request's version.
    Decode(String),
    /// Bytes were left after its body.
    Trailing(usize),
    /// The request's version is above what kafka-protocol can decode.
    Version,
    /// A broker endpoint it names has no listener on the proxy.
    Endpoint(String),
    /// It could not be encoded again.
    Encode(String),
}

impl fmt::Display for RewriteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RewriteError::Decode(e) => write!(f, "does not decode: {e}"),
            RewriteError::Trailing(n) => write!(f, "{n} bytes after its body"),
            RewriteError::Version => write!(f, "a version the proxy cannot rewrite"),
            RewriteError::Endpoint(e) => write!(f, "no proxy endpoint for a broker: {e}"),
            RewriteError::Encode(e) => write!(f, "cannot be encoded: {e}"),
        }
    }
}

/// The highest version of `api_key` the proxy can rewrite, for the APIs it rewrites (and
/// ApiVersions, which it caps); `None` for every other API.
pub(crate) fn rewritten_max(api_key: i16) -> Option<i16> {
    match ApiKey::try_from(api_key).ok()? {
        ApiKey::Metadata => Some(MetadataResponse::VERSIONS.max),
        ApiKey::FindCoordinator => Some(FindCoordinatorResponse::VERSIONS.max),
        ApiKey::DescribeCluster => Some(DescribeClusterResponse::VERSIONS.max),
        ApiKey::Produce => Some(ProduceResponse::VERSIONS.max),
        ApiKey::Fetch => Some(FetchResponse::VERSIONS.max),
        ApiKey::ApiVersions => Some(ApiVersionsResponse::VERSIONS.max),
        // The quota admin APIs the proxy answers itself, at the versions its handler serves.
        ApiKey::DescribeClientQuotas | ApiKey::AlterClientQuotas => SUPPORTED_APIS
            .iter()
            .find(|a| a.api_key == api_key)
            .map(|a| a.max_version),
        _ => None,
    }
}

/// Whether the response to `api_key` at `version` is decoded (it may carry endpoints, or it is
/// ApiVersions). Every other response is forwarded as its bytes.
pub(crate) fn needs_rewrite(api_key: i16, version: i16) -> bool {
    match ApiKey::try_from(api_key) {
        Ok(ApiKey::Metadata | ApiKey::FindCoordinator | ApiKey::DescribeCluster) => true,
        Ok(ApiKey::ApiVersions) => true,
        Ok(ApiKey::Produce) => version >= PRODUCE_ENDPOINTS_FROM,
        Ok(ApiKey::Fetch) => version >= FETCH_ENDPOINTS_FROM,
        _ => false,
    }
}

/// The response `frame` (its bytes after the size prefix) to a request of `api_key` at
/// `version`, rewritten: `Ok(None)` if it is to be forwarded as it is, else the new response
/// with its size prefix.
pub(crate) fn rewrite(
    api_key: i16,
    version: i16,
    frame: &Bytes,
    advertise: &mut dyn Advertise,
) -> Result<Option<Bytes>, RewriteError> {
    let Ok(key) = ApiKey::try_from(api_key) else {
        return Ok(None);
    };
    if !needs_rewrite(api_key, version) {
        return Ok(None);
    }
    if rewritten_max(api_key).is_some_and(|max| version > max) {
        return Err(RewriteError::Version);
    }
    walk::response_header(key, version, frame)
        .map_err(|e| RewriteError::Decode(format!("header: {e}")))?;
    let mut body = frame.clone();
    ResponseHeader::decode(&mut body, key.response_header_version(version))
        .map_err(|e| RewriteError::Decode(format!("header: {e:#}")))?;
    let header = &frame[..frame.len() - body.len()];
    match key {
        ApiKey::Metadata => {
            let mut r: MetadataResponse = decode(key, &mut body, version)?;
            for t in r.topics.iter().filter(|t| t.error_code == 0) {
                let name = t.name.as_ref().map(|n| n.0.as_str());
                let partitions = u32::try_from(t.partitions.len()).unwrap_or(u32::MAX);
                advertise.topic(name, *t.topic_id.as_bytes(), partitions);
            }
            for b in &mut r.brokers {
                (b.host, b.port) = replace(advertise, b.node_id.0, &b.host, b.port)?;
            }
            encode(header, &r, version).map(Some)
        }
        ApiKey::FindCoordinator => {
            let mut r: FindCoordinatorResponse = decode(key, &mut body, version)?;
            if version < 4 {
                if r.node_id.0 >= 0 {
                    (r.host, r.port) = replace(advertise, r.node_id.0, &r.host, r.port)?;
                }
            } else {
                for c in &mut r.coordinators {
                    if c.node_id.0 >= 0 {
                        (c.host, c.port) = replace(advertise, c.node_id.0, &c.host, c.port)?;
                    }
                }
            }
            encode(header, &r, version).map(Some)
        }
        ApiKey::DescribeCluster => {
            let mut r: DescribeClusterResponse = decode(key, &mut body, version)?;
            // endpoint_type 2 lists controllers, whose node ids may be the brokers' own: a broker
            // refuses that request, and its answer is forwarded as it is.
            if r.endpoint_type != 1 {
                return Ok(None);
            }
            for b in &mut r.brokers {
                (b.host, b.port) = replace(advertise, b.broker_id.0, &b.host, b.port)?;
            }
            encode(header, &r, version).map(Some)
        }
        ApiKey::Produce => {
            let mut r: ProduceResponse = decode(key, &mut body, version)?;
            if r.node_endpoints.is_empty() {
                return Ok(None);
            }
            for n in &mut r.node_endpoints {
                (n.host, n.port) = replace(advertise, n.node_id.0, &n.host, n.port)?;
            }
            encode(header, &r, version).map(Some)
        }
        ApiKey::Fetch => {
            let mut r: FetchResponse = decode(key, &mut body, version)?;
            if r.node_endpoints.is_empty() {
                return Ok(None);
            }
            for n in &mut r.node_endpoints {
                (n.host, n.port) = replace(advertise, n.node_id.0, &n.host, n.port)?;
            }
            encode(header, &r, version).map(Some)
        }
        ApiKey::ApiVersions => cap_api_versions(header, body, version),
        _ => Ok(None),
    }
}

/// The quota admin APIs the proxy answers itself, and the versions it answers.
fn own_api(api_key: i16) -> Option<&'static kquota_wire::ApiSupport> {
    [ApiKey::DescribeClientQuotas, ApiKey::AlterClientQuotas]
        .iter()
        .any(|k| *k as i16 == api_key)
        .then(|| SUPPORTED_APIS.iter().find(|a| a.api_key == api_key))
        .flatten()
}

/// An ApiVersions response with the max version of every API the proxy rewrites capped to what
/// it can rewrite (an API whose min is above that is removed); `None` if nothing changed, or if it
/// is Kafka's UNSUPPORTED_VERSION answer in the v0 layout (which lists only ApiVersions).
fn cap_api_versions(
    header: &[u8],
    body: Bytes,
    version: i16,
) -> Result<Option<Bytes>, RewriteError> {
    let mut at_version = body.clone();
    let mut r: ApiVersionsResponse = match decode(ApiKey::ApiVersions, &mut at_version, version) {
        Ok(r) => r,
        Err(e) => {
            // A broker answers a version it does not serve in the v0 layout.
            let mut v0 = body;
            return match decode::<ApiVersionsResponse>(ApiKey::ApiVersions, &mut v0, 0) {
                Ok(r) if r.error_code == UNSUPPORTED_VERSION => Ok(None),
                _ => Err(e),
            };
        }
    };
    let before = r.api_keys.len();
    let mut changed = false;
    r.api_keys.retain_mut(|a| {
        if let Some(served) = own_api(a.api_key) {
            // The proxy answers it itself: its own range, whatever the cluster's.
            if (a.min_version, a.max_version) != (served.min_version, served.max_version) {
                (a.min_version, a.max_version) = (served.min_version, served.max_version);
                changed = true;
            }
            return true;
        }
        let Some(max) = rewritten_max(a.api_key) else {
            return true;
        };
        if a.max_version > max {
            a.max_version = max;
            changed = true;
        }
        a.min_version <= a.max_version
    });
    // The quota admin APIs are the proxy's own: listed even when the cluster does not serve them.
    for key in [ApiKey::DescribeClientQuotas, ApiKey::AlterClientQuotas] {
        let key = key as i16;
        if r.api_keys.iter().any(|a| a.api_key == key) {
            continue;
        }
        let Some(served) = own_api(key) else {
            continue;
        };
        let at = r.api_keys.partition_point(|a| a.api_key < key);
        r.api_keys.insert(
            at,
            kafka_protocol::messages::api_versions_response::ApiVersion::default()
                .with_api_key(key)
                .with_min_version(served.min_version)
                .with_max_version(served.max_version),
        );
        changed = true;
    }
    if !changed && r.api_keys.len() == before {
        return Ok(None);
    }
    encode(header, &r, version).map(Some)
}

/// The ApiVersions answer the proxy gives itself to an ApiVersions request above the version it
/// can decode, as Kafka answers one above its own: UNSUPPORTED_VERSION in the v0 layout, listing
/// the versions of ApiVersions it serves (the client retries with one of them).
pub(crate) fn unsupported_api_versions(correlation_id: i32) -> Bytes {
    use kafka_protocol::messages::api_versions_response::ApiVersion;
    let r = ApiVersionsResponse::default()
        .with_error_code(UNSUPPORTED_VERSION)
        .with_api_keys(vec![ApiVersion::default()
            .with_api_key(ApiKey::ApiVersions as i16)
            .with_min_version(ApiVersionsResponse::VERSIONS.min)
            .with_max_version(ApiVersionsResponse::VERSIONS.max)]);
    encode(&correlation_id.to_be_bytes(), &r, 0).expect("a v0 ApiVersions response encodes")
}

/// The ApiVersions answer the proxy gives itself while the cluster cannot be reached, so that a
/// tool that negotiates first (`kafka-quotas`, `kafka-configs`) is served the quota admin APIs with
/// its broker away. It lists those at the proxy's own versions and every other API at what the
/// proxy can pass on (kafka-protocol's range, capped where the proxy rewrites): a client then sends
/// its next request for the cluster as it would, rather than finding Metadata missing and waiting
/// on a connection that cannot serve it, and the proxy closes such a connection at that request
/// (the client reconnects and negotiates with the cluster). `version` is the request's, which the
/// proxy has checked it can encode.
pub(crate) fn own_api_versions(correlation_id: i32, version: i16) -> Result<Bytes, RewriteError> {
    use kafka_protocol::messages::api_versions_response::ApiVersion;
    let keys = ApiKey::iter()
        .filter_map(|key| {
            let code = key as i16;
            let (min, max) = match own_api(code) {
                Some(served) => (served.min_version, served.max_version),
                None => {
                    let valid = key.valid_versions();
                    (
                        valid.min,
                        rewritten_max(code).map_or(valid.max, |m| m.min(valid.max)),
                    )
                }
            };
            (min <= max).then(|| {
                ApiVersion::default()
                    .with_api_key(code)
                    .with_min_version(min)
                    .with_max_version(max)
            })
        })
        .collect();
    let r = ApiVersionsResponse::default().with_api_keys(keys);
    // An ApiVersions response header is the correlation id alone, at every version (KIP-511).
    encode(&correlation_id.to_be_bytes(), &r, version)
}

/// The body of a `key` response at `version`, decoded once its bounded walk has succeeded:
/// kafka-protocol reserves every array's count before it reads an element.
fn decode<M: Decodable>(key: ApiKey, body: &mut Bytes, version: i16) -> Result<M, RewriteError> {
    walk::response_body(key, version, body).map_err(|e| RewriteError::Decode(e.to_string()))?;
    let m = M::decode(body, version).map_err(|e| RewriteError::Decode(format!("{e:#}")))?;
    if body.has_remaining() {
        return Err(RewriteError::Trailing(body.remaining()));
    }
    Ok(m)
}

/// The size prefix, `header` as it came, and `message` encoded at `version`.
fn encode<M: Encodable>(header: &[u8], message: &M, version: i16) -> Result<Bytes, RewriteError> {
    let size = message
        .compute_size(version)
        .map_err(|e| RewriteError::Encode(format!("{e:#}")))?;
    let len = i32::try_from(header.len() + size)
        .map_err(|_| RewriteError::Encode(format!("{size} bytes is too large")))?;
    let mut out = BytesMut::with_capacity(4 + header.len() + size);
    out.put_i32(len);
    out.put_slice(header);
    message
        .encode(&mut out, version)
        .map_err(|e| RewriteError::Encode(format!("{e:#}")))?;
    // The size prefix is kafka-protocol's computed size: if its encoder wrote another length
    // (it once wrote fewer bytes than it counted, for a tag above i32::MAX), the client would read
    // the next answer as part of this one.
    if out.len() != 4 + header.len() + size {
        return Err(RewriteError::Encode(format!(
            "{} bytes encoded, {size} computed",
            out.len() - 4 - header.len()
        )));
    }
    Ok(out.freeze())
}

fn replace(
    advertise: &mut dyn Advertise,
    node_id: i32,
    host: &StrBytes,
    port: i32,
) -> Result<(StrBytes, i32), RewriteError> {
    let (host, port) = advertise
        .advertise(node_id, host.as_str(), port)
        .map_err(RewriteError::Endpoint)?;
    Ok((StrBytes::from_string(host), port))
}

/// The top-level tagged fields at the end of a Fetch answer (v16 and later) that was passed on
/// as it came (`tail`: every byte after its `responses`), with the `node_endpoints` (tag 0) they
/// may hold rewritten to the proxy's listeners, in exactly as many bytes: the answer's size went
/// to the client with its first bytes. `Ok(None)`: nothing to change. Endpoints that come out
/// shorter are followed by a tagged field of zeros that no client knows (clients skip those);
/// endpoints that would come out longer are left out, and the client asks for metadata as it
/// did before KIP-951, when it needs a new leader. A tail that does not read as tagged fields
/// is an error (the connection closes), and so are bytes after them, as they are after a whole
/// answer's body.
pub(crate) fn fetch_tail(
    tail: &[u8],
    advertise: &mut dyn Advertise,
) -> Result<Option<Vec<u8>>, RewriteError> {
    let bad = |e: kquota_wire::CodecError| RewriteError::Decode(e.to_string());
    let mut r = kquota_wire::Reader::new(tail);
    let count = r.uvarint("fetch tagged fields").map_err(bad)?;
    let mut fields: Vec<(u32, std::borrow::Cow<'_, [u8]>)> = Vec::new();
    let mut endpoints = None;
    for _ in 0..count {
        let tag = r.uvarint("tag").map_err(bad)?;
        let size = r.uvarint("tag size").map_err(bad)? as usize;
        let data = r.take(size, "tagged field").map_err(bad)?;
        if tag == 0 {
            endpoints = Some(fields.len());
        }
        fields.push((tag, std::borrow::Cow::Borrowed(data)));
    }
    if r.remaining() > 0 {
        // As a whole answer with bytes after its body is refused.
        return Err(RewriteError::Trailing(r.remaining()));
    }
    let Some(at) = endpoints else {
        return Ok(None);
    };
    fields[at].1 = std::borrow::Cow::Owned(node_endpoints(&fields[at].1, advertise)?);
    let encoded = tagged_section(&fields, tail.len())
        .or_else(|| {
            // Longer than the broker's: left out.
            fields.remove(at);
            tagged_section(&fields, tail.len())
        })
        .ok_or(RewriteError::Encode(
            "the fetch answer's tagged fields cannot keep their size".to_owned(),
        ))?;
    Ok(Some(encoded))
}

/// A Fetch answer's `node_endpoints` (a tagged field's bytes) with each broker's host and port
/// the proxy's listener for it.
fn node_endpoints(data: &[u8], advertise: &mut dyn Advertise) -> Result<Vec<u8>, RewriteError> {
    let bad = |e: kquota_wire::CodecError| RewriteError::Decode(e.to_string());
    let mut r = kquota_wire::Reader::new(data);
    let mut out = Vec::with_capacity(data.len() + 32);
    let n = r
        .array_len(true, false, "node_endpoints")
        .map_err(bad)?
        .unwrap_or(0);
    put_uvarint(&mut out, n as u32 + 1);
    for _ in 0..n {
        let node_id = r.i32("node_id").map_err(bad)?;
        let host = r.utf8(true, false, "host").map_err(bad)?.unwrap_or("");
        let port = r.i32("port").map_err(bad)?;
        let rest = r.position();
        // Read as kafka-protocol reads it for a whole answer: UTF-8, or refused.
        r.utf8(true, true, "rack").map_err(bad)?;
        r.tagged_fields("node endpoint tagged fields")
            .map_err(bad)?;
        let (host, port) = advertise
            .advertise(node_id, host, port)
            .map_err(RewriteError::Endpoint)?;
        out.extend_from_slice(&node_id.to_be_bytes());
        put_uvarint(&mut out, host.len() as u32 + 1);
        out.extend_from_slice(host.as_bytes());
        out.extend_from_slice(&port.to_be_bytes());
        // The rack and the endpoint's own tagged fields as they were.
        out.extend_from_slice(&data[rest..r.position()]);
    }
    if r.remaining() > 0 {
        return Err(RewriteError::Trailing(r.remaining()));
    }
    Ok(out)
}

/// `fields` encoded as a tagged-field section in exactly `size` bytes: padded with one more field
/// (its tag above every other, its value zeros) if they take fewer, `None` if they take more or no
/// padding fits the difference.
fn tagged_section(fields: &[(u32, std::borrow::Cow<'_, [u8]>)], size: usize) -> Option<Vec<u8>> {
    let encode = |extra: Option<(u32, usize)>| {
        let mut out = Vec::with_capacity(size);
        put_uvarint(
            &mut out,
            (fields.len() + usize::from(extra.is_some())) as u32,
        );
        for (tag, data) in fields {
            put_uvarint(&mut out, *tag);
            put_uvarint(&mut out, data.len() as u32);
            out.extend_from_slice(data);
        }
        if let Some((tag, zeros)) = extra {
            put_uvarint(&mut out, tag);
            put_uvarint(&mut out, zeros as u32);
            out.resize(out.len() + zeros, 0);
        }
        out
    };
    let plain = encode(None);
    if plain.len() >= size {
        return (plain.len() == size).then_some(plain);
    }
    // A tag no version of the message knows, above every other (tags go in order).
    let pad_tag = fields
        .iter()
        .map(|(t, _)| t.saturating_add(1))
        .max()
        .unwrap_or(0)
        .max(PADDING_TAG);
    let short = size - plain.len();
    // The padding field's tag, its size, and the count's growth take part of the difference.
    let fixed = uvarint_len(pad_tag) + uvarint_len(fields.len() as u32 + 1)
        - uvarint_len(fields.len() as u32);
    (1..=5).find_map(|size_len| {
        let zeros = short.checked_sub(fixed + size_len)?;
        (uvarint_len(zeros as u32) == size_len).then(|| encode(Some((pad_tag, zeros))))
    })
}

/// How many bytes `v` takes as an unsigned varint.
fn uvarint_len(v: u32) -> usize {
    (32 - v.leading_zeros() as usize).div_ceil(7).max(1)
}

/// The tag of the field that pads a rewritten tagged-field section to its size: far above the
/// tags Kafka's messages use (two bytes as a varint).
const PADDING_TAG: u32 = 0x3fff;

/// Appends `v` as Kafka's unsigned varint.
fn put_uvarint(out: &mut Vec<u8>, mut v: u32) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::api_versions_response::ApiVersion;
    use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
    use kafka_protocol::messages::fetch_response::{self, FetchableTopicResponse, PartitionData};
    use kafka_protocol::messages::find_coordinator_response::Coordinator;
    use kafka_protocol::messages::metadata_response::{
        MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
    };
    use kafka_protocol::messages::produce_response::{
        self, PartitionProduceResponse, TopicProduceResponse,
    };
    use kafka_protocol::messages::{BrokerId, TopicName};
    use kafka_protocol::protocol::HeaderVersion;

    use super::*;

    /// A response frame (no size prefix) with correlation id 7.
    fn frame<M: Encodable + HeaderVersion>(message: &M, version: i16) -> Bytes {
        let mut out = BytesMut::new();
        ResponseHeader::default()
            .with_correlation_id(7)
            .encode(&mut out, M::header_version(version))
            .unwrap();
        message.encode(&mut out, version).unwrap();
        out.freeze()
    }

    fn proxy_endpoint(node_id: i32, host: &str, port: i32) -> Result<(String, i32), String> {
        assert_eq!(host, format!("kafka-{node_id}.internal"));
        assert_eq!(port, 9092);
        Ok((format!("proxy-{node_id}"), 19000 + node_id))
    }

    /// Rewrites `message`'s frame; the new one decoded, its size prefix and header checked.
    fn rewritten<M: Encodable + Decodable + HeaderVersion>(
        key: ApiKey,
        message: &M,
        version: i16,
    ) -> Option<M> {
        let frame = frame(message, version);
        let out = rewrite(key as i16, version, &frame, &mut proxy_endpoint).unwrap()?;
        assert_eq!(
            i32::from_be_bytes(out[..4].try_into().unwrap()) as usize,
            out.len() - 4
        );
        let mut body = out.slice(4..);
        let header = ResponseHeader::decode(&mut body, M::header_version(version)).unwrap();
        assert_eq!(header.correlation_id, 7);
        let m = M::decode(&mut body, version).unwrap();
        assert!(body.is_empty());
        Some(m)
    }

    fn host(node_id: i32) -> StrBytes {
        StrBytes::from_string(format!("kafka-{node_id}.internal"))
    }

    fn proxied(node_id: i32) -> StrBytes {
        StrBytes::from_string(format!("proxy-{node_id}"))
    }

    fn topic_name() -> TopicName {
        TopicName(StrBytes::from_static_str("orders"))
    }

    #[test]
    fn metadata_at_every_version() {
        for version in 0..=MetadataResponse::VERSIONS.max {
            let brokers = |h: fn(i32) -> StrBytes, port: fn(i32) -> i32| {
                [1, 2, 3]
                    .map(|id| {
                        let mut b = MetadataResponseBroker::default()
                            .with_node_id(BrokerId(id))
                            .with_host(h(id))
                            .with_port(port(id));
                        if version >= 1 {
                            b.rack = Some(StrBytes::from_static_str("rack-a"));
                        }
                        b
                    })
                    .to_vec()
            };
            let partition = MetadataResponsePartition::default()
                .with_leader_id(BrokerId(2))
                .with_replica_nodes(vec![BrokerId(1), BrokerId(2)])
                .with_isr_nodes(vec![BrokerId(2)]);
            let topic = MetadataResponseTopic::default()
                .with_name(Some(topic_name()))
                .with_partitions(vec![partition]);
            let mut m = MetadataResponse::default()
                .with_brokers(brokers(host, |_| 9092))
                .with_topics(vec![topic]);
            if version >= 2 {
                m.cluster_id = Some(StrBytes::from_static_str("cluster-1"));
            }
            if version >= 1 {
                m.controller_id = BrokerId(3);
            }
            let got = rewritten(ApiKey::Metadata, &m, version).unwrap();
            let expected = m.with_brokers(brokers(proxied, |id| 19000 + id));
            assert_eq!(got, expected, "v{version}");
        }
    }

    #[test]
    fn find_coordinator_at_every_version() {
        for version in 0..=FindCoordinatorResponse::VERSIONS.max {
            if version < 4 {
                let m = FindCoordinatorResponse::default()
                    .with_node_id(BrokerId(2))
                    .with_host(host(2))
                    .with_port(9092);
                let got = rewritten(ApiKey::FindCoordinator, &m, version).unwrap();
                assert_eq!(got, m.with_host(proxied(2)).with_port(19002), "v{version}");
                // No coordinator: nothing to rewrite, and nothing is.
                let none = FindCoordinatorResponse::default()
                    .with_error_code(15)
                    .with_node_id(BrokerId(-1))
                    .with_host(StrBytes::default())
                    .with_port(-1);
                let got = rewritten(ApiKey::FindCoordinator, &none, version).unwrap();
                assert_eq!(got, none, "v{version}");
            } else {
                let found = Coordinator::default()
                    .with_key(StrBytes::from_static_str("group-a"))
                    .with_node_id(BrokerId(3))
                    .with_host(host(3))
                    .with_port(9092);
                let missing = Coordinator::default()
                    .with_key(StrBytes::from_static_str("group-b"))
                    .with_node_id(BrokerId(-1))
                    .with_port(-1)
                    .with_error_code(15);
                let m = FindCoordinatorResponse::default()
                    .with_coordinators(vec![found.clone(), missing.clone()]);
                let got = rewritten(ApiKey::FindCoordinator, &m, version).unwrap();
                let expected = m
                    .with_coordinators(vec![found.with_host(proxied(3)).with_port(19003), missing]);
                assert_eq!(got, expected, "v{version}");
            }
        }
    }

    #[test]
    fn describe_cluster_at_every_version() {
        for version in 0..=DescribeClusterResponse::VERSIONS.max {
            let broker = |id: i32, h: StrBytes, port: i32| {
                DescribeClusterBroker::default()
                    .with_broker_id(BrokerId(id))
                    .with_host(h)
                    .with_port(port)
                    .with_rack(Some(StrBytes::from_static_str("r")))
            };
            let m = DescribeClusterResponse::default()
                .with_cluster_id(StrBytes::from_static_str("cluster-1"))
                .with_controller_id(BrokerId(1))
                .with_brokers(vec![broker(1, host(1), 9092), broker(4, host(4), 9092)]);
            let got = rewritten(ApiKey::DescribeCluster, &m, version).unwrap();
            let expected = m.with_brokers(vec![
                broker(1, proxied(1), 19001),
                broker(4, proxied(4), 19004),
            ]);
            assert_eq!(got, expected, "v{version}");
        }
        // Controllers (v2, endpoint type 2) are forwarded as they are.
        let controllers = DescribeClusterResponse::default()
            .with_endpoint_type(2)
            .with_brokers(vec![DescribeClusterBroker::default()
                .with_broker_id(BrokerId(1))
                .with_host(StrBytes::from_static_str("controller"))
                .with_port(9093)]);
        assert_eq!(rewritten(ApiKey::DescribeCluster, &controllers, 2), None);
    }

    #[test]
    fn produce_at_every_version() {
        for version in ProduceResponse::VERSIONS.min..=ProduceResponse::VERSIONS.max {
            let mut topic = TopicProduceResponse::default().with_partition_responses(vec![
                PartitionProduceResponse::default()
                    .with_index(0)
                    .with_error_code(6)
                    .with_base_offset(41),
            ]);
            // From v13 a topic is named by its id (the nil id here), not by its name.
            if version < 13 {
                topic.name = topic_name();
            }
            let m = ProduceResponse::default().with_responses(vec![topic]);
            // Without endpoints (every version before 10, and most answers after): as it came.
            assert_eq!(rewritten(ApiKey::Produce, &m, version), None, "v{version}");
            if version < PRODUCE_ENDPOINTS_FROM {
                continue;
            }
            let endpoint = |id: i32, h: StrBytes, port: i32| {
                produce_response::NodeEndpoint::default()
                    .with_node_id(BrokerId(id))
                    .with_host(h)
                    .with_port(port)
            };
            let m = m.with_node_endpoints(vec![endpoint(2, host(2), 9092)]);
            let got = rewritten(ApiKey::Produce, &m, version).unwrap();
            let expected = m.with_node_endpoints(vec![endpoint(2, proxied(2), 19002)]);
            assert_eq!(got, expected, "v{version}");
        }
    }

    #[test]
    fn fetch_at_every_version() {
        let records = Bytes::from_static(b"record batches, forwarded as they are");
        for version in FetchResponse::VERSIONS.min..=FetchResponse::VERSIONS.max {
            let mut topic =
                FetchableTopicResponse::default().with_partitions(vec![PartitionData::default()
                    .with_partition_index(3)
                    .with_high_watermark(100)
                    .with_records(Some(records.clone()))]);
            if version < 13 {
                topic.topic = topic_name();
            }
            let m = FetchResponse::default().with_responses(vec![topic]);
            assert_eq!(rewritten(ApiKey::Fetch, &m, version), None, "v{version}");
            if version < FETCH_ENDPOINTS_FROM {
                continue;
            }
            let endpoint = |id: i32, h: StrBytes, port: i32| {
                fetch_response::NodeEndpoint::default()
                    .with_node_id(BrokerId(id))
                    .with_host(h)
                    .with_port(port)
            };
            let m = m.with_node_endpoints(vec![endpoint(1, host(1), 9092)]);
            let got = rewritten(ApiKey::Fetch, &m, version).unwrap();
            let expected = m.with_node_endpoints(vec![endpoint(1, proxied(1), 19001)]);
            assert_eq!(got, expected, "v{version}");
        }
    }

    #[test]
    fn other_apis_and_versions_are_not_decoded() {
        // Not even a header: bytes that would not decode are forwarded.
        let garbage = Bytes::from_static(&[0xff; 3]);
        for (key, version) in [(0, 9), (1, 15), (2, 7), (19, 7), (999, 0), (-1, 0)] {
            assert!(!needs_rewrite(key, version));
            assert!(rewrite(key, version, &garbage, &mut proxy_endpoint)
                .unwrap()
                .is_none());
        }
    }

    fn api(key: ApiKey, min: i16, max: i16) -> ApiVersion {
        ApiVersion::default()
            .with_api_key(key as i16)
            .with_min_version(min)
            .with_max_version(max)
    }

    #[test]
    fn api_versions_capped_at_every_version() {
        for version in 0..=ApiVersionsResponse::VERSIONS.max {
            let m = ApiVersionsResponse::default().with_api_keys(vec![
                api(ApiKey::Produce, 3, 20),
                api(ApiKey::Fetch, 4, 25),
                api(ApiKey::Metadata, 0, 13),
                api(ApiKey::FindCoordinator, 0, 9),
                api(ApiKey::ApiVersions, 0, 5),
                api(ApiKey::DescribeCluster, 7, 9),
                api(ApiKey::DescribeClientQuotas, 0, 99),
            ]);
            let got = rewritten(ApiKey::ApiVersions, &m, version).unwrap();
            let expected = m.with_api_keys(vec![
                api(ApiKey::Produce, 3, ProduceResponse::VERSIONS.max),
                api(ApiKey::Fetch, 4, FetchResponse::VERSIONS.max),
                api(ApiKey::Metadata, 0, 13),
                api(
                    ApiKey::FindCoordinator,
                    0,
                    FindCoordinatorResponse::VERSIONS.max,
                ),
                api(ApiKey::ApiVersions, 0, ApiVersionsResponse::VERSIONS.max),
                // DescribeCluster's min is above what the proxy rewrites: not offered at all.
                // DescribeClientQuotas is the proxy's own, at the versions it answers.
                api(ApiKey::DescribeClientQuotas, 0, 1),
                // Not served by this cluster: the proxy's own.
                api(ApiKey::AlterClientQuotas, 0, 1),
            ]);
            assert_eq!(got, expected, "v{version}");
            // Within the caps already: forwarded as it came.
            let within = ApiVersionsResponse::default().with_api_keys(vec![
                api(ApiKey::Produce, 3, 9),
                api(ApiKey::Metadata, 0, 12),
                api(ApiKey::DescribeClientQuotas, 0, 1),
                api(ApiKey::AlterClientQuotas, 0, 1),
            ]);
            assert_eq!(rewritten(ApiKey::ApiVersions, &within, version), None);
            // A cluster that does not serve the quota admin APIs: the proxy lists its own, in
            // key order.
            let without = ApiVersionsResponse::default().with_api_keys(vec![
                api(ApiKey::Produce, 3, 9),
                // A cluster serving only v0: the proxy's range is its own.
                api(ApiKey::DescribeClientQuotas, 0, 0),
                api(ApiKey::DescribeCluster, 0, 1),
            ]);
            let got = rewritten(ApiKey::ApiVersions, &without, version).unwrap();
            let keys: Vec<_> = got
                .api_keys
                .iter()
                .map(|a| (a.api_key, a.max_version))
                .collect();
            assert_eq!(keys, vec![(0, 9), (48, 1), (49, 1), (60, 1)], "v{version}");
        }
    }

    /// The body of an answer the proxy gives itself, once its size prefix is checked against
    /// its length and its header against `correlation_id`.
    fn own_answer_body(own: &Bytes, correlation_id: i32) -> Bytes {
        let mut body = own.slice(4..);
        assert_eq!(
            i32::from_be_bytes(own[..4].try_into().unwrap()) as usize,
            body.len()
        );
        assert_eq!(
            ResponseHeader::decode(&mut body, 0).unwrap().correlation_id,
            correlation_id
        );
        body
    }

    #[test]
    fn the_own_api_versions_answer_serves_the_admin_apis_and_lists_the_rest() {
        for version in 0..=ApiVersionsResponse::VERSIONS.max {
            let mut body = own_answer_body(&own_api_versions(7, version).unwrap(), 7);
            let r = ApiVersionsResponse::decode(&mut body, version).unwrap();
            assert_eq!(r.error_code, 0, "v{version}");
            let listed = |key: ApiKey| {
                r.api_keys
                    .iter()
                    .find(|a| a.api_key == key as i16)
                    .map(|a| (a.min_version, a.max_version))
            };
            // The quota admin APIs at the proxy's own versions.
            assert_eq!(
                listed(ApiKey::DescribeClientQuotas),
                Some((0, 1)),
                "v{version}"
            );
            assert_eq!(
                listed(ApiKey::AlterClientQuotas),
                Some((0, 1)),
                "v{version}"
            );
            // The rest at what the proxy passes on: Metadata is there for a client to ask.
            assert_eq!(
                listed(ApiKey::ApiVersions),
                Some((0, ApiVersionsResponse::VERSIONS.max))
            );
            assert_eq!(
                listed(ApiKey::Produce).map(|(_, max)| max),
                Some(ProduceResponse::VERSIONS.max)
            );
            assert!(listed(ApiKey::Metadata).is_some(), "v{version}");
            // In key order, each once.
            let keys: Vec<i16> = r.api_keys.iter().map(|a| a.api_key).collect();
            assert!(keys.windows(2).all(|w| w[0] < w[1]), "v{version}: {keys:?}");
            assert!(body.is_empty(), "v{version}: {} bytes left", body.len());
        }
    }

    #[test]
    fn api_versions_unsupported_version_answer() {
        // A broker's answer to a version it does not serve is in the v0 layout.
        let v0 = ApiVersionsResponse::default()
            .with_error_code(UNSUPPORTED_VERSION)
            .with_api_keys(vec![api(ApiKey::ApiVersions, 0, 3)]);
        let frame = frame(&v0, 0);
        assert!(rewrite(18, 4, &frame, &mut proxy_endpoint)
            .unwrap()
            .is_none());
        // The proxy's own answer above v4.
        let mut body = own_answer_body(&unsupported_api_versions(99), 99);
        let r = ApiVersionsResponse::decode(&mut body, 0).unwrap();
        assert_eq!(r.error_code, UNSUPPORTED_VERSION);
        assert_eq!(r.api_keys, vec![api(ApiKey::ApiVersions, 0, 4)]);
    }

    #[test]
    fn malformed_responses_are_errors() {
        let m = MetadataResponse::default().with_brokers(vec![MetadataResponseBroker::default()
            .with_node_id(BrokerId(1))
            .with_host(host(1))
            .with_port(9092)]);
        let whole = frame(&m, 12);
        for len in 0..whole.len() {
            let cut = whole.slice(..len);
            assert!(matches!(
                rewrite(3, 12, &cut, &mut proxy_endpoint),
                Err(RewriteError::Decode(_))
            ));
        }
        let mut longer = BytesMut::from(&whole[..]);
        longer.put_u8(0);
        assert!(matches!(
            rewrite(3, 12, &longer.freeze(), &mut proxy_endpoint),
            Err(RewriteError::Trailing(1))
        ));
        let mut refuse = |_: i32, _: &str, _: i32| Err::<(String, i32), _>("full".to_owned());
        assert!(matches!(
            rewrite(3, 12, &whole, &mut refuse),
            Err(RewriteError::Endpoint(_))
        ));
        assert!(matches!(
            rewrite(3, 14, &whole, &mut proxy_endpoint),
            Err(RewriteError::Version)
        ));
    }

    #[test]
    fn an_encoding_shorter_than_its_computed_size_is_an_error() {
        // kafka-protocol counts and sizes an unknown tag above i32::MAX (a negative key) but does
        // not write it; the walk refuses such a frame, and a message holding one anyway is not
        // framed with a size prefix past its end.
        let mut m = MetadataResponse::default();
        m.unknown_tagged_fields.insert(-1, Bytes::from_static(b"x"));
        assert!(matches!(
            encode(&7i32.to_be_bytes(), &m, 12),
            Err(RewriteError::Encode(_))
        ));
        m.unknown_tagged_fields.clear();
        let out = encode(&7i32.to_be_bytes(), &m, 12).unwrap();
        assert_eq!(
            i32::from_be_bytes(out[..4].try_into().unwrap()) as usize,
            out.len() - 4
        );
    }
}
