//! What can stop a proxy with checked settings from starting ([`ProxyError`]): a port, the
//! network threads, the engine, the store or the cluster.

use std::error::Error;
use std::fmt;
use std::io;
use std::net::SocketAddr;

/// Why the proxy could not start.
#[derive(Debug)]
#[non_exhaustive]
pub enum ProxyError {
    /// A listener could not be bound.
    Bind(SocketAddr, io::Error),
    /// The network threads could not be started.
    NetworkThreads(io::Error),
    /// The engine refused its settings.
    Engine(String),
    /// The store could not be opened (its directory, and why).
    Store(String, String),
    /// Joining the cluster through Kafka failed.
    Cluster(String),
}

impl fmt::Display for ProxyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProxyError::Bind(a, e) => write!(f, "cannot listen on {a}: {e}"),
            ProxyError::NetworkThreads(e) => write!(f, "cannot start the network threads: {e}"),
            ProxyError::Engine(e) => write!(f, "the quota engine's settings: {e}"),
            ProxyError::Store(dir, e) => write!(f, "the quota store in {dir}: {e}"),
            ProxyError::Cluster(e) => write!(f, "joining the cluster through Kafka: {e}"),
        }
    }
}

impl ProxyError {
    /// The exit status the binary ends with: 2 for settings the engine refuses (the operator's
    /// to fix, like a bad flag), 1 for the rest (the host's: a port in use, a store held).
    pub fn exit_status(&self) -> u8 {
        match self {
            ProxyError::Engine(_) => kquota_host::exit::USAGE,
            _ => kquota_host::exit::FAILURE,
        }
    }
}

impl Error for ProxyError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            ProxyError::Bind(_, e) | ProxyError::NetworkThreads(e) => Some(e),
            _ => None,
        }
    }
}
