//! Alteration cost: one `Engine::alter` of a 1,000-entity batch into stores of 10,000 and 1,000,000
//! entities. The target is that the two sizes cost within 2× of each other (a batch costs what it
//! changes, not what the store holds).
//!
//! Each store is built once per size (mixed shapes `{user=u, client-id=c}`, `{user=u}`,
//! `{client-id=c}`, one key each, plus the defaults) and every iteration leaves it the size it was:
//!
//! - `insert-1000`: a batch that configures 1,000 new entities (timed), then a batch that removes them
//!   again (not timed);
//! - `remove-1000`: the mirror image: the insert is not timed, the removal is;
//! - `update-1000`: a batch that changes the value of 1,000 existing entities spread over the store,
//!   alternating between two values so that every batch really changes every entity (setting a key to
//!   its current value is a no-op).
//!
//! `KQUOTA_BENCH_CLOCK=cpu` measures the thread's CPU time instead of wall time, for machines shared
//! with other work.
//!
//! The batches are built once, outside the timing: `alter` takes them by reference. The default
//! `kip55` policy is on, so the sub-quota rules are checked as they would be in production.
//!
//! The allocator is mimalloc, the one `kquotad` ships with (the default `mimalloc` feature);
//! `cargo bench --bench alter --no-default-features` measures glibc malloc instead, which spends much
//! of a large store's batch walking and consolidating its free lists.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, SamplingMode};
use kquota::{AlterResult, Alteration, Engine, Entity, EntityName};

#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Entities per batch, both while building stores and in the measured batches.
const BATCH: usize = 1_000;
/// The store sizes.
const SIZES: [(usize, &str); 2] = [(10_000, "10K"), (1_000_000, "1M")];

/// Entity number `j` of a family of names: shape `j % 3` of group `j / 3`, one key each.
fn entity(prefix: &str, j: usize) -> (Entity, &'static str) {
    let g = j / 3;
    let user = || EntityName::named(&format!("{prefix}u{g}")).expect("non-empty");
    let client = || EntityName::named(&format!("{prefix}c{g}")).expect("non-empty");
    match j % 3 {
        0 => (Entity::UserClient(user(), client()), "producer_byte_rate"),
        1 => (Entity::User(user()), "consumer_byte_rate"),
        _ => (Entity::ClientId(client()), "request_percentage"),
    }
}

/// A batch that sets every entity of `js` to `value`.
fn set_batch(prefix: &str, js: impl Iterator<Item = usize>, value: f64) -> Vec<Alteration> {
    js.map(|j| {
        let (e, key) = entity(prefix, j);
        Alteration::new(&e).set(key, value)
    })
    .collect()
}

/// A batch that removes every entity of `js`.
fn remove_batch(prefix: &str, js: impl Iterator<Item = usize>) -> Vec<Alteration> {
    js.map(|j| {
        let (e, key) = entity(prefix, j);
        Alteration::new(&e).remove(key)
    })
    .collect()
}

fn check(results: &[AlterResult]) {
    if let Some(e) = results.iter().find_map(|r| r.error.as_ref()) {
        panic!("alteration failed: {e}");
    }
}

/// A store of `n` entities plus the defaults, built with batches of [`BATCH`].
fn build_engine(n: usize) -> Engine {
    use EntityName::Default as D;
    let engine = Engine::new();
    let defaults = [
        Alteration::new(&Entity::User(D)).set("consumer_byte_rate", 1_000_000.0),
        Alteration::new(&Entity::UserClient(D, D)).set("producer_byte_rate", 500_000.0),
        Alteration::new(&Entity::ClientId(D)).set("request_percentage", 50.0),
    ];
    check(&engine.alter(&defaults, false));
    for start in (0..n).step_by(BATCH) {
        check(&engine.alter(&set_batch("", start..n.min(start + BATCH), 1_000.0), false));
    }
    assert_eq!(engine.entity_count(), n + 3);
    engine
}

/// The clock the measurements read: wall time (the default), or, with `KQUOTA_BENCH_CLOCK=cpu`, the
/// CPU time of this thread, which leaves out the time it spends descheduled when other processes
/// compete for the cores.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Clock {
    Wall,
    ThreadCpu,
}

impl Clock {
    fn from_env() -> Clock {
        match std::env::var("KQUOTA_BENCH_CLOCK").as_deref() {
            Ok("cpu") => Clock::ThreadCpu,
            _ => Clock::Wall,
        }
    }

    /// Applies `batch` and returns how long it took on this clock.
    fn alter(self, engine: &Engine, batch: &[Alteration]) -> Duration {
        let results;
        let took = match self {
            Clock::Wall => {
                let start = Instant::now();
                results = black_box(engine.alter(batch, false));
                start.elapsed()
            }
            Clock::ThreadCpu => {
                let start = thread_cpu_time();
                results = black_box(engine.alter(batch, false));
                thread_cpu_time() - start
            }
        };
        check(&results);
        took
    }
}

/// The CPU time this thread has run, from `/proc/thread-self/schedstat` (Linux; nanoseconds, but only
/// brought up to date at scheduler ticks and switches, so samples must last well over a tick, 4 ms
/// here: the group uses flat sampling, about 200 ms per sample).
fn thread_cpu_time() -> Duration {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat")
        .expect("/proc/thread-self/schedstat (KQUOTA_BENCH_CLOCK=cpu needs Linux)");
    let ns: u64 = text
        .split_whitespace()
        .next()
        .and_then(|v| v.parse().ok())
        .expect("run time in ns");
    Duration::from_nanos(ns)
}

/// Times `timed` and runs `untimed` after it, `iters` times.
fn alternate(
    clock: Clock,
    engine: &Engine,
    timed: &[Alteration],
    untimed: &[Alteration],
    iters: u64,
) -> Duration {
    let mut total = Duration::ZERO;
    for _ in 0..iters {
        total += clock.alter(engine, timed);
        check(&engine.alter(untimed, false));
    }
    total
}

fn bench_alter(c: &mut Criterion) {
    let clock = Clock::from_env();
    let mut group = c.benchmark_group("alter");
    group.sampling_mode(SamplingMode::Flat);
    // `cargo bench` passes `--bench`; without it (`cargo test --benches`) criterion only checks that
    // each benchmark runs, so the large store is not worth building.
    let sizes = if std::env::args().any(|a| a == "--bench") {
        &SIZES[..]
    } else {
        &SIZES[..1]
    };
    for &(n, label) in sizes {
        let built = Instant::now();
        let engine = build_engine(n);
        eprintln!("built a store of {n} entities in {:.1?}", built.elapsed());

        let fresh = set_batch("new-", 0..BATCH, 4_000.0);
        let unfresh = remove_batch("new-", 0..BATCH);
        // 1,000 existing entities spread evenly over the store, all three shapes.
        let stride = n / BATCH;
        let spread = || (0..BATCH).map(move |k| k * stride + k % 3);
        let updates = [
            set_batch("", spread(), 7_000.0),
            set_batch("", spread(), 8_000.0),
        ];

        group.bench_function(BenchmarkId::new("insert-1000", label), |b| {
            b.iter_custom(|iters| alternate(clock, &engine, &fresh, &unfresh, iters))
        });
        group.bench_function(BenchmarkId::new("remove-1000", label), |b| {
            check(&engine.alter(&fresh, false));
            b.iter_custom(|iters| alternate(clock, &engine, &unfresh, &fresh, iters));
            check(&engine.alter(&unfresh, false));
        });
        let mut flip = 0;
        group.bench_function(BenchmarkId::new("update-1000", label), |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    flip ^= 1;
                    total += clock.alter(&engine, &updates[flip]);
                }
                total
            })
        });
        assert_eq!(engine.entity_count(), n + 3);
    }
    group.finish();
}

fn main() {
    let mut c = Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4))
        .configure_from_args();
    bench_alter(&mut c);
    c.final_summary();
}
