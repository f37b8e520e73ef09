//! An in-process fake Kafka cluster: each broker answers ApiVersions, Metadata, FindCoordinator,
//! DescribeCluster, Produce, Fetch, CreateTopics, CreatePartitions and DeleteTopics with
//! kafka-protocol-encoded responses that name the cluster's own addresses, and every other
//! request with an echo (see [`echo`]). Its [`Control`] sets the throttle its answers carry, the
//! records a Fetch gets and the versions it offers, and notes every request a broker receives.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::create_topics_response::CreatableTopicResult;
use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::metadata_response::MetadataResponseBroker;
use kafka_protocol::messages::{
    fetch_response, produce_response, ApiKey, ApiVersionsResponse, BrokerId,
    CreatePartitionsRequest, CreatePartitionsResponse, CreateTopicsRequest, CreateTopicsResponse,
    DeleteTopicsRequest, DeleteTopicsResponse, DescribeClusterResponse, FetchRequest,
    FetchResponse, FindCoordinatorRequest, FindCoordinatorResponse, MetadataResponse,
    ProduceRequest, ProduceResponse, RequestHeader, ResponseHeader, SaslAuthenticateRequest,
    SaslAuthenticateResponse, SaslHandshakeResponse,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The client id that makes a broker answer a Metadata request with a truncated body.
pub(crate) const GARBAGE: &str = "send-garbage";
/// The client id that makes a broker answer with the wrong correlation id.
pub(crate) const WRONG_ID: &str = "wrong-correlation-id";
/// The client id that makes a broker close the connection after its answer.
pub(crate) const CLOSE_AFTER: &str = "close-after-answering";
/// The client id that makes a broker send its answer twice.
pub(crate) const TWICE: &str = "answer-twice";
/// The client id that makes a broker wait 600 ms before its answer.
pub(crate) const SLOW: &str = "slow-to-answer";
/// The only password the fake brokers' SASL PLAIN accepts.
pub(crate) const PASSWORD: &str = "the-right-password";
/// Kafka's SASL_AUTHENTICATION_FAILED.
pub(crate) const SASL_AUTHENTICATION_FAILED: i16 = 58;
/// The records every Fetch answer carries.
pub(crate) const RECORDS: &[u8] = b"a record batch, as the broker wrote it";

/// The fetch session id a broker gives a full Fetch (epoch 0) that opens a session.
pub(crate) const SESSION_ID: i32 = 777;

/// What the test sets of a cluster's answers, and what its brokers received.
#[derive(Default)]
pub(crate) struct Control {
    /// The `throttle_time_ms` of every Produce, Fetch, CreateTopics, CreatePartitions and
    /// DeleteTopics answer; `None`: a Produce answer carries the broker's node id, the others 0.
    pub(crate) throttle_ms: Mutex<Option<i32>>,
    /// The records of every Fetch answer; `None`: [`RECORDS`].
    pub(crate) fetch_records: Mutex<Option<Bytes>>,
    /// What ApiVersions lists; `None`: [`offered`].
    pub(crate) offered: Mutex<Option<Vec<ApiVersion>>>,
    /// Every request a broker received, in order.
    pub(crate) received: Mutex<Vec<Received>>,
}

/// One request as a broker received it.
#[derive(Clone, Debug)]
pub(crate) struct Received {
    /// When the broker had read all of it.
    pub(crate) at: Instant,
    pub(crate) node_id: i32,
    pub(crate) api_key: i16,
    pub(crate) version: i16,
    pub(crate) correlation_id: i32,
    pub(crate) client_id: Option<String>,
    /// A Fetch request's `max_bytes`.
    pub(crate) fetch_max_bytes: Option<i32>,
    /// The topics a CreateTopics request creates.
    pub(crate) topics: Vec<String>,
}

impl Control {
    /// The requests of `key` received so far.
    pub(crate) fn received(&self, key: ApiKey) -> Vec<Received> {
        let received = self.received.lock().unwrap();
        received
            .iter()
            .filter(|r| r.api_key == key as i16)
            .cloned()
            .collect()
    }

    /// Every request received so far.
    pub(crate) fn all_received(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }

    fn throttle(&self) -> Option<i32> {
        *self.throttle_ms.lock().unwrap()
    }
}

/// The versions every fake broker offers: more than the proxy can rewrite, for some.
pub(crate) fn offered() -> Vec<ApiVersion> {
    [
        (ApiKey::Produce, 3, 20),
        (ApiKey::Fetch, 4, 30),
        (ApiKey::Metadata, 0, 13),
        (ApiKey::FindCoordinator, 0, 9),
        (ApiKey::ApiVersions, 0, 4),
        (ApiKey::DescribeCluster, 0, 5),
        (ApiKey::DescribeClientQuotas, 0, 1),
    ]
    .into_iter()
    .map(|(k, min, max)| {
        ApiVersion::default()
            .with_api_key(k as i16)
            .with_min_version(min)
            .with_max_version(max)
    })
    .collect()
}

/// A cluster of fake brokers, node ids 1, 2, ...
pub(crate) struct Cluster {
    pub(crate) brokers: Vec<(i32, SocketAddr)>,
    pub(crate) control: Arc<Control>,
}

impl Cluster {
    pub(crate) async fn start(size: i32) -> Cluster {
        let mut listeners = Vec::new();
        for id in 1..=size {
            let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
            listeners.push((id, l));
        }
        let brokers: Vec<_> = listeners
            .iter()
            .map(|(id, l)| (*id, l.local_addr().unwrap()))
            .collect();
        let shared = Arc::new(brokers.clone());
        let control = Arc::new(Control::default());
        for (id, l) in listeners {
            let cluster = Arc::clone(&shared);
            let control = Arc::clone(&control);
            tokio::spawn(async move {
                loop {
                    let Ok((s, _)) = l.accept().await else { return };
                    tokio::spawn(serve(s, id, Arc::clone(&cluster), Arc::clone(&control)));
                }
            });
        }
        Cluster { brokers, control }
    }

    pub(crate) fn bootstrap(&self) -> SocketAddr {
        self.brokers[0].1
    }
}

/// What a broker answers any other request with: its node id, then the request's bytes.
pub(crate) fn echo(node_id: i32, request: &[u8]) -> Vec<u8> {
    let mut body = request[4..8].to_vec(); // the correlation id (response header v0)
    body.extend_from_slice(&node_id.to_be_bytes());
    body.extend_from_slice(request);
    body
}

async fn serve(
    mut s: TcpStream,
    node_id: i32,
    cluster: Arc<Vec<(i32, SocketAddr)>>,
    control: Arc<Control>,
) {
    loop {
        let mut prefix = [0u8; 4];
        if s.read_exact(&mut prefix).await.is_err() {
            return;
        }
        let mut frame = vec![0u8; u32::from_be_bytes(prefix) as usize];
        if s.read_exact(&mut frame).await.is_err() {
            return;
        }
        let note = note(node_id, &frame);
        control.received.lock().unwrap().push(note);
        let (twice, close) = (frame_has(&frame, TWICE), frame_has(&frame, CLOSE_AFTER));
        if frame_has(&frame, SLOW) {
            tokio::time::sleep(std::time::Duration::from_millis(600)).await;
        }
        let Some(body) = answer(node_id, &cluster, &control, Bytes::from(frame)) else {
            continue;
        };
        let mut out = (body.len() as u32).to_be_bytes().to_vec();
        out.extend_from_slice(&body);
        if twice {
            out.extend_from_within(..);
        }
        if s.write_all(&out).await.is_err() || close {
            return;
        }
    }
}

/// What a broker notes of a request it received (read with care: some tests send frames that
/// are not Kafka requests).
fn note(node_id: i32, frame: &[u8]) -> Received {
    let i16_at = |at: usize| {
        frame
            .get(at..at + 2)
            .map(|b| i16::from_be_bytes([b[0], b[1]]))
    };
    let api_key = i16_at(0).unwrap_or(-1);
    let version = i16_at(2).unwrap_or(-1);
    let correlation_id = frame
        .get(4..8)
        .map_or(-1, |b| i32::from_be_bytes([b[0], b[1], b[2], b[3]]));
    // Every request header from v1 has the client id here, as a nullable (non-compact) string.
    let client_id = i16_at(8)
        .and_then(|len| usize::try_from(len).ok())
        .and_then(|len| frame.get(10..10 + len))
        .map(|b| String::from_utf8_lossy(b).into_owned());
    let fetch_max_bytes = (api_key == ApiKey::Fetch as i16)
        .then(|| {
            let mut buf = Bytes::copy_from_slice(frame);
            RequestHeader::decode(&mut buf, ApiKey::Fetch.request_header_version(version)).ok()?;
            FetchRequest::decode(&mut buf, version)
                .ok()
                .map(|r| r.max_bytes)
        })
        .flatten();
    let topics = (api_key == ApiKey::CreateTopics as i16)
        .then(|| {
            let mut buf = Bytes::copy_from_slice(frame);
            let header_version = ApiKey::CreateTopics.request_header_version(version);
            RequestHeader::decode(&mut buf, header_version).ok()?;
            let r = CreateTopicsRequest::decode(&mut buf, version).ok()?;
            Some(r.topics.into_iter().map(|t| t.name.0.to_string()).collect())
        })
        .flatten()
        .unwrap_or_default();
    Received {
        at: Instant::now(),
        node_id,
        api_key,
        version,
        correlation_id,
        client_id,
        fetch_max_bytes,
        topics,
    }
}

fn frame_has(frame: &[u8], id: &str) -> bool {
    frame.windows(id.len()).any(|w| w == id.as_bytes())
}

fn answer(
    node_id: i32,
    cluster: &[(i32, SocketAddr)],
    control: &Control,
    frame: Bytes,
) -> Option<Vec<u8>> {
    let key = i16::from_be_bytes([frame[0], frame[1]]);
    let version = i16::from_be_bytes([frame[2], frame[3]]);
    let answered = [
        ApiKey::ApiVersions,
        ApiKey::Metadata,
        ApiKey::FindCoordinator,
        ApiKey::DescribeCluster,
        ApiKey::Produce,
        ApiKey::Fetch,
        ApiKey::CreateTopics,
        ApiKey::CreatePartitions,
        ApiKey::DeleteTopics,
        ApiKey::SaslHandshake,
        ApiKey::SaslAuthenticate,
    ];
    let Some(api) = ApiKey::try_from(key).ok().filter(|k| answered.contains(k)) else {
        return Some(echo(node_id, &frame));
    };
    let mut buf = frame.clone();
    let header = RequestHeader::decode(&mut buf, api.request_header_version(version)).unwrap();
    let client_id = header.client_id.as_ref().map(|c| c.as_str().to_owned());
    let mut out = BytesMut::new();
    let correlation_id = if client_id.as_deref() == Some(WRONG_ID) {
        header.correlation_id + 1
    } else {
        header.correlation_id
    };
    ResponseHeader::default()
        .with_correlation_id(correlation_id)
        .encode(&mut out, api.response_header_version(version))
        .unwrap();
    let host = |addr: &SocketAddr| StrBytes::from_string(addr.ip().to_string());
    let port = |addr: &SocketAddr| i32::from(addr.port());
    let me = cluster.iter().find(|(id, _)| *id == node_id).unwrap().1;
    match api {
        ApiKey::ApiVersions => ApiVersionsResponse::default()
            .with_api_keys(
                control
                    .offered
                    .lock()
                    .unwrap()
                    .clone()
                    .unwrap_or_else(offered),
            )
            .encode(&mut out, version)
            .unwrap(),
        ApiKey::Metadata => {
            if client_id.as_deref() == Some(GARBAGE) {
                out.put_slice(&[0, 0, 0, 5, 0xff]);
                return Some(out.to_vec());
            }
            let brokers = cluster
                .iter()
                .map(|(id, a)| {
                    MetadataResponseBroker::default()
                        .with_node_id(BrokerId(*id))
                        .with_host(host(a))
                        .with_port(port(a))
                })
                .collect();
            let mut m = MetadataResponse::default().with_brokers(brokers);
            if version >= 1 {
                m.controller_id = BrokerId(node_id);
            }
            m.encode(&mut out, version).unwrap()
        }
        ApiKey::FindCoordinator => {
            let request = FindCoordinatorRequest::decode(&mut buf, version).unwrap();
            let mut r = FindCoordinatorResponse::default();
            if version < 4 {
                r = r
                    .with_node_id(BrokerId(node_id))
                    .with_host(host(&me))
                    .with_port(port(&me));
            } else {
                r.coordinators = request
                    .coordinator_keys
                    .into_iter()
                    .map(|key| {
                        Coordinator::default()
                            .with_key(key)
                            .with_node_id(BrokerId(node_id))
                            .with_host(host(&me))
                            .with_port(port(&me))
                    })
                    .collect();
            }
            r.encode(&mut out, version).unwrap()
        }
        ApiKey::DescribeCluster => {
            let brokers = cluster
                .iter()
                .map(|(id, a)| {
                    DescribeClusterBroker::default()
                        .with_broker_id(BrokerId(*id))
                        .with_host(host(a))
                        .with_port(port(a))
                })
                .collect();
            DescribeClusterResponse::default()
                .with_cluster_id(StrBytes::from_static_str("fake"))
                .with_controller_id(BrokerId(node_id))
                .with_brokers(brokers)
                .encode(&mut out, version)
                .unwrap()
        }
        ApiKey::SaslHandshake => SaslHandshakeResponse::default()
            .with_mechanisms(vec![StrBytes::from_static_str("PLAIN")])
            .encode(&mut out, version)
            .unwrap(),
        ApiKey::SaslAuthenticate => {
            // PLAIN: authzid NUL user NUL password; only PASSWORD authenticates.
            let request = SaslAuthenticateRequest::decode(&mut buf, version).unwrap();
            let password = request
                .auth_bytes
                .rsplit(|b| *b == 0)
                .next()
                .unwrap_or_default();
            let r = if password == PASSWORD.as_bytes() {
                SaslAuthenticateResponse::default()
            } else {
                SaslAuthenticateResponse::default()
                    .with_error_code(SASL_AUTHENTICATION_FAILED)
                    .with_error_message(Some(StrBytes::from_static_str(
                        "Authentication failed: Invalid username or password",
                    )))
            };
            r.encode(&mut out, version).unwrap()
        }
        ApiKey::Produce => {
            let request = ProduceRequest::decode(&mut buf, version).unwrap();
            if request.acks == 0 {
                return None;
            }
            let throttle = control.throttle().unwrap_or(node_id);
            let mut r = ProduceResponse::default().with_throttle_time_ms(throttle);
            if version >= 10 {
                // As after a leader change: the other broker's endpoint.
                let (other, addr) = cluster.iter().find(|(id, _)| *id != node_id).unwrap();
                r.node_endpoints = vec![produce_response::NodeEndpoint::default()
                    .with_node_id(BrokerId(*other))
                    .with_host(host(addr))
                    .with_port(port(addr))];
            }
            r.encode(&mut out, version).unwrap()
        }
        ApiKey::Fetch => {
            let request = FetchRequest::decode(&mut buf, version).unwrap();
            let records = control
                .fetch_records
                .lock()
                .unwrap()
                .clone()
                .unwrap_or_else(|| Bytes::from_static(RECORDS));
            let partition = fetch_response::PartitionData::default()
                .with_partition_index(0)
                .with_records(Some(records));
            let mut topic =
                fetch_response::FetchableTopicResponse::default().with_partitions(vec![partition]);
            if version < 13 {
                topic.topic = StrBytes::from_static_str("orders").into();
            }
            // A full fetch opens a session; an incremental one stays in its own.
            let session_id = if version >= 7 && request.session_epoch == 0 {
                SESSION_ID
            } else {
                request.session_id
            };
            let mut r = FetchResponse::default()
                .with_responses(vec![topic])
                .with_throttle_time_ms(control.throttle().unwrap_or(0))
                .with_session_id(session_id);
            if version >= 16 {
                r.node_endpoints = vec![fetch_response::NodeEndpoint::default()
                    .with_node_id(BrokerId(node_id))
                    .with_host(host(&me))
                    .with_port(port(&me))];
            }
            r.encode(&mut out, version).unwrap()
        }
        ApiKey::CreateTopics => {
            let request = CreateTopicsRequest::decode(&mut buf, version).unwrap();
            let topics = request
                .topics
                .into_iter()
                .map(|t| {
                    let mut result = CreatableTopicResult::default().with_name(t.name);
                    if version >= 5 {
                        result.num_partitions = t.num_partitions.max(1);
                        result.replication_factor = t.replication_factor.max(1);
                    }
                    result
                })
                .collect();
            CreateTopicsResponse::default()
                .with_throttle_time_ms(control.throttle().unwrap_or(0))
                .with_topics(topics)
                .encode(&mut out, version)
                .unwrap()
        }
        ApiKey::CreatePartitions => {
            let request = CreatePartitionsRequest::decode(&mut buf, version).unwrap();
            let results = request
                .topics
                .into_iter()
                .map(|t| CreatePartitionsTopicResult::default().with_name(t.name))
                .collect();
            CreatePartitionsResponse::default()
                .with_throttle_time_ms(control.throttle().unwrap_or(0))
                .with_results(results)
                .encode(&mut out, version)
                .unwrap()
        }
        ApiKey::DeleteTopics => {
            let request = DeleteTopicsRequest::decode(&mut buf, version).unwrap();
            let named = request
                .topic_names
                .into_iter()
                .map(|n| DeletableTopicResult::default().with_name(Some(n)));
            let states = request.topics.into_iter().map(|t| {
                DeletableTopicResult::default()
                    .with_name(t.name)
                    .with_topic_id(t.topic_id)
            });
            DeleteTopicsResponse::default()
                .with_throttle_time_ms(control.throttle().unwrap_or(0))
                .with_responses(named.chain(states).collect())
                .encode(&mut out, version)
                .unwrap()
        }
        _ => return Some(echo(node_id, &frame)),
    }
    Some(out.to_vec())
}
