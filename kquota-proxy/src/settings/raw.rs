//! [`ProxySettings`]: the proxy's settings as given, each value checked as it is set (by key, as a
//! properties file names it, or in its field), and made into a checked
//! [`ProxyConfig`](super::ProxyConfig) in one step, [`ProxySettings::build`], which reads the
//! TLS files and checks the settings that work together.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::num::{NonZeroU32, NonZeroUsize};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use kquota::meter::MeterConfig;
use kquota::SubQuotaPolicy;
use kquota_host::settings::values::{
    boolean, capacity, client_auth, count, count_up_to, frame_size, ip_port, non_empty, timeout,
    Capacity, Count, FrameSize, Timeout,
};
#[cfg(feature = "cluster")]
use kquota_host::settings::ClusterSettings;
use kquota_host::settings::{Problem, SettingError};
use kquota_host::{NetworkThreads, ThreadCount};
use kquota_wire::properties::Property;
use kquota_wire::tls::ClientAuth;
use kquota_wire::{parse_super_users, Principal, PrincipalMapper};

use super::config::{
    HostPort, ProxyConfig, DEFAULT_BUFFER_MEMORY, DEFAULT_CONNECTION_GRACE,
    DEFAULT_CONNECT_TIMEOUT, DEFAULT_DATA_DIR, DEFAULT_IDLE_TIMEOUT, DEFAULT_LISTEN,
    DEFAULT_MAX_BROKERS, DEFAULT_MAX_CONNECTIONS, DEFAULT_MAX_IN_FLIGHT, DEFAULT_MAX_REQUEST_BYTES,
    DEFAULT_MAX_RESPONSE_BYTES, DEFAULT_METRICS_MAX_BUCKETS,
};
use super::error::ConfigError;
use super::table::*;
use super::values::{broker_map, pem_file};
use crate::tls::{ClientTls, UpstreamTls};

/// The most requests a connection may have unanswered (`kquota.proxy.max.in.flight.requests`):
/// each is a permit and a queue slot, and far more than any client pipelines.
pub const MAX_IN_FLIGHT: u32 = 65_536;

/// How many requests a connection may have unanswered: 1 to [`MAX_IN_FLIGHT`].
pub type InFlight = Count<MAX_IN_FLIGHT>;

/// The proxy's settings as given: every field holds a value its setting may have (set it
/// directly, or by key with [`ProxySettings::set`]); whether they work together is checked once,
/// by [`ProxySettings::build`].
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ProxySettings {
    /// `kquota.proxy.listen`: the bootstrap listener; each connection to it is forwarded to the
    /// upstream.
    pub listen: SocketAddr,
    /// `kquota.proxy.upstream`: the cluster's bootstrap address (required).
    pub upstream: Option<HostPort>,
    /// `kquota.proxy.listen.base`: broker node N listens on this address's IP at its port plus N
    /// (port 0: a port the system chooses for each broker).
    pub listen_base: Option<SocketAddr>,
    /// `kquota.proxy.broker.map`: explicit listeners by node id, before the listen base.
    pub broker_map: BTreeMap<i32, SocketAddr>,
    /// `kquota.proxy.advertised.host`: the host the rewritten responses name (by default, each
    /// broker listener's bound IP).
    pub advertised_host: Option<String>,
    /// `socket.request.max.bytes`: a larger request frame closes its connection.
    pub max_request_bytes: FrameSize,
    /// `kquota.proxy.max.response.bytes`: a larger response frame from the cluster closes its
    /// connection.
    pub max_response_bytes: FrameSize,
    /// `kquota.proxy.max.in.flight.requests`: requests a connection may have outstanding; the
    /// proxy reads no more of its requests until one is answered.
    pub max_in_flight: InFlight,
    /// `connections.max.idle.ms`: the longest a connection may wait for a peer that neither
    /// sends nor takes bytes while nothing is outstanding (or that stalls within a frame).
    pub idle_timeout: Timeout,
    /// `kquota.proxy.connect.timeout.ms`: how long connecting to a broker, or a client's TLS
    /// handshake, may take.
    pub connect_timeout: Timeout,
    /// `kquota.proxy.max.brokers`: how many brokers the proxy will listen for; a response naming
    /// more closes its connection.
    pub max_brokers: NonZeroUsize,
    /// `max.connections`: client connections open at once over every listener. When it is
    /// reached, the oldest connection not yet proven (from the address with the most of them), or
    /// the one idle longest, gives way to a new one.
    pub max_connections: NonZeroUsize,
    /// `max.connections.per.ip`: client connections open at once from one address.
    pub max_connections_per_ip: NonZeroUsize,
    /// `num.network.threads`: the threads that serve client connections, each connection on one
    /// of them for its life (given out in turn as they are accepted, as Kafka's acceptor gives
    /// them to its processors). Default: one for each CPU the process may run on (at most 256).
    pub network_threads: ThreadCount,
    /// `kquota.connections.grace.ms`: how long a connection has to prove itself before it is
    /// closed (and may be made to give way before that).
    pub connection_grace: Timeout,
    /// `kquota.proxy.buffer.memory.bytes`: the bytes held at once, over every connection, for
    /// requests being read and answers read from the broker and not yet taken by their client;
    /// reading waits while they are spent. At least the largest frame and its size prefix.
    pub buffer_memory: NonZeroUsize,
    /// `kquota.data.dir`: where the quotas altered at the proxy are kept (a redb store), when the
    /// store is on. Not used with the cluster.
    pub data_dir: PathBuf,
    /// `kquota.proxy.store.enable`: `false` keeps quotas in memory only, lost when the proxy
    /// stops.
    pub store: bool,
    /// `kquota.cluster.*`: share the configuration, the membership and `bps` usage with other
    /// instances through Kafka: the configuration log then takes the durable store's place.
    #[cfg(feature = "cluster")]
    pub cluster: ClusterSettings,
    /// Kafka's `super.users`: the principals that may alter quotas at the proxy.
    pub super_users: Vec<Principal>,
    /// `kquota.describe.allow.anonymous`: let ANONYMOUS describe quotas (authenticated principals
    /// always may).
    pub describe_allow_anonymous: bool,
    /// `kquota.draft.alter.quotas.enable`: serve the seeds' draft AlterQuotas on API key 50
    /// (which hides the cluster's DescribeUserScramCredentials from clients of the proxy).
    pub draft_alter_quotas: bool,
    /// `kquota.sub.quota.policy`: the engine's sub-quota policy.
    pub policy: SubQuotaPolicy,
    /// `kquota.broker.count`: how many instances share the `:bps` quotas: each enforces its part,
    /// the cluster-wide limit divided by this.
    pub instance_count: NonZeroU32,
    /// `kquota.producer.capacity.bytes.per.sec`: what `producer_byte_rate:shares` divides.
    pub producer_capacity: Option<Capacity>,
    /// `kquota.consumer.capacity.bytes.per.sec`: what `consumer_byte_rate:shares` divides.
    pub consumer_capacity: Option<Capacity>,
    /// The quota windows: Kafka's `quota.window.num` and `quota.window.size.seconds` (the meter
    /// checked them when it was built).
    pub meter: MeterConfig,
    /// `kquota.proxy.ssl.certificate.location`: TLS on every listener, this certificate chain.
    pub tls_cert: Option<PathBuf>,
    /// `kquota.proxy.ssl.key.location`: its private key.
    pub tls_key: Option<PathBuf>,
    /// `ssl.truststore.location`: the CAs client certificates are checked against.
    pub tls_client_ca: Option<PathBuf>,
    /// `ssl.client.auth`.
    pub client_auth: ClientAuth,
    /// `ssl.principal.mapping.rules`: how a client certificate's subject becomes its user, read as
    /// it is set.
    pub principal_mapping: Arc<PrincipalMapper>,
    /// `kquota.proxy.upstream.ssl.enable`: TLS towards the cluster.
    pub upstream_tls: bool,
    /// `kquota.proxy.upstream.ssl.truststore.location`.
    pub upstream_ca: Option<PathBuf>,
    /// `kquota.proxy.upstream.ssl.certificate.location`.
    pub upstream_cert: Option<PathBuf>,
    /// `kquota.proxy.upstream.ssl.key.location`.
    pub upstream_key: Option<PathBuf>,
    /// `kquota.proxy.metrics.listen`: where the Prometheus metrics are served (`GET /metrics`).
    pub metrics_listen: Option<SocketAddr>,
    /// `kquota.proxy.metrics.max.buckets`: how many buckets get series of their own in the
    /// metrics; the rest are summed.
    pub metrics_max_buckets: NonZeroUsize,
    /// `log.format`: how log lines are written.
    pub log_format: kquota_host::LogFormat,
}

/// A default that is not 0.
const fn nonzero(n: usize) -> NonZeroUsize {
    match NonZeroUsize::new(n) {
        Some(n) => n,
        None => panic!("a default limit is not 0"),
    }
}

/// A default frame size.
const fn frame(n: usize) -> FrameSize {
    match FrameSize::new(n as u32) {
        Some(f) => f,
        None => panic!("a default frame size is one"),
    }
}

impl ProxySettings {
    /// The proxy on `listen` in front of the cluster at `upstream`, with Kafka's default limits
    /// and its quotas in memory (no store). Broker listeners still need
    /// [`ProxySettings::listen_base`] or [`ProxySettings::broker_map`].
    pub fn new(listen: SocketAddr, upstream: HostPort) -> ProxySettings {
        ProxySettings {
            upstream: Some(upstream),
            listen,
            store: false,
            ..ProxySettings::default()
        }
    }

    /// Applies one `key=value` setting, checked as it is set: an unknown key, or a value the
    /// key cannot hold, is an error that names both, and leaves the settings as they were.
    /// Values are trimmed, as Kafka's `ConfigDef` trims them. A key set again replaces its value
    /// (`kquota.proxy.broker.map` replaces the whole map; each `kquota.cluster.client.KEY` is a
    /// key of its own). [`SETTINGS`](crate::SETTINGS) lists the keys; `docs/proxy-settings.md`
    /// says what each does.
    ///
    /// ```
    /// use kquota_proxy::ProxySettings;
    /// let mut settings = ProxySettings::default();
    /// settings.set("kquota.proxy.upstream", "kafka-1:9092")?;
    /// settings.set("kquota.proxy.listen.base", "127.0.0.1:19000")?;
    /// settings.set("max.connections", "5000")?;
    /// assert_eq!(
    ///     settings.set("max.connections", "none").unwrap_err().to_string(),
    ///     "max.connections=none: must be a whole number ≥ 1"
    /// );
    /// let config = settings.build()?;
    /// # Ok::<(), kquota_proxy::ConfigError>(())
    /// ```
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), ConfigError> {
        self.apply(key, value.trim()).map_err(|e| match e {
            Some(problem) => SettingError::value(key, value, problem).into(),
            None => SETTINGS.unknown(key).into(),
        })
    }

    /// [`ProxySettings::set`], with the value trimmed; `Err(None)` for an unknown key.
    fn apply(&mut self, key: &str, value: &str) -> Result<(), Option<Problem>> {
        if key.starts_with("kquota.cluster.") {
            return self.apply_cluster(key, value);
        }
        match key {
            UPSTREAM => {
                self.upstream = Some(value.parse().map_err(|_| Problem::NotHostPort)?);
            }
            "kquota.proxy.listen" => self.listen = ip_port(value)?,
            LISTEN_BASE => self.listen_base = Some(ip_port(value)?),
            BROKER_MAP => self.broker_map = broker_map(value)?,
            "kquota.proxy.advertised.host" => {
                self.advertised_host = Some(non_empty(value)?.to_owned())
            }
            "socket.request.max.bytes" => self.max_request_bytes = frame_size(value)?,
            "kquota.proxy.max.response.bytes" => self.max_response_bytes = frame_size(value)?,
            "kquota.proxy.max.in.flight.requests" => self.max_in_flight = count_up_to(value)?,
            "connections.max.idle.ms" => self.idle_timeout = timeout(value)?,
            "kquota.proxy.connect.timeout.ms" => self.connect_timeout = timeout(value)?,
            "kquota.proxy.max.brokers" => self.max_brokers = count(value)?,
            "max.connections" => self.max_connections = count(value)?,
            "max.connections.per.ip" => self.max_connections_per_ip = count(value)?,
            "num.network.threads" => self.network_threads = count_up_to(value)?,
            "kquota.connections.grace.ms" => self.connection_grace = timeout(value)?,
            "kquota.proxy.buffer.memory.bytes" => self.buffer_memory = count(value)?,
            "kquota.data.dir" => self.data_dir = PathBuf::from(non_empty(value)?),
            "kquota.proxy.store.enable" => self.store = boolean(value)?,
            "super.users" => {
                self.super_users = parse_super_users(value).map_err(Problem::refused)?
            }
            "kquota.describe.allow.anonymous" => self.describe_allow_anonymous = boolean(value)?,
            "kquota.draft.alter.quotas.enable" => self.draft_alter_quotas = boolean(value)?,
            "kquota.sub.quota.policy" => self.policy = value.parse().map_err(Problem::refused)?,
            "kquota.broker.count" => {
                self.instance_count = value.parse().map_err(|_| Problem::WholeNumberAtLeast(1))?
            }
            "kquota.producer.capacity.bytes.per.sec" => {
                self.producer_capacity = Some(capacity(value)?)
            }
            "kquota.consumer.capacity.bytes.per.sec" => {
                self.consumer_capacity = Some(capacity(value)?)
            }
            "quota.window.num" => {
                let samples = count(value)?;
                let samples =
                    u32::try_from(samples.get()).map_err(|_| Problem::WholeNumberAtLeast(1))?;
                self.window(Some(samples), None)?
            }
            "quota.window.size.seconds" => {
                let seconds = count(value)?.get() as u64;
                self.window(None, Some(Duration::from_secs(seconds)))?
            }
            "kquota.proxy.metrics.listen" => self.metrics_listen = Some(ip_port(value)?),
            "kquota.proxy.metrics.max.buckets" => self.metrics_max_buckets = count(value)?,
            "log.format" => self.log_format = value.parse().map_err(Problem::refused)?,
            TLS_CERT => self.tls_cert = Some(pem_file(value)?),
            TLS_KEY => self.tls_key = Some(pem_file(value)?),
            TLS_CLIENT_CA => self.tls_client_ca = Some(pem_file(value)?),
            CLIENT_AUTH => self.client_auth = client_auth(value)?,
            MAPPING_RULES => {
                let rules = PrincipalMapper::parse(non_empty(value)?).map_err(Problem::refused)?;
                self.principal_mapping = Arc::new(rules);
            }
            UPSTREAM_TLS => self.upstream_tls = boolean(value)?,
            UPSTREAM_CA => self.upstream_ca = Some(pem_file(value)?),
            UPSTREAM_CERT => self.upstream_cert = Some(pem_file(value)?),
            UPSTREAM_KEY => self.upstream_key = Some(pem_file(value)?),
            _ => return Err(None),
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
        self.meter = builder.build().map_err(Problem::refused)?;
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
        Err(SETTINGS.not_built(key, "kquota-proxy", "cluster"))
    }

    /// The checked configuration: the upstream is given; the TLS files (read now, and named by
    /// their key and flag in errors) come with what they need (a certificate with its key; client
    /// CAs, `ssl.client.auth` and `ssl.principal.mapping.rules` with a certificate; the upstream's
    /// CA with `kquota.proxy.upstream.ssl.enable=true`); `kquota.cluster.instance.id` and
    /// `kquota.cluster.client.*` come with `kquota.cluster.bootstrap.servers`; brokers have
    /// listeners that clients can be told of; and the buffer memory holds the largest frame.
    pub fn build(&self) -> Result<ProxyConfig, ConfigError> {
        let upstream = self
            .upstream
            .clone()
            .ok_or(ConfigError::Missing(UPSTREAM))?;
        let client_tls = self.client_tls()?;
        let upstream_tls = self.upstream_tls()?;
        if self.listen_base.is_none() && self.broker_map.is_empty() {
            return Err(ConfigError::NoBrokerListeners);
        }
        if self.advertised_host.is_none() {
            let unspecified = self
                .listen_base
                .iter()
                .chain(self.broker_map.values())
                .find(|a| a.ip().is_unspecified());
            if let Some(addr) = unspecified {
                return Err(ConfigError::AdvertisedHost(*addr));
            }
        }
        // A frame the budget cannot hold would wait for it forever.
        let largest = self.max_request_bytes.max(self.max_response_bytes).get() + 4;
        if self.buffer_memory.get() < largest {
            return Err(ConfigError::BufferMemory {
                buffer_memory: self.buffer_memory.get(),
                largest,
            });
        }
        Ok(ProxyConfig {
            #[cfg(feature = "cluster")]
            cluster: self
                .cluster
                .build(&SETTINGS, || default_instance_id(self.listen))?,
            listen: self.listen,
            upstream,
            listen_base: self.listen_base,
            broker_map: self.broker_map.clone(),
            advertised_host: self.advertised_host.clone(),
            max_request_bytes: self.max_request_bytes.get(),
            max_response_bytes: self.max_response_bytes.get(),
            max_in_flight: self.max_in_flight.get(),
            idle_timeout: self.idle_timeout.get(),
            connect_timeout: self.connect_timeout.get(),
            max_brokers: self.max_brokers.get(),
            max_connections: self.max_connections.get(),
            max_connections_per_ip: self.max_connections_per_ip.get(),
            network_threads: self.network_threads,
            connection_grace: self.connection_grace.get(),
            buffer_memory: self.buffer_memory.get(),
            data_dir: self.store.then(|| self.data_dir.clone()),
            super_users: self.super_users.clone(),
            describe_allow_anonymous: self.describe_allow_anonymous,
            draft_alter_quotas: self.draft_alter_quotas,
            policy: self.policy,
            instance_count: self.instance_count,
            producer_capacity: self.producer_capacity.map(Capacity::get),
            consumer_capacity: self.consumer_capacity.map(Capacity::get),
            meter: self.meter,
            client_tls,
            upstream_tls,
            metrics_listen: self.metrics_listen,
            metrics_max_buckets: self.metrics_max_buckets.get(),
            log_format: self.log_format,
        })
    }

    fn client_tls(&self) -> Result<Option<Arc<ClientTls>>, ConfigError> {
        let needs = |key, needs| Err(SETTINGS.needs(key, needs).into());
        match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => Ok(Some(Arc::new(ClientTls::from_files(
                cert,
                key,
                self.tls_client_ca.as_deref(),
                self.client_auth,
                Arc::clone(&self.principal_mapping),
            )?))),
            (Some(_), None) => needs(TLS_CERT, TLS_KEY),
            (None, Some(_)) => needs(TLS_KEY, TLS_CERT),
            // Without TLS these mean nothing: a client-auth mode given alone would leave the
            // listeners open while the operator believes them closed.
            (None, None) if self.tls_client_ca.is_some() => needs(TLS_CLIENT_CA, TLS_CERT),
            (None, None) if self.client_auth != ClientAuth::None => needs(CLIENT_AUTH, TLS_CERT),
            (None, None) if self.principal_mapping.rules() != "DEFAULT" => {
                needs(MAPPING_RULES, TLS_CERT)
            }
            (None, None) => Ok(None),
        }
    }

    fn upstream_tls(&self) -> Result<Option<Arc<UpstreamTls>>, ConfigError> {
        let needs = |key, needs| Err(SETTINGS.needs(key, needs).into());
        let client = match (&self.upstream_cert, &self.upstream_key) {
            (Some(cert), Some(key)) => Some((cert.as_path(), key.as_path())),
            (Some(_), None) => return needs(UPSTREAM_CERT, UPSTREAM_KEY),
            (None, Some(_)) => return needs(UPSTREAM_KEY, UPSTREAM_CERT),
            (None, None) => None,
        };
        match (self.upstream_tls, &self.upstream_ca) {
            (true, Some(ca)) => Ok(Some(Arc::new(UpstreamTls::from_files(ca, client)?))),
            (true, None) => needs(UPSTREAM_TLS, UPSTREAM_CA),
            (false, Some(_)) => needs(UPSTREAM_CA, UPSTREAM_TLS),
            (false, None) if client.is_some() => needs(UPSTREAM_CERT, UPSTREAM_TLS),
            (false, None) => Ok(None),
        }
    }
}

impl Default for ProxySettings {
    /// Every setting at the default the `kquota-proxy` binary has for it
    /// ([`SETTINGS`](crate::SETTINGS)): on [`DEFAULT_LISTEN`], with the quotas kept in
    /// [`DEFAULT_DATA_DIR`], and no upstream yet ([`ProxySettings::build`] refuses settings
    /// without one).
    fn default() -> Self {
        ProxySettings {
            listen: DEFAULT_LISTEN,
            upstream: None,
            listen_base: None,
            broker_map: BTreeMap::new(),
            advertised_host: None,
            max_request_bytes: frame(DEFAULT_MAX_REQUEST_BYTES),
            max_response_bytes: frame(DEFAULT_MAX_RESPONSE_BYTES),
            max_in_flight: InFlight::at_most(DEFAULT_MAX_IN_FLIGHT),
            idle_timeout: Timeout::new(DEFAULT_IDLE_TIMEOUT).expect("a default is a timeout"),
            connect_timeout: Timeout::new(DEFAULT_CONNECT_TIMEOUT).expect("a default is a timeout"),
            max_brokers: nonzero(DEFAULT_MAX_BROKERS),
            max_connections: nonzero(DEFAULT_MAX_CONNECTIONS),
            max_connections_per_ip: NonZeroUsize::MAX,
            network_threads: NetworkThreads::default_count(),
            connection_grace: Timeout::new(DEFAULT_CONNECTION_GRACE)
                .expect("a default is a timeout"),
            buffer_memory: nonzero(DEFAULT_BUFFER_MEMORY),
            data_dir: PathBuf::from(DEFAULT_DATA_DIR),
            store: true,
            #[cfg(feature = "cluster")]
            cluster: ClusterSettings::default(),
            super_users: Vec::new(),
            describe_allow_anonymous: false,
            draft_alter_quotas: false,
            policy: SubQuotaPolicy::default(),
            instance_count: NonZeroU32::MIN,
            producer_capacity: None,
            consumer_capacity: None,
            meter: MeterConfig::default(),
            tls_cert: None,
            tls_key: None,
            tls_client_ca: None,
            client_auth: ClientAuth::None,
            principal_mapping: Arc::new(
                PrincipalMapper::parse("DEFAULT").expect("DEFAULT is a rule"),
            ),
            upstream_tls: false,
            upstream_ca: None,
            upstream_cert: None,
            upstream_key: None,
            metrics_listen: None,
            metrics_max_buckets: nonzero(DEFAULT_METRICS_MAX_BUCKETS),
            log_format: kquota_host::LogFormat::Text,
        }
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
/// trims them. Keys are not checked here: [`ProxySettings::set`] checks each.
///
/// Refused, naming the line: a malformed `\uXXXX` escape, an empty key (`=value`), and a key that
/// is not followed by `=` or `:`. Java reads `key value` as a setting and `key` alone as one with
/// the empty value, but in a proxy's file either is far more often a slip (a line of prose, a
/// lost `=`) than meant, so `kquota-proxy` asks for `key=value`, and `key=` for an empty value.
pub fn parse_properties(text: &str) -> Result<Vec<Property>, ConfigError> {
    kquota_host::read_settings(text).map_err(|e| ConfigError::Setting(e.into()))
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use kquota_wire::Principal;
    use rcgen::{BasicConstraints, CertificateParams, DistinguishedName, DnType, IsCa, KeyPair};

    use super::*;
    use std::path::Path;

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
    fn base() -> ProxySettings {
        let mut config = ProxySettings::default();
        config.set(UPSTREAM, "kafka:9092").unwrap();
        config
            .set("kquota.proxy.listen.base", "127.0.0.1:0")
            .unwrap();
        config
    }

    fn refusal(key: &str, value: &str) -> String {
        ProxySettings::default()
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
            (
                "kquota.proxy.max.in.flight.requests",
                "8",
                "0",
                "must be a whole number between 1 and 65536",
            ),
            ("connections.max.idle.ms", "1000", "0", ms1),
            ("kquota.proxy.connect.timeout.ms", "500", "-1", ms1),
            ("kquota.proxy.max.brokers", "16", "many", whole),
            ("max.connections", "100", "0", whole),
            ("max.connections.per.ip", "10", "-3", whole),
            (
                "num.network.threads",
                "4",
                "257",
                "must be a whole number between 1 and 256",
            ),
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
            let mut config = ProxySettings::default();
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
            let mut refused = ProxySettings::default();
            let e = refused.set(&key, bad).unwrap_err();
            assert!(
                matches!(&e, ConfigError::Setting(SettingError::Value { key: k, value, .. }) if *k == key && value == bad),
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
        let c = c.build().unwrap();
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
        for s in SETTINGS.iter() {
            let Some(default) = s.default else { continue };
            if s.key.starts_with("kquota.cluster.") && !cfg!(feature = "cluster") {
                continue;
            }
            let (mut set, untouched) = (base(), base());
            set.set(s.key, default).unwrap();
            assert_eq!(
                format!("{:?}", set.build().unwrap()),
                format!("{:?}", untouched.build().unwrap()),
                "{}",
                s.key
            );
        }
        assert_eq!(
            ProxySettings::default().listen.to_string(),
            SETTINGS.0[1].default.unwrap()
        );
        #[cfg(feature = "cluster")]
        {
            let topic = SETTINGS.find("kquota.cluster.config.topic");
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
            let e = ProxySettings::default().set(key, "1").unwrap_err();
            assert!(
                matches!(&e, ConfigError::Setting(SettingError::Unknown { key: k, .. }) if k == key),
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
        let mut c = ProxySettings::default();
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
        let built = |c: &ProxySettings| c.build().unwrap().data_dir;
        let mut c = base();
        assert_eq!(built(&c).as_deref(), Some(Path::new(DEFAULT_DATA_DIR)));
        c.set("kquota.proxy.store.enable", "false").unwrap();
        c.set("kquota.data.dir", "/q").unwrap();
        assert_eq!(built(&c), None);
        c.set("kquota.proxy.store.enable", "true").unwrap();
        assert_eq!(built(&c).as_deref(), Some(Path::new("/q")));
        // Settings made with `new` keep quotas in memory until the store is turned on.
        let mut c = ProxySettings::new("127.0.0.1:0".parse().unwrap(), "k:1".parse().unwrap());
        c.set(LISTEN_BASE, "127.0.0.1:0").unwrap();
        c.set("kquota.data.dir", "/q").unwrap();
        assert_eq!(built(&c), None);
        c.set("kquota.proxy.store.enable", "true").unwrap();
        assert_eq!(built(&c).as_deref(), Some(Path::new("/q")));
    }

    #[test]
    fn building_reads_tls_from_its_files() {
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
        let c = c.build().unwrap();
        let tls = format!("{:?}", c.client_tls.as_ref().unwrap());
        assert!(
            tls.contains("Required") && tls.contains("RULE:^CN"),
            "{tls}"
        );
        assert!(c.upstream_tls.is_some());

        // A file that opens but holds no PEM is named by its key and flag when finishing.
        let junk = dir.write("junk.pem", "not PEM");
        let mut c = base();
        c.set(TLS_CERT, &junk).unwrap();
        c.set(TLS_KEY, &key).unwrap();
        let e = c.build().unwrap_err();
        assert!(matches!(e, ConfigError::Tls(_)), "{e:?}");
        assert!(
            e.to_string().starts_with(&format!(
                "kquota.proxy.ssl.certificate.location (--tls-cert)={junk}: no PEM certificate"
            )),
            "{e}"
        );
        // Rules that do not parse are refused as they are set, named by their key.
        let e = base().set(MAPPING_RULES, "RULE:(a/b/Q").unwrap_err();
        assert_eq!(e.key(), Some(MAPPING_RULES));
        assert!(
            e.to_string()
                .starts_with("ssl.principal.mapping.rules=RULE:(a/b/Q: invalid rule 'RULE:(a/b/Q'"),
            "{e}"
        );
        let mut c = base();
        c.set(TLS_CERT, &cert).unwrap();
        c.set(TLS_KEY, &key).unwrap();
        c.set(CLIENT_AUTH, "requested").unwrap();
        assert_eq!(
            c.build().unwrap_err().to_string(),
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
            let e = c.build().unwrap_err();
            assert!(
                matches!(e, ConfigError::Setting(SettingError::Needs { key: k, needs: n, .. }) if k == key && n == needs),
                "{given:?}: {e:?}"
            );
            assert_eq!(
                e.to_string(),
                format!(
                    "{key} ({}) needs {needs} ({})",
                    SETTINGS.flag_of(key).unwrap(),
                    SETTINGS.flag_of(needs).unwrap()
                )
            );
        }
    }

    #[test]
    fn building_checks_the_upstream_and_the_listeners_and_memory() {
        let mut c = ProxySettings::default();
        let e = c.build().unwrap_err();
        assert_eq!(
            e.to_string(),
            "kquota.proxy.upstream (--upstream) is required"
        );
        c.set(UPSTREAM, "kafka:9092").unwrap();
        assert_eq!(
            c.build().unwrap_err().to_string(),
            "brokers need listeners: set kquota.proxy.listen.base (--listen-base) or \
             kquota.proxy.broker.map (--broker-map)"
        );
        c.set("kquota.proxy.listen.base", "0.0.0.0:19000").unwrap();
        assert!(matches!(c.build(), Err(ConfigError::AdvertisedHost(_))));
        c.set("kquota.proxy.advertised.host", "proxy.example")
            .unwrap();
        c.set("kquota.proxy.buffer.memory.bytes", "1000").unwrap();
        assert_eq!(
            c.build().unwrap_err().to_string(),
            "kquota.proxy.buffer.memory.bytes (1000) must hold the largest request or response \
             frame (104857604 bytes with its size prefix; socket.request.max.bytes and \
             kquota.proxy.max.response.bytes set the largest)"
        );
        c.set("socket.request.max.bytes", "996").unwrap();
        c.set("kquota.proxy.max.response.bytes", "996").unwrap();
        c.build().unwrap();
    }

    #[cfg(feature = "cluster")]
    #[test]
    fn building_makes_the_cluster_config() {
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
        let built = c.build().unwrap();
        let cluster = built.cluster.as_ref().unwrap();
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
        assert_eq!(c.build().unwrap().cluster.unwrap().instance_id, "proxy-1");
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
        let (mut from_file, mut given) = (ProxySettings::default(), ProxySettings::default());
        for p in &read {
            from_file.set(&p.key, &p.value).unwrap();
        }
        for (k, v) in settings {
            given.set(k, v).unwrap();
        }
        assert_eq!(format!("{from_file:?}"), format!("{given:?}"));
        assert_eq!(from_file.data_dir, Path::new(r"C:\quotas"));
    }

    #[test]
    fn lines_a_proxy_should_not_guess_at_are_refused_with_their_number() {
        // The reading is kquota-host's (tested there); the proxy's error keeps the line.
        assert!(matches!(
            parse_properties("kquota.proxy.upstream=k:9092\nthis line is wrong\n"),
            Err(ConfigError::Setting(SettingError::Line { line: 2, .. }))
        ));
        let e = parse_properties("a=1\nb=\\u12\n").unwrap_err();
        assert!(
            matches!(e, ConfigError::Setting(SettingError::Properties(_))),
            "{e:?}"
        );
        assert!(
            e.to_string()
                .starts_with("line 2: malformed \\uXXXX escape"),
            "{e}"
        );
    }
}
