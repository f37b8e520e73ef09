//! The answer side of a connection: each answer owed, in request order, from the broker to the
//! client; the connection muted for the answer's throttle. A small answer is read whole (its
//! bytes from the budget first, held until the client has taken them), decided, and written; a
//! larger one is decided from its head and, unless it must change, passed on as its bytes come.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::AsyncWrite;
use tokio::sync::{mpsc, oneshot};
use tracing::{debug, warn};

use kquota_host::Reservation;

use super::decide::{Answer, BadAnswer, Forwarded, Pending, Plan, ReadOn};
use super::fetch_walk::{self, WalkError};
use super::frames::{
    write_frame, write_part, BodyError, PassError, WriteError, PASS_CHUNK, PASS_FROM,
};
use super::sides::Socket;
use super::{Conn, Owed, UpstreamReader};
use crate::config::HostPort;
use crate::messages::rewrite::Advertise;
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
    W: AsyncWrite + Socket + Unpin,
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
                if !write_client(&mut client, &bytes, true, conn).await {
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
        let read_on = std::mem::replace(&mut forwarded.read_on, ReadOn::Now);
        let api_key = forwarded.head.api_key;
        let sent = if size <= PASS_FROM {
            whole(upstream, &mut client, forwarded, prefix, size, conn, addr).await
        } else {
            passed(upstream, &mut client, forwarded, prefix, size, conn, addr).await
        };
        let Some(throttle_ms) = sent else {
            return;
        };
        conn.decisions.mute(throttle_ms);
        conn.answered(api_key, true);
        if let ReadOn::Answered(done) = read_on {
            let _ = done.send(());
        }
    }
}

/// What is read of a larger answer before it is decided: its correlation id, and a Fetch
/// answer's header and throttle.
const ANSWER_HEAD: usize = 64;

/// The answer of `size` bytes after `prefix`, read whole (its bytes from the budget until the
/// client has taken them: a client that does not read holds at most this answer), decided and
/// written. The proxy's throttle, or `None` if the connection is to close.
async fn whole<W: AsyncWrite + Unpin>(
    upstream: &mut UpstreamReader,
    client: &mut W,
    forwarded: Forwarded,
    prefix: [u8; 4],
    size: usize,
    conn: &Conn<'_>,
    addr: &HostPort,
) -> Option<u64> {
    let _reservation = reserve(4 + size, conn, addr).await?;
    let wire = upstream
        .body(prefix, size, conn.shared.config.idle_timeout)
        .await
        .map_err(|why| from_broker(why, conn, addr))
        .ok()?
        .into_bytes();
    let answer = conn
        .decisions
        .answer(forwarded, wire, Instant::now(), &mut Learn(conn.shared))
        .map_err(|bad| refused(bad, conn, addr))
        .ok()?;
    deliver(client, answer, conn).await
}

/// The answer of `size` bytes after `prefix` (more than [`PASS_FROM`]), decided from its head:
/// passed on to the client as its bytes come (through a chunk from the budget; a client that
/// does not read stalls this broker connection and holds nothing more), replaced (the broker's
/// drained), or read whole where its bytes must change.
async fn passed<W: AsyncWrite + Socket + Unpin>(
    upstream: &mut UpstreamReader,
    client: &mut W,
    forwarded: Forwarded,
    prefix: [u8; 4],
    size: usize,
    conn: &Conn<'_>,
    addr: &HostPort,
) -> Option<u64> {
    let shared = conn.shared;
    let idle = shared.config.idle_timeout;
    let head = upstream
        .head(prefix, ANSWER_HEAD, idle)
        .await
        .map_err(|why| from_broker(why, conn, addr))
        .ok()?;
    let request = forwarded.head;
    let started = Instant::now();
    let plan = conn
        .decisions
        .plan(forwarded, &head[4..], size, started)
        .map_err(|bad| refused(bad, conn, addr))
        .ok()?;
    let rest = size - ANSWER_HEAD;
    let answer = match plan {
        Plan::Pass { endpoints: false } => {
            let _reservation = reserve(PASS_CHUNK, conn, addr).await?;
            // Allocated only if the bytes are copied rather than spliced.
            let mut chunk = Vec::new();
            if !write_client(client, &head, false, conn).await {
                return None;
            }
            pass(upstream, Some(client), rest, &mut chunk, conn, addr).await?;
            shared.stats.bytes_to_client(4 + size);
            return Some(0);
        }
        Plan::Replace(answer) => {
            let _reservation = reserve(PASS_CHUNK, conn, addr).await?;
            let mut chunk = Vec::with_capacity(PASS_CHUNK);
            pass::<W>(upstream, None, rest, &mut chunk, conn, addr).await?;
            answer
        }
        Plan::Pass { endpoints: true } => {
            let _reservation = reserve(PASS_CHUNK, conn, addr).await?;
            let mut chunk = Vec::with_capacity(PASS_CHUNK);
            let mut learn = Learn(shared);
            let walked = tokio::select! {
                r = fetch_walk::pass(upstream, client, head, rest, &mut chunk, idle, &mut learn) => r,
                () = shared.grace_over() => {
                    debug!(peer = %conn.peer, "closing connection: the client took no answer while stopping");
                    return None;
                }
            };
            match walked {
                Ok(()) => {}
                Err(WalkError::Pass(PassError::From(why))) => {
                    from_broker(why, conn, addr);
                    return None;
                }
                Err(WalkError::Pass(PassError::To(why))) => {
                    to_client(why, conn);
                    return None;
                }
                Err(WalkError::Malformed(what)) => {
                    warn!(
                        peer = %conn.peer, upstream = %addr,
                        "closing connection: the broker's Fetch answer v{} (correlation id {}) does not read at {what}",
                        request.version, request.correlation_id
                    );
                    return None;
                }
                Err(WalkError::Rewrite(e)) => {
                    refused(BadAnswer::Rewrite(request, e), conn, addr);
                    return None;
                }
            }
            shared.stats.bytes_to_client(4 + size);
            return Some(0);
        }
        Plan::Whole(left) => {
            let _reservation = reserve(4 + size, conn, addr).await?;
            let wire = upstream
                .rest(&head, rest, idle)
                .await
                .map_err(|why| from_broker(why, conn, addr))
                .ok()?
                .into_bytes();
            let mut learn = Learn(shared);
            let answer = conn.decisions.finish(left, wire, started, &mut learn);
            let answer = answer.map_err(|bad| refused(bad, conn, addr)).ok()?;
            return deliver(client, answer, conn).await;
        }
    };
    deliver(client, answer, conn).await
}

/// Writes `answer` to the client (after its throttle, for a client too old to throttle itself,
/// as Kafka holds it back): its throttle, or `None` if the connection is to close.
async fn deliver<W: AsyncWrite + Unpin>(
    client: &mut W,
    answer: Answer,
    conn: &Conn<'_>,
) -> Option<u64> {
    if answer.hold {
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(answer.throttle_ms)) => {}
            () = conn.shared.grace_over() => return None,
        }
    }
    write_client(client, &answer.bytes, true, conn)
        .await
        .then_some(answer.throttle_ms)
}

/// `n` bytes from the broker to `client` (`None`: drained), through `chunk`.
async fn pass<W: AsyncWrite + Socket + Unpin>(
    upstream: &mut UpstreamReader,
    client: Option<&mut W>,
    n: usize,
    chunk: &mut Vec<u8>,
    conn: &Conn<'_>,
    addr: &HostPort,
) -> Option<()> {
    let shared = conn.shared;
    let peer = conn.peer;
    let passed = tokio::select! {
        r = upstream.pass(n, client, chunk, shared.config.idle_timeout) => r,
        () = shared.grace_over() => {
            debug!(%peer, "closing connection: the client took no answer while stopping");
            return None;
        }
    };
    match passed {
        Ok(()) => Some(()),
        Err(PassError::From(why)) => {
            from_broker(why, conn, addr);
            None
        }
        Err(PassError::To(why)) => {
            to_client(why, conn);
            None
        }
    }
}

/// `bytes` of the budget, held until the client has taken the answer they are for; `None` (the
/// connection closes) when the proxy is past its stop's grace or they are more than the budget.
async fn reserve(bytes: usize, conn: &Conn<'_>, addr: &HostPort) -> Option<Reservation> {
    let shared = conn.shared;
    let reservation = tokio::select! {
        r = shared.budget.reserve(bytes) => r,
        () = shared.grace_over() => return None,
    };
    if reservation.is_none() {
        warn!(
            peer = %conn.peer, upstream = %addr,
            "closing connection: a response frame of {bytes} bytes is larger than the buffer memory"
        );
    }
    reservation
}

/// Logs why the broker's answer was not read.
fn from_broker(why: BodyError, conn: &Conn<'_>, addr: &HostPort) {
    debug!(peer = %conn.peer, upstream = %addr, "closing connection: from the broker: {why}");
}

/// Logs why the broker's answer cannot be forwarded.
fn refused(bad: BadAnswer, conn: &Conn<'_>, addr: &HostPort) {
    let peer = conn.peer;
    match bad {
        BadAnswer::CorrelationId { got, expected } => warn!(
            %peer, upstream = %addr,
            "closing connection: the broker answered correlation id {got}, expected {expected}"
        ),
        BadAnswer::Rewrite(head, e) => warn!(
            %peer, upstream = %addr,
            "closing connection: the broker's response to api key {} v{} (correlation id {}): {e}",
            head.api_key, head.version, head.correlation_id
        ),
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

/// Writes `bytes` to the client (a whole answer, with its size prefix, or with `whole` false
/// the head of one passed on: counted when the rest is); false if the connection is to close.
async fn write_client<W: AsyncWrite + Unpin>(
    client: &mut W,
    bytes: &[u8],
    whole: bool,
    conn: &Conn<'_>,
) -> bool {
    let shared = conn.shared;
    let peer = conn.peer;
    let idle = shared.config.idle_timeout;
    let write = async {
        if whole {
            write_frame(client, bytes, idle).await
        } else {
            write_part(client, bytes, idle).await
        }
    };
    let write = tokio::select! {
        r = write => r,
        () = shared.grace_over() => {
            debug!(%peer, "closing connection: the client took no answer while stopping");
            return false;
        }
    };
    match write {
        Ok(()) => {
            if whole {
                shared.stats.bytes_to_client(bytes.len());
            }
            true
        }
        Err(why) => {
            to_client(why, conn);
            false
        }
    }
}

/// Logs why an answer was not written to the client.
fn to_client(why: WriteError, conn: &Conn<'_>) {
    let peer = conn.peer;
    match why {
        WriteError::Io(e) => debug!(%peer, "closing connection: writing to the client: {e}"),
        WriteError::Stalled => warn!(%peer, "closing connection: the client takes no answers"),
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
