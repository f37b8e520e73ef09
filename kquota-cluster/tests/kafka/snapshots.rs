//! Snapshots of the configuration log against a real broker: the log chooses one writer, the
//! snapshot and its tombstones let compaction shrink the log to about the size of the state, a
//! fresh instance then replays the snapshot and what came after (the same state as the
//! history's), and instances that parted are caught at the next snapshot.

use super::*;

use kquota::SubQuotaPolicy;

/// A configuration topic made for a test that waits for compaction: segments roll after a
/// second and are cleaned as soon as any of them is dirty, tombstones go at the next pass.
/// (The topics kquota creates roll hourly: compaction then takes an hour, not seconds.)
async fn compacting_topic(what: &str) -> String {
    let topic = unique_topic(what);
    let new = NewTopic::new(&topic, 1, TopicReplication::Fixed(1))
        .set("cleanup.policy", "compact")
        .set("segment.ms", "1000")
        .set("min.cleanable.dirty.ratio", "0.01")
        .set("delete.retention.ms", "0")
        .set("min.compaction.lag.ms", "0")
        .set("file.delete.delay.ms", "1000");
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
    let created = admin().create_topics([&new], &options).await.unwrap();
    assert!(created[0].is_ok(), "{created:?}");
    topic
}

/// Every record of the topic as (offset, key, value as JSON or `None` for a tombstone).
fn read_records(topic: &str) -> Vec<(i64, String, Option<serde_json::Value>)> {
    let end = high_watermark(topic);
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "true")
        .set("group.id", "kquota-test-reader")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, Offset::Beginning)
        .unwrap();
    consumer.assign(&tpl).unwrap();
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        assert!(Instant::now() < deadline, "could not read {topic} to {end}");
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => {
                let key = String::from_utf8(m.key().unwrap().to_vec()).unwrap();
                let value = m.payload().map(|p| serde_json::from_slice(p).unwrap());
                out.push((m.offset(), key, value));
                if m.offset() + 1 >= end {
                    return out;
                }
            }
            Some(Err(rdkafka::error::KafkaError::PartitionEOF(_))) => return out,
            Some(Err(e)) => panic!("reading {topic}: {e}"),
            None => {}
        }
    }
}

fn snapshot_config(topic: &str, instance: &str, every: u64) -> ClusterConfig {
    let mut c = config(topic, instance);
    c.snapshot_records = every;
    c
}

async fn open_with(c: ClusterConfig) -> ConfigLog {
    let id = c.instance_id.clone();
    ConfigLog::open(c, Arc::new(Engine::new()))
        .await
        .unwrap_or_else(|e| panic!("instance {id} could not open: {e}"))
}

/// Alters `entities` users over and over: the state stays that size, the history grows.
fn churn(log: &ConfigLog, rounds: usize, entities: usize) {
    for i in 0..rounds {
        let entity = Entity::User(named(&format!("churn-{}", i % entities)));
        ok(&log
            .alter(
                &[Alteration::new(&entity).set("producer_byte_rate", 1000.0 + i as f64)],
                false,
            )
            .unwrap());
    }
}

/// The snapshot and its tombstones let compaction shrink the log to about the size of the
/// state, and a fresh instance replays that to the same configuration.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_lets_compaction_shrink_the_log() {
    logs();
    let topic = compacting_topic("shrink").await;
    let a = Arc::new(open_with(snapshot_config(&topic, "a", 100)).await);
    let history = 400;
    let a2 = Arc::clone(&a);
    tokio::task::spawn_blocking(move || churn(&a2, history, 20))
        .await
        .unwrap();
    // A snapshot claimed after the history: every batch of it is covered. A claim is due only
    // `every` batches after the last one's cover (and a moment later), so alterations go on
    // until one lands past the history's end (how far the history's own claims got depends on
    // how fast it was written).
    let end = high_watermark(&topic);
    let deadline = Instant::now() + Duration::from_secs(60);
    while !a.progress().snapshot.is_some_and(|c| c >= end) {
        assert!(
            Instant::now() < deadline,
            "no snapshot claimed after the history's end ({end}) within 60 s: {:?}",
            a.progress()
        );
        let a2 = Arc::clone(&a);
        tokio::task::spawn_blocking(move || churn(&a2, 5, 20))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let covered = a.progress().snapshot.unwrap();
    // Segments roll only when a record comes after segment.ms: one alteration a second while
    // the cleaner (every 15 s by default) catches up.
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut i = 0;
    let records = loop {
        let records = read_records(&topic);
        let batches = records
            .iter()
            .filter(|(_, _, v)| v.as_ref().is_some_and(|v| v["v"] == 1))
            .count();
        // The covered batches go at one cleaning, their tombstones at a later one.
        if batches <= 120 && records.len() < (high_watermark(&topic) as usize) / 2 {
            break records;
        }
        assert!(
            Instant::now() < deadline,
            "the log was not compacted within 120 s: {} records, {batches} batches",
            records.len()
        );
        let a2 = Arc::clone(&a);
        tokio::task::spawn_blocking(move || churn(&a2, 1, 20))
            .await
            .unwrap();
        i += 1;
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    let hw = high_watermark(&topic);
    let tombstones = records.iter().filter(|(_, _, v)| v.is_none()).count();
    let chunks = records
        .iter()
        .filter(|(_, _, v)| v.as_ref().is_some_and(|v| v["kind"] == "snapshot"))
        .count();
    println!(
        "{history} + {i} batches on 20 entities: the log ends at offset {hw} and holds {} records \
         after compaction ({chunks} snapshot chunks, {tombstones} tombstones); the latest \
         snapshot a read covers offsets below {covered}",
        records.len()
    );
    assert!(
        records.len() < (hw as usize) / 2,
        "{} of {hw}",
        records.len()
    );
    // Records are gone from the log: what a fresh instance reads is the compacted log.
    let started = Instant::now();
    let b = open_with(snapshot_config(&topic, "b", 0)).await;
    let took = started.elapsed();
    let progress = b.progress();
    println!(
        "a fresh instance read {} records (the log ends at {}) in {:.1} ms; snapshot {:?}",
        progress.records_read,
        progress.applied_offset,
        ms(took),
        progress.snapshot
    );
    assert!(progress.snapshot.is_some(), "{progress:?}");
    assert!(
        progress.records_read < (progress.applied_offset as u64) / 2,
        "{progress:?}"
    );
    eventually(Duration::from_secs(10), "b holds what a holds", || {
        b.applied_offset() == a.applied_offset()
    });
    assert_eq!(everything(b.engine()), everything(a.engine()));
    assert_eq!(b.engine().entity_count(), 20);
    // And it commits like any other.
    ok(&b
        .alter(
            &[Alteration::new(&Entity::User(named("after"))).set("producer_byte_rate", 5.0)],
            false,
        )
        .unwrap());
    eventually(Duration::from_secs(10), "a sees b's alteration", || {
        a.engine().entity_count() == 21
    });
    assert!(a.failure().is_none() && b.failure().is_none());
}

/// Three instances altering at once, each ready to claim: the first claim in the log after a
/// snapshot wins, its instance alone writes the snapshot, and all three agree with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_log_chooses_one_snapshot_writer() {
    logs();
    let topic = unique_topic("writer");
    let logs: Vec<Arc<ConfigLog>> = vec![
        Arc::new(open_with(snapshot_config(&topic, "a", 40)).await),
        Arc::new(open_with(snapshot_config(&topic, "b", 40)).await),
        Arc::new(open_with(snapshot_config(&topic, "c", 40)).await),
    ];
    let handles: Vec<_> = logs
        .iter()
        .enumerate()
        .map(|(k, log)| {
            let log = Arc::clone(log);
            std::thread::spawn(move || {
                for i in 0..100 {
                    let entity = Entity::User(named(&format!("w-{k}-{}", i % 10)));
                    ok(&log
                        .alter(
                            &[Alteration::new(&entity).set("producer_byte_rate", 1.0 + i as f64)],
                            false,
                        )
                        .unwrap());
                    std::thread::sleep(Duration::from_millis(10));
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    // The last batches wait for a last snapshot: claims come within the spread (2 s).
    eventually(Duration::from_secs(30), "a snapshot of most of it", || {
        logs.iter()
            .all(|l| l.progress().snapshot.is_some_and(|c| c > 200))
    });
    let records = read_records(&topic);
    let claims: Vec<(i64, String)> = records
        .iter()
        .filter_map(|(o, _, v)| {
            let v = v.as_ref()?;
            (v["kind"] == "claim").then(|| (*o, v["origin"].as_str().unwrap().to_owned()))
        })
        .collect();
    let mut written: Vec<(i64, String)> = records
        .iter()
        .filter_map(|(_, _, v)| {
            let v = v.as_ref()?;
            (v["kind"] == "snapshot" && v["index"] == 0).then(|| {
                (
                    v["claim"].as_i64().unwrap(),
                    v["origin"].as_str().unwrap().to_owned(),
                )
            })
        })
        .collect();
    written.sort();
    println!("claims (offset, by): {claims:?}");
    println!("snapshots written (claim, by): {written:?}");
    // 300 batches, a claim due every 40 and made within the spread: at least two rounds.
    assert!(written.len() >= 2, "{written:?}");
    let mut last_snapshot_end = -1;
    for (claim, by) in &written {
        // Written by the instance that made the claim it names...
        let claimed_by = claims.iter().find(|(o, _)| o == claim).map(|(_, b)| b);
        assert_eq!(claimed_by, Some(by), "claim {claim}");
        // ...the first claim after the previous snapshot: the log's choice.
        let first = claims
            .iter()
            .find(|(o, _)| *o > last_snapshot_end)
            .map(|(o, _)| *o);
        assert_eq!(
            first,
            Some(*claim),
            "claims {claims:?}, written {written:?}"
        );
        // Once, by one instance.
        assert_eq!(written.iter().filter(|(c, _)| c == claim).count(), 1);
        last_snapshot_end = records
            .iter()
            .filter(|(_, _, v)| {
                v.as_ref()
                    .is_some_and(|v| v["kind"] == "snapshot" && v["claim"] == *claim)
            })
            .map(|(o, _, _)| *o)
            .max()
            .unwrap();
    }
    let writers: std::collections::BTreeSet<&str> =
        written.iter().map(|(_, b)| b.as_str()).collect();
    println!("snapshot writers: {writers:?}");
    eventually(Duration::from_secs(10), "all three at the end", || {
        let end = high_watermark(&topic);
        logs.iter().all(|l| l.applied_offset() == end)
    });
    for l in &logs[1..] {
        assert_eq!(everything(l.engine()), everything(logs[0].engine()));
        assert!(l.failure().is_none(), "{:?}", l.failure());
    }
}

/// Instances that parted (here: another sub-quota policy, which the log's batches are validated
/// with) find out at the next snapshot: the one that differs from the snapshot stops following,
/// saying why; the others go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_that_parted_stop_at_the_next_snapshot() {
    logs();
    let topic = unique_topic("parted");
    let a = open_with(snapshot_config(&topic, "a", 3)).await;
    let lax = Arc::new(
        Engine::builder()
            .policy(SubQuotaPolicy::Kafka)
            .build()
            .unwrap(),
    );
    let b = ConfigLog::open(snapshot_config(&topic, "b", 0), lax)
        .await
        .unwrap();
    let alice = || Entity::User(named("alice"));
    ok(&a
        .alter(
            &[Alteration::new(&alice()).set("producer_byte_rate", 10.0)],
            false,
        )
        .unwrap());
    // More than alice's total: a refuses it (kip55), b applies it (kafka).
    let results = a
        .alter(
            &[
                Alteration::new(&Entity::UserClient(named("alice"), named("c")))
                    .set("producer_byte_rate", 20.0),
            ],
            false,
        )
        .unwrap();
    assert_eq!(
        results[0].error.as_ref().map(|e| e.code),
        Some(ErrorCode::POLICY_VIOLATION)
    );
    ok(&a
        .alter(
            &[Alteration::new(&Entity::User(named("bob"))).set("producer_byte_rate", 1.0)],
            false,
        )
        .unwrap());
    eventually(Duration::from_secs(30), "b stops at a's snapshot", || {
        b.failure().is_some()
    });
    let failure = b.failure().unwrap();
    println!("b: {failure}");
    assert!(
        matches!(&failure.problem, RecordProblem::Snapshot(why) if why.contains("have parted")),
        "{failure}"
    );
    assert!(a.failure().is_none());
    let e = b
        .alter(
            &[Alteration::new(&alice()).set("producer_byte_rate", 1.0)],
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
}
