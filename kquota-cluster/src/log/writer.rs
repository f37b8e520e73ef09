//! The snapshot writer: a thread of the configuration log that produces this instance's claims,
//! and, when a claim of its wins, the snapshot's chunks and then the tombstones for everything
//! the snapshot covers. The follower never waits for it.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::KafkaError;
use rdkafka::message::DeliveryResult;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer, ProducerContext};
use rdkafka::types::RDKafkaErrorCode;
use tracing::{info, warn};

use super::record::Claim;
use super::replica::SnapshotJob;
use crate::config::ClusterConfig;
use crate::error::{ClusterError, KafkaClient};
use crate::kafka::{client, forward_log};

/// How long the writer waits for Kafka to acknowledge a snapshot's chunks, or its tombstones,
/// before it gives up on the snapshot (another instance claims one later).
const ACK_TIMEOUT: Duration = Duration::from_secs(120);

/// What the writer is asked to do.
#[derive(Debug)]
pub(super) enum Job {
    /// Produce this claim.
    Claim(Claim),
    /// Write this snapshot and its tombstones.
    Write(SnapshotJob),
}

/// The writer thread, and the way to it.
pub(super) struct Writer {
    jobs: Option<mpsc::Sender<Job>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Writer {
    /// Makes the producer and starts the thread.
    pub(super) fn start(config: &ClusterConfig) -> Result<Writer, ClusterError> {
        let failures = Arc::new(Failures::default());
        let mut c = client(config);
        c.set("enable.idempotence", "true")
            .set("acks", "all")
            // A snapshot is many records at once: batch them.
            .set("linger.ms", "20")
            .set("compression.codec", "lz4")
            .set("message.timeout.ms", ACK_TIMEOUT.as_millis().to_string());
        let producer: BaseProducer<Context> = c
            .create_with_context(Context {
                failures: Arc::clone(&failures),
            })
            .map_err(|source| ClusterError::Client {
                client: KafkaClient::SnapshotProducer,
                source,
            })?;
        let (jobs, rx) = mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let topic = config.config_topic.clone();
        let thread = {
            let stop = Arc::clone(&stop);
            std::thread::Builder::new()
                .name(format!("kquota-snapshot-{}", config.instance_id))
                .spawn(move || {
                    let mut w = Work {
                        topic,
                        producer,
                        failures,
                        stop,
                    };
                    while let Ok(job) = rx.recv() {
                        w.run(job);
                    }
                })
                .map_err(|source| ClusterError::Thread {
                    thread: "snapshot writer",
                    source,
                })?
        };
        Ok(Writer {
            jobs: Some(jobs),
            stop,
            thread: Some(thread),
        })
    }

    /// Hands the writer a job (it does them in order).
    pub(super) fn send(&self, job: Job) {
        if let Some(jobs) = &self.jobs {
            let _ = jobs.send(job);
        }
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        self.jobs = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Delivery failures since they were last looked at.
#[derive(Debug, Default)]
struct Failures {
    count: AtomicUsize,
    first: Mutex<Option<KafkaError>>,
}

/// The producer's context: delivery failures counted, logs through `tracing`.
struct Context {
    failures: Arc<Failures>,
}

impl ClientContext for Context {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        forward_log(level, fac, message);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        tracing::debug!(target: "librdkafka", "the snapshot writer's producer: {error}: {reason}");
    }
}

impl ProducerContext for Context {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if let Err((e, _)) = result {
            self.failures.count.fetch_add(1, Ordering::Relaxed);
            self.failures.first.lock().get_or_insert_with(|| e.clone());
        }
    }
}

struct Work {
    topic: String,
    producer: BaseProducer<Context>,
    failures: Arc<Failures>,
    stop: Arc<AtomicBool>,
}

impl Work {
    fn run(&mut self, job: Job) {
        match job {
            Job::Claim(claim) => {
                let (key, value) = (claim.key(), claim.encode());
                if let Err(e) = self.send(&key, Some(&value)) {
                    warn!(topic = %self.topic, "the claim {key} was not produced: {e}");
                }
                self.producer.poll(Duration::ZERO);
            }
            Job::Write(job) => self.write(job),
        }
    }

    fn write(&mut self, job: SnapshotJob) {
        let started = Instant::now();
        let claim = job.claim;
        let bytes: usize = job.records.iter().map(|(_, v)| v.len()).sum();
        self.take_failures();
        for (key, value) in &job.records {
            if let Err(e) = self.send(key, Some(value)) {
                warn!(topic = %self.topic, claim, "the snapshot was not written: {e}");
                return;
            }
        }
        // Only a snapshot complete in the log may let compaction remove what it covers.
        if let Err(e) = self.acknowledged() {
            warn!(
                topic = %self.topic,
                claim,
                "the snapshot was not acknowledged ({e}): nothing it covers is tombstoned; \
                 another snapshot is claimed later"
            );
            return;
        }
        let written = started.elapsed();
        for key in &job.tombstones {
            if let Err(e) = self.send(key, None) {
                warn!(topic = %self.topic, claim, "tombstones not all written: {e}");
                return;
            }
        }
        if let Err(e) = self.acknowledged() {
            warn!(
                topic = %self.topic,
                claim,
                "tombstones not all acknowledged ({e}): what they cover stays in the log until \
                 a later snapshot tombstones it"
            );
            return;
        }
        info!(
            topic = %self.topic,
            claim,
            entities = job.entities,
            chunks = job.records.len(),
            bytes,
            tombstones = job.tombstones.len(),
            snapshot_ms = written.as_millis() as u64,
            total_ms = started.elapsed().as_millis() as u64,
            "wrote the snapshot of the configuration and the tombstones of what it covers"
        );
    }

    /// Produces one record to partition 0 (`None`: a tombstone), waiting while librdkafka's
    /// queue is full.
    fn send(&self, key: &str, value: Option<&[u8]>) -> Result<(), KafkaError> {
        let mut record = BaseRecord::<str, [u8], ()>::to(&self.topic)
            .partition(0)
            .key(key);
        if let Some(v) = value {
            record = record.payload(v);
        }
        loop {
            match self.producer.send(record) {
                Ok(()) => return Ok(()),
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                    if self.stop.load(Ordering::Relaxed) {
                        return Err(KafkaError::Canceled);
                    }
                    self.producer.poll(Duration::from_millis(50));
                    record = r;
                }
                Err((e, _)) => return Err(e),
            }
        }
    }

    /// Waits until everything produced is acknowledged, and says whether all of it was.
    fn acknowledged(&self) -> Result<(), KafkaError> {
        let deadline = Instant::now() + ACK_TIMEOUT;
        while self.producer.in_flight_count() > 0 {
            if self.stop.load(Ordering::Relaxed) || Instant::now() >= deadline {
                return Err(KafkaError::Canceled);
            }
            self.producer.poll(Duration::from_millis(50));
        }
        match self.take_failures() {
            None => Ok(()),
            Some(e) => Err(e),
        }
    }

    fn take_failures(&self) -> Option<KafkaError> {
        let n = self.failures.count.swap(0, Ordering::Relaxed);
        let first = self.failures.first.lock().take();
        (n > 0).then(|| first.unwrap_or(KafkaError::Canceled))
    }
}
