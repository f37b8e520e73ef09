//! Bounded walks of every message the proxy hands to `kafka-protocol`.
//!
//! kafka-protocol's array decoders reserve `Vec` capacity from the count on the wire before they
//! read an element, so a frame announcing 2^31-1 elements aborts the process. Every request or
//! response the proxy decodes with it is first walked here with kquota-wire's bounded
//! [`Reader`], field by field as kafka-protocol 0.18's generated decoders read it: every array
//! count (nested ones, and those inside known tagged fields, too) is checked against the bytes
//! left, and every element is walked, so a frame whose walk succeeds holds every element its
//! counts announce. Only such a frame is decoded; a failed walk takes the path a failed decode
//! takes.
//!
//! A known tagged field is walked within its size and must fill it exactly: kafka-protocol reads
//! its value from the frame, not from its size, so a size that lied would put the decoder
//! somewhere the walk never was. A version kafka-protocol does not decode is refused, as it
//! refuses it. Bytes after the body are not the walk's business (the callers decide).

use kafka_protocol::messages::{
    ApiKey, ApiVersionsResponse, CreatePartitionsRequest, CreatePartitionsResponse,
    CreateTopicsRequest, CreateTopicsResponse, DeleteTopicsRequest, DeleteTopicsResponse,
    DescribeClusterResponse, FetchResponse, FindCoordinatorResponse, MetadataResponse,
    ProduceResponse,
};
use kafka_protocol::protocol::Message;
use kquota_wire::{CodecError, ReadResult, Reader};

/// Walks the response `frame` (its bytes after the size prefix: header, then body) to a request
/// of `key` at `version`.
pub(crate) fn response(key: ApiKey, version: i16, frame: &[u8]) -> ReadResult<()> {
    response_len(key, version, frame).map(drop)
}

/// [`response`], giving how many bytes of `frame` the header and body take.
pub(crate) fn response_len(key: ApiKey, version: i16, frame: &[u8]) -> ReadResult<usize> {
    let mut r = Reader::new(frame);
    header(&mut r, key, version)?;
    body(&mut r, key, version)?;
    Ok(r.position())
}

/// Walks the response header at the start of `frame`.
pub(crate) fn response_header(key: ApiKey, version: i16, frame: &[u8]) -> ReadResult<()> {
    header(&mut Reader::new(frame), key, version)
}

/// Walks a response body (the bytes after its header) at `version`.
pub(crate) fn response_body(key: ApiKey, version: i16, body_bytes: &[u8]) -> ReadResult<()> {
    body(&mut Reader::new(body_bytes), key, version)
}

fn header(r: &mut Reader<'_>, key: ApiKey, version: i16) -> ReadResult<()> {
    r.i32("correlation_id")?;
    if key.response_header_version(version) >= 1 {
        r.tagged_fields("response header tagged fields")?;
    }
    Ok(())
}

fn body(r: &mut Reader<'_>, key: ApiKey, version: i16) -> ReadResult<()> {
    match key {
        ApiKey::Metadata => metadata(r, supported::<MetadataResponse>(version)?),
        ApiKey::FindCoordinator => {
            find_coordinator(r, supported::<FindCoordinatorResponse>(version)?)
        }
        ApiKey::DescribeCluster => {
            describe_cluster(r, supported::<DescribeClusterResponse>(version)?)
        }
        ApiKey::Produce => produce(r, supported::<ProduceResponse>(version)?),
        ApiKey::Fetch => fetch(r, supported::<FetchResponse>(version)?),
        ApiKey::ApiVersions => api_versions(r, supported::<ApiVersionsResponse>(version)?),
        ApiKey::CreateTopics => create_topics(r, supported::<CreateTopicsResponse>(version)?),
        ApiKey::CreatePartitions => {
            create_partitions(r, supported::<CreatePartitionsResponse>(version)?)
        }
        ApiKey::DeleteTopics => delete_topics(r, supported::<DeleteTopicsResponse>(version)?),
        // No walk, no decode: a caller that would decode another API is refused.
        _ => Err(CodecError::Decoder(format!(
            "no bounded walk for {key:?} responses"
        ))),
    }
}

/// `version` if kafka-protocol decodes `M` at it, as its decoder refuses the others.
fn supported<M: Message>(version: i16) -> ReadResult<i16> {
    if (M::VERSIONS.min..=M::VERSIONS.max).contains(&version) {
        Ok(version)
    } else {
        Err(CodecError::Decoder(format!(
            "specified version not supported by this message type (v{version})"
        )))
    }
}

/// An unknown-only tagged-field section, in flexible versions.
fn tags(r: &mut Reader<'_>, flexible: bool, what: &'static str) -> ReadResult<()> {
    if flexible {
        r.tagged_fields(what)
    } else {
        Ok(())
    }
}

/// A tagged-field section with known tags: `known` walks the value of a tag it knows (given a
/// reader over exactly its bytes, which it must read to their end) and answers false for one it
/// does not (skipped, as kafka-protocol keeps it as bytes).
fn tagged<'a>(
    r: &mut Reader<'a>,
    what: &'static str,
    mut known: impl FnMut(u32, &mut Reader<'a>) -> ReadResult<bool>,
) -> ReadResult<()> {
    let count = r.uvarint(what)?;
    if count as usize > r.remaining() {
        return Err(CodecError::TooManyTaggedFields {
            field: what,
            count,
            left: r.remaining(),
        });
    }
    for _ in 0..count {
        let tag = r.uvarint(what)?;
        let size = r.uvarint(what)?;
        let mut value = Reader::new(r.take(size as usize, what)?);
        if known(tag, &mut value)? && value.remaining() != 0 {
            return Err(CodecError::TrailingBytes {
                count: value.remaining(),
            });
        }
    }
    Ok(())
}

/// A non-null array of `i32`s (broker ids).
fn int32s(r: &mut Reader<'_>, compact: bool, what: &'static str) -> ReadResult<()> {
    r.each(compact, false, what, |r| r.i32(what).map(drop))
        .map(drop)
}

/// Nullable bytes (`Reader::bytes` refuses a null).
fn nullable_bytes(r: &mut Reader<'_>, compact: bool, what: &'static str) -> ReadResult<()> {
    let mut peek = r.clone();
    let null = if compact {
        peek.uvarint(what)? == 0
    } else {
        peek.i32(what)? == -1
    };
    if null {
        *r = peek;
        Ok(())
    } else {
        r.bytes(compact, what).map(drop)
    }
}

fn uuid(r: &mut Reader<'_>, what: &'static str) -> ReadResult<()> {
    r.take(16, what).map(drop)
}

/// KIP-951's `node_endpoints` (Produce v10+, Fetch v16+), a tagged field's value.
fn node_endpoints(r: &mut Reader<'_>) -> ReadResult<()> {
    r.each(true, false, "node_endpoints", |r| {
        r.i32("node_id")?;
        r.string(true, false, "host")?;
        r.i32("port")?;
        r.string(true, true, "rack")?;
        r.tagged_fields("node endpoint tagged fields")
    })
    .map(drop)
}

fn metadata(r: &mut Reader<'_>, v: i16) -> ReadResult<()> {
    let c = v >= 9;
    if v >= 3 {
        r.i32("throttle_time_ms")?;
    }
    r.each(c, false, "brokers", |r| {
        r.i32("node_id")?;
        r.string(c, false, "host")?;
        r.i32("port")?;
        if v >= 1 {
            r.string(c, true, "rack")?;
        }
        tags(r, c, "broker tagged fields")
    })?;
    if v >= 2 {
        r.string(c, true, "cluster_id")?;
    }
    if v >= 1 {
        r.i32("controller_id")?;
    }
    r.each(c, false, "topics", |r| {
        r.i16("error_code")?;
        r.string(c, true, "name")?;
        if v >= 10 {
            uuid(r, "topic_id")?;
        }
        if v >= 1 {
            r.bool("is_internal")?;
        }
        r.each(c, false, "partitions", |r| {
            r.i16("error_code")?;
            r.i32("partition_index")?;
            r.i32("leader_id")?;
            if v >= 7 {
                r.i32("leader_epoch")?;
            }
            int32s(r, c, "replica_nodes")?;
            int32s(r, c, "isr_nodes")?;
            if v >= 5 {
                int32s(r, c, "offline_replicas")?;
            }
            tags(r, c, "partition tagged fields")
        })?;
        if v >= 8 {
            r.i32("topic_authorized_operations")?;
        }
        tags(r, c, "topic tagged fields")
    })?;
    if (8..=10).contains(&v) {
        r.i32("cluster_authorized_operations")?;
    }
    if v >= 13 {
        r.i16("error_code")?;
    }
    tags(r, c, "metadata tagged fields")
}

fn find_coordinator(r: &mut Reader<'_>, v: i16) -> ReadResult<()> {
    let c = v >= 3;
    if v >= 1 {
        r.i32("throttle_time_ms")?;
    }
    if v <= 3 {
        r.i16("error_code")?;
        if v >= 1 {
            r.string(c, true, "error_message")?;
        }
        r.i32("node_id")?;
        r.string(c, false, "host")?;
        r.i32("port")?;
    } else {
        r.each(true, false, "coordinators", |r| {
            r.string(true, false, "key")?;
            r.i32("node_id")?;
            r.string(true, false, "host")?;
            r.i32("port")?;
            r.i16("error_code")?;
            r.string(true, true, "error_message")?;
            r.tagged_fields("coordinator tagged fields")
        })?;
    }
    tags(r, c, "find coordinator tagged fields")
}

fn describe_cluster(r: &mut Reader<'_>, v: i16) -> ReadResult<()> {
    // Flexible from v0.
    r.i32("throttle_time_ms")?;
    r.i16("error_code")?;
    r.string(true, true, "error_message")?;
    if v >= 1 {
        r.i8("endpoint_type")?;
    }
    r.string(true, false, "cluster_id")?;
    r.i32("controller_id")?;
    r.each(true, false, "brokers", |r| {
        r.i32("broker_id")?;
        r.string(true, false, "host")?;
        r.i32("port")?;
        r.string(true, true, "rack")?;
        if v >= 2 {
            r.bool("is_fenced")?;
        }
        r.tagged_fields("broker tagged fields")
    })?;
    r.i32("cluster_authorized_operations")?;
    r.tagged_fields("describe cluster tagged fields")
}

fn produce(r: &mut Reader<'_>, v: i16) -> ReadResult<()> {
    let c = v >= 9;
    r.each(c, false, "responses", |r| {
        if v <= 12 {
            r.string(c, false, "name")?;
        } else {
            uuid(r, "topic_id")?;
        }
        r.each(c, false, "partition_responses", |r| {
            r.i32("index")?;
            r.i16("error_code")?;
            r.i64("base_offset")?;
            r.i64("log_append_time_ms")?;
            if v >= 5 {
                r.i64("log_start_offset")?;
            }
            if v >= 8 {
                r.each(c, false, "record_errors", |r| {
                    r.i32("batch_index")?;
                    r.string(c, true, "batch_index_error_message")?;
                    tags(r, c, "record error tagged fields")
                })?;
                r.string(c, true, "error_message")?;
            }
            if !c {
                return Ok(());
            }
            tagged(r, "partition tagged fields", |tag, r| match tag {
                // Before v10 kafka-protocol refuses tag 0 without reading it.
                0 if v >= 10 => {
                    r.i32("leader_id")?;
                    r.i32("leader_epoch")?;
                    r.tagged_fields("current leader tagged fields")?;
                    Ok(true)
                }
                _ => Ok(false),
            })
        })?;
        tags(r, c, "topic tagged fields")
    })?;
    r.i32("throttle_time_ms")?;
    if !c {
        return Ok(());
    }
    tagged(r, "produce tagged fields", |tag, r| match tag {
        0 if v >= 10 => node_endpoints(r).map(|()| true),
        _ => Ok(false),
    })
}

fn fetch(r: &mut Reader<'_>, v: i16) -> ReadResult<()> {
    let c = v >= 12;
    r.i32("throttle_time_ms")?;
    if v >= 7 {
        r.i16("error_code")?;
        r.i32("session_id")?;
    }
    r.each(c, false, "responses", |r| {
        if v <= 12 {
            r.string(c, false, "topic")?;
        } else {
            uuid(r, "topic_id")?;
        }
        r.each(c, false, "partitions", |r| {
            r.i32("partition_index")?;
            r.i16("error_code")?;
            r.i64("high_watermark")?;
            r.i64("last_stable_offset")?;
            if v >= 5 {
                r.i64("log_start_offset")?;
            }
            r.each(c, true, "aborted_transactions", |r| {
                r.i64("producer_id")?;
                r.i64("first_offset")?;
                tags(r, c, "aborted transaction tagged fields")
            })?;
            if v >= 11 {
                r.i32("preferred_read_replica")?;
            }
            nullable_bytes(r, c, "records")?;
            if !c {
                return Ok(());
            }
            tagged(r, "partition tagged fields", |tag, r| {
                match tag {
                    0 => {
                        // diverging_epoch
                        r.i32("epoch")?;
                        r.i64("end_offset")?;
                    }
                    1 => {
                        // current_leader
                        r.i32("leader_id")?;
                        r.i32("leader_epoch")?;
                    }
                    2 => {
                        // snapshot_id
                        r.i64("end_offset")?;
                        r.i32("epoch")?;
                    }
                    _ => return Ok(false),
                }
                r.tagged_fields("partition tagged field's tagged fields")?;
                Ok(true)
            })
        })?;
        tags(r, c, "topic tagged fields")
    })?;
    if !c {
        return Ok(());
    }
    tagged(r, "fetch tagged fields", |tag, r| match tag {
        0 if v >= 16 => node_endpoints(r).map(|()| true),
        _ => Ok(false),
    })
}

fn api_versions(r: &mut Reader<'_>, v: i16) -> ReadResult<()> {
    let c = v >= 3;
    r.i16("error_code")?;
    r.each(c, false, "api_keys", |r| {
        r.take(6, "api_key, min_version, max_version")?;
        tags(r, c, "api version tagged fields")
    })?;
    if v >= 1 {
        r.i32("throttle_time_ms")?;
    }
    if !c {
        return Ok(());
    }
    let features = |r: &mut Reader<'_>, what| {
        r.each(true, false, what, |r| {
            r.string(true, false, "name")?;
            r.take(4, "version levels")?;
            r.tagged_fields("feature tagged fields")
        })
        .map(drop)
    };
    tagged(r, "api versions tagged fields", |tag, r| {
        match tag {
            0 => features(r, "supported_features")?,
            1 => drop(r.i64("finalized_features_epoch")?),
            2 => features(r, "finalized_features")?,
            3 => drop(r.bool("zk_migration_ready")?),
            _ => return Ok(false),
        }
        Ok(true)
    })
}

fn create_topics(r: &mut Reader<'_>, v: i16) -> ReadResult<()> {
    let c = v >= 5;
    r.i32("throttle_time_ms")?;
    r.each(c, false, "topics", |r| {
        r.string(c, false, "name")?;
        if v >= 7 {
            uuid(r, "topic_id")?;
        }
        r.i16("error_code")?;
        r.string(c, true, "error_message")?;
        if !c {
            return Ok(());
        }
        r.i32("num_partitions")?;
        r.i16("replication_factor")?;
        r.each(true, true, "configs", |r| {
            r.string(true, false, "name")?;
            r.string(true, true, "value")?;
            r.take(3, "read_only, config_source, is_sensitive")?;
            r.tagged_fields("config tagged fields")
        })?;
        tagged(r, "topic tagged fields", |tag, r| match tag {
            0 => r.i16("topic_config_error_code").map(|_| true),
            _ => Ok(false),
        })
    })?;
    tags(r, c, "create topics tagged fields")
}

fn create_partitions(r: &mut Reader<'_>, v: i16) -> ReadResult<()> {
    let c = v >= 2;
    r.i32("throttle_time_ms")?;
    r.each(c, false, "results", |r| {
        r.string(c, false, "name")?;
        r.i16("error_code")?;
        r.string(c, true, "error_message")?;
        tags(r, c, "result tagged fields")
    })?;
    tags(r, c, "create partitions tagged fields")
}

fn delete_topics(r: &mut Reader<'_>, v: i16) -> ReadResult<()> {
    let c = v >= 4;
    r.i32("throttle_time_ms")?;
    r.each(c, false, "responses", |r| {
        r.string(c, true, "name")?;
        if v >= 6 {
            uuid(r, "topic_id")?;
        }
        r.i16("error_code")?;
        if v >= 5 {
            r.string(c, true, "error_message")?;
        }
        tags(r, c, "response tagged fields")
    })?;
    tags(r, c, "delete topics tagged fields")
}

/// Walks a CreateTopics, CreatePartitions or DeleteTopics request (`frame`: its bytes after the
/// size prefix, header included), as kafka-protocol decodes it.
pub(crate) fn mutation_request(key: ApiKey, version: i16, frame: &[u8]) -> ReadResult<()> {
    mutation_request_len(key, version, frame).map(drop)
}

/// [`mutation_request`], giving how many bytes of `frame` the header and body take.
pub(crate) fn mutation_request_len(key: ApiKey, version: i16, frame: &[u8]) -> ReadResult<usize> {
    let v = match key {
        ApiKey::CreateTopics => supported::<CreateTopicsRequest>(version)?,
        ApiKey::CreatePartitions => supported::<CreatePartitionsRequest>(version)?,
        ApiKey::DeleteTopics => supported::<DeleteTopicsRequest>(version)?,
        _ => {
            return Err(CodecError::Decoder(format!(
                "no bounded walk for {key:?} requests"
            )))
        }
    };
    let mut r = Reader::new(frame);
    r.take(8, "request header")?; // api key, version, correlation id
    r.string(false, true, "client_id")?;
    if key.request_header_version(v) >= 2 {
        r.tagged_fields("request header tagged fields")?;
    }
    let c = match key {
        ApiKey::CreateTopics => v >= 5,
        ApiKey::CreatePartitions => v >= 2,
        _ => v >= 4,
    };
    let r = &mut r;
    match key {
        ApiKey::CreateTopics => {
            r.each(c, false, "topics", |r| {
                r.string(c, false, "name")?;
                r.take(6, "num_partitions, replication_factor")?;
                r.each(c, false, "assignments", |r| {
                    r.i32("partition_index")?;
                    int32s(r, c, "broker_ids")?;
                    tags(r, c, "assignment tagged fields")
                })?;
                r.each(c, false, "configs", |r| {
                    r.string(c, false, "name")?;
                    r.string(c, true, "value")?;
                    tags(r, c, "config tagged fields")
                })?;
                tags(r, c, "topic tagged fields")
            })?;
            r.take(5, "timeout_ms, validate_only")?;
        }
        ApiKey::CreatePartitions => {
            r.each(c, false, "topics", |r| {
                r.string(c, false, "name")?;
                r.i32("count")?;
                r.each(c, true, "assignments", |r| {
                    int32s(r, c, "broker_ids")?;
                    tags(r, c, "assignment tagged fields")
                })?;
                tags(r, c, "topic tagged fields")
            })?;
            r.take(5, "timeout_ms, validate_only")?;
        }
        _ => {
            if v >= 6 {
                r.each(c, false, "topics", |r| {
                    r.string(c, true, "name")?;
                    uuid(r, "topic_id")?;
                    tags(r, c, "topic tagged fields")
                })?;
            } else {
                r.each(c, false, "topic_names", |r| {
                    r.string(c, false, "name").map(drop)
                })?;
            }
            r.i32("timeout_ms")?;
        }
    }
    tags(r, c, "request tagged fields")?;
    Ok(r.position())
}

