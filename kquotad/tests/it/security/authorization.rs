//! `super.users` authorization: refusals name the principal, anonymous describes only when
//! configured, a refused alteration changes nothing (not even after a restart), and the handler
//! authorizes by the session's principal.

use bytes::BytesMut;
use kafka_protocol::messages::ResponseHeader;
use kafka_protocol::messages::{DescribeClientQuotasRequest, RequestHeader};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request, StrBytes};
use kquota_wire::Outcome;

use super::support::*;

#[test]
fn principals_in_the_log_and_describe_allowed_for_anonymous_when_configured() {
    let s = Secured::start(&["--override", "kquota.describe.allow.anonymous=true"]);
    assert_ok(&list(s.plaintext, None));
    assert_refused(
        &alter(s.plaintext, None, "x", 1),
        "CLUSTER_AUTHORIZATION_FAILED",
    );
    let no_cert = s.ssl("no-cert", None);
    assert_ok(&list(s.ssl, Some(&no_cert)));
    // Refusals name the principal, in Kafka's User:name form.
    let alice = s.ssl("alice", Some("alice"));
    assert_refused(
        &alter(s.ssl, Some(&alice), "x", 1),
        "CLUSTER_AUTHORIZATION_FAILED",
    );
    let alice = s.sasl("alice-sasl", "SASL_SSL", "PLAIN", "alice", ALICE_PASSWORD);
    assert_refused(
        &alter(s.sasl_ssl, Some(&alice), "x", 1),
        "CLUSTER_AUTHORIZATION_FAILED",
    );
    let log = s.log();
    for want in [
        "Principal = User:ANONYMOUS is Denied operation AlterClientQuotas",
        "Principal = User:CN=alice,OU=eng,O=acme is Denied operation AlterClientQuotas",
        "Principal = User:alice is Denied operation AlterClientQuotas",
    ] {
        assert!(log.contains(want), "{want} not in {log}");
    }
}

#[test]
fn an_unauthorised_alter_changes_nothing_even_after_a_restart() {
    let s = Secured::start(&[]);
    let admin = s.sasl(
        "admin",
        "SASL_PLAINTEXT",
        "SCRAM-SHA-256",
        "admin",
        ADMIN_PASSWORD,
    );
    let alice = s.sasl(
        "alice",
        "SASL_PLAINTEXT",
        "SCRAM-SHA-256",
        "alice",
        ALICE_PASSWORD,
    );
    assert_ok(&alter(s.sasl_plaintext, Some(&admin), "kept", 10));
    // alice's alteration, her validate-only, and a removal are all refused per entity.
    let r = alter(s.sasl_plaintext, Some(&alice), "kept", 99);
    assert_refused(&r, "user=kept");
    let r = quotas(
        s.sasl_plaintext,
        Some(&alice),
        &[
            "--alter",
            "--names",
            "user=new",
            "--add",
            "producer_byte_rate=1",
            "--validate-only",
        ],
    );
    assert_refused(&r, "CLUSTER_AUTHORIZATION_FAILED");
    let r = quotas(
        s.sasl_plaintext,
        Some(&alice),
        &[
            "--alter",
            "--names",
            "user=kept",
            "--delete",
            "producer_byte_rate",
        ],
    );
    assert_refused(&r, "CLUSTER_AUTHORIZATION_FAILED");
    let want = "{user=kept}\nproducer_byte_rate broker_bps 10\n";
    let r = list(s.sasl_plaintext, Some(&admin));
    assert_ok(&r);
    assert_eq!(r.stdout, want);

    // After a restart over the same store, still unchanged.
    let Secured {
        server, dir, pki, ..
    } = s;
    server.kill();
    let creds = pki.dir.join("users.json");
    let s = Secured::start_in(dir, pki, &creds, &[]);
    let admin = s.sasl(
        "admin",
        "SASL_PLAINTEXT",
        "SCRAM-SHA-256",
        "admin",
        ADMIN_PASSWORD,
    );
    let r = list(s.sasl_plaintext, Some(&admin));
    assert_ok(&r);
    assert_eq!(r.stdout, want);
    // And the super user's alteration goes through.
    assert_ok(&alter(s.sasl_plaintext, Some(&admin), "kept", 11));
    assert!(list(s.sasl_plaintext, Some(&admin))
        .stdout
        .contains("broker_bps 11"));
}

/// One request frame (header and body, no size prefix) for the handler.
fn frame<R: Request>(req: &R, version: i16) -> Vec<u8> {
    let mut buf = BytesMut::new();
    RequestHeader::default()
        .with_request_api_key(R::KEY)
        .with_request_api_version(version)
        .with_correlation_id(9)
        .with_client_id(Some(StrBytes::from_static_str("t")))
        .encode(&mut buf, R::header_version(version))
        .unwrap();
    req.encode(&mut buf, version).unwrap();
    buf.to_vec()
}

fn answer<R: Request>(outcome: Outcome, version: i16) -> R::Response {
    let Outcome::Respond(body) = outcome else {
        panic!("not answered: {outcome:?}");
    };
    let mut body = body.freeze();
    ResponseHeader::decode(&mut body, R::Response::header_version(version)).unwrap();
    R::Response::decode(&mut body, version).unwrap()
}

#[test]
fn the_handler_authorizes_by_the_sessions_principal() {
    use kafka_protocol::messages::alter_client_quotas_request::{EntityData, EntryData, OpData};
    use kafka_protocol::messages::AlterClientQuotasRequest;
    use kquota::Engine;
    use kquota_wire::{Authorizer, Principal, SecurityProtocol, Session};
    use kquota_wire::{Handler, ServerInfo};
    use std::sync::Arc;

    let handler = Handler::new(
        Arc::new(Engine::new()),
        ServerInfo {
            node_id: 1,
            host: "h".into(),
            port: 1,
            cluster_id: "c".into(),
        },
    )
    .with_authorizer(Authorizer::new([Principal::user("admin")]));
    let entry = |user: &'static str| {
        EntryData::default()
            .with_entity(vec![EntityData::default()
                .with_entity_type(StrBytes::from_static_str("user"))
                .with_entity_name(Some(StrBytes::from_static_str(user)))])
            .with_ops(vec![OpData::default()
                .with_key(StrBytes::from_static_str("producer_byte_rate"))
                .with_value(5.0)])
    };
    let alter =
        AlterClientQuotasRequest::default().with_entries(vec![entry("a"), entry("a"), entry("b")]);
    let ssl = |p: Principal| Session::new("SSL", SecurityProtocol::Ssl, None).with_principal(p);
    for (mut session, validate_only) in [
        (Session::plaintext(), false),
        (ssl(Principal::user("alice")), false),
        (ssl(Principal::user("alice")), true),
    ] {
        for version in [0, 1] {
            let req = alter.clone().with_validate_only(validate_only);
            let r = answer::<AlterClientQuotasRequest>(
                handler.handle(&mut session, &frame(&req, version)),
                version,
            );
            // Kafka's getErrorResponse: every entry as sent, duplicates included.
            assert_eq!(r.entries.len(), 3);
            for e in &r.entries {
                assert_eq!(e.error_code, 31);
                assert_eq!(
                    e.error_message.as_deref(),
                    Some("Cluster authorization failed.")
                );
            }
            assert_eq!(
                handler.engine().generation(),
                0,
                "a refused alter changed the engine"
            );
        }
    }
    // Anonymous may not describe; alice may, and sees nothing yet.
    let describe = DescribeClientQuotasRequest::default();
    let r = answer::<DescribeClientQuotasRequest>(
        handler.handle(&mut Session::plaintext(), &frame(&describe, 1)),
        1,
    );
    assert_eq!((r.error_code, r.entries.is_none()), (31, true));
    assert_eq!(
        r.error_message.as_deref(),
        Some("Cluster authorization failed.")
    );
    let r = answer::<DescribeClientQuotasRequest>(
        handler.handle(&mut ssl(Principal::user("alice")), &frame(&describe, 1)),
        1,
    );
    assert_eq!(r.error_code, 0);
    // The super user's alteration applies.
    let req = AlterClientQuotasRequest::default().with_entries(vec![entry("b")]);
    let r = answer::<AlterClientQuotasRequest>(
        handler.handle(&mut ssl(Principal::user("admin")), &frame(&req, 1)),
        1,
    );
    assert_eq!(r.entries[0].error_code, 0);
    assert_eq!(handler.engine().generation(), 1);
}
