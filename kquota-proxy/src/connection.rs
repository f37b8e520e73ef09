//! One client connection and its own connection to the broker its listener stands for: requests
//! forwarded as they come (up to `max_in_flight` unanswered), answers forwarded in the same
//! order, the few that name brokers rewritten on the way.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, Semaphore, SemaphorePermit};
use tracing::{debug, warn};

use crate::config::HostPort;
use crate::header::{self, RequestHead};
use crate::rewrite::{self, RewriteError};
use crate::server::{Shared, Target, SHUTDOWN_GRACE};

/// A frame's buffer starts this large and doubles as its bytes arrive.
const FIRST_CHUNK: usize = 64 * 1024;

/// An answer the client is owed, in request order.
enum Pending {
    /// From the broker, to this request.
    Upstream(RequestHead),
    /// Made by the proxy (an ApiVersions version it cannot decode), not forwarded.
    Local(Bytes),
}

/// An answer owed, and its place among the [`ProxyConfig::max_in_flight`] a connection may be
/// owed: held until the answer is written to the client.
///
/// [`ProxyConfig::max_in_flight`]: crate::ProxyConfig::max_in_flight
type Owed<'a> = (Pending, SemaphorePermit<'a>);

/// How the request side ended.
#[derive(PartialEq, Eq)]
enum Ended {
    /// The proxy is stopping: the answers in flight are still delivered.
    Stopping,
    /// The client left, or the connection is to close now.
    Closed,
}

/// Connects to the broker `target` stands for and proxies `client` to it until either side
/// leaves, a frame is refused, or the proxy stops.
pub(crate) async fn serve(
    client: TcpStream,
    peer: SocketAddr,
    target: Target,
    shared: &Arc<Shared>,
) {
    let _ = client.set_nodelay(true);
    let Some(upstream) = shared.upstream(target) else {
        warn!(%peer, ?target, "closing connection: no upstream address for this listener");
        return;
    };
    let addr = upstream.to_string();
    let connect = tokio::time::timeout(
        shared.config.connect_timeout,
        TcpStream::connect((upstream.host.as_str(), upstream.port)),
    );
    let stream = tokio::select! {
        r = connect => r,
        () = shared.stopping() => return,
    };
    let stream = match stream {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            warn!(%peer, upstream = %addr, "closing connection: cannot connect to the broker: {e}");
            return;
        }
        Err(_) => {
            warn!(%peer, upstream = %addr, "closing connection: connecting to the broker timed out");
            return;
        }
    };
    let _ = stream.set_nodelay(true);
    debug!(%peer, listener = ?target, upstream = %addr, "connection opened");
    proxy(client, stream, peer, &upstream, shared).await;
    debug!(%peer, upstream = %addr, "connection closed");
}

/// Proxies `client` to `upstream` (any byte streams: TCP today, TLS later).
async fn proxy<C, U>(
    client: C,
    upstream: U,
    peer: SocketAddr,
    addr: &HostPort,
    shared: &Arc<Shared>,
) where
    C: AsyncRead + AsyncWrite + Unpin,
    U: AsyncRead + AsyncWrite + Unpin,
{
    let (client_r, client_w) = tokio::io::split(client);
    let (upstream_r, upstream_w) = tokio::io::split(upstream);
    // The permits bound the answers owed, including the one being read or written; the queue
    // keeps their order (and never blocks: it has room for every permit).
    let owed = Semaphore::new(shared.config.max_in_flight);
    let (tx, rx) = mpsc::channel(shared.config.max_in_flight);
    let requests = forward_requests(client_r, upstream_w, tx, &owed, peer, shared);
    let responses = forward_responses(upstream_r, client_w, rx, peer, addr, shared);
    tokio::pin!(requests, responses);
    tokio::select! {
        ended = &mut requests => {
            // The queue's sender is gone: the answer side ends once it has delivered the rest.
            if ended == Ended::Stopping
                && tokio::time::timeout(SHUTDOWN_GRACE, &mut responses).await.is_err()
            {
                debug!(%peer, "closing connection: answers in flight not delivered in time");
            }
        }
        () = &mut responses => {}
    }
}

/// Reads the client's requests and forwards each, as its bytes, once its place in the queue of
/// answers is taken.
async fn forward_requests<'a, R, W>(
    mut client: R,
    mut upstream: W,
    queue: mpsc::Sender<Owed<'a>>,
    owed: &'a Semaphore,
    peer: SocketAddr,
    shared: &Arc<Shared>,
) -> Ended
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let config = &shared.config;
    loop {
        // Waiting for the next request: idle only when no answer is outstanding either.
        let mut prefix = [0u8; 4];
        let mut got = 0;
        while got < 4 {
            let read = tokio::select! {
                biased;
                () = shared.stopping() => return Ended::Stopping,
                r = tokio::time::timeout(config.idle_timeout, client.read(&mut prefix[got..])) => r,
            };
            match read {
                Err(_) if got == 0 && owed.available_permits() < config.max_in_flight => continue,
                Err(_) => {
                    debug!(%peer, "closing idle connection");
                    return Ended::Closed;
                }
                Ok(Ok(0) | Err(_)) => return Ended::Closed,
                Ok(Ok(n)) => got += n,
            }
        }
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
            return Ended::Closed;
        };
        // A request that has not fully arrived is not forwarded once the proxy stops.
        let read = tokio::select! {
            biased;
            () = shared.stopping() => return Ended::Stopping,
            r = read_body(&mut client, prefix, size, config.idle_timeout) => r,
        };
        let frame = match read {
            Ok(f) => f,
            Err(why) => {
                debug!(%peer, "closing connection: {why}");
                return Ended::Closed;
            }
        };
        let head = match header::parse(&frame[4..]) {
            Ok(h) => h,
            Err(e) => {
                warn!(%peer, "closing connection: {e}");
                return Ended::Closed;
            }
        };
        let too_new = rewrite::rewritten_max(head.api_key).is_some_and(|max| head.version > max);
        let pending = if head.api_key == kafka_protocol::messages::ApiKey::ApiVersions as i16
            && too_new
        {
            // As Kafka answers a version it does not know: the client retries with one it lists.
            Pending::Local(rewrite::unsupported_api_versions(head.correlation_id))
        } else if too_new {
            // ApiVersions never offered it: a client that sends it anyway is closed, as Kafka
            // closes a connection for a version it does not serve.
            warn!(
                %peer,
                "closing connection: api key {} v{} is above the highest version the proxy rewrites",
                head.api_key, head.version
            );
            return Ended::Closed;
        } else {
            Pending::Upstream(head)
        };
        let forward = matches!(pending, Pending::Upstream(_));
        // A Produce with acks=0 is forwarded but gets no answer: it takes no place in the queue.
        if head.expects_response || !forward {
            // At max_in_flight, no more requests are read until an answer is written.
            let permit = tokio::select! {
                biased;
                () = shared.stopping() => return Ended::Stopping,
                p = owed.acquire() => p,
            };
            let Ok(permit) = permit else {
                return Ended::Closed;
            };
            if queue.send((pending, permit)).await.is_err() {
                // The answer side has ended: the connection is closing.
                return Ended::Closed;
            }
        }
        if forward {
            let write = async {
                upstream.write_all(&frame).await?;
                upstream.flush().await
            };
            let write = tokio::select! {
                r = tokio::time::timeout(config.idle_timeout, write) => r,
                () = shared.grace_over() => {
                    debug!(%peer, "closing connection: the broker took no request while stopping");
                    return Ended::Closed;
                }
            };
            match write {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    debug!(%peer, "closing connection: writing to the broker: {e}");
                    return Ended::Closed;
                }
                Err(_) => {
                    warn!(%peer, "closing connection: the broker takes no requests");
                    return Ended::Closed;
                }
            }
        }
    }
}

/// Reads each answer from the broker, in the queue's order, and sends it to the client, rewritten
/// if it names brokers. Ends when the queue is closed and empty, or the connection is to close.
async fn forward_responses<R, W>(
    mut upstream: R,
    mut client: W,
    mut queue: mpsc::Receiver<Owed<'_>>,
    peer: SocketAddr,
    addr: &HostPort,
    shared: &Arc<Shared>,
) where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let config = &shared.config;
    // The first byte of an answer, read while watching the broker.
    let mut carried: Option<u8> = None;
    loop {
        // While no answer is owed, the broker is watched too: if it closes (a broker restarting,
        // or closing an idle connection), so does the client's connection, at once, and the
        // client reconnects.
        let pending = if carried.is_some() {
            queue.recv().await
        } else {
            let mut first = [0u8; 1];
            tokio::select! {
                biased;
                p = queue.recv() => p,
                r = upstream.read(&mut first) => match r {
                    Ok(0) | Err(_) => {
                        debug!(%peer, upstream = %addr, "closing connection: the broker closed");
                        return;
                    }
                    // An answer's first byte: its request was queued just now, or there is none.
                    Ok(_) => match queue.try_recv() {
                        Ok(p) => {
                            carried = Some(first[0]);
                            Some(p)
                        }
                        Err(_) => {
                            warn!(
                                %peer, upstream = %addr,
                                "closing connection: the broker sent bytes when no answer was owed"
                            );
                            return;
                        }
                    },
                },
            }
        };
        let Some((pending, _owed)) = pending else {
            // The request side has ended and every answer is delivered.
            return;
        };
        let head = match pending {
            Pending::Local(bytes) => {
                if !write_client(&mut client, &bytes, peer, shared).await {
                    return;
                }
                continue;
            }
            Pending::Upstream(head) => head,
        };
        // No timeout for the answer's start: a Fetch may wait as long as the client asked, and
        // the client's request.timeout.ms bounds it.
        let mut prefix = [0u8; 4];
        let from = match carried.take() {
            Some(b) => {
                prefix[0] = b;
                1
            }
            None => 0,
        };
        if let Err(e) = upstream.read_exact(&mut prefix[from..]).await {
            debug!(%peer, upstream = %addr, "closing connection: the broker closed: {e}");
            return;
        }
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
        let wire = match read_body(&mut upstream, prefix, size, config.idle_timeout).await {
            Ok(w) => w,
            Err(why) => {
                debug!(%peer, upstream = %addr, "closing connection: from the broker: {why}");
                return;
            }
        };
        let correlation_id = i32::from_be_bytes([wire[4], wire[5], wire[6], wire[7]]);
        if correlation_id != head.correlation_id {
            warn!(
                %peer, upstream = %addr,
                "closing connection: the broker answered correlation id {correlation_id}, expected {}",
                head.correlation_id
            );
            return;
        }
        let out = if rewrite::needs_rewrite(head.api_key, head.version) {
            let frame = wire.slice(4..);
            let mut advertise =
                |node_id: i32, host: &str, port: i32| shared.advertise(node_id, host, port);
            match rewrite::rewrite(head.api_key, head.version, &frame, &mut advertise) {
                Ok(Some(rewritten)) => rewritten,
                Ok(None) => wire,
                Err(e) => {
                    malformed(peer, addr, &head, &e);
                    return;
                }
            }
        } else {
            wire
        };
        if !write_client(&mut client, &out, peer, shared).await {
            return;
        }
    }
}

fn malformed(peer: SocketAddr, addr: &HostPort, head: &RequestHead, e: &RewriteError) {
    warn!(
        %peer, upstream = %addr,
        "closing connection: the broker's response to api key {} v{} (correlation id {}): {e}",
        head.api_key, head.version, head.correlation_id
    );
}

/// Writes one answer (with its size prefix) to the client; false if the connection is to close.
async fn write_client<W: AsyncWrite + Unpin>(
    client: &mut W,
    bytes: &[u8],
    peer: SocketAddr,
    shared: &Shared,
) -> bool {
    let write = async {
        client.write_all(bytes).await?;
        client.flush().await
    };
    let write = tokio::select! {
        r = tokio::time::timeout(shared.config.idle_timeout, write) => r,
        () = shared.grace_over() => {
            debug!(%peer, "closing connection: the client took no answer while stopping");
            return false;
        }
    };
    match write {
        Ok(Ok(())) => true,
        Ok(Err(e)) => {
            debug!(%peer, "closing connection: writing to the client: {e}");
            false
        }
        Err(_) => {
            warn!(%peer, "closing connection: the client takes no answers");
            false
        }
    }
}

/// The frame whose size is `size`: its prefix, then its bytes, read within `idle` (a peer that
/// stalls mid-frame is idle).
async fn read_body<R: AsyncRead + Unpin>(
    stream: &mut R,
    prefix: [u8; 4],
    size: usize,
    idle: std::time::Duration,
) -> Result<Bytes, String> {
    let total = 4 + size;
    // The buffer grows as the bytes arrive: a peer that announces a large frame and sends
    // nothing costs nothing.
    let mut buf: Vec<u8> = Vec::with_capacity(total.min(FIRST_CHUNK));
    buf.extend_from_slice(&prefix);
    let read = async {
        while buf.len() < total {
            if buf.len() == buf.capacity() {
                let target = buf.capacity().saturating_mul(2).min(total);
                buf.try_reserve_exact(target - buf.len())
                    .map_err(|_| std::io::Error::from(std::io::ErrorKind::OutOfMemory))?;
            }
            let room = buf.capacity().min(total) - buf.len();
            let n = (&mut *stream).take(room as u64).read_buf(&mut buf).await?;
            if n == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
        }
        Ok::<(), std::io::Error>(())
    };
    match tokio::time::timeout(idle, read).await {
        Ok(Ok(())) => Ok(Bytes::from(buf)),
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
            Err("a truncated frame".into())
        }
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("stalled within a frame".into()),
    }
}
