//! This broker's part of a cluster-wide `bps` limit.
//!
//! Kafka's `ClientQuotaManager` meters each bucket on each broker against the limit the callback
//! gives, so a cluster-wide limit `L` must be given as parts that add up to `L`:
//!
//! 1. by what each broker serves: the split of kquota-cluster's usage sharing, once a broker (this
//!    one or another) has reported the bucket and the shared view is fresh;
//! 2. until then, by partition leadership, KIP-257's own example: `L × led / total`, with the
//!    partitions this broker leads out of all it knows of (from `updateClusterMetadata`), never
//!    below the split's floor (a tenth of `L / live`), so that a broker that leads nothing can
//!    still take a client that reaches it;
//! 3. without either, `L` divided by the live brokers.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwapOption;
use kquota::meter::{BpsSplit, BucketOwner};
use kquota::QuotaKey;

/// The floor of a part decided by leadership: this share of `L / live`, the usage split's floor.
const FLOOR: f64 = 0.1;

/// Where a part came from, for `explain`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum PartView {
    /// The usage the brokers share.
    SharedUsage,
    /// Partition leadership: this broker leads `led` of `total` partitions.
    Leadership {
        /// Partitions this broker leads.
        led: u32,
        /// Partitions with a leader.
        total: u32,
    },
    /// The limit divided by the live brokers.
    LiveCount {
        /// The live brokers.
        brokers: u32,
    },
}

/// What a split is asked, and whether it knows a bucket: kquota-cluster's shared split, behind a
/// trait so that the callback is tested without Kafka.
pub trait UsageSplit: BpsSplit {
    /// Whether some live broker reported the bucket (its usage is known).
    fn knows(&self, key: QuotaKey, owner: &BucketOwner) -> bool;
}

#[cfg(feature = "cluster")]
impl UsageSplit for kquota_cluster::SharedSplit {
    fn knows(&self, key: QuotaKey, owner: &BucketOwner) -> bool {
        self.is_fresh() && self.demands(key, owner).is_some()
    }
}

/// The inputs of a part: the usage split (once the broker shares usage) and the leadership.
#[derive(Debug, Default)]
pub struct Parts {
    split: ArcSwapOption<Box<dyn UsageSplit>>,
    /// `led << 32 | total`; 0 until `updateClusterMetadata` says.
    leadership: AtomicU64,
}

impl Parts {
    /// Parts decided by `split` from now on (`None`: no more usage).
    pub fn set_split(&self, split: Option<Box<dyn UsageSplit>>) {
        self.split.store(split.map(Arc::new));
    }

    /// This broker leads `led` of the `total` partitions with a leader. Returns whether that
    /// changed.
    pub fn set_leadership(&self, led: u32, total: u32) -> bool {
        let packed = (u64::from(led.min(total)) << 32) | u64::from(total);
        self.leadership.swap(packed, Ordering::Relaxed) != packed
    }

    /// (led, total), total 0 while unknown.
    pub fn leadership(&self) -> (u32, u32) {
        let packed = self.leadership.load(Ordering::Relaxed);
        ((packed >> 32) as u32, packed as u32)
    }

    /// This broker's part of the cluster-wide `limit` of the bucket of `key` shared by `owner`,
    /// with `live` brokers live, and where it came from.
    pub fn part(
        &self,
        key: QuotaKey,
        owner: &BucketOwner,
        limit: f64,
        live: u32,
    ) -> (f64, PartView) {
        let live = live.max(1);
        if let Some(split) = self.split.load().as_deref() {
            if split.knows(key, owner) {
                if let Some(part) = split.local_limit(key, owner, limit, 0) {
                    return (part, PartView::SharedUsage);
                }
            }
        }
        let (led, total) = self.leadership();
        if total > 0 {
            let floor = FLOOR * limit / f64::from(live);
            let part = (limit * f64::from(led) / f64::from(total)).max(floor);
            return (part, PartView::Leadership { led, total });
        }
        (
            limit / f64::from(live),
            PartView::LiveCount { brokers: live },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[derive(Debug)]
    struct Fixed(Option<f64>);

    impl BpsSplit for Fixed {
        fn local_limit(&self, _: QuotaKey, _: &BucketOwner, _: f64, _: u64) -> Option<f64> {
            self.0
        }
    }

    impl UsageSplit for Fixed {
        fn knows(&self, _: QuotaKey, _: &BucketOwner) -> bool {
            self.0.is_some()
        }
    }

    const L: f64 = 3_000_000.0;
    const KEY: QuotaKey = QuotaKey::PRODUCER_BPS;

    fn owner() -> BucketOwner {
        BucketOwner::ClientId(Arc::from("c"))
    }

    #[test]
    fn the_live_count_divides_until_anything_is_known() {
        let parts = Parts::default();
        assert_eq!(
            parts.part(KEY, &owner(), L, 3),
            (L / 3.0, PartView::LiveCount { brokers: 3 })
        );
        assert_eq!(parts.part(KEY, &owner(), L, 0).0, L);
    }

    #[test]
    fn leadership_divides_until_usage_is_known_and_the_parts_add_up() {
        let parts = Parts::default();
        assert!(parts.set_leadership(7, 10));
        assert!(!parts.set_leadership(7, 10));
        let (p, view) = parts.part(KEY, &owner(), L, 3);
        assert_eq!(view, PartView::Leadership { led: 7, total: 10 });
        assert!((p - 0.7 * L).abs() < 1e-6);
        let sum: f64 = [7, 2, 1]
            .iter()
            .map(|&led| {
                parts.set_leadership(led, 10);
                parts.part(KEY, &owner(), L, 3).0
            })
            .sum();
        assert!((sum - L).abs() < 1e-6, "{sum}");
        // A broker that leads nothing still gets the floor.
        parts.set_leadership(0, 10);
        assert!((parts.part(KEY, &owner(), L, 3).0 - 0.1 * L / 3.0).abs() < 1e-6);
    }

    #[test]
    fn known_usage_decides_and_unknown_buckets_fall_back() {
        let parts = Parts::default();
        parts.set_leadership(1, 2);
        parts.set_split(Some(Box::new(Fixed(Some(2_100_000.0)))));
        assert_eq!(
            parts.part(KEY, &owner(), L, 3),
            (2_100_000.0, PartView::SharedUsage)
        );
        parts.set_split(Some(Box::new(Fixed(None))));
        assert_eq!(
            parts.part(KEY, &owner(), L, 3).1,
            PartView::Leadership { led: 1, total: 2 }
        );
        parts.set_split(None);
        assert_eq!(parts.part(KEY, &owner(), L, 3).0, L / 2.0);
    }
}
