//! [`ConfigLog`]: the quota configuration as a replicated log in a Kafka topic.
//!
//! Every instance reads the topic's single partition from its start and applies each record, one
//! alteration batch, with [`Engine::alter`]. The engine's validation is deterministic (the same
//! batch on the same state gives the same results and the same next state), so instances that
//! apply the same records in the same order hold the same configuration, with no consensus of
//! their own: Kafka's log is the order. An instance commits a batch by appending it and waiting
//! until its own follower has applied it, and answers with what the batch did there.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::info;

use kquota::{AlterResult, Alteration, Engine, EntityChange, PersistError, Persistence};

use super::follow;
use super::record::ConfigRecord;
use super::state::{outcome, Pending, Shared};
use crate::config::ClusterConfig;
use crate::error::{ClusterError, ConfigProblem, LogFailure};
use crate::kafka::LogProducer;
use crate::time::wall_micros;
use crate::worker::Worker;

/// The quota configuration as a replicated log: a [`Persistence`] whose
/// [`commit`](Persistence::commit) orders each batch through a Kafka topic that every instance
/// follows.
///
/// # The topic
///
/// [`ClusterConfig::config_topic`], created when missing with one partition,
/// `cleanup.policy=compact` and [`ClusterConfig::replication_factor`] (`min.insync.replicas` is
/// the brokers'). An existing topic with more than one partition, or whose `cleanup.policy` is not
/// exactly `compact` (time or size retention would delete batches), is refused with
/// [`ClusterError::Topic`].
///
/// One record per committed batch, JSON, keyed `"<instance_id>/<seq>"`:
///
/// ```json
/// {"v":1,"origin":"broker-1","seq":1760000000000001,"validate_only":false,
///  "alterations":[{"entity":[{"type":"user","name":"alice"},{"type":"client-id","name":null}],
///                  "ops":[{"key":"producer_byte_rate","value":1048576.0},
///                         {"key":"consumer_byte_rate","remove":true}]}]}
/// ```
///
/// Each alteration is an entry of Kafka's AlterClientQuotas request (the entity as `(type, name)`
/// pairs, `null` for the default) and each op is shaped like Kafka's `ClientQuotaRecord` (a key,
/// and a value or `remove`); a value JSON has no number for is written `"NaN"`, `"Infinity"` or
/// `"-Infinity"`. The batch is kept exactly as sent, so every instance validates the same thing.
/// No key is ever written twice (a sequence number is never reused, even across restarts: it
/// starts past both the instance's last record in the log and the current time in
/// microseconds), so compaction never removes a batch; the topic is compacted only so that no
/// retention deletes one, as Schema Registry's `_schemas` and Kafka Connect's configuration
/// topic are. It grows by one record per committed batch.
///
/// # What every instance guarantees
///
/// * [`ConfigLog::open`] returns once the engine holds every batch up to where the log ended when
///   it started, so a started instance serves the current configuration; then it keeps following.
/// * Every instance applies the same batches in the same order, so every instance that has read up
///   to the same offset holds the same configuration; two instances racing conflicting
///   alterations both end with the state the log's order gives, and each commit answers with what
///   its batch did at its place in that order.
/// * A commit that returns `Ok` was appended (with `acks=all`, by an idempotent producer) and has
///   been applied here: a describe at this instance afterwards sees it. Other instances apply it
///   as soon as they read it (a few milliseconds on a healthy cluster).
/// * A commit that returns an error either was not accepted by Kafka ([`ClusterError::Kafka`],
///   "refused") or was not acknowledged in [`ClusterConfig::alter_timeout`]
///   ([`ClusterError::Timeout`]: it may still be applied, everywhere alike, if Kafka accepted it).
/// * A `validate_only` batch is validated against this instance's state and never written.
///
/// # Failures
///
/// * Kafka unreachable: the engine keeps what it has (enforcement goes on), commits fail within
///   the alteration timeout, not acknowledged, and the follower goes on where it was once Kafka
///   answers again (librdkafka reconnects by itself).
/// * A record this instance cannot read (not JSON, an unknown version, a tombstone, a key that
///   does not match its value) or a log that no longer starts where it did: applying some records
///   and skipping others would leave this instance with a state no other holds, so it stops
///   applying the log there, logs why at `error`, and refuses every later commit with the reason
///   ([`ConfigLog::failure`]); it keeps enforcing the configuration it has.
///
/// The engine must be altered only through the log: an alteration made on it directly would be
/// this instance's alone.
pub struct ConfigLog {
    /// First, so that the follower stops before the rest goes.
    _follower: Worker,
    shared: Arc<Shared>,
    producer: LogProducer,
    topic: String,
    alter_timeout: Duration,
    /// The next batch's sequence number.
    next_seq: AtomicU64,
}

impl std::fmt::Debug for ConfigLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConfigLog")
            .field("instance_id", &self.shared.instance_id)
            .field("topic", &self.topic)
            .field("applied_offset", &self.applied_offset())
            .field("failure", &self.failure())
            .finish_non_exhaustive()
    }
}

impl ConfigLog {
    /// Joins the configuration log: creates or checks the topic, replays it from its start into
    /// `engine` and returns once everything up to where the log ended at the start has been
    /// applied; from then on a thread of its own (never a task of the caller's runtime) follows
    /// the log. `engine` must be empty (an engine with entities of its own would hold them beside
    /// the log's: [`ClusterError::Config`]).
    ///
    /// Fails with [`ClusterError::Topic`] for a topic of that name that cannot be used,
    /// [`ClusterError::Record`] for a record that cannot be read (the engine then holds the
    /// records before it), [`ClusterError::Timeout`] when Kafka does not answer within
    /// [`ClusterConfig::open_timeout`] (or the catch-up waits that long for a record), and
    /// [`ClusterError::Kafka`] for anything else Kafka answered.
    pub async fn open(
        config: ClusterConfig,
        engine: Arc<Engine>,
    ) -> Result<ConfigLog, ClusterError> {
        if config.instance_id.is_empty() {
            return Err(ClusterError::Config(ConfigProblem::EmptyInstanceId));
        }
        if engine.entity_count() != 0 {
            return Err(ClusterError::Config(ConfigProblem::EngineNotEmpty {
                entities: engine.entity_count(),
            }));
        }
        let shared = Arc::new(Shared::new(engine, &config.instance_id));
        let producer = {
            let shared = Arc::clone(&shared);
            LogProducer::new(&config, move |seq, why| shared.undelivered(seq, why))?
        };
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        let follower = {
            let shared = Arc::clone(&shared);
            let config = config.clone();
            Worker::spawn(
                format!("kquota-log-{}", config.instance_id),
                "configuration log follower",
                move |stop| follow::follow(&config, &shared, ready_tx, &stop),
            )?
        };
        let log = ConfigLog {
            _follower: follower,
            shared,
            producer,
            topic: config.config_topic.clone(),
            alter_timeout: config.alter_timeout,
            next_seq: AtomicU64::new(0),
        };
        // Dropping `log` on an error stops the follower.
        match ready_rx.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(e),
            Err(_) => {
                return Err(ClusterError::Thread {
                    thread: "configuration log follower",
                    source: std::io::Error::other("it ended while catching up"),
                })
            }
        }
        // Past every number this instance id has used, in the log or (had the last process's
        // final records not landed yet) in the last microseconds.
        let max_own = log.shared.state.lock().max_own_seq;
        let first = max_own.map_or(0, |s| s + 1).max(wall_micros());
        log.next_seq.store(first, Ordering::Relaxed);
        log.shared.first_seq.store(first, Ordering::Release);
        info!(
            instance = %config.instance_id,
            topic = %config.config_topic,
            offset = log.applied_offset(),
            entities = log.shared.engine.entity_count(),
            "caught up with the configuration log"
        );
        Ok(log)
    }

    /// Commits `batch` through the log and returns what each alteration did when this instance
    /// applied the batch from there: [`Persistence::commit`], for this log's own engine.
    pub fn alter(
        &self,
        batch: &[Alteration],
        validate_only: bool,
    ) -> Result<Vec<AlterResult>, ClusterError> {
        if validate_only {
            // Nothing is written, so no order is needed: against this instance's state.
            return Ok(self.shared.engine.alter(batch, true));
        }
        if let Some(failure) = self.failure() {
            return Err(ClusterError::Stopped {
                failure,
                produced: false,
            });
        }
        let seq = self.next_seq.fetch_add(1, Ordering::Relaxed);
        let record = ConfigRecord {
            origin: self.shared.instance_id.clone(),
            seq,
            validate_only: false,
            batch: batch.to_vec(),
        };
        let key = record.key();
        let value = record.encode();
        self.shared
            .state
            .lock()
            .pending
            .insert(seq, Pending::Waiting { doubt: None });
        if let Err(source) = self.producer.send(&self.topic, &key, &value, seq) {
            // Never handed to the network.
            self.shared.state.lock().pending.remove(&seq);
            return Err(ClusterError::Refused { source });
        }
        let deadline = Instant::now() + self.alter_timeout;
        blocking(|| self.wait(seq, deadline))
    }

    /// Waits until batch `seq` is applied, refused, or `deadline` passes.
    fn wait(&self, seq: u64, deadline: Instant) -> Result<Vec<AlterResult>, ClusterError> {
        let mut state = self.shared.state.lock();
        loop {
            if let Some(done) = outcome(&mut state, seq) {
                return done;
            }
            if let Some(failure) = &state.failure {
                let e = ClusterError::Stopped {
                    failure: failure.clone(),
                    produced: true,
                };
                state.pending.remove(&seq);
                return Err(e);
            }
            if self
                .shared
                .changed
                .wait_until(&mut state, deadline)
                .timed_out()
            {
                if let Some(done) = outcome(&mut state, seq) {
                    return done;
                }
                let doubt = match state.pending.remove(&seq) {
                    Some(Pending::Waiting { doubt }) => doubt,
                    _ => None,
                };
                return Err(ClusterError::NotAcknowledged {
                    after: self.alter_timeout,
                    doubt,
                });
            }
        }
    }

    /// The engine this log applies to.
    pub fn engine(&self) -> &Arc<Engine> {
        &self.shared.engine
    }

    /// This instance's id, which names its batches in the log.
    pub fn instance_id(&self) -> &str {
        &self.shared.instance_id
    }

    /// The offset after the last record applied: every batch before it is in the engine.
    pub fn applied_offset(&self) -> i64 {
        self.shared.state.lock().next_offset
    }

    /// How far this instance has read the log, and from what.
    pub fn progress(&self) -> LogProgress {
        let state = self.shared.state.lock();
        LogProgress {
            applied_offset: state.next_offset,
            records_read: state.records_read,
            snapshot: state.snapshot,
            end_offset: state.end_offset.max(state.next_offset),
        }
    }

    /// Why this instance stopped applying the log, if it has: it then refuses every commit and
    /// keeps the configuration it had.
    pub fn failure(&self) -> Option<LogFailure> {
        self.shared.state.lock().failure.clone()
    }
}

/// How far an instance has read the configuration log ([`ConfigLog::progress`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LogProgress {
    /// The offset after the last record read: every batch before it is in the engine.
    pub applied_offset: i64,
    /// The records read since the instance opened the log (a record read again after a
    /// snapshot counts again): what replaying cost.
    pub records_read: u64,
    /// The claim offset of the latest complete snapshot read, if any: the configuration as of
    /// that offset came from it, or was checked against it.
    pub snapshot: Option<i64>,
    /// The log's end as Kafka last told this instance's consumer (never below
    /// `applied_offset`): `end_offset - applied_offset` is how many records this instance has
    /// yet to read, the lag a monitor watches.
    pub end_offset: i64,
}

impl LogProgress {
    /// Records in the log this instance has not read yet (as of the end Kafka last reported).
    pub fn lag(&self) -> i64 {
        self.end_offset.saturating_sub(self.applied_offset).max(0)
    }
}

impl Persistence for ConfigLog {
    /// Never used for writes: a `ConfigLog` commits through the log ([`Persistence::commit`]), and
    /// a store that persisted changes already validated against one instance's state would
    /// bypass the log's order.
    fn persist(&self, _changes: &[EntityChange<'_>]) -> Result<(), PersistError> {
        Err(
            "a ConfigLog commits batches through its Kafka topic (Persistence::commit); \
             persist is never used for writes"
                .into(),
        )
    }

    /// Appends `batch` to the log and returns what it did when this instance applied it (see
    /// [`ConfigLog::alter`]); `validate_only` validates against this instance's state and writes
    /// nothing. Blocks for up to [`ClusterConfig::alter_timeout`]: on a worker of a multi-thread
    /// tokio runtime through `block_in_place`; on a current-thread runtime it blocks that
    /// runtime's thread (the follower does not run on it, so it cannot deadlock).
    fn commit(
        &self,
        engine: &Engine,
        batch: &[Alteration],
        validate_only: bool,
    ) -> Result<Vec<AlterResult>, PersistError> {
        if !std::ptr::eq(engine, Arc::as_ptr(&self.shared.engine)) {
            return Err("this ConfigLog applies its log to another engine".into());
        }
        self.alter(batch, validate_only).map_err(PersistError::from)
    }
}

/// Runs `f`, which blocks, without starving a multi-thread runtime's other tasks.
fn blocking<R>(f: impl FnOnce() -> R) -> R {
    match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(f)
        }
        // No runtime, or a current-thread one (where block_in_place panics): just block.
        _ => f(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocking_outside_and_inside_runtimes() {
        assert_eq!(blocking(|| 1), 1);
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        assert_eq!(rt.block_on(async { blocking(|| 2) }), 2);
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .build()
            .unwrap();
        assert_eq!(
            rt.block_on(async { tokio::spawn(async { blocking(|| 3) }).await.unwrap() }),
            3
        );
    }
}
