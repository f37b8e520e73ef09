//! The audit and the JSON log: each alteration request is one line under `kquota::audit` with
//! who asked, from where, what and what came of it; with `--log-format json` every line of the log
//! is a JSON object a log shipper can read.

use serde_json::Value;

use super::support::*;

/// The log's lines, each parsed as JSON (every one must be).
fn json_lines(log: &str) -> Vec<Value> {
    log.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

fn audit(lines: &[Value]) -> Vec<&Value> {
    lines
        .iter()
        .filter(|l| l["target"] == "kquota::audit")
        .collect()
}

#[test]
fn every_alteration_once_under_the_audit_target_as_json() {
    let s = Secured::start(&["--log-format", "json"]);
    let admin = s.sasl(
        "admin",
        "SASL_PLAINTEXT",
        "SCRAM-SHA-256",
        "admin",
        ADMIN_PASSWORD,
    );
    assert_ok(&alter(s.sasl_plaintext, Some(&admin), "audited", 2048));
    // A refused entity: the result says which and why.
    let bad = quotas(
        s.sasl_plaintext,
        Some(&admin),
        &[
            "--alter",
            "--names",
            "user=audited",
            "--add",
            "producer_byte_rate=-1",
        ],
    );
    assert_ne!(bad.code, 0, "{bad:?}");
    let alice = s.sasl(
        "alice",
        "SASL_PLAINTEXT",
        "SCRAM-SHA-256",
        "alice",
        ALICE_PASSWORD,
    );
    assert_refused(
        &alter(s.sasl_plaintext, Some(&alice), "x", 1),
        "CLUSTER_AUTHORIZATION_FAILED",
    );
    let log = s.log();
    let lines = json_lines(&log);
    let audit = audit(&lines);
    let alterations: Vec<&&Value> = audit
        .iter()
        .filter(|l| l["fields"]["api"] == "AlterClientQuotas")
        .collect();
    assert!(alterations.len() >= 2, "{log}");
    let first = &alterations[0];
    assert_eq!(first["level"], "INFO", "{first}");
    let f = &first["fields"];
    assert_eq!(f["principal"], "User:admin", "{f}");
    assert_eq!(f["validate_only"], false);
    assert_eq!(f["result"], "1 applied, 0 refused", "{f}");
    assert_eq!(
        f["changes"], "[user=audited: set producer_byte_rate=2048 => ok]",
        "{f}"
    );
    assert!(f["peer"].as_str().unwrap().starts_with("127.0.0.1:"), "{f}");
    assert_eq!(f["listener"], "SASL_PLAINTEXT");
    // One line per request: exactly one audit line names the first request's change.
    let applied = audit
        .iter()
        .filter(|l| {
            l["fields"]["changes"]
                .as_str()
                .is_some_and(|c| c.contains("=2048"))
        })
        .count();
    assert_eq!(applied, 1, "{log}");
    let refused_entity = alterations
        .iter()
        .find(|l| l["fields"]["result"] == "0 applied, 1 refused")
        .unwrap_or_else(|| panic!("no refused entity in {log}"));
    assert!(
        refused_entity["fields"]["changes"]
            .as_str()
            .unwrap()
            .contains("=> INVALID_REQUEST (42)"),
        "{refused_entity}"
    );
    // The refused principal, at WARN, in the authorizer log's words.
    let denied = audit
        .iter()
        .find(|l| l["fields"]["principal"] == "User:alice")
        .unwrap_or_else(|| panic!("no refusal in {log}"));
    assert_eq!(denied["level"], "WARN");
    assert!(denied["fields"]["message"]
        .as_str()
        .unwrap()
        .contains("is Denied operation AlterClientQuotas"));
}

#[test]
fn an_unknown_log_format_is_a_usage_error() {
    let (code, stderr) = kquota_testkit::kquotad_exit(&["--log-format", "xml"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("log.format") && stderr.contains("text or json"),
        "{stderr}"
    );
}

#[test]
fn the_text_audit_line_quotes_values_with_spaces() {
    let s = Secured::start(&[]);
    let admin = s.sasl(
        "admin",
        "SASL_PLAINTEXT",
        "SCRAM-SHA-256",
        "admin",
        ADMIN_PASSWORD,
    );
    assert_ok(&alter(s.sasl_plaintext, Some(&admin), "quoted", 4096));
    let log = s.log();
    let line = log
        .lines()
        .find(|l| l.contains("kquota::audit") && l.contains("user=quoted"))
        .unwrap_or_else(|| panic!("no audit line for user=quoted:\n{log}"));
    // Each value as one token: a reader splitting on spaces outside quotes gets it whole.
    for field in [
        "api=\"AlterClientQuotas\"",
        "principal=\"User:admin\"",
        "result=\"1 applied, 0 refused\"",
        "changes=\"[user=quoted: set producer_byte_rate=4096 => ok]\"",
    ] {
        assert!(line.contains(field), "{field} not in: {line}");
    }
}
