//! Flat persistent hash tables: the lookup structure of every snapshot.
//!
//! A [`Table`] is a directory of shards. A shard holds a few dozen entries in a dense vector plus a
//! 64-slot open-addressing index of one-byte positions and one-byte hash tags. A lookup reads the
//! directory (small and hot), one index line and one entry, so it costs about two cache misses however
//! many entries the table holds.
//!
//! Shards are shared between snapshots behind `Arc`s. A writer copies only the shards it touches
//! (entries are plain data: inline names and inline values, so a copy is mostly a `memcpy`) and the
//! directory chunks that point to them, so an alteration costs what it changes.
//!
//! The table grows by linear hashing: whenever the average shard would outgrow [`SPLIT_AVG`], the
//! next shard in turn splits in two on the next hash bit. Growth is one shard's copy per split, never
//! a copy of the whole table, so building a large store neither pauses for a doubling nor leaves a
//! table's worth of freed memory behind in the heap.

use std::sync::Arc;

/// Index slots per shard (a power of two).
const SLOTS: usize = 64;
/// A shard splits whenever the table holds more than this many entries per shard on average. Shards
/// not yet split in the current round hold up to twice the average.
const SPLIT_AVG: usize = 16;
/// A shard with more entries than this (which at up to twice [`SPLIT_AVG`] needs a 1-in-10^5
/// imbalance) is searched linearly instead of through its index, so the index never fills.
const INDEXED_MAX: usize = 56;

#[derive(Clone, Debug)]
struct Entry<K, V> {
    hash: u64,
    key: K,
    value: V,
}

/// Up to [`INDEXED_MAX`] entries (more only in pathological cases) and their index.
#[derive(Clone, Debug)]
struct Shard<K, V> {
    /// `0` is empty; otherwise `tag << 8 | (position + 1)`.
    index: [u16; SLOTS],
    entries: Vec<Entry<K, V>>,
}

#[inline]
fn home(hash: u64) -> usize {
    (hash >> 32) as usize
}

#[inline]
fn tag(hash: u64) -> u16 {
    (hash >> 56) as u16
}

impl<K, V> Shard<K, V> {
    fn new() -> Self {
        Shard {
            index: [0; SLOTS],
            entries: Vec::new(),
        }
    }

    /// The position of the entry with `hash` whose key satisfies `eq`.
    #[inline]
    fn find(&self, hash: u64, eq: impl Fn(&K) -> bool) -> Option<usize> {
        if self.entries.len() > INDEXED_MAX {
            return self
                .entries
                .iter()
                .position(|e| e.hash == hash && eq(&e.key));
        }
        let tag = tag(hash);
        let mut i = home(hash);
        loop {
            let slot = self.index[i % SLOTS];
            if slot == 0 {
                return None;
            }
            if slot >> 8 == tag {
                let p = usize::from(slot & 0xff) - 1;
                let e = &self.entries[p];
                if e.hash == hash && eq(&e.key) {
                    return Some(p);
                }
            }
            i += 1;
        }
    }

    /// Indexes the entry at `position` (which must not be indexed yet).
    fn index_one(&mut self, position: usize) {
        let hash = self.entries[position].hash;
        let mut i = home(hash);
        while self.index[i % SLOTS] != 0 {
            i += 1;
        }
        // `position < INDEXED_MAX < 255`, so it fits the low byte.
        self.index[i % SLOTS] = tag(hash) << 8 | (position as u16 + 1);
    }

    fn rebuild_index(&mut self) {
        self.index = [0; SLOTS];
        if self.entries.len() <= INDEXED_MAX {
            for p in 0..self.entries.len() {
                self.index_one(p);
            }
        }
    }

    fn push(&mut self, entry: Entry<K, V>) {
        // Exact capacity: shards are small and copied often, so slack would cost memory everywhere.
        self.entries.reserve_exact(1);
        self.entries.push(entry);
        let n = self.entries.len();
        if n <= INDEXED_MAX {
            self.index_one(n - 1);
        }
    }

    fn remove_at(&mut self, position: usize) -> Entry<K, V> {
        let entry = self.entries.swap_remove(position);
        self.entries.shrink_to_fit();
        self.rebuild_index();
        entry
    }
}

/// Shard pointers per directory chunk. A write copies its shard's chunk, so a small chunk keeps a
/// random batch cheap at a million entries (where every write lands in a different chunk); the list
/// of chunks, copied once per batch, grows as the chunks shrink. 16 gave 1,000-entity batches at 1M
/// 1.1–2.8× the 10K cost, against 2.4–3.0× with 64 and worse with 8.
const CHUNK: usize = 16;

/// A fixed run of the directory, shared between snapshots like the shards it points to.
type Chunk<K, V> = [Arc<Shard<K, V>>; CHUNK];

/// A persistent hash table keyed by precomputed 64-bit hashes. Cloning is one reference-count
/// increment; the clone and the original then share every shard until one of them writes.
///
/// The directory is two-level (chunks of [`CHUNK`] shard pointers), so a write copies one chunk and
/// the short list of chunks rather than every shard pointer: a one-entry alteration of a million-entry
/// table copies about four thousand pointers (the chunk list and one chunk), not 65,536.
#[derive(Clone, Debug)]
pub(crate) struct Table<K, V> {
    dir: Arc<Vec<Arc<Chunk<K, V>>>>,
    /// The shard count at the start of the current round of splits, a power of two.
    round: usize,
    /// Shards `0..split` of this round have split (into `i` and `i + round`).
    split: usize,
    len: usize,
}

impl<K: Clone, V: Clone> Default for Table<K, V> {
    fn default() -> Self {
        Table::with_capacity(0)
    }
}

/// A directory chunk of empty shards (one shared empty shard).
fn empty_chunk<K, V>() -> Arc<Chunk<K, V>> {
    let empty = Arc::new(Shard::new());
    Arc::new(std::array::from_fn(|_| Arc::clone(&empty)))
}

impl<K: Clone, V: Clone> Table<K, V> {
    /// An empty table sized for `n` entries without doubling.
    pub(crate) fn with_capacity(n: usize) -> Self {
        let round = n.div_ceil(SPLIT_AVG).max(1).next_power_of_two();
        Table {
            dir: Arc::new((0..round.div_ceil(CHUNK)).map(|_| empty_chunk()).collect()),
            round,
            split: 0,
            len: 0,
        }
    }

    /// How many shards the table has.
    fn shard_count(&self) -> usize {
        self.round + self.split
    }

    /// The position of the shard for `hash`: its low bits, one more for shards already split.
    #[inline]
    fn position(&self, hash: u64) -> usize {
        let i = hash as usize & (self.round - 1);
        if i < self.split {
            hash as usize & (2 * self.round - 1)
        } else {
            i
        }
    }

    /// The shard pointer at position `i`, its chunk (and the chunk list) copied first if shared.
    fn slot_mut(&mut self, i: usize) -> &mut Arc<Shard<K, V>> {
        let chunk = Arc::make_mut(&mut Arc::make_mut(&mut self.dir)[i / CHUNK]);
        &mut chunk[i % CHUNK]
    }

    /// Sizes an empty table for `n` entries, so that loading them never doubles the directory.
    pub(crate) fn reserve_empty(&mut self, n: usize) {
        if self.len == 0 {
            *self = Table::with_capacity(n);
        }
    }

    /// How many entries the table holds.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Whether the table is empty.
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    #[inline]
    fn shard(&self, hash: u64) -> &Shard<K, V> {
        let i = self.position(hash);
        &self.dir[i / CHUNK][i % CHUNK]
    }

    /// The value of the entry with `hash` whose key satisfies `eq`.
    #[cfg(test)]
    pub(crate) fn get(&self, hash: u64, eq: impl Fn(&K) -> bool) -> Option<&V> {
        self.probe(hash).finish(eq)
    }

    /// Starts a lookup: loads the shard's index slot and the entry it points to, without comparing
    /// keys. Starting several probes before finishing any lets their cache misses overlap.
    #[inline]
    pub(crate) fn probe(&self, hash: u64) -> Probe<'_, K, V> {
        let shard = self.shard(hash);
        let slot = shard.index[home(hash) % SLOTS];
        let candidate = if slot >> 8 == tag(hash) && shard.entries.len() <= INDEXED_MAX {
            shard.entries.get(usize::from(slot & 0xff).wrapping_sub(1))
        } else {
            None
        };
        Probe {
            shard,
            hash,
            slot,
            candidate,
        }
    }

    /// The shard for `hash`, copied first (with its chunk) if another snapshot shares it.
    fn shard_mut(&mut self, hash: u64) -> &mut Shard<K, V> {
        let i = self.position(hash);
        Arc::make_mut(self.slot_mut(i))
    }

    /// The shard for `hash`, ready to take one more entry. A shard shared with another snapshot is
    /// copied into a vector with room for it, so that the copy is the only allocation: copying at the
    /// old length and then growing by one would allocate twice and leave a hole in the heap per write
    /// (at a million entries that churn cost more RSS than the entries themselves).
    fn shard_for_push(&mut self, hash: u64) -> &mut Shard<K, V> {
        let i = self.position(hash);
        let shard = self.slot_mut(i);
        if Arc::get_mut(shard).is_none() {
            let mut entries = Vec::with_capacity(shard.entries.len() + 1);
            entries.extend_from_slice(&shard.entries);
            *shard = Arc::new(Shard {
                index: shard.index,
                entries,
            });
        }
        // Unique now, so this does not copy.
        Arc::make_mut(shard)
    }

    /// Inserts or replaces the entry for `key`; returns the replaced value.
    pub(crate) fn insert(
        &mut self,
        hash: u64,
        key: K,
        value: V,
        eq: impl Fn(&K) -> bool,
    ) -> Option<V> {
        if let Some(p) = self.shard(hash).find(hash, &eq) {
            let shard = self.shard_mut(hash);
            return Some(std::mem::replace(&mut shard.entries[p].value, value));
        }
        self.shard_for_push(hash).push(Entry { hash, key, value });
        self.len += 1;
        if self.len > self.shard_count() * SPLIT_AVG {
            self.split_next();
        }
        None
    }

    /// Removes the entry with `hash` whose key satisfies `eq`; returns its value.
    pub(crate) fn remove(&mut self, hash: u64, eq: impl Fn(&K) -> bool) -> Option<V> {
        let p = self.shard(hash).find(hash, &eq)?;
        let i = self.position(hash);
        self.len -= 1;
        let shard = self.slot_mut(i);
        if let Some(unique) = Arc::get_mut(shard) {
            return Some(unique.remove_at(p).value);
        }
        // Shared: copy everything but the removed entry, in one allocation of the final size.
        let old = &shard.entries;
        let mut entries = Vec::with_capacity(old.len() - 1);
        entries.extend_from_slice(&old[..p]);
        if p + 1 < old.len() {
            // `swap_remove`'s order: the last entry takes the removed one's place.
            entries.push(old[old.len() - 1].clone());
            entries.extend_from_slice(&old[p + 1..old.len() - 1]);
        }
        let value = old[p].value.clone();
        let mut copy = Shard {
            index: [0; SLOTS],
            entries,
        };
        copy.rebuild_index();
        *shard = Arc::new(copy);
        Some(value)
    }

    /// Splits the next shard of the round on the round's hash bit: entries with the bit clear stay at
    /// position `split`, the others move to `split + round`. Each half is a fresh allocation of its
    /// exact size.
    fn split_next(&mut self) {
        let (low_at, high_at, bit) = (self.split, self.split + self.round, self.round);
        if high_at / CHUNK >= self.dir.len() {
            Arc::make_mut(&mut self.dir).push(empty_chunk());
        }
        let old = Arc::clone(&self.dir[low_at / CHUNK][low_at % CHUNK]);
        let high_count = old
            .entries
            .iter()
            .filter(|e| e.hash as usize & bit != 0)
            .count();
        let mut low = Shard {
            index: [0; SLOTS],
            entries: Vec::with_capacity(old.entries.len() - high_count),
        };
        let mut high = Shard {
            index: [0; SLOTS],
            entries: Vec::with_capacity(high_count),
        };
        for e in &old.entries {
            let side = if e.hash as usize & bit == 0 {
                &mut low
            } else {
                &mut high
            };
            side.entries.push(e.clone());
        }
        drop(old);
        for (at, mut shard) in [(low_at, low), (high_at, high)] {
            shard.rebuild_index();
            *self.slot_mut(at) = Arc::new(shard);
        }
        self.split += 1;
        if self.split == self.round {
            self.round *= 2;
            self.split = 0;
        }
    }

    /// Every entry, in no particular order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&K, &V)> + '_ {
        (0..self.shard_count())
            .flat_map(|i| &self.dir[i / CHUNK][i % CHUNK].entries)
            .map(|e| (&e.key, &e.value))
    }
}

/// A lookup in progress; see [`Table::probe`].
pub(crate) struct Probe<'t, K, V> {
    shard: &'t Shard<K, V>,
    hash: u64,
    /// The index slot at the hash's home position.
    slot: u16,
    /// The entry that slot points to, if its tag matches.
    candidate: Option<&'t Entry<K, V>>,
}

impl<'t, K, V> Probe<'t, K, V> {
    /// Finishes the lookup: the value whose key satisfies `eq`.
    #[inline]
    pub(crate) fn finish(self, eq: impl Fn(&K) -> bool) -> Option<&'t V> {
        if let Some(e) = self.candidate {
            if e.hash == self.hash && eq(&e.key) {
                return Some(&e.value);
            }
        } else if self.slot == 0 && self.shard.entries.len() <= INDEXED_MAX {
            // An empty home slot: absent.
            return None;
        }
        let p = self.shard.find(self.hash, eq)?;
        Some(&self.shard.entries[p].value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn h(k: u64) -> u64 {
        // A stand-in hash with good low and high bits.
        let x = k.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        x ^ (x >> 29)
    }

    #[test]
    fn behaves_like_a_map_through_doublings_and_removals() {
        let mut t: Table<u64, u64> = Table::default();
        let mut model = HashMap::new();
        for k in 0..5_000u64 {
            assert_eq!(t.insert(h(k), k, k * 2, |&x| x == k), None);
            model.insert(k, k * 2);
        }
        assert!(t.shard_count() > 64, "shards split");
        assert!(t.split > 0, "in the middle of a round");
        for k in (0..5_000u64).step_by(3) {
            assert_eq!(t.remove(h(k), |&x| x == k), model.remove(&k));
        }
        for k in (0..5_000u64).step_by(7) {
            assert_eq!(t.insert(h(k), k, 7, |&x| x == k), model.insert(k, 7));
        }
        assert_eq!(t.len(), model.len());
        for k in 0..6_000u64 {
            assert_eq!(t.get(h(k), |&x| x == k), model.get(&k), "key {k}");
        }
        let mut seen: Vec<_> = t.iter().map(|(k, v)| (*k, *v)).collect();
        seen.sort_unstable();
        let mut want: Vec<_> = model.into_iter().collect();
        want.sort_unstable();
        assert_eq!(seen, want);
    }

    #[test]
    fn grows_one_shard_at_a_time() {
        let mut t: Table<u64, u64> = Table::default();
        for k in 0..3_000u64 {
            let before = t.shard_count();
            t.insert(h(k), k, k, |&x| x == k);
            assert!(
                t.shard_count() - before <= 1,
                "one split per insert at most"
            );
            assert!(t.len() <= t.shard_count() * SPLIT_AVG);
            assert!(
                t.shard_count() <= t.len() / SPLIT_AVG + 1,
                "no shard count ahead of need"
            );
        }
        // Every entry is still found after splits across several rounds.
        for k in 0..3_000u64 {
            assert_eq!(t.get(h(k), |&x| x == k), Some(&k));
        }
    }

    #[test]
    fn clones_are_independent_snapshots() {
        let mut a: Table<u64, u64> = Table::default();
        for k in 0..1_000u64 {
            a.insert(h(k), k, k, |&x| x == k);
        }
        let before = a.clone();
        a.insert(h(1), 1, 100, |&x| x == 1);
        a.remove(h(2), |&x| x == 2);
        a.insert(h(5_000), 5_000, 1, |&x| x == 5_000);
        assert_eq!(before.get(h(1), |&x| x == 1), Some(&1));
        assert_eq!(before.get(h(2), |&x| x == 2), Some(&2));
        assert_eq!(before.get(h(5_000), |&x| x == 5_000), None);
        assert_eq!(before.len(), 1_000);
        assert_eq!(a.get(h(1), |&x| x == 1), Some(&100));
        assert_eq!(a.get(h(2), |&x| x == 2), None);
        assert_eq!(a.len(), 1_000);
    }

    #[test]
    fn colliding_hashes_are_told_apart_by_key() {
        // Every key has the same hash: one shard, linear search past INDEXED_MAX.
        let mut t: Table<u64, u64> = Table::default();
        for k in 0..200u64 {
            t.insert(42, k, k + 1, |&x| x == k);
        }
        for k in 0..200u64 {
            assert_eq!(t.get(42, |&x| x == k), Some(&(k + 1)));
        }
        for k in 0..150u64 {
            assert_eq!(t.remove(42, |&x| x == k), Some(k + 1));
        }
        for k in 0..200u64 {
            let want = (k >= 150).then_some(k + 1);
            assert_eq!(t.get(42, |&x| x == k).copied(), want);
        }
    }
}
