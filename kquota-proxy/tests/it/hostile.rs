//! What a hostile peer can cost the proxy, each cost bounded by a setting: idle sockets by
//! `max.connections` (the unproven giving way) and by the descriptor limit, clients that never
//! read by the buffer memory, bad frames by the per-peer log guard, and an alteration's fsync by
//! keeping it off the async workers. Some run the `kquota-proxy` binary, so that its own start
//! (the descriptor limit, the log) is what is measured.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    alter_client_quotas_request, AlterClientQuotasRequest, AlterClientQuotasResponse, ApiKey,
    ApiVersionsRequest, ApiVersionsResponse, FetchRequest, FetchResponse, ProduceRequest,
    ProduceResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use kquota_proxy::{HostPort, Proxy, ProxySettings, Timeout};
use kquota_wire::Principal;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::client::{request, Client};
use crate::fake::Cluster;

fn s(text: &str) -> StrBytes {
    StrBytes::from_string(text.to_owned())
}

/// A Produce of a few bytes to `orders`.
fn produce() -> ProduceRequest {
    ProduceRequest::default()
        .with_acks(1)
        .with_timeout_ms(1_000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(s("orders")))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(Bytes::from_static(b"a record")))])])
}

/// Sets alice's `producer_byte_rate` through the proxy; the entry's error code.
fn alteration(user: &str) -> AlterClientQuotasRequest {
    AlterClientQuotasRequest::default().with_entries(vec![
        alter_client_quotas_request::EntryData::default()
            .with_entity(vec![alter_client_quotas_request::EntityData::default()
                .with_entity_type(s("user"))
                .with_entity_name(Some(s(user)))])
            .with_ops(vec![alter_client_quotas_request::OpData::default()
                .with_key(s("producer_byte_rate"))
                .with_value(1_048_576.0)]),
    ])
}

/// A producer and a super user (ANONYMOUS is one in these tests) are both served through the
/// proxy at `addr`: a Produce answered by the cluster, an alteration by the proxy.
async fn producer_and_super_user_served(addr: SocketAddr) {
    let mut producer = Client::connect_as(addr, "producer").await;
    // `call` checks that the answer is this request's.
    let _: ProduceResponse = producer.call(ApiKey::Produce, 9, &produce()).await;
    let mut admin = Client::connect_as(addr, "admin").await;
    let r: AlterClientQuotasResponse = admin
        .call(ApiKey::AlterClientQuotas, 1, &alteration("alice"))
        .await;
    assert_eq!(r.entries[0].error_code, 0, "the super user's alteration");
}

/// Opens `n` sockets to `addr` that send nothing.
async fn idle_sockets(addr: SocketAddr, n: usize) -> Vec<TcpStream> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        out.push(TcpStream::connect(addr).await.expect("connect"));
    }
    out
}

async fn in_process(tweak: impl FnOnce(&mut ProxySettings)) -> (Cluster, SocketAddr) {
    let cluster = Cluster::start(1).await;
    let upstream: HostPort = cluster.bootstrap().to_string().parse().unwrap();
    let mut config = ProxySettings::new("127.0.0.1:0".parse().unwrap(), upstream);
    config.listen_base = Some("127.0.0.1:0".parse().unwrap());
    config.super_users = vec![Principal::user("ANONYMOUS")];
    tweak(&mut config);
    let proxy = Proxy::bind(config.build().unwrap()).await.unwrap();
    let addr = proxy.local_addr();
    tokio::spawn(proxy.serve(std::future::pending()));
    (cluster, addr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_max_connections_idle_sockets_give_way_to_a_producer_and_a_super_user() {
    tokio::time::timeout(Duration::from_secs(20), async {
        let (_cluster, addr) =
            in_process(|c| c.max_connections = NonZeroUsize::new(50).unwrap()).await;
        // More idle sockets than there are slots: each new one beyond 50 makes the oldest
        // unproven one close.
        let _idle = idle_sockets(addr, 80).await;
        producer_and_super_user_served(addr).await;
        // The producer proved itself (the broker answered its Produce): it stays open while
        // newer idle sockets keep arriving, and is served again.
        let mut producer = Client::connect_as(addr, "producer").await;
        let _: ProduceResponse = producer.call(ApiKey::Produce, 9, &produce()).await;
        let _more = idle_sockets(addr, 80).await;
        // A proven connection does not give way.
        let _: ProduceResponse = producer.call(ApiKey::Produce, 9, &produce()).await;
    })
    .await
    .expect("within 20 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_thousand_idle_sockets_leave_a_producer_and_a_super_user_served() {
    // 5,000 sockets here and 5,000 in the proxy: this process needs room for both.
    let limit = kquota_host::raise_fd_limit().unwrap_or(0);
    assert!(
        limit >= 10_400,
        "the open-files limit ({limit}) must allow 10,400 descriptors for this test"
    );
    tokio::time::timeout(Duration::from_secs(60), async {
        let (_cluster, addr) = in_process(|_| {}).await;
        let started = Instant::now();
        let _idle = idle_sockets(addr, 5_000).await;
        let opened = started.elapsed();
        let served = Instant::now();
        producer_and_super_user_served(addr).await;
        let served = served.elapsed();
        eprintln!("5,000 idle sockets opened in {opened:?}; a producer and a super user then served in {served:?}");
        assert!(served < Duration::from_secs(2), "served in {served:?}");
    })
    .await
    .expect("within 60 s");
}

/// A `kquota-proxy` binary in front of a fake cluster, its log collected.
struct Binary {
    child: Child,
    addr: SocketAddr,
    log: Arc<Mutex<Vec<String>>>,
}

impl Binary {
    /// Starts it with `args`, under an open-files limit of `nofile` if given, and waits (up to
    /// 30 s) until it serves.
    fn start(upstream: SocketAddr, args: &[&str], nofile: Option<u32>) -> Binary {
        let bin = env!("CARGO_BIN_EXE_kquota-proxy");
        let mut all: Vec<String> = vec![
            "--upstream".into(),
            upstream.to_string(),
            "--listen".into(),
            "127.0.0.1:0".into(),
            "--listen-base".into(),
            "127.0.0.1:0".into(),
            "--no-store".into(),
            "--super-users".into(),
            "User:ANONYMOUS".into(),
        ];
        all.extend(args.iter().map(|a| (*a).to_owned()));
        let mut command = match nofile {
            // The soft and the hard limit: the proxy raises its soft limit to the hard one.
            Some(n) => {
                let mut c = Command::new("bash");
                c.arg("-c")
                    .arg(format!("ulimit -n {n} && exec \"$0\" \"$@\""))
                    .arg(bin)
                    .args(&all);
                c
            }
            None => {
                let mut c = Command::new(bin);
                c.args(&all);
                c
            }
        };
        let mut child = command
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start kquota-proxy");
        let log = Arc::new(Mutex::new(Vec::new()));
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        {
            let log = Arc::clone(&log);
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                    if let Some(at) = line.find("listen=") {
                        let addr = line[at + 7..].split_whitespace().next().unwrap_or("");
                        if let Ok(addr) = addr.parse::<SocketAddr>() {
                            let _ = tx.send(addr);
                        }
                    }
                    log.lock().unwrap().push(line);
                }
            });
        }
        let addr = rx
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|_| panic!("kquota-proxy did not start: {:?}", log.lock().unwrap()));
        Binary { child, addr, log }
    }

    /// Its resident memory now, in bytes.
    fn rss(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        let kb: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmRSS");
        kb * 1024
    }

    fn lines(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }
}

impl Drop for Binary {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_a_descriptor_limit_of_1024_eleven_hundred_idle_sockets_leave_a_producer_and_a_super_user_served(
) {
    let cluster = Cluster::start(1).await;
    let proxy = Binary::start(cluster.bootstrap(), &[], Some(1024));
    tokio::time::timeout(Duration::from_secs(60), async {
        let _idle = idle_sockets(proxy.addr, 1_100).await;
        producer_and_super_user_served(proxy.addr).await;
    })
    .await
    .expect("within 60 s");
    let lines = proxy.lines();
    assert!(
        lines.iter().any(|l| l.contains("max.connections lowered")),
        "the proxy says it lowered max.connections to its descriptors: {lines:#?}"
    );
    let accept_failures = lines.iter().filter(|l| l.contains("accept failed")).count();
    assert!(
        accept_failures <= 2,
        "accept failures are logged at most once a second: {accept_failures}"
    );
}

/// How much the proxy grows while 64 connections each pipeline four Fetches (at `version`) of
/// 8 MiB answers and never read (2 GiB owed); then a client that reads is served.
async fn never_reading(version: i16) -> u64 {
    const ANSWER: usize = 8 * 1024 * 1024;
    let cluster = Cluster::start(1).await;
    *cluster.control.fetch_records.lock().unwrap() = Some(Bytes::from(vec![7u8; ANSWER]));
    let proxy = Binary::start(cluster.bootstrap(), &[], None);
    let before = proxy.rss();
    let fetch = request(
        ApiKey::Fetch,
        version,
        1,
        "reader",
        &FetchRequest::default()
            .with_max_wait_ms(10)
            .with_min_bytes(1)
            .with_max_bytes(52_428_800),
    );
    let mut framed = (fetch.len() as u32).to_be_bytes().to_vec();
    framed.extend_from_slice(&fetch);
    let mut sockets = Vec::new();
    for _ in 0..64 {
        let mut c = TcpStream::connect(proxy.addr).await.unwrap();
        for _ in 0..4 {
            c.write_all(&framed).await.unwrap();
        }
        sockets.push(c);
    }
    // Until the proxy's memory stops growing.
    let mut peak = proxy.rss();
    let mut last_growth = Instant::now();
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline && last_growth.elapsed() < Duration::from_secs(3) {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let now = proxy.rss();
        if now > peak + 1024 * 1024 {
            last_growth = Instant::now();
        }
        peak = peak.max(now);
    }
    // Others are still served, a reader's 8 MiB answer included.
    let mut reader = Client::connect_as(proxy.addr, "reader").await;
    let _: ApiVersionsResponse = reader
        .call(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default())
        .await;
    let answer: FetchResponse = reader
        .call(
            ApiKey::Fetch,
            version,
            &FetchRequest::default()
                .with_max_wait_ms(10)
                .with_max_bytes(52_428_800),
        )
        .await;
    let records = answer.responses[0].partitions[0].records.as_ref().unwrap();
    assert_eq!(records.len(), ANSWER);
    drop(sockets);
    peak.saturating_sub(before)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_four_connections_that_never_read_cost_a_chunk_each_not_their_answers() {
    const BUDGET: u64 = kquota_proxy::DEFAULT_BUFFER_MEMORY as u64;
    // v12 answers are passed on as they come; v17 ones through the walk of their endpoints.
    for version in [12, 17] {
        let grown = never_reading(version).await;
        eprintln!(
            "64 connections that never read Fetch v{version} answers: the proxy grew {} MiB \
             (buffer memory {} MiB; 2048 MiB owed)",
            grown >> 20,
            BUDGET >> 20
        );
        // A 64 KiB chunk each while their answers stall (4 MiB), and what the allocator and
        // the runtime keep around it: nowhere near the answers, nor the buffer memory.
        assert!(
            grown <= 32 << 20,
            "Fetch v{version}: the proxy grew {} MiB for 64 connections that never read",
            grown >> 20
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_peers_bad_frames_cost_a_few_log_lines_a_second() {
    let cluster = Cluster::start(1).await;
    let proxy = Binary::start(cluster.bootstrap(), &[], None);
    let before = proxy.lines().len();
    let started = Instant::now();
    let mut sent = 0;
    // A frame larger than socket.request.max.bytes, and one too short for its header, over and
    // over, each on a new connection (each closes its connection with a warning).
    while started.elapsed() < Duration::from_secs(3) {
        let mut c = TcpStream::connect(proxy.addr).await.unwrap();
        let bad: &[u8] = if sent % 2 == 0 {
            &[0x7f, 0xff, 0xff, 0xff]
        } else {
            &[0, 0, 0, 2, 0, 1]
        };
        let _ = c.write_all(bad).await;
        let mut buf = [0u8; 1];
        let _ = tokio::io::AsyncReadExt::read(&mut c, &mut buf).await;
        sent += 1;
    }
    let seconds = started.elapsed().as_secs_f64();
    // What is held back is summed up at the end of each second.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let lines = proxy.lines();
    let written = lines.len() - before;
    eprintln!(
        "{sent} bad frames in {seconds:.1} s wrote {written} log lines:\n{}",
        lines[before..].join("\n")
    );
    assert!(sent > 200, "only {sent} bad frames were sent");
    // kquota_host::LINES_PER_PEER lines and one summary per second, and one more second for
    // the summary of the last.
    let bound = ((seconds.ceil() + 2.0) as usize) * (kquota_host::LINES_PER_PEER + 1);
    assert!(
        written <= bound,
        "{written} lines for {sent} bad frames in {seconds:.1} s (at most {bound}): {:#?}",
        &lines[before..]
    );
    assert!(
        lines[before..]
            .iter()
            .any(|l| l.contains("more lines like these")),
        "what was held back is counted: {:#?}",
        &lines[before..]
    );
}

/// A data directory of its own, removed at the end.
struct DataDir(std::path::PathBuf);

impl Drop for DataDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Reads one answer's bytes unless none has arrived: whether one had.
fn answered_yet(c: &Client) -> bool {
    let mut byte = [0u8; 1];
    matches!(c.stream.try_read(&mut byte), Ok(n) if n > 0)
}

// One worker thread: an alteration committed on it would hold up every other connection.
#[tokio::test(flavor = "current_thread")]
async fn an_alteration_never_blocks_an_async_worker() {
    let dir = DataDir(std::env::temp_dir().join(format!(
        "kquota-proxy-it-worker-{}-{:?}",
        std::process::id(),
        Instant::now()
    )));
    let (_cluster, addr) = in_process(|c| {
        c.data_dir = dir.0.clone();
        c.store = true;
    })
    .await;
    let mut other = Client::connect_as(addr, "other").await;
    let _: ApiVersionsResponse = other
        .call(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default())
        .await;
    // A large alteration: validated, applied and committed to the store before its answer.
    let entries = (0..ENTITIES)
        .map(|i| {
            alter_client_quotas_request::EntryData::default()
                .with_entity(vec![alter_client_quotas_request::EntityData::default()
                    .with_entity_type(s("user"))
                    .with_entity_name(Some(s(&format!("user-{i}"))))])
                .with_ops(vec![alter_client_quotas_request::OpData::default()
                    .with_key(s("producer_byte_rate"))
                    .with_value(1_000.0 + f64::from(i))])
        })
        .collect();
    let mut admin = Client::connect_as(addr, "admin").await;
    let started = Instant::now();
    admin
        .send(
            ApiKey::AlterClientQuotas,
            1,
            7,
            &AlterClientQuotasRequest::default().with_entries(entries),
        )
        .await;
    // Long enough for the proxy to have read it and begun.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let _: ApiVersionsResponse = other
        .call(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default())
        .await;
    let other_answered = started.elapsed();
    assert!(
        !answered_yet(&admin),
        "the alteration was answered before another connection's ApiVersions ({other_answered:?}): \
         make it larger, or it ran on the async worker"
    );
    let r: AlterClientQuotasResponse = admin.recv_as(ApiKey::AlterClientQuotas, 1).await.1;
    let altered = started.elapsed();
    assert!(r.entries.iter().all(|e| e.error_code == 0));
    eprintln!(
        "another connection answered after {other_answered:?}, the alteration after {altered:?}"
    );
}

/// Entities in the large alteration: enough that applying and committing them takes well over
/// the 100 ms the test waits.
const ENTITIES: i32 = 10_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_authorized_quota_admin_request_proves_its_connection() {
    tokio::time::timeout(Duration::from_secs(20), async {
        let (_cluster, addr) =
            in_process(|c| c.connection_grace = Timeout::from_millis(300).unwrap()).await;
        // ANONYMOUS is a super user here: its alteration proves the connection, which then
        // outlives the grace (an alteration may wait for the configuration log longer than it).
        let mut admin = Client::connect_as(addr, "admin").await;
        let r: AlterClientQuotasResponse = admin
            .call(ApiKey::AlterClientQuotas, 1, &alteration("alice"))
            .await;
        assert_eq!(r.entries[0].error_code, 0);
        tokio::time::sleep(Duration::from_millis(900)).await;
        let r: AlterClientQuotasResponse = admin
            .call(ApiKey::AlterClientQuotas, 1, &alteration("bob"))
            .await;
        assert_eq!(r.entries[0].error_code, 0, "still open after the grace");
        // A socket that proves nothing is closed once the grace is over.
        let mut idle = Client::connect_as(addr, "idle").await;
        assert!(
            idle.closed().await,
            "an unproven connection is closed after the grace"
        );
    })
    .await
    .expect("within 20 s");
}
