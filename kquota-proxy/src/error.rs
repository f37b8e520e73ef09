//! What can stop the proxy from starting: a setting ([`ConfigError`], with the [`Problem`] of a
//! refused value or the [`LineProblem`] of a properties line), or the start itself
//! ([`ProxyError`]).
//!
//! The messages follow `kquotad`'s (`key=value: why`), worded the same where the problem is the
//! same; the binary prints them as they are, after the file and line or the flag they came from.

use std::error::Error;
use std::fmt;

pub use kquota_host::LineProblem;
use std::io;
use std::net::SocketAddr;

use crate::tls::TlsConfigError;

/// Why the proxy could not start.
#[derive(Debug)]
#[non_exhaustive]
pub enum ProxyError {
    /// Not a `host:port`.
    HostPort(String),
    /// No upstream: a configuration made from [`ProxyConfig::default`](crate::ProxyConfig) and
    /// never given `kquota.proxy.upstream`.
    NoUpstream,
    /// Settings given to [`ProxyConfig::set`](crate::ProxyConfig::set) that take effect in
    /// [`ProxyConfig::finish`](crate::ProxyConfig::finish) (TLS, many proxies), which was not
    /// called since.
    Unfinished,
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
    /// The network threads could not be started.
    NetworkThreads(io::Error),
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
            ProxyError::NoUpstream => f.write_str(
                "no upstream: set kquota.proxy.upstream (--upstream), the cluster's bootstrap address",
            ),
            ProxyError::Unfinished => f.write_str(
                "settings were set with ProxyConfig::set and not finished: call ProxyConfig::finish",
            ),
            ProxyError::NoBrokerListeners => f.write_str(
                "brokers need listeners: set kquota.proxy.listen.base (--listen-base) or \
                 kquota.proxy.broker.map (--broker-map)",
            ),
            ProxyError::AdvertisedHost(a) => write!(
                f,
                "the broker listener {a} is on an unspecified address: set \
                 kquota.proxy.advertised.host (--advertised-host)"
            ),
            ProxyError::Zero(name) => write!(f, "{name} must be above zero"),
            ProxyError::FrameLimit => f.write_str(
                "socket.request.max.bytes and kquota.proxy.max.response.bytes must be at most \
                 2147483647",
            ),
            ProxyError::BufferMemory {
                buffer_memory,
                largest,
            } => write!(
                f,
                "kquota.proxy.buffer.memory.bytes ({buffer_memory}) must hold the largest request \
                 or response frame ({largest} bytes with its size prefix; socket.request.max.bytes \
                 and kquota.proxy.max.response.bytes set the largest)"
            ),
            ProxyError::Bind(a, e) => write!(f, "cannot listen on {a}: {e}"),
            ProxyError::NetworkThreads(e) => write!(f, "cannot start the network threads: {e}"),
            ProxyError::Engine(e) => write!(f, "the quota engine's settings: {e}"),
            ProxyError::Store(dir, e) => write!(f, "the quota store in {dir}: {e}"),
            ProxyError::Cluster(e) => write!(f, "joining the cluster through Kafka: {e}"),
        }
    }
}

impl ProxyError {
    /// The exit status a start that failed with this ends with, the same as `kquotad`'s for the
    /// same fault: [`USAGE`](kquota_host::exit::USAGE) (2) for settings that cannot work,
    /// [`FAILURE`](kquota_host::exit::FAILURE) (1) for what went wrong around correct settings (a
    /// port in use, a store that cannot be opened, Kafka out of reach).
    pub fn exit_status(&self) -> u8 {
        match self {
            ProxyError::Bind(..)
            | ProxyError::NetworkThreads(_)
            | ProxyError::Store(..)
            | ProxyError::Cluster(_) => kquota_host::exit::FAILURE,
            _ => kquota_host::exit::USAGE,
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

/// An error of another crate (the engine's, `kquota-wire`'s), kept as the [`Error::source`].
pub type Source = Box<dyn Error + Send + Sync>;

/// A setting that cannot be used, or settings that do not work together: what
/// [`ProxyConfig::set`](crate::ProxyConfig::set), [`ProxyConfig::finish`](crate::ProxyConfig::finish)
/// and [`parse_properties`](crate::parse_properties) refuse.
#[derive(Debug)]
#[non_exhaustive]
pub enum ConfigError {
    /// A line of a properties file is not `key=value`.
    Line {
        /// The 1-based number of the line.
        line: usize,
        /// What is wrong with it.
        problem: LineProblem,
    },
    /// The properties text cannot be read at all (a malformed `\uXXXX` escape); the source names
    /// the line.
    Properties(Source),
    /// A setting's value is refused.
    Value {
        /// The setting (`max.connections`).
        key: String,
        /// The value as given.
        value: String,
        /// Why it is refused.
        problem: Problem,
    },
    /// A key that [`ProxyConfig::set`](crate::ProxyConfig::set) does not know.
    UnknownKey(String),
    /// A setting every proxy needs was not given (its key).
    Missing(&'static str),
    /// A setting that means nothing without another, which was not given.
    Needs {
        /// The setting given.
        key: &'static str,
        /// The setting it needs.
        needs: &'static str,
    },
    /// The TLS files cannot be loaded, or TLS refuses them.
    Tls(TlsConfigError),
    /// Settings that do not work together (no broker listeners, a buffer memory smaller than the
    /// largest frame, ...).
    Conflict(ProxyError),
}

impl ConfigError {
    /// `key=value` is refused for `problem`.
    pub(crate) fn value(key: &str, value: &str, problem: Problem) -> ConfigError {
        ConfigError::Value {
            key: key.to_owned(),
            value: value.to_owned(),
            problem,
        }
    }

    /// The setting this error is about, when it is about one: the binary names where that setting
    /// came from (a file's line, a flag).
    pub fn key(&self) -> Option<&str> {
        match self {
            ConfigError::Value { key, .. } => Some(key),
            ConfigError::UnknownKey(key) => Some(key),
            ConfigError::Missing(key) | ConfigError::Needs { key, .. } => Some(key),
            ConfigError::Tls(TlsConfigError::PrincipalMappingRules { .. }) => {
                Some("ssl.principal.mapping.rules")
            }
            _ => None,
        }
    }
}

/// `key (--flag)`, how messages name a setting the binary has a flag for.
fn named(key: &str) -> String {
    match crate::settings::flag_of(key) {
        Some(flag) => format!("{key} ({flag})"),
        None => key.to_owned(),
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::Line { line, problem } => write!(f, "line {line}: {problem}"),
            ConfigError::Properties(e) => write!(f, "{e}"),
            ConfigError::Value {
                key,
                value,
                problem,
            } => write!(f, "{key}={value}: {problem}"),
            ConfigError::UnknownKey(key) => f.write_str(&kquota_host::exit::unknown_setting(
                key,
                crate::SETTINGS.iter().map(|s| s.key),
            )),
            ConfigError::Missing(key) => write!(f, "{} is required", named(key)),
            ConfigError::Needs { key, needs } => {
                write!(f, "{} needs {}", named(key), named(needs))
            }
            ConfigError::Tls(e) => write!(f, "{e}"),
            ConfigError::Conflict(e) => write!(f, "{e}"),
        }
    }
}

impl Error for ConfigError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            ConfigError::Properties(e) => Some(&**e),
            ConfigError::Value { problem, .. } => problem.source(),
            // Tls and Conflict print as their error: the source is the error's own.
            ConfigError::Tls(e) => e.source(),
            ConfigError::Conflict(e) => e.source(),
            _ => None,
        }
    }
}

impl From<TlsConfigError> for ConfigError {
    fn from(e: TlsConfigError) -> Self {
        ConfigError::Tls(e)
    }
}

/// Why a setting's value is refused.
#[derive(Debug)]
#[non_exhaustive]
pub enum Problem {
    /// Not `true` or `false`.
    NotBool,
    /// Not a whole number, or one below the given minimum.
    WholeNumberAtLeast(u32),
    /// Not a whole number of milliseconds, or one below the given minimum (0: any).
    Milliseconds(u32),
    /// Not a frame size: a whole number from 1 to 2³¹ − 1, as Kafka's `int` settings.
    FrameSize,
    /// Not a finite number above 0.
    PositiveNumber,
    /// Not -1 (the cluster's default) nor a whole number from 1 to 32767.
    ReplicationFactor,
    /// Empty.
    Empty,
    /// A setting of a feature this build does not have (its name).
    NotBuilt(&'static str),
    /// Not `host:port`.
    NotHostPort,
    /// Not an IP address and a port.
    NotIpPort,
    /// A broker map entry that is not `NODE=IP:PORT` (the entry).
    NotNodeAddress(String),
    /// A broker map entry whose node is not a whole number from 0 to 2³¹ − 1 (the entry).
    NotNodeId(String),
    /// A node given two listeners in one broker map.
    NodeTwice(i32),
    /// One listener (other than port 0) given to two nodes.
    AddressTwice(SocketAddr),
    /// An `ssl.client.auth` other than `required`, `requested` or `none`.
    ClientAuth,
    /// A file that cannot be opened.
    Unreadable(io::Error),
    /// Refused by the parser of the value's type (principals, policies, `ssl.client.auth`, the
    /// quota window), whose error is the source.
    Refused(Source),
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::NotBool => f.write_str("must be true or false"),
            Problem::WholeNumberAtLeast(min) => write!(f, "must be a whole number ≥ {min}"),
            Problem::Milliseconds(0) => f.write_str("must be a whole number of milliseconds"),
            Problem::Milliseconds(min) => {
                write!(f, "must be a whole number of milliseconds ≥ {min}")
            }
            Problem::FrameSize => f.write_str("must be a whole number between 1 and 2147483647"),
            Problem::PositiveNumber => f.write_str("must be a number > 0"),
            Problem::ReplicationFactor => f.write_str(
                "must be -1 (the cluster's default) or a whole number between 1 and 32767",
            ),
            Problem::Empty => f.write_str("must not be empty"),
            Problem::NotBuilt(feature) => write!(
                f,
                "this kquota-proxy was built without the `{feature}` feature (build it with `--features {feature}`)"
            ),
            Problem::NotHostPort => {
                f.write_str("must be host:port (an IPv6 address in brackets: [::1]:9092)")
            }
            Problem::NotIpPort => f.write_str(
                "must be an IP address and a port, IP:PORT (IPv6 in brackets: [::1]:9092)",
            ),
            Problem::NotNodeAddress(item) => write!(f, "'{item}' is not NODE=IP:PORT"),
            Problem::NotNodeId(item) => {
                write!(f, "'{item}': the node must be a whole number ≥ 0")
            }
            Problem::NodeTwice(node) => write!(f, "node {node} is mapped twice"),
            Problem::AddressTwice(addr) => write!(f, "{addr} is mapped to two nodes"),
            // kquota-wire's wording, whose own message names the key as well.
            Problem::ClientAuth => f.write_str("expected required, requested or none"),
            Problem::Unreadable(e) => write!(f, "cannot read: {e}"),
            Problem::Refused(e) => write!(f, "{e}"),
        }
    }
}

impl Error for Problem {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            Problem::Unreadable(e) => Some(e),
            Problem::Refused(e) => Some(&**e),
            _ => None,
        }
    }
}
