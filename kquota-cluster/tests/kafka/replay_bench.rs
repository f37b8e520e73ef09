//! The time until a fresh instance serves, with 10K, 100K and 1M batches in the history and
//! 100K entities in the state: replaying the whole history (the baseline: the log before any
//! snapshot) and replaying the compacted log (a snapshot and what came after), side by side in
//! the same run. Not part of the suite (minutes, and meant for a release build):
//!
//! ```sh
//! bash kquota-cluster/tests/kafka/bench.sh            # KQUOTA_BENCH_RUNS=5, sizes 10000,100000,1000000
//! ```
//!
//! The history is written straight to the topic, in the batch records' documented form, by a
//! fast producer (one "writer" origin): 10K batches of 10 alterations, 100K of one, or 100K that
//! create the entities and 900K that alter them again. Then an instance with `snapshot_records
//! = 1` replays it, claims, and writes the snapshot and the tombstones; the topic's segments
//! roll every two seconds, and the broker's cleaner compacts the log.

use super::*;

use rdkafka::types::RDKafkaErrorCode;

const ENTITIES: usize = 100_000;

fn runs() -> usize {
    std::env::var("KQUOTA_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5)
}

fn sizes() -> Vec<usize> {
    std::env::var("KQUOTA_BENCH_SIZES")
        .unwrap_or_else(|_| "10000,100000,1000000".into())
        .split(',')
        .map(|s| s.trim().parse().expect("KQUOTA_BENCH_SIZES: numbers"))
        .collect()
}

/// A batch record of `alterations` (entity index, value), as an instance writes one.
fn batch(seq: usize, alterations: &[(usize, f64)]) -> (String, Vec<u8>) {
    let alts: Vec<serde_json::Value> = alterations
        .iter()
        .map(|(e, v)| {
            serde_json::json!({"entity":[{"type":"user","name":format!("bench-{e:06}")}],
                               "ops":[{"key":"producer_byte_rate","value":v}]})
        })
        .collect();
    let value = serde_json::json!({"v":1,"origin":"writer","seq":seq,"validate_only":false,
                                   "alterations":alts});
    (format!("writer/{seq}"), serde_json::to_vec(&value).unwrap())
}

/// Writes a history of `size` batches over ENTITIES entities; returns its bytes.
fn write_history(topic: &str, size: usize) -> usize {
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .set("linger.ms", "50")
        .set("compression.codec", "lz4")
        .set("queue.buffering.max.messages", "500000")
        .set("acks", "all")
        .create()
        .unwrap();
    let per = ENTITIES.div_ceil(size).max(1);
    let mut x: u64 = 0x2545_F491_4F6C_DD1D;
    let mut bytes = 0;
    for seq in 1..=size {
        let alterations: Vec<(usize, f64)> = if seq * per <= ENTITIES || per > 1 {
            // Creating the entities, `per` to a batch.
            ((seq - 1) * per..(seq * per).min(ENTITIES))
                .map(|e| (e, 1000.0 + e as f64))
                .collect()
        } else {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            vec![((x % ENTITIES as u64) as usize, (1 + x % 1_000_000) as f64)]
        };
        let (key, value) = batch(seq, &alterations);
        bytes += value.len();
        let mut record = BaseRecord::to(topic).partition(0).key(&key).payload(&value);
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((
                    rdkafka::error::KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull),
                    r,
                )) => {
                    producer.poll(Duration::from_millis(10));
                    record = r;
                }
                Err((e, _)) => panic!("writing the history: {e}"),
            }
        }
    }
    producer.flush(Duration::from_secs(300)).unwrap();
    bytes
}

/// The records in the topic now (tombstones included), counted without decoding them, and the
/// bytes of the snapshot chunks among them.
fn count_records(topic: &str) -> (usize, usize) {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .set("group.id", "kquota-bench-counter")
        .set("enable.partition.eof", "true")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, Offset::Beginning)
        .unwrap();
    consumer.assign(&tpl).unwrap();
    let (mut n, mut snapshot_bytes) = (0, 0);
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        assert!(Instant::now() < deadline, "counting {topic}");
        match consumer.poll(Duration::from_millis(500)) {
            Some(Ok(m)) => {
                n += 1;
                if m.key().is_some_and(|k| k.ends_with(b"/snapshot")) {
                    snapshot_bytes += m.payload().map_or(0, <[u8]>::len);
                }
            }
            Some(Err(rdkafka::error::KafkaError::PartitionEOF(_))) => return (n, snapshot_bytes),
            Some(Err(e)) => panic!("{e}"),
            None => {}
        }
    }
}

fn bench_config(topic: &str, instance: &str, every: u64) -> ClusterConfig {
    let mut c = config(topic, instance);
    c.snapshot_records = every;
    c.open_timeout = Duration::from_secs(300);
    c
}

/// Opens a fresh instance; how long until it serves, and what it read.
async fn fresh(topic: &str, name: &str) -> (Duration, ConfigLog) {
    let started = Instant::now();
    let log = ConfigLog::open(bench_config(topic, name, 0), Arc::new(Engine::new()))
        .await
        .unwrap();
    (started.elapsed(), log)
}

fn spread(mut xs: Vec<Duration>) -> String {
    xs.sort();
    format!(
        "median {:.0} ms (min {:.0}, max {:.0}; {} runs)",
        ms(xs[xs.len() / 2]),
        ms(xs[0]),
        ms(xs[xs.len() - 1]),
        xs.len()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark: bash kquota-cluster/tests/kafka/bench.sh"]
async fn replay_bench() {
    logs();
    let mut table = Vec::new();
    for size in sizes() {
        let topic = unique_topic(&format!("bench-{size}"));
        let new = NewTopic::new(&topic, 1, TopicReplication::Fixed(1))
            .set("cleanup.policy", "compact")
            .set("segment.ms", "2000")
            .set("min.cleanable.dirty.ratio", "0.01")
            .set("delete.retention.ms", "0")
            .set("file.delete.delay.ms", "1000");
        let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
        assert!(admin().create_topics([&new], &options).await.unwrap()[0].is_ok());
        let t = Instant::now();
        let bytes = write_history(&topic, size);
        let history_end = high_watermark(&topic);
        println!(
            "{size} batches ({:.1} MB of JSON) written in {:.1} s",
            bytes as f64 / 1e6,
            t.elapsed().as_secs_f64()
        );
        // The baseline: the whole history replayed.
        let mut baseline = Vec::new();
        let mut want = None;
        for i in 0..runs() {
            let (took, log) = fresh(&topic, &format!("base-{i}")).await;
            assert_eq!(log.progress().records_read, history_end as u64);
            assert_eq!(log.engine().entity_count(), ENTITIES);
            if want.is_none() {
                want = Some(everything(log.engine()));
            }
            baseline.push(took);
        }
        // An instance that writes a snapshot.
        let t = Instant::now();
        let writer = ConfigLog::open(bench_config(&topic, "s", 1), Arc::new(Engine::new()))
            .await
            .unwrap();
        eventually(Duration::from_secs(300), "the snapshot", || {
            writer.progress().snapshot.is_some()
        });
        let snapshot_at = t.elapsed();
        // Its tombstones: one per batch of the history.
        eventually(Duration::from_secs(300), "the tombstones", || {
            high_watermark(&topic) >= 2 * history_end
        });
        let tombstones_at = t.elapsed();
        // Compaction: segments roll when a record comes after segment.ms.
        let t = Instant::now();
        let writer = Arc::new(writer);
        let (records, snapshot_bytes) = loop {
            let w = Arc::clone(&writer);
            tokio::task::spawn_blocking(move || {
                ok(&w
                    .alter(
                        &[Alteration::new(&Entity::User(named("roll")))
                            .set("producer_byte_rate", 1.0)],
                        false,
                    )
                    .unwrap())
            })
            .await
            .unwrap();
            tokio::time::sleep(Duration::from_secs(3)).await;
            let (n, snapshot_bytes) = count_records(&topic);
            if n < 1_000 {
                break (n, snapshot_bytes);
            }
            assert!(
                t.elapsed() < Duration::from_secs(600),
                "not compacted within 10 min ({n} records)"
            );
        };
        let compacted_in = t.elapsed();
        let mut measured = Vec::new();
        let mut read = 0;
        for i in 0..runs() {
            let (took, log) = fresh(&topic, &format!("fresh-{i}")).await;
            read = log.progress().records_read;
            // The same configuration as the history's (and the alterations since).
            let mut got = everything(log.engine());
            got.retain(|l| l.entity != Entity::User(named("roll")));
            assert_eq!(Some(&got), want.as_ref(), "the snapshot's state");
            measured.push(took);
        }
        let row = format!(
            "| {size} | {history_end} ({:.0} MB) | {} | {records}, the snapshot {:.1} MB ({read} read) | {} | {:.1} s / {:.1} s / {:.0} s |",
            bytes as f64 / 1e6,
            spread(baseline.clone()),
            snapshot_bytes as f64 / 1e6,
            spread(measured),
            snapshot_at.as_secs_f64(),
            tombstones_at.as_secs_f64(),
            compacted_in.as_secs_f64()
        );
        println!("{row}");
        table.push(row);
        drop(writer);
    }
    println!(
        "| batches | records in the log (JSON) | time to serve, whole history | records after \
         compaction (read by a fresh instance) | time to serve, snapshot and tail | snapshot \
         complete / tombstones written (from the writer's open) / compacted |"
    );
    println!("| --- | --- | --- | --- | --- | --- |");
    for row in table {
        println!("{row}");
    }
}
