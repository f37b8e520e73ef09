//! Security end to end: every listener type with the CLI binaries, SASL PLAIN and SCRAM, client
//! certificates, `super.users` authorization, and bad input (wrong passwords, truncated and replayed
//! SCRAM exchanges, plaintext on a TLS port, bad certificates, requests before authentication).
//! Certificates are made at test time with rcgen.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::alter_client_quotas_request::{EntityData, EntryData, OpData};
use kafka_protocol::messages::describe_client_quotas_request::ComponentData;
use kafka_protocol::messages::{
    AlterClientQuotasRequest, ApiVersionsRequest, ApiVersionsResponse, DescribeClientQuotasRequest,
    RequestHeader, ResponseHeader, SaslAuthenticateRequest, SaslAuthenticateResponse,
    SaslHandshakeRequest, SaslHandshakeResponse,
};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, Request, StrBytes};
use kquota_wire::Outcome;
use kquota_wire::ScramClient;
use kquota_wire::ScramMechanism;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, IsCa, KeyPair, SanType,
};

use kquota_testkit::{closed_by_server, kquotad_exit, temp_dir, Kquotad, TempDir};

const ADMIN_PASSWORD: &str = "admin-secret";
const ALICE_PASSWORD: &str = "alice pa$$word";

/// A CA and the certificates signed by it, written as PEM files in a directory.
struct Pki {
    dir: TempDir,
}

impl Pki {
    fn path(&self, name: &str) -> String {
        self.dir.join(name).to_str().unwrap().to_owned()
    }
}

fn dn(parts: &[(DnType, &str)]) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    for (t, v) in parts {
        dn.push(t.clone(), *v);
    }
    dn
}

fn ca(name: &str) -> (rcgen::Certificate, KeyPair) {
    let mut params = CertificateParams::default();
    params.distinguished_name = dn(&[(DnType::CommonName, name)]);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let key = KeyPair::generate().unwrap();
    (params.self_signed(&key).unwrap(), key)
}

/// Writes `<name>.pem` holding the certificate and its key (Kafka's PEM keystore layout).
fn leaf(
    dir: &Path,
    name: &str,
    subject: DistinguishedName,
    sans: Vec<SanType>,
    issuer: (&rcgen::Certificate, &KeyPair),
    expired: bool,
) {
    let mut params = CertificateParams::default();
    params.distinguished_name = subject;
    params.subject_alt_names = sans;
    if expired {
        params.not_before = rcgen::date_time_ymd(2020, 1, 1);
        params.not_after = rcgen::date_time_ymd(2021, 1, 1);
    }
    let key = KeyPair::generate().unwrap();
    let cert = params.signed_by(&key, issuer.0, issuer.1).unwrap();
    std::fs::write(
        dir.join(format!("{name}.pem")),
        format!("{}{}", cert.pem(), key.serialize_pem()),
    )
    .unwrap();
}

fn pki() -> Pki {
    let dir = temp_dir("pki");
    std::fs::create_dir_all(&dir).unwrap();
    let (ca_cert, ca_key) = ca("kquota test CA");
    std::fs::write(dir.join("ca.pem"), ca_cert.pem()).unwrap();
    let (other_cert, other_key) = ca("someone else's CA");
    std::fs::write(dir.join("other-ca.pem"), other_cert.pem()).unwrap();
    let issuer = (&ca_cert, &ca_key);
    // The server's name is "localhost" only, so that host name checks against 127.0.0.1 fail.
    leaf(
        &dir,
        "server",
        dn(&[(DnType::CommonName, "localhost")]),
        vec![SanType::DnsName("localhost".try_into().unwrap())],
        issuer,
        false,
    );
    let person = |cn: &str, ou: &str| {
        dn(&[
            (DnType::OrganizationName, "acme"),
            (DnType::OrganizationalUnitName, ou),
            (DnType::CommonName, cn),
        ])
    };
    leaf(&dir, "admin", person("admin", "ops"), vec![], issuer, false);
    leaf(&dir, "alice", person("alice", "eng"), vec![], issuer, false);
    leaf(
        &dir,
        "expired",
        person("admin", "ops"),
        vec![],
        issuer,
        true,
    );
    leaf(
        &dir,
        "untrusted",
        person("admin", "ops"),
        vec![],
        (&other_cert, &other_key),
        false,
    );
    Pki { dir }
}

/// Makes a credentials file with `kquotad scram-credential`, the operator's tool.
fn credentials(dir: &Path) -> PathBuf {
    let file = dir.join("users.json");
    for (user, password, mechanism) in [
        ("admin", ADMIN_PASSWORD, None),
        ("alice", ALICE_PASSWORD, Some("SCRAM-SHA-512")),
        ("alice", ALICE_PASSWORD, Some("SCRAM-SHA-256")),
    ] {
        let mut cmd = Command::new(kquota_testkit::bin("kquotad"));
        cmd.args(["scram-credential", "--user", user, "--file"])
            .arg(&file);
        if let Some(m) = mechanism {
            cmd.args(["--mechanism", m]);
        }
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        writeln!(child.stdin.take().unwrap(), "{password}").unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{out:?}");
    }
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(!text.contains(ADMIN_PASSWORD) && !text.contains("alice pa"));
    assert!(text.contains("\"stored_key\"") && text.contains("SCRAM-SHA-512"));
    file
}

/// A server with all four listeners.
struct Secured {
    server: Kquotad,
    dir: TempDir,
    pki: Pki,
    plaintext: SocketAddr,
    ssl: SocketAddr,
    sasl_plaintext: SocketAddr,
    sasl_ssl: SocketAddr,
}

impl Secured {
    fn start(extra: &[&str]) -> Secured {
        let pki = pki();
        let dir = temp_dir("security");
        let creds = credentials(&pki.dir);
        Secured::start_in(dir, pki, &creds, extra)
    }

    fn start_in(dir: TempDir, pki: Pki, creds: &Path, extra: &[&str]) -> Secured {
        let props = format!(
            "super.users=User:admin;User:CN=admin,OU=ops,O=acme\n\
             sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512\n\
             sasl.credentials.file={}\n\
             ssl.keystore.type=PEM\n\
             ssl.keystore.location={}\n\
             ssl.truststore.type=PEM\n\
             ssl.truststore.location={}\n\
             ssl.client.auth=requested\n",
            creds.display(),
            pki.path("server.pem"),
            pki.path("ca.pem"),
        );
        let props_file = dir.with_extension("properties");
        std::fs::write(&props_file, props).unwrap();
        let mut args = vec!["--config", props_file.to_str().unwrap()];
        args.extend_from_slice(extra);
        let (server, bound) = Kquotad::start_with(
            &dir,
            "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
            &args,
        );
        let addr = |name: &str| bound.iter().find(|(n, _)| n == name).unwrap().1;
        Secured {
            plaintext: addr("PLAINTEXT"),
            ssl: addr("SSL"),
            sasl_plaintext: addr("SASL_PLAINTEXT"),
            sasl_ssl: addr("SASL_SSL"),
            server,
            dir,
            pki,
        }
    }

    /// Writes a `--command-config` file.
    fn config(&self, name: &str, lines: &[String]) -> String {
        let path = self.dir.with_extension(format!("{name}.properties"));
        std::fs::write(&path, lines.join("\n") + "\n").unwrap();
        path.to_str().unwrap().to_owned()
    }

    fn sasl(
        &self,
        name: &str,
        protocol: &str,
        mechanism: &str,
        user: &str,
        password: &str,
    ) -> String {
        let module = if mechanism == "PLAIN" {
            "org.apache.kafka.common.security.plain.PlainLoginModule"
        } else {
            "org.apache.kafka.common.security.scram.ScramLoginModule"
        };
        let mut lines = vec![
            format!("security.protocol={protocol}"),
            format!("sasl.mechanism={mechanism}"),
            format!(
                "sasl.jaas.config={module} required username=\"{user}\" password=\"{password}\";"
            ),
        ];
        if protocol == "SASL_SSL" {
            lines.push(format!(
                "ssl.truststore.location={}",
                self.pki.path("ca.pem")
            ));
            lines.push("ssl.truststore.type=PEM".to_owned());
            // The test certificate names localhost; the tests connect to 127.0.0.1.
            lines.push("ssl.endpoint.identification.algorithm=".to_owned());
        }
        self.config(name, &lines)
    }

    fn ssl(&self, name: &str, keystore: Option<&str>) -> String {
        let mut lines = vec![
            "security.protocol=SSL".to_owned(),
            "ssl.truststore.type=PEM".to_owned(),
            format!("ssl.truststore.location={}", self.pki.path("ca.pem")),
            // The test certificate names localhost; the tests connect to 127.0.0.1.
            "ssl.endpoint.identification.algorithm=".to_owned(),
        ];
        if let Some(k) = keystore {
            lines.push("ssl.keystore.type=PEM".to_owned());
            lines.push(format!(
                "ssl.keystore.location={}",
                self.pki.path(&format!("{k}.pem"))
            ));
        }
        self.config(name, &lines)
    }

    fn log(&self) -> String {
        Kquotad::log(&self.dir)
    }
}

#[derive(Debug)]
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

fn cli(bin: std::path::PathBuf, bootstrap: &str, config: Option<&str>, args: &[&str]) -> Run {
    let mut cmd = Command::new(bin);
    cmd.args(["--bootstrap-server", bootstrap]);
    if let Some(c) = config {
        cmd.args(["--command-config", c]);
    }
    let out = cmd.args(args).output().unwrap();
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn quotas(addr: SocketAddr, config: Option<&str>, args: &[&str]) -> Run {
    cli(
        kquota_testkit::bin("kafka-quotas"),
        &addr.to_string(),
        config,
        args,
    )
}

fn list(addr: SocketAddr, config: Option<&str>) -> Run {
    quotas(addr, config, &["--list"])
}

fn alter(addr: SocketAddr, config: Option<&str>, user: &str, rate: u32) -> Run {
    quotas(
        addr,
        config,
        &[
            "--alter",
            "--names",
            &format!("user={user}"),
            "--add",
            &format!("producer_byte_rate={rate}"),
        ],
    )
}

fn assert_ok(r: &Run) {
    assert_eq!(r.code, 0, "{r:?}");
}

fn assert_refused(r: &Run, what: &str) {
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains(what), "expected '{what}' in {r:?}");
}

/// A minimal blocking Kafka connection for driving SASL by hand.
struct Conn {
    stream: TcpStream,
    correlation: i32,
}

impl Conn {
    fn open(addr: SocketAddr) -> Conn {
        let stream = TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        Conn {
            stream,
            correlation: 0,
        }
    }

    fn send<R: Request>(&mut self, req: &R, version: i16) {
        self.correlation += 1;
        let mut buf = BytesMut::new();
        RequestHeader::default()
            .with_request_api_key(R::KEY)
            .with_request_api_version(version)
            .with_correlation_id(self.correlation)
            .with_client_id(Some(StrBytes::from_static_str("security-test")))
            .encode(&mut buf, R::header_version(version))
            .unwrap();
        req.encode(&mut buf, version).unwrap();
        self.stream
            .write_all(&(buf.len() as u32).to_be_bytes())
            .unwrap();
        self.stream.write_all(&buf).unwrap();
    }

    /// The response, or `None` if the server closed the connection.
    fn recv<R: Request>(&mut self, version: i16) -> Option<R::Response> {
        let mut len = [0u8; 4];
        self.stream.read_exact(&mut len).ok()?;
        let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
        self.stream.read_exact(&mut body).ok()?;
        let mut body = Bytes::from(body);
        let header =
            ResponseHeader::decode(&mut body, R::Response::header_version(version)).unwrap();
        assert_eq!(header.correlation_id, self.correlation);
        Some(R::Response::decode(&mut body, version).unwrap())
    }

    fn call<R: Request>(&mut self, req: &R, version: i16) -> Option<R::Response> {
        self.send(req, version);
        self.recv::<R>(version)
    }

    /// Whether the server closes the connection within the read timeout (bytes it sends first,
    /// such as a TLS alert, are skipped).
    fn closed(&mut self) -> bool {
        let mut b = [0u8; 512];
        loop {
            match self.stream.read(&mut b) {
                Ok(0) => return true,
                Ok(_) => continue,
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    return false
                }
                Err(_) => return true,
            }
        }
    }

    fn handshake(&mut self, mechanism: &'static str) -> SaslHandshakeResponse {
        self.call(
            &SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str(mechanism)),
            1,
        )
        .expect("handshake answered")
    }

    fn authenticate(&mut self, token: Vec<u8>) -> Option<SaslAuthenticateResponse> {
        self.call(
            &SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(token)),
            2,
        )
    }

    fn describe(&mut self) -> Option<i16> {
        let req =
            DescribeClientQuotasRequest::default().with_components(vec![ComponentData::default()
                .with_entity_type(StrBytes::from_static_str("user"))
                .with_match_type(2)
                .with_match(None)]);
        self.call(&req, 1).map(|r| r.error_code)
    }
}

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

/// Asserts that the server still serves a good client on SASL_PLAINTEXT.
fn still_serving(s: &Secured) {
    let admin = s.sasl(
        "still",
        "SASL_PLAINTEXT",
        "SCRAM-SHA-512",
        "admin",
        ADMIN_PASSWORD,
    );
    assert_ok(&list(s.sasl_plaintext, Some(&admin)));
}

#[test]
fn wrong_passwords_and_unknown_users_are_refused_and_logged() {
    let s = Secured::start(&[]);
    for mechanism in ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] {
        for (user, password) in [("admin", "wrong"), ("nobody", ADMIN_PASSWORD)] {
            let c = s.sasl("bad", "SASL_PLAINTEXT", mechanism, user, password);
            let r = list(s.sasl_plaintext, Some(&c));
            assert_refused(&r, "authentication failed: SASL_AUTHENTICATION_FAILED");
        }
    }
    let c = s.sasl("bad", "SASL_PLAINTEXT", "PLAIN", "admin", "wrong");
    assert_refused(
        &list(s.sasl_plaintext, Some(&c)),
        "Invalid username or password",
    );
    let c = s.sasl("bad", "SASL_PLAINTEXT", "SCRAM-SHA-256", "nobody", "x");
    // The same answer for an unknown user as for a wrong password.
    assert_refused(
        &list(s.sasl_plaintext, Some(&c)),
        "Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-256",
    );
    still_serving(&s);
    let log = s.log();
    assert!(
        log.contains("Failed authentication with /127.0.0.1"),
        "{log}"
    );
    assert!(
        log.contains("PLAIN user 'admin': invalid username or password"),
        "{log}"
    );
}

#[test]
fn a_failed_authentication_is_delayed_without_blocking_other_clients() {
    let s = Secured::start(&[
        "--override",
        "connection.failed.authentication.delay.ms=3000",
    ]);
    let addr = s.sasl_plaintext;
    let slow = std::thread::spawn(move || {
        let mut c = Conn::open(addr);
        assert_eq!(c.handshake("PLAIN").error_code, 0);
        let start = Instant::now();
        let r = c
            .authenticate(b"\0admin\0wrong".to_vec())
            .expect("an answer");
        assert_eq!(r.error_code, 58);
        assert!(c.closed());
        start.elapsed()
    });
    std::thread::sleep(Duration::from_millis(200));
    let start = Instant::now();
    still_serving(&s);
    let good = start.elapsed();
    let slow = slow.join().unwrap();
    assert!(slow >= Duration::from_millis(3000), "not delayed: {slow:?}");
    // Well under the delay, with room for a loaded machine.
    assert!(
        good < Duration::from_millis(2500),
        "a good client waited {good:?}"
    );
}

#[test]
fn truncated_and_malformed_sasl_exchanges_are_refused() {
    let s = Secured::start(&["--override", "connection.failed.authentication.delay.ms=0"]);
    // The client leaves after its first SCRAM message.
    let mut c = Conn::open(s.sasl_plaintext);
    assert_eq!(c.handshake("SCRAM-SHA-256").error_code, 0);
    let scram = ScramClient::new(ScramMechanism::Sha256, "admin", ADMIN_PASSWORD).unwrap();
    let r = c.authenticate(scram.client_first()).unwrap();
    assert_eq!(r.error_code, 0);
    drop(c);
    // A frame cut short mid-exchange.
    let mut c = Conn::open(s.sasl_plaintext);
    assert_eq!(c.handshake("SCRAM-SHA-256").error_code, 0);
    c.stream.write_all(&[0, 0, 0, 40, 0, 36, 0, 2]).unwrap();
    drop(c);
    // Malformed tokens are answered with SASL_AUTHENTICATION_FAILED and the connection closes.
    for (mechanism, token) in [
        ("SCRAM-SHA-256", &b"n,,n=admin"[..]),
        ("SCRAM-SHA-512", b""),
        ("PLAIN", b"admin"),
        ("PLAIN", b"\0admin\0"),
    ] {
        let mut c = Conn::open(s.sasl_plaintext);
        assert_eq!(c.handshake(mechanism).error_code, 0);
        let r = c.authenticate(token.to_vec()).unwrap();
        assert_eq!(r.error_code, 58, "{mechanism} {token:?}");
        assert!(c.closed());
    }
    // A mechanism that is not enabled.
    let mut c = Conn::open(s.sasl_plaintext);
    let r = c.handshake("GSSAPI");
    assert_eq!(r.error_code, 33);
    assert_eq!(r.mechanisms.len(), 3);
    assert!(c.closed());
    still_serving(&s);
}

#[test]
fn a_replayed_scram_final_message_is_refused() {
    let s = Secured::start(&["--override", "connection.failed.authentication.delay.ms=0"]);
    let mut c = Conn::open(s.sasl_plaintext);
    assert_eq!(c.handshake("SCRAM-SHA-512").error_code, 0);
    let mut scram = ScramClient::new(ScramMechanism::Sha512, "admin", ADMIN_PASSWORD).unwrap();
    let first = scram.client_first();
    let server_first = c.authenticate(first.clone()).unwrap().auth_bytes;
    let fin = scram.client_final(&server_first).unwrap();
    let r = c.authenticate(fin.clone()).unwrap();
    assert_eq!(r.error_code, 0);
    scram.verify_server_final(&r.auth_bytes).unwrap();
    assert_eq!(c.describe(), Some(0));
    // The same messages on a new connection: the server's nonce differs, so the proof is refused.
    let mut replay = Conn::open(s.sasl_plaintext);
    assert_eq!(replay.handshake("SCRAM-SHA-512").error_code, 0);
    let again = replay.authenticate(first).unwrap();
    assert_eq!(again.error_code, 0);
    assert_ne!(again.auth_bytes, server_first);
    let r = replay.authenticate(fin).unwrap();
    assert_eq!(r.error_code, 58);
    assert!(replay.closed());
    // A second handshake on an authenticated connection is refused, and the connection lives on.
    assert_eq!(c.handshake("PLAIN").error_code, 34);
    assert_eq!(c.describe(), Some(0));
    still_serving(&s);
}

#[test]
fn requests_before_authentication_close_the_connection() {
    let s = Secured::start(&[]);
    // ApiVersions is answered and lists the SASL APIs; a describe is not.
    let mut c = Conn::open(s.sasl_plaintext);
    let v: ApiVersionsResponse = c.call(&ApiVersionsRequest::default(), 0).unwrap();
    let keys: Vec<i16> = v.api_keys.iter().map(|a| a.api_key).collect();
    assert!(keys.contains(&17) && keys.contains(&36), "{keys:?}");
    assert_eq!(c.describe(), None);
    // After the handshake, only SaslAuthenticate.
    let mut c = Conn::open(s.sasl_plaintext);
    assert_eq!(c.handshake("PLAIN").error_code, 0);
    assert_eq!(c.describe(), None);
    // PLAINTEXT does not list them.
    let mut c = Conn::open(s.plaintext);
    let v: ApiVersionsResponse = c.call(&ApiVersionsRequest::default(), 0).unwrap();
    assert!(!v
        .api_keys
        .iter()
        .any(|a| a.api_key == 17 || a.api_key == 36));
    // The CLI without SASL settings against a SASL listener.
    let r = list(s.sasl_plaintext, None);
    assert_refused(&r, "the server closed the connection");
    still_serving(&s);
    assert!(
        s.log().contains("during SASL authentication"),
        "{}",
        s.log()
    );
}

#[test]
fn plaintext_on_a_tls_port_and_bad_certificates_are_refused() {
    let s = Secured::start(&["--override", "connection.failed.authentication.delay.ms=0"]);
    // A plaintext Kafka client on the SSL port.
    let mut c = Conn::open(s.ssl);
    c.send(&ApiVersionsRequest::default(), 0);
    assert!(c.closed());
    assert_refused(&list(s.ssl, None), "could not connect");
    assert_refused(&list(s.sasl_ssl, None), "could not connect");
    // TLS to the plaintext port.
    let tls_to_plain = s.ssl("tls-to-plain", Some("admin"));
    assert_refused(
        &list(s.plaintext, Some(&tls_to_plain)),
        "TLS handshake failed",
    );
    // An expired client certificate and one from an unknown CA.
    for bad in ["expired", "untrusted"] {
        let c = s.ssl(bad, Some(bad));
        let r = list(s.ssl, Some(&c));
        assert_eq!(r.code, 1, "{bad}: {r:?}");
    }
    // A server certificate the client does not trust.
    let other = s.config(
        "other-trust",
        &[
            "security.protocol=SSL".to_owned(),
            format!("ssl.truststore.location={}", s.pki.path("other-ca.pem")),
            "ssl.endpoint.identification.algorithm=".to_owned(),
        ],
    );
    assert_refused(&list(s.ssl, Some(&other)), "UnknownIssuer");
    still_serving(&s);
    let log = s.log();
    assert!(log.contains("SSL handshake failed"), "{log}");
}

#[test]
fn bad_security_settings_exit_with_a_message() {
    let pki = pki();
    let dir = temp_dir("security-bad");
    let run = |args: &[&str]| {
        let mut all = vec!["--data-dir", dir.to_str().expect("utf-8 path")];
        all.extend_from_slice(args);
        kquotad_exit(&all)
    };
    let (code, err) = run(&["--listeners", "SSL://127.0.0.1:0"]);
    assert_eq!(code, Some(2));
    assert!(
        err.contains("a TLS listener needs ssl.keystore.location"),
        "{err}"
    );
    let (code, err) = run(&["--listeners", "SASL_PLAINTEXT://127.0.0.1:0"]);
    assert_eq!(code, Some(2));
    assert!(
        err.contains("a SASL listener needs sasl.credentials.file"),
        "{err}"
    );
    let (code, err) = run(&[
        "--listeners",
        "SASL_PLAINTEXT://127.0.0.1:0",
        "--sasl-credentials-file",
        &pki.path("ca.pem"),
    ]);
    assert_eq!(code, Some(2));
    assert!(err.contains("not a credentials file"), "{err}");
    let (code, err) = run(&["--sasl-enabled-mechanisms", "GSSAPI"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("unsupported SASL mechanism 'GSSAPI'"), "{err}");
    let (code, err) = run(&["--super-users", "alice"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("write Type:name"), "{err}");
    let (code, err) = run(&["--override", "ssl.client.auth=always"]);
    assert_eq!(code, Some(2));
    assert!(
        err.contains("expected required, requested or none"),
        "{err}"
    );
    let (code, err) = run(&[
        "--listeners",
        "INTERNAL://127.0.0.1:0,EXTERNAL://127.0.0.1:0",
        "--listener-security-protocol-map",
        "INTERNAL:PLAINTEXT,EXTERNAL:SSL",
        "--override",
        &format!("ssl.keystore.location={}", pki.path("ca.pem")),
    ]);
    assert_eq!(code, Some(2));
    assert!(err.contains("no usable PEM private key"), "{err}");
    // scram-credential refuses an empty password and a bad mechanism.
    let (code, err) = kquotad_exit(&[
        "scram-credential",
        "--user",
        "a",
        "--mechanism",
        "SCRAM-SHA-1",
    ]);
    assert_eq!(code, Some(2));
    assert!(
        err.contains("expected SCRAM-SHA-256 or SCRAM-SHA-512"),
        "{err}"
    );
    let (code, err) = kquotad_exit(&["scram-credential", "--user", "a"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("no password on stdin"), "{err}");
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
fn required_client_certificates_refuse_clients_without_one() {
    let s = Secured::start(&["--override", "ssl.client.auth=required"]);
    let no_cert = s.ssl("no-cert", None);
    assert_refused(&list(s.ssl, Some(&no_cert)), "could not connect");
    let admin = s.ssl("admin-cert", Some("admin"));
    assert_ok(&alter(s.ssl, Some(&admin), "by-cert", 7));
    let r = list(s.ssl, Some(&admin));
    assert_ok(&r);
    assert_eq!(
        r.stdout,
        "{user=by-cert}\nproducer_byte_rate broker_bps 7\n"
    );
    // SASL_SSL shares the TLS settings: a SASL client must present a certificate too.
    let sasl = s.sasl("sasl", "SASL_SSL", "SCRAM-SHA-256", "admin", ADMIN_PASSWORD);
    assert_refused(&list(s.sasl_ssl, Some(&sasl)), "could not connect");
    assert!(s.log().contains("SSL handshake failed"), "{}", s.log());
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

/// Before a SASL client has authenticated, a frame larger than `sasl.server.max.receive.size`
/// (512 KiB, as Kafka) closes the connection at its size prefix: no unauthenticated peer makes the
/// server hold `socket.request.max.bytes`. PLAINTEXT, with no authentication step, is unaffected.
#[test]
fn unauthenticated_sasl_clients_cannot_send_large_frames() {
    let s = Secured::start(&[]);
    let mut c = TcpStream::connect(s.sasl_plaintext).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.write_all(&600_000u32.to_be_bytes()).unwrap();
    assert!(
        closed_by_server(&mut c),
        "the connection is closed at once, without an answer"
    );
    assert!(
        s.log()
            .contains("Invalid receive (size = 600000 larger than 524288)"),
        "{}",
        s.log()
    );
    // The same size prefix on PLAINTEXT is read (the server waits for the body).
    let mut c = TcpStream::connect(s.plaintext).unwrap();
    c.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    c.write_all(&600_000u32.to_be_bytes()).unwrap();
    let err = c
        .read(&mut [0u8; 1])
        .expect_err("still open, waiting for the body");
    assert!(
        matches!(
            err.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ),
        "{err}"
    );
    still_serving(&s);
}

/// A TLS client that stops reading its answers holds neither its connection nor the server's
/// shutdown: a TLS close waits to send what is buffered, so it must not wait on this peer.
#[test]
fn sigterm_is_not_held_up_by_a_tls_peer_that_stops_reading() {
    let s = Secured::start(&[]);
    // The admin certificate's principal is a super user: it may alter and describe.
    let props = format!(
        "security.protocol=SSL\nssl.truststore.type=PEM\nssl.truststore.location={}\n\
         ssl.keystore.type=PEM\nssl.keystore.location={}\nssl.endpoint.identification.algorithm=\n",
        s.pki.path("ca.pem"),
        s.pki.path("admin.pem"),
    );
    let (config, _) = kquota_cli::ClientConfig::from_properties(&props).unwrap();
    let tls = config.tls.expect("a TLS configuration");
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let connection = rustls::ClientConnection::new(tls, name).unwrap();
    let tcp = TcpStream::connect(s.ssl).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut stream = rustls::StreamOwned::new(connection, tcp);
    let frame = |request: &dyn Fn(&mut BytesMut), key: i16, correlation: i32| {
        let mut buf = BytesMut::new();
        RequestHeader::default()
            .with_request_api_key(key)
            .with_request_api_version(1)
            .with_correlation_id(correlation)
            .encode(&mut buf, 2)
            .unwrap();
        request(&mut buf);
        let mut out = (buf.len() as u32).to_be_bytes().to_vec();
        out.extend_from_slice(&buf);
        out
    };
    // 2,000 users, so that describing them all answers about 100 KB.
    let entries: Vec<EntryData> = (0..2000)
        .map(|i| {
            EntryData::default()
                .with_entity(vec![EntityData::default()
                    .with_entity_type(StrBytes::from_static_str("user"))
                    .with_entity_name(Some(StrBytes::from_string(format!(
                        "user-{i:04}"
                    ))))])
                .with_ops(vec![OpData::default()
                    .with_key(StrBytes::from_static_str("producer_byte_rate"))
                    .with_value(1.0)])
        })
        .collect();
    let alter = AlterClientQuotasRequest::default().with_entries(entries);
    stream
        .write_all(&frame(
            &|b| alter.encode(b, 1).unwrap(),
            AlterClientQuotasRequest::KEY,
            1,
        ))
        .unwrap();
    let mut len = [0u8; 4];
    stream
        .read_exact(&mut len)
        .expect("the alteration is answered");
    let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
    stream.read_exact(&mut body).unwrap();

    // 400 describes of every user: about 40 MB of answers, never read, far more than the socket
    // buffers hold, so the server's writes block.
    let describe =
        DescribeClientQuotasRequest::default().with_components(vec![ComponentData::default()
            .with_entity_type(StrBytes::from_static_str("user"))
            .with_match_type(2)
            .with_match(None)]);
    let mut pipelined = Vec::new();
    for i in 0..400 {
        pipelined.extend(frame(
            &|b| describe.encode(b, 1).unwrap(),
            DescribeClientQuotasRequest::KEY,
            2 + i,
        ));
    }
    stream.write_all(&pipelined).unwrap();
    stream.flush().unwrap();
    std::thread::sleep(Duration::from_secs(2));

    let mut server = s.server;
    let status = server.terminate(Duration::from_secs(30));
    assert!(status.success(), "exit status {status}");
    drop(stream);
}
