//! Alteration cost: one `Engine::alter` of a 1,000-entity batch into stores of 10,000, 100,000 and
//! 1,000,000 entities. The target is that 10K and 1M cost within 2× of each other (a batch costs what
//! it changes, not what the store holds); 100K shows where the growth stops.
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
//! After the criterion group, the bench prints each batch's 1M / 10K and 1M / 100K ratios, measured in
//! 15 pairs of alternating windows (20 batches on the smaller store, then 20 on 1M): criterion measures
//! the two sizes minutes apart, and on a shared machine their ratio then mixes in whatever changed in
//! between.
//!
//! `KQUOTA_BENCH_CLOCK=cpu` measures the thread's CPU time instead of wall time, for machines shared
//! with other work.
//!
//! The batches are built once, outside the timing: `alter` takes them by reference. The default
//! `kip55` policy is on, so the sub-quota rules are checked as they would be in production.
//!
//! The allocator is mimalloc, the one `kquotad` ships with;
//! `RUSTFLAGS='--cfg kquota_glibc_malloc' cargo bench --bench alter` measures glibc malloc instead, which spends much
//! of a large store's batch walking and consolidating its free lists.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, SamplingMode};
use kquota::{AlterResult, Alteration, Engine, Entity, EntityName};

mod common;
use common::{Clock, Ratios};

#[cfg(not(kquota_glibc_malloc))]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Entities per batch, both while building stores and in the measured batches.
const BATCH: usize = 1_000;
/// The store sizes. The target compares 10K with 1M; 100K shows where the growth stops (a 100K store
/// no longer fits the caches either).
const SIZES: [(usize, &str); 3] = [(10_000, "10K"), (100_000, "100K"), (1_000_000, "1M")];

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

/// Applies `batch`, checks that every entity succeeded, and returns how long it took on `clock`.
fn timed_alter(clock: Clock, engine: &Engine, batch: &[Alteration]) -> Duration {
    let (results, took) = clock.time(|| black_box(engine.alter(batch, false)));
    check(&results);
    took
}

/// The three measured batches.
#[derive(Clone, Copy)]
enum Op {
    Insert,
    Remove,
    Update,
}

impl Op {
    const ALL: [Op; 3] = [Op::Insert, Op::Remove, Op::Update];

    fn name(self) -> &'static str {
        match self {
            Op::Insert => "insert-1000",
            Op::Remove => "remove-1000",
            Op::Update => "update-1000",
        }
    }
}

/// A store and the batches measured against it.
struct Store {
    n: usize,
    label: &'static str,
    engine: Engine,
    /// Configures 1,000 entities the store does not hold.
    fresh: Vec<Alteration>,
    /// Removes them again.
    unfresh: Vec<Alteration>,
    /// Two batches setting the same 1,000 existing entities to different values.
    updates: [Vec<Alteration>; 2],
    /// Which update batch ran last.
    flip: std::cell::Cell<usize>,
}

impl Store {
    fn build(n: usize, label: &'static str) -> Store {
        let built = Instant::now();
        let engine = build_engine(n);
        eprintln!("built a store of {n} entities in {:.1?}", built.elapsed());
        // 1,000 existing entities spread evenly over the store, all three shapes.
        let stride = n / BATCH;
        let spread = || (0..BATCH).map(move |k| k * stride + k % 3);
        Store {
            n,
            label,
            engine,
            fresh: set_batch("new-", 0..BATCH, 4_000.0),
            unfresh: remove_batch("new-", 0..BATCH),
            updates: [
                set_batch("", spread(), 7_000.0),
                set_batch("", spread(), 8_000.0),
            ],
            flip: std::cell::Cell::new(0),
        }
    }

    /// Runs one `op` batch and returns its time on `clock`. Inserts are undone and removals prepared
    /// by a batch that is not timed, so the store stays the size it was.
    fn run(&self, op: Op, clock: Clock) -> Duration {
        match op {
            Op::Insert => {
                let took = timed_alter(clock, &self.engine, &self.fresh);
                check(&self.engine.alter(&self.unfresh, false));
                took
            }
            Op::Remove => {
                check(&self.engine.alter(&self.fresh, false));
                timed_alter(clock, &self.engine, &self.unfresh)
            }
            Op::Update => {
                self.flip.set(self.flip.get() ^ 1);
                timed_alter(clock, &self.engine, &self.updates[self.flip.get()])
            }
        }
    }

    /// The time of `iters` `op` batches.
    fn run_many(&self, op: Op, clock: Clock, iters: u64) -> Duration {
        (0..iters).map(|_| self.run(op, clock)).sum()
    }
}

/// Batches per paired window on each store.
const PER_WINDOW: u64 = 20;

/// The large store's cost relative to the small one's, measured in `windows` alternating windows of
/// [`PER_WINDOW`] batches each, so that both sizes see the same machine. Criterion measures the sizes
/// minutes apart, and on a shared machine their ratio then mixes in whatever changed in between.
fn paired_ratio(small: &Store, large: &Store, op: Op, clock: Clock, windows: usize) -> Ratios {
    let ratio = || {
        let s = small.run_many(op, clock, PER_WINDOW);
        let l = large.run_many(op, clock, PER_WINDOW);
        l.as_secs_f64() / s.as_secs_f64()
    };
    Ratios::of((0..windows).map(|_| ratio()).collect())
}

fn bench_alter(c: &mut Criterion) {
    let clock = Clock::from_env();
    // `cargo bench` passes `--bench`; without it (`cargo test --benches`) criterion only checks that
    // each benchmark runs, so the large store is not worth building.
    let full = std::env::args().any(|a| a == "--bench");
    let stores: Vec<Store> = if full { &SIZES[..] } else { &SIZES[..1] }
        .iter()
        .map(|&(n, label)| Store::build(n, label))
        .collect();
    let mut group = c.benchmark_group("alter");
    group.sampling_mode(SamplingMode::Flat);
    for store in &stores {
        for op in Op::ALL {
            group.bench_function(BenchmarkId::new(op.name(), store.label), |b| {
                b.iter_custom(|iters| store.run_many(op, clock, iters))
            });
        }
    }
    group.finish();
    let windows = if full { 15 } else { 1 };
    let large = &stores[stores.len() - 1];
    for op in Op::ALL {
        for small in &stores[..stores.len().max(2) - 1] {
            let r = paired_ratio(small, large, op, clock, windows);
            println!(
                "alter/{} {} / {}: {r}, {PER_WINDOW} batches per window",
                op.name(),
                large.label,
                small.label
            );
        }
    }
    for store in &stores {
        assert_eq!(store.engine.entity_count(), store.n + 3);
    }
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
