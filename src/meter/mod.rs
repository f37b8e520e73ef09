//! Metering and throttling on the hot path, with Kafka's rate semantics.
//!
//! A broker builds one [`Meter`] over its [`Engine`], opens a [`ClientMeter`] per connection (or per
//! request), and records every request's bytes, handler time or mutations into it. Each call returns a
//! [`Throttle`]: how long to throttle the client, and which key and bucket caused it.
//!
//! Buckets are shared exactly as the precedence table's bucket column says: a quota from `{user=u}` is one
//! bucket for all of u's clients, one from `{client-id=c}` one bucket for every user of c, the rest one per
//! (user, client-id). A [`ClientMeter`] resolves once and keeps its buckets; when the engine's configuration changes
//! it re-resolves on its next request.
//!
//! A request that cannot be throttled (the bucket's window holds less than `limit × (samples − 1)`
//! windows' worth) takes its bytes from its thread's allowance with one compare-and-swap, without the
//! bucket's lock; the others take the lock and run Kafka's record and measure. Both give Kafka's answer
//! (see `allowance.rs` for why).

mod allowance;
mod clock;
mod rate;

pub use clock::{Clock, ManualClock, SystemClock};

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use dashmap::DashMap;
use parking_lot::Mutex;

use crate::engine::Engine;
use crate::entity::Level;
use crate::key::{QuotaKey, QuotaType, Unit};
use crate::resolve::Resolved;
use crate::scope::BucketScope;
use allowance::{Allowance, Grants, Stripe};
use crossbeam_utils::CachePadded;
use rate::{TokenBucket, Window, WindowedRate};

/// Settings of a [`Meter`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MeterConfig {
    /// Samples in a quota window (Kafka's `quota.window.num`, default 11).
    pub samples: u32,
    /// Length of one sample (Kafka's `quota.window.size.seconds`, default 1 s).
    pub sample_window: Duration,
    /// Buckets idle this long are dropped (default one hour, as Kafka's sensors expire).
    pub idle_expiry: Duration,
    /// The throttle for a bucket whose limit is 0 (a KIP-55 remainder of nothing); default
    /// `samples × sample_window`.
    pub max_throttle: Option<Duration>,
    /// Controller mutations: refuse a request while the bucket is in debt (Kafka's strict mode, used for
    /// CreateTopics and friends from v6) instead of only throttling after recording (permissive mode).
    pub strict_mutations: bool,
}

impl Default for MeterConfig {
    fn default() -> Self {
        MeterConfig {
            samples: 11,
            sample_window: Duration::from_secs(1),
            idle_expiry: Duration::from_secs(3600),
            max_throttle: None,
            strict_mutations: true,
        }
    }
}

impl MeterConfig {
    fn window(&self) -> Window {
        Window {
            samples: self.samples.max(1) as usize,
            window_ms: (self.sample_window.as_millis() as u64).max(1),
        }
    }

    fn max_throttle_ms(&self) -> u64 {
        match self.max_throttle {
            Some(d) => d.as_millis() as u64,
            None => self.window().samples as u64 * self.window().window_ms,
        }
    }
}

/// Who a bucket belongs to.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum BucketOwner {
    /// One (user, client-id).
    UserClient(Arc<str>, Arc<str>),
    /// All clients of one user.
    User(Arc<str>),
    /// Every user of one client-id.
    ClientId(Arc<str>),
    /// One IP address.
    Ip(Arc<str>),
}

impl std::fmt::Display for BucketOwner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BucketOwner::UserClient(u, c) => write!(f, "(user={u}, client-id={c})"),
            BucketOwner::User(u) => write!(f, "(user={u})"),
            BucketOwner::ClientId(c) => write!(f, "(client-id={c})"),
            BucketOwner::Ip(ip) => write!(f, "(ip={ip})"),
        }
    }
}

/// Why a request is throttled: the key and bucket with the longest throttle.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ThrottleCause {
    /// The quota key that was exceeded.
    pub key: QuotaKey,
    /// The bucket that exceeded it.
    pub owner: BucketOwner,
    /// The precedence level the quota came from (`None` for ip quotas).
    pub level: Option<Level>,
}

/// A throttle decision: how long the client must wait, and why. `ms == 0` means no throttle.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Throttle {
    /// Milliseconds to throttle the client (Kafka's `throttle_time_ms`).
    pub ms: u64,
    /// The key and bucket behind the longest throttle, when `ms > 0`.
    pub cause: Option<ThrottleCause>,
}

impl Throttle {
    /// Whether the client must be throttled.
    pub fn is_throttled(&self) -> bool {
        self.ms > 0
    }
}

/// The outcome of recording controller mutations.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MutationDecision {
    /// Whether the request may proceed. In strict mode a request from a bucket in debt is refused
    /// (Kafka answers THROTTLING_QUOTA_EXCEEDED) and nothing is recorded.
    pub accepted: bool,
    /// The throttle to return to the client.
    pub throttle: Throttle,
}

/// The metered state of one bucket.
// Rates hold their samples inline on purpose (one allocation per bucket); token buckets, the small
// variant, meter only controller mutations, so the space they leave unused is rare.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
enum Measure {
    Rate(WindowedRate),
    Tokens(TokenBucket),
}

/// One shared rate. Built with a fixed number of allowance stripes and used unsized, so the stripes
/// live in the bucket's own allocation (see [`Bucket::new`]).
#[derive(Debug)]
struct Bucket<A: ?Sized = Allowance> {
    key: QuotaKey,
    owner: BucketOwner,
    level: Option<Level>,
    /// Everything a request updates when it takes the lock.
    state: Mutex<BucketState>,
    last_ms: AtomicU64,
    /// Set when the bucket is dropped from the map; holders re-resolve.
    expired: AtomicBool,
    /// The latest share weight (f64 bits), for `shares` buckets; read without the lock by the split.
    weight_bits: AtomicU64,
    /// Headroom that requests take without the lock while they cannot be throttled.
    allowance: A,
}

/// The part of a bucket that each request changes.
#[derive(Debug)]
struct BucketState {
    measure: Measure,
    /// The allowances granted from this state.
    grants: Grants,
    /// The latest limit applied, for snapshots.
    limit: f64,
    recorded: f64,
    throttle_ms_total: u64,
    throttle_count: u64,
}

impl BucketState {
    /// Folds what requests took from the allowances into the rate; every path that reads or changes
    /// the rate starts here.
    fn reclaim(&mut self, allowance: &Allowance) {
        if let Some((value, last_ms)) = allowance.reclaim(&mut self.grants) {
            if let Measure::Rate(r) = &mut self.measure {
                r.fold(value, last_ms);
            }
            self.recorded += value as f64;
        }
    }

    fn note(&mut self, limit: f64, recorded: f64, throttle_ms: u64) {
        self.limit = limit;
        self.recorded += recorded;
        if throttle_ms > 0 {
            self.throttle_ms_total += throttle_ms;
            self.throttle_count += 1;
        }
    }
}

impl<const N: usize> Bucket<Allowance<[CachePadded<Stripe>; N]>> {
    fn build(
        key: QuotaKey,
        owner: BucketOwner,
        level: Option<Level>,
        window: Window,
        now: u64,
    ) -> Arc<Bucket> {
        let measure = if key.quota_type() == QuotaType::ControllerMutationRate {
            Measure::Tokens(TokenBucket::new())
        } else {
            Measure::Rate(WindowedRate::new(window))
        };
        let (allowance, grants) = Allowance::<[CachePadded<Stripe>; N]>::new();
        Arc::new(Bucket {
            key,
            owner,
            level,
            allowance,
            state: Mutex::new(BucketState {
                measure,
                grants,
                limit: 0.0,
                recorded: 0.0,
                throttle_ms_total: 0,
                throttle_count: 0,
            }),
            last_ms: AtomicU64::new(now),
            expired: AtomicBool::new(false),
            weight_bits: AtomicU64::new(0),
        })
    }
}

impl Bucket {
    /// A bucket with `stripes` allowance stripes (a power of two up to 8; see
    /// [`allowance::stripe_count`]), active at `now`.
    fn new(
        key: QuotaKey,
        owner: BucketOwner,
        level: Option<Level>,
        window: Window,
        stripes: usize,
        now: u64,
    ) -> Arc<Bucket> {
        match stripes {
            1 => {
                Bucket::<Allowance<[CachePadded<Stripe>; 1]>>::build(key, owner, level, window, now)
            }
            2 => Bucket::<Allowance<[_; 2]>>::build(key, owner, level, window, now),
            4 => Bucket::<Allowance<[_; 4]>>::build(key, owner, level, window, now),
            _ => Bucket::<Allowance<[_; 8]>>::build(key, owner, level, window, now),
        }
    }

    /// Marks the bucket active at `now`. Written only when the millisecond changes, so that a hot
    /// bucket's line is not dirtied by every request.
    #[inline]
    fn touch(&self, now: u64) {
        if self.last_ms.load(Ordering::Relaxed) != now {
            self.last_ms.store(now, Ordering::Relaxed);
        }
    }

    /// The latest time a request touched the bucket, with or without its lock.
    fn last_active(&self) -> u64 {
        self.last_ms
            .load(Ordering::Relaxed)
            .max(self.allowance.last_ms())
    }

    fn cause(&self) -> ThrottleCause {
        ThrottleCause {
            key: self.key,
            owner: self.owner.clone(),
            level: self.level,
        }
    }

    /// A throttle of `ms` caused by this bucket.
    fn throttle(&self, ms: u64) -> Throttle {
        Throttle {
            ms,
            cause: (ms > 0).then(|| self.cause()),
        }
    }
}

/// A snapshot of one active bucket, for operators.
#[derive(Clone, Debug, PartialEq)]
pub struct BucketSnapshot {
    /// The quota key metered.
    pub key: QuotaKey,
    /// Who shares the bucket.
    pub owner: BucketOwner,
    /// The level the quota came from (`None` for ip quotas).
    pub level: Option<Level>,
    /// The limit last applied, in this broker's terms (bytes/s, percent, mutations/s, connections/s).
    pub limit: f64,
    /// The measured rate now (for mutations: the tokens left).
    pub measured: f64,
    /// Everything recorded into the bucket.
    pub recorded_total: f64,
    /// Sum of the throttles handed out.
    pub throttle_ms_total: u64,
    /// How many decisions throttled.
    pub throttle_count: u64,
}

/// The sum of active share weights of one quota type, recomputed at most once per sample window.
#[derive(Debug, Default)]
struct ShareTotal {
    computed_at: AtomicU64,
    total_bits: AtomicU64,
    members: DashMap<(QuotaKey, BucketOwner), Arc<Bucket>>,
}

struct Inner {
    engine: Arc<Engine>,
    clock: Arc<dyn Clock>,
    config: MeterConfig,
    window: Window,
    /// Allowance stripes per bucket.
    stripes: usize,
    buckets: DashMap<(QuotaKey, BucketOwner), Arc<Bucket>>,
    shares: [ShareTotal; 2],
    last_sweep: AtomicU64,
    /// Counts sweeps that dropped buckets, so connections check their buckets only after one.
    sweeps: AtomicU64,
}

/// Meters requests against the engine's quotas. Cheap to clone; share it between threads.
#[derive(Clone)]
pub struct Meter {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Meter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Meter")
            .field("config", &self.inner.config)
            .field("buckets", &self.inner.buckets.len())
            .finish_non_exhaustive()
    }
}

impl Meter {
    /// A meter over `engine` with the real clock and Kafka's default windows.
    pub fn new(engine: Arc<Engine>) -> Meter {
        Meter::with_clock(engine, Arc::new(SystemClock::new()), MeterConfig::default())
    }

    /// A meter with an explicit clock and settings.
    pub fn with_clock(engine: Arc<Engine>, clock: Arc<dyn Clock>, config: MeterConfig) -> Meter {
        Meter {
            inner: Arc::new(Inner {
                engine,
                clock,
                window: config.window(),
                stripes: allowance::stripe_count(),
                config,
                buckets: DashMap::new(),
                shares: Default::default(),
                last_sweep: AtomicU64::new(0),
                sweeps: AtomicU64::new(0),
            }),
        }
    }

    /// The engine whose quotas are metered.
    pub fn engine(&self) -> &Arc<Engine> {
        &self.inner.engine
    }

    /// Opens the meter of one connection's (user, client-id). Cheap; keep it for the connection's life.
    pub fn client(&self, user: &str, client_id: &str) -> ClientMeter {
        let mut meter = ClientMeter {
            meter: self.clone(),
            user: Arc::from(user),
            client_id: Arc::from(client_id),
            generation: u64::MAX,
            sweeps: 0,
            resolved: self.inner.engine.resolve(user, client_id),
            buckets: Default::default(),
        };
        meter.refresh();
        meter
    }

    /// Records a new connection from `ip` against `connection_creation_rate` and returns how long to
    /// delay accepting it.
    pub fn connection(&self, ip: &str) -> Throttle {
        let Some(quota) = self.inner.engine.resolve_ip(ip) else {
            return Throttle::default();
        };
        let key = QuotaKey::CONNECTION_CREATION_RATE;
        let owner = BucketOwner::Ip(Arc::from(ip));
        let bucket = self.inner.bucket(key, owner, None);
        let now = self.inner.clock.now_ms();
        let ms = self.inner.record_rate(&bucket, quota.limit, 1.0, None, now);
        bucket.throttle(ms)
    }

    /// The active buckets: who is metered, against what limit, at what rate, and how much throttled.
    pub fn snapshot(&self) -> Vec<BucketSnapshot> {
        let now = self.inner.clock.now_ms();
        let mut out: Vec<BucketSnapshot> = self
            .inner
            .buckets
            .iter()
            .map(|entry| {
                let b = entry.value();
                let mut state = b.state.lock();
                state.reclaim(&b.allowance);
                let limit = state.limit;
                let measured = match &mut state.measure {
                    Measure::Rate(r) => r.measure(self.inner.window, now).0,
                    Measure::Tokens(t) => t.tokens(self.inner.window, limit, now),
                };
                BucketSnapshot {
                    key: b.key,
                    owner: b.owner.clone(),
                    level: b.level,
                    limit,
                    measured,
                    recorded_total: state.recorded,
                    throttle_ms_total: state.throttle_ms_total,
                    throttle_count: state.throttle_count,
                }
            })
            .collect();
        out.sort_by_key(|b| (b.owner.to_string(), b.key));
        out
    }

    /// Drops buckets idle for longer than the configured expiry; returns how many were dropped.
    /// Called automatically at most once a minute when connections open.
    pub fn sweep(&self) -> usize {
        self.inner.sweep(self.inner.clock.now_ms())
    }

    /// How many buckets exist.
    pub fn bucket_count(&self) -> usize {
        self.inner.buckets.len()
    }
}

impl Inner {
    fn sweep(&self, now: u64) -> usize {
        self.last_sweep.store(now, Ordering::Relaxed);
        let expiry = self.config.idle_expiry.as_millis() as u64;
        let before = self.buckets.len();
        self.buckets.retain(|_, b| {
            let keep = now.saturating_sub(b.last_active()) < expiry;
            if !keep {
                // Holders of the bucket see this and re-resolve.
                b.expired.store(true, Ordering::Release);
            }
            keep
        });
        for share in &self.shares {
            share
                .members
                .retain(|_, b| !b.expired.load(Ordering::Acquire));
        }
        let dropped = before - self.buckets.len();
        if dropped > 0 {
            self.sweeps.fetch_add(1, Ordering::Release);
        }
        dropped
    }

    fn bucket(&self, key: QuotaKey, owner: BucketOwner, level: Option<Level>) -> Arc<Bucket> {
        let now = self.clock.now_ms();
        let bucket = self
            .buckets
            .entry((key, owner.clone()))
            .or_insert_with(|| {
                Bucket::new(key, owner.clone(), level, self.window, self.stripes, now)
            })
            .clone();
        if key.unit() == Unit::Shares {
            self.shares[share_slot(key)]
                .members
                .insert((key, owner), Arc::clone(&bucket));
        }
        if now.saturating_sub(self.last_sweep.load(Ordering::Relaxed)) >= 60_000 {
            self.sweep(now);
        }
        bucket
    }

    /// Records `value` into a windowed-rate bucket limited to `limit` and returns its throttle (ms).
    #[inline]
    fn record_rate(
        &self,
        bucket: &Bucket,
        limit: f64,
        value: f64,
        cap_ms: Option<u64>,
        now: u64,
    ) -> u64 {
        // Whole values within the bucket's headroom: Kafka's answer is 0 ms, no lock needed (the
        // stripe keeps the time of activity).
        let whole = value as u64;
        if whole as f64 == value && bucket.allowance.try_take(whole, limit, now) {
            return 0;
        }
        self.record_locked(bucket, limit, value, cap_ms, now)
    }

    /// [`Inner::record_rate`] under the bucket's lock: Kafka's record and measure, then new allowances.
    #[inline(never)]
    fn record_locked(
        &self,
        bucket: &Bucket,
        limit: f64,
        value: f64,
        cap_ms: Option<u64>,
        now: u64,
    ) -> u64 {
        bucket.touch(now);
        let ms = {
            let mut guard = bucket.state.lock();
            let state = &mut *guard;
            state.reclaim(&bucket.allowance);
            let Measure::Rate(r) = &mut state.measure else {
                return 0;
            };
            r.record(self.window, value, now);
            let (rate, elapsed) = r.measure(self.window, now);
            let mut ms = if limit <= 0.0 {
                self.config.max_throttle_ms()
            } else {
                rate::throttle_ms(rate, limit, elapsed)
            };
            if let Some(cap) = cap_ms {
                ms = ms.min(cap);
            }
            if let Some((headroom, until)) = r.headroom(self.window, limit, now) {
                bucket
                    .allowance
                    .grant(&mut state.grants, headroom, limit, now, until);
            }
            state.note(limit, value, ms);
            ms
        };
        ms
    }

    /// The limit of `value` in `key`'s unit on this broker, or `None` if it cannot be enforced (shares
    /// without a capacity). Inlined: most keys are already in this broker's terms.
    #[inline]
    fn broker_limit(&self, bucket: &Bucket, key: QuotaKey, value: f64, now: u64) -> Option<f64> {
        match key.unit() {
            Unit::Bps | Unit::Shares => self.scaled_limit(bucket, key, value, now),
            _ => Some(value),
        }
    }

    /// [`Inner::broker_limit`] for the units that depend on the cluster: `bps` and `shares`.
    fn scaled_limit(&self, bucket: &Bucket, key: QuotaKey, value: f64, now: u64) -> Option<f64> {
        match key.unit() {
            Unit::Bps => Some(value / f64::from(self.engine.broker_view().broker_count)),
            Unit::Shares => {
                let view = self.engine.broker_view();
                let capacity = match key.quota_type() {
                    QuotaType::ProducerByteRate => view.producer_capacity,
                    _ => view.consumer_capacity,
                }?;
                let previous = bucket.weight_bits.swap(value.to_bits(), Ordering::Relaxed);
                let was_active = now.saturating_sub(bucket.last_active()) < self.active_ms()
                    && f64::from_bits(previous) == value;
                let total = self.share_total(key, now, !was_active);
                Some(capacity * value / total.max(value))
            }
            _ => Some(value),
        }
    }

    fn active_ms(&self) -> u64 {
        self.window.samples as u64 * self.window.window_ms
    }

    /// Σ weights of the type's share buckets active now; recomputed once per sample window, or at once
    /// when a bucket joins or changes its weight.
    fn share_total(&self, key: QuotaKey, now: u64, force: bool) -> f64 {
        let share = &self.shares[share_slot(key)];
        let at = share.computed_at.load(Ordering::Relaxed);
        let stale = now.saturating_sub(at) >= self.window.window_ms || at == 0;
        if (force || stale)
            && share
                .computed_at
                .compare_exchange(at, now.max(1), Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        {
            let active = self.active_ms();
            let total: f64 = share
                .members
                .iter()
                .filter(|b| now.saturating_sub(b.last_active()) < active)
                .map(|b| f64::from_bits(b.weight_bits.load(Ordering::Relaxed)))
                .sum();
            share.total_bits.store(total.to_bits(), Ordering::Relaxed);
        }
        f64::from_bits(share.total_bits.load(Ordering::Relaxed))
    }
}

fn share_slot(key: QuotaKey) -> usize {
    usize::from(key.quota_type() != QuotaType::ProducerByteRate)
}

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

/// The meter of one connection's (user, client-id). Not shared between threads: each connection owns
/// one, and the buckets behind it are shared.
#[derive(Debug)]
pub struct ClientMeter {
    meter: Meter,
    user: Arc<str>,
    client_id: Arc<str>,
    generation: u64,
    sweeps: u64,
    resolved: Resolved,
    buckets: [Option<Arc<Bucket>>; QuotaKey::CLIENT_COUNT],
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inner").finish_non_exhaustive()
    }
}

impl ClientMeter {
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
        self.generation = generation;
        self.resolved = inner.engine.resolve(&self.user, &self.client_id);
        for key in QuotaKey::client_keys() {
            self.buckets[key.index()] = self.resolved.get(key).map(|q| {
                let owner = match q.bucket_scope() {
                    BucketScope::UserClient => {
                        BucketOwner::UserClient(self.user.clone(), self.client_id.clone())
                    }
                    BucketScope::User => BucketOwner::User(self.user.clone()),
                    BucketScope::ClientId => BucketOwner::ClientId(self.client_id.clone()),
                };
                inner.bucket(key, owner, Some(q.level))
            });
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
        // The longest throttle and its bucket; the cause is built only if there is one.
        let mut longest: Option<(u64, &Bucket)> = None;
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
            if ms > longest.map_or(0, |(longest, _)| longest) {
                longest = Some((ms, bucket));
            }
        }
        longest.map_or_else(Throttle::default, |(ms, bucket)| bucket.throttle(ms))
    }

    /// Records a produce request of `bytes` and returns the throttle.
    pub fn produce(&mut self, bytes: u64) -> Throttle {
        self.record_bytes(&PRODUCE_KEYS, bytes)
    }

    /// Records a fetch response of `bytes` and returns the throttle.
    pub fn fetch(&mut self, bytes: u64) -> Throttle {
        self.record_bytes(&FETCH_KEYS, bytes)
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
        bucket.throttle(ms)
    }

    /// Records `n` partition mutations against `controller_mutation_rate`.
    #[must_use = "in strict mode a request from a bucket in debt is refused"]
    pub fn mutations(&mut self, n: u32) -> MutationDecision {
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
            let (accepted, tokens) = if inner.config.strict_mutations && before < 0.0 {
                (false, before)
            } else {
                tb.record(inner.window, q.limit, f64::from(n), now);
                (true, tb.tokens(inner.window, q.limit, now))
            };
            let ms = rate::token_throttle_ms(tokens, q.limit);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Alteration, Entity, EntityName};
    use std::sync::mpsc;

    fn set_user_quota(engine: &Engine, limit: f64) {
        let user = Entity::User(EntityName::named("u").unwrap());
        let results = engine.alter(
            &[Alteration::new(&user).set("producer_byte_rate", limit)],
            false,
        );
        assert!(results.iter().all(|r| r.error.is_none()));
    }

    /// Requests served from allowances get exactly the throttles of Kafka's measure over every
    /// request in order, whichever thread (and so stripe) serves them, across sample boundaries, idle
    /// gaps and limit changes.
    #[test]
    fn allowances_give_kafkas_throttles() {
        let engine = Arc::new(Engine::new());
        let mut limit = 40_000.0;
        set_user_quota(&engine, limit);
        let clock = Arc::new(ManualClock::new(1));
        let meter = Meter::with_clock(engine.clone(), clock.clone(), MeterConfig::default());
        // Two connections of user u (one bucket), each on its own thread, fed one request at a time.
        let workers: Vec<_> = ["a", "b"]
            .iter()
            .map(|client| {
                let (to_worker, requests) = mpsc::channel::<u64>();
                let (answers, from_worker) = mpsc::channel::<u64>();
                let meter = meter.clone();
                let client = client.to_string();
                std::thread::spawn(move || {
                    let mut connection = meter.client("u", &client);
                    for bytes in requests {
                        answers.send(connection.produce(bytes).ms).unwrap();
                    }
                });
                (to_worker, from_worker)
            })
            .collect();
        let window = MeterConfig::default().window();
        let mut reference = WindowedRate::new(window);
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut throttled = 0;
        for step in 0..30_000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            match state % 1_000 {
                0..=1 => clock.advance(11_000 + state % 4_000),
                2 => {
                    limit = [20_000.0, 40_000.0, 90_000.0][(state >> 20) as usize % 3];
                    set_user_quota(&engine, limit);
                }
                _ => clock.advance(state % 7),
            }
            let bytes = (state >> 32) % 900;
            let (to_worker, from_worker) = &workers[(state >> 12) as usize % 2];
            to_worker.send(bytes).unwrap();
            let ms = from_worker.recv().unwrap();
            let now = clock.now_ms();
            reference.record(window, bytes as f64, now);
            let (rate, elapsed) = reference.measure(window, now);
            assert_eq!(ms, rate::throttle_ms(rate, limit, elapsed), "step {step}");
            throttled += usize::from(ms > 0);
        }
        let snapshot = meter.snapshot();
        let bucket = meter.inner.buckets.iter().next().unwrap().value().clone();
        let taken = bucket.allowance.taken.load(Ordering::Relaxed);
        assert!(taken > 10_000, "only {taken} requests took the fast path");
        assert!(
            throttled > 1_000,
            "only {throttled} requests were throttled"
        );
        let now = clock.now_ms();
        assert_eq!(snapshot[0].measured, reference.measure(window, now).0);
    }
}
