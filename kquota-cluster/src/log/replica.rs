//! [`Replica`]: the follower's rules without I/O. Fed the configuration topic's records in log
//! order, from any offset, it keeps the engine holding the configuration the records before the
//! next offset give: whether the log still holds its whole history, or compaction has left a
//! snapshot and what came after it.
//!
//! # Why it can trust what it holds
//!
//! Compaction removes a record only once its key is written again later; every key is written
//! once with a value, so only a tombstone removes a record, and only a snapshot's writer writes
//! tombstones: after its snapshot is complete in the log, for records before the snapshot's
//! claim. So every record missing from the log is covered by a complete snapshot later in it
//! (the latest snapshot is never removed: only a newer complete one tombstones its chunks).
//!
//! A replica that has read every record since offset 0 holds what they give (it is *trusted*).
//! When records are missing (offsets `o..o'` skipped: compaction), what was there is either
//! tombstones, whose loss changes nothing, or records covered by a complete snapshot whose claim
//! is at `o'` or later: the latest snapshot is never removed, so neither is its claim, which is
//! after every record it covers. Until it knows which, the replica applies what follows
//! provisionally (a commit is not answered from it):
//!
//! * a complete snapshot claimed at `o'` or later comes: the replica holds the snapshot, reads
//!   again from its claim on, and is trusted again;
//! * the log's end comes first: nothing but tombstones went missing, and what it holds is right.
//!
//! A trusted replica checks each complete snapshot against the state it held at the snapshot's
//! claim (when it was following live then), so that instances that have parted (run with other
//! settings) find out.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kquota::{AlterResult, Engine};

use super::record::{chunk_key, chunk_of, Chunk, Claim, LogRecord};
use super::snapshot::{self, Assembly};
use crate::error::RecordProblem;

/// A claim whose snapshot has not come (no chunk of it read) for this long no longer stops
/// another claim: its writer is taken to be gone.
pub(crate) const CLAIM_STALE: Duration = Duration::from_secs(60);
/// The own digests kept for checking the snapshots that follow (one per winning claim).
const OWN_DIGESTS: usize = 8;

/// What the follower is to do after a record.
#[derive(Debug)]
pub(crate) enum Step {
    /// Nothing more.
    Nothing,
    /// A batch of `origin` numbered `seq` was applied, with `results`; `provisional` while the
    /// replica is not trusted (they hold once [`Replica::at_end`] trusts it again, and are void
    /// if a snapshot is read instead: the batch is then read again).
    Batch {
        /// The instance that committed it.
        origin: String,
        /// Its number.
        seq: u64,
        /// Its results here.
        results: Vec<AlterResult>,
        /// Whether they may yet be void.
        provisional: bool,
    },
    /// The engine now holds a snapshot, and the batches read after its claim were applied to it
    /// again (in order; provisional as [`Step::Batch`] says).
    Restored(Vec<Reapplied>),
    /// The engine now holds a snapshot: read the log again from this offset (the batches after
    /// its claim were not all kept).
    SeekTo(i64),
    /// This instance's claim won: write this snapshot.
    Write(SnapshotJob),
}

/// A batch applied again onto a restored snapshot.
#[derive(Debug)]
pub(crate) struct Reapplied {
    /// The instance that committed it.
    pub(crate) origin: String,
    /// Its number.
    pub(crate) seq: u64,
    /// Its results on the snapshot.
    pub(crate) results: Vec<AlterResult>,
    /// Whether they may yet be void (records went missing after the snapshot's claim too).
    pub(crate) provisional: bool,
}

/// The batches kept while a replica is not trusted, to apply again onto the snapshot that
/// covers what went missing; past this many, the oldest go and the log is read again instead.
const HELD: usize = 100_000;

/// A snapshot for the writer: its records, then tombstones for every key it covers.
#[derive(Debug)]
pub(crate) struct SnapshotJob {
    /// The claim's offset.
    pub(crate) claim: i64,
    /// How many entities it holds.
    pub(crate) entities: u64,
    /// The chunks: (key, value).
    pub(crate) records: Vec<(String, Vec<u8>)>,
    /// The keys of the records before the claim that no tombstone has removed yet.
    pub(crate) tombstones: Vec<String>,
}

/// A key read with a value: batch keys (most of them) held small.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum LiveKey {
    /// `"<origin>/<seq>"`, the origin by its index in `origins`.
    Batch(u32, u64),
    /// Any other key.
    Other(Box<str>),
}

/// The claim that won, while its snapshot is awaited.
#[derive(Debug)]
struct OpenClaim {
    offset: i64,
    /// When it, or a chunk of its snapshot, was last read.
    touched: Instant,
    /// Batches read before it.
    batches_at: u64,
}

/// The follower's state: the engine, and what it knows of the log read so far.
#[derive(Debug)]
pub(crate) struct Replica {
    engine: Arc<Engine>,
    me: String,
    next_offset: i64,
    trusted: bool,
    /// Where records first went missing (while not trusted): the first offset missing, and
    /// the offset after that run. A snapshot claimed before `gap_end` covers none of them; the
    /// one that covers them, if any, is claimed at `gap_end` or later.
    untrusted_from: i64,
    gap_end: i64,
    /// While not trusted: the batches read, every one from `held_from` on, and the runs of
    /// missing records seen (to apply again, and to know what a snapshot covers).
    held: VecDeque<(i64, super::record::ConfigRecord)>,
    held_from: i64,
    held_max: usize,
    gaps: Vec<(i64, i64)>,
    live: HashMap<LiveKey, i64>,
    origins: Vec<String>,
    origin_ids: HashMap<String, u32>,
    /// The claim of the latest complete snapshot read.
    covered: Option<i64>,
    assembling: BTreeMap<i64, Assembly>,
    open_claim: Option<OpenClaim>,
    /// This instance's state at recent winning claims: (claim, entities, digest).
    own: VecDeque<(i64, u64, u64)>,
    /// The claims this process has issued and not yet read, with when.
    my_claims: HashMap<u64, Instant>,
    batches: u64,
    batches_at_cover: u64,
    max_own_seq: Option<u64>,
    caught_up: bool,
    read: u64,
}

impl Replica {
    /// A replica that keeps at most `held` batches while not trusted (tests: the path where
    /// the log is read again).
    #[cfg(test)]
    fn holding(engine: Arc<Engine>, me: &str, held: usize) -> Replica {
        let mut r = Replica::new(engine, me);
        r.held_max = held;
        r
    }

    /// A replica of instance `me` applying the log to `engine`, from offset 0.
    pub(crate) fn new(engine: Arc<Engine>, me: &str) -> Replica {
        Replica {
            engine,
            me: me.to_owned(),
            next_offset: 0,
            trusted: true,
            untrusted_from: 0,
            gap_end: 0,
            held: VecDeque::new(),
            held_from: 0,
            held_max: HELD,
            gaps: Vec::new(),
            live: HashMap::new(),
            origins: Vec::new(),
            origin_ids: HashMap::new(),
            covered: None,
            assembling: BTreeMap::new(),
            open_claim: None,
            own: VecDeque::new(),
            my_claims: HashMap::new(),
            batches: 0,
            batches_at_cover: 0,
            max_own_seq: None,
            caught_up: false,
            read: 0,
        }
    }

    /// The offset after the last record read.
    pub(crate) fn next_offset(&self) -> i64 {
        self.next_offset
    }

    /// Whether the engine holds what the records before [`next_offset`](Replica::next_offset)
    /// give.
    pub(crate) fn trusted(&self) -> bool {
        self.trusted
    }

    /// The claim offset of the latest complete snapshot read.
    pub(crate) fn covered(&self) -> Option<i64> {
        self.covered
    }

    /// The records read (a record read again after a snapshot counts again).
    pub(crate) fn records_read(&self) -> u64 {
        self.read
    }

    /// The highest batch number of this instance's id read.
    pub(crate) fn max_own_seq(&self) -> Option<u64> {
        self.max_own_seq
    }

    /// From now on the replica follows the log live: it checks snapshots against its own state,
    /// and may claim.
    pub(crate) fn set_caught_up(&mut self) {
        self.caught_up = true;
    }

    /// The replica has read to the log's end: if records had gone missing and no snapshot
    /// claimed after them came, what went missing was tombstones, and what it holds is right.
    /// Whether it was not trusted until now (its provisional results now hold).
    pub(crate) fn at_end(&mut self) -> bool {
        if self.trusted {
            return false;
        }
        self.trusted = true;
        self.held.clear();
        self.gaps.clear();
        if self.caught_up {
            tracing::info!(
                from = self.untrusted_from,
                to = self.gap_end,
                "the records missing from the configuration log were tombstones"
            );
        }
        true
    }

    /// Whether this instance should claim the next snapshot at `now`: it follows the log live,
    /// trusts it, `every` batches (0: never) have been read since the latest snapshot, and no
    /// claim is waiting for its snapshot.
    pub(crate) fn claim_due(&mut self, now: Instant, every: u64) -> bool {
        self.my_claims
            .retain(|_, at| now.saturating_duration_since(*at) < CLAIM_STALE);
        every > 0
            && self.caught_up
            && self.trusted
            && self.my_claims.is_empty()
            && !self.claim_open(now)
            && self.batches.saturating_sub(self.batches_at_cover) >= every
    }

    /// This process has produced claim `seq` at `now`.
    pub(crate) fn issued(&mut self, seq: u64, now: Instant) {
        self.my_claims.insert(seq, now);
    }

    fn claim_open(&self, now: Instant) -> bool {
        self.open_claim
            .as_ref()
            .is_some_and(|c| now.saturating_duration_since(c.touched) < CLAIM_STALE)
    }

    /// Reads the record at `offset` (its key and value, `None` for a tombstone) at `now`. An
    /// error is a record this replica cannot apply: the follower must stop there.
    pub(crate) fn apply(
        &mut self,
        offset: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        now: Instant,
    ) -> Result<Step, RecordProblem> {
        if offset < self.next_offset {
            // Already read (a fetch repeated after a reconnect).
            return Ok(Step::Nothing);
        }
        if offset > self.next_offset {
            self.distrust(self.next_offset, offset);
        }
        let step = self.read(offset, key, value, now)?;
        self.read += 1;
        if !matches!(step, Step::SeekTo(_)) {
            self.next_offset = offset + 1;
        }
        Ok(step)
    }

    fn distrust(&mut self, from: i64, to: i64) {
        self.gaps.push((from, to));
        if self.trusted {
            self.trusted = false;
            self.untrusted_from = from;
            self.gap_end = to;
            self.held.clear();
            self.held_from = from;
            self.gaps = vec![(from, to)];
            if self.caught_up {
                tracing::info!(
                    from,
                    to,
                    "records were removed from the configuration log (compaction) before this \
                     instance read them: what follows is applied provisionally until a snapshot \
                     claimed after them, or the log's end, says what they were"
                );
            }
        }
    }

    fn read(
        &mut self,
        offset: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        now: Instant,
    ) -> Result<Step, RecordProblem> {
        let key = key.map(|k| String::from_utf8_lossy(k).into_owned());
        let Some(value) = value else {
            return self.tombstone(key);
        };
        if let Some((claim, index)) = chunk_of(value).filter(|(c, _)| self.covered >= Some(*c)) {
            // A chunk of a snapshot this replica has (read again after it restored it), or of
            // an older one: its entries are not needed.
            let expected = chunk_key(claim, index);
            if key.as_deref() != Some(expected.as_str()) {
                return Err(RecordProblem::Key {
                    found: key,
                    expected,
                });
            }
            let live = self.live_key(&expected, true);
            self.live.insert(live, offset);
            return Ok(Step::Nothing);
        }
        let record = LogRecord::decode(value)?;
        let expected = record.key();
        if key.as_deref() != Some(expected.as_str()) {
            return Err(RecordProblem::Key {
                found: key,
                expected,
            });
        }
        let live = self.live_key(&expected, true);
        self.live.insert(live, offset);
        match record {
            LogRecord::Batch(b) => {
                self.batches += 1;
                if b.origin == self.me {
                    self.max_own_seq = Some(self.max_own_seq.map_or(b.seq, |m| m.max(b.seq)));
                }
                let results = self.engine.alter(&b.batch, b.validate_only);
                let step = Step::Batch {
                    origin: b.origin.clone(),
                    seq: b.seq,
                    results,
                    provisional: !self.trusted,
                };
                if !self.trusted {
                    self.held.push_back((offset, b));
                    if self.held.len() > self.held_max {
                        if let Some((o, _)) = self.held.pop_front() {
                            self.held_from = o + 1;
                        }
                    }
                }
                Ok(step)
            }
            LogRecord::Claim(c) => Ok(self.claim(offset, c, now)),
            LogRecord::Chunk(c) => self.chunk(c, now),
        }
    }

    /// The key as held in `live` (an origin seen for the first time is interned only if
    /// `intern`).
    fn live_key(&mut self, key: &str, intern: bool) -> LiveKey {
        let batch = key.rsplit_once('/').and_then(|(origin, seq)| {
            let digits = !seq.is_empty() && seq.bytes().all(|b| b.is_ascii_digit());
            digits.then(|| seq.parse::<u64>().ok().map(|s| (origin, s)))?
        });
        if let Some((origin, seq)) = batch {
            let id = match self.origin_ids.get(origin) {
                Some(id) => Some(*id),
                None if intern => {
                    let id = u32::try_from(self.origins.len()).unwrap_or(u32::MAX);
                    self.origins.push(origin.to_owned());
                    self.origin_ids.insert(origin.to_owned(), id);
                    Some(id)
                }
                None => None,
            };
            if let Some(id) = id {
                return LiveKey::Batch(id, seq);
            }
        }
        LiveKey::Other(key.into())
    }

    fn key_text(&self, key: &LiveKey) -> String {
        match key {
            LiveKey::Batch(id, seq) => format!("{}/{seq}", self.origins[*id as usize]),
            LiveKey::Other(k) => k.to_string(),
        }
    }

    fn tombstone(&mut self, key: Option<String>) -> Result<Step, RecordProblem> {
        let Some(text) = key else {
            return if self.trusted {
                Err(RecordProblem::Tombstone { key: None })
            } else {
                Ok(Step::Nothing)
            };
        };
        let live = self.live_key(&text, false);
        match self.live.get(&live).copied() {
            // A record this replica read, and no snapshot it read covers: compaction would
            // remove a record the configuration needs.
            Some(at) if self.trusted && self.covered.is_none_or(|c| c <= at) => {
                Err(RecordProblem::Tombstone { key: Some(text) })
            }
            Some(_) => {
                self.live.remove(&live);
                Ok(Step::Nothing)
            }
            // Never read: removed before this replica came (it is then not trusted, and the
            // snapshot it waits for covers it), tombstoned twice, or never written.
            None => Ok(Step::Nothing),
        }
    }

    fn claim(&mut self, offset: i64, claim: Claim, now: Instant) -> Step {
        let mine = claim.origin == self.me && self.my_claims.remove(&claim.seq).is_some();
        if self.claim_open(now) {
            // Another claim's snapshot is being written: this one lost.
            return Step::Nothing;
        }
        self.open_claim = Some(OpenClaim {
            offset,
            touched: now,
            batches_at: self.batches,
        });
        if !(self.trusted && self.caught_up) {
            return Step::Nothing;
        }
        // The state every record before the claim gives: what the winner writes, and what
        // this instance checks the snapshot against.
        let taken = snapshot::take(&self.engine);
        self.own.push_back((offset, taken.entities, taken.digest));
        while self.own.len() > OWN_DIGESTS {
            self.own.pop_front();
        }
        if !mine {
            return Step::Nothing;
        }
        let tombstones = self
            .live
            .iter()
            .filter(|(_, at)| **at < offset)
            .map(|(k, _)| self.key_text(k))
            .collect();
        Step::Write(SnapshotJob {
            claim: offset,
            entities: taken.entities,
            records: snapshot::records(offset, &self.me, &taken),
            tombstones,
        })
    }

    fn chunk(&mut self, chunk: Chunk, now: Instant) -> Result<Step, RecordProblem> {
        let claim = chunk.claim;
        if self.covered.is_some_and(|c| c >= claim) {
            // A snapshot this replica has, or an older one.
            return Ok(Step::Nothing);
        }
        if let Some(open) = self.open_claim.as_mut().filter(|c| c.offset == claim) {
            open.touched = now;
        }
        let (origin, entities, digest) = (chunk.origin.clone(), chunk.entities, chunk.digest);
        let assembly = self
            .assembling
            .entry(claim)
            .or_insert_with(|| Assembly::new(&chunk));
        if !assembly.fits(&chunk) {
            // Written again, differently: the later writing counts.
            *assembly = Assembly::new(&chunk);
        }
        let Some(whole) = assembly.add(chunk) else {
            return Ok(Step::Nothing);
        };
        // This one, and any older one still incomplete, are done with.
        self.assembling.retain(|c, _| *c > claim);
        let bad = |why: String| {
            RecordProblem::Snapshot(format!(
                "the snapshot {origin} took at offset {claim}: {why}"
            ))
        };
        let entries = whole.map_err(bad)?;
        let batches_at = match &self.open_claim {
            Some(open) if open.offset == claim => Some(open.batches_at),
            _ => None,
        };
        if self.open_claim.as_ref().is_some_and(|c| c.offset <= claim) {
            self.open_claim = None;
        }
        if self.trusted {
            if let Some(&(_, mine, my_digest)) = self.own.iter().find(|(c, ..)| *c == claim) {
                if (mine, my_digest) != (entities, digest) {
                    return Err(bad(format!(
                        "it holds {entities} entities of digest {digest:016x}, and this \
                         instance held {mine} entities of digest {my_digest:016x} there: the \
                         instances have parted (do they all run with the same sub-quota policy?)"
                    )));
                }
            }
            self.own.retain(|(c, ..)| *c > claim);
            self.covered = Some(claim);
            self.batches_at_cover = batches_at.unwrap_or(self.batches);
            return Ok(Step::Nothing);
        }
        if claim < self.gap_end {
            // Claimed before the records that first went missing were written: it covers none
            // of them, and a snapshot that does comes later.
            return Ok(Step::Nothing);
        }
        // What this replica held may not follow from the log: the snapshot is the state at its
        // claim, and the batches after the claim go on top of it.
        let restoring = Instant::now();
        snapshot::restore(&self.engine, entries).map_err(bad)?;
        tracing::info!(
            claim,
            entities,
            restore_ms = restoring.elapsed().as_millis() as u64,
            "the configuration is the snapshot {origin} took at offset {claim}; the batches after \
             it are applied again"
        );
        self.trusted = true;
        self.covered = Some(claim);
        self.batches = 0;
        self.batches_at_cover = 0;
        self.own.clear();
        if self.held_from > claim + 1 {
            // Some batches after the claim were not kept: read the log again from it.
            self.held.clear();
            self.gaps.clear();
            self.next_offset = claim + 1;
            return Ok(Step::SeekTo(claim + 1));
        }
        // Records missing after the claim too: what follows them is provisional again.
        let next_gap = self
            .gaps
            .iter()
            .filter(|(from, _)| *from > claim)
            .min()
            .copied();
        let held = std::mem::take(&mut self.held);
        self.gaps.retain(|(from, _)| *from > claim);
        if let Some((from, to)) = next_gap {
            self.trusted = false;
            self.untrusted_from = from;
            self.gap_end = to;
            self.held_from = from;
        }
        let mut again = Vec::new();
        for (offset, b) in held.into_iter().filter(|(o, _)| *o > claim) {
            self.batches += 1;
            let results = self.engine.alter(&b.batch, b.validate_only);
            let provisional = next_gap.is_some_and(|(from, _)| offset >= from);
            again.push(Reapplied {
                origin: b.origin.clone(),
                seq: b.seq,
                results,
                provisional,
            });
            if provisional {
                self.held.push_back((offset, b));
            }
        }
        Ok(Step::Restored(again))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::record::ConfigRecord;
    use kquota::{Alteration, Entity, EntityName, ListFilter, ListedEntity, SubQuotaPolicy};

    /// A record as the topic holds it: offset, key, value (`None`: a tombstone).
    type Rec = (i64, Option<String>, Option<Vec<u8>>);

    /// A tiny xorshift: the same histories every run, no dependency.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }

        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }

        fn chance(&mut self, percent: u64) -> bool {
            self.below(100) < percent
        }
    }

    fn n(s: &str) -> EntityName {
        EntityName::named(s).unwrap()
    }

    fn state(engine: &Engine) -> Vec<ListedEntity> {
        let mut l = engine.list(&ListFilter::all());
        l.sort_by(|a, b| a.entity.cmp(&b.entity));
        for e in &mut l {
            e.quotas.sort_by_key(|(k, _)| k.to_string());
        }
        l
    }

    /// A random alteration batch over a small pool of entities, so that later batches alter
    /// what earlier ones set, remove it, and break the sub-quota rules now and then.
    fn random_batch(rng: &mut Rng) -> Vec<Alteration> {
        let users = ["alice", "bob", "carol"];
        let clients = ["a", "b", "c"];
        let user = |rng: &mut Rng| {
            if rng.chance(20) {
                EntityName::Default
            } else {
                n(users[rng.below(3) as usize])
            }
        };
        let client = |rng: &mut Rng| {
            if rng.chance(20) {
                EntityName::Default
            } else {
                n(clients[rng.below(3) as usize])
            }
        };
        (0..1 + rng.below(3))
            .map(|_| {
                let entity = match rng.below(4) {
                    0 => Entity::User(user(rng)),
                    1 => Entity::UserClient(user(rng), client(rng)),
                    2 => Entity::ClientId(client(rng)),
                    _ => Entity::Ip(if rng.chance(50) {
                        EntityName::Default
                    } else {
                        n("10.0.0.1")
                    }),
                };
                let mut a = Alteration::new(&entity);
                if entity.is_ip() {
                    return if rng.chance(80) {
                        a.set("connection_creation_rate", (1 + rng.below(50)) as f64)
                    } else {
                        a.remove("connection_creation_rate")
                    };
                }
                for key in ["producer_byte_rate", "consumer_byte_rate:bps"] {
                    match rng.below(4) {
                        0 => {}
                        1 => a = a.remove(key),
                        // Now and then a value the engine refuses.
                        _ if rng.chance(5) => a = a.set(key, -1.0),
                        _ => a = a.set(key, (1 + rng.below(100)) as f64 * 1000.0),
                    }
                }
                a
            })
            .collect()
    }

    /// Instances following the log live, and the log they write to.
    struct Cluster {
        log: Vec<Rec>,
        live: Vec<(Replica, usize)>,
        /// Every batch, applied in log order to an engine of its own: what every instance must hold.
        reference: Engine,
        seqs: u64,
        now: Instant,
    }

    impl Cluster {
        fn new(ids: &[&str], policy: &[SubQuotaPolicy]) -> Cluster {
            let live = ids
                .iter()
                .zip(policy)
                .map(|(id, p)| {
                    let engine = Arc::new(Engine::builder().policy(*p).build().unwrap());
                    let mut r = Replica::new(engine, id);
                    r.set_caught_up();
                    (r, 0)
                })
                .collect();
            Cluster {
                log: Vec::new(),
                live,
                reference: Engine::new(),
                seqs: 1,
                now: Instant::now(),
            }
        }

        fn append(&mut self, key: String, value: Option<Vec<u8>>) {
            let offset = self.log.len() as i64;
            self.log.push((offset, Some(key), value));
        }

        fn batch(&mut self, origin: &str, batch: Vec<Alteration>) {
            self.seqs += 1;
            let _ = self.reference.alter(&batch, false);
            let r = ConfigRecord {
                origin: origin.to_owned(),
                seq: self.seqs,
                validate_only: false,
                batch,
            };
            self.append(r.key(), Some(r.encode()));
        }

        /// Every live instance reads what is new; the snapshot jobs that come out.
        fn follow(&mut self) -> Result<Vec<SnapshotJob>, RecordProblem> {
            let mut jobs = Vec::new();
            for (replica, at) in &mut self.live {
                while *at < self.log.len() {
                    let (o, k, v) = &self.log[*at];
                    match replica.apply(
                        *o,
                        k.as_deref().map(str::as_bytes),
                        v.as_deref(),
                        self.now,
                    )? {
                        Step::Write(job) => jobs.push(job),
                        Step::SeekTo(_) | Step::Restored(_) => {
                            panic!("a live instance lost track of the log")
                        }
                        _ => {}
                    }
                    *at += 1;
                }
            }
            Ok(jobs)
        }

        fn claim(&mut self, who: usize) {
            self.seqs += 1;
            let claim = Claim {
                origin: self.live[who].0.me.clone(),
                seq: self.seqs,
            };
            self.live[who].0.issued(claim.seq, self.now);
            self.append(claim.key(), Some(claim.encode()));
        }
    }

    /// The log as compaction leaves it once the cleaner has cleaned everything before `end`:
    /// a record is gone if a later record before `end` has its key; a tombstone before `end` is
    /// gone too if `drop_tombstones` (its retention passed).
    fn compact(log: &[Rec], end: i64, drop_tombstones: bool) -> Vec<Rec> {
        let mut last: HashMap<&str, i64> = HashMap::new();
        for (o, k, _) in log.iter().filter(|r| r.0 < end) {
            if let Some(k) = k {
                last.insert(k, *o);
            }
        }
        log.iter()
            .filter(|(o, k, v)| {
                if *o >= end {
                    return true;
                }
                let latest = k.as_deref().and_then(|k| last.get(k)) == Some(o);
                latest && !(v.is_none() && drop_tombstones)
            })
            .cloned()
            .collect()
    }

    /// How a replay went: snapshots restored with the batches after them kept, and with the
    /// log read again.
    #[derive(Debug, Default)]
    struct Restores {
        kept: usize,
        read_again: usize,
    }

    /// A fresh replica reading `log` from its start (reading again where a snapshot says),
    /// keeping at most `held` batches while not trusted.
    fn replay(
        log: &[Rec],
        engine: Arc<Engine>,
        held: usize,
        restores: &mut Restores,
    ) -> Result<Replica, RecordProblem> {
        let mut r = Replica::holding(engine, "fresh", held);
        read_from(&mut r, log, 0, restores)?;
        Ok(r)
    }

    fn read_from(
        r: &mut Replica,
        log: &[Rec],
        from: i64,
        restores: &mut Restores,
    ) -> Result<(), RecordProblem> {
        let now = Instant::now();
        let mut i = log.iter().position(|x| x.0 >= from).unwrap_or(log.len());
        while i < log.len() {
            let (o, k, v) = &log[i];
            match r.apply(*o, k.as_deref().map(str::as_bytes), v.as_deref(), now)? {
                Step::SeekTo(to) => {
                    restores.read_again += 1;
                    i = log.iter().position(|x| x.0 >= to).unwrap_or(log.len());
                    continue;
                }
                Step::Restored(_) => restores.kept += 1,
                _ => {}
            }
            i += 1;
        }
        // The log's end, as the consumer reports it.
        r.at_end();
        Ok(())
    }

    /// Replay from a snapshot gives the same engine state as replay of the history: random
    /// histories (batches from three instances, claims by any, snapshots written by the winner
    /// with batches interleaved, losing claims), compacted at random points with tombstones kept
    /// or dropped, read by a fresh instance from the start and by one that had read part of the
    /// log before compaction.
    #[test]
    fn replay_from_snapshots_gives_the_state_of_the_history() {
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        let mut snapshots_used = 0;
        let mut compacted_away = 0;
        let mut restores = Restores::default();
        for case in 0..24 {
            let ids = ["a", "b", "c"];
            let mut c = Cluster::new(&ids, &[SubQuotaPolicy::Kip55; 3]);
            let mut pending: Vec<(usize, SnapshotJob, usize)> = Vec::new();
            let mut early: Option<(Replica, i64)> = None;
            let steps = 100 + rng.below(250);
            for step in 0..steps {
                let origin = ids[rng.below(3) as usize];
                match rng.below(100) {
                    0..=4 => {
                        let who = rng.below(3) as usize;
                        c.claim(who);
                        // Sometimes a second instance claims at once: it loses.
                        if rng.chance(30) {
                            c.claim((who + 1) % 3);
                        }
                    }
                    _ => {
                        let b = random_batch(&mut rng);
                        c.batch(origin, b);
                    }
                }
                for job in c.follow().unwrap() {
                    // Written a little later: batches come in between.
                    pending.push((0, job, rng.below(5) as usize));
                }
                // Snapshot writers progress: the chunks, then (once all are in) the tombstones.
                let mut done = Vec::new();
                for (k, (stage, job, wait)) in pending.iter_mut().enumerate() {
                    if *wait > 0 {
                        *wait -= 1;
                        continue;
                    }
                    if *stage == 0 {
                        for (key, value) in std::mem::take(&mut job.records) {
                            c.log.push((c.log.len() as i64, Some(key), Some(value)));
                        }
                        *stage = 1;
                        *wait = rng.below(5) as usize;
                    } else {
                        for key in std::mem::take(&mut job.tombstones) {
                            c.log.push((c.log.len() as i64, Some(key), None));
                        }
                        done.push(k);
                    }
                }
                for k in done.into_iter().rev() {
                    pending.remove(k);
                }
                c.follow().unwrap();
                // An instance that read part of the log before it was compacted.
                if early.is_none() && step == steps / 2 {
                    let mut r = Replica::new(Arc::new(Engine::new()), "early");
                    read_from(&mut r, &c.log, 0, &mut restores).unwrap();
                    let at = r.next_offset();
                    early = Some((r, at));
                }
            }
            let full = c.log.clone();
            let want = state(&c.reference);
            for (r, _) in &c.live {
                assert_eq!(
                    state(&r.engine),
                    want,
                    "case {case}: live instance {}",
                    r.me
                );
            }
            // The history in full, and compacted at random points.
            let from_history = replay(&full, Arc::new(Engine::new()), HELD, &mut restores).unwrap();
            assert_eq!(
                state(&from_history.engine),
                want,
                "case {case}: the whole history"
            );
            for round in 0..4 {
                let end = rng.below(full.len() as u64 + 1) as i64;
                let log = compact(&full, end, rng.chance(50));
                compacted_away += full.len() - log.len();
                // Every fourth replay keeps at most two batches: the log is then read again.
                let held = if round == 3 { 2 } else { HELD };
                let r = replay(&log, Arc::new(Engine::new()), held, &mut restores)
                    .unwrap_or_else(|e| panic!("case {case} round {round} (end {end}): {e}"));
                if !r.trusted() {
                    for (o, k, v) in full.iter().filter(|r| r.0 > 110 && r.0 < 175) {
                        let kind = match v {
                            None => "TOMBSTONE".to_owned(),
                            Some(v) => String::from_utf8_lossy(&v[..v.len().min(60)]).into_owned(),
                        };
                        eprintln!("{o} {k:?} {kind}");
                    }
                }
                assert!(r.trusted(), "case {case} round {round} end {end}");
                assert_eq!(
                    state(&r.engine),
                    want,
                    "case {case} round {round} (end {end})"
                );
                if r.covered().is_some() && log.len() < full.len() {
                    snapshots_used += 1;
                }
                if round == 0 {
                    if let Some((mut e, at)) = early.take() {
                        read_from(&mut e, &log, at, &mut restores)
                            .unwrap_or_else(|p| panic!("case {case}: the early reader: {p}"));
                        assert!(e.trusted());
                        assert_eq!(state(&e.engine), want, "case {case}: the early reader");
                    }
                }
            }
        }
        // The histories did exercise the snapshots: compaction removed records and replicas
        // rebuilt from snapshots.
        println!(
            "{snapshots_used} replays of compacted logs used a snapshot; {compacted_away} records \
             compacted away in all; restores {restores:?}"
        );
        assert!(snapshots_used > 20, "{snapshots_used}");
        assert!(
            restores.kept > 20 && restores.read_again > 5,
            "{restores:?}"
        );
        assert!(compacted_away > 1_000, "{compacted_away}");
    }

    #[test]
    fn a_tombstone_no_snapshot_covers_stops_a_trusted_replica() {
        let mut c = Cluster::new(&["a"], &[SubQuotaPolicy::Kip55]);
        c.batch(
            "a",
            vec![Alteration::new(&Entity::User(n("u"))).set("producer_byte_rate", 5.0)],
        );
        c.follow().unwrap();
        let key = c.log[0].1.clone().unwrap();
        c.append(key.clone(), None);
        let e = c.follow().unwrap_err();
        assert_eq!(e, RecordProblem::Tombstone { key: Some(key) });
        // A tombstone for a key never written removes nothing: harmless.
        let mut c = Cluster::new(&["a"], &[SubQuotaPolicy::Kip55]);
        c.append("a/1".into(), None);
        c.follow().unwrap();
    }

    #[test]
    fn records_missing_with_no_snapshot_claimed_after_them_were_tombstones() {
        let mut c = Cluster::new(&["a"], &[SubQuotaPolicy::Kip55]);
        for i in 0..3 {
            c.batch(
                "a",
                vec![Alteration::new(&Entity::User(n(&format!("u{i}"))))
                    .set("producer_byte_rate", 5.0)],
            );
        }
        let now = Instant::now();
        let mut r = Replica::new(Arc::new(Engine::new()), "fresh");
        let (o, k, v) = &c.log[0];
        r.apply(*o, k.as_deref().map(str::as_bytes), v.as_deref(), now)
            .unwrap();
        // Offset 1 missing: provisional until the end of the log says what it was.
        let (o, k, v) = &c.log[2];
        let step = r
            .apply(*o, k.as_deref().map(str::as_bytes), v.as_deref(), now)
            .unwrap();
        assert!(
            matches!(
                step,
                Step::Batch {
                    provisional: true,
                    ..
                }
            ),
            "{step:?}"
        );
        assert!(!r.trusted());
        // No snapshot claimed after it: only a tombstone can have gone (a batch is removed only
        // after a snapshot claimed after it is complete, and the latest one stays).
        assert!(r.at_end());
        assert!(r.trusted());
        assert!(!r.at_end());
        assert_eq!(r.engine.entity_count(), 2);
    }

    #[test]
    fn instances_that_parted_are_caught_at_the_next_snapshot() {
        // b runs with the kafka policy: a batch the others refuse, it applies.
        let mut c = Cluster::new(&["a", "b"], &[SubQuotaPolicy::Kip55, SubQuotaPolicy::Kafka]);
        c.batch(
            "a",
            vec![Alteration::new(&Entity::User(n("u"))).set("producer_byte_rate", 10.0)],
        );
        c.batch(
            "b",
            vec![Alteration::new(&Entity::UserClient(n("u"), n("c")))
                .set("producer_byte_rate", 20.0)],
        );
        c.follow().unwrap();
        c.claim(0);
        let jobs = c.follow().unwrap();
        assert_eq!(jobs.len(), 1);
        for (key, value) in &jobs[0].records {
            c.append(key.clone(), Some(value.clone()));
        }
        // a reads its own snapshot and agrees; b finds it holds another state.
        let (b, at) = &mut c.live[1];
        let mut failure = None;
        while *at < c.log.len() {
            let (o, k, v) = &c.log[*at];
            if let Err(e) = b.apply(*o, k.as_deref().map(str::as_bytes), v.as_deref(), c.now) {
                failure = Some(e);
                break;
            }
            *at += 1;
        }
        let failure = failure.expect("b did not notice");
        assert!(
            matches!(&failure, RecordProblem::Snapshot(why) if why.contains("have parted")),
            "{failure}"
        );
        let (a, at) = &mut c.live[0];
        while *at < c.log.len() {
            let (o, k, v) = &c.log[*at];
            a.apply(*o, k.as_deref().map(str::as_bytes), v.as_deref(), c.now)
                .unwrap();
            *at += 1;
        }
        assert_eq!(a.covered(), Some(2));
    }

    #[test]
    fn the_first_claim_wins_and_a_stale_one_gives_way() {
        let mut c = Cluster::new(&["a", "b"], &[SubQuotaPolicy::Kip55; 2]);
        c.batch(
            "a",
            vec![Alteration::new(&Entity::User(n("u"))).set("producer_byte_rate", 10.0)],
        );
        c.claim(1);
        c.claim(0);
        let jobs = c.follow().unwrap();
        // b's claim came first: only b writes.
        assert_eq!(jobs.len(), 1);
        assert_eq!(jobs[0].claim, 1);
        assert!(jobs[0].records[0]
            .1
            .windows(12)
            .any(|w| w == b"\"origin\":\"b\""));
        assert_eq!(jobs[0].tombstones, vec!["a/2".to_owned()]);
        // b never writes it; past CLAIM_STALE another claim wins.
        c.now += CLAIM_STALE;
        assert!(c.live[0].0.claim_due(c.now, 1));
        c.claim(0);
        let jobs = c.follow().unwrap();
        assert_eq!(jobs.len(), 1);
        assert_eq!(jobs[0].claim, 3);
    }
}
