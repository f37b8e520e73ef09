//! What can stop the proxy from starting.

use std::fmt;
use std::io;
use std::net::SocketAddr;

/// Why the proxy could not start.
#[derive(Debug)]
#[non_exhaustive]
pub enum ProxyError {
    /// Not a `host:port`.
    HostPort(String),
    /// Neither a listen base nor an explicit broker map: brokers would have no listeners.
    NoBrokerListeners,
    /// A broker listener on an unspecified address (0.0.0.0, ::) needs an advertised host.
    AdvertisedHost(SocketAddr),
    /// A limit that must be above zero is zero.
    Zero(&'static str),
    /// A frame limit above Kafka's largest frame (2^31 - 1 bytes).
    FrameLimit,
    /// The buffer memory cannot hold the largest frame the limits allow.
    BufferMemory {
        /// The buffer memory set.
        buffer_memory: usize,
        /// The largest request or response frame, with its size prefix.
        largest: usize,
    },
    /// A listener could not be bound.
    Bind(SocketAddr, io::Error),
    /// The engine's settings do not work together.
    Engine(String),
    /// The durable quota store (its directory, and why) could not be opened or read.
    Store(String, String),
    /// Joining the cluster through Kafka failed (the configuration log, the membership or the
    /// usage sharing).
    Cluster(String),
}

impl fmt::Display for ProxyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProxyError::HostPort(s) => write!(f, "{s:?} is not a host:port"),
            ProxyError::NoBrokerListeners => {
                f.write_str("brokers need listeners: give a listen base or a broker map")
            }
            ProxyError::AdvertisedHost(a) => write!(
                f,
                "the broker listener {a} is on an unspecified address: give an advertised host"
            ),
            ProxyError::Zero(name) => write!(f, "{name} must be above zero"),
            ProxyError::FrameLimit => f.write_str("a frame limit is above 2147483647 bytes"),
            ProxyError::BufferMemory {
                buffer_memory,
                largest,
            } => write!(
                f,
                "the buffer memory ({buffer_memory} bytes) must hold the largest request or \
                 response frame ({largest} bytes with its size prefix)"
            ),
            ProxyError::Bind(a, e) => write!(f, "cannot listen on {a}: {e}"),
            ProxyError::Engine(e) => write!(f, "the quota engine's settings: {e}"),
            ProxyError::Store(dir, e) => write!(f, "the quota store in {dir}: {e}"),
            ProxyError::Cluster(e) => write!(f, "joining the cluster through Kafka: {e}"),
        }
    }
}

impl std::error::Error for ProxyError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ProxyError::Bind(_, e) => Some(e),
            _ => None,
        }
    }
}
