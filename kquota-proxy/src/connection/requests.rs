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

use super::conn::{Conn, Ended, Owed, Upstream};
use super::decide::{Forwarded, Pending, ReadOn};
use super::frames::{
    write_frame, BodyError, FrameReader, PassError, WriteError, PASS_CHUNK, PASS_FROM,
};
use super::sides::Socket;
use super::stop::or_stop;
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
        let Some(permit) = or_stop(shared.stopping(), owed.acquire()).await else {
            return Ended::Stopping;
        };
        let Ok(permit) = permit else {
            return Ended::Closed;
        };
        // The request whole, or of a large Produce only its head: its records are passed to the
        // broker as they come, once the request is decided. A request that has not fully
        // arrived is not forwarded once the proxy stops.
        let read = read_request(&mut client, prefix, size, conn);
        let Some(read) = or_stop(shared.stopping(), read).await else {
            return Ended::Stopping;
        };
        let Some((mut frame, reservation, rest)) = read else {
            return Ended::Closed;
        };
        shared.stats.bytes_from_client(4 + size);
        // A request read while the answer side throttled the client waits out the throttle.
        if or_stop(shared.stopping(), conn.unmuted()).await.is_none() {
            return Ended::Stopping;
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
        let mut route = Route::of(pending);
        // A tool negotiates before it asks for quotas: with the cluster out of reach, the proxy
        // answers ApiVersions itself, so its own admin APIs stay served.
        if route.to_broker() && head.api_key == ApiKey::ApiVersions as i16 {
            match api_versions_without_the_cluster(&mut upstream, &head, conn).await {
                Err(ended) => return ended,
                Ok(None) => {}
                Ok(Some(own)) => {
                    route = Route::Local(own);
                    negotiated_locally = true;
                }
            }
        }
        let to_broker = route.to_broker();
        // The answer this connection waits for before it reads on.
        let answered = route.wait_for_answer();
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
        if let Some(pending) = route.owed() {
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
            if or_stop(shared.stopping(), answered).await.is_none() {
                return Ended::Stopping;
            }
        }
    }
}

/// Where a decided request goes, and the answer owed for it.
enum Route {
    /// To the broker, whose answer is owed.
    Broker(Forwarded),
    /// To the broker, with no answer owed: a Produce with acks=0 (metered, and the connection
    /// muted, when read).
    Unanswered,
    /// Nowhere: the proxy answers it itself.
    Local(Pending),
}

impl Route {
    /// The route of a request decided as `pending`.
    fn of(pending: Pending) -> Route {
        match pending {
            Pending::Upstream(f) if f.head.expects_response => Route::Broker(f),
            Pending::Upstream(_) => Route::Unanswered,
            local => Route::Local(local),
        }
    }

    /// Whether the request goes to the broker.
    fn to_broker(&self) -> bool {
        matches!(self, Route::Broker(_) | Route::Unanswered)
    }

    /// For a request nothing is read behind until it is answered (see
    /// [`Forwarded::one_at_a_time`]): the channel its answer side tells once it is.
    fn wait_for_answer(&mut self) -> Option<oneshot::Receiver<()>> {
        let Route::Broker(f) = self else {
            return None;
        };
        if !f.one_at_a_time() {
            return None;
        }
        let (tx, rx) = oneshot::channel();
        f.read_on = ReadOn::Answered(tx);
        Some(rx)
    }

    /// The answer owed, for the answer side's queue.
    fn owed(self) -> Option<Pending> {
        match self {
            Route::Broker(f) => Some(Pending::Upstream(f)),
            Route::Unanswered => None,
            Route::Local(local) => Some(local),
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
    let pass = client.pass(rest, Some(writer), &mut chunk, shared.config.idle_timeout);
    let Some(passed) = or_stop(shared.grace_over(), pass).await else {
        debug!(%peer, "closing connection: a request not passed on while stopping");
        return Err(Ended::Closed);
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
            // Ok(true) once unmuted; Ok(false) when some of the prefix was read ahead.
            let muted = async {
                tokio::select! {
                    biased;
                    () = conn.unmuted() => Ok(true),
                    () = &mut idle, if nothing_owed() => {
                        debug!(%peer, "closing idle connection (throttled)");
                        Err(Ended::Closed)
                    }
                    r = client.fill_prefix(), if !client.has_prefix() => match r {
                        Ok(true) => Ok(false),
                        Ok(false) | Err(_) => Err(Ended::Closed),
                    },
                }
            };
            let Some(muted) = or_stop(shared.stopping(), muted).await else {
                return Err(Ended::Stopping);
            };
            if muted? {
                break;
            }
        }
    }
    while !client.has_prefix() {
        let fill = tokio::time::timeout(config.idle_timeout, client.fill_prefix());
        let Some(read) = or_stop(shared.stopping(), fill).await else {
            return Err(Ended::Stopping);
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
    let write = write_frame(writer, frame, shared.config.idle_timeout);
    let Some(write) = or_stop(shared.grace_over(), write).await else {
        debug!(%peer, "closing connection: the broker took no request while stopping");
        return Err(Ended::Closed);
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use kafka_protocol::messages::{HeartbeatRequest, MetadataRequest};
    use kquota::{Alteration, Entity, EntityName};
    use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

    use super::super::testing::{in_memory, next_frame, produce, request, request_id, Harness};
    use super::*;
    use crate::settings::HostPort;

    /// How long a test waits to see that nothing comes.
    const QUIET: Duration = Duration::from_millis(300);

    /// How long a test waits for what must come.
    const SOON: Duration = Duration::from_secs(10);

    fn metadata(id: i32) -> Frame {
        request(ApiKey::Metadata, 12, id, &MetadataRequest::default())
    }

    fn heartbeat(id: i32) -> Frame {
        request(ApiKey::Heartbeat, 4, id, &HeartbeatRequest::default())
    }

    fn producer_quota(bytes_per_s: f64) -> Vec<Alteration> {
        vec![Alteration::new(&Entity::User(EntityName::Default))
            .set("producer_byte_rate", bytes_per_s)]
    }

    /// Whether nothing arrives from `from` for a while.
    async fn quiet(from: &mut DuplexStream) -> bool {
        let mut byte = [0u8; 1];
        tokio::time::timeout(QUIET, from.read(&mut byte))
            .await
            .is_err()
    }

    /// The next request the broker is sent: its correlation id.
    async fn forwarded(broker: &mut DuplexStream) -> i32 {
        let frame = tokio::time::timeout(SOON, next_frame(broker))
            .await
            .expect("a request forwarded");
        request_id(&frame)
    }

    /// The next answer owed, in the queue: its correlation id, whether the proxy makes it, and
    /// its place among the answers owed.
    async fn queued<'a>(queue: &mut mpsc::Receiver<Owed<'a>>) -> (i32, bool, Owed<'a>) {
        let owed = tokio::time::timeout(SOON, queue.recv())
            .await
            .expect("an answer queued")
            .expect("the queue open");
        let (id, local) = match &owed.0 {
            Pending::Upstream(f) => (f.head.correlation_id, false),
            Pending::Local { bytes, .. } => (
                i32::from_be_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]),
                true,
            ),
        };
        (id, local, owed)
    }

    /// Runs the request side of `h`'s connection, from an in-memory client to an in-memory
    /// broker already connected, alongside `test` (given the client's end, the broker's end, and
    /// the queue of answers owed); what the request side ended with, if it ended first.
    async fn drive<F>(h: &Harness, max_in_flight: usize, test: F) -> Option<Ended>
    where
        F: for<'q> AsyncFnOnce(DuplexStream, DuplexStream, mpsc::Receiver<Owed<'q>>),
    {
        let conn = h.conn();
        let owed = Semaphore::new(max_in_flight);
        let (tx, queue) = mpsc::channel(max_in_flight);
        let (client, app) = tokio::io::duplex(1 << 20);
        let (broker, kafka) = in_memory();
        let (_, to_broker) = broker.split();
        let upstream = Upstream::Connected(to_broker);
        let side = forward(FrameReader::new(client), upstream, tx, &owed, &conn);
        tokio::select! {
            ended = side => Some(ended),
            () = test(app, kafka, queue) => None,
        }
    }

    #[tokio::test]
    async fn requests_are_forwarded_as_they_come_until_max_in_flight_answers_are_owed() {
        let h = Harness::new(&[]);
        let ended = drive(&h, 2, async |mut app, mut kafka, mut queue| {
            for id in 1..=3 {
                app.write_all(&metadata(id)).await.unwrap();
            }
            assert_eq!(forwarded(&mut kafka).await, 1);
            assert_eq!(forwarded(&mut kafka).await, 2);
            assert!(
                quiet(&mut kafka).await,
                "a third request read with two answers owed"
            );
            let (first, local, owed) = queued(&mut queue).await;
            assert_eq!((first, local), (1, false));
            // The first answer written: its place is free, and the third is read.
            drop(owed);
            assert_eq!(forwarded(&mut kafka).await, 3);
            let order = [queued(&mut queue).await.0, queued(&mut queue).await.0];
            assert_eq!(order, [2, 3], "the answers are owed in request order");
        })
        .await;
        assert_eq!(ended, None);
    }

    #[tokio::test]
    async fn nothing_is_read_behind_a_produce_whose_answer_may_be_throttled_until_it_is_answered() {
        let h = Harness::new(&producer_quota(1_000.0));
        let ended = drive(&h, 8, async |mut app, mut kafka, mut queue| {
            app.write_all(&request(ApiKey::Produce, 9, 1, &produce(1_200, 1)))
                .await
                .unwrap();
            app.write_all(&heartbeat(2)).await.unwrap();
            assert_eq!(forwarded(&mut kafka).await, 1);
            assert!(
                quiet(&mut kafka).await,
                "read behind a Produce that may be throttled"
            );
            let (id, _, (pending, _permit)) = queued(&mut queue).await;
            assert_eq!(id, 1);
            let Pending::Upstream(f) = pending else {
                panic!("the Produce is the broker's to answer");
            };
            let ReadOn::Answered(answered) = f.read_on else {
                panic!("the Produce's answer is waited for");
            };
            // The answer side has written its answer.
            answered.send(()).unwrap();
            assert_eq!(forwarded(&mut kafka).await, 2);
        })
        .await;
        assert_eq!(ended, None);
    }

    #[tokio::test]
    async fn requests_are_pipelined_behind_a_produce_whose_answer_cannot_be_throttled() {
        let h = Harness::new(&producer_quota(1_000_000.0));
        let ended = drive(&h, 8, async |mut app, mut kafka, mut queue| {
            app.write_all(&request(ApiKey::Produce, 9, 1, &produce(1_200, 1)))
                .await
                .unwrap();
            app.write_all(&heartbeat(2)).await.unwrap();
            assert_eq!(forwarded(&mut kafka).await, 1);
            assert_eq!(forwarded(&mut kafka).await, 2, "not read until an answer");
            assert_eq!(queued(&mut queue).await.0, 1);
            assert_eq!(queued(&mut queue).await.0, 2);
        })
        .await;
        assert_eq!(ended, None);
    }

    #[tokio::test]
    async fn a_produce_with_acks_0_is_forwarded_and_owes_no_answer() {
        let h = Harness::new(&[]);
        let ended = drive(&h, 8, async |mut app, mut kafka, mut queue| {
            app.write_all(&request(ApiKey::Produce, 9, 1, &produce(100, 0)))
                .await
                .unwrap();
            app.write_all(&heartbeat(2)).await.unwrap();
            assert_eq!(forwarded(&mut kafka).await, 1);
            assert_eq!(forwarded(&mut kafka).await, 2);
            assert_eq!(
                queued(&mut queue).await.0,
                2,
                "the first answer owed is the Heartbeat's"
            );
        })
        .await;
        assert_eq!(ended, None);
    }

    #[tokio::test]
    async fn a_muted_client_is_not_read_until_the_meters_clock_is_past_its_throttle() {
        let h = Harness::new(&[]);
        let conn = h.conn();
        // A throttled answer was written (KIP-219): the connection is muted for 200 ms of the
        // meter's clock, which stands still.
        conn.decisions.mute(200);
        let owed = Semaphore::new(8);
        let (tx, mut queue) = mpsc::channel(8);
        let (client, mut app) = tokio::io::duplex(1 << 20);
        let (broker, mut kafka) = in_memory();
        let (_, to_broker) = broker.split();
        let side = forward(
            FrameReader::new(client),
            Upstream::Connected(to_broker),
            tx,
            &owed,
            &conn,
        );
        let test = async {
            app.write_all(&heartbeat(1)).await.unwrap();
            // Longer than the throttle in real time: the mute is the meter's clock's.
            tokio::time::sleep(Duration::from_millis(400)).await;
            assert!(quiet(&mut kafka).await, "read while muted");
            assert!(queue.try_recv().is_err(), "decided while muted");
            h.clock.advance(199);
            assert!(quiet(&mut kafka).await, "read before the throttle is over");
            h.clock.advance(1);
            assert_eq!(forwarded(&mut kafka).await, 1);
        };
        tokio::select! {
            ended = side => panic!("the request side ended: {ended:?}"),
            () = test => {}
        }
    }

    #[tokio::test]
    async fn the_stop_ends_the_request_side_and_a_request_not_read_whole_is_not_forwarded() {
        let h = Harness::new(&[]);
        let ended = drive(&h, 8, async |mut app, mut kafka, queue| {
            let frame = heartbeat(1);
            app.write_all(&frame[..frame.len() - 3]).await.unwrap();
            assert!(quiet(&mut kafka).await);
            h.stop();
            // The request side ends at once, its request unread; the test waits for ever if not.
            std::future::pending::<()>().await;
            drop(queue);
        })
        .await;
        assert_eq!(ended, Some(Ended::Stopping));
    }

    #[tokio::test]
    async fn api_versions_is_answered_by_the_proxy_while_the_cluster_is_away_then_the_cluster_closes_it(
    ) {
        let h = Harness::with(&[], |c| {
            c.connect_timeout = Duration::from_secs(2);
        });
        let conn = h.conn();
        // Nothing listens on port 1 of the loopback: the connect is refused.
        let away = HostPort::new("127.0.0.1", 1).unwrap();
        let (upstream, _connected) = Upstream::unconnected(&away);
        let owed = Semaphore::new(8);
        let (tx, mut queue) = mpsc::channel(8);
        let (client, mut app) = tokio::io::duplex(1 << 20);
        let side = forward(FrameReader::new(client), upstream, tx, &owed, &conn);
        let test = async {
            let versions = request(
                ApiKey::ApiVersions,
                3,
                7,
                &kafka_protocol::messages::ApiVersionsRequest::default(),
            );
            app.write_all(&versions).await.unwrap();
            let (id, local, _owed) = queued(&mut queue).await;
            assert_eq!((id, local), (7, true), "answered by the proxy itself");
            assert!(h.shared.reach.why_down().is_some(), "the cluster is down");
            // A request for the cluster: the client negotiated with the proxy, not with it.
            app.write_all(&metadata(8)).await.unwrap();
            std::future::pending::<()>().await;
        };
        let ended = tokio::select! {
            ended = side => ended,
            () = test => unreachable!(),
        };
        assert_eq!(ended, Ended::Closed);
        assert!(queue.try_recv().is_err(), "nothing owed for the Metadata");
    }
}
