//! [`ProxyConfig`]: where the proxy listens, the cluster it stands in front of, and the limits on
//! what one peer may cost.

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::str::FromStr;
use std::time::Duration;

use std::path::PathBuf;
use std::sync::Arc;

use kquota::meter::MeterConfig;
use kquota::SubQuotaPolicy;
#[cfg(feature = "cluster")]
use kquota_cluster::ClusterConfig;
use kquota_wire::Principal;

use crate::error::ProxyError;
use crate::tls::{ClientTls, UpstreamTls};

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
/// limits; set the fields to change them.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ProxyConfig {
    /// The bootstrap listener: each connection to it is forwarded to [`ProxyConfig::upstream`].
    pub listen: SocketAddr,
    /// The cluster's bootstrap address.
    pub upstream: HostPort,
    /// Broker node N listens on this address's IP at its port plus N (port 0: a port the system
    /// chooses for each broker).
    pub listen_base: Option<SocketAddr>,
    /// Explicit listeners by node id, before [`ProxyConfig::listen_base`].
    pub broker_map: BTreeMap<i32, SocketAddr>,
    /// The host the rewritten responses name (by default, each broker listener's bound IP).
    pub advertised_host: Option<String>,
    /// `socket.request.max.bytes`: a larger request frame closes its connection.
    pub max_request_bytes: usize,
    /// A larger response frame from the cluster closes its connection.
    pub max_response_bytes: usize,
    /// Requests a connection may have outstanding; the proxy reads no more of its requests
    /// until one is answered.
    pub max_in_flight: usize,
    /// `connections.max.idle.ms`: the longest a connection may wait for a peer that neither
    /// sends nor takes bytes while nothing is outstanding (or that stalls within a frame).
    pub idle_timeout: Duration,
    /// How long connecting to a broker may take.
    pub connect_timeout: Duration,
    /// How many brokers the proxy will listen for; a response naming more closes its connection.
    pub max_brokers: usize,
    /// `max.connections`: client connections open at once over every listener. When it is
    /// reached, the oldest connection not yet proven (from the address with the most of them), or
    /// the one idle longest, gives way to a new one.
    pub max_connections: usize,
    /// `max.connections.per.ip`: client connections open at once from one address.
    pub max_connections_per_ip: usize,
    /// `kquota.connections.grace.ms`: how long a connection has to prove itself before it is
    /// closed (and may be made to give way before that).
    pub connection_grace: Duration,
    /// The bytes held at once, over every connection, for requests being read and answers read
    /// from the broker and not yet taken by their client; reading waits while they are spent.
    pub buffer_memory: usize,
    /// Where the quotas altered at the proxy are kept (a redb store); `None` keeps them in
    /// memory only, lost when the proxy stops. Not used with [`ProxyConfig::cluster`].
    pub data_dir: Option<PathBuf>,
    /// Share the configuration, the membership and `bps` usage with other instances through
    /// Kafka: the configuration log then takes the durable store's place.
    #[cfg(feature = "cluster")]
    pub cluster: Option<ClusterConfig>,
    /// Kafka's `super.users`: the principals that may alter quotas at the proxy.
    pub super_users: Vec<Principal>,
    /// Let ANONYMOUS describe quotas (authenticated principals always may).
    pub describe_allow_anonymous: bool,
    /// Serve the seeds' draft AlterQuotas on API key 50 (which hides the cluster's
    /// DescribeUserScramCredentials from clients of the proxy).
    pub draft_alter_quotas: bool,
    /// The engine's sub-quota policy.
    pub policy: SubQuotaPolicy,
    /// How many instances share the `:bps` quotas (the seeds' `kquota.broker.count`): each
    /// enforces its part, the cluster-wide limit divided by this.
    pub instance_count: std::num::NonZeroU32,
    /// The capacity `producer_byte_rate:shares` divides, in bytes/s.
    pub producer_capacity: Option<f64>,
    /// The capacity `consumer_byte_rate:shares` divides, in bytes/s.
    pub consumer_capacity: Option<f64>,
    /// The quota windows: Kafka's `quota.window.num` and `quota.window.size.seconds`.
    pub meter: MeterConfig,
    /// TLS on every listener (the client certificate's principal is the connection's).
    pub client_tls: Option<Arc<ClientTls>>,
    /// TLS towards the cluster.
    pub upstream_tls: Option<Arc<UpstreamTls>>,
    /// Where the Prometheus metrics are served (`GET /metrics`); `None`: not served.
    pub metrics_listen: Option<SocketAddr>,
    /// How many buckets get series of their own in the metrics; the rest are summed.
    pub metrics_max_buckets: usize,
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
        }
    }

    /// Checks the settings that cannot work together.
    pub(crate) fn check(&self) -> Result<(), ProxyError> {
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
            ("max_request_bytes", self.max_request_bytes),
            ("max_response_bytes", self.max_response_bytes),
            ("max_in_flight", self.max_in_flight),
            ("max_brokers", self.max_brokers),
            ("max_connections", self.max_connections),
            ("max_connections_per_ip", self.max_connections_per_ip),
            ("metrics_max_buckets", self.metrics_max_buckets),
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
        assert!(matches!(c.check(), Err(ProxyError::Zero("max_in_flight"))));
    }
}
