//! The per-thread resolution cache behind [`crate::Engine::resolve`].
//!
//! A broker resolves for the connections it has open, over and over: the same few thousand
//! (user, client-id) pairs, whatever the number of configured entities. Resolving one from the
//! snapshot follows three hash-table probes into a store that, at a million entities, is spread over
//! a few hundred megabytes, so each probe waits on cache and TLB misses. This cache keeps each
//! thread's recent answers in one compact table instead: a hit hashes the two names, reads one
//! 32-byte line of tags and one 160-byte slot, compares the names and copies the answer out.
//!
//! Every slot is stamped with its engine and with the generation of the snapshot its answer was
//! computed from, and a lookup asks for the engine's *announced* generation: an engine raises it just
//! before publishing a snapshot (and its public [`crate::Engine::generation`] just after). So:
//!
//! - all answers under one stamp come from one snapshot, never a mix of two;
//! - a thread that has seen a snapshot, through any answer, reads at least its generation afterwards,
//!   so it never again gets an older snapshot's cached answer: answers do not go backwards;
//! - once `alter` has returned, every lookup asks for that commit's generation or a later one.
//!
//! A miss in the short time between the announcement and the publication computes from the previous
//! snapshot and files the answer under that snapshot's generation, where nobody will ask for it: the
//! next lookup misses again. A commit makes every cached answer stale at once, with no work and no
//! coordination.
//!
//! Each thread allocates its table (4,096 slots, 752 KiB) on its first cached resolve. Names of up to
//! [`INLINE_BYTES`] together live in the slot; longer pairs (mTLS principals are often long) keep
//! theirs in a buffer beside the slot, which grows only when the slot meets a longer pair than
//! before, so in a steady state a resolve allocates nothing. Pairs longer than [`NAME_BYTES`] are
//! not cached, which bounds those buffers to 2 MiB per thread.

use std::cell::RefCell;
use std::hash::{BuildHasher, Hash, Hasher as _};

use crate::resolve::Resolved;

/// Ways per bucket. Eight ways keep collisions among a working set of a thousand pairs to about one
/// in a thousand.
const WAYS: usize = 8;
/// Buckets per thread (a power of two): 4,096 slots in all.
const BUCKETS: usize = 512;
/// The longest user name plus client-id a slot holds inline; longer pairs use its side buffer.
const INLINE_BYTES: usize = 60;
/// The longest user name plus client-id cached at all; longer pairs resolve from the snapshot.
const NAME_BYTES: usize = 512;

/// One cached answer.
#[derive(Clone, Copy)]
struct Slot {
    /// The engine the answer came from (see [`crate::Engine`]'s `id`), 0 for an empty slot.
    engine: u64,
    /// The generation of the snapshot the answer was computed from.
    generation: u64,
    user_len: u16,
    client_len: u16,
    /// The user name followed by the client-id, if they fit; else they are in the side buffer.
    names: [u8; INLINE_BYTES],
    resolved: Resolved,
}

impl Slot {
    const EMPTY: Slot = Slot {
        engine: 0,
        generation: 0,
        user_len: 0,
        client_len: 0,
        names: [0; INLINE_BYTES],
        resolved: Resolved::EMPTY,
    };

    /// Whether the slot holds the answer for these names at this engine and generation; `long` is the
    /// slot's side buffer.
    #[inline]
    fn answers(
        &self,
        long: &[u8],
        engine: u64,
        generation: u64,
        user: &[u8],
        client: &[u8],
    ) -> bool {
        let (u, c) = (usize::from(self.user_len), usize::from(self.client_len));
        if self.engine != engine
            || self.generation != generation
            || u != user.len()
            || c != client.len()
        {
            return false;
        }
        if u + c <= INLINE_BYTES {
            self.names[..u] == *user && self.names[u..u + c] == *client
        } else {
            long.len() == u + c && long[..u] == *user && long[u..] == *client
        }
    }
}

/// A bucket's tags: part of each way's hash, 0 for an empty way. Aligned so that they never straddle
/// two cache lines.
#[derive(Clone, Copy)]
#[repr(align(32))]
struct Tags([u32; WAYS]);

/// A thread's table: per bucket, its tags, its slots and the slots' side buffers.
struct Table {
    hasher: foldhash::fast::RandomState,
    tags: Box<[Tags]>,
    slots: Box<[[Slot; WAYS]]>,
    /// The names of pairs longer than [`INLINE_BYTES`], per slot; kept apart so that the slots of
    /// short pairs stay small.
    long: Box<[[Vec<u8>; WAYS]]>,
    /// The way the next eviction replaces, rotating, so that no pair in an overfull bucket is
    /// always the one evicted.
    victim: usize,
}

impl Table {
    fn new() -> Box<Table> {
        Box::new(Table {
            hasher: foldhash::fast::RandomState::default(),
            tags: vec![Tags([0; WAYS]); BUCKETS].into_boxed_slice(),
            slots: vec![[Slot::EMPTY; WAYS]; BUCKETS].into_boxed_slice(),
            long: vec![std::array::from_fn(|_| Vec::new()); BUCKETS].into_boxed_slice(),
            victim: 0,
        })
    }

    /// Writes the answer for `(user, client)` at `generation` to `out`: the cached one, or `resolve`'s,
    /// which is then cached under the generation `resolve` reports. (An out-parameter, so that the
    /// 80-byte answer is copied once.)
    #[inline]
    fn lookup(
        &mut self,
        out: &mut Resolved,
        engine: u64,
        generation: u64,
        user: &str,
        client: &str,
        resolve: impl FnOnce() -> (Resolved, u64),
    ) {
        let mut h = self.hasher.build_hasher();
        engine.hash(&mut h);
        user.hash(&mut h);
        client.hash(&mut h);
        let hash = h.finish();
        let bucket = hash as usize & (BUCKETS - 1);
        let tag = ((hash >> 32) as u32).max(1);
        let (user_bytes, client_bytes) = (user.as_bytes(), client.as_bytes());
        let tags = &mut self.tags[bucket].0;
        let slots = &mut self.slots[bucket];
        let long = &mut self.long[bucket];
        let mut empty = None;
        let mut same_key = None;
        for way in 0..WAYS {
            if tags[way] == tag {
                let slot = &slots[way];
                if slot.answers(&long[way], engine, generation, user_bytes, client_bytes) {
                    *out = slot.resolved;
                    return;
                }
                // Most likely the same pair from an older generation: replace it in place.
                same_key = Some(way);
            } else if tags[way] == 0 && empty.is_none() {
                empty = Some(way);
            }
        }
        let way = same_key.or(empty).unwrap_or_else(|| {
            self.victim = (self.victim + 1) % WAYS;
            self.victim
        });
        let (u, c) = (user_bytes.len(), client_bytes.len());
        let slot = &mut slots[way];
        let (resolved, computed_at) = resolve();
        slot.resolved = resolved;
        slot.engine = engine;
        slot.generation = computed_at;
        // Both fit in `u16`: the caller checked the total against `NAME_BYTES`.
        slot.user_len = u as u16;
        slot.client_len = c as u16;
        if u + c <= INLINE_BYTES {
            slot.names[..u].copy_from_slice(user_bytes);
            slot.names[u..u + c].copy_from_slice(client_bytes);
        } else {
            let buffer = &mut long[way];
            buffer.clear();
            buffer.extend_from_slice(user_bytes);
            buffer.extend_from_slice(client_bytes);
        }
        tags[way] = tag;
        *out = slot.resolved;
    }
}

thread_local! {
    static TABLE: RefCell<Option<Box<Table>>> = const { RefCell::new(None) };
}

/// The answer for `(user, client)` of engine `engine` at its announced generation `generation`: from
/// this thread's cache, or from `resolve`, which loads the snapshot (only now, after `generation` was
/// read) and returns its answer and that snapshot's generation.
#[inline]
pub(crate) fn resolve(
    engine: u64,
    generation: u64,
    user: &str,
    client: &str,
    resolve: impl FnOnce() -> (Resolved, u64),
) -> Resolved {
    if user.len() + client.len() > NAME_BYTES {
        return resolve().0;
    }
    let mut out = Resolved::EMPTY;
    let mut resolve = Some(resolve);
    let _ = TABLE.try_with(|table| {
        // Nothing inside can call back into the cache, but a failed borrow is still no reason to fail.
        if let Ok(mut table) = table.try_borrow_mut() {
            let table = table.get_or_insert_with(Table::new);
            let resolve = resolve.take().expect("not called yet");
            table.lookup(&mut out, engine, generation, user, client, resolve);
        }
    });
    match resolve {
        // The thread is shutting down (its table is gone) or the table is busy: skip the cache.
        Some(resolve) => resolve().0,
        None => out,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::QuotaKey;
    use std::cell::Cell;

    /// A distinct answer per `n`: the producer limit is `n`.
    fn answer(n: u32) -> Resolved {
        let mut r = Resolved::EMPTY;
        r.set(
            QuotaKey::PRODUCER_BPS,
            f64::from(n),
            crate::Level::UserClient,
        );
        r
    }

    fn limit(r: &Resolved) -> f64 {
        r.get(QuotaKey::PRODUCER_BPS).expect("set").limit
    }

    /// Looks `(u, c)` up at `generation`; on a miss, answers `n` as computed at `generation`.
    fn get(
        t: &mut Table,
        calls: &Cell<u32>,
        engine: u64,
        generation: u64,
        u: &str,
        c: &str,
        n: u32,
    ) -> f64 {
        let mut out = Resolved::EMPTY;
        t.lookup(&mut out, engine, generation, u, c, || {
            calls.set(calls.get() + 1);
            (answer(n), generation)
        });
        limit(&out)
    }

    #[test]
    fn hits_only_for_the_same_engine_generation_and_names() {
        let mut t = Table::new();
        let calls = Cell::new(0);
        let t = &mut t;
        assert_eq!(get(t, &calls, 1, 0, "alice", "app", 1), 1.0);
        assert_eq!(get(t, &calls, 1, 0, "alice", "app", 2), 1.0, "cached");
        assert_eq!(
            get(t, &calls, 1, 1, "alice", "app", 3),
            3.0,
            "new generation"
        );
        assert_eq!(get(t, &calls, 1, 1, "alice", "app", 4), 3.0);
        assert_eq!(get(t, &calls, 2, 1, "alice", "app", 5), 5.0, "other engine");
        assert_eq!(get(t, &calls, 1, 1, "alic", "eapp", 6), 6.0);
        assert_eq!(get(t, &calls, 1, 1, "", "aliceapp", 7), 7.0);
        assert_eq!(get(t, &calls, 1, 1, "aliceapp", "", 8), 8.0);
        assert_eq!(get(t, &calls, 1, 1, "alice", "app", 9), 3.0);
        assert_eq!(calls.get(), 6);
    }

    /// The slot check itself, apart from the hash (which in the test above mostly sends different
    /// keys to different buckets anyway), for names inline and in the side buffer.
    #[test]
    fn a_slot_answers_only_its_own_engine_generation_and_names() {
        let mut inline = Slot::EMPTY;
        inline.engine = 4;
        inline.generation = 9;
        inline.user_len = 5;
        inline.client_len = 3;
        inline.names[..8].copy_from_slice(b"aliceapp");
        let user = "u".repeat(50);
        let client = "c".repeat(20);
        let mut long = inline;
        long.user_len = 50;
        long.client_len = 20;
        let buffer = format!("{user}{client}").into_bytes();
        /// A slot, its side buffer, and the user name and client-id it holds.
        type Case<'a> = (&'a Slot, &'a [u8], &'a [u8], &'a [u8]);
        let cases: [Case<'_>; 2] = [
            (&inline, b"", b"alice", b"app"),
            (&long, &buffer, user.as_bytes(), client.as_bytes()),
        ];
        for (slot, buffer, u, c) in cases {
            assert!(slot.answers(buffer, 4, 9, u, c));
            assert!(!slot.answers(buffer, 5, 9, u, c), "other engine");
            assert!(!slot.answers(buffer, 4, 8, u, c), "other generation");
            let joined = [u, c].concat();
            let (u2, c2) = joined.split_at(u.len() - 1);
            assert!(
                !slot.answers(buffer, 4, 9, u2, c2),
                "same bytes, split elsewhere"
            );
            assert!(!slot.answers(buffer, 4, 9, &joined, b""));
            let mut other = c.to_vec();
            *other.last_mut().expect("non-empty") ^= 1;
            assert!(!slot.answers(buffer, 4, 9, u, &other), "one byte differs");
        }
        assert!(
            !long.answers(b"", 4, 9, user.as_bytes(), client.as_bytes()),
            "buffer missing"
        );
        assert!(
            !Slot::EMPTY.answers(b"", 1, 0, b"", b""),
            "an empty slot answers no engine"
        );
    }

    /// An answer computed from an older snapshot than the one asked for is filed under the older
    /// generation: nobody asking for the newer one gets it.
    #[test]
    fn answers_are_filed_under_the_snapshot_they_came_from() {
        let mut t = Table::new();
        let mut out = Resolved::EMPTY;
        t.lookup(&mut out, 1, 5, "u", "c", || (answer(4), 4));
        assert_eq!(limit(&out), 4.0, "the older snapshot's answer, returned");
        t.lookup(&mut out, 1, 5, "u", "c", || (answer(5), 5));
        assert_eq!(limit(&out), 5.0, "not answered from generation 4's slot");
        t.lookup(&mut out, 1, 5, "u", "c", || unreachable!("cached at 5 now"));
        assert_eq!(limit(&out), 5.0);
    }

    #[test]
    fn a_working_set_of_a_thousand_pairs_stays_cached() {
        let mut t = Table::new();
        let pairs: Vec<(String, String)> = (0..1_000)
            .map(|i| (format!("user-{i}"), format!("client-{i}")))
            .collect();
        let misses = Cell::new(0);
        for round in 0..3 {
            for (i, (u, c)) in pairs.iter().enumerate() {
                let got = get(&mut t, &misses, 7, 0, u, c, i as u32);
                assert_eq!(got, i as f64, "round {round}, pair {i}");
            }
        }
        // The first round fills the table; later rounds miss only in buckets holding more than
        // `WAYS` of the pairs, which a thousand pairs in 512 buckets almost never produce.
        let misses = misses.get();
        assert!((1_000..1_100).contains(&misses), "{misses} misses");
    }

    /// A snapshot stand-in that answers `n` at generation 0 and counts its calls.
    fn counting(calls: &Cell<u32>, n: u32) -> impl Fn() -> (Resolved, u64) + Copy + '_ {
        move || {
            calls.set(calls.get() + 1);
            (answer(n), 0)
        }
    }

    #[test]
    fn long_pairs_are_cached_beside_the_slot_up_to_the_limit() {
        let calls = Cell::new(0);
        let count = counting(&calls, 1);
        let mut t = Table::new();
        let dn = "CN=service-a.prod.example.com,OU=payments,O=Example Corp,C=US";
        for _ in 0..2 {
            let mut out = Resolved::EMPTY;
            t.lookup(&mut out, 3, 0, dn, "payments-consumer-7", count);
        }
        assert_eq!(calls.get(), 1, "a long pair is cached");
        let mut out = Resolved::EMPTY;
        t.lookup(&mut out, 3, 0, dn, "payments-consumer-8", count);
        assert_eq!(calls.get(), 2, "another client-id is another pair");

        let over = "x".repeat(NAME_BYTES);
        resolve(3, 0, &over, "c", count);
        resolve(3, 0, &over, "c", count);
        assert_eq!(calls.get(), 4, "over the limit: never cached");
        let fits = "x".repeat(NAME_BYTES - 1);
        resolve(3, 0, &fits, "c", count);
        resolve(3, 0, &fits, "c", count);
        assert_eq!(calls.get(), 5);
    }

    /// While the thread's table is borrowed (which the engine never does), resolving skips the cache
    /// rather than failing.
    #[test]
    fn a_busy_table_is_skipped() {
        let calls = Cell::new(0);
        let count = counting(&calls, 2);
        resolve(6, 0, "u", "c", count);
        TABLE.with(|table| {
            let _busy = table.borrow_mut();
            assert_eq!(limit(&resolve(6, 0, "u", "c", count)), 2.0);
        });
        assert_eq!(calls.get(), 2);
        resolve(6, 0, "u", "c", count);
        assert_eq!(calls.get(), 2, "cached again once the table is free");
    }

    #[test]
    fn a_thread_table_is_as_large_as_documented() {
        assert_eq!(std::mem::size_of::<Slot>(), 160);
        let per_slot = std::mem::size_of::<Slot>() + 4 + std::mem::size_of::<Vec<u8>>();
        assert_eq!(BUCKETS * WAYS * per_slot / 1024, 752);
    }
}
