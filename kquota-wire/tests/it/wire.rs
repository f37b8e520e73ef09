//! The wire handler: golden bytes for every served version of 48, 49 and the draft 50, ApiVersions,
//! Metadata and DescribeCluster, Kafka's validation and error shapes, and bad input that must close
//! the connection without a panic or a change to the engine.

use std::sync::Arc;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::alter_client_quotas_request::{
    EntityData as AlterEntity, EntryData as AlterEntry, OpData,
};
use kafka_protocol::messages::describe_client_quotas_request::ComponentData;
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{
    AlterClientQuotasRequest, AlterClientQuotasResponse, ApiVersionsRequest, ApiVersionsResponse,
    DescribeClientQuotasRequest, DescribeClientQuotasResponse, DescribeClusterRequest,
    DescribeClusterResponse, MetadataRequest, MetadataResponse, RequestHeader, ResponseHeader,
    TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, StrBytes};
use proptest::prelude::*;

use kquota::{Alteration, Engine, Entity, ListFilter, QuotaKey};
use kquota_wire::Session;
use kquota_wire::{
    AlterQuotasEntry, AlterQuotasRequest, AlterQuotasResponse, CloseReason, Handler, Outcome,
    QuotaEntityData, QuotaOp, ServerInfo,
};

use kquota_testkit::{alter_ok, d, n, uc};

// ---------------------------------------------------------------------------------------------
// Helpers

fn info() -> ServerInfo {
    ServerInfo {
        node_id: 1,
        host: "localhost".into(),
        port: 9092,
        cluster_id: "kquota-test".into(),
    }
}

fn handler_with(engine: Engine) -> Handler {
    Handler::new(Arc::new(engine), info())
}

fn handler() -> Handler {
    handler_with(Engine::new())
}

/// The state the describe vectors read.
fn seeded() -> Handler {
    let engine = Engine::new();
    alter_ok(
        &engine,
        &[
            Alteration::new(&Entity::User(n("alice"))).set("producer_byte_rate", 1_000_000.0),
            Alteration::new(&uc("alice", "c1")).set("consumer_byte_rate:shares", 200.0),
            Alteration::new(&Entity::ClientId(d())).set("request_percentage", 50.0),
            Alteration::new(&Entity::Ip(n("10.0.0.1"))).set("connection_creation_rate", 5.0),
        ],
    );
    handler_with(engine)
}

fn s(v: &'static str) -> StrBytes {
    StrBytes::from_static_str(v)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    let s: String = s.split_whitespace().collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// Compares bytes with a checked-in hex vector. With `KQUOTA_PRINT_GOLDEN` set, prints the actual
/// bytes instead (to review by hand before checking them in).
fn assert_hex(what: &str, actual: &[u8], expected: &str) {
    if std::env::var_os("KQUOTA_PRINT_GOLDEN").is_some() {
        eprintln!("GOLDEN {what}: {}", hex(actual));
        return;
    }
    let expected: String = expected.split_whitespace().collect();
    assert_eq!(hex(actual), expected, "{what}: golden bytes differ");
}

/// A request frame (header and body, no size prefix) encoded with kafka-protocol's client side.
fn frame<R: Encodable + HeaderVersion>(
    api_key: i16,
    version: i16,
    correlation_id: i32,
    body: &R,
) -> Vec<u8> {
    let mut buf = BytesMut::new();
    RequestHeader::default()
        .with_request_api_key(api_key)
        .with_request_api_version(version)
        .with_correlation_id(correlation_id)
        .with_client_id(Some(s("kq")))
        .encode(&mut buf, R::header_version(version))
        .unwrap();
    body.encode(&mut buf, version).unwrap();
    buf.to_vec()
}

/// A draft AlterQuotas frame: request header v1, then the body.
fn draft_frame(correlation_id: i32, body: &AlterQuotasRequest) -> Vec<u8> {
    let mut buf = BytesMut::new();
    RequestHeader::default()
        .with_request_api_key(50)
        .with_request_api_version(0)
        .with_correlation_id(correlation_id)
        .with_client_id(Some(s("kq")))
        .encode(&mut buf, 1)
        .unwrap();
    body.encode(&mut buf).unwrap();
    buf.to_vec()
}

fn respond(h: &Handler, frame: &[u8]) -> BytesMut {
    match h.handle(&mut Session::plaintext(), frame) {
        Outcome::Respond(b) => b,
        other => panic!("not answered: {other:?}"),
    }
}

fn close(h: &Handler, frame: &[u8]) -> CloseReason {
    match h.handle(&mut Session::plaintext(), frame) {
        Outcome::Close(reason) => reason,
        other => panic!("answered: {other:?}"),
    }
}

/// Decodes a response with kafka-protocol's client-side decoder, checking the correlation id and
/// that nothing is left over.
fn decode<R: Decodable + HeaderVersion>(bytes: &[u8], version: i16, correlation_id: i32) -> R {
    let mut buf = Bytes::copy_from_slice(bytes);
    let header = ResponseHeader::decode(&mut buf, R::header_version(version)).unwrap();
    assert_eq!(header.correlation_id, correlation_id);
    let body = R::decode(&mut buf, version).unwrap();
    assert_eq!(buf.remaining(), 0, "bytes left after the response");
    body
}

/// Everything the engine holds, to show a request changed nothing.
fn snapshot(h: &Handler) -> String {
    format!("{:?}", h.engine().list(&ListFilter::all()))
}

fn component(ty: &'static str, match_type: i8, m: Option<&'static str>) -> ComponentData {
    ComponentData::default()
        .with_entity_type(s(ty))
        .with_match_type(match_type)
        .with_match(m.map(s))
}

fn describe_request(components: Vec<ComponentData>, strict: bool) -> DescribeClientQuotasRequest {
    DescribeClientQuotasRequest::default()
        .with_components(components)
        .with_strict(strict)
}

fn alter_entity(ty: &'static str, name: Option<&'static str>) -> AlterEntity {
    AlterEntity::default()
        .with_entity_type(s(ty))
        .with_entity_name(name.map(s))
}

fn op(key: &'static str, value: f64, remove: bool) -> OpData {
    OpData::default()
        .with_key(s(key))
        .with_value(value)
        .with_remove(remove)
}

fn alter_entry(entity: Vec<AlterEntity>, ops: Vec<OpData>) -> AlterEntry {
    AlterEntry::default().with_entity(entity).with_ops(ops)
}

fn describe(
    h: &Handler,
    version: i16,
    req: &DescribeClientQuotasRequest,
) -> DescribeClientQuotasResponse {
    decode(&respond(h, &frame(48, version, 5, req)), version, 5)
}

fn alter(h: &Handler, version: i16, req: &AlterClientQuotasRequest) -> AlterClientQuotasResponse {
    decode(&respond(h, &frame(49, version, 6, req)), version, 6)
}

/// `(type, name)` pairs of a response entity.
fn parts<'a>(
    entity: impl IntoIterator<Item = (&'a StrBytes, &'a Option<StrBytes>)>,
) -> Vec<(String, Option<String>)> {
    entity
        .into_iter()
        .map(|(t, n)| (t.to_string(), n.as_ref().map(|n| n.to_string())))
        .collect()
}

fn p(t: &str, n: Option<&str>) -> (String, Option<String>) {
    (t.to_owned(), n.map(str::to_owned))
}

// ---------------------------------------------------------------------------------------------
// DescribeClientQuotas (48)

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

// ---------------------------------------------------------------------------------------------
// AlterClientQuotas (49)

fn golden_alter_request() -> AlterClientQuotasRequest {
    AlterClientQuotasRequest::default()
        .with_entries(vec![
            alter_entry(
                vec![alter_entity("user", Some("bob"))],
                vec![op("producer_byte_rate", 1024.0, false)],
            ),
            alter_entry(
                vec![
                    alter_entity("user", None),
                    alter_entity("client-id", Some("x")),
                ],
                vec![
                    op("consumer_byte_rate:shares", 10.0, false),
                    op("request_percentage", 0.0, true),
                ],
            ),
            alter_entry(
                vec![alter_entity("ip", Some("not_an_ip!!"))],
                vec![op("connection_creation_rate", 5.0, false)],
            ),
        ])
        .with_validate_only(false)
}

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

// ---------------------------------------------------------------------------------------------
// The draft AlterQuotas (50)

fn golden_draft_request() -> AlterQuotasRequest {
    AlterQuotasRequest {
        entries: vec![
            AlterQuotasEntry {
                entity: vec![
                    QuotaEntityData {
                        entity_type: "user".into(),
                        entity_name: None,
                    },
                    QuotaEntityData {
                        entity_type: "client-id".into(),
                        entity_name: Some("my-client".into()),
                    },
                ],
                ops: vec![
                    QuotaOp::set(QuotaKey::PRODUCER_SHARES, 100),
                    QuotaOp::remove(QuotaKey::PRODUCER_BROKER_BPS),
                ],
            },
            AlterQuotasEntry {
                entity: vec![QuotaEntityData {
                    entity_type: "user".into(),
                    entity_name: Some("u".into()),
                }],
                ops: vec![QuotaOp {
                    quota_type: "request_percentage".into(),
                    units: "furlongs".into(),
                    value: 5,
                    remove: false,
                }],
            },
        ],
        validate_only: false,
    }
}

const DRAFT_REQUEST: &str = "\
    003200000000000900026b710000000200000002000475736572ffff0009636c69656e742d696400096d792d636c6965
    6e7400000002001270726f64756365725f627974655f726174650006736861726573000000000000006400001270726f
    64756365725f627974655f72617465000a62726f6b65725f627073000000000000000001000000010004757365720001
    75000000010012726571756573745f70657263656e7461676500086675726c6f6e677300000000000000050000";
const DRAFT_RESPONSE: &str = "\
    0000000900000000000000020000ffff00000002000475736572ffff0009636c69656e742d696400096d792d636c6965
    6e74002a0078496e76616c696420636f6e66696775726174696f6e206b657920726571756573745f70657263656e7461
    67653a6675726c6f6e67733a20756e6b6e6f776e20756e697420276675726c6f6e67732720666f722072657175657374
    5f70657263656e74616765202865787065637465642070657263656e742900000001000475736572000175";

#[test]
fn draft_alter_quotas_golden() {
    let h = handler();
    let f = draft_frame(9, &golden_draft_request());
    assert_hex("draft request", &f, DRAFT_REQUEST);
    let bytes = respond(&h, &f);
    assert_hex("draft response", &bytes, DRAFT_RESPONSE);
    assert_eq!(&bytes[..4], &9i32.to_be_bytes());
    let resp = AlterQuotasResponse::decode(&bytes[4..]).unwrap();
    assert_eq!(
        resp,
        AlterQuotasResponse {
            throttle_time_ms: 0,
            entries: vec![
                kquota_wire::AlterQuotasResult {
                    error_code: 0,
                    error_message: None,
                    entity: golden_draft_request().entries[0].entity.clone(),
                },
                kquota_wire::AlterQuotasResult {
                    error_code: 42,
                    error_message: Some(
                        "Invalid configuration key request_percentage:furlongs: unknown unit \
                         'furlongs' for request_percentage (expected percent)"
                            .into()
                    ),
                    entity: golden_draft_request().entries[1].entity.clone(),
                },
            ],
        }
    );
    // The draft's units show up as keys in DescribeClientQuotas.
    let described = describe(
        &h,
        1,
        &describe_request(vec![component("client-id", 0, Some("my-client"))], true),
    );
    let entries = described.entries.unwrap();
    assert_eq!(entries.len(), 0, "strict excludes the user component");
    let described = describe(
        &h,
        1,
        &describe_request(vec![component("client-id", 0, Some("my-client"))], false),
    );
    let entries = described.entries.unwrap();
    assert_eq!(entries.len(), 1);
    assert_eq!(
        entries[0].values[0].key.as_str(),
        "producer_byte_rate:shares"
    );
    assert_eq!(entries[0].values[0].value, 100.0);
}

#[test]
fn draft_validate_only_and_native_units() {
    let h = handler();
    let entity = Entity::User(n("alice"));
    let req = AlterQuotasRequest {
        entries: vec![AlterQuotasEntry::new(
            &entity,
            vec![QuotaOp {
                quota_type: "producer_byte_rate".into(),
                units: "broker_bps".into(),
                value: 2_000_000,
                remove: false,
            }],
        )],
        validate_only: true,
    };
    let resp = AlterQuotasResponse::decode(&respond(&h, &draft_frame(1, &req))[4..]).unwrap();
    assert_eq!(resp.entries[0].error_code, 0);
    assert_eq!(h.engine().entity_count(), 0);
    let req = AlterQuotasRequest {
        validate_only: false,
        ..req
    };
    let resp = AlterQuotasResponse::decode(&respond(&h, &draft_frame(1, &req))[4..]).unwrap();
    assert_eq!(resp.entries[0].error_code, 0);
    // broker_bps is the native unit: the bare key.
    let listed = h.engine().list(&ListFilter::all());
    assert_eq!(listed[0].quotas, vec![(QuotaKey::PRODUCER_BROKER_BPS, 2e6)]);
}

#[test]
fn draft_ignores_trailing_bytes_as_every_api_does_and_can_be_disabled() {
    // Bytes after the draft's body are ignored, as after a request `kafka-protocol` decodes (49):
    // each answers and alters as without them.
    let draft = draft_frame(1, &golden_draft_request());
    let kafka = frame(49, 1, 1, &golden_alter_request());
    for f in [draft, kafka] {
        let clean = handler();
        let expected = respond(&clean, &f);
        let mut dirty = f.clone();
        dirty.push(0);
        let h = handler();
        assert_eq!(respond(&h, &dirty), expected, "{}", hex(&f));
        assert_eq!(snapshot(&h), snapshot(&clean), "{}", hex(&f));
        assert!(h.engine().entity_count() > 0, "{}", hex(&f));
    }
    let off = handler().with_draft_alter_quotas(false);
    let f = draft_frame(1, &golden_draft_request());
    assert!(matches!(
        close(&off, &f),
        CloseReason::UnsupportedApi { api_key: 50, .. }
    ));
    assert!(!off
        .supported_apis(&Session::plaintext())
        .iter()
        .any(|a| a.api_key == 50));
}

// ---------------------------------------------------------------------------------------------
// ApiVersions (18), Metadata (3), DescribeCluster (60)

const API_VERSIONS_V0_RESPONSE: &str =
    "0000000300000000000600030000000c001200000004003000000001003100000001003200000000003c00000001";
const API_VERSIONS_V3_RESPONSE: &str = "\
    0000000300000700030000000c0000120000000400003000000001000031000000010000320000000000003c00000001
    000000000000";
const API_VERSIONS_UNSUPPORTED_RESPONSE: &str = "00000003002300000001001200000004";

fn api_versions_request() -> ApiVersionsRequest {
    ApiVersionsRequest::default()
        .with_client_software_name(s("apache-kafka-java"))
        .with_client_software_version(s("4.3.1"))
}

#[test]
fn api_versions_lists_what_is_served() {
    let h = handler();
    for version in 0..=4 {
        let bytes = respond(&h, &frame(18, version, 3, &api_versions_request()));
        if version == 0 {
            assert_hex("ApiVersions v0", &bytes, API_VERSIONS_V0_RESPONSE);
        }
        if version == 3 {
            assert_hex("ApiVersions v3", &bytes, API_VERSIONS_V3_RESPONSE);
        }
        let resp: ApiVersionsResponse = decode(&bytes, version, 3);
        assert_eq!(resp.error_code, 0);
        let listed: Vec<(i16, i16, i16)> = resp
            .api_keys
            .iter()
            .map(|k| (k.api_key, k.min_version, k.max_version))
            .collect();
        assert_eq!(
            listed,
            vec![
                (3, 0, 12),
                (18, 0, 4),
                (48, 0, 1),
                (49, 0, 1),
                (50, 0, 0),
                (60, 0, 1)
            ]
        );
    }
}

#[test]
fn api_versions_of_an_unsupported_version_answers_in_v0_layout() {
    let h = handler();
    for version in [5, 127, -1, i16::MAX] {
        // The body is not read: garbage after the header is fine.
        let mut f = frame(18, version.clamp(0, 4), 3, &api_versions_request());
        f[2..4].copy_from_slice(&version.to_be_bytes());
        if version >= 3 {
            // Header v2: the tagged-field byte is already there (the client built a v3+ header).
        } else {
            // Header v1: drop the tagged-field byte the v3+ header had.
            f = frame(18, 0, 3, &api_versions_request());
            f[2..4].copy_from_slice(&version.to_be_bytes());
        }
        f.extend_from_slice(&[0xde, 0xad]);
        let bytes = respond(&h, &f);
        assert_hex(
            "ApiVersions unsupported",
            &bytes,
            API_VERSIONS_UNSUPPORTED_RESPONSE,
        );
        let resp: ApiVersionsResponse = decode(&bytes, 0, 3);
        assert_eq!(resp.error_code, 35);
        let listed: Vec<(i16, i16, i16)> = resp
            .api_keys
            .iter()
            .map(|k| (k.api_key, k.min_version, k.max_version))
            .collect();
        assert_eq!(listed, vec![(18, 0, 4)]);
    }
}

#[test]
fn api_versions_v3_checks_the_software_name() {
    let h = handler();
    for (name, version) in [("bad name", "1"), ("ok", "-1"), ("", "1")] {
        let req = ApiVersionsRequest::default()
            .with_client_software_name(StrBytes::from_string(name.to_owned()))
            .with_client_software_version(StrBytes::from_string(version.to_owned()));
        for v in [3, 4] {
            let resp: ApiVersionsResponse = decode(&respond(&h, &frame(18, v, 3, &req)), v, 3);
            assert_eq!(resp.error_code, 42);
            assert!(resp.api_keys.is_empty());
        }
    }
}

#[test]
fn metadata_names_this_node_as_broker_and_controller() {
    let h = handler();
    for version in 0..=12 {
        let req = if version == 0 {
            MetadataRequest::default().with_topics(Some(vec![]))
        } else {
            MetadataRequest::default().with_topics(None)
        };
        let resp: MetadataResponse = decode(&respond(&h, &frame(3, version, 4, &req)), version, 4);
        assert_eq!(resp.brokers.len(), 1, "v{version}");
        assert_eq!(*resp.brokers[0].node_id, 1);
        assert_eq!(resp.brokers[0].host.as_str(), "localhost");
        assert_eq!(resp.brokers[0].port, 9092);
        if version >= 1 {
            assert_eq!(*resp.controller_id, 1);
        }
        if version >= 2 {
            assert_eq!(resp.cluster_id.as_deref(), Some("kquota-test"));
        }
        assert!(resp.topics.is_empty());
        // A named topic is unknown.
        let named = MetadataRequest::default().with_topics(Some(vec![
            MetadataRequestTopic::default().with_name(Some(TopicName(s("t")))),
            MetadataRequestTopic::default().with_name(Some(TopicName(s("t")))),
        ]));
        let resp: MetadataResponse =
            decode(&respond(&h, &frame(3, version, 4, &named)), version, 4);
        assert_eq!(resp.topics.len(), 1);
        assert_eq!(resp.topics[0].error_code, 3);
        assert_eq!(resp.topics[0].name.as_ref().map(|n| n.as_str()), Some("t"));
    }
    // By topic id (v10+). kafka-protocol's Uuid is not nameable here, so patch the id's last byte
    // in the frame: header (13 bytes), the compact topic count (1), then the 16-byte id.
    let by_id = MetadataRequest::default()
        .with_topics(Some(vec![MetadataRequestTopic::default().with_name(None)]));
    let by_id_frame = |version: i16| {
        let mut f = frame(3, version, 4, &by_id);
        f[13 + 1 + 15] = 1;
        f
    };
    // v12: the id is unknown.
    let resp: MetadataResponse = decode(&respond(&h, &by_id_frame(12)), 12, 4);
    assert_eq!(resp.topics.len(), 1);
    assert_eq!(resp.topics[0].error_code, 100);
    assert_eq!(resp.topics[0].name, None);
    assert!(!resp.topics[0].topic_id.is_nil());
    // v10: ids are not supported in requests: INVALID_REQUEST for every topic, nothing else.
    let resp: MetadataResponse = decode(&respond(&h, &by_id_frame(10)), 10, 4);
    assert_eq!(resp.topics[0].error_code, 42);
    assert!(resp.brokers.is_empty());
}

#[test]
fn describe_cluster_names_this_node() {
    let h = handler();
    for version in [0, 1] {
        let req =
            DescribeClusterRequest::default().with_include_cluster_authorized_operations(true);
        let resp: DescribeClusterResponse =
            decode(&respond(&h, &frame(60, version, 8, &req)), version, 8);
        assert_eq!(resp.error_code, 0);
        assert_eq!(resp.error_message, None);
        assert_eq!(resp.cluster_id.as_str(), "kquota-test");
        assert_eq!(*resp.controller_id, 1);
        assert_eq!(resp.brokers.len(), 1);
        assert_eq!(*resp.brokers[0].broker_id, 1);
        assert_eq!(resp.brokers[0].host.as_str(), "localhost");
        assert_eq!(resp.cluster_authorized_operations, 8096);
    }
    let controller = DescribeClusterRequest::default().with_endpoint_type(2);
    let resp: DescribeClusterResponse = decode(&respond(&h, &frame(60, 1, 8, &controller)), 1, 8);
    assert_eq!(resp.error_code, 114);
    let unknown = DescribeClusterRequest::default().with_endpoint_type(9);
    let resp: DescribeClusterResponse = decode(&respond(&h, &frame(60, 1, 8, &unknown)), 1, 8);
    assert_eq!(resp.error_code, 115);
    assert_eq!(
        resp.error_message.as_deref(),
        Some("Unsupported endpoint type 9")
    );
}

// ---------------------------------------------------------------------------------------------
// Bad input

/// Valid frames of every served API and version, each with the number of bytes its message uses.
fn valid_frames() -> Vec<Vec<u8>> {
    let mut frames = Vec::new();
    for v in 0..=1 {
        frames.push(frame(
            48,
            v,
            1,
            &describe_request(
                vec![
                    component("user", 0, Some("alice")),
                    component("client-id", 2, None),
                ],
                true,
            ),
        ));
        frames.push(frame(49, v, 1, &golden_alter_request()));
        frames.push(frame(60, v, 1, &DescribeClusterRequest::default()));
    }
    for v in 0..=4 {
        frames.push(frame(18, v, 1, &api_versions_request()));
    }
    for v in 1..=12 {
        frames.push(frame(
            3,
            v,
            1,
            &MetadataRequest::default().with_topics(Some(vec![
                MetadataRequestTopic::default().with_name(Some(TopicName(s("t"))))
            ])),
        ));
    }
    frames.push(draft_frame(1, &golden_draft_request()));
    frames
}

#[test]
fn truncated_frames_close_without_touching_the_engine() {
    let h = seeded();
    let before = snapshot(&h);
    for f in valid_frames() {
        for cut in 0..f.len() {
            match h.handle(&mut Session::plaintext(), &f[..cut]) {
                Outcome::Close(_) => {}
                // An ApiVersions v0–2 body is empty: cutting nothing of it still answers.
                Outcome::Respond(_) => assert_eq!(f[1], 18, "a cut {cut} of {} answered", hex(&f)),
                Outcome::RespondAndClose(..) => {
                    panic!("a cut {cut} of {} failed authentication", hex(&f))
                }
            }
            assert_eq!(snapshot(&h), before);
        }
    }
}

#[test]
fn garbage_after_any_request_is_ignored_as_kafka_does() {
    // Every API, the draft (50) included: one rule, in the handler's decode step.
    for f in valid_frames() {
        let clean = respond(&handler(), &f);
        let mut dirty = f.clone();
        dirty.extend_from_slice(&[0xff; 9]);
        assert_eq!(respond(&handler(), &dirty), clean, "{}", hex(&f));
    }
}

/// A 48 v0 frame header followed by `body`.
fn raw(api_key: i16, version: i16, flexible_header: bool, body: &[u8]) -> Vec<u8> {
    let mut buf = BytesMut::new();
    buf.put_i16(api_key);
    buf.put_i16(version);
    buf.put_i32(77);
    buf.put_i16(-1); // null client id
    if flexible_header {
        buf.put_u8(0);
    }
    buf.put_slice(body);
    buf.to_vec()
}

#[test]
fn huge_counts_close_without_allocating() {
    let h = seeded();
    let before = snapshot(&h);
    let cases: Vec<Vec<u8>> = vec![
        // 48 v0: 2^31-1 components.
        raw(48, 0, false, &[0x7f, 0xff, 0xff, 0xff, 0]),
        // 48 v1: a compact count of 2^32-2.
        raw(48, 1, true, &[0xff, 0xff, 0xff, 0xff, 0x0f, 0, 0]),
        // 49 v0: 2^31-1 entries.
        raw(49, 0, false, &[0x7f, 0xff, 0xff, 0xff, 0]),
        // 49 v0: one entry whose entity count is huge.
        raw(
            49,
            0,
            false,
            &[0, 0, 0, 1, 0x7f, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0],
        ),
        // 49 v1: one entry, no entity parts, a huge op count.
        raw(49, 1, true, &[2, 1, 0xfe, 0xff, 0xff, 0xff, 0x0f, 0, 0, 0]),
        // 49 v1: a huge tagged-field count at the end.
        raw(49, 1, true, &[1, 0, 0xff, 0xff, 0xff, 0xff, 0x07]),
        // 49 v1: a tagged field claiming 2^32-1 bytes.
        raw(49, 1, true, &[1, 0, 1, 0, 0xff, 0xff, 0xff, 0xff, 0x0f]),
        // 49 v0: a string claiming 32767 bytes.
        raw(49, 0, false, &[0, 0, 0, 1, 0, 0, 0, 1, 0x7f, 0xff, b'u']),
        // 49 v1: a compact string longer than Kafka allows (0x8000 bytes), all present.
        {
            let mut body = vec![2, 2, 0x81, 0x80, 0x02];
            body.extend(std::iter::repeat_n(b'a', 0x8000));
            body.extend_from_slice(&[0, 0, 1, 0, 0]);
            raw(49, 1, true, &body)
        },
        // 49 v1: an over-long varint.
        raw(49, 1, true, &[0xff, 0xff, 0xff, 0xff, 0xff, 0x01]),
        // 3 v9: a huge topic count.
        raw(3, 9, true, &[0xff, 0xff, 0xff, 0xff, 0x0f]),
        // 3 v0: a huge topic count.
        raw(3, 0, false, &[0x7f, 0xff, 0xff, 0xff]),
        // 50: 2^31-1 entries, and one entry with a huge op count.
        raw(50, 0, false, &[0x7f, 0xff, 0xff, 0xff, 0]),
        raw(
            50,
            0,
            false,
            &[0, 0, 0, 1, 0, 0, 0, 0, 0x7f, 0xff, 0xff, 0xff, 0],
        ),
        // A negative array length other than -1.
        raw(49, 0, false, &[0xff, 0xff, 0xff, 0xfe, 0]),
        // A null where the schema has none.
        raw(48, 0, false, &[0xff, 0xff, 0xff, 0xff, 0]),
    ];
    for f in cases {
        match h.handle(&mut Session::plaintext(), &f) {
            Outcome::Close(CloseReason::MalformedRequest { .. }) => {}
            other => panic!("{}: {other:?}", hex(&f)),
        }
        assert_eq!(snapshot(&h), before);
    }
}

#[test]
fn invalid_utf8_closes() {
    let h = handler();
    // 49 v0: one entry, one entity part whose type is the byte 0xff.
    let f = raw(
        49,
        0,
        false,
        &[
            0, 0, 0, 1, 0, 0, 0, 1, 0, 1, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0,
        ],
    );
    assert!(matches!(
        close(&h, &f),
        CloseReason::MalformedRequest { .. }
    ));
}

#[test]
fn unknown_api_keys_and_versions_close() {
    let h = seeded();
    let before = snapshot(&h);
    for (key, version) in [
        (0, 9),
        (1, 12),
        (19, 5),
        (51, 0),
        (1000, 0),
        (-1, 0),
        (i16::MIN, 0),
        (17, 1),
    ] {
        let f = raw(key, version, false, &[0, 0, 0, 0]);
        assert_eq!(
            close(&h, &f),
            CloseReason::UnsupportedApi {
                api_key: key,
                api_version: version
            }
        );
    }
    for (key, version) in [
        (48, 2),
        (48, -1),
        (49, 2),
        (50, 1),
        (3, 13),
        (60, 2),
        (3, -1),
    ] {
        let f = raw(key, version, true, &[0, 0, 0, 0]);
        assert_eq!(
            close(&h, &f),
            CloseReason::UnsupportedVersion {
                api_key: key,
                api_version: version
            }
        );
    }
    // Frames too short for a header.
    for f in [
        &[][..],
        &[0],
        &[0, 48],
        &[0, 48, 0],
        &[0, 48, 0, 0, 0, 0, 0],
    ] {
        assert!(matches!(close(&h, f), CloseReason::MalformedHeader(_)));
    }
    assert_eq!(snapshot(&h), before);
}

#[test]
fn responses_carry_the_correlation_id_and_header_version() {
    let h = handler();
    // 48 v1 answers with a v1 header (a tagged-field byte after the correlation id).
    let bytes = respond(
        &h,
        &frame(48, 1, 0x01020304, &describe_request(vec![], true)),
    );
    assert_eq!(&bytes[..5], &[1, 2, 3, 4, 0]);
    // ApiVersions v3 answers with a v0 header.
    let bytes = respond(&h, &frame(18, 3, 0x01020304, &api_versions_request()));
    assert_eq!(&bytes[..6], &[1, 2, 3, 4, 0, 0]);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn mutated_frames_never_panic(index in 0usize..64, flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..6), cut in any::<usize>()) {
        let frames = valid_frames();
        let mut f = frames[index % frames.len()].clone();
        for (pos, byte) in flips {
            let i = pos % f.len();
            f[i] = byte;
        }
        let len = f.len();
        f.truncate(len - cut % (len / 4 + 1));
        let h = seeded();
        let _ = h.handle(&mut Session::plaintext(), &f);
    }

    #[test]
    fn random_frames_never_panic_or_touch_the_engine(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        let h = seeded();
        let before = snapshot(&h);
        let _ = h.handle(&mut Session::plaintext(), &bytes);
        // Random bytes rarely form a valid alter; when the key is not 49/50 they never may.
        if bytes.len() < 2 || !matches!(i16::from_be_bytes([bytes[0], bytes[1]]), 49 | 50) {
            prop_assert_eq!(snapshot(&h), before);
        }
    }
}

#[test]
fn unhex_round_trips() {
    assert_eq!(unhex("00 ff 10"), vec![0, 255, 16]);
}
