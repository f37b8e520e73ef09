//! What the request and answer sides of one connection share: the connection itself ([`Conn`]),
//! the answers owed between them ([`Owed`]), how the request side ended ([`Ended`]), and the
//! broker as the request side sees it ([`Upstream`]), connected at the first request to forward.

use std::net::SocketAddr;
use std::sync::Arc;

use kquota_host::Slot;
use tokio::net::TcpStream;
use tokio::sync::{oneshot, SemaphorePermit};
use tracing::warn;

use super::decide::{Decisions, Pending};
use super::frames::FrameReader;
use super::sides::{ReadSide, Side, WriteSide};
use super::stop::or_stop;
use crate::settings::HostPort;
use crate::shared::Shared;

/// What the request and answer sides of one connection share.
pub(super) struct Conn<'a> {
    pub(super) shared: &'a Arc<Shared>,
    /// Its place among `max.connections`: told when it is to give way.
    pub(super) slot: &'a Slot,
    pub(super) peer: SocketAddr,
    pub(super) decisions: Decisions<'a>,
}

impl Conn<'_> {
    /// Resolves once the connection is not muted.
    pub(super) async fn unmuted(&self) {
        while let Some(left) = self.decisions.muted_for() {
            tokio::time::sleep(left).await;
        }
    }

    /// An answer to a request of `api_key` was written (`from_broker`: the broker's): the slot
    /// learns whether the connection has proven itself.
    pub(super) fn answered(&self, api_key: i16, from_broker: bool) {
        self.slot
            .answered(self.decisions.answered(api_key, from_broker));
    }
}

/// An answer owed, and its place among the [`ProxySettings::max_in_flight`] a connection may be
/// owed: held until the answer is written to the client.
///
/// [`ProxySettings::max_in_flight`]: crate::settings::ProxySettings::max_in_flight
pub(super) type Owed<'a> = (Pending, SemaphorePermit<'a>);

/// How the request side ended.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Ended {
    /// The proxy is stopping: the answers in flight are still delivered.
    Stopping,
    /// The client left, or the connection is to close now.
    Closed,
}

/// The broker's side of a connection, read by the answer side.
pub(super) type UpstreamReader = FrameReader<ReadSide>;

/// Connects to the broker at `upstream`, over TLS if the cluster is reached so.
async fn connect(upstream: &HostPort, shared: &Shared) -> Result<Side, String> {
    let connect = async {
        let tcp = TcpStream::connect((upstream.host(), upstream.port())).await?;
        let _ = tcp.set_nodelay(true);
        let stream = match &shared.config.upstream_tls {
            None => Side::Tcp(tcp),
            Some(tls) => Side::Tls(Box::new(tls.connect(tcp, upstream.host()).await?)),
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

/// The request side's view of the broker.
pub(super) enum Upstream<'a> {
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

impl<'a> Upstream<'a> {
    /// The broker at `addr`, not connected yet, and where the answer side gets its read half
    /// once it is.
    pub(super) fn unconnected(
        addr: &'a HostPort,
    ) -> (Upstream<'a>, oneshot::Receiver<UpstreamReader>) {
        let (reader, connected) = oneshot::channel();
        (Upstream::Unconnected { addr, reader }, connected)
    }

    /// The broker's write half, connecting first if this is the first request to forward; a
    /// connect that fails closes the connection.
    pub(super) async fn writer(&mut self, conn: &Conn<'_>) -> Result<&mut WriteSide, Ended> {
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
    pub(super) async fn try_connect(
        &mut self,
        conn: &Conn<'_>,
    ) -> Result<Result<(), String>, Ended> {
        let Upstream::Unconnected { addr, .. } = self else {
            return Ok(Ok(()));
        };
        let addr = *addr;
        let shared = conn.shared;
        let Some(connected) = or_stop(shared.stopping(), connect(addr, shared)).await else {
            return Err(Ended::Stopping);
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
