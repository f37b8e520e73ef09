//! Time, injected so that tests and benches are deterministic.

use std::sync::atomic::{AtomicU64, Ordering};

/// A source of monotonic milliseconds.
pub trait Clock: Send + Sync {
    /// Milliseconds since an arbitrary, fixed origin; never decreases.
    fn now_ms(&self) -> u64;
}

/// The real clock: milliseconds since the clock was created.
///
/// It reads the CPU's invariant time-stamp counter through `quanta` where the CPU has one (falling
/// back to the OS's monotonic clock), because a broker reads the clock on every request and
/// `clock_gettime` costs several times as much.
#[derive(Debug)]
pub struct SystemClock {
    clock: quanta::Clock,
    origin: u64,
}

impl SystemClock {
    /// A clock starting now.
    pub fn new() -> SystemClock {
        let clock = quanta::Clock::new();
        let origin = clock.raw();
        SystemClock { clock, origin }
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        SystemClock::new()
    }
}

impl Clock for SystemClock {
    #[inline]
    fn now_ms(&self) -> u64 {
        self.clock.delta_as_nanos(self.origin, self.clock.raw()) / 1_000_000
    }
}

/// A clock that moves only when told to, for tests and simulations.
#[derive(Debug, Default)]
pub struct ManualClock {
    now: AtomicU64,
}

impl ManualClock {
    /// A clock at `ms`.
    pub fn new(ms: u64) -> ManualClock {
        ManualClock {
            now: AtomicU64::new(ms),
        }
    }

    /// Moves the clock forward by `ms`.
    pub fn advance(&self, ms: u64) {
        self.now.fetch_add(ms, Ordering::SeqCst);
    }

    /// Sets the clock to `ms`; it never moves backwards.
    pub fn set(&self, ms: u64) {
        self.now.fetch_max(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.now.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn system_clock_counts_real_milliseconds() {
        let clock = SystemClock::new();
        let start = Instant::now();
        let first = clock.now_ms();
        std::thread::sleep(Duration::from_millis(60));
        let second = clock.now_ms();
        let real = start.elapsed().as_millis() as u64;
        assert!(second >= first + 55, "{first} → {second}");
        // It never runs ahead of the OS clock by more than rounding.
        assert!(
            second - first <= real + 1,
            "{first} → {second}, real {real}"
        );
    }

    #[test]
    fn manual_clock_never_goes_back() {
        let clock = ManualClock::new(10);
        clock.advance(5);
        clock.set(12);
        assert_eq!(clock.now_ms(), 15);
        clock.set(20);
        assert_eq!(clock.now_ms(), 20);
    }
}
