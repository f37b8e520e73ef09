//! Record-and-throttle cost per request: kquota's `ClientMeter` against `governor`'s keyed rate limiter
//! and a `Mutex<HashMap>` baseline, in the same groups.
//!
//! Workloads: one hot bucket, and 100,000 buckets visited in turn; one thread, and two threads (each
//! thread runs the same number of operations; the reported time is wall time / total operations, so
//! two threads that scale perfectly show half the single-thread time). Every limiter uses a clock that
//! costs an atomic load (kquota's `ManualClock`, governor's `FakeRelativeClock`) so that the clock's
//! cost is not what is measured.
//!
//! Run: `cargo bench --bench meter`.

// criterion's macros generate undocumented functions.
#![allow(missing_docs)]

use std::collections::HashMap;
use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use governor::clock::FakeRelativeClock;
use governor::state::keyed::DashMapStateStore;
use governor::{Quota, RateLimiter};
use kquota::meter::{ClientMeter, ManualClock, Meter, MeterConfig};
use kquota::{Alteration, Engine, Entity, EntityName};

const MANY: usize = 100_000;

/// An engine where every (user, client-id) has its own generous bucket, and user "hot" shares one.
fn meter() -> Meter {
    let engine = Engine::new();
    let results = engine.alter(
        &[
            Alteration::new(&Entity::UserClient(
                EntityName::Default,
                EntityName::Default,
            ))
            .set("producer_byte_rate", 1e15),
            Alteration::new(&Entity::User(EntityName::named("hot").unwrap()))
                .set("producer_byte_rate", 1e15),
        ],
        false,
    );
    assert!(results.iter().all(|r| r.error.is_none()));
    Meter::with_clock(
        Arc::new(engine),
        Arc::new(ManualClock::new(1)),
        MeterConfig::default(),
    )
}

type Governor = RateLimiter<
    u64,
    DashMapStateStore<u64>,
    FakeRelativeClock,
    governor::middleware::NoOpMiddleware<governor::nanos::Nanos>,
>;

fn governor() -> Governor {
    RateLimiter::dashmap_with_clock(
        Quota::per_second(NonZeroU32::new(u32::MAX).unwrap()),
        FakeRelativeClock::default(),
    )
}

/// The naive peer: one lock around a map of per-key windows.
#[derive(Default)]
struct MutexBaseline {
    map: Mutex<HashMap<u64, (u64, f64, f64)>>,
}

impl MutexBaseline {
    /// Adds `bytes` to the key's current one-second window and returns a Kafka-style throttle.
    fn record(&self, key: u64, bytes: f64, now_ms: u64, limit: f64) -> u64 {
        let mut map = self.map.lock().unwrap();
        let (start, current, previous) = map.entry(key).or_insert((now_ms, 0.0, 0.0));
        if now_ms - *start >= 1000 {
            *previous = *current;
            *current = 0.0;
            *start = now_ms;
        }
        *current += bytes;
        let rate = (*current + *previous) / 2.0;
        if rate > limit {
            ((rate - limit) / limit * 1000.0) as u64
        } else {
            0
        }
    }
}

/// Runs `op(thread, i)` `iters` times on each of `threads` threads; returns wall time per operation
/// scaled to `iters` operations.
fn run_threads(threads: usize, iters: u64, op: impl Fn(usize, u64) + Sync) -> Duration {
    let mut unit = vec![(); threads];
    run_owned(&mut unit, iters, |_, t, i| op(t, i))
}

/// Like [`run_threads`], but each thread owns its element of `states` (a connection owns its meters).
fn run_owned<T: Send>(
    states: &mut [T],
    iters: u64,
    op: impl Fn(&mut T, usize, u64) + Sync,
) -> Duration {
    let threads = states.len();
    let start = Instant::now();
    std::thread::scope(|s| {
        for (t, state) in states.iter_mut().enumerate() {
            let op = &op;
            s.spawn(move || {
                for i in 0..iters {
                    op(state, t, i);
                }
            });
        }
    });
    start.elapsed() / threads as u32
}

fn bench(c: &mut Criterion) {
    let meter = meter();
    let limiter = governor();
    let baseline = MutexBaseline::default();
    for &threads in &[1usize, 2] {
        for &(workload, keys) in &[("hot bucket", 1usize), ("100k buckets", MANY)] {
            let mut group = c.benchmark_group(format!("record/{workload}/{threads} thread(s)"));
            group
                .sample_size(30)
                .measurement_time(Duration::from_secs(4));
            let per_thread = keys.div_ceil(threads);
            // One ClientMeter per connection, as a broker keeps them; each thread owns its own.
            let mut clients: Vec<Vec<ClientMeter>> = (0..threads)
                .map(|t| {
                    (0..per_thread)
                        .map(|i| {
                            if keys == 1 {
                                meter.client("hot", &format!("c{t}"))
                            } else {
                                meter.client(&format!("u{}", t * per_thread + i), "app")
                            }
                        })
                        .collect()
                })
                .collect();
            group.bench_function(BenchmarkId::new("kquota", threads), |b| {
                b.iter_custom(|iters| {
                    run_owned(&mut clients, iters, |mine, _, i| {
                        let client = &mut mine[(i as usize) % per_thread];
                        black_box(client.produce(black_box(1_000)));
                    })
                })
            });
            group.bench_function(BenchmarkId::new("governor keyed", threads), |b| {
                b.iter_custom(|iters| {
                    run_threads(threads, iters, |t, i| {
                        let key = if keys == 1 {
                            0
                        } else {
                            (t * per_thread) as u64 + i % per_thread as u64
                        };
                        let _ = black_box(limiter.check_key(&key));
                    })
                })
            });
            group.bench_function(BenchmarkId::new("Mutex<HashMap>", threads), |b| {
                b.iter_custom(|iters| {
                    run_threads(threads, iters, |t, i| {
                        let key = if keys == 1 {
                            0
                        } else {
                            (t * per_thread) as u64 + i % per_thread as u64
                        };
                        black_box(baseline.record(key, 1_000.0, 1 + i / 1_000_000, 1e15));
                    })
                })
            });
            group.finish();
        }
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
