//! The follower thread: reads the configuration topic from its start, hands each record to the
//! [`Replica`], and tells the commits waiting for their batches what happened to them. It also
//! claims the next snapshot when one is due and hands a won claim to the [`Writer`].

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};
use tracing::{error, info, warn};

use super::record::Claim;
use super::replica::{Replica, Step};
use super::writer::{Job, Writer};
use super::{Pending, Shared};
use crate::config::ClusterConfig;
use crate::error::{ClusterError, KafkaClient, LogFailure, Operation, RecordProblem, TopicProblem};
use crate::kafka::{client, ensure_topic, kafka_or_timeout, remaining, TopicSpec, TracingContext};
use crate::time::wall_micros;

/// How long the follower waits for a record before it looks at its stop flag again.
const POLL: Duration = Duration::from_millis(100);
/// A consumer error that repeats is logged again at most this often.
const REPEAT_LOG: Duration = Duration::from_secs(30);
/// The distinct consumer errors whose last logging is remembered (librdkafka's codes are few;
/// beyond this, the oldest are forgotten).
const REPEAT_KINDS: usize = 32;
/// The longest an instance waits, once a snapshot is due, before it claims it: each instance
/// waits its own part of this (from its id), so that usually one claims and the others see its
/// claim first.
const CLAIM_SPREAD_MS: u64 = 2_000;

/// When each distinct consumer error was last logged: Kafka going away shows as several errors
/// in turn (all brokers down, transport failure), and each is logged once per [`REPEAT_LOG`].
#[derive(Debug, Default)]
pub(super) struct Repeats(HashMap<String, Instant>);

impl Repeats {
    /// Whether `text` is to be logged at `now` (and, if so, notes it).
    pub(super) fn first(&mut self, text: &str, now: Instant) -> bool {
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

/// This instance's wait before claiming a due snapshot: a fixed part of [`CLAIM_SPREAD_MS`]
/// from its id (FNV-1a), so that instances do not all claim at once.
fn claim_delay(instance_id: &str) -> Duration {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in instance_id.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    Duration::from_millis(h % CLAIM_SPREAD_MS)
}

/// How often a follower behind the log's end asks Kafka where it ends (for the lag it reports).
const END_EVERY: Duration = Duration::from_secs(10);
/// How long that question may hold the follower up.
const END_TIMEOUT: Duration = Duration::from_millis(500);

/// The follower thread: checks the topic, replays the log, says so through `ready`, then follows
/// until stopped or until a record cannot be applied.
pub(super) fn follow(
    config: &ClusterConfig,
    shared: &Shared,
    ready: tokio::sync::oneshot::Sender<Result<(), ClusterError>>,
) {
    let topic = config.config_topic.as_str();
    let (consumer, end) = match start(config) {
        Ok(c) => c,
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    let writer = match Writer::start(config) {
        Ok(w) => w,
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    let mut replica = Replica::new(std::sync::Arc::clone(&shared.engine), &shared.instance_id);
    let mut ready = Some(ready);
    let mut eof = false;
    let mut last_progress = Instant::now();
    let mut repeats = Repeats::default();
    let delay = claim_delay(&shared.instance_id);
    let mut due_since: Option<Instant> = None;
    let started = Instant::now();
    shared.state.lock().end_offset = end;
    let mut asked_end = Instant::now();
    loop {
        if shared.stop.load(Ordering::Relaxed) {
            return;
        }
        let now = Instant::now();
        if let Some(tx) = ready.take() {
            let caught_up = eof || replica.next_offset() >= end;
            if caught_up && replica.trusted() {
                replica.set_caught_up();
                info!(
                    topic,
                    offset = replica.next_offset(),
                    records = replica.records_read(),
                    snapshot = ?replica.covered(),
                    ms = started.elapsed().as_millis() as u64,
                    "read the configuration log to where it ended"
                );
                if tx.send(Ok(())).is_err() {
                    // Whoever was opening gave up.
                    return;
                }
            } else if last_progress.elapsed() >= config.open_timeout {
                let _ = tx.send(Err(ClusterError::Timeout {
                    operation: Operation::CatchUp {
                        topic: topic.to_owned(),
                        offset: replica.next_offset(),
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
        } else {
            if replica.claim_due(now, config.snapshot_records) {
                let since = *due_since.get_or_insert(now);
                if now.saturating_duration_since(since) >= delay {
                    due_since = None;
                    let seq = wall_micros();
                    replica.issued(seq, now);
                    writer.send(Job::Claim(Claim {
                        origin: shared.instance_id.clone(),
                        seq,
                    }));
                }
            } else {
                due_since = None;
            }
        }
        let wait = match due_since {
            Some(since) => (since + delay).saturating_duration_since(now).min(POLL),
            None => POLL,
        };
        let Some(polled) = consumer.poll(wait) else {
            continue;
        };
        let outcome = match polled {
            Ok(message) => {
                last_progress = Instant::now();
                eof = false;
                let offset = message.offset();
                match replica.apply(offset, message.key(), message.payload(), last_progress) {
                    Ok(step) => {
                        drop(message);
                        handle(shared, topic, &consumer, &writer, offset, step, &replica)
                            .map_err(|p| (offset, p))
                    }
                    Err(problem) => Err((offset, problem)),
                }
            }
            Err(KafkaError::PartitionEOF(_)) => {
                eof = true;
                if replica.at_end() {
                    promote(shared);
                }
                Ok(())
            }
            Err(e) => consumer_error(e, &mut repeats).map_err(|p| (replica.next_offset(), p)),
        };
        // The log's end, for the lag `ConfigLog::progress` reports: where the partition ended
        // when the follower reached it, else asked of Kafka at most every END_EVERY while behind.
        if eof {
            let mut state = shared.state.lock();
            state.end_offset = state.next_offset;
        } else if asked_end.elapsed() >= END_EVERY {
            asked_end = Instant::now();
            if let Ok((_, high)) = consumer.fetch_watermarks(topic, 0, END_TIMEOUT) {
                shared.state.lock().end_offset = high;
            }
        }
        if let Err((offset, problem)) = outcome {
            fail(shared, topic, offset, problem.clone());
            if let Some(tx) = ready.take() {
                let _ = tx.send(Err(ClusterError::Record { offset, problem }));
            }
            return;
        }
    }
}

/// What the follower does after the replica has read the record at `offset`.
fn handle(
    shared: &Shared,
    topic: &str,
    consumer: &BaseConsumer<TracingContext>,
    writer: &Writer,
    offset: i64,
    step: Step,
    replica: &Replica,
) -> Result<(), RecordProblem> {
    let mut state = shared.state.lock();
    state.next_offset = replica.next_offset();
    state.max_own_seq = replica.max_own_seq();
    state.records_read = replica.records_read();
    state.snapshot = replica.covered();
    match step {
        Step::Nothing => {}
        Step::Batch {
            origin,
            seq,
            results,
            provisional,
        } => {
            if origin == shared.instance_id {
                settle(shared, &mut state, topic, offset, seq, results, provisional);
            }
        }
        Step::Restored(again) => {
            // The batches applied provisionally were applied again onto the snapshot.
            void_provisional(&mut state);
            for b in again {
                if b.origin == shared.instance_id {
                    settle(
                        shared,
                        &mut state,
                        topic,
                        offset,
                        b.seq,
                        b.results,
                        b.provisional,
                    );
                }
            }
        }
        Step::SeekTo(from) => {
            // The batches applied provisionally are read again.
            void_provisional(&mut state);
            drop(state);
            let mut assignment = TopicPartitionList::new();
            assignment
                .add_partition_offset(topic, 0, Offset::Offset(from))
                .and_then(|()| consumer.assign(&assignment))
                .map_err(|e| RecordProblem::Consumer(format!("reading again from {from}: {e}")))?;
            return Ok(());
        }
        Step::Write(job) => {
            info!(
                topic,
                claim = job.claim,
                entities = job.entities,
                chunks = job.records.len(),
                tombstones = job.tombstones.len(),
                "this instance's claim won: writing the snapshot"
            );
            writer.send(Job::Write(job));
        }
    }
    shared.changed.notify_all();
    Ok(())
}

/// The results given provisionally are void: their batches are applied again.
fn void_provisional(state: &mut super::Follow) {
    for p in state.pending.values_mut() {
        if let Pending::Provisional(_) = p {
            *p = Pending::Waiting { doubt: None };
        }
    }
}

/// What batch `seq` of this instance's, read at `offset`, means for its commit.
fn settle(
    shared: &Shared,
    state: &mut super::Follow,
    topic: &str,
    offset: i64,
    seq: u64,
    results: Vec<kquota::AlterResult>,
    provisional: bool,
) {
    match state.pending.get_mut(&seq) {
        Some(p @ (Pending::Waiting { .. } | Pending::Provisional(_))) => {
            *p = if provisional {
                Pending::Provisional(results)
            } else {
                Pending::Applied(results)
            }
        }
        Some(Pending::Refused(why)) => error!(
            topic,
            offset,
            seq,
            "a batch whose delivery Kafka refused ({why}) is in the log after all; its commit \
             was answered as refused"
        ),
        Some(Pending::Applied(_)) => {}
        None => {
            let first = shared.first_seq.load(Ordering::Acquire);
            if first != 0 && seq >= first {
                // Ours, answered as timed out; or, past what this process issued, another
                // process using the same instance id.
                info!(
                    topic,
                    offset,
                    seq,
                    "applied a batch of this instance's whose commit was not acknowledged"
                );
            } else if first != 0 {
                warn!(
                    topic,
                    offset,
                    seq,
                    instance = %shared.instance_id,
                    "a batch under this instance's id that this process did not write: is \
                     another process using the same instance id?"
                );
            }
        }
    }
}

/// The replica trusts its state again: the results it gave provisionally hold.
fn promote(shared: &Shared) {
    let mut state = shared.state.lock();
    let mut any = false;
    for p in state.pending.values_mut() {
        if let Pending::Provisional(results) = p {
            *p = Pending::Applied(std::mem::take(results));
            any = true;
        }
    }
    if any {
        shared.changed.notify_all();
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
    // A fetch that finds nothing new returns within 100 ms, not librdkafka's 500: reading on
    // after a snapshot waits for the fetch in flight.
    .set("fetch.wait.max.ms", "100")
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

/// What to do about a consumer error: go on (logging it), or stop following.
pub(super) fn consumer_error(e: KafkaError, repeats: &mut Repeats) -> Result<(), RecordProblem> {
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
    fn instances_wait_apart_before_claiming() {
        let delays: Vec<Duration> = ["inst-0", "inst-1", "inst-2", "kquotad-1"]
            .iter()
            .map(|id| claim_delay(id))
            .collect();
        assert!(delays
            .iter()
            .all(|d| *d < Duration::from_millis(CLAIM_SPREAD_MS)));
        assert_eq!(
            claim_delay("inst-0"),
            delays[0],
            "the same id waits the same"
        );
        let mut distinct = delays.clone();
        distinct.dedup();
        assert!(distinct.len() > 1, "{delays:?}");
    }
}
