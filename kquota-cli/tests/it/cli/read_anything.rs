//! The tools print whatever a server returns (docs/cli.md, "Entries as the server stores them"):
//! host-name ips, odd names, entity types and keys this tool does not know, values kquota would
//! refuse. kquotad stores none of these, so a small fake broker, written here with kafka-protocol,
//! answers ApiVersions and DescribeClientQuotas with such entries.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::thread;

use bytes::{Buf, Bytes, BytesMut};
use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::describe_client_quotas_response::{EntityData, EntryData, ValueData};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, DescribeClientQuotasRequest,
    DescribeClientQuotasResponse, RequestHeader, ResponseHeader,
};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, StrBytes};
use serde_json::{json, Value};

use super::run;

/// An entity as the fake stores it: `(type, name)`, `None` for the default.
type Parts = Vec<(&'static str, Option<String>)>;

/// What the fake broker returns: `(entity, [(key, value)])`.
type Store = Vec<(Parts, Vec<(&'static str, f64)>)>;

/// The entries a Kafka server may hold that kquotad would refuse, and one a later Kafka may send.
fn odd_store() -> Store {
    let s = |n: &str| Some(n.to_owned());
    vec![
        (
            vec![("ip", s("localhost"))],
            vec![("connection_creation_rate", 5.0)],
        ),
        (vec![("ip", None)], vec![("connection_creation_rate", 7.0)]),
        (
            vec![("user", s("<default>"))],
            vec![("producer_byte_rate", 1000.0)],
        ),
        (vec![("user", None)], vec![("producer_byte_rate", 2000.0)]),
        (
            vec![("client-id", s("my app")), ("user", s("Jürgen 李"))],
            vec![("request_percentage", 12.5), ("future_quota_rate", 3.0)],
        ),
        (vec![("user", s(""))], vec![("consumer_byte_rate", 1.0)]),
        (
            vec![("user", s("a, client-id=b"))],
            vec![("consumer_byte_rate", 5.0000001)],
        ),
        (
            vec![("user", s(&"long".repeat(300)))],
            vec![("producer_byte_rate", 4.0)],
        ),
        (
            vec![("group", s("analytics"))],
            vec![("producer_byte_rate", 9.0), ("group_byte_rate", f64::NAN)],
        ),
    ]
}

/// Starts the fake broker on a free port; it serves until the test process ends.
fn fake_broker(store: Store) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    thread::spawn(move || {
        for stream in listener.incoming() {
            let store = store.clone();
            let Ok(stream) = stream else { continue };
            thread::spawn(move || serve(stream, &store));
        }
    });
    addr
}

fn serve(mut stream: TcpStream, store: &Store) {
    loop {
        let mut size = [0u8; 4];
        if stream.read_exact(&mut size).is_err() {
            return;
        }
        let mut frame = vec![0u8; u32::from_be_bytes(size) as usize];
        stream.read_exact(&mut frame).unwrap();
        let mut frame = Bytes::from(frame);
        let (key, version) = {
            let mut peek = frame.clone();
            (peek.get_i16(), peek.get_i16())
        };
        let mut body = BytesMut::new();
        let header_version = match ApiKey::try_from(key).unwrap() {
            ApiKey::ApiVersions => {
                let header =
                    RequestHeader::decode(&mut frame, ApiVersionsRequest::header_version(version))
                        .unwrap();
                let api = |k: ApiKey, max: i16| {
                    ApiVersion::default()
                        .with_api_key(k as i16)
                        .with_min_version(0)
                        .with_max_version(max)
                };
                let response = ApiVersionsResponse::default().with_api_keys(vec![
                    api(ApiKey::ApiVersions, 3),
                    api(ApiKey::DescribeClientQuotas, 1),
                    api(ApiKey::AlterClientQuotas, 1),
                ]);
                ResponseHeader::default()
                    .with_correlation_id(header.correlation_id)
                    .encode(&mut body, ApiVersionsResponse::header_version(version))
                    .unwrap();
                response.encode(&mut body, version).unwrap();
                continue_with(&mut stream, body);
                continue;
            }
            ApiKey::DescribeClientQuotas => DescribeClientQuotasRequest::header_version(version),
            other => panic!("the fake broker serves no {other:?}"),
        };
        let header = RequestHeader::decode(&mut frame, header_version).unwrap();
        let request = DescribeClientQuotasRequest::decode(&mut frame, version).unwrap();
        let entries = store
            .iter()
            .filter(|(parts, _)| !exact_query(&request) || strict_match(&request, parts))
            .map(|(parts, values)| {
                EntryData::default()
                    .with_entity(
                        parts
                            .iter()
                            .map(|(ty, name)| {
                                EntityData::default()
                                    .with_entity_type(StrBytes::from_static_str(ty))
                                    .with_entity_name(name.clone().map(StrBytes::from_string))
                            })
                            .collect(),
                    )
                    .with_values(
                        values
                            .iter()
                            .map(|(k, v)| {
                                ValueData::default()
                                    .with_key(StrBytes::from_static_str(k))
                                    .with_value(*v)
                            })
                            .collect(),
                    )
            })
            .collect();
        let response = DescribeClientQuotasResponse::default().with_entries(Some(entries));
        ResponseHeader::default()
            .with_correlation_id(header.correlation_id)
            .encode(
                &mut body,
                DescribeClientQuotasResponse::header_version(version),
            )
            .unwrap();
        response.encode(&mut body, version).unwrap();
        continue_with(&mut stream, body);
    }
}

/// Whether the request is a strict filter of EXACT (0) and DEFAULT (1) components only, as
/// `kafka-quotas --describe` sends. Any other filter gets every entry, so that the test sees the
/// tools print (and `--list` filter) whatever comes back.
fn exact_query(request: &DescribeClientQuotasRequest) -> bool {
    request.strict && request.components.iter().all(|c| c.match_type != 2)
}

/// Exactly the entity of an exact query.
fn strict_match(
    request: &DescribeClientQuotasRequest,
    parts: &[(&'static str, Option<String>)],
) -> bool {
    request.components.len() == parts.len()
        && request.components.iter().all(|c| {
            parts.iter().any(|(ty, name)| {
                c.entity_type.as_str() == *ty
                    && match c.match_type {
                        0 => c._match.as_deref() == name.as_deref(),
                        1 => name.is_none(),
                        _ => true,
                    }
            })
        })
}

fn continue_with(stream: &mut TcpStream, body: BytesMut) {
    let mut frame = (body.len() as u32).to_be_bytes().to_vec();
    frame.extend_from_slice(&body);
    stream.write_all(&frame).unwrap();
}

fn quotas(addr: SocketAddr, args: &[&str]) -> String {
    let r = run(env!("CARGO_BIN_EXE_kafka-quotas"), Some(addr), args);
    assert_eq!((r.code, r.stderr.as_str()), (0, ""), "{args:?}: {r:?}");
    r.stdout
}

fn configs(addr: SocketAddr, args: &[&str]) -> String {
    let r = run(env!("CARGO_BIN_EXE_kafka-configs"), Some(addr), args);
    assert_eq!((r.code, r.stderr.as_str()), (0, ""), "{args:?}: {r:?}");
    r.stdout
}

#[test]
fn list_prints_every_entry_a_server_returns() {
    let addr = fake_broker(odd_store());
    let long = "long".repeat(300);
    assert_eq!(
        quotas(addr, &["--list"]),
        format!(
            "{{user=\"\"}}\n\
             consumer_byte_rate broker_bps 1\n\
             \n\
             {{user=\"<default>\"}}\n\
             producer_byte_rate broker_bps 1000\n\
             \n\
             {{user=Jürgen 李, client-id=my app}}\n\
             request_percentage percent 12.5\n\
             future_quota_rate 3\n\
             \n\
             {{user=\"a, client-id=b\"}}\n\
             consumer_byte_rate broker_bps 5.0000001\n\
             \n\
             {{user={long}}}\n\
             producer_byte_rate broker_bps 4\n\
             \n\
             {{user=<default>}}\n\
             producer_byte_rate broker_bps 2000\n\
             \n\
             {{ip=localhost}}\n\
             connection_creation_rate connections_per_sec 5\n\
             \n\
             {{ip=<default>}}\n\
             connection_creation_rate connections_per_sec 7\n\
             \n\
             {{group=analytics}}\n\
             producer_byte_rate broker_bps 9\n\
             group_byte_rate NaN\n"
        )
    );
    let list: Value = serde_json::from_str(&quotas(addr, &["--list", "--output=json"])).unwrap();
    let entities = list["entities"].as_array().unwrap();
    assert_eq!(entities.len(), 9);
    assert_eq!(entities[0]["entity"], json!({"user": ""}));
    assert_eq!(entities[1]["entity"], json!({"user": "<default>"}));
    assert_eq!(entities[3]["entity"], json!({"user": "a, client-id=b"}));
    assert_eq!(entities[3]["quotas"][0]["value"], 5.0000001);
    assert_eq!(entities[4]["entity"], json!({"user": long}));
    assert_eq!(entities[5]["entity"], json!({"user": null}));
    assert_eq!(
        entities[2],
        json!({
            "entity": {"user": "Jürgen 李", "client-id": "my app"},
            "quotas": [
                {"type": "request_percentage", "unit": "percent", "value": 12.5},
                {"key": "future_quota_rate", "type": null, "unit": null, "value": 3},
            ],
        })
    );
    assert_eq!(
        entities[6],
        json!({"entity": {"ip": "localhost"}, "quotas": [
            {"type": "connection_creation_rate", "unit": "connections_per_sec", "value": 5}]})
    );
    assert_eq!(
        entities[8],
        json!({"entity": {"group": "analytics"}, "quotas": [
            {"type": "producer_byte_rate", "unit": "broker_bps", "value": 9},
            {"key": "group_byte_rate", "type": null, "unit": null, "value": "NaN"}]})
    );
}

#[test]
fn list_filters_apply_to_every_entry() {
    let addr = fake_broker(odd_store());
    assert_eq!(
        quotas(addr, &["--list", "--names=ip=localhost"]),
        "{ip=localhost}\nconnection_creation_rate connections_per_sec 5\n"
    );
    assert_eq!(
        quotas(addr, &["--list", "--names=user=<default>"]),
        "{user=\"<default>\"}\nproducer_byte_rate broker_bps 1000\n"
    );
    assert_eq!(
        quotas(addr, &["--list", "--defaults=user"]),
        "{user=<default>}\nproducer_byte_rate broker_bps 2000\n"
    );
    // The seed's --match=prefix=NAME: a name of any type, known or not, that begins with NAME.
    assert_eq!(
        quotas(addr, &["--list", "--match=prefix=my"]),
        "{user=Jürgen 李, client-id=my app}\nrequest_percentage percent 12.5\nfuture_quota_rate 3\n"
    );
    assert_eq!(
        quotas(addr, &["--list", "--match=prefix=ana"]),
        "{group=analytics}\nproducer_byte_rate broker_bps 9\ngroup_byte_rate NaN\n"
    );
    assert_eq!(
        quotas(addr, &["--list", "--match=prefix=local"]),
        "{ip=localhost}\nconnection_creation_rate connections_per_sec 5\n"
    );
    assert_eq!(
        quotas(addr, &["--list", "--match=prefix=Jü,prefix=my", "--names=user=Jürgen 李"]),
        "{user=Jürgen 李, client-id=my app}\nrequest_percentage percent 12.5\nfuture_quota_rate 3\n"
    );
    let r = run(
        env!("CARGO_BIN_EXE_kafka-quotas"),
        Some(addr),
        &["--list", "--match=prefix=Jü,prefix=x"],
    );
    assert_eq!(
        (r.code, r.stdout.as_str(), r.stderr.as_str()),
        (
            0,
            "",
            "note: no configured entity matches; nothing to show\n"
        )
    );
}

#[test]
fn describe_prints_every_key_and_quotes_misreadable_names() {
    let addr = fake_broker(odd_store());
    assert_eq!(
        quotas(
            addr,
            &[
                "--describe",
                "--names=user=<default>",
                "--include-overrides"
            ]
        ),
        "producer_byte_rate    broker_bps 1000 {user=\"<default>\"}\n \
         * producer_byte_rate broker_bps 2000 {user=<default>}\n"
    );
    assert_eq!(
        quotas(
            addr,
            &["--describe", "--names=user=Jürgen 李,client-id=my app"]
        ),
        "producer_byte_rate broker_bps 2000 {user=<default>}\n\
         request_percentage percent    12.5 {user=Jürgen 李, client-id=my app}\n\
         future_quota_rate             3    {user=Jürgen 李, client-id=my app}\n"
    );
    let described: Value = serde_json::from_str(&quotas(
        addr,
        &[
            "--describe",
            "--names=user=Jürgen 李,client-id=my app",
            "--output=json",
        ],
    ))
    .unwrap();
    assert_eq!(
        described["quotas"][2],
        json!({"key": "future_quota_rate", "type": null, "unit": null, "value": 3,
               "entity": {"user": "Jürgen 李", "client-id": "my app"}, "level": 1,
               "overridden": []})
    );
    assert_eq!(
        quotas(
            addr,
            &["--describe", "--names=ip=localhost", "--include-overrides"]
        ),
        "connection_creation_rate    connections_per_sec 5 {ip=localhost}\n \
         * connection_creation_rate connections_per_sec 7 {ip=<default>}\n"
    );
}

#[test]
fn kafka_configs_describe_prints_every_entry() {
    let addr = fake_broker(odd_store());
    let text = configs(addr, &["--describe", "--entity-type", "users"]);
    // Kafka's HashMap order; every entity the server returned is there once.
    let mut lines: Vec<&str> = text.lines().collect();
    lines.sort();
    let long = "long".repeat(300);
    let mut expected = vec![
        "Quota configs for user-principal '' are consumer_byte_rate=1.0".to_owned(),
        "Quota configs for user-principal '<default>' are producer_byte_rate=1000.0".to_owned(),
        "Quota configs for user-principal 'a, client-id=b' are consumer_byte_rate=5.0000001"
            .to_owned(),
        format!("Quota configs for user-principal '{long}' are producer_byte_rate=4.0"),
        "Quota configs for user-principal 'Jürgen 李', client-id 'my app' are request_percentage=12.5, future_quota_rate=3.0".to_owned(),
        "Quota configs for the default user-principal are producer_byte_rate=2000.0".to_owned(),
        "Quota configs for ip 'localhost' are connection_creation_rate=5.0".to_owned(),
        "Quota configs for the default ip are connection_creation_rate=7.0".to_owned(),
        "Quota configs for group 'analytics' are producer_byte_rate=9.0, group_byte_rate=NaN"
            .to_owned(),
    ];
    // The values of one entity come in Kafka's HashMap order too.
    let line = |l: &str| {
        let (entity, values) = l.split_once(" are ").unwrap();
        let mut values: Vec<&str> = values.split(", ").collect();
        values.sort();
        format!("{entity} are {}", values.join(", "))
    };
    let mut lines: Vec<String> = lines.drain(..).map(line).collect();
    lines.sort();
    expected = expected.iter().map(|l| line(l)).collect();
    expected.sort();
    assert_eq!(lines, expected);

    let json: Value = serde_json::from_str(&configs(
        addr,
        &["--describe", "--entity-type", "users", "--output", "json"],
    ))
    .unwrap();
    let entities = json["entities"].as_array().unwrap();
    assert_eq!(entities.len(), 9);
    assert!(
        entities.contains(&json!({"entity": {"ip": "localhost"}, "quotas": [
        {"type": "connection_creation_rate", "unit": "connections_per_sec", "value": 5}]}))
    );
    assert!(
        entities.contains(&json!({"entity": {"user": "<default>"}, "quotas": [
        {"type": "producer_byte_rate", "unit": "broker_bps", "value": 1000}]}))
    );
    assert!(
        entities.contains(&json!({"entity": {"user": null}, "quotas": [
        {"type": "producer_byte_rate", "unit": "broker_bps", "value": 2000}]}))
    );
}
