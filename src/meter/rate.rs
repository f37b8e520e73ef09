//! Kafka's rate arithmetic: the sampled windowed rate (`SampledStat` + `Rate`) and the token bucket
//! (`TokenBucket`) behind controller-mutation quotas.

/// The window a rate is measured over: `samples` samples of `window_ms` each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Window {
    pub(crate) samples: usize,
    pub(crate) window_ms: u64,
}

#[derive(Clone, Copy, Debug, Default)]
struct Sample {
    start_ms: u64,
    last_ms: u64,
    value: f64,
}

/// A windowed rate exactly as Kafka measures one: values go into the current sample, a sample is complete
/// after `window_ms`, the oldest is reused, and samples older than the whole window are forgotten.
#[derive(Clone, Debug)]
pub(crate) struct WindowedRate {
    samples: Box<[Sample]>,
    /// How many samples have been started (at most `samples.len()`).
    used: usize,
    current: usize,
}

impl WindowedRate {
    pub(crate) fn new(window: Window) -> WindowedRate {
        WindowedRate {
            samples: vec![Sample::default(); window.samples.max(1)].into_boxed_slice(),
            used: 0,
            current: 0,
        }
    }

    /// Adds `value` at `now`.
    pub(crate) fn record(&mut self, window: Window, value: f64, now: u64) {
        if self.used == 0 {
            self.samples[0] = Sample {
                start_ms: now,
                last_ms: now,
                value: 0.0,
            };
            self.used = 1;
            self.current = 0;
        } else if now.saturating_sub(self.samples[self.current].start_ms) >= window.window_ms {
            self.current = (self.current + 1) % self.samples.len();
            self.used = (self.used + 1).min(self.samples.len());
            self.samples[self.current] = Sample {
                start_ms: now,
                last_ms: now,
                value: 0.0,
            };
        }
        let s = &mut self.samples[self.current];
        s.value += value;
        s.last_ms = now;
    }

    /// The rate per second at `now` and the elapsed window (ms) it was measured over.
    pub(crate) fn measure(&mut self, window: Window, now: u64) -> (f64, u64) {
        let expire = window.samples as u64 * window.window_ms;
        let mut total = 0.0;
        let mut oldest = u64::MAX;
        for s in &mut self.samples[..self.used] {
            if now.saturating_sub(s.last_ms) >= expire {
                // Kafka resets an obsolete sample to start now.
                *s = Sample {
                    start_ms: now,
                    last_ms: now,
                    value: 0.0,
                };
            }
            total += s.value;
            oldest = oldest.min(s.start_ms);
        }
        if self.used == 0 {
            oldest = now;
        }
        let mut elapsed = now.saturating_sub(oldest);
        let full = elapsed / window.window_ms;
        let min_full = window.samples.saturating_sub(1) as u64;
        if full < min_full {
            elapsed += (min_full - full) * window.window_ms;
        }
        let elapsed = elapsed.max(1);
        (total / (elapsed as f64 / 1000.0), elapsed)
    }
}

/// Kafka's throttle for a measured rate: `round((rate − limit) / limit × elapsed window)`, or 0 within
/// the limit.
pub(crate) fn throttle_ms(rate: f64, limit: f64, elapsed_ms: u64) -> u64 {
    if rate <= limit {
        return 0;
    }
    ((rate - limit) / limit * elapsed_ms as f64).round() as u64
}

/// Kafka's token bucket: `burst = limit × samples × window` tokens, refilled at `limit` per second.
#[derive(Clone, Copy, Debug)]
pub(crate) struct TokenBucket {
    tokens: f64,
    last_ms: u64,
    started: bool,
}

impl TokenBucket {
    pub(crate) fn new() -> TokenBucket {
        TokenBucket {
            tokens: 0.0,
            last_ms: 0,
            started: false,
        }
    }

    fn burst(window: Window, limit: f64) -> f64 {
        limit * window.samples as f64 * (window.window_ms as f64 / 1000.0)
    }

    /// Tokens available at `now` (negative: in debt).
    pub(crate) fn tokens(&mut self, window: Window, limit: f64, now: u64) -> f64 {
        let burst = Self::burst(window, limit);
        if !self.started {
            // A fresh bucket starts full (Kafka's starts empty at epoch 0, which is full by any real clock).
            self.tokens = burst;
            self.started = true;
        } else {
            let elapsed = now.saturating_sub(self.last_ms) as f64 / 1000.0;
            self.tokens = burst.min(self.tokens + limit * elapsed);
        }
        self.last_ms = self.last_ms.max(now);
        self.tokens
    }

    /// Takes `value` tokens at `now`.
    pub(crate) fn record(&mut self, window: Window, limit: f64, value: f64, now: u64) {
        let burst = Self::burst(window, limit);
        let tokens = self.tokens(window, limit, now);
        self.tokens = burst.min(tokens - value);
    }
}

/// The throttle for a token debt: `round(−tokens / limit × 1000)`, or 0 without debt.
pub(crate) fn token_throttle_ms(tokens: f64, limit: f64) -> u64 {
    if tokens >= 0.0 {
        0
    } else {
        (-tokens / limit * 1000.0).round() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KAFKA: Window = Window {
        samples: 11,
        window_ms: 1000,
    };

    #[test]
    fn kafka_worked_example() {
        // 6,300 bytes over 10.5 s against 500 bytes/s: 600 bytes/s, throttled 2,100 ms.
        let mut rate = WindowedRate::new(KAFKA);
        for t in 0..=20 {
            rate.record(KAFKA, 300.0, t * 500);
        }
        rate.record(KAFKA, 0.0, 10_500);
        let (r, elapsed) = rate.measure(KAFKA, 10_500);
        assert_eq!(elapsed, 10_500);
        assert!((r - 600.0).abs() < 1e-9, "{r}");
        assert_eq!(throttle_ms(r, 500.0, elapsed), 2_100);
    }

    #[test]
    fn short_history_is_padded_to_ten_windows() {
        let mut rate = WindowedRate::new(KAFKA);
        rate.record(KAFKA, 6_300.0, 0);
        let (r, elapsed) = rate.measure(KAFKA, 0);
        assert_eq!(elapsed, 10_000);
        assert_eq!(r, 630.0);
    }

    #[test]
    fn old_samples_expire() {
        let mut rate = WindowedRate::new(KAFKA);
        rate.record(KAFKA, 1_000_000.0, 0);
        assert!(rate.measure(KAFKA, 5_000).0 > 0.0);
        // After samples × window without events, everything recorded is forgotten.
        assert_eq!(rate.measure(KAFKA, 11_000).0, 0.0);
    }

    #[test]
    fn samples_are_reused_in_a_ring() {
        let mut rate = WindowedRate::new(KAFKA);
        for t in 0..100u64 {
            rate.record(KAFKA, 100.0, t * 1000);
        }
        // 11 samples of 100 over the 10 s since the oldest sample started: 110 per second.
        let (r, elapsed) = rate.measure(KAFKA, 99_000);
        assert_eq!(elapsed, 10_000);
        assert!((r - 110.0).abs() < 1e-9);
    }

    #[test]
    fn token_bucket_burst_and_refill() {
        let mut tb = TokenBucket::new();
        // Limit 2/s: burst 22 tokens.
        assert_eq!(tb.tokens(KAFKA, 2.0, 0), 22.0);
        tb.record(KAFKA, 2.0, 30.0, 0);
        assert_eq!(tb.tokens(KAFKA, 2.0, 0), -8.0);
        assert_eq!(token_throttle_ms(-8.0, 2.0), 4_000);
        // 4 s later the debt is paid.
        assert_eq!(tb.tokens(KAFKA, 2.0, 4_000), 0.0);
        // And it never refills beyond the burst.
        assert_eq!(tb.tokens(KAFKA, 2.0, 1_000_000), 22.0);
    }
}
