//! `kquotad`'s server: the wire handler over TCP and TLS, backed by the durable store.
//!
//! Listeners are configured as Kafka's (`listeners=PLAINTEXT://127.0.0.1:9092,SASL_SSL://127.0.0.1:9093`,
//! with `listener.security.protocol.map` for custom names); each speaks PLAINTEXT, SSL,
//! SASL_PLAINTEXT or SASL_SSL (see [`kquota_wire::SecurityProtocol`]). One tokio task per connection reads
//! size-prefixed frames, answers them strictly in order (Kafka's pipelining guarantee), and closes
//! the connection where Kafka would. Limits: the request frame size (`socket.request.max.bytes`,
//! 100 MiB by default; `sasl.server.max.receive.size`, 512 KiB, before a SASL client has
//! authenticated), the number of open connections over all listeners (`max.connections`) and from
//! one address (`max.connections.per.ip`, unlimited by default), and
//! the idle time between requests (`connections.max.idle.ms`, 10 minutes). A failed
//! authentication is logged with the peer's address and its connection closed after
//! `connection.failed.authentication.delay.ms` (100 ms), in that connection's task only. On SIGINT
//! or SIGTERM the server stops accepting and closes every connection between requests. A request
//! already being handled is finished and answered; a connection that is still sending a request,
//! or that does not read its answer within [`SHUTDOWN_GRACE`], is closed without one (nothing of
//! it was applied, or it was applied and only the answer is lost), so no peer can hold the server
//! up.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};
use tokio_rustls::TlsAcceptor;
use tracing::{debug, info, warn};

use kquota::{Engine, SubQuotaPolicy};
use kquota_store::Store;
use kquota_wire::tls::{self, ClientAuth, KeyPair};
use kquota_wire::{
    parse_super_users, request_size, AuthContext, Authorizer, Credentials, Handler, Outcome,
    Principal, SaslConfig, SaslMechanism, ScramMechanism, SecurityProtocol, ServerInfo, Session,
    DEFAULT_MAX_REQUEST_BYTES,
};

/// One listener: its name, protocol and address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListenerConfig {
    /// The name (`SASL_SSL`, or a custom name from `listener.security.protocol.map`).
    pub name: String,
    /// The security protocol.
    pub protocol: SecurityProtocol,
    /// Where to listen (port 0 for any free port).
    pub addr: SocketAddr,
}

/// TLS settings shared by the SSL and SASL_SSL listeners, named as Kafka's.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SslSettings {
    /// `ssl.keystore.location`: a PEM file with the certificate chain and the private key.
    pub keystore_location: Option<String>,
    /// `ssl.keystore.certificate.chain`: the PEM certificate chain, inline.
    pub keystore_certificate_chain: Option<String>,
    /// `ssl.keystore.key`: the PEM private key, inline.
    pub keystore_key: Option<String>,
    /// `ssl.truststore.location`: a PEM file of trusted CA certificates (client certificates).
    pub truststore_location: Option<String>,
    /// `ssl.truststore.certificates`: the trusted PEM certificates, inline.
    pub truststore_certificates: Option<String>,
    /// `ssl.client.auth`.
    pub client_auth: ClientAuth,
}

/// Everything `kquotad` is configured with.
#[derive(Clone, Debug, PartialEq)]
pub struct ServerConfig {
    /// Where to listen, in Kafka's syntax (`listeners=PLAINTEXT://127.0.0.1:9092,SSL://:9093`);
    /// see [`ServerConfig::listener_configs`].
    pub listeners: String,
    /// `listener.security.protocol.map` (`NAME:PROTOCOL,...`); a listener named after a protocol
    /// needs no entry.
    pub listener_protocol_map: Option<String>,
    /// What clients are told to connect to, per listener name (`advertised.listeners`); a listener
    /// not named is advertised at its bound address.
    pub advertised: Vec<(String, String, u16)>,
    /// The data directory (`kquota.data.dir`).
    pub data_dir: PathBuf,
    /// The sub-quota policy (`kquota.sub.quota.policy`: `kip55` or `kafka`).
    pub policy: SubQuotaPolicy,
    /// The live broker count `bps` quotas divide by (`kquota.broker.count`).
    pub broker_count: u32,
    /// Producer capacity for `shares` quotas, bytes/s (`kquota.producer.capacity.bytes.per.sec`).
    pub producer_capacity: Option<f64>,
    /// Consumer capacity for `shares` quotas, bytes/s (`kquota.consumer.capacity.bytes.per.sec`).
    pub consumer_capacity: Option<f64>,
    /// Largest request frame (`socket.request.max.bytes`).
    pub max_request_bytes: usize,
    /// Largest request frame on a SASL listener before the client has authenticated
    /// (`sasl.server.max.receive.size`, 512 KiB as in Kafka): unauthenticated peers cannot make the
    /// server hold `socket.request.max.bytes` each.
    pub sasl_max_receive_bytes: usize,
    /// Most connections open at once (`max.connections`).
    pub max_connections: usize,
    /// Most connections open at once from one client address (`max.connections.per.ip`;
    /// unlimited by default, as in Kafka).
    pub max_connections_per_ip: usize,
    /// Idle time after which a connection is closed (`connections.max.idle.ms`).
    pub idle_timeout: Duration,
    /// This node's id (`node.id`).
    pub node_id: i32,
    /// The cluster id reported to clients (`cluster.id`).
    pub cluster_id: String,
    /// The principals that may alter quotas (`super.users=User:alice;User:bob`).
    pub super_users: Vec<Principal>,
    /// Whether `User:ANONYMOUS` may describe quotas (`kquota.describe.allow.anonymous`, false).
    pub describe_allow_anonymous: bool,
    /// Whether apiKey 50 serves the seeds' draft AlterQuotas (`kquota.draft.alter.quotas.enable`,
    /// true). Kafka uses 50 for DescribeUserScramCredentials, which Kafka's own `kafka-configs`
    /// calls when describing users; with the draft off, that call fails at once instead of timing out.
    pub draft_alter_quotas: bool,
    /// `sasl.enabled.mechanisms` (default `SCRAM-SHA-256,SCRAM-SHA-512`).
    pub sasl_mechanisms: Vec<SaslMechanism>,
    /// `sasl.credentials.file`: the SCRAM credentials of SASL users.
    pub sasl_credentials_file: Option<PathBuf>,
    /// How long a connection that failed authentication waits before it is closed
    /// (`connection.failed.authentication.delay.ms`, 100).
    pub failed_authentication_delay: Duration,
    /// TLS settings (`ssl.*`).
    pub ssl: SslSettings,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listeners: "PLAINTEXT://127.0.0.1:9092".to_owned(),
            listener_protocol_map: None,
            advertised: Vec::new(),
            data_dir: PathBuf::from("kquota-data"),
            policy: SubQuotaPolicy::Kip55,
            broker_count: 1,
            producer_capacity: None,
            consumer_capacity: None,
            max_request_bytes: DEFAULT_MAX_REQUEST_BYTES,
            sasl_max_receive_bytes: 524_288,
            max_connections: 1024,
            max_connections_per_ip: usize::MAX,
            idle_timeout: Duration::from_millis(600_000),
            node_id: 1,
            cluster_id: "kquota-cluster".to_owned(),
            super_users: Vec::new(),
            describe_allow_anonymous: false,
            draft_alter_quotas: true,
            sasl_mechanisms: vec![
                SaslMechanism::Scram(ScramMechanism::Sha256),
                SaslMechanism::Scram(ScramMechanism::Sha512),
            ],
            sasl_credentials_file: None,
            failed_authentication_delay: Duration::from_millis(100),
            ssl: SslSettings::default(),
        }
    }
}

/// A configuration value that cannot be used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError(pub String);

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

/// The property keys `kquotad` understands.
pub const KNOWN_PROPERTIES: [&str; 32] = [
    "listeners",
    "listener.security.protocol.map",
    "advertised.listeners",
    "kquota.data.dir",
    "kquota.sub.quota.policy",
    "kquota.broker.count",
    "kquota.producer.capacity.bytes.per.sec",
    "kquota.consumer.capacity.bytes.per.sec",
    "socket.request.max.bytes",
    "sasl.server.max.receive.size",
    "max.connections",
    "max.connections.per.ip",
    "connections.max.idle.ms",
    "node.id",
    "cluster.id",
    "super.users",
    "kquota.describe.allow.anonymous",
    "kquota.draft.alter.quotas.enable",
    "sasl.enabled.mechanisms",
    "sasl.credentials.file",
    "connection.failed.authentication.delay.ms",
    "ssl.keystore.type",
    "ssl.keystore.location",
    "ssl.keystore.certificate.chain",
    "ssl.keystore.key",
    "ssl.key.password",
    "ssl.keystore.password",
    "ssl.truststore.type",
    "ssl.truststore.location",
    "ssl.truststore.certificates",
    "ssl.client.auth",
    "ssl.principal.mapping.rules",
];

/// Reads `kquotad`'s properties file (`--config`) as Java's `Properties.load` does (escapes,
/// continuations, comments; see [`kquota_wire::properties`]). Returns the settings in file order, one per
/// key (a later line wins, as in Java), each with the line it starts on; values are trimmed, as
/// Kafka's `ConfigDef` trims them.
///
/// Refused, naming the line: a malformed `\uXXXX` escape, an empty key (`=value`), and a key that
/// is not followed by `=` or `:`. Java reads `key value` as a setting and `key` alone as one with
/// the empty value, but in a server's file either is far more often a slip (a line of prose, a lost
/// `=`) than meant, so `kquotad` asks for `key=value`, and `key=` for an empty value.
pub fn parse_properties(text: &str) -> Result<Vec<kquota_wire::properties::Property>, ConfigError> {
    let mut out = kquota_wire::properties::parse(text).map_err(|e| ConfigError(e.to_string()))?;
    for p in &mut out {
        let (line, key) = (p.line, &p.key);
        if key.is_empty() {
            return Err(ConfigError(format!("line {line}: empty key")));
        }
        match p.separator {
            kquota_wire::properties::Separator::Sign => {}
            kquota_wire::properties::Separator::Space => {
                return Err(ConfigError(format!(
                    "line {line}: expected key=value, got '{key}' followed by a space; kquotad needs '=' or ':' between a key and its value"
                )))
            }
            kquota_wire::properties::Separator::Missing => {
                return Err(ConfigError(format!(
                    "line {line}: expected key=value, got '{key}' alone; write {key}= for an empty value"
                )))
            }
        }
        p.value = p.value.trim().to_owned();
    }
    Ok(out)
}

impl ServerConfig {
    /// Applies one `key=value` setting. Unknown keys are an error here; callers that read files warn
    /// about them instead (see [`KNOWN_PROPERTIES`]).
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), ConfigError> {
        let bad = |what: &str| ConfigError(format!("{key}={value}: {what}"));
        fn number<T: std::str::FromStr>(v: &str) -> Option<T> {
            v.trim().parse().ok()
        }
        match key {
            "listeners" => {
                split_listeners(value).map_err(|e| bad(&e))?;
                self.listeners = value.to_owned();
            }
            "listener.security.protocol.map" => {
                parse_protocol_map(value).map_err(|e| bad(&e))?;
                self.listener_protocol_map = Some(value.to_owned());
            }
            "advertised.listeners" => {
                let mut out = Vec::new();
                for (name, host, port) in split_listeners(value).map_err(|e| bad(&e))? {
                    if port == 0 {
                        return Err(bad("an advertised port must not be 0"));
                    }
                    out.push((name, host, port));
                }
                self.advertised = out;
            }
            "super.users" => self.super_users = parse_super_users(value).map_err(|e| bad(&e))?,
            "kquota.describe.allow.anonymous" => {
                self.describe_allow_anonymous = match value.trim() {
                    "true" => true,
                    "false" => false,
                    _ => return Err(bad("must be true or false")),
                }
            }
            "kquota.draft.alter.quotas.enable" => {
                self.draft_alter_quotas = match value.trim() {
                    "true" => true,
                    "false" => false,
                    _ => return Err(bad("must be true or false")),
                }
            }
            "sasl.enabled.mechanisms" => {
                let mut mechanisms = Vec::new();
                for m in value.split(',').map(str::trim).filter(|m| !m.is_empty()) {
                    let m: SaslMechanism = m.parse().map_err(|e: String| bad(&e))?;
                    if !mechanisms.contains(&m) {
                        mechanisms.push(m);
                    }
                }
                if mechanisms.is_empty() {
                    return Err(bad("name at least one mechanism"));
                }
                self.sasl_mechanisms = mechanisms;
            }
            "sasl.credentials.file" => {
                if value.is_empty() {
                    return Err(bad("must not be empty"));
                }
                self.sasl_credentials_file = Some(PathBuf::from(value));
            }
            "connection.failed.authentication.delay.ms" => {
                self.failed_authentication_delay = Duration::from_millis(
                    number(value).ok_or_else(|| bad("must be a whole number of milliseconds"))?,
                )
            }
            "ssl.keystore.type" | "ssl.truststore.type" => {
                if !value.eq_ignore_ascii_case("PEM") {
                    return Err(bad("only PEM is supported"));
                }
            }
            "ssl.keystore.location" => self.ssl.keystore_location = Some(value.to_owned()),
            "ssl.keystore.certificate.chain" => {
                self.ssl.keystore_certificate_chain = Some(value.to_owned())
            }
            "ssl.keystore.key" => self.ssl.keystore_key = Some(value.to_owned()),
            "ssl.key.password" | "ssl.keystore.password" => {
                if !value.is_empty() {
                    return Err(bad(
                        "encrypted PEM keys are not supported; leave the key unencrypted and protect the file",
                    ));
                }
            }
            "ssl.truststore.location" => self.ssl.truststore_location = Some(value.to_owned()),
            "ssl.truststore.certificates" => {
                self.ssl.truststore_certificates = Some(value.to_owned())
            }
            "ssl.client.auth" => {
                self.ssl.client_auth = value.parse().map_err(|e: String| bad(&e))?
            }
            "ssl.principal.mapping.rules" => {
                if value.trim() != "DEFAULT" {
                    return Err(bad(
                        "only DEFAULT is supported (the subject's RFC 2253 name); plug in a PrincipalBuilder for other mappings",
                    ));
                }
            }
            "kquota.data.dir" => {
                if value.is_empty() {
                    return Err(bad("must not be empty"));
                }
                self.data_dir = PathBuf::from(value);
            }
            "kquota.sub.quota.policy" => {
                self.policy = value
                    .parse()
                    .map_err(|e: kquota::ParseError| bad(&e.to_string()))?
            }
            "kquota.broker.count" => {
                self.broker_count = number(value)
                    .filter(|n| *n >= 1)
                    .ok_or_else(|| bad("must be a whole number ≥ 1"))?
            }
            "kquota.producer.capacity.bytes.per.sec" | "kquota.consumer.capacity.bytes.per.sec" => {
                let v: f64 = number(value)
                    .filter(|v: &f64| v.is_finite() && *v > 0.0)
                    .ok_or_else(|| bad("must be a number > 0"))?;
                if key.starts_with("kquota.producer") {
                    self.producer_capacity = Some(v);
                } else {
                    self.consumer_capacity = Some(v);
                }
            }
            "socket.request.max.bytes" => {
                self.max_request_bytes = number::<i32>(value)
                    .filter(|n| *n > 0)
                    .ok_or_else(|| bad("must be a whole number between 1 and 2147483647"))?
                    as usize
            }
            "sasl.server.max.receive.size" => {
                self.sasl_max_receive_bytes = number::<i32>(value)
                    .filter(|n| *n > 0)
                    .ok_or_else(|| bad("must be a whole number between 1 and 2147483647"))?
                    as usize
            }
            "max.connections" => {
                self.max_connections = number(value)
                    .filter(|n| *n >= 1)
                    .ok_or_else(|| bad("must be a whole number ≥ 1"))?
            }
            "max.connections.per.ip" => {
                self.max_connections_per_ip = number(value)
                    .filter(|n| *n >= 1)
                    .ok_or_else(|| bad("must be a whole number ≥ 1"))?
            }
            "connections.max.idle.ms" => {
                self.idle_timeout = Duration::from_millis(
                    number(value)
                        .filter(|n| *n >= 1)
                        .ok_or_else(|| bad("must be a whole number of milliseconds ≥ 1"))?,
                )
            }
            "node.id" => {
                self.node_id = number(value)
                    .filter(|n| *n >= 0)
                    .ok_or_else(|| bad("must be a whole number ≥ 0"))?
            }
            "cluster.id" => {
                if value.is_empty() {
                    return Err(bad("must not be empty"));
                }
                self.cluster_id = value.to_owned();
            }
            _ => return Err(ConfigError(format!("unknown setting '{key}'"))),
        }
        Ok(())
    }

    /// The listeners, with their protocols resolved through `listener.security.protocol.map`.
    pub fn listener_configs(&self) -> Result<Vec<ListenerConfig>, ConfigError> {
        let bad = |e: String| ConfigError(format!("listeners={}: {e}", self.listeners));
        let map = match &self.listener_protocol_map {
            Some(m) => parse_protocol_map(m)
                .map_err(|e| ConfigError(format!("listener.security.protocol.map={m}: {e}")))?,
            None => BTreeMap::new(),
        };
        let mut out: Vec<ListenerConfig> = Vec::new();
        for (name, host, port) in split_listeners(&self.listeners).map_err(bad)? {
            let protocol = match map.get(&name) {
                Some(p) => *p,
                None => name.parse().map_err(|_| {
                    bad(format!(
                        "listener '{name}' is not a security protocol; map it with listener.security.protocol.map={name}:SASL_SSL (or another protocol)"
                    ))
                })?,
            };
            let host = match host.as_str() {
                "" => "0.0.0.0".to_owned(),
                "localhost" => "127.0.0.1".to_owned(),
                h => h.to_owned(),
            };
            let ip: std::net::IpAddr = host
                .parse()
                .map_err(|_| bad(format!("'{host}' is not an IP address")))?;
            let addr = SocketAddr::new(ip, port);
            if out.iter().any(|l| l.name == name) {
                return Err(bad(format!("listener name '{name}' is used twice")));
            }
            if port != 0 && out.iter().any(|l| l.addr.port() == port) {
                return Err(bad(format!("port {port} is used twice")));
            }
            out.push(ListenerConfig {
                name,
                protocol,
                addr,
            });
        }
        Ok(out)
    }
}

/// Splits Kafka's listener list (`NAME://host:port,...`) into names, hosts and ports.
fn split_listeners(value: &str) -> Result<Vec<(String, String, u16)>, String> {
    let mut out = Vec::new();
    for item in value.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let Some((name, addr)) = item.split_once("://") else {
            return Err(format!("'{item}' is not NAME://host:port"));
        };
        let name = name.trim().to_ascii_uppercase();
        if name.is_empty() {
            return Err(format!("'{item}' has no listener name"));
        }
        let Some((host, port)) = addr.rsplit_once(':') else {
            return Err(format!("'{item}' has no port"));
        };
        let port: u16 = port
            .parse()
            .map_err(|_| format!("'{item}': the port must be a number 0-65535"))?;
        out.push((name, host.trim_matches(['[', ']']).to_owned(), port));
    }
    if out.is_empty() {
        return Err("no listener given".to_owned());
    }
    Ok(out)
}

/// Parses `listener.security.protocol.map` (`NAME:PROTOCOL,...`).
fn parse_protocol_map(value: &str) -> Result<BTreeMap<String, SecurityProtocol>, String> {
    let mut out = BTreeMap::new();
    for item in value.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let Some((name, protocol)) = item.split_once(':') else {
            return Err(format!("'{item}' is not NAME:PROTOCOL"));
        };
        out.insert(name.trim().to_ascii_uppercase(), protocol.parse()?);
    }
    Ok(out)
}

/// One bound listener and what its connections need.
struct Bound {
    config: ListenerConfig,
    tcp: TcpListener,
    tls: Option<TlsAcceptor>,
    handler: Arc<Handler>,
}

/// A server that is bound and ready to serve.
pub struct Server {
    listeners: Vec<Bound>,
    config: ServerConfig,
    loaded: usize,
}

impl fmt::Debug for Server {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Server")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// Why the server could not start.
#[derive(Debug)]
#[non_exhaustive]
pub enum StartError {
    /// A setting is unusable.
    Config(ConfigError),
    /// The store failed to open or load.
    Store(kquota_store::StoreError),
    /// A listener could not be bound.
    Bind(SocketAddr, std::io::Error),
}

impl fmt::Display for StartError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StartError::Config(e) => write!(f, "{e}"),
            StartError::Store(e) => write!(f, "{e}"),
            StartError::Bind(addr, e) => write!(f, "cannot listen on {addr}: {e}"),
        }
    }
}

impl std::error::Error for StartError {}

fn config_error(e: impl fmt::Display) -> StartError {
    StartError::Config(ConfigError(e.to_string()))
}

/// The TLS acceptor for the SSL and SASL_SSL listeners, from the `ssl.*` settings.
fn tls_acceptor(ssl: &SslSettings) -> Result<TlsAcceptor, StartError> {
    let (chain_pem, key_pem) = match (
        &ssl.keystore_location,
        &ssl.keystore_certificate_chain,
        &ssl.keystore_key,
    ) {
        (_, Some(chain), Some(key)) => (chain.clone(), key.clone()),
        (Some(path), chain, key) => {
            let text = tls::read_pem_file(path, "ssl.keystore.location").map_err(config_error)?;
            (
                chain.clone().unwrap_or_else(|| text.clone()),
                key.clone().unwrap_or(text),
            )
        }
        _ => {
            return Err(config_error(
                "a TLS listener needs ssl.keystore.location (a PEM file with the certificate chain and key), or ssl.keystore.certificate.chain and ssl.keystore.key",
            ))
        }
    };
    let identity = KeyPair {
        chain: tls::certificates(&chain_pem, "ssl.keystore").map_err(config_error)?,
        key: tls::private_key(&key_pem, "ssl.keystore").map_err(config_error)?,
    };
    let mut trust = Vec::new();
    if let Some(path) = &ssl.truststore_location {
        let text = tls::read_pem_file(path, "ssl.truststore.location").map_err(config_error)?;
        trust.extend(tls::certificates(&text, "ssl.truststore.location").map_err(config_error)?);
    }
    if let Some(pem) = &ssl.truststore_certificates {
        trust.extend(tls::certificates(pem, "ssl.truststore.certificates").map_err(config_error)?);
    }
    let config = tls::server_config(&identity, &trust, ssl.client_auth).map_err(config_error)?;
    Ok(TlsAcceptor::from(config))
}

impl Server {
    /// Checks the security settings, opens the store, loads it into a new engine, and binds every
    /// listener.
    pub async fn bind(config: ServerConfig) -> Result<Server, StartError> {
        let listeners = config.listener_configs().map_err(StartError::Config)?;
        let needs_tls = listeners.iter().any(|l| l.protocol.uses_tls());
        let needs_sasl = listeners.iter().any(|l| l.protocol.uses_sasl());
        let acceptor = if needs_tls {
            Some(tls_acceptor(&config.ssl)?)
        } else {
            None
        };
        let sasl = if needs_sasl {
            let path = config.sasl_credentials_file.as_ref().ok_or_else(|| {
                config_error(
                    "a SASL listener needs sasl.credentials.file (make entries with `kquotad scram-credential`)",
                )
            })?;
            let credentials = Credentials::load(path).map_err(config_error)?;
            if credentials.is_empty() {
                warn!(
                    "{}: no users; every SASL authentication will fail",
                    path.display()
                );
            }
            if config.sasl_mechanisms.contains(&SaslMechanism::Plain)
                && listeners
                    .iter()
                    .any(|l| l.protocol == SecurityProtocol::SaslPlaintext)
            {
                warn!("PLAIN is enabled on a SASL_PLAINTEXT listener: passwords cross the network in the clear");
            }
            Some(SaslConfig {
                mechanisms: config.sasl_mechanisms.clone(),
                credentials: Arc::new(credentials),
            })
        } else {
            None
        };
        let mut builder = Engine::builder()
            .policy(config.policy)
            .broker_count(config.broker_count);
        if let Some(c) = config.producer_capacity {
            builder = builder.producer_capacity(c);
        }
        if let Some(c) = config.consumer_capacity {
            builder = builder.consumer_capacity(c);
        }
        let engine = Arc::new(builder.build().map_err(config_error)?);
        let store = Arc::new(Store::open(&config.data_dir).map_err(StartError::Store)?);
        let loaded = store.load_into(&engine).map_err(StartError::Store)?;
        let authorizer = Authorizer::new(config.super_users.iter().cloned())
            .allow_anonymous_describe(config.describe_allow_anonymous);
        let mut base = Handler::new(
            Arc::clone(&engine),
            ServerInfo {
                node_id: config.node_id,
                host: String::new(),
                port: 0,
                cluster_id: config.cluster_id.clone(),
            },
        )
        .with_store(store)
        .with_authorizer(authorizer)
        .with_draft_alter_quotas(config.draft_alter_quotas);
        if let Some(sasl) = sasl {
            base = base.with_sasl(sasl);
        }
        let mut bound = Vec::with_capacity(listeners.len());
        for listener in listeners {
            let tcp = TcpListener::bind(listener.addr)
                .await
                .map_err(|e| StartError::Bind(listener.addr, e))?;
            let local = tcp
                .local_addr()
                .map_err(|e| StartError::Bind(listener.addr, e))?;
            // Metadata answers with the listener the request came on, as Kafka does.
            let (host, port) = config
                .advertised
                .iter()
                .find(|(name, _, _)| *name == listener.name)
                .map(|(_, host, port)| (host.clone(), *port))
                .unwrap_or_else(|| (local.ip().to_string(), local.port()));
            let mut info = base.server_info().clone();
            info.host = host;
            info.port = i32::from(port);
            let handler = base.clone().with_server_info(info);
            bound.push(Bound {
                tls: listener
                    .protocol
                    .uses_tls()
                    .then(|| acceptor.clone())
                    .flatten(),
                config: ListenerConfig {
                    addr: local,
                    ..listener
                },
                tcp,
                handler: Arc::new(handler),
            });
        }
        Ok(Server {
            listeners: bound,
            config,
            loaded,
        })
    }

    /// The first listener's address (useful with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.listeners[0].config.addr
    }

    /// Every listener, with its bound address.
    pub fn listeners(&self) -> Vec<ListenerConfig> {
        self.listeners.iter().map(|l| l.config.clone()).collect()
    }

    /// How many entities were loaded from the store.
    pub fn loaded(&self) -> usize {
        self.loaded
    }

    /// Serves until `shutdown` resolves, then waits for open connections to finish their current
    /// request.
    pub async fn serve(self, shutdown: impl std::future::Future<Output = ()>) {
        let (stop_tx, stop_rx) = watch::channel(false);
        let slots = Arc::new(Slots {
            all: Arc::new(Semaphore::new(self.config.max_connections)),
            per_ip: Mutex::new(HashMap::new()),
        });
        let config = Arc::new(self.config);
        let mut acceptors = tokio::task::JoinSet::new();
        for listener in self.listeners {
            acceptors.spawn(accept_loop(
                listener,
                Arc::clone(&config),
                Arc::clone(&slots),
                stop_rx.clone(),
            ));
        }
        shutdown.await;
        info!("shutting down: no new connections; finishing requests in flight");
        let _ = stop_tx.send(true);
        while acceptors.join_next().await.is_some() {}
        info!("stopped");
    }
}

/// The connections open now: over all listeners (`max.connections`) and per client address
/// (`max.connections.per.ip`).
struct Slots {
    all: Arc<Semaphore>,
    per_ip: Mutex<HashMap<IpAddr, usize>>,
}

/// One open connection's place in [`Slots`], given back when dropped.
struct Slot {
    slots: Arc<Slots>,
    ip: IpAddr,
    _all: tokio::sync::OwnedSemaphorePermit,
}

impl Slots {
    /// A place for a connection from `ip`, or which limit is reached.
    fn take(self: &Arc<Self>, ip: IpAddr, config: &ServerConfig) -> Result<Slot, String> {
        let Ok(all) = Arc::clone(&self.all).try_acquire_owned() else {
            return Err(format!(
                "max.connections ({}) reached",
                config.max_connections
            ));
        };
        let mut per_ip = self.per_ip.lock();
        let open = per_ip.entry(ip).or_insert(0);
        if *open >= config.max_connections_per_ip {
            return Err(format!(
                "{ip} already has the configured maximum of {} connections (max.connections.per.ip)",
                config.max_connections_per_ip
            ));
        }
        *open += 1;
        Ok(Slot {
            slots: Arc::clone(self),
            ip,
            _all: all,
        })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut per_ip = self.slots.per_ip.lock();
        if let Some(open) = per_ip.get_mut(&self.ip) {
            *open -= 1;
            if *open == 0 {
                per_ip.remove(&self.ip);
            }
        }
    }
}

/// Accepts connections on one listener until the server stops, then waits for them.
async fn accept_loop(
    listener: Bound,
    config: Arc<ServerConfig>,
    slots: Arc<Slots>,
    mut stop: watch::Receiver<bool>,
) {
    let listener = Arc::new(listener);
    let mut tasks = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            () = stopping(&mut stop) => break,
            accepted = listener.tcp.accept() => {
                let (stream, peer) = match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        warn!("accept failed: {e}");
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    }
                };
                // One address counts once, whether it arrives as IPv4 or IPv4-mapped IPv6.
                let permit = match slots.take(peer.ip().to_canonical(), &config) {
                    Ok(slot) => slot,
                    Err(why) => {
                        warn!(%peer, "closing connection: {why}");
                        continue;
                    }
                };
                let listener = Arc::clone(&listener);
                let config = Arc::clone(&config);
                let stop = stop.clone();
                tasks.spawn(async move {
                    serve_connection(stream, peer, &listener, &config, stop).await;
                    drop(permit);
                });
            }
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
        }
    }
    while tasks.join_next().await.is_some() {}
}

/// Runs TLS (on SSL and SASL_SSL listeners), makes the connection's session, and serves it.
async fn serve_connection(
    stream: TcpStream,
    peer: SocketAddr,
    listener: &Bound,
    config: &ServerConfig,
    stop: watch::Receiver<bool>,
) {
    let _ = stream.set_nodelay(true);
    let name = listener.config.name.as_str();
    let protocol = listener.config.protocol;
    debug!(%peer, listener = name, "connection opened");
    let session = Session::new(name, protocol, Some(peer));
    let Some(acceptor) = &listener.tls else {
        serve_frames(stream, session, &listener.handler, config, stop).await;
        return;
    };
    let mut stop = stop;
    let handshake = tokio::select! {
        r = tokio::time::timeout(config.idle_timeout, acceptor.accept(stream)) => r,
        () = stopping(&mut stop) => return,
    };
    let tls = match handshake {
        Ok(Ok(tls)) => tls,
        Ok(Err(e)) => {
            failed_authentication(peer, name, &format!("SSL handshake failed: {e}"), config).await;
            return;
        }
        Err(_) => {
            debug!(%peer, listener = name, "closing connection: TLS handshake timed out");
            return;
        }
    };
    let session = if protocol.uses_sasl() {
        session
    } else {
        // SSL: the principal comes from the client certificate, if any.
        let certificate = tls
            .get_ref()
            .1
            .peer_certificates()
            .and_then(|c| c.first())
            .map(|c| c.as_ref().to_vec());
        let context = AuthContext::Ssl {
            peer: Some(peer),
            peer_certificate: certificate.as_deref(),
        };
        match listener.handler.principal_builder().build(&context) {
            Ok(principal) => session.with_principal(principal),
            Err(e) => {
                failed_authentication(peer, name, &e, config).await;
                return;
            }
        }
    };
    serve_frames(tls, session, &listener.handler, config, stop).await;
}

/// Logs a failed authentication as Kafka does and waits `connection.failed.authentication.delay.ms`
/// before the caller closes the connection (only this connection's task waits).
async fn failed_authentication(peer: SocketAddr, listener: &str, why: &str, config: &ServerConfig) {
    warn!(%peer, listener, "Failed authentication with /{} ({why})", peer.ip());
    tokio::time::sleep(config.failed_authentication_delay).await;
}

/// Reads frames from one connection and answers them in order until the peer leaves, the connection
/// idles out, a request calls for closing, or the server stops.
async fn serve_frames<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    mut session: Session,
    handler: &Arc<Handler>,
    config: &ServerConfig,
    mut stop: watch::Receiver<bool>,
) {
    let peer = session.peer();
    let peer = peer.map(|p| p.to_string()).unwrap_or_default();
    loop {
        let mut prefix = [0u8; 4];
        // Stopping is checked first: once the server stops, no further request is started.
        let read = tokio::select! {
            biased;
            () = stopping(&mut stop) => break,
            r = tokio::time::timeout(config.idle_timeout, stream.read_exact(&mut prefix)) => r,
        };
        match read {
            Err(_) => {
                debug!(%peer, "closing idle connection");
                break;
            }
            Ok(Err(_)) => break, // the peer closed, or reset
            Ok(Ok(_)) => {}
        }
        // Before a SASL client has authenticated, Kafka reads at most sasl.server.max.receive.size.
        let max_bytes = if session.is_authenticated() {
            config.max_request_bytes
        } else {
            config.sasl_max_receive_bytes.min(config.max_request_bytes)
        };
        let size = match request_size(prefix, max_bytes) {
            Ok(size) => size,
            Err(e) => {
                warn!(%peer, "closing connection: {e}");
                break;
            }
        };
        let mut frame = vec![0u8; size];
        // The size is bounded above; a peer that stalls mid-frame is an idle peer. Nothing of a
        // request that has not fully arrived is applied, so stopping may drop it.
        // A request that has fully arrived is read (and answered) before stopping is checked.
        let read = tokio::select! {
            biased;
            r = tokio::time::timeout(config.idle_timeout, stream.read_exact(&mut frame)) => r,
            () = stopping(&mut stop) => {
                debug!(%peer, "closing connection: the server is stopping");
                break;
            }
        };
        if !matches!(read, Ok(Ok(_))) {
            debug!(%peer, "closing connection: truncated frame");
            break;
        }
        // Alterations fsync and PBKDF2 is slow on purpose; keep both off the async workers.
        let h = Arc::clone(handler);
        let outcome = match tokio::task::spawn_blocking(move || {
            let outcome = h.handle(&mut session, &frame);
            (outcome, session)
        })
        .await
        {
            Ok((outcome, s)) => {
                session = s;
                outcome
            }
            Err(e) => {
                warn!(%peer, "closing connection: request handler failed: {e}");
                break;
            }
        };
        match outcome {
            Outcome::Respond(body) => {
                if !respond(&mut stream, &body, config, &mut stop).await {
                    // A peer that does not read would not take a TLS close_notify either, and a
                    // TLS shutdown waits to send it: drop the connection without one.
                    debug!(%peer, "closing connection: the response was not taken");
                    return;
                }
            }
            Outcome::RespondAndClose(body, reason) => {
                if let Some(addr) = session.peer() {
                    failed_authentication(addr, session.listener(), &reason.to_string(), config)
                        .await;
                }
                if !respond(&mut stream, &body, config, &mut stop).await {
                    return;
                }
                break;
            }
            Outcome::Close(reason) => {
                warn!(%peer, listener = session.listener(), "closing connection: {reason}");
                break;
            }
        }
    }
    // Bounded for the same reason: on TLS a shutdown first sends what is buffered.
    let _ = tokio::time::timeout(CLOSE_TIMEOUT, stream.shutdown()).await;
    debug!(%peer, "connection closed");
}

/// How long, once the server is stopping, a connection has to take the answer to a request that
/// was already handled before it is closed without it.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// How long closing a connection may wait to send what is still buffered (a TLS close_notify).
const CLOSE_TIMEOUT: Duration = Duration::from_secs(1);

/// Resolves once the server is stopping (at once if it already is).
async fn stopping(stop: &mut watch::Receiver<bool>) {
    // An error means the server dropped its sender: it has stopped.
    let _ = stop.wait_for(|stopping| *stopping).await;
}

/// Writes one response. Returns false if it failed, or if the peer did not take it within
/// `connections.max.idle.ms`, or within [`SHUTDOWN_GRACE`] of the server stopping: a peer that
/// does not read must not hold its connection, or the server's shutdown, forever.
async fn respond<S: AsyncWrite + Unpin>(
    stream: &mut S,
    body: &[u8],
    config: &ServerConfig,
    stop: &mut watch::Receiver<bool>,
) -> bool {
    let grace = async {
        stopping(stop).await;
        tokio::time::sleep(SHUTDOWN_GRACE).await;
    };
    tokio::select! {
        r = tokio::time::timeout(config.idle_timeout, write_frame(stream, body)) => matches!(r, Ok(Ok(()))),
        () = grace => false,
    }
}

async fn write_frame<S: AsyncWrite + Unpin>(stream: &mut S, body: &[u8]) -> std::io::Result<()> {
    // One write for the size and the body: one segment (or TLS record) per response, not two.
    let mut frame = Vec::with_capacity(4 + body.len());
    frame.extend_from_slice(&(body.len() as u32).to_be_bytes());
    frame.extend_from_slice(body);
    stream.write_all(&frame).await?;
    stream.flush().await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(text: &str) -> Vec<(usize, String, String)> {
        parse_properties(text)
            .unwrap()
            .into_iter()
            .map(|p| (p.line, p.key, p.value))
            .collect()
    }

    fn refusal(text: &str) -> String {
        parse_properties(text).unwrap_err().0
    }

    #[test]
    fn properties_are_read_as_java_reads_them() {
        let text = "# kquotad\n listeners = PLAINTEXT://127.0.0.1:0,\\\n    SSL://127.0.0.1:0  \nssl.keystore.location=C\\:\\\\ks.pem\nsuper.users:User:admin\nkquota.data.dir=/a\nkquota.data.dir=/b\nssl.key.password=\n";
        assert_eq!(
            settings(text),
            [
                (2, "listeners", "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0"),
                (4, "ssl.keystore.location", "C:\\ks.pem"),
                (5, "super.users", "User:admin"),
                (7, "kquota.data.dir", "/b"),
                (8, "ssl.key.password", ""),
            ]
            .map(|(n, k, v)| (n, k.to_owned(), v.to_owned()))
        );
    }

    #[test]
    fn lines_a_server_should_not_guess_at_are_refused_with_their_number() {
        assert_eq!(
            refusal("listeners=PLAINTEXT://127.0.0.1:0\nthis line is wrong\n"),
            "line 2: expected key=value, got 'this' followed by a space; kquotad needs '=' or ':' between a key and its value"
        );
        assert_eq!(
            refusal("a=1\n\nkquota.data.dir\n"),
            "line 3: expected key=value, got 'kquota.data.dir' alone; write kquota.data.dir= for an empty value"
        );
        assert_eq!(refusal("a=1\n = x\n"), "line 2: empty key");
        let e = refusal("a=1\n# \\u is fine in a comment\nb=\\u12\n");
        assert!(e.starts_with("line 3: malformed \\uXXXX escape"), "{e}");
    }
}
