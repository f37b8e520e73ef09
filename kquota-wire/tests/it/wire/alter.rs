//! AlterClientQuotas (49): golden bytes, batches, Kafka's per-entity errors, the store, and the
//! per-entry limits.

use super::*;

const ALTER_V0_REQUEST: &str = "\
    003100000000000600026b7100000003000000010004757365720003626f6200000001001270726f64756365725f6279
    74655f7261746540900000000000000000000002000475736572ffff0009636c69656e742d6964000178000000020019
    636f6e73756d65725f627974655f726174653a7368617265734024000000000000000012726571756573745f70657263
    656e746167650000000000000000010000000100026970000b6e6f745f616e5f69702121000000010018636f6e6e6563
    74696f6e5f6372656174696f6e5f7261746540140000000000000000";
const ALTER_V0_RESPONSE: &str = "\
    0000000600000000000000030000ffff000000010004757365720003626f620000ffff000000020009636c69656e742d
    6964000178000475736572ffff002a00316e6f745f616e5f69702121206973206e6f7420612076616c6964204950206f
    72207265736f6c7661626c6520686f73742e0000000100026970000b6e6f745f616e5f69702121";
const ALTER_V1_REQUEST: &str = "\
    003100010000000600026b71000402057573657204626f6200021370726f64756365725f627974655f72617465409000
    000000000000000003057573657200000a636c69656e742d6964027800031a636f6e73756d65725f627974655f726174
    653a7368617265734024000000000000000013726571756573745f70657263656e746167650000000000000000010000
    020369700c6e6f745f616e5f69702121000219636f6e6e656374696f6e5f6372656174696f6e5f726174654014000000
    0000000000000000";
const ALTER_V1_RESPONSE: &str = "\
    0000000600000000000400000002057573657204626f620000000000030a636c69656e742d6964027800057573657200
    0000002a326e6f745f616e5f69702121206973206e6f7420612076616c6964204950206f72207265736f6c7661626c65
    20686f73742e020369700c6e6f745f616e5f69702121000000";

#[test]
fn alter_golden_v0_and_v1() {
    for (version, req_hex, resp_hex) in [
        (0, ALTER_V0_REQUEST, ALTER_V0_RESPONSE),
        (1, ALTER_V1_REQUEST, ALTER_V1_RESPONSE),
    ] {
        let h = handler();
        let f = frame(49, version, 6, &golden_alter_request());
        assert_hex("alter request", &f, req_hex);
        let bytes = respond(&h, &f);
        assert_hex("alter response", &bytes, resp_hex);
        let resp: AlterClientQuotasResponse = decode(&bytes, version, 6);
        let got: Vec<_> = resp
            .entries
            .iter()
            .map(|e| {
                (
                    e.error_code,
                    e.error_message.as_ref().map(|m| m.to_string()),
                    parts(e.entity.iter().map(|x| (&x.entity_type, &x.entity_name))),
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                (0, None, vec![p("user", Some("bob"))]),
                (0, None, vec![p("client-id", Some("x")), p("user", None)]),
                (
                    42,
                    Some("not_an_ip!! is not a valid IP or resolvable host.".to_owned()),
                    vec![p("ip", Some("not_an_ip!!"))]
                ),
            ]
        );
        // The valid entities were applied.
        let bob = h.engine().resolve("bob", "any");
        assert_eq!(
            bob.get(QuotaKey::PRODUCER_BROKER_BPS).unwrap().limit,
            1024.0
        );
        assert_eq!(h.engine().entity_count(), 2);
    }
}

#[test]
fn alter_then_describe_round_trip() {
    for (av, dv) in [(0, 1), (1, 0), (1, 1), (0, 0)] {
        let h = handler();
        let resp = alter(&h, av, &golden_alter_request());
        assert_eq!(resp.entries.len(), 3);
        let described = describe(
            &h,
            dv,
            &describe_request(vec![component("client-id", 0, Some("x"))], false),
        );
        let entries = described.entries.unwrap();
        assert_eq!(entries.len(), 1);
        assert_eq!(
            parts(
                entries[0]
                    .entity
                    .iter()
                    .map(|x| (&x.entity_type, &x.entity_name))
            ),
            vec![p("client-id", Some("x")), p("user", None)]
        );
        assert_eq!(entries[0].values.len(), 1);
        assert_eq!(
            entries[0].values[0].key.as_str(),
            "consumer_byte_rate:shares"
        );
        assert_eq!(entries[0].values[0].value, 10.0);
        // Remove it again over the wire.
        let removal = AlterClientQuotasRequest::default().with_entries(vec![alter_entry(
            vec![
                alter_entity("client-id", Some("x")),
                alter_entity("user", None),
            ],
            vec![op("consumer_byte_rate:shares", 123.0, true)],
        )]);
        let resp = alter(&h, av, &removal);
        assert_eq!(resp.entries[0].error_code, 0);
        let described = describe(
            &h,
            dv,
            &describe_request(vec![component("client-id", 0, Some("x"))], false),
        );
        assert!(described.entries.unwrap().is_empty());
    }
}

#[test]
fn validate_only_answers_and_changes_nothing() {
    for version in [0, 1] {
        let h = handler();
        let req = golden_alter_request().with_validate_only(true);
        let resp = alter(&h, version, &req);
        let codes: Vec<i16> = resp.entries.iter().map(|e| e.error_code).collect();
        assert_eq!(codes, vec![0, 0, 42]);
        assert_eq!(h.engine().entity_count(), 0);
    }
}

#[test]
fn alter_answers_once_per_distinct_entity_in_first_appearance_order() {
    let h = handler();
    let req = AlterClientQuotasRequest::default().with_entries(vec![
        alter_entry(
            vec![alter_entity("user", Some("u2"))],
            vec![op("producer_byte_rate", 1.0, false)],
        ),
        alter_entry(
            vec![alter_entity("user", Some("alice"))],
            vec![op("producer_byte_rate", 100.0, false)],
        ),
        alter_entry(
            vec![alter_entity("user", Some("u1"))],
            vec![op("bogus", 1.0, false)],
        ),
        alter_entry(
            vec![alter_entity("user", Some("alice"))],
            vec![op("consumer_byte_rate", 200.0, false)],
        ),
    ]);
    let resp = alter(&h, 1, &req);
    let got: Vec<_> = resp
        .entries
        .iter()
        .map(|e| {
            (
                parts(e.entity.iter().map(|x| (&x.entity_type, &x.entity_name))),
                e.error_code,
                e.error_message.as_ref().map(|m| m.to_string()),
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            (vec![p("user", Some("u2"))], 0, None),
            (
                vec![p("user", Some("alice"))],
                42,
                Some(
                    "Ignoring duplicate entity ClientQuotaEntity(entries={user=alice})".to_owned()
                )
            ),
            (
                vec![p("user", Some("u1"))],
                42,
                Some("Invalid configuration key bogus".to_owned())
            ),
        ]
    );
    // Nothing reported as failed took effect.
    assert!(h
        .engine()
        .resolve("alice", "c")
        .get(QuotaKey::PRODUCER_BROKER_BPS)
        .is_none());
    assert!(h
        .engine()
        .resolve("u2", "c")
        .get(QuotaKey::PRODUCER_BROKER_BPS)
        .is_some());
}

#[test]
fn a_repeated_entity_type_collapses_last_name_wins() {
    let h = handler();
    let req = AlterClientQuotasRequest::default().with_entries(vec![alter_entry(
        vec![
            alter_entity("user", Some("first")),
            alter_entity("client-id", Some("c")),
            alter_entity("user", Some("second")),
        ],
        vec![op("producer_byte_rate", 5.0, false)],
    )]);
    let resp = alter(&h, 0, &req);
    assert_eq!(resp.entries.len(), 1);
    assert_eq!(resp.entries[0].error_code, 0);
    assert_eq!(
        parts(
            resp.entries[0]
                .entity
                .iter()
                .map(|x| (&x.entity_type, &x.entity_name))
        ),
        vec![p("client-id", Some("c")), p("user", Some("second"))]
    );
    let listed = h.engine().list(&ListFilter::all());
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].entity, uc("second", "c"));
}

#[test]
fn alter_errors_are_per_entity_with_kafka_messages() {
    let h = handler();
    let req = AlterClientQuotasRequest::default().with_entries(vec![
        alter_entry(vec![], vec![op("producer_byte_rate", 1.0, false)]),
        alter_entry(vec![alter_entity("group", Some("g"))], vec![]),
        alter_entry(vec![alter_entity("user", Some(""))], vec![]),
        alter_entry(
            vec![
                alter_entity("ip", Some("1.2.3.4")),
                alter_entity("user", Some("a")),
            ],
            vec![],
        ),
        alter_entry(
            vec![alter_entity("user", Some("b"))],
            vec![op("producer_byte_rate", 0.0, false)],
        ),
        alter_entry(
            vec![alter_entity("user", Some("c"))],
            vec![op("producer_byte_rate", 1.5, false)],
        ),
        alter_entry(
            vec![alter_entity("user", Some("d"))],
            vec![op("producer_byte_rate:furlongs", 1.0, false)],
        ),
        // A remove of an unknown key is a successful no-op.
        alter_entry(
            vec![alter_entity("user", Some("e"))],
            vec![op("bogus_key", 0.0, true)],
        ),
    ]);
    let resp = alter(&h, 1, &req);
    let got: Vec<(i16, Option<String>)> = resp
        .entries
        .iter()
        .map(|e| {
            (
                e.error_code,
                e.error_message.as_ref().map(|m| m.to_string()),
            )
        })
        .collect();
    let err = |m: &str| (42, Some(m.to_owned()));
    assert_eq!(
        got,
        vec![
            err("Invalid empty client quota entity"),
            err("Unhandled client quota entity type: group"),
            err("Empty user not supported"),
            err("Invalid quota entity combination, IP entity shouldnot be combined with User or ClientId"),
            err("Quota producer_byte_rate must be greater than 0"),
            err("producer_byte_rate cannot be a fractional value."),
            err("Invalid configuration key producer_byte_rate:furlongs: unknown unit 'furlongs' for producer_byte_rate (expected bps, broker_bps, shares)"),
            (0, None),
        ]
    );
    assert_eq!(h.engine().entity_count(), 0);
}

#[test]
fn an_empty_alter_answers_no_entries() {
    for version in [0, 1] {
        let h = handler();
        let resp = alter(&h, version, &AlterClientQuotasRequest::default());
        assert!(resp.entries.is_empty());
    }
}

#[test]
fn sub_quota_breaches_are_policy_violations_on_the_wire() {
    let h = handler();
    alter_ok(
        h.engine(),
        &[Alteration::new(&Entity::User(n("alice"))).set("producer_byte_rate", 100.0)],
    );
    let req = AlterClientQuotasRequest::default().with_entries(vec![alter_entry(
        vec![
            alter_entity("user", Some("alice")),
            alter_entity("client-id", Some("a")),
        ],
        vec![op("producer_byte_rate", 101.0, false)],
    )]);
    let resp = alter(&h, 1, &req);
    assert_eq!(resp.entries[0].error_code, 44);
    assert!(resp.entries[0].error_message.is_some());
}

#[test]
fn a_store_makes_wire_alterations_durable() {
    use kquota_store::Store;
    let dir = std::env::temp_dir().join(format!(
        "kquota-wire-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    {
        let store = Arc::new(Store::open(&dir).unwrap());
        let h = handler().with_store(store.clone());
        // validate_only writes nothing.
        alter(&h, 1, &golden_alter_request().with_validate_only(true));
        assert!(store.entries().unwrap().is_empty());
        let resp = alter(&h, 1, &golden_alter_request());
        let codes: Vec<i16> = resp.entries.iter().map(|e| e.error_code).collect();
        assert_eq!(codes, vec![0, 0, 42]);
        let draft = AlterQuotasRequest {
            entries: vec![AlterQuotasEntry::new(
                &Entity::User(n("carol")),
                vec![QuotaOp::set(QuotaKey::CONSUMER_BPS, 77)],
            )],
            validate_only: false,
        };
        let resp = AlterQuotasResponse::decode(&respond(&h, &draft_frame(2, &draft))[4..]).unwrap();
        assert_eq!(resp.entries[0].error_code, 0);
        assert_eq!(store.entries().unwrap().len(), 3);
    }
    // Reopened, the store loads the same state into a fresh engine.
    let store = Store::open(&dir).unwrap();
    let engine = Engine::new();
    assert_eq!(store.load_into(&engine).unwrap(), 3);
    assert_eq!(
        engine
            .resolve("carol", "x")
            .get(QuotaKey::CONSUMER_BPS)
            .map(|q| q.limit),
        Some(77.0)
    );
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
}

/// An entry of `n` ops removing distinct unknown keys (each a successful no-op in Kafka).
fn bogus_removes(n: usize) -> Vec<OpData> {
    (0..n)
        .map(|i| {
            OpData::default()
                .with_key(StrBytes::from_string(format!("bogus{i}")))
                .with_remove(true)
        })
        .collect()
}

#[test]
fn entries_with_too_many_ops_are_refused_quickly() {
    let h = handler();
    // 64 ops are the most an entry may carry.
    let ok = AlterClientQuotasRequest::default().with_entries(vec![alter_entry(
        vec![alter_entity("user", Some("a"))],
        bogus_removes(64),
    )]);
    assert_eq!(alter(&h, 1, &ok).entries[0].error_code, 0);
    // 200,000 ops in one entry (the engine's checks are quadratic in them) are refused at once.
    let big = AlterClientQuotasRequest::default().with_entries(vec![
        alter_entry(
            vec![alter_entity("user", Some("a"))],
            bogus_removes(200_000),
        ),
        alter_entry(
            vec![alter_entity("user", Some("b"))],
            vec![op("producer_byte_rate", 10.0, false)],
        ),
    ]);
    let started = std::time::Instant::now();
    let resp = alter(&h, 1, &big);
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
    assert_eq!(resp.entries[0].error_code, 42);
    assert_eq!(
        resp.entries[0].error_message.as_deref(),
        Some("Too many quota ops for entity ClientQuotaEntity(entries={user=a}): 200000 (at most 64)")
    );
    assert_eq!(resp.entries[1].error_code, 0);
    // A repeat of an oversized entity still makes every copy a duplicate, as in Kafka.
    let repeated = AlterClientQuotasRequest::default().with_entries(vec![
        alter_entry(
            vec![alter_entity("user", Some("c"))],
            vec![op("producer_byte_rate", 10.0, false)],
        ),
        alter_entry(vec![alter_entity("user", Some("c"))], bogus_removes(65)),
    ]);
    let resp = alter(&h, 1, &repeated);
    assert_eq!(resp.entries.len(), 1);
    assert_eq!(
        resp.entries[0].error_message.as_deref(),
        Some("Ignoring duplicate entity ClientQuotaEntity(entries={user=c})")
    );
    assert!(h
        .engine()
        .resolve("c", "x")
        .get(QuotaKey::PRODUCER_BROKER_BPS)
        .is_none());
}

#[test]
fn entities_with_many_types_get_kafkas_answer_quickly() {
    // 17 to 40 distinct types: the wire layer answers; the engine, given the same alteration,
    // must agree.
    for n in 17..40 {
        let h = handler();
        let types: Vec<String> = (0..n).map(|i| format!("t{i}")).collect();
        let mut entity: Vec<AlterEntity> = types
            .iter()
            .map(|t| {
                AlterEntity::default()
                    .with_entity_type(StrBytes::from_string(t.clone()))
                    .with_entity_name(Some(s("x")))
            })
            .collect();
        entity.push(alter_entity("user", Some("")));
        let req = AlterClientQuotasRequest::default()
            .with_entries(vec![alter_entry(entity.clone(), vec![])]);
        let resp = alter(&h, 1, &req);
        let direct = h.engine().alter(
            &[Alteration::raw(entity.iter().map(|e| {
                (
                    e.entity_type.to_string(),
                    e.entity_name.as_ref().map(|n| n.to_string()),
                )
            }))],
            true,
        );
        assert_eq!(resp.entries[0].error_code, 42);
        assert_eq!(
            resp.entries[0].error_message.as_deref(),
            direct[0].error.as_ref().map(|e| e.message.as_str()),
            "{n} types"
        );
        // With a duplicate key, the duplicate-entity message, as the engine gives it.
        let req = AlterClientQuotasRequest::default().with_entries(vec![alter_entry(
            entity.clone(),
            vec![
                op("producer_byte_rate", 1.0, true),
                op("producer_byte_rate:broker_bps", 1.0, false),
            ],
        )]);
        let resp = alter(&h, 0, &req);
        let direct = h.engine().alter(
            &[Alteration::raw(entity.iter().map(|e| {
                (
                    e.entity_type.to_string(),
                    e.entity_name.as_ref().map(|n| n.to_string()),
                )
            }))
            .remove("producer_byte_rate")
            .set("producer_byte_rate:broker_bps", 1.0)],
            true,
        );
        assert_eq!(
            resp.entries[0].error_message.as_deref(),
            direct[0].error.as_ref().map(|e| e.message.as_str()),
            "{n} types, duplicate key"
        );
    }
    // 50,000 types in one entity are answered at once.
    let h = handler();
    let entity: Vec<AlterEntity> = (0..50_000)
        .map(|i| {
            AlterEntity::default()
                .with_entity_type(StrBytes::from_string(format!("t{i}")))
                .with_entity_name(None)
        })
        .collect();
    let req = AlterClientQuotasRequest::default().with_entries(vec![alter_entry(entity, vec![])]);
    let started = std::time::Instant::now();
    let resp = alter(&h, 1, &req);
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
    assert!(resp.entries[0]
        .error_message
        .as_deref()
        .unwrap()
        .starts_with("Unhandled client quota entity type: t"));
    assert_eq!(h.engine().entity_count(), 0);
}
