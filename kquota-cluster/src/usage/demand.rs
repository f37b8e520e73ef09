//! [`Demand`]: one instance's recent use of one `bps` bucket, what the split decides from and
//! what the publisher compares to decide what goes out again.

/// One instance's recent use of one bucket: its windowed rate, the limit it last applied, and
/// whether it was throttled lately (see [`UsageTracker`](crate::UsageTracker)).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Demand {
    /// The measured rate, in bytes/s.
    pub rate: f64,
    /// The limit the instance last applied to the bucket, in bytes/s (0: unknown).
    pub limit: f64,
    /// Whether the bucket throttled lately: its demand is more than it was given.
    pub throttled: bool,
}

impl Demand {
    /// No use at all: an instance without the bucket, or one that has not reported it.
    pub const IDLE: Demand = Demand {
        rate: 0.0,
        limit: 0.0,
        throttled: false,
    };

    /// A demand of `rate` bytes/s under a limit of `limit` bytes/s (values that are negative or
    /// not finite count as 0).
    pub fn new(rate: f64, limit: f64, throttled: bool) -> Demand {
        Demand {
            rate: sane_rate(rate),
            limit: sane_rate(limit),
            throttled,
        }
    }
}

/// The most a rate is taken to be: beyond any real link, and far from overflowing a sum.
const MAX_RATE: f64 = 1e18;

/// A rate read from another instance, made safe to add up: not a number, negative or infinite
/// counts as nothing, and huge ones are capped.
pub(crate) fn sane_rate(rate: f64) -> f64 {
    if rate.is_finite() && rate > 0.0 {
        rate.min(MAX_RATE)
    } else {
        0.0
    }
}
