//! Metadata (3) and DescribeCluster (60): this node is the cluster's only broker and its controller,
//! and it hosts no topics. Enough for admin clients to bootstrap.

use std::collections::HashSet;

use bytes::BytesMut;
use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::metadata_response::{MetadataResponseBroker, MetadataResponseTopic};
use kafka_protocol::messages::{
    BrokerId, DescribeClusterRequest, DescribeClusterResponse, MetadataRequest, MetadataResponse,
    TopicName,
};
use kafka_protocol::protocol::StrBytes;

use crate::frame::{Header, ReadResult, Reader};
use crate::handler::{decode, respond, CloseReason, Handler};

const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
const INVALID_REQUEST: i16 = 42;
const UNKNOWN_TOPIC_ID: i16 = 100;
const MISMATCHED_ENDPOINT_TYPE: i16 = 114;
const UNSUPPORTED_ENDPOINT_TYPE: i16 = 115;

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

fn walk_metadata(r: &mut Reader<'_>, version: i16) -> ReadResult<()> {
    let flexible = version >= 9;
    r.each(flexible, version >= 1, "topics", |r| {
        if version >= 10 {
            r.uuid("topic_id")?;
        }
        r.string(flexible, version >= 10, "name")?;
        if flexible {
            r.tagged_fields("MetadataRequestTopic")?;
        }
        Ok(())
    })?;
    if version >= 4 {
        r.bool("allow_auto_topic_creation")?;
    }
    if (8..=10).contains(&version) {
        r.bool("include_cluster_authorized_operations")?;
    }
    if version >= 8 {
        r.bool("include_topic_authorized_operations")?;
    }
    if flexible {
        r.tagged_fields("MetadataRequest")?;
    }
    Ok(())
}

fn topic(error_code: i16, name: Option<StrBytes>, version: i16) -> MetadataResponseTopic {
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
fn metadata_error(request: &MetadataRequest, error_code: i16) -> MetadataResponse {
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

pub(super) fn metadata(h: &Handler, header: Header, body: &[u8]) -> Result<BytesMut, CloseReason> {
    let request: MetadataRequest = decode(header, body, walk_metadata)?;
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
        return respond(header, &metadata_error(&request, INVALID_REQUEST));
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
                let mut out = topic(UNKNOWN_TOPIC_ID, None, version);
                out.topic_id = id;
                response.topics.push(out);
            }
        } else {
            if requested.iter().any(|t| t.name.is_none()) {
                return respond(header, &metadata_error(&request, INVALID_REQUEST));
            }
            let mut seen: HashSet<&str> = HashSet::new();
            let names = requested
                .iter()
                .filter_map(|t| t.name.as_ref())
                .filter(|name| seen.insert(name.0.as_str()));
            for name in names {
                let mut out = topic(UNKNOWN_TOPIC_OR_PARTITION, Some(name.0.clone()), version);
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
