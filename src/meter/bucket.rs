//! One shared rate: its measure (a windowed rate or a token bucket), its lock-free allowance and
//! the totals kept for snapshots.

mod clients;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

use crossbeam_utils::CachePadded;
use parking_lot::Mutex;

use super::allowance::{Allowance, Grants, Stripe};
use super::decision::{BucketOwner, Throttle, ThrottleCause};
use super::rate::{TokenBucket, Window, WindowedRate};
use crate::entity::Level;
use crate::key::{QuotaKey, QuotaType};
pub(super) use clients::ClientTable;

/// The metered state of one bucket.
// Rates hold their samples inline on purpose (one allocation per bucket); token buckets, the small
// variant, meter only controller mutations, so the space they leave unused is rare.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub(super) enum Measure {
    Rate(WindowedRate),
    Tokens(TokenBucket),
}

/// One shared rate. Built with a fixed number of allowance stripes and used unsized, so the stripes
/// live in the bucket's own allocation (see [`Bucket::new`]).
#[derive(Debug)]
pub(super) struct Bucket<A: ?Sized = Allowance> {
    pub(super) key: QuotaKey,
    pub(super) owner: BucketOwner,
    pub(super) level: Option<Level>,
    /// Everything a request updates when it takes the lock.
    pub(super) state: Mutex<BucketState>,
    pub(super) last_ms: AtomicU64,
    /// Set when the bucket is dropped from the map; holders re-resolve.
    pub(super) expired: AtomicBool,
    /// The latest share weight (f64 bits), for `shares` buckets; read without the lock by the split.
    pub(super) weight_bits: AtomicU64,
    /// Which view the latest `bps` limit came from ([`BpsViewCode`]), for snapshots.
    pub(super) bps_view: AtomicU8,
    /// Headroom that requests take without the lock while they cannot be throttled.
    pub(super) allowance: A,
}

/// [`BpsView`](crate::BpsView) as a bucket keeps it: without the instance count (a snapshot
/// reads that from the engine).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(super) enum BpsViewCode {
    None = 0,
    LiveCount = 1,
    SharedUsage = 2,
    Stale = 3,
}

impl BpsViewCode {
    pub(super) fn view(code: u8, instances: u32) -> Option<crate::BpsView> {
        use crate::BpsView;
        match code {
            1 => Some(BpsView::LiveCount { instances }),
            2 => Some(BpsView::SharedUsage),
            3 => Some(BpsView::Stale { instances }),
            _ => None,
        }
    }
}

/// The part of a bucket that each request changes.
#[derive(Debug)]
pub(super) struct BucketState {
    pub(super) measure: Measure,
    /// The allowances granted from this state.
    pub(super) grants: Grants,
    /// The latest limit applied, for snapshots.
    pub(super) limit: f64,
    pub(super) recorded: f64,
    pub(super) throttle_ms_total: u64,
    pub(super) throttle_count: u64,
    /// For a bucket of all of one user's client-ids: which of them recorded what.
    pub(super) clients: ClientTable,
}

impl BucketState {
    /// Folds what requests took from the allowances into the rate; every path that reads or changes
    /// the rate starts here.
    pub(super) fn reclaim(&mut self, allowance: &Allowance) {
        if let Some((value, last_ms)) = allowance.reclaim(&mut self.grants) {
            if let Measure::Rate(r) = &mut self.measure {
                r.fold(value, last_ms);
            }
            self.recorded += value as f64;
        }
    }

    pub(super) fn note(&mut self, limit: f64, recorded: f64, throttle_ms: u64) {
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
            bps_view: AtomicU8::new(BpsViewCode::None as u8),
            allowance,
            state: Mutex::new(BucketState {
                measure,
                grants,
                limit: 0.0,
                recorded: 0.0,
                throttle_ms_total: 0,
                throttle_count: 0,
                clients: ClientTable::default(),
            }),
            last_ms: AtomicU64::new(now),
            expired: AtomicBool::new(false),
            weight_bits: AtomicU64::new(0),
        })
    }
}

impl Bucket {
    /// A bucket with `stripes` allowance stripes (a power of two up to 8; see
    /// `allowance::stripe_count`), active at `now`.
    pub(super) fn new(
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
    pub(super) fn touch(&self, now: u64) {
        if self.last_ms.load(Ordering::Relaxed) != now {
            self.last_ms.store(now, Ordering::Relaxed);
        }
    }

    /// The latest time a request touched the bucket, with or without its lock.
    pub(super) fn last_active(&self) -> u64 {
        self.last_ms
            .load(Ordering::Relaxed)
            .max(self.allowance.last_ms())
    }

    pub(super) fn cause(&self) -> ThrottleCause {
        ThrottleCause {
            key: self.key,
            owner: self.owner.clone(),
            level: self.level,
        }
    }

    /// A throttle of `ms` caused by this bucket.
    pub(super) fn throttle(&self, ms: u64) -> Throttle {
        Throttle {
            ms,
            cause: (ms > 0).then(|| self.cause()),
        }
    }
}
