//! The wire handler, one module per area: golden bytes for every served version of 48, 49, the
//! draft 50 and DescribeUserScramCredentials (50 by default), ApiVersions, Metadata and
//! DescribeCluster, Kafka's validation and error shapes, and bad
//! input that must close the connection without a panic or a change to the engine. The helpers and
//! the requests several areas send are here.

mod alter;
mod api_versions;
mod cluster;
mod describe;
mod draft;
mod malformed;
mod scram_credentials;

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

/// A handler with the seeds' draft AlterQuotas enabled, so that the areas written for it keep
/// testing it on 50; `scram_credentials.rs` tests the default (DescribeUserScramCredentials).
fn handler_with(engine: Engine) -> Handler {
    Handler::new(Arc::new(engine), info()).with_draft_alter_quotas(true)
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
// Requests more than one area sends (the valid frames bad input is cut from use all three)

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

fn api_versions_request() -> ApiVersionsRequest {
    ApiVersionsRequest::default()
        .with_client_software_name(s("apache-kafka-java"))
        .with_client_software_version(s("4.3.1"))
}

#[test]
fn unhex_round_trips() {
    assert_eq!(unhex("00 ff 10"), vec![0, 255, 16]);
}
