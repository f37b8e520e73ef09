//! Changes another authority already accepted (`Engine::mirror`, a broker's quota callback mirroring
//! Kafka's controller), and the exact per-level lookups a Kafka-exact callback builds on
//! (`Engine::levels`, `Engine::value`).

use kquota::{Alteration, Engine, Entity, EntityName, QuotaKey, Shapes, SubQuotaPolicy};

fn user(name: &str) -> Entity {
    Entity::User(EntityName::named(name).unwrap())
}

fn pair(u: &str, c: &str) -> Entity {
    Entity::UserClient(EntityName::named(u).unwrap(), EntityName::named(c).unwrap())
}

fn engine(policy: SubQuotaPolicy) -> Engine {
    Engine::builder().policy(policy).build().unwrap()
}

const PRODUCE: QuotaKey = QuotaKey::PRODUCER_BROKER_BPS;

#[test]
fn mirror_stores_what_kafkas_controller_accepts_and_alter_refuses() {
    let e = engine(SubQuotaPolicy::Kafka);
    let near_whole = Alteration::new(&user("u")).set("producer_byte_rate", 5.000_000_1);
    assert!(e.alter(std::slice::from_ref(&near_whole), false)[0]
        .error
        .is_some());
    assert!(e.mirror(&[near_whole])[0].error.is_none());
    assert_eq!(e.value(&user("u"), PRODUCE), Some(5.000_000_1));
    let nan = Alteration::new(&user("u")).set("request_percentage", f64::NAN);
    assert!(e.mirror(&[nan])[0].error.is_none());
    assert!(e
        .value(&user("u"), QuotaKey::REQUEST_PERCENTAGE)
        .unwrap()
        .is_nan());
    let infinite = Alteration::new(&user("u")).set("controller_mutation_rate", f64::INFINITY);
    assert!(e.mirror(&[infinite])[0].error.is_none());
}

#[test]
fn mirror_refuses_what_kafkas_controller_refuses() {
    let e = engine(SubQuotaPolicy::Kafka);
    for (key, value) in [
        ("producer_byte_rate", 0.0),
        ("producer_byte_rate", -1.0),
        ("producer_byte_rate", 1.5),
        ("producer_byte_rate", f64::INFINITY),
        ("no_such_key", 1.0),
    ] {
        let a = Alteration::new(&user("u")).set(key, value);
        assert!(e.mirror(&[a])[0].error.is_some(), "{key}={value}");
    }
    assert_eq!(e.entity_count(), 0);
}

#[test]
fn mirror_skips_the_sub_quota_rules_and_resolution_bounds_what_breaks_them() {
    let e = engine(SubQuotaPolicy::Kip55);
    let total = Alteration::new(&user("u")).set("producer_byte_rate", 1_000.0);
    let above = Alteration::new(&pair("u", "a")).set("producer_byte_rate", 3_000.0);
    assert!(e.alter(&[total.clone(), above.clone()], false)[1]
        .error
        .is_some());
    assert!(e.mirror(&[total, above]).iter().all(|r| r.error.is_none()));
    // The sub-quota is held to its total, and the user's other clients share nothing.
    assert_eq!(e.resolve("u", "a").get(PRODUCE).unwrap().limit, 1_000.0);
    assert_eq!(e.resolve("u", "b").get(PRODUCE).unwrap().limit, 0.0);
}

#[test]
fn levels_are_exact_lookups_with_nothing_skipped() {
    let e = engine(SubQuotaPolicy::Kafka);
    let d = EntityName::Default;
    let named = |n: &str| EntityName::named(n).unwrap();
    let batch = [
        Alteration::new(&pair("u", "c")).set("producer_byte_rate", 1.0),
        Alteration::new(&Entity::UserClient(named("u"), d.clone())).set("producer_byte_rate", 2.0),
        Alteration::new(&user("u")).set("producer_byte_rate", 3.0),
        Alteration::new(&Entity::UserClient(d.clone(), named("c"))).set("producer_byte_rate", 4.0),
        Alteration::new(&Entity::UserClient(d.clone(), d.clone())).set("producer_byte_rate", 5.0),
        Alteration::new(&Entity::User(d.clone())).set("producer_byte_rate", 6.0),
        Alteration::new(&Entity::ClientId(named("c"))).set("producer_byte_rate", 7.0),
        Alteration::new(&Entity::ClientId(d)).set("producer_byte_rate", 8.0),
    ];
    assert!(e.alter(&batch, false).iter().all(|r| r.error.is_none()));
    let all: Vec<Option<f64>> = (1..=8).map(|v| Some(v as f64)).collect();
    assert_eq!(e.levels("u", "c", PRODUCE).values.to_vec(), all);
    // An empty name finds none of its own levels, but every default still answers (resolve skips
    // them, as Kafka's own lookup does).
    assert_eq!(
        e.levels("", "", PRODUCE).values,
        [
            None,
            None,
            None,
            None,
            Some(5.0),
            Some(6.0),
            None,
            Some(8.0)
        ]
    );
    assert_eq!(
        e.levels("u", "c", QuotaKey::CONSUMER_BROKER_BPS).values,
        [None; 8]
    );
    let every = Shapes {
        user_client: true,
        user: true,
        client: true,
    };
    assert_eq!(e.levels("u", "c", PRODUCE).shapes, every);
    assert_eq!(e.shapes(QuotaKey::CONSUMER_BROKER_BPS), Shapes::default());
}

#[test]
fn shapes_count_entities_in_and_out() {
    let e = engine(SubQuotaPolicy::Kafka);
    let a = Alteration::new(&user("a")).set("producer_byte_rate", 1.0);
    let b = Alteration::new(&user("b"))
        .set("producer_byte_rate", 1.0)
        .set("consumer_byte_rate", 1.0);
    assert!(e.alter(&[a, b], false).iter().all(|r| r.error.is_none()));
    let users = Shapes {
        user: true,
        ..Shapes::default()
    };
    assert_eq!(e.shapes(PRODUCE), users);
    let drop_a = Alteration::new(&user("a")).remove("producer_byte_rate");
    assert!(e.alter(&[drop_a], false)[0].error.is_none());
    assert_eq!(e.shapes(PRODUCE), users);
    let drop_b = Alteration::new(&user("b")).remove("producer_byte_rate");
    assert!(e.alter(&[drop_b], false)[0].error.is_none());
    assert_eq!(e.shapes(PRODUCE), Shapes::default());
    assert_eq!(e.shapes(QuotaKey::CONSUMER_BROKER_BPS), users);
}
