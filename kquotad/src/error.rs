//! What can go wrong before the server serves: a setting ([`ConfigError`]: one setting's
//! [`SettingError`], as both servers word it, or settings that do not work together), or the start
//! itself ([`StartError`]).
//!
//! Every message is the one `kquotad` prints; tests and the operators' scripts match on them.

use std::error::Error;
use std::fmt;

use std::net::SocketAddr;

use kquota_host::settings::{Problem, SettingError, Source};

/// A setting that cannot be used, or settings that do not work together.
#[derive(Debug)]
#[non_exhaustive]
pub enum ConfigError {
    /// One setting: a line of a file that is not `key=value`, an unknown key, or a value the key
    /// cannot hold.
    Setting(SettingError),
    /// A TLS listener, and neither `ssl.keystore.location` nor an inline certificate chain and key.
    NoKeystore,
    /// A SASL listener, and no `sasl.credentials.file`.
    NoCredentialsFile,
    /// A bounded `queued.max.request.bytes` below `socket.request.max.bytes` (Kafka refuses it
    /// too): a frame larger than the budget could never be read.
    QueuedBelowRequestMax {
        /// `queued.max.request.bytes`.
        queued: usize,
        /// `socket.request.max.bytes`.
        request_max: usize,
    },
    /// The TLS identity or trusted certificates cannot be loaded, or TLS refuses them.
    Tls(Source),
    /// The SASL credentials file cannot be read.
    Credentials(Source),
    /// The engine refuses its settings.
    Engine(Source),
}

impl ConfigError {
    /// `key=value` is refused for `problem`.
    pub(crate) fn value(key: &str, value: &str, problem: impl Into<Problem>) -> ConfigError {
        ConfigError::Setting(SettingError::value(key, value, problem.into()))
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::Setting(e) => write!(f, "{e}"),
            ConfigError::Tls(e) | ConfigError::Credentials(e) | ConfigError::Engine(e) => {
                write!(f, "{e}")
            }
            ConfigError::NoKeystore => f.write_str(
                "a TLS listener needs ssl.keystore.location (a PEM file with the certificate chain and key), or ssl.keystore.certificate.chain and ssl.keystore.key",
            ),
            ConfigError::QueuedBelowRequestMax { queued, request_max } => write!(
                f,
                "queued.max.request.bytes must be larger or equal to socket.request.max.bytes \
                 ({queued} < {request_max}); -1 for no limit"
            ),
            ConfigError::NoCredentialsFile => f.write_str(
                "a SASL listener needs sasl.credentials.file (make entries with `kquotad scram-credential`)",
            ),
        }
    }
}

impl Error for ConfigError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            // A setting prints as its error: the source is the error's own.
            ConfigError::Setting(e) => e.source(),
            ConfigError::Tls(e) | ConfigError::Credentials(e) | ConfigError::Engine(e) => {
                Some(&**e)
            }
            _ => None,
        }
    }
}

impl From<SettingError> for ConfigError {
    fn from(e: SettingError) -> Self {
        ConfigError::Setting(e)
    }
}

/// Why a value of one of `kquotad`'s own settings is refused (the reasons both servers share are
/// [`Problem`]'s); kept as the source of [`Problem::Refused`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ValueProblem {
    /// A keystore or truststore type other than PEM.
    NotPem,
    /// A key password: encrypted PEM keys are not supported.
    EncryptedKey,
    /// `sasl.enabled.mechanisms` names none.
    NoMechanism,
    /// An advertised listener with port 0.
    AdvertisedPortZero,
    /// A listener list entry that is not `NAME://host:port`.
    NotNameHostPort(String),
    /// A listener list entry with an empty name.
    NoListenerName(String),
    /// A listener list entry with no port.
    NoPort(String),
    /// A listener list entry whose port is not a number from 0 to 65535.
    BadPort(String),
    /// An empty listener list.
    NoListener,
    /// A `listener.security.protocol.map` entry that is not `NAME:PROTOCOL`.
    NotNameProtocol(String),
    /// A listener whose name is no security protocol and is not in
    /// `listener.security.protocol.map`.
    NotAProtocol(String),
    /// A listener host that is not an IP address (nor empty, nor `localhost`).
    NotAnIpAddress(String),
    /// Two listeners with the same name.
    NameTwice(String),
    /// Two listeners on the same port (other than 0).
    PortTwice(u16),
}

impl fmt::Display for ValueProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ValueProblem::NotPem => f.write_str("only PEM is supported"),
            ValueProblem::EncryptedKey => f.write_str(
                "encrypted PEM keys are not supported; leave the key unencrypted and protect the file",
            ),
            ValueProblem::NoMechanism => f.write_str("name at least one mechanism"),
            ValueProblem::AdvertisedPortZero => f.write_str("an advertised port must not be 0"),
            ValueProblem::NotNameHostPort(item) => write!(f, "'{item}' is not NAME://host:port"),
            ValueProblem::NoListenerName(item) => write!(f, "'{item}' has no listener name"),
            ValueProblem::NoPort(item) => write!(f, "'{item}' has no port"),
            ValueProblem::BadPort(item) => write!(f, "'{item}': the port must be a number 0-65535"),
            ValueProblem::NoListener => f.write_str("no listener given"),
            ValueProblem::NotNameProtocol(item) => write!(f, "'{item}' is not NAME:PROTOCOL"),
            ValueProblem::NotAProtocol(name) => write!(
                f,
                "listener '{name}' is not a security protocol; map it with listener.security.protocol.map={name}:SASL_SSL (or another protocol)"
            ),
            ValueProblem::NotAnIpAddress(host) => write!(f, "'{host}' is not an IP address"),
            ValueProblem::NameTwice(name) => write!(f, "listener name '{name}' is used twice"),
            ValueProblem::PortTwice(port) => write!(f, "port {port} is used twice"),
        }
    }
}

impl Error for ValueProblem {}

impl From<ValueProblem> for Problem {
    fn from(p: ValueProblem) -> Problem {
        Problem::refused(p)
    }
}

/// Why the server could not start.
#[derive(Debug)]
#[non_exhaustive]
pub enum StartError {
    /// A setting is unusable.
    Config(ConfigError),
    /// The store failed to open or load.
    Store(kquota_store::StoreError),
    /// A listener could not be bound.
    Bind(SocketAddr, std::io::Error),
    /// The network threads could not be started.
    NetworkThreads(std::io::Error),
    /// Joining the cluster through Kafka failed (the configuration log or the membership).
    #[cfg(feature = "cluster")]
    Cluster(kquota_cluster::ClusterError),
}

impl fmt::Display for StartError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StartError::Config(e) => write!(f, "{e}"),
            StartError::Store(e) => write!(f, "{e}"),
            StartError::Bind(addr, e) => write!(f, "cannot listen on {addr}: {e}"),
            StartError::NetworkThreads(e) => write!(f, "cannot start the network threads: {e}"),
            #[cfg(feature = "cluster")]
            StartError::Cluster(e) => write!(f, "joining the cluster through Kafka: {e}"),
        }
    }
}

impl Error for StartError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            // Config and Store print as their error: the source is the error's own.
            StartError::Config(e) => e.source(),
            StartError::Store(e) => e.source(),
            StartError::Bind(_, e) | StartError::NetworkThreads(e) => Some(e),
            #[cfg(feature = "cluster")]
            StartError::Cluster(e) => Some(e),
        }
    }
}

impl From<ConfigError> for StartError {
    fn from(e: ConfigError) -> Self {
        StartError::Config(e)
    }
}
