//! Detail on request: describing a connection's quotas with provenance, and listing configured entities.

use crate::entity::{Entity, EntityName, EntityType, Level, Name};
use crate::key::{QuotaKey, QuotaType, Unit};
use crate::resolve::{ClientArg, Sources};
use crate::state::{self, NodeQuotas, State};

/// How a quota value turns into this broker's limit.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum BrokerLimit {
    /// Enforced at this rate on this broker (bytes/s, percent, mutations/s), after the live broker count
    /// for `bps` and the KIP-55 remainder where it applies.
    Rate(f64),
    /// A weight in a split of the broker's capacity for the type among the buckets active in the current
    /// window; `capacity: None` means no capacity is configured, so the share is recorded but not enforced.
    Share {
        /// This bucket's weight.
        weight: f64,
        /// The broker's capacity for the quota type, if configured.
        capacity: Option<f64>,
    },
}

/// Where an instance's part of a cluster-wide `bps` limit comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BpsView {
    /// The limit divided by the live instance count: no usage is shared between the instances
    /// (what [`Engine::describe`](crate::Engine::describe) reports, since the engine alone knows
    /// only the count).
    LiveCount {
        /// The live instances divided by.
        instances: u32,
    },
    /// Decided from the usage the instances share: this instance's part by demand.
    SharedUsage,
    /// Usage is shared, but the view is older than its bound (or incomplete): the limit divided
    /// by the live instance count until it is fresh again.
    Stale {
        /// The live instances divided by.
        instances: u32,
    },
}

impl BpsView {
    /// A stable spelling for labels and logs: `live_count`, `shared_usage` or `stale`.
    pub fn as_str(self) -> &'static str {
        match self {
            BpsView::LiveCount { .. } => "live_count",
            BpsView::SharedUsage => "shared_usage",
            BpsView::Stale { .. } => "stale",
        }
    }
}

impl std::fmt::Display for BpsView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BpsView::LiveCount { instances } => write!(f, "divided by {instances} live instances"),
            BpsView::SharedUsage => f.write_str("from shared usage"),
            BpsView::Stale { instances } => write!(
                f,
                "shared usage too old: divided by {instances} live instances"
            ),
        }
    }
}

/// A configured entry that a more specific level overrides.
#[derive(Clone, Debug, PartialEq)]
pub struct Overridden {
    /// The configured value.
    pub value: f64,
    /// The entity it is configured on.
    pub entity: Entity,
    /// That entity's level.
    pub level: Level,
}

/// One effective quota of a described connection, with where it came from.
#[derive(Clone, Debug, PartialEq)]
pub struct DescribedQuota {
    /// Type and unit.
    pub key: QuotaKey,
    /// The configured value.
    pub value: f64,
    /// The entity it is configured on.
    pub entity: Entity,
    /// That entity's level.
    pub level: Level,
    /// The limit in the key's unit after the KIP-55 remainder (equal to `value` unless a user total is
    /// shared as a remainder).
    pub effective: f64,
    /// What it means on this broker.
    pub broker_limit: BrokerLimit,
    /// For a `bps` key, which view `broker_limit` came from; `None` for the other units.
    pub bps_view: Option<BpsView>,
    /// Less specific entries for the same key, most specific first (only when asked for).
    pub overridden: Vec<Overridden>,
}

/// What a host knows about the cluster, needed to turn units into this broker's limits.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BrokerView {
    /// Live brokers in the cluster (at least 1).
    pub broker_count: u32,
    /// This broker's capacity for `producer_byte_rate` shares, bytes/s.
    pub producer_capacity: Option<f64>,
    /// This broker's capacity for `consumer_byte_rate` shares, bytes/s.
    pub consumer_capacity: Option<f64>,
}

impl BrokerView {
    /// The broker limit of `value` in `key`'s unit.
    pub fn broker_limit(&self, key: QuotaKey, value: f64) -> BrokerLimit {
        match key.unit() {
            Unit::Bps => BrokerLimit::Rate(value / f64::from(self.broker_count.max(1))),
            Unit::Shares => BrokerLimit::Share {
                weight: value,
                capacity: match key.quota_type() {
                    QuotaType::ProducerByteRate => self.producer_capacity,
                    _ => self.consumer_capacity,
                },
            },
            _ => BrokerLimit::Rate(value),
        }
    }
}

/// Describes the connection `(user, client_id)`; `None` for either means a name with no entry of its
/// own (only defaults apply for that type). An empty client-id matches no client-id level, an empty user
/// no user level.
pub(crate) fn describe(
    state: &State,
    kip55: bool,
    broker: &BrokerView,
    user: Option<&str>,
    client_id: Option<&str>,
    include_overrides: bool,
) -> Vec<DescribedQuota> {
    let client = match client_id {
        Some(c) => ClientArg::from_client_id(c),
        None => ClientArg::Unnamed,
    };
    let sources = Sources::find(state, user, client);
    let mut out: Vec<DescribedQuota> = Vec::new();
    for key in QuotaKey::client_keys() {
        let k = key.index();
        let mut found = sources
            .levels
            .iter()
            .zip(Level::ALL)
            .filter_map(|(src, level)| {
                let (quotas, slot) = (*src)?;
                let value = quotas.get(slot, k)?;
                let entity = level.entity(user, client_id)?;
                Some((value, entity, level))
            });
        let Some((value, entity, level)) = found.next() else {
            continue;
        };
        let mut effective = value;
        if kip55 && key.is_sub_quota_key() && matches!(level, Level::User | Level::DefaultUser) {
            let s = state::sub_index(k).expect("sub-quota key");
            effective = state::remainder(value, sources.sums(state, level)[s]);
        }
        let overridden = if include_overrides {
            found
                .map(|(value, entity, level)| Overridden {
                    value,
                    entity,
                    level,
                })
                .collect()
        } else {
            Vec::new()
        };
        out.push(DescribedQuota {
            key,
            value,
            entity,
            level,
            effective,
            broker_limit: broker.broker_limit(key, effective),
            bps_view: (key.unit() == Unit::Bps).then_some(BpsView::LiveCount {
                instances: broker.broker_count.max(1),
            }),
            overridden,
        });
    }
    out
}

/// How a list filter matches one entity component.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ComponentMatch {
    /// Exactly this name.
    Exact(String),
    /// The default.
    Default,
    /// Any name starting with this prefix (never the default).
    Prefix(String),
    /// Any name or the default, as long as the component is present.
    Any,
}

impl ComponentMatch {
    fn matches(&self, name: &EntityName) -> bool {
        match (self, name) {
            (ComponentMatch::Any, _) => true,
            (ComponentMatch::Default, EntityName::Default) => true,
            (ComponentMatch::Exact(want), EntityName::Named(n)) => n.as_str() == want,
            (ComponentMatch::Prefix(p), EntityName::Named(n)) => n.as_str().starts_with(p.as_str()),
            _ => false,
        }
    }
}

/// Which configured entities to list.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListFilter {
    /// Per entity type, how its component must match. A type not mentioned is a wildcard.
    pub components: Vec<(EntityType, ComponentMatch)>,
    /// Require the entity to have exactly the mentioned types.
    pub strict: bool,
}

impl ListFilter {
    /// A filter that matches every entity.
    pub fn all() -> ListFilter {
        ListFilter::default()
    }

    /// Adds a component match.
    pub fn with(mut self, ty: EntityType, m: ComponentMatch) -> ListFilter {
        self.components.push((ty, m));
        self
    }

    /// Requires exactly the mentioned types.
    pub fn strict(mut self) -> ListFilter {
        self.strict = true;
        self
    }

    /// Whether `entity` passes the filter.
    pub fn matches(&self, entity: &Entity) -> bool {
        let mentioned = |ty| self.components.iter().any(|(t, _)| *t == ty);
        let all_match = self.components.iter().all(|(ty, m)| {
            entity
                .components()
                .find(|(t, _)| t == ty)
                .is_some_and(|(_, name)| m.matches(name))
        });
        all_match && (!self.strict || entity.components().all(|(t, _)| mentioned(t)))
    }
}

/// One listed entity and its configured entries, in key order.
#[derive(Clone, Debug, PartialEq)]
pub struct ListedEntity {
    /// The entity.
    pub entity: Entity,
    /// Its configured `(key, value)` pairs.
    pub quotas: Vec<(QuotaKey, f64)>,
}

/// Calls `f` for every entity with at least one key, with its node and slot.
pub(crate) fn for_each_entity(state: &State, mut f: impl FnMut(Entity, &NodeQuotas, usize)) {
    use state::{CLIENT, DEFAULT_USER_CLIENT, ONLY, USER, USER_DEFAULT_CLIENT};
    let mut emit = |entity: Entity, q: &NodeQuotas, slot: usize| {
        if q.mask(slot) != 0 {
            f(entity, q, slot);
        }
    };
    let named = |n: &Name| EntityName::Named(n.clone());
    for (u, node) in state.users.iter() {
        emit(Entity::User(named(u)), &node.quotas, USER);
        emit(
            Entity::UserClient(named(u), EntityName::Default),
            &node.quotas,
            USER_DEFAULT_CLIENT,
        );
    }
    for ((u, c), q) in state.pairs.iter() {
        emit(Entity::UserClient(named(u), named(c)), q, ONLY);
    }
    let d = || EntityName::Default;
    emit(Entity::User(d()), &state.default_user, USER);
    emit(
        Entity::UserClient(d(), d()),
        &state.default_user,
        USER_DEFAULT_CLIENT,
    );
    for (c, q) in state.clients.iter() {
        emit(Entity::UserClient(d(), named(c)), q, DEFAULT_USER_CLIENT);
        emit(Entity::ClientId(named(c)), q, CLIENT);
    }
    emit(Entity::ClientId(d()), &state.default_client, ONLY);
    for (ip, q) in state.ips.iter() {
        emit(Entity::Ip(named(ip)), q, ONLY);
    }
    emit(Entity::Ip(d()), &state.default_ip, ONLY);
}

/// Lists the configured entities that pass `filter`, sorted (user before client-id, named before
/// default, names in byte order).
pub(crate) fn list(state: &State, filter: &ListFilter) -> Vec<ListedEntity> {
    let mut out = Vec::new();
    for_each_entity(state, |entity, q, slot| {
        if filter.matches(&entity) {
            out.push(ListedEntity {
                entity,
                quotas: q.entries(slot).collect(),
            });
        }
    });
    out.sort_by(|a, b| a.entity.cmp(&b.entity));
    out
}
