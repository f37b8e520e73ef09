//! An in-process fake Kafka cluster: each broker answers ApiVersions, Metadata, FindCoordinator,
//! DescribeCluster, Produce and Fetch with kafka-protocol-encoded responses that name the
//! cluster's own addresses, and every other request with an echo (see [`echo`]).

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::metadata_response::MetadataResponseBroker;
use kafka_protocol::messages::{
    fetch_response, produce_response, ApiKey, ApiVersionsResponse, BrokerId,
    DescribeClusterResponse, FetchResponse, FindCoordinatorRequest, FindCoordinatorResponse,
    MetadataResponse, ProduceRequest, ProduceResponse, RequestHeader, ResponseHeader,
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
/// The records every Fetch answer carries.
pub(crate) const RECORDS: &[u8] = b"a record batch, as the broker wrote it";

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
        for (id, l) in listeners {
            let cluster = Arc::clone(&shared);
            tokio::spawn(async move {
                loop {
                    let Ok((s, _)) = l.accept().await else { return };
                    tokio::spawn(serve(s, id, Arc::clone(&cluster)));
                }
            });
        }
        Cluster { brokers }
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

async fn serve(mut s: TcpStream, node_id: i32, cluster: Arc<Vec<(i32, SocketAddr)>>) {
    loop {
        let mut prefix = [0u8; 4];
        if s.read_exact(&mut prefix).await.is_err() {
            return;
        }
        let mut frame = vec![0u8; u32::from_be_bytes(prefix) as usize];
        if s.read_exact(&mut frame).await.is_err() {
            return;
        }
        let (twice, close) = (frame_has(&frame, TWICE), frame_has(&frame, CLOSE_AFTER));
        if frame_has(&frame, SLOW) {
            tokio::time::sleep(std::time::Duration::from_millis(600)).await;
        }
        let Some(body) = answer(node_id, &cluster, Bytes::from(frame)) else {
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

fn frame_has(frame: &[u8], id: &str) -> bool {
    frame.windows(id.len()).any(|w| w == id.as_bytes())
}

fn answer(node_id: i32, cluster: &[(i32, SocketAddr)], frame: Bytes) -> Option<Vec<u8>> {
    let key = i16::from_be_bytes([frame[0], frame[1]]);
    let version = i16::from_be_bytes([frame[2], frame[3]]);
    let answered = [
        ApiKey::ApiVersions,
        ApiKey::Metadata,
        ApiKey::FindCoordinator,
        ApiKey::DescribeCluster,
        ApiKey::Produce,
        ApiKey::Fetch,
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
            .with_api_keys(offered())
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
        ApiKey::Produce => {
            let request = ProduceRequest::decode(&mut buf, version).unwrap();
            if request.acks == 0 {
                return None;
            }
            let mut r = ProduceResponse::default().with_throttle_time_ms(node_id);
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
            let partition = fetch_response::PartitionData::default()
                .with_partition_index(0)
                .with_records(Some(Bytes::from_static(RECORDS)));
            let mut topic =
                fetch_response::FetchableTopicResponse::default().with_partitions(vec![partition]);
            if version < 13 {
                topic.topic = StrBytes::from_static_str("orders").into();
            }
            let mut r = FetchResponse::default().with_responses(vec![topic]);
            if version >= 16 {
                r.node_endpoints = vec![fetch_response::NodeEndpoint::default()
                    .with_node_id(BrokerId(node_id))
                    .with_host(host(&me))
                    .with_port(port(&me))];
            }
            r.encode(&mut out, version).unwrap()
        }
        _ => return Some(echo(node_id, &frame)),
    }
    Some(out.to_vec())
}
