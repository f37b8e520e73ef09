//! `ConfigLog` against a real Kafka broker: run by `kquota-cluster/tests/kafka/run.sh`, which starts
//! Apache Kafka 4.3.1 and sets `KQUOTA_CLUSTER_BOOTSTRAP` (and the commands that stop and start the
//! broker again). Without them every test fails: this target is not part of the default
//! `cargo test`, so when it runs, it was asked for.

use std::collections::HashMap;
use std::sync::{mpsc, Arc, Barrier};
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, ResourceSpecifier, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};

use kquota::{
    Alteration, Engine, Entity, EntityName, ErrorCode, ListFilter, ListedEntity, Persistence,
};
use kquota_cluster::{
    ClusterConfig, ClusterError, ConfigLog, ConfigProblem, RecordProblem, TopicProblem,
};

mod replay_bench;
mod snapshots;

fn bootstrap() -> String {
    std::env::var("KQUOTA_CLUSTER_BOOTSTRAP").expect(
        "KQUOTA_CLUSTER_BOOTSTRAP is not set: run kquota-cluster/tests/kafka/run.sh, which starts \
         Kafka and sets it",
    )
}

/// A topic name no other test (or earlier run against the same broker) uses.
fn unique_topic(what: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("kquota-test-{what}-{}-{nanos}", std::process::id())
}

fn config(topic: &str, instance: &str) -> ClusterConfig {
    let mut c = ClusterConfig::new(bootstrap(), instance);
    c.config_topic = topic.to_owned();
    c.alter_timeout = Duration::from_secs(10);
    c.open_timeout = Duration::from_secs(30);
    c
}

async fn open(topic: &str, instance: &str) -> ConfigLog {
    ConfigLog::open(config(topic, instance), Arc::new(Engine::new()))
        .await
        .unwrap_or_else(|e| panic!("instance {instance} could not open {topic}: {e}"))
}

fn logs() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "warn,kquota_cluster=info".into()),
        )
        .with_test_writer()
        .try_init();
}

fn named(s: &str) -> EntityName {
    EntityName::named(s).unwrap()
}

/// Everything an engine holds, in a fixed order.
fn everything(engine: &Engine) -> Vec<ListedEntity> {
    let mut all = engine.list(&ListFilter::default());
    all.sort_by_key(|e| format!("{:?}", e.entity));
    all
}

fn ok(results: &[kquota::AlterResult]) {
    for r in results {
        assert!(r.error.is_none(), "{:?}: {:?}", r.entity, r.error);
    }
}

/// Waits until `f` holds, for at most `limit`.
fn eventually(limit: Duration, what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !f() {
        assert!(Instant::now() < deadline, "not within {limit:?}: {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn admin() -> AdminClient<DefaultClientContext> {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .create()
        .unwrap()
}

fn high_watermark(topic: &str) -> i64 {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .create()
        .unwrap();
    consumer
        .fetch_watermarks(topic, 0, Duration::from_secs(10))
        .unwrap()
        .1
}

/// Every record of the topic's partition 0 as (offset, key, value as JSON).
fn read_log(topic: &str) -> Vec<(i64, String, serde_json::Value)> {
    let end = high_watermark(topic);
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .set("enable.auto.commit", "false")
        .set("group.id", "kquota-test-reader")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, Offset::Beginning)
        .unwrap();
    consumer.assign(&tpl).unwrap();
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while out.last().is_none_or(|(o, _, _)| o + 1 < end) {
        assert!(Instant::now() < deadline, "could not read {topic} to {end}");
        if let Some(m) = consumer.poll(Duration::from_millis(200)) {
            let m = m.unwrap();
            let key = String::from_utf8(m.key().unwrap().to_vec()).unwrap();
            let value = serde_json::from_slice(m.payload().unwrap()).unwrap();
            out.push((m.offset(), key, value));
        }
    }
    out
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// An alteration at one instance is visible at the other; how long it takes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_alteration_at_one_instance_is_seen_at_the_other() {
    logs();
    let topic = unique_topic("propagation");
    let a = Arc::new(open(&topic, "a").await);
    let b = open(&topic, "b").await;
    let (tx, rx) = mpsc::channel::<(String, Instant)>();
    let tx = parking_lot::Mutex::new(tx);
    b.engine().subscribe(move |notes| {
        let at = Instant::now();
        for n in notes {
            let _ = tx.lock().send((format!("{}", n.entity), at));
        }
    });
    const N: usize = 200;
    let mut commit = Vec::with_capacity(N);
    let mut seen = Vec::with_capacity(N);
    for i in 0..N {
        let entity = Entity::User(named(&format!("user-{i}")));
        let batch = [Alteration::new(&entity).set("producer_byte_rate", 1000.0 + i as f64)];
        let a2 = Arc::clone(&a);
        let start = Instant::now();
        // Through the trait, as an admin handler commits (on a multi-thread worker: block_in_place).
        let results = tokio::task::spawn(async move {
            let engine = Arc::clone(a2.engine());
            Persistence::commit(&*a2, &engine, &batch, false)
        })
        .await
        .unwrap()
        .unwrap();
        ok(&results);
        commit.push(start.elapsed());
        let want = format!("{entity}");
        loop {
            let (got, at) = rx.recv_timeout(Duration::from_secs(10)).unwrap();
            if got == want {
                seen.push(at - start);
                break;
            }
        }
        assert_eq!(
            b.engine()
                .resolve(&format!("user-{i}"), "c")
                .get(kquota::QuotaKey::PRODUCER_BROKER_BPS)
                .map(|q| q.limit),
            Some(1000.0 + i as f64)
        );
    }
    commit.sort();
    seen.sort();
    println!(
        "commit at a (append, acks=all, applied at a): p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        ms(percentile(&commit, 0.5)),
        ms(percentile(&commit, 0.99)),
        ms(commit[N - 1])
    );
    println!(
        "visible at b from the start of the commit at a: p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms ({N} alterations)",
        ms(percentile(&seen, 0.5)),
        ms(percentile(&seen, 0.99)),
        ms(seen[N - 1])
    );
    assert_eq!(everything(a.engine()), everything(b.engine()));
    assert_eq!(a.engine().entity_count(), N);
    assert_eq!(read_log(&topic).len(), N, "one record per batch");
}

/// A restarted instance, and a new one, rebuild the configuration from the log.
#[tokio::test]
async fn a_restarted_instance_catches_up_from_the_log() {
    logs();
    let topic = unique_topic("restart");
    let d = EntityName::Default;
    let entities = [
        Entity::User(named("alice")),
        Entity::User(d.clone()),
        Entity::UserClient(named("alice"), named("batch")),
        Entity::UserClient(named("alice"), d.clone()),
        Entity::UserClient(d.clone(), named("batch")),
        Entity::UserClient(d.clone(), d.clone()),
        Entity::ClientId(named("batch")),
        Entity::ClientId(d.clone()),
        Entity::Ip(named("10.0.0.1")),
        Entity::Ip(d.clone()),
    ];
    let before = {
        let a = open(&topic, "a").await;
        for (i, e) in entities.iter().enumerate() {
            let batch = if e.is_ip() {
                vec![Alteration::new(e).set("connection_creation_rate", 10.0 + i as f64)]
            } else {
                // Each later entity a little less than the one before: alice's sub-quotas stay
                // within her total.
                vec![Alteration::new(e)
                    .set("producer_byte_rate", 1e7 - i as f64)
                    .set("consumer_byte_rate:bps", 2e6)
                    .set("request_percentage", 50.5)]
            };
            ok(&a.alter(&batch, false).unwrap());
        }
        // Removals and a second value for the same entity, in later batches.
        ok(&a
            .alter(
                &[Alteration::new(&entities[0]).remove("request_percentage")],
                false,
            )
            .unwrap());
        ok(&a
            .alter(
                &[Alteration::new(&entities[7]).set("producer_byte_rate", 42.0)],
                false,
            )
            .unwrap());
        let state = everything(a.engine());
        assert_eq!(state.len(), entities.len());
        state
        // `a` stops here.
    };
    let started = Instant::now();
    let a = open(&topic, "a").await;
    println!(
        "instance a reopened and caught up with {} records in {:.1} ms",
        a.applied_offset(),
        ms(started.elapsed())
    );
    assert_eq!(everything(a.engine()), before);
    // The restarted instance's batches do not reuse its earlier sequence numbers (keys).
    ok(&a
        .alter(
            &[Alteration::new(&entities[6]).set("producer_byte_rate", 7.0)],
            false,
        )
        .unwrap());
    let records = read_log(&topic);
    let mut keys: Vec<&str> = records.iter().map(|(_, k, _)| k.as_str()).collect();
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len(), records.len(), "a key was written twice");
    let b = open(&topic, "b").await;
    assert_eq!(everything(b.engine()), everything(a.engine()));
    assert_eq!(b.applied_offset(), records.len() as i64);
}

/// Two instances racing alterations that cannot both hold: the log's order decides, the same way
/// at both, and each commit answers with what happened to its batch there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conflicting_alterations_end_the_same_everywhere() {
    logs();
    let topic = unique_topic("conflict");
    let a = Arc::new(open(&topic, "a").await);
    let b = Arc::new(open(&topic, "b").await);
    const ROUNDS: usize = 30;
    let mut answers = Vec::new();
    for round in 0..ROUNDS {
        let user = format!("alice-{round}");
        // alice's total is 10 MB/s; each instance gives one of her clients 6 MB/s of it.
        ok(&a
            .alter(
                &[Alteration::new(&Entity::User(named(&user))).set("producer_byte_rate", 10e6)],
                false,
            )
            .unwrap());
        eventually(Duration::from_secs(10), "b sees the total", || {
            b.engine().entity_count() == a.engine().entity_count()
        });
        let barrier = Arc::new(Barrier::new(2));
        let racer = |log: Arc<ConfigLog>, client: &'static str| {
            let barrier = Arc::clone(&barrier);
            let entity = Entity::UserClient(named(&user), named(client));
            std::thread::spawn(move || {
                let batch = [Alteration::new(&entity).set("producer_byte_rate", 6e6)];
                barrier.wait();
                log.alter(&batch, false).unwrap()
            })
        };
        let at_a = racer(Arc::clone(&a), "c1");
        let at_b = racer(Arc::clone(&b), "c2");
        let (ra, rb) = (at_a.join().unwrap(), at_b.join().unwrap());
        answers.push((user, ra, rb));
    }
    eventually(Duration::from_secs(10), "both applied everything", || {
        a.applied_offset() == b.applied_offset() && a.applied_offset() == high_watermark(&topic)
    });
    assert_eq!(everything(a.engine()), everything(b.engine()));
    // The log's order, as a third party reads it.
    let log = read_log(&topic);
    let first_writer = |user: &str| -> String {
        log.iter()
            .find(|(_, _, v)| {
                let e = &v["alterations"][0]["entity"];
                e[0]["name"] == user && e.as_array().unwrap().len() == 2
            })
            .map(|(_, _, v)| v["origin"].as_str().unwrap().to_owned())
            .unwrap()
    };
    let mut won = HashMap::new();
    for (user, ra, rb) in &answers {
        let (ea, eb) = (&ra[0].error, &rb[0].error);
        // Exactly one of the two holds, and it is the one the log has first.
        assert!(
            ea.is_none() != eb.is_none(),
            "{user}: a answered {ea:?}, b answered {eb:?}"
        );
        let loser = ea.as_ref().or(eb.as_ref()).unwrap();
        assert_eq!(loser.code, ErrorCode::POLICY_VIOLATION, "{user}: {loser:?}");
        let winner = if ea.is_none() { "a" } else { "b" };
        assert_eq!(first_writer(user), winner, "{user}");
        *won.entry(winner).or_insert(0) += 1;
        // What each instance holds is what the answers said.
        let (kept, refused) = if winner == "a" {
            ("c1", "c2")
        } else {
            ("c2", "c1")
        };
        for engine in [a.engine(), b.engine()] {
            let listed = everything(engine);
            let has = |c: &str| {
                listed
                    .iter()
                    .any(|l| l.entity == Entity::UserClient(named(user), named(c)))
            };
            assert!(has(kept) && !has(refused), "{user}");
        }
    }
    println!(
        "{ROUNDS} races: won by a {:?}, by b {:?}",
        won.get("a"),
        won.get("b")
    );
}

/// validate_only answers from this instance's state and appends nothing.
#[tokio::test]
async fn validate_only_writes_nothing() {
    logs();
    let topic = unique_topic("validate");
    let a = open(&topic, "a").await;
    ok(&a
        .alter(
            &[Alteration::new(&Entity::User(named("u"))).set("producer_byte_rate", 100.0)],
            false,
        )
        .unwrap());
    let end = high_watermark(&topic);
    let generation = a.engine().generation();
    let results = a
        .alter(
            &[
                Alteration::new(&Entity::User(named("v"))).set("producer_byte_rate", 5.0),
                Alteration::new(&Entity::User(named("w"))).set("producer_byte_rate", -1.0),
            ],
            true,
        )
        .unwrap();
    assert!(results[0].error.is_none());
    assert_eq!(
        results[1].error.as_ref().map(|e| e.code),
        Some(ErrorCode::INVALID_REQUEST)
    );
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(high_watermark(&topic), end);
    assert_eq!(a.engine().generation(), generation);
    assert_eq!(a.engine().entity_count(), 1);
}

/// The topic is created as the log needs it; a topic of that name that cannot serve is refused.
#[tokio::test]
async fn the_topic_is_created_or_checked() {
    logs();
    let admin = admin();
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
    // Created by the first instance: one partition, compacted.
    let topic = unique_topic("created");
    let _a = open(&topic, "a").await;
    let configs = admin
        .describe_configs([&ResourceSpecifier::Topic(&topic)], &options)
        .await
        .unwrap();
    let resource = configs.into_iter().next().unwrap().unwrap();
    assert_eq!(
        resource
            .get("cleanup.policy")
            .and_then(|e| e.value.as_deref()),
        Some("compact")
    );
    let metadata = admin
        .inner()
        .fetch_metadata(Some(&topic), Duration::from_secs(10))
        .unwrap();
    assert_eq!(metadata.topics()[0].partitions().len(), 1);

    let refused = |partitions: i32, policy: &'static str, why: &'static str, want: TopicProblem| {
        let admin = &admin;
        let options = &options;
        async move {
            let topic = unique_topic("refused");
            let new = NewTopic::new(&topic, partitions, TopicReplication::Fixed(1))
                .set("cleanup.policy", policy);
            let created = admin.create_topics([&new], options).await.unwrap();
            assert!(created[0].is_ok(), "{created:?}");
            let engine = Arc::new(Engine::new());
            match ConfigLog::open(config(&topic, "a"), engine).await {
                Err(e @ ClusterError::Topic { .. }) => {
                    let ClusterError::Topic { topic: t, problem } = &e else {
                        unreachable!()
                    };
                    assert_eq!(*t, topic);
                    assert_eq!(*problem, want);
                    assert!(e.to_string().contains(why), "{e}");
                    println!("refused: {e}");
                }
                other => panic!("{partitions} partitions, {policy}: {other:?}"),
            }
        }
    };
    let policy = |found: &str| TopicProblem::CleanupPolicy {
        found: found.to_owned(),
        required: "compact",
        why: "its records are the configuration's whole history and must be kept: the topic \
              must be compacted (cleanup.policy=compact), and not deleted by retention",
    };
    refused(
        3,
        "compact",
        "it has 3 partitions and must have exactly 1",
        TopicProblem::Partitions {
            found: 3,
            required: 1,
            why: "a single partition is what puts every batch in one order",
        },
    )
    .await;
    refused(
        1,
        "delete",
        "cleanup.policy is \"delete\"",
        policy("delete"),
    )
    .await;
    refused(
        1,
        "compact,delete",
        "cleanup.policy is \"compact,delete\"",
        policy("compact,delete"),
    )
    .await;
}

/// A record no instance can read stops every instance's alterations, loudly, and the
/// configuration they have stays enforced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_record_stops_alterations_not_enforcement() {
    logs();
    let topic = unique_topic("unreadable");
    let a = open(&topic, "a").await;
    ok(&a
        .alter(
            &[Alteration::new(&Entity::User(named("u"))).set("producer_byte_rate", 100.0)],
            false,
        )
        .unwrap());
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .create()
        .unwrap();
    let bad = br#"{"v":3,"origin":"future","seq":1,"snapshot":{}}"#;
    producer
        .send(BaseRecord::to(&topic).key("future/1").payload(&bad[..]))
        .map_err(|(e, _)| e)
        .unwrap();
    producer.flush(Duration::from_secs(10)).unwrap();
    eventually(Duration::from_secs(10), "a stops following", || {
        a.failure().is_some()
    });
    let failure = a.failure().unwrap();
    assert_eq!(
        (failure.offset, &failure.problem),
        (1, &RecordProblem::Version(3))
    );
    let text = failure.to_string();
    assert!(
        text.contains("at offset 1") && text.contains("record version 3"),
        "{text}"
    );
    let e = a
        .alter(
            &[Alteration::new(&Entity::User(named("v"))).set("producer_byte_rate", 1.0)],
            false,
        )
        .unwrap_err();
    assert!(
        matches!(
            e,
            ClusterError::Stopped {
                produced: false,
                ..
            }
        ),
        "{e}"
    );
    assert!(!e.may_still_apply());
    assert!(e.to_string().contains("refused"), "{e}");
    // Still enforcing what it had.
    let q = a.engine().resolve("u", "c");
    assert_eq!(
        q.get(kquota::QuotaKey::PRODUCER_BROKER_BPS)
            .map(|q| q.limit),
        Some(100.0)
    );
    // A new instance stops at the same record, holding what was before it.
    let engine = Arc::new(Engine::new());
    match ConfigLog::open(config(&topic, "b"), Arc::clone(&engine)).await {
        Err(ClusterError::Record {
            offset: 1,
            problem: RecordProblem::Version(3),
        }) => {}
        other => panic!("{other:?}"),
    }
    assert_eq!(everything(&engine), everything(a.engine()));
}

/// The engine given must be empty, and a commit through another engine is refused.
#[tokio::test]
async fn engines_are_checked() {
    logs();
    let topic = unique_topic("engines");
    let full = Arc::new(Engine::new());
    ok(&full.alter(
        &[Alteration::new(&Entity::User(named("u"))).set("producer_byte_rate", 1.0)],
        false,
    ));
    match ConfigLog::open(config(&topic, "a"), full).await {
        Err(ClusterError::Config(ConfigProblem::EngineNotEmpty { entities: 1 })) => {}
        other => panic!("{other:?}"),
    }
    let a = open(&topic, "a").await;
    let other = Engine::new();
    let e = Persistence::commit(&a, &other, &[], false).unwrap_err();
    assert!(e.to_string().contains("another engine"), "{e}");
    assert!(Persistence::persist(&a, &[]).is_err());
}

/// Kafka stopped: enforcement goes on, commits fail within the timeout, not acknowledged; Kafka
/// back on the same port: the followers go on by themselves and commits work again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_unreachable_then_back() {
    logs();
    let stop = std::env::var("KQUOTA_CLUSTER_BROKER_STOP")
        .expect("KQUOTA_CLUSTER_BROKER_STOP is not set: run kquota-cluster/tests/kafka/run.sh");
    let start = std::env::var("KQUOTA_CLUSTER_BROKER_START")
        .expect("KQUOTA_CLUSTER_BROKER_START is not set: run kquota-cluster/tests/kafka/run.sh");
    let run = |cmd: &str| {
        let status = std::process::Command::new(cmd).status().unwrap();
        assert!(status.success(), "{cmd}: {status}");
    };
    let topic = unique_topic("outage");
    let timeout = Duration::from_secs(3);
    let open_with = |instance: &'static str| {
        let mut c = config(&topic, instance);
        c.alter_timeout = timeout;
        ConfigLog::open(c, Arc::new(Engine::new()))
    };
    let a = open_with("a").await.unwrap();
    let b = open_with("b").await.unwrap();
    let alice = Entity::User(named("alice"));
    ok(&a
        .alter(
            &[Alteration::new(&alice).set("producer_byte_rate", 100.0)],
            false,
        )
        .unwrap());
    eventually(Duration::from_secs(10), "b sees alice", || {
        b.engine().entity_count() == 1
    });

    run(&stop);
    let started = Instant::now();
    let e = a
        .alter(
            &[Alteration::new(&alice).set("producer_byte_rate", 200.0)],
            false,
        )
        .unwrap_err();
    let took = started.elapsed();
    println!(
        "commit with Kafka stopped: {e} after {:.2} s",
        took.as_secs_f64()
    );
    assert!(
        matches!(e, ClusterError::NotAcknowledged { after, .. } if after == timeout),
        "{e}"
    );
    assert!(e.may_still_apply());
    assert!(
        e.to_string()
            .contains("may still be applied if Kafka accepted it"),
        "{e}"
    );
    assert!(
        took >= timeout && took < timeout + Duration::from_secs(2),
        "{took:?}"
    );
    for log in [&a, &b] {
        let q = log.engine().resolve("alice", "c");
        assert_eq!(
            q.get(kquota::QuotaKey::PRODUCER_BROKER_BPS)
                .map(|q| q.limit),
            Some(100.0),
            "still enforcing at {}",
            log.instance_id()
        );
        assert!(log.failure().is_none());
    }
    std::thread::sleep(Duration::from_secs(2));

    run(&start);
    let back = Instant::now();
    // The first commits may time out while the clients reconnect and the broker settles.
    let mut attempts = 0;
    let results = loop {
        attempts += 1;
        match a.alter(
            &[Alteration::new(&alice).set("producer_byte_rate", 300.0)],
            false,
        ) {
            Ok(r) => break r,
            Err(e) => {
                assert!(
                    back.elapsed() < Duration::from_secs(60),
                    "no commit within 60 s: {e}"
                );
                println!("commit after the restart: {e}");
            }
        }
    };
    ok(&results);
    println!(
        "commits work again {:.2} s after the broker's restart ({attempts} attempts)",
        back.elapsed().as_secs_f64()
    );
    eventually(Duration::from_secs(30), "b follows again", || {
        b.engine()
            .resolve("alice", "c")
            .get(kquota::QuotaKey::PRODUCER_BROKER_BPS)
            .map(|q| q.limit)
            == Some(300.0)
    });
    assert_eq!(everything(a.engine()), everything(b.engine()));
    // What the log holds is what both applied (the batch that timed out is in it or not, alike).
    let records = read_log(&topic);
    println!(
        "the log holds {} batches (the timed-out one {})",
        records.len(),
        if records
            .iter()
            .any(|(_, _, v)| v["alterations"][0]["ops"][0]["value"] == 200.0)
        {
            "included"
        } else {
            "not included"
        }
    );
    assert_eq!(a.applied_offset(), records.len() as i64);
}
