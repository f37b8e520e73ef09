//! The per-thread resolution cache behind [`crate::Engine::resolve`].
//!
//! A broker resolves for the connections it has open, over and over: the same few thousand
//! (user, client-id) pairs, whatever the number of configured entities. Resolving one from the
//! snapshot follows three hash-table probes into a store that, at a million entities, is spread over
//! a few hundred megabytes, so each probe waits on cache and TLB misses. This cache keeps each
//! thread's recent answers in one compact table instead: a hit hashes the two names, reads one tag
//! line and one slot, compares the names and copies the answer out.
//!
//! Every slot is stamped with the engine it came from and that engine's generation (its commit
//! count), and a slot answers only when both still match. A commit therefore invalidates every cached
//! answer at once, with no work and no coordination: the next resolve of each pair simply misses.
//! The generation is read before the snapshot is loaded, and an engine bumps it only after it has
//! published the new snapshot, so an answer is never stamped with a generation newer than the
//! snapshot it was computed from.
//!
//! Each thread allocates its table (4,096 slots of 160 bytes, 656 KiB) on its first cached resolve;
//! after that a resolve allocates nothing. Pairs whose names together exceed [`NAME_BYTES`] are not
//! cached.

use std::cell::RefCell;
use std::hash::{BuildHasher, Hash, Hasher as _};

use crate::resolve::Resolved;

/// Ways per bucket. Eight ways keep collisions among a working set of a thousand pairs to about one
/// in a thousand.
const WAYS: usize = 8;
/// Buckets per thread (a power of two): 4,096 slots in all.
const BUCKETS: usize = 512;
/// The longest user name plus client-id a slot holds; longer pairs resolve from the snapshot.
pub(crate) const NAME_BYTES: usize = 62;

/// One cached answer.
#[derive(Clone, Copy)]
struct Slot {
    /// The engine the answer came from (see [`crate::Engine`]'s `id`), 0 for an empty slot.
    engine: u64,
    /// That engine's generation when the answer was computed.
    generation: u64,
    user_len: u8,
    client_len: u8,
    /// The user name followed by the client-id.
    names: [u8; NAME_BYTES],
    resolved: Resolved,
}

impl Slot {
    const EMPTY: Slot = Slot {
        engine: 0,
        generation: 0,
        user_len: 0,
        client_len: 0,
        names: [0; NAME_BYTES],
        resolved: Resolved::EMPTY,
    };

    #[inline]
    fn answers(&self, engine: u64, generation: u64, user: &[u8], client: &[u8]) -> bool {
        let u = usize::from(self.user_len);
        self.engine == engine
            && self.generation == generation
            && u == user.len()
            && usize::from(self.client_len) == client.len()
            && self.names[..u] == *user
            && self.names[u..u + client.len()] == *client
    }
}

/// A thread's table: per bucket, a line of tags (part of each slot's hash; 0 is an empty way) and the
/// slots themselves.
struct Table {
    hasher: foldhash::fast::RandomState,
    tags: Box<[[u32; WAYS]]>,
    slots: Box<[[Slot; WAYS]]>,
    /// The way the next eviction replaces, rotating, so that no pair in an overfull bucket is
    /// always the one evicted.
    victim: usize,
}

impl Table {
    fn new() -> Box<Table> {
        Box::new(Table {
            hasher: foldhash::fast::RandomState::default(),
            tags: vec![[0; WAYS]; BUCKETS].into_boxed_slice(),
            slots: vec![[Slot::EMPTY; WAYS]; BUCKETS].into_boxed_slice(),
            victim: 0,
        })
    }

    /// Writes the answer for `(user, client)` to `out`: the cached one, or `resolve`'s, which is then
    /// cached. (An out-parameter, so that the 80-byte answer is copied once.)
    #[inline]
    fn lookup(
        &mut self,
        out: &mut Resolved,
        engine: u64,
        generation: u64,
        user: &str,
        client: &str,
        resolve: impl FnOnce() -> Resolved,
    ) {
        let mut h = self.hasher.build_hasher();
        engine.hash(&mut h);
        user.hash(&mut h);
        client.hash(&mut h);
        let hash = h.finish();
        let bucket = hash as usize & (BUCKETS - 1);
        let tag = ((hash >> 32) as u32).max(1);
        let (user_bytes, client_bytes) = (user.as_bytes(), client.as_bytes());
        let tags = &mut self.tags[bucket];
        let slots = &mut self.slots[bucket];
        let mut empty = None;
        let mut same_key = None;
        for way in 0..WAYS {
            if tags[way] == tag {
                let slot = &slots[way];
                if slot.answers(engine, generation, user_bytes, client_bytes) {
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
        let u = user_bytes.len();
        let slot = &mut slots[way];
        slot.resolved = resolve();
        slot.engine = engine;
        slot.generation = generation;
        // Both fit: the caller checked the total against `NAME_BYTES`.
        slot.user_len = u as u8;
        slot.client_len = client_bytes.len() as u8;
        slot.names[..u].copy_from_slice(user_bytes);
        slot.names[u..u + client_bytes.len()].copy_from_slice(client_bytes);
        tags[way] = tag;
        *out = slot.resolved;
    }
}

thread_local! {
    static TABLE: RefCell<Option<Box<Table>>> = const { RefCell::new(None) };
}

/// The answer for `(user, client)` of engine `engine` at `generation`: from this thread's cache, or
/// from `resolve` (which must load the snapshot only now, after `generation` was read), then cached.
#[inline]
pub(crate) fn resolve(
    engine: u64,
    generation: u64,
    user: &str,
    client: &str,
    resolve: impl FnOnce() -> Resolved,
) -> Resolved {
    if user.len() + client.len() > NAME_BYTES {
        return resolve();
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
        Some(resolve) => resolve(),
        None => out,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::QuotaKey;

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

    #[test]
    fn hits_only_for_the_same_engine_generation_and_names() {
        let mut t = Table::new();
        let calls = std::cell::Cell::new(0);
        let get = |t: &mut Table, engine, generation, u: &str, c: &str, n| {
            let mut out = Resolved::EMPTY;
            t.lookup(&mut out, engine, generation, u, c, || {
                calls.set(calls.get() + 1);
                answer(n)
            });
            limit(&out)
        };
        assert_eq!(get(&mut t, 1, 0, "alice", "app", 1), 1.0);
        assert_eq!(get(&mut t, 1, 0, "alice", "app", 2), 1.0, "cached");
        assert_eq!(get(&mut t, 1, 1, "alice", "app", 3), 3.0, "new generation");
        assert_eq!(get(&mut t, 1, 1, "alice", "app", 4), 3.0);
        assert_eq!(get(&mut t, 2, 1, "alice", "app", 5), 5.0, "other engine");
        // Where the user name ends matters, not just the concatenation.
        assert_eq!(get(&mut t, 1, 1, "alic", "eapp", 6), 6.0);
        assert_eq!(get(&mut t, 1, 1, "", "aliceapp", 7), 7.0);
        assert_eq!(get(&mut t, 1, 1, "aliceapp", "", 8), 8.0);
        assert_eq!(get(&mut t, 1, 1, "alice", "app", 9), 3.0);
        assert_eq!(calls.get(), 6);
    }

    #[test]
    fn a_working_set_of_a_thousand_pairs_stays_cached() {
        let mut t = Table::new();
        let pairs: Vec<(String, String)> = (0..1_000)
            .map(|i| (format!("user-{i}"), format!("client-{i}")))
            .collect();
        let mut misses = 0;
        for round in 0..3 {
            for (i, (u, c)) in pairs.iter().enumerate() {
                let mut out = Resolved::EMPTY;
                t.lookup(&mut out, 7, 0, u, c, || {
                    misses += 1;
                    answer(i as u32)
                });
                assert_eq!(limit(&out), i as f64, "round {round}, pair {i}");
            }
        }
        // The first round fills the table; later rounds miss only in buckets holding more than
        // `WAYS` of the pairs, which a thousand pairs in 512 buckets almost never produce.
        assert!((1_000..1_100).contains(&misses), "{misses} misses");
    }

    #[test]
    fn long_names_bypass_the_cache() {
        let long = "x".repeat(NAME_BYTES);
        let mut calls = 0;
        for _ in 0..2 {
            resolve(3, 0, &long, "c", || {
                calls += 1;
                answer(1)
            });
        }
        assert_eq!(calls, 2);
        let fits = "x".repeat(NAME_BYTES - 1);
        for _ in 0..2 {
            resolve(3, 0, &fits, "c", || {
                calls += 1;
                answer(1)
            });
        }
        assert_eq!(calls, 3);
    }

    #[test]
    fn a_thread_table_is_as_large_as_documented() {
        assert_eq!(std::mem::size_of::<Slot>(), 160);
        let bytes = BUCKETS * WAYS * (std::mem::size_of::<Slot>() + 4);
        assert_eq!(bytes / 1024, 656);
    }
}
