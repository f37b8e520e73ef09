//! `Membership` and `UsageShare` against a real Kafka broker: run by
//! `kquota-cluster/tests/kafka/run.sh`, which starts Apache Kafka and sets
//! `KQUOTA_CLUSTER_BOOTSTRAP` (and the commands that stop the broker and start it again). Without
//! them every test fails: this target is not part of the default `cargo test`, so when it runs, it
//! was asked for.
//!
//! One instance runs in a child process (this binary again, running `child_member`), so that it
//! can be killed without a tombstone, as a crash would.

use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kquota::meter::{BpsSplit, BucketOwner, Meter, MeterConfig};
use kquota::{Alteration, Engine, Entity, EntityName, QuotaKey};
use kquota_cluster::{
    ClusterConfig, ClusterError, Membership, TopicProblem, UsageDelta, UsageShare,
};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, ResourceSpecifier, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};

const HEARTBEAT: Duration = Duration::from_millis(200);
const EXPIRY: Duration = Duration::from_millis(1_500);
/// What a heartbeat may take through the broker, produced, appended and fetched, on two busy
/// cores: the bound's allowance for delivery.
const DELIVERY: Duration = Duration::from_secs(1);

fn bootstrap() -> String {
    std::env::var("KQUOTA_CLUSTER_BOOTSTRAP").expect(
        "KQUOTA_CLUSTER_BOOTSTRAP is not set: run kquota-cluster/tests/kafka/run.sh, which starts \
         Kafka and sets it",
    )
}

fn unique(what: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("kquota-test-{what}-{}-{nanos}", std::process::id())
}

fn config(members: &str, usage: &str, instance: &str) -> ClusterConfig {
    let mut c = ClusterConfig::new(bootstrap(), instance);
    c.members_topic = members.to_owned();
    c.usage_topic = usage.to_owned();
    c.heartbeat_interval = HEARTBEAT;
    c.member_expiry = EXPIRY;
    c.usage_interval = Duration::from_millis(250);
    c.usage_max_age = Duration::from_secs(2);
    c
}

/// Runs a future to its end on a runtime of its own: `start` is async, these tests are not.
fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

fn join(members: &str, instance: &str) -> (Membership, Arc<Engine>) {
    let engine = Arc::new(Engine::new());
    let m = block_on(Membership::start(
        &config(members, "unused", instance),
        engine.clone(),
    ))
    .unwrap_or_else(|e| panic!("{instance} could not join {members}: {e}"));
    (m, engine)
}

/// Waits up to `limit` for `f`; how long it took.
fn eventually(limit: Duration, what: &str, mut f: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < limit, "not within {limit:?}: {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
    start.elapsed()
}

fn count(engine: &Engine) -> u32 {
    engine.broker_view().broker_count
}

/// A member in a child process: this test binary, running `child_member`.
fn spawn_member(members: &str, instance: &str) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_member", "--ignored", "--nocapture"])
        .env("KQUOTA_SHARE_CHILD", format!("{members} {instance}"))
        .spawn()
        .expect("cannot start the child member")
}

/// Not a test: the body of the child process of `spawn_member`, which joins and stays until it
/// is killed.
#[test]
#[ignore = "run by spawn_member only"]
fn child_member() {
    let Ok(spec) = std::env::var("KQUOTA_SHARE_CHILD") else {
        return;
    };
    let (members, instance) = spec.split_once(' ').unwrap();
    let (_m, _engine) = join(members, instance);
    loop {
        std::thread::sleep(Duration::from_secs(60));
    }
}

fn topic_config(topic: &str) -> (usize, Option<String>, Option<String>) {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .create()
        .unwrap();
    let metadata = consumer
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .unwrap();
    let partitions = metadata.topics()[0].partitions().len();
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .create()
        .unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let results = runtime
        .block_on(admin.describe_configs(&[ResourceSpecifier::Topic(topic)], &AdminOptions::new()))
        .unwrap();
    let resource = results.into_iter().next().unwrap().unwrap();
    let get = |k: &str| resource.get(k).and_then(|e| e.value.clone());
    (partitions, get("cleanup.policy"), get("retention.ms"))
}

#[test]
fn members_come_and_go_within_the_bound() {
    let topic = unique("members");
    let (a, ea) = join(&topic, "a");
    assert_eq!(a.live(), ["a"]);
    let (partitions, policy, _) = topic_config(&topic);
    assert_eq!(partitions, 1);
    assert_eq!(policy.as_deref(), Some("compact,delete"));

    let (b, eb) = join(&topic, "b");
    let joined = eventually(HEARTBEAT + DELIVERY, "a counts b", || count(&ea) == 2);
    eventually(HEARTBEAT + DELIVERY, "b counts a", || count(&eb) == 2);
    println!("b counted by a {} ms after it joined", joined.as_millis());
    assert_eq!(a.live(), ["a", "b"]);
    assert!(a.is_connected() && b.is_connected());

    // c, in a child process, joins and is killed: no tombstone.
    let mut child = spawn_member(&topic, "c");
    eventually(Duration::from_secs(30), "a and b count c", || {
        count(&ea) == 3 && count(&eb) == 3
    });
    // Its heartbeats are flowing: kill it just after one arrived at a.
    std::thread::sleep(HEARTBEAT * 3);
    child.kill().unwrap();
    let killed = Instant::now();
    child.wait().unwrap();
    let bound = Membership::expiry_bound(&config(&topic, "", "a")) + DELIVERY;
    eventually(bound, "a drops c", || count(&ea) == 2);
    let dropped_a = killed.elapsed();
    eventually(bound, "b drops c", || count(&eb) == 2);
    let dropped_b = killed.elapsed();
    println!(
        "c killed: dropped by a after {} ms, by b after {} ms (bound {} ms + delivery)",
        dropped_a.as_millis(),
        dropped_b.as_millis(),
        (bound - DELIVERY).as_millis()
    );
    // Not before the expiry less the heartbeat it may have sent just before it died.
    assert!(dropped_a + HEARTBEAT >= EXPIRY, "{dropped_a:?}");
    assert_eq!(a.live(), ["a", "b"]);

    // b stops cleanly: its tombstone drops it at once.
    let stopped = Instant::now();
    b.stop();
    eventually(DELIVERY, "a drops b on its tombstone", || count(&ea) == 1);
    println!(
        "b stopped: dropped by a after {} ms",
        stopped.elapsed().as_millis()
    );
    assert_eq!(a.live(), ["a"]);

    // A member that comes back is counted again; one restarted under the same id too.
    let (b2, _) = join(&topic, "b");
    eventually(HEARTBEAT + DELIVERY, "a counts b again", || count(&ea) == 2);
    drop(b2);
    eventually(DELIVERY, "a drops b again", || count(&ea) == 1);
}

#[test]
fn a_new_member_counts_those_already_there() {
    let topic = unique("startup");
    let (_a, _ea) = join(&topic, "a");
    let (_b, _eb) = join(&topic, "b");
    // Its start-up read finds a and b: it starts with 3, not 1.
    let (c, ec) = join(&topic, "c");
    assert_eq!(count(&ec), 3, "{:?}", c.live());
    // A member that stopped cleanly before is not found.
    let (d, _) = join(&topic, "d");
    d.stop();
    std::thread::sleep(Duration::from_millis(500));
    let (e, ee) = join(&topic, "e");
    assert_eq!(e.live(), ["a", "b", "c", "e"]);
    assert_eq!(count(&ee), 4);
}

/// The members topic has one rule, checked wherever topics are: exactly one partition (an
/// instance's own heartbeat read back is what says it has read everyone's).
#[test]
fn a_members_topic_of_several_partitions_is_refused() {
    let topic = unique("members-3");
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .create()
        .unwrap();
    let new = NewTopic::new(&topic, 3, TopicReplication::Fixed(1));
    let created = block_on(admin.create_topics([&new], &AdminOptions::new())).unwrap();
    assert!(created[0].is_ok(), "{created:?}");
    let engine = Arc::new(Engine::new());
    match block_on(Membership::start(&config(&topic, "unused", "a"), engine)) {
        Err(e @ ClusterError::Topic { .. }) => {
            let ClusterError::Topic { topic: t, problem } = &e else {
                unreachable!()
            };
            assert_eq!(*t, topic);
            assert!(
                matches!(
                    problem,
                    TopicProblem::Partitions {
                        found: 3,
                        required: 1,
                        ..
                    }
                ),
                "{e}"
            );
            println!("refused: {e}");
        }
        other => panic!("a members topic of 3 partitions: {other:?}"),
    }
}

fn run(var: &str) {
    let cmd = std::env::var(var)
        .unwrap_or_else(|_| panic!("{var} is not set: run kquota-cluster/tests/kafka/run.sh"));
    let status = Command::new(&cmd).status().unwrap();
    assert!(status.success(), "{cmd}: {status}");
}

#[test]
fn kafka_away_keeps_the_membership() {
    let topic = unique("outage");
    let (a, ea) = join(&topic, "a");
    let (b, eb) = join(&topic, "b");
    eventually(HEARTBEAT + DELIVERY, "both count 2", || {
        count(&ea) == 2 && count(&eb) == 2
    });
    run("KQUOTA_CLUSTER_BROKER_STOP");
    let stopped = Instant::now();
    // Three expiries without Kafka: nobody is dropped, nobody collapses to 1.
    while stopped.elapsed() < EXPIRY * 3 {
        assert_eq!((count(&ea), count(&eb)), (2, 2));
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!a.is_connected() && !b.is_connected());
    run("KQUOTA_CLUSTER_BROKER_START");
    let back = Instant::now();
    eventually(Duration::from_secs(60), "heartbeats come back", || {
        assert_eq!(
            (count(&ea), count(&eb)),
            (2, 2),
            "a member dropped while reconnecting"
        );
        a.is_connected() && b.is_connected()
    });
    println!(
        "Kafka back: heartbeats read back after {} ms",
        back.elapsed().as_millis()
    );
    // And for a while after: both still there (each got a full expiry to be heard again).
    let settled = Instant::now();
    while settled.elapsed() < EXPIRY * 2 {
        assert_eq!((count(&ea), count(&eb)), (2, 2));
        std::thread::sleep(Duration::from_millis(50));
    }
    // Membership works again: b stops, a sees it.
    b.stop();
    eventually(DELIVERY * 2, "a drops b", || count(&ea) == 1);
}

/// A producer thread of alice on `meter` offering `rate` bytes/s in 10 ms steps, waiting out
/// every throttle.
fn produce(meter: Meter, rate: f64, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<u64> {
    std::thread::spawn(move || {
        let mut client = meter.client("alice", "p");
        let step = (rate / 100.0) as u64;
        let mut sent = 0;
        while !stop.load(Ordering::Relaxed) {
            let t = client.produce(step);
            sent += step;
            std::thread::sleep(Duration::from_millis(10 + t.ms));
        }
        sent
    })
}

fn share(
    members: &str,
    usage: &str,
    instance: &str,
    limit: f64,
) -> (Membership, Meter, UsageShare) {
    let engine = Arc::new(Engine::new());
    let alice = Entity::User(EntityName::named("alice").unwrap());
    let results = engine.alter(
        &[Alteration::new(&alice).set("producer_byte_rate:bps", limit)],
        false,
    );
    assert!(results.iter().all(|r| r.error.is_none()));
    let c = config(members, usage, instance);
    let membership = block_on(Membership::start(&c, engine.clone())).unwrap();
    // Short windows, so that rates settle within seconds.
    let window = MeterConfig::builder()
        .window_samples(4)
        .window_size(Duration::from_millis(500))
        .build()
        .unwrap();
    let meter = Meter::with_clock(engine, Arc::new(kquota::meter::SystemClock::new()), window);
    let usage = block_on(UsageShare::start(&c, meter.clone(), &membership)).unwrap();
    (membership, meter, usage)
}

fn alice() -> BucketOwner {
    BucketOwner::User(Arc::from("alice"))
}

#[test]
fn usage_is_shared_and_the_busy_instance_gets_more() {
    let members = unique("members");
    let usage = unique("usage");
    let limit = 2_000_000.0;
    let (ma, meter_a, ua) = share(&members, &usage, "a", limit);
    let (mb, meter_b, ub) = share(&members, &usage, "b", limit);
    let (partitions, policy, retention) = topic_config(&usage);
    assert_eq!(partitions, 1);
    assert_eq!(policy.as_deref(), Some("delete"));
    assert_eq!(retention.as_deref(), Some("300000"));
    eventually(Duration::from_secs(5), "both count 2", || {
        ma.live_count() == 2 && mb.live_count() == 2
    });
    eventually(Duration::from_secs(5), "both views are fresh", || {
        ua.split().is_fresh() && ub.split().is_fresh()
    });
    // a offers 1.8 MB/s, b 0.2 MB/s: static division would give a 1 MB/s.
    let stop = Arc::new(AtomicBool::new(false));
    let pa = produce(meter_a.clone(), 1.8e6, stop.clone());
    let pb = produce(meter_b.clone(), 0.2e6, stop.clone());
    let ask = |u: &UsageShare| {
        u.split()
            .local_limit(QuotaKey::PRODUCER_BPS, &alice(), limit, 0)
    };
    let took = eventually(
        Duration::from_secs(20),
        "a's part grows past 1.4 MB/s",
        || ask(&ua).is_some_and(|l| l > 1.4e6),
    );
    std::thread::sleep(Duration::from_secs(3));
    let (la, lb) = (ask(&ua).unwrap(), ask(&ub).unwrap());
    println!(
        "a's part past 1.4 MB/s after {} ms; now a {:.3} MB/s, b {:.3} MB/s (sum {:.3}, L 2)",
        took.as_millis(),
        la / 1e6,
        lb / 1e6,
        (la + lb) / 1e6
    );
    assert!(la > 1.4e6 && lb > 0.15e6, "{la} {lb}");
    assert!(la + lb <= limit * 1.1, "{la} + {lb}");
    // The meter applies it.
    let applied = meter_a
        .snapshot()
        .into_iter()
        .find(|b| b.key == QuotaKey::PRODUCER_BPS)
        .unwrap()
        .limit;
    assert!(applied > 1.3e6, "{applied}");

    // What is in the topic is the documented record.
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .set("group.id", unique("reader"))
        .create()
        .unwrap();
    let mut list = TopicPartitionList::new();
    list.add_partition_offset(&usage, 0, Offset::Beginning)
        .unwrap();
    consumer.assign(&list).unwrap();
    // a's records, in order: the first a whole statement, each numbered one past the one
    // before, and one with alice's bucket among them.
    let mut of_a: Vec<serde_json::Value> = Vec::new();
    let end = consumer
        .fetch_watermarks(&usage, 0, Duration::from_secs(10))
        .unwrap()
        .1;
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut last = -1;
    while last + 1 < end && Instant::now() < deadline {
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(200)) {
            last = m.offset();
            if m.key() == Some(b"a".as_slice()) {
                of_a.push(serde_json::from_slice(m.payload().unwrap()).unwrap());
            }
        }
    }
    assert!(of_a.len() > 10, "{} records of a", of_a.len());
    assert_eq!(of_a[0]["reset"], true, "{}", of_a[0]);
    for w in of_a.windows(2) {
        assert_eq!(
            w[1]["seq"].as_u64().unwrap(),
            w[0]["seq"].as_u64().unwrap() + 1,
            "{} then {}",
            w[0],
            w[1]
        );
    }
    let record = of_a
        .iter()
        .find(|v| v["buckets"].as_array().is_some_and(|b| !b.is_empty()))
        .expect("no usage record of a with buckets")
        .clone();
    // Most of a's records say nothing new: alice's bucket, shared with b, changes at each.
    let empty = of_a
        .iter()
        .filter(|v| v["buckets"].as_array().is_some_and(|b| b.is_empty()))
        .count();
    println!(
        "a usage record: {record}; {} records of a, {empty} with no bucket",
        of_a.len()
    );
    assert_eq!(record["v"], 2);
    assert_eq!(record["instance"], "a");
    let bucket = &record["buckets"][0];
    assert_eq!(bucket["key"], "producer_byte_rate:bps");
    assert_eq!(bucket["owner"], serde_json::json!({"user": "alice"}));
    assert!(bucket["rate"].as_f64().unwrap() > 0.0);
    assert!(bucket["throttled"].is_boolean() && bucket["limit"].is_number());
    UsageDelta::decode(record.to_string().as_bytes()).unwrap();

    // b stops sharing, but stays a member: a's view has a hole after usage_max_age, and a
    // falls back to the limit divided by the live count.
    ub.stop();
    let declined = eventually(Duration::from_secs(5), "a's split declines", || {
        ask(&ua).is_none()
    });
    println!(
        "b stopped sharing: a's split declined after {} ms",
        declined.as_millis()
    );
    std::thread::sleep(Duration::from_millis(300));
    let fallback = meter_a
        .snapshot()
        .into_iter()
        .find(|b| b.key == QuotaKey::PRODUCER_BPS)
        .unwrap()
        .limit;
    assert_eq!(fallback, limit / 2.0);
    stop.store(true, Ordering::Relaxed);
    let (sent_a, sent_b) = (pa.join().unwrap(), pb.join().unwrap());
    println!("sent: a {sent_a} bytes, b {sent_b} bytes");
    drop(ua);
    drop(mb);
    drop(ma);
}
