//! Readers resolving while a writer alters never see half a batch, a broken sub-quota invariant, or
//! (through their per-thread caches) an answer older than an acknowledged commit.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;

use kquota::{Alteration, ComponentMatch, Engine, Entity, EntityType, ListFilter, QuotaKey};

use kquota_testkit::{alter_ok, d, n, uc};

/// Two configurations of user `u` that are each valid under KIP-55: (total, sub a, sub b, marker).
const CONFIGS: [(f64, f64, f64, f64); 2] = [(100.0, 60.0, 30.0, 1.0), (300.0, 150.0, 50.0, 2.0)];

/// One batch that moves every entity to generation `g` and user `u` to configuration `g % 2`.
fn batch(g: u64) -> Vec<Alteration> {
    let v = g as f64;
    let (total, a, b, marker) = CONFIGS[(g % 2) as usize];
    vec![
        Alteration::new(&uc("u", "c")).set("producer_byte_rate", v),
        Alteration::new(&Entity::User(n("u")))
            .set("consumer_byte_rate", v)
            .set("producer_byte_rate:bps", total)
            .set("request_percentage", marker),
        Alteration::new(&Entity::ClientId(n("c"))).set("controller_mutation_rate", v),
        Alteration::new(&Entity::UserClient(d(), n("c"))).set("consumer_byte_rate:shares", v),
        Alteration::new(&uc("u", "a")).set("producer_byte_rate:bps", a),
        Alteration::new(&uc("u", "b")).set("producer_byte_rate:bps", b),
    ]
}

#[test]
fn readers_never_see_half_a_batch() {
    let engine = Arc::new(Engine::new());
    alter_ok(&engine, &batch(1));
    let done = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let engine = Arc::clone(&engine);
            let done = Arc::clone(&done);
            thread::spawn(move || {
                let mut checks = 0u64;
                while !done.load(Ordering::Relaxed) || checks < 1000 {
                    // Four keys from four entities of one batch, seen by one resolve.
                    let r = engine.resolve("u", "c");
                    let g = r.get(QuotaKey::PRODUCER_BROKER_BPS).unwrap().limit;
                    assert_eq!(r.get(QuotaKey::CONSUMER_BROKER_BPS).unwrap().limit, g);
                    assert_eq!(r.get(QuotaKey::CONTROLLER_MUTATION_RATE).unwrap().limit, g);
                    assert_eq!(r.get(QuotaKey::CONSUMER_SHARES).unwrap().limit, g);

                    // A client without a sub-quota gets the remainder of the same generation.
                    let r = engine.resolve("u", "z");
                    let marker = r.get(QuotaKey::REQUEST_PERCENTAGE).unwrap().limit;
                    let (total, a, b, _) = CONFIGS[marker as usize - 1];
                    let rest = r.get(QuotaKey::PRODUCER_BPS).unwrap().limit;
                    assert_eq!(rest, total - a - b);

                    // A listing is one snapshot too: the sub-quotas never exceed the total.
                    let listed = engine.list(
                        &ListFilter::all()
                            .with(EntityType::User, ComponentMatch::Exact("u".into())),
                    );
                    let value = |e: &kquota::ListedEntity| {
                        e.quotas
                            .iter()
                            .find(|(k, _)| *k == QuotaKey::PRODUCER_BPS)
                            .map_or(0.0, |(_, v)| *v)
                    };
                    let total: f64 = listed
                        .iter()
                        .filter(|e| e.entity == Entity::User(n("u")))
                        .map(value)
                        .sum();
                    let subs: f64 = listed
                        .iter()
                        .filter(|e| matches!(e.entity, Entity::UserClient(..)))
                        .map(value)
                        .sum();
                    assert!(subs <= total, "sub-quotas {subs} exceed total {total}");
                    checks += 1;
                }
                checks
            })
        })
        .collect();
    for g in 2..=3000 {
        for r in engine.alter(&batch(g), false) {
            assert!(r.error.is_none(), "generation {g}: {:?}", r.error);
        }
    }
    done.store(true, Ordering::Relaxed);
    for reader in readers {
        let checks = reader.join().expect("reader saw an inconsistent state");
        assert!(checks >= 1000);
    }
}

/// Once `alter` has returned, no reader gets an answer older than that commit, although readers answer
/// the same pair from their per-thread caches: an acknowledged change is never hidden by a cached one.
#[test]
fn cached_answers_never_outlive_an_acknowledged_commit() {
    let engine = Arc::new(Engine::new());
    let set = |v: u64| {
        alter_ok(
            &engine,
            &[Alteration::new(&uc("u", "c")).set("producer_byte_rate", v as f64)],
        )
    };
    set(1);
    let acked = Arc::new(AtomicU64::new(1));
    let done = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (engine, acked, done) =
                (Arc::clone(&engine), Arc::clone(&acked), Arc::clone(&done));
            thread::spawn(move || {
                let (mut last, mut reads) = (0.0, 0u64);
                while !done.load(Ordering::Acquire) {
                    let floor = acked.load(Ordering::Acquire) as f64;
                    let r = engine.resolve("u", "c");
                    let v = r
                        .get(QuotaKey::PRODUCER_BROKER_BPS)
                        .expect("configured")
                        .limit;
                    assert!(v >= floor, "read {v} after {floor} was acknowledged");
                    assert!(v >= last, "read {v} after reading {last}");
                    last = v;
                    reads += 1;
                }
                reads
            })
        })
        .collect();
    for v in 2..=3_000 {
        set(v);
        acked.store(v, Ordering::Release);
    }
    done.store(true, Ordering::Release);
    for reader in readers {
        assert!(reader.join().expect("a reader saw a stale answer") > 0);
    }
    let r = engine.resolve("u", "c");
    assert_eq!(r.get(QuotaKey::PRODUCER_BROKER_BPS).unwrap().limit, 3_000.0);
}

/// Engines used from one thread keep their answers apart, with the cache on or off.
#[test]
fn engines_sharing_a_thread_keep_their_own_answers() {
    let engines: Vec<Engine> = (0..3)
        .map(|i| {
            let engine = Engine::builder()
                .resolve_cache(i != 2)
                .build()
                .expect("valid settings");
            alter_ok(
                &engine,
                &[Alteration::new(&uc("u", "c")).set("producer_byte_rate", f64::from(i + 1))],
            );
            engine
        })
        .collect();
    for round in 0..3 {
        for (i, engine) in engines.iter().enumerate() {
            let r = engine.resolve("u", "c");
            let want = (i + 1) as f64;
            assert_eq!(
                r.get(QuotaKey::PRODUCER_BROKER_BPS).unwrap().limit,
                want,
                "round {round}"
            );
        }
    }
}

/// Answers never go backwards on a thread, even when some come from its cache and some from the
/// snapshot: a connection resolved from the newest snapshot is never followed by one answered from an
/// older snapshot's cached answer. The writer commits to a store large enough that replacing a snapshot
/// takes a while, so that reads land between a snapshot's publication and the rest of its commit.
#[test]
fn cached_and_fresh_answers_never_go_backwards() {
    let engine = Arc::new(Engine::new());
    let filler: Vec<Alteration> = (0..60_000)
        .map(|i| {
            Alteration::new(&Entity::User(n(&format!("filler{i}")))).set("request_percentage", 1.0)
        })
        .collect();
    alter_ok(&engine, &filler);
    let set = |g: u64| {
        let v = g as f64;
        alter_ok(
            &engine,
            &[
                Alteration::new(&uc("u", "c")).set("producer_byte_rate", v),
                Alteration::new(&Entity::UserClient(d(), d())).set("producer_byte_rate", v),
            ],
        )
    };
    set(1);
    let done = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|r| {
            let (engine, done) = (Arc::clone(&engine), Arc::clone(&done));
            thread::spawn(move || {
                let value = |u: &str, c: &str| {
                    let q = engine.resolve(u, c).get(QuotaKey::PRODUCER_BROKER_BPS);
                    q.expect("configured").limit
                };
                let (mut last, mut i) = (0.0, 0u64);
                while !done.load(Ordering::Acquire) {
                    // A pair this thread has cached, then one it has never resolved, then the first.
                    for v in [
                        value("u", "c"),
                        value(&format!("new{r}-{i}"), "c"),
                        value("u", "c"),
                    ] {
                        assert!(v >= last, "read {v} after reading {last}");
                        last = v;
                    }
                    i += 1;
                }
                i
            })
        })
        .collect();
    for g in 2..=1_500 {
        set(g);
    }
    done.store(true, Ordering::Release);
    for reader in readers {
        assert!(reader.join().expect("a reader's answers went backwards") > 0);
    }
}
