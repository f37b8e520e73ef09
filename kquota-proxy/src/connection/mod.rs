//! One client connection and its own connection to the broker its listener stands for (opened
//! at the first request the proxy does not answer itself): requests forwarded as they come (up
//! to `max_in_flight` unanswered), answers forwarded in the same order, the few that name
//! brokers rewritten on the way, and quotas enforced as Kafka's broker enforces them: each
//! request and answer metered for the connection's (user, client-id), the throttle put in the
//! answer, and the connection not read while the client is throttled.
//!
//! Two thin loops move the bytes, [`requests`] (client to broker) and [`answers`] (broker to
//! client), over [`frames`]; every decision is [`decide`]'s. What the two share is [`conn`]'s,
//! and every wait a stop may cut short goes through [`stop`].

mod answers;
mod conn;
mod decide;
pub(crate) mod fetch_walk;
mod frames;
mod read_buffer;
mod requests;
mod sides;
#[cfg(target_os = "linux")]
mod splice;
mod stop;
#[cfg(test)]
mod testing;

/// The most pipes open at once for bytes passed on unchanged, each two descriptors (none where
/// splice(2) is not).
#[cfg(target_os = "linux")]
pub(crate) const PIPES_OPEN_AT_MOST: usize = splice::MAX_PIPES;
/// The most pipes open at once for bytes passed on unchanged (none where splice(2) is not).
#[cfg(not(target_os = "linux"))]
pub(crate) const PIPES_OPEN_AT_MOST: usize = 0;

use std::net::SocketAddr;
use std::sync::Arc;

use kquota_host::{Slot, SHUTDOWN_GRACE};
use kquota_wire::Principal;
use tokio::net::TcpStream;
use tokio::sync::{mpsc, Semaphore};
use tracing::{debug, warn};

use self::conn::{Conn, Ended, Upstream};
use self::decide::Decisions;
use self::frames::FrameReader;
use self::sides::Side;
use self::stop::or_stop;
use crate::settings::HostPort;
use crate::shared::{Shared, Target};

/// Proxies `client` to the broker `target` stands for (connected at the first request to forward)
/// until either side leaves, a frame is refused, the connection gives way to a new one, or the
/// proxy stops.
pub(crate) async fn serve(
    client: TcpStream,
    peer: SocketAddr,
    target: Target,
    shared: &Arc<Shared>,
    slot: &Slot,
) {
    let _ = client.set_nodelay(true);
    let timeout = shared.config.connect_timeout;
    // TLS towards the client first: its certificate names the connection's principal.
    let (client, principal) = match &shared.config.client_tls {
        None => (Side::Tcp(client), Principal::anonymous()),
        Some(tls) => {
            let accept = tokio::time::timeout(timeout, tls.accept(client));
            let accepted = or_stop(slot.closing(), or_stop(shared.stopping(), accept)).await;
            let Some(Some(accepted)) = accepted else {
                return;
            };
            match accepted {
                Ok(Ok((stream, principal))) => (Side::Tls(Box::new(stream)), principal),
                Ok(Err(e)) => {
                    debug!(%peer, "closing connection: TLS handshake failed: {e}");
                    return;
                }
                Err(_) => {
                    debug!(%peer, "closing connection: TLS handshake timed out");
                    return;
                }
            }
        }
    };
    let Some(upstream) = shared.upstream(target) else {
        warn!(%peer, ?target, "closing connection: no upstream address for this listener");
        return;
    };
    debug!(%peer, listener = ?target, upstream = %upstream, %principal, "connection opened");
    shared.stats.connection_opened();
    let conn = Conn {
        shared,
        slot,
        peer,
        decisions: Decisions::new(&shared.quotas, &shared.stats, principal),
    };
    // A connection told to give way (or out of its grace, unproven) closes at once.
    or_stop(slot.closing(), proxy(client, &conn, &upstream)).await;
    shared.stats.connection_closed();
    debug!(%peer, upstream = %upstream, "connection closed");
}

/// Proxies `client` to `upstream`. The broker is connected to only when a request must be
/// forwarded, so that a connection whose requests the proxy answers itself (the quota admin
/// APIs) is served while the cluster is unreachable.
async fn proxy(client: Side, conn: &Conn<'_>, addr: &HostPort) {
    let shared = conn.shared;
    let (client_r, client_w) = client.split();
    // The permits bound the answers owed, including the one being read or written; the queue
    // keeps their order (and never blocks: it has room for every permit).
    let owed = Semaphore::new(shared.config.max_in_flight);
    let (tx, rx) = mpsc::channel(shared.config.max_in_flight);
    // The broker's read half goes to the answer side once the request side has connected.
    let (upstream, connected) = Upstream::unconnected(addr);
    let requests = requests::forward(FrameReader::new(client_r), upstream, tx, &owed, conn);
    let answers = answers::forward(connected, client_w, rx, conn, addr);
    tokio::pin!(requests, answers);
    tokio::select! {
        ended = &mut requests => {
            // The queue's sender is gone: the answer side ends once it has delivered the rest.
            if ended == Ended::Stopping
                && tokio::time::timeout(SHUTDOWN_GRACE, &mut answers).await.is_err()
            {
                debug!(peer = %conn.peer, "closing connection: answers in flight not delivered in time");
            }
        }
        () = &mut answers => {}
    }
}
