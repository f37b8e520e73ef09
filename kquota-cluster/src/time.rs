//! Durations and the wall clock, as the records carry them.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// `d` in whole milliseconds (saturating).
pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The wall clock in milliseconds since the Unix epoch (0 before it): for people reading the
/// records, never for judging age.
pub(crate) fn wall_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, millis)
}

/// The wall clock in microseconds since the Unix epoch: where the sequences that must never repeat
/// across an instance's restarts start (an instance issues far fewer than one a microsecond).
pub(crate) fn wall_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX / 2))
}
