//! `kafka-quotas --alter --file`: the documentation's example configuration loaded with one
//! command, one server's quotas copied into another (how a local store moves into a cluster's
//! configuration log), and documents refused whole before anything is sent.

use std::io::Write;
use std::process::{Command, Stdio};

use kquota_testkit::temp_dir;

use super::{kafka_quotas, ok, seed, start};

/// The example configuration docs/cli.md and the README load.
fn example() -> String {
    format!(
        "{}/../examples/seeds-quotas.json",
        env!("CARGO_MANIFEST_DIR")
    )
}

#[test]
fn the_example_file_loads_the_seeds_state() {
    let by_hand = start();
    seed(&by_hand);
    let from_file = start();
    assert_eq!(
        ok(kafka_quotas(&from_file, &["--alter", "--file", &example()])),
        ""
    );
    for list in [&["--list"][..], &["--list", "--output", "json"]] {
        assert_eq!(
            ok(kafka_quotas(&from_file, list)),
            ok(kafka_quotas(&by_hand, list)),
            "{list:?}"
        );
    }
    // Loading it again changes nothing: every entry is set, none added twice.
    ok(kafka_quotas(&from_file, &["--alter", "--file", &example()]));
    assert_eq!(
        ok(kafka_quotas(&from_file, &["--list"])),
        ok(kafka_quotas(&by_hand, &["--list"]))
    );
}

#[test]
fn a_list_document_copies_one_servers_quotas_into_another() {
    let old = start();
    seed(&old);
    ok(kafka_quotas(
        &old,
        &[
            "--alter",
            "--defaults=ip",
            "--add=connection_creation_rate=10",
        ],
    ));
    ok(kafka_quotas(
        &old,
        &[
            "--alter",
            "--names=user=Jürgen 李",
            "--add=request_percentage=50",
        ],
    ));
    let document = ok(kafka_quotas(&old, &["--list", "--output", "json"]));

    // Through a pipe: --file - reads standard input.
    let new = start();
    let mut child = Command::new(env!("CARGO_BIN_EXE_kafka-quotas"))
        .args(["--bootstrap-server", &new.addr.to_string()])
        .args(["--alter", "--file", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(document.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        ok(kafka_quotas(&new, &["--list", "--output", "json"])),
        document
    );

    // --validate-only checks the whole document and applies nothing.
    let dir = temp_dir("cli-file");
    std::fs::create_dir_all(&*dir).unwrap();
    let path = dir.join("quotas.json");
    std::fs::write(&path, &document).unwrap();
    let empty = start();
    let path = path.to_str().unwrap();
    ok(kafka_quotas(
        &empty,
        &["--alter", "--file", path, "--validate-only"],
    ));
    let r = kafka_quotas(&empty, &["--list"]);
    assert_eq!((r.code, r.stdout.as_str()), (0, ""), "{r:?}");
}

#[test]
fn a_refused_entity_is_named_and_the_others_are_applied() {
    let server = start();
    let dir = temp_dir("cli-file-refused");
    std::fs::create_dir_all(&*dir).unwrap();
    let path = dir.join("quotas.json");
    std::fs::write(
        &path,
        r#"{"version": 1, "entities": [
            {"entity": {"user": "a"}, "quotas": [{"type": "request_percentage", "unit": "percent", "value": 50}]},
            {"entity": {"ip": "localhost"}, "quotas": [{"type": "connection_creation_rate", "unit": "connections_per_sec", "value": 5}]}
        ]}"#,
    )
    .unwrap();
    let r = kafka_quotas(&server, &["--alter", "--file", path.to_str().unwrap()]);
    assert_eq!(r.code, 1, "{r:?}");
    assert_eq!(
        r.stderr,
        "error: {ip=localhost}: INVALID_REQUEST: localhost is not a valid IP or resolvable host. \
         (this server names ip entities by IP address only, such as 127.0.0.1 or ::1, and \
         'localhost' is a host name: docs/semantics.md, D7 \"ip names\")\n"
    );
    assert_eq!(
        ok(kafka_quotas(&server, &["--list"])),
        "{user=a}\nrequest_percentage percent 50\n"
    );
}

#[test]
fn a_document_this_tool_could_not_send_as_written_is_refused_whole() {
    let server = start();
    let dir = temp_dir("cli-file-usage");
    std::fs::create_dir_all(&*dir).unwrap();
    let cases: &[(&str, &str)] = &[
        ("not json", "not a JSON document"),
        (r#"{"version": 2, "entities": []}"#, "not a --list --output json document (version 1, entities); write one with kafka-quotas --list --output json"),
        (
            r#"{"version": 1, "entities": [{"entity": {"user": "a"}, "quotas": [{"type": "producer_byte_rate", "unit": "broker_bps", "value": 1}]},
                {"entity": {"group": "g"}, "quotas": []}]}"#,
            "entity 2: unknown entity type 'group'; this tool alters user, client-id and ip",
        ),
        (
            r#"{"version": 1, "entities": [{"entity": {"user": "a"}, "quotas": [{"key": "future_quota_rate", "type": null, "unit": null, "value": 3}]}]}"#,
            "entity 1: {user=a}: 'future_quota_rate' is a key this tool does not know",
        ),
        (
            r#"{"version": 1, "entities": [{"entity": {"user": "a"}, "quotas": [{"type": "producer_byte_rate", "unit": "broker_bps", "value": "NaN"}]}]}"#,
            "entity 1: {user=a}: producer_byte_rate: the value must be a finite number",
        ),
        (
            r#"{"version": 1, "entities": [{"entity": {"user": "a"}, "quotas": []}, {"entity": {"user": "a"}, "quotas": []}]}"#,
            "entity 2: {user=a} is listed twice",
        ),
        (
            r#"{"version": 1, "entities": [{"entity": {"user": "a", "ip": "1.2.3.4"}, "quotas": []}]}"#,
            "entity 1: an entity is user and/or client-id, or ip alone",
        ),
    ];
    for (i, (text, message)) in cases.iter().enumerate() {
        let path = dir.join(format!("{i}.json"));
        std::fs::write(&path, text).unwrap();
        let path = path.to_str().unwrap();
        let r = kafka_quotas(&server, &["--alter", "--file", path]);
        assert_eq!(r.code, 2, "{text}: {r:?}");
        assert!(
            r.stderr.starts_with(&format!("error: --file {path}: ")) && r.stderr.contains(message),
            "{text}: {r:?}"
        );
    }
    let r = kafka_quotas(&server, &["--list"]);
    assert_eq!(
        (r.code, r.stdout.as_str()),
        (0, ""),
        "nothing was sent: {r:?}"
    );
    // --file names the entities and entries itself.
    let r = kafka_quotas(
        &server,
        &["--alter", "--file", &example(), "--names=user=a"],
    );
    assert_eq!(
        (r.code, r.stderr.as_str()),
        (
            2,
            "error: --file names its entities and entries itself; drop --names or drop --file\n"
        )
    );
    let r = kafka_quotas(&server, &["--list", "--file", &example()]);
    assert_eq!(
        (r.code, r.stderr.as_str()),
        (
            2,
            "error: --file applies only to --alter; drop --file or use --alter instead\n"
        )
    );
}
