//! [`ProxyConfig`]: where the proxy listens, the cluster it stands in front of, and the limits on
//! what one peer may cost. Its settings by key (`ProxyConfig::set`) are in `settings.rs`.

use std::collections::BTreeMap;
use std::fmt;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use kquota::meter::MeterConfig;
use kquota::SubQuotaPolicy;
#[cfg(feature = "cluster")]
use kquota_cluster::ClusterConfig;
use kquota_wire::Principal;

use crate::error::ProxyError;
use crate::settings::Deferred;
use crate::tls::{ClientTls, UpstreamTls};

/// The bootstrap listener of [`ProxyConfig::default`] (`kquota.proxy.listen`): 127.0.0.1:9092.
pub const DEFAULT_LISTEN: SocketAddr = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 9092));
/// The quota store's directory in [`ProxyConfig::default`] (`kquota.data.dir`).
pub const DEFAULT_DATA_DIR: &str = "kquota-proxy-data";

/// Kafka's `socket.request.max.bytes` default: the largest request frame, 100 MiB.
pub const DEFAULT_MAX_REQUEST_BYTES: usize = 100 * 1024 * 1024;
/// The largest response frame accepted from the cluster by default, 100 MiB.
pub const DEFAULT_MAX_RESPONSE_BYTES: usize = 100 * 1024 * 1024;
/// Requests a connection may have sent and not yet had answered, by default.
pub const DEFAULT_MAX_IN_FLIGHT: usize = 32;
/// Kafka's `connections.max.idle.ms` default: 10 minutes.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(600);
/// How long connecting to a broker may take, by default.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How many brokers the proxy will listen for, by default.
pub const DEFAULT_MAX_BROKERS: usize = 1024;

/// Kafka's `max.connections` has no bound by default; the proxy's is 10,000 client connections
/// (each holds two descriptors once its broker connection is open), lowered at start to what the
/// descriptor limit allows.
pub const DEFAULT_MAX_CONNECTIONS: usize = 10_000;
/// How long a new connection has to prove itself (the broker authenticated it, or answered a
/// request that needs no authentication) before it may give way to a new one, by default.
pub const DEFAULT_CONNECTION_GRACE: Duration = Duration::from_secs(10);
/// The bytes of requests being read and answers not yet taken by their clients, over all
/// connections, by default: room for two frames of the largest size and many small ones.
pub const DEFAULT_BUFFER_MEMORY: usize = 256 * 1024 * 1024;

/// Buckets that get metric series of their own, by default.
pub const DEFAULT_METRICS_MAX_BUCKETS: usize = 1000;

/// A host and a port, as `host:port` (an IPv6 address in brackets: `[::1]:9092`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct HostPort {
    /// A name or an address.
    pub host: String,
    /// The port.
    pub port: u16,
}

impl fmt::Display for HostPort {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

impl FromStr for HostPort {
    type Err = ProxyError;

    fn from_str(s: &str) -> Result<HostPort, ProxyError> {
        let bad = || ProxyError::HostPort(s.to_owned());
        let (host, port) = s.rsplit_once(':').ok_or_else(bad)?;
        let host = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        if host.is_empty() {
            return Err(bad());
        }
        Ok(HostPort {
            host: host.to_owned(),
            port: port.parse().map_err(|_| bad())?,
        })
    }
}

/// Everything the proxy is configured with. [`ProxyConfig::new`] gives Kafka's defaults for the
/// limits; set the fields to change them. Or start from [`ProxyConfig::default`] and give each
/// setting by its key, as a properties file names it ([`ProxyConfig::set`], then
/// [`ProxyConfig::finish`]); each field's doc names its key.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ProxyConfig {
    /// `kquota.proxy.listen`: the bootstrap listener; each connection to it is forwarded to
    /// [`ProxyConfig::upstream`].
    pub listen: SocketAddr,
    /// `kquota.proxy.upstream`: the cluster's bootstrap address.
    pub upstream: HostPort,
    /// `kquota.proxy.listen.base`: broker node N listens on this address's IP at its port plus N
    /// (port 0: a port the system chooses for each broker).
    pub listen_base: Option<SocketAddr>,
    /// `kquota.proxy.broker.map`: explicit listeners by node id, before
    /// [`ProxyConfig::listen_base`].
    pub broker_map: BTreeMap<i32, SocketAddr>,
    /// `kquota.proxy.advertised.host`: the host the rewritten responses name (by default, each
    /// broker listener's bound IP).
    pub advertised_host: Option<String>,
    /// `socket.request.max.bytes`: a larger request frame closes its connection.
    pub max_request_bytes: usize,
    /// `kquota.proxy.max.response.bytes`: a larger response frame from the cluster closes its
    /// connection.
    pub max_response_bytes: usize,
    /// `kquota.proxy.max.in.flight.requests`: requests a connection may have outstanding; the
    /// proxy reads no more of its requests until one is answered.
    pub max_in_flight: usize,
    /// `connections.max.idle.ms`: the longest a connection may wait for a peer that neither
    /// sends nor takes bytes while nothing is outstanding (or that stalls within a frame).
    pub idle_timeout: Duration,
    /// `kquota.proxy.connect.timeout.ms`: how long connecting to a broker may take.
    pub connect_timeout: Duration,
    /// `kquota.proxy.max.brokers`: how many brokers the proxy will listen for; a response naming
    /// more closes its connection.
    pub max_brokers: usize,
    /// `max.connections`: client connections open at once over every listener. When it is
    /// reached, the oldest connection not yet proven (from the address with the most of them), or
    /// the one idle longest, gives way to a new one.
    pub max_connections: usize,
    /// `max.connections.per.ip`: client connections open at once from one address.
    pub max_connections_per_ip: usize,
    /// `num.network.threads`: the threads that serve client connections, each connection on one
    /// of them for its life (given out in turn as they are accepted, as Kafka's acceptor gives
    /// them to its processors). Default: one for each CPU the process may run on.
    pub network_threads: usize,
    /// `kquota.connections.grace.ms`: how long a connection has to prove itself before it is
    /// closed (and may be made to give way before that).
    pub connection_grace: Duration,
    /// `kquota.proxy.buffer.memory.bytes`: the bytes held at once, over every connection, for
    /// requests being read and answers read from the broker and not yet taken by their client;
    /// reading waits while they are spent.
    pub buffer_memory: usize,
    /// `kquota.data.dir` (and `kquota.proxy.store.enable`): where the quotas altered at the proxy
    /// are kept (a redb store); `None` keeps them in memory only, lost when the proxy stops. Not
    /// used with [`ProxyConfig::cluster`].
    pub data_dir: Option<PathBuf>,
    /// `kquota.cluster.*`: share the configuration, the membership and `bps` usage with other
    /// instances through Kafka: the configuration log then takes the durable store's place.
    #[cfg(feature = "cluster")]
    pub cluster: Option<ClusterConfig>,
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
    pub instance_count: std::num::NonZeroU32,
    /// `kquota.producer.capacity.bytes.per.sec`: the capacity `producer_byte_rate:shares`
    /// divides, in bytes/s.
    pub producer_capacity: Option<f64>,
    /// `kquota.consumer.capacity.bytes.per.sec`: the capacity `consumer_byte_rate:shares`
    /// divides, in bytes/s.
    pub consumer_capacity: Option<f64>,
    /// The quota windows: Kafka's `quota.window.num` and `quota.window.size.seconds`.
    pub meter: MeterConfig,
    /// TLS on every listener (the client certificate's principal is the connection's): the
    /// `ssl.*` and `kquota.proxy.ssl.*` settings.
    pub client_tls: Option<Arc<ClientTls>>,
    /// TLS towards the cluster: the `kquota.proxy.upstream.ssl.*` settings.
    pub upstream_tls: Option<Arc<UpstreamTls>>,
    /// `kquota.proxy.metrics.listen`: where the Prometheus metrics are served (`GET /metrics`);
    /// `None`: not served.
    pub metrics_listen: Option<SocketAddr>,
    /// `kquota.proxy.metrics.max.buckets`: how many buckets get series of their own in the
    /// metrics; the rest are summed.
    pub metrics_max_buckets: usize,
    /// `log.format`: how log lines are written (`text`, the default, or `json`).
    pub log_format: kquota_host::LogFormat,
    /// What [`ProxyConfig::set`] was given that [`ProxyConfig::finish`] builds (the TLS files,
    /// the cluster's settings), and the settings two keys share.
    pub(crate) deferred: Deferred,
}

impl ProxyConfig {
    /// The proxy on `listen` in front of the cluster at `upstream`, with Kafka's default limits.
    /// Broker listeners still need [`ProxyConfig::listen_base`] or [`ProxyConfig::broker_map`].
    pub fn new(listen: SocketAddr, upstream: HostPort) -> ProxyConfig {
        ProxyConfig {
            listen,
            upstream,
            listen_base: None,
            broker_map: BTreeMap::new(),
            advertised_host: None,
            max_request_bytes: DEFAULT_MAX_REQUEST_BYTES,
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
            max_in_flight: DEFAULT_MAX_IN_FLIGHT,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            max_brokers: DEFAULT_MAX_BROKERS,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_connections_per_ip: usize::MAX,
            network_threads: std::thread::available_parallelism().map_or(1, usize::from),
            connection_grace: DEFAULT_CONNECTION_GRACE,
            buffer_memory: DEFAULT_BUFFER_MEMORY,
            data_dir: None,
            #[cfg(feature = "cluster")]
            cluster: None,
            super_users: Vec::new(),
            describe_allow_anonymous: false,
            draft_alter_quotas: false,
            policy: SubQuotaPolicy::default(),
            instance_count: std::num::NonZeroU32::MIN,
            producer_capacity: None,
            consumer_capacity: None,
            meter: MeterConfig::default(),
            client_tls: None,
            upstream_tls: None,
            metrics_listen: None,
            metrics_max_buckets: DEFAULT_METRICS_MAX_BUCKETS,
            log_format: kquota_host::LogFormat::Text,
            deferred: Deferred::default(),
        }
    }
}

impl Default for ProxyConfig {
    /// Every setting at the default the `kquota-proxy` binary has for it ([`SETTINGS`](crate::SETTINGS)):
    /// [`ProxyConfig::new`]'s, on [`DEFAULT_LISTEN`], with the quotas kept in [`DEFAULT_DATA_DIR`],
    /// and no upstream yet: set `kquota.proxy.upstream` ([`ProxyConfig::finish`] and
    /// [`Proxy::bind`](crate::Proxy::bind) refuse a configuration without one).
    fn default() -> Self {
        let unset = HostPort {
            host: String::new(),
            port: 0,
        };
        let mut config = ProxyConfig::new(DEFAULT_LISTEN, unset);
        config.data_dir = Some(PathBuf::from(DEFAULT_DATA_DIR));
        config
    }
}

impl ProxyConfig {
    /// Checks the settings that cannot work together.
    pub(crate) fn check(&self) -> Result<(), ProxyError> {
        if self.upstream.host.is_empty() {
            return Err(ProxyError::NoUpstream);
        }
        if self.deferred.unfinished {
            return Err(ProxyError::Unfinished);
        }
        if self.listen_base.is_none() && self.broker_map.is_empty() {
            return Err(ProxyError::NoBrokerListeners);
        }
        if self.advertised_host.is_none() {
            let unspecified = self
                .listen_base
                .iter()
                .chain(self.broker_map.values())
                .find(|a| a.ip().is_unspecified());
            if let Some(addr) = unspecified {
                return Err(ProxyError::AdvertisedHost(*addr));
            }
        }
        for (name, value) in [
            ("socket.request.max.bytes", self.max_request_bytes),
            ("kquota.proxy.max.response.bytes", self.max_response_bytes),
            ("kquota.proxy.max.in.flight.requests", self.max_in_flight),
            ("kquota.proxy.max.brokers", self.max_brokers),
            ("max.connections", self.max_connections),
            ("max.connections.per.ip", self.max_connections_per_ip),
            ("num.network.threads", self.network_threads),
            ("kquota.proxy.metrics.max.buckets", self.metrics_max_buckets),
        ] {
            if value == 0 {
                return Err(ProxyError::Zero(name));
            }
        }
        // Kafka's frame sizes are i32s.
        if self.max_request_bytes > i32::MAX as usize || self.max_response_bytes > i32::MAX as usize
        {
            return Err(ProxyError::FrameLimit);
        }
        // A frame the budget cannot hold would wait for it forever.
        let largest = self.max_request_bytes.max(self.max_response_bytes) + 4;
        if self.buffer_memory < largest {
            return Err(ProxyError::BufferMemory {
                buffer_memory: self.buffer_memory,
                largest,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_port() {
        let hp: HostPort = "kafka-1.example:9092".parse().unwrap();
        assert_eq!((hp.host.as_str(), hp.port), ("kafka-1.example", 9092));
        let v6: HostPort = "[::1]:19092".parse().unwrap();
        assert_eq!((v6.host.as_str(), v6.port), ("::1", 19092));
        assert_eq!(v6.to_string(), "[::1]:19092");
        for bad in ["kafka", ":9092", "kafka:", "kafka:70000"] {
            assert!(bad.parse::<HostPort>().is_err(), "{bad}");
        }
    }

    #[test]
    fn checks() {
        let upstream: HostPort = "k:9092".parse().unwrap();
        let mut c = ProxyConfig::new("127.0.0.1:0".parse().unwrap(), upstream);
        assert!(matches!(c.check(), Err(ProxyError::NoBrokerListeners)));
        c.listen_base = Some("0.0.0.0:19100".parse().unwrap());
        assert!(matches!(c.check(), Err(ProxyError::AdvertisedHost(_))));
        c.advertised_host = Some("proxy.example".into());
        c.check().unwrap();
        c.buffer_memory = c.max_response_bytes;
        assert!(matches!(c.check(), Err(ProxyError::BufferMemory { .. })));
        c.buffer_memory = DEFAULT_BUFFER_MEMORY;
        c.max_in_flight = 0;
        assert!(matches!(
            c.check(),
            Err(ProxyError::Zero("kquota.proxy.max.in.flight.requests"))
        ));
        c.max_in_flight = DEFAULT_MAX_IN_FLIGHT;
        let mut d = ProxyConfig::default();
        assert!(matches!(d.check(), Err(ProxyError::NoUpstream)));
        d.upstream = "k:9092".parse().unwrap();
        d.listen_base = c.listen_base;
        d.advertised_host = c.advertised_host.clone();
        d.check().unwrap();
        assert_eq!(d.listen, DEFAULT_LISTEN);
        assert_eq!(
            d.data_dir.as_deref(),
            Some(std::path::Path::new(DEFAULT_DATA_DIR))
        );
    }
}
