//! kquota's meter on the workloads of Apache Kafka's `ClientQuotaManager` benchmark
//! (`interop/quota-manager/src/main/java/kquota/interop/QuotaBench.java`); `interop/quota-manager/bench.sh`
//! runs both and prints the ratio.
//!
//! Each operation is one produce request of 1,024 bytes through `ClientMeter::produce` (record, then the
//! throttle decision), reading the real clock as Kafka's path reads `System.currentTimeMillis()`.
//! Workloads, under the `kafka` sub-quota policy:
//!
//! - `hot`: one client, `{user=hot, client-id=app}`;
//! - `spread`: 100,000 clients `(user-i, client-i)`, a third each resolving to `{user=u, client-id=c}`
//!   (level 1), `{user=u}` (level 3) and `{client-id=<default>}` (level 8), visited with the same stride
//!   as the Java side.
//!
//! Limits are high enough that nothing is throttled. With two threads each thread runs `iters`
//! operations on connections of its own (a connection owns its `ClientMeter`; the buckets are shared), and
//! the reported time is wall time / `iters`: the time per operation on one core.
//!
//! Run: `cargo bench --bench versus_kafka`.

// criterion's macros generate undocumented functions.
#![allow(missing_docs)]

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use kquota::meter::{ClientMeter, Meter};
use kquota::{Alteration, Engine, Entity, EntityName, SubQuotaPolicy};

const SPREAD_CLIENTS: usize = 100_000;
/// The Java side's stride; prime, so a walk visits every client.
const STRIDE: usize = 7_919;
const REQUEST_BYTES: u64 = 1_024;
const NEVER: f64 = 1e18;

fn named(name: &str) -> EntityName {
    EntityName::named(name).expect("bench names are not empty")
}

/// The meter and the (user, client-id) of every client of a workload.
fn workload(hot: bool) -> (Meter, Vec<(String, String)>) {
    let engine = Engine::builder()
        .policy(SubQuotaPolicy::Kafka)
        .build()
        .expect("valid settings");
    let mut batch = Vec::new();
    let clients: Vec<(String, String)> = if hot {
        batch.push(
            Alteration::new(&Entity::UserClient(named("hot"), named("app")))
                .set("producer_byte_rate", NEVER),
        );
        vec![("hot".into(), "app".into())]
    } else {
        batch.push(
            Alteration::new(&Entity::ClientId(EntityName::Default))
                .set("producer_byte_rate", NEVER),
        );
        (0..SPREAD_CLIENTS)
            .map(|i| {
                let (user, client) = (format!("user-{i}"), format!("client-{i}"));
                match i % 3 {
                    0 => batch.push(
                        Alteration::new(&Entity::UserClient(named(&user), named(&client)))
                            .set("producer_byte_rate", NEVER),
                    ),
                    1 => batch.push(
                        Alteration::new(&Entity::User(named(&user)))
                            .set("producer_byte_rate", NEVER),
                    ),
                    _ => {}
                }
                (user, client)
            })
            .collect()
    };
    let results = engine.alter(&batch, false);
    assert!(results.iter().all(|r| r.error.is_none()), "bench setup");
    (Meter::new(Arc::new(engine)), clients)
}

/// One thread's connections and where its walk is.
struct Walker {
    connections: Vec<ClientMeter>,
    next: usize,
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("versus_kafka");
    group
        .sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    for (name, hot) in [("hot", true), ("spread", false)] {
        let (meter, clients) = workload(hot);
        for threads in [1usize, 2] {
            let mut walkers: Vec<Walker> = (0..threads)
                .map(|t| {
                    let mut connections: Vec<ClientMeter> =
                        clients.iter().map(|(u, c)| meter.client(u, c)).collect();
                    // Every client has sent a request before, as on the Java side.
                    for connection in &mut connections {
                        connection.produce(REQUEST_BYTES);
                    }
                    Walker {
                        next: t * connections.len() / 2,
                        connections,
                    }
                })
                .collect();
            group.bench_function(BenchmarkId::new(name, threads), |b| {
                b.iter_custom(|iters| {
                    let start = Instant::now();
                    std::thread::scope(|s| {
                        for walker in walkers.iter_mut() {
                            s.spawn(move || {
                                let n = walker.connections.len();
                                for _ in 0..iters {
                                    let i = walker.next;
                                    walker.next = (i + STRIDE) % n;
                                    black_box(walker.connections[i].produce(REQUEST_BYTES));
                                }
                            });
                        }
                    });
                    start.elapsed()
                })
            });
        }
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
