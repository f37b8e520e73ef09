//! Fuzzes the broker plug-in's callback with any Java strings (UTF-16 code units, lone surrogates
//! included) and any sequence of Kafka's quota changes: under the `kafka` policy every connection's
//! tags and limit must equal the model of Kafka's `DefaultQuotaCallback`
//! (`kquota-kafka/tests/model/mod.rs`); under `kip55` nothing may panic and a connection's limit must be
//! the one its tags look up.
//!
//! Run: `cd fuzz && RUSTC_BOOTSTRAP=1 cargo fuzz run kafka_callback -- -max_total_time=30`.

#![no_main]

use arbitrary::Arbitrary;
use kquota::SubQuotaPolicy;
use kquota_kafka::callback::{Callback, Part, QuotaType, Tags};
use kquota_kafka::names;
use libfuzzer_sys::fuzz_target;

#[path = "../../kquota-kafka/tests/model/mod.rs"]
mod model;

use model::{Comp, KafkaDefault};

#[derive(Arbitrary, Debug)]
struct Input {
    kip55: bool,
    /// Names as Java holds them; a few, so that changes and lookups meet.
    names: [Vec<u16>; 4],
    steps: Vec<Step>,
}

#[derive(Arbitrary, Debug)]
enum Step {
    Update { ty: u8, user: Component, client: Component, value: f64 },
    Remove { ty: u8, user: Component, client: Component },
}

#[derive(Arbitrary, Clone, Copy, Debug)]
enum Component {
    Absent,
    Default,
    Named(u8),
}

fuzz_target!(|input: Input| {
    let names: Vec<String> = input.names.iter().map(|u| names::from_java(u)).collect();
    let policy = if input.kip55 { SubQuotaPolicy::Kip55 } else { SubQuotaPolicy::Kafka };
    let cb = Callback::new(policy);
    let mut kafka: Vec<KafkaDefault> = (0..4).map(|_| KafkaDefault::default()).collect();
    let part = |c: Component| match c {
        Component::Absent => Part::Absent,
        Component::Default => Part::Default,
        Component::Named(i) => Part::Named(&names[i as usize % names.len()]),
    };
    let comp = |c: Component| match c {
        Component::Absent => Comp::Absent,
        Component::Default => Comp::Default,
        Component::Named(i) => Comp::Named(names[i as usize % names.len()].clone()),
    };
    for step in input.steps.iter().take(64) {
        let (ty, user, client, value) = match *step {
            Step::Update { ty, user, client, value } => (ty, user, client, Some(value)),
            Step::Remove { ty, user, client } => (ty, user, client, None),
        };
        let t = ty as usize % 4;
        let named_empty = |c: Component| matches!(c, Component::Named(i) if names[i as usize % names.len()].is_empty());
        // What Kafka's controller never hands a broker: no component, an empty name, a value at or
        // below 0, a byte rate beyond a LONG or more than 1e-6 from a whole number. The callback
        // refuses them and keeps its configuration.
        let byte_rate = t < 2;
        let refused = matches!((user, client), (Component::Absent, Component::Absent))
            || named_empty(user)
            || named_empty(client)
            || value.is_some_and(|v| {
                v <= 0.0 || (byte_rate && (v > i64::MAX as f64 || (v % 1.0).abs() > 1e-6))
            });
        let result = match value {
            Some(v) => cb.update(QuotaType::ALL[t], part(user), part(client), v),
            None => cb.remove(QuotaType::ALL[t], part(user), part(client)),
        };
        assert_eq!(result.is_err(), refused, "{step:?}: {result:?}");
        if refused {
            continue;
        }
        match value {
            Some(v) => kafka[t].update(comp(user), comp(client), v),
            None => kafka[t].remove(comp(user), comp(client)),
        }
    }
    let mut people: Vec<&str> = names.iter().map(String::as_str).collect();
    people.push("");
    for (t, ty) in QuotaType::ALL.into_iter().enumerate() {
        for user in &people {
            for client in &people {
                let (u, c) = match cb.tags(ty, user, client) {
                    Tags::UserClient => (*user, *client),
                    Tags::User => (*user, ""),
                    Tags::Client => ("", *client),
                };
                let limit = cb.limit(ty, u, c);
                if !input.kip55 {
                    assert_eq!((u.to_owned(), c.to_owned()), kafka[t].tags(user, client));
                    let want = kafka[t].limit(u, c);
                    assert!(
                        limit.map(f64::to_bits) == want.map(f64::to_bits),
                        "{ty:?} ({user:?}, {client:?}): {limit:?}, Kafka {want:?}"
                    );
                }
            }
        }
    }
});
