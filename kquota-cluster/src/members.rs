//! [`Membership`]: which instances are live, from their heartbeats in the members topic, so that
//! the engine's live instance count (what `bps` limits divide by) follows instances as they come
//! and go.
//!
//! # How
//!
//! Every instance produces a heartbeat to the members topic each `heartbeat_interval` (key: its
//! id; value: `{"v":1,"instance":"<id>","seq":<n>}`, with `"serves":false` from an instance that
//! serves no clients' traffic, such as `kquotad`: it is live, and counted in nobody's live set
//! of instances that `bps` limits divide by), and reads the whole topic, from its start,
//! on a thread of its own. A clean stop writes a tombstone (the key with no value). The topic is
//! created if missing: one partition, `cleanup.policy=compact,delete` (compaction keeps it small,
//! and deletion after ten minutes drops the ids of instances that crashed).
//!
//! An instance counts another as live if it *received* a heartbeat from it recently, by its own
//! monotonic clock: the producer's timestamps are never read, so the hosts' clocks need not
//! agree. It always counts itself.
//!
//! "Recently" is judged against its own heartbeats, which it reads back: the topic has one
//! partition, so by the time an instance reads back its own heartbeat sent at `t`, it has read
//! every heartbeat appended before it. Another instance is dropped when the instance reads back
//! a heartbeat of its own sent `member_expiry` or more after the other's latest heartbeat
//! arrived. So:
//!
//! * an instance that stops without a tombstone (a crash) is dropped within
//!   `member_expiry + heartbeat_interval`, plus the time a heartbeat takes through Kafka (its
//!   last one, then the other's own) ([`Membership::expiry_bound`]); one that stops cleanly, as
//!   soon as its tombstone arrives;
//! * a new instance is counted as soon as its first heartbeat arrives (it sends one when it
//!   starts), so within one heartbeat plus the delivery time;
//! * when Kafka cannot be reached, no heartbeat of its own comes back, so nobody is dropped: the
//!   last membership stays (it does not collapse to this instance alone, which would hand it the
//!   whole of every `bps` limit). When its heartbeats come back after a gap longer than
//!   `member_expiry`, every member is given twice `member_expiry` from then to be heard again
//!   before it is dropped (the others' clients reconnect in their own time; they retry at least
//!   every second).
//!
//! At start-up the topic is read from its start; the heartbeats found there (before where it
//! ended when the instance started) count for two heartbeat intervals only (an instance that is
//! live sends a new one by then, one that crashed does not), so an instance starts with every
//! instance that was live, never with too few. [`Membership::start`] returns once its own first
//! heartbeat is back (so everything before it has been read), or after `open_timeout`.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kquota::Engine;
use parking_lot::RwLock;
use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;

use crate::config::ClusterConfig;
use crate::error::{ClusterError, KafkaClient};
use crate::kafka::{ensure_topic, Consumer, Polled, Producer, StartAt, TopicSpec};
use crate::time::wall_micros;
use crate::worker::{Stop, Worker};

/// The longest a thread waits in one poll: how late it notices a stop or a due heartbeat.
pub(crate) const POLL: Duration = Duration::from_millis(50);

/// A heartbeat's value.
#[derive(Debug, Serialize, Deserialize)]
struct Heartbeat {
    v: u32,
    instance: String,
    seq: u64,
    /// Whether the instance serves clients' traffic; left out when it does, so that such a
    /// heartbeat reads as it always did (and an instance of an earlier release, which never
    /// says, counts as serving).
    #[serde(default = "serves", skip_serializing_if = "is_true")]
    serves: bool,
}

fn serves() -> bool {
    true
}

fn is_true(b: &bool) -> bool {
    *b
}

/// The live instances, as every consumer of the members topic sees them.
#[derive(Debug)]
pub(crate) struct Members {
    me: String,
    live: RwLock<Arc<[String]>>,
    /// Moves each time `live` changes.
    generation: AtomicU64,
    /// Whether this instance's own heartbeats come back from Kafka.
    connected: AtomicBool,
}

impl Members {
    /// The live instances (sorted, this one included) and the generation they belong to.
    pub(crate) fn live(&self) -> (Arc<[String]>, u64) {
        // The generation is read first: a change in between is seen again at the next look.
        let generation = self.generation.load(Ordering::Acquire);
        (Arc::clone(&self.live.read()), generation)
    }

    fn set(&self, live: Vec<String>) {
        *self.live.write() = Arc::from(live);
        self.generation.fetch_add(1, Ordering::Release);
    }
}

/// This instance's membership of the cluster: its heartbeats, and the live instances it reads
/// from everyone's (the module's documentation has the details and the bounds). Whenever the
/// live count changes, it is handed to [`Engine::set_broker_count`].
///
/// [`stop`](Membership::stop) (or dropping it) writes a tombstone, so the others drop this
/// instance at once.
#[derive(Debug)]
pub struct Membership {
    members: Arc<Members>,
    /// The members thread, stopped (its tombstone written) when this goes.
    thread: Worker,
}

impl Membership {
    /// Joins: creates the members topic if it is missing (or checks that it has one
    /// partition), starts heartbeating and following it on a thread of its own, and resolves
    /// once its first heartbeat is back (so the topic has been read past where it ended; at
    /// most `open_timeout` later), the engine's live count set from what it read. Nothing
    /// blocks the caller's runtime meanwhile.
    ///
    /// Fails if Kafka cannot be reached or refuses the topic or the clients' settings; once
    /// started, losing Kafka keeps the last membership until it is back.
    pub async fn start(
        config: &ClusterConfig,
        engine: Arc<Engine>,
    ) -> Result<Membership, ClusterError> {
        let members = Arc::new(Members {
            me: config.instance_id.clone(),
            live: RwLock::new(Arc::from(vec![config.instance_id.clone()])),
            generation: AtomicU64::new(0),
            connected: AtomicBool::new(false),
        });
        let (warm_tx, warm_rx) = oneshot::channel();
        let thread = {
            let config = config.clone();
            let members = Arc::clone(&members);
            Worker::spawn(
                format!("kquota-members-{}", config.instance_id),
                "members",
                move |stop| match MembersThread::new(&config, engine, members) {
                    Ok(thread) => thread.run(&stop, warm_tx),
                    Err(e) => {
                        let _ = warm_tx.send(Err(e));
                    }
                },
            )?
        };
        let membership = Membership { members, thread };
        // Dropping `membership` on an error stops the thread.
        match warm_rx.await {
            Ok(Ok(())) => Ok(membership),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(ClusterError::Thread {
                thread: "members",
                source: std::io::Error::other("it ended while joining"),
            }),
        }
    }

    /// The live instances' ids, sorted.
    ///
    /// Only instances that serve clients' traffic are counted ([`ClusterConfig::serves_clients`]):
    /// this one too only if it does.
    pub fn live(&self) -> Vec<String> {
        self.members.live().0.to_vec()
    }

    /// How many instances that serve clients are live, this one included if it does (what the
    /// engine's count was last set to, at least 1).
    pub fn live_count(&self) -> u32 {
        u32::try_from(self.members.live().0.len()).unwrap_or(u32::MAX)
    }

    /// This instance's id.
    pub fn instance_id(&self) -> &str {
        &self.members.me
    }

    /// Whether this instance's own heartbeats are coming back from Kafka (within
    /// `member_expiry`). While they are not, the membership is kept as it was.
    pub fn is_connected(&self) -> bool {
        self.members.connected.load(Ordering::Relaxed)
    }

    /// How long after an instance stops without a tombstone the others drop it at most:
    /// `member_expiry + heartbeat_interval`, plus twice the time a heartbeat takes through Kafka
    /// (produced, appended, fetched), which is not counted here. This crate's Kafka tests check
    /// it with that delivery time taken as one second.
    pub fn expiry_bound(config: &ClusterConfig) -> Duration {
        config.member_expiry + config.heartbeat_interval
    }

    /// Leaves: stops heartbeating and writes a tombstone (waiting up to two seconds for it to
    /// be acknowledged), so that the others drop this instance at once.
    pub fn stop(mut self) {
        self.thread.stop();
    }

    /// The shared view, for the usage sharing that divides among the same instances.
    pub(crate) fn members(&self) -> Arc<Members> {
        Arc::clone(&self.members)
    }
}

/// A record read from the members topic.
struct Heard {
    partition: i32,
    offset: i64,
    key: Option<Vec<u8>>,
    value: Option<Vec<u8>>,
}

/// The members thread: heartbeats out, everyone's heartbeats in.
struct MembersThread {
    topic: String,
    heartbeat: Duration,
    expiry: Duration,
    table: MemberTable,
    /// Per partition, where the topic ended at start-up (records before it are the backlog).
    ends: HashMap<i32, i64>,
    seq: u64,
    members: Arc<Members>,
    engine: Arc<Engine>,
    producer: Producer,
    consumer: Consumer,
    /// How long the start-up read may take.
    open_timeout: Duration,
    /// Whether this instance serves clients' traffic.
    serves: bool,
    /// The instances whose latest heartbeat says they serve no clients.
    passive: BTreeSet<String>,
}

impl MembersThread {
    /// Checks or creates the topic and makes the clients, assigned from the topic's start.
    fn new(
        config: &ClusterConfig,
        engine: Arc<Engine>,
        members: Arc<Members>,
    ) -> Result<MembersThread, ClusterError> {
        let topic = config.members_topic.clone();
        ensure_topic(config, &TopicSpec::members(&topic), config.open_timeout)?;
        let producer = Producer::heartbeats(config)?;
        let consumer = Consumer::assigned(config, "members", KafkaClient::MembersConsumer)?;
        let partitions = consumer.partitions(&topic, config.open_timeout)?;
        let ends = consumer.assign(&topic, &partitions, StartAt::Beginning, config.open_timeout)?;
        Ok(MembersThread {
            topic,
            heartbeat: config.heartbeat_interval.max(Duration::from_millis(1)),
            expiry: config.member_expiry,
            table: MemberTable::new(
                &config.instance_id,
                config.member_expiry,
                config.heartbeat_interval,
            ),
            ends,
            seq: wall_micros(),
            members,
            engine,
            producer,
            consumer,
            open_timeout: config.open_timeout,
            serves: config.serves_clients,
            passive: BTreeSet::new(),
        })
    }

    /// The live instances that serve clients, from everyone live.
    fn serving(&self, live: Vec<String>) -> Vec<String> {
        serving(&self.members.me, self.serves, &self.passive, live)
    }

    /// Heartbeats and reads until `stop`; `warm` is told once the start-up read is done (or
    /// out of time), with the first live set out. Writes a tombstone on the way out.
    fn run(mut self, stop: &Stop, warm: oneshot::Sender<Result<(), ClusterError>>) {
        let mut warm = Some(warm);
        let started = Instant::now();
        let mut next_heartbeat = started;
        let mut published: Option<Vec<String>> = None;
        let mut connected = false;
        while !stop.requested() {
            let now = Instant::now();
            if now >= next_heartbeat {
                self.send_heartbeat(now);
                next_heartbeat = now + self.heartbeat;
            }
            self.producer.poll(Duration::ZERO);
            let wait = next_heartbeat
                .saturating_duration_since(Instant::now())
                .min(POLL);
            let mut message = self.consumer.poll(wait);
            // Everything already fetched is taken at once, the live set worked out once after.
            let mut taken = 0;
            while let Some(polled) = message {
                match polled {
                    Polled::Record(m) => {
                        // Taken out of the consumer's buffer, which the record borrows.
                        let heard = Heard {
                            partition: m.partition(),
                            offset: m.offset(),
                            key: m.key().map(<[u8]>::to_vec),
                            value: m.value().map(<[u8]>::to_vec),
                        };
                        drop(m);
                        self.handle(heard);
                    }
                    Polled::End => {}
                    Polled::Passing(e) | Polled::Fatal(e) => {
                        tracing::debug!("members: consuming {}: {e}", self.topic)
                    }
                }
                taken += 1;
                message = if taken < 10_000 {
                    self.consumer.poll(Duration::ZERO)
                } else {
                    None
                };
            }
            let now = Instant::now();
            let is_connected = self.table.connected(now);
            if is_connected != connected {
                connected = is_connected;
                self.members.connected.store(connected, Ordering::Relaxed);
                if connected {
                    tracing::info!("members: own heartbeats are back from {}", self.topic);
                } else if published.is_some() {
                    tracing::warn!(
                        "members: no own heartbeat back from {} for {:?}; keeping the last membership ({} live)",
                        self.topic,
                        self.expiry,
                        self.members.live().0.len()
                    );
                }
            }
            // Warm once one of its own heartbeats is back (appended after everything the topic
            // held at start-up, so all of that has been read too), or out of time.
            let is_warm = warm.is_none()
                || self.table.last_echo.is_some()
                || now >= started + self.open_timeout;
            if warm.is_some() && is_warm && self.table.last_echo.is_none() {
                tracing::warn!(
                    "members: no heartbeat of its own back from {} within {:?}; starting from \
                     what was read ({} partitions not read to their end)",
                    self.topic,
                    self.open_timeout,
                    self.ends.len()
                );
            }
            if is_warm {
                let live = self.serving(self.table.live());
                if published.as_ref() != Some(&live) {
                    let count = u32::try_from(live.len()).unwrap_or(u32::MAX);
                    tracing::info!("members: {count} live serving clients: {}", live.join(", "));
                    self.engine.set_broker_count(count);
                    self.members.set(live.clone());
                    published = Some(live);
                }
                // After the first live set is out, so that start returns with it.
                if let Some(tx) = warm.take() {
                    if tx.send(Ok(())).is_err() {
                        // Whoever was joining gave up: nobody will stop this thread.
                        return;
                    }
                }
            }
        }
        // A tombstone, so that the others drop this instance without waiting for the expiry.
        let me = self.members.me.clone();
        if let Err(e) = self.producer.send(&self.topic, None, &me, None) {
            tracing::warn!("members: cannot write the tombstone of {me}: {e}");
        }
        if let Err(e) = self.producer.flush(Duration::from_secs(2)) {
            tracing::warn!("members: the tombstone of {me} was not acknowledged: {e}");
        }
    }

    fn send_heartbeat(&mut self, now: Instant) {
        self.seq += 1;
        let value = serde_json::to_vec(&Heartbeat {
            v: 1,
            instance: self.members.me.clone(),
            seq: self.seq,
            serves: self.serves,
        })
        .expect("a heartbeat always encodes");
        match self
            .producer
            .send(&self.topic, None, &self.members.me, Some(&value))
        {
            Ok(()) => self.table.sent(self.seq, now),
            // Queue full (Kafka away for long): this one is skipped, the next one tries again.
            Err(e) => tracing::debug!("members: heartbeat not queued: {e}"),
        }
    }

    fn handle(&mut self, m: Heard) {
        let now = Instant::now();
        let backlog = self
            .ends
            .get(&m.partition)
            .is_some_and(|end| m.offset < *end);
        if let Some(end) = self.ends.get(&m.partition) {
            // A partition read to its start-up end is no longer waited for.
            if m.offset + 1 >= *end {
                self.ends.remove(&m.partition);
            }
        }
        let key = m.key.as_deref().and_then(|k| std::str::from_utf8(k).ok());
        match m.value.as_deref() {
            None => {
                if let Some(id) = key {
                    self.table.tombstone(id);
                    self.passive.remove(id);
                }
            }
            Some(value) => match serde_json::from_slice::<Heartbeat>(value) {
                Ok(hb) if hb.v == 1 => {
                    if hb.instance == self.members.me {
                        if !backlog {
                            self.table.echo(hb.seq, now);
                        }
                    } else {
                        if hb.serves {
                            self.passive.remove(&hb.instance);
                        } else if !self.passive.contains(&hb.instance) {
                            self.passive.insert(hb.instance.clone());
                        }
                        self.table.heartbeat(&hb.instance, now, backlog);
                    }
                }
                Ok(hb) => tracing::debug!(
                    "members: a heartbeat of version {} from {} is not understood",
                    hb.v,
                    hb.instance
                ),
                Err(e) => tracing::debug!("members: an undecodable heartbeat: {e}"),
            },
        }
    }
}

/// Of the `live` instances, those that serve clients: this one (`me`) if `serves`, every other
/// one unless its latest heartbeat said it does not (`passive`).
fn serving(
    me: &str,
    serves: bool,
    passive: &BTreeSet<String>,
    mut live: Vec<String>,
) -> Vec<String> {
    live.retain(|id| {
        if id == me {
            serves
        } else {
            !passive.contains(id)
        }
    });
    live
}

/// Who is live, from heartbeats received and this instance's own heartbeats read back. No I/O,
/// no clock of its own: the times are given.
#[derive(Debug)]
pub(crate) struct MemberTable {
    me: String,
    expiry: Duration,
    /// How long a heartbeat read from the start-up backlog counts.
    backlog_lease: Duration,
    /// The others, with when their latest heartbeat was received.
    others: HashMap<String, Instant>,
    /// This instance's heartbeats not yet read back: sequence number and when each was sent.
    sent: VecDeque<(u64, Instant)>,
    /// When the latest of its own heartbeats was read back.
    last_echo: Option<Instant>,
}

impl MemberTable {
    pub(crate) fn new(me: &str, expiry: Duration, heartbeat: Duration) -> MemberTable {
        MemberTable {
            me: me.to_owned(),
            expiry,
            backlog_lease: (heartbeat * 2).min(expiry),
            others: HashMap::new(),
            sent: VecDeque::new(),
            last_echo: None,
        }
    }

    /// Heartbeat `seq` of this instance was sent at `at`.
    pub(crate) fn sent(&mut self, seq: u64, at: Instant) {
        self.sent.push_back((seq, at));
        // Those never read back (Kafka away) are forgotten after a while.
        while self.sent.len() > 1_024 {
            self.sent.pop_front();
        }
    }

    /// A heartbeat from `id` received at `now` (`backlog`: read from what the topic held when
    /// this instance started, so perhaps from an instance long gone).
    pub(crate) fn heartbeat(&mut self, id: &str, now: Instant, backlog: bool) {
        if id == self.me {
            return;
        }
        let at = if backlog {
            // Counted as if received long enough ago that it lapses after the lease.
            now.checked_sub(self.expiry.saturating_sub(self.backlog_lease))
                .unwrap_or(now)
        } else {
            now
        };
        let seen = self.others.entry(id.to_owned()).or_insert(at);
        *seen = (*seen).max(at);
    }

    /// `id` stopped cleanly.
    pub(crate) fn tombstone(&mut self, id: &str) {
        self.others.remove(id);
    }

    /// This instance's heartbeat `seq` was read back at `now`: every heartbeat appended before
    /// it has been read, so any other instance not heard from for `expiry` before it was sent
    /// is dropped.
    pub(crate) fn echo(&mut self, seq: u64, now: Instant) {
        let Some(i) = self.sent.iter().position(|(s, _)| *s == seq) else {
            return;
        };
        let sent_at = self.sent[i].1;
        self.sent.drain(..=i);
        let gap = self.last_echo.map(|t| now.saturating_duration_since(t));
        self.last_echo = Some(now);
        if gap.is_some_and(|gap| gap > self.expiry) {
            // Back after an outage: everyone gets twice the expiry from now to be heard again
            // (their clients reconnect when they reconnect, not all at once).
            let until = now + self.expiry;
            for seen in self.others.values_mut() {
                *seen = (*seen).max(until);
            }
            return;
        }
        let expiry = self.expiry;
        self.others
            .retain(|_, seen| sent_at.saturating_duration_since(*seen) < expiry);
    }

    /// Whether this instance's heartbeats come back (one did within the expiry).
    pub(crate) fn connected(&self, now: Instant) -> bool {
        self.last_echo
            .is_some_and(|t| now.saturating_duration_since(t) <= self.expiry)
    }

    /// The live instances, sorted, this one included.
    pub(crate) fn live(&self) -> Vec<String> {
        let mut live: BTreeSet<&str> = self.others.keys().map(String::as_str).collect();
        live.insert(&self.me);
        live.into_iter().map(str::to_owned).collect()
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_heartbeat_says_it_serves_no_clients_only_when_it_does_not() {
        let serving = Heartbeat {
            v: 1,
            instance: "a".into(),
            seq: 7,
            serves: true,
        };
        // As every earlier release wrote it.
        assert_eq!(
            serde_json::to_string(&serving).unwrap(),
            r#"{"v":1,"instance":"a","seq":7}"#
        );
        let passive = Heartbeat {
            serves: false,
            ..serving
        };
        assert_eq!(
            serde_json::to_string(&passive).unwrap(),
            r#"{"v":1,"instance":"a","seq":7,"serves":false}"#
        );
        let old: Heartbeat = serde_json::from_str(r#"{"v":1,"instance":"a","seq":7}"#).unwrap();
        assert!(old.serves);
    }

    #[test]
    fn instances_that_serve_no_clients_are_live_but_not_counted() {
        let passive: BTreeSet<String> = ["kquotad-1".to_owned()].into();
        let live = || vec!["b1".to_owned(), "b2".to_owned(), "kquotad-1".to_owned()];
        assert_eq!(serving("b1", true, &passive, live()), ["b1", "b2"]);
        // kquotad counts nobody but the brokers, itself left out.
        assert_eq!(
            serving("kquotad-1", false, &BTreeSet::new(), live()),
            ["b1", "b2"]
        );
    }

    use super::*;

    const HB: Duration = Duration::from_millis(500);
    const EXPIRY: Duration = Duration::from_secs(3);

    /// Drives a table as the worker does: a heartbeat of its own every 500 ms, read back
    /// `echo_ms` later; `others` send theirs at the same times, received `echo_ms` later too.
    struct Sim {
        t0: Instant,
        table: MemberTable,
        seq: u64,
    }

    impl Sim {
        fn new() -> Sim {
            Sim {
                t0: Instant::now(),
                table: MemberTable::new("a", EXPIRY, HB),
                seq: 0,
            }
        }

        fn at(&self, ms: u64) -> Instant {
            self.t0 + Duration::from_millis(ms)
        }

        /// One heartbeat period starting at `t` ms: own sent, others' arriving, own read back.
        fn period(&mut self, t: u64, others: &[&str], echo: bool) {
            self.seq += 1;
            self.table.sent(self.seq, self.at(t));
            for id in others {
                self.table.heartbeat(id, self.at(t + 10), false);
            }
            if echo {
                self.table.echo(self.seq, self.at(t + 20));
            }
        }
    }

    #[test]
    fn a_silent_instance_is_dropped_within_the_bound() {
        let mut sim = Sim::new();
        let mut t = 0;
        while t < 5_000 {
            sim.period(t, &["b", "c"], true);
            t += 500;
        }
        assert_eq!(sim.table.live(), ["a", "b", "c"]);
        // c's last heartbeat arrived at 4_510 (sent 4_500).
        let mut dropped_at = None;
        while t < 20_000 {
            sim.period(t, &["b"], true);
            if dropped_at.is_none() && sim.table.live() == ["a", "b"] {
                dropped_at = Some(t + 20);
            }
            t += 500;
        }
        let dropped_at = dropped_at.expect("c was never dropped");
        let after = dropped_at - 4_500;
        assert!(
            after >= EXPIRY.as_millis() as u64 && after <= (EXPIRY + HB).as_millis() as u64 + 20,
            "dropped {after} ms after it stopped"
        );
    }

    #[test]
    fn nobody_is_dropped_while_own_heartbeats_do_not_come_back() {
        let mut sim = Sim::new();
        for i in 0..10 {
            sim.period(i * 500, &["b", "c"], true);
        }
        // Kafka away for 20 s: nothing arrives, nothing comes back.
        for i in 10..50 {
            sim.period(i * 500, &[], false);
        }
        assert_eq!(sim.table.live(), ["a", "b", "c"]);
        assert!(!sim.table.connected(sim.at(25_000)));
        // Back: own heartbeat first, the others a little later; nobody dropped meanwhile.
        sim.period(25_000, &[], true);
        assert!(sim.table.connected(sim.at(25_020)));
        sim.period(25_500, &[], true);
        sim.period(26_000, &["b"], true);
        assert_eq!(sim.table.live(), ["a", "b", "c"]);
        // c never comes back: dropped twice the expiry (plus a heartbeat) after the return.
        let mut t = 26_500;
        while sim.table.live().len() == 3 {
            sim.period(t, &["b"], true);
            t += 500;
            assert!(t < 40_000);
        }
        let dropped = t - 500 + 20;
        assert!(
            (25_020 + 6_000..=25_020 + 6_500 + 20).contains(&dropped),
            "dropped at {dropped}"
        );
    }

    #[test]
    fn tombstones_drop_at_once_and_newcomers_count_at_once() {
        let mut sim = Sim::new();
        sim.period(0, &["b"], true);
        assert_eq!(sim.table.live(), ["a", "b"]);
        sim.table.heartbeat("c", sim.at(100), false);
        assert_eq!(sim.table.live(), ["a", "b", "c"]);
        sim.table.tombstone("b");
        assert_eq!(sim.table.live(), ["a", "c"]);
        // Its own heartbeats never count as another instance.
        sim.table.heartbeat("a", sim.at(200), false);
        assert_eq!(sim.table.live(), ["a", "c"]);
    }

    #[test]
    fn the_backlog_counts_only_briefly() {
        let mut sim = Sim::new();
        // Read at start-up: b is live, z crashed an hour ago.
        sim.table.heartbeat("b", sim.at(0), true);
        sim.table.heartbeat("z", sim.at(0), true);
        assert_eq!(sim.table.live(), ["a", "b", "z"]);
        let mut t = 0;
        while t < 1_000 {
            sim.period(t, &[], true);
            t += 500;
        }
        assert_eq!(sim.table.live(), ["a", "b", "z"]);
        // b heartbeats again; z does not and lapses after two heartbeat intervals.
        while t < 2_000 {
            sim.period(t, &["b"], true);
            t += 500;
        }
        assert_eq!(sim.table.live(), ["a", "b"]);
    }

    #[test]
    fn late_echoes_of_unknown_heartbeats_change_nothing() {
        let mut sim = Sim::new();
        sim.period(0, &["b"], true);
        // An echo of a heartbeat this run never sent (a previous run's).
        sim.table.echo(123_456, sim.at(10_000));
        assert_eq!(sim.table.live(), ["a", "b"]);
        assert!(wall_micros() > 1_600_000_000_000_000);
    }
}
