//! Quotas enforced by the proxy in front of the fake cluster, as Kafka's broker enforces them:
//! the quota admin APIs answered by the proxy (and kept in its store), Produce and Fetch
//! throttled and their connections muted, controller mutations refused or throttled, and
//! connections over their IP's rate held unserved, then closed.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    alter_client_quotas_request, describe_client_quotas_request, AlterClientQuotasRequest,
    AlterClientQuotasResponse, ApiKey, ApiVersionsRequest, ApiVersionsResponse,
    CreateTopicsRequest, CreateTopicsResponse, DescribeClientQuotasRequest,
    DescribeClientQuotasResponse, FetchRequest, FetchResponse, MetadataRequest, MetadataResponse,
    ProduceRequest, ProduceResponse, ResponseHeader, TopicName,
};
use kafka_protocol::protocol::{Decodable, StrBytes};
use kquota::meter::MeterConfig;
use kquota::{Alteration, Engine, Entity, EntityName, QuotaKey};
use kquota_proxy::{HostPort, Proxy, ProxySettings};
use kquota_wire::Principal;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::client::{request, Client};
use crate::fake::{self, Cluster};

/// Kafka's CLUSTER_AUTHORIZATION_FAILED.
const CLUSTER_AUTHORIZATION_FAILED: i16 = 31;
/// Kafka's THROTTLING_QUOTA_EXCEEDED.
const THROTTLING_QUOTA_EXCEEDED: i16 = 89;
/// How much earlier than its throttle a muted connection's next request may reach the broker
/// (the proxy counts whole milliseconds).
const EARLY: Duration = Duration::from_millis(20);

/// Each test's bound: well under the 10 s a test may take.
async fn bounded<F: std::future::Future<Output = ()>>(test: F) {
    tokio::time::timeout(Duration::from_secs(9), test)
        .await
        .expect("the test finishes within 9 s");
}

/// A data directory of its own for one proxy (a redb store is locked by one process), removed
/// at the end.
struct DataDir(PathBuf);

impl DataDir {
    fn new(test: &str) -> DataDir {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let dir = std::env::temp_dir().join(format!(
            "kquota-proxy-it-{test}-{}-{nanos}",
            std::process::id()
        ));
        DataDir(dir)
    }
}

impl Drop for DataDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

struct Running {
    addr: SocketAddr,
    metrics: Option<SocketAddr>,
    engine: Arc<Engine>,
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
    let addr = proxy.local_addr();
    let metrics = proxy.metrics_addr();
    let engine = Arc::clone(proxy.engine());
    let (stop, stopped) = oneshot::channel();
    let served = tokio::spawn(proxy.serve(async {
        let _ = stopped.await;
    }));
    Running {
        addr,
        metrics,
        engine,
        cluster,
        stop: Some(stop),
        served,
    }
}

impl Running {
    async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        tokio::time::timeout(Duration::from_secs(8), self.served)
            .await
            .expect("the proxy stops")
            .unwrap();
    }

    fn broker_throttle(&self, ms: i32) {
        *self.cluster.control.throttle_ms.lock().unwrap() = Some(ms);
    }
}

/// Quota windows of `samples` samples of `ms` each.
fn windows(samples: u32, ms: u64) -> MeterConfig {
    MeterConfig::builder()
        .window_samples(samples)
        .window_size(Duration::from_millis(ms))
        .build()
        .unwrap()
}

fn named(name: &str) -> EntityName {
    EntityName::named(name).unwrap()
}

/// Applies `alteration` to the proxy's engine directly.
fn set(engine: &Engine, alteration: Alteration) {
    let results = engine.alter(&[alteration], false);
    assert!(results.iter().all(|r| r.error.is_none()), "{results:?}");
}

fn s(text: &str) -> StrBytes {
    StrBytes::from_string(text.to_owned())
}

fn topic(name: &str) -> TopicName {
    TopicName(s(name))
}

fn ms(d: Duration) -> u128 {
    d.as_millis()
}

// ---------------------------------------------------------------------------------------------
// 1. The quota admin APIs are the proxy's.

fn alter_entry(
    entity: &[(&str, Option<&str>)],
    key: &str,
    value: f64,
) -> alter_client_quotas_request::EntryData {
    alter_client_quotas_request::EntryData::default()
        .with_entity(
            entity
                .iter()
                .map(|(t, n)| {
                    alter_client_quotas_request::EntityData::default()
                        .with_entity_type(s(t))
                        .with_entity_name(n.map(s))
                })
                .collect(),
        )
        .with_ops(vec![alter_client_quotas_request::OpData::default()
            .with_key(s(key))
            .with_value(value)])
}

/// Sets `user`'s `producer_byte_rate` through the proxy (AlterClientQuotas v1); the entry's error code.
async fn alter_producer_rate(c: &mut Client, user: &str, value: f64) -> i16 {
    let alter = AlterClientQuotasRequest::default().with_entries(vec![alter_entry(
        &[("user", Some(user))],
        "producer_byte_rate",
        value,
    )]);
    let r: AlterClientQuotasResponse = c.call(ApiKey::AlterClientQuotas, 1, &alter).await;
    r.entries[0].error_code
}

fn describe_user(user: &str) -> DescribeClientQuotasRequest {
    DescribeClientQuotasRequest::default().with_components(vec![
        describe_client_quotas_request::ComponentData::default()
            .with_entity_type(s("user"))
            .with_match_type(0)
            .with_match(Some(s(user))),
    ])
}

/// The values DescribeClientQuotas gave for `{user=<user>}`.
fn described(r: &DescribeClientQuotasResponse, user: &str) -> Vec<(String, f64)> {
    assert_eq!(r.error_code, 0, "{:?}", r.error_message);
    let entries = r.entries.as_ref().expect("entries");
    entries
        .iter()
        .filter(|e| {
            e.entity.len() == 1
                && e.entity[0].entity_type.as_str() == "user"
                && e.entity[0].entity_name.as_deref() == Some(user)
        })
        .flat_map(|e| e.values.iter().map(|v| (v.key.to_string(), v.value)))
        .collect()
}

/// The admin APIs' requests the fake cluster received.
fn admin_requests_at_the_cluster(running: &Running) -> usize {
    running
        .cluster
        .control
        .all_received()
        .iter()
        .filter(|r| {
            r.api_key == ApiKey::DescribeClientQuotas as i16
                || r.api_key == ApiKey::AlterClientQuotas as i16
        })
        .count()
}

fn producer_limit(engine: &Engine, user: &str) -> Option<f64> {
    engine
        .resolve(user, "any-client")
        .get(QuotaKey::PRODUCER_BROKER_BPS)
        .map(|q| q.limit)
}

#[tokio::test]
async fn alter_and_describe_client_quotas_are_answered_by_the_proxy_and_kept() {
    bounded(async {
        let dir = DataDir::new("admin");
        let running = start(|c| {
            c.super_users = vec![Principal::user("ANONYMOUS")];
            c.data_dir = dir.0.clone();
            c.store = true;
        })
        .await;
        let mut c = Client::connect(running.addr).await;
        for version in [0, 1] {
            let value = 1_048_576.0 * f64::from(version + 1);
            let alter = AlterClientQuotasRequest::default().with_entries(vec![alter_entry(
                &[("user", Some("alice"))],
                "producer_byte_rate",
                value,
            )]);
            let r: AlterClientQuotasResponse =
                c.call(ApiKey::AlterClientQuotas, version, &alter).await;
            assert_eq!(r.entries.len(), 1, "v{version}");
            assert_eq!(
                (
                    r.entries[0].error_code,
                    r.entries[0].error_message.as_deref()
                ),
                (0, None),
                "v{version}"
            );
            assert_eq!(producer_limit(&running.engine, "alice"), Some(value));
            for describe_version in [0, 1] {
                let r: DescribeClientQuotasResponse = c
                    .call(
                        ApiKey::DescribeClientQuotas,
                        describe_version,
                        &describe_user("alice"),
                    )
                    .await;
                assert_eq!(
                    described(&r, "alice"),
                    vec![("producer_byte_rate".to_owned(), value)],
                    "AlterClientQuotas v{version}, DescribeClientQuotas v{describe_version}"
                );
            }
        }
        // Forwarded requests still reach the cluster on the same connection; the admin ones
        // never did.
        let _: MetadataResponse = c
            .call(ApiKey::Metadata, 12, &MetadataRequest::default())
            .await;
        assert_eq!(
            running.cluster.control.received(ApiKey::Metadata).len(),
            1,
            "the Metadata request reached the cluster"
        );
        assert_eq!(admin_requests_at_the_cluster(&running), 0);
        running.stop().await;

        // A restarted proxy on the same store still has the quota, and serves it.
        let running = start(|c| {
            c.describe_allow_anonymous = true;
            c.data_dir = dir.0.clone();
            c.store = true;
        })
        .await;
        assert_eq!(
            producer_limit(&running.engine, "alice"),
            Some(2_097_152.0),
            "the quota after a restart"
        );
        let mut c = Client::connect(running.addr).await;
        let r: DescribeClientQuotasResponse = c
            .call(ApiKey::DescribeClientQuotas, 1, &describe_user("alice"))
            .await;
        assert_eq!(
            described(&r, "alice"),
            vec![("producer_byte_rate".to_owned(), 2_097_152.0)]
        );
        assert_eq!(admin_requests_at_the_cluster(&running), 0);
        running.stop().await;
    })
    .await;
}

#[tokio::test]
async fn the_quota_admin_apis_are_answered_while_the_cluster_is_unreachable() {
    bounded(async {
        // A port nothing listens on: every connection to the "cluster" is refused.
        let gone = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let gone_addr = gone.local_addr().unwrap();
        drop(gone);
        let running = start(|c| {
            c.super_users = vec![Principal::user("ANONYMOUS")];
            c.upstream = Some(gone_addr.to_string().parse().unwrap());
        })
        .await;
        let mut c = Client::connect(running.addr).await;
        // A tool negotiates first (kafka-configs, kafka-quotas): the proxy answers for itself,
        // at every version, with its own admin APIs.
        for version in 0..=4 {
            let r: ApiVersionsResponse = c
                .call(ApiKey::ApiVersions, version, &ApiVersionsRequest::default())
                .await;
            assert_eq!(r.error_code, 0, "v{version}");
            assert_eq!(listed(&r, ApiKey::DescribeClientQuotas), Some((0, 1)));
            assert_eq!(listed(&r, ApiKey::AlterClientQuotas), Some((0, 1)));
            assert!(listed(&r, ApiKey::Metadata).is_some(), "v{version}");
        }
        assert_eq!(alter_producer_rate(&mut c, "alice", 4096.0).await, 0);
        let r: DescribeClientQuotasResponse = c
            .call(ApiKey::DescribeClientQuotas, 1, &describe_user("alice"))
            .await;
        assert_eq!(
            described(&r, "alice"),
            vec![("producer_byte_rate".to_owned(), 4096.0)]
        );
        // A request for the cluster closes the connection: the broker cannot be reached.
        c.send_frame(&request(
            ApiKey::Metadata,
            12,
            7,
            "c",
            &MetadataRequest::default(),
        ))
        .await;
        assert!(c.closed().await, "a request the cluster must answer");
        running.stop().await;
    })
    .await;
}

#[tokio::test]
async fn alter_client_quotas_without_super_users_is_refused_per_entry() {
    bounded(async {
        let dir = DataDir::new("refused");
        let running = start(|c| {
            c.data_dir = dir.0.clone();
            c.store = true;
            c.describe_allow_anonymous = true;
        })
        .await;
        let generation = running.engine.generation();
        let mut c = Client::connect(running.addr).await;
        let alter = AlterClientQuotasRequest::default().with_entries(vec![
            alter_entry(&[("user", Some("alice"))], "producer_byte_rate", 1_000.0),
            alter_entry(&[("client-id", None)], "consumer_byte_rate", 2_000.0),
        ]);
        for version in [0, 1] {
            let r: AlterClientQuotasResponse =
                c.call(ApiKey::AlterClientQuotas, version, &alter).await;
            let codes: Vec<i16> = r.entries.iter().map(|e| e.error_code).collect();
            assert_eq!(
                codes,
                vec![CLUSTER_AUTHORIZATION_FAILED; 2],
                "v{version}: one error per entry"
            );
        }
        assert_eq!(running.engine.generation(), generation, "nothing changed");
        assert_eq!(producer_limit(&running.engine, "alice"), None);
        let r: DescribeClientQuotasResponse = c
            .call(ApiKey::DescribeClientQuotas, 1, &describe_user("alice"))
            .await;
        assert_eq!(described(&r, "alice"), vec![]);
        assert_eq!(admin_requests_at_the_cluster(&running), 0);
        running.stop().await;
        // Nor was anything stored.
        let running = start(|c| {
            c.data_dir = dir.0.clone();
            c.store = true;
        })
        .await;
        assert_eq!(producer_limit(&running.engine, "alice"), None);
        running.stop().await;
    })
    .await;
}

/// The (min, max) versions of `key` an ApiVersions answer lists.
fn listed(r: &ApiVersionsResponse, key: ApiKey) -> Option<(i16, i16)> {
    r.api_keys
        .iter()
        .find(|a| a.api_key == key as i16)
        .map(|a| (a.min_version, a.max_version))
}

#[tokio::test]
async fn api_versions_caps_the_admin_apis_at_the_proxys_v1() {
    bounded(async {
        let running = start(|_| {}).await;
        let mut offered = fake::offered();
        offered.retain(|a| a.api_key != ApiKey::DescribeClientQuotas as i16);
        for (key, max) in [
            (ApiKey::DescribeClientQuotas, 3),
            (ApiKey::AlterClientQuotas, 2),
        ] {
            offered.push(
                ApiVersion::default()
                    .with_api_key(key as i16)
                    .with_min_version(0)
                    .with_max_version(max),
            );
        }
        *running.cluster.control.offered.lock().unwrap() = Some(offered);
        let mut c = Client::connect(running.addr).await;
        for version in 0..=4 {
            let r: ApiVersionsResponse = c
                .call(ApiKey::ApiVersions, version, &ApiVersionsRequest::default())
                .await;
            assert_eq!(
                listed(&r, ApiKey::DescribeClientQuotas),
                Some((0, 1)),
                "v{version}"
            );
            assert_eq!(
                listed(&r, ApiKey::AlterClientQuotas),
                Some((0, 1)),
                "v{version}"
            );
        }
        running.stop().await;
    })
    .await;
}

#[tokio::test]
async fn api_versions_lists_the_admin_apis_the_proxy_serves_whatever_the_cluster_lists() {
    bounded(async {
        let running = start(|c| c.super_users = vec![Principal::user("ANONYMOUS")]).await;
        let mut c = Client::connect(running.addr).await;
        // The proxy answers both itself, at v0-1, whatever the cluster behind it serves.
        assert_eq!(alter_producer_rate(&mut c, "alice", 1_000.0).await, 0);
        let d: DescribeClientQuotasResponse = c
            .call(ApiKey::DescribeClientQuotas, 1, &describe_user("alice"))
            .await;
        assert_eq!(described(&d, "alice").len(), 1);
        // A cluster that lists neither (older than Kafka 2.6, KIP-546), then one that lists
        // only their v0 (Kafka 2.6 and 2.7).
        let mut without = fake::offered();
        without.retain(|a| a.api_key != ApiKey::DescribeClientQuotas as i16);
        let mut v0 = without.clone();
        for key in [ApiKey::DescribeClientQuotas, ApiKey::AlterClientQuotas] {
            v0.push(
                ApiVersion::default()
                    .with_api_key(key as i16)
                    .with_min_version(0)
                    .with_max_version(0),
            );
        }
        for (cluster, offered) in [("lists neither", without), ("lists v0 only", v0)] {
            *running.cluster.control.offered.lock().unwrap() = Some(offered);
            let r: ApiVersionsResponse = c
                .call(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default())
                .await;
            for key in [ApiKey::DescribeClientQuotas, ApiKey::AlterClientQuotas] {
                assert_eq!(
                    listed(&r, key),
                    Some((0, 1)),
                    "{key:?}, served by the proxy at v0-1, when the cluster {cluster}"
                );
            }
        }
        running.stop().await;
    })
    .await;
}

// ---------------------------------------------------------------------------------------------
// 2. Produce over producer_byte_rate.

/// A Produce request carrying `records` bytes of records.
fn produce(records: usize) -> ProduceRequest {
    ProduceRequest::default()
        .with_acks(1)
        .with_timeout_ms(1_000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(topic("orders"))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(Bytes::from(vec![7u8; records])))])])
}

/// Kafka's throttle for `bytes` recorded at once in a fresh rate limited to `limit` per second,
/// whose window is padded to `(samples − 1) × window_ms`.
fn first_throttle(bytes: usize, limit: f64, samples: u32, window_ms: u64) -> i32 {
    let elapsed = f64::from(samples - 1) * window_ms as f64;
    let rate = bytes as f64 / (elapsed / 1000.0);
    ((rate - limit) / limit * elapsed).round() as i32
}

/// When the fake cluster received the request of `client_id` with `correlation_id`.
fn reached(running: &Running, client_id: &str, correlation_id: i32) -> Instant {
    running
        .cluster
        .control
        .all_received()
        .into_iter()
        .find(|r| r.client_id.as_deref() == Some(client_id) && r.correlation_id == correlation_id)
        .unwrap_or_else(|| panic!("{client_id}'s request {correlation_id} reached the cluster"))
        .at
}

#[tokio::test]
async fn produce_over_producer_byte_rate_is_throttled_and_its_connection_muted() {
    bounded(async {
        const LIMIT: f64 = 1_000.0;
        let running = start(|c| c.meter = windows(2, 500)).await;
        set(
            &running.engine,
            Alteration::new(&Entity::ClientId(named("prod-a"))).set("producer_byte_rate", LIMIT),
        );
        // The broker throttles too, less than the proxy.
        running.broker_throttle(40);
        let mut free = Client::connect_as(running.addr, "free").await;
        let _: MetadataResponse = free
            .call(ApiKey::Metadata, 12, &MetadataRequest::default())
            .await;

        let mut c = Client::connect_as(running.addr, "prod-a").await;
        let frame = request(ApiKey::Produce, 9, 1, "prod-a", &produce(1_200));
        let expected = first_throttle(frame.len(), LIMIT, 2, 500);
        assert!(
            expected > 500,
            "the request is well over the rate: {expected} ms"
        );
        c.send_frame(&frame).await;
        let (id, r): (i32, ProduceResponse) = c.recv_as(ApiKey::Produce, 9).await;
        let answered = Instant::now();
        assert_eq!(id, 1);
        assert_eq!(
            r.throttle_time_ms, expected,
            "the proxy's throttle (larger than the broker's 40 ms)"
        );

        // The next request on the connection waits out the throttle at the proxy...
        let next = request(
            ApiKey::Metadata,
            12,
            2,
            "prod-a",
            &MetadataRequest::default(),
        );
        c.send_frame(&next).await;
        // ...while another client's connection is served at once.
        let asked = Instant::now();
        let _: MetadataResponse = free
            .call(ApiKey::Metadata, 12, &MetadataRequest::default())
            .await;
        let free_took = asked.elapsed();
        assert!(
            ms(free_took) < (expected / 2) as u128,
            "an unthrottled client-id waited {free_took:?}"
        );
        let (id, _): (i32, MetadataResponse) = c.recv_as(ApiKey::Metadata, 12).await;
        assert_eq!(id, 2);
        let waited = reached(&running, "prod-a", 2).duration_since(answered);
        let throttle = Duration::from_millis(expected as u64);
        assert!(
            waited + EARLY >= throttle,
            "the next request reached the broker {waited:?} after the throttled answer, \
             before the throttle of {throttle:?} was over"
        );
        assert!(
            waited < throttle + Duration::from_millis(1_500),
            "the next request reached the broker only {waited:?} after a throttle of {throttle:?}"
        );
        running.stop().await;
    })
    .await;
}

#[tokio::test]
async fn produce_throttle_is_the_larger_of_the_proxys_and_the_brokers() {
    bounded(async {
        const LIMIT: f64 = 1_000.0;
        let running = start(|c| c.meter = windows(2, 500)).await;
        // ANONYMOUS, the user of every PLAINTEXT connection.
        set(
            &running.engine,
            Alteration::new(&Entity::User(named("ANONYMOUS"))).set("producer_byte_rate", LIMIT),
        );
        running.broker_throttle(4_000);
        let mut c = Client::connect_as(running.addr, "any").await;
        let frame = request(ApiKey::Produce, 9, 1, "any", &produce(1_200));
        let proxys = first_throttle(frame.len(), LIMIT, 2, 500);
        assert!((1..4_000).contains(&proxys), "{proxys}");
        c.send_frame(&frame).await;
        let (_, r): (i32, ProduceResponse) = c.recv_as(ApiKey::Produce, 9).await;
        let answered = Instant::now();
        assert_eq!(
            r.throttle_time_ms, 4_000,
            "the broker's throttle, the larger"
        );
        // The proxy still holds the connection for its own throttle.
        let next = request(ApiKey::Metadata, 12, 2, "any", &MetadataRequest::default());
        c.send_frame(&next).await;
        let _: (i32, MetadataResponse) = c.recv_as(ApiKey::Metadata, 12).await;
        let waited = reached(&running, "any", 2).duration_since(answered);
        assert!(
            waited + EARLY >= Duration::from_millis(proxys as u64),
            "the next request reached the broker {waited:?} after the answer, within the \
             proxy's throttle of {proxys} ms"
        );
        running.stop().await;
    })
    .await;
}

#[tokio::test]
async fn a_request_pipelined_behind_a_throttled_produce_waits_out_the_throttle() {
    // Kafka reads a connection's next request only once the previous one is answered, and not
    // while the connection is muted for a throttle: a request the client pipelined behind a
    // throttled Produce (as producers do, max.in.flight.requests.per.connection=5) is handled
    // after the throttle.
    bounded(async {
        const LIMIT: f64 = 1_000.0;
        let running = start(|c| c.meter = windows(2, 500)).await;
        set(
            &running.engine,
            Alteration::new(&Entity::ClientId(named("pipe"))).set("producer_byte_rate", LIMIT),
        );
        running.broker_throttle(0);
        let mut c = Client::connect_as(running.addr, "pipe").await;
        let first = request(ApiKey::Produce, 9, 1, "pipe", &produce(1_200));
        let expected = first_throttle(first.len(), LIMIT, 2, 500);
        let second = request(ApiKey::Produce, 9, 2, "pipe", &produce(10));
        let mut both = (first.len() as u32).to_be_bytes().to_vec();
        both.extend_from_slice(&first);
        both.extend_from_slice(&(second.len() as u32).to_be_bytes());
        both.extend_from_slice(&second);
        tokio::io::AsyncWriteExt::write_all(&mut c.stream, &both)
            .await
            .unwrap();
        let (_, r): (i32, ProduceResponse) = c.recv_as(ApiKey::Produce, 9).await;
        assert_eq!(r.throttle_time_ms, expected);
        let (_, _): (i32, ProduceResponse) = c.recv_as(ApiKey::Produce, 9).await;
        let gap = reached(&running, "pipe", 2).duration_since(reached(&running, "pipe", 1));
        assert!(
            gap + EARLY >= Duration::from_millis(expected as u64),
            "the pipelined request reached the broker {gap:?} after the throttled one; \
             Kafka handles it only after the throttle of {expected} ms"
        );
        running.stop().await;
    })
    .await;
}

/// What the proxy's metrics say `client_id`'s producer_byte_rate bucket recorded (0 before it has one).
async fn produce_recorded(running: &Running, client_id: &str) -> f64 {
    let addr = running.metrics.expect("started with --metrics-listen");
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    tokio::io::AsyncWriteExt::write_all(
        &mut s,
        b"GET /metrics HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
    )
    .await
    .unwrap();
    let mut text = String::new();
    tokio::io::AsyncReadExt::read_to_string(&mut s, &mut text)
        .await
        .unwrap();
    let series = format!(
        "kquota_proxy_bucket_recorded_total{{user=\"\",client_id=\"{client_id}\",ip=\"\",quota=\"producer_byte_rate\","
    );
    text.lines()
        .find(|l| l.starts_with(&series))
        .map_or(0.0, |l| l.rsplit(' ').next().unwrap().parse().unwrap())
}

#[tokio::test]
async fn a_produce_is_recorded_when_it_is_answered_and_the_connection_read_on_after() {
    // Kafka records a Produce when it answers it, and reads a connection's next request only
    // then; the proxy does the same while a producer quota applies.
    bounded(async {
        let running = start(|c| c.metrics_listen = Some("127.0.0.1:0".parse().unwrap())).await;
        running.broker_throttle(0);
        // The fake broker answers this client id 600 ms late.
        let id = fake::SLOW;
        set(
            &running.engine,
            Alteration::new(&Entity::ClientId(named(id))).set("producer_byte_rate", 1e9),
        );
        let mut c = Client::connect_as(running.addr, id).await;
        let mut both = Vec::new();
        let mut size = 0;
        for n in [1, 2] {
            let r = request(ApiKey::Produce, 9, n, id, &produce(10));
            size = r.len();
            both.extend_from_slice(&(r.len() as u32).to_be_bytes());
            both.extend_from_slice(&r);
        }
        tokio::io::AsyncWriteExt::write_all(&mut c.stream, &both)
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(
            produce_recorded(&running, id).await,
            0.0,
            "nothing recorded while the first answer is awaited"
        );
        for n in [1, 2] {
            let (correlation_id, r): (i32, ProduceResponse) = c.recv_as(ApiKey::Produce, 9).await;
            assert_eq!((correlation_id, r.throttle_time_ms), (n, 0));
        }
        assert_eq!(produce_recorded(&running, id).await, (2 * size) as f64);
        running.stop().await;
    })
    .await;
}

#[tokio::test]
async fn an_old_produce_version_gets_its_answer_after_the_throttle() {
    bounded(async {
        const LIMIT: f64 = 1_000.0;
        let running = start(|c| c.meter = windows(2, 500)).await;
        set(
            &running.engine,
            Alteration::new(&Entity::ClientId(named("old"))).set("producer_byte_rate", LIMIT),
        );
        running.broker_throttle(0);
        let mut c = Client::connect_as(running.addr, "old").await;
        // Produce v5: the client does not throttle itself (KIP-219), so Kafka holds the answer
        // back for the throttle time.
        let frame = request(ApiKey::Produce, 5, 1, "old", &produce(1_200));
        let expected = first_throttle(frame.len(), LIMIT, 2, 500);
        c.send_frame(&frame).await;
        let (_, r): (i32, ProduceResponse) = c.recv_as(ApiKey::Produce, 5).await;
        let delay = reached(&running, "old", 1).elapsed();
        assert_eq!(r.throttle_time_ms, expected);
        assert!(
            delay + EARLY >= Duration::from_millis(expected as u64),
            "the answer came {delay:?} after the broker had the request, throttle {expected} ms"
        );
        running.stop().await;
    })
    .await;
}

// ---------------------------------------------------------------------------------------------
// 3. Fetch over consumer_byte_rate.

fn fetch(session_id: i32, epoch: i32) -> FetchRequest {
    FetchRequest::default()
        .with_max_wait_ms(10)
        .with_min_bytes(1)
        .with_max_bytes(52_428_800)
        .with_session_id(session_id)
        .with_session_epoch(epoch)
}

fn records(r: &FetchResponse) -> Option<usize> {
    let partition = r.responses.first()?.partitions.first()?;
    partition.records.as_ref().map(|b| b.len())
}

#[tokio::test]
async fn fetch_over_consumer_byte_rate_is_answered_empty_and_its_max_bytes_capped() {
    bounded(async {
        const LIMIT: f64 = 3_000.0;
        const SAMPLES: u32 = 2;
        const WINDOW_MS: u64 = 1_000;
        // Kafka's getMaxValueInQuotaWindow: limit × (samples − 1) × window.
        let cap = (LIMIT * f64::from(SAMPLES - 1) * WINDOW_MS as f64 / 1000.0) as i32;
        let running = start(|c| c.meter = windows(SAMPLES, WINDOW_MS)).await;
        set(
            &running.engine,
            Alteration::new(&Entity::ClientId(named("cons"))).set("consumer_byte_rate", LIMIT),
        );
        *running.cluster.control.fetch_records.lock().unwrap() =
            Some(Bytes::from(vec![1u8; 2_000]));
        let mut c = Client::connect_as(running.addr, "cons").await;

        // A full fetch within the quota: the records.
        c.send(ApiKey::Fetch, 12, 1, &fetch(0, 0)).await;
        let answer = c.recv().await.expect("an answer");
        let size = answer.len();
        assert!(
            size as i32 <= cap && 2 * size as i32 > cap,
            "one answer ({size} bytes) fits the window ({cap}), two do not"
        );
        let mut body = answer.clone();
        ResponseHeader::decode(&mut body, ApiKey::Fetch.response_header_version(12)).unwrap();
        let first = FetchResponse::decode(&mut body, 12).unwrap();
        assert_eq!(first.throttle_time_ms, 0);
        assert_eq!(records(&first), Some(2_000));
        assert_eq!(first.session_id, fake::SESSION_ID);

        // Another full fetch at once: over the quota, answered empty without a session.
        c.send(ApiKey::Fetch, 12, 2, &fetch(0, 0)).await;
        let (id, full): (i32, FetchResponse) = c.recv_as(ApiKey::Fetch, 12).await;
        assert_eq!(id, 2);
        let most = (2.0 * size as f64 / LIMIT * 1000.0 - WINDOW_MS as f64).round() as i32;
        assert!(
            full.throttle_time_ms > 0 && full.throttle_time_ms <= most,
            "throttle {} ms, expected (0, {most}]",
            full.throttle_time_ms
        );
        assert_eq!(
            (full.error_code, full.session_id, full.responses.len()),
            (0, 0, 0),
            "a throttled full fetch: error 0, session id 0, no partitions"
        );

        // Once the throttle is over (the client waits it out), the records come.
        tokio::time::sleep(Duration::from_millis(full.throttle_time_ms as u64 + 50)).await;
        c.send(ApiKey::Fetch, 12, 3, &fetch(fake::SESSION_ID, 1))
            .await;
        let (_, third): (i32, FetchResponse) = c.recv_as(ApiKey::Fetch, 12).await;
        assert_eq!(
            (third.throttle_time_ms, records(&third)),
            (0, Some(2_000)),
            "the next fetch after the throttle gets the records (the throttled one was not charged)"
        );

        // An incremental fetch over the quota keeps its session.
        c.send(ApiKey::Fetch, 12, 4, &fetch(fake::SESSION_ID, 2))
            .await;
        let (_, incremental): (i32, FetchResponse) = c.recv_as(ApiKey::Fetch, 12).await;
        assert!(
            incremental.throttle_time_ms > 0,
            "the fourth fetch is throttled"
        );
        assert_eq!(
            (
                incremental.error_code,
                incremental.session_id,
                incremental.responses.len()
            ),
            (0, fake::SESSION_ID, 0),
            "a throttled incremental fetch: error 0, its session id, no partitions"
        );

        // The empty answer carries the broker's throttle when it is the larger.
        tokio::time::sleep(Duration::from_millis(
            incremental.throttle_time_ms as u64 + 50,
        ))
        .await;
        running.broker_throttle(6_000);
        c.send(ApiKey::Fetch, 12, 5, &fetch(fake::SESSION_ID, 3))
            .await;
        let (_, fifth): (i32, FetchResponse) = c.recv_as(ApiKey::Fetch, 12).await;
        assert_eq!(
            (
                fifth.throttle_time_ms,
                fifth.session_id,
                fifth.responses.len()
            ),
            (6_000, fake::SESSION_ID, 0),
            "a throttled fetch whose broker throttled longer"
        );

        // Every Fetch reached the broker with max_bytes capped to the quota window.
        let fetches = running.cluster.control.received(ApiKey::Fetch);
        let max_bytes: Vec<_> = fetches.iter().map(|r| r.fetch_max_bytes).collect();
        assert_eq!(max_bytes, vec![Some(cap); 5]);
        running.stop().await;
    })
    .await;
}

// ---------------------------------------------------------------------------------------------
// 4. controller_mutation_rate.

fn create_topics(topics: &[(&str, i32)]) -> CreateTopicsRequest {
    CreateTopicsRequest::default()
        .with_timeout_ms(1_000)
        .with_topics(
            topics
                .iter()
                .map(|(name, partitions)| {
                    CreatableTopic::default()
                        .with_name(topic(name))
                        .with_num_partitions(*partitions)
                        .with_replication_factor(1)
                })
                .collect(),
        )
}

const MUTATION_RATE: f64 = 2.0;

/// A proxy whose client id `admin` may mutate 2 partitions/s, with a burst of
/// rate × samples × window = 4, in front of a cluster that throttles every answer by 7 ms.
async fn mutation_proxy() -> Running {
    let running = start(|c| c.meter = windows(2, 1_000)).await;
    set(
        &running.engine,
        Alteration::new(&Entity::ClientId(named("admin")))
            .set("controller_mutation_rate", MUTATION_RATE),
    );
    running.broker_throttle(7);
    running
}

/// The (topic, error code) of each result.
fn topic_errors(r: &CreateTopicsResponse) -> Vec<(String, i16)> {
    r.topics
        .iter()
        .map(|t| (t.name.0.to_string(), t.error_code))
        .collect()
}

#[tokio::test]
async fn create_topics_v7_over_controller_mutation_rate_is_refused_and_v5_throttled() {
    bounded(async {
        let running = mutation_proxy().await;
        // 10 partitions from a full bucket of 4: accepted, 6 in debt (3 s at 2/s).
        let mut first = Client::connect_as(running.addr, "admin").await;
        let r: CreateTopicsResponse = first
            .call(ApiKey::CreateTopics, 7, &create_topics(&[("a", 10)]))
            .await;
        assert_eq!(topic_errors(&r), vec![("a".to_owned(), 0)], "accepted");
        assert_eq!(
            running.cluster.control.received(ApiKey::CreateTopics).len(),
            1
        );

        // The same client, in debt, on another connection: v7 is refused by the proxy, every
        // topic THROTTLING_QUOTA_EXCEEDED, with the time until the debt is paid.
        let mut second = Client::connect_as(running.addr, "admin").await;
        let r: CreateTopicsResponse = second
            .call(
                ApiKey::CreateTopics,
                7,
                &create_topics(&[("b", 1), ("c", 2)]),
            )
            .await;
        assert_eq!(
            topic_errors(&r),
            vec![
                ("b".to_owned(), THROTTLING_QUOTA_EXCEEDED),
                ("c".to_owned(), THROTTLING_QUOTA_EXCEEDED)
            ]
        );
        assert!(
            r.topics
                .iter()
                .all(|t| t.error_message.as_deref() == Some("The throttling quota has been exceeded.")),
            "{:?}",
            r.topics
        );
        assert!(
            (2_000..=3_000).contains(&r.throttle_time_ms),
            "refused with throttle {} ms, expected the debt of 6 partitions at 2/s, less the time since",
            r.throttle_time_ms
        );
        assert_eq!(
            running.cluster.control.received(ApiKey::CreateTopics).len(),
            1,
            "the refused request never reached the broker"
        );

        // v5 cannot be refused: it is forwarded, and its answer carries the proxy's throttle.
        let mut third = Client::connect_as(running.addr, "admin").await;
        let r: CreateTopicsResponse = third
            .call(ApiKey::CreateTopics, 5, &create_topics(&[("d", 2)]))
            .await;
        let at_broker: Vec<_> = running
            .cluster
            .control
            .received(ApiKey::CreateTopics)
            .iter()
            .map(|r| (r.node_id, r.version))
            .collect();
        assert_eq!(
            at_broker,
            vec![(1, 7), (1, 5)],
            "the bootstrap broker had v7, then v5"
        );
        assert_eq!(
            topic_errors(&r),
            vec![("d".to_owned(), 0)],
            "v5 is forwarded and created"
        );
        assert!(
            (3_000..=4_000).contains(&r.throttle_time_ms),
            "v5's answer throttle {} ms, expected the proxy's (8 partitions of debt at 2/s), \
             not the broker's 7",
            r.throttle_time_ms
        );
        running.stop().await;
    })
    .await;
}

#[tokio::test]
async fn a_create_topics_v7_taking_the_bucket_into_debt_is_not_throttled_as_in_kafka() {
    // Kafka's StrictControllerMutationQuota checks the bucket before recording and throttles
    // only a request it refuses: the request that takes a bucket with tokens into debt is
    // answered without a throttle of its own, and its connection is not muted; the next one is
    // refused at once.
    bounded(async {
        let running = mutation_proxy().await;
        let mut c = Client::connect_as(running.addr, "admin").await;
        let r: CreateTopicsResponse = c
            .call(ApiKey::CreateTopics, 7, &create_topics(&[("a", 10)]))
            .await;
        assert_eq!(topic_errors(&r), vec![("a".to_owned(), 0)], "accepted");
        assert_eq!(
            r.throttle_time_ms, 7,
            "the broker's throttle only: Kafka's strict quota does not throttle the request \
             that takes the bucket into debt"
        );
        let asked = Instant::now();
        let r: CreateTopicsResponse = c
            .call(ApiKey::CreateTopics, 7, &create_topics(&[("b", 1)]))
            .await;
        let took = asked.elapsed();
        assert!(
            took < Duration::from_millis(1_000),
            "the next request on the connection was answered {took:?} later: the connection \
             was muted"
        );
        assert_eq!(
            topic_errors(&r),
            vec![("b".to_owned(), THROTTLING_QUOTA_EXCEEDED)],
            "the next request, from a bucket in debt, is refused"
        );
        assert!(r.throttle_time_ms > 2_000, "{}", r.throttle_time_ms);
        running.stop().await;
    })
    .await;
}

#[tokio::test]
async fn create_topics_v7_refuses_each_topic_past_the_debt_as_kafkas_controller() {
    // Kafka's controller applies the quota topic by topic (ReplicationControlManager.createTopic):
    // a topic is created while the bucket is not in debt, and each topic after the one that
    // took it into debt is refused, with the throttle of the debt.
    bounded(async {
        let running = mutation_proxy().await;
        let mut c = Client::connect_as(running.addr, "admin").await;
        let r: CreateTopicsResponse = c
            .call(
                ApiKey::CreateTopics,
                7,
                &create_topics(&[("a", 10), ("b", 1)]),
            )
            .await;
        assert_eq!(
            topic_errors(&r),
            vec![
                ("a".to_owned(), 0),
                ("b".to_owned(), THROTTLING_QUOTA_EXCEEDED)
            ],
            "a (10 partitions, from 4 tokens) is created; b, after the bucket is in debt, is not"
        );
        let created: Vec<Vec<String>> = running
            .cluster
            .control
            .received(ApiKey::CreateTopics)
            .into_iter()
            .map(|r| r.topics)
            .collect();
        assert_eq!(
            created,
            vec![vec!["a".to_owned()]],
            "the broker is asked for a only"
        );
        assert!(
            (2_000..=3_000).contains(&r.throttle_time_ms),
            "throttle {} ms, expected b's refusal's: 6 partitions of debt at 2/s",
            r.throttle_time_ms
        );
        running.stop().await;
    })
    .await;
}

// ---------------------------------------------------------------------------------------------
// 5. connection_creation_rate.

/// Sends ApiVersions and says whether it was answered.
async fn served(c: &mut Client) -> bool {
    c.send(ApiKey::ApiVersions, 3, 9, &ApiVersionsRequest::default())
        .await;
    c.recv().await.is_some()
}

#[tokio::test]
async fn a_connection_over_connection_creation_rate_is_held_unserved_then_closed() {
    bounded(async {
        // 1 connection/s over a window padded to 2 s: two connections fit, the third is over
        // by half the limit, 1 s.
        let running = start(|c| c.meter = windows(2, 2_000)).await;
        set(
            &running.engine,
            Alteration::raw([("ip", None::<String>)]).set("connection_creation_rate", 1.0),
        );
        let opened = Instant::now();
        let mut one = Client::connect(running.addr).await;
        assert!(served(&mut one).await);
        let mut two = Client::connect(running.addr).await;
        assert!(served(&mut two).await);

        let mut three = Client::connect(running.addr).await;
        three
            .send(ApiKey::ApiVersions, 3, 9, &ApiVersionsRequest::default())
            .await;
        assert!(three.closed().await, "no answer, then closed");
        let closed = opened.elapsed();
        assert!(
            closed + EARLY >= Duration::from_secs(1),
            "the throttled connection was closed {closed:?} after the first, before its throttle"
        );
        assert!(
            closed < Duration::from_secs(3),
            "the throttled connection was closed only {closed:?} after the first"
        );
        // The earlier connections still work.
        assert!(served(&mut one).await);
        assert!(served(&mut two).await);
        // The throttled connection was not counted: once the window has room, one more is served.
        tokio::time::sleep(Duration::from_millis(150)).await;
        let mut four = Client::connect(running.addr).await;
        assert!(
            served(&mut four).await,
            "a connection after the throttle is served"
        );
        running.stop().await;
    })
    .await;
}

/// SASL PLAIN through the proxy as `user` with `password`: the broker's answer's error code.
async fn authenticate(c: &mut Client, user: &str, password: &str) -> i16 {
    use kafka_protocol::messages::{
        SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest,
        SaslHandshakeResponse,
    };
    let shake: SaslHandshakeResponse = c
        .call(
            ApiKey::SaslHandshake,
            1,
            &SaslHandshakeRequest::default().with_mechanism(s("PLAIN")),
        )
        .await;
    assert_eq!(shake.error_code, 0);
    let token = format!("\0{user}\0{password}");
    let answer: SaslAuthenticateResponse = c
        .call(
            ApiKey::SaslAuthenticate,
            2,
            &SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(token)),
        )
        .await;
    answer.error_code
}

#[tokio::test]
async fn the_user_is_the_one_the_broker_authenticated_never_the_one_merely_claimed() {
    bounded(async {
        let running = start(|c| c.meter = windows(2, 500)).await;
        // alice is held to 1,000 bytes/s; an unauthenticated client (ANONYMOUS) is not limited.
        set(
            &running.engine,
            Alteration::new(&Entity::User(named("alice"))).set("producer_byte_rate", 1_000.0),
        );
        let frame = request(ApiKey::Produce, 9, 3, "app", &produce(1_200));

        // Claiming to be alice with a wrong password: the broker refuses, the user stays ANONYMOUS.
        let mut liar = Client::connect_as(running.addr, "app").await;
        assert_eq!(
            authenticate(&mut liar, "alice", "guess").await,
            fake::SASL_AUTHENTICATION_FAILED
        );
        liar.send_frame(&frame).await;
        let (_, r): (i32, ProduceResponse) = liar.recv_as(ApiKey::Produce, 9).await;
        assert_eq!(
            r.throttle_time_ms, 1,
            "only the broker's own throttle (node 1): alice's quota does not apply"
        );

        // alice with her password: the broker accepts, and alice's quota applies.
        let mut alice = Client::connect_as(running.addr, "app").await;
        assert_eq!(authenticate(&mut alice, "alice", fake::PASSWORD).await, 0);
        alice.send_frame(&frame).await;
        let (_, r): (i32, ProduceResponse) = alice.recv_as(ApiKey::Produce, 9).await;
        assert_eq!(
            r.throttle_time_ms,
            first_throttle(frame.len(), 1_000.0, 2, 500),
            "alice's producer_byte_rate, as Kafka computes the throttle"
        );
        running.stop().await;
    })
    .await;
}

/// The frames of a SASL PLAIN exchange as `user` with the right password: SaslHandshake v1
/// (correlation id 1), then SaslAuthenticate v2 (2).
fn plain_exchange(user: &str, client_id: &str) -> [Vec<u8>; 2] {
    use kafka_protocol::messages::{SaslAuthenticateRequest, SaslHandshakeRequest};
    let shake = request(
        ApiKey::SaslHandshake,
        1,
        1,
        client_id,
        &SaslHandshakeRequest::default().with_mechanism(s("PLAIN")),
    );
    let token = format!("\0{user}\0{}", fake::PASSWORD);
    let auth = request(
        ApiKey::SaslAuthenticate,
        2,
        2,
        client_id,
        &SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(token)),
    );
    [shake, auth]
}

/// Sends `frames` in one write, each with its size prefix, without waiting for any answer.
async fn pipeline(c: &mut Client, frames: &[&[u8]]) {
    use tokio::io::AsyncWriteExt;
    let mut out = Vec::new();
    for f in frames {
        out.extend_from_slice(&(f.len() as u32).to_be_bytes());
        out.extend_from_slice(f);
    }
    c.stream.write_all(&out).await.unwrap();
}

#[tokio::test]
async fn a_produce_pipelined_behind_the_last_sasl_step_is_metered_as_the_user_it_authenticated() {
    bounded(async {
        let running = start(|c| c.meter = windows(2, 500)).await;
        set(
            &running.engine,
            Alteration::new(&Entity::User(named("alice"))).set("producer_byte_rate", 1_000.0),
        );
        let produce_frame = request(ApiKey::Produce, 9, 3, "app", &produce(1_200));
        let alice_throttle = first_throttle(produce_frame.len(), 1_000.0, 2, 500);
        let [shake, auth] = plain_exchange("alice", "app");
        // Every order in which a client can pipeline the Produce: behind the handshake and the
        // step together, behind the step alone, and (a second Produce) behind its own first one.
        for split in [0, 1] {
            let mut c = Client::connect_as(running.addr, "app").await;
            if split == 1 {
                pipeline(&mut c, &[&shake]).await;
                let (_, r): (i32, kafka_protocol::messages::SaslHandshakeResponse) =
                    c.recv_as(ApiKey::SaslHandshake, 1).await;
                assert_eq!(r.error_code, 0);
                pipeline(&mut c, &[&auth, &produce_frame]).await;
            } else {
                pipeline(&mut c, &[&shake, &auth, &produce_frame]).await;
                let (_, r): (i32, kafka_protocol::messages::SaslHandshakeResponse) =
                    c.recv_as(ApiKey::SaslHandshake, 1).await;
                assert_eq!(r.error_code, 0);
            }
            let (_, r): (i32, kafka_protocol::messages::SaslAuthenticateResponse) =
                c.recv_as(ApiKey::SaslAuthenticate, 2).await;
            assert_eq!(r.error_code, 0, "the broker authenticated alice");
            let (id, r): (i32, ProduceResponse) = c.recv_as(ApiKey::Produce, 9).await;
            assert_eq!(id, 3);
            assert!(
                alice_throttle > 1 && r.throttle_time_ms >= alice_throttle,
                "split {split}: the Produce pipelined behind SaslAuthenticate got {} ms; alice's \
                 quota throttles it {alice_throttle} ms, ANONYMOUS gets the broker's own 1 ms",
                r.throttle_time_ms
            );
        }
        running.stop().await;
    })
    .await;
}

#[tokio::test]
async fn a_produce_pipelined_behind_a_re_authentication_is_metered_as_the_new_user() {
    bounded(async {
        let running = start(|c| c.meter = windows(2, 500)).await;
        // alice is not limited; bob is held to 1,000 bytes/s.
        set(
            &running.engine,
            Alteration::new(&Entity::User(named("bob"))).set("producer_byte_rate", 1_000.0),
        );
        let produce_frame = request(ApiKey::Produce, 9, 3, "app", &produce(1_200));
        let bob_throttle = first_throttle(produce_frame.len(), 1_000.0, 2, 500);
        let mut c = Client::connect_as(running.addr, "app").await;
        let [shake, auth] = plain_exchange("alice", "app");
        pipeline(&mut c, &[&shake, &auth]).await;
        for _ in 0..2 {
            c.recv().await.expect("alice's exchange answered");
        }
        // KIP-368: the client authenticates again, as bob, with a Produce right behind it.
        let [shake, auth] = plain_exchange("bob", "app");
        pipeline(&mut c, &[&shake, &auth, &produce_frame]).await;
        for _ in 0..2 {
            c.recv().await.expect("bob's exchange answered");
        }
        let (id, r): (i32, ProduceResponse) = c.recv_as(ApiKey::Produce, 9).await;
        assert_eq!(id, 3);
        assert_eq!(
            r.throttle_time_ms, bob_throttle,
            "the Produce behind the re-authentication is bob's"
        );
        running.stop().await;
    })
    .await;
}

#[tokio::test]
async fn a_produce_pipelined_between_the_handshake_and_its_step_is_not_the_users() {
    bounded(async {
        let running = start(|c| c.meter = windows(2, 500)).await;
        set(
            &running.engine,
            Alteration::new(&Entity::User(named("alice"))).set("producer_byte_rate", 1_000.0),
        );
        // Before the step that authenticates, the connection is ANONYMOUS's, as the broker has
        // it (a real broker closes a connection that sends a Produce mid-exchange; this fake
        // answers it): the Produce is ANONYMOUS's, and alice's bucket is untouched.
        let produce_frame = request(ApiKey::Produce, 9, 3, "app", &produce(1_200));
        let [shake, auth] = plain_exchange("alice", "app");
        let mut c = Client::connect_as(running.addr, "app").await;
        pipeline(&mut c, &[&shake, &produce_frame, &auth]).await;
        c.recv().await.expect("the handshake answered");
        let (_, r): (i32, ProduceResponse) = c.recv_as(ApiKey::Produce, 9).await;
        assert_eq!(
            r.throttle_time_ms, 1,
            "only the broker's own throttle (node 1)"
        );
        let (_, r): (i32, kafka_protocol::messages::SaslAuthenticateResponse) =
            c.recv_as(ApiKey::SaslAuthenticate, 2).await;
        assert_eq!(r.error_code, 0);
        // Now alice's: her first Produce meets a fresh bucket.
        let frame = request(ApiKey::Produce, 9, 4, "app", &produce(1_200));
        c.send_frame(&frame).await;
        let (_, r): (i32, ProduceResponse) = c.recv_as(ApiKey::Produce, 9).await;
        assert_eq!(
            r.throttle_time_ms,
            first_throttle(frame.len(), 1_000.0, 2, 500)
        );
        running.stop().await;
    })
    .await;
}
