//! The `kafka` policy against a model of Kafka's `DefaultQuotaCallback` (`model/mod.rs`): random
//! sequences of updates and removals over a small pool of names (lone surrogates, the escape
//! character, NUL, the empty name among them), every connection's tags and limit compared after
//! every step, for every quota type. `interop/quota-manager/callback.sh` makes the same comparison
//! against Kafka's own classes, through the JVM.

mod model;

use kquota::SubQuotaPolicy;
use kquota_kafka::callback::{Callback, Part, QuotaType, Tags};
use kquota_kafka::names;
use model::{Comp, KafkaDefault};
use proptest::prelude::*;

/// Java strings as code units: plain, non-ASCII, a supplementary character, NUL, a lone surrogate of
/// each kind, the escape character, and a name equal to the escape of a lone surrogate.
fn pool() -> Vec<String> {
    let units: Vec<Vec<u16>> = vec![
        "alice".encode_utf16().collect(),
        "bob".encode_utf16().collect(),
        "é😀".encode_utf16().collect(),
        vec![0],
        vec![0x61, 0xD800],
        vec![0xDC00],
        vec![0xFFFF],
        "\u{FFFF}\u{F0000}".encode_utf16().collect(),
    ];
    units.iter().map(|u| names::from_java(u)).collect()
}

#[derive(Clone, Debug)]
enum Step {
    Update {
        ty: usize,
        user: Option<Option<usize>>,
        client: Option<Option<usize>>,
        value: f64,
    },
    Remove {
        ty: usize,
        user: Option<Option<usize>>,
        client: Option<Option<usize>>,
    },
}

fn component() -> impl Strategy<Value = Option<Option<usize>>> {
    prop_oneof![
        Just(None),
        Just(Some(None)),
        (0..8usize).prop_map(|i| Some(Some(i)))
    ]
}

fn step() -> impl Strategy<Value = Step> {
    let value = prop_oneof![
        (1u32..5).prop_map(|v| v as f64 * 100.0),
        Just(5.000_000_1),
        Just(f64::NAN)
    ];
    prop_oneof![
        3 => (0..4usize, component(), component(), value).prop_map(|(ty, user, client, value)| Step::Update { ty, user, client, value }),
        1 => (0..4usize, component(), component()).prop_map(|(ty, user, client)| Step::Remove { ty, user, client }),
    ]
}

fn part<'a>(names: &'a [String], c: Option<Option<usize>>) -> Part<'a> {
    match c {
        None => Part::Absent,
        Some(None) => Part::Default,
        Some(Some(i)) => Part::Named(&names[i]),
    }
}

fn comp(names: &[String], c: Option<Option<usize>>) -> Comp {
    match c {
        None => Comp::Absent,
        Some(None) => Comp::Default,
        Some(Some(i)) => Comp::Named(names[i].clone()),
    }
}

fn same(a: Option<f64>, b: Option<f64>) -> bool {
    match (a, b) {
        (Some(x), Some(y)) => x == y || (x.is_nan() && y.is_nan()),
        (None, None) => true,
        _ => false,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn kafka_policy_answers_as_kafkas_default_callback(steps in prop::collection::vec(step(), 1..40)) {
        let names = pool();
        let cb = Callback::new(SubQuotaPolicy::Kafka);
        let mut kafka: Vec<KafkaDefault> = (0..4).map(|_| KafkaDefault::default()).collect();
        let mut users: Vec<&str> = names.iter().map(String::as_str).collect();
        users.extend(["", "carol"]);
        for step in steps {
            match step {
                Step::Update { ty, user, client, value } => {
                    if user.is_none() && client.is_none() {
                        continue;
                    }
                    cb.update(QuotaType::ALL[ty], part(&names, user), part(&names, client), value).unwrap();
                    kafka[ty].update(comp(&names, user), comp(&names, client), value);
                }
                Step::Remove { ty, user, client } => {
                    if user.is_none() && client.is_none() {
                        continue;
                    }
                    cb.remove(QuotaType::ALL[ty], part(&names, user), part(&names, client)).unwrap();
                    kafka[ty].remove(comp(&names, user), comp(&names, client));
                }
            }
            for (t, ty) in QuotaType::ALL.into_iter().enumerate() {
                for user in &users {
                    for client in &users {
                        let expected = kafka[t].tags(user, client);
                        let got = match cb.tags(ty, user, client) {
                            Tags::UserClient => (user.to_string(), client.to_string()),
                            Tags::User => (user.to_string(), String::new()),
                            Tags::Client => (String::new(), client.to_string()),
                        };
                        prop_assert_eq!(&got, &expected, "{:?} tags of ({:?}, {:?})", ty, user, client);
                        let (limit, want) = (cb.limit(ty, &got.0, &got.1), kafka[t].limit(&expected.0, &expected.1));
                        prop_assert!(same(limit, want), "{:?} limit of {:?}: {:?}, Kafka {:?}", ty, got, limit, want);
                    }
                }
            }
        }
    }
}
