//! Well-formed messages of every API and version the proxy reads or rewrites: the fuzz targets'
//! seeds, and the unit tests' samples.

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{
    api_versions_response, create_partitions_request, create_partitions_response,
    create_topics_request, create_topics_response, delete_topics_request, delete_topics_response,
    describe_cluster_response, fetch_response, find_coordinator_response, metadata_response,
    produce_response, ApiKey, ApiVersionsResponse, BrokerId, CreatePartitionsRequest,
    CreatePartitionsResponse, CreateTopicsRequest, CreateTopicsResponse, DeleteTopicsRequest,
    DeleteTopicsResponse, DescribeClusterResponse, FetchRequest as KFetchRequest, FetchResponse,
    FindCoordinatorResponse, MetadataResponse, ProduceResponse, ProducerId, RequestHeader,
    ResponseHeader, TopicName,
};
use kafka_protocol::protocol::{Encodable, StrBytes};

use crate::messages::enforce;

/// Kafka's THROTTLING_QUOTA_EXCEEDED.
pub(super) const THROTTLED: i16 = enforce::THROTTLING_QUOTA_EXCEEDED;

/// The responses the samples cover, as (api key, lowest version, highest version): every response
/// the proxy decodes, at every version kafka-protocol decodes.
pub const RESPONSES: [(i16, i16, i16); 9] = [
    (ApiKey::Produce as i16, 3, 13),
    (ApiKey::Fetch as i16, 4, 18),
    (ApiKey::Metadata as i16, 0, 13),
    (ApiKey::FindCoordinator as i16, 0, 6),
    (ApiKey::ApiVersions as i16, 0, 4),
    (ApiKey::CreateTopics as i16, 2, 7),
    (ApiKey::DeleteTopics as i16, 1, 6),
    (ApiKey::CreatePartitions as i16, 0, 3),
    (ApiKey::DescribeCluster as i16, 0, 2),
];

/// The requests the samples cover, as (api key, lowest version, highest version): those the
/// proxy reads past their header.
pub const REQUESTS: [(i16, i16, i16); 5] = [
    (ApiKey::Produce as i16, 3, 13),
    (ApiKey::Fetch as i16, 4, 18),
    (ApiKey::CreateTopics as i16, 2, 7),
    (ApiKey::DeleteTopics as i16, 1, 6),
    (ApiKey::CreatePartitions as i16, 0, 3),
];

fn s(text: &'static str) -> StrBytes {
    StrBytes::from_static_str(text)
}

fn topic(i: usize) -> TopicName {
    TopicName(StrBytes::from_string(format!("topic-{i}")))
}

/// An unknown tagged field, for the samples of flexible versions (the walk must skip it).
fn unknown(flexible: bool) -> std::collections::BTreeMap<i32, Bytes> {
    let mut tags = std::collections::BTreeMap::new();
    if flexible {
        tags.insert(99, Bytes::from_static(b"unknown"));
    }
    tags
}

/// `n` of `f(i)`.
fn n_of<T>(n: usize, f: impl FnMut(usize) -> T) -> Vec<T> {
    (0..n).map(f).collect()
}

/// A response frame (its bytes after the size prefix, correlation id 7) to `api_key` at
/// `version`, as kafka-protocol encodes it, with every array holding `n` elements and every
/// field of the version set (known tagged fields too, and an unknown one in flexible versions);
/// `None` for an API or version outside [`RESPONSES`].
pub fn sample_response(api_key: i16, version: i16, n: usize) -> Option<Vec<u8>> {
    let key = ApiKey::try_from(api_key).ok()?;
    let (_, min, max) = RESPONSES.iter().find(|r| r.0 == api_key)?;
    if !(*min..=*max).contains(&version) {
        return None;
    }
    let v = version;
    match key {
        ApiKey::Metadata => response_frame(key, v, &sample_metadata(v, n)),
        ApiKey::FindCoordinator => response_frame(key, v, &sample_find_coordinator(v, n)),
        ApiKey::DescribeCluster => response_frame(key, v, &sample_describe_cluster(v, n)),
        ApiKey::Produce => response_frame(key, v, &sample_produce(v, n)),
        ApiKey::Fetch => response_frame(key, v, &sample_fetch(v, n)),
        ApiKey::ApiVersions => response_frame(key, v, &sample_api_versions(v, n)),
        ApiKey::CreateTopics => response_frame(key, v, &sample_create_topics(v, n)),
        ApiKey::CreatePartitions => response_frame(key, v, &sample_create_partitions(v, n)),
        ApiKey::DeleteTopics => response_frame(key, v, &sample_delete_topics(v, n)),
        _ => None,
    }
}

/// `message` after a response header with correlation id 7.
fn response_frame<M: Encodable>(key: ApiKey, v: i16, message: &M) -> Option<Vec<u8>> {
    let mut out = BytesMut::new();
    ResponseHeader::default()
        .with_correlation_id(7)
        .encode(&mut out, key.response_header_version(v))
        .ok()?;
    message.encode(&mut out, v).ok()?;
    Some(out.to_vec())
}

fn sample_metadata(v: i16, n: usize) -> MetadataResponse {
    use metadata_response::{
        MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
    };
    let c = v >= 9;
    let ids = || n_of(n, |i| BrokerId(i as i32 + 1));
    let partition = |i: usize| {
        let mut p = MetadataResponsePartition::default()
            .with_partition_index(i as i32)
            .with_leader_id(BrokerId(1))
            .with_replica_nodes(ids())
            .with_isr_nodes(ids());
        if v >= 7 {
            p.leader_epoch = 4;
        }
        if v >= 5 {
            p.offline_replicas = ids();
        }
        p.unknown_tagged_fields = unknown(c);
        p
    };
    let topic = |i: usize| {
        let mut t = MetadataResponseTopic::default()
            .with_name(Some(topic(i)))
            .with_partitions(n_of(n, partition));
        t.is_internal = v >= 1;
        if v >= 8 {
            t.topic_authorized_operations = 0x0ff8;
        }
        t.unknown_tagged_fields = unknown(c);
        t
    };
    let broker = |i: usize| {
        let mut b = MetadataResponseBroker::default()
            .with_node_id(BrokerId(i as i32 + 1))
            .with_host(s("kafka-1.internal"))
            .with_port(9092);
        if v >= 1 {
            b.rack = Some(s("rack-a"));
        }
        b.unknown_tagged_fields = unknown(c);
        b
    };
    let mut m = MetadataResponse::default()
        .with_brokers(n_of(n, broker))
        .with_topics(n_of(n, topic));
    m.throttle_time_ms = if v >= 3 { 5 } else { 0 };
    if v >= 2 {
        m.cluster_id = Some(s("cluster-1"));
    }
    if v >= 1 {
        m.controller_id = BrokerId(1);
    }
    if (8..=10).contains(&v) {
        m.cluster_authorized_operations = 0x0ff8;
    }
    m.unknown_tagged_fields = unknown(c);
    m
}

fn sample_find_coordinator(v: i16, n: usize) -> FindCoordinatorResponse {
    let mut m = FindCoordinatorResponse::default();
    if v >= 1 {
        m.throttle_time_ms = 5;
        m.error_message = Some(s("none"));
    }
    if v <= 3 {
        m = m
            .with_node_id(BrokerId(2))
            .with_host(s("kafka-2.internal"))
            .with_port(9092);
    } else {
        m.coordinators = n_of(n, |i| {
            let mut c = find_coordinator_response::Coordinator::default()
                .with_key(StrBytes::from_string(format!("group-{i}")))
                .with_node_id(BrokerId(i as i32 + 1))
                .with_host(s("kafka-1.internal"))
                .with_port(9092)
                .with_error_message(Some(s("none")));
            c.unknown_tagged_fields = unknown(true);
            c
        });
    }
    m.unknown_tagged_fields = unknown(v >= 3);
    m
}

fn sample_describe_cluster(v: i16, n: usize) -> DescribeClusterResponse {
    let broker = |i: usize| {
        let mut b = describe_cluster_response::DescribeClusterBroker::default()
            .with_broker_id(BrokerId(i as i32 + 1))
            .with_host(s("kafka-1.internal"))
            .with_port(9092)
            .with_rack(Some(s("rack-a")));
        b.is_fenced = v >= 2;
        b.unknown_tagged_fields = unknown(true);
        b
    };
    let mut m = DescribeClusterResponse::default()
        .with_throttle_time_ms(5)
        .with_error_message(Some(s("none")))
        .with_cluster_id(s("cluster-1"))
        .with_controller_id(BrokerId(1))
        .with_brokers(n_of(n, broker))
        .with_cluster_authorized_operations(0x0ff8);
    m.unknown_tagged_fields = unknown(true);
    m
}

fn sample_produce(v: i16, n: usize) -> ProduceResponse {
    use produce_response::{
        BatchIndexAndErrorMessage, LeaderIdAndEpoch, NodeEndpoint, PartitionProduceResponse,
        TopicProduceResponse,
    };
    let c = v >= 9;
    let partition = |i: usize| {
        let mut p = PartitionProduceResponse::default()
            .with_index(i as i32)
            .with_error_code(6)
            .with_base_offset(41)
            .with_log_append_time_ms(1);
        if v >= 5 {
            p.log_start_offset = 3;
        }
        if v >= 8 {
            p.record_errors = n_of(n, |b| {
                let mut e = BatchIndexAndErrorMessage::default()
                    .with_batch_index(b as i32)
                    .with_batch_index_error_message(Some(s("bad record")));
                e.unknown_tagged_fields = unknown(c);
                e
            });
            p.error_message = Some(s("not leader"));
        }
        if v >= 10 {
            p.current_leader = LeaderIdAndEpoch::default()
                .with_leader_id(BrokerId(2))
                .with_leader_epoch(9);
        }
        p.unknown_tagged_fields = unknown(c);
        p
    };
    let topic = |i: usize| {
        let mut t = TopicProduceResponse::default().with_partition_responses(n_of(n, partition));
        if v <= 12 {
            t.name = topic(i);
        }
        t.unknown_tagged_fields = unknown(c);
        t
    };
    let mut m = ProduceResponse::default()
        .with_responses(n_of(n, topic))
        .with_throttle_time_ms(5);
    if v >= 10 {
        m.node_endpoints = n_of(n, |i| {
            let mut e = NodeEndpoint::default()
                .with_node_id(BrokerId(i as i32 + 1))
                .with_host(s("kafka-1.internal"))
                .with_port(9092)
                .with_rack(Some(s("rack-a")));
            e.unknown_tagged_fields = unknown(true);
            e
        });
    }
    m.unknown_tagged_fields = unknown(c);
    m
}

fn sample_fetch(v: i16, n: usize) -> FetchResponse {
    use fetch_response::{
        AbortedTransaction, EpochEndOffset, FetchableTopicResponse, LeaderIdAndEpoch, NodeEndpoint,
        PartitionData, SnapshotId,
    };
    let c = v >= 12;
    let partition = |i: usize| {
        let mut p = PartitionData::default()
            .with_partition_index(i as i32)
            .with_high_watermark(100)
            .with_last_stable_offset(90)
            .with_aborted_transactions(Some(n_of(n, |t| {
                let mut a = AbortedTransaction::default()
                    .with_producer_id(ProducerId(t as i64))
                    .with_first_offset(7);
                a.unknown_tagged_fields = unknown(c);
                a
            })))
            .with_records(Some(Bytes::from_static(b"record batches")));
        if v >= 5 {
            p.log_start_offset = 3;
        }
        if v >= 11 {
            p.preferred_read_replica = BrokerId(2);
        }
        if c {
            p.diverging_epoch = EpochEndOffset::default().with_epoch(3).with_end_offset(50);
            p.current_leader = LeaderIdAndEpoch::default()
                .with_leader_id(BrokerId(2))
                .with_leader_epoch(9);
            p.snapshot_id = SnapshotId::default().with_end_offset(8).with_epoch(1);
        }
        p.unknown_tagged_fields = unknown(c);
        p
    };
    let topic = |i: usize| {
        let mut t = FetchableTopicResponse::default().with_partitions(n_of(n, partition));
        if v <= 12 {
            t.topic = topic(i);
        }
        t.unknown_tagged_fields = unknown(c);
        t
    };
    let mut m = FetchResponse::default()
        .with_throttle_time_ms(5)
        .with_responses(n_of(n, topic));
    if v >= 7 {
        m.session_id = 1234;
    }
    if v >= 16 {
        m.node_endpoints = n_of(n, |i| {
            let mut e = NodeEndpoint::default()
                .with_node_id(BrokerId(i as i32 + 1))
                .with_host(s("kafka-1.internal"))
                .with_port(9092)
                .with_rack(Some(s("rack-a")));
            e.unknown_tagged_fields = unknown(true);
            e
        });
    }
    m.unknown_tagged_fields = unknown(c);
    m
}

fn sample_api_versions(v: i16, n: usize) -> ApiVersionsResponse {
    use api_versions_response::{ApiVersion, FinalizedFeatureKey, SupportedFeatureKey};
    let c = v >= 3;
    // Produce, Fetch, ListOffsets...: APIs the proxy caps as well as others.
    let mut m = ApiVersionsResponse::default().with_api_keys(n_of(n, |i| {
        let mut a = ApiVersion::default()
            .with_api_key(i as i16)
            .with_min_version(0)
            .with_max_version(30);
        a.unknown_tagged_fields = unknown(c);
        a
    }));
    if v >= 1 {
        m.throttle_time_ms = 5;
    }
    if c {
        m.supported_features = n_of(n, |_| {
            let mut f = SupportedFeatureKey::default()
                .with_name(s("metadata.version"))
                .with_min_version(1)
                .with_max_version(20);
            f.unknown_tagged_fields = unknown(true);
            f
        });
        m.finalized_features_epoch = 12;
        m.finalized_features = n_of(n, |_| {
            let mut f = FinalizedFeatureKey::default()
                .with_name(s("metadata.version"))
                .with_max_version_level(20)
                .with_min_version_level(20);
            f.unknown_tagged_fields = unknown(true);
            f
        });
        m.zk_migration_ready = true;
    }
    m.unknown_tagged_fields = unknown(c);
    m
}

fn sample_create_topics(v: i16, n: usize) -> CreateTopicsResponse {
    use create_topics_response::{CreatableTopicConfigs, CreatableTopicResult};
    let c = v >= 5;
    let result = |i: usize| {
        let mut t = CreatableTopicResult::default()
            .with_name(topic(i))
            .with_error_code(36)
            .with_error_message(Some(s("exists")));
        if c {
            t.num_partitions = 3;
            t.replication_factor = 2;
            t.topic_config_error_code = 29;
            t.configs = Some(n_of(n, |_| {
                let mut k = CreatableTopicConfigs::default()
                    .with_name(s("retention.ms"))
                    .with_value(Some(s("1")))
                    .with_read_only(true)
                    .with_config_source(5)
                    .with_is_sensitive(true);
                k.unknown_tagged_fields = unknown(true);
                k
            }));
        }
        t.unknown_tagged_fields = unknown(c);
        t
    };
    let mut m = CreateTopicsResponse::default()
        .with_throttle_time_ms(5)
        .with_topics(n_of(n, result));
    m.unknown_tagged_fields = unknown(c);
    m
}

fn sample_create_partitions(v: i16, n: usize) -> CreatePartitionsResponse {
    let c = v >= 2;
    let mut m = CreatePartitionsResponse::default()
        .with_throttle_time_ms(5)
        .with_results(n_of(n, |i| {
            let mut r = create_partitions_response::CreatePartitionsTopicResult::default()
                .with_name(topic(i))
                .with_error_code(37)
                .with_error_message(Some(s("invalid")));
            r.unknown_tagged_fields = unknown(c);
            r
        }));
    m.unknown_tagged_fields = unknown(c);
    m
}

fn sample_delete_topics(v: i16, n: usize) -> DeleteTopicsResponse {
    let c = v >= 4;
    let mut m = DeleteTopicsResponse::default()
        .with_throttle_time_ms(5)
        .with_responses(n_of(n, |i| {
            let mut r = delete_topics_response::DeletableTopicResult::default()
                .with_name(Some(topic(i)))
                .with_error_code(3);
            if v >= 5 {
                r.error_message = Some(s("unknown"));
            }
            r.unknown_tagged_fields = unknown(c);
            r
        }));
    m.unknown_tagged_fields = unknown(c);
    m
}

/// A request frame (its bytes after the size prefix, client id "c-1", correlation id 7) of
/// `api_key` at `version`, as kafka-protocol encodes it, with every array holding `n` elements;
/// `None` for an API or version outside [`REQUESTS`].
pub fn sample_request(api_key: i16, version: i16, n: usize) -> Option<Vec<u8>> {
    use create_partitions_request::{CreatePartitionsAssignment, CreatePartitionsTopic};
    use create_topics_request::{CreatableReplicaAssignment, CreatableTopic, CreatableTopicConfig};
    use delete_topics_request::DeleteTopicState;
    use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    use kafka_protocol::messages::ProduceRequest;

    let key = ApiKey::try_from(api_key).ok()?;
    let (_, min, max) = REQUESTS.iter().find(|r| r.0 == api_key)?;
    if !(*min..=*max).contains(&version) {
        return None;
    }
    let v = version;
    let ids = || n_of(n, |i| BrokerId(i as i32 + 1));
    match key {
        ApiKey::Produce => request_frame(
            key,
            v,
            &ProduceRequest::default()
                .with_acks(-1)
                .with_timeout_ms(30_000)
                .with_topic_data(n_of(n, |i| {
                    let mut t = TopicProduceData::default().with_partition_data(n_of(n, |p| {
                        PartitionProduceData::default()
                            .with_index(p as i32)
                            .with_records(Some(Bytes::from_static(b"records")))
                    }));
                    if v <= 12 {
                        t.name = topic(i);
                    }
                    t
                })),
        ),
        ApiKey::Fetch => {
            let mut f = KFetchRequest::default()
                .with_max_wait_ms(500)
                .with_min_bytes(1)
                .with_max_bytes(52_428_800)
                .with_topics(n_of(n, |i| {
                    let mut t = FetchTopic::default().with_partitions(n_of(n, |p| {
                        FetchPartition::default().with_partition(p as i32)
                    }));
                    if v <= 12 {
                        t.topic = topic(i);
                    }
                    t
                }));
            if v >= 7 {
                f.session_id = 1234;
                f.session_epoch = 3;
            }
            request_frame(key, v, &f)
        }
        ApiKey::CreateTopics => request_frame(
            key,
            v,
            &CreateTopicsRequest::default()
                .with_timeout_ms(30_000)
                .with_topics(n_of(n, |i| {
                    CreatableTopic::default()
                        .with_name(topic(i))
                        .with_num_partitions(-1)
                        .with_replication_factor(-1)
                        .with_assignments(n_of(n, |p| {
                            CreatableReplicaAssignment::default()
                                .with_partition_index(p as i32)
                                .with_broker_ids(ids())
                        }))
                        .with_configs(n_of(n, |_| {
                            CreatableTopicConfig::default()
                                .with_name(s("retention.ms"))
                                .with_value(Some(s("1")))
                        }))
                })),
        ),
        ApiKey::CreatePartitions => request_frame(
            key,
            v,
            &CreatePartitionsRequest::default()
                .with_timeout_ms(30_000)
                .with_topics(n_of(n, |i| {
                    CreatePartitionsTopic::default()
                        .with_name(topic(i))
                        .with_count(i as i32 + 2)
                        .with_assignments(Some(n_of(n, |_| {
                            CreatePartitionsAssignment::default().with_broker_ids(ids())
                        })))
                })),
        ),
        ApiKey::DeleteTopics => {
            let mut d = DeleteTopicsRequest::default().with_timeout_ms(30_000);
            if v >= 6 {
                d.topics = n_of(n, |i| DeleteTopicState::default().with_name(Some(topic(i))));
            } else {
                d.topic_names = n_of(n, topic);
            }
            request_frame(key, v, &d)
        }
        _ => None,
    }
}

/// `message` after a request header with client id "c-1" and correlation id 7.
fn request_frame<M: Encodable>(key: ApiKey, v: i16, message: &M) -> Option<Vec<u8>> {
    let mut out = BytesMut::new();
    RequestHeader::default()
        .with_request_api_key(key as i16)
        .with_request_api_version(v)
        .with_correlation_id(7)
        .with_client_id(Some(s("c-1")))
        .encode(&mut out, key.request_header_version(v))
        .ok()?;
    message.encode(&mut out, v).ok()?;
    Some(out.to_vec())
}
