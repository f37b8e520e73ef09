//! A deliberately naive model of the engine: a flat list of configured entries, resolved, described and
//! listed by linear scans straight from `docs/semantics.md`'s tables.
//!
//! Written to be obviously correct, not fast. It depends only on `kquota`'s public data types and std,
//! so the fuzz crate can include it with `#[path = "../../tests/it/oracle.rs"] mod oracle;`. It never
//! calls the engine's own resolution, validation or filtering code.

#![allow(dead_code)]

use std::net::IpAddr;

use kquota::{
    Alteration, BpsView, BrokerLimit, BrokerView, ComponentMatch, DescribedQuota, Entity,
    EntityName, EntityPart, EntityType, Level, ListFilter, ListedEntity, Overridden, Quota,
    QuotaKey, SubQuotaPolicy,
};

/// Every accepted key spelling, written out by hand from `docs/semantics.md`'s key table (Keys and
/// units).
pub(crate) const KEY_SPELLINGS: [(&str, QuotaKey); 14] = [
    ("consumer_byte_rate", QuotaKey::CONSUMER_BROKER_BPS),
    (
        "consumer_byte_rate:broker_bps",
        QuotaKey::CONSUMER_BROKER_BPS,
    ),
    ("consumer_byte_rate:bps", QuotaKey::CONSUMER_BPS),
    ("consumer_byte_rate:shares", QuotaKey::CONSUMER_SHARES),
    ("producer_byte_rate", QuotaKey::PRODUCER_BROKER_BPS),
    (
        "producer_byte_rate:broker_bps",
        QuotaKey::PRODUCER_BROKER_BPS,
    ),
    ("producer_byte_rate:bps", QuotaKey::PRODUCER_BPS),
    ("producer_byte_rate:shares", QuotaKey::PRODUCER_SHARES),
    ("request_percentage", QuotaKey::REQUEST_PERCENTAGE),
    ("request_percentage:percent", QuotaKey::REQUEST_PERCENTAGE),
    (
        "controller_mutation_rate",
        QuotaKey::CONTROLLER_MUTATION_RATE,
    ),
    (
        "controller_mutation_rate:mutations_per_sec",
        QuotaKey::CONTROLLER_MUTATION_RATE,
    ),
    (
        "connection_creation_rate",
        QuotaKey::CONNECTION_CREATION_RATE,
    ),
    (
        "connection_creation_rate:connections_per_sec",
        QuotaKey::CONNECTION_CREATION_RATE,
    ),
];

/// The eight keys of user / client-id entities.
pub(crate) const CLIENT_KEYS: [QuotaKey; 8] = [
    QuotaKey::CONSUMER_BPS,
    QuotaKey::CONSUMER_BROKER_BPS,
    QuotaKey::CONSUMER_SHARES,
    QuotaKey::CONTROLLER_MUTATION_RATE,
    QuotaKey::PRODUCER_BPS,
    QuotaKey::PRODUCER_BROKER_BPS,
    QuotaKey::PRODUCER_SHARES,
    QuotaKey::REQUEST_PERCENTAGE,
];

/// The keys whose user totals bound sub-quotas: byte rates in `broker_bps` or `bps`.
pub(crate) const RATE_KEYS: [QuotaKey; 4] = [
    QuotaKey::CONSUMER_BPS,
    QuotaKey::CONSUMER_BROKER_BPS,
    QuotaKey::PRODUCER_BPS,
    QuotaKey::PRODUCER_BROKER_BPS,
];

fn named(name: &str) -> EntityName {
    EntityName::named(name).expect("callers pass non-empty names")
}

/// The naive model.
#[derive(Clone, Debug)]
pub(crate) struct Oracle {
    /// The sub-quota policy the modelled engine was built with.
    pub(crate) policy: SubQuotaPolicy,
    /// What the modelled engine knows of the cluster (for broker limits in describe).
    pub(crate) broker: BrokerView,
    /// Every configured entry, in no particular order, at most one per (entity, key).
    pub(crate) entries: Vec<(Entity, QuotaKey, f64)>,
}

impl Oracle {
    /// An empty model.
    pub(crate) fn new(policy: SubQuotaPolicy, broker: BrokerView) -> Oracle {
        Oracle {
            policy,
            broker,
            entries: Vec::new(),
        }
    }

    // ----- storage -----

    /// The configured value of `key` on `entity`.
    pub(crate) fn get(&self, entity: &Entity, key: QuotaKey) -> Option<f64> {
        self.entries
            .iter()
            .find(|(e, k, _)| e == entity && *k == key)
            .map(|(_, _, v)| *v)
    }

    /// Sets `key` on `entity`, replacing any previous value.
    pub(crate) fn set(&mut self, entity: &Entity, key: QuotaKey, value: f64) {
        self.remove(entity, key);
        self.entries.push((entity.clone(), key, value));
    }

    /// Removes `key` from `entity`; removing a key that is not set is a no-op.
    pub(crate) fn remove(&mut self, entity: &Entity, key: QuotaKey) {
        self.entries.retain(|(e, k, _)| !(e == entity && *k == key));
    }

    /// Applies one entity's ops in order.
    pub(crate) fn apply(&mut self, entity: &Entity, ops: &[(QuotaKey, Option<f64>)]) {
        for (key, value) in ops {
            match value {
                Some(v) => self.set(entity, *key, *v),
                None => self.remove(entity, *key),
            }
        }
    }

    /// A copy with `changes` applied.
    pub(crate) fn with(&self, changes: &[Change]) -> Oracle {
        let mut next = self.clone();
        for (entity, ops) in changes {
            next.apply(entity, ops);
        }
        next
    }

    // ----- resolution -----

    /// The eight levels of `docs/semantics.md`'s Resolution table for a connection, most specific
    /// first, each with the entity it stands for, or `None` where the connection has no such
    /// entity.
    ///
    /// `user`/`client`: `None` is "a name with no entry of its own"; an empty client-id matches only
    /// levels 3 and 6; an empty user matches only levels 7 and 8.
    pub(crate) fn levels(user: Option<&str>, client: Option<&str>) -> [(Level, Option<Entity>); 8] {
        let has_user = user != Some("");
        let u = user.filter(|u| !u.is_empty()).map(named);
        let has_client = client != Some("");
        let c = client.filter(|c| !c.is_empty()).map(named);
        let d = || EntityName::Default;
        let both = match (&u, &c) {
            (Some(u), Some(c)) => Some(Entity::UserClient(u.clone(), c.clone())),
            _ => None,
        };
        [
            (Level::UserClient, both),
            (
                Level::UserDefaultClient,
                u.clone()
                    .filter(|_| has_client)
                    .map(|u| Entity::UserClient(u, d())),
            ),
            (Level::User, u.clone().map(Entity::User)),
            (
                Level::DefaultUserClient,
                c.clone()
                    .filter(|_| has_user)
                    .map(|c| Entity::UserClient(d(), c)),
            ),
            (
                Level::DefaultUserDefaultClient,
                (has_user && has_client).then(|| Entity::UserClient(d(), d())),
            ),
            (Level::DefaultUser, has_user.then(|| Entity::User(d()))),
            (Level::ClientId, c.map(Entity::ClientId)),
            (
                Level::DefaultClientId,
                has_client.then(|| Entity::ClientId(d())),
            ),
        ]
    }

    /// Every level that configures `key` for the connection, most specific first.
    pub(crate) fn sources(
        &self,
        user: Option<&str>,
        client: Option<&str>,
        key: QuotaKey,
    ) -> Vec<(Level, Entity, f64)> {
        let mut out = Vec::new();
        for (level, entity) in Self::levels(user, client) {
            let Some(entity) = entity else { continue };
            if let Some(v) = self.get(&entity, key) {
                out.push((level, entity, v));
            }
        }
        out
    }

    /// The user node whose total a level-3 or level-6 quota is.
    fn node_of(level: Level, user: Option<&str>) -> Option<EntityName> {
        match level {
            Level::User => Some(named(user.expect("level 3 needs a user"))),
            Level::DefaultUser => Some(EntityName::Default),
            _ => None,
        }
    }

    /// The named sub-quotas `{user=node, client-id=c}` of `key`.
    pub(crate) fn sub_quotas(&self, node: &EntityName, key: QuotaKey) -> Vec<f64> {
        self.entries
            .iter()
            .filter(|(e, k, _)| {
                *k == key && matches!(e, Entity::UserClient(u, EntityName::Named(_)) if u == node)
            })
            .map(|(_, _, v)| *v)
            .collect()
    }

    /// The limit a configured value gives under the policy: under Kip55 a rate key resolved at level 3 or
    /// 6 gives the total minus that user node's named sub-quotas, floored at 0.
    fn effective(&self, level: Level, user: Option<&str>, key: QuotaKey, value: f64) -> f64 {
        if self.policy != SubQuotaPolicy::Kip55 || !RATE_KEYS.contains(&key) {
            return value;
        }
        match Self::node_of(level, user) {
            Some(node) => remainder(value, &self.sub_quotas(&node, key)),
            None => value,
        }
    }

    /// What `Engine::resolve(user, client)` should return, as the effective quotas in key order.
    pub(crate) fn resolve(&self, user: &str, client: &str) -> Vec<Quota> {
        let mut out = Vec::new();
        for key in CLIENT_KEYS {
            if let Some((level, _, value)) = self
                .sources(Some(user), Some(client), key)
                .into_iter()
                .next()
            {
                out.push(Quota {
                    key,
                    limit: self.effective(level, Some(user), key, value),
                    level,
                });
            }
        }
        out
    }

    /// What `Engine::describe(user, client, include_overrides)` should return.
    pub(crate) fn describe(
        &self,
        user: Option<&str>,
        client: Option<&str>,
        include_overrides: bool,
    ) -> Vec<DescribedQuota> {
        let mut out = Vec::new();
        for key in CLIENT_KEYS {
            let mut sources = self.sources(user, client, key).into_iter();
            let Some((level, entity, value)) = sources.next() else {
                continue;
            };
            let effective = self.effective(level, user, key, value);
            let overridden = if include_overrides {
                sources
                    .map(|(level, entity, value)| Overridden {
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
                broker_limit: self.broker_limit(key, effective),
                bps_view: [QuotaKey::PRODUCER_BPS, QuotaKey::CONSUMER_BPS]
                    .contains(&key)
                    .then_some(BpsView::LiveCount {
                        instances: self.broker.broker_count.max(1),
                    }),
                overridden,
            });
        }
        out
    }

    /// `docs/semantics.md`'s unit conversion: `bps` divides by the broker count, `shares` are a
    /// weight of the type's capacity, everything else is enforced as is.
    fn broker_limit(&self, key: QuotaKey, effective: f64) -> BrokerLimit {
        let producer = [
            QuotaKey::PRODUCER_BPS,
            QuotaKey::PRODUCER_BROKER_BPS,
            QuotaKey::PRODUCER_SHARES,
        ]
        .contains(&key);
        if key == QuotaKey::PRODUCER_BPS || key == QuotaKey::CONSUMER_BPS {
            BrokerLimit::Rate(effective / f64::from(self.broker.broker_count.max(1)))
        } else if key == QuotaKey::PRODUCER_SHARES || key == QuotaKey::CONSUMER_SHARES {
            BrokerLimit::Share {
                weight: effective,
                capacity: if producer {
                    self.broker.producer_capacity
                } else {
                    self.broker.consumer_capacity
                },
            }
        } else {
            BrokerLimit::Rate(effective)
        }
    }

    /// What `Engine::resolve_ip(ip)` should return: `{ip=x}`, then `{ip=<default>}`, as
    /// `(limit, from_default)`.
    pub(crate) fn resolve_ip(&self, ip: &str) -> Option<(f64, bool)> {
        let key = QuotaKey::CONNECTION_CREATION_RATE;
        let own = (!ip.is_empty())
            .then(|| self.get(&Entity::Ip(named(ip)), key))
            .flatten();
        match own {
            Some(v) => Some((v, false)),
            None => self
                .get(&Entity::Ip(EntityName::Default), key)
                .map(|v| (v, true)),
        }
    }

    // ----- sub-quota rules -----

    /// Every breach of the Kip55 invariants, in words: for every user node U and rate key k with a total
    /// T at `{user=U}`, Σ named sub-quotas ≤ T and `{user=U, client-id=<default>}` ≤ T.
    pub(crate) fn violations(&self) -> Vec<String> {
        let mut nodes: Vec<EntityName> = Vec::new();
        for (e, _, _) in &self.entries {
            if let Some(u) = e.user() {
                if !nodes.contains(u) {
                    nodes.push(u.clone());
                }
            }
        }
        let mut out = Vec::new();
        for node in &nodes {
            for key in RATE_KEYS {
                let Some(total) = self.get(&Entity::User(node.clone()), key) else {
                    continue;
                };
                let subs = self.sub_quotas(node, key);
                if !within(total, &subs) {
                    out.push(format!(
                        "named sub-quotas {subs:?} of {node} for {key} exceed the total {total}"
                    ));
                }
                let default_client = Entity::UserClient(node.clone(), EntityName::Default);
                if let Some(d) = self.get(&default_client, key) {
                    if d > total {
                        out.push(format!(
                            "{default_client} has {d} for {key}, above the total {total}"
                        ));
                    }
                }
            }
        }
        out
    }

    // ----- listing -----

    /// What `Engine::list(filter)` should return.
    pub(crate) fn list(&self, filter: &ListFilter) -> Vec<ListedEntity> {
        let mut out: Vec<ListedEntity> = Vec::new();
        for (entity, key, value) in &self.entries {
            if !filter_matches(filter, entity) {
                continue;
            }
            match out.iter_mut().find(|l| &l.entity == entity) {
                Some(listed) => listed.quotas.push((*key, *value)),
                None => out.push(ListedEntity {
                    entity: entity.clone(),
                    quotas: vec![(*key, *value)],
                }),
            }
        }
        for listed in &mut out {
            listed.quotas.sort_by_key(|(k, _)| k.index());
        }
        out.sort_by_key(|l| list_order(&l.entity));
        out
    }
}

/// The listing order: by user, then client-id, then ip; a name (in byte order) before the default, the
/// default before an absent component.
fn list_order(entity: &Entity) -> [(u8, String); 3] {
    let part = |name: Option<&EntityName>| match name {
        Some(EntityName::Named(n)) => (0, n.as_str().to_owned()),
        Some(EntityName::Default) => (1, String::new()),
        None => (2, String::new()),
    };
    let (mut user, mut client, mut ip) = (None, None, None);
    match entity {
        Entity::User(u) => user = Some(u),
        Entity::UserClient(u, c) => {
            user = Some(u);
            client = Some(c);
        }
        Entity::ClientId(c) => client = Some(c),
        Entity::Ip(x) => ip = Some(x),
    }
    [part(user), part(client), part(ip)]
}

/// The components of an entity as (type, name) pairs, written out per shape.
fn components(entity: &Entity) -> Vec<(EntityType, &EntityName)> {
    match entity {
        Entity::User(u) => vec![(EntityType::User, u)],
        Entity::UserClient(u, c) => vec![(EntityType::User, u), (EntityType::ClientId, c)],
        Entity::ClientId(c) => vec![(EntityType::ClientId, c)],
        Entity::Ip(x) => vec![(EntityType::Ip, x)],
    }
}

/// `docs/semantics.md`'s filter (Listing): every mentioned type must be present and match;
/// unmentioned types are wildcards unless `strict`, which requires the entity to have exactly the
/// mentioned types.
pub(crate) fn filter_matches(filter: &ListFilter, entity: &Entity) -> bool {
    let parts = components(entity);
    for (ty, m) in &filter.components {
        let Some((_, name)) = parts.iter().find(|(t, _)| t == ty) else {
            return false;
        };
        let ok = match (m, name) {
            (ComponentMatch::Any, _) => true,
            (ComponentMatch::Default, EntityName::Default) => true,
            (ComponentMatch::Exact(want), EntityName::Named(n)) => n.as_str() == want,
            (ComponentMatch::Prefix(p), EntityName::Named(n)) => n.as_str().starts_with(p.as_str()),
            _ => false,
        };
        if !ok {
            return false;
        }
    }
    if filter.strict {
        for (t, _) in &parts {
            if !filter.components.iter().any(|(ty, _)| ty == t) {
                return false;
            }
        }
    }
    true
}

// ----- arithmetic -----

/// `value` as an exact integer, if it is a whole number ≥ 0 that fits.
fn whole(value: f64) -> Option<u128> {
    (value >= 0.0 && value.fract() == 0.0 && value < 2f64.powi(127)).then_some(value as u128)
}

/// The exact sum of whole numbers, or `None` if one is not whole.
fn exact_sum(values: &[f64]) -> Option<u128> {
    values.iter().map(|v| whole(*v)).sum()
}

/// total − Σ subs, floored at 0, computed exactly and rounded once. Byte rates are whole numbers, except
/// the tiny fractions (≤ 1e-6) that Kafka's integer test lets through; those are summed in floating
/// point, which is close enough to tell a fraction from its truncation.
pub(crate) fn remainder(total: f64, subs: &[f64]) -> f64 {
    match (whole(total), exact_sum(subs)) {
        (Some(t), Some(s)) => {
            if s >= t {
                0.0
            } else {
                (t - s) as f64
            }
        }
        _ => (total - subs.iter().sum::<f64>()).max(0.0),
    }
}

/// Σ subs ≤ total, exactly.
pub(crate) fn within(total: f64, subs: &[f64]) -> bool {
    match (whole(total), exact_sum(subs)) {
        (Some(t), Some(s)) => s <= t,
        _ => subs.iter().sum::<f64>() <= total,
    }
}

// ----- validation (`docs/semantics.md`'s Alterations section, with the Kafka quirks it keeps) ---

/// One alteration as the oracle understands it: the entity and its ops with parsed keys.
pub(crate) type Change = (Entity, Vec<(QuotaKey, Option<f64>)>);

/// The entity a request's raw parts name, or why it is invalid.
pub(crate) fn parse_entity(parts: &[EntityPart]) -> Result<Entity, String> {
    if parts.is_empty() {
        return Err("empty entity".into());
    }
    let (mut user, mut client, mut ip) = (None, None, None);
    for part in parts {
        let slot = match part.entity_type.as_str() {
            "user" => &mut user,
            "client-id" => &mut client,
            "ip" => &mut ip,
            other => return Err(format!("unknown entity type {other:?}")),
        };
        if slot.is_some() {
            return Err(format!("{} given twice", part.entity_type));
        }
        *slot = Some(match part.name.as_deref() {
            None => EntityName::Default,
            Some("") => return Err("empty name".into()),
            Some(n) => named(n),
        });
    }
    match (user, client, ip) {
        (Some(u), None, None) => Ok(Entity::User(u)),
        (Some(u), Some(c), None) => Ok(Entity::UserClient(u, c)),
        (None, Some(c), None) => Ok(Entity::ClientId(c)),
        (None, None, Some(EntityName::Default)) => Ok(Entity::Ip(EntityName::Default)),
        (None, None, Some(EntityName::Named(x))) => {
            if x.as_str().parse::<IpAddr>().is_ok() {
                Ok(Entity::Ip(EntityName::Named(x)))
            } else {
                Err(format!("{x:?} is not an IP address"))
            }
        }
        _ => Err("ip combined with user or client-id".into()),
    }
}

/// The key a spelling names, whatever the entity.
pub(crate) fn key_named(text: &str) -> Option<QuotaKey> {
    KEY_SPELLINGS
        .iter()
        .find(|(s, _)| *s == text)
        .map(|(_, k)| *k)
}

/// The key a spelling names, if it may be set on `entity`.
pub(crate) fn parse_key(text: &str, entity: &Entity) -> Result<QuotaKey, String> {
    let key = key_named(text).ok_or_else(|| format!("unknown key {text:?}"))?;
    let ip_key = key == QuotaKey::CONNECTION_CREATION_RATE;
    if ip_key != matches!(entity, Entity::Ip(_)) {
        return Err(format!("{text} is not allowed on {entity}"));
    }
    Ok(key)
}

/// Whether `value` may be set for `key`: finite and > 0; byte rates and connection rates at most 2^63
/// and 2^31 − 1, and whole numbers (docs/semantics.md: stricter than Kafka's `|value % 1| <= 1e-6`).
pub(crate) fn check_value(key: QuotaKey, value: f64) -> Result<(), String> {
    if !(value.is_finite() && value > 0.0) {
        return Err(format!("{value} is not finite and > 0"));
    }
    let bound = match key {
        QuotaKey::REQUEST_PERCENTAGE | QuotaKey::CONTROLLER_MUTATION_RATE => return Ok(()),
        QuotaKey::CONNECTION_CREATION_RATE => 2_147_483_647.0,
        _ => 2f64.powi(63),
    };
    if value > bound {
        return Err(format!("{value} is above {bound}"));
    }
    if value.fract() != 0.0 {
        return Err(format!("{value} is fractional"));
    }
    Ok(())
}

/// One alteration checked on its own: its entity and parsed ops, or why it is INVALID_REQUEST.
pub(crate) fn check_alteration(alteration: &Alteration) -> Result<Change, String> {
    // A key named twice (the same text, or two spellings of one key) fails the entity, removals included.
    for (i, a) in alteration.ops.iter().enumerate() {
        for b in &alteration.ops[..i] {
            let same_key = key_named(&a.key).is_some() && key_named(&a.key) == key_named(&b.key);
            if a.key == b.key || same_key {
                return Err(format!("key {} named twice", a.key));
            }
        }
    }
    let entity = parse_entity(&alteration.entity)?;
    let mut ops: Vec<(QuotaKey, Option<f64>)> = Vec::new();
    for op in &alteration.ops {
        match op.value {
            // Removing a key that is not set, or cannot be, is a no-op.
            None => {
                if let Some(key) = key_named(&op.key) {
                    ops.push((key, None));
                }
            }
            Some(v) => {
                let key = parse_key(&op.key, &entity)?;
                check_value(key, v)?;
                ops.push((key, Some(v)));
            }
        }
    }
    Ok((entity, ops))
}

/// Every alteration of a batch checked: the same entity twice makes every copy invalid.
pub(crate) fn check_batch(batch: &[Alteration]) -> Vec<Result<Change, String>> {
    let mut out: Vec<Result<Change, String>> = batch.iter().map(check_alteration).collect();
    for i in 0..batch.len() {
        let Ok(mine) = parse_entity(&batch[i].entity) else {
            continue;
        };
        let repeated = (0..batch.len())
            .any(|j| j != i && parse_entity(&batch[j].entity).is_ok_and(|other| other == mine));
        if repeated {
            out[i] = Err(format!("{mine} appears twice in the batch"));
        }
    }
    out
}
