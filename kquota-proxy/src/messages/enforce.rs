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
use kquota_wire::{ErrorCode, Reader};

use crate::messages::walk;

/// Kafka's THROTTLING_QUOTA_EXCEEDED error code.
pub(crate) const THROTTLING_QUOTA_EXCEEDED: i16 = ErrorCode::THROTTLING_QUOTA_EXCEEDED.0;
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
    // `Reader::at` stops at the frame's end: a place past it reads nothing.
    (at <= frame.len())
        .then(|| Reader::at(frame, at).i32("i32").ok())
        .flatten()
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

/// What the proxy knows of a topic's partitions (from the Metadata answers it forwarded).
pub(crate) trait PartitionCounts {
    /// The partition count of the topic named `name`, if known.
    fn by_name(&self, name: &str) -> Option<u32>;
    /// The partition count of the topic whose id is `id`, if known.
    fn by_id(&self, id: [u8; 16]) -> Option<u32>;
}

/// A CreateTopics, CreatePartitions or DeleteTopics request, decoded so that the topics a strict
/// quota refuses can be taken out of it and answered by the proxy.
#[derive(Debug)]
pub(crate) struct MutationRequest {
    key: ApiKey,
    version: i16,
    header: RequestHeader,
    body: MutationBody,
}

#[derive(Debug)]
enum MutationBody {
    Create(CreateTopicsRequest),
    Partitions(CreatePartitionsRequest),
    Delete(DeleteTopicsRequest),
}

/// The topics of a mutation request refused by a strict quota, by their place in the request,
/// for the answer.
#[derive(Debug, Default)]
pub(crate) struct Refused {
    entries: Vec<(usize, RefusedTopic)>,
}

#[derive(Debug)]
enum RefusedTopic {
    Create(CreatableTopicResult),
    Partitions(CreatePartitionsTopicResult),
    Delete(DeletableTopicResult),
}

impl MutationRequest {
    /// Decodes the request `frame` (bytes after the size prefix) of `api_key`; `None` for any
    /// other API, a `validate_only` request (it mutates nothing), or one that does not decode
    /// (the broker answers that one).
    pub(crate) fn decode(api_key: i16, version: i16, frame: &Bytes) -> Option<MutationRequest> {
        let key = ApiKey::try_from(api_key).ok()?;
        // kafka-protocol reserves every array's count before it reads an element: only a request
        // whose counts the bounded walk has checked against its bytes is handed to it.
        walk::mutation_request(key, version, frame).ok()?;
        let mut b = frame.clone();
        let header = RequestHeader::decode(&mut b, key.request_header_version(version)).ok()?;
        let body = match key {
            ApiKey::CreateTopics => {
                let r = CreateTopicsRequest::decode(&mut b, version).ok()?;
                (!r.validate_only).then_some(MutationBody::Create(r))?
            }
            ApiKey::CreatePartitions => {
                let r = CreatePartitionsRequest::decode(&mut b, version).ok()?;
                (!r.validate_only).then_some(MutationBody::Partitions(r))?
            }
            ApiKey::DeleteTopics => {
                MutationBody::Delete(DeleteTopicsRequest::decode(&mut b, version).ok()?)
            }
            _ => return None,
        };
        Some(MutationRequest {
            key,
            version,
            header,
            body,
        })
    }

    /// Whether Kafka is strict about this version: it answers THROTTLING_QUOTA_EXCEEDED from
    /// CreateTopics v6, CreatePartitions v3 and DeleteTopics v5; older versions are only
    /// throttled.
    pub(crate) fn strict(&self) -> bool {
        match self.body {
            MutationBody::Create(_) => self.version >= 6,
            MutationBody::Partitions(_) => self.version >= 3,
            MutationBody::Delete(_) => self.version >= 5,
        }
    }

    /// The partitions each topic mutates, in request order, counted as Kafka's controller counts
    /// them: a created topic's `num_partitions` (or its explicit assignments; -1 takes the
    /// broker's `num.partitions`, which the proxy takes to be Kafka's default of 1), the
    /// partitions added to a topic (beyond those the proxy last saw in a Metadata answer), and a
    /// deleted topic's partitions (as last seen; 1 if never seen).
    pub(crate) fn counts(&self, known: &dyn PartitionCounts) -> Vec<u32> {
        match &self.body {
            MutationBody::Create(r) => r
                .topics
                .iter()
                .map(|t| {
                    if !t.assignments.is_empty() {
                        u32::try_from(t.assignments.len()).unwrap_or(u32::MAX)
                    } else {
                        u32::try_from(t.num_partitions)
                            .ok()
                            .filter(|n| *n > 0)
                            .unwrap_or(1)
                    }
                })
                .collect(),
            MutationBody::Partitions(r) => r
                .topics
                .iter()
                .map(|t| {
                    let now = known.by_name(&t.name.0).unwrap_or(0);
                    u32::try_from(t.count).unwrap_or(0).saturating_sub(now)
                })
                .collect(),
            MutationBody::Delete(r) if self.version < 6 => r
                .topic_names
                .iter()
                .map(|n| known.by_name(&n.0).unwrap_or(1))
                .collect(),
            MutationBody::Delete(r) => r
                .topics
                .iter()
                .map(|t| {
                    match &t.name {
                        Some(n) => known.by_name(&n.0),
                        None => known.by_id(*t.topic_id.as_bytes()),
                    }
                    .unwrap_or(1)
                })
                .collect(),
        }
    }

    /// Takes the topics at the places in `refused` (ascending, not empty) out of the request:
    /// either the request left to forward (with its size prefix) and what its answer must add
    /// for the refused topics, or, when every topic is refused, the proxy's whole answer.
    pub(crate) fn without(self, refused: &[usize], throttle_ms: u64) -> Split {
        let key = self.key;
        let version = self.version;
        let correlation_id = self.header.correlation_id;
        match self.split(refused) {
            (Some(forward), refused) => Split::Partly(forward, refused),
            (None, refused) => {
                let mut answer = match key {
                    ApiKey::CreateTopics => Answer::Create(CreateTopicsResponse::default()),
                    ApiKey::CreatePartitions => {
                        Answer::Partitions(CreatePartitionsResponse::default())
                    }
                    _ => Answer::Delete(DeleteTopicsResponse::default()),
                };
                answer.add(refused, clamp_ms(throttle_ms));
                Split::All(
                    answer
                        .frame(key, version, correlation_id)
                        .unwrap_or_default(),
                )
            }
        }
    }

    fn split(mut self, refused: &[usize]) -> (Option<Bytes>, Refused) {
        let mut out = Refused::default();
        let message = || Some(StrBytes::from_static_str(THROTTLING_MESSAGE));
        let refused_at = |i: usize| refused.binary_search(&i).is_ok();
        let total = match &mut self.body {
            MutationBody::Create(r) => take_out(&mut r.topics, refused_at, &mut out, |t| {
                RefusedTopic::Create(
                    CreatableTopicResult::default()
                        .with_name(t.name)
                        .with_error_code(THROTTLING_QUOTA_EXCEEDED)
                        .with_error_message(message())
                        .with_num_partitions(-1)
                        .with_replication_factor(-1),
                )
            }),
            MutationBody::Partitions(r) => take_out(&mut r.topics, refused_at, &mut out, |t| {
                RefusedTopic::Partitions(
                    CreatePartitionsTopicResult::default()
                        .with_name(t.name)
                        .with_error_code(THROTTLING_QUOTA_EXCEEDED)
                        .with_error_message(message()),
                )
            }),
            MutationBody::Delete(r) if self.version < 6 => {
                take_out(&mut r.topic_names, refused_at, &mut out, |n| {
                    RefusedTopic::Delete(
                        DeletableTopicResult::default()
                            .with_name(Some(n))
                            .with_error_code(THROTTLING_QUOTA_EXCEEDED)
                            .with_error_message(message()),
                    )
                })
            }
            MutationBody::Delete(r) => take_out(&mut r.topics, refused_at, &mut out, |t| {
                RefusedTopic::Delete(
                    DeletableTopicResult::default()
                        .with_name(t.name)
                        .with_topic_id(t.topic_id)
                        .with_error_code(THROTTLING_QUOTA_EXCEEDED)
                        .with_error_message(message()),
                )
            }),
        };
        if out.entries.len() == total {
            return (None, out);
        }
        let mut b = BytesMut::new();
        b.extend_from_slice(&[0; 4]);
        let encoded = self
            .header
            .encode(&mut b, self.key.request_header_version(self.version))
            .is_ok()
            && match &self.body {
                MutationBody::Create(r) => r.encode(&mut b, self.version).is_ok(),
                MutationBody::Partitions(r) => r.encode(&mut b, self.version).is_ok(),
                MutationBody::Delete(r) => r.encode(&mut b, self.version).is_ok(),
            };
        if !encoded {
            return (None, out);
        }
        let size = (b.len() - 4) as u32;
        b[..4].copy_from_slice(&size.to_be_bytes());
        (Some(b.freeze()), out)
    }
}

/// A mutation request with topics refused.
#[derive(Debug)]
pub(crate) enum Split {
    /// Forward this request (size prefix included); its answer takes the refused topics back.
    Partly(Bytes, Refused),
    /// Every topic is refused: the proxy's answer (size prefix included), not forwarded.
    All(Bytes),
}

/// Moves the entries of `items` at the places `refused_at` picks into `out`, each made into its
/// refusal by `refuse`; the others stay, in order. Returns how many there were.
fn take_out<T>(
    items: &mut Vec<T>,
    refused_at: impl Fn(usize) -> bool,
    out: &mut Refused,
    refuse: impl Fn(T) -> RefusedTopic,
) -> usize {
    let total = items.len();
    for (i, item) in std::mem::take(items).into_iter().enumerate() {
        if refused_at(i) {
            out.entries.push((i, refuse(item)));
        } else {
            items.push(item);
        }
    }
    total
}

/// A mutation answer, decoded to take the proxy's refusals.
enum Answer {
    Create(CreateTopicsResponse),
    Partitions(CreatePartitionsResponse),
    Delete(DeleteTopicsResponse),
}

impl Answer {
    /// Puts each refused topic back at its place in request order, and the throttle, if longer.
    fn add(&mut self, refused: Refused, ms: i32) {
        fn put<T>(list: &mut Vec<T>, at: usize, item: T) {
            list.insert(at.min(list.len()), item);
        }
        for (at, topic) in refused.entries {
            match (&mut *self, topic) {
                (Answer::Create(r), RefusedTopic::Create(t)) => put(&mut r.topics, at, t),
                (Answer::Partitions(r), RefusedTopic::Partitions(t)) => put(&mut r.results, at, t),
                (Answer::Delete(r), RefusedTopic::Delete(t)) => put(&mut r.responses, at, t),
                _ => {}
            }
        }
        match self {
            Answer::Create(r) => r.throttle_time_ms = r.throttle_time_ms.max(ms),
            Answer::Partitions(r) => r.throttle_time_ms = r.throttle_time_ms.max(ms),
            Answer::Delete(r) => r.throttle_time_ms = r.throttle_time_ms.max(ms),
        }
    }

    fn frame(&self, key: ApiKey, version: i16, correlation_id: i32) -> Option<Bytes> {
        match self {
            Answer::Create(r) => frame_of(key, version, correlation_id, r),
            Answer::Partitions(r) => frame_of(key, version, correlation_id, r),
            Answer::Delete(r) => frame_of(key, version, correlation_id, r),
        }
    }
}

/// The broker's answer `frame` (bytes after the size prefix) to a mutation request some of whose
/// topics the proxy refused, with the refusals put back in request order and the throttle raised
/// to `throttle_ms`; `None` if the answer does not decode (it is then forwarded as it is).
pub(crate) fn merge_refused(
    api_key: i16,
    version: i16,
    frame: &Bytes,
    refused: Refused,
    throttle_ms: u64,
) -> Option<Bytes> {
    let key = ApiKey::try_from(api_key).ok()?;
    // The broker's bytes are walked before kafka-protocol reserves any count of theirs.
    walk::response(key, version, frame).ok()?;
    let mut b = frame.clone();
    let header = ResponseHeader::decode(&mut b, key.response_header_version(version)).ok()?;
    let mut answer = match key {
        ApiKey::CreateTopics => Answer::Create(CreateTopicsResponse::decode(&mut b, version).ok()?),
        ApiKey::CreatePartitions => {
            Answer::Partitions(CreatePartitionsResponse::decode(&mut b, version).ok()?)
        }
        ApiKey::DeleteTopics => Answer::Delete(DeleteTopicsResponse::decode(&mut b, version).ok()?),
        _ => return None,
    };
    answer.add(refused, clamp_ms(throttle_ms));
    answer.frame(key, version, header.correlation_id)
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
    if frame.len() < 4 {
        return None;
    }
    let mut r = Reader::at(frame, 4);
    if key.response_header_version(version) >= 1 {
        r.tagged_fields("response header tagged fields").ok()?;
    }
    let at = r.position();
    (at + 4 <= frame.len()).then_some(at)
}

/// The `throttle_time_ms` of a response whose body begins with it (see [`raise_throttle`]).
pub(crate) fn leading_throttle(frame: &[u8], api_key: i16, version: i16) -> Option<i32> {
    i32_at(frame, leading_throttle_at(frame, api_key, version)?)
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
    walk::response(key, version, frame).map_err(drop)?;
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
    kquota_wire::encode_response(key, version, correlation_id, message).ok()
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
    use kafka_protocol::messages::create_topics_request::CreatableTopic;
    use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
    use kafka_protocol::messages::{BrokerId, FetchRequest as KFetch, TopicName};
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

    fn counted(key: ApiKey, version: i16, frame: &Bytes) -> Option<(Vec<u32>, bool)> {
        let m = MutationRequest::decode(key as i16, version, frame)?;
        Some((m.counts(&Known), m.strict()))
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
            let got = counted(ApiKey::CreateTopics, version, &frame);
            assert_eq!(got, Some((vec![3, 1], strict)));
        }
        let validate = create.clone().with_validate_only(true);
        let (frame, _) = request(ApiKey::CreateTopics, 7, &validate);
        assert!(counted(ApiKey::CreateTopics, 7, &frame).is_none());

        let grow = CreatePartitionsRequest::default().with_topics(vec![
            CreatePartitionsTopic::default()
                .with_name(topic("known"))
                .with_count(10),
            CreatePartitionsTopic::default()
                .with_name(topic("new"))
                .with_count(2),
        ]);
        let (frame, _) = request(ApiKey::CreatePartitions, 3, &grow);
        let got = counted(ApiKey::CreatePartitions, 3, &frame);
        assert_eq!(got, Some((vec![4, 2], true)));

        let delete = DeleteTopicsRequest::default().with_topics(vec![
            DeleteTopicState::default().with_name(Some(topic("known"))),
            DeleteTopicState::default().with_topic_id(uuid::Uuid::from_bytes([7; 16])),
            DeleteTopicState::default().with_name(Some(topic("other"))),
        ]);
        let (frame, _) = request(ApiKey::DeleteTopics, 6, &delete);
        let got = counted(ApiKey::DeleteTopics, 6, &frame);
        assert_eq!(got, Some((vec![6, 4, 1], true)));
        let old = DeleteTopicsRequest::default().with_topic_names(vec![topic("known")]);
        let (frame, _) = request(ApiKey::DeleteTopics, 4, &old);
        assert_eq!(
            counted(ApiKey::DeleteTopics, 4, &frame),
            Some((vec![6], false))
        );
    }

    /// A request of every version of the three APIs, with every array holding one element.
    fn every_mutation_request() -> Vec<(ApiKey, i16, Bytes)> {
        use kafka_protocol::messages::create_partitions_request::CreatePartitionsAssignment;
        use kafka_protocol::messages::create_topics_request::{
            CreatableReplicaAssignment, CreatableTopicConfig,
        };
        let create = CreateTopicsRequest::default().with_topics(vec![CreatableTopic::default()
            .with_name(topic("a"))
            .with_num_partitions(-1)
            .with_assignments(vec![CreatableReplicaAssignment::default()
                .with_partition_index(0)
                .with_broker_ids(vec![BrokerId(1)])])
            .with_configs(vec![CreatableTopicConfig::default()
                .with_name(StrBytes::from_static_str("retention.ms"))
                .with_value(Some(StrBytes::from_static_str("1")))])]);
        let grow =
            CreatePartitionsRequest::default().with_topics(vec![CreatePartitionsTopic::default()
                .with_name(topic("a"))
                .with_count(2)
                .with_assignments(Some(vec![
                    CreatePartitionsAssignment::default().with_broker_ids(vec![BrokerId(1)])
                ]))]);
        let mut out = Vec::new();
        for v in 2..=7 {
            out.push((
                ApiKey::CreateTopics,
                v,
                request(ApiKey::CreateTopics, v, &create).0,
            ));
        }
        for v in 0..=3 {
            let r = request(ApiKey::CreatePartitions, v, &grow).0;
            out.push((ApiKey::CreatePartitions, v, r));
        }
        for v in 1..=6 {
            let delete = if v >= 6 {
                DeleteTopicsRequest::default()
                    .with_topics(vec![DeleteTopicState::default().with_name(Some(topic("a")))])
            } else {
                DeleteTopicsRequest::default().with_topic_names(vec![topic("a")])
            };
            out.push((
                ApiKey::DeleteTopics,
                v,
                request(ApiKey::DeleteTopics, v, &delete).0,
            ));
        }
        out
    }

    #[test]
    fn a_count_larger_than_the_frame_is_refused_before_the_decoder_reserves_it() {
        // The 23 bytes that aborted the proxy: CreateTopics v4, client id "c", 2^31 - 1 topics.
        let mut frame = vec![0, 19, 0, 4, 0, 0, 0, 1, 0, 1, b'c'];
        frame.extend_from_slice(&i32::MAX.to_be_bytes());
        frame.extend_from_slice(&[0; 4]);
        assert!(MutationRequest::decode(19, 4, &Bytes::from(frame)).is_none());
        for (key, version, frame) in every_mutation_request() {
            assert!(
                MutationRequest::decode(key as i16, version, &frame).is_some(),
                "{key:?} v{version} as kafka-protocol encodes it"
            );
            let flexible = key.request_header_version(version) >= 2;
            // Every place in the frame made into the largest count its encoding can carry: the
            // decode must give up (or read a field that is no count), never reserve it.
            let huge: &[u8] = if flexible {
                &[0xff, 0xff, 0xff, 0xff, 0x07]
            } else {
                &[0x7f, 0xff, 0xff, 0xff]
            };
            let mut refused = 0;
            for at in 8..frame.len().saturating_sub(huge.len()) {
                let mut bad = frame.to_vec();
                bad[at..at + huge.len()].copy_from_slice(huge);
                if MutationRequest::decode(key as i16, version, &Bytes::from(bad)).is_none() {
                    refused += 1;
                }
            }
            assert!(refused > 0, "{key:?} v{version}");
        }
    }

    #[test]
    fn refused_topics_leave_the_request_and_come_back_in_the_answer() {
        let create = CreateTopicsRequest::default().with_topics(vec![
            CreatableTopic::default().with_name(topic("a")),
            CreatableTopic::default().with_name(topic("b")),
            CreatableTopic::default().with_name(topic("c")),
        ]);
        let (frame, _) = request(ApiKey::CreateTopics, 7, &create);
        let m = MutationRequest::decode(ApiKey::CreateTopics as i16, 7, &frame).unwrap();
        let Split::Partly(forward, refused) = m.without(&[1, 2], 2_000) else {
            panic!("a is kept");
        };
        // The request forwarded names only `a`, with the same header.
        let mut b = forward.slice(4..);
        let h = RequestHeader::decode(&mut b, 2).unwrap();
        assert_eq!(h.correlation_id, 7);
        let r = CreateTopicsRequest::decode(&mut b, 7).unwrap();
        assert_eq!(r.topics.len(), 1);
        assert_eq!(r.topics[0].name.0.as_str(), "a");
        // The broker's answer for `a` gets `b` and `c` back, in request order, refused.
        let answer = CreateTopicsResponse::default()
            .with_throttle_time_ms(5)
            .with_topics(vec![CreatableTopicResult::default().with_name(topic("a"))]);
        let answer = response(ApiKey::CreateTopics, 7, &answer);
        let merged = merge_refused(19, 7, &answer, refused, 2_000).unwrap();
        let mut b = merged.slice(4..);
        ResponseHeader::decode(&mut b, 1).unwrap();
        let r = CreateTopicsResponse::decode(&mut b, 7).unwrap();
        assert_eq!(r.throttle_time_ms, 2_000);
        let got: Vec<_> = r
            .topics
            .iter()
            .map(|t| (t.name.0.as_str(), t.error_code))
            .collect();
        assert_eq!(
            got,
            vec![
                ("a", 0),
                ("b", THROTTLING_QUOTA_EXCEEDED),
                ("c", THROTTLING_QUOTA_EXCEEDED)
            ]
        );
    }

    #[test]
    fn every_topic_refused_is_answered_by_the_proxy() {
        let delete = DeleteTopicsRequest::default()
            .with_topics(vec![DeleteTopicState::default().with_name(Some(topic("x")))]);
        let (frame, _) = request(ApiKey::DeleteTopics, 6, &delete);
        let m = MutationRequest::decode(ApiKey::DeleteTopics as i16, 6, &frame).unwrap();
        let Split::All(out) = m.without(&[0], 10) else {
            panic!("every topic is refused");
        };
        let mut b = out.slice(4..);
        assert_eq!(ResponseHeader::decode(&mut b, 1).unwrap().correlation_id, 7);
        let r = DeleteTopicsResponse::decode(&mut b, 6).unwrap();
        assert_eq!(r.throttle_time_ms, 10);
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
