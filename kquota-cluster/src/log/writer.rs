//! The snapshot writer: a thread of the configuration log that produces this instance's claims,
//! and, when a claim of its wins, the snapshot's chunks and then the tombstones for everything
//! the snapshot covers. The follower never waits for it.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use tracing::{info, warn};

use super::record::Claim;
use super::replica::SnapshotJob;
use crate::config::ClusterConfig;
use crate::error::ClusterError;
use crate::kafka::{queue_full, KafkaError, Producer};
use crate::worker::{Stop, Worker};

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

/// The writer thread, and the way to it. Dropped, it stops: the way closes first, then the
/// thread is stopped (a snapshot under way gives up at its next wait) and joined.
pub(super) struct Writer {
    jobs: mpsc::Sender<Job>,
    _thread: Worker,
}

impl Writer {
    /// Makes the producer and starts the thread.
    pub(super) fn start(config: &ClusterConfig) -> Result<Writer, ClusterError> {
        let producer = Producer::snapshots(config, ACK_TIMEOUT)?;
        let (jobs, rx) = mpsc::channel();
        let topic = config.config_topic.clone();
        let thread = Worker::spawn(
            format!("kquota-snapshot-{}", config.instance_id),
            "snapshot writer",
            move |stop| {
                let mut w = Work {
                    topic,
                    producer,
                    stop,
                };
                while let Ok(job) = rx.recv() {
                    w.run(job);
                }
            },
        )?;
        Ok(Writer {
            jobs,
            _thread: thread,
        })
    }

    /// Hands the writer a job (it does them in order).
    pub(super) fn send(&self, job: Job) {
        let _ = self.jobs.send(job);
    }
}

struct Work {
    topic: String,
    producer: Producer,
    stop: Stop,
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
        self.producer.take_failures();
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
        loop {
            match self.producer.send(&self.topic, Some(0), key, value) {
                Err(e) if queue_full(&e) => {
                    if self.stop.requested() {
                        return Err(KafkaError::Canceled);
                    }
                    self.producer.poll(Duration::from_millis(50));
                }
                sent => return sent,
            }
        }
    }

    /// Waits until everything produced is acknowledged, and says whether all of it was.
    fn acknowledged(&self) -> Result<(), KafkaError> {
        let deadline = Instant::now() + ACK_TIMEOUT;
        while self.producer.in_flight() > 0 {
            if self.stop.requested() || Instant::now() >= deadline {
                return Err(KafkaError::Canceled);
            }
            self.producer.poll(Duration::from_millis(50));
        }
        match self.producer.take_failures() {
            None => Ok(()),
            Some(e) => Err(e),
        }
    }
}
