//! Every validation rule: the exact Kafka error code and a message that names the problem.

use kquota::{Alteration, Engine, EngineBuilder, ErrorCode, SubQuotaPolicy};

use kquota::Entity;
use kquota_testkit::{alter_ok, d, n, uc};

/// Alters one entity and returns its error (code, message), panicking on success.
fn reject(engine: &Engine, alteration: Alteration) -> (ErrorCode, String) {
    let before = engine.list(&kquota::ListFilter::all());
    let results = engine.alter(&[alteration], false);
    assert_eq!(results.len(), 1);
    let error = results[0].error.clone().expect("alteration should fail");
    assert_eq!(
        engine.list(&kquota::ListFilter::all()),
        before,
        "a refused alteration changed state"
    );
    (error.code, error.message)
}

fn invalid(alteration: Alteration, message: &str) {
    let (code, msg) = reject(&Engine::new(), alteration);
    assert_eq!(code, ErrorCode::INVALID_REQUEST);
    assert_eq!(msg, message);
}

fn user(name: &str) -> Alteration {
    Alteration::new(&Entity::User(n(name)))
}

#[test]
fn empty_entity() {
    invalid(
        Alteration::raw(Vec::<(String, Option<String>)>::new()).set("producer_byte_rate", 1.0),
        "Invalid empty client quota entity",
    );
}

#[test]
fn unknown_entity_type() {
    invalid(
        Alteration::raw([("group", Some("g"))]).set("producer_byte_rate", 1.0),
        "Unhandled client quota entity type: group",
    );
}

#[test]
fn empty_names() {
    for ty in ["user", "client-id", "ip"] {
        invalid(
            Alteration::raw([(ty, Some(""))]).set("producer_byte_rate", 1.0),
            &format!("Empty {ty} not supported"),
        );
    }
}

#[test]
fn repeated_entity_type() {
    invalid(
        Alteration::raw([("user", Some("a")), ("user", Some("b"))]).set("producer_byte_rate", 1.0),
        "Invalid client quota entity, duplicate entity entry user",
    );
}

#[test]
fn ip_combined_with_user_or_client() {
    for other in ["user", "client-id"] {
        invalid(
            Alteration::raw([("ip", Some("1.2.3.4")), (other, Some("x"))])
                .set("connection_creation_rate", 1.0),
            "Invalid quota entity combination, IP entity shouldnot be combined with User or ClientId",
        );
    }
}

#[test]
fn ip_that_is_not_an_address() {
    invalid(
        Alteration::raw([("ip", Some("not_an_ip!!"))]).set("connection_creation_rate", 1.0),
        "not_an_ip!! is not a valid IP or resolvable host.",
    );
}

#[test]
fn key_not_allowed_for_entity() {
    invalid(
        Alteration::raw([("ip", Some("1.2.3.4"))]).set("producer_byte_rate", 1.0),
        "Invalid configuration key producer_byte_rate",
    );
    invalid(
        user("a").set("connection_creation_rate", 1.0),
        "Invalid configuration key connection_creation_rate",
    );
    invalid(
        user("a").set("bogus", 1.0),
        "Invalid configuration key bogus",
    );
}

#[test]
fn unknown_unit() {
    invalid(
        user("a").set("producer_byte_rate:furlongs", 1.0),
        "Invalid configuration key producer_byte_rate:furlongs: unknown unit 'furlongs' for \
         producer_byte_rate (expected bps, broker_bps, shares)",
    );
    invalid(
        user("a").set("request_percentage:bps", 1.0),
        "Invalid configuration key request_percentage:bps: unknown unit 'bps' for \
         request_percentage (expected percent)",
    );
}

#[test]
fn duplicate_key_in_one_entity() {
    // Kafka overwrites its "Duplicate quota key" error with this one, so clients only ever see it.
    invalid(
        user("alice")
            .set("producer_byte_rate", 1.0)
            .remove("producer_byte_rate"),
        "Ignoring duplicate entity ClientQuotaEntity(entries={user=alice})",
    );
    // Two spellings of one key are the same key.
    invalid(
        user("alice")
            .set("producer_byte_rate", 1.0)
            .set("producer_byte_rate:broker_bps", 2.0),
        "Ignoring duplicate entity ClientQuotaEntity(entries={user=alice})",
    );
}

#[test]
fn same_entity_twice_in_a_batch() {
    let engine = Engine::new();
    let batch = [
        Alteration::new(&uc("u", "c")).set("producer_byte_rate", 1.0),
        Alteration::raw([("client-id", Some("c")), ("user", Some("u"))])
            .set("consumer_byte_rate", 2.0),
        user("other").set("producer_byte_rate", 3.0),
    ];
    let results = engine.alter(&batch, false);
    for r in &results[..2] {
        let e = r.error.as_ref().expect("duplicates are refused");
        assert_eq!(e.code, ErrorCode::INVALID_REQUEST);
        assert_eq!(
            e.message,
            "Ignoring duplicate entity ClientQuotaEntity(entries={client-id=c, user=u})"
        );
    }
    assert!(results[2].error.is_none());
    // Nothing reported as failed is applied; the valid entity is.
    assert!(engine
        .resolve("u", "c")
        .get(kquota::QuotaKey::PRODUCER_BROKER_BPS)
        .is_none());
    assert_eq!(engine.entity_count(), 1);
}

#[test]
fn values_not_greater_than_zero() {
    for v in [0.0, -0.0, -5.0, f64::NEG_INFINITY] {
        invalid(
            user("a").set("request_percentage", v),
            "Quota request_percentage must be greater than 0",
        );
    }
}

#[test]
fn fractional_whole_number_keys() {
    invalid(
        user("a").set("producer_byte_rate", 1.5),
        "producer_byte_rate cannot be a fractional value.",
    );
    invalid(
        Alteration::raw([("ip", None::<String>)]).set("connection_creation_rate", 4.9999999),
        "connection_creation_rate cannot be a fractional value.",
    );
    // Kafka's tolerance would let a value a hair above a whole number through; kquota does not, so
    // that sub-quota sums stay exact.
    for v in [5.0000001, 1e-300] {
        invalid(
            user("a").set("producer_byte_rate", v),
            "producer_byte_rate cannot be a fractional value.",
        );
    }
    // Shares and bps are byte-rate keys too.
    invalid(
        user("a").set("consumer_byte_rate:shares", 2.5),
        "consumer_byte_rate:shares cannot be a fractional value.",
    );
}

#[test]
fn values_too_large() {
    invalid(
        user("a").set("producer_byte_rate", 1e19),
        "Proposed value for producer_byte_rate is too large for a LONG.",
    );
    invalid(
        user("a").set("producer_byte_rate", f64::INFINITY),
        "Proposed value for producer_byte_rate is too large for a LONG.",
    );
    invalid(
        Alteration::raw([("ip", Some("::1"))]).set("connection_creation_rate", 3e9),
        "Proposed value for connection_creation_rate is too large for an INT.",
    );
    // 2^63 is not greater than (double) Long.MAX_VALUE, so Kafka accepts it.
    alter_ok(
        &Engine::new(),
        &[user("a").set("producer_byte_rate", 2f64.powi(63))],
    );
}

#[test]
fn values_that_are_not_finite() {
    // Kafka accepts these; a rate limit must be a number.
    invalid(
        user("a").set("request_percentage", f64::NAN),
        "Quota request_percentage must be a finite number",
    );
    invalid(
        user("a").set("controller_mutation_rate", f64::INFINITY),
        "Quota controller_mutation_rate must be a finite number",
    );
    invalid(
        user("a").set("producer_byte_rate", f64::NAN),
        "Quota producer_byte_rate must be a finite number",
    );
}

#[test]
fn first_error_in_kafka_order_wins() {
    // Kafka validates ops in HashMap order: `aaa` before `zzz`.
    invalid(
        user("a")
            .set("zzz", 1.0)
            .set("aaa", 1.0)
            .set("producer_byte_rate", 1.5),
        "Invalid configuration key aaa",
    );
}

#[test]
fn removing_an_absent_or_unknown_key_is_a_no_op() {
    let engine = Engine::new();
    let results = engine.alter(
        &[user("a").remove("producer_byte_rate").remove("bogus_key")],
        false,
    );
    assert!(results[0].error.is_none());
    assert_eq!(engine.entity_count(), 0);
}

#[test]
fn one_bad_entity_does_not_block_the_others() {
    let engine = Engine::new();
    let results = engine.alter(
        &[
            user("good").set("producer_byte_rate", 10.0),
            user("bad").set("producer_byte_rate", -1.0),
        ],
        false,
    );
    assert!(results[0].error.is_none());
    assert!(results[1].error.is_some());
    assert_eq!(engine.entity_count(), 1);
}

#[test]
fn validate_only_changes_nothing() {
    let engine = Engine::new();
    let results = engine.alter(
        &[
            user("good").set("producer_byte_rate", 10.0),
            user("bad").set("producer_byte_rate", -1.0),
        ],
        true,
    );
    assert!(results[0].error.is_none());
    assert_eq!(
        results[1].error.as_ref().unwrap().code,
        ErrorCode::INVALID_REQUEST
    );
    assert_eq!(engine.entity_count(), 0);
}

fn kip55() -> Engine {
    Engine::new()
}

fn policy(code: ErrorCode, msg: &str, expected: &str) {
    assert_eq!(code, ErrorCode::POLICY_VIOLATION);
    assert_eq!(msg, expected);
}

#[test]
fn sub_quotas_may_not_exceed_the_user_total() {
    let engine = kip55();
    alter_ok(&engine, &[user("user2").set("producer_byte_rate", 100.0)]);
    alter_ok(
        &engine,
        &[Alteration::new(&uc("user2", "a")).set("producer_byte_rate", 60.0)],
    );
    let (code, msg) = reject(
        &engine,
        Alteration::new(&uc("user2", "b")).set("producer_byte_rate", 50.0),
    );
    policy(
        code,
        &msg,
        "The sub-quotas of {user=user2} for producer_byte_rate would sum to 110, which exceeds the \
         total 100 of {user=user2}",
    );
    // Other units of the same type are separate totals.
    alter_ok(
        &engine,
        &[Alteration::new(&uc("user2", "b")).set("producer_byte_rate:bps", 500.0)],
    );
}

#[test]
fn lowering_the_total_below_the_sub_quotas_is_refused() {
    let engine = kip55();
    alter_ok(
        &engine,
        &[
            user("u").set("consumer_byte_rate:bps", 100.0),
            Alteration::new(&uc("u", "a")).set("consumer_byte_rate:bps", 70.0),
        ],
    );
    let (code, msg) = reject(&engine, user("u").set("consumer_byte_rate:bps", 50.0));
    policy(
        code,
        &msg,
        "The sub-quotas of {user=u} for consumer_byte_rate:bps would sum to 70, which exceeds the \
         total 50 of {user=u}",
    );
}

#[test]
fn default_client_sub_quota_may_not_exceed_the_total() {
    let engine = kip55();
    alter_ok(&engine, &[user("u").set("producer_byte_rate", 100.0)]);
    let (code, msg) = reject(
        &engine,
        Alteration::new(&Entity::UserClient(n("u"), d())).set("producer_byte_rate", 150.0),
    );
    policy(
        code,
        &msg,
        "The sub-quota of {user=u, client-id=<default>} for producer_byte_rate would be 150, which \
         exceeds the total 100 of {user=u}",
    );
}

#[test]
fn default_user_node_has_the_same_rules() {
    let engine = kip55();
    alter_ok(
        &engine,
        &[Alteration::new(&Entity::User(d())).set("producer_byte_rate", 10.0)],
    );
    let (code, msg) = reject(
        &engine,
        Alteration::new(&Entity::UserClient(d(), n("c"))).set("producer_byte_rate", 11.0),
    );
    policy(
        code,
        &msg,
        "The sub-quotas of {user=<default>} for producer_byte_rate would sum to 11, which exceeds \
         the total 10 of {user=<default>}",
    );
}

#[test]
fn a_batch_is_judged_as_a_whole() {
    let engine = kip55();
    alter_ok(&engine, &[user("u").set("producer_byte_rate", 50.0)]);
    // The sub-quota comes first, the raise second: together they are valid.
    alter_ok(
        &engine,
        &[
            Alteration::new(&uc("u", "a")).set("producer_byte_rate", 80.0),
            user("u").set("producer_byte_rate", 100.0),
        ],
    );
    assert_eq!(
        engine
            .resolve("u", "x")
            .get(kquota::QuotaKey::PRODUCER_BROKER_BPS)
            .unwrap()
            .limit,
        20.0
    );
}

#[test]
fn every_part_of_a_breaking_batch_is_refused() {
    let engine = kip55();
    alter_ok(&engine, &[user("u").set("producer_byte_rate", 100.0)]);
    let results = engine.alter(
        &[
            Alteration::new(&uc("u", "a")).set("producer_byte_rate", 60.0),
            Alteration::new(&uc("u", "b")).set("producer_byte_rate", 60.0),
            user("v").set("producer_byte_rate", 1.0),
        ],
        false,
    );
    assert_eq!(
        results[0].error.as_ref().unwrap().code,
        ErrorCode::POLICY_VIOLATION
    );
    assert_eq!(
        results[1].error.as_ref().unwrap().code,
        ErrorCode::POLICY_VIOLATION
    );
    assert!(results[2].error.is_none());
    assert_eq!(engine.entity_count(), 2);
}

#[test]
fn kafka_policy_has_no_sub_quota_rules() {
    let engine = EngineBuilder::default()
        .policy(SubQuotaPolicy::Kafka)
        .build()
        .unwrap();
    alter_ok(
        &engine,
        &[
            user("u").set("producer_byte_rate", 100.0),
            Alteration::new(&uc("u", "a")).set("producer_byte_rate", 500.0),
            Alteration::new(&Entity::UserClient(n("u"), d())).set("producer_byte_rate", 700.0),
        ],
    );
    // And the user's bucket keeps its full total.
    let q = engine
        .resolve("u", "")
        .get(kquota::QuotaKey::PRODUCER_BROKER_BPS)
        .unwrap();
    assert_eq!(q.limit, 100.0);
}

/// Kafka's `ClientQuotaManager` (found by `interop/quota-manager/parity.sh`) skips every user level for
/// an empty user name, as it skips every client-id level for an empty client-id; kquota applied the
/// `<default>` user levels 4 to 6 to it.
#[test]
fn an_empty_user_matches_only_client_id_levels() {
    let engine = EngineBuilder::default()
        .policy(SubQuotaPolicy::Kafka)
        .build()
        .unwrap();
    alter_ok(
        &engine,
        &[
            user_default().set("producer_byte_rate", 10.0),
            Alteration::new(&Entity::UserClient(d(), d())).set("producer_byte_rate", 20.0),
            Alteration::new(&Entity::UserClient(d(), n("c"))).set("producer_byte_rate", 30.0),
            Alteration::new(&Entity::ClientId(d())).set("producer_byte_rate", 40.0),
            Alteration::new(&Entity::ClientId(n("c"))).set("producer_byte_rate", 50.0),
        ],
    );
    let key = kquota::QuotaKey::PRODUCER_BROKER_BPS;
    let at = |u: &str, c: &str| engine.resolve(u, c).get(key).map(|q| (q.limit, q.level));
    assert_eq!(at("", "c"), Some((50.0, kquota::Level::ClientId)));
    assert_eq!(at("", "x"), Some((40.0, kquota::Level::DefaultClientId)));
    // Neither name: nothing applies.
    assert_eq!(at("", ""), None);
    // A named user still gets the default-user levels.
    assert_eq!(at("u", "c"), Some((30.0, kquota::Level::DefaultUserClient)));
    assert_eq!(at("u", ""), Some((10.0, kquota::Level::DefaultUser)));
    // describe follows the same rule.
    let described = engine.describe(Some(""), Some("x"), false);
    assert_eq!(described.len(), 1);
    assert_eq!(described[0].level, kquota::Level::DefaultClientId);
}

fn user_default() -> Alteration {
    Alteration::new(&Entity::User(d()))
}

#[test]
fn a_failed_persist_applies_nothing() {
    let engine = Engine::new();
    let batch = [user("a").set("producer_byte_rate", 10.0)];
    let failed = engine.alter_durably(&batch, false, |changes| {
        assert_eq!(changes.len(), 1);
        assert_eq!(
            changes[0].quotas,
            &[(kquota::QuotaKey::PRODUCER_BROKER_BPS, 10.0)]
        );
        Err("disk full")
    });
    assert_eq!(failed, Err("disk full"));
    assert_eq!(engine.entity_count(), 0);
    assert_eq!(engine.generation(), 0);
    let ok = engine.alter_durably(&batch, false, |_| Ok::<(), ()>(()));
    assert!(ok.unwrap()[0].error.is_none());
    assert_eq!(engine.generation(), 1);
}

#[test]
fn bulk_load_checks_what_an_alteration_checks() {
    use kquota::QuotaKey as K;
    let load = |policy, entries: Vec<(Entity, Vec<(K, f64)>)>| {
        Engine::builder()
            .policy(policy)
            .build()
            .unwrap()
            .load(entries)
    };
    let ok = vec![
        (Entity::User(n("u")), vec![(K::PRODUCER_BROKER_BPS, 100.0)]),
        (uc("u", "a"), vec![(K::PRODUCER_BROKER_BPS, 60.0)]),
        (
            Entity::Ip(n("10.0.0.1")),
            vec![(K::CONNECTION_CREATION_RATE, 5.0)],
        ),
    ];
    let engine = Engine::new();
    assert_eq!(engine.load(ok.clone()), Ok(3));
    assert_eq!(
        engine
            .resolve("u", "b")
            .get(K::PRODUCER_BROKER_BPS)
            .unwrap()
            .limit,
        40.0
    );
    // A second load into a non-empty engine is refused.
    assert!(engine.load(ok).is_err());

    let bad_value = vec![(Entity::User(n("u")), vec![(K::PRODUCER_BROKER_BPS, 1.5)])];
    let (entity, error) = load(SubQuotaPolicy::Kip55, bad_value).unwrap_err();
    assert_eq!(entity, Entity::User(n("u")));
    assert_eq!(
        error.message,
        "producer_byte_rate cannot be a fractional value."
    );

    let bad_key = vec![(
        Entity::User(n("u")),
        vec![(K::CONNECTION_CREATION_RATE, 1.0)],
    )];
    let (_, error) = load(SubQuotaPolicy::Kip55, bad_key).unwrap_err();
    assert_eq!(
        error.message,
        "Invalid configuration key connection_creation_rate"
    );

    let bad_ip = vec![(
        Entity::Ip(n("nope")),
        vec![(K::CONNECTION_CREATION_RATE, 1.0)],
    )];
    let (_, error) = load(SubQuotaPolicy::Kip55, bad_ip).unwrap_err();
    assert_eq!(error.message, "nope is not a valid IP or resolvable host.");

    let over = vec![
        (Entity::User(n("u")), vec![(K::PRODUCER_BROKER_BPS, 100.0)]),
        (uc("u", "a"), vec![(K::PRODUCER_BROKER_BPS, 70.0)]),
        (uc("u", "b"), vec![(K::PRODUCER_BROKER_BPS, 70.0)]),
    ];
    let (entity, error) = load(SubQuotaPolicy::Kip55, over.clone()).unwrap_err();
    assert_eq!(entity, Entity::User(n("u")));
    assert_eq!(error.code, ErrorCode::POLICY_VIOLATION);
    assert!(
        error.message.contains("would sum to 140"),
        "{}",
        error.message
    );
    // The kafka policy has no such rule.
    assert_eq!(load(SubQuotaPolicy::Kafka, over), Ok(3));
}

/// The builder's and the policy's errors are typed, and say what failed in the words kquotad prints.
#[test]
fn settings_errors_are_typed_and_worded() {
    use kquota::{EngineBuildError, ParseError, QuotaType};
    let err = Engine::builder().broker_count(0).build().unwrap_err();
    assert_eq!(err, EngineBuildError::ZeroBrokerCount);
    assert_eq!(err.to_string(), "broker count must be at least 1");
    let err = Engine::builder()
        .producer_capacity(f64::NAN)
        .build()
        .unwrap_err();
    assert!(matches!(
        err,
        EngineBuildError::InvalidCapacity {
            quota_type: QuotaType::ProducerByteRate,
            ..
        }
    ));
    assert_eq!(
        err.to_string(),
        "producer capacity must be finite and greater than 0, got NaN"
    );
    let err = Engine::builder()
        .consumer_capacity(-1.0)
        .build()
        .unwrap_err();
    assert_eq!(
        err,
        EngineBuildError::InvalidCapacity {
            quota_type: QuotaType::ConsumerByteRate,
            value: -1.0
        }
    );
    assert_eq!(
        err.to_string(),
        "consumer capacity must be finite and greater than 0, got -1"
    );
    let _: &dyn std::error::Error = &err;

    assert_eq!("kafka".parse(), Ok(SubQuotaPolicy::Kafka));
    assert_eq!("kip55".parse(), Ok(SubQuotaPolicy::Kip55));
    for policy in [SubQuotaPolicy::Kip55, SubQuotaPolicy::Kafka] {
        assert_eq!(policy.to_string().parse(), Ok(policy));
    }
    let err = "KIP55".parse::<SubQuotaPolicy>().unwrap_err();
    assert_eq!(err, ParseError::UnknownSubQuotaPolicy("KIP55".into()));
    assert_eq!(
        err.to_string(),
        "unknown sub-quota policy 'KIP55' (expected kip55 or kafka)"
    );
}

/// Debug output names things instead of showing indices and bitmasks.
#[test]
fn debug_output_is_readable() {
    let engine = Engine::new();
    alter_ok(&engine, &[user("u").set("producer_byte_rate:bps", 10.0)]);
    assert_eq!(
        format!("{:?}", engine.resolve("u", "c")),
        "Resolved {producer_byte_rate:bps: (10.0, User)}"
    );
    assert_eq!(format!("{:?}", engine.resolve("v", "c")), "Resolved {}");
    assert_eq!(
        format!("{:?}", ErrorCode::INVALID_REQUEST),
        "ErrorCode(42: INVALID_REQUEST)"
    );
    assert_eq!(format!("{:?}", ErrorCode(7)), "ErrorCode(7)");
}
