//! Metadata (3) and DescribeCluster (60): this node is the cluster's only broker and its controller,
//! and it hosts no topics. Enough for admin clients to bootstrap.

use kquota::ErrorCode;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::metadata_response::MetadataResponseBroker;
use kafka_protocol::messages::{
    BrokerId, DescribeClusterRequest, DescribeClusterResponse, MetadataResponse,
};
use kafka_protocol::protocol::StrBytes;

use crate::body::{decode, read_body, respond};
use crate::frame::{put, Header, ReadResult, Reader};
use crate::handler::Handler;
use crate::outcome::{CloseReason, Outcome};
use crate::stream::{Pieces, Reply, ResponseStream};

const UNKNOWN_TOPIC_OR_PARTITION: i16 = ErrorCode::UNKNOWN_TOPIC_OR_PARTITION.0;
const INVALID_REQUEST: i16 = ErrorCode::INVALID_REQUEST.0;
const UNKNOWN_TOPIC_ID: i16 = ErrorCode::UNKNOWN_TOPIC_ID.0;
const MISMATCHED_ENDPOINT_TYPE: i16 = ErrorCode::MISMATCHED_ENDPOINT_TYPE.0;
const UNSUPPORTED_ENDPOINT_TYPE: i16 = ErrorCode::UNSUPPORTED_ENDPOINT_TYPE.0;

/// Every cluster operation (CREATE, ALTER, DESCRIBE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS,
/// IDEMPOTENT_WRITE) as a bit field: what Kafka reports without an authorizer.
const CLUSTER_OPERATIONS: i32 = 1 << 5 | 1 << 7 | 1 << 8 | 1 << 9 | 1 << 10 | 1 << 11 | 1 << 12;
/// Every topic operation (READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, DESCRIBE_CONFIGS,
/// ALTER_CONFIGS) as a bit field.
const TOPIC_OPERATIONS: i32 =
    1 << 3 | 1 << 4 | 1 << 5 | 1 << 6 | 1 << 7 | 1 << 8 | 1 << 10 | 1 << 11;
/// The schema default of the authorized-operations fields: "not requested".
const OPERATIONS_NOT_REQUESTED: i32 = i32::MIN;

/// Kafka's internal topic names (`Topic.isInternal`).
const INTERNAL_TOPICS: [&str; 3] = [
    "__consumer_offsets",
    "__transaction_state",
    "__share_group_state",
];

/// What a Metadata request asks for, from a walk of its body (every name checked as UTF-8, as
/// decoding it would); nothing of the topics is kept but where they start.
#[derive(Default)]
struct MetadataShape {
    /// The requested topics' count; `None` for a null list (all topics).
    topics: Option<usize>,
    /// Where the first topic starts in the body.
    topics_at: usize,
    /// Whether a topic has a null name.
    null_name: bool,
    /// Whether a topic has a non-zero id.
    topic_id: bool,
    include_cluster_authorized_operations: bool,
    include_topic_authorized_operations: bool,
}

/// The zero topic id: none given.
const NO_TOPIC_ID: [u8; 16] = [0; 16];

/// One requested topic: its id (16 bytes from v10, empty before) and its name (`None`: null).
fn read_topic<'a>(r: &mut Reader<'a>, version: i16) -> ReadResult<(&'a [u8], Option<&'a [u8]>)> {
    let flexible = version >= 9;
    let id = if version >= 10 {
        r.take(16, "topic_id")?
    } else {
        &[]
    };
    let name = r.utf8(flexible, version >= 10, "name")?.map(str::as_bytes);
    if flexible {
        r.tagged_fields("MetadataRequestTopic")?;
    }
    Ok((id, name))
}

/// Whether a topic id is one (not empty, not zero).
fn has_id(id: &[u8]) -> bool {
    !id.is_empty() && id != NO_TOPIC_ID
}

fn walk_metadata(r: &mut Reader<'_>, version: i16) -> ReadResult<MetadataShape> {
    let flexible = version >= 9;
    let mut shape = MetadataShape {
        topics: r.array_len(flexible, version >= 1, "topics")?,
        topics_at: r.position(),
        ..MetadataShape::default()
    };
    for _ in 0..shape.topics.unwrap_or(0) {
        let (id, name) = read_topic(r, version)?;
        shape.topic_id |= has_id(id);
        shape.null_name |= name.is_none();
    }
    if version >= 4 {
        r.bool("allow_auto_topic_creation")?;
    }
    if (8..=10).contains(&version) {
        shape.include_cluster_authorized_operations =
            r.bool("include_cluster_authorized_operations")?;
    }
    if version >= 8 {
        shape.include_topic_authorized_operations =
            r.bool("include_topic_authorized_operations")?;
    }
    if flexible {
        r.tagged_fields("MetadataRequest")?;
    }
    Ok(shape)
}

/// Which topics a Metadata answer lists, and how.
#[derive(Clone, Copy, PartialEq, Eq)]
enum TopicAnswer {
    /// Kafka's `MetadataRequest.getErrorResponse`: every requested topic as sent (a null name as
    /// the empty one), with `INVALID_REQUEST`.
    Invalid,
    /// Each distinct non-zero id, with `UNKNOWN_TOPIC_ID` and a null name.
    UnknownIds,
    /// Each distinct name, with `UNKNOWN_TOPIC_OR_PARTITION`.
    UnknownNames,
}

impl TopicAnswer {
    /// What makes two topics the same for this answer (`None`: the topic is not answered).
    fn key<'a>(self, id: &'a [u8], name: Option<&'a [u8]>) -> Option<&'a [u8]> {
        match self {
            TopicAnswer::Invalid => None,
            TopicAnswer::UnknownIds => has_id(id).then_some(id),
            TopicAnswer::UnknownNames => name,
        }
    }
}

/// The topics of a Metadata answer, one at a time, read again from the request's bytes (walked
/// before, so reading them cannot fail). Only the first occurrence of an id or a name is answered:
/// `first` has a bit set at the position in the body where each first occurrence starts.
struct TopicAnswers {
    body: Bytes,
    pos: usize,
    left: usize,
    version: i16,
    answer: TopicAnswer,
    first: Arc<Vec<u64>>,
    topic_operations: i32,
}

impl TopicAnswers {
    fn is_first(&self, at: usize) -> bool {
        self.first
            .get(at / 64)
            .is_some_and(|word| word & (1 << (at % 64)) != 0)
    }
}

/// Writes one `MetadataResponseTopic` with no partitions.
fn put_topic(
    out: &mut Vec<u8>,
    version: i16,
    error_code: i16,
    name: Option<&[u8]>,
    id: &[u8],
    topic_operations: i32,
) {
    let flexible = version >= 9;
    out.extend_from_slice(&error_code.to_be_bytes());
    put::string(out, flexible, name);
    if version >= 10 {
        out.extend_from_slice(if id.len() == 16 { id } else { &NO_TOPIC_ID });
    }
    if version >= 1 {
        // Kafka's getErrorResponse leaves IsInternal false.
        let internal = error_code != INVALID_REQUEST
            && name.is_some_and(|n| INTERNAL_TOPICS.iter().any(|t| t.as_bytes() == n));
        out.push(u8::from(internal));
    }
    put::array_len(out, flexible, 0);
    if version >= 8 {
        out.extend_from_slice(&topic_operations.to_be_bytes());
    }
    if flexible {
        out.push(0);
    }
}

impl Pieces for TopicAnswers {
    fn next_piece(&mut self, out: &mut Vec<u8>) -> bool {
        while self.left > 0 {
            let at = self.pos;
            let mut r = Reader::at(&self.body, at);
            let Ok((id, name)) = read_topic(&mut r, self.version) else {
                // Unreachable: the request was walked whole before.
                self.left = 0;
                return false;
            };
            self.pos = r.position();
            self.left -= 1;
            let (code, name, operations) = match self.answer {
                TopicAnswer::Invalid => (
                    INVALID_REQUEST,
                    Some(name.unwrap_or_default()),
                    OPERATIONS_NOT_REQUESTED,
                ),
                TopicAnswer::UnknownIds if self.is_first(at) => {
                    (UNKNOWN_TOPIC_ID, None, OPERATIONS_NOT_REQUESTED)
                }
                TopicAnswer::UnknownNames if self.is_first(at) => {
                    (UNKNOWN_TOPIC_OR_PARTITION, name, self.topic_operations)
                }
                _ => continue,
            };
            put_topic(out, self.version, code, name, id, operations);
            return true;
        }
        false
    }
}

/// Marks where the first occurrence of each distinct key starts (a bit per byte of the body):
/// the answered topics' positions are sorted by key, then position. That costs four bytes per
/// topic while it runs, and nothing of the topics is copied.
fn first_occurrences(
    body: &[u8],
    shape: &MetadataShape,
    version: i16,
    answer: TopicAnswer,
) -> Vec<u64> {
    let key_at = |at: u32| {
        let mut r = Reader::at(body, at as usize);
        read_topic(&mut r, version)
            .ok()
            .and_then(|(id, name)| answer.key(id, name))
    };
    let mut starts: Vec<u32> = Vec::new();
    let mut r = Reader::at(body, shape.topics_at);
    for _ in 0..shape.topics.unwrap_or(0) {
        // Frames are shorter than 2^31 bytes.
        let at = r.position() as u32;
        match read_topic(&mut r, version) {
            Ok((id, name)) => {
                if answer.key(id, name).is_some() {
                    starts.push(at);
                }
            }
            Err(_) => break,
        }
    }
    starts.sort_unstable_by(|a, b| key_at(*a).cmp(&key_at(*b)).then(a.cmp(b)));
    let mut first = vec![0u64; body.len() / 64 + 1];
    let mut previous: Option<&[u8]> = None;
    for at in starts {
        let key = key_at(at);
        if previous != key {
            first[at as usize / 64] |= 1 << (at % 64);
            previous = key;
        }
    }
    first
}

/// Metadata: the answer is made as it is written, from the request's bytes; the request's topics
/// are never decoded into memory.
pub(super) fn metadata(h: &Handler, header: Header, body: Bytes) -> Result<Reply, CloseReason> {
    let shape = read_body(header, &body, walk_metadata)?;
    let version = header.api_version;
    let all_topics = match shape.topics {
        None => true,
        Some(topics) => topics == 0 && version == 0,
    };
    // Topic ids and null names are not supported in requests before version 12 (Kafka throws
    // INVALID_REQUEST); at 12, ids win over names, and null names without ids are refused.
    let answer = if all_topics {
        None
    } else if shape.topic_id && version >= 12 {
        Some(TopicAnswer::UnknownIds)
    } else if shape.topic_id || shape.null_name {
        Some(TopicAnswer::Invalid)
    } else {
        Some(TopicAnswer::UnknownNames)
    };
    let mut response = MetadataResponse::default();
    if answer != Some(TopicAnswer::Invalid) {
        let mut broker = MetadataResponseBroker::default();
        broker.node_id = BrokerId(h.info.node_id);
        broker.host = StrBytes::from_string(h.info.host.clone());
        broker.port = h.info.port;
        response.brokers = vec![broker];
        if version >= 2 {
            response.cluster_id = Some(StrBytes::from_string(h.info.cluster_id.clone()));
        }
        response.controller_id = BrokerId(h.info.node_id);
        if (8..=10).contains(&version) && shape.include_cluster_authorized_operations {
            response.cluster_authorized_operations = CLUSTER_OPERATIONS;
        }
    }
    let whole = respond(header, &response)?;
    let Some(answer) = answer else {
        return Ok(Reply::Outcome(Outcome::Respond(whole)));
    };
    // The answer without topics, cut where its empty topic array is: the topics go between.
    let flexible = version >= 9;
    let after = if (8..=10).contains(&version) { 4 } else { 0 } + usize::from(flexible);
    let empty_array = if flexible { 1 } else { 4 };
    let cut = whole.len() - after - empty_array;
    let mut head = whole[..cut].to_vec();
    let tail = whole[whole.len() - after..].to_vec();
    let (first, count) = match answer {
        TopicAnswer::Invalid => (Vec::new(), shape.topics.unwrap_or(0)),
        _ => {
            let first = first_occurrences(&body, &shape, version, answer);
            let count = first.iter().map(|w| w.count_ones() as usize).sum();
            (first, count)
        }
    };
    put::array_len(&mut head, flexible, count);
    let first = Arc::new(first);
    let topic_operations = if version >= 8 && shape.include_topic_authorized_operations {
        TOPIC_OPERATIONS
    } else {
        OPERATIONS_NOT_REQUESTED
    };
    let pieces = || {
        Box::new(TopicAnswers {
            body: body.clone(),
            pos: shape.topics_at,
            left: shape.topics.unwrap_or(0),
            version,
            answer,
            first: Arc::clone(&first),
            topic_operations,
        })
    };
    Ok(Reply::Stream(ResponseStream::new(
        head,
        pieces(),
        pieces(),
        tail,
    )))
}

fn walk_describe_cluster(r: &mut Reader<'_>, version: i16) -> ReadResult<()> {
    r.bool("include_cluster_authorized_operations")?;
    if version >= 1 {
        r.i8("endpoint_type")?;
    }
    r.tagged_fields("DescribeClusterRequest")
}

pub(super) fn describe_cluster(
    h: &Handler,
    header: Header,
    body: &[u8],
) -> Result<BytesMut, CloseReason> {
    let request: DescribeClusterRequest = decode(header, body, walk_describe_cluster)?;
    let mut response = DescribeClusterResponse::default();
    // This node answers as a broker endpoint (EndpointType 1), as a Kafka broker does.
    let v0 = header.api_version == 0;
    match request.endpoint_type {
        1 => {}
        2 => {
            response.error_code = if v0 {
                INVALID_REQUEST
            } else {
                MISMATCHED_ENDPOINT_TYPE
            };
            response.error_message = Some(StrBytes::from_static_str(
                "The request was sent to an endpoint of type BROKER, but we wanted an endpoint of \
                 type CONTROLLER",
            ));
            return respond(header, &response);
        }
        other => {
            response.error_code = if v0 {
                INVALID_REQUEST
            } else {
                UNSUPPORTED_ENDPOINT_TYPE
            };
            response.error_message = Some(StrBytes::from_string(format!(
                "Unsupported endpoint type {other}"
            )));
            return respond(header, &response);
        }
    }
    let mut broker = DescribeClusterBroker::default();
    broker.broker_id = BrokerId(h.info.node_id);
    broker.host = StrBytes::from_string(h.info.host.clone());
    broker.port = h.info.port;
    response.brokers = vec![broker];
    response.cluster_id = StrBytes::from_string(h.info.cluster_id.clone());
    response.controller_id = BrokerId(h.info.node_id);
    response.cluster_authorized_operations = if request.include_cluster_authorized_operations {
        CLUSTER_OPERATIONS
    } else {
        OPERATIONS_NOT_REQUESTED
    };
    respond(header, &response)
}

#[cfg(test)]
mod tests {
    //! The streamed Metadata answer against the one built with `kafka-protocol` before, byte for
    //! byte, at every version.
    use std::collections::HashSet;
    use std::sync::Arc;

    use kafka_protocol::messages::metadata_response::MetadataResponseTopic;
    use kafka_protocol::messages::{MetadataRequest, TopicName};

    use super::*;
    use crate::ServerInfo;

    fn old_topic(error_code: i16, name: Option<StrBytes>, version: i16) -> MetadataResponseTopic {
        let mut t = MetadataResponseTopic::default();
        t.error_code = error_code;
        if version >= 1 {
            t.is_internal = name
                .as_deref()
                .is_some_and(|n| INTERNAL_TOPICS.contains(&n));
        }
        t.name = name.map(TopicName);
        t
    }

    /// Kafka's `MetadataRequest.getErrorResponse`: every requested topic carries the error, and nothing
    /// else is filled in.
    fn old_metadata_error(request: &MetadataRequest, error_code: i16) -> MetadataResponse {
        let mut response = MetadataResponse::default();
        for t in request.topics.iter().flatten() {
            let mut out = MetadataResponseTopic::default();
            out.error_code = error_code;
            out.name = Some(t.name.clone().unwrap_or_default());
            out.topic_id = t.topic_id;
            response.topics.push(out);
        }
        response
    }

    fn old_metadata(h: &Handler, header: Header, body: &[u8]) -> Result<BytesMut, CloseReason> {
        let request: MetadataRequest = decode(header, body, |r, v| walk_metadata(r, v).map(drop))?;
        let version = header.api_version;
        let all_topics = match &request.topics {
            None => true,
            Some(topics) => topics.is_empty() && version == 0,
        };
        let requested = request.topics.as_deref().unwrap_or_default();
        // Topic ids are not supported in requests before version 12 (Kafka throws INVALID_REQUEST).
        if !all_topics
            && version < 12
            && requested
                .iter()
                .any(|t| t.name.is_none() || !t.topic_id.is_nil())
        {
            return respond(header, &old_metadata_error(&request, INVALID_REQUEST));
        }
        let mut response = MetadataResponse::default();
        let mut broker = MetadataResponseBroker::default();
        broker.node_id = BrokerId(h.info.node_id);
        broker.host = StrBytes::from_string(h.info.host.clone());
        broker.port = h.info.port;
        response.brokers = vec![broker];
        if version >= 2 {
            response.cluster_id = Some(StrBytes::from_string(h.info.cluster_id.clone()));
        }
        response.controller_id = BrokerId(h.info.node_id);
        if !all_topics {
            let by_id = requested.iter().any(|t| !t.topic_id.is_nil());
            if by_id {
                // No topic id is known here.
                let mut seen = HashSet::new();
                let ids = requested
                    .iter()
                    .map(|t| t.topic_id)
                    .filter(|id| !id.is_nil() && seen.insert(*id));
                for id in ids {
                    let mut out = old_topic(UNKNOWN_TOPIC_ID, None, version);
                    out.topic_id = id;
                    response.topics.push(out);
                }
            } else {
                if requested.iter().any(|t| t.name.is_none()) {
                    return respond(header, &old_metadata_error(&request, INVALID_REQUEST));
                }
                let mut seen: HashSet<&str> = HashSet::new();
                let names = requested
                    .iter()
                    .filter_map(|t| t.name.as_ref())
                    .filter(|name| seen.insert(name.0.as_str()));
                for name in names {
                    let mut out =
                        old_topic(UNKNOWN_TOPIC_OR_PARTITION, Some(name.0.clone()), version);
                    if version >= 8 && request.include_topic_authorized_operations {
                        out.topic_authorized_operations = TOPIC_OPERATIONS;
                    }
                    response.topics.push(out);
                }
            }
        }
        if (8..=10).contains(&version) && request.include_cluster_authorized_operations {
            response.cluster_authorized_operations = CLUSTER_OPERATIONS;
        }
        respond(header, &response)
    }

    /// Requested topics: a byte its id repeats (0: none) and a name.
    type Topics<'a> = &'a [(u8, Option<&'a str>)];

    /// A Metadata request body; `None` topics is a null list.
    fn body(version: i16, topics: Option<Topics<'_>>, flags: bool) -> Vec<u8> {
        let flexible = version >= 9;
        let mut b = Vec::new();
        match topics {
            None if flexible => b.push(0),
            None => b.extend_from_slice(&(-1i32).to_be_bytes()),
            Some(topics) => {
                put::array_len(&mut b, flexible, topics.len());
                for (id, name) in topics {
                    if version >= 10 {
                        b.extend_from_slice(&[*id; 16]);
                    }
                    put::string(&mut b, flexible, name.map(str::as_bytes));
                    if flexible {
                        b.push(0);
                    }
                }
            }
        }
        if version >= 4 {
            b.push(u8::from(flags));
        }
        if (8..=10).contains(&version) {
            b.push(u8::from(flags));
        }
        if version >= 8 {
            b.push(u8::from(flags));
        }
        if flexible {
            b.push(0);
        }
        b
    }

    #[test]
    fn streamed_answers_are_kafka_protocols() {
        let h = Handler::new(
            Arc::new(kquota::Engine::new()),
            ServerInfo {
                node_id: 3,
                host: "h".into(),
                port: 9,
                cluster_id: "c".into(),
            },
        );
        let names: Topics<'_> = &[
            (0, Some("a")),
            (0, Some("__consumer_offsets")),
            (0, Some("a")),
            (0, Some("")),
            (0, Some("b")),
            (0, Some("")),
        ];
        let ids: Topics<'_> = &[(1, Some("a")), (0, Some("b")), (2, None), (1, None)];
        let null_name: Topics<'_> = &[(0, Some("a")), (0, None)];
        for version in 0..=12i16 {
            let mut cases: Vec<Option<Topics<'_>>> = vec![Some(&[]), Some(names)];
            if version >= 1 {
                cases.push(None);
            }
            if version >= 10 {
                cases.push(Some(ids));
                cases.push(Some(null_name));
            }
            for topics in cases {
                for flags in [false, true] {
                    let b = body(version, topics, flags);
                    let header = Header {
                        api_key: 3,
                        api_version: version,
                        correlation_id: 5,
                    };
                    let expected = old_metadata(&h, header, &b).unwrap();
                    let actual = match metadata(&h, header, Bytes::from(b.clone())).unwrap() {
                        Reply::Stream(s) => {
                            let len = s.len();
                            let bytes = s.into_bytes();
                            assert_eq!(bytes.len(), len);
                            bytes
                        }
                        Reply::Outcome(Outcome::Respond(bytes)) => bytes,
                        other => panic!("{other:?}"),
                    };
                    assert_eq!(actual, expected, "v{version} {topics:?} {flags}");
                }
            }
        }
    }
}
