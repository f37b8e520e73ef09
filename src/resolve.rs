//! Precedence resolution: which configured quota applies to a connection, key by key.
//!
//! | level | entity | bucket |
//! | --- | --- | --- |
//! | 1 | `{user=u, client-id=c}` | (u, c) |
//! | 2 | `{user=u, client-id=<default>}` | (u, c) |
//! | 3 | `{user=u}` | (u, —) |
//! | 4 | `{user=<default>, client-id=c}` | (u, c) |
//! | 5 | `{user=<default>, client-id=<default>}` | (u, c) |
//! | 6 | `{user=<default>}` | (u, —) |
//! | 7 | `{client-id=c}` | (—, c) |
//! | 8 | `{client-id=<default>}` | (—, c) |

use std::fmt;

use crate::entity::Level;
use crate::key::QuotaKey;
use crate::scope::BucketScope;
use crate::state::{self, KeyMask, NodeQuotas, State, UserNode};

/// One effective quota of a connection.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Quota {
    /// The key (type and unit).
    pub key: QuotaKey,
    /// The limit in the key's unit. Under the `kip55` policy a rate key from level 3 or 6 gives the
    /// remainder (total − the user's named sub-quotas), which may be 0.
    pub limit: f64,
    /// Where it came from.
    pub level: Level,
}

impl Quota {
    /// Who shares this quota's rate.
    pub fn bucket_scope(&self) -> BucketScope {
        self.level.bucket_scope()
    }
}

const CLIENT_KEYS: KeyMask = (1 << QuotaKey::CLIENT_COUNT) - 1;

/// The effective quotas of one (user, client-id): at most one per key. A plain value, no allocation.
///
/// `Debug` prints only the keys that apply, as `Resolved { producer_byte_rate: (limit, level) }`:
/// the slots of the other keys hold leftovers that mean nothing.
#[derive(Clone, Copy, PartialEq)]
pub struct Resolved {
    mask: KeyMask,
    limits: [f64; QuotaKey::CLIENT_COUNT],
    levels: [Level; QuotaKey::CLIENT_COUNT],
}

impl fmt::Debug for Resolved {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Resolved ")?;
        let mut map = f.debug_map();
        for q in self.iter() {
            map.entry(&format_args!("{}", q.key), &(q.limit, q.level));
        }
        map.finish()
    }
}

impl Resolved {
    pub(crate) const EMPTY: Resolved = Resolved {
        mask: 0,
        limits: [0.0; QuotaKey::CLIENT_COUNT],
        levels: [Level::UserClient; QuotaKey::CLIENT_COUNT],
    };

    /// The effective quota for `key`, or `None` if no level configures it (unlimited).
    #[inline]
    pub fn get(&self, key: QuotaKey) -> Option<Quota> {
        let i = key.index();
        (i < QuotaKey::CLIENT_COUNT && self.mask & (1 << i) != 0).then(|| Quota {
            key,
            limit: self.limits[i],
            level: self.levels[i],
        })
    }

    /// Every effective quota, in key order.
    pub fn iter(&self) -> impl Iterator<Item = Quota> + '_ {
        QuotaKey::client_keys().filter_map(|k| self.get(k))
    }

    /// Sets `key`'s quota (a test helper).
    #[cfg(test)]
    pub(crate) fn set(&mut self, key: QuotaKey, limit: f64, level: Level) {
        let i = key.index();
        self.mask |= 1 << i;
        self.limits[i] = limit;
        self.levels[i] = level;
    }

    /// Whether nothing limits this connection.
    pub fn is_empty(&self) -> bool {
        self.mask == 0
    }
}

/// The client-id half of a lookup.
#[derive(Clone, Copy, Debug)]
pub(crate) enum ClientArg<'a> {
    /// A client-id; its own entries and the defaults apply.
    Named(&'a str),
    /// A name with no entry of its own: only defaults apply.
    Unnamed,
    /// The empty client-id: no client-id level applies (Kafka's rule).
    Empty,
}

impl<'a> ClientArg<'a> {
    /// The hot path's view of a client-id.
    pub(crate) fn from_client_id(client_id: &'a str) -> Self {
        if client_id.is_empty() {
            ClientArg::Empty
        } else {
            ClientArg::Named(client_id)
        }
    }
}

/// The configured quotas at each level for one connection.
pub(crate) struct Sources<'s> {
    /// Per level (index `level - 1`), the node and slot holding that level's entity, if configured.
    pub(crate) levels: [Option<(&'s NodeQuotas, usize)>; 8],
    /// The named user's node, for its sub-quota sums.
    pub(crate) user_node: Option<&'s UserNode>,
}

impl<'s> Sources<'s> {
    /// Finds every level's node: at most three map lookups (user, the (user, client-id) pair, the
    /// client-id).
    #[inline]
    pub(crate) fn find(state: &'s State, user: Option<&str>, client: ClientArg<'_>) -> Sources<'s> {
        let named_client = match client {
            ClientArg::Named(c) => Some(c),
            _ => None,
        };
        let has_client = !matches!(client, ClientArg::Empty);
        // Kafka's lookup skips every user level for an empty user name, as it skips every client-id
        // level for an empty client-id.
        let has_user = user != Some("");
        Sources::find_with(state, user, named_client, has_user, has_client)
    }

    /// Every level's node by exact entity lookups, skipping nothing for an empty name: level 4 is
    /// `{user=<default>, client-id=c}` whatever the user is called, and an empty name's own levels
    /// find nothing, since no entity has an empty name.
    #[inline]
    pub(crate) fn find_exact(state: &'s State, user: &str, client_id: &str) -> Sources<'s> {
        Sources::find_with(state, Some(user), Some(client_id), true, true)
    }

    #[inline]
    fn find_with(
        state: &'s State,
        user: Option<&str>,
        named_client: Option<&str>,
        has_user: bool,
        has_client: bool,
    ) -> Sources<'s> {
        // Each name is hashed once, and the three probes start before any finishes, so that their
        // cache misses overlap.
        let user_hash = user.map(|u| state.users.hash(u));
        let client_hash = named_client.map(|c| state.users.hash(c));
        let user_probe = user_hash.map(|h| state.users.probe(h));
        let client_probe = client_hash.map(|h| state.clients.probe(h));
        let pair_probe = match (user_hash, client_hash) {
            (Some(hu), Some(hc)) => Some(state.pairs.probe(state::pair_hash(hu, hc))),
            _ => None,
        };
        let user_node = user_probe.zip(user).and_then(|(p, u)| p.finish(u));
        let client_node = client_probe
            .zip(named_client)
            .and_then(|(p, c)| p.finish(c));
        let user_client = match (pair_probe, user, named_client) {
            (Some(p), Some(u), Some(c)) => p.finish(u, c),
            _ => None,
        };
        use crate::state::{CLIENT, DEFAULT_USER_CLIENT, ONLY, USER, USER_DEFAULT_CLIENT};
        let when = |cond: bool, q: Option<&'s NodeQuotas>, slot| {
            q.filter(|q| cond && q.mask(slot) != 0).map(|q| (q, slot))
        };
        let user_quotas = user_node.map(|n| &n.quotas);
        Sources {
            levels: [
                when(true, user_client, ONLY),
                when(has_client, user_quotas, USER_DEFAULT_CLIENT),
                when(true, user_quotas, USER),
                when(has_user, client_node, DEFAULT_USER_CLIENT),
                when(
                    has_user && has_client,
                    Some(&state.default_user),
                    USER_DEFAULT_CLIENT,
                ),
                when(has_user, Some(&state.default_user), USER),
                when(true, client_node, CLIENT),
                when(has_client, Some(&state.default_client), ONLY),
            ],
            user_node,
        }
    }

    /// The total that bounds a sub-quota found at `level` for key index `k`: `{user=u}`'s for levels
    /// 1 and 2, `{user=<default>}`'s for levels 4 and 5.
    #[inline]
    fn total_above(&self, level: Level, k: usize) -> Option<f64> {
        let total_level = match level {
            Level::UserClient | Level::UserDefaultClient => 2,
            Level::DefaultUserClient | Level::DefaultUserDefaultClient => 5,
            _ => return None,
        };
        self.levels[total_level].and_then(|(quotas, slot)| quotas.get(slot, k))
    }

    /// The sub-quota sums that bound a level-3 or level-6 total.
    pub(crate) fn sums(&self, state: &State, level: Level) -> state::SubSums {
        match level {
            Level::User => self.user_node.map_or([0; 4], |n| n.sums.get()),
            Level::DefaultUser => state.default_user_sums,
            _ => [0; 4],
        }
    }
}

/// Resolves every key for one connection; see the module docs for the precedence.
#[inline]
pub(crate) fn resolve(
    state: &State,
    kip55: bool,
    user: Option<&str>,
    client: ClientArg<'_>,
) -> Resolved {
    let sources = Sources::find(state, user, client);
    let mut out = Resolved::EMPTY;
    let mut remaining = CLIENT_KEYS;
    for (i, source) in sources.levels.iter().enumerate() {
        let Some((quotas, slot)) = *source else {
            continue;
        };
        let mut found = quotas.mask(slot) & remaining;
        remaining &= !found;
        while found != 0 {
            let k = found.trailing_zeros() as usize;
            found &= found - 1;
            out.limits[k] = quotas.get(slot, k).unwrap_or(0.0);
            out.levels[k] = Level::ALL[i];
        }
        if remaining == 0 {
            break;
        }
    }
    out.mask = CLIENT_KEYS & !remaining;
    if kip55 {
        for (s, key) in QuotaKey::SUB_QUOTA_KEYS.iter().enumerate() {
            let k = key.index();
            if out.mask & (1 << k) == 0 {
                continue;
            }
            let level = out.levels[k];
            if matches!(level, Level::User | Level::DefaultUser) {
                let sum = sources.sums(state, level)[s];
                if sum > 0 {
                    out.limits[k] = state::remainder(out.limits[k], sum);
                }
            } else if let Some(total) = sources.total_above(level, k) {
                // Only a state the engine did not validate (`Engine::mirror`) can hold a sub-quota
                // above its total; it is held to the total.
                out.limits[k] = out.limits[k].min(total);
            }
        }
    }
    out
}

/// Which shapes of entity configure a key somewhere in a snapshot (any names, defaults included).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Shapes {
    /// Some `{user, client-id}` entity does.
    pub user_client: bool,
    /// Some `{user}` entity does.
    pub user: bool,
    /// Some `{client-id}` entity does.
    pub client: bool,
}

impl Shapes {
    #[inline]
    pub(crate) fn of(state: &State, key: QuotaKey) -> Shapes {
        let [user_client, user, client] =
            state.shapes.get(key.index()).copied().unwrap_or_default();
        Shapes {
            user_client: user_client > 0,
            user: user > 0,
            client: client > 0,
        }
    }
}

/// One key's exact lookups for a connection, and the shapes that configure the key, both from one
/// snapshot: what a callback that answers exactly as Apache Kafka's default one builds on.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Levels {
    /// What each of the eight levels configures (index `level - 1`), found by exact entity lookups:
    /// nothing is skipped for an empty name, and no precedence or sub-quota rule is applied.
    pub values: [Option<f64>; 8],
    /// Which shapes of entity configure the key anywhere.
    pub shapes: Shapes,
}

/// [`Levels`] of `key` for (user, client_id).
#[inline]
pub(crate) fn levels(state: &State, user: &str, client_id: &str, key: QuotaKey) -> Levels {
    let sources = Sources::find_exact(state, user, client_id);
    let k = key.index();
    Levels {
        values: sources
            .levels
            .map(|source| source.and_then(|(quotas, slot)| quotas.get(slot, k))),
        shapes: Shapes::of(state, key),
    }
}

/// The effective `connection_creation_rate` of one IP.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct IpQuota {
    /// Connections per second.
    pub limit: f64,
    /// Whether it came from `{ip=<default>}` rather than the IP's own entity.
    pub from_default: bool,
}

/// Resolves the connection-creation quota of `ip`: `{ip=x}`, then `{ip=<default>}`.
#[inline]
pub(crate) fn resolve_ip(state: &State, ip: &str) -> Option<IpQuota> {
    let k = QuotaKey::CONNECTION_CREATION_RATE.index();
    if let Some(limit) = state.ips.get(ip).and_then(|q| q.get(state::ONLY, k)) {
        return Some(IpQuota {
            limit,
            from_default: false,
        });
    }
    state.default_ip.get(state::ONLY, k).map(|limit| IpQuota {
        limit,
        from_default: true,
    })
}
