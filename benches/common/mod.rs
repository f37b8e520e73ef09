//! Measurement helpers shared by the `resolve` and `alter` benches: the clock they read and the
//! paired ratios they report.

use std::time::{Duration, Instant};

/// The clock the measurements read: wall time (the default), or, with `KQUOTA_BENCH_CLOCK=cpu`, the
/// CPU time of the measuring thread, which leaves out the time it spends descheduled when other
/// processes compete for the cores (it does not undo what those processes do to the caches).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Clock {
    /// Elapsed time.
    Wall,
    /// This thread's CPU time.
    ThreadCpu,
}

impl Clock {
    /// The clock `KQUOTA_BENCH_CLOCK` names.
    pub(crate) fn from_env() -> Clock {
        match std::env::var("KQUOTA_BENCH_CLOCK").as_deref() {
            Ok("cpu") => Clock::ThreadCpu,
            _ => Clock::Wall,
        }
    }

    /// Runs `work` and returns how long it took on this clock.
    pub(crate) fn time<R>(self, work: impl FnOnce() -> R) -> (R, Duration) {
        match self {
            Clock::Wall => {
                let start = Instant::now();
                let out = work();
                (out, start.elapsed())
            }
            Clock::ThreadCpu => {
                // `clock_gettime(CLOCK_THREAD_CPUTIME_ID)`: exact to the nanosecond, unlike
                // `/proc/thread-self/schedstat`, which only advances at scheduler ticks.
                let start = cpu_time::ThreadTime::now();
                let out = work();
                (out, start.elapsed())
            }
        }
    }
}

/// The median and range of ratios measured in paired windows.
///
/// A target stated as a ratio (two threads against one, a large store against a small one) is
/// measured here as many pairs of short windows, the two sides alternating, rather than as the ratio
/// of two criterion medians taken minutes apart: on a machine shared with other work the latter mixes
/// in whatever the machine did in between.
pub(crate) struct Ratios {
    /// The median ratio.
    pub(crate) median: f64,
    /// The smallest.
    pub(crate) low: f64,
    /// The largest.
    pub(crate) high: f64,
    /// How many windows.
    pub(crate) windows: usize,
}

impl Ratios {
    /// Summarizes one ratio per window.
    pub(crate) fn of(mut ratios: Vec<f64>) -> Ratios {
        ratios.sort_by(f64::total_cmp);
        Ratios {
            median: ratios[ratios.len() / 2],
            low: ratios[0],
            high: ratios[ratios.len() - 1],
            windows: ratios.len(),
        }
    }
}

impl std::fmt::Display for Ratios {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:.2}x (range {:.2}-{:.2}x, {} paired windows)",
            self.median, self.low, self.high, self.windows
        )
    }
}
