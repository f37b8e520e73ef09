//! DescribeClientQuotas (48): golden bytes, matching, and Kafka's validation errors.

use super::*;

const DESCRIBE_V0_REQUEST: &str = "003000000000000500026b710000000100047573657202ffff00";
const DESCRIBE_V0_RESPONSE: &str = "\
    00000005000000000000000000000002000000020009636c69656e742d6964000263310004757365720005616c696365
    000000010019636f6e73756d65725f627974655f726174653a7368617265734069000000000000000000010004757365
    720005616c69636500000001001270726f64756365725f627974655f72617465412e848000000000";
const DESCRIBE_V1_REQUEST: &str = "003000010000000500026b71000205757365720200000000";
const DESCRIBE_V1_RESPONSE: &str = "\
    00000005000000000000000103030a636c69656e742d696403633100057573657206616c69636500021a636f6e73756d
    65725f627974655f726174653a7368617265734069000000000000000002057573657206616c69636500021370726f64
    756365725f627974655f72617465412e848000000000000000";

#[test]
fn describe_golden_v0_and_v1() {
    let h = seeded();
    let req = describe_request(vec![component("user", 2, None)], false);
    for (version, req_hex, resp_hex) in [
        (0, DESCRIBE_V0_REQUEST, DESCRIBE_V0_RESPONSE),
        (1, DESCRIBE_V1_REQUEST, DESCRIBE_V1_RESPONSE),
    ] {
        let f = frame(48, version, 5, &req);
        assert_hex("describe request", &f, req_hex);
        let bytes = respond(&h, &f);
        assert_hex("describe response", &bytes, resp_hex);
        let resp: DescribeClientQuotasResponse = decode(&bytes, version, 5);
        assert_eq!(resp.error_code, 0);
        // Kafka sends the schema default on success: an empty string, not null.
        assert_eq!(resp.error_message.as_deref(), Some(""));
        let entries = resp.entries.unwrap();
        let got: Vec<_> = entries
            .iter()
            .map(|e| {
                (
                    parts(e.entity.iter().map(|x| (&x.entity_type, &x.entity_name))),
                    e.values
                        .iter()
                        .map(|v| (v.key.to_string(), v.value))
                        .collect::<Vec<_>>(),
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                // The engine's order: a named client-id before an absent one. Within an entity,
                // Kafka's HashMap order: client-id before user.
                (
                    vec![p("client-id", Some("c1")), p("user", Some("alice"))],
                    vec![("consumer_byte_rate:shares".to_owned(), 200.0)]
                ),
                (
                    vec![p("user", Some("alice"))],
                    vec![("producer_byte_rate".to_owned(), 1e6)]
                ),
            ]
        );
    }
}

const DESCRIBE_ERROR_V0_RESPONSE: &str =
    "00000005000000000023001d556e737570706f7274656420656e7469747920747970652067726f7570ffffffff";
const DESCRIBE_ERROR_V1_RESPONSE: &str =
    "00000005000000000000231e556e737570706f7274656420656e7469747920747970652067726f75700000";

#[test]
fn describe_error_golden_v0_and_v1() {
    let h = seeded();
    let req = describe_request(vec![component("group", 2, None)], false);
    for (version, resp_hex) in [
        (0, DESCRIBE_ERROR_V0_RESPONSE),
        (1, DESCRIBE_ERROR_V1_RESPONSE),
    ] {
        let bytes = respond(&h, &frame(48, version, 5, &req));
        assert_hex("describe error response", &bytes, resp_hex);
        let resp: DescribeClientQuotasResponse = decode(&bytes, version, 5);
        assert_eq!(resp.error_code, 35);
        assert_eq!(
            resp.error_message.as_deref(),
            Some("Unsupported entity type group")
        );
        assert_eq!(resp.entries, None);
    }
}

#[test]
fn describe_matches_exact_default_and_specified() {
    let h = seeded();
    let keys = |resp: DescribeClientQuotasResponse| -> Vec<Vec<(String, Option<String>)>> {
        resp.entries
            .unwrap()
            .iter()
            .map(|e| parts(e.entity.iter().map(|x| (&x.entity_type, &x.entity_name))))
            .collect()
    };
    for version in [0, 1] {
        // No components, not strict: everything, in the engine's order.
        let all = keys(describe(&h, version, &describe_request(vec![], false)));
        assert_eq!(all.len(), 4);
        // No components, strict: nothing.
        assert!(keys(describe(&h, version, &describe_request(vec![], true))).is_empty());
        // EXACT user=alice, not strict: {user=alice} and {user=alice, client-id=c1}.
        let exact = keys(describe(
            &h,
            version,
            &describe_request(vec![component("user", 0, Some("alice"))], false),
        ));
        assert_eq!(exact.len(), 2);
        // EXACT user=alice, strict: only {user=alice}.
        let strict = keys(describe(
            &h,
            version,
            &describe_request(vec![component("user", 0, Some("alice"))], true),
        ));
        assert_eq!(strict, vec![vec![p("user", Some("alice"))]]);
        // DEFAULT client-id: {client-id=<default>} (null on the wire).
        let default = keys(describe(
            &h,
            version,
            &describe_request(vec![component("client-id", 1, None)], false),
        ));
        assert_eq!(default, vec![vec![p("client-id", None)]]);
        // SPECIFIED client-id, strict: both client-id entities that have nothing else.
        let specified = keys(describe(
            &h,
            version,
            &describe_request(vec![component("client-id", 2, None)], true),
        ));
        assert_eq!(specified, vec![vec![p("client-id", None)]]);
        // SPECIFIED ip.
        let ip = keys(describe(
            &h,
            version,
            &describe_request(vec![component("ip", 2, None)], false),
        ));
        assert_eq!(ip, vec![vec![p("ip", Some("10.0.0.1"))]]);
        // EXACT with an empty name matches nothing.
        assert!(keys(describe(
            &h,
            version,
            &describe_request(vec![component("user", 0, Some(""))], false)
        ))
        .is_empty());
    }
}

#[test]
fn a_stored_name_too_long_for_kafka_strings_is_a_server_error() {
    let engine = Engine::new();
    let long = "n".repeat(40_000);
    alter_ok(
        &engine,
        &[Alteration::new(&Entity::User(n(&long))).set("producer_byte_rate", 1.0)],
    );
    let h = handler_with(engine);
    for version in [0, 1] {
        let resp = describe(&h, version, &describe_request(vec![], false));
        assert_eq!(resp.error_code, -1);
        assert_eq!(resp.entries, None);
        // A filter that leaves it out still answers normally.
        let resp = describe(
            &h,
            version,
            &describe_request(vec![component("client-id", 2, None)], false),
        );
        assert_eq!(resp.error_code, 0);
    }
}

#[test]
fn every_describe_validation_error() {
    let h = seeded();
    let cases: Vec<(Vec<ComponentData>, i16, &str)> =
        vec![
        (vec![component("", 2, None)], 42, "Invalid empty entity type."),
        (
            vec![component("user", 2, None), component("user", 0, Some("a"))],
            42,
            "Entity type user cannot appear more than once in the filter.",
        ),
        (vec![component("foo", 0, Some("x"))], 35, "Unsupported entity type foo"),
        (
            vec![component("user", 0, None)],
            42,
            "Request specified MATCH_TYPE_EXACT, but set match string to null.",
        ),
        (
            vec![component("user", 1, Some("a"))],
            42,
            "Request specified MATCH_TYPE_DEFAULT, but also specified a match string.",
        ),
        (
            vec![component("user", 2, Some("a"))],
            42,
            "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string.",
        ),
        (vec![component("user", 7, None)], 42, "Unknown match type 7"),
        (vec![component("user", -1, Some("a"))], 42, "Unknown match type -1"),
        (
            vec![component("ip", 2, None), component("user", 2, None)],
            42,
            "Invalid entity filter component combination. IP filter component should not be used \
             with user or clientId filter component.",
        ),
        (
            vec![component("client-id", 1, None), component("ip", 0, Some("1.2.3.4"))],
            42,
            "Invalid entity filter component combination. IP filter component should not be used \
             with user or clientId filter component.",
        ),
        // The first failing component wins, in request order.
        (
            vec![component("user", 0, None), component("foo", 2, None)],
            42,
            "Request specified MATCH_TYPE_EXACT, but set match string to null.",
        ),
        (
            vec![component("foo", 2, None), component("", 2, None)],
            35,
            "Unsupported entity type foo",
        ),
    ];
    for version in [0, 1] {
        for (components, code, message) in &cases {
            let resp = describe(&h, version, &describe_request(components.clone(), false));
            assert_eq!(resp.error_code, *code, "{message}");
            assert_eq!(resp.error_message.as_deref(), Some(*message));
            assert_eq!(resp.entries, None, "{message}");
        }
    }
}

#[test]
fn a_filter_of_many_components_is_answered_as_its_first_four_decide() {
    // Kafka checks components in order, and with three entity types each allowed once the fourth
    // always fails if reached: a filter of 400,000 components gets the answer its first four give
    // (the rest are walked and checked, never kept).
    let h = seeded();
    let first_four = vec![
        component("client-id", 2, None),
        component("user", 0, Some("u")),
        component("ip", 2, None),
        component("user", 2, None),
    ];
    for version in [0, 1] {
        let short = describe(&h, version, &describe_request(first_four.clone(), false));
        let mut many = first_four.clone();
        many.extend((0..400_000).map(|_| component("", 0, None)));
        let long = describe(&h, version, &describe_request(many, false));
        assert_eq!(
            (long.error_code, long.error_message.as_deref()),
            (short.error_code, short.error_message.as_deref()),
            "v{version}"
        );
        assert_eq!(
            short.error_message.as_deref(),
            Some("Entity type user cannot appear more than once in the filter.")
        );
        assert!(long.entries.is_none());
    }
    // A request cut short after its fourth component still closes the connection: all of it is
    // walked.
    let mut frame_bytes = frame(48, 1, 5, &describe_request(first_four, false));
    frame_bytes.truncate(frame_bytes.len() - 2);
    assert!(matches!(
        close(&h, &frame_bytes),
        CloseReason::MalformedRequest { .. }
    ));
}
