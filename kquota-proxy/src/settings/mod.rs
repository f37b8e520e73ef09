//! The proxy's settings: given key by key or field by field ([`ProxySettings`], each value
//! checked as it is set), then checked together once into the [`ProxyConfig`] the proxy binds
//! with ([`ProxySettings::build`]).
//!
//! - `table`: every key, its flag, default and help ([`SETTINGS`]).
//! - `raw`: [`ProxySettings`], `set` by key, and `build`.
//! - `values`: the parsers of the proxy's own values (the shared ones are `kquota_host`'s).
//! - `config`: the checked [`ProxyConfig`], [`HostPort`] and the defaults.
//! - `error`: [`ConfigError`].

mod config;
mod error;
mod raw;
mod table;
mod values;

pub use config::*;
pub use error::ConfigError;
pub use raw::{parse_properties, InFlight, ProxySettings, MAX_IN_FLIGHT};
pub use table::SETTINGS;
pub use values::ValueProblem;
