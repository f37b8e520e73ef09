//! [`ServerSettings`]: `kquotad`'s settings as given, set key by key as Kafka's
//! `server.properties` would ([`ServerSettings::set`]) or field by field, each value checked once,
//! as it is set, into a type that holds only a usable value; and made into a checked
//! [`ServerConfig`] in one step, [`ServerSettings::build`], which checks what goes together.

use std::num::{NonZeroU32, NonZeroUsize};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use kquota::SubQuotaPolicy;
use kquota_host::settings::values::{
    boolean, capacity, client_auth, count, count_up_to, frame_size, ip_port, millis, non_empty,
    timeout, Capacity, FrameSize, Timeout,
};
#[cfg(feature = "cluster")]
use kquota_host::settings::ClusterSettings;
use kquota_host::settings::{Problem, SettingError};
use kquota_host::DEFAULT_QUEUED_MAX_REQUEST_BYTES;
use kquota_host::{NetworkThreads, ThreadCount};
use kquota_wire::properties::Property;
use kquota_wire::{
    parse_super_users, Principal, PrincipalMapper, SaslMechanism, ScramMechanism,
    DEFAULT_MAX_REQUEST_BYTES,
};

use super::config::ServerConfig;
use super::listeners::{AdvertisedListeners, Listeners, ProtocolMap};
use super::ssl::SslSettings;
use super::table::SETTINGS;
use crate::error::{ConfigError, ValueProblem};

/// Everything `kquotad` is configured with, as given: every field holds a value its setting may
/// have; whether they work together is checked once, by [`ServerSettings::build`].
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ServerSettings {
    /// Where to listen, in Kafka's syntax (`listeners=PLAINTEXT://127.0.0.1:9092,SSL://:9093`).
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
    /// Producer capacity for `shares` quotas (`kquota.producer.capacity.bytes.per.sec`).
    pub producer_capacity: Option<Capacity>,
    /// Consumer capacity for `shares` quotas (`kquota.consumer.capacity.bytes.per.sec`).
    pub consumer_capacity: Option<Capacity>,
    /// Largest request frame (`socket.request.max.bytes`).
    pub max_request_bytes: FrameSize,
    /// Largest request frame on a SASL listener before the client has authenticated
    /// (`sasl.server.max.receive.size`, 512 KiB as in Kafka): unauthenticated peers cannot make the
    /// server hold `socket.request.max.bytes` each.
    pub sasl_max_receive_bytes: FrameSize,
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
    /// The threads that serve client connections (`num.network.threads`, 1 to 256; one per CPU
    /// by default, as the proxy's): each connection stays on the one it was given when accepted,
    /// in turn, so that its wake-ups never cross threads.
    pub network_threads: ThreadCount,
    /// Idle time after which a connection is closed (`connections.max.idle.ms`).
    pub idle_timeout: Timeout,
    /// How long a new connection has to authenticate, or on PLAINTEXT and SSL to send a valid
    /// request, before it is closed; and how long an authenticated connection must have been idle
    /// before it may give way to a new one when `max.connections` is reached
    /// (`kquota.connections.grace.ms`, 10000).
    pub connection_grace: Timeout,
    /// This node's id (`node.id`).
    pub node_id: NodeId,
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
    pub sasl_mechanisms: Mechanisms,
    /// `sasl.credentials.file`: the SCRAM credentials of SASL users.
    pub sasl_credentials_file: Option<PathBuf>,
    /// How long a connection that failed authentication waits before it is closed
    /// (`connection.failed.authentication.delay.ms`, 100).
    pub failed_authentication_delay: Duration,
    /// TLS settings (`ssl.*`).
    pub ssl: SslSettings,
    /// Share one configuration with other instances through a Kafka cluster
    /// (`kquota.cluster.*`): the configuration log then takes the place of the store in
    /// `kquota.data.dir`, and the membership gives `bps` its live instance count.
    #[cfg(feature = "cluster")]
    pub cluster: ClusterSettings,
    /// How log lines are written (`log.format`: `text`, the default, or `json`).
    pub log_format: kquota_host::LogFormat,
}

impl Default for ServerSettings {
    fn default() -> Self {
        let nonzero = |n: usize| NonZeroUsize::new(n).expect("a default limit is not 0");
        let frame = |n: usize| FrameSize::new(n as u32).expect("a default frame size is one");
        ServerSettings {
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
            max_request_bytes: frame(DEFAULT_MAX_REQUEST_BYTES),
            sasl_max_receive_bytes: frame(524_288),
            queued_max_request_bytes: Some(nonzero(DEFAULT_QUEUED_MAX_REQUEST_BYTES)),
            max_connections: nonzero(1024),
            max_connections_per_ip: NonZeroUsize::MAX,
            network_threads: NetworkThreads::default_count(),
            idle_timeout: Timeout::from_millis(600_000).expect("a default is a timeout"),
            connection_grace: Timeout::from_millis(10_000).expect("a default is a timeout"),
            node_id: NodeId(1),
            cluster_id: "kquota-cluster".to_owned(),
            super_users: Vec::new(),
            describe_allow_anonymous: false,
            draft_alter_quotas: false,
            sasl_mechanisms: Mechanisms(vec![
                SaslMechanism::Scram(ScramMechanism::Sha256),
                SaslMechanism::Scram(ScramMechanism::Sha512),
            ]),
            sasl_credentials_file: None,
            failed_authentication_delay: Duration::from_millis(100),
            ssl: SslSettings::default(),
            #[cfg(feature = "cluster")]
            cluster: ClusterSettings::default(),
            log_format: kquota_host::LogFormat::Text,
        }
    }
}

/// A node id: Kafka's `node.id`, a whole number from 0 to 2³¹ − 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeId(i32);

impl NodeId {
    /// `id`, if it is not negative.
    pub const fn new(id: i32) -> Option<NodeId> {
        if id >= 0 {
            Some(NodeId(id))
        } else {
            None
        }
    }

    /// The id.
    pub const fn get(self) -> i32 {
        self.0
    }
}

/// The SASL mechanisms offered: at least one, each once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mechanisms(Vec<SaslMechanism>);

impl Mechanisms {
    /// `mechanisms` without repeats, if there is at least one.
    pub fn new(mechanisms: impl IntoIterator<Item = SaslMechanism>) -> Option<Mechanisms> {
        let mut out = Vec::new();
        for m in mechanisms {
            if !out.contains(&m) {
                out.push(m);
            }
        }
        (!out.is_empty()).then_some(Mechanisms(out))
    }

    /// The mechanisms, in the order given.
    pub fn as_slice(&self) -> &[SaslMechanism] {
        &self.0
    }
}

/// `sasl.enabled.mechanisms`: at least one, each once.
fn mechanisms(value: &str) -> Result<Mechanisms, Problem> {
    let mut given = Vec::new();
    for m in value.split(',').map(str::trim).filter(|m| !m.is_empty()) {
        given.push(m.parse::<SaslMechanism>().map_err(Problem::refused)?);
    }
    Mechanisms::new(given).ok_or_else(|| ValueProblem::NoMechanism.into())
}

impl ServerSettings {
    /// Applies one `key=value` setting, checked as it is set: an unknown key, or a value the key
    /// cannot hold, is an error that names both, and leaves the settings as they were. Callers
    /// that read files warn about unknown keys instead (see [`SETTINGS`](crate::SETTINGS)).
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), ConfigError> {
        self.apply(key, value.trim()).map_err(|e| match e {
            Some(problem) => SettingError::value(key, value, problem).into(),
            None => SETTINGS.unknown(key).into(),
        })
    }

    /// [`ServerSettings::set`], with the value trimmed; `Err(None)` for an unknown key.
    fn apply(&mut self, key: &str, value: &str) -> Result<(), Option<Problem>> {
        if key.starts_with("kquota.cluster.") {
            return self.apply_cluster(key, value);
        }
        match key {
            "listeners" => self.listeners = value.parse()?,
            "listener.security.protocol.map" => self.listener_protocol_map = value.parse()?,
            "advertised.listeners" => self.advertised = value.parse()?,
            "super.users" => {
                self.super_users = parse_super_users(value).map_err(Problem::refused)?
            }
            "kquota.describe.allow.anonymous" => self.describe_allow_anonymous = boolean(value)?,
            "kquota.draft.alter.quotas.enable" => self.draft_alter_quotas = boolean(value)?,
            "log.format" => self.log_format = value.parse().map_err(Problem::refused)?,
            "sasl.enabled.mechanisms" => self.sasl_mechanisms = mechanisms(value)?,
            "sasl.credentials.file" => {
                self.sasl_credentials_file = Some(PathBuf::from(non_empty(value)?))
            }
            "connection.failed.authentication.delay.ms" => {
                self.failed_authentication_delay = millis(value, 0)?
            }
            "ssl.keystore.type" | "ssl.truststore.type" => {
                if !value.eq_ignore_ascii_case("PEM") {
                    return Err(Some(ValueProblem::NotPem.into()));
                }
            }
            "ssl.keystore.location" => self.ssl.keystore_location = Some(value.to_owned()),
            "ssl.keystore.certificate.chain" => {
                self.ssl.keystore_certificate_chain = Some(value.to_owned())
            }
            "ssl.keystore.key" => self.ssl.keystore_key = Some(value.to_owned()),
            "ssl.key.password" | "ssl.keystore.password" => {
                if !value.is_empty() {
                    return Err(Some(ValueProblem::EncryptedKey.into()));
                }
            }
            "ssl.truststore.location" => self.ssl.truststore_location = Some(value.to_owned()),
            "ssl.truststore.certificates" => {
                self.ssl.truststore_certificates = Some(value.to_owned())
            }
            "ssl.client.auth" => self.ssl.client_auth = client_auth(value)?,
            "ssl.principal.mapping.rules" => {
                let mapper = PrincipalMapper::parse(non_empty(value)?).map_err(Problem::refused)?;
                self.ssl.principal_mapping = Arc::new(mapper);
            }
            "kquota.data.dir" => self.data_dir = PathBuf::from(non_empty(value)?),
            "kquota.metrics.listen" => self.metrics_listen = Some(ip_port(value)?),
            "kquota.sub.quota.policy" => self.policy = value.parse().map_err(Problem::refused)?,
            "kquota.broker.count" => {
                self.broker_count = value.parse().map_err(|_| Problem::WholeNumberAtLeast(1))?
            }
            "kquota.producer.capacity.bytes.per.sec" => {
                self.producer_capacity = Some(capacity(value)?)
            }
            "kquota.consumer.capacity.bytes.per.sec" => {
                self.consumer_capacity = Some(capacity(value)?)
            }
            "socket.request.max.bytes" => self.max_request_bytes = frame_size(value)?,
            "sasl.server.max.receive.size" => self.sasl_max_receive_bytes = frame_size(value)?,
            "queued.max.request.bytes" => {
                // Kafka's LONG; a value ≤ 0 is its unbounded default (-1).
                let n: i64 = value.parse().map_err(|_| Problem::Bytes)?;
                self.queued_max_request_bytes = usize::try_from(n).ok().and_then(NonZeroUsize::new);
            }
            "max.connections" => self.max_connections = count(value)?,
            "max.connections.per.ip" => self.max_connections_per_ip = count(value)?,
            "num.network.threads" => self.network_threads = count_up_to(value)?,
            "connections.max.idle.ms" => self.idle_timeout = timeout(value)?,
            "kquota.connections.grace.ms" => self.connection_grace = timeout(value)?,
            "node.id" => {
                self.node_id = value
                    .parse()
                    .ok()
                    .and_then(NodeId::new)
                    .ok_or(Problem::WholeNumberAtLeast(0))?
            }
            "cluster.id" => self.cluster_id = non_empty(value)?.to_owned(),
            _ => return Err(None),
        }
        Ok(())
    }

    /// The `kquota.cluster.*` settings.
    #[cfg(feature = "cluster")]
    fn apply_cluster(&mut self, key: &str, value: &str) -> Result<(), Option<Problem>> {
        self.cluster.set(key, value)
    }

    /// The `kquota.cluster.*` settings, refused: this build has no cluster.
    #[cfg(not(feature = "cluster"))]
    fn apply_cluster(&mut self, key: &str, _value: &str) -> Result<(), Option<Problem>> {
        Err(SETTINGS.not_built(key, "kquotad", "cluster"))
    }

    /// The checked configuration: the listeners resolved through
    /// `listener.security.protocol.map` (a listener whose name is no protocol and is not mapped, a
    /// host that is not an IP address, and a name or a port other than 0 used twice are refused);
    /// a bounded `queued.max.request.bytes` at least `socket.request.max.bytes`, as Kafka asks; and
    /// the cluster's settings, an instance id or client properties only with a cluster.
    pub fn build(&self) -> Result<ServerConfig, ConfigError> {
        let listeners = self
            .listeners
            .resolve(&self.listener_protocol_map)
            .map_err(|problem| ConfigError::value("listeners", self.listeners.as_str(), problem))?;
        // What the listeners' protocols need: the files themselves are read when the server binds.
        let ssl = &self.ssl;
        let identity = ssl.keystore_location.is_some()
            || (ssl.keystore_certificate_chain.is_some() && ssl.keystore_key.is_some());
        if listeners.iter().any(|l| l.protocol.uses_tls()) && !identity {
            return Err(ConfigError::NoKeystore);
        }
        if listeners.iter().any(|l| l.protocol.uses_sasl()) && self.sasl_credentials_file.is_none()
        {
            return Err(ConfigError::NoCredentialsFile);
        }
        // A frame larger than the budget would wait for it forever.
        if let Some(queued) = self.queued_max_request_bytes {
            if queued < self.max_request_bytes.non_zero() {
                return Err(ConfigError::QueuedBelowRequestMax {
                    queued: queued.get(),
                    request_max: self.max_request_bytes.get(),
                });
            }
        }
        Ok(ServerConfig {
            #[cfg(feature = "cluster")]
            cluster: self
                .cluster
                .build(&SETTINGS, || format!("kquotad-{}", self.node_id.get()))?
                .map(|mut cluster| {
                    // kquotad answers the quota APIs and serves no clients' traffic: live among
                    // the instances, never holding a part of a `bps` limit.
                    cluster.serves_clients = false;
                    cluster
                }),
            listeners,
            advertised: self.advertised.clone(),
            data_dir: self.data_dir.clone(),
            metrics_listen: self.metrics_listen,
            policy: self.policy,
            broker_count: self.broker_count,
            producer_capacity: self.producer_capacity.map(Capacity::get),
            consumer_capacity: self.consumer_capacity.map(Capacity::get),
            max_request_bytes: self.max_request_bytes.non_zero(),
            sasl_max_receive_bytes: self.sasl_max_receive_bytes.non_zero(),
            queued_max_request_bytes: self.queued_max_request_bytes,
            max_connections: self.max_connections,
            max_connections_per_ip: self.max_connections_per_ip,
            network_threads: self.network_threads,
            idle_timeout: self.idle_timeout.get(),
            connection_grace: self.connection_grace.get(),
            node_id: self.node_id.get(),
            cluster_id: self.cluster_id.clone(),
            super_users: self.super_users.clone(),
            describe_allow_anonymous: self.describe_allow_anonymous,
            draft_alter_quotas: self.draft_alter_quotas,
            sasl_mechanisms: self.sasl_mechanisms.as_slice().to_vec(),
            sasl_credentials_file: self.sasl_credentials_file.clone(),
            failed_authentication_delay: self.failed_authentication_delay,
            ssl: self.ssl.clone(),
            log_format: self.log_format,
        })
    }
}

/// Reads `kquotad`'s properties file (`--config`) as Java's `Properties.load` does (escapes,
/// continuations, comments; see [`kquota_wire::properties`]). Returns the settings in file order,
/// one per key (a later line wins, as in Java), each with the line it starts on; values are
/// trimmed, as Kafka's `ConfigDef` trims them.
///
/// Refused, naming the line: a malformed `\uXXXX` escape, an empty key (`=value`), and a key that
/// is not followed by `=` or `:`. Java reads `key value` as a setting and `key` alone as one with
/// the empty value, but in a server's file either is far more often a slip (a line of prose, a
/// lost `=`) than meant, so `kquotad` asks for `key=value`, and `key=` for an empty value.
pub fn parse_properties(text: &str) -> Result<Vec<Property>, ConfigError> {
    kquota_host::read_settings(text).map_err(|e| ConfigError::Setting(e.into()))
}

#[cfg(test)]
mod tests {
    use kquota_wire::SecurityProtocol;

    use super::*;
    use crate::error::ValueProblem;

    fn refusal(key: &str, value: &str) -> ConfigError {
        ServerSettings::default().set(key, value).unwrap_err()
    }

    #[test]
    fn a_refused_value_names_its_key_its_value_and_why() {
        let e = refusal("max.connections", "0");
        assert!(
            matches!(&e, ConfigError::Setting(SettingError::Value { key, value, problem: Problem::WholeNumberAtLeast(1) })
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
            matches!(refusal("no.such.key", "1"), ConfigError::Setting(SettingError::Unknown { key, .. }) if key == "no.such.key")
        );
    }

    #[test]
    fn num_network_threads_is_one_to_256() {
        let mut config = ServerSettings::default();
        let cpus = std::thread::available_parallelism().map_or(1, NonZeroUsize::get);
        assert_eq!(
            config.network_threads.get(),
            cpus.min(kquota_host::MAX_NETWORK_THREADS as usize)
        );
        for n in ["1", "4", "256"] {
            config.set("num.network.threads", n).unwrap();
            assert_eq!(config.network_threads.get().to_string(), n);
        }
        for refused in ["0", "257", "-1", "two", ""] {
            assert_eq!(
                refusal("num.network.threads", refused).to_string(),
                format!("num.network.threads={refused}: must be a whole number between 1 and 256")
            );
        }
        // A refused value leaves the last good one.
        assert!(config.set("num.network.threads", "0").is_err());
        assert_eq!(config.network_threads.get(), 256);
    }

    #[test]
    fn the_values_set_are_the_built_configuration() {
        let mut c = ServerSettings::default();
        for (key, value) in [
            ("listeners", " PLAINTEXT://127.0.0.1:0 "),
            ("socket.request.max.bytes", "1048576"),
            ("queued.max.request.bytes", "2097152"),
            ("connections.max.idle.ms", "1500"),
            ("max.connections.per.ip", "7"),
            ("node.id", "3"),
            ("super.users", "User:admin;User:ops"),
            ("sasl.enabled.mechanisms", "PLAIN,PLAIN"),
            ("kquota.sub.quota.policy", "kafka"),
            ("kquota.producer.capacity.bytes.per.sec", "1e6"),
            ("kquota.metrics.listen", "127.0.0.1:9405"),
        ] {
            c.set(key, value).unwrap();
        }
        let b = c.build().unwrap();
        assert_eq!(b.listeners()[0].addr.to_string(), "127.0.0.1:0");
        assert_eq!(b.max_request_bytes.get(), 1_048_576);
        assert_eq!(
            b.queued_max_request_bytes.map(NonZeroUsize::get),
            Some(2_097_152)
        );
        assert_eq!(b.idle_timeout, Duration::from_millis(1500));
        assert_eq!(b.max_connections_per_ip.get(), 7);
        assert_eq!(b.node_id, 3);
        assert_eq!(
            b.super_users,
            [Principal::user("admin"), Principal::user("ops")]
        );
        assert_eq!(b.sasl_mechanisms, [SaslMechanism::Plain]);
        assert_eq!(b.policy(), SubQuotaPolicy::Kafka);
        assert_eq!(b.producer_capacity, Some(1e6));
        assert_eq!(b.metrics_listen, Some("127.0.0.1:9405".parse().unwrap()));
    }

    #[test]
    fn the_tables_defaults_are_the_defaults() {
        for s in SETTINGS.iter() {
            let Some(default) = s.default else { continue };
            if s.key.starts_with("kquota.cluster.") && !cfg!(feature = "cluster") {
                continue;
            }
            let mut set = ServerSettings::default();
            set.set(s.key, default).unwrap();
            assert_eq!(
                format!("{set:?}"),
                format!("{:?}", ServerSettings::default()),
                "{}",
                s.key
            );
        }
    }

    #[test]
    fn listeners_that_need_a_keystore_or_credentials_say_so_when_built() {
        let mut c = ServerSettings::default();
        c.set("listeners", "SSL://127.0.0.1:0").unwrap();
        assert!(matches!(c.build(), Err(ConfigError::NoKeystore)));
        c.set("ssl.keystore.certificate.chain", "inline").unwrap();
        assert!(matches!(c.build(), Err(ConfigError::NoKeystore)));
        c.set("ssl.keystore.key", "inline").unwrap();
        c.build().unwrap();
        c.set("listeners", "SASL_PLAINTEXT://127.0.0.1:0").unwrap();
        assert!(matches!(c.build(), Err(ConfigError::NoCredentialsFile)));
        c.set("sasl.credentials.file", "users.json").unwrap();
        c.build().unwrap();
    }

    #[test]
    fn kquota_cluster_bootstrap_servers_needs_the_cluster_feature() {
        let mut config = ServerSettings::default();
        let set = config.set("kquota.cluster.bootstrap.servers", "kafka:9092");
        #[cfg(feature = "cluster")]
        {
            set.unwrap();
            let built = config.build().unwrap();
            let cluster = built.cluster.unwrap();
            assert_eq!(cluster.bootstrap_servers, "kafka:9092");
            assert_eq!(cluster.instance_id, "kquotad-1");
        }
        #[cfg(not(feature = "cluster"))]
        {
            assert_eq!(
                set.unwrap_err().to_string(),
                "kquota.cluster.bootstrap.servers=kafka:9092: this kquotad was built without the \
                 `cluster` feature (build it with `--features cluster`)"
            );
            assert_eq!(
                format!("{config:?}"),
                format!("{:?}", ServerSettings::default())
            );
        }
    }

    #[test]
    fn the_request_budget_is_kafkas_queued_max_request_bytes() {
        let mut config = ServerSettings::default();
        assert_eq!(
            config.queued_max_request_bytes.map(NonZeroUsize::get),
            Some(268_435_456)
        );
        config.set("queued.max.request.bytes", "-1").unwrap();
        assert_eq!(config.queued_max_request_bytes, None);
        config.build().unwrap();
        config.set("queued.max.request.bytes", "1048576").unwrap();
        assert_eq!(
            config.build().unwrap_err().to_string(),
            "queued.max.request.bytes must be larger or equal to socket.request.max.bytes \
             (1048576 < 104857600); -1 for no limit"
        );
        config.set("socket.request.max.bytes", "1048576").unwrap();
        config.build().unwrap();
        assert_eq!(
            refusal("queued.max.request.bytes", "lots").to_string(),
            "queued.max.request.bytes=lots: must be a whole number of bytes (-1 for no limit)"
        );
    }

    #[test]
    fn listeners_resolve_through_the_protocol_map() {
        let mut config = ServerSettings::default();
        config
            .set("listeners", "INTERNAL://:9092,SSL://localhost:9093")
            .unwrap();
        let e = config.build().unwrap_err();
        assert_eq!(
            e.to_string(),
            "listeners=INTERNAL://:9092,SSL://localhost:9093: listener 'INTERNAL' is not a security protocol; map it with listener.security.protocol.map=INTERNAL:SASL_SSL (or another protocol)"
        );
        config
            .set("listener.security.protocol.map", "internal:PLAINTEXT")
            .unwrap();
        // The SSL listener needs a keystore; only its presence is checked here.
        config.set("ssl.keystore.location", "server.pem").unwrap();
        let built = config.build().unwrap();
        let listeners = built.listeners();
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
        let e = config.build().unwrap_err();
        let ConfigError::Setting(SettingError::Value { problem, .. }) = &e else {
            panic!("{e:?}")
        };
        let why = std::error::Error::source(problem).and_then(|s| s.downcast_ref::<ValueProblem>());
        assert_eq!(why, Some(&ValueProblem::PortTwice(1)));
    }

    #[test]
    fn principal_mapping_rules_are_read_as_they_are_set() {
        let mut config = ServerSettings::default();
        config
            .set(
                "ssl.principal.mapping.rules",
                "RULE:^CN=([^,]*).*$/$1/L,DEFAULT",
            )
            .unwrap();
        assert_eq!(
            config.ssl.principal_mapping.map("CN=Alice,O=Acme").unwrap(),
            "alice"
        );
        assert_eq!(
            config.ssl.principal_mapping.map("O=Acme").unwrap(),
            "O=Acme"
        );
        let e = refusal("ssl.principal.mapping.rules", "RULE:(a/b/Q");
        assert!(
            e.to_string().starts_with(
                "ssl.principal.mapping.rules=RULE:(a/b/Q: invalid rule 'RULE:(a/b/Q': "
            ),
            "{e}"
        );
        // A refused value leaves the rules as they were.
        assert!(config
            .set("ssl.principal.mapping.rules", "RULE:(a/b/Q")
            .is_err());
        assert_eq!(config.ssl.principal_mapping.map("CN=Bob").unwrap(), "bob");
    }

    #[test]
    fn lines_a_server_should_not_guess_at_are_refused_with_their_number() {
        // The reading is kquota-host's (tested there); kquotad's error keeps the line.
        assert!(matches!(
            parse_properties("listeners=PLAINTEXT://127.0.0.1:0\nthis line is wrong\n"),
            Err(ConfigError::Setting(SettingError::Line { line: 2, .. }))
        ));
        let e = parse_properties("a=1\nb=\\u12\n").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("line 2: malformed \\uXXXX escape"),
            "{e}"
        );
    }
}
