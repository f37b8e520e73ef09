//! One client connection and its own connection to the broker its listener stands for (opened
//! at the first request the proxy does not answer itself): requests forwarded as they come (up
//! to `max_in_flight` unanswered), answers forwarded in the same order, the few that name
//! brokers rewritten on the way, and quotas enforced as Kafka's broker enforces them: each
//! request and answer metered for the connection's (user, client-id), the throttle put in the
//! answer, and the connection not read while the client is throttled.
//!
//! Two thin loops move the bytes, [`requests`] (client to broker) and [`answers`] (broker to
//! client), over [`frames`]; every decision is [`decide`]'s.

mod answers;
mod decide;
pub(crate) mod fetch_walk;
mod frames;
mod read_buffer;
mod requests;
mod sides;
#[cfg(target_os = "linux")]
mod splice;

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
use tokio::sync::{mpsc, oneshot, Semaphore, SemaphorePermit};
use tracing::{debug, warn};

use self::decide::{Decisions, Pending};
use self::frames::FrameReader;
use self::sides::{ReadSide, Side, WriteSide};
use crate::config::HostPort;
use crate::shared::{Shared, Target};

/// What the request and answer sides of one connection share.
struct Conn<'a> {
    shared: &'a Arc<Shared>,
    /// Its place among `max.connections`: told when it is to give way.
    slot: &'a Slot,
    peer: SocketAddr,
    decisions: Decisions<'a>,
}

impl Conn<'_> {
    /// Resolves once the connection is not muted.
    async fn unmuted(&self) {
        while let Some(left) = self.decisions.muted_for() {
            tokio::time::sleep(left).await;
        }
    }

    /// An answer to a request of `api_key` was written (`from_broker`: the broker's): the slot
    /// learns whether the connection has proven itself.
    fn answered(&self, api_key: i16, from_broker: bool) {
        self.slot
            .answered(self.decisions.answered(api_key, from_broker));
    }
}

/// An answer owed, and its place among the [`ProxyConfig::max_in_flight`] a connection may be
/// owed: held until the answer is written to the client.
///
/// [`ProxyConfig::max_in_flight`]: crate::ProxyConfig::max_in_flight
type Owed<'a> = (Pending, SemaphorePermit<'a>);

/// How the request side ended.
#[derive(Debug, PartialEq, Eq)]
enum Ended {
    /// The proxy is stopping: the answers in flight are still delivered.
    Stopping,
    /// The client left, or the connection is to close now.
    Closed,
}

/// The broker's side of a connection, read by the answer side.
type UpstreamReader = FrameReader<ReadSide>;

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
            let accepted = tokio::select! {
                r = tokio::time::timeout(timeout, tls.accept(client)) => r,
                () = shared.stopping() => return,
                _ = slot.closing() => return,
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
    tokio::select! {
        () = proxy(client, &conn, &upstream) => {}
        _ = slot.closing() => {}
    }
    shared.stats.connection_closed();
    debug!(%peer, upstream = %upstream, "connection closed");
}

/// Connects to the broker at `upstream`, over TLS if the cluster is reached so.
async fn connect(upstream: &HostPort, shared: &Shared) -> Result<Side, String> {
    let connect = async {
        let tcp = TcpStream::connect((upstream.host.as_str(), upstream.port)).await?;
        let _ = tcp.set_nodelay(true);
        let stream = match &shared.config.upstream_tls {
            None => Side::Tcp(tcp),
            Some(tls) => Side::Tls(Box::new(tls.connect(tcp, &upstream.host).await?)),
        };
        Ok::<_, std::io::Error>(stream)
    };
    let connected = match tokio::time::timeout(shared.config.connect_timeout, connect).await {
        Ok(Ok(s)) => Ok(s),
        Ok(Err(e)) => Err(format!("cannot connect to the broker: {e}")),
        Err(_) => Err("connecting to the broker timed out".to_owned()),
    };
    match &connected {
        Ok(_) => shared.reach.up(),
        Err(why) => shared.reach.down(why),
    }
    connected
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
    let (reader_tx, reader_rx) = oneshot::channel();
    let upstream = Upstream::Unconnected {
        addr,
        reader: reader_tx,
    };
    let requests = requests::forward(FrameReader::new(client_r), upstream, tx, &owed, conn);
    let answers = answers::forward(reader_rx, client_w, rx, conn, addr);
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

/// The request side's view of the broker.
enum Upstream<'a> {
    /// Not connected until the first request to forward; the read half goes over `reader` to
    /// the answer side then.
    Unconnected {
        addr: &'a HostPort,
        reader: oneshot::Sender<UpstreamReader>,
    },
    /// Connected: the write half.
    Connected(WriteSide),
    /// A state between the two, never seen outside [`Upstream::writer`].
    Connecting,
}

impl Upstream<'_> {
    /// The broker's write half, connecting first if this is the first request to forward; a
    /// connect that fails closes the connection.
    async fn writer(&mut self, conn: &Conn<'_>) -> Result<&mut WriteSide, Ended> {
        if let Err(why) = self.try_connect(conn).await? {
            if let Upstream::Unconnected { addr, .. } = self {
                warn!(peer = %conn.peer, upstream = %addr, "closing connection: {why}");
            }
            *self = Upstream::Connecting;
        }
        match self {
            Upstream::Connected(w) => Ok(w),
            // A connect that failed or was cancelled left this state: the connection is closing.
            _ => Err(Ended::Closed),
        }
    }

    /// Connects to the broker if this is the first request to forward, handing the read half
    /// to the answer side and keeping the write half. A connect that fails leaves it unconnected
    /// and says why (`Ok(Err(why))`), for a request the proxy can answer itself instead.
    async fn try_connect(&mut self, conn: &Conn<'_>) -> Result<Result<(), String>, Ended> {
        let Upstream::Unconnected { addr, .. } = self else {
            return Ok(Ok(()));
        };
        let addr = *addr;
        let shared = conn.shared;
        let connected = tokio::select! {
            r = connect(addr, shared) => r,
            () = shared.stopping() => return Err(Ended::Stopping),
        };
        let stream = match connected {
            Ok(stream) => stream,
            Err(why) => return Ok(Err(why)),
        };
        let Upstream::Unconnected { reader, .. } = std::mem::replace(self, Upstream::Connecting)
        else {
            // It was unconnected above; were it not, closing is the safe answer.
            return Err(Ended::Closed);
        };
        let (r, w) = stream.split();
        if reader.send(FrameReader::new(r)).is_err() {
            // The answer side has ended: the connection is closing.
            return Err(Ended::Closed);
        }
        *self = Upstream::Connected(w);
        Ok(Ok(()))
    }
}
