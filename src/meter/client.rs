//! The meter of one connection: its resolved quotas and the buckets they are metered in.

use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::bucket::{Bucket, Measure};
use super::decision::{BucketOwner, MutationDecision, Throttle};
use super::rate;
use super::shared::{Inner, Meter};
use crate::key::QuotaKey;
use crate::resolve::Resolved;

/// The keys each kind of request is metered against.
const PRODUCE_KEYS: [QuotaKey; 3] = [
    QuotaKey::PRODUCER_BPS,
    QuotaKey::PRODUCER_BROKER_BPS,
    QuotaKey::PRODUCER_SHARES,
];
const FETCH_KEYS: [QuotaKey; 3] = [
    QuotaKey::CONSUMER_BPS,
    QuotaKey::CONSUMER_BROKER_BPS,
    QuotaKey::CONSUMER_SHARES,
];

// Opening a connection's meter lives here, with the type it opens, so that the shared meter does not
// depend on the connection's.
impl Meter {
    /// Opens the meter of one connection's (user, client-id). Cheap; keep it for the connection's life.
    pub fn client(&self, user: &str, client_id: &str) -> ClientMeter {
        ClientMeter::open(self.clone(), user, client_id)
    }
}

/// The meter of one connection's (user, client-id). Not shared between threads: each connection owns
/// one, and the buckets behind it are shared.
///
/// What it records into a bucket of all of its user's client-ids is also attributed to its
/// client-id ([`BucketSnapshot::clients`](super::BucketSnapshot::clients)): summed here, and
/// handed to the bucket at most once per sample window (when the bucket's lock is free) and when
/// the meter is dropped, so that attribution costs a request one addition.
pub struct ClientMeter {
    meter: Meter,
    user: Arc<str>,
    client_id: Arc<str>,
    generation: u64,
    sweeps: u64,
    resolved: Resolved,
    buckets: [Option<Arc<Bucket>>; QuotaKey::CLIENT_COUNT],
    /// Only for a meter with a bucket shared by all of its user's client-ids: boxed, so that the
    /// others, most meters, stay as small as before (a broker visits thousands of them in turn).
    attribution: Option<Box<Attribution>>,
}

/// What a meter recorded into its user's shared buckets and has not attributed yet.
#[derive(Debug)]
struct Attribution {
    /// Whether each key's bucket is shared by all of the user's client-ids.
    shared: [bool; QuotaKey::CLIENT_COUNT],
    /// What was recorded into each shared bucket since it was last attributed.
    pending: [f64; QuotaKey::CLIENT_COUNT],
    /// When the pending values are attributed next (ms). The first request attributes at once,
    /// so that a new client-id shows at the next scrape.
    at: u64,
}

impl Attribution {
    /// Hands the pending values to their buckets, attributed to `client_id`: waiting for each
    /// bucket's lock when `wait`, else leaving a busy bucket's for the next request.
    #[cold]
    fn attribute(
        &mut self,
        inner: &Inner,
        buckets: &[Option<Arc<Bucket>>],
        client_id: &Arc<str>,
        now: u64,
        wait: bool,
    ) {
        let mut done = true;
        for (pending, bucket) in self.pending.iter_mut().zip(buckets) {
            if *pending == 0.0 {
                continue;
            }
            match bucket {
                Some(b) if !inner.attribute(b, client_id, *pending, now, wait) => done = false,
                _ => *pending = 0.0,
            }
        }
        if done {
            self.at = now.saturating_add(inner.window.window_ms);
        }
    }
}

impl fmt::Debug for ClientMeter {
    /// The names and the quotas last resolved; the buckets' internals are left out.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientMeter")
            .field("user", &self.user)
            .field("client_id", &self.client_id)
            .field("quotas", &self.resolved)
            .finish_non_exhaustive()
    }
}

impl ClientMeter {
    /// The meter of `(user, client_id)`, resolved and with its buckets.
    fn open(meter: Meter, user: &str, client_id: &str) -> ClientMeter {
        let resolved = meter.inner.engine.resolve(user, client_id);
        let mut client = ClientMeter {
            meter,
            user: Arc::from(user),
            client_id: Arc::from(client_id),
            generation: u64::MAX,
            sweeps: 0,
            resolved,
            buckets: Default::default(),
            attribution: None,
        };
        client.refresh();
        client
    }

    /// Re-resolves if the configuration changed since the last request, or a bucket expired.
    #[inline]
    fn refresh(&mut self) {
        let inner = &self.meter.inner;
        let generation = inner.engine.generation();
        let sweeps = inner.sweeps.load(Ordering::Acquire);
        if generation == self.generation && sweeps == self.sweeps {
            return;
        }
        let expired = self
            .buckets
            .iter()
            .flatten()
            .any(|b| b.expired.load(Ordering::Acquire));
        self.sweeps = sweeps;
        if generation == self.generation && !expired {
            return;
        }
        // What was recorded into the buckets about to be replaced goes to them first.
        self.attribute_all();
        let inner = &self.meter.inner;
        self.generation = generation;
        self.resolved = inner.engine.resolve(&self.user, &self.client_id);
        let mut shared = [false; QuotaKey::CLIENT_COUNT];
        for key in QuotaKey::client_keys() {
            let i = key.index();
            self.buckets[i] = self.resolved.get(key).map(|q| {
                let owner = BucketOwner::of(q.bucket_scope(), &self.user, &self.client_id);
                inner.bucket(key, owner, Some(q.level))
            });
            shared[i] = self.buckets[i]
                .as_ref()
                .is_some_and(|b| matches!(b.owner, BucketOwner::User(_)));
        }
        self.attribution = shared.contains(&true).then(|| {
            let at = self.attribution.as_ref().map_or(0, |a| a.at);
            Box::new(Attribution {
                shared,
                pending: [0.0; QuotaKey::CLIENT_COUNT],
                at,
            })
        });
    }

    /// Attributes everything pending, waiting for the buckets' locks.
    fn attribute_all(&mut self) {
        if let Some(a) = &mut self.attribution {
            if a.pending.iter().any(|&p| p != 0.0) {
                let inner = &self.meter.inner;
                let now = inner.clock.now_ms();
                a.attribute(inner, &self.buckets, &self.client_id, now, true);
            }
        }
    }

    /// Counts `value` recorded into the bucket of `key` for attribution.
    #[inline]
    fn note(&mut self, key: QuotaKey, value: f64) {
        if let Some(a) = &mut self.attribution {
            if a.shared[key.index()] {
                a.pending[key.index()] += value;
            }
        }
    }

    /// Attributes what is pending if it is due at `now`.
    #[inline]
    fn attribute_if_due(&mut self, now: u64) {
        if let Some(a) = &mut self.attribution {
            if now >= a.at {
                a.attribute(
                    &self.meter.inner,
                    &self.buckets,
                    &self.client_id,
                    now,
                    false,
                );
            }
        }
    }

    /// The effective quotas of this connection (re-resolved if the configuration changed).
    pub fn quotas(&mut self) -> &Resolved {
        self.refresh();
        &self.resolved
    }

    fn record_bytes(&mut self, keys: &[QuotaKey], bytes: u64) -> Throttle {
        self.refresh();
        let inner = &self.meter.inner;
        // The longest throttle and its bucket's index; the cause is built only if there is one.
        let mut longest: Option<(u64, usize)> = None;
        let mut now = None;
        for &key in keys {
            let (Some(bucket), Some(q)) = (&self.buckets[key.index()], self.resolved.get(key))
            else {
                continue;
            };
            // One clock read per request, and none when no quota applies.
            let now = *now.get_or_insert_with(|| inner.clock.now_ms());
            let Some(limit) = inner.broker_limit(bucket, key, q.limit, now) else {
                // Unenforced shares still count as activity for the split.
                bucket.last_ms.store(now, Ordering::Relaxed);
                continue;
            };
            let ms = inner.record_rate(bucket, limit, bytes as f64, None, now);
            if let Some(a) = &mut self.attribution {
                if a.shared[key.index()] {
                    a.pending[key.index()] += bytes as f64;
                }
            }
            if ms > longest.map_or(0, |(longest, _)| longest) {
                longest = Some((ms, key.index()));
            }
        }
        // Before the throttle is built: with nothing to drop alive across the call, the hot path
        // needs no unwinding pad (measured: the request's cost rose by half with one).
        if let Some(now) = now {
            self.attribute_if_due(now);
        }
        self.throttle(longest)
    }

    /// The throttle of `ms` by the bucket at `index`, or none.
    #[inline]
    fn throttle(&self, longest: Option<(u64, usize)>) -> Throttle {
        longest
            .and_then(|(ms, i)| Some(self.buckets[i].as_ref()?.throttle(ms)))
            .unwrap_or_default()
    }

    /// Records a produce request of `bytes` and returns the throttle.
    pub fn produce(&mut self, bytes: u64) -> Throttle {
        self.record_bytes(&PRODUCE_KEYS, bytes)
    }

    /// How many produce bytes this connection's buckets can take now with no throttle (the least
    /// over the producer quotas that apply; `None` when none does): a host that records a
    /// Produce when its answer comes may forward this many bytes before the first answer
    /// without any of them being throttled, and so pipeline them.
    pub fn produce_room(&mut self) -> Option<u64> {
        self.refresh();
        let inner = &self.meter.inner;
        let now = inner.clock.now_ms();
        PRODUCE_KEYS
            .iter()
            .filter_map(|&key| {
                let bucket = self.buckets[key.index()].as_ref()?;
                let q = self.resolved.get(key)?;
                let limit = inner.broker_limit(bucket, key, q.limit, now)?;
                Some(inner.room(bucket, limit, now))
            })
            .map(|room| room as u64)
            .min()
    }

    /// Records a fetch response of `bytes` and returns the throttle.
    pub fn fetch(&mut self, bytes: u64) -> Throttle {
        self.record_bytes(&FETCH_KEYS, bytes)
    }

    /// Takes back a fetch response's `bytes` recorded with [`ClientMeter::fetch`], for a response
    /// the host replaces with an empty one because it throttles the client: Kafka answers a
    /// throttled fetch without its records (KIP-219) and unrecords their bytes, so that the client
    /// is not charged for what it never received.
    pub fn refund_fetch(&mut self, bytes: u64) {
        let inner = &self.meter.inner;
        let mut now = None;
        for key in FETCH_KEYS {
            let (Some(bucket), Some(_)) = (&self.buckets[key.index()], self.resolved.get(key))
            else {
                continue;
            };
            let now = *now.get_or_insert_with(|| inner.clock.now_ms());
            inner.unrecord(bucket, bytes as f64, now);
            if let Some(a) = &mut self.attribution {
                if a.shared[key.index()] {
                    a.pending[key.index()] -= bytes as f64;
                }
            }
        }
    }

    /// Records request-handler time and returns the throttle, capped at one sample window as Kafka caps
    /// request-time throttles.
    pub fn request_time(&mut self, nanos: u64) -> Throttle {
        self.refresh();
        let key = QuotaKey::REQUEST_PERCENTAGE;
        let (Some(bucket), Some(q)) = (&self.buckets[key.index()], self.resolved.get(key)) else {
            return Throttle::default();
        };
        let inner = &self.meter.inner;
        // Kafka records thread time as a percentage of one thread-second.
        let value = nanos as f64 * 100.0 / 1e9;
        let now = inner.clock.now_ms();
        let ms = inner.record_rate(bucket, q.limit, value, Some(inner.window.window_ms), now);
        self.note(key, value);
        self.attribute_if_due(now);
        self.throttle(Some((ms, key.index())))
    }

    /// Records `n` partition mutations against `controller_mutation_rate`, strict or not as the
    /// meter's settings say. Strict: a bucket in debt refuses the request (recording nothing) and
    /// throttles it; otherwise the request is recorded, without a throttle even if it leaves a
    /// debt. Permissive: always recorded, and throttled by the debt it leaves.
    #[must_use = "in strict mode a request from a bucket in debt is refused"]
    pub fn mutations(&mut self, n: u32) -> MutationDecision {
        let strict = self.meter.inner.config.strict_mutations();
        self.mutations_as(n, strict)
    }

    /// Records `n` partition mutations, strict or not for this request alone: Kafka is strict only
    /// from the versions of CreateTopics (6), CreatePartitions (3) and DeleteTopics (5) that can
    /// answer THROTTLING_QUOTA_EXCEEDED, and throttles older ones after the fact.
    #[must_use = "in strict mode a request from a bucket in debt is refused"]
    pub fn mutations_as(&mut self, n: u32, strict: bool) -> MutationDecision {
        self.refresh();
        let key = QuotaKey::CONTROLLER_MUTATION_RATE;
        let (Some(bucket), Some(q)) = (&self.buckets[key.index()], self.resolved.get(key)) else {
            return MutationDecision {
                accepted: true,
                throttle: Throttle::default(),
            };
        };
        let inner = &self.meter.inner;
        let now = inner.clock.now_ms();
        bucket.touch(now);
        let (accepted, ms) = {
            let mut state = bucket.state.lock();
            let Measure::Tokens(tb) = &mut state.measure else {
                return MutationDecision {
                    accepted: true,
                    throttle: Throttle::default(),
                };
            };
            let before = tb.tokens(inner.window, q.limit, now);
            let (accepted, tokens) = if strict && before < 0.0 {
                (false, before)
            } else {
                tb.record(inner.window, q.limit, f64::from(n), now);
                (true, tb.tokens(inner.window, q.limit, now))
            };
            // Kafka's strict quota throttles only what it refuses: an accepted request may take
            // the bucket into debt and is answered at once (`StrictControllerMutationQuota`); the
            // permissive one throttles by the debt it leaves.
            let ms = if strict && accepted {
                0
            } else {
                rate::token_throttle_ms(tokens, q.limit)
            };
            let recorded = if accepted { f64::from(n) } else { 0.0 };
            state.note(q.limit, recorded, ms);
            (accepted, ms)
        };
        MutationDecision {
            accepted,
            throttle: Throttle {
                ms,
                cause: (ms > 0).then(|| bucket.cause()),
            },
        }
    }

    /// The largest fetch response the connection's consumer buckets can take within one quota window
    /// (Kafka's `limit × (samples − 1) × window`), or `None` if no consumer quota applies.
    pub fn max_fetch_bytes(&mut self) -> Option<u64> {
        self.refresh();
        let inner = &self.meter.inner;
        let now = inner.clock.now_ms();
        let seconds = (inner.window.samples.saturating_sub(1) as u64 * inner.window.window_ms)
            as f64
            / 1000.0;
        FETCH_KEYS
            .iter()
            .filter_map(|&key| {
                let bucket = self.buckets[key.index()].as_ref()?;
                let q = self.resolved.get(key)?;
                inner.broker_limit(bucket, key, q.limit, now)
            })
            .map(|limit| (limit * seconds) as u64)
            .min()
    }
}

impl Drop for ClientMeter {
    /// Attributes what is still pending, so that a closed connection's last bytes count too.
    fn drop(&mut self) {
        self.attribute_all();
    }
}
