//! Everything `kquotad` is configured with: [`ServerConfig`], set key by key as Kafka's
//! `server.properties` would ([`ServerConfig::set`]), each value checked once, as it is set, into a
//! type that holds only a usable value.

mod listeners;
mod properties;

use std::num::{NonZeroU32, NonZeroUsize};
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use kquota::SubQuotaPolicy;
use kquota_wire::tls::ClientAuth;
use kquota_wire::{
    parse_super_users, Principal, SaslMechanism, ScramMechanism, DEFAULT_MAX_REQUEST_BYTES,
};

use crate::error::{ConfigError, Problem};
use kquota_host::DEFAULT_QUEUED_MAX_REQUEST_BYTES;

pub use listeners::{AdvertisedListeners, ListenerConfig, Listeners, ProtocolMap};
pub use properties::{parse_properties, settings_help, KNOWN_PROPERTIES, SETTINGS};

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
    pub listeners: Listeners,
    /// `listener.security.protocol.map` (`NAME:PROTOCOL,...`); a listener named after a protocol
    /// needs no entry.
    pub listener_protocol_map: ProtocolMap,
    /// What clients are told to connect to, per listener name (`advertised.listeners`); a listener
    /// not named is advertised at its bound address.
    pub advertised: AdvertisedListeners,
    /// The data directory (`kquota.data.dir`).
    pub data_dir: PathBuf,
    /// Where `/metrics`, `/healthz` and `/readyz` are served over HTTP
    /// (`kquota.metrics.listen`); `None`: nowhere.
    pub metrics_listen: Option<std::net::SocketAddr>,
    /// The sub-quota policy (`kquota.sub.quota.policy`: `kip55` or `kafka`).
    pub policy: SubQuotaPolicy,
    /// The live broker count `bps` quotas divide by (`kquota.broker.count`).
    pub broker_count: NonZeroU32,
    /// Producer capacity for `shares` quotas, bytes/s (`kquota.producer.capacity.bytes.per.sec`).
    pub producer_capacity: Option<f64>,
    /// Consumer capacity for `shares` quotas, bytes/s (`kquota.consumer.capacity.bytes.per.sec`).
    pub consumer_capacity: Option<f64>,
    /// Largest request frame (`socket.request.max.bytes`).
    pub max_request_bytes: NonZeroUsize,
    /// Largest request frame on a SASL listener before the client has authenticated
    /// (`sasl.server.max.receive.size`, 512 KiB as in Kafka): unauthenticated peers cannot make the
    /// server hold `socket.request.max.bytes` each.
    pub sasl_max_receive_bytes: NonZeroUsize,
    /// The request bytes that may be read or queued at once over every connection
    /// (`queued.max.request.bytes`, 256 MiB; `None`, set by a value ≤ 0, is Kafka's unbounded
    /// default). A frame reserves its size before its body is read and keeps it until its
    /// answer is written; while the budget is spent, connections wait instead of reading. It must
    /// be at least `max_request_bytes`, as in Kafka.
    pub queued_max_request_bytes: Option<NonZeroUsize>,
    /// Most connections open at once (`max.connections`).
    pub max_connections: NonZeroUsize,
    /// Most connections open at once from one client address (`max.connections.per.ip`;
    /// unlimited by default, as in Kafka).
    pub max_connections_per_ip: NonZeroUsize,
    /// Idle time after which a connection is closed (`connections.max.idle.ms`).
    pub idle_timeout: Duration,
    /// The threads that serve client connections (`num.network.threads`, 1 to
    /// [`MAX_NETWORK_THREADS`]; one per CPU by default, as the proxy's): each connection stays on
    /// the one it was given when accepted, in turn, so that its wake-ups never cross threads.
    pub network_threads: NonZeroUsize,
    /// How long a new connection has to authenticate, or on PLAINTEXT and SSL to send a valid
    /// request, before it is closed; and how long an authenticated connection must have been idle
    /// before it may give way to a new one when `max.connections` is reached
    /// (`kquota.connections.grace.ms`, 10000).
    pub connection_grace: Duration,
    /// This node's id (`node.id`).
    pub node_id: i32,
    /// The cluster id reported to clients (`cluster.id`).
    pub cluster_id: String,
    /// The principals that may alter quotas (`super.users=User:alice;User:bob`).
    pub super_users: Vec<Principal>,
    /// Whether `User:ANONYMOUS` may describe quotas (`kquota.describe.allow.anonymous`, false).
    pub describe_allow_anonymous: bool,
    /// Whether apiKey 50 serves the seeds' draft AlterQuotas (`kquota.draft.alter.quotas.enable`,
    /// false). Off, 50 is Kafka's DescribeUserScramCredentials (the users of
    /// `sasl.credentials.file`), which Kafka's own `kafka-configs` calls when describing users; on,
    /// 50 is the draft for clients written against it, and that call of Kafka's tools times out.
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
    /// Share one configuration with other instances through this Kafka cluster
    /// (`kquota.cluster.bootstrap.servers`): the configuration log then takes the place of the
    /// store in `kquota.data.dir`, and the membership gives `bps` its live instance count.
    pub cluster_bootstrap: Option<String>,
    /// This instance's id among the others (`kquota.cluster.instance.id`; default
    /// `kquotad-<node.id>`).
    pub cluster_instance_id: Option<String>,
    /// The configuration topic (`kquota.cluster.config.topic`, `_kquota_config`).
    pub cluster_config_topic: String,
    /// The replication factor of the topics created (`kquota.cluster.replication.factor`, -1:
    /// the cluster's default).
    pub cluster_replication_factor: i32,
    /// How long an alteration may wait for the log (`kquota.cluster.alter.timeout.ms`, 10000).
    pub cluster_alter_timeout: Duration,
    /// librdkafka properties of the instance's own Kafka clients (`kquota.cluster.client.KEY`).
    pub cluster_client: std::collections::BTreeMap<String, String>,
    /// How log lines are written (`log.format`: `text`, the default, or `json`).
    pub log_format: kquota_host::LogFormat,
}

impl Default for ServerConfig {
    fn default() -> Self {
        let nonzero = |n: usize| NonZeroUsize::new(n).expect("a default limit is not 0");
        ServerConfig {
            listeners: "PLAINTEXT://127.0.0.1:9092"
                .parse()
                .expect("the default listener is well formed"),
            listener_protocol_map: ProtocolMap::default(),
            advertised: AdvertisedListeners::default(),
            data_dir: PathBuf::from("kquota-data"),
            metrics_listen: None,
            policy: SubQuotaPolicy::Kip55,
            broker_count: NonZeroU32::MIN,
            producer_capacity: None,
            consumer_capacity: None,
            max_request_bytes: nonzero(DEFAULT_MAX_REQUEST_BYTES),
            sasl_max_receive_bytes: nonzero(524_288),
            queued_max_request_bytes: Some(nonzero(DEFAULT_QUEUED_MAX_REQUEST_BYTES)),
            max_connections: nonzero(1024),
            max_connections_per_ip: NonZeroUsize::MAX,
            idle_timeout: Duration::from_millis(600_000),
            network_threads: default_network_threads(),
            connection_grace: Duration::from_millis(10_000),
            node_id: 1,
            cluster_id: "kquota-cluster".to_owned(),
            super_users: Vec::new(),
            describe_allow_anonymous: false,
            draft_alter_quotas: false,
            sasl_mechanisms: vec![
                SaslMechanism::Scram(ScramMechanism::Sha256),
                SaslMechanism::Scram(ScramMechanism::Sha512),
            ],
            sasl_credentials_file: None,
            failed_authentication_delay: Duration::from_millis(100),
            ssl: SslSettings::default(),
            cluster_bootstrap: None,
            cluster_instance_id: None,
            cluster_config_topic: "_kquota_config".to_owned(),
            cluster_replication_factor: -1,
            cluster_alter_timeout: Duration::from_millis(10_000),
            cluster_client: std::collections::BTreeMap::new(),
            log_format: kquota_host::LogFormat::Text,
        }
    }
}

/// A trimmed number, if `value` is one.
fn number<T: FromStr>(value: &str) -> Option<T> {
    value.trim().parse().ok()
}

/// `true` or `false`.
fn boolean(value: &str) -> Result<bool, Problem> {
    match value.trim() {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(Problem::NotBool),
    }
}

/// A value that must not be empty.
fn non_empty(value: &str) -> Result<&str, Problem> {
    if value.is_empty() {
        return Err(Problem::Empty);
    }
    Ok(value)
}

/// A frame size: Kafka's `int` settings, 1 to 2³¹ − 1.
fn frame_size(value: &str) -> Result<NonZeroUsize, Problem> {
    number::<i32>(value)
        .filter(|n| *n > 0)
        .and_then(|n| NonZeroUsize::new(n as usize))
        .ok_or(Problem::FrameSize)
}

/// The most `num.network.threads` a server takes: far more than a host has CPUs to run them.
pub const MAX_NETWORK_THREADS: usize = 256;

/// One network thread per CPU the process may use (within [`MAX_NETWORK_THREADS`]), and one
/// where that cannot be told: requests are handled on blocking threads, so a network thread only
/// moves bytes and more of them than CPUs would only take turns.
fn default_network_threads() -> NonZeroUsize {
    let cpus = std::thread::available_parallelism().map_or(1, NonZeroUsize::get);
    NonZeroUsize::new(cpus.min(MAX_NETWORK_THREADS)).unwrap_or(NonZeroUsize::MIN)
}

/// `num.network.threads`: 1 to [`MAX_NETWORK_THREADS`].
fn network_threads(value: &str) -> Result<NonZeroUsize, Problem> {
    number::<usize>(value)
        .filter(|n| *n <= MAX_NETWORK_THREADS)
        .and_then(NonZeroUsize::new)
        .ok_or(Problem::WholeNumberBetween(1, MAX_NETWORK_THREADS as u32))
}

/// A count of at least 1.
fn count<T: FromStr>(value: &str) -> Result<T, Problem> {
    number(value).ok_or(Problem::WholeNumberAtLeast(1))
}

impl ServerConfig {
    /// Applies one `key=value` setting. Unknown keys are an error here; callers that read files warn
    /// about them instead (see [`KNOWN_PROPERTIES`]).
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), ConfigError> {
        self.apply(key, value).map_err(|e| match e {
            Some(problem) => ConfigError::value(key, value, problem),
            None => ConfigError::UnknownKey(key.to_owned()),
        })
    }

    /// [`ServerConfig::set`]; `Err(None)` for an unknown key.
    fn apply(&mut self, key: &str, value: &str) -> Result<(), Option<Problem>> {
        match key {
            "listeners" => self.listeners = value.parse()?,
            "listener.security.protocol.map" => self.listener_protocol_map = value.parse()?,
            "advertised.listeners" => self.advertised = value.parse()?,
            "super.users" => {
                self.super_users =
                    parse_super_users(value).map_err(|e| Problem::Refused(e.into()))?
            }
            "kquota.describe.allow.anonymous" => self.describe_allow_anonymous = boolean(value)?,
            "kquota.draft.alter.quotas.enable" => self.draft_alter_quotas = boolean(value)?,
            "log.format" => {
                self.log_format = value
                    .parse()
                    .map_err(|e: kquota_host::UnknownLogFormat| Problem::Refused(e.into()))?
            }
            "sasl.enabled.mechanisms" => {
                let mut mechanisms = Vec::new();
                for m in value.split(',').map(str::trim).filter(|m| !m.is_empty()) {
                    let m = m
                        .parse::<SaslMechanism>()
                        .map_err(|e| Problem::Refused(e.into()))?;
                    if !mechanisms.contains(&m) {
                        mechanisms.push(m);
                    }
                }
                if mechanisms.is_empty() {
                    return Err(Some(Problem::NoMechanism));
                }
                self.sasl_mechanisms = mechanisms;
            }
            "sasl.credentials.file" => {
                self.sasl_credentials_file = Some(PathBuf::from(non_empty(value)?))
            }
            "connection.failed.authentication.delay.ms" => {
                self.failed_authentication_delay =
                    Duration::from_millis(number(value).ok_or(Problem::Milliseconds(0))?)
            }
            "ssl.keystore.type" | "ssl.truststore.type" => {
                if !value.eq_ignore_ascii_case("PEM") {
                    return Err(Some(Problem::NotPem));
                }
            }
            "ssl.keystore.location" => self.ssl.keystore_location = Some(value.to_owned()),
            "ssl.keystore.certificate.chain" => {
                self.ssl.keystore_certificate_chain = Some(value.to_owned())
            }
            "ssl.keystore.key" => self.ssl.keystore_key = Some(value.to_owned()),
            "ssl.key.password" | "ssl.keystore.password" => {
                if !value.is_empty() {
                    return Err(Some(Problem::EncryptedKey));
                }
            }
            "ssl.truststore.location" => self.ssl.truststore_location = Some(value.to_owned()),
            "ssl.truststore.certificates" => {
                self.ssl.truststore_certificates = Some(value.to_owned())
            }
            "ssl.client.auth" => {
                self.ssl.client_auth = value
                    .parse::<ClientAuth>()
                    .map_err(|e| Problem::Refused(e.into()))?
            }
            "ssl.principal.mapping.rules" => {
                if value.trim() != "DEFAULT" {
                    return Err(Some(Problem::PrincipalMapping));
                }
            }
            "kquota.data.dir" => self.data_dir = PathBuf::from(non_empty(value)?),
            "kquota.metrics.listen" => {
                self.metrics_listen = Some(value.trim().parse().map_err(|_| Problem::IpPort)?)
            }
            "kquota.cluster.bootstrap.servers" => {
                if !cfg!(feature = "cluster") {
                    return Err(Some(Problem::NotBuilt("cluster")));
                }
                self.cluster_bootstrap = Some(non_empty(value)?.to_owned())
            }
            "kquota.cluster.instance.id" => {
                self.cluster_instance_id = Some(non_empty(value)?.to_owned())
            }
            "kquota.cluster.config.topic" => {
                self.cluster_config_topic = non_empty(value)?.to_owned()
            }
            "kquota.cluster.replication.factor" => {
                self.cluster_replication_factor = value
                    .trim()
                    .parse::<i32>()
                    .ok()
                    .filter(|n| *n == -1 || *n > 0)
                    .ok_or(Problem::PositiveNumber)?
            }
            "kquota.cluster.alter.timeout.ms" => {
                self.cluster_alter_timeout =
                    Duration::from_millis(number(value).ok_or(Problem::Milliseconds(0))?)
            }
            _ if key.starts_with("kquota.cluster.client.") => {
                let property = &key["kquota.cluster.client.".len()..];
                if property.is_empty() {
                    return Err(None);
                }
                self.cluster_client
                    .insert(property.to_owned(), value.to_owned());
            }
            "kquota.sub.quota.policy" => {
                self.policy = value
                    .parse::<SubQuotaPolicy>()
                    .map_err(|e| Problem::Refused(e.into()))?
            }
            "kquota.broker.count" => self.broker_count = count(value)?,
            "kquota.producer.capacity.bytes.per.sec" | "kquota.consumer.capacity.bytes.per.sec" => {
                let v: f64 = number(value)
                    .filter(|v: &f64| v.is_finite() && *v > 0.0)
                    .ok_or(Problem::PositiveNumber)?;
                if key.starts_with("kquota.producer") {
                    self.producer_capacity = Some(v);
                } else {
                    self.consumer_capacity = Some(v);
                }
            }
            "socket.request.max.bytes" => self.max_request_bytes = frame_size(value)?,
            "sasl.server.max.receive.size" => self.sasl_max_receive_bytes = frame_size(value)?,
            "queued.max.request.bytes" => {
                // Kafka's LONG; a value ≤ 0 is its unbounded default (-1).
                let n: i64 = number(value).ok_or(Problem::Bytes)?;
                self.queued_max_request_bytes = usize::try_from(n).ok().and_then(NonZeroUsize::new);
            }
            "max.connections" => self.max_connections = count(value)?,
            "max.connections.per.ip" => self.max_connections_per_ip = count(value)?,
            "num.network.threads" => self.network_threads = network_threads(value)?,
            "connections.max.idle.ms" => {
                self.idle_timeout = Duration::from_millis(
                    number(value)
                        .filter(|n| *n >= 1)
                        .ok_or(Problem::Milliseconds(1))?,
                )
            }
            "kquota.connections.grace.ms" => {
                self.connection_grace = Duration::from_millis(
                    number(value)
                        .filter(|n| *n >= 1)
                        .ok_or(Problem::Milliseconds(1))?,
                )
            }
            "node.id" => {
                self.node_id = number(value)
                    .filter(|n| *n >= 0)
                    .ok_or(Problem::WholeNumberAtLeast(0))?
            }
            "cluster.id" => self.cluster_id = non_empty(value)?.to_owned(),
            _ => return Err(None),
        }
        Ok(())
    }

    /// The listeners, with their protocols resolved through `listener.security.protocol.map`.
    /// Refused: a listener whose name is no protocol and is not mapped, a host that is not an IP
    /// address, and a name or a port (other than 0) used twice.
    pub fn listener_configs(&self) -> Result<Vec<ListenerConfig>, ConfigError> {
        self.listeners
            .resolve(&self.listener_protocol_map)
            .map_err(|problem| ConfigError::value("listeners", self.listeners.as_str(), problem))
    }
}

impl ServerConfig {
    /// Kafka's rule: a bounded `queued.max.request.bytes` is at least `socket.request.max.bytes`,
    /// so that every frame the server reads fits in the budget (a larger one would wait forever).
    pub(crate) fn check_request_budget(&self) -> Result<(), ConfigError> {
        match self.queued_max_request_bytes {
            Some(queued) if queued < self.max_request_bytes => {
                Err(ConfigError::QueuedBelowRequestMax {
                    queued: queued.get(),
                    request_max: self.max_request_bytes.get(),
                })
            }
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use kquota_wire::SecurityProtocol;

    use super::*;

    fn refusal(key: &str, value: &str) -> ConfigError {
        ServerConfig::default().set(key, value).unwrap_err()
    }

    #[test]
    fn a_refused_value_names_its_key_its_value_and_why() {
        let e = refusal("max.connections", "0");
        assert!(
            matches!(&e, ConfigError::Value { key, value, problem: Problem::WholeNumberAtLeast(1) }
                if key == "max.connections" && value == "0"),
            "{e:?}"
        );
        assert_eq!(
            e.to_string(),
            "max.connections=0: must be a whole number ≥ 1"
        );
        assert_eq!(
            refusal("socket.request.max.bytes", "2147483648").to_string(),
            "socket.request.max.bytes=2147483648: must be a whole number between 1 and 2147483647"
        );
        assert_eq!(
            refusal("advertised.listeners", "PLAINTEXT://h:0").to_string(),
            "advertised.listeners=PLAINTEXT://h:0: an advertised port must not be 0"
        );
        assert_eq!(
            refusal("listeners", "127.0.0.1:9092").to_string(),
            "listeners=127.0.0.1:9092: '127.0.0.1:9092' is not NAME://host:port"
        );
        // Another crate's parser refused it: its error is the source, its message kept.
        let e = refusal("kquota.sub.quota.policy", "strict");
        assert!(std::error::Error::source(&e).is_some(), "{e:?}");
        assert_eq!(
            e.to_string(),
            "kquota.sub.quota.policy=strict: unknown sub-quota policy 'strict' (expected kip55 or kafka)"
        );
        assert!(
            matches!(refusal("no.such.key", "1"), ConfigError::UnknownKey(k) if k == "no.such.key")
        );
    }

    #[test]
    fn num_network_threads_is_one_to_256() {
        let mut config = ServerConfig::default();
        let cpus = std::thread::available_parallelism().map_or(1, NonZeroUsize::get);
        assert_eq!(config.network_threads.get(), cpus.min(MAX_NETWORK_THREADS));
        for n in ["1", "4", "256"] {
            config.set("num.network.threads", n).unwrap();
            assert_eq!(config.network_threads.get().to_string(), n);
        }
        for refused in ["0", "257", "-1", "two", ""] {
            assert_eq!(
                refusal("num.network.threads", refused).to_string(),
                format!("num.network.threads={refused}: must be a whole number from 1 to 256")
            );
        }
        // A refused value leaves the last good one.
        assert!(config.set("num.network.threads", "0").is_err());
        assert_eq!(config.network_threads.get(), 256);
    }

    #[test]
    fn kquota_cluster_bootstrap_servers_needs_the_cluster_feature() {
        let mut config = ServerConfig::default();
        let set = config.set("kquota.cluster.bootstrap.servers", "kafka:9092");
        if cfg!(feature = "cluster") {
            set.unwrap();
            assert_eq!(config.cluster_bootstrap.as_deref(), Some("kafka:9092"));
        } else {
            assert_eq!(
                set.unwrap_err().to_string(),
                "kquota.cluster.bootstrap.servers=kafka:9092: this kquotad was built without the \
                 `cluster` feature (build it with `--features cluster`)"
            );
            assert_eq!(config.cluster_bootstrap, None);
        }
    }

    #[test]
    fn the_request_budget_is_kafkas_queued_max_request_bytes() {
        let mut config = ServerConfig::default();
        assert_eq!(
            config.queued_max_request_bytes.map(NonZeroUsize::get),
            Some(268_435_456)
        );
        config.set("queued.max.request.bytes", "-1").unwrap();
        assert_eq!(config.queued_max_request_bytes, None);
        config.check_request_budget().unwrap();
        config.set("queued.max.request.bytes", "1048576").unwrap();
        assert_eq!(
            config.check_request_budget().unwrap_err().to_string(),
            "queued.max.request.bytes must be larger or equal to socket.request.max.bytes \
             (1048576 < 104857600); -1 for no limit"
        );
        config.set("socket.request.max.bytes", "1048576").unwrap();
        config.check_request_budget().unwrap();
        assert_eq!(
            refusal("queued.max.request.bytes", "lots").to_string(),
            "queued.max.request.bytes=lots: must be a whole number of bytes (-1 for no limit)"
        );
    }

    #[test]
    fn listeners_resolve_through_the_protocol_map() {
        let mut config = ServerConfig::default();
        config
            .set("listeners", "INTERNAL://:9092,SSL://localhost:9093")
            .unwrap();
        let e = config.listener_configs().unwrap_err();
        assert_eq!(
            e.to_string(),
            "listeners=INTERNAL://:9092,SSL://localhost:9093: listener 'INTERNAL' is not a security protocol; map it with listener.security.protocol.map=INTERNAL:SASL_SSL (or another protocol)"
        );
        config
            .set("listener.security.protocol.map", "internal:PLAINTEXT")
            .unwrap();
        let listeners = config.listener_configs().unwrap();
        assert_eq!(
            listeners
                .iter()
                .map(|l| (l.name.as_str(), l.protocol, l.addr.to_string()))
                .collect::<Vec<_>>(),
            [
                (
                    "INTERNAL",
                    SecurityProtocol::Plaintext,
                    "0.0.0.0:9092".to_owned()
                ),
                ("SSL", SecurityProtocol::Ssl, "127.0.0.1:9093".to_owned()),
            ]
        );
        config
            .set("listeners", "A://1.2.3.4:1,B://1.2.3.4:1")
            .unwrap();
        config
            .set("listener.security.protocol.map", "A:SSL,B:SSL")
            .unwrap();
        assert!(matches!(
            config.listener_configs(),
            Err(ConfigError::Value {
                problem: Problem::PortTwice(1),
                ..
            })
        ));
    }
}
