//! The meter every connection shares: the buckets, found by key and owner, the share totals, and
//! the sweep that drops idle buckets.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use dashmap::DashMap;

use super::allowance;
use super::bucket::{BpsViewCode, Bucket, Measure};
use super::clock::{Clock, SystemClock};
use super::config::MeterConfig;
use super::decision::{BucketOwner, BucketSnapshot, Throttle};
use super::rate::{self, Window};
use crate::describe::{BpsView, BrokerLimit, DescribedQuota};
use crate::engine::Engine;
use crate::entity::Level;
use crate::key::{QuotaKey, QuotaType, Unit};

/// The sum of active share weights of one quota type, recomputed at most once per sample window.
#[derive(Debug, Default)]
struct ShareTotal {
    computed_at: AtomicU64,
    total_bits: AtomicU64,
    members: DashMap<(QuotaKey, BucketOwner), Arc<Bucket>>,
}

pub(super) struct Inner {
    pub(super) engine: Arc<Engine>,
    pub(super) clock: Arc<dyn Clock>,
    pub(super) config: MeterConfig,
    pub(super) window: Window,
    /// Allowance stripes per bucket.
    stripes: usize,
    buckets: DashMap<(QuotaKey, BucketOwner), Arc<Bucket>>,
    shares: [ShareTotal; 2],
    last_sweep: AtomicU64,
    /// Counts sweeps that dropped buckets, so connections check their buckets only after one.
    pub(super) sweeps: AtomicU64,
    /// This instance's part of cluster-wide `bps` limits, when instances share their usage.
    bps_split: OnceLock<Arc<dyn BpsSplit>>,
}

/// How an instance's part of a cluster-wide `bps` limit is decided when the instances that
/// enforce it share their usage (for example in proportion to each one's demand), in place of
/// the limit divided by the live instance count. Consulted on every request metered against a
/// `bps` key, so it must answer from memory (never the network).
pub trait BpsSplit: Send + Sync + std::fmt::Debug {
    /// This instance's limit, in bytes/s, for the bucket of `key` shared by `owner` whose
    /// cluster-wide limit is `limit` bytes/s; `None` to fall back to `limit` divided by the
    /// engine's live instance count (for example when the shared view is too old).
    fn local_limit(
        &self,
        key: QuotaKey,
        owner: &BucketOwner,
        limit: f64,
        now_ms: u64,
    ) -> Option<f64>;
}

/// Meters requests against the engine's quotas. Cheap to clone; share it between threads.
#[derive(Clone)]
pub struct Meter {
    pub(super) inner: Arc<Inner>,
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
                bps_split: OnceLock::new(),
            }),
        }
    }

    /// Splits cluster-wide `bps` limits with `split` from now on (once: a meter keeps the first
    /// split it is given; false if it already had one).
    pub fn set_bps_split(&self, split: Arc<dyn BpsSplit>) -> bool {
        self.inner.bps_split.set(split).is_ok()
    }

    /// The engine whose quotas are metered.
    pub fn engine(&self) -> &Arc<Engine> {
        &self.inner.engine
    }

    /// The clock the meter reads: a host that times its own decisions (how long a throttled
    /// connection stays muted) reads the same one, so that tests can drive both.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.inner.clock
    }

    /// Records a new connection from `ip` against `connection_creation_rate` and returns the
    /// throttle. A throttled connection is not accepted (Kafka holds the socket for the throttle
    /// time, then closes it), so, as Kafka does, it is taken back out of the rate.
    pub fn connection(&self, ip: &str) -> Throttle {
        let Some(quota) = self.inner.engine.resolve_ip(ip) else {
            return Throttle::default();
        };
        let key = QuotaKey::CONNECTION_CREATION_RATE;
        let owner = BucketOwner::Ip(Arc::from(ip));
        let bucket = self.inner.bucket(key, owner, None);
        let now = self.inner.clock.now_ms();
        let ms = self.inner.record_rate(&bucket, quota.limit, 1.0, None, now);
        if ms > 0 {
            self.inner.unrecord(&bucket, 1.0, now);
        }
        bucket.throttle(ms)
    }

    /// [`Engine::describe`] on this instance: each `bps` limit as this meter applies it, split by
    /// the shared usage when the instances share it ([`Meter::set_bps_split`]), and which view it
    /// came from ([`DescribedQuota::bps_view`]). A name given as `None` is described as the empty
    /// name, whose bucket nobody metered.
    pub fn describe(
        &self,
        user: Option<&str>,
        client_id: Option<&str>,
        include_overrides: bool,
    ) -> Vec<DescribedQuota> {
        let mut out = self
            .inner
            .engine
            .describe(user, client_id, include_overrides);
        let Some(split) = self.inner.bps_split.get() else {
            return out;
        };
        let now = self.inner.clock.now_ms();
        let instances = self.inner.engine.broker_view().broker_count.max(1);
        let (user, client_id): (Arc<str>, Arc<str>) = (
            Arc::from(user.unwrap_or_default()),
            Arc::from(client_id.unwrap_or_default()),
        );
        for q in out.iter_mut().filter(|q| q.key.unit() == Unit::Bps) {
            let owner = BucketOwner::of(q.level.bucket_scope(), &user, &client_id);
            match split.local_limit(q.key, &owner, q.effective, now) {
                Some(limit) => {
                    q.broker_limit = BrokerLimit::Rate(limit);
                    q.bps_view = Some(BpsView::SharedUsage);
                }
                None => q.bps_view = Some(BpsView::Stale { instances }),
            }
        }
        out
    }

    /// The active buckets: who is metered, against what limit, at what rate, and how much throttled.
    pub fn snapshot(&self) -> Vec<BucketSnapshot> {
        let now = self.inner.clock.now_ms();
        let instances = self.inner.engine.broker_view().broker_count.max(1);
        let mut out: Vec<BucketSnapshot> = self
            .inner
            .buckets
            .iter()
            .map(|entry| {
                let b = entry.value();
                let mut state = b.state.lock();
                state.reclaim(&b.allowance);
                let limit = state.limit;
                let (measured, rate) = match &mut state.measure {
                    Measure::Rate(r) => (r.measure(self.inner.window, now).0, true),
                    Measure::Tokens(t) => (t.tokens(self.inner.window, limit, now), false),
                };
                // A token bucket's measure is what is left, not what anyone recorded.
                let (clients, other) = if rate {
                    state.clients.shares(now, self.inner.attribution_tau_ms())
                } else {
                    (Vec::new(), 0.0)
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
                    bps_view: BpsViewCode::view(b.bps_view.load(Ordering::Relaxed), instances),
                    clients: clients
                        .into_iter()
                        .map(|(client, share)| (client, share * measured))
                        .collect(),
                    clients_other: other * measured,
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
        let expiry = self.config.idle_expiry_ms();
        // Counted as they go: other threads may add buckets during the sweep, so the map's length
        // before and after does not tell how many were dropped.
        let mut dropped = 0;
        self.buckets.retain(|_, b| {
            let keep = now.saturating_sub(b.last_active()) < expiry;
            if !keep {
                // Holders of the bucket see this and re-resolve.
                b.expired.store(true, Ordering::Release);
                dropped += 1;
            }
            keep
        });
        for share in &self.shares {
            share
                .members
                .retain(|_, b| !b.expired.load(Ordering::Acquire));
        }
        if dropped > 0 {
            self.sweeps.fetch_add(1, Ordering::Release);
        }
        dropped
    }

    pub(super) fn bucket(
        &self,
        key: QuotaKey,
        owner: BucketOwner,
        level: Option<Level>,
    ) -> Arc<Bucket> {
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
    pub(super) fn record_rate(
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

    /// How many more units `bucket` can record at `now` and still be answered with no throttle
    /// against `limit`: what the rate's windows hold below the limit (0 once it is over).
    pub(super) fn room(&self, bucket: &Bucket, limit: f64, now: u64) -> f64 {
        let mut guard = bucket.state.lock();
        let state = &mut *guard;
        // What was taken without the lock counts too.
        state.reclaim(&bucket.allowance);
        let Measure::Rate(r) = &mut state.measure else {
            return f64::INFINITY;
        };
        let (rate, elapsed) = r.measure(self.window, now);
        ((limit - rate) * elapsed as f64 / 1000.0).max(0.0)
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

    /// Takes `value` back out of `bucket`'s window (Kafka's `unrecordQuotaSensor`): recorded as
    /// its negative, with no throttle noted.
    pub(super) fn unrecord(&self, bucket: &Bucket, value: f64, now: u64) {
        let mut guard = bucket.state.lock();
        let state = &mut *guard;
        state.reclaim(&bucket.allowance);
        if let Measure::Rate(r) = &mut state.measure {
            r.record(self.window, -value, now);
            state.recorded -= value;
        }
    }

    /// The limit of `value` in `key`'s unit on this broker, or `None` if it cannot be enforced (shares
    /// without a capacity). Inlined: most keys are already in this broker's terms.
    #[inline]
    pub(super) fn broker_limit(
        &self,
        bucket: &Bucket,
        key: QuotaKey,
        value: f64,
        now: u64,
    ) -> Option<f64> {
        match key.unit() {
            Unit::Bps | Unit::Shares => self.scaled_limit(bucket, key, value, now),
            _ => Some(value),
        }
    }

    /// [`Inner::broker_limit`] for the units that depend on the cluster: `bps` and `shares`.
    fn scaled_limit(&self, bucket: &Bucket, key: QuotaKey, value: f64, now: u64) -> Option<f64> {
        match key.unit() {
            Unit::Bps => {
                let split = self.bps_split.get();
                let shared = split.and_then(|s| s.local_limit(key, &bucket.owner, value, now));
                let view = match (split, shared) {
                    (_, Some(_)) => BpsViewCode::SharedUsage,
                    (Some(_), None) => BpsViewCode::Stale,
                    (None, None) => BpsViewCode::LiveCount,
                } as u8;
                // Written only when it changes: a hot bucket's line is not dirtied per request.
                if bucket.bps_view.load(Ordering::Relaxed) != view {
                    bucket.bps_view.store(view, Ordering::Relaxed);
                }
                Some(shared.unwrap_or_else(|| {
                    value / f64::from(self.engine.broker_view().broker_count.max(1))
                }))
            }
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

    /// The time constant client-ids' counts decay with: half the quota window, so that their mean
    /// age is the window's (see `bucket/clients.rs`).
    pub(super) fn attribution_tau_ms(&self) -> f64 {
        self.active_ms() as f64 / 2.0
    }

    /// Attributes `value`, recorded into `bucket` by `client_id`, to that client-id: with the lock
    /// waited for when `wait`, else only if it is free (`false` when it was not, and nothing done).
    pub(super) fn attribute(
        &self,
        bucket: &Bucket,
        client_id: &Arc<str>,
        value: f64,
        now: u64,
        wait: bool,
    ) -> bool {
        let mut state = if wait {
            bucket.state.lock()
        } else {
            match bucket.state.try_lock() {
                Some(state) => state,
                None => return false,
            }
        };
        state
            .clients
            .add(client_id, value, now, self.attribution_tau_ms());
        true
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

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inner").finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::super::clock::ManualClock;
    use super::super::rate::WindowedRate;
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
