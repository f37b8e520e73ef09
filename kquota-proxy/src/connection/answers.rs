//! The answer side of a connection: each answer owed, in request order, read from the broker
//! (its bytes from the budget first, held until the client has taken them), decided, and written
//! to the client; the connection muted for the answer's throttle.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::AsyncWrite;
use tokio::sync::{mpsc, oneshot};
use tracing::{debug, warn};

use super::decide::{BadAnswer, Pending, ReadOn};
use super::frames::{write_frame, WriteError};
use super::{Conn, Owed, UpstreamReader};
use crate::config::HostPort;
use crate::rewrite::Advertise;
use crate::shared::Shared;

/// The broker as the answer side sees it.
enum Broker {
    /// Not connected yet: the request side sends the read half once it has connected.
    Awaiting(oneshot::Receiver<UpstreamReader>),
    /// Connected.
    Connected(UpstreamReader),
}

impl Broker {
    /// The broker's read half, once the request side has connected (`None` if it ended first).
    async fn reader(&mut self) -> Option<&mut UpstreamReader> {
        if let Broker::Awaiting(rx) = self {
            let reader = rx.await.ok()?;
            *self = Broker::Connected(reader);
        }
        match self {
            Broker::Connected(reader) => Some(reader),
            Broker::Awaiting(_) => None,
        }
    }
}

/// Reads each answer from the broker, in the queue's order, and sends it to the client,
/// rewritten if it names brokers and throttled if the client is over a quota. Ends when the
/// queue is closed and empty, or the connection is to close.
pub(super) async fn forward<W>(
    connected: oneshot::Receiver<UpstreamReader>,
    mut client: W,
    mut queue: mpsc::Receiver<Owed<'_>>,
    conn: &Conn<'_>,
    addr: &HostPort,
) where
    W: AsyncWrite + Unpin,
{
    let shared = conn.shared;
    let peer = conn.peer;
    let config = &shared.config;
    let mut broker = Broker::Awaiting(connected);
    loop {
        let Some((pending, _owed)) = next_owed(&mut broker, &mut queue, conn, addr).await else {
            return;
        };
        let mut forwarded = match pending {
            Pending::Local {
                api_key,
                bytes,
                throttle_ms,
            } => {
                if !write_client(&mut client, &bytes, conn).await {
                    return;
                }
                conn.decisions.mute(throttle_ms);
                conn.answered(api_key, false);
                continue;
            }
            Pending::Upstream(f) => f,
        };
        // The request side connected before it queued this request.
        let Some(upstream) = broker.reader().await else {
            return;
        };
        // No timeout for the answer's start: a Fetch may wait as long as the client asked, and
        // the client's request.timeout.ms bounds it.
        match upstream.fill_prefix().await {
            Ok(true) => {}
            Ok(false) | Err(_) => {
                debug!(%peer, upstream = %addr, "closing connection: the broker closed");
                return;
            }
        }
        let prefix = upstream.take_prefix();
        let size = i32::from_be_bytes(prefix);
        let Some(size) = usize::try_from(size)
            .ok()
            .filter(|s| (4..=config.max_response_bytes).contains(s))
        else {
            warn!(
                %peer, upstream = %addr,
                "closing connection: the broker sent a response frame of {size} bytes (the limit is {})",
                config.max_response_bytes
            );
            return;
        };
        // The answer's bytes come from the budget until the client has taken them: a client
        // that does not read holds at most its answer, and all of them together the budget.
        let reservation = tokio::select! {
            r = shared.budget.reserve(4 + size) => r,
            () = shared.grace_over() => return,
        };
        let Some(_reservation) = reservation else {
            warn!(%peer, upstream = %addr, "closing connection: a response frame of {size} bytes is larger than the buffer memory");
            return;
        };
        let wire = match upstream.body(prefix, size, config.idle_timeout).await {
            Ok(w) => w.into_bytes(),
            Err(why) => {
                debug!(%peer, upstream = %addr, "closing connection: from the broker: {why}");
                return;
            }
        };
        let started = Instant::now();
        let read_on = std::mem::replace(&mut forwarded.read_on, ReadOn::Now);
        let api_key = forwarded.head.api_key;
        let mut learn = Learn(shared);
        let answer = match conn.decisions.answer(forwarded, wire, started, &mut learn) {
            Ok(a) => a,
            Err(BadAnswer::CorrelationId { got, expected }) => {
                warn!(
                    %peer, upstream = %addr,
                    "closing connection: the broker answered correlation id {got}, expected {expected}"
                );
                return;
            }
            Err(BadAnswer::Rewrite(head, e)) => {
                warn!(
                    %peer, upstream = %addr,
                    "closing connection: the broker's response to api key {} v{} (correlation id {}): {e}",
                    head.api_key, head.version, head.correlation_id
                );
                return;
            }
        };
        if answer.hold {
            // A client too old to throttle itself gets its answer after the throttle, as Kafka
            // holds it back.
            tokio::select! {
                () = tokio::time::sleep(Duration::from_millis(answer.throttle_ms)) => {}
                () = shared.grace_over() => return,
            }
        }
        if !write_client(&mut client, &answer.bytes, conn).await {
            return;
        }
        conn.decisions.mute(answer.throttle_ms);
        conn.answered(api_key, true);
        if let ReadOn::Answered(done) = read_on {
            let _ = done.send(());
        }
    }
}

/// The next answer owed, or `None` once the request side has ended and every answer is
/// delivered, or the connection is to close. While no answer is owed, the broker is watched
/// too: if it closes (a broker restarting, or closing an idle connection), so does the client's
/// connection, at once, and the client reconnects.
async fn next_owed<'q>(
    broker: &mut Broker,
    queue: &mut mpsc::Receiver<Owed<'q>>,
    conn: &Conn<'_>,
    addr: &HostPort,
) -> Option<Owed<'q>> {
    let Broker::Connected(upstream) = broker else {
        return queue.recv().await;
    };
    if upstream.started() {
        // The next answer has begun to arrive: its request was queued just now.
        return queue.recv().await;
    }
    let peer = conn.peer;
    tokio::select! {
        biased;
        p = queue.recv() => p,
        r = upstream.fill_prefix() => match r {
            Ok(_) if upstream.started() => match queue.try_recv() {
                // An answer's first bytes: its request was queued just now, or there is none.
                Ok(p) => Some(p),
                Err(_) => {
                    warn!(
                        %peer, upstream = %addr,
                        "closing connection: the broker sent bytes when no answer was owed"
                    );
                    None
                }
            },
            _ => {
                debug!(%peer, upstream = %addr, "closing connection: the broker closed");
                None
            }
        },
    }
}

/// Writes one answer (with its size prefix) to the client; false if the connection is to close.
async fn write_client<W: AsyncWrite + Unpin>(
    client: &mut W,
    bytes: &[u8],
    conn: &Conn<'_>,
) -> bool {
    let shared = conn.shared;
    let peer = conn.peer;
    let write = tokio::select! {
        r = write_frame(client, bytes, shared.config.idle_timeout) => r,
        () = shared.grace_over() => {
            debug!(%peer, "closing connection: the client took no answer while stopping");
            return false;
        }
    };
    match write {
        Ok(()) => {
            shared.stats.bytes_to_client(bytes.len());
            true
        }
        Err(WriteError::Io(e)) => {
            debug!(%peer, "closing connection: writing to the client: {e}");
            false
        }
        Err(WriteError::Stalled) => {
            warn!(%peer, "closing connection: the client takes no answers");
            false
        }
    }
}

/// The proxy's listeners and topic partition counts, as the responses it rewrites teach them.
struct Learn<'a>(&'a Arc<Shared>);

impl Advertise for Learn<'_> {
    fn advertise(&mut self, node_id: i32, host: &str, port: i32) -> Result<(String, i32), String> {
        self.0.advertise(node_id, host, port)
    }

    fn topic(&mut self, name: Option<&str>, id: [u8; 16], partitions: u32) {
        self.0.quotas.topics.learn(name, id, partitions);
    }
}
