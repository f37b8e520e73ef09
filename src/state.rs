//! The immutable configuration snapshot that readers see, and its compact node types.
//!
//! Every map is a persistent hash trie: an alteration path-copies only the nodes it touches, so a
//! batch costs what it changes, and the previous snapshot stays intact for readers still holding it.

use rpds::HashTrieMapSync;

use crate::entity::Name;
use crate::key::QuotaKey;

/// A persistent map from names to `V`.
pub(crate) type Map<V> = HashTrieMapSync<Name, V, foldhash::fast::RandomState>;

/// An empty [`Map`].
pub(crate) fn new_map<V>() -> Map<V> {
    HashTrieMapSync::new_with_hasher_and_ptr_kind(foldhash::fast::RandomState::default())
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
    /// `{user=U, client-id=C}` entries, if any.
    pub(crate) clients: Option<Box<UserClients>>,
}

/// The named clients of one user and their sub-quota sums.
#[derive(Clone, Debug)]
pub(crate) struct UserClients {
    pub(crate) map: Map<NodeQuotas>,
    pub(crate) sums: SubSums,
}

/// Everything configured under one client-id: `{client-id=C}` and `{user=<default>, client-id=C}`, kept
/// together so that resolution finds both with one lookup.
pub(crate) type ClientNode = NodeQuotas;

/// One immutable snapshot of the whole configuration.
#[derive(Clone)]
pub(crate) struct State {
    pub(crate) users: Map<UserNode>,
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
}

impl Default for State {
    fn default() -> Self {
        State {
            users: new_map(),
            default_user: NodeQuotas::default(),
            default_user_sums: [0; 4],
            clients: new_map(),
            default_client: NodeQuotas::default(),
            ips: new_map(),
            default_ip: NodeQuotas::default(),
            entity_count: 0,
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
        assert!(std::mem::size_of::<UserNode>() <= 32);
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
    fn remainder_saturates() {
        assert_eq!(remainder(100.0, 30), 70.0);
        // Exact above 2^53: 2^62 − (2^62 − 1023) is 1023, not a rounding of it.
        assert_eq!(remainder(2f64.powi(62), (1u128 << 62) - 1023), 1023.0);
        assert_eq!(remainder(100.0, 100), 0.0);
        assert_eq!(remainder(100.0, 130), 0.0);
    }
}
