//! What can go wrong before the server serves: a setting ([`ConfigError`], with the [`Problem`] of a
//! refused value or the [`LineProblem`] of a properties line), or the start itself ([`StartError`]).
//!
//! Every message is the one `kquotad` prints; tests and the operators' scripts match on them.

use std::error::Error;
use std::fmt;

pub use kquota_host::LineProblem;
use std::net::SocketAddr;

/// An error of another crate (the engine's, `kquota-wire`'s), kept as the [`Error::source`].
pub type Source = Box<dyn Error + Send + Sync>;

/// A setting that cannot be used, or settings that do not work together.
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
    /// A key that `ServerConfig::set` does not know.
    UnknownKey(String),
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
    pub(crate) fn value(key: &str, value: &str, problem: Problem) -> ConfigError {
        ConfigError::Value {
            key: key.to_owned(),
            value: value.to_owned(),
            problem,
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::Line { line, problem } => write!(f, "line {line}: {problem}"),
            ConfigError::Properties(e)
            | ConfigError::Tls(e)
            | ConfigError::Credentials(e)
            | ConfigError::Engine(e) => write!(f, "{e}"),
            ConfigError::Value {
                key,
                value,
                problem,
            } => write!(f, "{key}={value}: {problem}"),
            ConfigError::UnknownKey(key) => f.write_str(&kquota_host::exit::unknown_setting(
                key,
                crate::KNOWN_PROPERTIES.iter().copied(),
            )),
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
            ConfigError::Properties(e)
            | ConfigError::Tls(e)
            | ConfigError::Credentials(e)
            | ConfigError::Engine(e) => Some(&**e),
            ConfigError::Value { problem, .. } => problem.source(),
            _ => None,
        }
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
    /// Not a whole number from the first to the second, both included.
    WholeNumberBetween(u32, u32),
    /// Not a whole number of milliseconds, or one below the given minimum (0: any).
    Milliseconds(u32),
    /// Not a frame size: a whole number from 1 to 2³¹ − 1, as Kafka's `int` settings.
    FrameSize,
    /// Not a whole number of bytes (Kafka's LONG).
    Bytes,
    /// Not a finite number above 0.
    PositiveNumber,
    /// Empty.
    Empty,
    /// A keystore or truststore type other than PEM.
    NotPem,
    /// A key password: encrypted PEM keys are not supported.
    EncryptedKey,
    /// A principal mapping other than `DEFAULT`.
    PrincipalMapping,
    /// A setting of a feature this build does not have (its name).
    NotBuilt(&'static str),
    /// `sasl.enabled.mechanisms` names none.
    NoMechanism,
    /// An advertised listener with port 0.
    AdvertisedPortZero,
    /// Not an IP address and port (`127.0.0.1:9405`, `[::1]:9405`).
    IpPort,
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
    /// Refused by the parser of the value's type (principals, mechanisms, protocols, policies,
    /// `ssl.client.auth`), whose error is the source.
    Refused(Source),
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::NotBool => f.write_str("must be true or false"),
            Problem::WholeNumberAtLeast(min) => write!(f, "must be a whole number ≥ {min}"),
            Problem::WholeNumberBetween(min, max) => {
                write!(f, "must be a whole number from {min} to {max}")
            }
            Problem::Milliseconds(0) => f.write_str("must be a whole number of milliseconds"),
            Problem::Milliseconds(min) => {
                write!(f, "must be a whole number of milliseconds ≥ {min}")
            }
            Problem::FrameSize => f.write_str("must be a whole number between 1 and 2147483647"),
            Problem::Bytes => f.write_str("must be a whole number of bytes (-1 for no limit)"),
            Problem::PositiveNumber => f.write_str("must be a number > 0"),
            Problem::Empty => f.write_str("must not be empty"),
            Problem::NotPem => f.write_str("only PEM is supported"),
            Problem::EncryptedKey => f.write_str(
                "encrypted PEM keys are not supported; leave the key unencrypted and protect the file",
            ),
            Problem::PrincipalMapping => f.write_str(
                "only DEFAULT is supported (the subject's RFC 2253 name); plug in a PrincipalBuilder for other mappings",
            ),
            Problem::NotBuilt(feature) => write!(
                f,
                "this kquotad was built without the `{feature}` feature (build it with `--features {feature}`)"
            ),
            Problem::NoMechanism => f.write_str("name at least one mechanism"),
            Problem::AdvertisedPortZero => f.write_str("an advertised port must not be 0"),
            Problem::IpPort => f.write_str("must be an IP address and port, as 127.0.0.1:9405"),
            Problem::NotNameHostPort(item) => write!(f, "'{item}' is not NAME://host:port"),
            Problem::NoListenerName(item) => write!(f, "'{item}' has no listener name"),
            Problem::NoPort(item) => write!(f, "'{item}' has no port"),
            Problem::BadPort(item) => write!(f, "'{item}': the port must be a number 0-65535"),
            Problem::NoListener => f.write_str("no listener given"),
            Problem::NotNameProtocol(item) => write!(f, "'{item}' is not NAME:PROTOCOL"),
            Problem::NotAProtocol(name) => write!(
                f,
                "listener '{name}' is not a security protocol; map it with listener.security.protocol.map={name}:SASL_SSL (or another protocol)"
            ),
            Problem::NotAnIpAddress(host) => write!(f, "'{host}' is not an IP address"),
            Problem::NameTwice(name) => write!(f, "listener name '{name}' is used twice"),
            Problem::PortTwice(port) => write!(f, "port {port} is used twice"),
            Problem::Refused(e) => write!(f, "{e}"),
        }
    }
}

impl Error for Problem {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            Problem::Refused(e) => Some(&**e),
            _ => None,
        }
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
