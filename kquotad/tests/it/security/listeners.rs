//! Every listener type end to end with the CLI tools, custom listener names mapped to protocols,
//! and Metadata answering with the listener a request came on.

use std::net::SocketAddr;

use kquota_testkit::{temp_dir, Kquotad};

use super::support::*;

#[test]
fn every_listener_type_end_to_end_with_the_cli() {
    let s = Secured::start(&[]);
    // PLAINTEXT: anonymous may neither describe nor alter.
    assert_refused(
        &list(s.plaintext, None),
        "CLUSTER_AUTHORIZATION_FAILED: Cluster authorization failed.",
    );
    assert_refused(
        &alter(s.plaintext, None, "p", 1),
        "CLUSTER_AUTHORIZATION_FAILED",
    );

    // SASL_PLAINTEXT: the super user alters with SCRAM-SHA-256, alice describes with PLAIN.
    let admin256 = s.sasl(
        "admin256",
        "SASL_PLAINTEXT",
        "SCRAM-SHA-256",
        "admin",
        ADMIN_PASSWORD,
    );
    assert_ok(&alter(s.sasl_plaintext, Some(&admin256), "u1", 100));
    let alice_plain = s.sasl(
        "alice-plain",
        "SASL_PLAINTEXT",
        "PLAIN",
        "alice",
        ALICE_PASSWORD,
    );
    let r = list(s.sasl_plaintext, Some(&alice_plain));
    assert_ok(&r);
    assert!(
        r.stdout.contains("producer_byte_rate broker_bps 100"),
        "{r:?}"
    );
    assert_refused(
        &alter(s.sasl_plaintext, Some(&alice_plain), "u1", 5),
        "CLUSTER_AUTHORIZATION_FAILED",
    );

    // SASL_SSL: SCRAM-SHA-512 for both users.
    let admin512 = s.sasl(
        "admin512",
        "SASL_SSL",
        "SCRAM-SHA-512",
        "admin",
        ADMIN_PASSWORD,
    );
    assert_ok(&alter(s.sasl_ssl, Some(&admin512), "u2", 200));
    let alice512 = s.sasl(
        "alice512",
        "SASL_SSL",
        "SCRAM-SHA-512",
        "alice",
        ALICE_PASSWORD,
    );
    let r = list(s.sasl_ssl, Some(&alice512));
    assert_ok(&r);
    assert!(
        r.stdout.contains("producer_byte_rate broker_bps 200"),
        "{r:?}"
    );
    // kafka-configs over SASL_SSL too.
    let r = cli(
        kquota_testkit::bin("kafka-configs"),
        &s.sasl_ssl.to_string(),
        Some(&admin512),
        &[
            "--alter",
            "--add-config",
            "consumer_byte_rate=300",
            "--entity-type",
            "users",
            "--entity-name",
            "u3",
        ],
    );
    assert_ok(&r);

    // SSL: the client certificate's subject is the principal.
    let admin_cert = s.ssl("admin-cert", Some("admin"));
    assert_ok(&alter(s.ssl, Some(&admin_cert), "u4", 400));
    let alice_cert = s.ssl("alice-cert", Some("alice"));
    let r = list(s.ssl, Some(&alice_cert));
    assert_ok(&r);
    assert!(
        r.stdout.contains("consumer_byte_rate broker_bps 300"),
        "{r:?}"
    );
    assert_refused(
        &alter(s.ssl, Some(&alice_cert), "u4", 1),
        "CLUSTER_AUTHORIZATION_FAILED",
    );
    // Without a certificate (ssl.client.auth=requested) the principal is ANONYMOUS.
    let no_cert = s.ssl("no-cert", None);
    assert_refused(&list(s.ssl, Some(&no_cert)), "CLUSTER_AUTHORIZATION_FAILED");

    // Host name verification (the default, https): the certificate names localhost, not
    // 127.0.0.1.
    let checked = s.config(
        "hostname-check",
        &[
            "security.protocol=SSL".to_owned(),
            format!("ssl.truststore.location={}", s.pki.path("ca.pem")),
            format!("ssl.keystore.location={}", s.pki.path("admin.pem")),
        ],
    );
    let r = cli(
        kquota_testkit::bin("kafka-quotas"),
        &format!("localhost:{}", s.ssl.port()),
        Some(&checked),
        &["--list"],
    );
    assert_ok(&r);
    assert_refused(
        &list(s.ssl, Some(&checked)),
        "certificate not valid for name \"127.0.0.1\"",
    );
}

#[test]
fn custom_listener_names_map_to_protocols() {
    let pki = pki();
    let creds = credentials(&pki.dir);
    let dir = temp_dir("security-names");
    let (_server, bound) = Kquotad::start_with(
        &dir,
        "INTERNAL://127.0.0.1:0,EXTERNAL://127.0.0.1:0",
        &[
            "--listener-security-protocol-map",
            "INTERNAL:PLAINTEXT,EXTERNAL:SASL_PLAINTEXT",
            "--sasl-credentials-file",
            creds.to_str().unwrap(),
            "--super-users",
            "User:admin",
        ],
    );
    assert_eq!(bound.len(), 2);
    let external = bound[1].1;
    let mut c = Conn::open(external);
    assert_eq!(c.handshake("SCRAM-SHA-256").error_code, 0);
    let mut c = Conn::open(bound[0].1);
    assert_eq!(c.describe(), Some(31));
}

#[test]
fn metadata_answers_with_the_listener_it_came_on() {
    use kafka_protocol::messages::MetadataRequest;
    let dir = temp_dir("security-advertised");
    let (_server, bound) = Kquotad::start_with(
        &dir,
        "PLAINTEXT://127.0.0.1:0,INTERNAL://127.0.0.1:0",
        &[
            "--listener-security-protocol-map",
            "INTERNAL:PLAINTEXT",
            "--advertised-listeners",
            "INTERNAL://quota.internal:9999",
        ],
    );
    let port = |addr: SocketAddr| {
        let mut c = Conn::open(addr);
        let r = c.call(&MetadataRequest::default(), 1).unwrap();
        (r.brokers[0].host.to_string(), r.brokers[0].port)
    };
    assert_eq!(
        port(bound[0].1),
        ("127.0.0.1".to_owned(), i32::from(bound[0].1.port()))
    );
    assert_eq!(port(bound[1].1), ("quota.internal".to_owned(), 9999));
}
