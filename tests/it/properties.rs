//! Property tests: random entity sets applied through `Engine::alter`, checked against the naive oracle.

use kquota::{
    Alteration, BrokerView, ComponentMatch, Engine, Entity, EntityName, EntityType, ErrorCode,
    ListFilter, QuotaKey, SubQuotaPolicy,
};
use proptest::prelude::*;
use proptest::sample::select;
use proptest::test_runner::TestCaseError;

use crate::oracle::{self, Change, Oracle, CLIENT_KEYS};

/// Names for entities: the literal name "<default>" is an ordinary name, and names are opaque UTF-8.
/// The two long ones take each path of the resolution cache: a user name and client-id of up to 60
/// bytes together are kept in the slot (`LONG_31` with a short name), up to 512 beside it (`LONG_31`
/// with itself or with `LONG_260`), and longer pairs are not cached (`LONG_260` with itself).
const NAMES: [&str; 8] = [
    "alice",
    "bob",
    "<default>",
    "ü",
    "☃",
    "a b",
    LONG_31,
    LONG_260,
];
/// Names for queries: the entity names, then one with no entries and the empty name. Built from
/// [`NAMES`] so that a name added there is queried too.
const QUERY_NAMES: [&str; NAMES.len() + 2] = {
    let mut names = [""; NAMES.len() + 2];
    let mut i = 0;
    while i < NAMES.len() {
        names[i] = NAMES[i];
        i += 1;
    }
    names[NAMES.len()] = "carol";
    // The last stays "": the empty name.
    names
};
const LONG_31: &str = "☃☃☃☃☃☃☃☃☃☃x";
/// 260 bytes.
const LONG_260: &str =
    "☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃☃xy";
const IPS: [&str; 3] = ["10.0.0.1", "::1", "10.0.0.2"];
const POLICIES: [SubQuotaPolicy; 2] = [SubQuotaPolicy::Kip55, SubQuotaPolicy::Kafka];

/// One alteration as generated: an entity, its ops (distinct keys), and whether native keys are spelled
/// with their unit (`producer_byte_rate:broker_bps`).
#[derive(Clone, Debug)]
struct Step {
    entity: Entity,
    ops: Vec<(QuotaKey, Option<f64>)>,
    explicit_unit: bool,
}

impl Step {
    fn alteration(&self) -> Alteration {
        let mut a = Alteration::new(&self.entity);
        for (key, value) in &self.ops {
            let native = key.unit() == key.quota_type().native_unit();
            let spelling = if native && self.explicit_unit {
                format!("{}:{}", key.quota_type(), key.unit())
            } else {
                key.to_string()
            };
            a = match value {
                Some(v) => a.set(spelling, *v),
                None => a.remove(spelling),
            };
        }
        a
    }
}

fn entity_name() -> impl Strategy<Value = EntityName> {
    prop_oneof![
        3 => select(&NAMES[..]).prop_map(|n| EntityName::named(n).unwrap()),
        1 => Just(EntityName::Default),
    ]
}

/// All user / client-id shapes, weighted towards the ones that take part in the sub-quota rules.
fn client_entity() -> impl Strategy<Value = Entity> {
    prop_oneof![
        2 => entity_name().prop_map(Entity::User),
        4 => (entity_name(), entity_name()).prop_map(|(u, c)| Entity::UserClient(u, c)),
        1 => entity_name().prop_map(Entity::ClientId),
    ]
}

/// Whole numbers on one scale, so that totals and sub-quotas often collide.
fn value() -> impl Strategy<Value = f64> {
    (1u32..=100).prop_map(f64::from)
}

fn step() -> impl Strategy<Value = Step> {
    let client_ops = prop::collection::btree_map(
        0..QuotaKey::CLIENT_COUNT,
        prop::option::weighted(0.8, value()),
        1..=3,
    )
    .prop_map(|ops| {
        ops.into_iter()
            .map(|(i, v)| (CLIENT_KEYS[i], v))
            .collect::<Vec<_>>()
    });
    let client =
        (client_entity(), client_ops, any::<bool>()).prop_map(|(entity, ops, explicit_unit)| {
            Step {
                entity,
                ops,
                explicit_unit,
            }
        });
    let ip_entity = prop_oneof![
        select(&IPS[..2]).prop_map(|ip| Entity::Ip(EntityName::named(ip).unwrap())),
        Just(Entity::Ip(EntityName::Default)),
    ];
    let ip = (
        ip_entity,
        prop::option::weighted(0.8, value()),
        any::<bool>(),
    )
        .prop_map(|(entity, v, explicit_unit)| Step {
            entity,
            ops: vec![(QuotaKey::CONNECTION_CREATION_RATE, v)],
            explicit_unit,
        });
    prop_oneof![12 => client, 1 => ip]
}

/// The broker settings of the engine under test.
fn broker() -> impl Strategy<Value = BrokerView> {
    (
        1u32..=4,
        prop::option::of(Just(1000.0)),
        prop::option::of(Just(500.0)),
    )
        .prop_map(
            |(broker_count, producer_capacity, consumer_capacity)| BrokerView {
                broker_count,
                producer_capacity,
                consumer_capacity,
            },
        )
}

/// An engine with `policy` and `broker`'s settings, and an empty oracle for it.
fn build(policy: SubQuotaPolicy, broker: BrokerView) -> (Engine, Oracle) {
    let mut builder = Engine::builder()
        .policy(policy)
        .broker_count(broker.broker_count);
    if let Some(c) = broker.producer_capacity {
        builder = builder.producer_capacity(c);
    }
    if let Some(c) = broker.consumer_capacity {
        builder = builder.consumer_capacity(c);
    }
    (
        builder.build().expect("valid settings"),
        Oracle::new(policy, broker),
    )
}

/// One broker, no share capacities.
const PLAIN_BROKER: BrokerView = BrokerView {
    broker_count: 1,
    producer_capacity: None,
    consumer_capacity: None,
};

/// The oracle's reading of a generated alteration; generated alterations are always valid.
fn change(step: &Step) -> Result<Change, TestCaseError> {
    oracle::check_alteration(&step.alteration())
        .map_err(|e| TestCaseError::fail(format!("generated an invalid alteration: {e}")))
}

/// Engine state, sub-quota invariants and every query of the pool agree with the oracle.
fn check_state(engine: &Engine, model: &Oracle) -> Result<(), TestCaseError> {
    prop_assert_eq!(
        engine.list(&ListFilter::all()),
        model.list(&ListFilter::all())
    );
    if model.policy == SubQuotaPolicy::Kip55 {
        prop_assert_eq!(model.violations(), Vec::<String>::new());
    }
    let names = || std::iter::once(None).chain(QUERY_NAMES.iter().map(|n| Some(*n)));
    for user in names() {
        for client in names() {
            for overrides in [false, true] {
                prop_assert_eq!(
                    engine.describe(user, client, overrides),
                    model.describe(user, client, overrides),
                    "describe({:?}, {:?}, {})",
                    user,
                    client,
                    overrides
                );
            }
            let (Some(user), Some(client)) = (user, client) else {
                continue;
            };
            let resolved = engine.resolve(user, client);
            let expected = model.resolve(user, client);
            prop_assert_eq!(
                resolved.iter().collect::<Vec<_>>(),
                expected.clone(),
                "resolve({:?}, {:?})",
                user,
                client
            );
            for key in CLIENT_KEYS {
                prop_assert_eq!(
                    resolved.get(key),
                    expected.iter().find(|q| q.key == key).copied()
                );
            }
            prop_assert_eq!(resolved.is_empty(), expected.is_empty());
            // Again, now from this thread's cache (filled above unless the names are too long).
            prop_assert_eq!(engine.resolve(user, client), resolved);
        }
    }
    for ip in IPS {
        let got = engine.resolve_ip(ip).map(|q| (q.limit, q.from_default));
        prop_assert_eq!(got, model.resolve_ip(ip), "resolve_ip({})", ip);
    }
    Ok(())
}

/// Applies a batch to the engine and the oracle, checking every per-entity result against the oracle's
/// expectations, and (when `validate_only_first`) that a dry run gives the same results and changes
/// nothing.
fn alter_batch(
    engine: &Engine,
    model: &mut Oracle,
    batch: &[Step],
    validate_only_first: bool,
) -> Result<(), TestCaseError> {
    let alterations: Vec<Alteration> = batch.iter().map(Step::alteration).collect();
    let before = engine.list(&ListFilter::all());
    let dry = validate_only_first.then(|| engine.alter(&alterations, true));
    prop_assert_eq!(
        &engine.list(&ListFilter::all()),
        &before,
        "validate_only changed state"
    );
    let results = engine.alter(&alterations, false);
    if let Some(dry) = dry {
        prop_assert_eq!(&dry, &results, "validate_only gave different results");
    }
    prop_assert_eq!(results.len(), batch.len());

    let expected = oracle::check_batch(&alterations);
    let kip55 = model.policy == SubQuotaPolicy::Kip55;
    let mut valid: Vec<Change> = Vec::new();
    let mut accepted: Vec<Change> = Vec::new();
    let mut policy_rejections = 0;
    for ((result, expected), alteration) in results.iter().zip(expected).zip(&alterations) {
        prop_assert_eq!(&result.entity, &alteration.entity);
        match (expected, &result.error) {
            (Err(why), Some(e)) => {
                prop_assert_eq!(e.code, ErrorCode::INVALID_REQUEST, "{}", why);
            }
            (Err(why), None) => {
                return Err(TestCaseError::fail(format!(
                    "accepted an invalid alteration: {why}"
                )));
            }
            (Ok(change), None) => {
                valid.push(change.clone());
                accepted.push(change);
            }
            (Ok(change), Some(e)) => {
                prop_assert!(kip55, "the kafka policy rejected a valid alteration: {}", e);
                prop_assert_eq!(e.code, ErrorCode::POLICY_VIOLATION, "{}", e);
                valid.push(change);
                policy_rejections += 1;
            }
        }
    }
    let after = model.with(&accepted);
    if kip55 {
        // Whatever the engine rejects, what it commits keeps the invariants ...
        prop_assert_eq!(after.violations(), Vec::<String>::new());
        // ... and it rejects nothing when the whole batch keeps them.
        if model.with(&valid).violations().is_empty() {
            prop_assert_eq!(
                policy_rejections,
                0,
                "rejected a batch that keeps the invariants"
            );
        }
    }
    *model = after;
    Ok(())
}

/// Applies each step as a batch of its own: under kip55 a step is rejected (POLICY_VIOLATION) iff
/// applying it would break a sub-quota invariant, under kafka never; after each step the engine's state
/// and every query agree with the oracle.
fn single_entity_steps(
    policy: SubQuotaPolicy,
    broker: BrokerView,
    steps: &[Step],
) -> Result<(), TestCaseError> {
    let (engine, mut model) = build(policy, broker);
    for step in steps {
        let change = change(step)?;
        let after = model.with(std::slice::from_ref(&change));
        let breaks = policy == SubQuotaPolicy::Kip55 && !after.violations().is_empty();
        let result = engine.alter(&[step.alteration()], false);
        prop_assert_eq!(result.len(), 1);
        match &result[0].error {
            None => prop_assert!(
                !breaks,
                "accepted {:?}, which breaks {:?}",
                step,
                after.violations()
            ),
            Some(e) => {
                prop_assert!(breaks, "rejected {:?}: {}", step, e);
                prop_assert_eq!(e.code, ErrorCode::POLICY_VIOLATION);
            }
        }
        if !breaks {
            model = after;
        }
        check_state(&engine, &model)?;
    }
    Ok(())
}

fn batch() -> impl Strategy<Value = Vec<Step>> {
    prop::collection::vec(step(), 1..=4)
}

/// Filters with at most one match per entity type, as `docs/semantics.md`'s Listing section gives
/// them.
fn filter() -> impl Strategy<Value = ListFilter> {
    let exact = prop_oneof![select(&QUERY_NAMES[..]), select(&IPS[..]),]
        .prop_map(|n| ComponentMatch::Exact(n.to_owned()));
    let prefix = select(&["", "a", "al", "<", "<default>", "☃", "ü", "b", "10.", ":"][..])
        .prop_map(|p| ComponentMatch::Prefix(p.to_owned()));
    let matcher = prop_oneof![
        exact,
        Just(ComponentMatch::Default),
        prefix,
        Just(ComponentMatch::Any),
    ];
    let types = prop::sample::subsequence(
        vec![EntityType::User, EntityType::ClientId, EntityType::Ip],
        0..=3,
    )
    .prop_shuffle();
    (types, prop::collection::vec(matcher, 3), any::<bool>()).prop_map(
        |(types, matchers, strict)| ListFilter {
            components: types.into_iter().zip(matchers).collect(),
            strict,
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// One entity per batch: under kip55 an alteration is rejected (POLICY_VIOLATION) iff applying it
    /// would break a sub-quota invariant; under kafka every valid alteration is accepted; and after every
    /// step, resolve / describe / resolve_ip agree with the oracle for every query of the pool.
    #[test]
    fn single_entity_alterations_match_oracle(
        steps in prop::collection::vec(step(), 1..=30),
        broker in broker(),
    ) {
        for policy in POLICIES {
            single_entity_steps(policy, broker, &steps)?;
        }
    }

    /// Multi-entity batches (possibly naming an entity twice, possibly dry-run first): invalid
    /// alterations are INVALID_REQUEST, kip55 commits never break the invariants and reject nothing when
    /// the whole batch keeps them, kafka rejects nothing valid, and the state matches the oracle.
    #[test]
    fn batches_keep_invariants_and_match_oracle(
        batches in prop::collection::vec((batch(), any::<bool>()), 1..=10),
        broker in broker(),
    ) {
        for policy in POLICIES {
            let (engine, mut model) = build(policy, broker);
            for (batch, validate_only_first) in &batches {
                alter_batch(&engine, &mut model, batch, *validate_only_first)?;
                check_state(&engine, &model)?;
            }
        }
    }

    /// `Engine::list` returns exactly the oracle's entries that pass a naive reading of the filter.
    #[test]
    fn list_matches_naive_filter(
        batches in prop::collection::vec(batch(), 1..=8),
        filters in prop::collection::vec(filter(), 1..=16),
    ) {
        for policy in POLICIES {
            let (engine, mut model) = build(policy, PLAIN_BROKER);
            for batch in &batches {
                alter_batch(&engine, &mut model, batch, false)?;
            }
            for filter in &filters {
                prop_assert_eq!(engine.list(filter), model.list(filter), "{:?}", filter);
            }
        }
    }
}

/// Regressions the oracle found in the sub-quota arithmetic.
mod regressions {
    use super::*;

    /// Named sub-quotas of `producer_byte_rate` for alice's clients, then alice's total (the order in which
    /// the sub-quota check has the last word).
    fn run(subs: &[f64], total: f64) {
        let alice = || EntityName::named("alice").unwrap();
        let step = |entity, value| Step {
            entity,
            ops: vec![(QuotaKey::PRODUCER_BROKER_BPS, Some(value))],
            explicit_unit: false,
        };
        let mut steps: Vec<Step> = subs
            .iter()
            .zip(["bob", "ü", "☃"])
            .map(|(sub, client)| {
                let client = EntityName::named(client).unwrap();
                step(Entity::UserClient(alice(), client), *sub)
            })
            .collect();
        steps.push(step(Entity::User(alice()), total));
        if let Err(e) = single_entity_steps(SubQuotaPolicy::Kip55, PLAIN_BROKER, &steps) {
            panic!("{e}");
        }
    }

    /// Sub-quotas 2^62 + 1 exceed a total of 2^62, but the sum is compared after rounding to f64.
    #[test]
    fn sum_check_is_exact_above_2_pow_53() {
        run(&[2f64.powi(62), 1.0], 2f64.powi(62));
    }

    /// 2^62 − (2^62 − 1024 + 1) is 1023, but the sum is rounded to f64 before the subtraction (1024).
    #[test]
    fn remainder_is_exact_above_2_pow_53() {
        run(&[2f64.powi(62) - 1024.0, 1.0], 2f64.powi(62));
    }
}
