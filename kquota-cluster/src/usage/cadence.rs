//! [`UsageCadence`]: when an instance publishes its usage and when it hands the others' records
//! to its split. No I/O and no clock of its own (the times are given), so that the simulation in
//! `tests/split_sim.rs` drives the very timing the usage thread runs with.

use std::time::Duration;

use crate::time::millis;

/// The usage thread's timing, as a value.
///
/// * This instance publishes every `interval`, at fixed steps from the first publication (a
///   step missed, when the thread was held up, is not made up: the next one is an interval
///   after the late one).
/// * Records from the others are handed to the split as they arrive (at the caller's next look
///   after their arrival): the split's table changes in place, a record costing what it
///   changed, so nothing is gained by holding them back, and every instance then decides from
///   the others' latest. [`gathering`](UsageCadence::gathering) holds them instead until this
///   instance's own publication or the given time after the first of them arrived, whichever
///   comes first (what the usage thread did while the table was rebuilt whole at each change:
///   with half an interval, the parts added up to 10.8 % more than the limit at most in the
///   simulation, against 7.3 % handed on arrival).
///
/// The caller loops: hand every record that arrives to [`received`](UsageCadence::received),
/// ask [`due`](UsageCadence::due) what to do now, and wait at most
/// [`wait`](UsageCadence::wait) before asking again.
#[derive(Debug)]
pub struct UsageCadence<R> {
    interval_ms: u64,
    gather_ms: u64,
    next_publish_ms: u64,
    pending: Vec<R>,
    pending_since_ms: Option<u64>,
}

/// What [`UsageCadence::due`] says to do now.
#[derive(Debug, PartialEq)]
pub struct UsageDue<R> {
    /// Whether to publish this instance's usage (and hand its record to the split).
    pub publish: bool,
    /// The others' records to hand to the split, in the order they arrived.
    pub received: Vec<R>,
}

impl<R> UsageCadence<R> {
    /// A cadence of `interval` (at least 1 ms) whose first publication is due at
    /// `first_publish_ms`, by the caller's clock.
    pub fn new(interval: Duration, first_publish_ms: u64) -> UsageCadence<R> {
        UsageCadence {
            interval_ms: millis(interval).max(1),
            gather_ms: 0,
            next_publish_ms: first_publish_ms,
            pending: Vec::new(),
            pending_since_ms: None,
        }
    }

    /// Holds the others' records for up to `gather` after the first of them arrived (or until
    /// this instance's publication) instead of handing each to the split at once.
    pub fn gathering(mut self, gather: Duration) -> UsageCadence<R> {
        self.gather_ms = millis(gather);
        self
    }

    /// A record from another instance arrived at `now_ms`.
    pub fn received(&mut self, record: R, now_ms: u64) {
        self.pending.push(record);
        self.pending_since_ms.get_or_insert(now_ms);
    }

    /// What is due at `now_ms`, if anything: a publication, the gathered records, or both.
    pub fn due(&mut self, now_ms: u64) -> Option<UsageDue<R>> {
        let publish = now_ms >= self.next_publish_ms;
        let flush = self
            .pending_since_ms
            .is_some_and(|since| now_ms.saturating_sub(since) >= self.gather_ms);
        if !publish && !flush {
            return None;
        }
        if publish {
            self.next_publish_ms = self.next_publish_ms.saturating_add(self.interval_ms);
            if self.next_publish_ms <= now_ms {
                // Held up past a whole interval: start again from now.
                self.next_publish_ms = now_ms.saturating_add(self.interval_ms);
            }
        }
        self.pending_since_ms = None;
        Some(UsageDue {
            publish,
            received: std::mem::take(&mut self.pending),
        })
    }

    /// How long from `now_ms` until something is due, at most (a record arriving meanwhile may
    /// bring a flush forward, which the caller sees at its next look).
    pub fn wait(&self, now_ms: u64) -> Duration {
        let mut at = self.next_publish_ms;
        if let Some(since) = self.pending_since_ms {
            at = at.min(since.saturating_add(self.gather_ms));
        }
        Duration::from_millis(at.saturating_sub(now_ms))
    }

    /// When the next publication is due.
    pub fn next_publish_ms(&self) -> u64 {
        self.next_publish_ms
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn publishes_at_fixed_steps_and_skips_what_it_missed() {
        let mut c: UsageCadence<u32> = UsageCadence::new(Duration::from_millis(250), 100);
        assert_eq!(c.due(99), None);
        assert_eq!(c.wait(99), Duration::from_millis(1));
        let d = c.due(100).unwrap();
        assert!(d.publish && d.received.is_empty());
        // Late by 30 ms: the next step is still at 350, not 380.
        assert!(c.due(130).is_none());
        assert!(c.due(360).unwrap().publish);
        assert_eq!(c.next_publish_ms(), 600);
        // Held up for a second: one publication, then an interval from then.
        assert!(c.due(1_700).unwrap().publish);
        assert_eq!(c.next_publish_ms(), 1_950);
    }

    #[test]
    fn hands_others_records_over_as_they_arrive() {
        let mut c = UsageCadence::new(Duration::from_millis(250), 0);
        assert!(c.due(0).unwrap().publish);
        assert_eq!(c.due(5), None);
        c.received("b1", 10);
        assert_eq!(c.wait(10), Duration::ZERO);
        assert_eq!(
            c.due(10),
            Some(UsageDue {
                publish: false,
                received: vec!["b1"]
            })
        );
        assert_eq!(c.wait(11), Duration::from_millis(239));
    }

    #[test]
    fn gathers_others_for_a_while_or_until_its_own_publication() {
        let mut c =
            UsageCadence::new(Duration::from_millis(250), 0).gathering(Duration::from_millis(125));
        assert!(c.due(0).unwrap().publish);
        c.received("b1", 10);
        c.received("c1", 50);
        assert_eq!(c.due(100), None);
        assert_eq!(c.wait(100), Duration::from_millis(35));
        // Half an interval after the first arrival.
        assert_eq!(
            c.due(135),
            Some(UsageDue {
                publish: false,
                received: vec!["b1", "c1"]
            })
        );
        // One arriving just before the publication goes with it.
        c.received("b2", 240);
        assert_eq!(
            c.due(250),
            Some(UsageDue {
                publish: true,
                received: vec!["b2"]
            })
        );
        assert_eq!(c.due(251), None);
        assert_eq!(c.wait(251), Duration::from_millis(249));
    }
}
