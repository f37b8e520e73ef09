//! What one connection decides, apart from its bytes' coming and going: who the connection is
//! (its SASL exchange), whose quotas each request counts against, what is forwarded and what
//! the proxy answers itself, how each answer is metered and throttled, and how long the
//! connection is muted. No I/O happens here: the two loops around it read and write, and the
//! tests drive it with the meter's [`ManualClock`](kquota::meter::ManualClock).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::ApiKey;
use kquota::meter::{ClientMeter, Clock, Throttle};
use kquota_host::Frame;
use kquota_wire::Principal;
use parking_lot::Mutex;
use tokio::sync::oneshot;
use tracing::debug;

use crate::messages::enforce::{self, FetchRequest, MutationRequest, Refused, Split};
use crate::messages::header::RequestHead;
use crate::messages::identity::{Identity, SaslNote};
use crate::messages::rewrite::{self, Advertise, RewriteError};
use crate::metrics::Stats;
use crate::quotas::Quotas;

/// An answer the client is owed, in request order.
pub(super) enum Pending {
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
pub(super) struct Forwarded {
    pub(super) head: RequestHead,
    /// The SASL exchange's step, for a SaslHandshake or SaslAuthenticate.
    sasl: Option<SaslNote>,
    /// Whose quotas the request counts against.
    who: Who,
    enforce: Enforce,
    /// The proxy's own time on the request so far (for `request_percentage`).
    pub(super) nanos: u64,
    /// When the connection's next request may be read.
    pub(super) read_on: ReadOn,
}

/// When the request after a forwarded one may be read.
pub(super) enum ReadOn {
    /// At once: requests are pipelined.
    Now,
    /// Once this request's answer is written (and the client muted if throttled): the answer is
    /// told over the channel.
    Answered(oneshot::Sender<()>),
}

impl Forwarded {
    /// Whether the connection reads nothing more until this request is answered: after a SASL
    /// step (Kafka's broker reads nothing else while it authenticates; the answer says who the
    /// connection is), and after a Produce whose answer may be throttled (its answer is when it
    /// is metered, and Kafka reads one request of a connection at a time).
    pub(super) fn one_at_a_time(&self) -> bool {
        self.head.expects_response
            && (self.sasl.is_some()
                || matches!(
                    self.enforce,
                    Enforce::Produce {
                        one_at_a_time: true,
                        ..
                    }
                ))
    }
}

/// What the answer to a forwarded request is metered for.
enum Enforce {
    /// Only the proxy's time on it.
    Time,
    /// A Produce request of `bytes`, recorded when its answer comes, as Kafka's broker records
    /// it; `one_at_a_time` when that answer may be throttled.
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

/// A connection's (user, client-id): the principal's name and the request header's client id.
#[derive(Clone, PartialEq, Eq)]
struct Who {
    user: Arc<str>,
    client_id: Arc<str>,
}

/// Who the connection is, and the meter of its (user, client-id).
struct State {
    identity: Identity,
    /// The (user, client-id) of the last request, and its meter.
    who: Who,
    meter: ClientMeter,
}

/// An answer ready for the client.
pub(super) struct Answer {
    /// Its bytes, size prefix included.
    pub(super) bytes: Bytes,
    /// The proxy's throttle: the connection is muted for it once the answer is written.
    pub(super) throttle_ms: u64,
    /// The client is too old to throttle itself (before KIP-219): the answer waits out the
    /// throttle before it is written, as Kafka holds it back.
    pub(super) hold: bool,
}

impl Answer {
    /// `bytes` unchanged and unthrottled.
    pub(super) fn as_is(bytes: Bytes) -> Answer {
        Answer {
            bytes,
            throttle_ms: 0,
            hold: false,
        }
    }
}

/// How a broker answer goes to the client, decided from its head ([`Decisions::plan`]).
pub(super) enum Plan {
    /// As its bytes come, unchanged and unthrottled; `endpoints`: a Fetch answer whose leader
    /// endpoints (KIP-951, at its end) are the proxy's to rewrite.
    Pass { endpoints: bool },
    /// Replaced by this answer (a throttled Fetch is answered empty): the broker's is drained.
    Replace(Answer),
    /// Read whole first, then [`Decisions::finish`].
    Whole(Rest),
}

/// What is left to decide of an answer read whole.
pub(super) enum Rest {
    /// Everything: it is a SASL step's, names brokers, or takes back refused topics.
    Decide(Forwarded),
    /// Only its throttle field, raised to the proxy's throttle (already metered).
    Raise {
        head: RequestHead,
        throttle_ms: u64,
        hold: bool,
    },
}

/// A broker answer the proxy cannot forward: the connection closes.
#[derive(Debug)]
pub(super) enum BadAnswer {
    /// It answers another request than the next one owed.
    CorrelationId { got: i32, expected: i32 },
    /// It must be rewritten and cannot be.
    Rewrite(RequestHead, RewriteError),
}

/// One connection's decisions.
pub(super) struct Decisions<'a> {
    quotas: &'a Quotas,
    stats: &'a Stats,
    /// The meter's clock: mutes are timed on it.
    clock: &'a Arc<dyn Clock>,
    /// Requests are not read before this time (the clock's ms): the client is throttled.
    muted_until: AtomicU64,
    /// The broker authenticated the connection (or its TLS certificate named it), or answered
    /// a request that needs no authentication.
    proven: AtomicBool,
    /// The bytes of the Produce requests forwarded and not yet answered (they are recorded at
    /// their answers).
    produce_in_flight: AtomicU64,
    state: Mutex<State>,
}

impl<'a> Decisions<'a> {
    /// The decisions of a new connection whose principal so far is `principal` (its TLS
    /// certificate's, or ANONYMOUS).
    pub(super) fn new(quotas: &'a Quotas, stats: &'a Stats, principal: Principal) -> Self {
        let who = Who {
            user: Arc::from(principal.name.as_str()),
            client_id: Arc::from(""),
        };
        Decisions {
            quotas,
            stats,
            clock: quotas.meter.clock(),
            muted_until: AtomicU64::new(0),
            proven: AtomicBool::new(principal != Principal::anonymous()),
            produce_in_flight: AtomicU64::new(0),
            state: Mutex::new(State {
                identity: Identity::new(principal),
                meter: quotas.meter.client(&who.user, &who.client_id),
                who,
            }),
        }
    }

    /// The connection's principal now.
    pub(super) fn principal(&self) -> Principal {
        self.state.lock().identity.principal().clone()
    }

    /// Whether the connection has proven itself, now that an answer to a request of `api_key`
    /// has been written (`from_broker`: the broker answered it).
    pub(super) fn answered(&self, api_key: i16, from_broker: bool) -> bool {
        let sasl_or_versions = api_key == ApiKey::ApiVersions as i16
            || api_key == ApiKey::SaslHandshake as i16
            || api_key == ApiKey::SaslAuthenticate as i16;
        // A broker that requires authentication answers nothing else before it (Kafka closes the
        // connection); an authenticated principal proves the connection whatever it asked.
        if (from_broker && !sasl_or_versions)
            || *self.state.lock().identity.principal() != Principal::anonymous()
        {
            self.proven.store(true, Ordering::Relaxed);
        }
        self.proven.load(Ordering::Relaxed)
    }

    /// The connection has proven itself otherwise (an authorized quota admin request).
    pub(super) fn prove(&self) {
        self.proven.store(true, Ordering::Relaxed);
    }

    /// Stops reading requests for `ms`, as Kafka mutes a throttled client's channel.
    pub(super) fn mute(&self, ms: u64) {
        if ms > 0 {
            let until = self.clock.now_ms().saturating_add(ms);
            self.muted_until.fetch_max(until, Ordering::AcqRel);
        }
    }

    /// How long requests are still not to be read (`None`: not muted).
    pub(super) fn muted_for(&self) -> Option<Duration> {
        let until = self.muted_until.load(Ordering::Acquire);
        let now = self.clock.now_ms();
        (now < until).then(|| Duration::from_millis(until - now))
    }

    /// Runs `f` on the meter of `who`: the connection's own, or, for a request made before the
    /// connection's (user, client-id) changed (its answer comes after), one opened for it alone,
    /// so that the connection keeps its new identity.
    fn metered<R>(&self, who: &Who, f: impl FnOnce(&mut ClientMeter) -> R) -> R {
        let mut state = self.state.lock();
        if state.who == *who {
            return f(&mut state.meter);
        }
        drop(state);
        f(&mut self.quotas.meter.client(&who.user, &who.client_id))
    }

    /// The (user, client-id) of a request with `client_id`, in the connection's `state`.
    fn who(&self, state: &mut State, client_id: &str) -> Who {
        if *state.who.client_id != *client_id {
            let who = Who {
                user: Arc::clone(&state.who.user),
                client_id: Arc::from(client_id),
            };
            state.meter = self.quotas.meter.client(&who.user, &who.client_id);
            state.who = who;
        }
        state.who.clone()
    }

    /// Counts a throttle in the metrics, by kind.
    fn throttled(&self, kind: &'static str, t: &Throttle) {
        if t.is_throttled() {
            self.stats.throttled(kind, t.ms);
        }
    }

    /// What to do with one request that is not a quota admin request (those are the admin
    /// handler's): forward it (and how its answer is metered), answer it here, or (`Err`) close
    /// the connection. `frame` (with its size prefix) may be changed in place.
    #[cfg(test)]
    pub(super) fn request(
        &self,
        head: &RequestHead,
        frame: &mut Frame,
        started: Instant,
    ) -> Result<Pending, String> {
        let size = frame.len() - 4;
        self.request_of(head, frame, size, started)
    }

    /// [`Decisions::request`] for a request of `size` bytes (after its size prefix) of which
    /// `frame` may hold only the head: a Produce passed on to the broker as it comes, which is
    /// metered by its size alone.
    pub(super) fn request_of(
        &self,
        head: &RequestHead,
        frame: &mut Frame,
        size: usize,
        started: Instant,
    ) -> Result<Pending, String> {
        let body = &frame[4..];
        // One acquisition of the connection's state for all three: the SASL step, the (user,
        // client-id), and for a Produce whether its answer may be throttled.
        let answered_produce = head.api_key == ApiKey::Produce as i16 && head.expects_response;
        let (note, who, one_at_a_time) = {
            let mut state = self.state.lock();
            let note = state
                .identity
                .on_request(head.api_key, head.version, body)
                .map_err(|e| e.to_string())?;
            let who = self.who(&mut state, &head.client_id(body));
            // Pipelined while the producer buckets have room for it and for the Produce bytes
            // already forwarded and not yet answered (recorded only then): none of their answers
            // can be throttled. Once one can, Kafka's order: one request at a time.
            let one_at_a_time = answered_produce
                && state.meter.produce_room().is_some_and(|room| {
                    room < self.produce_in_flight.load(Ordering::Relaxed) + size as u64
                });
            (note, who, one_at_a_time)
        };
        if answered_produce {
            self.produce_in_flight
                .fetch_add(size as u64, Ordering::Relaxed);
        }
        let local = |bytes: Bytes, throttle_ms: u64| {
            self.stats.answered_locally();
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
            // ApiVersions never offered it: a client that sends it anyway is closed, as Kafka
            // closes a connection for a version it does not serve.
            return Err(format!(
                "api key {} v{} is above the highest version the proxy rewrites",
                head.api_key, head.version
            ));
        }
        let mut enforce = Enforce::Time;
        match ApiKey::try_from(head.api_key) {
            Ok(ApiKey::Produce) => {
                let bytes = size as u64;
                if head.expects_response {
                    enforce = Enforce::Produce {
                        bytes,
                        one_at_a_time,
                    };
                } else {
                    // acks=0 gets no answer to record it at: recorded now, the connection muted.
                    let t = self.metered(&who, |m| m.produce(bytes));
                    self.throttled("produce", &t);
                    self.mute(t.ms);
                }
            }
            Ok(ApiKey::Fetch) => {
                if let Some(fetch) = head
                    .body_at
                    .and_then(|at| FetchRequest::parse(body, head.version, at))
                {
                    if let Some(cap) = self.metered(&who, |m| m.max_fetch_bytes()) {
                        // Offsets are the body's; the frame has its size prefix before it.
                        fetch.cap(&mut frame[4..], cap);
                    }
                    enforce = Enforce::Fetch(fetch);
                }
            }
            Ok(ApiKey::CreateTopics | ApiKey::CreatePartitions | ApiKey::DeleteTopics) => {
                let request = Bytes::copy_from_slice(body);
                if let Some(m) = MutationRequest::decode(head.api_key, head.version, &request) {
                    match self.mutations(&who, m) {
                        Mutated::Forward(ms) => enforce = Enforce::Mutations(ms, None),
                        Mutated::Partly(forward, refused, ms) => {
                            // The topics refused are not forwarded; the answer takes them back.
                            *frame = Frame::from(forward.to_vec());
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
            nanos: started.elapsed().as_nanos() as u64,
            read_on: ReadOn::Now,
        }))
    }

    /// Meters a mutation request as Kafka's controller does: a permissive (old) version is
    /// recorded whole and throttled by the debt it leaves; a strict one topic by topic, each
    /// accepted while the bucket is not in debt and refused (THROTTLING_QUOTA_EXCEEDED) once it
    /// is.
    fn mutations(&self, who: &Who, m: MutationRequest) -> Mutated {
        let counts = m.counts(&self.quotas.topics);
        if !m.strict() {
            let total = counts.iter().fold(0u32, |a, n| a.saturating_add(*n));
            let d = self.metered(who, |meter| meter.mutations_as(total, false));
            self.throttled("mutation", &d.throttle);
            return Mutated::Forward(d.throttle.ms);
        }
        let mut refused = Vec::new();
        let mut throttle = 0;
        self.metered(who, |meter| {
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
        self.stats.throttled("mutation", throttle);
        match m.without(&refused, throttle) {
            Split::Partly(forward, refused) => Mutated::Partly(forward, refused, throttle),
            Split::All(answer) => Mutated::Refused(answer, throttle),
        }
    }

    /// The broker's answer `wire` (its size prefix included) to `forwarded`, as the client is to
    /// have it: the SASL step's outcome taken, the brokers it names rewritten to the proxy's
    /// listeners (through `advertise`), metered, and throttled. The answer held whole: the same
    /// decisions as [`Decisions::plan`] and [`Decisions::finish`] on its head and then its rest.
    pub(super) fn answer(
        &self,
        forwarded: Forwarded,
        wire: Bytes,
        started: Instant,
        advertise: &mut dyn Advertise,
    ) -> Result<Answer, BadAnswer> {
        let head = forwarded.head;
        match self.plan(forwarded, &wire[4..], wire.len() - 4, started)? {
            Plan::Pass { endpoints: true } => endpoints(head, wire, advertise).map(Answer::as_is),
            Plan::Pass { endpoints: false } => Ok(Answer::as_is(wire)),
            Plan::Replace(answer) => Ok(answer),
            Plan::Whole(rest) => self.finish(rest, wire, started, advertise),
        }
    }

    /// What to do with the broker's answer to `forwarded`, of `size` bytes (after its size
    /// prefix), from its first bytes `head` (at least its correlation id): pass it on as it
    /// comes, replace it, or read it whole first. Decided before the body is read, so that an
    /// answer the proxy does not change is never held: its size is all the meter needs.
    pub(super) fn plan(
        &self,
        forwarded: Forwarded,
        head: &[u8],
        size: usize,
        started: Instant,
    ) -> Result<Plan, BadAnswer> {
        let request = forwarded.head;
        let correlation_id = i32::from_be_bytes([head[0], head[1], head[2], head[3]]);
        if correlation_id != request.correlation_id {
            return Err(BadAnswer::CorrelationId {
                got: correlation_id,
                expected: request.correlation_id,
            });
        }
        let is_fetch = request.api_key == ApiKey::Fetch as i16;
        // A Fetch answer's endpoints are at its end, past the records: the walk of a passed
        // answer takes them there. Every other rewrite needs the whole answer.
        let endpoints = is_fetch && rewrite::needs_rewrite(request.api_key, request.version);
        if forwarded.sasl.is_some()
            || (rewrite::needs_rewrite(request.api_key, request.version) && !endpoints)
            || matches!(forwarded.enforce, Enforce::Mutations(_, Some(_)))
        {
            return Ok(Plan::Whole(Rest::Decide(forwarded)));
        }
        let throttle_ms = self.charge(&forwarded, size, started);
        if throttle_ms == 0 {
            return Ok(Plan::Pass { endpoints });
        }
        let hold = !enforce::client_throttles(request.api_key, request.version);
        if let Enforce::Fetch(fetch) = &forwarded.enforce {
            let broker = enforce::leading_throttle(head, ApiKey::Fetch as i16, request.version)
                .map_or(0, |ms| u64::try_from(ms).unwrap_or(0));
            let empty = enforce::throttled_fetch(
                request.version,
                request.correlation_id,
                throttle_ms.max(broker),
                fetch,
            );
            return Ok(Plan::Replace(Answer {
                bytes: empty,
                throttle_ms,
                hold,
            }));
        }
        Ok(Plan::Whole(Rest::Raise {
            head: request,
            throttle_ms,
            hold,
        }))
    }

    /// The answer read whole (`wire`, its size prefix included) for a [`Plan::Whole`].
    pub(super) fn finish(
        &self,
        rest: Rest,
        wire: Bytes,
        started: Instant,
        advertise: &mut dyn Advertise,
    ) -> Result<Answer, BadAnswer> {
        match rest {
            Rest::Raise {
                head,
                throttle_ms,
                hold,
            } => Ok(Answer {
                bytes: raised(head, wire, throttle_ms),
                throttle_ms,
                hold,
            }),
            Rest::Decide(forwarded) => self.decide_whole(forwarded, wire, started, advertise),
        }
    }

    /// An answer that needs its bytes before anything is decided: a SASL step's, one that names
    /// brokers, or one that takes back the topics a strict mutation quota refused.
    fn decide_whole(
        &self,
        forwarded: Forwarded,
        wire: Bytes,
        started: Instant,
        advertise: &mut dyn Advertise,
    ) -> Result<Answer, BadAnswer> {
        let head = forwarded.head;
        let mut forwarded = forwarded;
        if let Some(note) = forwarded.sasl.take() {
            let mut state = self.state.lock();
            if state.identity.on_response(note, &wire[4..]) {
                let user: Arc<str> = Arc::from(state.identity.principal().name.as_str());
                debug!(%user, "authenticated by the broker");
                state.who.user = Arc::clone(&user);
                state.meter = self.quotas.meter.client(&user, &state.who.client_id);
            }
        }
        let out = if rewrite::needs_rewrite(head.api_key, head.version) {
            let frame = wire.slice(4..);
            match rewrite::rewrite(head.api_key, head.version, &frame, advertise) {
                Ok(Some(rewritten)) => rewritten,
                Ok(None) => wire,
                Err(e) => return Err(BadAnswer::Rewrite(head, e)),
            }
        } else {
            wire
        };
        let (bytes, throttle_ms) = self.enforce_answer(forwarded, out, started);
        Ok(Answer {
            bytes,
            throttle_ms,
            hold: throttle_ms > 0 && !enforce::client_throttles(head.api_key, head.version),
        })
    }

    /// Meters the answer of `size` bytes (after its size prefix) to `forwarded`, as Kafka's broker
    /// does when the answer is ready: the proxy's time on the request, and its Produce bytes, its
    /// Fetch answer's bytes (given back if the answer is throttled: Kafka answers it empty and
    /// does not charge the client for what it never got) or its mutations' throttle. The
    /// proxy's throttle.
    fn charge(&self, forwarded: &Forwarded, size: usize, started: Instant) -> u64 {
        let nanos = forwarded.nanos + started.elapsed().as_nanos() as u64;
        self.metered(&forwarded.who, |meter| {
            let time = meter.request_time(nanos);
            self.throttled("request", &time);
            match &forwarded.enforce {
                Enforce::Time => time.ms,
                Enforce::Produce { bytes, .. } => {
                    self.produce_in_flight.fetch_sub(*bytes, Ordering::Relaxed);
                    let t = meter.produce(*bytes);
                    self.throttled("produce", &t);
                    t.ms.max(time.ms)
                }
                Enforce::Fetch(_) => {
                    let t = meter.fetch(size as u64);
                    self.throttled("fetch", &t);
                    let ms = t.ms.max(time.ms);
                    if ms > 0 {
                        meter.refund_fetch(size as u64);
                    }
                    ms
                }
                Enforce::Mutations(ms, _) => (*ms).max(time.ms),
            }
        })
    }

    /// Meters the answer `out` (with its size prefix) to a forwarded request ([`Decisions::charge`])
    /// and makes the answer to send: a throttled Fetch is answered empty (KIP-219); a mutation
    /// answer takes back the topics the proxy refused; others carry the longer of the proxy's
    /// and the broker's throttle. With the proxy's throttle.
    fn enforce_answer(&self, forwarded: Forwarded, out: Bytes, started: Instant) -> (Bytes, u64) {
        let head = forwarded.head;
        let throttle = self.charge(&forwarded, out.len() - 4, started);
        let out = match forwarded.enforce {
            Enforce::Fetch(request) => {
                if throttle == 0 {
                    return (out, 0);
                }
                let broker = fetch_throttle(&out, head.version);
                let empty = enforce::throttled_fetch(
                    head.version,
                    head.correlation_id,
                    throttle.max(broker),
                    &request,
                );
                return (empty, throttle);
            }
            Enforce::Mutations(_, Some(refused)) => enforce::merge_refused(
                head.api_key,
                head.version,
                &out.slice(4..),
                refused,
                throttle,
            )
            .unwrap_or(out),
            _ => out,
        };
        if throttle == 0 {
            return (out, 0);
        }
        (raised(head, out, throttle), throttle)
    }
}

/// The answer `wire` (with its size prefix) to the request `head`, the brokers it names rewritten
/// to the proxy's listeners (through `advertise`).
fn endpoints(
    head: RequestHead,
    wire: Bytes,
    advertise: &mut dyn Advertise,
) -> Result<Bytes, BadAnswer> {
    match rewrite::rewrite(head.api_key, head.version, &wire.slice(4..), advertise) {
        Ok(Some(rewritten)) => Ok(rewritten),
        Ok(None) => Ok(wire),
        Err(e) => Err(BadAnswer::Rewrite(head, e)),
    }
}

/// The answer `out` (with its size prefix) to the request `head` carrying a throttle of at least
/// `throttle_ms`.
fn raised(head: RequestHead, out: Bytes, throttle_ms: u64) -> Bytes {
    match enforce::raise_throttle(head.api_key, head.version, &out.slice(4..), throttle_ms) {
        Ok(Some(raised)) => raised.freeze(),
        Ok(None) | Err(()) => out,
    }
}

/// The broker's own throttle in a Fetch answer (0 if it cannot be read).
fn fetch_throttle(out: &Bytes, version: i16) -> u64 {
    enforce::leading_throttle(&out[4..], ApiKey::Fetch as i16, version)
        .map_or(0, |ms| u64::try_from(ms).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::create_topics_request::CreatableTopic;
    use kafka_protocol::messages::{
        CreateTopicsRequest, CreateTopicsResponse, FetchRequest as KFetchRequest, FetchResponse,
        MetadataResponse, ProduceResponse, SaslAuthenticateRequest, SaslAuthenticateResponse,
        SaslHandshakeRequest, SaslHandshakeResponse, TopicName,
    };
    use kquota::meter::ManualClock;
    use kquota::{Alteration, Entity, EntityName};

    use super::super::testing::{
        decoded, fetch_answer, manual_quotas, produce, request, response, s, NoBrokers,
    };
    use super::*;
    use crate::messages::header;

    /// What a test connection decides with: a meter on a manual clock, windows of 2 × 500 ms.
    struct Fixture {
        clock: Arc<ManualClock>,
        quotas: Quotas,
        stats: Stats,
    }

    impl Fixture {
        fn new(quotas: &[Alteration]) -> Fixture {
            let (quotas, clock) = manual_quotas(quotas);
            Fixture {
                quotas,
                clock,
                stats: Stats::default(),
            }
        }

        fn decisions(&self) -> Decisions<'_> {
            Decisions::new(&self.quotas, &self.stats, Principal::anonymous())
        }
    }

    fn user(name: &str) -> Entity {
        Entity::User(EntityName::named(name).unwrap())
    }

    fn forwarded(d: &Decisions<'_>, frame: &mut Frame) -> Forwarded {
        let head = header::parse(&frame[4..]).unwrap();
        match d.request(&head, frame, Instant::now()).unwrap() {
            Pending::Upstream(f) => f,
            Pending::Local { .. } => panic!("answered by the proxy"),
        }
    }

    /// Kafka's throttle for `bytes` recorded at once in a fresh 2 × 500 ms window at `limit`/s.
    fn first_throttle(bytes: usize, limit: f64) -> u64 {
        let elapsed = 500.0;
        let rate = bytes as f64 / (elapsed / 1000.0);
        ((rate - limit) / limit * elapsed).round() as u64
    }

    #[test]
    fn a_produce_under_a_producer_quota_is_metered_at_its_answer_and_mutes_the_connection() {
        let f =
            Fixture::new(&[Alteration::new(&Entity::User(EntityName::Default))
                .set("producer_byte_rate", 1_000.0)]);
        let d = f.decisions();
        let mut frame = request(ApiKey::Produce, 9, 3, &produce(1_200, 1));
        let bytes = frame.len() - 4;
        let sent = forwarded(&d, &mut frame);
        assert!(
            sent.one_at_a_time(),
            "nothing is read behind it until its answer"
        );
        assert_eq!(d.muted_for(), None, "not recorded when read");
        let answer = d
            .answer(
                sent,
                response(ApiKey::Produce, 9, 3, &ProduceResponse::default()),
                Instant::now(),
                &mut NoBrokers,
            )
            .unwrap();
        let want = first_throttle(bytes, 1_000.0);
        assert_eq!(answer.throttle_ms, want);
        assert!(!answer.hold, "v9 clients throttle themselves");
        let r: ProduceResponse = decoded(ApiKey::Produce, 9, answer.bytes);
        assert_eq!(
            r.throttle_time_ms as u64, want,
            "the throttle is in the answer"
        );
        d.mute(answer.throttle_ms);
        assert_eq!(d.muted_for(), Some(Duration::from_millis(want)));
        f.clock.advance(want);
        assert_eq!(d.muted_for(), None, "muted exactly for the throttle");
    }

    #[test]
    fn acks_0_is_metered_when_read() {
        let f =
            Fixture::new(&[Alteration::new(&Entity::User(EntityName::Default))
                .set("producer_byte_rate", 1_000.0)]);
        let d = f.decisions();
        let mut frame = request(ApiKey::Produce, 9, 3, &produce(1_200, 0));
        let bytes = frame.len() - 4;
        let sent = forwarded(&d, &mut frame);
        assert!(!sent.head.expects_response);
        assert!(!sent.one_at_a_time(), "no answer to wait for");
        assert_eq!(
            d.muted_for(),
            Some(Duration::from_millis(first_throttle(bytes, 1_000.0)))
        );
    }

    #[test]
    fn produces_are_pipelined_while_the_bucket_has_room_for_every_one_unanswered() {
        // 100 kB/s over windows of 2 x 500 ms: a fresh bucket has room for 50,000 bytes.
        let f = Fixture::new(&[Alteration::new(&Entity::User(EntityName::Default))
            .set("producer_byte_rate", 100_000.0)]);
        let d = f.decisions();
        let mut sent = Vec::new();
        for id in 0..3 {
            let mut frame = request(ApiKey::Produce, 9, id, &produce(20_000, 1));
            sent.push(forwarded(&d, &mut frame));
        }
        let order: Vec<bool> = sent.iter().map(Forwarded::one_at_a_time).collect();
        assert_eq!(
            order,
            [false, false, true],
            "two fit the room, unanswered; the third may be throttled"
        );
        // Answered, the first is recorded: it holds its room as a record now, not as in flight.
        let first = sent.remove(0);
        let id = first.head.correlation_id;
        let answer = d
            .answer(
                first,
                response(ApiKey::Produce, 9, id, &ProduceResponse::default()),
                Instant::now(),
                &mut NoBrokers,
            )
            .unwrap();
        assert_eq!(answer.throttle_ms, 0, "within the room: never throttled");
        let mut frame = request(ApiKey::Produce, 9, 9, &produce(5_000, 1));
        assert!(
            forwarded(&d, &mut frame).one_at_a_time(),
            "20,000 recorded, 40,000 still in flight: no room for 5,000 more"
        );
        // Once the others are answered and the window has moved on, there is room again.
        for s in sent {
            let id = s.head.correlation_id;
            d.answer(
                s,
                response(ApiKey::Produce, 9, id, &ProduceResponse::default()),
                Instant::now(),
                &mut NoBrokers,
            )
            .unwrap();
        }
        f.clock.advance(5_000);
        let mut frame = request(ApiKey::Produce, 9, 10, &produce(5_000, 1));
        assert!(!forwarded(&d, &mut frame).one_at_a_time());
    }

    #[test]
    fn without_a_producer_quota_produces_are_pipelined() {
        let f = Fixture::new(&[]);
        let d = f.decisions();
        let mut frame = request(ApiKey::Produce, 9, 3, &produce(1_200, 1));
        assert!(!forwarded(&d, &mut frame).one_at_a_time());
    }

    /// SASL PLAIN as `user`: the handshake's and the step's decisions, each answered by the
    /// broker with `code`.
    fn plain(d: &Decisions<'_>, user: &str, code: i16) {
        let mut shake = request(
            ApiKey::SaslHandshake,
            1,
            1,
            &SaslHandshakeRequest::default().with_mechanism(s("PLAIN")),
        );
        let sent = forwarded(d, &mut shake);
        assert!(sent.one_at_a_time(), "nothing is read behind a SASL step");
        let ok = response(
            ApiKey::SaslHandshake,
            1,
            1,
            &SaslHandshakeResponse::default(),
        );
        d.answer(sent, ok, Instant::now(), &mut NoBrokers).unwrap();
        let token = format!("\0{user}\0secret");
        let mut step = request(
            ApiKey::SaslAuthenticate,
            2,
            2,
            &SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from(token)),
        );
        let sent = forwarded(d, &mut step);
        assert!(sent.one_at_a_time());
        let answer = response(
            ApiKey::SaslAuthenticate,
            2,
            2,
            &SaslAuthenticateResponse::default().with_error_code(code),
        );
        d.answer(sent, answer, Instant::now(), &mut NoBrokers)
            .unwrap();
    }

    #[test]
    fn the_user_is_the_one_the_broker_authenticated_and_proves_the_connection() {
        let f = Fixture::new(&[Alteration::new(&user("alice")).set("producer_byte_rate", 1_000.0)]);
        let d = f.decisions();
        assert!(
            !d.answered(ApiKey::ApiVersions as i16, true),
            "ApiVersions proves nothing"
        );
        plain(&d, "alice", 58);
        assert_eq!(
            d.principal(),
            Principal::anonymous(),
            "refused: the principal stays"
        );
        assert!(!d.answered(ApiKey::SaslAuthenticate as i16, true));
        plain(&d, "alice", 0);
        assert_eq!(d.principal(), Principal::user("alice"));
        assert!(d.answered(ApiKey::SaslAuthenticate as i16, true));
        // alice's quota applies to what follows.
        let mut frame = request(ApiKey::Produce, 9, 3, &produce(1_200, 1));
        assert!(forwarded(&d, &mut frame).one_at_a_time());
    }

    #[test]
    fn a_request_that_needs_no_authentication_answered_by_the_broker_proves_the_connection() {
        let f = Fixture::new(&[]);
        let d = f.decisions();
        assert!(
            !d.answered(ApiKey::Metadata as i16, false),
            "the proxy's own answer proves nothing"
        );
        assert!(d.answered(ApiKey::Metadata as i16, true));
    }

    #[test]
    fn a_throttled_fetch_is_answered_empty_and_not_charged() {
        let f =
            Fixture::new(&[Alteration::new(&Entity::User(EntityName::Default))
                .set("consumer_byte_rate", 1_000.0)]);
        let d = f.decisions();
        let fetch = KFetchRequest::default()
            .with_max_bytes(52_428_800)
            .with_max_wait_ms(10);
        let mut frame = request(ApiKey::Fetch, 12, 5, &fetch);
        let sent = forwarded(&d, &mut frame);
        let records = fetch_answer(12, 5, 4_000);
        let answer = d
            .answer(sent, records, Instant::now(), &mut NoBrokers)
            .unwrap();
        assert!(answer.throttle_ms > 0);
        let r: FetchResponse = decoded(ApiKey::Fetch, 12, answer.bytes);
        assert!(
            r.responses.is_empty(),
            "KIP-219: a throttled fetch is answered empty"
        );
        assert_eq!(r.throttle_time_ms as u64, answer.throttle_ms);
        // Not charged: the next fetch, at once, gets its records through.
        let mut frame = request(ApiKey::Fetch, 12, 6, &fetch);
        let sent = forwarded(&d, &mut frame);
        let small = fetch_answer(12, 6, 10);
        let answer = d
            .answer(sent, small, Instant::now(), &mut NoBrokers)
            .unwrap();
        let r: FetchResponse = decoded(ApiKey::Fetch, 12, answer.bytes);
        assert_eq!(
            r.responses.len(),
            1,
            "the records the client never got were refunded"
        );
    }

    #[test]
    fn a_fetch_answer_is_planned_from_its_head_and_its_size() {
        let f = Fixture::new(&[Alteration::new(&Entity::User(EntityName::Default))
            .set("consumer_byte_rate", 100_000.0)]);
        let d = f.decisions();
        let fetch = KFetchRequest::default().with_max_bytes(52_428_800);
        // Within the room: passed on as it comes, charged for its size before its body is read.
        let mut frame = request(ApiKey::Fetch, 12, 5, &fetch);
        let sent = forwarded(&d, &mut frame);
        let wire = fetch_answer(12, 5, 30_000);
        let size = wire.len() - 4;
        let head = &wire[4..68];
        assert!(matches!(
            d.plan(sent, head, size, Instant::now()),
            Ok(Plan::Pass { endpoints: false })
        ));
        let bucket = &f.quotas.meter.snapshot()[0];
        assert_eq!(bucket.recorded_total, size as f64, "metered by its size");
        // Over the quota: replaced by an empty answer with the throttle, the bytes refunded.
        let mut frame = request(ApiKey::Fetch, 12, 6, &fetch);
        let sent = forwarded(&d, &mut frame);
        let wire = fetch_answer(12, 6, 200_000);
        let Ok(Plan::Replace(answer)) = d.plan(sent, &wire[4..68], wire.len() - 4, Instant::now())
        else {
            panic!("a throttled Fetch answer is replaced");
        };
        assert!(answer.throttle_ms > 0);
        let r: FetchResponse = decoded(ApiKey::Fetch, 12, answer.bytes);
        assert!(r.responses.is_empty());
        assert_eq!(r.throttle_time_ms as u64, answer.throttle_ms);
        let bucket = &f.quotas.meter.snapshot()[0];
        assert_eq!(
            bucket.recorded_total, size as f64,
            "the replaced answer is refunded"
        );
        // A Fetch whose answer names leaders (v16 and later) is still passed, its endpoints taken
        // by the walk at its end.
        let mut frame = request(ApiKey::Fetch, 16, 7, &fetch);
        let sent = forwarded(&d, &mut frame);
        f.clock.advance(10_000);
        let wire = fetch_answer(16, 7, 1_000);
        assert!(matches!(
            d.plan(sent, &wire[4..68], wire.len() - 4, Instant::now()),
            Ok(Plan::Pass { endpoints: true })
        ));
        // The wrong correlation id is refused from the head alone.
        let mut frame = request(ApiKey::Fetch, 12, 8, &fetch);
        let sent = forwarded(&d, &mut frame);
        let wire = fetch_answer(12, 99, 1_000);
        assert!(matches!(
            d.plan(sent, &wire[4..68], wire.len() - 4, Instant::now()),
            Err(BadAnswer::CorrelationId {
                got: 99,
                expected: 8
            })
        ));
    }

    #[test]
    fn a_throttled_produce_answer_is_read_whole_for_its_throttle_and_a_sasl_one_always() {
        let f =
            Fixture::new(&[Alteration::new(&Entity::User(EntityName::Default))
                .set("producer_byte_rate", 1_000.0)]);
        let d = f.decisions();
        let mut frame = request(ApiKey::Produce, 9, 3, &produce(1_200, 1));
        let sent = forwarded(&d, &mut frame);
        let wire = response(ApiKey::Produce, 9, 3, &ProduceResponse::default());
        let Ok(Plan::Whole(rest)) = d.plan(sent, &wire[4..], wire.len() - 4, Instant::now()) else {
            panic!("a throttled Produce answer is read whole");
        };
        let answer = d
            .finish(rest, wire, Instant::now(), &mut NoBrokers)
            .unwrap();
        let r: ProduceResponse = decoded(ApiKey::Produce, 9, answer.bytes);
        assert_eq!(r.throttle_time_ms as u64, answer.throttle_ms);
        assert!(answer.throttle_ms > 0);
        let mut shake = request(
            ApiKey::SaslHandshake,
            1,
            4,
            &SaslHandshakeRequest::default().with_mechanism(s("PLAIN")),
        );
        let sent = forwarded(&d, &mut shake);
        let wire = response(
            ApiKey::SaslHandshake,
            1,
            4,
            &SaslHandshakeResponse::default(),
        );
        assert!(matches!(
            d.plan(sent, &wire[4..], wire.len() - 4, Instant::now()),
            Ok(Plan::Whole(Rest::Decide(_)))
        ));
    }

    #[test]
    fn a_strict_mutation_from_a_client_in_debt_is_refused_by_the_proxy() {
        let f = Fixture::new(&[Alteration::new(&Entity::User(EntityName::Default))
            .set("controller_mutation_rate", 1.0)]);
        let d = f.decisions();
        let create = |name: &str| {
            CreateTopicsRequest::default().with_topics(vec![CreatableTopic::default()
                .with_name(TopicName(s(name)))
                .with_num_partitions(10)])
        };
        // The first is accepted (the bucket is not in debt), and leaves it in debt.
        let mut frame = request(ApiKey::CreateTopics, 7, 1, &create("a"));
        let sent = forwarded(&d, &mut frame);
        let ok = response(ApiKey::CreateTopics, 7, 1, &CreateTopicsResponse::default());
        d.answer(sent, ok, Instant::now(), &mut NoBrokers).unwrap();
        // The second is refused here, never forwarded.
        let mut frame = request(ApiKey::CreateTopics, 7, 2, &create("b"));
        let head = header::parse(&frame[4..]).unwrap();
        let Pending::Local {
            bytes, throttle_ms, ..
        } = d.request(&head, &mut frame, Instant::now()).unwrap()
        else {
            panic!("forwarded");
        };
        assert!(throttle_ms > 0);
        let r: CreateTopicsResponse = decoded(ApiKey::CreateTopics, 7, bytes);
        assert_eq!(r.topics[0].error_code, enforce::THROTTLING_QUOTA_EXCEEDED);
    }

    #[test]
    fn an_answer_to_another_request_is_refused() {
        let f = Fixture::new(&[]);
        let d = f.decisions();
        let mut frame = request(
            ApiKey::Metadata,
            12,
            9,
            &kafka_protocol::messages::MetadataRequest::default(),
        );
        let sent = forwarded(&d, &mut frame);
        let wrong = response(ApiKey::Metadata, 12, 10, &MetadataResponse::default());
        assert!(matches!(
            d.answer(sent, wrong, Instant::now(), &mut NoBrokers),
            Err(BadAnswer::CorrelationId {
                got: 10,
                expected: 9
            })
        ));
    }
}
