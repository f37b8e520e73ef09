//! kquota-cluster when a broker goes away, on a three-broker cluster with the topics at
//! replication factor 3 and `min.insync.replicas=2`: run by `kquota-cluster/tests/failover/run.sh`,
//! which starts `interop/kafka/cluster.sh`'s cluster and sets `KQUOTA_CLUSTER_BOOTSTRAP` and the
//! commands that kill, stop and start a node. Without them every test fails: this target is not
//! part of the default `cargo test`, so when it runs, it was asked for.
//!
//! Three instances run in this process, each with its own engine and its own Kafka clients, as
//! three hosts would. The cluster's SSL and SASL_PLAINTEXT listeners (`KQUOTA_CLUSTER_SSL`,
//! `KQUOTA_CLUSTER_SSL_CA`, `KQUOTA_CLUSTER_SASL_PLAINTEXT`) carry one test's instances, so that
//! the clients' TLS and SCRAM are tried against a real broker.

use std::collections::HashMap;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kquota::meter::{Meter, MeterConfig, SystemClock};
use kquota::{Alteration, Engine, Entity, EntityName, ListFilter, ListedEntity};
use kquota_cluster::{ClusterConfig, ClusterError, ConfigLog, Membership, UsageShare};
use parking_lot::Mutex;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::ClientConfig;

/// The alteration timeout the storm's commits run with: the client's timeout, within which
/// alterations must be acknowledged again after the leader is killed. Kafka fences a broker that
/// died without a word after `broker.session.timeout.ms` (9 s by default) and only then elects
/// another leader from the in-sync replicas: 9 to 12 s after the kill here, more than the
/// default alteration timeout (10 s), under which the commits in flight at the kill fail as
/// "may still be applied". 20 s rides it out and stays under Kafka's AdminClient
/// `request.timeout.ms` (30 s), so that a client still reads the answer.
const ALTER_TIMEOUT: Duration = Duration::from_secs(20);

fn bootstrap() -> String {
    std::env::var("KQUOTA_CLUSTER_BOOTSTRAP").expect(
        "KQUOTA_CLUSTER_BOOTSTRAP is not set: run kquota-cluster/tests/failover/run.sh, which \
         starts the three-broker cluster and sets it",
    )
}

fn node(var: &str, id: i32) {
    let cmd = std::env::var(var)
        .unwrap_or_else(|_| panic!("{var} is not set: run kquota-cluster/tests/failover/run.sh"));
    let status = Command::new(&cmd).arg(id.to_string()).status().unwrap();
    assert!(status.success(), "{cmd} {id}: {status}");
}

fn logs() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "warn,kquota_cluster=info,librdkafka=error".into()),
        )
        .with_test_writer()
        .try_init();
}

fn unique(what: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("kquota-failover-{what}-{}-{nanos}", std::process::id())
}

fn config(instance: &str) -> ClusterConfig {
    let mut c = ClusterConfig::new(bootstrap(), instance);
    c.replication_factor = 3;
    c.min_insync_replicas = Some(2);
    c.alter_timeout = ALTER_TIMEOUT;
    c.open_timeout = Duration::from_secs(60);
    c
}

fn named(s: &str) -> EntityName {
    EntityName::named(s).unwrap()
}

fn everything(engine: &Engine) -> Vec<ListedEntity> {
    let mut all = engine.list(&ListFilter::default());
    all.sort_by(|a, b| a.entity.cmp(&b.entity));
    all
}

fn eventually(limit: Duration, what: &str, mut f: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < limit, "not within {limit:?}: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
    start.elapsed()
}

/// The leader of partition 0 of `topic`, and its in-sync replicas.
fn leader(topic: &str) -> (i32, usize) {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .create()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(m) = consumer.fetch_metadata(Some(topic), Duration::from_secs(5)) {
            if let Some(p) = m
                .topics()
                .iter()
                .find(|t| t.name() == topic)
                .and_then(|t| t.partitions().iter().find(|p| p.id() == 0))
            {
                if p.leader() >= 0 {
                    return (p.leader(), p.isr().len());
                }
            }
        }
        assert!(Instant::now() < deadline, "no leader for {topic}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Waits until every partition 0 of `topics` has three in-sync replicas again.
fn all_in_sync(topics: &[&str]) -> Duration {
    eventually(
        Duration::from_secs(180),
        "three in-sync replicas again",
        || topics.iter().all(|t| leader(t).1 == 3),
    )
}

/// A commit in the storm: what it named, what came of it, and when it was sent and answered.
struct Outcome {
    entity: Entity,
    value: f64,
    result: Result<(), ClusterError>,
    sent: Instant,
    answered: Instant,
}

/// The configuration partition's leader killed during an alteration storm at three instances:
/// no acknowledged alteration is lost, none refused is applied, and each instance has
/// alterations acknowledged again within the alteration timeout of the kill.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_configuration_leader_killed_during_a_storm_loses_nothing_acknowledged() {
    logs();
    let topic = unique("config");
    let mut logs_ = Vec::new();
    for id in ["a", "b", "c"] {
        let mut c = config(id);
        c.config_topic = topic.clone();
        let log = ConfigLog::open(c, Arc::new(Engine::new()))
            .await
            .unwrap_or_else(|e| panic!("{id}: {e}"));
        logs_.push(Arc::new(log));
    }
    let (was_leader, isr) = leader(&topic);
    assert_eq!(isr, 3, "the topic is created with three replicas in sync");
    let stop = Arc::new(AtomicBool::new(false));
    let outcomes: Arc<Mutex<HashMap<usize, Vec<Outcome>>>> = Arc::default();
    let storm: Vec<_> = logs_
        .iter()
        .enumerate()
        .map(|(k, log)| {
            let log = Arc::clone(log);
            let stop = Arc::clone(&stop);
            let outcomes = Arc::clone(&outcomes);
            std::thread::spawn(move || {
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) {
                    let entity = Entity::User(named(&format!("storm-{k}-{n}")));
                    let value = 1000.0 + n as f64;
                    let sent = Instant::now();
                    let result = log
                        .alter(
                            &[Alteration::new(&entity).set("producer_byte_rate", value)],
                            false,
                        )
                        .map(|r| assert!(r[0].error.is_none(), "{r:?}"));
                    let answered = Instant::now();
                    outcomes.lock().entry(k).or_default().push(Outcome {
                        entity,
                        value,
                        result,
                        sent,
                        answered,
                    });
                    n += 1;
                    std::thread::sleep(Duration::from_millis(5));
                }
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(3)).await;
    node("KQUOTA_FAILOVER_KILL", was_leader);
    let killed = Instant::now();
    println!("killed node {was_leader}, the leader of {topic} (in sync: {isr})");
    // Until every instance has had alterations acknowledged again for two seconds (another
    // leader elected, the storm going on there), or the timeout and more.
    let deadline = killed + ALTER_TIMEOUT + Duration::from_secs(5);
    while Instant::now() < deadline {
        let resumed: Option<Instant> = {
            let o = outcomes.lock();
            (0..3)
                .map(|k| {
                    o.get(&k)?
                        .iter()
                        .filter(|x| x.result.is_ok() && x.answered > killed)
                        .map(|x| x.answered)
                        .min()
                })
                .collect::<Option<Vec<Instant>>>()
                .and_then(|firsts| firsts.into_iter().max())
        };
        if resumed.is_some_and(|at| at.elapsed() >= Duration::from_secs(2)) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    stop.store(true, Ordering::Relaxed);
    for t in storm {
        t.join().unwrap();
    }
    let (new_leader, isr_after) = leader(&topic);
    println!("leader now node {new_leader}, {isr_after} replicas in sync");
    assert_ne!(new_leader, was_leader);
    node("KQUOTA_FAILOVER_START", was_leader);
    let back = all_in_sync(&[&topic]);
    println!("node {was_leader} started again: three replicas in sync after {back:?}");

    // Every instance ends with the same log applied.
    let outcomes = std::mem::take(&mut *outcomes.lock());
    let fresh = {
        let mut c = config("fresh");
        c.config_topic = topic.clone();
        ConfigLog::open(c, Arc::new(Engine::new())).await.unwrap()
    };
    let end = fresh.applied_offset();
    eventually(Duration::from_secs(30), "all at the log's end", || {
        logs_.iter().all(|l| l.applied_offset() >= end)
    });
    let want = everything(fresh.engine());
    for l in &logs_ {
        assert!(l.failure().is_none(), "{:?}", l.failure());
        assert_eq!(everything(l.engine()), want, "instance {}", l.instance_id());
    }
    let value_of = |e: &Entity| -> Option<f64> {
        want.iter()
            .find(|l| l.entity == *e)
            .and_then(|l| l.quotas.first().map(|(_, v)| *v))
    };
    let mut acked = 0;
    let mut unsure = (0, 0);
    let mut refused = 0;
    let mut errors: HashMap<String, usize> = HashMap::new();
    let mut late = Vec::new();
    for (k, list) in &outcomes {
        let mut resumed = None;
        let mut last_before = None;
        for o in list {
            match &o.result {
                Ok(()) => {
                    acked += 1;
                    assert_eq!(
                        value_of(&o.entity),
                        Some(o.value),
                        "{} acknowledged by instance {k} and lost",
                        o.entity
                    );
                    if o.answered > killed && resumed.is_none() && o.sent >= killed {
                        resumed = Some(o.answered - killed);
                    }
                    if o.answered <= killed {
                        last_before = Some(o.answered);
                    }
                }
                Err(e) => {
                    let text = e.to_string();
                    *errors
                        .entry(text.split('(').next().unwrap_or("").to_owned())
                        .or_default() += 1;
                    let present = value_of(&o.entity) == Some(o.value);
                    if e.may_still_apply() {
                        if present {
                            unsure.0 += 1;
                        } else {
                            unsure.1 += 1;
                        }
                    } else {
                        refused += 1;
                        assert!(!present, "{} refused ({e}) and applied", o.entity);
                    }
                }
            }
        }
        // The first alteration sent after the kill and acknowledged, or, if the one in flight
        // at the kill came through, the time from the kill to the first answer after it.
        let first_after = list
            .iter()
            .filter(|o| o.result.is_ok() && o.answered > killed)
            .map(|o| o.answered - killed)
            .min();
        println!(
            "instance {k}: {} commits; first acknowledged after the kill {:?} later (the first \
             sent after it: {:?}); last before it {:?} before the kill",
            list.len(),
            first_after,
            resumed,
            last_before.map(|t| killed - t)
        );
        late.push((k, first_after));
    }
    println!(
        "{acked} acknowledged, all present everywhere and in a fresh replay; errors: {errors:?}; \
         of those that may still apply {} were applied, {} not; {refused} refused, none applied",
        unsure.0, unsure.1
    );
    assert!(acked > 100, "{acked}");
    for (k, first_after) in late {
        let first_after = first_after.expect("no alteration acknowledged after the kill");
        assert!(
            first_after <= ALTER_TIMEOUT,
            "instance {k}: alterations acknowledged again {first_after:?} after the kill, over \
             the alteration timeout {ALTER_TIMEOUT:?}"
        );
    }
}

/// A producer of alice on `meter` offering `rate` bytes/s in 10 ms steps, waiting out every
/// throttle.
fn produce(meter: Meter, rate: f64, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut client = meter.client("alice", "p");
        let step = (rate / 100.0) as u64;
        while !stop.load(Ordering::Relaxed) {
            let t = client.produce(step);
            std::thread::sleep(Duration::from_millis(10 + t.ms));
        }
    })
}

/// The members and usage partitions' leaders restarted (SIGTERM, then started again), and the
/// members leader killed and started again: no instance's live count ever drops below three.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_members_and_usage_leaders_restarted_drop_no_instance() {
    logs();
    let members_topic = unique("members");
    let usage_topic = unique("usage");
    let mut joined = Vec::new();
    let stop_load = Arc::new(AtomicBool::new(false));
    let mut loads = Vec::new();
    for (id, rate) in [("a", 1.2e6), ("b", 0.6e6), ("c", 0.2e6)] {
        let engine = Arc::new(Engine::new());
        let alice = Entity::User(named("alice"));
        let r = engine.alter(
            &[Alteration::new(&alice).set("producer_byte_rate:bps", 2e6)],
            false,
        );
        assert!(r[0].error.is_none());
        let mut c = config(id);
        c.members_topic = members_topic.clone();
        c.usage_topic = usage_topic.clone();
        let m = Membership::start(&c, Arc::clone(&engine)).await.unwrap();
        let window = MeterConfig::builder()
            .window_samples(4)
            .window_size(Duration::from_millis(500))
            .build()
            .unwrap();
        let meter = Meter::with_clock(Arc::clone(&engine), Arc::new(SystemClock::new()), window);
        let u = UsageShare::start(&c, meter.clone(), &m).await.unwrap();
        loads.push(produce(meter, rate, Arc::clone(&stop_load)));
        joined.push((m, u, engine));
    }
    eventually(
        Duration::from_secs(20),
        "three live, the views fresh",
        || {
            joined
                .iter()
                .all(|(m, u, _)| m.live_count() == 3 && u.split().is_fresh())
        },
    );
    for t in [&members_topic, &usage_topic] {
        assert_eq!(leader(t).1, 3, "{t} is created with three replicas in sync");
    }
    // Sampled every 10 ms throughout: the least live count any instance had, and how long the
    // usage views were not fresh.
    let sampling = Arc::new(AtomicBool::new(true));
    type Samples = Vec<(Instant, [usize; 3], [bool; 3])>;
    let samples: Arc<Mutex<Samples>> = Arc::default();
    let counts: Vec<Arc<Engine>> = joined.iter().map(|(_, _, e)| Arc::clone(e)).collect();
    let splits: Vec<_> = joined
        .iter()
        .map(|(_, u, _)| Arc::clone(u.split()))
        .collect();
    let sampler = {
        let sampling = Arc::clone(&sampling);
        let samples = Arc::clone(&samples);
        std::thread::spawn(move || {
            while sampling.load(Ordering::Relaxed) {
                let live = [0, 1, 2].map(|i| counts[i].broker_view().broker_count as usize);
                let fresh = [0, 1, 2].map(|i| splits[i].is_fresh());
                samples.lock().push((Instant::now(), live, fresh));
                std::thread::sleep(Duration::from_millis(10));
            }
        })
    };
    let mut phases = Vec::new();
    for (what, topic, kill) in [
        ("members leader restarted", &members_topic, false),
        ("usage leader restarted", &usage_topic, false),
        ("members leader killed", &members_topic, true),
    ] {
        let (n, _) = leader(topic);
        let t0 = Instant::now();
        if kill {
            node("KQUOTA_FAILOVER_KILL", n);
            // Down for longer than the member expiry (3 s), as a crash would be.
            tokio::time::sleep(Duration::from_secs(5)).await;
        } else {
            node("KQUOTA_FAILOVER_STOP", n);
        }
        node("KQUOTA_FAILOVER_START", n);
        // Back: three replicas in sync, and every instance's heartbeats and usage view again
        // (right after a kill the dead replica is still listed in sync).
        let synced = eventually(Duration::from_secs(180), "back after the failure", || {
            [&members_topic, &usage_topic]
                .iter()
                .all(|t| leader(t).1 == 3)
                && joined
                    .iter()
                    .all(|(m, u, _)| m.is_connected() && u.split().is_fresh())
        });
        // And a while after, for late drops.
        tokio::time::sleep(Duration::from_secs(3)).await;
        let t1 = Instant::now();
        let s = samples.lock();
        let during: Vec<_> = s.iter().filter(|x| x.0 >= t0 && x.0 <= t1).collect();
        let least = during
            .iter()
            .map(|x| *x.1.iter().min().unwrap())
            .min()
            .unwrap_or(0);
        let stale_ms = |i: usize| during.iter().filter(|x| !x.2[i]).count() * 10;
        let stale = [stale_ms(0), stale_ms(1), stale_ms(2)];
        println!(
            "{what} (node {n}): in sync again {synced:?} after; least live count {least} over \
             {} samples; usage views not fresh for {stale:?} ms",
            during.len()
        );
        phases.push((what, least));
        drop(s);
    }
    sampling.store(false, Ordering::Relaxed);
    sampler.join().unwrap();
    stop_load.store(true, Ordering::Relaxed);
    for l in loads {
        l.join().unwrap();
    }
    for (what, least) in phases {
        assert_eq!(
            least, 3,
            "{what}: an instance counted fewer than three live"
        );
    }
    for (m, _, _) in &joined {
        assert_eq!(m.live_count(), 3);
        assert!(m.is_connected());
    }
}

/// A variable `run.sh` sets from the cluster's `bootstrap.env`.
fn env(var: &str) -> String {
    std::env::var(var).unwrap_or_else(|_| {
        panic!("{var} is not set: run this target with kquota-cluster/tests/failover/run.sh")
    })
}

/// An instance of the shared topic `topic` at `bootstrap` (another listener of the cluster), its
/// clients set with `client`.
fn secured(
    instance: &str,
    bootstrap: String,
    topic: &str,
    client: &[(&str, &str)],
) -> ClusterConfig {
    let mut c = config(instance);
    c.bootstrap_servers = bootstrap;
    c.config_topic = topic.to_owned();
    for (k, v) in client {
        c.client_properties.insert((*k).to_owned(), (*v).to_owned());
    }
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_share_the_configuration_over_ssl_and_sasl_scram() {
    logs();
    let topic = unique("secured");
    let ca = env("KQUOTA_CLUSTER_SSL_CA");
    let over_tls = secured(
        "tls",
        env("KQUOTA_CLUSTER_SSL"),
        &topic,
        &[("security.protocol", "SSL"), ("ssl.ca.location", &ca)],
    );
    let over_scram = secured(
        "scram",
        env("KQUOTA_CLUSTER_SASL_PLAINTEXT"),
        &topic,
        &[
            ("security.protocol", "SASL_PLAINTEXT"),
            ("sasl.mechanism", "SCRAM-SHA-512"),
            ("sasl.username", "alice"),
            ("sasl.password", "alice-secret"),
        ],
    );
    let (tls_engine, scram_engine) = (Arc::new(Engine::new()), Arc::new(Engine::new()));
    let tls = ConfigLog::open(over_tls, Arc::clone(&tls_engine))
        .await
        .unwrap_or_else(|e| panic!("over SSL: {e}"));
    let scram = ConfigLog::open(over_scram, Arc::clone(&scram_engine))
        .await
        .unwrap_or_else(|e| panic!("over SASL_PLAINTEXT with SCRAM-SHA-512: {e}"));
    // One alteration from each, each seen by the other.
    let (tls, scram) = (Arc::new(tls), Arc::new(scram));
    for (log, user) in [
        (Arc::clone(&tls), "over-tls"),
        (Arc::clone(&scram), "over-scram"),
    ] {
        let entity = Entity::User(named(user));
        let answer = tokio::task::spawn_blocking(move || {
            log.alter(
                &[Alteration::new(&entity).set("producer_byte_rate", 1234.0)],
                false,
            )
        })
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("{user}: {e}"));
        assert!(answer[0].error.is_none(), "{user}: {answer:?}");
    }
    let took = eventually(
        Duration::from_secs(30),
        "both instances hold both alterations",
        || {
            let (a, b) = (everything(&tls_engine), everything(&scram_engine));
            a.len() == 2 && a == b
        },
    );
    println!("over SSL and over SCRAM-SHA-512: both alterations on both instances in {took:?}");
}
