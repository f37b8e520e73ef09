//! The proxy in front of the fake cluster.

use std::net::SocketAddr;
use std::time::Duration;

use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, DescribeClusterRequest,
    DescribeClusterResponse, FetchRequest, FetchResponse, FindCoordinatorRequest,
    FindCoordinatorResponse, MetadataRequest, MetadataResponse, ProduceRequest, ProduceResponse,
};
use kafka_protocol::protocol::{Message, StrBytes};
use kquota_proxy::{BrokerListeners, FrameSize, HostPort, InFlight, Proxy, ProxySettings, Timeout};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::client::{request, Client};
use crate::fake::{self, Cluster};

struct Running {
    addr: SocketAddr,
    brokers: BrokerListeners,
    cluster: Cluster,
    stop: Option<oneshot::Sender<()>>,
    served: JoinHandle<()>,
}

async fn start(tweak: impl FnOnce(&mut ProxySettings)) -> Running {
    let cluster = Cluster::start(2).await;
    let upstream: HostPort = cluster.bootstrap().to_string().parse().unwrap();
    let mut config = ProxySettings::new("127.0.0.1:0".parse().unwrap(), upstream);
    config.listen_base = Some("127.0.0.1:0".parse().unwrap());
    tweak(&mut config);
    let proxy = Proxy::bind(config.build().unwrap()).await.unwrap();
    let (stop, stopped) = oneshot::channel();
    let addr = proxy.local_addr();
    let brokers = proxy.brokers();
    let served = tokio::spawn(proxy.serve(async {
        let _ = stopped.await;
    }));
    Running {
        addr,
        brokers,
        cluster,
        stop: Some(stop),
        served,
    }
}

impl Running {
    /// The proxy's listener for broker `node_id`, and the fake broker behind it.
    fn listener(&self, node_id: i32) -> (SocketAddr, SocketAddr) {
        let (_, listen, upstream) = self
            .brokers
            .list()
            .into_iter()
            .find(|(id, _, _)| *id == node_id)
            .expect("a listener for the broker");
        let fake = self.cluster.brokers[(node_id - 1) as usize].1;
        assert_eq!(upstream.to_string(), fake.to_string());
        (listen, fake)
    }

    async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        tokio::time::timeout(Duration::from_secs(10), self.served)
            .await
            .expect("the proxy stops")
            .unwrap();
    }
}

/// Every broker the proxy names is one of its own listeners, for the right node.
fn assert_proxied(running: &Running, brokers: &[(i32, String, i32)]) {
    assert_eq!(brokers.len(), 2);
    for (id, host, port) in brokers {
        let (listen, fake) = running.listener(*id);
        assert_eq!(host, "127.0.0.1");
        assert_eq!(*port, i32::from(listen.port()));
        assert_ne!(*port, i32::from(fake.port()));
    }
}

#[tokio::test]
async fn metadata_names_the_proxys_listeners_at_every_version() {
    let running = start(|_| {}).await;
    let mut c = Client::connect(running.addr).await;
    for version in 0..=MetadataResponse::VERSIONS.max {
        let mut request = MetadataRequest::default();
        if version >= 1 {
            request.topics = Some(vec![]);
        }
        let r: MetadataResponse = c.call(ApiKey::Metadata, version, &request).await;
        let brokers: Vec<_> = r
            .brokers
            .iter()
            .map(|b| (b.node_id.0, b.host.to_string(), b.port))
            .collect();
        assert_proxied(&running, &brokers);
    }
    // Each broker's listener reaches that broker.
    for node_id in [1, 2] {
        let (listen, _) = running.listener(node_id);
        let mut b = Client::connect(listen).await;
        let r: MetadataResponse = b
            .call(ApiKey::Metadata, 12, &MetadataRequest::default())
            .await;
        assert_eq!(r.controller_id.0, node_id);
    }
    running.stop().await;
}

#[tokio::test]
async fn find_coordinator_and_describe_cluster_are_rewritten() {
    let running = start(|_| {}).await;
    let mut c = Client::connect(running.addr).await;
    // Learn both brokers first, as a client does.
    let _: MetadataResponse = c
        .call(ApiKey::Metadata, 12, &MetadataRequest::default())
        .await;
    let (listen1, _) = running.listener(1);
    for version in 0..=FindCoordinatorResponse::VERSIONS.max {
        let mut request = FindCoordinatorRequest::default();
        if version < 4 {
            request.key = StrBytes::from_static_str("group-a");
        } else {
            request.coordinator_keys = vec![
                StrBytes::from_static_str("group-a"),
                StrBytes::from_static_str("group-b"),
            ];
        }
        let r: FindCoordinatorResponse = c.call(ApiKey::FindCoordinator, version, &request).await;
        if version < 4 {
            assert_eq!(
                (r.node_id.0, r.host.as_str()),
                (1, "127.0.0.1"),
                "v{version}"
            );
            assert_eq!(r.port, i32::from(listen1.port()), "v{version}");
        } else {
            assert_eq!(r.coordinators.len(), 2);
            for co in r.coordinators {
                assert_eq!((co.node_id.0, co.host.as_str()), (1, "127.0.0.1"));
                assert_eq!(co.port, i32::from(listen1.port()), "v{version}");
            }
        }
    }
    for version in 0..=DescribeClusterResponse::VERSIONS.max {
        let request = DescribeClusterRequest::default();
        let r: DescribeClusterResponse = c.call(ApiKey::DescribeCluster, version, &request).await;
        let brokers: Vec<_> = r
            .brokers
            .iter()
            .map(|b| (b.broker_id.0, b.host.to_string(), b.port))
            .collect();
        assert_proxied(&running, &brokers);
    }
    running.stop().await;
}

#[tokio::test]
async fn produce_and_fetch_node_endpoints_are_rewritten() {
    let running = start(|_| {}).await;
    let mut c = Client::connect(running.addr).await;
    for version in 3..=ProduceResponse::VERSIONS.max {
        let request = ProduceRequest::default().with_acks(-1).with_timeout_ms(100);
        let r: ProduceResponse = c.call(ApiKey::Produce, version, &request).await;
        if version < 10 {
            assert!(r.node_endpoints.is_empty());
            continue;
        }
        // The bootstrap broker (node 1) names node 2.
        let (listen2, _) = running.listener(2);
        assert_eq!(r.node_endpoints.len(), 1);
        let e = &r.node_endpoints[0];
        assert_eq!((e.node_id.0, e.host.as_str()), (2, "127.0.0.1"));
        assert_eq!(e.port, i32::from(listen2.port()), "v{version}");
    }
    for version in 4..=FetchResponse::VERSIONS.max {
        let r: FetchResponse = c
            .call(ApiKey::Fetch, version, &FetchRequest::default())
            .await;
        let records = r.responses[0].partitions[0].records.as_ref().unwrap();
        assert_eq!(&records[..], fake::RECORDS, "v{version}");
        if version >= 16 {
            let (listen1, _) = running.listener(1);
            let e = &r.node_endpoints[0];
            assert_eq!((e.node_id.0, e.port), (1, i32::from(listen1.port())));
        }
    }
    running.stop().await;
}

#[tokio::test]
async fn api_versions_is_capped_and_above_v4_answered_by_the_proxy() {
    let running = start(|_| {}).await;
    let mut c = Client::connect(running.addr).await;
    for version in 0..=4 {
        let r: ApiVersionsResponse = c
            .call(ApiKey::ApiVersions, version, &ApiVersionsRequest::default())
            .await;
        let max = |k: ApiKey| {
            r.api_keys
                .iter()
                .find(|a| a.api_key == k as i16)
                .map(|a| a.max_version)
        };
        assert_eq!(max(ApiKey::Produce), Some(ProduceResponse::VERSIONS.max));
        assert_eq!(max(ApiKey::Fetch), Some(FetchResponse::VERSIONS.max));
        assert_eq!(max(ApiKey::Metadata), Some(MetadataResponse::VERSIONS.max));
        assert_eq!(
            max(ApiKey::FindCoordinator),
            Some(FindCoordinatorResponse::VERSIONS.max)
        );
        assert_eq!(
            max(ApiKey::DescribeCluster),
            Some(DescribeClusterResponse::VERSIONS.max)
        );
        assert_eq!(max(ApiKey::ApiVersions), Some(4));
        // Not rewritten, not capped.
        assert_eq!(max(ApiKey::DescribeClientQuotas), Some(1));
    }
    // ApiVersions v5: Kafka's UNSUPPORTED_VERSION answer, in the v0 layout, listing 0-4.
    let mut frame = request(
        ApiKey::ApiVersions,
        3,
        77,
        "c",
        &ApiVersionsRequest::default(),
    );
    frame[2..4].copy_from_slice(&5i16.to_be_bytes());
    c.send_frame(&frame).await;
    let (id, r): (i32, ApiVersionsResponse) = c.recv_as(ApiKey::ApiVersions, 0).await;
    assert_eq!((id, r.error_code), (77, 35));
    assert_eq!(r.api_keys.len(), 1);
    assert_eq!(
        (r.api_keys[0].min_version, r.api_keys[0].max_version),
        (0, 4)
    );
    // The connection goes on.
    let _: MetadataResponse = c
        .call(ApiKey::Metadata, 12, &MetadataRequest::default())
        .await;
    running.stop().await;
}

#[tokio::test]
async fn other_requests_and_answers_pass_byte_for_byte() {
    let running = start(|_| {}).await;
    let mut c = Client::connect(running.addr).await;
    // An API the proxy does not know, one it does not rewrite, and a Produce it does not decode.
    let unknown = [&[0x03, 0xe7, 0, 0, 0, 0, 0, 9][..], b"any bytes at all"].concat();
    let describe_configs = [&[0, 32, 0, 4, 0, 0, 0, 10][..], &[0xff; 40]].concat();
    for frame in [unknown, describe_configs] {
        c.send_frame(&frame).await;
        assert_eq!(&c.recv().await.unwrap()[..], &fake::echo(1, &frame)[..]);
    }
    running.stop().await;
}

/// A frame of an API the proxy does not know (999 v0), with correlation id `id` and `size` bytes
/// of a pattern after it.
pub(crate) fn unknown_api_frame(id: i32, size: u32) -> Vec<u8> {
    let mut frame = vec![0x03, 0xe7, 0, 0];
    frame.extend_from_slice(&id.to_be_bytes());
    frame.extend((0..size).map(|i| (i * 7 % 251) as u8));
    frame
}

#[tokio::test]
async fn large_requests_and_answers_pass_byte_for_byte_one_after_another() {
    let running = start(|_| {}).await;
    let mut c = Client::connect(running.addr).await;
    // Over 32 KiB each way: passed on as they come (between two plain sockets, through a pipe),
    // one after another on the same connection, and one sent while the last is still coming.
    for (id, size) in [(1, 300_000), (2, 40_000), (3, 1_200_000)] {
        let frame = unknown_api_frame(id, size);
        c.send_frame(&frame).await;
        let answer = c.recv().await.expect("an answer");
        assert!(
            answer[..] == fake::echo(1, &frame)[..],
            "frame {id} of {size} bytes changed on the way"
        );
    }
    let (a, b) = (unknown_api_frame(4, 500_000), unknown_api_frame(5, 70_000));
    c.send_frame(&a).await;
    c.send_frame(&b).await;
    for frame in [a, b] {
        assert!(c.recv().await.expect("an answer")[..] == fake::echo(1, &frame)[..]);
    }
    running.stop().await;
}

#[tokio::test]
async fn pipelined_requests_come_back_in_order() {
    let running = start(|c| c.max_in_flight = InFlight::new(4).unwrap()).await;
    let mut c = Client::connect(running.addr).await;
    let mut expected = Vec::new();
    let mut batch = Vec::new();
    for id in 0..60 {
        let frame = match id % 5 {
            0 => request(ApiKey::Metadata, 12, id, "c", &MetadataRequest::default()),
            1 => [&[0x03, 0xe7, 0, 0][..], &id.to_be_bytes(), b"echo me"].concat(),
            // acks=0: no answer comes, and none is waited for.
            2 => request(
                ApiKey::Produce,
                9,
                id,
                "c",
                &ProduceRequest::default().with_acks(0),
            ),
            3 => request(
                ApiKey::Produce,
                11,
                id,
                "c",
                &ProduceRequest::default().with_acks(1),
            ),
            _ => request(
                ApiKey::ApiVersions,
                3,
                id,
                "c",
                &ApiVersionsRequest::default(),
            ),
        };
        if id % 5 != 2 {
            expected.push(id);
        }
        batch.extend_from_slice(&(frame.len() as u32).to_be_bytes());
        batch.extend_from_slice(&frame);
    }
    // Every request written before any answer is read.
    let (mut read, mut write) = c.stream.split();
    let send = async {
        tokio::io::AsyncWriteExt::write_all(&mut write, &batch)
            .await
            .unwrap()
    };
    let receive = async {
        let mut ids = Vec::new();
        for _ in 0..expected.len() {
            let mut prefix = [0u8; 4];
            tokio::io::AsyncReadExt::read_exact(&mut read, &mut prefix)
                .await
                .unwrap();
            let mut frame = vec![0u8; u32::from_be_bytes(prefix) as usize];
            tokio::io::AsyncReadExt::read_exact(&mut read, &mut frame)
                .await
                .unwrap();
            ids.push(i32::from_be_bytes(frame[..4].try_into().unwrap()));
        }
        ids
    };
    let ((), ids) = tokio::join!(send, receive);
    assert_eq!(ids, expected);
    running.stop().await;
}

#[tokio::test]
async fn bad_frames_close_only_their_connection() {
    let running = start(|c| c.max_request_bytes = FrameSize::new(1024).unwrap()).await;
    let mut good = Client::connect(running.addr).await;
    let _: MetadataResponse = good
        .call(ApiKey::Metadata, 12, &MetadataRequest::default())
        .await;
    // Too large, negative, shorter than a header, a version the proxy cannot rewrite, and a
    // Produce cut short before its acks.
    let mut metadata_14 = request(ApiKey::Metadata, 13, 1, "c", &MetadataRequest::default());
    metadata_14[2..4].copy_from_slice(&14i16.to_be_bytes());
    let bad: Vec<Vec<u8>> = vec![
        [&1025u32.to_be_bytes()[..], &[0; 16]].concat(),
        (-5i32).to_be_bytes().to_vec(),
        [&3u32.to_be_bytes()[..], &[0, 3, 0]].concat(),
        [&(metadata_14.len() as u32).to_be_bytes()[..], &metadata_14].concat(),
        [&10u32.to_be_bytes()[..], &[0, 0, 0, 9, 0, 0, 0, 1, 0, 1]].concat(),
    ];
    for bytes in bad {
        let mut c = Client::connect(running.addr).await;
        tokio::io::AsyncWriteExt::write_all(&mut c.stream, &bytes)
            .await
            .unwrap();
        assert!(c.closed().await, "{bytes:?}");
    }
    // Responses the proxy must rewrite but cannot, and a wrong correlation id.
    for client_id in [fake::GARBAGE, fake::WRONG_ID] {
        let mut c = Client::connect(running.addr).await;
        c.send_frame(&request(
            ApiKey::Metadata,
            12,
            5,
            client_id,
            &MetadataRequest::default(),
        ))
        .await;
        assert!(c.closed().await, "{client_id}");
    }
    let r: MetadataResponse = good
        .call(ApiKey::Metadata, 12, &MetadataRequest::default())
        .await;
    assert_eq!(r.brokers.len(), 2);
    running.stop().await;
}

#[tokio::test]
async fn idle_connections_close_and_stopping_ends_every_connection() {
    let running = start(|c| c.idle_timeout = Timeout::from_millis(200).unwrap()).await;
    let mut idle = Client::connect(running.addr).await;
    let _: MetadataResponse = idle
        .call(ApiKey::Metadata, 12, &MetadataRequest::default())
        .await;
    assert!(idle.closed().await);
    let mut open = Client::connect(running.addr).await;
    let _: MetadataResponse = open
        .call(ApiKey::Metadata, 12, &MetadataRequest::default())
        .await;
    running.stop().await;
    assert!(open.closed().await);
}

#[tokio::test]
async fn a_broker_that_closes_or_answers_unasked_closes_the_client() {
    let running = start(|_| {}).await;
    for client_id in [fake::CLOSE_AFTER, fake::TWICE] {
        let mut c = Client::connect(running.addr).await;
        c.send_frame(&request(
            ApiKey::Metadata,
            12,
            5,
            client_id,
            &MetadataRequest::default(),
        ))
        .await;
        // The answer comes, then the connection closes without another request.
        let (id, _): (i32, MetadataResponse) = c.recv_as(ApiKey::Metadata, 12).await;
        assert_eq!(id, 5);
        assert!(c.closed().await, "{client_id}");
    }
    running.stop().await;
}

#[tokio::test]
async fn a_broker_that_takes_no_requests_does_not_hold_the_stop() {
    // A "broker" that accepts and never reads.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let upstream: HostPort = silent.local_addr().unwrap().to_string().parse().unwrap();
    let held = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((s, _)) = silent.accept().await {
            open.push(s);
        }
    });
    let mut config = ProxySettings::new("127.0.0.1:0".parse().unwrap(), upstream);
    config.listen_base = Some("127.0.0.1:0".parse().unwrap());
    let proxy = Proxy::bind(config.build().unwrap()).await.unwrap();
    let addr = proxy.local_addr();
    let (stop, stopped) = oneshot::channel::<()>();
    let served = tokio::spawn(proxy.serve(async {
        let _ = stopped.await;
    }));
    // Requests until both sockets' buffers are full and the proxy is stuck writing one.
    let mut c = Client::connect(addr).await;
    let frame = [&[0x03, 0xe7, 0, 0, 0, 0, 0, 1][..], &vec![7u8; 1 << 20]].concat();
    let mut sent = 0;
    while sent < 64 {
        let write = c.send_frame(&frame);
        if tokio::time::timeout(Duration::from_millis(300), write)
            .await
            .is_err()
        {
            break;
        }
        sent += 1;
    }
    assert!(
        sent < 64,
        "the proxy kept taking requests a broker does not read"
    );
    let started = std::time::Instant::now();
    stop.send(()).unwrap();
    tokio::time::timeout(
        kquota_proxy::SHUTDOWN_GRACE + Duration::from_secs(3),
        served,
    )
    .await
    .expect("the stop is not held beyond the grace period")
    .unwrap();
    assert!(started.elapsed() >= kquota_proxy::SHUTDOWN_GRACE - Duration::from_millis(100));
    held.abort();
}

#[tokio::test]
async fn a_connection_owed_an_answer_is_not_idle() {
    let running = start(|c| c.idle_timeout = Timeout::from_millis(200).unwrap()).await;
    let mut c = Client::connect(running.addr).await;
    c.send_frame(&request(
        ApiKey::Metadata,
        12,
        3,
        fake::SLOW,
        &MetadataRequest::default(),
    ))
    .await;
    let (id, _): (i32, MetadataResponse) = c.recv_as(ApiKey::Metadata, 12).await;
    assert_eq!(id, 3);
    running.stop().await;
}

#[tokio::test]
async fn at_most_max_in_flight_requests_reach_the_broker_unanswered() {
    // A "broker" that reads requests, counts them, and never answers.
    let counting = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let upstream: HostPort = counting.local_addr().unwrap().to_string().parse().unwrap();
    let received = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = std::sync::Arc::clone(&received);
    let broker = tokio::spawn(async move {
        let (mut s, _) = counting.accept().await.unwrap();
        loop {
            let mut prefix = [0u8; 4];
            if tokio::io::AsyncReadExt::read_exact(&mut s, &mut prefix)
                .await
                .is_err()
            {
                return;
            }
            let mut frame = vec![0u8; u32::from_be_bytes(prefix) as usize];
            tokio::io::AsyncReadExt::read_exact(&mut s, &mut frame)
                .await
                .unwrap();
            count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    });
    let mut config = ProxySettings::new("127.0.0.1:0".parse().unwrap(), upstream);
    config.listen_base = Some("127.0.0.1:0".parse().unwrap());
    config.max_in_flight = InFlight::new(3).unwrap();
    let proxy = Proxy::bind(config.build().unwrap()).await.unwrap();
    let mut c = Client::connect(proxy.local_addr()).await;
    let (stop, stopped) = oneshot::channel::<()>();
    let served = tokio::spawn(proxy.serve(async {
        let _ = stopped.await;
    }));
    for id in 0..8 {
        c.send_frame(&[&[0x03, 0xe7, 0, 0][..], &i32::to_be_bytes(id)].concat())
            .await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(received.load(std::sync::atomic::Ordering::SeqCst), 3);
    stop.send(()).unwrap();
    served.await.unwrap();
    broker.abort();
}
