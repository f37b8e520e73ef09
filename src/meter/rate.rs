//! Kafka's rate arithmetic: the sampled windowed rate (`SampledStat` + `Rate`) and the token bucket
//! (`TokenBucket`) behind controller-mutation quotas.

use smallvec::SmallVec;

/// The window a rate is measured over: `samples` samples of `window_ms` each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Window {
    pub(crate) samples: usize,
    pub(crate) window_ms: u64,
}

#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Sample {
    start_ms: u64,
    last_ms: u64,
    value: f64,
}

/// A windowed rate exactly as Kafka measures one: values go into the current sample, a sample is complete
/// after `window_ms`, the oldest is reused, and samples older than the whole window are forgotten.
#[derive(Clone, Debug)]
pub(crate) struct WindowedRate {
    /// Inline for Kafka's default 11 samples (and fewer), so a bucket's samples sit in the bucket's
    /// own allocation: one cache miss less per request on a cold bucket.
    samples: SmallVec<[Sample; 11]>,
    /// How many samples have been started (at most `samples.len()`).
    used: usize,
    current: usize,
    /// The sum of the started samples while every value in them is a whole number and the sum is below
    /// 2^53 (always, for bytes). Every partial sum is then exact in `f64`, so this equals Kafka's
    /// in-order sum to the bit, and `measure` skips a chain of dependent floating-point additions.
    whole: Option<u64>,
    /// The smallest `last_ms` and the smallest `start_ms` of the started samples, or `None` after the
    /// samples changed shape. Recording into the current sample only raises its `last_ms`, so the
    /// first stays a lower bound: while `now` is within the window of it, no sample can be obsolete and
    /// `measure` needs no pass over the samples.
    bounds: Option<(u64, u64)>,
}

/// Sums of whole numbers below this are exact in `f64` at every step.
const EXACT_LIMIT: u64 = 1 << 53;

/// `total + value`, if `value` is a whole number and the sum stays below [`EXACT_LIMIT`].
#[inline]
fn whole_add(total: u64, value: f64) -> Option<u64> {
    // Signed conversions (one instruction each way on x86-64), not `fract()`, a libm call there. NaN
    // converts to 0 and out-of-range values saturate, so they fail the round trip.
    let whole = value as i64;
    if whole as f64 == value && whole >= 0 && (whole as u64) < EXACT_LIMIT - total {
        Some(total + whole as u64)
    } else {
        None
    }
}

impl WindowedRate {
    pub(crate) fn new(window: Window) -> WindowedRate {
        WindowedRate {
            samples: smallvec::smallvec![Sample::default(); window.samples.max(1)],
            used: 0,
            current: 0,
            whole: Some(0),
            bounds: None,
        }
    }

    /// See [`WindowedRate::bounds`].
    fn scan_bounds(&self) -> (u64, u64) {
        self.samples[..self.used]
            .iter()
            .fold((u64::MAX, u64::MAX), |(last, start), s| {
                (last.min(s.last_ms), start.min(s.start_ms))
            })
    }

    /// Recomputes [`WindowedRate::whole`] after samples were reset or reused.
    fn recount(&mut self) {
        self.whole = self.samples[..self.used]
            .iter()
            .try_fold(0, |t, s| whole_add(t, s.value));
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
            self.whole = Some(0);
            self.bounds = None;
        } else if now.saturating_sub(self.samples[self.current].start_ms) >= window.window_ms {
            self.current = (self.current + 1) % self.samples.len();
            self.used = (self.used + 1).min(self.samples.len());
            self.samples[self.current] = Sample {
                start_ms: now,
                last_ms: now,
                value: 0.0,
            };
            self.recount();
            self.bounds = None;
        }
        let s = &mut self.samples[self.current];
        s.value += value;
        s.last_ms = now;
        self.whole = self.whole.and_then(|t| whole_add(t, value));
    }

    /// Kafka's pass over the samples, which resets the obsolete ones to start now; returns the oldest
    /// start afterwards. Rare (a bucket idle for a whole window), so kept out of `measure`'s body.
    #[cold]
    fn reset_obsolete(&mut self, expire: u64, now: u64) -> u64 {
        let mut reset = false;
        for s in &mut self.samples[..self.used] {
            if now.saturating_sub(s.last_ms) >= expire {
                *s = Sample {
                    start_ms: now,
                    last_ms: now,
                    value: 0.0,
                };
                reset = true;
            }
        }
        if reset {
            self.recount();
        }
        self.bounds.insert(self.scan_bounds()).1
    }

    /// Adds `value`, recorded by requests up to `last_ms` that were served without the lock, to the
    /// current sample: the sample they were recorded in (their allowance ended with it), in one
    /// addition, which is exact because [`WindowedRate::headroom`] keeps the total below 2^53.
    pub(crate) fn fold(&mut self, value: u64, last_ms: u64) {
        debug_assert!(self.used > 0, "allowances follow a recorded request");
        let s = &mut self.samples[self.current];
        s.value += value as f64;
        s.last_ms = s.last_ms.max(last_ms);
        self.whole = self.whole.and_then(|t| whole_add(t, value as f64));
    }

    /// After a [`WindowedRate::measure`] at `now`: how many more units the rate can take without any
    /// request being throttled against `limit`, and until when (ms) that holds, or `None` where the
    /// answer needs the samples (fractional values, no padding, no headroom).
    ///
    /// Kafka pads the elapsed window to at least `samples − 1` whole samples, so `limit × that` bounds
    /// what the window may hold with a rate at or below the limit at any later time; the bound is
    /// shaved by 10⁻⁹ so that Kafka's floating-point division agrees at the edge. It holds until the
    /// current sample is complete or a sample could become obsolete, the two events that change which
    /// sample a value belongs to.
    pub(crate) fn headroom(&self, window: Window, limit: f64, now: u64) -> Option<(u64, u64)> {
        let total = self.whole?;
        let padded = window.samples.saturating_sub(1) as u64 * window.window_ms;
        let (min_last, _) = self.bounds?;
        if padded == 0 || self.used == 0 || limit <= 0.0 || limit.is_nan() {
            return None;
        }
        let bound = (limit * (padded as f64 / 1000.0) * (1.0 - 1e-9)).floor();
        let bound = bound.min((EXACT_LIMIT - 1) as f64) as u64;
        let headroom = bound.checked_sub(total).filter(|&h| h > 0)?;
        let until = (self.samples[self.current].start_ms + window.window_ms)
            .min(min_last + window.samples as u64 * window.window_ms);
        (until > now).then_some((headroom, until))
    }

    /// The rate per second at `now` and the elapsed window (ms) it was measured over.
    #[inline]
    pub(crate) fn measure(&mut self, window: Window, now: u64) -> (f64, u64) {
        let expire = window.samples as u64 * window.window_ms;
        let (min_last, mut oldest) = match self.bounds {
            Some(bounds) => bounds,
            None => *self.bounds.insert(self.scan_bounds()),
        };
        if self.used > 0 && now.saturating_sub(min_last) >= expire {
            oldest = self.reset_obsolete(expire, now);
        }
        let total = match self.whole {
            // Below 2^53, so the signed conversion is exact (and cheaper than the unsigned one).
            Some(t) => t as i64 as f64,
            // Kafka's order of addition, for values with fractions (request time).
            None => self.samples[..self.used].iter().map(|s| s.value).sum(),
        };
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
    fn whole_and_fractional_totals_match_the_in_order_sum() {
        // Fractions take the in-order path; once they leave the window, whole numbers take the
        // exact integer path again. Both must give exactly Kafka's in-order sum.
        let mut rate = WindowedRate::new(KAFKA);
        let mut t = 0;
        for i in 0..40u64 {
            let value = if (10..15).contains(&i) {
                0.1 * i as f64 + 0.05
            } else {
                1_000.0 + i as f64
            };
            rate.record(KAFKA, value, t);
            let expected: f64 = rate.samples[..rate.used].iter().map(|s| s.value).sum();
            let (r, elapsed) = rate.measure(KAFKA, t);
            assert_eq!(r, expected / (elapsed as f64 / 1000.0), "step {i}");
            assert_eq!(rate.whole.is_some(), !(10..25).contains(&i), "step {i}");
            t += 1_000;
        }
        // Sums at 2^53 and beyond leave the integer path rather than round.
        let mut big = WindowedRate::new(KAFKA);
        big.record(KAFKA, (EXACT_LIMIT - 1) as f64, 0);
        assert_eq!(big.whole, Some((1 << 53) - 1));
        big.record(KAFKA, 1.0, 0);
        assert_eq!(big.whole, None);
    }

    /// Kafka's measure, written out in full on every call.
    fn reference_measure(samples: &mut [Sample], window: Window, now: u64) -> (f64, u64) {
        let expire = window.samples as u64 * window.window_ms;
        let mut total = 0.0;
        let mut oldest = u64::MAX;
        for s in samples.iter_mut() {
            if now.saturating_sub(s.last_ms) >= expire {
                *s = Sample {
                    start_ms: now,
                    last_ms: now,
                    value: 0.0,
                };
            }
            total += s.value;
            oldest = oldest.min(s.start_ms);
        }
        if samples.is_empty() {
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

    #[test]
    fn cached_bounds_give_kafkas_measure_under_bursts_and_idle_gaps() {
        let mut rate = WindowedRate::new(KAFKA);
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut now = 0u64;
        for step in 0..20_000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            // Mostly small steps, sometimes a gap longer than the whole window.
            now += match state % 100 {
                0 => 12_000 + state % 5_000,
                1..=5 => 1_000 + state % 3_000,
                _ => state % 40,
            };
            let value = if state.is_multiple_of(7) {
                0.25
            } else {
                (state % 5_000) as f64
            };
            rate.record(KAFKA, value, now);
            if state.is_multiple_of(3) {
                continue;
            }
            let mut copy = rate.samples[..rate.used].to_vec();
            let want = reference_measure(&mut copy, KAFKA, now);
            assert_eq!(rate.measure(KAFKA, now), want, "step {step} at {now}");
            assert_eq!(&rate.samples[..rate.used], copy.as_slice(), "step {step}");
        }
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
