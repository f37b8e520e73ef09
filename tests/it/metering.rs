//! Metering: Kafka's worked examples, bucket sharing, convergence, alterations reaching live buckets.

use std::sync::Arc;
use std::thread;

use kquota::meter::{BucketOwner, ClientMeter, Clock, ManualClock, Meter, MeterConfig};
use kquota::{Alteration, BpsView, BrokerLimit, Engine, Entity, QuotaKey};

use kquota_testkit::{alter_ok, d, n, uc};

fn setup(engine: Engine, batch: &[Alteration]) -> (Arc<Engine>, Arc<ManualClock>, Meter) {
    alter_ok(&engine, batch);
    let engine = Arc::new(engine);
    let clock = Arc::new(ManualClock::new(1_000_000));
    let meter = Meter::with_clock(Arc::clone(&engine), clock.clone(), MeterConfig::default());
    (engine, clock, meter)
}

fn user(name: &str) -> Alteration {
    Alteration::new(&Entity::User(n(name)))
}

const T0: u64 = 1_000_000;

#[test]
fn kafka_worked_example_6300_bytes_over_10_5_s() {
    let (_, clock, meter) = setup(Engine::new(), &[user("u").set("producer_byte_rate", 500.0)]);
    let mut c = meter.client("u", "c");
    for i in 0..=20u64 {
        clock.set(T0 + i * 500);
        c.produce(300);
    }
    clock.set(T0 + 10_500);
    let t = c.produce(0);
    assert_eq!(t.ms, 2_100);
    let cause = t.cause.expect("throttled");
    assert_eq!(cause.key, QuotaKey::PRODUCER_BROKER_BPS);
    assert_eq!(cause.owner, BucketOwner::User("u".into()));
}

#[test]
fn window_expiry_forgets_old_traffic() {
    let (_, clock, meter) = setup(Engine::new(), &[user("u").set("consumer_byte_rate", 100.0)]);
    let mut c = meter.client("u", "c");
    assert!(c.fetch(1_000_000).is_throttled());
    clock.advance(11_000);
    assert_eq!(c.fetch(100).ms, 0);
}

#[test]
fn request_percentage_throttle_is_capped_at_one_window() {
    let (_, _, meter) = setup(Engine::new(), &[user("u").set("request_percentage", 1.0)]);
    let mut c = meter.client("u", "c");
    // 5 s of handler time against 1 % of a thread: far over, but capped at 1 s.
    let t = c.request_time(5_000_000_000);
    assert_eq!(t.ms, 1_000);
    assert_eq!(t.cause.unwrap().key, QuotaKey::REQUEST_PERCENTAGE);
}

#[test]
fn mutation_token_bucket_strict() {
    let (_, clock, meter) = setup(
        Engine::new(),
        &[user("u").set("controller_mutation_rate", 2.0)],
    );
    let mut c = meter.client("u", "c");
    // Burst of 2/s × 11 s = 22 tokens; 30 mutations leave a debt of 8 (4 s), but an accepted strict
    // request is not throttled (Kafka's StrictControllerMutationQuota).
    let first = c.mutations(30);
    assert!(first.accepted);
    assert_eq!(first.throttle.ms, 0);
    clock.advance(1_000);
    let refused = c.mutations(1);
    assert!(!refused.accepted, "strict mode refuses while in debt");
    assert_eq!(refused.throttle.ms, 3_000);
    clock.advance(3_000);
    // Repaid: accepted, leaving a debt of 1 token that only the next request would see.
    let later = c.mutations(1);
    assert!(later.accepted);
    assert_eq!(later.throttle.ms, 0);
    let again = c.mutations(1);
    assert!(!again.accepted);
    assert_eq!(again.throttle.ms, 500);
}

#[test]
fn mutation_token_bucket_permissive() {
    let engine = Engine::new();
    alter_ok(&engine, &[user("u").set("controller_mutation_rate", 2.0)]);
    let clock = Arc::new(ManualClock::new(T0));
    let config = MeterConfig::builder()
        .strict_mutations(false)
        .build()
        .unwrap();
    let meter = Meter::with_clock(Arc::new(engine), clock.clone(), config);
    let mut c = meter.client("u", "c");
    assert_eq!(c.mutations(30).throttle.ms, 4_000);
    clock.advance(1_000);
    let d = c.mutations(1);
    assert!(
        d.accepted,
        "permissive mode records and throttles afterwards"
    );
    assert_eq!(d.throttle.ms, 3_500);
}

#[test]
fn mutations_as_chooses_strictness_per_request() {
    let (_, clock, meter) = setup(
        Engine::new(),
        &[user("u").set("controller_mutation_rate", 2.0)],
    );
    let mut c = meter.client("u", "c");
    assert_eq!(c.mutations_as(30, true).throttle.ms, 0);
    clock.advance(1_000);
    // An old request version is never refused, even by a strict meter: it is recorded and throttled.
    let old = c.mutations_as(1, false);
    assert!(old.accepted);
    assert_eq!(old.throttle.ms, 3_500);
    let new = c.mutations_as(1, true);
    assert!(!new.accepted, "in debt, a strict request is refused");
    assert_eq!(new.throttle.ms, 3_500, "and nothing is recorded");
}

#[test]
fn refund_fetch_takes_back_a_throttled_responses_bytes() {
    let (_, clock, meter) = setup(
        Engine::new(),
        &[user("u").set("consumer_byte_rate", 1_000.0)],
    );
    let mut c = meter.client("u", "c");
    assert_eq!(c.fetch(5_000).ms, 0);
    clock.advance(1_000);
    let throttled = c.fetch(50_000);
    assert!(throttled.is_throttled());
    c.refund_fetch(50_000);
    // With the refund, the window holds only the first 5,000 bytes: no throttle.
    assert_eq!(c.fetch(0).ms, 0);
    let bucket = &meter.snapshot()[0];
    assert_eq!(bucket.recorded_total, 5_000.0);
    assert_eq!(
        bucket.throttle_count, 1,
        "the throttle handed out still counts"
    );
}

#[test]
fn max_fetch_bytes_is_limit_times_nine_windows_plus_one() {
    let (_, _, meter) = setup(
        Engine::new(),
        &[
            user("u").set("consumer_byte_rate", 9_000.0),
            Alteration::new(&uc("u", "c")).set("consumer_byte_rate:bps", 5_000.0),
        ],
    );
    // Kafka: limit × (samples − 1) × window; when two units apply, the smaller bucket wins.
    assert_eq!(meter.client("u", "c").max_fetch_bytes(), Some(5_000 * 10));
    assert_eq!(
        meter.client("u", "other").max_fetch_bytes(),
        Some(9_000 * 10)
    );
    assert_eq!(meter.client("v", "c").max_fetch_bytes(), None);
}

/// Sends `bytes` through `c` and returns the owners of the buckets that recorded it.
fn owners_after(meter: &Meter) -> Vec<(BucketOwner, f64)> {
    meter
        .snapshot()
        .into_iter()
        .map(|b| (b.owner, b.recorded_total))
        .collect()
}

#[test]
fn level_3_is_shared_by_all_of_a_users_clients() {
    let (_, _, meter) = setup(Engine::new(), &[user("u").set("producer_byte_rate", 1e9)]);
    meter.client("u", "a").produce(10);
    meter.client("u", "b").produce(5);
    meter.client("u", "").produce(1);
    assert_eq!(
        owners_after(&meter),
        vec![(BucketOwner::User("u".into()), 16.0)]
    );
}

#[test]
fn levels_1_2_4_5_are_per_user_and_client() {
    for entity in [
        Entity::UserClient(n("u"), n("a")),
        Entity::UserClient(n("u"), d()),
        Entity::UserClient(d(), n("a")),
        Entity::UserClient(d(), d()),
    ] {
        let (_, _, meter) = setup(
            Engine::new(),
            &[Alteration::new(&entity).set("producer_byte_rate", 1e9)],
        );
        meter.client("u", "a").produce(10);
        meter.client("u", "a").produce(1);
        let mut owners = owners_after(&meter);
        owners.retain(|(o, _)| *o == BucketOwner::UserClient("u".into(), "a".into()));
        assert_eq!(
            owners,
            vec![(BucketOwner::UserClient("u".into(), "a".into()), 11.0)],
            "{entity}"
        );
    }
    // Level 5 gives every (user, client) its own bucket.
    let (_, _, meter) = setup(
        Engine::new(),
        &[Alteration::new(&Entity::UserClient(d(), d())).set("producer_byte_rate", 1e9)],
    );
    meter.client("u", "a").produce(1);
    meter.client("u", "b").produce(1);
    meter.client("v", "a").produce(1);
    assert_eq!(meter.bucket_count(), 3);
}

#[test]
fn levels_7_and_8_are_shared_across_users() {
    for entity in [Entity::ClientId(n("c")), Entity::ClientId(d())] {
        let (_, _, meter) = setup(
            Engine::new(),
            &[Alteration::new(&entity).set("producer_byte_rate", 1e9)],
        );
        meter.client("alice", "c").produce(7);
        meter.client("bob", "c").produce(3);
        assert_eq!(
            owners_after(&meter),
            vec![(BucketOwner::ClientId("c".into()), 10.0)],
            "{entity}"
        );
    }
}

#[test]
fn ip_connection_rate() {
    let (_, clock, meter) = setup(
        Engine::new(),
        &[Alteration::raw([("ip", None::<String>)]).set("connection_creation_rate", 10.0)],
    );
    // 10/s over the padded 10 s window: 100 connections fit; the 101st makes 10.1/s, 1% over: 100 ms.
    for _ in 0..100 {
        assert_eq!(meter.connection("10.0.0.1").ms, 0);
    }
    let t = meter.connection("10.0.0.1");
    assert_eq!(t.ms, 100);
    assert_eq!(t.cause.unwrap().owner, BucketOwner::Ip("10.0.0.1".into()));
    // A refused connection is not counted (Kafka unrecords it): the next one is throttled the same.
    assert_eq!(meter.connection("10.0.0.1").ms, 100);
    // Another IP has its own bucket.
    assert_eq!(meter.connection("10.0.0.2").ms, 0);
    clock.advance(20_000);
    assert_eq!(meter.connection("10.0.0.1").ms, 0);
}

#[test]
fn alterations_reach_live_connections() {
    let (engine, _, meter) = setup(Engine::new(), &[user("u").set("producer_byte_rate", 100.0)]);
    let mut c = meter.client("u", "c");
    assert!(c.produce(100_000).is_throttled());
    // Removing the quota stops the throttling on the very next request.
    alter_ok(&engine, &[user("u").remove("producer_byte_rate")]);
    assert_eq!(c.produce(100_000).ms, 0);
    // A new limit applies at once, in a fresh bucket for the new level.
    alter_ok(
        &engine,
        &[Alteration::new(&uc("u", "c")).set("producer_byte_rate", 100.0)],
    );
    let t = c.produce(100_000);
    assert!(t.is_throttled());
    assert_eq!(
        t.cause.unwrap().owner,
        BucketOwner::UserClient("u".into(), "c".into())
    );
}

#[test]
fn a_zero_remainder_throttles_at_the_maximum() {
    let (_, _, meter) = setup(
        Engine::new(),
        &[
            user("u").set("producer_byte_rate", 100.0),
            Alteration::new(&uc("u", "a")).set("producer_byte_rate", 100.0),
        ],
    );
    assert_eq!(meter.client("u", "other").produce(1).ms, 11_000);
    assert_eq!(meter.client("u", "a").produce(1).ms, 0);
}

#[test]
fn idle_buckets_are_dropped_after_an_hour() {
    let (_, clock, meter) = setup(Engine::new(), &[user("u").set("producer_byte_rate", 1e6)]);
    let mut c = meter.client("u", "c");
    c.produce(1);
    clock.advance(3_599_000);
    assert_eq!(meter.sweep(), 0);
    clock.advance(2_000);
    assert_eq!(meter.sweep(), 1);
    assert_eq!(meter.bucket_count(), 0);
    // The connection notices and meters into a fresh bucket.
    c.produce(5);
    assert_eq!(
        owners_after(&meter),
        vec![(BucketOwner::User("u".into()), 5.0)]
    );
}

#[test]
fn two_threads_lose_no_bytes() {
    let (_, _, meter) = setup(
        Engine::new(),
        &[
            user("shared").set("producer_byte_rate", 1e12),
            Alteration::new(&uc("solo", "a")).set("producer_byte_rate", 1e12),
            Alteration::new(&uc("solo", "b")).set("producer_byte_rate", 1e12),
        ],
    );
    let handles: Vec<_> = ["a", "b"]
        .into_iter()
        .map(|client| {
            let meter = meter.clone();
            thread::spawn(move || {
                let mut shared = meter.client("shared", client);
                let mut solo = meter.client("solo", client);
                let mut sent = 0u64;
                for i in 0..50_000u64 {
                    let bytes = 1 + i % 97;
                    shared.produce(bytes);
                    solo.produce(bytes);
                    sent += bytes;
                }
                sent
            })
        })
        .collect();
    let sent: u64 = handles.into_iter().map(|h| h.join().unwrap()).sum();
    let snapshot = meter.snapshot();
    let total = |owner: &BucketOwner| -> f64 {
        snapshot
            .iter()
            .filter(|b| &b.owner == owner)
            .map(|b| b.recorded_total)
            .sum()
    };
    assert_eq!(total(&BucketOwner::User("shared".into())), sent as f64);
    let solo = total(&BucketOwner::UserClient("solo".into(), "a".into()))
        + total(&BucketOwner::UserClient("solo".into(), "b".into()));
    assert_eq!(solo, sent as f64);
}

/// Simulates clients that send `bytes` every 10 ms unless throttled, honouring every throttle, for
/// `seconds`; returns each client's rate over the second half.
fn simulate(
    clock: &ManualClock,
    clients: &mut [ClientMeter],
    bytes: u64,
    seconds: u64,
) -> Vec<f64> {
    let start = clock.now_ms();
    let end = start + seconds * 1000;
    let half = start + seconds * 500;
    let mut next: Vec<u64> = vec![start; clients.len()];
    let mut sent = vec![0u64; clients.len()];
    loop {
        let (i, &t) = next.iter().enumerate().min_by_key(|(_, t)| **t).unwrap();
        if t >= end {
            break;
        }
        clock.set(t);
        let throttle = clients[i].produce(bytes);
        if t >= half {
            sent[i] += bytes;
        }
        next[i] = t + throttle.ms.max(10);
    }
    sent.iter()
        .map(|s| *s as f64 / ((end - half) as f64 / 1000.0))
        .collect()
}

fn within_5_percent(actual: f64, expected: f64) {
    let err = (actual - expected).abs() / expected;
    assert!(
        err <= 0.05,
        "rate {actual:.0} is {:.1}% from {expected}",
        err * 100.0
    );
}

#[test]
fn converges_to_a_broker_bps_limit() {
    let (_, clock, meter) = setup(
        Engine::new(),
        &[user("u").set("producer_byte_rate", 100_000.0)],
    );
    let rates = simulate(&clock, &mut [meter.client("u", "c")], 10_000, 600);
    within_5_percent(rates[0], 100_000.0);
}

#[test]
fn converges_to_a_bps_limit_over_three_brokers() {
    let engine = Engine::builder().broker_count(3).build().unwrap();
    let (_, clock, meter) = setup(
        engine,
        &[user("u").set("producer_byte_rate:bps", 300_000.0)],
    );
    let rates = simulate(&clock, &mut [meter.client("u", "c")], 10_000, 600);
    within_5_percent(rates[0], 100_000.0);
}

#[test]
fn shares_split_capacity_two_to_one() {
    let engine = Engine::builder()
        .producer_capacity(300_000.0)
        .build()
        .unwrap();
    let (_, clock, meter) = setup(
        engine,
        &[
            user("a").set("producer_byte_rate:shares", 200.0),
            user("b").set("producer_byte_rate:shares", 100.0),
        ],
    );
    let mut clients = [meter.client("a", "x"), meter.client("b", "y")];
    let rates = simulate(&clock, &mut clients, 10_000, 600);
    within_5_percent(rates[0], 200_000.0);
    within_5_percent(rates[1], 100_000.0);
}

#[test]
fn kip55_remainder_is_shared_by_the_other_clients() {
    let (_, clock, meter) = setup(
        Engine::new(),
        &[
            user("u").set("producer_byte_rate", 300_000.0),
            Alteration::new(&uc("u", "c1")).set("producer_byte_rate", 100_000.0),
        ],
    );
    let mut clients = [
        meter.client("u", "c1"),
        meter.client("u", "c2"),
        meter.client("u", "c3"),
    ];
    let rates = simulate(&clock, &mut clients, 10_000, 600);
    within_5_percent(rates[0], 100_000.0);
    within_5_percent(rates[1] + rates[2], 200_000.0);
}

/// A split that gives alice's bucket a fixed part, and nobody else's.
#[derive(Debug)]
struct FixedSplit;

impl kquota::meter::BpsSplit for FixedSplit {
    fn local_limit(
        &self,
        key: QuotaKey,
        owner: &BucketOwner,
        limit: f64,
        _now: u64,
    ) -> Option<f64> {
        assert_eq!(key, QuotaKey::PRODUCER_BPS);
        (*owner == BucketOwner::User("alice".into())).then_some(limit * 0.7)
    }
}

#[test]
fn a_bps_split_decides_the_local_part_and_none_falls_back_to_the_instance_count() {
    let engine = Engine::builder().broker_count(4).build().unwrap();
    let (_, _, meter) = setup(
        engine,
        &[
            user("alice").set("producer_byte_rate:bps", 10_000.0),
            user("bob").set("producer_byte_rate:bps", 10_000.0),
        ],
    );
    assert!(meter.set_bps_split(Arc::new(FixedSplit)));
    assert!(
        !meter.set_bps_split(Arc::new(FixedSplit)),
        "the first split stays"
    );
    meter.client("alice", "c").produce(1);
    meter.client("bob", "c").produce(1);
    let limits: Vec<_> = meter
        .snapshot()
        .into_iter()
        .map(|b| (b.owner.to_string(), b.limit, b.bps_view))
        .collect();
    assert_eq!(
        limits,
        vec![
            (
                "(user=alice)".to_owned(),
                7_000.0,
                Some(BpsView::SharedUsage)
            ),
            (
                "(user=bob)".to_owned(),
                2_500.0,
                Some(BpsView::Stale { instances: 4 })
            )
        ]
    );
}

#[test]
fn describe_says_which_view_each_bps_limit_came_from() {
    let engine = Engine::builder().broker_count(4).build().unwrap();
    let (engine, _, meter) = setup(
        engine,
        &[
            user("alice").set("producer_byte_rate:bps", 10_000.0),
            user("bob")
                .set("producer_byte_rate:bps", 10_000.0)
                .set("consumer_byte_rate", 5_000.0),
        ],
    );
    let view = |d: &[kquota::DescribedQuota], key: QuotaKey| {
        let q = d.iter().find(|q| q.key == key).expect("described");
        (q.broker_limit, q.bps_view)
    };
    // Without shared usage: the limit divided by the live count, engine and meter alike.
    let divided = (
        BrokerLimit::Rate(2_500.0),
        Some(BpsView::LiveCount { instances: 4 }),
    );
    let alice = meter.describe(Some("alice"), Some("c"), false);
    assert_eq!(view(&alice, QuotaKey::PRODUCER_BPS), divided);
    assert_eq!(engine.describe(Some("alice"), Some("c"), false), alice);
    // With it: the split's part where it answers, the fallback (and why) where it declines.
    assert!(meter.set_bps_split(Arc::new(FixedSplit)));
    let alice = meter.describe(Some("alice"), Some("c"), false);
    assert_eq!(
        view(&alice, QuotaKey::PRODUCER_BPS),
        (BrokerLimit::Rate(7_000.0), Some(BpsView::SharedUsage))
    );
    let bob = meter.describe(Some("bob"), Some("c"), false);
    assert_eq!(
        view(&bob, QuotaKey::PRODUCER_BPS),
        (
            BrokerLimit::Rate(2_500.0),
            Some(BpsView::Stale { instances: 4 })
        )
    );
    // Other units have no view.
    assert_eq!(
        view(&bob, QuotaKey::CONSUMER_BROKER_BPS),
        (BrokerLimit::Rate(5_000.0), None)
    );
    assert_eq!(
        BpsView::Stale { instances: 4 }.to_string(),
        "shared usage too old: divided by 4 live instances"
    );
}

#[test]
fn produce_room_is_what_the_buckets_take_before_a_throttle() {
    let (_, clock, meter) = setup(
        Engine::new(),
        &[
            user("u").set("producer_byte_rate", 1_000.0),
            Alteration::new(&uc("u", "c")).set("producer_byte_rate:bps", 500.0),
        ],
    );
    assert_eq!(
        meter.client("v", "c").produce_room(),
        None,
        "no producer quota"
    );
    let mut other = meter.client("u", "other");
    // A fresh bucket's rate is taken over (samples - 1) windows: 10 s at the default settings.
    assert_eq!(other.produce_room(), Some(10_000));
    // The least of the two buckets that apply.
    let mut c = meter.client("u", "c");
    assert_eq!(c.produce_room(), Some(5_000));
    assert_eq!(c.produce(3_000).ms, 0);
    assert_eq!(c.produce_room(), Some(2_000));
    // The room taken whole is still answered with no throttle; anything beyond it is throttled.
    assert_eq!(c.produce(2_000).ms, 0);
    assert_eq!(c.produce_room(), Some(0));
    assert!(c.produce(100).is_throttled());
    assert_eq!(c.produce_room(), Some(0), "over the limit, no room");
    // The window moves on: room again.
    clock.advance(20_000);
    assert_eq!(c.produce_room(), Some(5_000));
}

/// The bucket of `owner` and `key` in a snapshot of `meter`.
fn snapshot_of(meter: &Meter, owner: &BucketOwner, key: QuotaKey) -> kquota::meter::BucketSnapshot {
    meter
        .snapshot()
        .into_iter()
        .find(|b| &b.owner == owner && b.key == key)
        .expect("bucket")
}

fn close_to(actual: f64, expected: f64) -> bool {
    (actual - expected).abs() <= 1e-9 * expected.abs().max(1.0)
}

#[test]
fn a_users_bucket_says_which_client_ids_made_its_rate() {
    let (_, clock, meter) = setup(
        Engine::new(),
        &[
            user("u").set("producer_byte_rate", 1e9),
            Alteration::new(&Entity::ClientId(d())).set("consumer_byte_rate", 1e9),
        ],
    );
    let (mut a, mut b) = (meter.client("u", "a"), meter.client("u", "b"));
    for _ in 0..20 {
        a.produce(3_000);
        b.produce(1_000);
        let _ = a.fetch(500);
        clock.advance(1_000);
    }
    let produce = snapshot_of(
        &meter,
        &BucketOwner::User("u".into()),
        QuotaKey::PRODUCER_BROKER_BPS,
    );
    assert!(produce.measured > 0.0);
    let [(first, share_a), (second, share_b)] = produce.clients.as_slice() else {
        panic!("two client-ids: {:?}", produce.clients);
    };
    assert_eq!((&**first, &**second), ("a", "b"));
    assert!(close_to(*share_a, 0.75 * produce.measured), "{produce:?}");
    assert!(close_to(*share_b, 0.25 * produce.measured), "{produce:?}");
    assert_eq!(produce.clients_other, 0.0);
    // A bucket of one client-id for every user is not split by client-id.
    let fetch = snapshot_of(
        &meter,
        &BucketOwner::ClientId("a".into()),
        QuotaKey::CONSUMER_BROKER_BPS,
    );
    assert!(fetch.measured > 0.0 && fetch.clients.is_empty());

    // b stops; what it recorded fades with the window, and a's part grows to all of it.
    for _ in 0..120 {
        a.produce(3_000);
        clock.advance(1_000);
    }
    let produce = snapshot_of(
        &meter,
        &BucketOwner::User("u".into()),
        QuotaKey::PRODUCER_BROKER_BPS,
    );
    assert_eq!(produce.clients.len(), 1, "{produce:?}");
    assert!(close_to(produce.clients[0].1, produce.measured));
}

#[test]
fn a_connection_attributes_once_a_sample_and_when_it_closes() {
    let (_, clock, meter) = setup(Engine::new(), &[user("u").set("producer_byte_rate", 1e9)]);
    let shares = |meter: &Meter| {
        let s = snapshot_of(
            meter,
            &BucketOwner::User("u".into()),
            QuotaKey::PRODUCER_BROKER_BPS,
        );
        s.clients
            .iter()
            .map(|(c, rate)| (c.to_string(), rate / s.measured))
            .collect::<Vec<_>>()
    };
    let mut a = meter.client("u", "a");
    a.produce(1_000);
    let mut b = meter.client("u", "b");
    b.produce(1_000);
    // Within the same sample, a's next bytes wait in its meter.
    a.produce(2_000);
    assert_eq!(shares(&meter), [("a".into(), 0.5), ("b".into(), 0.5)]);
    // A sample later they are due; what was attributed before has decayed by e^(-1 s / 5.5 s),
    // half the quota window.
    clock.advance(1_000);
    let kept = (-1.0f64 / 5.5).exp() * 1_000.0;
    a.produce(1_000);
    let (a_total, b_total) = (kept + 3_000.0, kept);
    let share = |x: f64| x / (a_total + b_total);
    let close = |got: Vec<(String, f64)>, want: [(&str, f64); 2]| {
        assert_eq!(got.len(), 2, "{got:?}");
        for ((c, s), (wc, ws)) in got.iter().zip(want) {
            assert!(
                c == wc && (s - ws).abs() < 1e-12,
                "{got:?} against {want:?}"
            );
        }
    };
    close(
        shares(&meter),
        [("a", share(a_total)), ("b", share(b_total))],
    );
    // b's first request of the sample is attributed at once, its next when it closes.
    b.produce(4_000);
    b.produce(500);
    drop(b);
    let b_total = b_total + 4_500.0;
    let share = |x: f64| x / (a_total + b_total);
    close(
        shares(&meter),
        [("b", share(b_total)), ("a", share(a_total))],
    );
}

#[test]
fn a_flood_of_client_ids_stays_bounded_and_keeps_the_busy_one() {
    let (_, clock, meter) = setup(Engine::new(), &[user("u").set("producer_byte_rate", 1e12)]);
    let mut big = meter.client("u", "big");
    for second in 0..50 {
        big.produce(1_000_000);
        for i in 0..200 {
            meter
                .client("u", &format!("flood-{second}-{i}"))
                .produce(100);
        }
        clock.advance(1_000);
    }
    let s = snapshot_of(
        &meter,
        &BucketOwner::User("u".into()),
        QuotaKey::PRODUCER_BROKER_BPS,
    );
    assert!(s.clients.len() <= 16, "{}", s.clients.len());
    assert_eq!(&*s.clients[0].0, "big");
    // 1,000,000 of every 1,020,000 bytes.
    assert!(close_to(s.clients[0].1, s.measured * 1e6 / 1.02e6), "{s:?}");
    let listed: f64 = s.clients.iter().map(|(_, r)| r).sum();
    assert!(s.clients_other > 0.0);
    assert!(close_to(listed + s.clients_other, s.measured), "{s:?}");
    assert_eq!(meter.bucket_count(), 1);
}
