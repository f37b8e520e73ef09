//! [`ProxyConfig`]: the proxy's settings once checked, each in a field private to the crate, and
//! the defaults. Only [`ProxySettings::build`](super::ProxySettings::build) makes one, so a
//! `ProxyConfig` holds only settings that work together, and nothing checks them again.

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

use crate::tls::{ClientTls, UpstreamTls};

/// The bootstrap listener of [`ProxySettings::default`](super::ProxySettings::default) (`kquota.proxy.listen`): 127.0.0.1:9092.
pub const DEFAULT_LISTEN: SocketAddr = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 9092));
/// The quota store's directory in [`ProxySettings::default`](super::ProxySettings::default) (`kquota.data.dir`).
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

/// A host and a port, as `host:port` (an IPv6 address in brackets: `[::1]:9092`). The host is
/// never empty.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct HostPort {
    host: String,
    port: u16,
}

impl HostPort {
    /// `host` and `port`, if the host is not empty.
    pub fn new(host: impl Into<String>, port: u16) -> Result<HostPort, NotHostPort> {
        let host = host.into();
        if host.is_empty() {
            return Err(NotHostPort(format!(":{port}")));
        }
        Ok(HostPort { host, port })
    }

    /// The host: a name or an address.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }
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

/// A value that is not `host:port`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NotHostPort(pub String);

impl fmt::Display for NotHostPort {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?} is not a host:port", self.0)
    }
}

impl std::error::Error for NotHostPort {}

impl FromStr for HostPort {
    type Err = NotHostPort;

    fn from_str(s: &str) -> Result<HostPort, NotHostPort> {
        let bad = || NotHostPort(s.to_owned());
        let (host, port) = s.rsplit_once(':').ok_or_else(bad)?;
        let host = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        HostPort::new(host, port.parse().map_err(|_| bad())?).map_err(|_| bad())
    }
}

/// Everything the proxy is configured with, checked: made by
/// [`ProxySettings::build`](super::ProxySettings::build) and given to
/// [`Proxy::bind`](crate::Proxy::bind). Each field is the setting its doc names.
#[derive(Clone, Debug)]
pub struct ProxyConfig {
    /// `kquota.proxy.listen`: the bootstrap listener.
    pub(crate) listen: SocketAddr,
    /// `kquota.proxy.upstream`: the cluster's bootstrap address.
    pub(crate) upstream: HostPort,
    /// `kquota.proxy.listen.base`.
    pub(crate) listen_base: Option<SocketAddr>,
    /// `kquota.proxy.broker.map`.
    pub(crate) broker_map: BTreeMap<i32, SocketAddr>,
    /// `kquota.proxy.advertised.host`.
    pub(crate) advertised_host: Option<String>,
    /// `socket.request.max.bytes` (at most 2³¹ − 1).
    pub(crate) max_request_bytes: usize,
    /// `kquota.proxy.max.response.bytes` (at most 2³¹ − 1).
    pub(crate) max_response_bytes: usize,
    /// `kquota.proxy.max.in.flight.requests` (at least 1).
    pub(crate) max_in_flight: usize,
    /// `connections.max.idle.ms`.
    pub(crate) idle_timeout: Duration,
    /// `kquota.proxy.connect.timeout.ms`.
    pub(crate) connect_timeout: Duration,
    /// `kquota.proxy.max.brokers` (at least 1).
    pub(crate) max_brokers: usize,
    /// `max.connections` (at least 1).
    pub(crate) max_connections: usize,
    /// `max.connections.per.ip` (at least 1).
    pub(crate) max_connections_per_ip: usize,
    /// `num.network.threads`.
    pub(crate) network_threads: kquota_host::ThreadCount,
    /// `kquota.connections.grace.ms`.
    pub(crate) connection_grace: Duration,
    /// `kquota.proxy.buffer.memory.bytes`: at least the largest frame and its size prefix.
    pub(crate) buffer_memory: usize,
    /// `kquota.data.dir`, unless `kquota.proxy.store.enable=false` (`None`: memory only).
    pub(crate) data_dir: Option<PathBuf>,
    /// `kquota.cluster.*`.
    #[cfg(feature = "cluster")]
    pub(crate) cluster: Option<ClusterConfig>,
    /// `super.users`.
    pub(crate) super_users: Vec<Principal>,
    /// `kquota.describe.allow.anonymous`.
    pub(crate) describe_allow_anonymous: bool,
    /// `kquota.draft.alter.quotas.enable`.
    pub(crate) draft_alter_quotas: bool,
    /// `kquota.sub.quota.policy`.
    pub(crate) policy: SubQuotaPolicy,
    /// `kquota.broker.count`.
    pub(crate) instance_count: std::num::NonZeroU32,
    /// `kquota.producer.capacity.bytes.per.sec`.
    pub(crate) producer_capacity: Option<f64>,
    /// `kquota.consumer.capacity.bytes.per.sec`.
    pub(crate) consumer_capacity: Option<f64>,
    /// `quota.window.num` and `quota.window.size.seconds`.
    pub(crate) meter: MeterConfig,
    /// TLS towards clients, built from the `ssl.*` and `kquota.proxy.ssl.*` settings' files.
    pub(crate) client_tls: Option<Arc<ClientTls>>,
    /// TLS towards the cluster, built from the `kquota.proxy.upstream.ssl.*` settings' files.
    pub(crate) upstream_tls: Option<Arc<UpstreamTls>>,
    /// `kquota.proxy.metrics.listen`.
    pub(crate) metrics_listen: Option<SocketAddr>,
    /// `kquota.proxy.metrics.max.buckets` (at least 1).
    pub(crate) metrics_max_buckets: usize,
    /// `log.format`.
    pub(crate) log_format: kquota_host::LogFormat,
}

impl ProxyConfig {
    /// The bootstrap listener's address, as configured (port 0: the system's choice).
    pub fn listen(&self) -> SocketAddr {
        self.listen
    }

    /// The cluster's bootstrap address.
    pub fn upstream(&self) -> &HostPort {
        &self.upstream
    }

    /// The base of the broker listeners, if set.
    pub fn listen_base(&self) -> Option<SocketAddr> {
        self.listen_base
    }

    /// How log lines are to be written.
    pub fn log_format(&self) -> kquota_host::LogFormat {
        self.log_format
    }

    /// The cluster shared with other instances, if any.
    #[cfg(feature = "cluster")]
    pub fn cluster(&self) -> Option<&ClusterConfig> {
        self.cluster.as_ref()
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
            assert_eq!(
                bad.parse::<HostPort>(),
                Err(NotHostPort(bad.to_owned())),
                "{bad}"
            );
        }
    }
}
