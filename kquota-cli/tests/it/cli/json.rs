//! kafka-quotas --output json against the schema docs/cli.md documents.

use serde_json::Value;

use super::{kafka_quotas, ok, seed, start};

/// Checks a value against the documented JSON schema of docs/cli.md: an entity is an object whose
/// keys are entity types and whose values are a name or null (the default).
fn check_entity(v: &Value) {
    let obj = v.as_object().expect("entity is an object");
    assert!(!obj.is_empty());
    for (k, name) in obj {
        assert!(["user", "client-id", "ip"].contains(&k.as_str()), "{k}");
        assert!(name.is_null() || name.as_str().is_some_and(|s| !s.is_empty()));
    }
}

fn check_quota_fields(q: &Value) {
    assert!(q["type"].is_string() && q["unit"].is_string(), "{q}");
    assert!(q["value"].as_f64().is_some_and(|v| v > 0.0), "{q}");
}

#[test]
fn json_output_follows_its_schema() {
    let server = start();
    seed(&server);

    let list: Value = serde_json::from_str(&ok(kafka_quotas(
        &server,
        &["--list", "--names=client-id=my-client", "--output=json"],
    )))
    .unwrap();
    assert_eq!(list["version"], 1);
    let entities = list["entities"].as_array().expect("entities array");
    assert_eq!(entities.len(), 3);
    for e in entities {
        assert_eq!(e.as_object().unwrap().len(), 2, "{e}");
        check_entity(&e["entity"]);
        for q in e["quotas"].as_array().expect("quotas array") {
            assert_eq!(q.as_object().unwrap().len(), 3, "{q}");
            check_quota_fields(q);
        }
    }
    assert_eq!(
        entities[2],
        serde_json::json!({
            "entity": {"user": null, "client-id": "my-client"},
            "quotas": [
                {"type": "consumer_byte_rate", "unit": "shares", "value": 100},
                {"type": "producer_byte_rate", "unit": "broker_bps", "value": 500000},
            ],
        })
    );

    let described: Value = serde_json::from_str(&ok(kafka_quotas(
        &server,
        &[
            "--describe",
            "--names=user=user-one,client-id=my-client",
            "--include-overrides",
            "--output",
            "json",
        ],
    )))
    .unwrap();
    assert_eq!(described["version"], 1);
    assert_eq!(described["user"], "user-one");
    assert_eq!(described["client-id"], "my-client");
    let quotas = described["quotas"].as_array().unwrap();
    for q in quotas {
        check_quota_fields(q);
        check_entity(&q["entity"]);
        assert!(q["level"].as_u64().is_some_and(|l| (1..=8).contains(&l)));
        for o in q["overridden"].as_array().expect("overridden array") {
            check_entity(&o["entity"]);
            assert!(o["value"].as_f64().is_some() && o["level"].as_u64().is_some());
        }
    }
    assert_eq!(
        quotas[1],
        serde_json::json!({
            "type": "producer_byte_rate", "unit": "broker_bps", "value": 2000000,
            "entity": {"user": "user-one", "client-id": "my-client"}, "level": 1,
            "overridden": [
                {"value": 500000, "entity": {"user": null, "client-id": "my-client"}, "level": 4}
            ],
        })
    );
    // Alter prints nothing, so it takes no format, as in kafka-configs.
    let r = kafka_quotas(
        &server,
        &[
            "--alter",
            "--names=user=u",
            "--add=request_percentage=1.5",
            "--output=json",
        ],
    );
    assert_eq!((r.code, r.stdout.as_str()), (2, ""), "{r:?}");
}
