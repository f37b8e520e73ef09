//! `ssl.principal.mapping.rules` on an SSL listener: a client certificate's subject, mapped by the
//! rules, is the principal authorized and audited; a client without a certificate is ANONYMOUS,
//! which no rule maps; a subject no rule maps is a failed authentication and its connection is
//! closed unanswered; the rules hold after SIGHUP replaces the listeners' handlers; a rule that
//! does not parse stops kquotad.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use kafka_protocol::messages::ApiVersionsRequest;
use rcgen::{DnType, SanType};

use kquota_testkit::{kquotad_exit, temp_dir, Kquotad, TempDir};

use super::support::*;

/// Lower-cases the common name of any subject, and keeps a subject without one whole.
const COMMON_NAME_LOWER: &str = "RULE:^.*CN=([^,]*).*$/$1/L,DEFAULT";
/// Maps only the subject `CN=admin`: no DEFAULT, so any other subject is refused.
const ADMIN_ONLY: &str = "RULE:^CN=admin$/admin/";

/// A CA, the server's certificate, and client certificates for `CN=Alice,O=acme`,
/// `CN=Bob,O=acme` and `CN=admin`.
fn mapping_pki() -> Pki {
    let dir = temp_dir("mapping-pki");
    std::fs::create_dir_all(&dir).unwrap();
    let (ca_cert, ca_key) = ca("kquota test CA");
    std::fs::write(dir.join("ca.pem"), ca_cert.pem()).unwrap();
    let issuer = (&ca_cert, &ca_key);
    leaf(
        &dir,
        "server",
        dn(&[(DnType::CommonName, "localhost")]),
        vec![SanType::DnsName("localhost".try_into().unwrap())],
        issuer,
        false,
    );
    // A subject reads most specific first: the last part pushed is the first written.
    for (name, cn) in [("alice", "Alice"), ("bob", "Bob")] {
        let subject = dn(&[(DnType::OrganizationName, "acme"), (DnType::CommonName, cn)]);
        leaf(&dir, name, subject, vec![], issuer, false);
    }
    let admin = dn(&[(DnType::CommonName, "admin")]);
    leaf(&dir, "admin", admin, vec![], issuer, false);
    Pki { dir }
}

/// A server with an SSL listener whose certificates' subjects are mapped by `rules`.
struct Mapped {
    /// Killed when the test ends.
    server: Kquotad,
    dir: TempDir,
    pki: Pki,
    ssl: SocketAddr,
    /// With [`Mapped::with_sasl`]: the SASL_PLAINTEXT listener and its users' file.
    sasl: Option<(SocketAddr, PathBuf)>,
}

impl Mapped {
    fn start(client_auth: &str, rules: &str, super_users: &str) -> Mapped {
        Mapped::start_with(client_auth, rules, super_users, false)
    }

    /// Also a SASL_PLAINTEXT listener whose users (SCRAM-SHA-512) SIGHUP reloads, so that a
    /// reload replaces every listener's handler.
    fn with_sasl(rules: &str, super_users: &str) -> Mapped {
        Mapped::start_with("required", rules, super_users, true)
    }

    fn start_with(client_auth: &str, rules: &str, super_users: &str, sasl: bool) -> Mapped {
        let pki = mapping_pki();
        let dir = temp_dir("mapping");
        let mut props = format!(
            "super.users={super_users}\n\
             ssl.keystore.type=PEM\n\
             ssl.keystore.location={}\n\
             ssl.truststore.type=PEM\n\
             ssl.truststore.location={}\n\
             ssl.client.auth={client_auth}\n\
             ssl.principal.mapping.rules={rules}\n\
             connection.failed.authentication.delay.ms=0\n",
            pki.path("server.pem"),
            pki.path("ca.pem"),
        );
        let mut listeners = "SSL://127.0.0.1:0".to_owned();
        let users = pki.dir.join("users.json");
        if sasl {
            add_user(&users, "dave", "dave's secret");
            props += &format!(
                "sasl.enabled.mechanisms=SCRAM-SHA-512\nsasl.credentials.file={}\n",
                users.display()
            );
            listeners += ",SASL_PLAINTEXT://127.0.0.1:0";
        }
        let props_file = dir.with_extension("properties");
        std::fs::write(&props_file, props).unwrap();
        let (server, bound) = Kquotad::start_with(
            &dir,
            &listeners,
            &["--config", props_file.to_str().unwrap()],
        );
        let addr = |name: &str| bound.iter().find(|(n, _)| n == name).map(|(_, a)| *a);
        Mapped {
            server,
            ssl: addr("SSL").expect("an SSL listener"),
            sasl: addr("SASL_PLAINTEXT").map(|a| (a, users)),
            dir,
            pki,
        }
    }

    /// A `--command-config` for an SSL client presenting `keystore`'s certificate, if any.
    fn client(&self, keystore: Option<&str>) -> String {
        let mut text = format!(
            "security.protocol=SSL\n\
             ssl.truststore.type=PEM\n\
             ssl.truststore.location={}\n\
             ssl.endpoint.identification.algorithm=\n",
            self.pki.path("ca.pem"),
        );
        if let Some(k) = keystore {
            text += &format!(
                "ssl.keystore.type=PEM\nssl.keystore.location={}\n",
                self.pki.path(&format!("{k}.pem"))
            );
        }
        let name = keystore.unwrap_or("no-cert");
        let path = self.dir.with_extension(format!("{name}.properties"));
        std::fs::write(&path, text).unwrap();
        path.to_str().unwrap().to_owned()
    }

    fn log(&self) -> String {
        Kquotad::log(&self.dir)
    }
}

/// The audit line of the alteration of `user`.
fn audit_line(log: &str, user: &str) -> String {
    let entity = format!("user={user}:");
    log.lines()
        .find(|l| l.contains("kquota::audit") && l.contains(&entity))
        .unwrap_or_else(|| panic!("no audit line for {entity}\n{log}"))
        .to_owned()
}

#[test]
fn a_client_certificate_is_the_principal_its_subject_maps_to() {
    let s = Mapped::start("required", COMMON_NAME_LOWER, "User:alice");
    // CN=Alice,O=acme is User:alice, a super user: her alteration applies.
    let alice = s.client(Some("alice"));
    assert_ok(&alter(s.ssl, Some(&alice), "by-alice", 7));
    let r = list(s.ssl, Some(&alice));
    assert_ok(&r);
    assert_eq!(
        r.stdout,
        "{user=by-alice}\nproducer_byte_rate broker_bps 7\n"
    );
    // CN=Bob,O=acme is User:bob, who is not.
    let bob = s.client(Some("bob"));
    assert_refused(
        &alter(s.ssl, Some(&bob), "by-bob", 8),
        "CLUSTER_AUTHORIZATION_FAILED",
    );
    let log = s.log();
    assert!(
        audit_line(&log, "by-alice").contains("principal=\"User:alice\""),
        "{log}"
    );
    assert!(
        log.contains("Principal = User:bob is Denied operation AlterClientQuotas"),
        "{log}"
    );
    // The subjects themselves are never the principal.
    assert!(!log.contains("User:CN="), "{log}");
    // Bob's refused alteration changed nothing.
    assert_eq!(list(s.ssl, Some(&alice)).stdout, r.stdout);
}

#[test]
fn without_a_certificate_the_principal_is_anonymous() {
    // The rules map no subject but CN=admin, and leave ANONYMOUS alone: it is no subject.
    let s = Mapped::start("requested", ADMIN_ONLY, "User:ANONYMOUS");
    let no_cert = s.client(None);
    assert_ok(&alter(s.ssl, Some(&no_cert), "by-anonymous", 5));
    let log = s.log();
    assert!(
        audit_line(&log, "by-anonymous").contains("principal=\"User:ANONYMOUS\""),
        "{log}"
    );
    // A certificate's mapped name is not a super user here.
    let admin = s.client(Some("admin"));
    assert_refused(
        &alter(s.ssl, Some(&admin), "by-admin", 6),
        "CLUSTER_AUTHORIZATION_FAILED",
    );
    let log = s.log();
    assert!(
        log.contains("Principal = User:admin is Denied operation AlterClientQuotas"),
        "{log}"
    );
    assert!(!log.contains("Failed authentication"), "{log}");
}

/// One ApiVersions request over TLS with `keystore`'s certificate, by hand: whether it is
/// answered, or the connection is closed without an answer.
fn api_versions_answered(s: &Mapped, keystore: &str) -> bool {
    let props = std::fs::read_to_string(s.client(Some(keystore))).unwrap();
    let (config, _) = kquota_cli::ClientConfig::from_properties(&props).unwrap();
    let tls = config.tls.expect("a TLS configuration");
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let connection = rustls::ClientConnection::new(tls, name).unwrap();
    let tcp = TcpStream::connect(s.ssl).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut stream = rustls::StreamOwned::new(connection, tcp);
    let frame = crate::frames::request(1, "mapping-test", &ApiVersionsRequest::default(), 0);
    // With TLS 1.3 the client's handshake ends before the server has judged its certificate, so
    // a refusal may come as late as the first read.
    if stream
        .write_all(&frame)
        .and_then(|()| stream.flush())
        .is_err()
    {
        return false;
    }
    let mut len = [0u8; 4];
    match stream.read_exact(&mut len) {
        Ok(()) => true,
        Err(e) => {
            assert!(
                !matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
                "neither answered nor closed: {e}"
            );
            false
        }
    }
}

#[test]
fn a_subject_no_rule_maps_is_refused_and_a_mapped_one_served() {
    let s = Mapped::start("required", ADMIN_ONLY, "User:admin");
    // CN=Alice,O=acme maps to nothing: the connection closes unanswered, as Kafka closes it.
    assert!(!api_versions_answered(&s, "alice"));
    let alice = s.client(Some("alice"));
    assert_eq!(list(s.ssl, Some(&alice)).code, 1);
    let log = s.log();
    assert!(
        log.contains(
            "Failed authentication with /127.0.0.1 (no ssl.principal.mapping.rules rule \
             applies to 'CN=Alice,O=acme'"
        ),
        "{log}"
    );
    assert!(!log.contains("Principal = User:"), "{log}");
    // CN=admin maps to the super user admin, on the same listener.
    assert!(api_versions_answered(&s, "admin"));
    let admin = s.client(Some("admin"));
    assert_ok(&alter(s.ssl, Some(&admin), "by-admin", 9));
    assert!(
        audit_line(&s.log(), "by-admin").contains("principal=\"User:admin\""),
        "{}",
        s.log()
    );
}

#[test]
fn the_mapping_holds_after_sighup_replaces_the_handlers() {
    let s = Mapped::with_sasl(COMMON_NAME_LOWER, "User:alice");
    let (sasl, users) = s.sasl.clone().expect("a SASL listener");
    let alice = s.client(Some("alice"));
    let bob = s.client(Some("bob"));
    assert_ok(&alter(s.ssl, Some(&alice), "before", 1));

    // A user added to the file authenticates once SIGHUP has given every listener a new handler.
    let carol = s.dir.with_extension("carol.properties");
    std::fs::write(
        &carol,
        "security.protocol=SASL_PLAINTEXT\n\
         sasl.mechanism=SCRAM-SHA-512\n\
         sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \
         username=\"carol\" password=\"carol's secret\";\n",
    )
    .unwrap();
    let carol = carol.to_str().unwrap();
    assert_ne!(list(sasl, Some(carol)).code, 0);
    add_user(&users, "carol", "carol's secret");
    let status = Command::new("kill")
        .args(["-HUP", &s.server.child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let deadline = Instant::now() + Duration::from_secs(20);
    while list(sasl, Some(carol)).code != 0 {
        assert!(Instant::now() < deadline, "no reload; log:\n{}", s.log());
        std::thread::sleep(Duration::from_millis(100));
    }

    // The new handlers map certificates by the same rules.
    assert_ok(&alter(s.ssl, Some(&alice), "after", 2));
    assert_refused(
        &alter(s.ssl, Some(&bob), "after", 3),
        "CLUSTER_AUTHORIZATION_FAILED",
    );
    let log = s.log();
    assert!(
        audit_line(&log, "after").contains("principal=\"User:alice\""),
        "{log}"
    );
    assert!(
        log.contains("Principal = User:bob is Denied operation AlterClientQuotas"),
        "{log}"
    );
}

#[test]
fn a_rule_that_does_not_parse_stops_kquotad() {
    let dir = temp_dir("mapping-bad");
    let data = dir.to_str().expect("utf-8 path");
    for rules in ["RULE:^CN=(.*)$/$1/X", "RULE:^CN=(.*)$/$1/, NOT-A-RULE"] {
        let props = dir.with_extension("properties");
        std::fs::write(&props, format!("ssl.principal.mapping.rules={rules}\n")).unwrap();
        let (code, err) = kquotad_exit(&["--config", props.to_str().unwrap(), "--data-dir", data]);
        assert_eq!(code, Some(2), "{rules}: {err}");
        let at = format!("kquotad: {}: line 1: ", props.display());
        let message = err
            .strip_prefix(&at)
            .unwrap_or_else(|| panic!("no '{at}' before {err}"));
        assert!(
            message.starts_with(&format!("ssl.principal.mapping.rules={rules}: ")),
            "{err}"
        );
        assert!(message.contains("invalid rule"), "{err}");
    }
    // The same refusal from the command line.
    let (code, err) = kquotad_exit(&[
        "--data-dir",
        data,
        "--override",
        "ssl.principal.mapping.rules=RULE:(a/b/Q",
    ]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.starts_with("kquotad: --override: ssl.principal.mapping.rules=RULE:(a/b/Q: "),
        "{err}"
    );
}
