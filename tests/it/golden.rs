//! The seeds' list / describe / alter examples, made consistent as in `docs/semantics.md`, through
//! the library.

use kquota::{
    format_describe, format_list, Alteration, BrokerLimit, ComponentMatch, Engine, Entity,
    EntityType, Level, ListFilter, QuotaKey,
};

use kquota_testkit::{alter_ok, d, n, uc};

/// The state the seeds list.
fn seed_engine() -> Engine {
    let engine = Engine::builder().broker_count(4).build().unwrap();
    alter_ok(
        &engine,
        &[
            Alteration::new(&uc("user-two", "my-client"))
                .set("consumer_byte_rate:shares", 200.0)
                .set("producer_byte_rate:bps", 10_000_000.0),
            Alteration::new(&uc("user-one", "my-client")).set("producer_byte_rate", 2_000_000.0),
            Alteration::new(&Entity::UserClient(d(), n("my-client")))
                .set("consumer_byte_rate:shares", 100.0)
                .set("producer_byte_rate", 500_000.0),
        ],
    );
    engine
}

fn exact(name: &str) -> ComponentMatch {
    ComponentMatch::Exact(name.into())
}

#[test]
fn list_by_client_id() {
    let engine = seed_engine();
    let filter = ListFilter::all().with(EntityType::ClientId, exact("my-client"));
    assert_eq!(
        format_list(&engine.list(&filter)),
        "\
{user=user-one, client-id=my-client}
producer_byte_rate broker_bps 2000000

{user=user-two, client-id=my-client}
consumer_byte_rate shares 200
producer_byte_rate bps 10000000

{user=<default>, client-id=my-client}
consumer_byte_rate shares 100
producer_byte_rate broker_bps 500000
"
    );
}

#[test]
fn list_by_user_prefix() {
    let engine = seed_engine();
    let filter = ListFilter::all().with(EntityType::User, ComponentMatch::Prefix("user-".into()));
    assert_eq!(
        format_list(&engine.list(&filter)),
        "\
{user=user-one, client-id=my-client}
producer_byte_rate broker_bps 2000000

{user=user-two, client-id=my-client}
consumer_byte_rate shares 200
producer_byte_rate bps 10000000
"
    );
}

#[test]
fn describe_user_two() {
    let engine = seed_engine();
    let described = engine.describe(Some("user-two"), Some("my-client"), false);
    assert_eq!(
        format_describe(&described),
        "\
consumer_byte_rate shares     200      {user=user-two, client-id=my-client}
producer_byte_rate bps        10000000 {user=user-two, client-id=my-client}
producer_byte_rate broker_bps 500000   {user=<default>, client-id=my-client}
"
    );
    // Provenance beyond the text: levels, and what each unit means on this 4-broker cluster.
    assert_eq!(described[0].level, Level::UserClient);
    assert_eq!(described[2].level, Level::DefaultUserClient);
    assert_eq!(described[1].broker_limit, BrokerLimit::Rate(2_500_000.0));
    assert_eq!(
        described[0].broker_limit,
        BrokerLimit::Share {
            weight: 200.0,
            capacity: None
        }
    );
}

#[test]
fn describe_user_one_with_overrides() {
    let engine = seed_engine();
    assert_eq!(
        format_describe(&engine.describe(Some("user-one"), Some("my-client"), true)),
        "\
consumer_byte_rate    shares     100     {user=<default>, client-id=my-client}
producer_byte_rate    broker_bps 2000000 {user=user-one, client-id=my-client}
 * producer_byte_rate broker_bps 500000  {user=<default>, client-id=my-client}
"
    );
}

#[test]
fn alter_then_list_defaults() {
    let engine = seed_engine();
    let results = engine.alter(
        &[Alteration::new(&Entity::UserClient(d(), n("my-client")))
            .set("producer_byte_rate:shares", 100.0)
            .remove("producer_byte_rate:broker_bps")],
        false,
    );
    assert!(results.iter().all(|r| r.error.is_none()));
    let filter = ListFilter::all()
        .with(EntityType::ClientId, exact("my-client"))
        .with(EntityType::User, ComponentMatch::Default);
    assert_eq!(
        format_list(&engine.list(&filter)),
        "\
{user=<default>, client-id=my-client}
consumer_byte_rate shares 100
producer_byte_rate shares 100
"
    );
}

#[test]
fn strict_and_wildcard_filters() {
    let engine = seed_engine();
    alter_ok(
        &engine,
        &[Alteration::new(&Entity::ClientId(n("my-client"))).set("request_percentage", 12.5)],
    );
    let loose = ListFilter::all().with(EntityType::ClientId, exact("my-client"));
    assert_eq!(engine.list(&loose).len(), 4);
    let strict = loose.clone().strict();
    let listed = engine.list(&strict);
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].entity, Entity::ClientId(n("my-client")));
    assert_eq!(listed[0].quotas, vec![(QuotaKey::REQUEST_PERCENTAGE, 12.5)]);
    assert_eq!(
        format_list(&listed),
        "{client-id=my-client}\nrequest_percentage percent 12.5\n"
    );
    // Any user, named or default, with any client.
    let any_user = ListFilter::all().with(EntityType::User, ComponentMatch::Any);
    assert_eq!(engine.list(&any_user).len(), 3);
}
