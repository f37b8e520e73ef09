//! TLS towards clients (the proxy's listeners) and towards the cluster, from PEM files.
//!
//! Towards clients, a connection's principal is what Kafka makes of its client certificate: the
//! subject's distinguished name in RFC 2253 form (`CN=alice,OU=eng,O=acme`), mapped by Kafka's
//! `ssl.principal.mapping.rules`, or `User:ANONYMOUS` without a certificate. Towards the cluster,
//! each broker's certificate is checked against the given CAs and against the broker's name as
//! the cluster gives it (Kafka's `ssl.endpoint.identification.algorithm=https`).
//!
//! SIGHUP reads the files again ([`kquota_host::Reload`]): connections made from then on get what
//! loaded, those open keep theirs, and files that do not load change nothing (the log says why).
//! The principal mapping rules are settings, not files, and stay as they were.
//!
//! Errors name the file by the proxy's setting and its flag
//! (`kquota.proxy.ssl.certificate.location (--tls-cert)=/etc/proxy/cert.pem: cannot read: ...`), so
//! that they read the same whether it came from a properties file or the command line.

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use kquota_host::tls::{self as host_tls, Pem};
use kquota_host::{Reload, Reloadable};
use kquota_wire::tls::{self, ClientAuth, KeyPair, TlsError};
use kquota_wire::{AuthContext, Principal, PrincipalBuilder, PrincipalError, PrincipalMapper};
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::net::TcpStream;
use tokio_rustls::{TlsAcceptor, TlsConnector};

/// TLS on the proxy's listeners.
pub struct ClientTls {
    /// Reloaded on SIGHUP; each handshake takes the current one.
    acceptor: Reloadable<TlsAcceptor>,
    client_auth: ClientAuth,
    rules: Arc<PrincipalMapper>,
}

impl fmt::Debug for ClientTls {
    // The key stays out of logs: only the settings that shape a connection's principal.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientTls")
            .field("client_auth", &self.client_auth)
            .field("principal_mapping_rules", &self.rules.rules())
            .finish_non_exhaustive()
    }
}

impl ClientTls {
    /// The listeners' certificate chain (`cert`, leaf first) and its unencrypted key (`key`), the
    /// CAs that verify client certificates (`client_ca`), Kafka's `ssl.client.auth`
    /// (`client_auth`: `"none"`, `"requested"` or `"required"` parse into it) and Kafka's
    /// `ssl.principal.mapping.rules`, parsed (`rules`; `DEFAULT` keeps the subject as it is).
    pub fn from_files(
        cert: &Path,
        key: &Path,
        client_ca: Option<&Path>,
        client_auth: ClientAuth,
        rules: Arc<PrincipalMapper>,
    ) -> Result<ClientTls, TlsConfigError> {
        let initial = client_acceptor(cert, key, client_ca, client_auth)?;
        let (cert, key, ca) = (
            cert.to_owned(),
            key.to_owned(),
            client_ca.map(Path::to_owned),
        );
        let what = format!(
            "TLS certificate {TLS_CERT}={}{}",
            cert.display(),
            ca.as_ref()
                .map(|ca| format!(" and client CAs {TLS_CLIENT_CA}={}", ca.display()))
                .unwrap_or_default()
        );
        let acceptor = Reloadable::new(what, initial, move || {
            client_acceptor(&cert, &key, ca.as_deref(), client_auth).map_err(|e| e.to_string())
        });
        Ok(ClientTls {
            acceptor,
            client_auth,
            rules,
        })
    }

    /// Runs the TLS handshake with a client. The principal is `User:<mapped subject>` when the
    /// client presented a certificate that verified, else `User:ANONYMOUS` (Kafka's SSL principal
    /// rules). A failed handshake, a subject that cannot be read, or one no mapping rule applies
    /// to is an error: the connection is refused, as Kafka refuses it.
    pub(crate) async fn accept(
        &self,
        tcp: TcpStream,
    ) -> io::Result<(tokio_rustls::server::TlsStream<TcpStream>, Principal)> {
        let peer = tcp.peer_addr().ok();
        let acceptor = self.acceptor.current();
        let stream = acceptor.accept(tcp).await?;
        // rustls has verified any certificate presented (or refused the handshake).
        let certificate = stream
            .get_ref()
            .1
            .peer_certificates()
            .and_then(|chain| chain.first());
        let principal = self.principal(peer, certificate)?;
        Ok((stream, principal))
    }

    /// The principal of a client that presented `certificate` (the leaf, verified): its subject
    /// mapped by the rules (Kafka's `DefaultKafkaPrincipalBuilder`), or `User:ANONYMOUS` without
    /// one.
    fn principal(
        &self,
        peer: Option<SocketAddr>,
        certificate: Option<&CertificateDer<'_>>,
    ) -> io::Result<Principal> {
        let context = AuthContext::Ssl {
            peer,
            peer_certificate: certificate.map(|c| c.as_ref()),
        };
        self.rules.build(&context).map_err(|e| {
            // A subject no rule maps is refused; one that cannot be read is bad data.
            let kind = match e {
                PrincipalError::Refused(_) => io::ErrorKind::PermissionDenied,
                _ => io::ErrorKind::InvalidData,
            };
            io::Error::new(kind, e)
        })
    }
}

impl Reload for ClientTls {
    fn what(&self) -> String {
        self.acceptor.what().to_owned()
    }

    fn reload(&self) -> bool {
        self.acceptor.reload()
    }
}

/// The listeners' acceptor from the files (see [`ClientTls::from_files`]).
fn client_acceptor(
    cert: &Path,
    key: &Path,
    client_ca: Option<&Path>,
    client_auth: ClientAuth,
) -> Result<TlsAcceptor, TlsConfigError> {
    let identity = key_pair(TLS_CERT, cert, TLS_KEY, key)?;
    let trust = match client_ca {
        Some(path) => trust_anchors(TLS_CLIENT_CA, path)?,
        None => Vec::new(),
    };
    if client_auth != ClientAuth::None && trust.is_empty() {
        return Err(TlsConfigError::NoClientCa);
    }
    host_tls::acceptor(&identity, &trust, client_auth).map_err(|e| {
        TlsConfigError::config(
            "kquota.proxy.ssl.certificate.location and kquota.proxy.ssl.key.location \
                 (--tls-cert and --tls-key)",
            e,
        )
    })
}

/// TLS towards the cluster.
pub struct UpstreamTls {
    /// Reloaded on SIGHUP; each broker connection takes the current one.
    connector: Reloadable<TlsConnector>,
}

impl fmt::Debug for UpstreamTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UpstreamTls").finish_non_exhaustive()
    }
}

impl UpstreamTls {
    /// The CAs the brokers' certificates are checked against (`ca`), and a client certificate
    /// chain and its unencrypted key to present to them (`client_cert`: the chain's file, then
    /// the key's), for a cluster that asks for one.
    pub fn from_files(
        ca: &Path,
        client_cert: Option<(&Path, &Path)>,
    ) -> Result<UpstreamTls, TlsConfigError> {
        let initial = upstream_connector(ca, client_cert)?;
        let ca: PathBuf = ca.to_owned();
        let client: Option<(PathBuf, PathBuf)> =
            client_cert.map(|(c, k)| (c.to_owned(), k.to_owned()));
        let what = format!(
            "upstream TLS CAs {UPSTREAM_CA}={}{}",
            ca.display(),
            client
                .as_ref()
                .map(|(c, _)| format!(" and client certificate {UPSTREAM_CERT}={}", c.display()))
                .unwrap_or_default()
        );
        let connector = Reloadable::new(what, initial, move || {
            let client = client.as_ref().map(|(c, k)| (c.as_path(), k.as_path()));
            upstream_connector(&ca, client).map_err(|e| e.to_string())
        });
        Ok(UpstreamTls { connector })
    }

    /// Runs the TLS handshake with a broker. `server_name`: the broker's host as the cluster
    /// names it (a DNS name or an IP literal, IPv6 with or without brackets), checked against
    /// its certificate.
    pub(crate) async fn connect(
        &self,
        tcp: TcpStream,
        server_name: &str,
    ) -> io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
        let host = server_name
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(server_name);
        let name = ServerName::try_from(host.to_owned()).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("'{server_name}' cannot be checked against a certificate: {e}"),
            )
        })?;
        self.connector.current().connect(name, tcp).await
    }
}

impl Reload for UpstreamTls {
    fn what(&self) -> String {
        self.connector.what().to_owned()
    }

    fn reload(&self) -> bool {
        self.connector.reload()
    }
}

/// The connector towards the cluster from the files (see [`UpstreamTls::from_files`]).
fn upstream_connector(
    ca: &Path,
    client_cert: Option<(&Path, &Path)>,
) -> Result<TlsConnector, TlsConfigError> {
    let trust = trust_anchors(UPSTREAM_CA, ca)?;
    let identity = client_cert
        .map(|(cert, key)| key_pair(UPSTREAM_CERT, cert, UPSTREAM_KEY, key))
        .transpose()?;
    let config = tls::client_config(&trust, identity.as_ref(), true, rustls::DEFAULT_VERSIONS)
        .map_err(|e| {
            TlsConfigError::config(
                "kquota.proxy.upstream.ssl.certificate.location and \
                 kquota.proxy.upstream.ssl.key.location (--upstream-cert and --upstream-key)",
                e,
            )
        })?;
    Ok(TlsConnector::from(config))
}

/// Why TLS settings cannot be used.
#[derive(Debug)]
#[non_exhaustive]
pub enum TlsConfigError {
    /// A PEM file that cannot be read, or that holds no usable certificate, key or CA; the
    /// message names the file and its flag.
    File(TlsError),
    /// Client certificates are requested or required, but no CA verifies them.
    NoClientCa,
    /// A certificate and a key that do not belong together.
    KeyMismatch {
        /// The two flags.
        what: &'static str,
        /// Why.
        source: rustls::Error,
    },
    /// rustls refuses the configuration for another reason.
    Config(TlsError),
}

impl TlsConfigError {
    fn config(what: &'static str, e: TlsError) -> TlsConfigError {
        match e {
            TlsError::KeyMismatch { source, .. } => TlsConfigError::KeyMismatch { what, source },
            other => TlsConfigError::Config(other),
        }
    }
}

impl fmt::Display for TlsConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TlsConfigError::File(e) | TlsConfigError::Config(e) => e.fmt(f),
            TlsConfigError::NoClientCa => f.write_str(
                "ssl.client.auth (--tls-client-auth) requested or required needs ssl.truststore.location (--tls-client-ca), the CAs that verify client certificates",
            ),
            TlsConfigError::KeyMismatch { what, source } => {
                write!(f, "{what}: the certificate and the key do not belong together: {source}")
            }
        }
    }
}

impl std::error::Error for TlsConfigError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            TlsConfigError::File(e) | TlsConfigError::Config(e) => Some(e),
            TlsConfigError::KeyMismatch { source, .. } => Some(source),
            TlsConfigError::NoClientCa => None,
        }
    }
}

// How errors name each file: by its setting and the binary's flag for it.
const TLS_CERT: &str = "kquota.proxy.ssl.certificate.location (--tls-cert)";
const TLS_KEY: &str = "kquota.proxy.ssl.key.location (--tls-key)";
const TLS_CLIENT_CA: &str = "ssl.truststore.location (--tls-client-ca)";
const UPSTREAM_CA: &str = "kquota.proxy.upstream.ssl.truststore.location (--upstream-ca)";
const UPSTREAM_CERT: &str = "kquota.proxy.upstream.ssl.certificate.location (--upstream-cert)";
const UPSTREAM_KEY: &str = "kquota.proxy.upstream.ssl.key.location (--upstream-key)";

/// A certificate chain and its key, each from its file (which may be the same file).
fn key_pair(
    cert_flag: &str,
    cert: &Path,
    key_flag: &str,
    key: &Path,
) -> Result<KeyPair, TlsConfigError> {
    host_tls::key_pair(
        Pem::File {
            setting: cert_flag,
            path: cert,
        },
        Pem::File {
            setting: key_flag,
            path: key,
        },
    )
    .map_err(TlsConfigError::File)
}

/// The CAs in a file, each checked as a trust anchor so that a bad one is named by its file.
fn trust_anchors(flag: &str, path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsConfigError> {
    host_tls::trust_anchors(&[Pem::File {
        setting: flag,
        path,
    }])
    .map_err(TlsConfigError::File)
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use rcgen::{BasicConstraints, CertificateParams, DistinguishedName, DnType, IsCa, KeyPair};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;

    /// A directory of PEM files for one test, removed when dropped.
    struct Dir(PathBuf);

    impl Dir {
        fn new() -> Dir {
            static NEXT: AtomicUsize = AtomicUsize::new(0);
            let path = std::env::temp_dir().join(format!(
                "kquota-proxy-tls-{}-{}",
                std::process::id(),
                NEXT.fetch_add(1, Ordering::Relaxed)
            ));
            std::fs::create_dir_all(&path).unwrap();
            Dir(path)
        }

        fn write(&self, name: &str, text: &str) -> PathBuf {
            let path = self.0.join(name);
            std::fs::write(&path, text).unwrap();
            path
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// A test CA's certificate and key.
    struct Ca {
        cert: rcgen::Certificate,
        key: KeyPair,
    }

    fn ca(name: &str) -> Ca {
        let mut params = CertificateParams::default();
        params.distinguished_name = DistinguishedName::new();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let key = KeyPair::generate().unwrap();
        Ca {
            cert: params.self_signed(&key).unwrap(),
            key,
        }
    }

    /// A certificate signed by `ca`, as (chain PEM, key PEM).
    fn leaf(ca: &Ca, names: &[&str], subject: &[(DnType, &str)]) -> (String, String) {
        let mut params =
            CertificateParams::new(names.iter().map(|n| (*n).to_owned()).collect::<Vec<_>>())
                .unwrap();
        params.distinguished_name = DistinguishedName::new();
        for (t, v) in subject {
            params.distinguished_name.push(t.clone(), *v);
        }
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &ca.cert, &ca.key).unwrap();
        (cert.pem(), key.serialize_pem())
    }

    /// A CA, a server certificate for 127.0.0.1 and localhost, and a client certificate for
    /// `CN=alice,OU=eng,O=acme`, written to files.
    struct Pki {
        dir: Dir,
        ca: PathBuf,
        server_cert: PathBuf,
        server_key: PathBuf,
        client_cert: PathBuf,
        client_key: PathBuf,
        other_ca: PathBuf,
    }

    fn pki() -> Pki {
        let dir = Dir::new();
        let authority = ca("kquota test CA");
        let (server_cert, server_key) = leaf(
            &authority,
            &["localhost", "127.0.0.1"],
            &[(DnType::CommonName, "kquota-proxy")],
        );
        let (client_cert, client_key) = leaf(
            &authority,
            &[],
            &[
                (DnType::OrganizationName, "acme"),
                (DnType::OrganizationalUnitName, "eng"),
                (DnType::CommonName, "alice"),
            ],
        );
        Pki {
            ca: dir.write("ca.pem", &authority.cert.pem()),
            other_ca: dir.write("other-ca.pem", &ca("someone else").cert.pem()),
            server_cert: dir.write("server.pem", &server_cert),
            server_key: dir.write("server.key", &server_key),
            client_cert: dir.write("client.pem", &client_cert),
            client_key: dir.write("client.key", &client_key),
            dir,
        }
    }

    impl Pki {
        fn server(&self, auth: ClientAuth, rules: &str) -> ClientTls {
            ClientTls::from_files(
                &self.server_cert,
                &self.server_key,
                Some(&self.ca),
                auth,
                Arc::new(PrincipalMapper::parse(rules).unwrap()),
            )
            .unwrap()
        }

        fn client(&self, ca: &Path, with_cert: bool) -> UpstreamTls {
            let cert = with_cert.then_some((self.client_cert.as_path(), self.client_key.as_path()));
            UpstreamTls::from_files(ca, cert).unwrap()
        }
    }

    /// Accepts one connection with `server` and connects to it with `client` as `name`; the
    /// server's outcome, and whether the client's side carried bytes both ways.
    async fn handshake(
        server: impl Into<Arc<ClientTls>>,
        client: impl Into<Arc<UpstreamTls>>,
        name: &str,
    ) -> (io::Result<Principal>, io::Result<()>) {
        let (server, client) = (server.into(), client.into());
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let accepting = tokio::spawn(async move {
            let (tcp, _) = listener.accept().await.unwrap();
            let (mut stream, principal) = server.accept(tcp).await?;
            let mut buf = [0; 4];
            stream.read_exact(&mut buf).await?;
            stream.write_all(&buf).await?;
            stream.flush().await?;
            Ok(principal)
        });
        let tcp = TcpStream::connect(addr).await.unwrap();
        let connected = async {
            let mut stream = client.connect(tcp, name).await?;
            stream.write_all(b"ping").await?;
            stream.flush().await?;
            let mut buf = [0; 4];
            stream.read_exact(&mut buf).await?;
            assert_eq!(&buf, b"ping");
            Ok(())
        }
        .await;
        (accepting.await.unwrap(), connected)
    }

    #[tokio::test]
    async fn a_reload_serves_new_files_to_new_connections_and_a_bad_file_keeps_the_old() {
        let pki = pki();
        let server = Arc::new(pki.server(ClientAuth::None, "DEFAULT"));
        let trusting = |ca: &Path| Arc::new(UpstreamTls::from_files(ca, None).unwrap());
        let (old, new) = (trusting(&pki.ca), {
            let next = ca("the next CA");
            let (cert, key) = leaf(&next, &["localhost"], &[(DnType::CommonName, "next")]);
            let next_ca = pki.dir.write("next-ca.pem", &next.cert.pem());
            let trust = trusting(&next_ca);
            // The listener's files replaced: not served until reloaded.
            pki.dir.write("server.pem", &cert);
            pki.dir.write("server.key", &key);
            trust
        });
        let connects = |client: &Arc<UpstreamTls>| {
            let (server, client) = (Arc::clone(&server), Arc::clone(client));
            async move { handshake(server, client, "localhost").await.1.is_ok() }
        };
        assert!(connects(&old).await && !connects(&new).await);
        assert!(server.reload());
        assert!(connects(&new).await && !connects(&old).await);
        // A key that does not load: the reload fails and the certificate in use stays.
        pki.dir.write("server.key", "not a key");
        assert!(!server.reload());
        assert!(connects(&new).await);

        // Towards the cluster: the CA file read again.
        let upstream_ca = pki.dir.write(
            "upstream-ca.pem",
            &std::fs::read_to_string(&pki.ca).unwrap(),
        );
        let upstream = trusting(&upstream_ca);
        assert!(!connects(&upstream).await);
        std::fs::copy(pki.dir.0.join("next-ca.pem"), &upstream_ca).unwrap();
        assert!(upstream.reload());
        assert!(connects(&upstream).await);
        std::fs::write(&upstream_ca, "garbage").unwrap();
        assert!(!upstream.reload());
        assert!(connects(&upstream).await);
    }

    #[tokio::test]
    async fn client_certificate_gives_the_mapped_principal() {
        let pki = pki();
        for (rules, name) in [
            ("DEFAULT", "CN=alice,OU=eng,O=acme"),
            ("RULE:^CN=(.*?),.*$/$1/", "alice"),
            (
                "RULE:^CN=(.*?),OU=(.*?),O=(.*?)$/$1@$3/U, DEFAULT",
                "ALICE@ACME",
            ),
            ("RULE:^CN=bob,.*$/bob/, DEFAULT", "CN=alice,OU=eng,O=acme"),
        ] {
            let (principal, client) = handshake(
                pki.server(ClientAuth::Required, rules),
                pki.client(&pki.ca, true),
                "localhost",
            )
            .await;
            client.unwrap();
            assert_eq!(principal.unwrap(), Principal::user(name), "{rules}");
        }
    }

    #[tokio::test]
    async fn without_a_certificate_the_principal_is_anonymous() {
        let pki = pki();
        for auth in [ClientAuth::None, ClientAuth::Requested] {
            // The rule would refuse any certificate's name: ANONYMOUS is not mapped.
            let (principal, client) = handshake(
                pki.server(auth, "RULE:^nothing$/x/"),
                pki.client(&pki.ca, false),
                "127.0.0.1",
            )
            .await;
            client.unwrap();
            assert!(principal.unwrap().is_anonymous(), "{auth:?}");
        }
        // With ssl.client.auth=none a certificate is not even asked for.
        let (principal, _) = handshake(
            pki.server(ClientAuth::None, "DEFAULT"),
            pki.client(&pki.ca, true),
            "localhost",
        )
        .await;
        assert!(principal.unwrap().is_anonymous());
    }

    #[tokio::test]
    async fn required_auth_without_a_certificate_fails() {
        let pki = pki();
        let (principal, client) = handshake(
            pki.server(ClientAuth::Required, "DEFAULT"),
            pki.client(&pki.ca, false),
            "localhost",
        )
        .await;
        assert!(principal.is_err());
        assert!(client.is_err());
    }

    #[tokio::test]
    async fn a_name_no_rule_maps_is_refused() {
        let pki = pki();
        let (principal, _) = handshake(
            pki.server(ClientAuth::Required, "RULE:^CN=bob,.*$/bob/"),
            pki.client(&pki.ca, true),
            "localhost",
        )
        .await;
        let e = principal.unwrap_err();
        assert!(e.to_string().contains("CN=alice,OU=eng,O=acme"), "{e}");
    }

    #[tokio::test]
    async fn wrong_ca_or_wrong_name_fails() {
        let pki = pki();
        // The client does not trust the server's CA.
        let (server, client) = handshake(
            pki.server(ClientAuth::None, "DEFAULT"),
            pki.client(&pki.other_ca, false),
            "localhost",
        )
        .await;
        assert!(server.is_err());
        assert!(client.is_err());
        // The server does not trust the client's CA.
        let server_tls = ClientTls::from_files(
            &pki.server_cert,
            &pki.server_key,
            Some(&pki.other_ca),
            ClientAuth::Required,
            Arc::new(PrincipalMapper::parse("DEFAULT").unwrap()),
        )
        .unwrap();
        let (server, _) = handshake(server_tls, pki.client(&pki.ca, true), "localhost").await;
        assert!(server.is_err());
        // A name the server's certificate does not carry.
        let (_, client) = handshake(
            pki.server(ClientAuth::None, "DEFAULT"),
            pki.client(&pki.ca, false),
            "kafka-1.example.com",
        )
        .await;
        let e = client.unwrap_err();
        assert!(e.to_string().to_lowercase().contains("certificate"), "{e}");
    }

    #[tokio::test]
    async fn server_names_are_checked_as_given() {
        let pki = pki();
        let tcp = || async {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            TcpStream::connect(l.local_addr().unwrap()).await.unwrap()
        };
        let client = pki.client(&pki.ca, false);
        let e = client
            .connect(tcp().await, "not a name!")
            .await
            .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        assert!(e.to_string().contains("not a name!"), "{e}");
    }

    #[test]
    fn bad_files_name_the_file() {
        let pki = pki();
        let missing = pki.dir.0.join("missing.pem");
        let junk = pki.dir.write("junk.pem", "not PEM at all");
        let encrypted = pki.dir.write(
            "encrypted.key",
            "-----BEGIN ENCRYPTED PRIVATE KEY-----\nAAAA\n-----END ENCRYPTED PRIVATE KEY-----\n",
        );
        let server = |cert: &Path, key: &Path, ca: Option<&Path>, auth| {
            ClientTls::from_files(
                cert,
                key,
                ca,
                auth,
                Arc::new(PrincipalMapper::parse("DEFAULT").unwrap()),
            )
            .unwrap_err()
            .to_string()
        };
        let e = server(&missing, &pki.server_key, None, ClientAuth::None);
        assert!(
            e.starts_with(&format!(
                "kquota.proxy.ssl.certificate.location (--tls-cert)={}: cannot read",
                missing.display()
            )),
            "{e}"
        );
        let e = server(&junk, &pki.server_key, None, ClientAuth::None);
        assert!(
            e.starts_with(&format!(
                "kquota.proxy.ssl.certificate.location (--tls-cert)={}: no PEM certificate",
                junk.display()
            )),
            "{e}"
        );
        let e = server(&pki.server_cert, &junk, None, ClientAuth::None);
        assert!(
            e.starts_with(&format!(
                "kquota.proxy.ssl.key.location (--tls-key)={}: no usable",
                junk.display()
            )),
            "{e}"
        );
        let e = server(&pki.server_cert, &encrypted, None, ClientAuth::None);
        assert!(
            e.contains("encrypted private keys are not supported"),
            "{e}"
        );
        let e = server(
            &pki.server_cert,
            &pki.server_key,
            Some(&junk),
            ClientAuth::Required,
        );
        assert!(
            e.starts_with(&format!(
                "ssl.truststore.location (--tls-client-ca)={}",
                junk.display()
            )),
            "{e}"
        );
        let e = server(
            &pki.server_cert,
            &pki.server_key,
            None,
            ClientAuth::Requested,
        );
        assert!(e.contains("--tls-client-ca"), "{e}");
        // A key that is not the certificate's.
        let e = server(&pki.server_cert, &pki.client_key, None, ClientAuth::None);
        assert!(e.contains("do not belong together"), "{e}");

        let e = UpstreamTls::from_files(&missing, None)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with(&format!(
                "kquota.proxy.upstream.ssl.truststore.location (--upstream-ca)={}: cannot read",
                missing.display()
            )),
            "{e}"
        );
        let e = UpstreamTls::from_files(&pki.ca, Some((pki.client_cert.as_path(), junk.as_path())))
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with(&format!(
                "kquota.proxy.upstream.ssl.key.location (--upstream-key)={}",
                junk.display()
            )),
            "{e}"
        );
        // A certificate and key in one file serve as both.
        let both = pki.dir.write(
            "both.pem",
            &format!(
                "{}{}",
                std::fs::read_to_string(&pki.client_cert).unwrap(),
                std::fs::read_to_string(&pki.client_key).unwrap()
            ),
        );
        UpstreamTls::from_files(&pki.ca, Some((both.as_path(), both.as_path()))).unwrap();
    }

    #[test]
    fn debug_shows_no_key() {
        let pki = pki();
        let tls = pki.server(ClientAuth::Requested, "DEFAULT");
        let shown = format!("{tls:?}");
        assert!(
            shown.contains("Requested") && shown.contains("DEFAULT"),
            "{shown}"
        );
        assert!(!shown.contains("PRIVATE"), "{shown}");
    }
}
