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
//! somewhere the walk never was. A tag above `i32::MAX` is refused: kafka-protocol would decode it
//! but not encode it again. A version kafka-protocol does not decode is refused, as it refuses
//! it. Bytes after the body are not the walk's business (the callers decide).

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
        unknown_tags(r, "response header tagged fields")?;
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
        unknown_tags(r, what)
    } else {
        Ok(())
    }
}

/// A tagged-field section without known tags.
fn unknown_tags(r: &mut Reader<'_>, what: &'static str) -> ReadResult<()> {
    tagged(r, what, |_, _| Ok(false))
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
        // kafka-protocol keeps a tag as an i32 and writes back only those from 0: one above
        // i32::MAX would be counted in the section it encodes again but not written (a malformed
        // frame, its size prefix past its end). Kafka's tags are small numbers.
        if tag > i32::MAX as u32 {
            return Err(CodecError::Decoder(format!(
                "{what}: tag {tag} is above the largest kafka-protocol writes back"
            )));
        }
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
        unknown_tags(r, "node endpoint tagged fields")
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
            unknown_tags(r, "coordinator tagged fields")
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
        unknown_tags(r, "broker tagged fields")
    })?;
    r.i32("cluster_authorized_operations")?;
    unknown_tags(r, "describe cluster tagged fields")
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
                    unknown_tags(r, "current leader tagged fields")?;
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
                unknown_tags(r, "partition tagged field's tagged fields")?;
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
            unknown_tags(r, "feature tagged fields")
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
            unknown_tags(r, "config tagged fields")
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
        unknown_tags(&mut r, "request header tagged fields")?;
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

#[cfg(test)]
mod tests {
    use bytes::{BufMut, Bytes, BytesMut};
    use kafka_protocol::messages::fetch_response::PartitionData;
    use kafka_protocol::messages::{ApiKey, FetchResponse};
    use kafka_protocol::protocol::Encodable;

    use super::*;
    use crate::fuzzing::{
        decoded_request_len, decoded_response_len, sample_request, sample_response, REQUESTS,
        RESPONSES,
    };
    use crate::messages::enforce::{self, MutationRequest, Refused};
    use crate::messages::rewrite::{self, RewriteError, FETCH_ENDPOINTS_FROM};

    /// The largest counts each encoding carries: 2^31 - 1, and 2^32 - 2 as a compact count.
    const HUGE: [&[u8]; 2] = [&[0x7f, 0xff, 0xff, 0xff], &[0xff, 0xff, 0xff, 0xff, 0x07]];

    fn key(api_key: i16) -> ApiKey {
        ApiKey::try_from(api_key).unwrap()
    }

    fn every_response(n: usize) -> impl Iterator<Item = (ApiKey, i16, Bytes)> {
        RESPONSES.iter().flat_map(move |&(k, min, max)| {
            (min..=max).map(move |v| {
                let frame = sample_response(k, v, n).unwrap_or_else(|| panic!("{k} v{v}"));
                (key(k), v, Bytes::from(frame))
            })
        })
    }

    fn every_mutation_request(n: usize) -> impl Iterator<Item = (ApiKey, i16, Bytes)> {
        REQUESTS
            .iter()
            .filter(|r| {
                matches!(
                    key(r.0),
                    ApiKey::CreateTopics | ApiKey::CreatePartitions | ApiKey::DeleteTopics
                )
            })
            .flat_map(move |&(k, min, max)| {
                (min..=max).map(move |v| {
                    let frame = sample_request(k, v, n).unwrap_or_else(|| panic!("{k} v{v}"));
                    (key(k), v, Bytes::from(frame))
                })
            })
    }

    #[test]
    fn every_response_kafka_protocol_encodes_walks_to_its_end() {
        // Every array empty, holding one element, and two; every known tagged field set, and an
        // unknown one in flexible versions.
        let mut seen = 0;
        for n in 0..=2 {
            for (key, v, frame) in every_response(n) {
                assert_eq!(
                    response_len(key, v, &frame),
                    Ok(frame.len()),
                    "{key:?} v{v}, {n} of each"
                );
                assert_eq!(decoded_response_len(key, v, &frame), Some(frame.len()));
                seen += 1;
            }
        }
        // Produce 3-13, Fetch 4-18, Metadata 0-13, FindCoordinator 0-6, ApiVersions 0-4,
        // CreateTopics 2-7, DeleteTopics 1-6, CreatePartitions 0-3, DescribeCluster 0-2.
        assert_eq!(seen, 3 * (11 + 15 + 14 + 7 + 5 + 6 + 6 + 4 + 3));
    }

    #[test]
    fn every_mutation_request_kafka_protocol_encodes_walks_to_its_end() {
        for n in 0..=2 {
            for (key, v, frame) in every_mutation_request(n) {
                assert_eq!(
                    mutation_request_len(key, v, &frame),
                    Ok(frame.len()),
                    "{key:?} v{v}, {n} of each"
                );
                assert_eq!(decoded_request_len(key, v, &frame), Some(frame.len()));
                assert!(MutationRequest::decode(key as i16, v, &frame).is_some());
            }
        }
    }

    /// Everything the proxy does with a broker's answer that decodes it: the rewrite, the raised
    /// Produce throttle, the merged mutation answer (and, for the Fetch versions the proxy
    /// forwards as they are, the walk and the decode it would take). True if the walk let it
    /// through.
    fn decode_path(key: ApiKey, v: i16, frame: &Bytes) -> bool {
        let k = key as i16;
        let mut any = |_: i32, host: &str, port: i32| Ok((host.to_owned(), port));
        if rewrite::needs_rewrite(k, v) {
            let _ = rewrite::rewrite(k, v, frame, &mut any);
        }
        match key {
            ApiKey::Produce => drop(enforce::raise_throttle(k, v, frame, u64::MAX)),
            ApiKey::CreateTopics | ApiKey::CreatePartitions | ApiKey::DeleteTopics => {
                drop(enforce::merge_refused(k, v, frame, Refused::default(), 1));
            }
            ApiKey::Fetch if v < FETCH_ENDPOINTS_FROM && response(key, v, frame).is_ok() => {
                decoded_response_len(key, v, frame);
            }
            _ => {}
        }
        response(key, v, frame).is_ok()
    }

    /// `frame` with the bytes at `at` made into `huge` (cut at the frame's end).
    fn overwritten(frame: &[u8], at: usize, huge: &[u8]) -> Bytes {
        let mut bad = frame.to_vec();
        let end = (at + huge.len()).min(bad.len());
        bad[at..end].copy_from_slice(&huge[..end - at]);
        Bytes::from(bad)
    }

    #[test]
    fn a_count_larger_than_the_frame_never_reaches_the_decoder() {
        // Every place in every answer made into the largest count either encoding carries: the
        // decode path must give up (or read a field that is no count), never reserve it. Without
        // the walks this aborts the test binary ("memory allocation of ... bytes failed").
        for (key, v, frame) in every_response(1) {
            assert!(
                decode_path(key, v, &frame),
                "{key:?} v{v} as Kafka sends it"
            );
            let mut refused = 0;
            for huge in HUGE {
                for at in 4..frame.len() {
                    if !decode_path(key, v, &overwritten(&frame, at, huge)) {
                        refused += 1;
                    }
                }
            }
            assert!(refused > 0, "{key:?} v{v}");
        }
        for (key, v, frame) in every_mutation_request(1) {
            for huge in HUGE {
                for at in 8..frame.len() {
                    let bad = overwritten(&frame, at, huge);
                    let _ = MutationRequest::decode(key as i16, v, &bad);
                }
            }
        }
    }

    #[test]
    fn a_known_tagged_field_that_lies_about_its_size_is_refused() {
        // ApiVersions v3: no api keys, then two tagged fields. finalized_features_epoch (tag 1)
        // says it is 0 bytes; kafka-protocol reads its 8 anyway, from the next field, and then
        // reads a supported_features (tag 0) hidden in that field's value, whose count is
        // 2^32 - 2. Taken at its size, the walk would skip both.
        let mut frame = BytesMut::new();
        frame.put_i32(7); // correlation id (ApiVersions answers with header v0)
        frame.put_i16(0); // error_code
        frame.put_u8(1); // api_keys: empty
        frame.put_i32(0); // throttle_time_ms
        frame.put_u8(2); // two tagged fields
        frame.put_slice(&[1, 0]); // tag 1, 0 bytes
        frame.put_slice(&[99, 13]); // tag 99, 13 bytes:
        frame.put_slice(&[0; 6]); //   the rest of what the decoder takes for tag 1's i64,
        frame.put_slice(&[0, 5, 0xff, 0xff, 0xff, 0xff, 0x0f]); //   tag 0, 5 bytes: a count
        let frame = frame.freeze();
        assert!(response(ApiKey::ApiVersions, 3, &frame).is_err());
        let mut any = |_: i32, host: &str, port: i32| Ok((host.to_owned(), port));
        assert!(matches!(
            rewrite::rewrite(18, 3, &frame, &mut any),
            Err(RewriteError::Decode(_))
        ));
        // A value longer than its field's size is refused too.
        let mut long = BytesMut::from(&frame[..11]);
        long.put_slice(&[1, 1, 9]); // one tagged field: tag 1, 9 bytes
        long.put_i64(12);
        long.put_u8(0);
        assert!(response(ApiKey::ApiVersions, 3, &long).is_err());
        // And one of the right size is what Kafka sends.
        let mut right = BytesMut::from(&frame[..11]);
        right.put_slice(&[1, 1, 8]);
        right.put_i64(12);
        assert_eq!(
            response_len(ApiKey::ApiVersions, 3, &right),
            Ok(right.len())
        );
    }

    /// A tagged-field section of one unknown field whose tag is 2^31, as a five-byte varint.
    const TAG_2_31: [u8; 7] = [1, 0x80, 0x80, 0x80, 0x80, 0x08, 0];

    #[test]
    fn a_tag_kafka_protocol_cannot_write_back_is_refused() {
        // Found by the proxy_answer and proxy_request fuzz targets. kafka-protocol decodes a tag
        // of 2^31 or more into a negative i32 key, then counts it when it encodes the message
        // again but writes only the keys from 0: the merged answer, the rewritten answer (whose
        // size prefix came out longer than the frame) and the forwarded request were malformed.
        //
        // A CreatePartitions v3 answer, no results, the top level's tags such a section.
        let mut frame = vec![0, 0, 0, 7, 0, 0, 0, 0, 5, 1];
        frame.extend_from_slice(&TAG_2_31);
        let frame = Bytes::from(frame);
        // Forwarded as it came (merge_refused's None), not encoded again.
        assert!(enforce::merge_refused(37, 3, &frame, Refused::default(), 1).is_none());
        assert!(response(ApiKey::CreatePartitions, 3, &frame).is_err());
        // A Metadata v12 answer whose last section is such a one: not rewritten.
        let mut metadata = sample_response(ApiKey::Metadata as i16, 12, 0).unwrap();
        let unknown = 1 + 1 + 1 + b"unknown".len(); // the sample's own tag 99
        metadata.truncate(metadata.len() - unknown);
        metadata.extend_from_slice(&TAG_2_31);
        let mut any = |_: i32, host: &str, port: i32| Ok((host.to_owned(), port));
        assert!(matches!(
            rewrite::rewrite(3, 12, &Bytes::from(metadata), &mut any),
            Err(RewriteError::Decode(_))
        ));
        // A DeleteTopics v5 request whose body ends with such a section: not decoded, so never
        // split and encoded again (the broker judges it).
        let mut request = sample_request(ApiKey::DeleteTopics as i16, 5, 2).unwrap();
        request.pop(); // its empty tagged-field section
        request.extend_from_slice(&TAG_2_31);
        assert!(MutationRequest::decode(20, 5, &Bytes::from(request.clone())).is_none());
        assert!(mutation_request(ApiKey::DeleteTopics, 5, &request).is_err());
        // The largest tag kafka-protocol writes back is still walked.
        let mut top = vec![0, 0, 0, 7, 0, 0, 0, 0, 5, 1];
        top.extend_from_slice(&[1, 0xff, 0xff, 0xff, 0xff, 0x07, 0]);
        assert_eq!(
            response_len(ApiKey::CreatePartitions, 3, &top),
            Ok(top.len())
        );
    }

    #[test]
    fn nulls_walk_where_kafka_protocol_takes_them() {
        for v in 4..=18 {
            let partition = PartitionData::default()
                .with_aborted_transactions(None)
                .with_records(None);
            let topic = kafka_protocol::messages::fetch_response::FetchableTopicResponse::default()
                .with_partitions(vec![partition]);
            let m = FetchResponse::default().with_responses(vec![topic]);
            let mut frame = BytesMut::new();
            frame.put_i32(7);
            if v >= 12 {
                frame.put_u8(0);
            }
            m.encode(&mut frame, v).unwrap();
            assert_eq!(
                response_len(ApiKey::Fetch, v, &frame),
                Ok(frame.len()),
                "v{v}"
            );
            assert_eq!(
                decoded_response_len(ApiKey::Fetch, v, &frame),
                Some(frame.len())
            );
        }
    }

    #[test]
    fn versions_and_apis_kafka_protocol_does_not_decode_are_refused() {
        let frame = sample_response(ApiKey::Metadata as i16, 13, 1).unwrap();
        assert!(response(ApiKey::Metadata, 14, &frame).is_err());
        assert!(response(ApiKey::Metadata, -1, &frame).is_err());
        assert!(response(ApiKey::Produce, 2, &frame).is_err());
        assert!(response(ApiKey::ListOffsets, 1, &frame).is_err());
        assert!(mutation_request(ApiKey::CreateTopics, 1, &frame).is_err());
        assert!(mutation_request(ApiKey::Metadata, 1, &frame).is_err());
    }

    #[test]
    fn a_frame_cut_short_is_refused_at_every_length() {
        for (key, v, frame) in every_response(1) {
            for len in 0..frame.len() {
                assert!(
                    response(key, v, &frame[..len]).is_err(),
                    "{key:?} v{v} at {len}"
                );
            }
        }
    }
}
