//! Alterations: batches of per-entity set / remove ops, validated as Apache Kafka's controller does,
//! plus the sub-quota rules of the `kip55` policy.

use std::collections::{HashMap, HashSet};

/// A map with the fast hasher: batches are validated under the writer lock.
type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;
use std::net::IpAddr;

use crate::entity::{Entity, EntityName, EntityPart, EntityType, Name};
use crate::error::{ApiError, ParseError};
use crate::java::{java_entity_string, java_map_order};
use crate::key::{format_value, QuotaKey, ValueKind};
use crate::policy::SubQuotaPolicy;
use crate::state::{self, KeyMask, NodeQuotas, State, UserNode};

/// One entity's complete configuration after a commit, as handed to a durable store.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EntityChange<'a> {
    /// The entity.
    pub entity: &'a Entity,
    /// Its keys and values after the commit, in key order; empty when the entity is removed.
    pub quotas: &'a [(QuotaKey, f64)],
}

/// One op on an entity: set a key to a value, or remove it.
#[derive(Clone, Debug, PartialEq)]
pub struct Op {
    /// The key as written: `type` or `type:unit`.
    pub key: String,
    /// The value to set, or `None` to remove the key.
    pub value: Option<f64>,
}

/// The ops for one entity.
#[derive(Clone, Debug, PartialEq)]
pub struct Alteration {
    /// The entity's components as given.
    pub entity: Vec<EntityPart>,
    /// The ops, applied in order.
    pub ops: Vec<Op>,
}

impl Alteration {
    /// An alteration of `entity` with no ops yet.
    pub fn new(entity: &Entity) -> Alteration {
        Alteration {
            entity: entity
                .components()
                .map(|(ty, name)| EntityPart {
                    entity_type: ty.as_str().to_owned(),
                    name: name.as_option().map(str::to_owned),
                })
                .collect(),
            ops: Vec::new(),
        }
    }

    /// An alteration of an entity given as raw `(type, name)` parts, as they arrive on the wire.
    pub fn raw<T: Into<String>, N: Into<String>>(
        parts: impl IntoIterator<Item = (T, Option<N>)>,
    ) -> Alteration {
        Alteration {
            entity: parts
                .into_iter()
                .map(|(t, n)| EntityPart {
                    entity_type: t.into(),
                    name: n.map(Into::into),
                })
                .collect(),
            ops: Vec::new(),
        }
    }

    /// Adds an op that sets `key` to `value`.
    #[must_use = "set returns the alteration with the op added"]
    pub fn set(mut self, key: impl ToString, value: f64) -> Alteration {
        self.ops.push(Op {
            key: key.to_string(),
            value: Some(value),
        });
        self
    }

    /// Adds an op that removes `key`.
    #[must_use = "remove returns the alteration with the op added"]
    pub fn remove(mut self, key: impl ToString) -> Alteration {
        self.ops.push(Op {
            key: key.to_string(),
            value: None,
        });
        self
    }
}

/// The outcome for one alteration of a batch.
#[derive(Clone, Debug, PartialEq)]
pub struct AlterResult {
    /// The entity as the alteration named it.
    pub entity: Vec<EntityPart>,
    /// `None` on success.
    pub error: Option<ApiError>,
}

/// A validated change to one entity: its slot's complete new contents.
#[derive(Clone, Debug)]
pub(crate) struct Change {
    pub(crate) entity: Entity,
    pub(crate) old: Vec<(QuotaKey, f64)>,
    pub(crate) new: Vec<(QuotaKey, f64)>,
}

/// What a batch would do: one result per alteration, and the changes of the valid ones.
pub(crate) struct Plan {
    pub(crate) results: Vec<AlterResult>,
    /// Only entities whose contents actually change.
    pub(crate) changes: Vec<Change>,
}

/// How much of Kafka's validation a batch gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Checks {
    /// Every rule: Kafka's controller's, kquota's stricter value rules, and the sub-quota rules.
    Full,
    /// Changes an authority has already accepted (a broker mirroring its controller): the entity and
    /// the key are checked, a value only for being above 0, and no sub-quota rule applies.
    Mirror,
}

/// Validates `batch` against `state` without changing it.
pub(crate) fn plan(
    state: &State,
    batch: &[Alteration],
    policy: SubQuotaPolicy,
    checks: Checks,
) -> Plan {
    let mut errors: Vec<Option<ApiError>> = vec![None; batch.len()];
    // Every copy of a repeated entity is refused (Kafka keeps the first copy's changes but reports an
    // error for it; we apply nothing that we report as failed).
    let mut seen: FastMap<Vec<(&str, Option<&str>)>, usize> =
        FastMap::with_capacity_and_hasher(batch.len(), Default::default());
    for (i, alteration) in batch.iter().enumerate() {
        let mut key: Vec<(&str, Option<&str>)> = alteration
            .entity
            .iter()
            .map(|p| (p.entity_type.as_str(), p.name.as_deref()))
            .collect();
        key.sort_unstable();
        if let Some(&first) = seen.get(&key) {
            let error = duplicate_entity(&alteration.entity);
            errors[first] = Some(error.clone());
            errors[i] = Some(error);
        } else {
            seen.insert(key, i);
        }
    }
    let mut candidates: Vec<(usize, Change)> = Vec::new();
    for (i, alteration) in batch.iter().enumerate() {
        if errors[i].is_some() {
            continue;
        }
        match validate(state, alteration, checks) {
            Ok(change) => candidates.push((i, change)),
            Err(e) => errors[i] = Some(e),
        }
    }
    if policy == SubQuotaPolicy::Kip55 && checks == Checks::Full {
        enforce_sub_quotas(state, &mut candidates, &mut errors);
    }
    let results = batch
        .iter()
        .zip(errors)
        .map(|(a, error)| AlterResult {
            entity: a.entity.clone(),
            error,
        })
        .collect();
    let changes = candidates
        .into_iter()
        .map(|(_, c)| c)
        .filter(|c| c.old != c.new)
        .collect();
    Plan { results, changes }
}

/// Kafka's answer to an entity named twice, or to a key named twice within one entity.
fn duplicate_entity(parts: &[EntityPart]) -> ApiError {
    ApiError::invalid_request(format!(
        "Ignoring duplicate entity {}",
        java_entity_string(parts, parts.len())
    ))
}

/// Checks one alteration in Kafka's order and computes its change.
fn validate(state: &State, alteration: &Alteration, checks: Checks) -> Result<Change, ApiError> {
    // Kafka first folds the ops into a map; a key named twice fails the whole entity.
    let mut normalized: Vec<Result<QuotaKey, &str>> = Vec::with_capacity(alteration.ops.len());
    let mut seen_text: HashSet<&str, foldhash::fast::RandomState> = HashSet::default();
    let mut seen_keys: KeyMask = 0;
    for (i, op) in alteration.ops.iter().enumerate() {
        let key = op.key.parse::<QuotaKey>().map_err(|_| op.key.as_str());
        let repeated_key = matches!(key, Ok(k) if seen_keys & (1 << k.index()) != 0);
        // Few ops is the rule: a scan beats hashing; many ops must not be quadratic.
        let repeated_text = if alteration.ops.len() <= 16 {
            alteration.ops[..i].iter().any(|o| o.key == op.key)
        } else {
            !seen_text.insert(op.key.as_str())
        };
        if repeated_text || repeated_key {
            return Err(duplicate_entity(&alteration.entity));
        }
        if let Ok(k) = key {
            seen_keys |= 1 << k.index();
        }
        normalized.push(key);
    }
    let entity = validate_entity(&alteration.entity)?;
    let op_keys: Vec<&str> = alteration.ops.iter().map(|o| o.key.as_str()).collect();
    let mut ops: Vec<(QuotaKey, Option<f64>)> = Vec::with_capacity(alteration.ops.len());
    for i in java_map_order(&op_keys, op_keys.len()) {
        let op = &alteration.ops[i];
        match op.value {
            // Removing a key that cannot be set is a no-op, as in Kafka.
            None => {
                if let Ok(key) = normalized[i] {
                    ops.push((key, None));
                }
            }
            Some(value) => {
                let key = parse_key(&op.key, &entity)?;
                match checks {
                    Checks::Full => validate_value(key, &op.key, value)?,
                    Checks::Mirror => kafka_value_check(key, &op.key, value)?,
                }
                ops.push((key, Some(value)));
            }
        }
    }
    let old = current(state, &entity);
    let mut new = old.clone();
    for (key, value) in ops {
        new.retain(|(k, _)| *k != key);
        if let Some(v) = value {
            new.push((key, v));
        }
    }
    new.sort_by_key(|(k, _)| *k);
    Ok(Change { entity, old, new })
}

/// Turns raw parts into an entity, with Kafka's messages for every bad shape, checked in Kafka's order.
fn validate_entity(parts: &[EntityPart]) -> Result<Entity, ApiError> {
    if parts.is_empty() {
        return Err(ApiError::invalid_request(
            "Invalid empty client quota entity",
        ));
    }
    let mut typed: Vec<(EntityType, EntityName)> = Vec::with_capacity(parts.len());
    let types: Vec<&str> = parts.iter().map(|p| p.entity_type.as_str()).collect();
    let mut seen: HashSet<&str> = HashSet::with_capacity(types.len());
    if let Some(dup) = types.iter().enumerate().find(|(_, t)| !seen.insert(t)) {
        // Kafka's wire parsing folds repeated types into a map before this check can see them; a library
        // caller gets Kafka's message for the case.
        return Err(ApiError::invalid_request(format!(
            "Invalid client quota entity, duplicate entity entry {}",
            dup.1
        )));
    }
    for i in java_map_order(&types, types.len()) {
        let part = &parts[i];
        let ty: EntityType = part.entity_type.parse().map_err(|_| {
            ApiError::invalid_request(format!(
                "Unhandled client quota entity type: {}",
                part.entity_type
            ))
        })?;
        let name = match part.name.as_deref() {
            None => EntityName::Default,
            Some(n) => EntityName::named(n).map_err(|_: ParseError| {
                ApiError::invalid_request(format!("Empty {} not supported", part.entity_type))
            })?,
        };
        typed.push((ty, name));
    }
    let has = |t| typed.iter().any(|(ty, _)| *ty == t);
    if has(EntityType::Ip) && typed.len() > 1 {
        // Kafka's message, missing space included.
        return Err(ApiError::invalid_request(
            "Invalid quota entity combination, IP entity shouldnot be combined with User or ClientId",
        ));
    }
    if let Some((_, EntityName::Named(ip))) = typed.iter().find(|(t, _)| *t == EntityType::Ip) {
        if ip.as_str().parse::<IpAddr>().is_err() {
            return Err(ApiError::invalid_request(format!(
                "{} is not a valid IP or resolvable host.",
                ip.as_str()
            )));
        }
    }
    Ok(Entity::from_parts(&typed).expect("shape checked above"))
}

/// Parses a key and checks that it applies to the entity.
fn parse_key(text: &str, entity: &Entity) -> Result<QuotaKey, ApiError> {
    let invalid = || ApiError::invalid_request(format!("Invalid configuration key {text}"));
    let key = match text.parse::<QuotaKey>() {
        Ok(key) => key,
        Err(ParseError::UnknownUnit { quota_type, unit }) => {
            let ty: crate::key::QuotaType = quota_type.parse().map_err(|_| invalid())?;
            let units: Vec<&str> = QuotaKey::all()
                .filter(|k| k.quota_type() == ty)
                .map(|k| k.unit().as_str())
                .collect();
            return Err(ApiError::invalid_request(format!(
                "Invalid configuration key {text}: unknown unit '{unit}' for {quota_type} (expected {})",
                units.join(", ")
            )));
        }
        Err(_) => return Err(invalid()),
    };
    if key.is_ip_key() != entity.is_ip() {
        return Err(invalid());
    }
    Ok(key)
}

/// Checks a value in Kafka's order, then rejects what Kafka lets through but cannot be a rate.
fn validate_value(key: QuotaKey, text: &str, value: f64) -> Result<(), ApiError> {
    kafka_value_check(key, text, value)?;
    let whole = key.quota_type().value_kind() != ValueKind::Double;
    if !value.is_finite() {
        return Err(ApiError::invalid_request(format!(
            "Quota {text} must be a finite number"
        )));
    }
    // Kafka's test lets 5.0000001 and 1e-300 through as whole numbers; kquota refuses every fraction
    // (with Kafka's message) so that sub-quota sums and remainders are exact integer arithmetic.
    if whole && value.fract() != 0.0 {
        return Err(ApiError::invalid_request(format!(
            "{text} cannot be a fractional value."
        )));
    }
    Ok(())
}

/// Apache Kafka's controller's value checks, in its order: above 0 (NaN passes), within the type's
/// range, and a whole number by its test `abs(value % 1) <= 1e-6`.
fn kafka_value_check(key: QuotaKey, text: &str, value: f64) -> Result<(), ApiError> {
    if value <= 0.0 {
        return Err(ApiError::invalid_request(format!(
            "Quota {text} must be greater than 0"
        )));
    }
    let kind = key.quota_type().value_kind();
    let too_large = |bound: f64, name: &str| {
        (value > bound).then(|| {
            ApiError::invalid_request(format!(
                "Proposed value for {text} is too large for {name}."
            ))
        })
    };
    let fractional = || ApiError::invalid_request(format!("{text} cannot be a fractional value."));
    // Kafka's own test: `Math.abs(value % 1.0) > 1e-6`.
    let kafka_fraction = || ((value % 1.0).abs() > 1e-6).then(fractional);
    let kafka_error = match kind {
        ValueKind::Long => too_large(i64::MAX as f64, "a LONG").or_else(kafka_fraction),
        ValueKind::Int => too_large(i32::MAX as f64, "an INT").or_else(kafka_fraction),
        ValueKind::Double => None,
    };
    match kafka_error {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// The current contents of an entity's slot.
pub(crate) fn current(state: &State, entity: &Entity) -> Vec<(QuotaKey, f64)> {
    match locate(state, entity) {
        Some((q, slot)) => q.entries(slot).collect(),
        None => Vec::new(),
    }
}

/// Where an entity's quotas live in a snapshot.
fn locate<'s>(state: &'s State, entity: &Entity) -> Option<(&'s NodeQuotas, usize)> {
    use state::{CLIENT, DEFAULT_USER_CLIENT, ONLY, USER, USER_DEFAULT_CLIENT};
    use EntityName::{Default as D, Named as N};
    match entity {
        Entity::User(N(u)) => state.users.get(u.as_str()).map(|n| (&n.quotas, USER)),
        Entity::UserClient(N(u), D) => state
            .users
            .get(u.as_str())
            .map(|n| (&n.quotas, USER_DEFAULT_CLIENT)),
        Entity::UserClient(N(u), N(c)) => {
            state.pairs.get(u.as_str(), c.as_str()).map(|q| (q, ONLY))
        }
        Entity::User(D) => Some((&state.default_user, USER)),
        Entity::UserClient(D, D) => Some((&state.default_user, USER_DEFAULT_CLIENT)),
        Entity::UserClient(D, N(c)) => state
            .clients
            .get(c.as_str())
            .map(|q| (q, DEFAULT_USER_CLIENT)),
        Entity::ClientId(N(c)) => state.clients.get(c.as_str()).map(|q| (q, CLIENT)),
        Entity::ClientId(D) => Some((&state.default_client, ONLY)),
        Entity::Ip(N(ip)) => state.ips.get(ip.as_str()).map(|q| (q, ONLY)),
        Entity::Ip(D) => Some((&state.default_ip, ONLY)),
    }
}

fn value_of(entries: &[(QuotaKey, f64)], key: QuotaKey) -> Option<f64> {
    entries.iter().find(|(k, _)| *k == key).map(|(_, v)| *v)
}

/// The user node an entity belongs to for the sub-quota rules, if any.
fn owner(entity: &Entity) -> Option<&EntityName> {
    match entity {
        Entity::User(u) | Entity::UserClient(u, _) => Some(u),
        _ => None,
    }
}

/// Rejects, with POLICY_VIOLATION, every alteration that takes part in breaking a sub-quota rule, until
/// the batch's accepted changes leave every touched user node within its totals. Linear in the batch:
/// candidates are grouped by the user node they belong to.
fn enforce_sub_quotas(
    state: &State,
    candidates: &mut Vec<(usize, Change)>,
    errors: &mut [Option<ApiError>],
) {
    loop {
        let mut by_owner: FastMap<&EntityName, Vec<&Change>> = FastMap::default();
        for (_, c) in candidates.iter() {
            if let Some(u) = owner(&c.entity) {
                by_owner.entry(u).or_default().push(c);
            }
        }
        let mut violations: FastMap<(EntityName, QuotaKey), String> = FastMap::default();
        for (user, changes) in &by_owner {
            for key in QuotaKey::SUB_QUOTA_KEYS {
                if changes.iter().any(|c| changes_key(c, key)) {
                    if let Some(msg) = check_group(state, changes, user, key) {
                        violations.insert(((*user).clone(), key), msg);
                    }
                }
            }
        }
        if violations.is_empty() {
            return;
        }
        candidates.retain(|(i, c)| {
            let Some(u) = owner(&c.entity) else {
                return true;
            };
            let hit = QuotaKey::SUB_QUOTA_KEYS
                .into_iter()
                .filter(|key| changes_key(c, *key))
                .find_map(|key| violations.get(&(u.clone(), key)));
            match hit {
                Some(msg) => {
                    errors[*i] = Some(ApiError::policy_violation(msg.clone()));
                    false
                }
                None => true,
            }
        });
    }
}

fn changes_key(change: &Change, key: QuotaKey) -> bool {
    value_of(&change.old, key) != value_of(&change.new, key)
}

/// Checks one (user node, key) rule after the accepted changes of that user node; returns the
/// violation's message, if any.
fn check_group(
    state: &State,
    changes: &[&Change],
    user: &EntityName,
    key: QuotaKey,
) -> Option<String> {
    let mut total = None;
    let mut total_changed = false;
    let mut default_sub = None;
    let mut default_changed = false;
    let mut delta: i128 = 0;
    for c in changes {
        match &c.entity {
            Entity::User(_) => {
                total = value_of(&c.new, key);
                total_changed = true;
            }
            Entity::UserClient(_, EntityName::Default) => {
                default_sub = value_of(&c.new, key);
                default_changed = true;
            }
            Entity::UserClient(_, EntityName::Named(_)) => {
                delta += value_of(&c.new, key).unwrap_or(0.0) as i128;
                delta -= value_of(&c.old, key).unwrap_or(0.0) as i128;
            }
            _ => {}
        }
    }
    let total_entity = Entity::User(user.clone());
    if !total_changed {
        total = current_value(state, &total_entity, key);
    }
    let total = total?;
    let s = state::sub_index(key.index()).expect("sub-quota key");
    let base_sum = match user {
        EntityName::Named(u) => state.users.get(u.as_str()).map_or(0, |n| n.sums.get()[s]),
        EntityName::Default => state.default_user_sums[s],
    };
    let sum = base_sum as i128 + delta;
    let default_entity = Entity::UserClient(user.clone(), EntityName::Default);
    if sum <= total as i128 {
        if !default_changed {
            default_sub = current_value(state, &default_entity, key);
        }
        default_sub.filter(|d| *d > total)?;
    }
    Some(sub_quota_message(
        user,
        key,
        total,
        sum.max(0) as u128,
        default_sub,
    ))
}

/// The POLICY_VIOLATION message for a broken sub-quota rule: the sum if it exceeds the total, else the
/// default client's sub-quota.
fn sub_quota_message(
    user: &EntityName,
    key: QuotaKey,
    total: f64,
    sum: u128,
    default_sub: Option<f64>,
) -> String {
    let total_entity = Entity::User(user.clone());
    // Byte rates are whole numbers up to 2^63: compare exactly.
    if sum > total as u128 {
        return format!(
            "The sub-quotas of {total_entity} for {key} would sum to {sum}, which exceeds the total {} of \
             {total_entity}",
            Num(total),
        );
    }
    format!(
        "The sub-quota of {} for {key} would be {}, which exceeds the total {} of {total_entity}",
        Entity::UserClient(user.clone(), EntityName::Default),
        Num(default_sub.unwrap_or(0.0)),
        Num(total),
    )
}

/// The value of one key of an entity in a snapshot, without copying its other keys.
pub(crate) fn current_value(state: &State, entity: &Entity, key: QuotaKey) -> Option<f64> {
    locate(state, entity).and_then(|(q, slot)| q.get(slot, key.index()))
}

/// Prints a number as quota values print.
struct Num(f64);

impl std::fmt::Display for Num {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        format_value(self.0, f)
    }
}

/// Validates and applies a whole configuration to an empty state in one pass: the bulk path for loading a
/// store at start-up. Each entity gets the checks an alteration setting its keys would get (key allowed
/// for the entity, value rules, a valid IP), and under `kip55` every user node is checked against the
/// sub-quota rules once everything is in. Nodes are assembled in memory and inserted into the tables
/// once each. Returns the first entity refused.
pub(crate) fn load(
    state: &mut State,
    entries: Vec<(Entity, Vec<(QuotaKey, f64)>)>,
    policy: SubQuotaPolicy,
) -> Result<(), (Entity, ApiError)> {
    use state::{CLIENT, DEFAULT_USER_CLIENT, ONLY, USER, USER_DEFAULT_CLIENT};
    use EntityName::{Default as D, Named as N};
    let mut users: FastMap<Name, (UserNode, state::SubSums)> =
        FastMap::with_capacity_and_hasher(entries.len(), Default::default());
    let mut pairs: Vec<(Name, Name, NodeQuotas)> = Vec::new();
    let mut clients: FastMap<Name, NodeQuotas> = FastMap::default();
    let mut ips: FastMap<Name, NodeQuotas> = FastMap::default();
    let key_texts: Vec<String> = QuotaKey::all().map(|k| k.to_string()).collect();
    let add = |sums: &mut state::SubSums, quotas: &[(QuotaKey, f64)]| {
        for (s, key) in QuotaKey::SUB_QUOTA_KEYS.iter().enumerate() {
            sums[s] += value_of(quotas, *key).unwrap_or(0.0) as u128;
        }
    };
    for (entity, mut quotas) in entries {
        if let Some(error) = check_entry(&entity, &quotas, &key_texts) {
            return Err((entity, error));
        }
        if quotas.is_empty() {
            continue;
        }
        quotas.sort_by_key(|(k, _)| *k);
        let q = quotas.as_slice();
        match &entity {
            Entity::User(N(u)) => users
                .entry(u.clone())
                .or_default()
                .0
                .quotas
                .set_slot(USER, q),
            Entity::UserClient(N(u), D) => users
                .entry(u.clone())
                .or_default()
                .0
                .quotas
                .set_slot(USER_DEFAULT_CLIENT, q),
            Entity::UserClient(N(u), N(c)) => {
                add(&mut users.entry(u.clone()).or_default().1, q);
                let mut one = NodeQuotas::default();
                one.set_slot(ONLY, q);
                pairs.push((u.clone(), c.clone(), one));
            }
            Entity::User(D) => state.default_user.set_slot(USER, q),
            Entity::UserClient(D, D) => state.default_user.set_slot(USER_DEFAULT_CLIENT, q),
            Entity::UserClient(D, N(c)) => {
                add(&mut state.default_user_sums, q);
                clients
                    .entry(c.clone())
                    .or_default()
                    .set_slot(DEFAULT_USER_CLIENT, q);
            }
            Entity::ClientId(N(c)) => clients.entry(c.clone()).or_default().set_slot(CLIENT, q),
            Entity::ClientId(D) => state.default_client.set_slot(ONLY, q),
            Entity::Ip(N(ip)) => ips.entry(ip.clone()).or_default().set_slot(ONLY, q),
            Entity::Ip(D) => state.default_ip.set_slot(ONLY, q),
        }
        state.entity_count += 1;
        state::count_shapes(&mut state.shapes, &entity, q, true);
    }
    if policy == SubQuotaPolicy::Kip55 {
        let named = users
            .iter()
            .map(|(u, (node, sums))| (N(u.clone()), &node.quotas, *sums));
        let default = std::iter::once((D, &state.default_user, state.default_user_sums));
        for (user, quotas, sums) in named.chain(default) {
            for (i, key) in QuotaKey::SUB_QUOTA_KEYS.into_iter().enumerate() {
                let Some(total) = quotas.get(USER, key.index()) else {
                    continue;
                };
                let default_sub = quotas.get(USER_DEFAULT_CLIENT, key.index());
                if sums[i] > total as u128 || default_sub.is_some_and(|d| d > total) {
                    let msg = sub_quota_message(&user, key, total, sums[i], default_sub);
                    return Err((Entity::User(user), ApiError::policy_violation(msg)));
                }
            }
        }
    }
    state.users.reserve_empty(users.len());
    state.pairs.reserve_empty(pairs.len());
    state.clients.reserve_empty(clients.len());
    state.ips.reserve_empty(ips.len());
    for (u, (mut node, sums)) in users {
        node.sums.set(sums);
        if !node.is_empty() {
            state.users.insert(u, node);
        }
    }
    for (u, c, node) in pairs {
        state.pairs.insert(u, c, node);
    }
    for (c, node) in clients {
        state.clients.insert(c, node);
    }
    for (ip, node) in ips {
        state.ips.insert(ip, node);
    }
    Ok(())
}

/// The checks an alteration setting `quotas` on `entity` would make.
fn check_entry(
    entity: &Entity,
    quotas: &[(QuotaKey, f64)],
    key_texts: &[String],
) -> Option<ApiError> {
    if let Some(EntityName::Named(ip)) = entity.ip() {
        if ip.as_str().parse::<IpAddr>().is_err() {
            return Some(ApiError::invalid_request(format!(
                "{} is not a valid IP or resolvable host.",
                ip.as_str()
            )));
        }
    }
    let mut seen: KeyMask = 0;
    for (key, value) in quotas {
        let text = key_texts[key.index()].as_str();
        if key.is_ip_key() != entity.is_ip() {
            return Some(ApiError::invalid_request(format!(
                "Invalid configuration key {text}"
            )));
        }
        if seen & (1 << key.index()) != 0 {
            return Some(ApiError::invalid_request(format!(
                "Duplicate quota key {text}"
            )));
        }
        seen |= 1 << key.index();
        if let Err(e) = validate_value(*key, text, *value) {
            return Some(e);
        }
    }
    None
}

/// Applies validated changes to `state` (copying the table shards they touch).
pub(crate) fn apply(state: &mut State, changes: &[Change]) {
    use state::{CLIENT, DEFAULT_USER_CLIENT, ONLY, USER, USER_DEFAULT_CLIENT};
    use EntityName::{Default as D, Named as N};
    for change in changes {
        let was = !change.old.is_empty();
        let is = !change.new.is_empty();
        state.entity_count = state.entity_count + usize::from(is) - usize::from(was);
        state::count_shapes(&mut state.shapes, &change.entity, &change.old, false);
        state::count_shapes(&mut state.shapes, &change.entity, &change.new, true);
        match &change.entity {
            Entity::User(N(u)) => update_user(state, u, |n| n.quotas.set_slot(USER, &change.new)),
            Entity::UserClient(N(u), D) => update_user(state, u, |n| {
                n.quotas.set_slot(USER_DEFAULT_CLIENT, &change.new)
            }),
            Entity::UserClient(N(u), N(c)) => {
                update_user(state, u, |n| {
                    let mut sums = n.sums.get();
                    adjust_sums(&mut sums, change);
                    n.sums.set(sums);
                });
                if is {
                    let mut node = NodeQuotas::default();
                    node.set_slot(ONLY, &change.new);
                    state.pairs.insert(u.clone(), c.clone(), node);
                } else {
                    state.pairs.remove(u.as_str(), c.as_str());
                }
            }
            Entity::User(D) => state.default_user.set_slot(USER, &change.new),
            Entity::UserClient(D, D) => state
                .default_user
                .set_slot(USER_DEFAULT_CLIENT, &change.new),
            Entity::UserClient(D, N(c)) => {
                adjust_sums(&mut state.default_user_sums, change);
                update_node(&mut state.clients, c, |q| {
                    q.set_slot(DEFAULT_USER_CLIENT, &change.new)
                });
            }
            Entity::ClientId(N(c)) => {
                update_node(&mut state.clients, c, |q| q.set_slot(CLIENT, &change.new))
            }
            Entity::ClientId(D) => state.default_client.set_slot(ONLY, &change.new),
            Entity::Ip(N(ip)) => update_node(&mut state.ips, ip, |q| q.set_slot(ONLY, &change.new)),
            Entity::Ip(D) => state.default_ip.set_slot(ONLY, &change.new),
        }
    }
}

/// Moves a user node's sub-quota sums from a change's old values to its new ones.
fn adjust_sums(sums: &mut state::SubSums, change: &Change) {
    for (s, key) in QuotaKey::SUB_QUOTA_KEYS.iter().enumerate() {
        // Byte-rate values are validated whole numbers up to 2^63, so these casts are exact.
        let old = value_of(&change.old, *key).unwrap_or(0.0) as u128;
        let new = value_of(&change.new, *key).unwrap_or(0.0) as u128;
        sums[s] = sums[s] - old + new;
    }
}

/// Edits (creating if needed) the node at `name`, dropping it if it ends up empty.
fn update_node(map: &mut state::Map<NodeQuotas>, name: &Name, f: impl FnOnce(&mut NodeQuotas)) {
    let mut node = map.get(name.as_str()).cloned().unwrap_or_default();
    f(&mut node);
    if node.is_empty() {
        map.remove(name.as_str());
    } else {
        map.insert(name.clone(), node);
    }
}

/// Edits (creating if needed) a user's node, dropping it if it ends up empty.
fn update_user(state: &mut State, user: &Name, f: impl FnOnce(&mut UserNode)) {
    let mut node = state.users.get(user.as_str()).cloned().unwrap_or_default();
    f(&mut node);
    if node.is_empty() {
        state.users.remove(user.as_str());
    } else {
        state.users.insert(user.clone(), node);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn java_order_of_entity_types() {
        // Verified against Java 17: {user, client-id} iterates client-id first, whatever the put order.
        assert_eq!(java_map_order(&["user", "client-id"], 2), vec![1, 0]);
        assert_eq!(java_map_order(&["client-id", "user"], 2), vec![0, 1]);
        assert_eq!(
            java_map_order(&["client-id", "user", "ip"], 3),
            vec![0, 1, 2]
        );
    }

    #[test]
    fn java_order_of_quota_keys() {
        let p = "producer_byte_rate";
        let c = "consumer_byte_rate";
        let r = "request_percentage";
        let m = "controller_mutation_rate";
        assert_eq!(java_map_order(&[p, c], 2), vec![1, 0]);
        assert_eq!(java_map_order(&[p, c, r], 3), vec![1, 0, 2]);
        assert_eq!(java_map_order(&[p, c, m, r], 4), vec![0, 1, 2, 3]);
        // Kafka reports `Invalid configuration key aaa` for ops zzz, aaa.
        assert_eq!(java_map_order(&["zzz", "aaa"], 2), vec![1, 0]);
    }

    #[test]
    fn java_entity_printing() {
        let parts = vec![
            EntityPart {
                entity_type: "user".into(),
                name: Some("alice".into()),
            },
            EntityPart {
                entity_type: "client-id".into(),
                name: None,
            },
        ];
        assert_eq!(
            java_entity_string(&parts, parts.len()),
            "ClientQuotaEntity(entries={client-id=null, user=alice})"
        );
    }
}
