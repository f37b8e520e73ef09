//! kquota-host: what kquota's two servers, `kquotad` and `kquota-proxy`, stand on.
//!
//! Both face clients nobody vetted, so both bound what a peer can cost by settings, never by what
//! the peer announces or how slowly it reads:
//!
//! | concern | here | Kafka's name for it |
//! | --- | --- | --- |
//! | connections open, over all listeners and from one address, with the unauthenticated and the idle giving way | [`Slots`] | `max.connections`, `max.connections.per.ip` |
//! | bytes held at once for requests read and answers not yet taken | [`Budget`] | `queued.max.request.bytes` |
//! | a frame's bytes: a buffer that grows as they arrive, a large one's rest mapped | [`read_frame`] | — |
//! | log lines one peer can cause | [`PeerThrottle`] | — |
//! | the process's descriptor limit, and accept errors when it is reached | [`raise_fd_limit`], [`AcceptErrors`] | — |
//! | the stop: SIGINT or SIGTERM, then a grace for answers in flight | [`Shutdown`], [`signal`], [`SHUTDOWN_GRACE`] | — |
//! | reloading on SIGHUP: TLS files and credentials read again for new connections, the old kept if they do not load | [`Reloadable`], [`reload_signal`] | — |
//! | the log's format (text or JSON) and the audit's target | [`init_logging`], [`LogFormat`], [`AUDIT_TARGET`] | — |
//! | the network threads: single-threaded runtimes the connections are given to in turn, each staying on its own for its life | [`NetworkThreads`] | `num.network.threads` |
//! | the engine, with its configuration from the store, the configuration log or memory | [`open_engine`] | — |
//! | the metrics and health listener: `/metrics` (OpenMetrics, or the classic text format), `/healthz`, `/readyz` | [`http`] | — |
//! | TLS listeners from PEM files or inline PEM, errors naming the setting | [`tls`] | `ssl.keystore.*`, `ssl.truststore.*`, `ssl.client.auth` |
//! | settings: a file (`--config`) of Java properties with the lines a server should not guess at refused, the value parsers, the refusals, the table of keys and flags | [`settings`], [`read_settings`] | — |
//! | how a command ends: exit status 2 for a usage error, clap's refusals on one line | [`exit`] | — |
//!
//! It is a crate of its own, not `kquotad`'s library, so that the proxy does not build the
//! reference server's handler and settings to get them, and so that neither server's code can
//! reach into the other's.

//!
//! The exit conventions ([`exit`]) need none of that, and are all a build without the default
//! `server` feature has: the command-line tools use them too.

// One concern each.
#[cfg(feature = "server")]
mod accept;
#[cfg(feature = "server")]
mod budget;
pub mod exit;
#[cfg(feature = "server")]
mod frame;
#[cfg(feature = "server")]
pub mod http;
#[cfg(feature = "server")]
mod log;
#[cfg(feature = "server")]
mod network;
#[cfg(feature = "server")]
mod open;
#[cfg(feature = "server")]
mod reload;
#[cfg(feature = "server")]
pub mod settings;
#[cfg(feature = "server")]
mod shutdown;
#[cfg(feature = "server")]
mod slots;
#[cfg(feature = "server")]
pub mod tls;

#[cfg(feature = "server")]
pub use crate::accept::{accept, fd_limit, raise_fd_limit, AcceptErrors, Accepted};
#[cfg(feature = "server")]
pub use crate::budget::{Budget, Reservation, DEFAULT_QUEUED_MAX_REQUEST_BYTES};
#[cfg(feature = "server")]
pub use crate::frame::{read_frame, Frame, FIRST_CHUNK};
#[cfg(feature = "server")]
pub use crate::log::{
    colour, fatal, init_logging, log_format_in_args, refused_flags, LogFormat, PeerThrottle,
    UnknownLogFormat, AUDIT_TARGET, INTERVAL, LINES_PER_PEER,
};
#[cfg(feature = "server")]
pub use crate::network::{NetworkThreads, ThreadCount, MAX_NETWORK_THREADS};
#[cfg(feature = "server")]
pub use crate::open::{open_engine, ConfigSource, EngineSettings, OpenError, Opened};
#[cfg(feature = "server")]
pub use crate::reload::{
    reload_all, reload_on_signal, reload_signal, Reload, ReloadSignal, Reloadable,
};
#[cfg(feature = "server")]
pub use crate::settings::{read_settings, LineProblem, SettingsFileError};
#[cfg(feature = "server")]
pub use crate::shutdown::{channel, signal, Shutdown, Stop, SHUTDOWN_GRACE};
#[cfg(feature = "server")]
pub use crate::slots::{Closing, Full, Slot, Slots};
