//! The meter's settings, checked once by their builder: a [`MeterConfig`] always holds settings the
//! meter can use as given, so nothing is clamped or rounded later.

use std::fmt;
use std::time::Duration;

use super::rate::Window;

/// Settings of a [`Meter`](super::Meter). The default is Kafka's; [`MeterConfig::builder`] changes and
/// checks them.
///
/// ```
/// use std::time::Duration;
/// use kquota::meter::MeterConfig;
///
/// let config = MeterConfig::builder()
///     .window_samples(11)
///     .window_size(Duration::from_secs(1))
///     .strict_mutations(false)
///     .build()?;
/// assert_eq!(config.max_throttle(), Duration::from_secs(11));
/// assert!(MeterConfig::builder().window_samples(0).build().is_err());
/// # Ok::<(), kquota::meter::MeterConfigError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MeterConfig {
    window_samples: u32,
    window_size: Duration,
    idle_expiry: Duration,
    /// `None`: the whole window, `window_samples × window_size`.
    max_throttle: Option<Duration>,
    strict_mutations: bool,
}

impl Default for MeterConfig {
    /// Kafka's defaults: 11 samples of 1 s, buckets idle for an hour dropped, strict mutations.
    fn default() -> Self {
        MeterConfig {
            window_samples: 11,
            window_size: Duration::from_secs(1),
            idle_expiry: Duration::from_secs(3600),
            max_throttle: None,
            strict_mutations: true,
        }
    }
}

impl MeterConfig {
    /// A builder starting from the defaults.
    pub fn builder() -> MeterConfigBuilder {
        MeterConfigBuilder::default()
    }

    /// Samples in a quota window (Kafka's `quota.window.num`).
    pub fn window_samples(&self) -> u32 {
        self.window_samples
    }

    /// Length of one sample (Kafka's `quota.window.size.seconds`).
    pub fn window_size(&self) -> Duration {
        self.window_size
    }

    /// How long a bucket may stay idle before it is dropped.
    pub fn idle_expiry(&self) -> Duration {
        self.idle_expiry
    }

    /// The throttle for a bucket whose limit is 0 (a KIP-55 remainder of nothing).
    pub fn max_throttle(&self) -> Duration {
        self.max_throttle
            .unwrap_or(self.window_size * self.window_samples)
    }

    /// Whether a controller-mutation request is refused while its bucket is in debt.
    pub fn strict_mutations(&self) -> bool {
        self.strict_mutations
    }

    /// The window in the meter's terms. Exact: the builder checked that every length is a whole
    /// number of milliseconds and that the window fits in a `u64` of them.
    pub(super) fn window(&self) -> Window {
        Window {
            samples: self.window_samples as usize,
            window_ms: self.window_size.as_millis() as u64,
        }
    }

    pub(super) fn max_throttle_ms(&self) -> u64 {
        self.max_throttle().as_millis() as u64
    }

    pub(super) fn idle_expiry_ms(&self) -> u64 {
        self.idle_expiry.as_millis() as u64
    }
}

/// Builds a [`MeterConfig`]: every setting starts at its default, and [`build`](Self::build) checks
/// them all at once.
#[derive(Clone, Copy, Debug, Default)]
#[must_use = "a builder does nothing until it is built"]
pub struct MeterConfigBuilder {
    /// Unchecked until `build`.
    config: MeterConfig,
}

impl MeterConfigBuilder {
    /// Samples in a quota window (Kafka's `quota.window.num`, default 11); at least 1.
    pub fn window_samples(mut self, samples: u32) -> Self {
        self.config.window_samples = samples;
        self
    }

    /// Length of one sample (Kafka's `quota.window.size.seconds`, default 1 s): a whole number of
    /// milliseconds, at least 1 ms.
    pub fn window_size(mut self, size: Duration) -> Self {
        self.config.window_size = size;
        self
    }

    /// Buckets idle this long are dropped (default one hour, as Kafka's sensors expire): a whole
    /// number of milliseconds, at least 1 ms.
    pub fn idle_expiry(mut self, expiry: Duration) -> Self {
        self.config.idle_expiry = expiry;
        self
    }

    /// The throttle for a bucket whose limit is 0 (default: the whole window, `window_samples ×
    /// window_size`): a whole number of milliseconds, at least 1 ms.
    pub fn max_throttle(mut self, throttle: Duration) -> Self {
        self.config.max_throttle = Some(throttle);
        self
    }

    /// Controller mutations (default `true`): refuse a request while the bucket is in debt (Kafka's
    /// strict mode, used for CreateTopics and friends from v6) instead of only throttling after
    /// recording (permissive mode).
    pub fn strict_mutations(mut self, strict: bool) -> Self {
        self.config.strict_mutations = strict;
        self
    }

    /// Checks the settings.
    pub fn build(self) -> Result<MeterConfig, MeterConfigError> {
        let c = self.config;
        if c.window_samples == 0 {
            return Err(MeterConfigError::ZeroWindowSamples);
        }
        let window_ms =
            whole_ms(c.window_size).ok_or(MeterConfigError::WindowSize(c.window_size))?;
        // Throttles and expiries are computed from the whole window in milliseconds.
        if window_ms.checked_mul(u64::from(c.window_samples)).is_none() {
            return Err(MeterConfigError::WindowTooLong {
                window_samples: c.window_samples,
                window_size: c.window_size,
            });
        }
        whole_ms(c.idle_expiry).ok_or(MeterConfigError::IdleExpiry(c.idle_expiry))?;
        if let Some(throttle) = c.max_throttle {
            whole_ms(throttle).ok_or(MeterConfigError::MaxThrottle(throttle))?;
        }
        Ok(c)
    }
}

/// `d` in milliseconds if it is a whole number of them, at least 1, and fits a `u64`.
fn whole_ms(d: Duration) -> Option<u64> {
    if !d.subsec_nanos().is_multiple_of(1_000_000) {
        return None;
    }
    u64::try_from(d.as_millis()).ok().filter(|&ms| ms >= 1)
}

/// A setting [`MeterConfigBuilder::build`] refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum MeterConfigError {
    /// No samples: a quota window needs at least one (Kafka's `quota.window.num` is at least 1).
    ZeroWindowSamples,
    /// A sample length under 1 ms, with a fraction of a millisecond, or too long to count in
    /// milliseconds (the meter's clock counts whole milliseconds).
    WindowSize(Duration),
    /// A whole window, `window_samples × window_size`, too long to count in milliseconds.
    WindowTooLong {
        /// The samples asked for.
        window_samples: u32,
        /// The sample length asked for.
        window_size: Duration,
    },
    /// An idle expiry under 1 ms (every bucket would be dropped at each sweep), with a fraction of a
    /// millisecond, or too long to count in milliseconds.
    IdleExpiry(Duration),
    /// A maximum throttle under 1 ms (a bucket whose limit is 0 would not be throttled at all), with
    /// a fraction of a millisecond, or too long to count in milliseconds.
    MaxThrottle(Duration),
}

impl fmt::Display for MeterConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let whole = "must be a whole number of milliseconds, at least 1 ms";
        match self {
            MeterConfigError::ZeroWindowSamples => {
                f.write_str("window_samples must be at least 1 (Kafka's quota.window.num)")
            }
            MeterConfigError::WindowSize(d) => write!(f, "window_size {whole}, got {d:?}"),
            MeterConfigError::WindowTooLong {
                window_samples,
                window_size,
            } => write!(
                f,
                "a window of {window_samples} samples of {window_size:?} is too long to count in milliseconds"
            ),
            MeterConfigError::IdleExpiry(d) => write!(f, "idle_expiry {whole}, got {d:?}"),
            MeterConfigError::MaxThrottle(d) => write!(f, "max_throttle {whole}, got {d:?}"),
        }
    }
}

impl std::error::Error for MeterConfigError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_is_kafkas_and_valid() {
        let config = MeterConfig::default();
        assert_eq!(MeterConfig::builder().build(), Ok(config));
        assert_eq!(config.window_samples(), 11);
        assert_eq!(config.window_size(), Duration::from_secs(1));
        assert_eq!(config.idle_expiry(), Duration::from_secs(3600));
        assert_eq!(config.max_throttle(), Duration::from_secs(11));
        assert!(config.strict_mutations());
        let window = config.window();
        assert_eq!((window.samples, window.window_ms), (11, 1000));
        assert_eq!(config.max_throttle_ms(), 11_000);
    }

    #[test]
    fn bad_settings_are_refused_not_clamped() {
        let b = MeterConfig::builder;
        let ms = Duration::from_millis;
        assert_eq!(
            b().window_samples(0).build(),
            Err(MeterConfigError::ZeroWindowSamples)
        );
        for bad in [Duration::ZERO, Duration::from_micros(1500), Duration::MAX] {
            assert_eq!(
                b().window_size(bad).build(),
                Err(MeterConfigError::WindowSize(bad))
            );
            assert_eq!(
                b().idle_expiry(bad).build(),
                Err(MeterConfigError::IdleExpiry(bad))
            );
            assert_eq!(
                b().max_throttle(bad).build(),
                Err(MeterConfigError::MaxThrottle(bad))
            );
        }
        let long = ms(u64::MAX / 2);
        assert_eq!(
            b().window_samples(3).window_size(long).build(),
            Err(MeterConfigError::WindowTooLong {
                window_samples: 3,
                window_size: long
            })
        );
        let ok = b()
            .window_samples(1)
            .window_size(ms(250))
            .max_throttle(ms(7))
            .build();
        let ok = ok.unwrap();
        assert_eq!((ok.window().samples, ok.window().window_ms), (1, 250));
        assert_eq!(ok.max_throttle_ms(), 7);
        assert_eq!(
            MeterConfigError::WindowSize(Duration::ZERO).to_string(),
            "window_size must be a whole number of milliseconds, at least 1 ms, got 0ns"
        );
    }
}
