//! An instance's part of a cluster-wide `bps` limit, from the usage the instances share.
//!
//! [`split_limit`] is the decision, a pure function of the limit and each live instance's recent
//! [`Demand`] for one bucket. [`SharedSplit`] keeps the usage every instance has published (its
//! own and the others', however their records arrive) and answers the meter's [`BpsSplit`]
//! questions from a table that each record changes in place, bucket by bucket.
//!
//! # The decision
//!
//! With `L` the cluster-wide limit, `n` the live instances, and `m` (margin), `g` (growth) and
//! `f` (floor) the [`SplitParams`], each instance *asks* for:
//!
//! * its windowed rate plus the margin, `rate × (1 + m)`, if it was not throttled lately: what it
//!   uses, and room to grow by `m` before it is throttled;
//! * the limit it has plus the growth, `max(limit, rate × (1 + g))`, if it was: it is short of
//!   what it needs (its clients wait out throttles, so its real demand cannot be seen), and asks
//!   for a little more at every interval. What it has is kept even as its rate falls while its
//!   clients wait out a long throttle;
//! * never less than a floor, `f × L / n`, so that an instance with no demand yet (a new one, or
//!   a bucket it has not reported) can start at once.
//!
//! If the asks add up to `L` or less, everyone gets its ask, and what is left is shared equally
//! (room to grow for all). Otherwise the parts are max-min fair: every ask below a level `λ` is
//! met in full, and every other instance gets `λ`, with `λ` such that the parts add up to `L`.
//! So an instance that uses little keeps what it uses, a saturated one gets what the others
//! leave, saturated instances converge to equal parts, and one whose demand rises takes up to
//! `g` more at each interval from those above it.
//!
//! In every case the parts of the `n` instances add up to exactly `L` when they decide from the
//! same view, and nobody gets less than its floor ([`split_limit`]'s tests check both): the
//! floors are inside `L`, not on top of it. Instances do not see the same view at the same
//! instant (each sees the others' usage one delivery later than its own), so during a change
//! the parts can briefly add up to more than `L`; `tests/split_sim.rs` measures how much (with
//! the defaults, up to about 7% for a few hundred milliseconds around a change, with records
//! handed to the split as they arrive).
//!
//! Why not jump straight to the fair parts: the meter throttles a bucket whose windowed rate is
//! above its limit for `(rate − limit) / limit` times the window (11 s by default), and mutes
//! each of its connections for that long. A part cut well below an instance's rate silences it
//! for seconds; parts that move by a bounded step per interval keep every instance sending.
//!
//! # The view
//!
//! [`SharedSplit`] answers only while its view is complete and recent: a record from every
//! live instance (this one included) received within `max_age`, or, for an instance that became
//! live less than `max_age` ago and has not published yet, nothing (it counts as idle meanwhile).
//! Otherwise it declines, and the meter divides `L` by the live instance count.

use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use kquota::meter::{BpsSplit, BucketOwner, Clock};
use kquota::{QuotaKey, QuotaType, Unit};
use parking_lot::{Mutex, RwLock};

use super::demand::Demand;

/// What one record of an instance says of its demands, as the split takes it: the records, and
/// how they travel, are not the split's business (the usage records are turned into this as they
/// are handed to it).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct DemandReport {
    /// The instance.
    pub(crate) instance: Arc<str>,
    /// Its number: one more than the instance's previous report's (0: unnumbered, each whole).
    pub(crate) seq: u64,
    /// Whether it replaces all the instance reported before.
    pub(crate) reset: bool,
    /// Whether the instance's statement is whole after it (false on all but the last report of a
    /// whole statement that spans several).
    pub(crate) complete: bool,
    /// Demands for buckets new or changed (with `reset`: every bucket).
    pub(crate) demands: Vec<(QuotaKey, BucketOwner, Demand)>,
    /// Buckets the instance no longer has.
    pub(crate) gone: Vec<(QuotaKey, BucketOwner)>,
}

/// The settings of the split. [`SplitParams::default`] gives the defaults.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub struct SplitParams {
    /// How much above its rate an instance that is not throttled asks for, as a fraction of its
    /// rate (default 0.05): room to grow without being throttled. While another instance is
    /// throttled, that room stands unused: at most `margin / (1 + margin)` of what the
    /// unthrottled instances are given.
    pub margin: f64,
    /// The share of the limit set aside as floors, divided equally among the live instances
    /// (default 0.1: each of `n` instances has at least `0.1 × L / n`). It is what an instance
    /// with no demand yet starts from; 0 leaves such an instance nothing while others are
    /// throttled.
    pub floor: f64,
    /// How much more than the limit it has a throttled instance asks for, as a fraction of it
    /// (default 0.25): an instance short of what it needs gains up to this much at each usage
    /// interval, and the others lose as much between them. Larger values move faster, but cut
    /// the others harder, and the meter answers a cut below an instance's rate with long
    /// throttles.
    pub growth: f64,
}

impl Default for SplitParams {
    fn default() -> Self {
        SplitParams {
            margin: 0.05,
            floor: 0.1,
            growth: 0.25,
        }
    }
}

fn non_negative(x: f64) -> f64 {
    if x.is_finite() && x > 0.0 {
        x
    } else {
        0.0
    }
}

impl SplitParams {
    /// The settings, made usable: a margin or growth that is negative or not finite is 0, a
    /// floor is clamped to `0..=1`.
    fn sanitized(self) -> SplitParams {
        SplitParams {
            margin: non_negative(self.margin),
            floor: non_negative(self.floor).min(1.0),
            growth: non_negative(self.growth),
        }
    }
}

/// What an instance asks for: an unthrottled one its rate plus the margin, a throttled one
/// the limit it has plus the growth; never less than the floor.
#[inline]
fn ask(d: Demand, floor: f64, params: &SplitParams) -> f64 {
    let want = if d.throttled {
        // Its rate plus the growth, or at least what it has: while its clients wait out a long
        // throttle its rate falls, and what it has must not fall with it.
        d.limit.max(d.rate * (1.0 + params.growth))
    } else {
        d.rate * (1.0 + params.margin)
    };
    want.max(floor)
}

/// This instance's part, in bytes/s, of a cluster-wide limit of `limit` bytes/s for one bucket,
/// given its own demand `me`, the demands of the other live instances that reported the bucket
/// (`others`), and how many live instances did not report it (`idle_others`, each taken as
/// [`Demand::IDLE`]). The module's documentation describes the decision; the parts of all the
/// instances add up to `limit` when each decides from the same demands.
///
/// It allocates nothing: a few passes over `others` (at most one per instance that asks for
/// more than the level, usually one or two). A limit that is not a positive finite number is
/// returned as it is.
pub fn split_limit(
    limit: f64,
    me: Demand,
    others: &[Demand],
    idle_others: usize,
    params: &SplitParams,
) -> f64 {
    if !(limit.is_finite() && limit > 0.0) {
        return limit;
    }
    let count = 1 + others.len() + idle_others;
    let n = count as f64;
    let floor = params.floor * limit / n;
    let asks = || {
        std::iter::once(me)
            .chain(others.iter().copied())
            .map(|d| ask(d, floor, params))
    };
    let idle = idle_others as f64 * floor;
    let asked: f64 = asks().sum::<f64>() + idle;
    let mine = ask(me, floor, params);
    if asked <= limit {
        // Enough for everyone: what is left goes to all alike, so that each can grow.
        return mine + (limit - asked) / n;
    }
    // Not enough: the level λ with Σ min(ask, λ) = limit (max-min fairness), found by
    // progressive filling. λ starts at limit / n, where Σ min(ask, λ) ≤ limit; each pass moves
    // the asks below λ to the satisfied side and raises λ to share the rest among the others,
    // so it only rises, and stops when no ask crosses it (at most one pass per instance).
    // Idle instances ask for their floor, which is at most limit / n: satisfied from the start.
    let mut level = limit / n;
    let mut satisfied = usize::MAX;
    loop {
        let (mut below, mut under) = (idle, idle_others);
        for a in asks() {
            if a < level {
                below += a;
                under += 1;
            }
        }
        let rest = count - under;
        if under == satisfied || rest == 0 {
            break;
        }
        satisfied = under;
        level = level.max((limit - below) / rest as f64);
    }
    mine.min(level)
}

/// The slot of a `bps` key in a table entry, `None` for the other keys.
fn slot(key: QuotaKey) -> Option<usize> {
    if key.unit() != Unit::Bps {
        return None;
    }
    Some(usize::from(key.quota_type() != QuotaType::ProducerByteRate))
}

/// What no cache holds.
const NO_CACHE: (u64, u64, f64) = (u64::MAX, 0, 0.0);

/// One bucket as the table holds it: this instance's demand, and the demands of the live others
/// that reported it (those that did not count as idle).
#[derive(Debug)]
struct Slot {
    me: Demand,
    /// The others' ids (as [`Board`] numbers them) and demands, side by side.
    ids: Vec<u32>,
    demands: Vec<Demand>,
    /// The part last worked out: for which generation of the live set, which limit (its bits),
    /// and the part. A bucket's limit rarely changes, so most requests read this.
    cache: Mutex<(u64, u64, f64)>,
}

impl Slot {
    fn new() -> Slot {
        Slot {
            me: Demand::IDLE,
            ids: Vec::new(),
            demands: Vec::new(),
            cache: Mutex::new(NO_CACHE),
        }
    }

    fn part(&self, limit: f64, live: usize, generation: u64, params: &SplitParams) -> f64 {
        let bits = limit.to_bits();
        // try_lock: two requests of one bucket at once work it out each rather than wait.
        if let Some(c) = self.cache.try_lock() {
            if c.0 == generation && c.1 == bits {
                return c.2;
            }
        }
        let idle = live.saturating_sub(1 + self.demands.len());
        let part = split_limit(limit, self.me, &self.demands, idle, params);
        if let Some(mut c) = self.cache.try_lock() {
            *c = (generation, bits, part);
        }
        part
    }

    fn changed(&mut self) {
        *self.cache.get_mut() = NO_CACHE;
    }

    fn is_empty(&self) -> bool {
        self.me == Demand::IDLE && self.ids.is_empty()
    }
}

/// Per owner, the producer and the consumer `bps` bucket.
type Table = HashMap<BucketOwner, [Option<Slot>; 2]>;

/// One instance's usage, as its records have said it.
#[derive(Debug)]
struct Sender {
    /// Its number in the table.
    id: u32,
    received_ms: u64,
    /// The `seq` its next record must have (`None`: any; a version 1 sender's records are each
    /// whole).
    next_seq: Option<u64>,
    /// Whether a whole statement of it has been read (and nothing missed since).
    based: bool,
    /// Whether its statement is whole (not in the middle of a whole statement in parts).
    complete: bool,
    buckets: HashMap<(QuotaKey, BucketOwner), Demand>,
}

impl Sender {
    fn usable(&self) -> bool {
        self.based && self.complete
    }
}

/// Everything the table follows from; only the threads that feed the split touch it.
#[derive(Debug, Default)]
struct Board {
    /// The live instances, this one included.
    live: BTreeSet<Arc<str>>,
    /// When each instance that joined after the first live set became live here: one that has
    /// not published yet counts as idle for `max_age` from then (it has just started), not as a
    /// hole in the view. Those of the first live set get no such grace: they were there before
    /// this instance, and are not idle.
    live_since: HashMap<Arc<str>, u64>,
    /// Whether the live set was ever given.
    had_live: bool,
    /// Every instance heard from, this one included.
    senders: HashMap<Arc<str>, Sender>,
    next_id: u32,
    stopped: bool,
}

/// A [`BpsSplit`] from shared usage: the usage every instance has published (this one's own
/// included: it decides from what the others hold of it, so that all decide from the same
/// demands) and the live set. Whoever moves the records (the Kafka usage topic through
/// [`UsageShare`](crate::UsageShare), or anything else) feeds it with
/// [`update_deltas`](SharedSplit::update_deltas) (or whole records:
/// [`record_local`](SharedSplit::record_local), [`receive`](SharedSplit::receive)) and
/// [`set_live`](SharedSplit::set_live).
///
/// It declines (the meter then divides the limit by the live instance count) while its view is
/// not complete and recent: unless every live instance, this one included, has a whole
/// statement read with nothing missed since and a record received within `max_age` (one that
/// became live less than `max_age` ago may have none yet: it counts as idle), and for good once
/// [`stop`](SharedSplit::stop)ped. An instance whose record was missed (its `seq` skipped) is
/// asked for a whole statement again ([`needs`](SharedSplit::needs)).
///
/// The meter's questions are answered from a table behind a read lock held only for the answer:
/// one clock read, a lookup by owner, and the part kept from the previous request of the bucket
/// (worked out again, without allocating, only when its demands, the live set or the limit
/// changed). Each record changes the table in place, bucket by bucket: an update costs what
/// changed, not what the instances serve.
pub struct SharedSplit {
    me: Arc<str>,
    params: SplitParams,
    max_age_ms: u64,
    clock: Arc<dyn Clock>,
    board: Mutex<Board>,
    table: RwLock<Table>,
    /// Answers are given while the split's clock is below this (0: never).
    fresh_until: AtomicU64,
    /// The live instances, this one included.
    live: AtomicUsize,
    /// Moves when the live set does: every cached part is stale then.
    generation: AtomicU64,
}

impl fmt::Debug for SharedSplit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedSplit")
            .field("instance", &self.me)
            .field("params", &self.params)
            .field("max_age_ms", &self.max_age_ms)
            .field("live", &self.live.load(Ordering::Relaxed))
            .field("buckets", &self.table.read().len())
            .finish_non_exhaustive()
    }
}

impl SharedSplit {
    /// The split of instance `instance_id`, whose view is too old after `max_age`, reading the
    /// time from `clock` (receipt times and the age of the view; any clock will do, it need not
    /// be the meter's).
    pub fn new(
        instance_id: &str,
        params: SplitParams,
        max_age: Duration,
        clock: Arc<dyn Clock>,
    ) -> SharedSplit {
        let me: Arc<str> = Arc::from(instance_id);
        let board = Board {
            live: BTreeSet::from([Arc::clone(&me)]),
            ..Board::default()
        };
        SharedSplit {
            me,
            params: params.sanitized(),
            max_age_ms: u64::try_from(max_age.as_millis()).unwrap_or(u64::MAX),
            clock,
            board: Mutex::new(board),
            table: RwLock::new(Table::new()),
            fresh_until: AtomicU64::new(0),
            live: AtomicUsize::new(1),
            generation: AtomicU64::new(0),
        }
    }

    /// This instance's id.
    pub fn instance_id(&self) -> &str {
        &self.me
    }

    /// The settings in use.
    pub fn params(&self) -> SplitParams {
        self.params
    }

    /// The live instances are `live` from now on (this one always counts, listed or not). Those
    /// given the first time must each have a record before the split answers; one added later
    /// counts as idle until its first record, for `max_age` at most.
    pub fn set_live<I, S>(&self, live: I)
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut set: BTreeSet<Arc<str>> = live.into_iter().map(|s| Arc::from(s.as_ref())).collect();
        set.insert(Arc::clone(&self.me));
        let now = self.clock.now_ms();
        let mut board = self.board.lock();
        let grace = std::mem::replace(&mut board.had_live, true);
        if board.live == set {
            self.refresh(&board);
            return;
        }
        let mut table = self.table.write();
        let Board {
            live,
            live_since,
            senders,
            ..
        } = &mut *board;
        // Who left no longer counts; who came counts with what it said.
        for id in live.difference(&set) {
            if let Some(s) = senders.get(id) {
                for (key, owner) in s.buckets.keys() {
                    remove(&mut table, s.id, false, *key, owner);
                }
            }
        }
        for id in set.difference(live) {
            if let Some(s) = senders.get(id) {
                for ((key, owner), d) in &s.buckets {
                    upsert(&mut table, s.id, false, *key, owner, *d);
                }
            }
        }
        live_since.retain(|id, _| set.contains(id));
        if grace {
            for id in &set {
                if !live.contains(id) {
                    live_since.insert(Arc::clone(id), now);
                }
            }
        }
        *live = set;
        drop(table);
        self.live.store(board.live.len().max(1), Ordering::Release);
        self.generation.fetch_add(1, Ordering::AcqRel);
        self.refresh(&board);
    }

    /// This instance's reports as just published (`local`, in order), and the others' reports
    /// received now (in the order they arrived; this instance's own among them are ignored), at
    /// once.
    pub(crate) fn take(&self, local: &[DemandReport], received: Vec<DemandReport>) {
        let now = self.clock.now_ms();
        let received: Vec<DemandReport> = received
            .into_iter()
            .filter(|r| *r.instance != *self.me)
            .collect();
        if local.is_empty() && received.is_empty() {
            return;
        }
        let mut board = self.board.lock();
        let mut table = self.table.write();
        for d in local {
            self.apply(&mut board, &mut table, &self.me, d, now);
        }
        for d in &received {
            self.apply(&mut board, &mut table, &d.instance, d, now);
        }
        // Instances long gone are forgotten, so that ids that come and go do not pile up (they
        // are in the table only while live).
        let keep_ms = self.max_age_ms.saturating_mul(4);
        let Board { live, senders, .. } = &mut *board;
        senders.retain(|id, s| live.contains(id) || now.saturating_sub(s.received_ms) < keep_ms);
        drop(table);
        self.refresh(&board);
    }

    /// Applies one report of `instance`'s.
    fn apply(
        &self,
        board: &mut Board,
        table: &mut Table,
        instance: &Arc<str>,
        d: &DemandReport,
        now: u64,
    ) {
        let local = *instance == self.me;
        let in_table = local || board.live.contains(instance);
        let next_id = &mut board.next_id;
        let sender = board
            .senders
            .entry(Arc::clone(instance))
            .or_insert_with(|| {
                *next_id += 1;
                Sender {
                    id: *next_id,
                    received_ms: now,
                    next_seq: None,
                    based: false,
                    complete: false,
                    buckets: HashMap::new(),
                }
            });
        let id = sender.id;
        if d.reset {
            for (key, owner) in sender.buckets.keys() {
                if in_table {
                    remove(table, id, local, *key, owner);
                }
            }
            sender.buckets.clear();
            sender.based = true;
        } else if !sender.based || sender.next_seq.is_some_and(|n| n != d.seq) {
            // A record missed (or none whole yet): what is held of it may be wrong, until a
            // whole statement comes.
            sender.based = false;
            sender.complete = false;
            sender.received_ms = now;
            return;
        }
        for (key, owner) in &d.gone {
            if sender.buckets.remove(&(*key, owner.clone())).is_some() && in_table {
                remove(table, id, local, *key, owner);
            }
        }
        for (key, owner, demand) in &d.demands {
            if slot(*key).is_none() {
                continue;
            }
            sender.buckets.insert((*key, owner.clone()), *demand);
            if in_table {
                upsert(table, id, local, *key, owner, *demand);
            }
        }
        // An unnumbered report (a version 1 record's) is whole on its own.
        sender.next_seq = (d.seq != 0).then(|| d.seq + 1);
        sender.complete = d.complete;
        sender.received_ms = now;
    }

    /// Works out again until when the view is complete and recent.
    fn refresh(&self, board: &Board) {
        let mut oldest = board
            .senders
            .get(&self.me)
            .filter(|s| s.usable())
            .map(|s| s.received_ms);
        for id in board.live.iter().filter(|id| ***id != *self.me) {
            let since = match board.senders.get(id) {
                Some(s) if s.usable() => Some(s.received_ms),
                Some(_) => None,
                None => board.live_since.get(id).copied(),
            };
            oldest = match (oldest, since) {
                (Some(a), Some(b)) => Some(a.min(b)),
                _ => None,
            };
        }
        let until = match oldest {
            Some(oldest) if !board.stopped => oldest.saturating_add(self.max_age_ms),
            _ => 0,
        };
        self.fresh_until.store(until, Ordering::Release);
    }

    /// The live instances whose usage this one lacks: heard from, but not as a whole (it
    /// started reading after their whole statement, or missed a record since). Named in this
    /// instance's next record, so that each publishes its whole usage again.
    pub fn needs(&self) -> Vec<String> {
        let board = self.board.lock();
        board
            .live
            .iter()
            .filter(|id| ***id != *self.me)
            .filter(|id| board.senders.get(*id).is_some_and(|s| !s.based))
            .map(|id| id.to_string())
            .collect()
    }

    /// Whether another live instance serves this bucket too (it reported a rate or a throttle
    /// for it): its publisher then sends every change of it.
    pub fn is_shared(&self, key: QuotaKey, owner: &BucketOwner) -> bool {
        let Some(s) = slot(key) else {
            return false;
        };
        let table = self.table.read();
        table
            .get(owner)
            .and_then(|e| e[s].as_ref())
            .is_some_and(|slot| slot.demands.iter().any(|d| d.rate > 0.0 || d.throttled))
    }

    /// Forgets instance `instance_id`'s usage (it stopped cleanly).
    pub fn forget(&self, instance_id: &str) {
        let mut board = self.board.lock();
        let Some(s) = board.senders.remove(instance_id) else {
            return;
        };
        if board.live.contains(instance_id) || *self.me == *instance_id {
            let local = *self.me == *instance_id;
            let mut table = self.table.write();
            for (key, owner) in s.buckets.keys() {
                remove(&mut table, s.id, local, *key, owner);
            }
        }
        self.refresh(&board);
    }

    /// Declines every question from now on: the meter divides by the live count again.
    pub fn stop(&self) {
        let mut board = self.board.lock();
        board.stopped = true;
        self.refresh(&board);
    }

    /// Whether the split answers now (its view is complete and recent).
    pub fn is_fresh(&self) -> bool {
        self.clock.now_ms() < self.fresh_until.load(Ordering::Acquire)
    }

    /// What the split decides from for one bucket: this instance's demand, then the other live
    /// instances' that reported it (those that did not count as [`Demand::IDLE`]); `None` if
    /// nobody reported it or `key` is not a `bps` key. For operators and tests: it allocates.
    pub fn demands(&self, key: QuotaKey, owner: &BucketOwner) -> Option<(Demand, Vec<Demand>)> {
        let s = slot(key)?;
        let table = self.table.read();
        let slot = table.get(owner)?[s].as_ref()?;
        Some((slot.me, slot.demands.clone()))
    }

    /// The live instances the split divides among, this one included.
    pub fn live_count(&self) -> usize {
        self.live.load(Ordering::Acquire).max(1)
    }

    /// The buckets the table holds (anybody's).
    pub fn buckets(&self) -> usize {
        self.table
            .read()
            .values()
            .map(|e| e.iter().flatten().count())
            .sum()
    }
}

/// Sets the demand of sender `id` (`local`: this instance) for a bucket.
fn upsert(table: &mut Table, id: u32, local: bool, key: QuotaKey, owner: &BucketOwner, d: Demand) {
    let Some(s) = slot(key) else {
        return;
    };
    let entry = table.entry(owner.clone()).or_default();
    let slot = entry[s].get_or_insert_with(Slot::new);
    if local {
        slot.me = d;
    } else if let Some(i) = slot.ids.iter().position(|x| *x == id) {
        slot.demands[i] = d;
    } else {
        slot.ids.push(id);
        slot.demands.push(d);
    }
    if slot.is_empty() {
        entry[s] = None;
        if entry.iter().all(Option::is_none) {
            table.remove(owner);
        }
    } else {
        slot.changed();
    }
}

/// Removes the demand of sender `id` (`local`: this instance) for a bucket.
fn remove(table: &mut Table, id: u32, local: bool, key: QuotaKey, owner: &BucketOwner) {
    let Some(s) = slot(key) else {
        return;
    };
    let Some(entry) = table.get_mut(owner) else {
        return;
    };
    let Some(slot) = entry[s].as_mut() else {
        return;
    };
    if local {
        slot.me = Demand::IDLE;
    } else if let Some(i) = slot.ids.iter().position(|x| *x == id) {
        slot.ids.swap_remove(i);
        slot.demands.swap_remove(i);
    }
    if slot.is_empty() {
        entry[s] = None;
        if entry.iter().all(Option::is_none) {
            table.remove(owner);
        }
    } else {
        slot.changed();
    }
}

impl BpsSplit for SharedSplit {
    /// `now_ms` is the meter's clock, whose origin this split does not know: the age of the view
    /// is read from the split's own clock instead.
    fn local_limit(
        &self,
        key: QuotaKey,
        owner: &BucketOwner,
        limit: f64,
        _now_ms: u64,
    ) -> Option<f64> {
        let s = slot(key)?;
        let now = self.clock.now_ms();
        if now >= self.fresh_until.load(Ordering::Acquire) {
            return None;
        }
        let live = self.live_count();
        let generation = self.generation.load(Ordering::Acquire);
        let table = self.table.read();
        Some(match table.get(owner).and_then(|e| e[s].as_ref()) {
            Some(slot) => slot.part(limit, live, generation, &self.params),
            // Nobody reported the bucket: everyone alike, the limit divided by the live count.
            None => split_limit(limit, Demand::IDLE, &[], live - 1, &self.params),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kquota::meter::ManualClock;

    const L: f64 = 3_000_000.0;

    /// A demand whose limit is its rate (what a saturated instance reports).
    fn d(rate: f64, throttled: bool) -> Demand {
        Demand::new(rate, rate, throttled)
    }

    /// Every instance's part, each deciding from the same view.
    fn parts(limit: f64, all: &[Demand], params: &SplitParams) -> Vec<f64> {
        (0..all.len())
            .map(|i| {
                let others: Vec<Demand> = all
                    .iter()
                    .enumerate()
                    .filter(|(j, _)| *j != i)
                    .map(|(_, d)| *d)
                    .collect();
                split_limit(limit, all[i], &others, 0, params)
            })
            .collect()
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * b.abs().max(1.0)
    }

    fn all_close(got: &[f64], want: &[f64]) -> bool {
        got.len() == want.len() && got.iter().zip(want).all(|(a, b)| close(*a, *b))
    }

    #[test]
    fn the_70_20_10_case_gives_the_throttled_instance_what_the_others_leave() {
        let p = SplitParams::default();
        let all = [d(1.74e6, true), d(0.8e6, false), d(0.4e6, false)];
        let got = parts(L, &all, &p);
        assert!(all_close(&got, &[1.74e6, 0.84e6, 0.42e6]), "{got:?}");
        // Whether the saturated instance throttled in its last interval does not matter: it
        // asks for more than what is left either way.
        let all = [d(1.74e6, false), d(0.8e6, false), d(0.4e6, false)];
        let again = parts(L, &all, &p);
        assert!(all_close(&again, &got), "{again:?}");
        // From static division (1 MB/s each), the large instance gains 25% an interval until
        // it has what the others leave.
        let mut limits = [1e6, 1e6, 1e6];
        for _ in 0..10 {
            let all = [
                Demand::new(limits[0], limits[0], true),
                d(0.8e6, false),
                d(0.4e6, false),
            ];
            limits[0] = parts(L, &all, &p)[0];
        }
        assert!(close(limits[0], 1.74e6), "{limits:?}");
    }

    #[test]
    fn saturated_instances_move_to_equal_parts() {
        let p = SplitParams::default();
        let all = [d(1.5e6, true), d(1e6, true), d(0.5e6, true)];
        let got = parts(L, &all, &p);
        // The smallest asks for 25% more and gets it; the others share the rest equally.
        assert!(all_close(&got, &[1.1875e6, 1.1875e6, 0.625e6]), "{got:?}");
        // Fed back as their limits, the parts become equal within a few intervals.
        let mut limits = got;
        for _ in 0..6 {
            let all: Vec<Demand> = limits.iter().map(|l| d(*l, true)).collect();
            limits = parts(L, &all, &p);
            assert!(close(limits.iter().sum(), L));
        }
        assert!(all_close(&limits, &[1e6, 1e6, 1e6]), "{limits:?}");
    }

    #[test]
    fn nobody_short_shares_the_slack() {
        let p = SplitParams::default();
        let all = [d(0.5e6, false), d(0.2e6, false), d(0.0, false)];
        let got = parts(L, &all, &p);
        let floor = 0.1 * L / 3.0;
        let slack = (L - 0.525e6 - 0.21e6 - floor) / 3.0;
        assert!(
            all_close(&got, &[0.525e6 + slack, 0.21e6 + slack, floor + slack]),
            "{got:?}"
        );
        // A throttled instance that asks for less than there is gets its ask and the slack.
        let all = [d(0.5e6, true), d(0.2e6, false)];
        let got = parts(L, &all, &p);
        let slack = (L - 0.625e6 - 0.21e6) / 2.0;
        assert!(
            all_close(&got, &[0.625e6 + slack, 0.21e6 + slack]),
            "{got:?}"
        );
    }

    #[test]
    fn a_new_instance_gets_its_floor_then_grows() {
        let p = SplitParams::default();
        let floor = 0.1 * L / 3.0;
        let all = [d(2e6, true), d(2e6, true), d(0.0, false)];
        let got = parts(L, &all, &p);
        assert!(
            all_close(&got, &[(L - floor) / 2.0, (L - floor) / 2.0, floor]),
            "{got:?}"
        );
        // The same, with the newcomer not reporting the bucket at all.
        let alone = split_limit(L, d(2e6, true), &[d(2e6, true)], 1, &p);
        assert!(close(alone, got[0]));
        // Its demand appears: throttled at its floor, it gains 25% an interval.
        let mut mine = floor;
        for step in 1..=5 {
            let all = [
                d(got[0], true),
                d(got[1], true),
                Demand::new(mine, mine, true),
            ];
            let next = parts(L, &all, &p)[2];
            assert!(close(next, mine * 1.25), "step {step}: {next} after {mine}");
            mine = next;
        }
    }

    #[test]
    fn asking_too_much_is_cut_to_the_level_of_the_others() {
        let p = SplitParams::default();
        let floor = 0.1 * L / 3.0;
        // The unthrottled ask for 2.1 + 1.575 MB/s, more than L: max-min, the small one whole.
        let all = [d(2e6, false), d(1.5e6, false), d(0.1e6, true)];
        let got = parts(L, &all, &p);
        assert!(all_close(&got, &[1.4375e6, 1.4375e6, 0.125e6]), "{got:?}");
        // Not below a floor, whatever the others ask.
        let all = [d(9e6, true), d(9e6, false), d(0.0, true)];
        let got = parts(L, &all, &p);
        assert!(
            all_close(&got, &[(L - floor) / 2.0, (L - floor) / 2.0, floor]),
            "{got:?}"
        );
    }

    #[test]
    fn odd_limits_and_rates_are_harmless() {
        let p = SplitParams::default();
        assert_eq!(split_limit(0.0, d(1.0, true), &[], 0, &p), 0.0);
        assert_eq!(split_limit(-5.0, d(1.0, true), &[], 0, &p), -5.0);
        assert!(split_limit(f64::NAN, d(1.0, true), &[], 0, &p).is_nan());
        let weird = [
            Demand::new(f64::NAN, f64::NAN, false),
            Demand::new(f64::INFINITY, -1.0, true),
            Demand::new(-3.0, 5.0, false),
        ];
        let got = parts(L, &weird, &p);
        assert!(got.iter().all(|x| x.is_finite() && *x >= 0.0), "{got:?}");
        assert!(close(got.iter().sum(), L), "{got:?}");
        // Alone, an instance has the whole limit.
        assert!(close(split_limit(L, d(5e6, true), &[], 0, &p), L));
        assert!(close(split_limit(L, d(1e3, false), &[], 0, &p), L));
        // A zero floor leaves an idle instance nothing while another asks for it all.
        let no_floor = SplitParams {
            floor: 0.0,
            ..SplitParams::default()
        };
        let got = parts(L, &[d(4e6, true), d(0.0, false)], &no_floor);
        assert_eq!(got, vec![L, 0.0]);
        let insane = SplitParams {
            margin: f64::NAN,
            floor: 7.0,
            growth: -1.0,
        }
        .sanitized();
        assert_eq!(
            (insane.margin, insane.floor, insane.growth),
            (0.0, 1.0, 0.0)
        );
    }

    /// Any view, decided from by every instance alike: the parts are finite, at least the
    /// floor, add up to the limit, and are max-min fair: an instance given less than it asked
    /// for has at least as much as any other.
    #[test]
    fn parts_always_add_up_to_the_limit_and_are_max_min_fair() {
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for case in 0..20_000 {
            let n = 1 + (next() % 12) as usize;
            let limit = [1.0, 1e3, 3e6, 1e9, 9.2e18][(next() % 5) as usize];
            let params = SplitParams {
                margin: [0.0, 0.05, 0.1, 0.5][(next() % 4) as usize],
                floor: [0.0, 0.01, 0.1, 0.5, 1.0][(next() % 5) as usize],
                growth: [0.0, 0.1, 0.25, 1.0][(next() % 4) as usize],
            };
            let amount = |next: &mut dyn FnMut() -> u64| match next() % 4 {
                0 => 0.0,
                1 => limit * (next() % 1000) as f64 / 1000.0,
                2 => limit * (next() % 10_000) as f64 / 1000.0,
                _ => (next() % 1_000_000) as f64,
            };
            let all: Vec<Demand> = (0..n)
                .map(|_| {
                    let (rate, cap) = (amount(&mut next), amount(&mut next));
                    Demand::new(rate, cap, next() % 3 == 0)
                })
                .collect();
            let got = parts(limit, &all, &params);
            let sum: f64 = got.iter().sum();
            let eps = 1e-9 * limit;
            assert!(
                (sum - limit).abs() <= eps,
                "case {case}: {all:?} {params:?} → {got:?} (sum {sum}, limit {limit})"
            );
            let floor = params.floor * limit / n as f64;
            let most = got.iter().copied().fold(0.0, f64::max);
            for (i, part) in got.iter().enumerate() {
                assert!(
                    part.is_finite() && *part >= floor - eps,
                    "case {case}: {got:?}"
                );
                let asked = ask(all[i], floor, &params);
                if *part < asked - eps {
                    assert!(*part >= most - eps, "case {case}: {i} short in {got:?}");
                }
            }
        }
    }

    /// A whole, unnumbered report of `instance`'s producer buckets (user, rate, throttled).
    fn report(instance: &str, buckets: &[(&str, f64, bool)]) -> DemandReport {
        DemandReport {
            instance: Arc::from(instance),
            seq: 0,
            reset: true,
            complete: true,
            demands: buckets
                .iter()
                .map(|(user, rate, throttled)| {
                    (
                        QuotaKey::PRODUCER_BPS,
                        BucketOwner::User(Arc::from(*user)),
                        d(*rate, *throttled),
                    )
                })
                .collect(),
            gone: Vec::new(),
        }
    }

    /// This instance's own report, as just published.
    fn local(split: &SharedSplit, r: DemandReport) {
        split.take(&[r], Vec::new());
    }

    fn alice() -> BucketOwner {
        BucketOwner::User(Arc::from("alice"))
    }

    #[test]
    fn shared_split_answers_from_a_complete_recent_view() {
        let clock = Arc::new(ManualClock::new(1_000));
        let split = SharedSplit::new(
            "a",
            SplitParams::default(),
            Duration::from_secs(2),
            clock.clone(),
        );
        let ask = |key| split.local_limit(key, &alice(), L, 0);
        // Nothing yet: declines.
        assert_eq!(ask(QuotaKey::PRODUCER_BPS), None);
        split.set_live(["a"]);
        local(&split, report("a", &[("alice", 1.74e6, true)]));
        // Alone and fresh: the whole limit.
        assert!(close(ask(QuotaKey::PRODUCER_BPS).unwrap(), L));
        // b and c join: idle until they report.
        split.set_live(["a", "b", "c"]);
        let want = split_limit(L, d(1.74e6, true), &[], 2, &split.params());
        assert!(close(ask(QuotaKey::PRODUCER_BPS).unwrap(), want));
        // ...for max_age at most: then the view has a hole, and the split declines.
        clock.advance(2_000);
        local(&split, report("a", &[("alice", 1.74e6, true)]));
        assert_eq!(ask(QuotaKey::PRODUCER_BPS), None);
        split.take(
            &[],
            vec![
                report("b", &[("alice", 0.8e6, false)]),
                report("c", &[("alice", 0.4e6, false), ("bob", 5.0, false)]),
            ],
        );
        let got = ask(QuotaKey::PRODUCER_BPS).unwrap();
        assert!(close(got, 1.74e6), "{got}");
        // Non-bps keys are never split; an unreported bucket gets the limit over the live count.
        assert_eq!(ask(QuotaKey::PRODUCER_BROKER_BPS), None);
        assert!(close(ask(QuotaKey::CONSUMER_BPS).unwrap(), L / 3.0));
        // An instance that is not live does not count.
        split.take(&[], vec![report("z", &[("alice", 9e6, true)])]);
        assert!(close(ask(QuotaKey::PRODUCER_BPS).unwrap(), got));
        // Its own reports count only as its own (local).
        split.take(&[], vec![report("a", &[("alice", 9e6, false)])]);
        assert!(close(ask(QuotaKey::PRODUCER_BPS).unwrap(), got));
        // Too old: declines; fresh again once all have reported anew.
        clock.advance(2_000);
        assert_eq!(ask(QuotaKey::PRODUCER_BPS), None);
        assert!(!split.is_fresh());
        local(&split, report("a", &[("alice", 1.74e6, true)]));
        split.take(&[], vec![report("b", &[("alice", 0.8e6, false)])]);
        assert_eq!(ask(QuotaKey::PRODUCER_BPS), None);
        split.take(&[], vec![report("c", &[("alice", 0.4e6, false)])]);
        assert!(split.is_fresh());
        // c leaves: its usage no longer counts once the live set says so.
        split.set_live(["a", "b"]);
        assert_eq!(split.live_count(), 2);
        let two = ask(QuotaKey::PRODUCER_BPS).unwrap();
        let want = split_limit(L, d(1.74e6, true), &[d(0.8e6, false)], 0, &split.params());
        assert!(close(two, want), "{two} {want}");
        split.forget("b");
        assert_eq!(ask(QuotaKey::PRODUCER_BPS), None);
        split.take(&[], vec![report("b", &[("alice", 0.8e6, false)])]);
        assert!(split.is_fresh());
        split.stop();
        assert_eq!(ask(QuotaKey::PRODUCER_BPS), None);
        local(&split, report("a", &[("alice", 1.74e6, true)]));
        assert_eq!(ask(QuotaKey::PRODUCER_BPS), None);
    }

    /// An instance that starts among others waits for their records: they are not idle.
    #[test]
    fn the_first_live_set_has_no_grace() {
        let clock = Arc::new(ManualClock::new(1_000));
        let split = SharedSplit::new(
            "c",
            SplitParams::default(),
            Duration::from_secs(2),
            clock.clone(),
        );
        split.set_live(["a", "b", "c"]);
        local(&split, report("c", &[]));
        assert!(!split.is_fresh());
        split.take(&[], vec![report("a", &[("alice", 2e6, true)])]);
        assert!(!split.is_fresh());
        split.take(&[], vec![report("b", &[("alice", 0.5e6, false)])]);
        assert!(split.is_fresh());
        let got = split
            .local_limit(QuotaKey::PRODUCER_BPS, &alice(), L, 0)
            .unwrap();
        let floor = 0.1 * L / 3.0;
        assert!(close(got, floor), "{got}");
    }
}
