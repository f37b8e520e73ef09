//! The seeds' draft AlterQuotas (50): golden bytes, units, bytes after the body, disabling it.

use super::*;

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
    // Disabled, 50 is DescribeUserScramCredentials: scram_credentials.rs shows what the draft's
    // frames meet then.
    let off = handler().with_draft_alter_quotas(false);
    let f = draft_frame(1, &golden_draft_request());
    assert!(matches!(
        off.handle(&mut Session::plaintext(), &f),
        Outcome::Respond(_)
    ));
    assert_eq!(
        off.engine().entity_count(),
        0,
        "the draft's frame altered nothing"
    );
}
