//! The immutable configuration snapshot that readers see, and its compact node types.
//!
//! Every map is a flat persistent hash table ([`crate::index::Table`]): an alteration copies only the
//! shards it touches, so a batch costs what it changes, and the previous snapshot stays intact for
//! readers still holding it. All maps of a snapshot hash with one hasher, so resolution hashes each
//! name once and reuses the hash for every map it probes.

use std::hash::BuildHasher;
use std::sync::Arc;

use crate::entity::Name;
use crate::index::{Probe, Table};
use crate::key::QuotaKey;

/// The hasher every map of a state uses.
pub(crate) type Hasher = foldhash::fast::RandomState;

/// A persistent map from names to `V`.
#[derive(Clone, Debug)]
pub(crate) struct Map<V> {
    table: Table<Name, V>,
    hasher: Hasher,
}

impl<V: Clone> Map<V> {
    /// An empty map hashing with `hasher`.
    pub(crate) fn new(hasher: Hasher) -> Self {
        Map {
            table: Table::default(),
            hasher,
        }
    }

    /// The hash of `name` in every map of this state.
    #[inline]
    pub(crate) fn hash(&self, name: &str) -> u64 {
        self.hasher.hash_one(name)
    }

    /// The value for `name`.
    #[inline]
    pub(crate) fn get(&self, name: &str) -> Option<&V> {
        self.get_hashed(self.hash(name), name)
    }

    /// The value for `name`, whose [`Map::hash`] is `hash`.
    #[inline]
    pub(crate) fn get_hashed(&self, hash: u64, name: &str) -> Option<&V> {
        self.probe(hash).finish(name)
    }

    /// Starts looking up the name whose [`Map::hash`] is `hash`; see [`crate::index::Table::probe`].
    #[inline]
    pub(crate) fn probe(&self, hash: u64) -> NameProbe<'_, V> {
        NameProbe((!self.table.is_empty()).then(|| self.table.probe(hash)))
    }

    /// Sizes an empty map for `n` names (see [`Table::reserve_empty`]).
    pub(crate) fn reserve_empty(&mut self, n: usize) {
        self.table.reserve_empty(n);
    }

    /// Inserts or replaces the value for `name`.
    pub(crate) fn insert(&mut self, name: Name, value: V) {
        let hash = self.hash(name.as_str());
        let probe = name.clone();
        self.table
            .insert(hash, name, value, |k| k.as_str() == probe.as_str());
    }

    /// Removes `name`'s value.
    pub(crate) fn remove(&mut self, name: &str) {
        self.table.remove(self.hash(name), |k| k.as_str() == name);
    }

    /// Every entry, in no particular order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&Name, &V)> + '_ {
        self.table.iter()
    }
}

/// A lookup in a [`Map`] in progress.
pub(crate) struct NameProbe<'t, V>(Option<Probe<'t, Name, V>>);

impl<'t, V> NameProbe<'t, V> {
    /// The value for `name`.
    #[inline]
    pub(crate) fn finish(self, name: &str) -> Option<&'t V> {
        self.0?.finish(|k| k.as_str() == name)
    }
}

/// The hash of a (user, client-id) pair from the names' own hashes, so that resolution hashes each
/// string once.
#[inline]
pub(crate) fn pair_hash(user: u64, client: u64) -> u64 {
    let x = (user.rotate_left(23) ^ client).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    x ^ (x >> 31)
}

/// A lookup in a [`PairMap`] in progress.
pub(crate) struct PairProbe<'t, V>(Option<Probe<'t, (Name, Name), V>>);

impl<'t, V> PairProbe<'t, V> {
    /// The value for `(user, client)`.
    #[inline]
    pub(crate) fn finish(self, user: &str, client: &str) -> Option<&'t V> {
        self.0?
            .finish(|(u, c)| u.as_str() == user && c.as_str() == client)
    }
}

/// A persistent map from (user, client-id) name pairs to `V`.
#[derive(Clone, Debug)]
pub(crate) struct PairMap<V> {
    table: Table<(Name, Name), V>,
    hasher: Hasher,
}

impl<V: Clone> PairMap<V> {
    /// An empty map hashing with `hasher` (the same as the state's name maps).
    pub(crate) fn new(hasher: Hasher) -> Self {
        PairMap {
            table: Table::default(),
            hasher,
        }
    }

    fn hash(&self, user: &str, client: &str) -> u64 {
        pair_hash(self.hasher.hash_one(user), self.hasher.hash_one(client))
    }

    /// The value for `(user, client)`.
    pub(crate) fn get(&self, user: &str, client: &str) -> Option<&V> {
        self.get_hashed(self.hash(user, client), user, client)
    }

    /// The value for `(user, client)`.
    #[inline]
    fn get_hashed(&self, hash: u64, user: &str, client: &str) -> Option<&V> {
        self.probe(hash).finish(user, client)
    }

    /// Starts looking up the pair whose hash is [`pair_hash`] of the names' hashes.
    #[inline]
    pub(crate) fn probe(&self, hash: u64) -> PairProbe<'_, V> {
        PairProbe((!self.table.is_empty()).then(|| self.table.probe(hash)))
    }

    /// Sizes an empty map for `n` pairs (see [`Table::reserve_empty`]).
    pub(crate) fn reserve_empty(&mut self, n: usize) {
        self.table.reserve_empty(n);
    }

    /// Inserts or replaces the value for `(user, client)`.
    pub(crate) fn insert(&mut self, user: Name, client: Name, value: V) {
        let hash = self.hash(user.as_str(), client.as_str());
        let probe = (user.clone(), client.clone());
        self.table
            .insert(hash, (user, client), value, |k| *k == probe);
    }

    /// Removes `(user, client)`'s value.
    pub(crate) fn remove(&mut self, user: &str, client: &str) {
        let hash = self.hash(user, client);
        self.table
            .remove(hash, |(u, c)| u.as_str() == user && c.as_str() == client);
    }

    /// Every entry, in no particular order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&(Name, Name), &V)> + '_ {
        self.table.iter()
    }
}

/// Bit `i` set means key index `i` is configured.
pub(crate) type KeyMask = u16;

/// The quotas of up to two entities that live on one node, stored compactly: a key mask per slot and
/// the values of both slots in one array (inline when there is only one value, the common case).
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct NodeQuotas {
    masks: [KeyMask; 2],
    values: Values,
}

#[derive(Clone, Debug, PartialEq)]
enum Values {
    One(f64),
    Many(Box<[f64]>),
}

impl Default for Values {
    fn default() -> Self {
        Values::Many(Box::default())
    }
}

impl Values {
    #[inline]
    fn as_slice(&self) -> &[f64] {
        match self {
            Values::One(v) => std::slice::from_ref(v),
            Values::Many(vs) => vs,
        }
    }
}

impl NodeQuotas {
    /// The mask of configured keys in `slot`.
    #[inline]
    pub(crate) fn mask(&self, slot: usize) -> KeyMask {
        self.masks[slot]
    }

    /// Whether neither slot has a key.
    pub(crate) fn is_empty(&self) -> bool {
        self.masks == [0, 0]
    }

    /// The value of `key` in `slot`, if configured.
    #[inline]
    pub(crate) fn get(&self, slot: usize, key: usize) -> Option<f64> {
        let bit = 1 << key;
        if self.masks[slot] & bit == 0 {
            return None;
        }
        // Values are ordered slot 0 then slot 1, each by key index.
        let before = if slot == 0 {
            0
        } else {
            self.masks[0].count_ones()
        };
        let rank = before + (self.masks[slot] & (bit - 1)).count_ones();
        Some(self.values.as_slice()[rank as usize])
    }

    /// The configured `(key, value)` pairs of `slot`, by key index.
    pub(crate) fn entries(&self, slot: usize) -> impl Iterator<Item = (QuotaKey, f64)> + '_ {
        let mask = self.masks[slot];
        QuotaKey::all()
            .filter(move |k| mask & (1 << k.index()) != 0)
            .map(move |k| (k, self.get(slot, k.index()).unwrap_or(0.0)))
    }

    /// Replaces the contents of `slot` with `entries` (key indices, ascending, each once).
    pub(crate) fn set_slot(&mut self, slot: usize, entries: &[(QuotaKey, f64)]) {
        let other = 1 - slot;
        let mut merged: [Option<f64>; 2 * QuotaKey::COUNT] = [None; 2 * QuotaKey::COUNT];
        for (k, v) in self.entries(other) {
            merged[other * QuotaKey::COUNT + k.index()] = Some(v);
        }
        let mut new_mask: KeyMask = 0;
        for &(k, v) in entries {
            merged[slot * QuotaKey::COUNT + k.index()] = Some(v);
            new_mask |= 1 << k.index();
        }
        self.masks[slot] = new_mask;
        let values: Vec<f64> = merged.iter().flatten().copied().collect();
        self.values = match values.as_slice() {
            [one] => Values::One(*one),
            _ => Values::Many(values.into_boxed_slice()),
        };
    }
}

/// The slot of a [`UserNode`]'s quotas for `{user=U}`.
pub(crate) const USER: usize = 0;
/// The slot of a [`UserNode`]'s quotas for `{user=U, client-id=<default>}`.
pub(crate) const USER_DEFAULT_CLIENT: usize = 1;
/// The slot of a [`ClientNode`]'s quotas for `{client-id=C}`.
pub(crate) const CLIENT: usize = 0;
/// The slot of a [`ClientNode`]'s quotas for `{user=<default>, client-id=C}`.
pub(crate) const DEFAULT_USER_CLIENT: usize = 1;
/// The only slot used by single-entity nodes (`{user=U, client-id=C}` and `{ip}`).
pub(crate) const ONLY: usize = 0;

/// Sums of a user's named client sub-quotas for each [`QuotaKey::SUB_QUOTA_KEYS`] entry. Kept as exact
/// integers (byte rates are whole numbers) so that incremental updates never drift.
pub(crate) type SubSums = [u128; 4];

/// Everything configured under one user name (or under `<default>`).
#[derive(Clone, Debug, Default)]
pub(crate) struct UserNode {
    /// Slots [`USER`] and [`USER_DEFAULT_CLIENT`].
    pub(crate) quotas: NodeQuotas,
    /// The sums of the user's `{user=U, client-id=C}` sub-quotas.
    pub(crate) sums: Sums,
}

impl UserNode {
    /// Whether the node holds nothing and can be dropped.
    pub(crate) fn is_empty(&self) -> bool {
        self.quotas.is_empty() && self.sums == Sums::Zero
    }
}

/// [`SubSums`] stored compactly: most users have no client sub-quotas or sub-quotas of one key.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) enum Sums {
    /// Every sum is zero.
    #[default]
    Zero,
    /// Only sum `index` is non-zero, and it fits in 64 bits (the common case: one client's byte rate
    /// is at most 2^63). Keeping the variant to 16 bytes keeps a user's table entry to 72.
    One {
        /// The position in [`SubSums`].
        index: u8,
        /// The sum.
        value: u64,
    },
    /// Several sums are non-zero, or one exceeds 64 bits.
    Many(Arc<SubSums>),
}

impl Sums {
    /// The sums as an array.
    #[inline]
    pub(crate) fn get(&self) -> SubSums {
        match self {
            Sums::Zero => [0; 4],
            Sums::One { index, value } => {
                let mut out = [0; 4];
                out[usize::from(*index)] = u128::from(*value);
                out
            }
            Sums::Many(all) => **all,
        }
    }

    /// Stores `sums`.
    pub(crate) fn set(&mut self, sums: SubSums) {
        let mut nonzero = sums.iter().enumerate().filter(|(_, s)| **s != 0);
        *self = match (nonzero.next(), nonzero.next()) {
            (None, _) => Sums::Zero,
            (Some((index, &v)), None) => match u64::try_from(v) {
                Ok(value) => Sums::One {
                    index: index as u8,
                    value,
                },
                Err(_) => Sums::Many(Arc::new(sums)),
            },
            _ => Sums::Many(Arc::new(sums)),
        };
    }
}

/// Everything configured under one client-id: `{client-id=C}` and `{user=<default>, client-id=C}`, kept
/// together so that resolution finds both with one lookup.
pub(crate) type ClientNode = NodeQuotas;

/// One immutable snapshot of the whole configuration.
#[derive(Clone)]
pub(crate) struct State {
    pub(crate) users: Map<UserNode>,
    /// `{user=U, client-id=C}`, slot [`ONLY`]; the sums over each user's clients live in its
    /// [`UserNode`].
    pub(crate) pairs: PairMap<NodeQuotas>,
    /// `{user=<default>}` and `{user=<default>, client-id=<default>}`; its named clients live in
    /// [`State::clients`], slot [`DEFAULT_USER_CLIENT`], with their sums in `default_user_sums`.
    pub(crate) default_user: NodeQuotas,
    pub(crate) default_user_sums: SubSums,
    pub(crate) clients: Map<ClientNode>,
    /// `{client-id=<default>}`, slot [`ONLY`].
    pub(crate) default_client: NodeQuotas,
    pub(crate) ips: Map<NodeQuotas>,
    /// `{ip=<default>}`, slot [`ONLY`].
    pub(crate) default_ip: NodeQuotas,
    /// How many entities have at least one key.
    pub(crate) entity_count: usize,
    /// Per client key, how many entities of each shape configure it.
    pub(crate) shapes: ShapeCounts,
    /// The commit that published this snapshot (0 for an engine's first, empty one).
    pub(crate) generation: u64,
}

impl Default for State {
    fn default() -> Self {
        let hasher = Hasher::default();
        State {
            users: Map::new(hasher),
            pairs: PairMap::new(hasher),
            default_user: NodeQuotas::default(),
            default_user_sums: [0; 4],
            clients: Map::new(hasher),
            default_client: NodeQuotas::default(),
            ips: Map::new(hasher),
            default_ip: NodeQuotas::default(),
            entity_count: 0,
            shapes: [[0; 3]; QuotaKey::CLIENT_COUNT],
            generation: 0,
        }
    }
}

/// Per client key (by index), how many entities configure it, by shape: `{user, client-id}` (any
/// names or defaults), `{user}`, `{client-id}`.
pub(crate) type ShapeCounts = [[u64; 3]; QuotaKey::CLIENT_COUNT];

/// Moves `counts` by one entity's keys: `add` when they arrive, not when they leave.
pub(crate) fn count_shapes(
    counts: &mut ShapeCounts,
    entity: &crate::entity::Entity,
    entries: &[(QuotaKey, f64)],
    add: bool,
) {
    use crate::entity::Entity;
    let shape = match entity {
        Entity::UserClient(..) => 0,
        Entity::User(_) => 1,
        Entity::ClientId(_) => 2,
        Entity::Ip(_) => return,
    };
    for (key, _) in entries {
        if let Some(count) = counts.get_mut(key.index()) {
            if add {
                count[shape] += 1;
            } else {
                count[shape] -= 1;
            }
        }
    }
}

/// The position of `key` in [`SubSums`], if it is a sub-quota key.
#[inline]
pub(crate) fn sub_index(key: usize) -> Option<usize> {
    QuotaKey::SUB_QUOTA_KEYS
        .iter()
        .position(|k| k.index() == key)
}

/// `total − sum`, never below zero: the KIP-55 remainder, computed exactly (totals are whole numbers up
/// to 2^63) and rounded to `f64` once.
#[inline]
pub(crate) fn remainder(total: f64, sum: u128) -> f64 {
    (total as u128).saturating_sub(sum) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_quotas_are_compact() {
        assert!(std::mem::size_of::<NodeQuotas>() <= 24);
        assert!(std::mem::size_of::<UserNode>() <= 40);
        assert!(std::mem::size_of::<Sums>() <= 16);
    }

    #[test]
    fn slots_hold_independent_keys() {
        let mut q = NodeQuotas::default();
        assert!(q.is_empty());
        q.set_slot(1, &[(QuotaKey::PRODUCER_BPS, 5.0)]);
        assert_eq!(q.get(1, QuotaKey::PRODUCER_BPS.index()), Some(5.0));
        assert_eq!(q.get(0, QuotaKey::PRODUCER_BPS.index()), None);
        q.set_slot(
            0,
            &[
                (QuotaKey::CONSUMER_BPS, 1.0),
                (QuotaKey::REQUEST_PERCENTAGE, 7.5),
            ],
        );
        assert_eq!(q.get(0, QuotaKey::CONSUMER_BPS.index()), Some(1.0));
        assert_eq!(q.get(0, QuotaKey::REQUEST_PERCENTAGE.index()), Some(7.5));
        assert_eq!(q.get(1, QuotaKey::PRODUCER_BPS.index()), Some(5.0));
        q.set_slot(0, &[]);
        q.set_slot(1, &[]);
        assert!(q.is_empty());
    }

    #[test]
    fn sums_round_trip_in_every_form() {
        let big = u128::from(u64::MAX) + 5;
        for sums in [
            [0, 0, 0, 0],
            [0, 7, 0, 0],
            [0, 0, 0, u128::from(u64::MAX)],
            [0, 0, big, 0],
            [3, 0, 4, 0],
        ] {
            let mut stored = Sums::default();
            stored.set(sums);
            assert_eq!(stored.get(), sums);
        }
        let mut one = Sums::default();
        one.set([0, 7, 0, 0]);
        assert!(matches!(one, Sums::One { index: 1, value: 7 }));
        one.set([0, 0, big, 0]);
        assert!(matches!(one, Sums::Many(_)), "over 64 bits");
    }

    #[test]
    fn remainder_saturates() {
        assert_eq!(remainder(100.0, 30), 70.0);
        // Exact above 2^53: 2^62 − (2^62 − 1023) is 1023, not a rounding of it.
        assert_eq!(remainder(2f64.powi(62), (1u128 << 62) - 1023), 1023.0);
        assert_eq!(remainder(100.0, 100), 0.0);
        assert_eq!(remainder(100.0, 130), 0.0);
    }
}
