//! The meter's settings, checked once by their builder.

use std::time::Duration;

use super::rate::Window;

/// Settings of a [`Meter`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MeterConfig {
    /// Samples in a quota window (Kafka's `quota.window.num`, default 11).
    pub samples: u32,
    /// Length of one sample (Kafka's `quota.window.size.seconds`, default 1 s).
    pub sample_window: Duration,
    /// Buckets idle this long are dropped (default one hour, as Kafka's sensors expire).
    pub idle_expiry: Duration,
    /// The throttle for a bucket whose limit is 0 (a KIP-55 remainder of nothing); default
    /// `samples × sample_window`.
    pub max_throttle: Option<Duration>,
    /// Controller mutations: refuse a request while the bucket is in debt (Kafka's strict mode, used for
    /// CreateTopics and friends from v6) instead of only throttling after recording (permissive mode).
    pub strict_mutations: bool,
}

impl Default for MeterConfig {
    fn default() -> Self {
        MeterConfig {
            samples: 11,
            sample_window: Duration::from_secs(1),
            idle_expiry: Duration::from_secs(3600),
            max_throttle: None,
            strict_mutations: true,
        }
    }
}

impl MeterConfig {
    pub(super) fn window(&self) -> Window {
        Window {
            samples: self.samples.max(1) as usize,
            window_ms: (self.sample_window.as_millis() as u64).max(1),
        }
    }

    pub(super) fn max_throttle_ms(&self) -> u64 {
        match self.max_throttle {
            Some(d) => d.as_millis() as u64,
            None => self.window().samples as u64 * self.window().window_ms,
        }
    }
}
