//! The proxy's settings by key, as a Kafka-style properties file names them, as `kquotad`'s are:
//! [`ProxyConfig::set`] checks each value as it is set, into the field that holds it;
//! [`ProxyConfig::finish`] builds what several settings make together (TLS from its files, the
//! cluster's settings) and checks that the settings work together. [`parse_properties`] reads a
//! file of them, and [`SETTINGS`] lists every key with the `kquota-proxy` flag that sets it and
//! its default.
//!
//! Keys are Kafka's where Kafka has the setting (`socket.request.max.bytes`, `max.connections`,
//! `super.users`, `ssl.client.auth`, ...), `kquotad`'s where `kquotad` has it (`kquota.data.dir`,
//! `kquota.cluster.*`, ...), and `kquota.proxy.*` for what only the proxy has.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::num::{NonZeroU32, NonZeroUsize};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use kquota::meter::MeterConfig;
use kquota::SubQuotaPolicy;
use kquota_wire::parse_super_users;
use kquota_wire::properties::Property;
use kquota_wire::tls::ClientAuth;

use crate::config::{HostPort, ProxyConfig, DEFAULT_DATA_DIR};
use kquota_host::SettingsFileError;

use crate::error::{ConfigError, Problem};
use crate::tls::{ClientTls, UpstreamTls};

/// One setting of the proxy: its key, the `kquota-proxy` flag that sets it, and its default.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Setting {
    /// The key, as a properties file names it. `kquota.cluster.client.*` stands for every key
    /// with that prefix.
    pub key: &'static str,
    /// The `kquota-proxy` flag that sets it (`--max-request-bytes`).
    pub flag: &'static str,
    /// The default, as the key's value would be written; `None`: not set unless given.
    pub default: Option<&'static str>,
}

const fn setting(key: &'static str, flag: &'static str, default: Option<&'static str>) -> Setting {
    Setting { key, flag, default }
}

// The keys of the settings that are given together (TLS), or that messages name.
const UPSTREAM: &str = "kquota.proxy.upstream";
const TLS_CERT: &str = "kquota.proxy.ssl.certificate.location";
const TLS_KEY: &str = "kquota.proxy.ssl.key.location";
const TLS_CLIENT_CA: &str = "ssl.truststore.location";
const CLIENT_AUTH: &str = "ssl.client.auth";
const MAPPING_RULES: &str = "ssl.principal.mapping.rules";
const UPSTREAM_TLS: &str = "kquota.proxy.upstream.ssl.enable";
const UPSTREAM_CA: &str = "kquota.proxy.upstream.ssl.truststore.location";
const UPSTREAM_CERT: &str = "kquota.proxy.upstream.ssl.certificate.location";
const UPSTREAM_KEY: &str = "kquota.proxy.upstream.ssl.key.location";
/// The prefix of the librdkafka properties of the proxy's own Kafka clients (`kquotad`'s).
const CLUSTER_CLIENT: &str = "kquota.cluster.client.";

/// Every setting of the proxy, in the order `kquota-proxy --help` lists them.
pub const SETTINGS: &[Setting] = &[
    setting(UPSTREAM, "--upstream", None),
    setting("kquota.proxy.listen", "--listen", Some("127.0.0.1:9092")),
    setting("kquota.proxy.listen.base", "--listen-base", None),
    setting("kquota.proxy.broker.map", "--broker-map", None),
    setting("kquota.proxy.advertised.host", "--advertised-host", None),
    // Limits.
    setting(
        "socket.request.max.bytes",
        "--max-request-bytes",
        Some("104857600"),
    ),
    setting(
        "kquota.proxy.max.response.bytes",
        "--max-response-bytes",
        Some("104857600"),
    ),
    setting(
        "kquota.proxy.max.in.flight.requests",
        "--max-in-flight",
        Some("32"),
    ),
    setting(
        "connections.max.idle.ms",
        "--idle-timeout-ms",
        Some("600000"),
    ),
    setting(
        "kquota.proxy.connect.timeout.ms",
        "--connect-timeout-ms",
        Some("10000"),
    ),
    setting("kquota.proxy.max.brokers", "--max-brokers", Some("1024")),
    setting("max.connections", "--max-connections", Some("10000")),
    setting("max.connections.per.ip", "--max-connections-per-ip", None),
    setting("num.network.threads", "--num-network-threads", None),
    setting(
        "kquota.connections.grace.ms",
        "--connection-grace-ms",
        Some("10000"),
    ),
    setting(
        "kquota.proxy.buffer.memory.bytes",
        "--buffer-memory-bytes",
        Some("268435456"),
    ),
    // Quotas.
    setting("kquota.data.dir", "--data-dir", Some(DEFAULT_DATA_DIR)),
    setting("kquota.proxy.store.enable", "--no-store", Some("true")),
    setting("super.users", "--super-users", None),
    setting(
        "kquota.describe.allow.anonymous",
        "--describe-allow-anonymous",
        Some("false"),
    ),
    setting(
        "kquota.draft.alter.quotas.enable",
        "--draft-alter-quotas",
        Some("false"),
    ),
    setting(
        "kquota.sub.quota.policy",
        "--sub-quota-policy",
        Some("kip55"),
    ),
    setting("kquota.broker.count", "--instance-count", Some("1")),
    setting(
        "kquota.producer.capacity.bytes.per.sec",
        "--producer-capacity",
        None,
    ),
    setting(
        "kquota.consumer.capacity.bytes.per.sec",
        "--consumer-capacity",
        None,
    ),
    setting("quota.window.num", "--quota-window-num", Some("11")),
    setting(
        "quota.window.size.seconds",
        "--quota-window-size-seconds",
        Some("1"),
    ),
    // Many proxies.
    setting(
        "kquota.cluster.bootstrap.servers",
        "--cluster-bootstrap",
        None,
    ),
    setting("kquota.cluster.instance.id", "--instance-id", None),
    setting("kquota.cluster.client.*", "--cluster-property", None),
    setting(
        "kquota.cluster.config.topic",
        "--cluster-config-topic",
        Some("_kquota_config"),
    ),
    setting(
        "kquota.cluster.replication.factor",
        "--cluster-replication-factor",
        Some("-1"),
    ),
    setting(
        "kquota.cluster.alter.timeout.ms",
        "--cluster-alter-timeout-ms",
        Some("10000"),
    ),
    // Metrics.
    setting("kquota.proxy.metrics.listen", "--metrics-listen", None),
    setting(
        "kquota.proxy.metrics.max.buckets",
        "--metrics-max-buckets",
        Some("1000"),
    ),
    // The log.
    setting("log.format", "--log-format", Some("text")),
    // TLS.
    setting(TLS_CERT, "--tls-cert", None),
    setting(TLS_KEY, "--tls-key", None),
    setting(TLS_CLIENT_CA, "--tls-client-ca", None),
    setting(CLIENT_AUTH, "--tls-client-auth", Some("none")),
    setting(
        MAPPING_RULES,
        "--ssl-principal-mapping-rules",
        Some("DEFAULT"),
    ),
    setting(UPSTREAM_TLS, "--upstream-tls", Some("false")),
    setting(UPSTREAM_CA, "--upstream-ca", None),
    setting(UPSTREAM_CERT, "--upstream-cert", None),
    setting(UPSTREAM_KEY, "--upstream-key", None),
];

/// The flag that sets `key`, if the binary has one (every key has).
pub(crate) fn flag_of(key: &str) -> Option<&'static str> {
    let key = match key.strip_prefix(CLUSTER_CLIENT) {
        Some(_) => "kquota.cluster.client.*",
        None => key,
    };
    SETTINGS.iter().find(|s| s.key == key).map(|s| s.flag)
}

/// What [`ProxyConfig::set`] keeps for [`ProxyConfig::finish`]: the TLS files and modes (a
/// `ClientTls` needs all of them at once), the cluster's settings (its instance id defaults to
/// one made from the listener), and the settings two keys share (the store).
#[derive(Clone, Debug)]
pub(crate) struct Deferred {
    /// A key whose effect `finish` makes was set since `finish` last ran; `Proxy::bind` refuses
    /// the configuration until it runs again.
    pub(crate) unfinished: bool,
    /// `kquota.data.dir`, kept while `kquota.proxy.store.enable=false` sets `data_dir` to `None`.
    data_dir: PathBuf,
    /// `kquota.proxy.store.enable=false`.
    no_store: bool,
    tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
    tls_client_ca: Option<PathBuf>,
    client_auth: ClientAuth,
    mapping_rules: String,
    upstream_tls: bool,
    upstream_ca: Option<PathBuf>,
    upstream_cert: Option<PathBuf>,
    upstream_key: Option<PathBuf>,
    #[cfg(feature = "cluster")]
    cluster: ClusterSettings,
}

impl Default for Deferred {
    fn default() -> Self {
        Deferred {
            unfinished: false,
            data_dir: PathBuf::from(DEFAULT_DATA_DIR),
            no_store: false,
            tls_cert: None,
            tls_key: None,
            tls_client_ca: None,
            client_auth: ClientAuth::None,
            mapping_rules: "DEFAULT".to_owned(),
            upstream_tls: false,
            upstream_ca: None,
            upstream_cert: None,
            upstream_key: None,
            #[cfg(feature = "cluster")]
            cluster: ClusterSettings::default(),
        }
    }
}

/// The `kquota.cluster.*` settings, made into a `ClusterConfig` by `finish`.
#[cfg(feature = "cluster")]
#[derive(Clone, Debug)]
struct ClusterSettings {
    bootstrap: Option<String>,
    instance_id: Option<String>,
    client: BTreeMap<String, String>,
    config_topic: String,
    replication_factor: i32,
    alter_timeout: Duration,
}

#[cfg(feature = "cluster")]
impl Default for ClusterSettings {
    fn default() -> Self {
        let defaults = kquota_cluster::ClusterConfig::new("", "");
        ClusterSettings {
            bootstrap: None,
            instance_id: None,
            client: BTreeMap::new(),
            config_topic: defaults.config_topic,
            replication_factor: defaults.replication_factor,
            alter_timeout: defaults.alter_timeout,
        }
    }
}

/// A number, if `value` is one.
fn number<T: std::str::FromStr>(value: &str) -> Option<T> {
    value.parse().ok()
}

/// `true` or `false`.
fn boolean(value: &str) -> Result<bool, Problem> {
    match value {
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
fn frame_size(value: &str) -> Result<usize, Problem> {
    number::<i32>(value)
        .filter(|n| *n > 0)
        .map(|n| n as usize)
        .ok_or(Problem::FrameSize)
}

/// A count of at least 1.
fn count(value: &str) -> Result<usize, Problem> {
    number::<NonZeroUsize>(value)
        .map(NonZeroUsize::get)
        .ok_or(Problem::WholeNumberAtLeast(1))
}

/// Milliseconds, at least `min`.
fn millis(value: &str, min: u32) -> Result<Duration, Problem> {
    number::<u64>(value)
        .filter(|n| *n >= u64::from(min))
        .map(Duration::from_millis)
        .ok_or(Problem::Milliseconds(min))
}

/// An IP address and a port.
fn ip_port(value: &str) -> Result<SocketAddr, Problem> {
    value.parse().map_err(|_| Problem::NotIpPort)
}

/// A bytes/s capacity: a finite number above 0.
fn capacity(value: &str) -> Result<f64, Problem> {
    number::<f64>(value)
        .filter(|v| v.is_finite() && *v > 0.0)
        .ok_or(Problem::PositiveNumber)
}

/// A PEM file's path: it must open now, so that a missing file is named by the line or flag that
/// gave it; what is in it is read when the configuration is finished.
fn pem_file(value: &str) -> Result<PathBuf, Problem> {
    let path = PathBuf::from(non_empty(value)?);
    std::fs::File::open(&path).map_err(Problem::Unreadable)?;
    Ok(path)
}

/// The broker map: `NODE=IP:PORT` entries separated by commas, no node twice, no listener (other
/// than port 0) for two nodes. Empty: no entries.
fn broker_map(value: &str) -> Result<BTreeMap<i32, SocketAddr>, Problem> {
    let mut map = BTreeMap::new();
    for item in value.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (node, addr) = item
            .split_once('=')
            .ok_or_else(|| Problem::NotNodeAddress(item.to_owned()))?;
        let node: i32 = number(node.trim())
            .filter(|n| *n >= 0)
            .ok_or_else(|| Problem::NotNodeId(item.to_owned()))?;
        let addr: SocketAddr =
            number(addr.trim()).ok_or_else(|| Problem::NotNodeAddress(item.to_owned()))?;
        if addr.port() != 0 && map.values().any(|a| *a == addr) {
            return Err(Problem::AddressTwice(addr));
        }
        if map.insert(node, addr).is_some() {
            return Err(Problem::NodeTwice(node));
        }
    }
    Ok(map)
}

/// Another crate's parser refused the value: its error is kept as the source.
fn refused(e: impl std::error::Error + Send + Sync + 'static) -> Problem {
    Problem::Refused(Box::new(e))
}

impl ProxyConfig {
    /// Applies one `key=value` setting, checked as it is set: an unknown key, or a value the
    /// key cannot hold, is an error that names both, and leaves the configuration as it was.
    /// Values are trimmed, as Kafka's `ConfigDef` trims them. A key set again replaces its value
    /// (`kquota.proxy.broker.map` replaces the whole map; each `kquota.cluster.client.KEY` is a
    /// key of its own). [`SETTINGS`] lists the keys; `docs/proxy-settings.md` says what each does.
    ///
    /// The TLS settings and the `kquota.cluster.*` settings take effect in
    /// [`ProxyConfig::finish`], which must run before the configuration is bound.
    ///
    /// ```
    /// use kquota_proxy::ProxyConfig;
    /// let mut config = ProxyConfig::default();
    /// config.set("kquota.proxy.upstream", "kafka-1:9092")?;
    /// config.set("kquota.proxy.listen.base", "127.0.0.1:19000")?;
    /// config.set("max.connections", "5000")?;
    /// assert_eq!(
    ///     config.set("max.connections", "none").unwrap_err().to_string(),
    ///     "max.connections=none: must be a whole number ≥ 1"
    /// );
    /// config.finish()?;
    /// assert_eq!(config.max_connections, 5000);
    /// # Ok::<(), kquota_proxy::ConfigError>(())
    /// ```
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), ConfigError> {
        self.apply(key, value.trim()).map_err(|e| match e {
            Some(problem) => ConfigError::value(key, value, problem),
            None => ConfigError::UnknownKey(key.to_owned()),
        })
    }

    /// [`ProxyConfig::set`], with the value trimmed; `Err(None)` for an unknown key.
    fn apply(&mut self, key: &str, value: &str) -> Result<(), Option<Problem>> {
        if key.starts_with("kquota.cluster.") {
            return self.apply_cluster(key, value);
        }
        let d = &mut self.deferred;
        match key {
            UPSTREAM => {
                self.upstream = value
                    .parse::<HostPort>()
                    .map_err(|_| Problem::NotHostPort)?
            }
            "kquota.proxy.listen" => self.listen = ip_port(value)?,
            "kquota.proxy.listen.base" => self.listen_base = Some(ip_port(value)?),
            "kquota.proxy.broker.map" => self.broker_map = broker_map(value)?,
            "kquota.proxy.advertised.host" => {
                self.advertised_host = Some(non_empty(value)?.to_owned())
            }
            "socket.request.max.bytes" => self.max_request_bytes = frame_size(value)?,
            "kquota.proxy.max.response.bytes" => self.max_response_bytes = frame_size(value)?,
            "kquota.proxy.max.in.flight.requests" => self.max_in_flight = count(value)?,
            "connections.max.idle.ms" => self.idle_timeout = millis(value, 1)?,
            "kquota.proxy.connect.timeout.ms" => self.connect_timeout = millis(value, 1)?,
            "kquota.proxy.max.brokers" => self.max_brokers = count(value)?,
            "max.connections" => self.max_connections = count(value)?,
            "max.connections.per.ip" => self.max_connections_per_ip = count(value)?,
            "num.network.threads" => self.network_threads = count(value)?,
            "kquota.connections.grace.ms" => self.connection_grace = millis(value, 1)?,
            "kquota.proxy.buffer.memory.bytes" => self.buffer_memory = count(value)?,
            "kquota.data.dir" => {
                d.data_dir = PathBuf::from(non_empty(value)?);
                if !d.no_store {
                    self.data_dir = Some(d.data_dir.clone());
                }
            }
            "kquota.proxy.store.enable" => {
                d.no_store = !boolean(value)?;
                self.data_dir = (!d.no_store).then(|| d.data_dir.clone());
            }
            "super.users" => self.super_users = parse_super_users(value).map_err(refused)?,
            "kquota.describe.allow.anonymous" => self.describe_allow_anonymous = boolean(value)?,
            "kquota.draft.alter.quotas.enable" => self.draft_alter_quotas = boolean(value)?,
            "kquota.sub.quota.policy" => {
                self.policy = value.parse::<SubQuotaPolicy>().map_err(refused)?
            }
            "kquota.broker.count" => {
                self.instance_count =
                    number::<NonZeroU32>(value).ok_or(Problem::WholeNumberAtLeast(1))?
            }
            "kquota.producer.capacity.bytes.per.sec" => {
                self.producer_capacity = Some(capacity(value)?)
            }
            "kquota.consumer.capacity.bytes.per.sec" => {
                self.consumer_capacity = Some(capacity(value)?)
            }
            "quota.window.num" => {
                let samples = number::<u32>(value)
                    .filter(|n| *n >= 1)
                    .ok_or(Problem::WholeNumberAtLeast(1))?;
                self.window(Some(samples), None)?
            }
            "quota.window.size.seconds" => {
                let seconds = number::<u64>(value)
                    .filter(|n| *n >= 1)
                    .ok_or(Problem::WholeNumberAtLeast(1))?;
                self.window(None, Some(Duration::from_secs(seconds)))?
            }
            "kquota.proxy.metrics.listen" => self.metrics_listen = Some(ip_port(value)?),
            "log.format" => self.log_format = value.parse().map_err(refused)?,
            "kquota.proxy.metrics.max.buckets" => self.metrics_max_buckets = count(value)?,
            TLS_CERT => d.tls_cert = Some(pem_file(value)?),
            TLS_KEY => d.tls_key = Some(pem_file(value)?),
            TLS_CLIENT_CA => d.tls_client_ca = Some(pem_file(value)?),
            CLIENT_AUTH => {
                d.client_auth = value
                    .parse::<ClientAuth>()
                    .map_err(|_| Problem::ClientAuth)?
            }
            // Its rules are read with the TLS files, in `finish` (the parser is `ClientTls`'s).
            MAPPING_RULES => d.mapping_rules = non_empty(value)?.to_owned(),
            UPSTREAM_TLS => d.upstream_tls = boolean(value)?,
            UPSTREAM_CA => d.upstream_ca = Some(pem_file(value)?),
            UPSTREAM_CERT => d.upstream_cert = Some(pem_file(value)?),
            UPSTREAM_KEY => d.upstream_key = Some(pem_file(value)?),
            _ => return Err(None),
        }
        if [
            TLS_CERT,
            TLS_KEY,
            TLS_CLIENT_CA,
            CLIENT_AUTH,
            MAPPING_RULES,
            UPSTREAM_TLS,
            UPSTREAM_CA,
            UPSTREAM_CERT,
            UPSTREAM_KEY,
        ]
        .contains(&key)
        {
            self.deferred.unfinished = true;
        }
        Ok(())
    }

    /// The quota window with `samples` or `size` changed, checked by the meter's builder now.
    fn window(&mut self, samples: Option<u32>, size: Option<Duration>) -> Result<(), Problem> {
        let old = self.meter;
        let mut builder = MeterConfig::builder()
            .window_samples(samples.unwrap_or(old.window_samples()))
            .window_size(size.unwrap_or(old.window_size()))
            .idle_expiry(old.idle_expiry())
            .strict_mutations(old.strict_mutations());
        // A maximum throttle of the whole window is the default, which follows the window; any
        // other was set on purpose, and is kept.
        if old.max_throttle() != old.window_size() * old.window_samples() {
            builder = builder.max_throttle(old.max_throttle());
        }
        self.meter = builder.build().map_err(refused)?;
        Ok(())
    }

    /// The `kquota.cluster.*` settings.
    #[cfg(feature = "cluster")]
    fn apply_cluster(&mut self, key: &str, value: &str) -> Result<(), Option<Problem>> {
        let c = &mut self.deferred.cluster;
        match key {
            "kquota.cluster.bootstrap.servers" => c.bootstrap = Some(non_empty(value)?.to_owned()),
            "kquota.cluster.instance.id" => c.instance_id = Some(non_empty(value)?.to_owned()),
            "kquota.cluster.config.topic" => c.config_topic = non_empty(value)?.to_owned(),
            "kquota.cluster.replication.factor" => {
                c.replication_factor = number::<i16>(value)
                    .filter(|n| *n == -1 || *n > 0)
                    .ok_or(Problem::ReplicationFactor)?
                    .into()
            }
            "kquota.cluster.alter.timeout.ms" => c.alter_timeout = millis(value, 0)?,
            _ => match key.strip_prefix(CLUSTER_CLIENT) {
                Some(property) if !property.is_empty() => {
                    c.client.insert(property.to_owned(), value.to_owned());
                }
                _ => return Err(None),
            },
        }
        self.deferred.unfinished = true;
        Ok(())
    }

    /// The `kquota.cluster.*` settings, refused: this build has no cluster.
    #[cfg(not(feature = "cluster"))]
    fn apply_cluster(&mut self, key: &str, _value: &str) -> Result<(), Option<Problem>> {
        if flag_of(key).is_some() && key != CLUSTER_CLIENT {
            return Err(Some(Problem::NotBuilt("cluster")));
        }
        Err(None)
    }

    /// Builds what [`ProxyConfig::set`] was given for several settings at once, and checks that
    /// the settings work together: the upstream is given; the TLS files (read now, and named by
    /// their key and flag in errors) come with what they need (a certificate with its key; client
    /// CAs, `ssl.client.auth` and `ssl.principal.mapping.rules` with a certificate; the upstream's
    /// CA with `kquota.proxy.upstream.ssl.enable=true`); `kquota.cluster.instance.id` and
    /// `kquota.cluster.client.*` come with `kquota.cluster.bootstrap.servers`; and what
    /// [`Proxy::bind`](crate::Proxy::bind) checks (broker listeners, the buffer memory) holds.
    ///
    /// Settings made by assigning fields are kept: TLS and the cluster are only replaced when
    /// their keys were set.
    pub fn finish(&mut self) -> Result<(), ConfigError> {
        if self.upstream.host.is_empty() {
            return Err(ConfigError::Missing(UPSTREAM));
        }
        self.finish_client_tls()?;
        self.finish_upstream_tls()?;
        #[cfg(feature = "cluster")]
        self.finish_cluster()?;
        self.deferred.unfinished = false;
        self.check().map_err(ConfigError::Conflict)
    }

    fn finish_client_tls(&mut self) -> Result<(), ConfigError> {
        let d = &self.deferred;
        let needs = |key, needs| Err(ConfigError::Needs { key, needs });
        match (&d.tls_cert, &d.tls_key) {
            (Some(cert), Some(key)) => {
                let tls = ClientTls::from_files(
                    cert,
                    key,
                    d.tls_client_ca.as_deref(),
                    d.client_auth,
                    &d.mapping_rules,
                )?;
                self.client_tls = Some(Arc::new(tls));
                Ok(())
            }
            (Some(_), None) => needs(TLS_CERT, TLS_KEY),
            (None, Some(_)) => needs(TLS_KEY, TLS_CERT),
            // Without TLS these mean nothing: a client-auth mode given alone would leave the
            // listeners open while the operator believes them closed.
            (None, None) if d.tls_client_ca.is_some() => needs(TLS_CLIENT_CA, TLS_CERT),
            (None, None) if d.client_auth != ClientAuth::None => needs(CLIENT_AUTH, TLS_CERT),
            (None, None) if d.mapping_rules != "DEFAULT" => needs(MAPPING_RULES, TLS_CERT),
            (None, None) => Ok(()),
        }
    }

    fn finish_upstream_tls(&mut self) -> Result<(), ConfigError> {
        let d = &self.deferred;
        let needs = |key, needs| Err(ConfigError::Needs { key, needs });
        let client = match (&d.upstream_cert, &d.upstream_key) {
            (Some(cert), Some(key)) => Some((cert.as_path(), key.as_path())),
            (Some(_), None) => return needs(UPSTREAM_CERT, UPSTREAM_KEY),
            (None, Some(_)) => return needs(UPSTREAM_KEY, UPSTREAM_CERT),
            (None, None) => None,
        };
        match (d.upstream_tls, &d.upstream_ca) {
            (true, Some(ca)) => {
                self.upstream_tls = Some(Arc::new(UpstreamTls::from_files(ca, client)?));
                Ok(())
            }
            (true, None) => needs(UPSTREAM_TLS, UPSTREAM_CA),
            (false, Some(_)) => needs(UPSTREAM_CA, UPSTREAM_TLS),
            (false, None) if client.is_some() => needs(UPSTREAM_CERT, UPSTREAM_TLS),
            (false, None) => Ok(()),
        }
    }

    #[cfg(feature = "cluster")]
    fn finish_cluster(&mut self) -> Result<(), ConfigError> {
        let c = &self.deferred.cluster;
        let Some(bootstrap) = &c.bootstrap else {
            let needs = "kquota.cluster.bootstrap.servers";
            if c.instance_id.is_some() {
                return Err(ConfigError::Needs {
                    key: "kquota.cluster.instance.id",
                    needs,
                });
            }
            if !c.client.is_empty() {
                return Err(ConfigError::Needs {
                    key: "kquota.cluster.client.*",
                    needs,
                });
            }
            return Ok(());
        };
        let id = c
            .instance_id
            .clone()
            .unwrap_or_else(|| default_instance_id(self.listen));
        let mut cluster = kquota_cluster::ClusterConfig::new(bootstrap.clone(), id);
        cluster.client_properties = c.client.clone();
        cluster.config_topic = c.config_topic.clone();
        cluster.replication_factor = c.replication_factor;
        cluster.alter_timeout = c.alter_timeout;
        self.cluster = Some(cluster);
        Ok(())
    }
}

/// The default instance id: this host's name and the bootstrap listener's port.
#[cfg(feature = "cluster")]
fn default_instance_id(listen: SocketAddr) -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "kquota-proxy".to_owned());
    format!("{host}:{}", listen.port())
}

/// Reads a properties file of the proxy's settings (`kquota-proxy --config`) as Java's
/// `Properties.load` does (escapes, continuations, comments; see [`kquota_wire::properties`]),
/// as `kquotad` reads its own. Returns the settings in file order, one per key (a later line
/// wins, as in Java), each with the line it starts on; values are trimmed, as Kafka's `ConfigDef`
/// trims them. Keys are not checked here: [`ProxyConfig::set`] checks each.
///
/// Refused, naming the line: a malformed `\uXXXX` escape ([`ConfigError::Properties`]), an empty
/// key (`=value`), and a key that is not followed by `=` or `:` ([`ConfigError::Line`]). Java reads
/// `key value` as a setting and `key` alone as one with the empty value, but in a proxy's file
/// either is far more often a slip (a line of prose, a lost `=`) than meant, so `kquota-proxy`
/// asks for `key=value`, and `key=` for an empty value.
pub fn parse_properties(text: &str) -> Result<Vec<Property>, ConfigError> {
    kquota_host::read_settings(text).map_err(|e| match e {
        SettingsFileError::Line { line, problem } => ConfigError::Line { line, problem },
        e => ConfigError::Properties(e.into()),
    })
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use kquota_wire::Principal;
    use rcgen::{BasicConstraints, CertificateParams, DistinguishedName, DnType, IsCa, KeyPair};

    use super::*;
    use crate::error::ProxyError;

    /// A directory of files for one test, removed when dropped.
    struct Dir(PathBuf);

    impl Dir {
        fn new() -> Dir {
            static NEXT: AtomicUsize = AtomicUsize::new(0);
            let path = std::env::temp_dir().join(format!(
                "kquota-proxy-settings-{}-{}",
                std::process::id(),
                NEXT.fetch_add(1, Ordering::Relaxed)
            ));
            std::fs::create_dir_all(&path).unwrap();
            Dir(path)
        }

        fn write(&self, name: &str, text: &str) -> String {
            let path = self.0.join(name);
            std::fs::write(&path, text).unwrap();
            path.to_str().unwrap().to_owned()
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// A CA and a certificate it signed for 127.0.0.1, as files: (ca, cert, key).
    fn pki(dir: &Dir) -> (String, String, String) {
        let mut params = CertificateParams::default();
        params.distinguished_name = DistinguishedName::new();
        params
            .distinguished_name
            .push(DnType::CommonName, "kquota test CA");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca_key = KeyPair::generate().unwrap();
        let ca = params.self_signed(&ca_key).unwrap();
        let params = CertificateParams::new(vec!["127.0.0.1".to_owned()]).unwrap();
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &ca, &ca_key).unwrap();
        (
            dir.write("ca.pem", &ca.pem()),
            dir.write("cert.pem", &cert.pem()),
            dir.write("key.pem", &key.serialize_pem()),
        )
    }

    /// A configuration that finishes: an upstream and a listen base.
    fn base() -> ProxyConfig {
        let mut config = ProxyConfig::default();
        config.set(UPSTREAM, "kafka:9092").unwrap();
        config
            .set("kquota.proxy.listen.base", "127.0.0.1:0")
            .unwrap();
        config
    }

    fn refusal(key: &str, value: &str) -> String {
        ProxyConfig::default()
            .set(key, value)
            .unwrap_err()
            .to_string()
    }

    const NOT_BUILT: &str = "this kquota-proxy was built without the `cluster` feature (build it \
                             with `--features cluster`)";

    #[test]
    fn every_key_takes_a_good_value_and_refuses_a_bad_one_with_its_reason() {
        let dir = Dir::new();
        let pem = dir.write("any.pem", "read in finish");
        let missing = dir.0.join("missing.pem").to_str().unwrap().to_owned();
        let no_file = format!("cannot read: {}", std::io::Error::from_raw_os_error(2));
        let (pem, missing, no_file) = (pem.as_str(), missing.as_str(), no_file.as_str());
        let whole = "must be a whole number ≥ 1";
        let ms1 = "must be a whole number of milliseconds ≥ 1";
        let frame = "must be a whole number between 1 and 2147483647";
        let boolean = "must be true or false";
        let ip_port = "must be an IP address and a port, IP:PORT (IPv6 in brackets: [::1]:9092)";
        let cluster = cfg!(feature = "cluster");
        // (key, a good value, a bad value, why the bad one is refused)
        let cases: Vec<(&str, &str, &str, &str)> = vec![
            (
                UPSTREAM,
                "kafka-1.example:9092",
                "kafka-1",
                "must be host:port (an IPv6 address in brackets: [::1]:9092)",
            ),
            (
                "kquota.proxy.listen",
                "127.0.0.1:0",
                "localhost:9092",
                ip_port,
            ),
            ("kquota.proxy.listen.base", "[::1]:19000", "19000", ip_port),
            (
                "kquota.proxy.broker.map",
                "1=127.0.0.1:19001, 2=127.0.0.1:19002",
                "1=127.0.0.1:19001,1=127.0.0.1:19002",
                "node 1 is mapped twice",
            ),
            (
                "kquota.proxy.advertised.host",
                "proxy.example",
                "",
                "must not be empty",
            ),
            ("socket.request.max.bytes", "1048576", "2147483648", frame),
            ("kquota.proxy.max.response.bytes", "2147483647", "0", frame),
            ("kquota.proxy.max.in.flight.requests", "8", "0", whole),
            ("connections.max.idle.ms", "1000", "0", ms1),
            ("kquota.proxy.connect.timeout.ms", "500", "-1", ms1),
            ("kquota.proxy.max.brokers", "16", "many", whole),
            ("max.connections", "100", "0", whole),
            ("max.connections.per.ip", "10", "-3", whole),
            ("num.network.threads", "4", "0", whole),
            ("kquota.connections.grace.ms", "2000", "1.5", ms1),
            ("kquota.proxy.buffer.memory.bytes", "1073741824", "0", whole),
            (
                "kquota.data.dir",
                "/var/lib/kquota-proxy",
                "",
                "must not be empty",
            ),
            ("kquota.proxy.store.enable", "false", "no", boolean),
            (
                "super.users",
                "User:admin; User:ops",
                "alice",
                "'alice' is not a principal; write Type:name, e.g. User:alice",
            ),
            ("kquota.describe.allow.anonymous", "true", "yes", boolean),
            ("kquota.draft.alter.quotas.enable", "true", "1", boolean),
            (
                "kquota.sub.quota.policy",
                "kafka",
                "strict",
                "unknown sub-quota policy 'strict' (expected kip55 or kafka)",
            ),
            ("kquota.broker.count", "3", "0", whole),
            (
                "kquota.producer.capacity.bytes.per.sec",
                "104857600",
                "-5",
                "must be a number > 0",
            ),
            (
                "kquota.consumer.capacity.bytes.per.sec",
                "1e8",
                "inf",
                "must be a number > 0",
            ),
            ("quota.window.num", "5", "0", whole),
            ("quota.window.size.seconds", "2", "0.5", whole),
            (
                "kquota.cluster.bootstrap.servers",
                "kafka-1:9092,kafka-2:9092",
                "",
                if cluster {
                    "must not be empty"
                } else {
                    NOT_BUILT
                },
            ),
            (
                "kquota.cluster.instance.id",
                "proxy-1",
                "",
                if cluster {
                    "must not be empty"
                } else {
                    NOT_BUILT
                },
            ),
            (
                "kquota.cluster.client.*",
                "SSL",
                "",
                if cluster { "" } else { NOT_BUILT },
            ),
            (
                "kquota.cluster.config.topic",
                "_quotas",
                "",
                if cluster {
                    "must not be empty"
                } else {
                    NOT_BUILT
                },
            ),
            (
                "kquota.cluster.replication.factor",
                "3",
                "0",
                if cluster {
                    "must be -1 (the cluster's default) or a whole number between 1 and 32767"
                } else {
                    NOT_BUILT
                },
            ),
            (
                "kquota.cluster.alter.timeout.ms",
                "0",
                "soon",
                if cluster {
                    "must be a whole number of milliseconds"
                } else {
                    NOT_BUILT
                },
            ),
            (
                "kquota.proxy.metrics.listen",
                "127.0.0.1:9404",
                "127.0.0.1",
                ip_port,
            ),
            ("kquota.proxy.metrics.max.buckets", "10", "0", whole),
            (
                "log.format",
                "json",
                "xml",
                "unknown log format 'xml' (expected text or json)",
            ),
            (TLS_CERT, pem, missing, no_file),
            (TLS_KEY, pem, missing, no_file),
            (TLS_CLIENT_CA, pem, missing, no_file),
            (
                CLIENT_AUTH,
                "required",
                "sometimes",
                "expected required, requested or none",
            ),
            (
                MAPPING_RULES,
                "RULE:^CN=(.*?),.*$/$1/L,DEFAULT",
                "",
                "must not be empty",
            ),
            (UPSTREAM_TLS, "true", "on", boolean),
            (UPSTREAM_CA, pem, missing, no_file),
            (UPSTREAM_CERT, pem, missing, no_file),
            (UPSTREAM_KEY, pem, "", "must not be empty"),
        ];
        let tested: Vec<&str> = cases.iter().map(|c| c.0).collect();
        let listed: Vec<&str> = SETTINGS.iter().map(|s| s.key).collect();
        assert_eq!(tested, listed, "every key is tested, in the table's order");
        for (key, good, bad, why) in cases {
            // The prefix's case: one property of it.
            let key = key.replace('*', "security.protocol");
            let mut config = ProxyConfig::default();
            let before = format!("{config:?}");
            match config.set(&key, good) {
                Ok(()) => assert!(cluster || !key.starts_with("kquota.cluster."), "{key}"),
                Err(e) => {
                    assert!(!cluster && key.starts_with("kquota.cluster."), "{key}: {e}");
                    assert_eq!(e.to_string(), format!("{key}={good}: {NOT_BUILT}"));
                }
            }
            if why.is_empty() {
                // Any value of a librdkafka property is librdkafka's to check.
                config.set(&key, bad).unwrap();
                continue;
            }
            let mut refused = ProxyConfig::default();
            let e = refused.set(&key, bad).unwrap_err();
            assert!(
                matches!(&e, ConfigError::Value { key: k, value, .. } if *k == key && value == bad),
                "{e:?}"
            );
            assert_eq!(e.to_string(), format!("{key}={bad}: {why}"));
            assert_eq!(e.key(), Some(key.as_str()));
            // A refused value changes nothing.
            assert_eq!(format!("{refused:?}"), before, "{key}");
        }
    }

    #[test]
    fn the_values_set_are_the_fields() {
        let mut c = base();
        for (key, value) in [
            ("kquota.proxy.listen", " 127.0.0.2:9093 "),
            ("kquota.proxy.broker.map", "2=127.0.0.1:19002,1=[::1]:19001"),
            ("socket.request.max.bytes", "1048576"),
            ("connections.max.idle.ms", "1500"),
            ("max.connections.per.ip", "7"),
            ("super.users", "User:admin;User:ops"),
            ("kquota.sub.quota.policy", "kafka"),
            ("kquota.broker.count", "3"),
            ("kquota.producer.capacity.bytes.per.sec", "1e6"),
            ("quota.window.num", "5"),
            ("quota.window.size.seconds", "2"),
            ("kquota.proxy.metrics.listen", "127.0.0.1:9404"),
        ] {
            c.set(key, value).unwrap();
        }
        c.finish().unwrap();
        assert_eq!(c.listen, "127.0.0.2:9093".parse().unwrap());
        assert_eq!(
            c.broker_map
                .iter()
                .map(|(n, a)| (*n, a.to_string()))
                .collect::<Vec<_>>(),
            [
                (1, "[::1]:19001".to_owned()),
                (2, "127.0.0.1:19002".to_owned())
            ]
        );
        assert_eq!(c.max_request_bytes, 1_048_576);
        assert_eq!(c.idle_timeout, Duration::from_millis(1500));
        assert_eq!(c.max_connections_per_ip, 7);
        assert_eq!(
            c.super_users,
            [Principal::user("admin"), Principal::user("ops")]
        );
        assert_eq!(c.policy, SubQuotaPolicy::Kafka);
        assert_eq!(c.instance_count.get(), 3);
        assert_eq!(c.producer_capacity, Some(1e6));
        assert_eq!(c.meter.window_samples(), 5);
        assert_eq!(c.meter.window_size(), Duration::from_secs(2));
        // The throttle for a limit of 0 follows the window, as by default.
        assert_eq!(c.meter.max_throttle(), Duration::from_secs(10));
        assert_eq!(c.metrics_listen, Some("127.0.0.1:9404".parse().unwrap()));
    }

    #[test]
    fn the_tables_defaults_are_the_defaults() {
        for s in SETTINGS {
            let Some(default) = s.default else { continue };
            if s.key.starts_with("kquota.cluster.") && !cfg!(feature = "cluster") {
                continue;
            }
            let (mut set, mut untouched) = (base(), base());
            set.set(s.key, default).unwrap();
            set.finish().unwrap();
            untouched.finish().unwrap();
            assert_eq!(format!("{set:?}"), format!("{untouched:?}"), "{}", s.key);
        }
        assert_eq!(
            ProxyConfig::default().listen.to_string(),
            SETTINGS[1].default.unwrap()
        );
        #[cfg(feature = "cluster")]
        {
            let topic = SETTINGS
                .iter()
                .find(|s| s.key == "kquota.cluster.config.topic");
            assert_eq!(
                topic.unwrap().default,
                Some(kquota_cluster::DEFAULT_CONFIG_TOPIC)
            );
        }
    }

    #[test]
    fn unknown_keys_are_refused() {
        // A misspelt key is told the key meant, as clap tells a misspelt flag.
        for (key, meant) in [
            ("max.connection", Some("max.connections")),
            ("kquota.proxy.listen.bsae", Some("kquota.proxy.listen.base")),
            // The family's pattern, which says a client property's name goes after the dot.
            ("kquota.cluster.client.", Some("kquota.cluster.client.*")),
            ("kquota.cluster.bootstrap", None),
            ("log.retention.hours", None),
            ("", None),
        ] {
            let e = ProxyConfig::default().set(key, "1").unwrap_err();
            assert!(
                matches!(&e, ConfigError::UnknownKey(k) if k == key),
                "{e:?}"
            );
            let said = match meant {
                Some(k) => format!("unknown setting '{key}' (did you mean {k}?)"),
                None => format!("unknown setting '{key}'"),
            };
            assert_eq!(e.to_string(), said);
        }
    }

    #[test]
    fn broker_map_entries_are_checked_one_by_one() {
        assert_eq!(
            refusal("kquota.proxy.broker.map", "1=127.0.0.1:1,2"),
            "kquota.proxy.broker.map=1=127.0.0.1:1,2: '2' is not NODE=IP:PORT"
        );
        assert_eq!(
            refusal("kquota.proxy.broker.map", "-1=127.0.0.1:1"),
            "kquota.proxy.broker.map=-1=127.0.0.1:1: '-1=127.0.0.1:1': the node must be a whole \
             number ≥ 0"
        );
        assert_eq!(
            refusal("kquota.proxy.broker.map", "1=kafka:1"),
            "kquota.proxy.broker.map=1=kafka:1: '1=kafka:1' is not NODE=IP:PORT"
        );
        assert_eq!(
            refusal("kquota.proxy.broker.map", "1=127.0.0.1:5,2=127.0.0.1:5"),
            "kquota.proxy.broker.map=1=127.0.0.1:5,2=127.0.0.1:5: 127.0.0.1:5 is mapped to two \
             nodes"
        );
        // Port 0 is a port of the system's choosing for each.
        let mut c = base();
        c.set("kquota.proxy.broker.map", "1=127.0.0.1:0,2=127.0.0.1:0")
            .unwrap();
        assert_eq!(c.broker_map.len(), 2);
        // Set again, the map is replaced; empty, it has no entries.
        c.set("kquota.proxy.broker.map", "3=127.0.0.1:0").unwrap();
        assert_eq!(c.broker_map.keys().copied().collect::<Vec<_>>(), [3]);
        c.set("kquota.proxy.broker.map", "").unwrap();
        assert!(c.broker_map.is_empty());
    }

    #[test]
    fn a_window_the_meter_cannot_count_is_refused_as_it_is_set() {
        let mut c = ProxyConfig::default();
        c.set("quota.window.num", "4294967295").unwrap();
        let e = c
            .set("quota.window.size.seconds", "18446744073709551")
            .unwrap_err();
        assert!(std::error::Error::source(&e).is_some(), "{e:?}");
        assert!(
            e.to_string()
                .starts_with("quota.window.size.seconds=18446744073709551: "),
            "{e}"
        );
        assert_eq!(c.meter.window_size(), Duration::from_secs(1));
    }

    #[test]
    fn the_store_is_on_unless_turned_off_whatever_the_order() {
        let mut c = ProxyConfig::default();
        assert_eq!(c.data_dir.as_deref(), Some(Path::new(DEFAULT_DATA_DIR)));
        c.set("kquota.proxy.store.enable", "false").unwrap();
        c.set("kquota.data.dir", "/q").unwrap();
        assert_eq!(c.data_dir, None);
        c.set("kquota.proxy.store.enable", "true").unwrap();
        assert_eq!(c.data_dir.as_deref(), Some(Path::new("/q")));
        // On a configuration made with `new` (memory only), a directory turns the store on.
        let mut c = ProxyConfig::new("127.0.0.1:0".parse().unwrap(), "k:1".parse().unwrap());
        assert_eq!(c.data_dir, None);
        c.set("kquota.data.dir", "/q").unwrap();
        assert_eq!(c.data_dir.as_deref(), Some(Path::new("/q")));
    }

    #[test]
    fn finishing_builds_tls_from_its_files() {
        let dir = Dir::new();
        let (ca, cert, key) = pki(&dir);
        let mut c = base();
        c.set(TLS_CERT, &cert).unwrap();
        c.set(TLS_KEY, &key).unwrap();
        c.set(TLS_CLIENT_CA, &ca).unwrap();
        c.set(CLIENT_AUTH, "required").unwrap();
        c.set(MAPPING_RULES, "RULE:^CN=(.*)$/$1/L").unwrap();
        c.set(UPSTREAM_TLS, "true").unwrap();
        c.set(UPSTREAM_CA, &ca).unwrap();
        c.set(UPSTREAM_CERT, &cert).unwrap();
        c.set(UPSTREAM_KEY, &key).unwrap();
        // Until finished, nothing is built, and binding would refuse the configuration.
        assert!(c.client_tls.is_none() && c.upstream_tls.is_none());
        assert!(matches!(c.check(), Err(ProxyError::Unfinished)));
        c.finish().unwrap();
        let tls = format!("{:?}", c.client_tls.as_ref().unwrap());
        assert!(
            tls.contains("Required") && tls.contains("RULE:^CN"),
            "{tls}"
        );
        assert!(c.upstream_tls.is_some());
        c.check().unwrap();

        // A file that opens but holds no PEM is named by its key and flag when finishing.
        let junk = dir.write("junk.pem", "not PEM");
        let mut c = base();
        c.set(TLS_CERT, &junk).unwrap();
        c.set(TLS_KEY, &key).unwrap();
        let e = c.finish().unwrap_err();
        assert!(matches!(e, ConfigError::Tls(_)), "{e:?}");
        assert!(
            e.to_string().starts_with(&format!(
                "kquota.proxy.ssl.certificate.location (--tls-cert)={junk}: no PEM certificate"
            )),
            "{e}"
        );
        // Rules that do not parse, named by their key.
        let mut c = base();
        c.set(TLS_CERT, &cert).unwrap();
        c.set(TLS_KEY, &key).unwrap();
        c.set(MAPPING_RULES, "RULE:(a/b/Q").unwrap();
        let e = c.finish().unwrap_err();
        assert_eq!(e.key(), Some(MAPPING_RULES));
        assert!(
            e.to_string()
                .starts_with("ssl.principal.mapping.rules: invalid rule"),
            "{e}"
        );
        let mut c = base();
        c.set(TLS_CERT, &cert).unwrap();
        c.set(TLS_KEY, &key).unwrap();
        c.set(CLIENT_AUTH, "requested").unwrap();
        assert_eq!(
            c.finish().unwrap_err().to_string(),
            "ssl.client.auth (--tls-client-auth) requested or required needs \
             ssl.truststore.location (--tls-client-ca), the CAs that verify client certificates"
        );
    }

    #[test]
    fn settings_that_need_another_name_both() {
        let dir = Dir::new();
        let pem = dir.write("x.pem", "");
        let pem = pem.as_str();
        let mut cases = vec![
            (vec![(TLS_CERT, pem)], TLS_CERT, TLS_KEY),
            (vec![(TLS_KEY, pem)], TLS_KEY, TLS_CERT),
            (vec![(TLS_CLIENT_CA, pem)], TLS_CLIENT_CA, TLS_CERT),
            (vec![(CLIENT_AUTH, "required")], CLIENT_AUTH, TLS_CERT),
            (vec![(MAPPING_RULES, "RULE:x/y/")], MAPPING_RULES, TLS_CERT),
            (vec![(UPSTREAM_TLS, "true")], UPSTREAM_TLS, UPSTREAM_CA),
            (vec![(UPSTREAM_CA, pem)], UPSTREAM_CA, UPSTREAM_TLS),
            (
                vec![(UPSTREAM_CERT, pem), (UPSTREAM_KEY, pem)],
                UPSTREAM_CERT,
                UPSTREAM_TLS,
            ),
            (
                vec![
                    (UPSTREAM_TLS, "true"),
                    (UPSTREAM_CA, pem),
                    (UPSTREAM_CERT, pem),
                ],
                UPSTREAM_CERT,
                UPSTREAM_KEY,
            ),
        ];
        if cfg!(feature = "cluster") {
            let bootstrap = "kquota.cluster.bootstrap.servers";
            cases.push((
                vec![("kquota.cluster.instance.id", "p1")],
                "kquota.cluster.instance.id",
                bootstrap,
            ));
            cases.push((
                vec![("kquota.cluster.client.security.protocol", "SSL")],
                "kquota.cluster.client.*",
                bootstrap,
            ));
        }
        for (given, key, needs) in cases {
            let mut c = base();
            for (k, v) in &given {
                c.set(k, v).unwrap();
            }
            let e = c.finish().unwrap_err();
            assert!(
                matches!(e, ConfigError::Needs { key: k, needs: n } if k == key && n == needs),
                "{given:?}: {e:?}"
            );
            assert_eq!(
                e.to_string(),
                format!(
                    "{key} ({}) needs {needs} ({})",
                    flag_of(key).unwrap(),
                    flag_of(needs).unwrap()
                )
            );
        }
    }

    #[test]
    fn finishing_checks_the_upstream_and_what_binding_checks() {
        let mut c = ProxyConfig::default();
        let e = c.finish().unwrap_err();
        assert_eq!(
            e.to_string(),
            "kquota.proxy.upstream (--upstream) is required"
        );
        c.set(UPSTREAM, "kafka:9092").unwrap();
        assert_eq!(
            c.finish().unwrap_err().to_string(),
            "brokers need listeners: set kquota.proxy.listen.base (--listen-base) or \
             kquota.proxy.broker.map (--broker-map)"
        );
        c.set("kquota.proxy.listen.base", "0.0.0.0:19000").unwrap();
        assert!(matches!(
            c.finish(),
            Err(ConfigError::Conflict(ProxyError::AdvertisedHost(_)))
        ));
        c.set("kquota.proxy.advertised.host", "proxy.example")
            .unwrap();
        c.set("kquota.proxy.buffer.memory.bytes", "1000").unwrap();
        assert_eq!(
            c.finish().unwrap_err().to_string(),
            "kquota.proxy.buffer.memory.bytes (1000) must hold the largest request or response \
             frame (104857604 bytes with its size prefix; socket.request.max.bytes and \
             kquota.proxy.max.response.bytes set the largest)"
        );
        c.set("socket.request.max.bytes", "996").unwrap();
        c.set("kquota.proxy.max.response.bytes", "996").unwrap();
        c.finish().unwrap();
    }

    #[cfg(feature = "cluster")]
    #[test]
    fn finishing_makes_the_cluster_config() {
        let mut c = base();
        c.set("kquota.proxy.listen", "127.0.0.1:9093").unwrap();
        for (k, v) in [
            ("kquota.cluster.bootstrap.servers", "kafka:9092"),
            ("kquota.cluster.client.security.protocol", "SASL_SSL"),
            ("kquota.cluster.config.topic", "_q"),
            ("kquota.cluster.replication.factor", "3"),
            ("kquota.cluster.alter.timeout.ms", "2500"),
        ] {
            c.set(k, v).unwrap();
        }
        c.finish().unwrap();
        let cluster = c.cluster.as_ref().unwrap();
        assert_eq!(cluster.bootstrap_servers, "kafka:9092");
        assert!(
            cluster.instance_id.ends_with(":9093"),
            "{}",
            cluster.instance_id
        );
        assert_eq!(
            cluster
                .client_properties
                .get("security.protocol")
                .map(String::as_str),
            Some("SASL_SSL")
        );
        assert_eq!(
            (cluster.config_topic.as_str(), cluster.replication_factor),
            ("_q", 3)
        );
        assert_eq!(cluster.alter_timeout, Duration::from_millis(2500));
        c.set("kquota.cluster.instance.id", "proxy-1").unwrap();
        c.finish().unwrap();
        assert_eq!(c.cluster.unwrap().instance_id, "proxy-1");
    }

    #[test]
    fn a_properties_file_round_trips() {
        let dir = Dir::new();
        let pem = dir.write("ca.pem", "");
        // The values, written with the escapes a file needs (a backslash, a leading space, a `#`
        // at the start of a continued line), read back as they were.
        let settings = [
            (UPSTREAM, "kafka-1.example:9092"),
            ("kquota.proxy.listen.base", "127.0.0.1:19000"),
            (
                "kquota.proxy.broker.map",
                "1=127.0.0.1:19101,2=127.0.0.1:19102",
            ),
            ("super.users", "User:admin;User:ops"),
            ("kquota.data.dir", r"C:\quotas"),
            ("ssl.truststore.location", pem.as_str()),
            ("max.connections.per.ip", "100"),
        ];
        let text = "# the proxy\n\
            kquota.proxy.upstream = kafka-1.example:9092\n\
            kquota.proxy.listen.base: 127.0.0.1:19000\n\
            kquota.proxy.broker.map=1=127.0.0.1:19101,\\\n    2=127.0.0.1:19102\n\
            super.users=User:admin;User:ops\n\
            ! another comment\n\
            kquota.data.dir=C\\:\\\\quotas\n"
            .to_owned()
            + &format!("ssl.truststore.location={pem}\nmax.connections.per.ip=99\nmax.connections.per.ip=100  \n");
        let read = parse_properties(&text).unwrap();
        let pairs: Vec<(&str, &str)> = read
            .iter()
            .map(|p| (p.key.as_str(), p.value.as_str()))
            .collect();
        assert_eq!(pairs, settings);
        assert_eq!(
            read.iter().map(|p| p.line).collect::<Vec<_>>(),
            [2, 3, 4, 6, 8, 9, 11]
        );
        // The same settings, from the file or given one by one, make the same configuration.
        let (mut from_file, mut given) = (ProxyConfig::default(), ProxyConfig::default());
        for p in &read {
            from_file.set(&p.key, &p.value).unwrap();
        }
        for (k, v) in settings {
            given.set(k, v).unwrap();
        }
        assert_eq!(format!("{from_file:?}"), format!("{given:?}"));
        assert_eq!(from_file.data_dir.as_deref(), Some(Path::new(r"C:\quotas")));
    }

    #[test]
    fn lines_a_proxy_should_not_guess_at_are_refused_with_their_number() {
        // The reading is kquota-host's (tested there); the proxy's error keeps the line.
        assert!(matches!(
            parse_properties("kquota.proxy.upstream=k:9092\nthis line is wrong\n"),
            Err(ConfigError::Line { line: 2, .. })
        ));
        let e = parse_properties("a=1\nb=\\u12\n").unwrap_err();
        assert!(matches!(e, ConfigError::Properties(_)), "{e:?}");
        assert!(
            e.to_string()
                .starts_with("line 2: malformed \\uXXXX escape"),
            "{e}"
        );
    }
}
