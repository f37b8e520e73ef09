//! [`ConfigLog`]: the quota configuration as a replicated log in a Kafka topic.
//!
//! Every instance reads the topic's single partition from its start and applies each record, one
//! alteration batch, with [`Engine::alter`]. The engine's validation is deterministic (the same
//! batch on the same state gives the same results and the same next state), so instances that
//! apply the same records in the same order hold the same configuration, with no consensus of
//! their own: Kafka's log is the order. An instance commits a batch by appending it and waiting
//! until its own follower has applied it, and answers with what the batch did there.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{DeliveryResult, Message};
use rdkafka::producer::{BaseRecord, ProducerContext, ThreadedProducer};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};
use tracing::{error, info, warn};

use kquota::{AlterResult, Alteration, Engine, EntityChange, PersistError, Persistence};

use crate::config::ClusterConfig;
use crate::error::{
    ClusterError, ConfigProblem, KafkaClient, LogFailure, Operation, RecordProblem, TopicProblem,
};
use crate::kafka::{
    client, ensure_topic, forward_log, kafka_or_timeout, remaining, TopicSpec, TracingContext,
};
use crate::time::wall_micros;
use record::ConfigRecord;

pub(crate) mod record;

/// How long the follower waits for a record before it looks at its stop flag again.
const POLL: Duration = Duration::from_millis(100);
/// A consumer error that repeats is logged again at most this often.
const REPEAT_LOG: Duration = Duration::from_secs(30);
/// The distinct consumer errors whose last logging is remembered (librdkafka's codes are few;
/// beyond this, the oldest are forgotten).
const REPEAT_KINDS: usize = 32;

/// When each distinct consumer error was last logged: Kafka going away shows as several errors
/// in turn (all brokers down, transport failure), and each is logged once per [`REPEAT_LOG`].
#[derive(Debug, Default)]
struct Repeats(HashMap<String, Instant>);

impl Repeats {
    /// Whether `text` is to be logged at `now` (and, if so, notes it).
    fn first(&mut self, text: &str, now: Instant) -> bool {
        if self
            .0
            .get(text)
            .is_some_and(|at| now.saturating_duration_since(*at) < REPEAT_LOG)
        {
            return false;
        }
        if self.0.len() >= REPEAT_KINDS && !self.0.contains_key(text) {
            self.0
                .retain(|_, at| now.saturating_duration_since(*at) < REPEAT_LOG);
            if self.0.len() >= REPEAT_KINDS {
                let oldest = self
                    .0
                    .iter()
                    .min_by_key(|(_, at)| **at)
                    .map(|(t, _)| t.clone());
                if let Some(oldest) = oldest {
                    self.0.remove(&oldest);
                }
            }
        }
        self.0.insert(text.to_owned(), now);
        true
    }
}

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
    shared: Arc<Shared>,
    producer: ThreadedProducer<Delivery>,
    topic: String,
    alter_timeout: Duration,
    /// The next batch's sequence number.
    next_seq: AtomicU64,
    follower: Mutex<Option<JoinHandle<()>>>,
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

/// What the committing threads, the producer's delivery reports and the follower share.
struct Shared {
    engine: Arc<Engine>,
    instance_id: String,
    state: Mutex<Follow>,
    /// Signalled whenever `state` changes.
    changed: Condvar,
    stop: AtomicBool,
    /// The first sequence number this process issues (0 until the follower has caught up).
    first_seq: AtomicU64,
}

/// The follower's progress, and the commits waiting for it.
#[derive(Default)]
struct Follow {
    /// The offset after the last record applied.
    next_offset: i64,
    /// Why this instance stopped applying the log, once it has.
    failure: Option<LogFailure>,
    /// This process's commits still waiting, by sequence number.
    pending: HashMap<u64, Pending>,
    /// The highest sequence number of this instance id seen in the log.
    max_own_seq: Option<u64>,
}

/// Where a commit stands.
enum Pending {
    /// Produced; `doubt` holds a delivery error after which the record may or may not be in the
    /// log (the follower will tell, if it comes).
    Waiting { doubt: Option<KafkaError> },
    /// Applied from the log, with these results.
    Applied(Vec<AlterResult>),
    /// Kafka refused the record: it is not in the log.
    Refused(KafkaError),
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
        let shared = Arc::new(Shared {
            engine,
            instance_id: config.instance_id.clone(),
            state: Mutex::new(Follow::default()),
            changed: Condvar::new(),
            stop: AtomicBool::new(false),
            first_seq: AtomicU64::new(0),
        });
        let producer = producer(&config, &shared)?;
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        let follower = {
            let shared = Arc::clone(&shared);
            let config = config.clone();
            std::thread::Builder::new()
                .name(format!("kquota-log-{}", config.instance_id))
                .spawn(move || follow(&config, &shared, ready_tx))
                .map_err(|source| ClusterError::Thread {
                    thread: "configuration log follower",
                    source,
                })?
        };
        let log = ConfigLog {
            shared,
            producer,
            topic: config.config_topic.clone(),
            alter_timeout: config.alter_timeout,
            next_seq: AtomicU64::new(0),
            follower: Mutex::new(Some(follower)),
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
        let sent = self.producer.send(
            BaseRecord::with_opaque_to(&self.topic, Box::new(seq))
                .partition(0)
                .key(&key)
                .payload(&value),
        );
        if let Err((source, _)) = sent {
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

    /// Why this instance stopped applying the log, if it has: it then refuses every commit and
    /// keeps the configuration it had.
    pub fn failure(&self) -> Option<LogFailure> {
        self.shared.state.lock().failure.clone()
    }
}

impl Drop for ConfigLog {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        if let Some(handle) = self.follower.lock().take() {
            // A subscriber of the engine (called on the follower) may hold the last reference.
            if handle.thread().id() != std::thread::current().id() {
                let _ = handle.join();
            }
        }
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

/// Batch `seq`'s answer, taken out of `state`, once it has one.
fn outcome(state: &mut Follow, seq: u64) -> Option<Result<Vec<AlterResult>, ClusterError>> {
    match state.pending.get(&seq) {
        Some(Pending::Applied(_) | Pending::Refused(_)) => {}
        _ => return None,
    }
    match state.pending.remove(&seq) {
        Some(Pending::Applied(results)) => Some(Ok(results)),
        Some(Pending::Refused(source)) => Some(Err(ClusterError::Refused { source })),
        _ => None,
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

/// The producer's context: delivery reports reach the waiting commits.
struct Delivery {
    shared: Arc<Shared>,
}

impl ClientContext for Delivery {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        forward_log(level, fac, message);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        // What matters reaches the committer in its delivery report, and an unreachable broker is
        // in librdkafka's own log lines already.
        tracing::debug!(target: "librdkafka", "the configuration log's producer: {error}: {reason}");
    }
}

impl ProducerContext for Delivery {
    type DeliveryOpaque = Box<u64>;

    fn delivery(&self, result: &DeliveryResult<'_>, seq: Box<u64>) {
        let Err((e, _)) = result else {
            // Appended; the follower will apply it.
            return;
        };
        let mut state = self.shared.state.lock();
        if let Some(p @ Pending::Waiting { .. }) = state.pending.get_mut(&seq) {
            *p = if surely_refused(e) {
                Pending::Refused(e.clone())
            } else {
                Pending::Waiting {
                    doubt: Some(e.clone()),
                }
            };
            self.shared.changed.notify_all();
        }
    }
}

/// Whether a delivery error means the record is certainly not in the log: the broker refused it.
/// Anything else (a timeout above all) may have followed an append whose answer was lost.
fn surely_refused(e: &KafkaError) -> bool {
    use RDKafkaErrorCode as C;
    matches!(
        e.rdkafka_error_code(),
        Some(
            C::MessageSizeTooLarge
                | C::InvalidMessage
                | C::InvalidMessageSize
                | C::TopicAuthorizationFailed
                | C::ClusterAuthorizationFailed
                | C::InvalidRequiredAcks
                | C::InvalidRecord
                | C::PolicyViolation
                | C::InvalidTopic
        )
    )
}

/// The idempotent producer the batches are appended with.
fn producer(
    config: &ClusterConfig,
    shared: &Arc<Shared>,
) -> Result<ThreadedProducer<Delivery>, ClusterError> {
    let mut c = client(config);
    c.set("enable.idempotence", "true")
        .set("acks", "all")
        // A record not delivered by the time its commit gives up is dropped rather than
        // appended much later; one sent whose answer was lost may still land (the commit says so).
        .set(
            "message.timeout.ms",
            config
                .alter_timeout
                .as_millis()
                .clamp(1, i32::MAX as u128)
                .to_string(),
        )
        // Alterations are few and someone waits for each: send at once.
        .set("linger.ms", "0")
        .set("socket.nagle.disable", "true");
    c.create_with_context(Delivery {
        shared: Arc::clone(shared),
    })
    .map_err(|source| ClusterError::Client {
        client: KafkaClient::LogProducer,
        source,
    })
}

/// The follower thread: checks the topic, replays the log, says so through `ready`, then follows
/// until stopped or until a record cannot be applied.
fn follow(
    config: &ClusterConfig,
    shared: &Shared,
    ready: tokio::sync::oneshot::Sender<Result<(), ClusterError>>,
) {
    let topic = config.config_topic.as_str();
    let consumer = match start(config) {
        Ok(c) => c,
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    let (consumer, end) = consumer;
    let mut ready = Some(ready);
    let mut eof = false;
    let mut last_progress = Instant::now();
    let mut repeats = Repeats::default();
    loop {
        if shared.stop.load(Ordering::Relaxed) {
            return;
        }
        if let Some(tx) = ready.take() {
            if eof || shared.state.lock().next_offset >= end {
                if tx.send(Ok(())).is_err() {
                    // Whoever was opening gave up.
                    return;
                }
            } else if last_progress.elapsed() >= config.open_timeout {
                let offset = shared.state.lock().next_offset;
                let _ = tx.send(Err(ClusterError::Timeout {
                    operation: Operation::CatchUp {
                        topic: topic.to_owned(),
                        offset,
                        end,
                    },
                    after: config.open_timeout,
                }));
                return;
            } else if tx.is_closed() {
                return;
            } else {
                ready = Some(tx);
            }
        }
        let Some(polled) = consumer.poll(POLL) else {
            continue;
        };
        let outcome = match polled {
            Ok(message) => {
                last_progress = Instant::now();
                apply(shared, topic, &message)
            }
            Err(KafkaError::PartitionEOF(_)) => {
                eof = true;
                Ok(())
            }
            Err(e) => consumer_error(e, &mut repeats),
        };
        if let Err(problem) = outcome {
            let offset = shared.state.lock().next_offset;
            fail(shared, topic, offset, problem.clone());
            if let Some(tx) = ready.take() {
                let _ = tx.send(Err(ClusterError::Record { offset, problem }));
            }
            return;
        }
    }
}

/// Checks the topic, makes the consumer and assigns it the partition from its start; returns the
/// consumer and the offset the log ended at.
fn start(config: &ClusterConfig) -> Result<(BaseConsumer<TracingContext>, i64), ClusterError> {
    let topic = config.config_topic.as_str();
    let deadline = Instant::now() + config.open_timeout;
    ensure_topic(config, &TopicSpec::config_log(topic), config.open_timeout)?;
    let mut c = client(config);
    // The partition is assigned, read from its start every time, and no offset is kept:
    // librdkafka wants a group id to assign at all, but this one never joins or commits.
    c.set(
        "group.id",
        format!("kquota-config-log-{}", config.instance_id),
    )
    .set("enable.auto.commit", "false")
    .set("enable.auto.offset.store", "false")
    .set("isolation.level", "read_committed")
    .set("enable.partition.eof", "true")
    // An offset that falls out of the log (a deleted or truncated topic) must stop the
    // follower, not send it back to the start to apply everything again.
    .set("auto.offset.reset", "error")
    .set("socket.nagle.disable", "true");
    let consumer: BaseConsumer<TracingContext> = c
        .create_with_context(TracingContext { quiet_errors: true })
        .map_err(|source| ClusterError::Client {
            client: KafkaClient::LogConsumer,
            source,
        })?;
    let watermarks = || Operation::Watermarks(topic.to_owned());
    let left = remaining(deadline, config.open_timeout, watermarks)?;
    let (low, high) = consumer
        .fetch_watermarks(topic, 0, left)
        .map_err(|e| kafka_or_timeout(e, watermarks(), config.open_timeout))?;
    if low > 0 {
        return Err(ClusterError::Topic {
            topic: topic.to_owned(),
            problem: TopicProblem::LogStart { offset: low },
        });
    }
    let assign_error = |source| ClusterError::Kafka {
        operation: Operation::Assign(topic.to_owned()),
        source,
    };
    let mut assignment = TopicPartitionList::new();
    assignment
        .add_partition_offset(topic, 0, Offset::Beginning)
        .map_err(assign_error)?;
    consumer.assign(&assignment).map_err(assign_error)?;
    Ok((consumer, high))
}

/// Applies one record; an error is a record this instance cannot apply.
fn apply<M: Message>(shared: &Shared, topic: &str, message: &M) -> Result<(), RecordProblem> {
    let offset = message.offset();
    if offset < shared.state.lock().next_offset {
        // Already applied (a fetch repeated after a reconnect).
        return Ok(());
    }
    let key = message
        .key()
        .map(|k| String::from_utf8_lossy(k).into_owned());
    let Some(value) = message.payload() else {
        return Err(RecordProblem::Tombstone { key });
    };
    let record = ConfigRecord::decode(value)?;
    let expected = record.key();
    if key.as_deref() != Some(expected.as_str()) {
        return Err(RecordProblem::Key {
            found: key,
            expected,
        });
    }
    let results = shared.engine.alter(&record.batch, record.validate_only);
    let mut state = shared.state.lock();
    state.next_offset = offset + 1;
    if record.origin == shared.instance_id {
        state.max_own_seq = Some(state.max_own_seq.map_or(record.seq, |m| m.max(record.seq)));
        match state.pending.get_mut(&record.seq) {
            Some(p @ Pending::Waiting { .. }) => *p = Pending::Applied(results),
            Some(Pending::Refused(why)) => error!(
                topic,
                offset,
                seq = record.seq,
                "a batch whose delivery Kafka refused ({why}) is in the log after all; its \
                 commit was answered as refused"
            ),
            Some(Pending::Applied(_)) => {}
            None => {
                let first = shared.first_seq.load(Ordering::Acquire);
                if first != 0 && record.seq >= first {
                    // Ours, answered as timed out; or, past what this process issued, another
                    // process using the same instance id.
                    info!(
                        topic,
                        offset,
                        seq = record.seq,
                        "applied a batch of this instance's whose commit was not acknowledged"
                    );
                } else if first != 0 {
                    warn!(
                        topic,
                        offset,
                        seq = record.seq,
                        instance = %shared.instance_id,
                        "a batch under this instance's id that this process did not write: is \
                         another process using the same instance id?"
                    );
                }
            }
        }
    }
    shared.changed.notify_all();
    Ok(())
}

/// What to do about a consumer error: go on (logging it), or stop following.
fn consumer_error(e: KafkaError, repeats: &mut Repeats) -> Result<(), RecordProblem> {
    let fatal = matches!(e, KafkaError::MessageConsumptionFatal(_))
        || matches!(
            e.rdkafka_error_code(),
            Some(RDKafkaErrorCode::AutoOffsetReset | RDKafkaErrorCode::OffsetOutOfRange)
        );
    if fatal {
        return Err(RecordProblem::Consumer(e.to_string()));
    }
    // Kafka unreachable and the like: librdkafka retries and reconnects by itself.
    let text = e.to_string();
    if repeats.first(&text, Instant::now()) {
        warn!("the configuration log's consumer: {text} (retrying)");
    }
    Ok(())
}

/// Stops this instance's use of the log, loudly: every waiting and later commit is refused.
fn fail(shared: &Shared, topic: &str, offset: i64, problem: RecordProblem) {
    error!(
        topic,
        offset,
        instance = %shared.instance_id,
        "this instance cannot apply the configuration log at offset {offset}: {problem}. It stops \
         following the log and refuses alterations; it keeps enforcing the configuration it has \
         (every batch before that offset). Every instance must hold the same configuration, so a \
         record is never skipped: fix or remove the cause and restart the instance"
    );
    let mut state = shared.state.lock();
    state.failure = Some(LogFailure {
        topic: topic.to_owned(),
        offset,
        problem,
    });
    shared.changed.notify_all();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_that_are_certain() {
        let broker = |c| KafkaError::MessageProduction(c);
        assert!(surely_refused(&broker(
            RDKafkaErrorCode::MessageSizeTooLarge
        )));
        assert!(surely_refused(&broker(
            RDKafkaErrorCode::TopicAuthorizationFailed
        )));
        // A timeout may follow an append whose answer was lost.
        assert!(!surely_refused(&broker(RDKafkaErrorCode::MessageTimedOut)));
        assert!(!surely_refused(&broker(
            RDKafkaErrorCode::NotEnoughReplicasAfterAppend
        )));
        assert!(!surely_refused(&broker(RDKafkaErrorCode::RequestTimedOut)));
    }

    #[test]
    fn consumer_errors_that_stop_the_follower() {
        let mut last = Repeats::default();
        assert!(consumer_error(
            KafkaError::MessageConsumption(RDKafkaErrorCode::AutoOffsetReset),
            &mut last
        )
        .is_err());
        assert!(consumer_error(
            KafkaError::MessageConsumptionFatal(RDKafkaErrorCode::Fatal),
            &mut last
        )
        .is_err());
        // Kafka unreachable: retried, logged once.
        for _ in 0..3 {
            assert!(consumer_error(
                KafkaError::MessageConsumption(RDKafkaErrorCode::AllBrokersDown),
                &mut last
            )
            .is_ok());
        }
    }

    #[test]
    fn each_distinct_consumer_error_is_logged_once_per_interval() {
        let mut repeats = Repeats::default();
        let t0 = Instant::now();
        // Two errors in turn, as Kafka going away shows: each logged once.
        let logged = (0..10)
            .filter(|i| {
                let text = if i % 2 == 0 {
                    "all brokers down"
                } else {
                    "transport failure"
                };
                repeats.first(text, t0 + Duration::from_secs(*i))
            })
            .count();
        assert_eq!(logged, 2);
        assert!(repeats.first("all brokers down", t0 + REPEAT_LOG));
        assert!(!repeats.first("transport failure", t0 + Duration::from_secs(20)));
        // Many distinct errors: the memory stays bounded, each still logged the first time.
        for i in 0..100 {
            assert!(repeats.first(&format!("error {i}"), t0 + REPEAT_LOG));
        }
        assert_eq!(repeats.0.len(), REPEAT_KINDS);
    }

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
