//! What enforcing quotas reads and writes of Kafka's messages: a Fetch request's `max_bytes` and
//! fetch session, the partitions a CreateTopics, CreatePartitions or DeleteTopics request
//! mutates, the `throttle_time_ms` of a response, and the answers the proxy makes itself (a
//! throttled Fetch, a refused mutation). The decisions are the meter's; this module only knows
//! where Kafka keeps things.

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::create_topics_response::CreatableTopicResult;
use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::{
    ApiKey, CreatePartitionsRequest, CreatePartitionsResponse, CreateTopicsRequest,
    CreateTopicsResponse, DeleteTopicsRequest, DeleteTopicsResponse, FetchResponse,
    ProduceResponse, RequestHeader, ResponseHeader,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

/// Kafka's THROTTLING_QUOTA_EXCEEDED error code.
pub(crate) const THROTTLING_QUOTA_EXCEEDED: i16 = 89;
/// The message Kafka gives with it (`Errors.THROTTLING_QUOTA_EXCEEDED`).
const THROTTLING_MESSAGE: &str = "The throttling quota has been exceeded.";

/// What a Fetch request says that enforcing needs: where its `max_bytes` is, and its session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FetchRequest {
    /// The offset of `max_bytes` in the frame (after the size prefix).
    max_bytes_at: usize,
    /// The request's `max_bytes`.
    pub(crate) max_bytes: i32,
    /// The fetch session id (0 before v7).
    pub(crate) session_id: i32,
    /// The fetch session epoch (-1, no session, before v7).
    pub(crate) session_epoch: i32,
}

impl FetchRequest {
    /// Reads the fields of the Fetch request `frame` (its bytes after the size prefix; header
    /// included), whose body starts at `body_at`. `None` if it is too short for them, or older
    /// than v3 (no `max_bytes`; Kafka 4 serves v4 and later).
    pub(crate) fn parse(frame: &[u8], version: i16, body_at: usize) -> Option<FetchRequest> {
        if version < 3 {
            return None;
        }
        // replica_id up to v14 (a tagged field from v15), then max_wait_ms, min_bytes, max_bytes.
        let max_bytes_at = body_at + if version <= 14 { 12 } else { 8 };
        let max_bytes = i32_at(frame, max_bytes_at)?;
        let (session_id, session_epoch) = if version >= 7 {
            // isolation_level (v4+) is one byte, then the session id and epoch.
            let at = max_bytes_at + 4 + 1;
            (i32_at(frame, at)?, i32_at(frame, at + 4)?)
        } else {
            (0, -1)
        };
        Some(FetchRequest {
            max_bytes_at,
            max_bytes,
            session_id,
            session_epoch,
        })
    }

    /// Caps the request's `max_bytes` at `cap` in place, as Kafka caps a fetch at what the
    /// consumer's quota window holds (`getMaxValueInQuotaWindow`); true if it changed.
    pub(crate) fn cap(&self, frame: &mut [u8], cap: u64) -> bool {
        let cap = i32::try_from(cap).unwrap_or(i32::MAX);
        if self.max_bytes <= cap {
            return false;
        }
        frame[self.max_bytes_at..self.max_bytes_at + 4].copy_from_slice(&cap.to_be_bytes());
        true
    }

    /// Whether the request is incremental within a fetch session (Kafka's
    /// `IncrementalFetchContext`): its throttled answer keeps the session.
    fn incremental(&self) -> bool {
        self.session_id != 0 && self.session_epoch > 0
    }
}

fn i32_at(frame: &[u8], at: usize) -> Option<i32> {
    let b = frame.get(at..at.checked_add(4)?)?;
    Some(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

/// The answer Kafka gives a throttled Fetch (KIP-219): no partitions, no error, the throttle,
/// and the session kept if the request was incremental in one (Kafka's `getThrottledResponse`;
/// a full fetch gets no session id, and the client starts a new session after the throttle).
/// The records the broker sent are dropped: the client asks for them again from the same
/// offsets, so none is lost or repeated.
pub(crate) fn throttled_fetch(
    version: i16,
    correlation_id: i32,
    throttle_ms: u64,
    request: &FetchRequest,
) -> Bytes {
    let r = FetchResponse::default()
        .with_throttle_time_ms(clamp_ms(throttle_ms))
        .with_error_code(0)
        .with_session_id(if request.incremental() {
            request.session_id
        } else {
            0
        });
    frame(ApiKey::Fetch, version, correlation_id, &r)
}

/// The partitions a CreateTopics, CreatePartitions or DeleteTopics request mutates, and whether
/// Kafka is strict about it at this version (it answers THROTTLING_QUOTA_EXCEEDED from
/// CreateTopics v6, CreatePartitions v3 and DeleteTopics v5; older versions are only throttled).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Mutations {
    /// How many partitions are created or deleted.
    pub(crate) count: u32,
    /// Whether a client already in debt is refused.
    pub(crate) strict: bool,
}

/// What the proxy knows of a topic's partitions (from the Metadata answers it forwarded).
pub(crate) trait PartitionCounts {
    /// The partition count of the topic named `name`, if known.
    fn by_name(&self, name: &str) -> Option<u32>;
    /// The partition count of the topic whose id is `id`, if known.
    fn by_id(&self, id: [u8; 16]) -> Option<u32>;
}

/// The mutations of a request of `api_key` (`None` for any other API, or a request that does not
/// decode: the broker answers that one), counted as Kafka's controller counts them: the
/// partitions of each topic created (`num_partitions`, or its explicit assignments; -1 takes the
/// broker's `num.partitions`, which the proxy takes to be Kafka's default of 1), the partitions
/// added to each topic, and the partitions of each topic deleted (as the proxy last saw them in
/// a Metadata answer; 1 if it never did). A `validate_only` request mutates nothing.
pub(crate) fn mutations(
    api_key: i16,
    version: i16,
    frame: &Bytes,
    known: &dyn PartitionCounts,
) -> Option<Mutations> {
    let key = ApiKey::try_from(api_key).ok()?;
    let mut body = frame.clone();
    RequestHeader::decode(&mut body, key.request_header_version(version)).ok()?;
    let (count, strict) = match key {
        ApiKey::CreateTopics => {
            let r = CreateTopicsRequest::decode(&mut body, version).ok()?;
            if r.validate_only {
                return None;
            }
            let count = r.topics.iter().map(|t| {
                if !t.assignments.is_empty() {
                    t.assignments.len() as u64
                } else if t.num_partitions > 0 {
                    t.num_partitions as u64
                } else {
                    1
                }
            });
            (count.sum::<u64>(), version >= 6)
        }
        ApiKey::CreatePartitions => {
            let r = CreatePartitionsRequest::decode(&mut body, version).ok()?;
            if r.validate_only {
                return None;
            }
            let count = r.topics.iter().map(|t| {
                let now = known.by_name(&t.name.0).unwrap_or(0);
                u64::try_from(t.count)
                    .unwrap_or(0)
                    .saturating_sub(u64::from(now))
            });
            (count.sum::<u64>(), version >= 3)
        }
        ApiKey::DeleteTopics => {
            let r = DeleteTopicsRequest::decode(&mut body, version).ok()?;
            let names = r.topic_names.iter().map(|n| known.by_name(&n.0));
            let states = r.topics.iter().map(|t| match &t.name {
                Some(n) => known.by_name(&n.0),
                None => known.by_id(*t.topic_id.as_bytes()),
            });
            let count = names.chain(states).map(|n| u64::from(n.unwrap_or(1)));
            (count.sum::<u64>(), version >= 5)
        }
        _ => return None,
    };
    Some(Mutations {
        count: u32::try_from(count).unwrap_or(u32::MAX),
        strict,
    })
}

/// Kafka's answer to a strict mutation request from a client in debt, without forwarding it:
/// THROTTLING_QUOTA_EXCEEDED for every topic it names, with the throttle. `None` if the request
/// does not decode (it is then forwarded, and the broker answers it).
pub(crate) fn refuse_mutations(
    api_key: i16,
    version: i16,
    correlation_id: i32,
    frame: &Bytes,
    throttle_ms: u64,
) -> Option<Bytes> {
    let key = ApiKey::try_from(api_key).ok()?;
    let mut body = frame.clone();
    RequestHeader::decode(&mut body, key.request_header_version(version)).ok()?;
    let ms = clamp_ms(throttle_ms);
    let message = || Some(StrBytes::from_static_str(THROTTLING_MESSAGE));
    Some(match key {
        ApiKey::CreateTopics => {
            let r = CreateTopicsRequest::decode(&mut body, version).ok()?;
            let topics = r.topics.into_iter().map(|t| {
                CreatableTopicResult::default()
                    .with_name(t.name)
                    .with_error_code(THROTTLING_QUOTA_EXCEEDED)
                    .with_error_message(message())
                    .with_num_partitions(-1)
                    .with_replication_factor(-1)
            });
            let r = CreateTopicsResponse::default()
                .with_throttle_time_ms(ms)
                .with_topics(topics.collect());
            frame_of(key, version, correlation_id, &r)?
        }
        ApiKey::CreatePartitions => {
            let r = CreatePartitionsRequest::decode(&mut body, version).ok()?;
            let results = r.topics.into_iter().map(|t| {
                CreatePartitionsTopicResult::default()
                    .with_name(t.name)
                    .with_error_code(THROTTLING_QUOTA_EXCEEDED)
                    .with_error_message(message())
            });
            let r = CreatePartitionsResponse::default()
                .with_throttle_time_ms(ms)
                .with_results(results.collect());
            frame_of(key, version, correlation_id, &r)?
        }
        ApiKey::DeleteTopics => {
            let r = DeleteTopicsRequest::decode(&mut body, version).ok()?;
            let named = r.topic_names.into_iter().map(|n| {
                DeletableTopicResult::default()
                    .with_name(Some(n))
                    .with_error_code(THROTTLING_QUOTA_EXCEEDED)
                    .with_error_message(message())
            });
            let states = r.topics.into_iter().map(|t| {
                DeletableTopicResult::default()
                    .with_name(t.name)
                    .with_topic_id(t.topic_id)
                    .with_error_code(THROTTLING_QUOTA_EXCEEDED)
                    .with_error_message(message())
            });
            let r = DeleteTopicsResponse::default()
                .with_throttle_time_ms(ms)
                .with_responses(named.chain(states).collect());
            frame_of(key, version, correlation_id, &r)?
        }
        _ => return None,
    })
}

/// Whether a client throttles itself after a throttled response of `api_key` at `version`
/// (KIP-219, Kafka's `shouldClientThrottle`): the response goes at once and the proxy stops
/// reading the connection for the throttle; for older versions Kafka holds the response back for
/// the throttle time instead, and so does the proxy.
pub(crate) fn client_throttles(api_key: i16, version: i16) -> bool {
    match ApiKey::try_from(api_key) {
        Ok(ApiKey::Produce) => version >= 6,
        Ok(ApiKey::Fetch) => version >= 8,
        Ok(ApiKey::CreateTopics) => version >= 3,
        Ok(ApiKey::DeleteTopics) => version >= 2,
        Ok(ApiKey::CreatePartitions) => version >= 1,
        _ => true,
    }
}

/// Where a response's `throttle_time_ms` is, for the responses whose body begins with it (Fetch
/// v1+, CreateTopics v2+, DeleteTopics v1+, CreatePartitions): its offset in `frame` (the bytes
/// after the size prefix).
fn leading_throttle_at(frame: &[u8], api_key: i16, version: i16) -> Option<usize> {
    let key = ApiKey::try_from(api_key).ok()?;
    let first = match key {
        ApiKey::Fetch | ApiKey::DeleteTopics => 1,
        ApiKey::CreateTopics => 2,
        ApiKey::CreatePartitions => 0,
        _ => return None,
    };
    if version < first {
        return None;
    }
    let mut at = 4;
    if key.response_header_version(version) >= 1 {
        at += tagged_fields_len(frame.get(at..)?)?;
    }
    (at + 4 <= frame.len()).then_some(at)
}

/// The `throttle_time_ms` of a response whose body begins with it (see [`raise_throttle`]).
pub(crate) fn leading_throttle(frame: &[u8], api_key: i16, version: i16) -> Option<i32> {
    i32_at(frame, leading_throttle_at(frame, api_key, version)?)
}

/// The length of the tagged fields at the start of `b`.
fn tagged_fields_len(b: &[u8]) -> Option<usize> {
    let mut at = 0;
    let (count, n) = uvarint(b)?;
    at += n;
    for _ in 0..count {
        let (_, n) = uvarint(b.get(at..)?)?;
        at += n;
        let (size, n) = uvarint(b.get(at..)?)?;
        at = at.checked_add(n)?.checked_add(size as usize)?;
    }
    (at <= b.len()).then_some(at)
}

fn uvarint(b: &[u8]) -> Option<(u32, usize)> {
    let mut value = 0u32;
    for (i, byte) in b.iter().take(5).enumerate() {
        value |= u32::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some((value, i + 1));
        }
    }
    None
}

/// The response `frame` (bytes after the size prefix) with `throttle_time_ms` raised to
/// `throttle_ms` if the broker's is lower: the client is told the longer of the two. `Ok(None)`
/// when nothing changes; `Err` when the response does not decode (it is then forwarded as it is).
pub(crate) fn raise_throttle(
    api_key: i16,
    version: i16,
    frame: &Bytes,
    throttle_ms: u64,
) -> Result<Option<BytesMut>, ()> {
    let ms = clamp_ms(throttle_ms);
    if let Some(at) = leading_throttle_at(frame, api_key, version) {
        if i32_at(frame, at).is_some_and(|broker| broker >= ms) {
            return Ok(None);
        }
        let mut out = BytesMut::with_capacity(4 + frame.len());
        out.extend_from_slice(&(frame.len() as u32).to_be_bytes());
        out.extend_from_slice(frame);
        out[4 + at..8 + at].copy_from_slice(&ms.to_be_bytes());
        return Ok(Some(out));
    }
    if api_key != ApiKey::Produce as i16 || version < 1 {
        return Ok(None);
    }
    // Produce keeps it after its partitions: the response is decoded and encoded again (small:
    // no records in it).
    let key = ApiKey::Produce;
    let mut body = frame.clone();
    let header =
        ResponseHeader::decode(&mut body, key.response_header_version(version)).map_err(|_| ())?;
    let mut r = ProduceResponse::decode(&mut body, version).map_err(|_| ())?;
    if r.throttle_time_ms >= ms {
        return Ok(None);
    }
    r.throttle_time_ms = ms;
    let mut out = BytesMut::with_capacity(4 + frame.len());
    out.extend_from_slice(&[0; 4]);
    header
        .encode(&mut out, key.response_header_version(version))
        .map_err(|_| ())?;
    r.encode(&mut out, version).map_err(|_| ())?;
    let size = (out.len() - 4) as u32;
    out[..4].copy_from_slice(&size.to_be_bytes());
    Ok(Some(out))
}

fn clamp_ms(ms: u64) -> i32 {
    i32::try_from(ms).unwrap_or(i32::MAX)
}

/// A response frame, size prefix included.
fn frame<M: Encodable>(key: ApiKey, version: i16, correlation_id: i32, message: &M) -> Bytes {
    frame_of(key, version, correlation_id, message).unwrap_or_default()
}

fn frame_of<M: Encodable>(
    key: ApiKey,
    version: i16,
    correlation_id: i32,
    message: &M,
) -> Option<Bytes> {
    let mut out = BytesMut::new();
    out.extend_from_slice(&[0; 4]);
    ResponseHeader::default()
        .with_correlation_id(correlation_id)
        .encode(&mut out, key.response_header_version(version))
        .ok()?;
    message.encode(&mut out, version).ok()?;
    let size = u32::try_from(out.len() - 4).ok()?;
    out[..4].copy_from_slice(&size.to_be_bytes());
    Some(out.freeze())
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
    use kafka_protocol::messages::create_topics_request::CreatableTopic;
    use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
    use kafka_protocol::messages::{FetchRequest as KFetch, TopicName};
    use kafka_protocol::protocol::Message;

    use super::*;

    fn request<M: Encodable>(key: ApiKey, version: i16, m: &M) -> (Bytes, usize) {
        let mut out = BytesMut::new();
        RequestHeader::default()
            .with_request_api_key(key as i16)
            .with_request_api_version(version)
            .with_correlation_id(7)
            .with_client_id(Some(StrBytes::from_static_str("c-1")))
            .encode(&mut out, key.request_header_version(version))
            .unwrap();
        let body_at = out.len();
        m.encode(&mut out, version).unwrap();
        (out.freeze(), body_at)
    }

    fn topic(name: &str) -> TopicName {
        TopicName(StrBytes::from_string(name.into()))
    }

    #[test]
    fn fetch_fields_and_cap_at_every_version() {
        for version in 4..=KFetch::VERSIONS.max {
            let m = KFetch::default()
                .with_max_wait_ms(500)
                .with_min_bytes(1)
                .with_max_bytes(52_428_800)
                .with_session_id(if version >= 7 { 1234 } else { 0 })
                .with_session_epoch(if version >= 7 { 3 } else { -1 });
            let (frame, body_at) = request(ApiKey::Fetch, version, &m);
            let f = FetchRequest::parse(&frame, version, body_at).unwrap();
            assert_eq!(f.max_bytes, 52_428_800, "v{version}");
            let mut bytes = frame.to_vec();
            assert!(f.cap(&mut bytes, 10_000));
            assert!(!f.cap(&mut bytes[..], u64::MAX));
            let mut b = Bytes::from(bytes);
            RequestHeader::decode(&mut b, ApiKey::Fetch.request_header_version(version)).unwrap();
            let back = KFetch::decode(&mut b, version).unwrap();
            assert_eq!(back.max_bytes, 10_000, "v{version}");
            assert_eq!(back.max_wait_ms, 500);
            if version >= 7 {
                assert_eq!((f.session_id, f.session_epoch), (1234, 3));
                assert_eq!(back.session_epoch, 3);
            }
        }
    }

    #[test]
    fn fetch_cut_short_is_none() {
        let (frame, body_at) = request(ApiKey::Fetch, 12, &KFetch::default());
        for len in 0..body_at + 20 {
            assert!(FetchRequest::parse(&frame[..len], 12, body_at).is_none());
        }
    }

    #[test]
    fn throttled_fetch_keeps_an_incremental_session_only() {
        for (epoch, want) in [(0, 0), (-1, 0), (5, 99)] {
            let req = FetchRequest {
                max_bytes_at: 0,
                max_bytes: 1,
                session_id: 99,
                session_epoch: epoch,
            };
            let out = throttled_fetch(13, 42, 1_500, &req);
            let mut b = out.slice(4..);
            let h = ResponseHeader::decode(&mut b, 1).unwrap();
            let r = FetchResponse::decode(&mut b, 13).unwrap();
            assert_eq!(h.correlation_id, 42);
            assert_eq!(
                (r.throttle_time_ms, r.error_code, r.session_id),
                (1_500, 0, want)
            );
            assert!(r.responses.is_empty());
        }
    }

    struct Known;
    impl PartitionCounts for Known {
        fn by_name(&self, name: &str) -> Option<u32> {
            (name == "known").then_some(6)
        }
        fn by_id(&self, id: [u8; 16]) -> Option<u32> {
            (id == [7; 16]).then_some(4)
        }
    }

    #[test]
    fn mutations_are_counted_as_kafkas_controller_counts_them() {
        let create = CreateTopicsRequest::default().with_topics(vec![
            CreatableTopic::default()
                .with_name(topic("a"))
                .with_num_partitions(3),
            CreatableTopic::default()
                .with_name(topic("b"))
                .with_num_partitions(-1),
        ]);
        for (version, strict) in [(5, false), (7, true)] {
            let (frame, _) = request(ApiKey::CreateTopics, version, &create);
            let m = mutations(ApiKey::CreateTopics as i16, version, &frame, &Known).unwrap();
            assert_eq!(m, Mutations { count: 4, strict });
        }
        let validate = create.clone().with_validate_only(true);
        let (frame, _) = request(ApiKey::CreateTopics, 7, &validate);
        assert!(mutations(ApiKey::CreateTopics as i16, 7, &frame, &Known).is_none());

        let grow = CreatePartitionsRequest::default().with_topics(vec![
            CreatePartitionsTopic::default()
                .with_name(topic("known"))
                .with_count(10),
            CreatePartitionsTopic::default()
                .with_name(topic("new"))
                .with_count(2),
        ]);
        let (frame, _) = request(ApiKey::CreatePartitions, 3, &grow);
        let m = mutations(ApiKey::CreatePartitions as i16, 3, &frame, &Known).unwrap();
        assert_eq!(
            m,
            Mutations {
                count: 4 + 2,
                strict: true
            }
        );

        let delete = DeleteTopicsRequest::default().with_topics(vec![
            DeleteTopicState::default().with_name(Some(topic("known"))),
            DeleteTopicState::default().with_topic_id(uuid::Uuid::from_bytes([7; 16])),
            DeleteTopicState::default().with_name(Some(topic("other"))),
        ]);
        let (frame, _) = request(ApiKey::DeleteTopics, 6, &delete);
        let m = mutations(ApiKey::DeleteTopics as i16, 6, &frame, &Known).unwrap();
        assert_eq!(
            m,
            Mutations {
                count: 6 + 4 + 1,
                strict: true
            }
        );
        let old = DeleteTopicsRequest::default().with_topic_names(vec![topic("known")]);
        let (frame, _) = request(ApiKey::DeleteTopics, 4, &old);
        let m = mutations(ApiKey::DeleteTopics as i16, 4, &frame, &Known).unwrap();
        assert_eq!(
            m,
            Mutations {
                count: 6,
                strict: false
            }
        );
    }

    #[test]
    fn refusals_name_every_topic() {
        let create = CreateTopicsRequest::default().with_topics(vec![
            CreatableTopic::default().with_name(topic("a")),
            CreatableTopic::default().with_name(topic("b")),
        ]);
        let (frame, _) = request(ApiKey::CreateTopics, 7, &create);
        let out = refuse_mutations(ApiKey::CreateTopics as i16, 7, 7, &frame, 2_000).unwrap();
        let mut b = out.slice(4..);
        ResponseHeader::decode(&mut b, 1).unwrap();
        let r = CreateTopicsResponse::decode(&mut b, 7).unwrap();
        assert_eq!(r.throttle_time_ms, 2_000);
        assert_eq!(r.topics.len(), 2);
        assert!(r
            .topics
            .iter()
            .all(|t| t.error_code == THROTTLING_QUOTA_EXCEEDED));

        let delete = DeleteTopicsRequest::default()
            .with_topics(vec![DeleteTopicState::default().with_name(Some(topic("x")))]);
        let (frame, _) = request(ApiKey::DeleteTopics, 6, &delete);
        let out = refuse_mutations(ApiKey::DeleteTopics as i16, 6, 7, &frame, 10).unwrap();
        let mut b = out.slice(4..);
        ResponseHeader::decode(&mut b, 1).unwrap();
        let r = DeleteTopicsResponse::decode(&mut b, 6).unwrap();
        assert_eq!(r.responses[0].error_code, THROTTLING_QUOTA_EXCEEDED);
        assert_eq!(
            r.responses[0].error_message.as_deref(),
            Some(THROTTLING_MESSAGE)
        );
    }

    fn response<M: Encodable>(key: ApiKey, version: i16, m: &M) -> Bytes {
        frame_of(key, version, 5, m).unwrap().slice(4..)
    }

    #[test]
    fn throttle_is_raised_never_lowered() {
        for version in [4, 11, 12, 17] {
            let r = FetchResponse::default().with_throttle_time_ms(100);
            let frame = response(ApiKey::Fetch, version, &r);
            assert!(raise_throttle(1, version, &frame, 50).unwrap().is_none());
            let out = raise_throttle(1, version, &frame, 700).unwrap().unwrap();
            let mut b = out.freeze().slice(4..);
            ResponseHeader::decode(&mut b, ApiKey::Fetch.response_header_version(version)).unwrap();
            assert_eq!(
                FetchResponse::decode(&mut b, version)
                    .unwrap()
                    .throttle_time_ms,
                700
            );
        }
        for version in [3, 8, 9, 13] {
            let r = ProduceResponse::default().with_throttle_time_ms(0);
            let frame = response(ApiKey::Produce, version, &r);
            let out = raise_throttle(0, version, &frame, 1_234).unwrap().unwrap();
            let mut b = out.freeze().slice(4..);
            ResponseHeader::decode(&mut b, ApiKey::Produce.response_header_version(version))
                .unwrap();
            let back = ProduceResponse::decode(&mut b, version).unwrap();
            assert_eq!(back.throttle_time_ms, 1_234, "v{version}");
        }
        let r = CreatePartitionsResponse::default();
        let frame = response(ApiKey::CreatePartitions, 3, &r);
        assert!(raise_throttle(37, 3, &frame, 9).unwrap().is_some());
        // An API without a leading throttle is left alone.
        assert!(raise_throttle(3, 12, &frame, 9).unwrap().is_none());
        // A response cut short is never patched out of bounds.
        assert!(raise_throttle(1, 12, &frame.slice(..5), 9)
            .unwrap()
            .is_none());
    }

    #[test]
    fn kip_219_versions() {
        assert!(client_throttles(0, 6) && !client_throttles(0, 5));
        assert!(client_throttles(1, 8) && !client_throttles(1, 7));
        assert!(client_throttles(3, 0));
    }
}
