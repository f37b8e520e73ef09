//! kquotad: kquota's reference server.
//!
//! It serves Kafka's quota admin APIs (the `kquota-wire` handler) over TCP and TLS listeners, from an
//! engine whose configuration lives in the durable `kquota-store`. The `kquotad` binary is this
//! crate's [`Server`] behind a command line; a host embedding the server gives its
//! [`ServerSettings`], builds the [`ServerConfig`] from them and calls [`Server::bind`], then
//! [`Server::serve`].
//!
//! Listeners are configured as Kafka's (`listeners=PLAINTEXT://127.0.0.1:9092,SASL_SSL://127.0.0.1:9093`,
//! with `listener.security.protocol.map` for custom names); each speaks PLAINTEXT, SSL,
//! SASL_PLAINTEXT or SASL_SSL (see [`kquota_wire::SecurityProtocol`]). One tokio task per connection,
//! on one of the network threads (`num.network.threads`, one per CPU by default; given out in turn
//! as connections are accepted, each keeping its own for its life), reads size-prefixed frames,
//! answers them strictly in order (Kafka's pipelining guarantee), and closes the connection where
//! Kafka would. Limits: the request frame size (`socket.request.max.bytes`,
//! 100 MiB by default; `sasl.server.max.receive.size`, 512 KiB, before a SASL client has
//! authenticated), the request bytes read or queued at once over all connections
//! (`queued.max.request.bytes`, 256 MiB: reading waits while they are spent; a frame's buffer
//! grows as its bytes arrive), the number of open connections over all listeners
//! (`max.connections`) and from
//! one address (`max.connections.per.ip`, unlimited by default), the time a new connection has to
//! authenticate, or on PLAINTEXT and SSL to send a valid request (`kquota.connections.grace.ms`,
//! 10 s; at `max.connections` the oldest connection that has not makes room for a new one), and
//! the idle time between requests (`connections.max.idle.ms`, 10 minutes). A failed
//! authentication is logged with the peer's address and its connection closed after
//! `connection.failed.authentication.delay.ms` (100 ms), in that connection's task only. When the
//! future given to [`Server::serve`] resolves (the binary's: SIGINT or SIGTERM) the server stops
//! accepting and closes every connection between requests. A request
//! already being handled is finished and answered; a connection that is still sending a request,
//! or that does not read its answer within [`SHUTDOWN_GRACE`], is closed without one (nothing of
//! it was applied, or it was applied and only the answer is lost), so no peer can hold the server
//! up.
//!
//! ```no_run
//! # async fn run() -> Result<(), kquotad::StartError> {
//! let mut settings = kquotad::ServerSettings::default();
//! settings.set("listeners", "PLAINTEXT://127.0.0.1:9092")?;
//! settings.set("kquota.data.dir", "/var/lib/kquota")?;
//! let server = kquotad::Server::bind(settings.build()?).await?;
//! server.serve(async { /* until the host stops */ }).await;
//! # Ok(())
//! # }
//! ```

// One concern each: the settings and their errors; the server, its accept loops and connection
// limits; one peer's session; its frames; the stop.
mod connection;
mod error;
mod listener;
mod metrics;
mod peer;
mod reload;
mod server;
mod settings;
mod tls;

// The public interface: what a host embedding the server, or the `kquotad` binary, needs.
//
// The server: bind it with its settings, then serve until a future resolves.
pub use crate::server::Server;
pub use kquota_host::SHUTDOWN_GRACE;
// Its settings as given (as Kafka's `server.properties` keys, or by field), each checked as it is
// set, then checked together into the configuration it binds with; and the table of keys.
pub use crate::settings::{
    parse_properties, AdvertisedListeners, ListenerConfig, Listeners, Mechanisms, NodeId,
    ProtocolMap, ServerConfig, ServerSettings, SslSettings, SETTINGS,
};
pub use kquota_host::settings::values::{Capacity, FrameSize, Timeout};
pub use kquota_host::settings::{Setting, Settings};
pub use kquota_host::{ThreadCount, MAX_NETWORK_THREADS};
// What can be wrong with them, and with a start.
pub use crate::error::{ConfigError, StartError, ValueProblem};
pub use kquota_host::settings::{LineProblem, Problem, SettingError, Source};
