//! Why settings are refused: one setting ([`SettingError`], worded as `kquotad` words it), the
//! TLS files, or settings that do not work together.
//!
//! The binary prints each message as it is, after the file and line or the flag it came from;
//! tests and the operators' scripts match on them.

use std::error::Error;
use std::fmt;
use std::net::SocketAddr;

use kquota_host::settings::SettingError;

use super::table::SETTINGS;
use crate::tls::TlsConfigError;

/// Settings that cannot be used.
#[derive(Debug)]
#[non_exhaustive]
pub enum ConfigError {
    /// One setting: a line of a file that is not `key=value`, an unknown key, a value the key
    /// cannot hold, or a setting without another it needs.
    Setting(SettingError),
    /// A setting that has no default and is not given (`kquota.proxy.upstream`).
    Missing(&'static str),
    /// The TLS files do not make a TLS configuration; the message names the file, its key and
    /// its flag.
    Tls(TlsConfigError),
    /// Neither `kquota.proxy.listen.base` nor `kquota.proxy.broker.map`: brokers would have no
    /// listeners.
    NoBrokerListeners,
    /// A broker listener on an unspecified address (0.0.0.0, `::`) and no
    /// `kquota.proxy.advertised.host`: the rewritten answers would name an address clients cannot
    /// reach.
    AdvertisedHost(SocketAddr),
    /// `kquota.proxy.buffer.memory.bytes` below the largest frame: that frame would wait for
    /// memory forever.
    BufferMemory {
        /// `kquota.proxy.buffer.memory.bytes`.
        buffer_memory: usize,
        /// The largest frame, with its 4-byte size prefix.
        largest: usize,
    },
}

impl ConfigError {
    /// The key the error is about, if it is about one: the binary names where that key was set.
    pub fn key(&self) -> Option<&str> {
        match self {
            ConfigError::Setting(e) => e.key(),
            ConfigError::Missing(key) => Some(key),
            _ => None,
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::Setting(e) => write!(f, "{e}"),
            ConfigError::Missing(key) => match SETTINGS.flag_of(key) {
                Some(flag) => write!(f, "{key} ({flag}) is required"),
                None => write!(f, "{key} is required"),
            },
            ConfigError::Tls(e) => write!(f, "{e}"),
            ConfigError::NoBrokerListeners => f.write_str(
                "brokers need listeners: set kquota.proxy.listen.base (--listen-base) or \
                 kquota.proxy.broker.map (--broker-map)",
            ),
            ConfigError::AdvertisedHost(a) => write!(
                f,
                "the broker listener {a} is on an unspecified address: set \
                 kquota.proxy.advertised.host (--advertised-host)"
            ),
            ConfigError::BufferMemory {
                buffer_memory,
                largest,
            } => write!(
                f,
                "kquota.proxy.buffer.memory.bytes ({buffer_memory}) must hold the largest request \
                 or response frame ({largest} bytes with its size prefix; socket.request.max.bytes \
                 and kquota.proxy.max.response.bytes set the largest)"
            ),
        }
    }
}

impl Error for ConfigError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            // Each prints as its error: the source is the error's own.
            ConfigError::Setting(e) => e.source(),
            ConfigError::Tls(e) => e.source(),
            _ => None,
        }
    }
}

impl From<SettingError> for ConfigError {
    fn from(e: SettingError) -> Self {
        ConfigError::Setting(e)
    }
}

impl From<TlsConfigError> for ConfigError {
    fn from(e: TlsConfigError) -> Self {
        ConfigError::Tls(e)
    }
}
