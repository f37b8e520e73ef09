//! SIGHUP: the TLS keystore and the SASL users are read again and used for new connections; a
//! file that does not load keeps what the server had, and the process goes on serving.

use std::process::Command;
use std::time::{Duration, Instant};

use rcgen::{DnType, SanType};

use super::support::*;

fn hangup(s: &Secured) {
    let status = Command::new("kill")
        .args(["-HUP", &s.server.child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

/// Waits until `done` holds (a reload runs beside the server's connections).
fn eventually(what: &str, s: &Secured, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done() {
        assert!(Instant::now() < deadline, "{what}; log:\n{}", s.log());
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// An SSL client's configuration that trusts only `ca` (a file in the PKI directory).
fn trusting(s: &Secured, name: &str, ca: &str) -> String {
    s.config(
        name,
        &[
            "security.protocol=SSL".to_owned(),
            "ssl.truststore.type=PEM".to_owned(),
            format!("ssl.truststore.location={}", s.pki.path(ca)),
            // The test certificate names localhost; the tests connect to 127.0.0.1.
            "ssl.endpoint.identification.algorithm=".to_owned(),
        ],
    )
}

#[test]
fn sighup_reloads_the_keystore_and_the_users_and_a_broken_file_keeps_the_old() {
    let s = Secured::start(&["--override", "kquota.describe.allow.anonymous=true"]);
    let old_ca = trusting(&s, "old-ca", "ca.pem");
    let new_ca = trusting(&s, "new-ca", "new-ca.pem");
    // A new CA, and the server's certificate from it, not yet in use.
    let (ca_cert, ca_key) = ca("the new CA");
    std::fs::write(s.pki.dir.join("new-ca.pem"), ca_cert.pem()).unwrap();
    assert_ok(&list(s.ssl, Some(&old_ca)));
    assert_ne!(list(s.ssl, Some(&new_ca)).code, 0);

    // The keystore replaced (written beside and renamed, as a certificate tool does), then SIGHUP.
    let staged = s.pki.dir.join("staged");
    std::fs::create_dir_all(&staged).unwrap();
    leaf(
        &staged,
        "server",
        dn(&[(DnType::CommonName, "localhost")]),
        vec![SanType::DnsName("localhost".try_into().unwrap())],
        (&ca_cert, &ca_key),
        false,
    );
    std::fs::rename(staged.join("server.pem"), s.pki.dir.join("server.pem")).unwrap();
    // SIGHUP no longer ends the process; a new connection gets the new certificate.
    hangup(&s);
    eventually("the new certificate is served", &s, || {
        list(s.ssl, Some(&new_ca)).code == 0
    });
    assert_ne!(list(s.ssl, Some(&old_ca)).code, 0);

    // A keystore that does not load: the server says why and keeps the certificate it has.
    std::fs::write(s.pki.dir.join("server.pem"), "not a certificate\n").unwrap();
    hangup(&s);
    eventually("the failed reload is logged", &s, || {
        s.log().contains("kept the TLS keystore")
    });
    assert_ok(&list(s.ssl, Some(&new_ca)));

    // The SASL users: a user added to the file can authenticate once reloaded.
    let carol = s.sasl(
        "carol",
        "SASL_PLAINTEXT",
        "SCRAM-SHA-512",
        "carol",
        "carol's secret",
    );
    assert_ne!(list(s.sasl_plaintext, Some(&carol)).code, 0);
    let users = s.pki.dir.join("users.json");
    add_user(&users, "carol", "carol's secret");
    hangup(&s);
    eventually("carol authenticates", &s, || {
        list(s.sasl_plaintext, Some(&carol)).code == 0
    });
    // Users already known still authenticate.
    let alice = s.sasl(
        "alice",
        "SASL_PLAINTEXT",
        "SCRAM-SHA-256",
        "alice",
        ALICE_PASSWORD,
    );
    assert_ok(&list(s.sasl_plaintext, Some(&alice)));

    // A credentials file that does not load keeps the users: carol still authenticates.
    std::fs::write(&users, "{ not json").unwrap();
    hangup(&s);
    eventually("the failed users reload is logged", &s, || {
        s.log().contains("kept the SASL users")
    });
    assert_ok(&list(s.sasl_plaintext, Some(&carol)));
}
