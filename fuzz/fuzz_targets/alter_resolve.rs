//! Fuzzes alteration batches, resolution, description and listing against the naive oracle.
//!
//! Every batch's per-entity results are checked against the oracle's validation, the KIP-55 invariants
//! are checked after every batch, and every resolve / describe / list against the oracle's model, which
//! takes only the alterations the engine accepted (and nothing from `validate_only` batches).
//!
//! Run: `cd fuzz && RUSTC_BOOTSTRAP=1 cargo fuzz run alter_resolve -- -max_total_time=30`.

#![no_main]

use arbitrary::Arbitrary;
use kquota::{
    Alteration, BrokerView, ComponentMatch, Engine, EntityPart, EntityType, ErrorCode, ListFilter,
    Op, SubQuotaPolicy,
};
use libfuzzer_sys::fuzz_target;

#[path = "../../tests/it/oracle.rs"]
mod oracle;

use oracle::{Change, Oracle, CLIENT_KEYS, KEY_SPELLINGS};

/// A small pool so that entities collide: the literal "<default>", unicode, a space, the empty name,
/// IP addresses and a prefix of another name.
const NAMES: [&str; 11] = [
    "alice",
    "bob",
    "<default>",
    "ü",
    "☃",
    "a b",
    "",
    "10.0.0.1",
    "::1",
    "al",
    "alice2",
];
const TYPES: [&str; 3] = ["user", "client-id", "ip"];
/// Key spellings that must be rejected.
const BAD_KEYS: [&str; 8] = [
    "producer_byte_rate:",
    "producer_byte_rate:percent",
    "request_percentage:bps",
    "PRODUCER_BYTE_RATE",
    "producer_byte_rate:bps:bps",
    "connection_creation_rate:shares",
    ":bps",
    "nope",
];
/// Values at the edges of validation and of exact arithmetic.
const SPECIAL_VALUES: [f64; 23] = [
    0.0,
    -0.0,
    -1.0,
    f64::NAN,
    f64::INFINITY,
    f64::NEG_INFINITY,
    0.5,
    1.5,
    5.000_000_1, // passes Kafka's integer test (|v % 1| <= 1e-6)
    4.999_999_9, // does not
    1e-17,
    1e-16,
    9_007_199_254_740_992.0,      // 2^53
    9_007_199_254_740_994.0,      // 2^53 + 2
    4_611_686_018_427_386_880.0,  // 2^62 - 1024
    4_611_686_018_427_387_904.0,  // 2^62
    9_223_372_036_854_775_808.0,  // 2^63 (Kafka's LONG bound as a double)
    18_446_744_073_709_551_616.0, // 2^64
    2_147_483_647.0,              // i32::MAX
    2_147_483_648.0,
    1e300,
    f64::MIN_POSITIVE,
    f64::MAX,
];

#[derive(Arbitrary, Debug)]
enum Name {
    Pool(u8),
    Raw(String),
}

impl Name {
    fn get(&self) -> &str {
        match self {
            Name::Pool(i) => NAMES[*i as usize % NAMES.len()],
            Name::Raw(s) => s,
        }
    }
}

#[derive(Arbitrary, Debug)]
enum Type {
    Known(u8),
    Raw(String),
}

#[derive(Arbitrary, Debug)]
struct Part {
    ty: Type,
    name: Option<Name>,
}

#[derive(Arbitrary, Debug)]
enum EntitySpec {
    /// One of the valid shapes (0: user, 1: user+client, 2: client, 3: ip); `None` is the default.
    Shaped {
        shape: u8,
        first: Option<Name>,
        second: Option<Name>,
    },
    /// Whatever parts the input says.
    Raw(Vec<Part>),
}

impl EntitySpec {
    fn parts(&self) -> Vec<EntityPart> {
        let part = |ty: &str, name: &Option<Name>| EntityPart {
            entity_type: ty.to_owned(),
            name: name.as_ref().map(|n| n.get().to_owned()),
        };
        match self {
            EntitySpec::Shaped {
                shape,
                first,
                second,
            } => match shape % 4 {
                0 => vec![part("user", first)],
                1 => vec![part("user", first), part("client-id", second)],
                2 => vec![part("client-id", first)],
                _ => vec![part("ip", first)],
            },
            EntitySpec::Raw(parts) => parts
                .iter()
                .take(4)
                .map(|p| {
                    let ty = match &p.ty {
                        Type::Known(i) => TYPES[*i as usize % TYPES.len()],
                        Type::Raw(s) => s,
                    };
                    part(ty, &p.name)
                })
                .collect(),
        }
    }
}

#[derive(Arbitrary, Debug)]
enum Key {
    Valid(u8),
    Bad(u8),
    Raw(String),
}

impl Key {
    fn get(&self) -> String {
        match self {
            Key::Valid(i) => KEY_SPELLINGS[*i as usize % KEY_SPELLINGS.len()]
                .0
                .to_owned(),
            Key::Bad(i) => BAD_KEYS[*i as usize % BAD_KEYS.len()].to_owned(),
            Key::Raw(s) => s.clone(),
        }
    }
}

#[derive(Arbitrary, Debug)]
enum Value {
    /// 1 to 100: one scale, so that totals and sub-quotas collide.
    Small(u8),
    Special(u8),
    Raw(f64),
}

impl Value {
    fn get(&self) -> f64 {
        match self {
            Value::Small(v) => f64::from(v % 100 + 1),
            Value::Special(i) => SPECIAL_VALUES[*i as usize % SPECIAL_VALUES.len()],
            Value::Raw(v) => *v,
        }
    }
}

#[derive(Arbitrary, Debug)]
struct FuzzOp {
    key: Key,
    value: Option<Value>,
}

#[derive(Arbitrary, Debug)]
struct FuzzAlteration {
    entity: EntitySpec,
    ops: Vec<FuzzOp>,
}

impl FuzzAlteration {
    fn build(&self) -> Alteration {
        Alteration {
            entity: self.entity.parts(),
            ops: self
                .ops
                .iter()
                .take(6)
                .map(|op| {
                    let key = op.key.get();
                    let value = op.value.as_ref().map(|v| v.get());
                    Op { key, value }
                })
                .collect(),
        }
    }
}

#[derive(Arbitrary, Debug)]
enum Match {
    Exact(Name),
    Default,
    Prefix(Name),
    Any,
}

#[derive(Arbitrary, Debug)]
struct Filter {
    components: Vec<(u8, Match)>,
    strict: bool,
}

impl Filter {
    fn build(&self) -> ListFilter {
        let types = [EntityType::User, EntityType::ClientId, EntityType::Ip];
        ListFilter {
            components: self
                .components
                .iter()
                .take(4)
                .map(|(t, m)| {
                    let m = match m {
                        Match::Exact(n) => ComponentMatch::Exact(n.get().to_owned()),
                        Match::Default => ComponentMatch::Default,
                        Match::Prefix(n) => ComponentMatch::Prefix(n.get().to_owned()),
                        Match::Any => ComponentMatch::Any,
                    };
                    (types[*t as usize % types.len()], m)
                })
                .collect(),
            strict: self.strict,
        }
    }
}

#[derive(Arbitrary, Debug)]
enum Action {
    Alter {
        batch: Vec<FuzzAlteration>,
        validate_only: bool,
    },
    Resolve {
        user: Name,
        client: Name,
    },
    Describe {
        user: Option<Name>,
        client: Option<Name>,
        include_overrides: bool,
    },
    ResolveIp(Name),
    List(Filter),
}

#[derive(Arbitrary, Debug)]
struct Input {
    kafka_policy: bool,
    brokers: u8,
    producer_capacity: bool,
    actions: Vec<Action>,
}

fuzz_target!(|input: Input| run(&input));

fn run(input: &Input) {
    let policy = if input.kafka_policy {
        SubQuotaPolicy::Kafka
    } else {
        SubQuotaPolicy::Kip55
    };
    let brokers = u32::from(input.brokers % 4) + 1;
    let capacity = input.producer_capacity.then_some(1000.0);
    let mut builder = Engine::builder().policy(policy).broker_count(brokers);
    if let Some(c) = capacity {
        builder = builder.producer_capacity(c);
    }
    let engine = builder.build().expect("valid settings");
    let mut model = Oracle::new(
        policy,
        BrokerView {
            broker_count: brokers,
            producer_capacity: capacity,
            consumer_capacity: None,
        },
    );

    for action in input.actions.iter().take(64) {
        match action {
            Action::Alter {
                batch,
                validate_only,
            } => {
                let batch: Vec<Alteration> =
                    batch.iter().take(8).map(FuzzAlteration::build).collect();
                alter(&engine, &mut model, &batch, *validate_only);
            }
            Action::Resolve { user, client } => {
                check_resolve(&engine, &model, user.get(), client.get())
            }
            Action::Describe {
                user,
                client,
                include_overrides,
            } => {
                let (user, client) = (user.as_ref().map(Name::get), client.as_ref().map(Name::get));
                check_describe(&engine, &model, user, client, *include_overrides);
            }
            Action::ResolveIp(ip) => check_resolve_ip(&engine, &model, ip.get()),
            Action::List(filter) => {
                let filter = filter.build();
                assert_eq!(
                    engine.list(&filter),
                    model.list(&filter),
                    "list({filter:?})"
                );
            }
        }
    }

    // A final sweep over every name the model holds (plus one without entries and the empty name), so
    // every input checks the state it built.
    let mut names: Vec<Option<String>> = vec![None, Some(String::new()), Some("carol".into())];
    for (entity, _, _) in &model.entries {
        let parts = [entity.user(), entity.client_id(), entity.ip()];
        for n in parts.into_iter().flatten().filter_map(|n| n.as_option()) {
            if !names.iter().any(|m| m.as_deref() == Some(n)) {
                names.push(Some(n.to_owned()));
            }
        }
    }
    for user in &names {
        for client in &names {
            let (user, client) = (user.as_deref(), client.as_deref());
            check_describe(&engine, &model, user, client, true);
            check_describe(&engine, &model, user, client, false);
            if let (Some(user), Some(client)) = (user, client) {
                check_resolve(&engine, &model, user, client);
            }
        }
        if let Some(ip) = user {
            check_resolve_ip(&engine, &model, ip);
        }
    }
}

/// Runs one batch and checks every result against the oracle; the model takes the accepted changes.
fn alter(engine: &Engine, model: &mut Oracle, batch: &[Alteration], validate_only: bool) {
    let before = engine.list(&ListFilter::all());
    let results = engine.alter(batch, validate_only);
    assert_eq!(results.len(), batch.len());
    let kip55 = model.policy == SubQuotaPolicy::Kip55;
    let mut valid: Vec<Change> = Vec::new();
    let mut accepted: Vec<Change> = Vec::new();
    let mut policy_rejections = 0;
    for ((result, expected), alteration) in
        results.iter().zip(oracle::check_batch(batch)).zip(batch)
    {
        assert_eq!(result.entity, alteration.entity);
        match (expected, &result.error) {
            (Err(why), Some(e)) => {
                assert_eq!(
                    e.code,
                    ErrorCode::INVALID_REQUEST,
                    "{alteration:?}: {why}: {e}"
                )
            }
            (Err(why), None) => panic!("accepted an invalid alteration {alteration:?}: {why}"),
            (Ok(change), None) => {
                valid.push(change.clone());
                accepted.push(change);
            }
            (Ok(change), Some(e)) => {
                assert!(kip55, "the kafka policy rejected {alteration:?}: {e}");
                assert_eq!(e.code, ErrorCode::POLICY_VIOLATION, "{alteration:?}: {e}");
                valid.push(change);
                policy_rejections += 1;
            }
        }
    }
    let after = model.with(&accepted);
    if kip55 {
        assert_eq!(
            after.violations(),
            Vec::<String>::new(),
            "the accepted part of {batch:?} breaks the sub-quota rules"
        );
        if model.with(&valid).violations().is_empty() {
            assert_eq!(
                policy_rejections, 0,
                "rejected {batch:?}, which keeps the rules"
            );
        }
    }
    if validate_only {
        assert_eq!(
            engine.list(&ListFilter::all()),
            before,
            "validate_only changed state"
        );
    } else {
        *model = after;
    }
    assert_eq!(
        engine.list(&ListFilter::all()),
        model.list(&ListFilter::all())
    );
}

fn check_resolve(engine: &Engine, model: &Oracle, user: &str, client: &str) {
    let resolved = engine.resolve(user, client);
    let expected = model.resolve(user, client);
    assert_eq!(
        resolved.iter().collect::<Vec<_>>(),
        expected,
        "resolve({user:?}, {client:?})"
    );
    for key in CLIENT_KEYS {
        assert_eq!(
            resolved.get(key),
            expected.iter().find(|q| q.key == key).copied()
        );
    }
}

fn check_describe(
    engine: &Engine,
    model: &Oracle,
    user: Option<&str>,
    client: Option<&str>,
    include_overrides: bool,
) {
    assert_eq!(
        engine.describe(user, client, include_overrides),
        model.describe(user, client, include_overrides),
        "describe({user:?}, {client:?}, {include_overrides})"
    );
}

fn check_resolve_ip(engine: &Engine, model: &Oracle, ip: &str) {
    let got = engine.resolve_ip(ip).map(|q| (q.limit, q.from_default));
    assert_eq!(got, model.resolve_ip(ip), "resolve_ip({ip:?})");
}
