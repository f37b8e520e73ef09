//! The follower thread: reads the configuration topic from its start, hands each record to the
//! [`Replica`], and tells the commits waiting for their batches what happened to them. It also
//! claims the next snapshot when one is due and hands a won claim to the [`Writer`].

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;
use tracing::{error, info, warn};

use super::record::Claim;
use super::replica::{Replica, Step};
use super::state::{Follow, Pending, Shared};
use super::writer::{Job, Writer};
use crate::config::ClusterConfig;
use crate::error::{ClusterError, LogFailure, Operation, RecordProblem, TopicProblem};
use crate::kafka::{
    ensure_topic, kafka_or_timeout, remaining, Consumer, Polled, StartAt, TopicSpec,
};
use crate::time::wall_micros;
use crate::worker::Stop;

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

/// What opening the log waits on: the end of the catch-up, or why it failed.
type Ready = oneshot::Sender<Result<(), ClusterError>>;

/// Where the follower stands: the phases it goes through, each with what only it needs.
enum Phase {
    /// Replaying the log up to where it ended when the instance started; opening waits on
    /// `ready`, and is told of a timeout once no record has come for the open timeout since
    /// `last_record` (or since the start).
    CatchingUp { ready: Ready, last_record: Instant },
    /// Caught up, following the log as it grows; no snapshot due.
    Following,
    /// Following, with a snapshot due since `since`: this instance claims it once its own delay
    /// has passed (another instance's claim read first makes it not due).
    ClaimDue { since: Instant },
}

/// The follower thread's state.
struct Follower<'a> {
    config: &'a ClusterConfig,
    shared: &'a Shared,
    consumer: Consumer,
    writer: Writer,
    replica: Replica,
    phase: Phase,
    /// Whether the consumer's last word was the partition's end (no record since): beside the
    /// phase, not one of them, since the follower reaches the end and leaves it in every phase.
    at_end: bool,
    /// Where the log ended when the instance started.
    end: i64,
    started: Instant,
    /// When Kafka was last asked where the log ends.
    asked_end: Instant,
    repeats: Repeats,
    /// This instance's wait before it claims a due snapshot.
    claim_delay: Duration,
}

/// The follower thread: checks the topic, replays the log, says so through `ready`, then follows
/// until stopped or until a record cannot be applied.
pub(super) fn follow(config: &ClusterConfig, shared: &Shared, ready: Ready, stop: &Stop) {
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
    shared.state.lock().end_offset = end;
    let now = Instant::now();
    Follower {
        config,
        shared,
        consumer,
        writer,
        replica: Replica::new(Arc::clone(&shared.engine), &shared.instance_id),
        phase: Phase::CatchingUp {
            ready,
            last_record: now,
        },
        at_end: false,
        end,
        started: now,
        asked_end: now,
        repeats: Repeats::default(),
        claim_delay: claim_delay(&shared.instance_id),
    }
    .run(stop);
}

impl Follower<'_> {
    fn run(mut self, stop: &Stop) {
        let topic = self.config.config_topic.as_str();
        while !stop.requested() {
            let now = Instant::now();
            let Some(phase) = self.next_phase(now) else {
                return;
            };
            self.phase = phase;
            let wait = match self.phase {
                Phase::ClaimDue { since } => (since + self.claim_delay)
                    .saturating_duration_since(now)
                    .min(POLL),
                _ => POLL,
            };
            let Some(polled) = self.consumer.poll(wait) else {
                continue;
            };
            let outcome = match polled {
                Polled::Record(record) => {
                    let read = Instant::now();
                    if let Phase::CatchingUp { last_record, .. } = &mut self.phase {
                        *last_record = read;
                    }
                    self.at_end = false;
                    let offset = record.offset();
                    match self
                        .replica
                        .apply(offset, record.key(), record.value(), read)
                    {
                        Ok(step) => {
                            drop(record);
                            self.handle(topic, offset, step).map_err(|p| (offset, p))
                        }
                        Err(problem) => Err((offset, problem)),
                    }
                }
                Polled::End => {
                    self.at_end = true;
                    if self.replica.at_end() {
                        promote(self.shared);
                    }
                    Ok(())
                }
                Polled::Passing(e) => {
                    consumer_error(&e.to_string(), &mut self.repeats);
                    Ok(())
                }
                Polled::Fatal(e) => Err((
                    self.replica.next_offset(),
                    RecordProblem::Consumer(e.to_string()),
                )),
            };
            // The log's end, for the lag `ConfigLog::progress` reports: where the partition
            // ended when the follower reached it, else asked of Kafka at most every END_EVERY
            // while behind.
            if self.at_end {
                let mut state = self.shared.state.lock();
                state.end_offset = state.next_offset;
            } else if self.asked_end.elapsed() >= END_EVERY {
                self.asked_end = Instant::now();
                if let Ok((_, high)) = self.consumer.watermarks(topic, 0, END_TIMEOUT) {
                    self.shared.state.lock().end_offset = high;
                }
            }
            if let Err((offset, problem)) = outcome {
                fail(self.shared, topic, offset, problem.clone());
                if let Phase::CatchingUp { ready, .. } = self.phase {
                    let _ = ready.send(Err(ClusterError::Record { offset, problem }));
                }
                return;
            }
        }
    }

    /// The phase the follower is in at `now`, before it polls again (a claim that fell due
    /// handed to the writer on the way); `None` when it is to end (opening gave up, or timed
    /// out).
    fn next_phase(&mut self, now: Instant) -> Option<Phase> {
        let phase = std::mem::replace(&mut self.phase, Phase::Following);
        match phase {
            Phase::CatchingUp { ready, last_record } => {
                let caught_up = self.at_end || self.replica.next_offset() >= self.end;
                if caught_up && self.replica.trusted() {
                    self.replica.set_caught_up();
                    info!(
                        topic = %self.config.config_topic,
                        offset = self.replica.next_offset(),
                        records = self.replica.records_read(),
                        snapshot = ?self.replica.covered(),
                        ms = self.started.elapsed().as_millis() as u64,
                        "read the configuration log to where it ended"
                    );
                    if ready.send(Ok(())).is_err() {
                        // Whoever was opening gave up.
                        return None;
                    }
                    Some(Phase::Following)
                } else if last_record.elapsed() >= self.config.open_timeout {
                    let _ = ready.send(Err(ClusterError::Timeout {
                        operation: Operation::CatchUp {
                            topic: self.config.config_topic.clone(),
                            offset: self.replica.next_offset(),
                            end: self.end,
                        },
                        after: self.config.open_timeout,
                    }));
                    None
                } else if ready.is_closed() {
                    None
                } else {
                    Some(Phase::CatchingUp { ready, last_record })
                }
            }
            Phase::Following => Some(self.claim(now, now)),
            Phase::ClaimDue { since } => Some(self.claim(now, since)),
        }
    }

    /// Following at `now`, with a snapshot due since `since` if one is due: claims it once this
    /// instance's delay has passed.
    fn claim(&mut self, now: Instant, since: Instant) -> Phase {
        if !self.replica.claim_due(now, self.config.snapshot_records) {
            return Phase::Following;
        }
        if now.saturating_duration_since(since) < self.claim_delay {
            return Phase::ClaimDue { since };
        }
        let seq = wall_micros();
        self.replica.issued(seq, now);
        self.writer.send(Job::Claim(Claim {
            origin: self.shared.instance_id.clone(),
            seq,
        }));
        Phase::Following
    }

    /// What the follower does after the replica has read the record at `offset`.
    fn handle(&self, topic: &str, offset: i64, step: Step) -> Result<(), RecordProblem> {
        let (shared, replica) = (self.shared, &self.replica);
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
                self.consumer
                    .assign_at(topic, 0, StartAt::Offset(from))
                    .map_err(|e| {
                        RecordProblem::Consumer(format!("reading again from {from}: {e}"))
                    })?;
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
                self.writer.send(Job::Write(job));
            }
        }
        shared.changed.notify_all();
        Ok(())
    }
}

/// The results given provisionally are void: their batches are applied again.
fn void_provisional(state: &mut Follow) {
    for p in state.pending.values_mut() {
        if let Pending::Provisional(_) = p {
            *p = Pending::Waiting { doubt: None };
        }
    }
}

/// What batch `seq` of this instance's, read at `offset`, means for its commit.
fn settle(
    shared: &Shared,
    state: &mut Follow,
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
fn start(config: &ClusterConfig) -> Result<(Consumer, i64), ClusterError> {
    let topic = config.config_topic.as_str();
    let deadline = Instant::now() + config.open_timeout;
    ensure_topic(config, &TopicSpec::config_log(topic), config.open_timeout)?;
    let consumer = Consumer::config_log(config)?;
    let watermarks = || Operation::Watermarks(topic.to_owned());
    let left = remaining(deadline, config.open_timeout, watermarks)?;
    let (low, high) = consumer
        .watermarks(topic, 0, left)
        .map_err(|e| kafka_or_timeout(e, watermarks(), config.open_timeout))?;
    if low > 0 {
        return Err(ClusterError::Topic {
            topic: topic.to_owned(),
            problem: TopicProblem::LogStart { offset: low },
        });
    }
    consumer
        .assign_at(topic, 0, StartAt::Beginning)
        .map_err(|source| ClusterError::Kafka {
            operation: Operation::Assign(topic.to_owned()),
            source,
        })?;
    Ok((consumer, high))
}

/// A consumer error the follower goes on after (Kafka unreachable and the like: librdkafka
/// retries and reconnects by itself): logged, each distinct one once per [`REPEAT_LOG`].
fn consumer_error(text: &str, repeats: &mut Repeats) {
    if repeats.first(text, Instant::now()) {
        warn!("the configuration log's consumer: {text} (retrying)");
    }
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
