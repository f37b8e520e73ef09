//! kquota-host: what kquota's two servers, `kquotad` and `kquota-proxy`, stand on.
//!
//! Both face clients nobody vetted, so both bound what a peer can cost by settings, never by what
//! the peer announces or how slowly it reads:
//!
//! | concern | here | Kafka's name for it |
//! | --- | --- | --- |
//! | connections open, over all listeners and from one address, with the unauthenticated and the idle giving way | [`Slots`] | `max.connections`, `max.connections.per.ip` |
//! | bytes held at once for requests read and answers not yet taken | [`Budget`] | `queued.max.request.bytes` |
//! | log lines one peer can cause | [`PeerThrottle`] | — |
//! | the process's descriptor limit, and accept errors when it is reached | [`raise_fd_limit`], [`AcceptErrors`] | — |
//! | the stop: SIGINT or SIGTERM, then a grace for answers in flight | [`Shutdown`], [`signal`], [`SHUTDOWN_GRACE`] | — |
//!
//! It is a crate of its own, not `kquotad`'s library, so that the proxy does not build the
//! reference server's handler and settings to get them, and so that neither server's code can
//! reach into the other's.

// One concern each.
mod accept;
mod budget;
mod log;
mod shutdown;
mod slots;

pub use crate::accept::{fd_limit, raise_fd_limit, AcceptErrors};
pub use crate::budget::{Budget, Reservation, DEFAULT_QUEUED_MAX_REQUEST_BYTES};
pub use crate::log::{colour, init_logging, PeerThrottle, INTERVAL, LINES_PER_PEER};
pub use crate::shutdown::{channel, signal, Shutdown, Stop, SHUTDOWN_GRACE};
pub use crate::slots::{Closing, Full, Slot, Slots};
