//! One client connection and its own connection to the broker its listener stands for (opened
//! at the first request the proxy does not answer itself): requests
//! forwarded as they come (up to `max_in_flight` unanswered), answers forwarded in the same
//! order, the few that name brokers rewritten on the way, and quotas enforced as Kafka's broker
//! enforces them: each request and answer metered for the connection's (user, client-id), the
//! throttle put in the answer, and the connection not read while the client is throttled.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::ApiKey;
use kquota::meter::{ClientMeter, Throttle};
use kquota::QuotaType;
use kquota_wire::Principal;
use parking_lot::Mutex;
use tokio::io::{
    AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader, ReadHalf, WriteHalf,
};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot, Semaphore, SemaphorePermit};
use tracing::{debug, warn};

use crate::config::HostPort;
use crate::enforce::{self, FetchRequest, MutationRequest, Refused, Split};
use crate::header::{self, RequestHead};
use crate::identity::{Identity, SaslNote};
use crate::rewrite::{self, Advertise, RewriteError};
use crate::shared::{Shared, Target};
use kquota_host::{Slot, SHUTDOWN_GRACE};

/// Either side of a connection: TCP, or TLS over it.
trait Stream: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Stream for T {}

/// The read buffer of each side of a connection.
const READ_BUFFER: usize = 8 * 1024;

/// A frame's buffer starts this large and doubles as its bytes arrive.
const FIRST_CHUNK: usize = 64 * 1024;

/// An answer the client is owed, in request order.
enum Pending {
    /// From the broker, to this request.
    Upstream(Forwarded),
    /// Made by the proxy (an ApiVersions version it cannot decode, a quota admin API, a refused
    /// mutation) to a request of `api_key`, not forwarded; the client is throttled for
    /// `throttle_ms` once it is written.
    Local {
        api_key: i16,
        bytes: Bytes,
        throttle_ms: u64,
    },
}

/// A forwarded request, as its answer needs it.
struct Forwarded {
    head: RequestHead,
    /// The SASL exchange's step, for a SaslHandshake or SaslAuthenticate.
    sasl: Option<SaslNote>,
    /// Whose quotas the request counts against.
    who: Who,
    enforce: Enforce,
    /// The proxy's own time on the request so far (for `request_percentage`).
    nanos: u64,
    /// Told once the answer is written (and the client muted if throttled), for a request after
    /// which the connection is not read until then.
    done: Option<oneshot::Sender<()>>,
}

/// What the answer to a forwarded request is metered for.
enum Enforce {
    /// Only the proxy's time on it.
    Time,
    /// A Produce request of `bytes`, recorded when its answer comes, as Kafka's broker records
    /// it; with `one_at_a_time` (a producer quota applies), the connection's next request is read
    /// only after that answer, as Kafka reads one request of a connection at a time, so that a
    /// throttle holds back the requests pipelined behind it.
    Produce { bytes: u64, one_at_a_time: bool },
    /// A Fetch: its answer's bytes are metered, and a throttled one is answered empty.
    Fetch(FetchRequest),
    /// A mutation request already recorded, the throttle it got, and the topics a strict quota
    /// refused (taken out of the request; its answer takes them back).
    Mutations(u64, Option<Refused>),
}

/// What a mutation request's quota decided.
enum Mutated {
    /// Forward it whole; the throttle for its answer.
    Forward(u64),
    /// Forward what is left of it; its answer takes back the refused topics, and the throttle.
    Partly(Bytes, Refused, u64),
    /// Every topic refused: the proxy's answer, and the throttle.
    Refused(Bytes, u64),
}

/// Meters a mutation request as Kafka's controller does: a permissive (old) version is recorded
/// whole and throttled by the debt it leaves; a strict one topic by topic, each accepted while
/// the bucket is not in debt and refused (THROTTLING_QUOTA_EXCEEDED) once it is.
fn mutations(conn: &Conn<'_>, who: &Who, m: MutationRequest) -> Mutated {
    let shared = conn.shared;
    let counts = m.counts(&shared.quotas.topics);
    if !m.strict() {
        let total = counts.iter().fold(0u32, |a, n| a.saturating_add(*n));
        let d = conn.metered(who, |meter| meter.mutations_as(total, false));
        throttled(shared, "mutation", &d.throttle);
        return Mutated::Forward(d.throttle.ms);
    }
    let mut refused = Vec::new();
    let mut throttle = 0;
    conn.metered(who, |meter| {
        for (i, n) in counts.iter().enumerate() {
            let d = meter.mutations_as(*n, true);
            if !d.accepted {
                refused.push(i);
                throttle = throttle.max(d.throttle.ms);
            }
        }
    });
    if refused.is_empty() {
        return Mutated::Forward(0);
    }
    shared.stats.throttled("mutation", throttle);
    match m.without(&refused, throttle) {
        Split::Partly(forward, refused) => Mutated::Partly(forward, refused, throttle),
        Split::All(answer) => Mutated::Refused(answer, throttle),
    }
}

/// A connection's (user, client-id): the principal's name and the request header's client id.
#[derive(Clone, PartialEq, Eq)]
struct Who {
    user: Arc<str>,
    client_id: Arc<str>,
}

/// What the request and answer sides of one connection share.
struct Conn<'a> {
    shared: &'a Arc<Shared>,
    /// Its place among `max.connections`: told when it is to give way.
    slot: &'a Slot,
    /// The broker has authenticated it (or its TLS certificate named it), or answered a request
    /// that needs no authentication: it no longer gives way to a new connection before the
    /// idle ones.
    proven: AtomicBool,
    peer: SocketAddr,
    opened: Instant,
    /// Requests are not read before this time (ms since `opened`): the client is throttled.
    muted_until: AtomicU64,
    state: Mutex<State>,
}

struct State {
    identity: Identity,
    /// The (user, client-id) of the last request, and its meter.
    who: Who,
    meter: ClientMeter,
}

impl Conn<'_> {
    /// Runs `f` on the meter of `who`: the connection's own, or, for a request made before the
    /// connection's (user, client-id) changed (its answer comes after), one opened for it alone,
    /// so that the connection keeps its new identity.
    fn metered<R>(&self, who: &Who, f: impl FnOnce(&mut ClientMeter) -> R) -> R {
        let mut state = self.state.lock();
        if state.who == *who {
            return f(&mut state.meter);
        }
        drop(state);
        f(&mut self.shared.quotas.meter.client(&who.user, &who.client_id))
    }

    /// The (user, client-id) of a request with `client_id`, in the connection's `state`.
    fn who(&self, state: &mut State, client_id: &str) -> Who {
        if *state.who.client_id != *client_id {
            let who = Who {
                user: Arc::clone(&state.who.user),
                client_id: Arc::from(client_id),
            };
            state.meter = self.shared.quotas.meter.client(&who.user, &who.client_id);
            state.who = who;
        }
        state.who.clone()
    }

    fn principal(&self) -> Principal {
        self.state.lock().identity.principal().clone()
    }

    fn now_ms(&self) -> u64 {
        self.opened.elapsed().as_millis() as u64
    }

    /// Stops reading requests for `ms`, as Kafka mutes a throttled client's channel.
    fn mute(&self, ms: u64) {
        if ms > 0 {
            self.muted_until
                .fetch_max(self.now_ms().saturating_add(ms), Ordering::AcqRel);
        }
    }

    /// Notes that the answer to a request of `api_key` was written: whether the connection has
    /// now proven itself is told to its slot.
    fn answered(&self, api_key: i16, from_broker: bool) {
        let sasl_or_versions = api_key == ApiKey::ApiVersions as i16
            || api_key == ApiKey::SaslHandshake as i16
            || api_key == ApiKey::SaslAuthenticate as i16;
        // A broker that requires authentication answers nothing else before it (Kafka closes the
        // connection); an authenticated principal proves the connection whatever it asked.
        if (from_broker && !sasl_or_versions)
            || self.state.lock().identity.principal() != &Principal::anonymous()
        {
            self.proven.store(true, Ordering::Relaxed);
        }
        self.slot.answered(self.proven.load(Ordering::Relaxed));
    }

    /// Whether requests are not to be read now.
    fn muted(&self) -> bool {
        self.now_ms() < self.muted_until.load(Ordering::Acquire)
    }

    /// Resolves once the connection is not muted.
    async fn unmuted(&self) {
        loop {
            let until = self.muted_until.load(Ordering::Acquire);
            let now = self.now_ms();
            if now >= until {
                return;
            }
            tokio::time::sleep(Duration::from_millis(until - now)).await;
        }
    }
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

/// Proxies `client` to the broker `target` stands for (connected at the first request to forward)
/// until either side leaves, a frame is refused, or the proxy stops.
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
    let (client, principal): (Box<dyn Stream>, Principal) = match &shared.config.client_tls {
        None => (Box::new(client), Principal::anonymous()),
        Some(tls) => {
            let accepted = tokio::select! {
                r = tokio::time::timeout(timeout, tls.accept(client)) => r,
                () = shared.stopping() => return,
                _ = slot.closing() => return,
            };
            match accepted {
                Ok(Ok((stream, principal))) => (Box::new(stream), principal),
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
    let who = Who {
        user: Arc::from(principal.name.as_str()),
        client_id: Arc::from(""),
    };
    let conn = Conn {
        shared,
        slot,
        proven: AtomicBool::new(principal != Principal::anonymous()),
        peer,
        opened: Instant::now(),
        muted_until: AtomicU64::new(0),
        state: Mutex::new(State {
            identity: Identity::new(principal),
            meter: shared.quotas.meter.client(&who.user, &who.client_id),
            who,
        }),
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
async fn connect(upstream: &HostPort, shared: &Shared) -> Result<Box<dyn Stream>, String> {
    let connect = async {
        let tcp = TcpStream::connect((upstream.host.as_str(), upstream.port)).await?;
        let _ = tcp.set_nodelay(true);
        let stream: Box<dyn Stream> = match &shared.config.upstream_tls {
            None => Box::new(tcp),
            Some(tls) => Box::new(tls.connect(tcp, &upstream.host).await?),
        };
        Ok::<_, std::io::Error>(stream)
    };
    match tokio::time::timeout(shared.config.connect_timeout, connect).await {
        Ok(Ok(s)) => Ok(s),
        Ok(Err(e)) => Err(format!("cannot connect to the broker: {e}")),
        Err(_) => Err("connecting to the broker timed out".to_owned()),
    }
}

/// The broker's side of a connection, read by the answer side.
type UpstreamReader = BufReader<ReadHalf<Box<dyn Stream>>>;

/// Proxies `client` to `upstream`. The broker is connected to only when a request must be
/// forwarded, so that a connection whose requests the proxy answers itself (the quota admin
/// APIs) is served while the cluster is unreachable.
async fn proxy(client: Box<dyn Stream>, conn: &Conn<'_>, addr: &HostPort) {
    let shared = conn.shared;
    let peer = conn.peer;
    let (client_r, client_w) = tokio::io::split(client);
    // Each side is read through a small buffer: a frame's size, header and (small) body come in
    // one system call, not one each; a larger body is read straight into its frame.
    let client_r = BufReader::with_capacity(READ_BUFFER, client_r);
    // The permits bound the answers owed, including the one being read or written; the queue
    // keeps their order (and never blocks: it has room for every permit).
    let owed = Semaphore::new(shared.config.max_in_flight);
    let (tx, rx) = mpsc::channel(shared.config.max_in_flight);
    // The broker's read half goes to the answer side once the request side has connected.
    let (reader_tx, reader_rx) = oneshot::channel();
    let upstream = Upstream {
        addr,
        writer: None,
        reader: Some(reader_tx),
    };
    let requests = forward_requests(client_r, upstream, tx, &owed, conn);
    let responses = forward_responses(reader_rx, client_w, rx, conn, addr);
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

/// The request side's view of the broker: not connected until the first request to forward.
struct Upstream<'a> {
    addr: &'a HostPort,
    writer: Option<WriteHalf<Box<dyn Stream>>>,
    /// Where the read half goes once connected.
    reader: Option<oneshot::Sender<UpstreamReader>>,
}

impl Upstream<'_> {
    /// The broker's write half, connecting first if this is the first request to forward.
    async fn writer(&mut self, conn: &Conn<'_>) -> Result<&mut WriteHalf<Box<dyn Stream>>, Ended> {
        if self.writer.is_none() {
            let shared = conn.shared;
            let connected = tokio::select! {
                r = connect(self.addr, shared) => r,
                () = shared.stopping() => return Err(Ended::Stopping),
            };
            let stream = connected.map_err(|why| {
                warn!(peer = %conn.peer, upstream = %self.addr, "closing connection: {why}");
                Ended::Closed
            })?;
            let (r, w) = tokio::io::split(stream);
            let sent = self
                .reader
                .take()
                .map(|tx| tx.send(BufReader::with_capacity(READ_BUFFER, r)).is_ok());
            if sent != Some(true) {
                // The answer side has ended: the connection is closing.
                return Err(Ended::Closed);
            }
            self.writer = Some(w);
        }
        Ok(self.writer.as_mut().expect("connected above"))
    }
}

/// Reads the client's requests and forwards each, as its bytes (a Fetch's `max_bytes` capped to
/// the consumer's quota window), once its place in the queue of answers is taken; answers the
/// quota admin APIs, and refuses a strict mutation from a client in debt, itself.
async fn forward_requests<'a, R>(
    mut client: R,
    mut upstream: Upstream<'_>,
    queue: mpsc::Sender<Owed<'a>>,
    owed: &'a Semaphore,
    conn: &Conn<'_>,
) -> Ended
where
    R: AsyncRead + Unpin,
{
    let shared = conn.shared;
    let peer = conn.peer;
    let config = &shared.config;
    loop {
        let mut prefix = [0u8; 4];
        let mut got = 0;
        // A throttled client's requests are not read until its throttle is over. Meanwhile one
        // byte is read ahead, so that a client that leaves is closed at once (Kafka notices only
        // at `connections.max.idle.ms`), and a muted connection is idle like any other.
        if conn.muted() {
            let idle = tokio::time::sleep(config.idle_timeout);
            tokio::pin!(idle);
            loop {
                tokio::select! {
                    biased;
                    () = shared.stopping() => return Ended::Stopping,
                    () = conn.unmuted() => break,
                    () = &mut idle, if owed.available_permits() == config.max_in_flight => {
                        debug!(%peer, "closing idle connection (throttled)");
                        return Ended::Closed;
                    }
                    r = client.read(&mut prefix[..1]), if got == 0 => match r {
                        Ok(0) | Err(_) => return Ended::Closed,
                        Ok(n) => got = n,
                    },
                }
            }
        }
        // Waiting for the next request: idle only when no answer is outstanding either.
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
        let reservation = tokio::select! {
            biased;
            () = shared.stopping() => return Ended::Stopping,
            r = shared.budget.reserve(4 + size) => r,
        };
        let Some(reservation) = reservation else {
            // The settings make every frame the limits allow fit the budget.
            warn!(%peer, "closing connection: a request frame of {size} bytes is larger than the buffer memory");
            return Ended::Closed;
        };
        // A request that has not fully arrived is not forwarded once the proxy stops.
        let read = tokio::select! {
            biased;
            () = shared.stopping() => return Ended::Stopping,
            r = read_body(&mut client, prefix, size, config.idle_timeout) => r,
        };
        let mut frame = match read {
            Ok(f) => f,
            Err(why) => {
                debug!(%peer, "closing connection: {why}");
                return Ended::Closed;
            }
        };
        shared.stats.bytes_from_client(frame.len());
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
        let pending = if shared.quotas.admin.serves(head.api_key) {
            admin(conn, &head, std::mem::take(&mut frame)).await
        } else {
            classify(&head, &mut frame, conn)
        };
        let pending = match pending {
            Ok(p) => p,
            Err(why) => {
                warn!(%peer, "closing connection: {why}");
                shared.stats.protocol_error();
                return Ended::Closed;
            }
        };
        let frame = Bytes::from(frame);
        // The answer this connection waits for before it reads on.
        let mut answered = None;
        let (pending, to_broker) = match pending {
            Pending::Upstream(mut f) => {
                f.nanos = started.elapsed().as_nanos() as u64;
                // Nothing after a SASL step is read before its answer has told who the
                // connection is (Kafka's broker reads nothing else while it authenticates), nor
                // after a Produce under a producer quota before its answer has been metered.
                let one_at_a_time = matches!(
                    f.enforce,
                    Enforce::Produce {
                        one_at_a_time: true,
                        ..
                    }
                );
                if (one_at_a_time || f.sasl.is_some()) && f.head.expects_response {
                    let (tx, rx) = oneshot::channel();
                    f.done = Some(tx);
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
            let Ok(upstream) = upstream.writer(conn).await else {
                return Ended::Closed;
            };
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
            drop(reservation);
            match write {
                Ok(Ok(())) => shared.stats.request_forwarded(),
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

/// The proxy's own answer to a quota admin request (`frame`, with its size prefix). An
/// alteration is committed to the store (an fsync) before it is answered, so the handler runs
/// off the async workers, as kquotad runs it.
async fn admin(conn: &Conn<'_>, head: &RequestHead, frame: Vec<u8>) -> Result<Pending, String> {
    let shared = Arc::clone(conn.shared);
    let principal = conn.principal();
    let peer = conn.peer;
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

/// What to do with one request: forward it (and how its answer is metered), answer it here, or
/// (`Err`) close the connection. `frame` (with its size prefix) may be changed in place.
fn classify(head: &RequestHead, frame: &mut Vec<u8>, conn: &Conn<'_>) -> Result<Pending, String> {
    let shared = conn.shared;
    let body = &frame[4..];
    // One acquisition of the connection's state for all three: the SASL step, the (user,
    // client-id), and for a Produce whether a producer quota applies to it.
    let is_produce = head.api_key == ApiKey::Produce as i16;
    let (note, who, producer_quota) = {
        let mut state = conn.state.lock();
        let note = state
            .identity
            .on_request(head.api_key, head.version, body)
            .map_err(|e| e.to_string())?;
        let who = conn.who(&mut state, &head.client_id(body));
        let producer_quota = is_produce
            && state
                .meter
                .quotas()
                .iter()
                .any(|q| q.key.quota_type() == QuotaType::ProducerByteRate);
        (note, who, producer_quota)
    };
    let local = |bytes: Bytes, throttle_ms: u64| {
        shared.stats.answered_locally();
        Ok(Pending::Local {
            api_key: head.api_key,
            bytes,
            throttle_ms,
        })
    };
    let too_new = rewrite::rewritten_max(head.api_key).is_some_and(|max| head.version > max);
    if head.api_key == ApiKey::ApiVersions as i16 && too_new {
        // As Kafka answers a version it does not know: the client retries with one it lists.
        return local(rewrite::unsupported_api_versions(head.correlation_id), 0);
    }
    if too_new {
        // ApiVersions never offered it: a client that sends it anyway is closed, as Kafka closes
        // a connection for a version it does not serve.
        return Err(format!(
            "api key {} v{} is above the highest version the proxy rewrites",
            head.api_key, head.version
        ));
    }
    let mut enforce = Enforce::Time;
    match ApiKey::try_from(head.api_key) {
        Ok(ApiKey::Produce) => {
            let bytes = (frame.len() - 4) as u64;
            if head.expects_response {
                enforce = Enforce::Produce {
                    bytes,
                    one_at_a_time: producer_quota,
                };
            } else {
                // acks=0 gets no answer to record it at: recorded now, the connection muted.
                let t = conn.metered(&who, |m| m.produce(bytes));
                throttled(shared, "produce", &t);
                conn.mute(t.ms);
            }
        }
        Ok(ApiKey::Fetch) => {
            if let Some(fetch) = head
                .body_at
                .and_then(|at| FetchRequest::parse(body, head.version, at))
            {
                if let Some(cap) = conn.metered(&who, |m| m.max_fetch_bytes()) {
                    // Offsets are the body's; the frame has its size prefix before it.
                    fetch.cap(&mut frame[4..], cap);
                }
                enforce = Enforce::Fetch(fetch);
            }
        }
        Ok(ApiKey::CreateTopics | ApiKey::CreatePartitions | ApiKey::DeleteTopics) => {
            let request = Bytes::copy_from_slice(body);
            if let Some(m) = MutationRequest::decode(head.api_key, head.version, &request) {
                match mutations(conn, &who, m) {
                    Mutated::Forward(ms) => enforce = Enforce::Mutations(ms, None),
                    Mutated::Partly(forward, refused, ms) => {
                        // The topics refused are not forwarded; the answer takes them back.
                        *frame = forward.to_vec();
                        enforce = Enforce::Mutations(ms, Some(refused));
                    }
                    Mutated::Refused(answer, ms) => return local(answer, ms),
                }
            }
        }
        _ => {}
    }
    Ok(Pending::Upstream(Forwarded {
        head: *head,
        sasl: note,
        who,
        enforce,
        nanos: 0,
        done: None,
    }))
}

/// Counts a throttle in the metrics, by kind.
fn throttled(shared: &Shared, kind: &'static str, t: &Throttle) {
    if t.is_throttled() {
        shared.stats.throttled(kind, t.ms);
    }
}

/// Reads each answer from the broker, in the queue's order, and sends it to the client,
/// rewritten if it names brokers and throttled if the client is over a quota. Ends when the
/// queue is closed and empty, or the connection is to close.
async fn forward_responses<W>(
    mut connected: oneshot::Receiver<UpstreamReader>,
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
    // The broker, once the request side has connected to it.
    let mut broker: Option<UpstreamReader> = None;
    // The first byte of an answer, read while watching the broker.
    let mut carried: Option<u8> = None;
    loop {
        // While no answer is owed, the broker is watched too: if it closes (a broker restarting,
        // or closing an idle connection), so does the client's connection, at once, and the
        // client reconnects.
        let pending = if let (None, Some(upstream)) = (carried, broker.as_mut()) {
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
        } else {
            queue.recv().await
        };
        let Some((pending, _owed)) = pending else {
            // The request side has ended and every answer is delivered.
            return;
        };
        let forwarded = match pending {
            Pending::Local {
                api_key,
                bytes,
                throttle_ms,
            } => {
                if !write_client(&mut client, &bytes, peer, shared).await {
                    return;
                }
                conn.mute(throttle_ms);
                conn.answered(api_key, false);
                continue;
            }
            Pending::Upstream(f) => f,
        };
        // The request side connected before it queued this request.
        let upstream = match &mut broker {
            Some(b) => b,
            None => match (&mut connected).await {
                Ok(b) => broker.insert(b),
                Err(_) => return,
            },
        };
        let head = forwarded.head;
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
        let wire = match read_body(upstream, prefix, size, config.idle_timeout).await {
            Ok(w) => Bytes::from(w),
            Err(why) => {
                debug!(%peer, upstream = %addr, "closing connection: from the broker: {why}");
                return;
            }
        };
        let started = Instant::now();
        let correlation_id = i32::from_be_bytes([wire[4], wire[5], wire[6], wire[7]]);
        if correlation_id != head.correlation_id {
            warn!(
                %peer, upstream = %addr,
                "closing connection: the broker answered correlation id {correlation_id}, expected {}",
                head.correlation_id
            );
            return;
        }
        let mut forwarded = forwarded;
        if let Some(note) = forwarded.sasl.take() {
            let mut state = conn.state.lock();
            if state.identity.on_response(note, &wire[4..]) {
                let user: Arc<str> = Arc::from(state.identity.principal().name.as_str());
                debug!(%peer, %user, "authenticated by the broker");
                state.who.user = Arc::clone(&user);
                state.meter = shared.quotas.meter.client(&user, &state.who.client_id);
            }
        }
        let out = if rewrite::needs_rewrite(head.api_key, head.version) {
            let frame = wire.slice(4..);
            let mut learn = Learn(shared);
            match rewrite::rewrite(head.api_key, head.version, &frame, &mut learn) {
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
        let done = forwarded.done.take();
        let (out, throttle_ms) = enforce_answer(conn, forwarded, out, started);
        if throttle_ms > 0 && !enforce::client_throttles(head.api_key, head.version) {
            // A client too old to throttle itself gets its answer after the throttle, as Kafka
            // holds it back.
            tokio::select! {
                () = tokio::time::sleep(Duration::from_millis(throttle_ms)) => {}
                () = shared.grace_over() => return,
            }
        }
        if !write_client(&mut client, &out, peer, shared).await {
            return;
        }
        conn.mute(throttle_ms);
        conn.answered(head.api_key, true);
        if let Some(done) = done {
            let _ = done.send(());
        }
    }
}

/// Meters the answer `out` (with its size prefix) to a forwarded request, as Kafka's broker does
/// when the answer is ready: the answer to send (a throttled Fetch is answered empty, KIP-219;
/// others carry the longer of the proxy's and the broker's throttle) and the proxy's throttle.
fn enforce_answer(
    conn: &Conn<'_>,
    forwarded: Forwarded,
    out: Bytes,
    started: Instant,
) -> (Bytes, u64) {
    let shared = conn.shared;
    let head = forwarded.head;
    let nanos = forwarded.nanos + started.elapsed().as_nanos() as u64;
    let (out, throttle) = conn.metered(&forwarded.who, |meter| {
        let time = meter.request_time(nanos);
        throttled(shared, "request", &time);
        match forwarded.enforce {
            Enforce::Time => (out, time.ms),
            Enforce::Produce { bytes, .. } => {
                let t = meter.produce(bytes);
                throttled(shared, "produce", &t);
                (out, t.ms.max(time.ms))
            }
            Enforce::Fetch(request) => {
                let bytes = (out.len() - 4) as u64;
                let t = meter.fetch(bytes);
                throttled(shared, "fetch", &t);
                let ms = t.ms.max(time.ms);
                if ms == 0 {
                    return (out, 0);
                }
                // Kafka answers empty and does not charge the client for what it never got.
                meter.refund_fetch(bytes);
                let broker = fetch_throttle(&out, head.version);
                let empty = enforce::throttled_fetch(
                    head.version,
                    head.correlation_id,
                    ms.max(broker),
                    &request,
                );
                (empty, ms)
            }
            Enforce::Mutations(ms, None) => (out, ms.max(time.ms)),
            Enforce::Mutations(ms, Some(refused)) => {
                let ms = ms.max(time.ms);
                let merged = enforce::merge_refused(
                    head.api_key,
                    head.version,
                    &out.slice(4..),
                    refused,
                    ms,
                );
                (merged.unwrap_or(out), ms)
            }
        }
    });
    if throttle == 0 || matches!(ApiKey::try_from(head.api_key), Ok(ApiKey::Fetch)) {
        return (out, throttle);
    }
    match enforce::raise_throttle(head.api_key, head.version, &out.slice(4..), throttle) {
        Ok(Some(raised)) => (raised.freeze(), throttle),
        Ok(None) | Err(()) => (out, throttle),
    }
}

/// The broker's own throttle in a Fetch answer (0 if it cannot be read).
fn fetch_throttle(out: &Bytes, version: i16) -> u64 {
    enforce::leading_throttle(&out[4..], ApiKey::Fetch as i16, version)
        .map_or(0, |ms| u64::try_from(ms).unwrap_or(0))
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
        Ok(Ok(())) => {
            shared.stats.bytes_to_client(bytes.len());
            true
        }
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
) -> Result<Vec<u8>, String> {
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
        Ok(Ok(())) => Ok(buf),
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
            Err("a truncated frame".into())
        }
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("stalled within a frame".into()),
    }
}
