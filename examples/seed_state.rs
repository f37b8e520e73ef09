//! Loads the seeds' example state into an engine and prints the seeds' list, describe and alter output.
//!
//! Run with `cargo run --example seed_state`.

use kquota::{
    format_describe, format_list, Alteration, ComponentMatch, Engine, Entity, EntityName,
    EntityType, ListFilter,
};

fn named(s: &str) -> EntityName {
    EntityName::named(s).expect("non-empty")
}

fn main() {
    let engine = Engine::new();
    let client = || named("my-client");
    let seed = [
        Alteration::new(&Entity::UserClient(named("user-two"), client()))
            .set("consumer_byte_rate:shares", 200.0)
            .set("producer_byte_rate:bps", 10_000_000.0),
        Alteration::new(&Entity::UserClient(named("user-one"), client()))
            .set("producer_byte_rate", 2_000_000.0),
        Alteration::new(&Entity::UserClient(EntityName::Default, client()))
            .set("consumer_byte_rate:shares", 100.0)
            .set("producer_byte_rate", 500_000.0),
    ];
    for result in engine.alter(&seed, false) {
        if let Some(e) = result.error {
            eprintln!("seed alteration failed: {e}");
            std::process::exit(1);
        }
    }

    let by_client = ListFilter::all().with(
        EntityType::ClientId,
        ComponentMatch::Exact("my-client".into()),
    );
    println!("$ kafka-quotas --list --names=client-id=my-client\n");
    print!("{}", format_list(&engine.list(&by_client)));

    let by_prefix =
        ListFilter::all().with(EntityType::User, ComponentMatch::Prefix("user-".into()));
    println!("\n$ kafka-quotas --list --prefix=user=user-\n");
    print!("{}", format_list(&engine.list(&by_prefix)));

    println!("\n$ kafka-quotas --describe --names=user=user-two,client-id=my-client\n");
    print!(
        "{}",
        format_describe(&engine.describe(Some("user-two"), Some("my-client"), false))
    );

    println!(
        "\n$ kafka-quotas --describe --names=user=user-one,client-id=my-client --include-overrides\n"
    );
    print!(
        "{}",
        format_describe(&engine.describe(Some("user-one"), Some("my-client"), true))
    );

    println!(
        "\n$ kafka-quotas --alter --names=client-id=my-client --defaults=user \
         --add=producer_byte_rate:shares=100 --delete=producer_byte_rate:broker_bps\n"
    );
    let alter = Alteration::new(&Entity::UserClient(EntityName::Default, client()))
        .set("producer_byte_rate:shares", 100.0)
        .remove("producer_byte_rate");
    for result in engine.alter(&[alter], false) {
        if let Some(e) = result.error {
            eprintln!("alteration failed: {e}");
            std::process::exit(1);
        }
    }
    let defaults = ListFilter::all()
        .with(
            EntityType::ClientId,
            ComponentMatch::Exact("my-client".into()),
        )
        .with(EntityType::User, ComponentMatch::Default);
    println!("$ kafka-quotas --list --names=client-id=my-client --defaults=user\n");
    print!("{}", format_list(&engine.list(&defaults)));
}
