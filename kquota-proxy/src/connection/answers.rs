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

use super::conn::{Conn, Owed, UpstreamReader};
use super::decide::{Answer, BadAnswer, Forwarded, Pending, Plan, ReadOn};
use super::fetch_walk::{self, WalkError};
use super::frames::{
    write_frame, write_part, BodyError, PassError, WriteError, PASS_CHUNK, PASS_FROM,
};
use super::sides::Socket;
use super::stop::or_stop;
use crate::messages::rewrite::Advertise;
use crate::settings::HostPort;
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
        let mut path = Path {
            broker: upstream,
            client: &mut client,
            conn,
            addr,
        };
        let sent = if size <= PASS_FROM {
            path.whole(forwarded, prefix, size).await
        } else {
            path.passed(forwarded, prefix, size).await
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

/// The way an answer goes: from the broker's side of the connection to the client's.
struct Path<'p, 'c, W> {
    /// The broker's side, at the answer's first byte after its size prefix.
    broker: &'p mut UpstreamReader,
    client: &'p mut W,
    conn: &'p Conn<'c>,
    /// The broker's address, for the log.
    addr: &'p HostPort,
}

impl<W: AsyncWrite + Socket + Unpin> Path<'_, '_, W> {
    /// The answer to `forwarded` of `size` bytes after `prefix`, read whole (its bytes from the
    /// budget until the client has taken them: a client that does not read holds at most this
    /// answer), decided and written. The proxy's throttle, or `None` if the connection is to
    /// close.
    async fn whole(&mut self, forwarded: Forwarded, prefix: [u8; 4], size: usize) -> Option<u64> {
        let conn = self.conn;
        let _reservation = self.reserve(4 + size).await?;
        let wire = self
            .broker
            .body(prefix, size, conn.shared.config.idle_timeout)
            .await
            .map_err(|why| self.not_read(why))
            .ok()?
            .into_bytes();
        let answer = conn
            .decisions
            .answer(forwarded, wire, Instant::now(), &mut Learn(conn.shared))
            .map_err(|bad| self.refused(bad))
            .ok()?;
        deliver(self.client, answer, conn).await
    }

    /// The answer to `forwarded` of `size` bytes after `prefix` (more than [`PASS_FROM`]),
    /// decided from its head: passed on to the client as its bytes come (through a chunk from
    /// the budget; a client that does not read stalls this broker connection and holds nothing
    /// more), replaced (the broker's drained), or read whole where its bytes must change.
    async fn passed(&mut self, forwarded: Forwarded, prefix: [u8; 4], size: usize) -> Option<u64> {
        let conn = self.conn;
        let shared = conn.shared;
        let idle = shared.config.idle_timeout;
        let head = self
            .broker
            .head(prefix, ANSWER_HEAD, idle)
            .await
            .map_err(|why| self.not_read(why))
            .ok()?;
        let request = forwarded.head;
        let started = Instant::now();
        let plan = conn
            .decisions
            .plan(forwarded, &head[4..], size, started)
            .map_err(|bad| self.refused(bad))
            .ok()?;
        let rest = size - ANSWER_HEAD;
        let answer = match plan {
            Plan::Pass { endpoints: false } => {
                let _reservation = self.reserve(PASS_CHUNK).await?;
                // Allocated only if the bytes are copied rather than spliced.
                let mut chunk = Vec::new();
                if !write_client(self.client, &head, false, conn).await {
                    return None;
                }
                self.pass(true, rest, &mut chunk).await?;
                shared.stats.bytes_to_client(4 + size);
                return Some(0);
            }
            Plan::Replace(answer) => {
                let _reservation = self.reserve(PASS_CHUNK).await?;
                let mut chunk = Vec::with_capacity(PASS_CHUNK);
                self.pass(false, rest, &mut chunk).await?;
                answer
            }
            Plan::Pass { endpoints: true } => {
                let _reservation = self.reserve(PASS_CHUNK).await?;
                let mut chunk = Vec::with_capacity(PASS_CHUNK);
                let mut learn = Learn(shared);
                let walk = fetch_walk::pass(
                    self.broker,
                    self.client,
                    head,
                    rest,
                    &mut chunk,
                    idle,
                    &mut learn,
                );
                let Some(walked) = or_stop(shared.grace_over(), walk).await else {
                    debug!(peer = %conn.peer, "closing connection: the client took no answer while stopping");
                    return None;
                };
                match walked {
                    Ok(()) => {}
                    Err(WalkError::Pass(PassError::From(why))) => {
                        self.not_read(why);
                        return None;
                    }
                    Err(WalkError::Pass(PassError::To(why))) => {
                        to_client(why, conn);
                        return None;
                    }
                    Err(WalkError::Malformed(what)) => {
                        warn!(
                            peer = %conn.peer, upstream = %self.addr,
                            "closing connection: the broker's Fetch answer v{} (correlation id {}) does not read at {what}",
                            request.version, request.correlation_id
                        );
                        return None;
                    }
                    Err(WalkError::Rewrite(e)) => {
                        self.refused(BadAnswer::Rewrite(request, e));
                        return None;
                    }
                }
                shared.stats.bytes_to_client(4 + size);
                return Some(0);
            }
            Plan::Whole(left) => {
                let _reservation = self.reserve(4 + size).await?;
                let wire = self
                    .broker
                    .rest(&head, rest, idle)
                    .await
                    .map_err(|why| self.not_read(why))
                    .ok()?
                    .into_bytes();
                let mut learn = Learn(shared);
                let answer = conn.decisions.finish(left, wire, started, &mut learn);
                answer.map_err(|bad| self.refused(bad)).ok()?
            }
        };
        deliver(self.client, answer, conn).await
    }

    /// The next `n` bytes from the broker to the client (`onward` false: drained), through
    /// `chunk`; `None` if the connection is to close.
    async fn pass(&mut self, onward: bool, n: usize, chunk: &mut Vec<u8>) -> Option<()> {
        let shared = self.conn.shared;
        let to = onward.then_some(&mut *self.client);
        let pass = self.broker.pass(n, to, chunk, shared.config.idle_timeout);
        let Some(passed) = or_stop(shared.grace_over(), pass).await else {
            debug!(peer = %self.conn.peer, "closing connection: the client took no answer while stopping");
            return None;
        };
        match passed {
            Ok(()) => Some(()),
            Err(PassError::From(why)) => {
                self.not_read(why);
                None
            }
            Err(PassError::To(why)) => {
                to_client(why, self.conn);
                None
            }
        }
    }

    /// `bytes` of the budget, held until the client has taken the answer they are for; `None`
    /// (the connection closes) when the proxy is past its stop's grace or they are more than
    /// the budget.
    async fn reserve(&mut self, bytes: usize) -> Option<Reservation> {
        let shared = self.conn.shared;
        let reservation = or_stop(shared.grace_over(), shared.budget.reserve(bytes)).await?;
        if reservation.is_none() {
            warn!(
                peer = %self.conn.peer, upstream = %self.addr,
                "closing connection: a response frame of {bytes} bytes is larger than the buffer memory"
            );
        }
        reservation
    }

    /// Logs why the broker's answer was not read.
    fn not_read(&self, why: BodyError) {
        debug!(peer = %self.conn.peer, upstream = %self.addr, "closing connection: from the broker: {why}");
    }

    /// Logs why the broker's answer cannot be forwarded.
    fn refused(&self, bad: BadAnswer) {
        let peer = self.conn.peer;
        let addr = self.addr;
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
}

/// Writes `answer` to the client (after its throttle, for a client too old to throttle itself,
/// as Kafka holds it back): its throttle, or `None` if the connection is to close.
async fn deliver<W: AsyncWrite + Unpin>(
    client: &mut W,
    answer: Answer,
    conn: &Conn<'_>,
) -> Option<u64> {
    if answer.hold {
        let held = tokio::time::sleep(Duration::from_millis(answer.throttle_ms));
        or_stop(conn.shared.grace_over(), held).await?;
    }
    write_client(client, &answer.bytes, true, conn)
        .await
        .then_some(answer.throttle_ms)
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
    let Some(write) = or_stop(shared.grace_over(), write).await else {
        debug!(%peer, "closing connection: the client took no answer while stopping");
        return false;
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

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use kafka_protocol::messages::{
        ApiKey, FetchRequest, FetchResponse, HeartbeatRequest, HeartbeatResponse, ProduceResponse,
    };
    use kquota::{Alteration, Entity, EntityName};
    use tokio::io::{AsyncWriteExt, DuplexStream};
    use tokio::sync::{Semaphore, SemaphorePermit};

    use super::super::frames::FrameReader;
    use super::super::testing::{
        answer_id, decided, decoded, fetch_answer, in_memory, next_frame, produce, request,
        response, Harness,
    };
    use super::*;

    /// How long a test waits for what must come.
    const SOON: Duration = Duration::from_secs(10);

    fn quota(key: &str, bytes_per_s: f64) -> Vec<Alteration> {
        vec![Alteration::new(&Entity::User(EntityName::Default)).set(key, bytes_per_s)]
    }

    fn heartbeat(id: i32) -> kquota_host::Frame {
        request(ApiKey::Heartbeat, 4, id, &HeartbeatRequest::default())
    }

    fn heartbeat_answer(id: i32) -> Bytes {
        response(ApiKey::Heartbeat, 4, id, &HeartbeatResponse::default())
    }

    /// A Fetch of up to 50 MiB, v12 (its answer names no leaders).
    fn fetch(id: i32) -> kquota_host::Frame {
        let fetch = FetchRequest::default().with_max_bytes(52_428_800);
        request(ApiKey::Fetch, 12, id, &fetch)
    }

    /// The next answer the client is written.
    async fn answered(app: &mut DuplexStream) -> Bytes {
        tokio::time::timeout(SOON, next_frame(app))
            .await
            .expect("an answer written")
    }

    /// A place among the answers owed.
    fn place(owed: &Semaphore) -> SemaphorePermit<'_> {
        owed.try_acquire().expect("room for another answer")
    }

    /// Runs the answer side of `h`'s connection, from an in-memory broker already connected to
    /// an in-memory client, alongside `test` (given the places among the answers owed, their
    /// queue, the connection, the broker's end and the client's end); ends once the answer side
    /// has, after `test`.
    async fn drive<F>(h: &Harness, test: F)
    where
        F: for<'q> AsyncFnOnce(
            &'q Semaphore,
            mpsc::Sender<Owed<'q>>,
            &'q Conn<'q>,
            DuplexStream,
            DuplexStream,
        ),
    {
        let conn = h.conn();
        let owed = Semaphore::new(8);
        let (tx, queue) = mpsc::channel(8);
        let (client, app) = tokio::io::duplex(1 << 20);
        let (broker, kafka) = in_memory();
        let (from_broker, _) = broker.split();
        let (reader, connected) = oneshot::channel();
        assert!(reader.send(FrameReader::new(from_broker)).is_ok());
        let addr = HostPort::new("kafka", 9092).unwrap();
        let side = forward(connected, client, queue, &conn, &addr);
        tokio::join!(side, test(&owed, tx, &conn, kafka, app));
    }

    #[tokio::test]
    async fn answers_go_to_the_client_in_request_order_the_proxys_own_among_the_brokers() {
        let h = Harness::new(&[]);
        drive(&h, async |owed, queue, conn, mut kafka, mut app| {
            let first = decided(&conn.decisions, &mut heartbeat(1));
            queue.send((first, place(owed))).await.unwrap();
            let own = Pending::Local {
                api_key: ApiKey::Heartbeat as i16,
                bytes: heartbeat_answer(2),
                throttle_ms: 0,
            };
            queue.send((own, place(owed))).await.unwrap();
            let third = decided(&conn.decisions, &mut heartbeat(3));
            queue.send((third, place(owed))).await.unwrap();
            // The broker answers its two at once; the proxy's own goes between them.
            kafka.write_all(&heartbeat_answer(1)).await.unwrap();
            kafka.write_all(&heartbeat_answer(3)).await.unwrap();
            let order = [
                answer_id(&answered(&mut app).await),
                answer_id(&answered(&mut app).await),
                answer_id(&answered(&mut app).await),
            ];
            assert_eq!(order, [1, 2, 3]);
            assert_eq!(
                owed.available_permits(),
                8,
                "every place given back once written"
            );
        })
        .await;
    }

    #[tokio::test]
    async fn a_throttled_fetch_is_answered_empty_its_broker_answer_drained_and_the_client_muted() {
        let h = Harness::new(&quota("consumer_byte_rate", 1_000.0));
        drive(&h, async |owed, queue, conn, mut kafka, mut app| {
            // One answer read whole, one (over PASS_FROM) decided from its head and drained.
            for (id, records) in [(5, 4_000), (6, 200_000)] {
                let fetched = decided(&conn.decisions, &mut fetch(id));
                queue.send((fetched, place(owed))).await.unwrap();
                let wire = fetch_answer(12, id, records);
                assert_eq!(wire.len() > PASS_FROM, records > PASS_FROM);
                kafka.write_all(&wire).await.unwrap();
                let answer = answered(&mut app).await;
                assert_eq!(answer_id(&answer), id);
                let r: FetchResponse = decoded(ApiKey::Fetch, 12, answer);
                assert!(r.responses.is_empty(), "KIP-219: answered empty");
                assert!(r.throttle_time_ms > 0);
                // Muted for the throttle the answer carries, on the meter's clock.
                let muted = conn.decisions.muted_for();
                assert_eq!(
                    muted,
                    Some(Duration::from_millis(r.throttle_time_ms as u64))
                );
            }
            // The drained answer was taken whole from the broker: the next one reads.
            let next = decided(&conn.decisions, &mut heartbeat(7));
            queue.send((next, place(owed))).await.unwrap();
            kafka.write_all(&heartbeat_answer(7)).await.unwrap();
            assert_eq!(answer_id(&answered(&mut app).await), 7);
        })
        .await;
    }

    #[tokio::test]
    async fn a_large_answer_within_the_quota_is_passed_on_unchanged() {
        let h = Harness::new(&quota("consumer_byte_rate", 100_000_000.0));
        drive(&h, async |owed, queue, conn, mut kafka, mut app| {
            let fetched = decided(&conn.decisions, &mut fetch(5));
            queue.send((fetched, place(owed))).await.unwrap();
            let wire = fetch_answer(12, 5, 300_000);
            let sent = wire.clone();
            let (_, got) = tokio::join!(kafka.write_all(&sent), answered(&mut app));
            assert!(got == wire, "the answer changed on the way");
            assert_eq!(conn.decisions.muted_for(), None);
        })
        .await;
    }

    #[tokio::test]
    async fn the_request_side_is_told_once_an_answer_it_waits_for_is_written_and_the_client_muted()
    {
        let h = Harness::new(&quota("producer_byte_rate", 1_000.0));
        drive(&h, async |owed, queue, conn, mut kafka, mut app| {
            let frame = &mut request(ApiKey::Produce, 9, 3, &produce(1_200, 1));
            let Pending::Upstream(mut f) = decided(&conn.decisions, frame) else {
                panic!("a Produce is forwarded");
            };
            assert!(f.one_at_a_time());
            let (tx, mut told) = oneshot::channel();
            f.read_on = ReadOn::Answered(tx);
            queue
                .send((Pending::Upstream(f), place(owed)))
                .await
                .unwrap();
            assert!(told.try_recv().is_err(), "told before the answer");
            let wire = response(ApiKey::Produce, 9, 3, &ProduceResponse::default());
            kafka.write_all(&wire).await.unwrap();
            let answer = answered(&mut app).await;
            tokio::time::timeout(SOON, told)
                .await
                .expect("told")
                .expect("told, not dropped");
            let r: ProduceResponse = decoded(ApiKey::Produce, 9, answer);
            let throttle = r.throttle_time_ms as u64;
            assert!(throttle > 0, "the Produce is throttled");
            assert_eq!(
                conn.decisions.muted_for(),
                Some(Duration::from_millis(throttle))
            );
            h.clock.advance(throttle);
            assert_eq!(conn.decisions.muted_for(), None);
        })
        .await;
    }

    #[tokio::test]
    async fn an_answer_to_another_request_closes_the_connection() {
        let h = Harness::new(&[]);
        drive(&h, async |owed, queue, conn, mut kafka, mut app| {
            let first = decided(&conn.decisions, &mut heartbeat(1));
            queue.send((first, place(owed))).await.unwrap();
            kafka.write_all(&heartbeat_answer(2)).await.unwrap();
            let mut byte = [0u8; 1];
            let end =
                tokio::time::timeout(SOON, tokio::io::AsyncReadExt::read(&mut app, &mut byte));
            assert!(
                matches!(end.await, Ok(Ok(0))),
                "the client's side is closed, nothing written"
            );
        })
        .await;
    }
}
