//! What the security tests share: a test PKI (made with rcgen), SCRAM credentials made with
//! `kquotad scram-credential`, a server with all four listener types, the CLI tools run against
//! it, and a minimal blocking Kafka connection for driving SASL by hand.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::describe_client_quotas_request::ComponentData;
use kafka_protocol::messages::{
    DescribeClientQuotasRequest, ResponseHeader, SaslAuthenticateRequest, SaslAuthenticateResponse,
    SaslHandshakeRequest, SaslHandshakeResponse,
};
use kafka_protocol::protocol::{Decodable, HeaderVersion, Request, StrBytes};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, IsCa, KeyPair, SanType,
};

use kquota_testkit::{temp_dir, Kquotad, TempDir};

pub(super) const ADMIN_PASSWORD: &str = "admin-secret";
pub(super) const ALICE_PASSWORD: &str = "alice pa$$word";

/// A CA and the certificates signed by it, written as PEM files in a directory.
pub(super) struct Pki {
    pub(super) dir: TempDir,
}

impl Pki {
    pub(super) fn path(&self, name: &str) -> String {
        self.dir.join(name).to_str().unwrap().to_owned()
    }
}

pub(super) fn dn(parts: &[(DnType, &str)]) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    for (t, v) in parts {
        dn.push(t.clone(), *v);
    }
    dn
}

pub(super) fn ca(name: &str) -> (rcgen::Certificate, KeyPair) {
    let mut params = CertificateParams::default();
    params.distinguished_name = dn(&[(DnType::CommonName, name)]);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let key = KeyPair::generate().unwrap();
    (params.self_signed(&key).unwrap(), key)
}

/// Writes `<name>.pem` holding the certificate and its key (Kafka's PEM keystore layout).
pub(super) fn leaf(
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

pub(super) fn pki() -> Pki {
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
pub(super) fn credentials(dir: &Path) -> PathBuf {
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

/// Adds `user` to the credentials file with the operator's tool.
pub(super) fn add_user(file: &Path, user: &str, password: &str) {
    let mut child = Command::new(kquota_testkit::bin("kquotad"))
        .args(["scram-credential", "--user", user, "--file"])
        .arg(file)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    writeln!(child.stdin.take().unwrap(), "{password}").unwrap();
    assert!(child.wait().unwrap().success());
}

/// A server with all four listeners.
pub(super) struct Secured {
    pub(super) server: Kquotad,
    pub(super) dir: TempDir,
    pub(super) pki: Pki,
    pub(super) plaintext: SocketAddr,
    pub(super) ssl: SocketAddr,
    pub(super) sasl_plaintext: SocketAddr,
    pub(super) sasl_ssl: SocketAddr,
}

impl Secured {
    pub(super) fn start(extra: &[&str]) -> Secured {
        let pki = pki();
        let dir = temp_dir("security");
        let creds = credentials(&pki.dir);
        Secured::start_in(dir, pki, &creds, extra)
    }

    pub(super) fn start_in(dir: TempDir, pki: Pki, creds: &Path, extra: &[&str]) -> Secured {
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
    pub(super) fn config(&self, name: &str, lines: &[String]) -> String {
        let path = self.dir.with_extension(format!("{name}.properties"));
        std::fs::write(&path, lines.join("\n") + "\n").unwrap();
        path.to_str().unwrap().to_owned()
    }

    pub(super) fn sasl(
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

    pub(super) fn ssl(&self, name: &str, keystore: Option<&str>) -> String {
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

    pub(super) fn log(&self) -> String {
        Kquotad::log(&self.dir)
    }
}

#[derive(Debug)]
pub(super) struct Run {
    pub(super) code: i32,
    pub(super) stdout: String,
    pub(super) stderr: String,
}

pub(super) fn cli(
    bin: std::path::PathBuf,
    bootstrap: &str,
    config: Option<&str>,
    args: &[&str],
) -> Run {
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

pub(super) fn quotas(addr: SocketAddr, config: Option<&str>, args: &[&str]) -> Run {
    cli(
        kquota_testkit::bin("kafka-quotas"),
        &addr.to_string(),
        config,
        args,
    )
}

pub(super) fn list(addr: SocketAddr, config: Option<&str>) -> Run {
    quotas(addr, config, &["--list"])
}

pub(super) fn alter(addr: SocketAddr, config: Option<&str>, user: &str, rate: u32) -> Run {
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

pub(super) fn assert_ok(r: &Run) {
    assert_eq!(r.code, 0, "{r:?}");
}

pub(super) fn assert_refused(r: &Run, what: &str) {
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains(what), "expected '{what}' in {r:?}");
}

/// A minimal blocking Kafka connection for driving SASL by hand.
pub(super) struct Conn {
    pub(super) stream: TcpStream,
    pub(super) correlation: i32,
}

impl Conn {
    pub(super) fn open(addr: SocketAddr) -> Conn {
        let stream = TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        Conn {
            stream,
            correlation: 0,
        }
    }

    pub(super) fn send<R: Request>(&mut self, req: &R, version: i16) {
        self.correlation += 1;
        let frame = crate::frames::request(self.correlation, "security-test", req, version);
        self.stream.write_all(&frame).unwrap();
    }

    /// The response, or `None` if the server closed the connection.
    pub(super) fn recv<R: Request>(&mut self, version: i16) -> Option<R::Response> {
        let mut body = crate::frames::response(&mut self.stream)?;
        let header =
            ResponseHeader::decode(&mut body, R::Response::header_version(version)).unwrap();
        assert_eq!(header.correlation_id, self.correlation);
        Some(R::Response::decode(&mut body, version).unwrap())
    }

    pub(super) fn call<R: Request>(&mut self, req: &R, version: i16) -> Option<R::Response> {
        self.send(req, version);
        self.recv::<R>(version)
    }

    /// Whether the server closes the connection within the read timeout (bytes it sends first,
    /// such as a TLS alert, are skipped).
    pub(super) fn closed(&mut self) -> bool {
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

    pub(super) fn handshake(&mut self, mechanism: &'static str) -> SaslHandshakeResponse {
        self.call(
            &SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str(mechanism)),
            1,
        )
        .expect("handshake answered")
    }

    pub(super) fn authenticate(&mut self, token: Vec<u8>) -> Option<SaslAuthenticateResponse> {
        self.call(
            &SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(token)),
            2,
        )
    }

    pub(super) fn describe(&mut self) -> Option<i16> {
        let req =
            DescribeClientQuotasRequest::default().with_components(vec![ComponentData::default()
                .with_entity_type(StrBytes::from_static_str("user"))
                .with_match_type(2)
                .with_match(None)]);
        self.call(&req, 1).map(|r| r.error_code)
    }
}

/// Asserts that the server still serves a good client on SASL_PLAINTEXT.
pub(super) fn still_serving(s: &Secured) {
    let admin = s.sasl(
        "still",
        "SASL_PLAINTEXT",
        "SCRAM-SHA-512",
        "admin",
        ADMIN_PASSWORD,
    );
    assert_ok(&list(s.sasl_plaintext, Some(&admin)));
}
