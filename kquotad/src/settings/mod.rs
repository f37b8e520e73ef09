//! Everything `kquotad` is configured with: given key by key as Kafka's `server.properties`
//! would, or field by field ([`ServerSettings`], each value checked once, as it is set, into a
//! type that holds only a usable value), then checked together once into the [`ServerConfig`]
//! the server binds with ([`ServerSettings::build`]).
//!
//! - `table`: every key, its flag, default and help ([`SETTINGS`]).
//! - `given`: [`ServerSettings`], `set` by key, and `build`.
//! - `listeners`: Kafka's listener settings, parsed.
//! - `ssl`: the TLS settings.
//! - `config`: the checked [`ServerConfig`].

mod config;
mod given;
mod listeners;
mod ssl;
mod table;

pub use config::ServerConfig;
pub use given::{parse_properties, Mechanisms, NodeId, ServerSettings};
pub use listeners::{AdvertisedListeners, ListenerConfig, Listeners, ProtocolMap};
pub use ssl::SslSettings;
pub use table::SETTINGS;
