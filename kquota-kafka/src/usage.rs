//! Kafka's quota sensors as the usage kquota-cluster shares: each tick, the Java half hands over
//! every `byte-rate` sensor's windowed rate ([`Reading`]), and [`SensorUsage::tick`] turns those
//! of buckets with a part of a cluster-wide `bps` limit into what a meter's snapshot would say of
//! them ([`BucketSnapshot`]): the rate, the part Kafka enforces, and whether it throttles.
//!
//! Kafka's sensors say nothing of throttles a reporter can count, so a bucket counts as throttled
//! while its windowed rate is at its part: Kafka throttles above the limit and so holds a
//! saturated bucket's rate at it, while an unthrottled broker asks the split for its rate plus a
//! 5 % margin, and so stays at 1/1.05 of its part or below.

use std::collections::HashMap;

use kquota::meter::{BucketOwner, BucketSnapshot};
use kquota::QuotaKey;

use crate::callback::{owner_of, Callback, QuotaType};

/// A bucket whose windowed rate reaches this share of the part it was given counts as throttled.
pub const THROTTLED_AT: f64 = 0.97;
/// A part that moves by more than this share has Kafka read every limit again.
pub const MOVED: f64 = 0.01;

/// [`SensorUsage::tick`]'s answer bits, as the Java half reads them.
pub mod tick {
    /// kquota's log changed the configuration: read every type's mask again.
    pub const CONFIGURATION: i32 = 1;
    /// A part moved: Kafka should read the byte-rate limits again.
    pub const LIMITS: i32 = 2;
}

/// One reading of a Kafka quota sensor: `byte-rate` of a bucket, in bytes/s.
#[derive(Clone, Debug)]
pub struct Reading {
    /// The quota type (only `Produce` and `Fetch` have a `bps` unit).
    pub ty: QuotaType,
    /// The bucket's `user` tag (a sanitized name, or empty).
    pub user: String,
    /// The bucket's `client-id` tag (or empty).
    pub client: String,
    /// The sensor's windowed rate.
    pub rate: f64,
}

/// The readings of the `bps` buckets, from tick to tick: what the previous one gave each bucket.
#[derive(Debug, Default)]
pub struct SensorUsage {
    generation: u64,
    buckets: HashMap<(QuotaKey, BucketOwner), Seen>,
}

#[derive(Clone, Copy, Debug)]
struct Seen {
    part: f64,
    throttles: u64,
}

impl SensorUsage {
    /// The `bps` buckets of `readings` in a meter snapshot's terms, and the [`tick`] bits:
    /// [`tick::CONFIGURATION`] when `callback`'s configuration changed since the last tick,
    /// [`tick::LIMITS`] when a bucket's part moved by more than [`MOVED`].
    pub fn tick(
        &mut self,
        callback: &Callback,
        readings: &[Reading],
    ) -> (i32, Vec<BucketSnapshot>) {
        let mut flags = 0;
        let generation = callback.engine().generation();
        if generation != self.generation {
            self.generation = generation;
            flags |= tick::CONFIGURATION;
        }
        let mut buckets = HashMap::with_capacity(self.buckets.len());
        let mut snapshot = Vec::new();
        for r in readings {
            let Some(key) = r.ty.bps_key() else { continue };
            // Only a bucket whose limit is a part of a cluster-wide one is shared.
            let Some(limit) = callback
                .bucket_limit(r.ty, &r.user, &r.client)
                .filter(|l| l.part_of.is_some())
            else {
                continue;
            };
            let Some(owner) = owner_of(&r.user, &r.client) else {
                continue;
            };
            let id = (key, owner);
            let before = self.buckets.get(&id).copied();
            // Judged against the part Kafka has been enforcing, the one given before.
            let enforced = before.map_or(limit.limit, |b| b.part);
            let rate = if r.rate.is_finite() {
                r.rate.max(0.0)
            } else {
                0.0
            };
            let throttled = rate >= THROTTLED_AT * enforced;
            let throttles = before.map_or(0, |b| b.throttles) + u64::from(throttled);
            if before.is_some_and(|b| (limit.limit - b.part).abs() > MOVED * b.part) {
                flags |= tick::LIMITS;
            }
            snapshot.push(BucketSnapshot {
                key,
                owner: id.1.clone(),
                level: None,
                limit: limit.limit,
                measured: rate,
                recorded_total: 0.0,
                throttle_ms_total: 0,
                throttle_count: throttles,
                bps_view: None,
                clients: Vec::new(),
                clients_other: 0.0,
            });
            buckets.insert(
                id,
                Seen {
                    part: limit.limit,
                    throttles,
                },
            );
        }
        self.buckets = buckets;
        (flags, snapshot)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::callback::Part;
    use kquota::Engine;
    use kquota::{Alteration, Entity, EntityName, SubQuotaPolicy};
    use std::sync::Arc;

    fn reading(client: &str, rate: f64) -> Reading {
        Reading {
            ty: QuotaType::Produce,
            user: String::new(),
            client: client.to_owned(),
            rate,
        }
    }

    /// A callback whose log sets `{client-id=c} producer_byte_rate:bps = 3 MB/s`.
    fn with_bps() -> Arc<Callback> {
        let cb = Arc::new(Callback::new(SubQuotaPolicy::Kafka));
        let log = Arc::new(Engine::new());
        let c = Entity::ClientId(EntityName::named("c").unwrap());
        let results = log.mirror(&[Alteration::new(&c).set(QuotaKey::PRODUCER_BPS, 3_000_000.0)]);
        assert!(results.iter().all(|r| r.error.is_none()));
        cb.attach_log(log);
        cb
    }

    #[test]
    fn only_buckets_with_a_part_of_a_cluster_wide_limit_are_shared() {
        let cb = with_bps();
        cb.update(QuotaType::Produce, Part::Absent, Part::Named("k"), 1_000.0)
            .unwrap();
        let mut state = SensorUsage::default();
        let (flags, snapshot) = state.tick(
            &cb,
            &[
                reading("c", 1_000_000.0),
                reading("k", 900.0),
                reading("none", 5.0),
            ],
        );
        assert_eq!(flags, tick::CONFIGURATION);
        assert_eq!(snapshot.len(), 1);
        let b = &snapshot[0];
        assert_eq!(b.key, QuotaKey::PRODUCER_BPS);
        assert_eq!(b.owner, BucketOwner::ClientId(Arc::from("c")));
        assert_eq!(
            (b.measured, b.limit, b.throttle_count),
            (1_000_000.0, 3_000_000.0, 0)
        );
        // Nothing changed since: no bits.
        assert_eq!(state.tick(&cb, &[reading("c", 1_000_000.0)]).0, 0);
    }

    #[test]
    fn a_bucket_at_its_part_counts_as_throttled_and_a_moved_part_resets() {
        let cb = with_bps();
        let mut state = SensorUsage::default();
        state.tick(&cb, &[reading("c", 2_950_000.0)]);
        let (_, snapshot) = state.tick(&cb, &[reading("c", 2_950_000.0)]);
        assert_eq!(snapshot[0].throttle_count, 2);
        let (_, snapshot) = state.tick(&cb, &[reading("c", 2_000_000.0)]);
        assert_eq!(snapshot[0].throttle_count, 2);
        // Leadership moves the part from the whole limit to a third of it.
        assert!(cb.parts().set_leadership(1, 3));
        let (flags, snapshot) = state.tick(&cb, &[reading("c", 2_000_000.0)]);
        assert_eq!(flags, tick::LIMITS);
        assert!((snapshot[0].limit - 1_000_000.0).abs() < 1.0);
    }
}
