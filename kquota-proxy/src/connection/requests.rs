//! The request side of a connection: each request read (not while the client is muted), its
//! place among the answers owed and its bytes from the budget taken first, decided, queued for
//! its answer, and forwarded as its bytes (or answered by the proxy).

use std::time::Instant;

use bytes::Bytes;
use kafka_protocol::messages::ApiKey;
use kquota_host::{Frame, Reservation};
use tokio::io::AsyncRead;
use tokio::sync::{mpsc, oneshot, Semaphore};
use tracing::{debug, warn};

use super::decide::{Pending, ReadOn};
use super::frames::{
    write_frame, BodyError, FrameReader, PassError, WriteError, PASS_CHUNK, PASS_FROM,
};
use super::sides::Socket;
use super::{Conn, Ended, Owed, Upstream};
use crate::messages::header::{self, RequestHead};
use crate::messages::rewrite;

/// Reads the client's requests and forwards each, as its bytes (a Fetch's `max_bytes` capped to
/// the consumer's quota window), once its place in the queue of answers is taken; answers the
/// quota admin APIs, and refuses a strict mutation from a client in debt, itself.
pub(super) async fn forward<'a, R>(
    mut client: FrameReader<R>,
    mut upstream: Upstream<'_>,
    queue: mpsc::Sender<Owed<'a>>,
    owed: &'a Semaphore,
    conn: &Conn<'_>,
) -> Ended
where
    R: AsyncRead + Socket + Unpin,
{
    let shared = conn.shared;
    let peer = conn.peer;
    let config = &shared.config;
    // Whether the client negotiated its versions with the proxy itself, the cluster away: then
    // its first request for the cluster closes the connection, to be negotiated again.
    let mut negotiated_locally = false;
    loop {
        if let Err(ended) = next_prefix(&mut client, owed, conn).await {
            return ended;
        }
        let prefix = client.take_prefix();
        let size = i32::from_be_bytes(prefix);
        let Some(size) = usize::try_from(size)
            .ok()
            .filter(|s| *s <= config.max_request_bytes)
        else {
            warn!(
                %peer,
                "closing connection: a request frame of {size} bytes (socket.request.max.bytes is {})",
                config.max_request_bytes
            );
            shared.stats.protocol_error();
            return Ended::Closed;
        };
        conn.slot.busy();
        // Its place among the answers owed, then its bytes from the budget, both before the
        // body is read: at max_in_flight, or while the budget is spent, nothing more is read.
        // (In this order a request side that holds bytes never waits for an answer to be
        // written, so the budget cannot deadlock.)
        let permit = tokio::select! {
            biased;
            () = shared.stopping() => return Ended::Stopping,
            p = owed.acquire() => p,
        };
        let Ok(permit) = permit else {
            return Ended::Closed;
        };
        // The request whole, or of a large Produce only its head: its records are passed to the
        // broker as they come, once the request is decided. A request that has not fully
        // arrived is not forwarded once the proxy stops.
        let read = tokio::select! {
            biased;
            () = shared.stopping() => return Ended::Stopping,
            r = read_request(&mut client, prefix, size, conn) => r,
        };
        let Some((mut frame, reservation, rest)) = read else {
            return Ended::Closed;
        };
        shared.stats.bytes_from_client(4 + size);
        // A request read while the answer side throttled the client waits out the throttle.
        tokio::select! {
            biased;
            () = shared.stopping() => return Ended::Stopping,
            () = conn.unmuted() => {}
        }
        let started = Instant::now();
        let head = match header::parse(&frame[4..]) {
            Ok(h) => h,
            Err(e) => {
                warn!(%peer, "closing connection: {e}");
                shared.stats.protocol_error();
                return Ended::Closed;
            }
        };
        let decided = if shared.quotas.admin.serves(head.api_key) {
            admin(
                conn,
                &head,
                std::mem::replace(&mut frame, Frame::from(Vec::new())),
            )
            .await
        } else {
            conn.decisions.request_of(&head, &mut frame, size, started)
        };
        let pending = match decided {
            Ok(p) => p,
            Err(why) => {
                warn!(%peer, "closing connection: {why}");
                shared.stats.protocol_error();
                return Ended::Closed;
            }
        };
        let frame = frame.into_bytes();
        // The answer this connection waits for before it reads on.
        let mut answered = None;
        let (mut pending, mut to_broker) = match pending {
            Pending::Upstream(mut f) => {
                if f.one_at_a_time() {
                    let (tx, rx) = oneshot::channel();
                    f.read_on = ReadOn::Answered(tx);
                    answered = Some(rx);
                }
                if f.head.expects_response {
                    (Some(Pending::Upstream(f)), true)
                } else {
                    // acks=0 gets no answer: it was metered, and the connection muted, when read.
                    (None, true)
                }
            }
            local => (Some(local), false),
        };
        // A tool negotiates before it asks for quotas: with the cluster out of reach, the proxy
        // answers ApiVersions itself, so its own admin APIs stay served.
        if to_broker && head.api_key == ApiKey::ApiVersions as i16 {
            match api_versions_without_the_cluster(&mut upstream, &head, conn).await {
                Err(ended) => return ended,
                Ok(None) => {}
                Ok(Some(own)) => {
                    pending = Some(own);
                    to_broker = false;
                    answered = None;
                    negotiated_locally = true;
                }
            }
        }
        if to_broker && negotiated_locally {
            // The versions it chose are not the cluster's: it reconnects and negotiates again.
            debug!(
                %peer,
                "closing connection: it negotiated with the proxy while the cluster was away"
            );
            return Ended::Closed;
        }
        // Connected before the answer is queued: the answer side then has the broker to read.
        if to_broker {
            if let Err(ended) = upstream.writer(conn).await {
                return ended;
            }
        }
        if let Some(pending) = pending {
            if queue.send((pending, permit)).await.is_err() {
                // The answer side has ended: the connection is closing.
                return Ended::Closed;
            }
        }
        if to_broker {
            if let Err(ended) = to_the_broker(&mut upstream, &frame, conn).await {
                return ended;
            }
            if rest > 0 {
                if let Err(ended) = pass_rest(&mut client, &mut upstream, rest, conn).await {
                    return ended;
                }
            }
        }
        // The request's bytes are the broker's now.
        drop(reservation);
        if let Some(answered) = answered {
            // Nothing more is read until the answer is out and its throttle, if any, begun. An
            // answer side that ended drops the sender: the connection is closing.
            tokio::select! {
                biased;
                () = shared.stopping() => return Ended::Stopping,
                _ = answered => {}
            }
        }
    }
}

/// The proxy's own answer to the ApiVersions request `head` if the cluster cannot be reached
/// (see [`rewrite::own_api_versions`]); `None` once `upstream` is connected, for the request to be
/// forwarded as any other.
async fn api_versions_without_the_cluster(
    upstream: &mut Upstream<'_>,
    head: &RequestHead,
    conn: &Conn<'_>,
) -> Result<Option<Pending>, Ended> {
    let Err(why) = upstream.try_connect(conn).await? else {
        return Ok(None);
    };
    let peer = conn.peer;
    match rewrite::own_api_versions(head.correlation_id, head.version) {
        Ok(bytes) => {
            debug!(%peer, "answering ApiVersions itself: {why}");
            conn.shared.stats.answered_locally();
            Ok(Some(Pending::Local {
                api_key: head.api_key,
                bytes,
                throttle_ms: 0,
            }))
        }
        Err(e) => {
            warn!(%peer, "closing connection: {why}; and ApiVersions: {e}");
            Err(Ended::Closed)
        }
    }
}

/// What is read of a larger request first: its header and a Produce's `transactional_id` and
/// `acks` (a head that holds less is read whole).
const REQUEST_HEAD: usize = 512;

/// The request of `size` bytes after `prefix`: its frame (whole, or only its head), the budget
/// its bytes hold until the broker has them, and how many of its bytes are still to come (to be
/// passed on). `None`: the connection closes (logged).
async fn read_request<R: AsyncRead + Socket + Unpin>(
    client: &mut FrameReader<R>,
    prefix: [u8; 4],
    size: usize,
    conn: &Conn<'_>,
) -> Option<(Frame, Option<Reservation>, usize)> {
    let peer = conn.peer;
    let idle = conn.shared.config.idle_timeout;
    let closed = |why: BodyError| debug!(%peer, "closing connection: {why}");
    if size <= PASS_FROM {
        let reservation = reserve(4 + size, conn).await?;
        let frame = client.body(prefix, size, idle).await.map_err(closed).ok()?;
        return Some((frame, Some(reservation), 0));
    }
    let head = client
        .head(prefix, REQUEST_HEAD, idle)
        .await
        .map_err(closed)
        .ok()?;
    let produce = head[4..6] == (ApiKey::Produce as i16).to_be_bytes();
    if produce && header::parse(&head[4..]).is_ok() {
        return Some((Frame::from(head), None, size - REQUEST_HEAD));
    }
    let reservation = reserve(4 + size, conn).await?;
    let frame = client
        .rest(&head, size - REQUEST_HEAD, idle)
        .await
        .map_err(closed)
        .ok()?;
    Some((frame, Some(reservation), 0))
}

/// `bytes` of the budget for a request's bytes; `None` if they are more than the whole budget.
async fn reserve(bytes: usize, conn: &Conn<'_>) -> Option<Reservation> {
    let reservation = conn.shared.budget.reserve(bytes).await;
    if reservation.is_none() {
        // The settings make every frame the limits allow fit the budget.
        warn!(peer = %conn.peer, "closing connection: a request frame of {bytes} bytes is larger than the buffer memory");
    }
    reservation
}

/// Passes the `rest` of a request whose head the broker has from the client to the broker as it
/// comes, through a chunk of the budget.
async fn pass_rest<R: AsyncRead + Socket + Unpin>(
    client: &mut FrameReader<R>,
    upstream: &mut Upstream<'_>,
    rest: usize,
    conn: &Conn<'_>,
) -> Result<(), Ended> {
    let shared = conn.shared;
    let peer = conn.peer;
    let Some(_reservation) = reserve(PASS_CHUNK, conn).await else {
        return Err(Ended::Closed);
    };
    // Allocated only if the bytes are copied rather than spliced.
    let mut chunk = Vec::new();
    let writer = upstream.writer(conn).await?;
    let passed = tokio::select! {
        r = client.pass(rest, Some(writer), &mut chunk, shared.config.idle_timeout) => r,
        () = shared.grace_over() => {
            debug!(%peer, "closing connection: a request not passed on while stopping");
            return Err(Ended::Closed);
        }
    };
    match passed {
        Ok(()) => Ok(()),
        Err(PassError::From(why)) => {
            debug!(%peer, "closing connection: {why}");
            Err(Ended::Closed)
        }
        Err(PassError::To(WriteError::Io(e))) => {
            debug!(%peer, "closing connection: writing to the broker: {e}");
            Err(Ended::Closed)
        }
        Err(PassError::To(WriteError::Stalled)) => {
            warn!(%peer, "closing connection: the broker takes no requests");
            Err(Ended::Closed)
        }
    }
}

/// Waits for the next request's size prefix. A throttled client's requests are not read until
/// its throttle is over; meanwhile the start of the next one is read ahead, so that a client that
/// leaves is closed at once (Kafka notices only at `connections.max.idle.ms`), and a muted
/// connection is idle like any other. A connection is idle only when no answer is owed either.
async fn next_prefix<R: AsyncRead + Socket + Unpin>(
    client: &mut FrameReader<R>,
    owed: &Semaphore,
    conn: &Conn<'_>,
) -> Result<(), Ended> {
    let shared = conn.shared;
    let peer = conn.peer;
    let config = &shared.config;
    let nothing_owed = || owed.available_permits() == config.max_in_flight;
    if conn.decisions.muted_for().is_some() {
        let idle = tokio::time::sleep(config.idle_timeout);
        tokio::pin!(idle);
        loop {
            tokio::select! {
                biased;
                () = shared.stopping() => return Err(Ended::Stopping),
                () = conn.unmuted() => break,
                () = &mut idle, if nothing_owed() => {
                    debug!(%peer, "closing idle connection (throttled)");
                    return Err(Ended::Closed);
                }
                r = client.fill_prefix(), if !client.has_prefix() => match r {
                    Ok(true) => {}
                    Ok(false) | Err(_) => return Err(Ended::Closed),
                },
            }
        }
    }
    while !client.has_prefix() {
        let read = tokio::select! {
            biased;
            () = shared.stopping() => return Err(Ended::Stopping),
            r = tokio::time::timeout(config.idle_timeout, client.fill_prefix()) => r,
        };
        match read {
            Err(_) if !client.started() && !nothing_owed() => continue,
            Err(_) => {
                debug!(%peer, "closing idle connection");
                return Err(Ended::Closed);
            }
            Ok(Ok(true)) => {}
            Ok(Ok(false) | Err(_)) => return Err(Ended::Closed),
        }
    }
    Ok(())
}

/// Writes one request (with its size prefix) to the broker, connecting first if need be.
async fn to_the_broker(
    upstream: &mut Upstream<'_>,
    frame: &Bytes,
    conn: &Conn<'_>,
) -> Result<(), Ended> {
    let shared = conn.shared;
    let peer = conn.peer;
    let writer = upstream.writer(conn).await?;
    let write = tokio::select! {
        r = write_frame(writer, frame, shared.config.idle_timeout) => r,
        () = shared.grace_over() => {
            debug!(%peer, "closing connection: the broker took no request while stopping");
            return Err(Ended::Closed);
        }
    };
    match write {
        Ok(()) => {
            shared.stats.request_forwarded();
            Ok(())
        }
        Err(WriteError::Io(e)) => {
            debug!(%peer, "closing connection: writing to the broker: {e}");
            Err(Ended::Closed)
        }
        Err(WriteError::Stalled) => {
            warn!(%peer, "closing connection: the broker takes no requests");
            Err(Ended::Closed)
        }
    }
}

/// The proxy's own answer to a quota admin request (`frame`, with its size prefix). An
/// alteration is committed to the store (an fsync) before it is answered, so the handler runs
/// off the async workers, as kquotad runs it.
async fn admin(conn: &Conn<'_>, head: &RequestHead, frame: Frame) -> Result<Pending, String> {
    let shared = std::sync::Arc::clone(conn.shared);
    let principal = conn.decisions.principal();
    let peer = conn.peer;
    if shared.quotas.admin.authorizes(&principal) {
        // Proven as soon as read: an alteration may wait for the configuration log longer
        // than the grace, and its answer is owed.
        conn.decisions.prove();
        conn.slot.answered(true);
        conn.slot.busy();
    }
    let answer = tokio::task::spawn_blocking(move || {
        shared.quotas.admin.answer(&principal, peer, &frame[4..])
    })
    .await
    .map_err(|e| format!("the quota admin handler failed: {e}"))?
    .map_err(|reason| format!("a quota admin request: {reason}"))?;
    conn.shared.stats.answered_locally();
    Ok(Pending::Local {
        api_key: head.api_key,
        bytes: answer,
        throttle_ms: 0,
    })
}
