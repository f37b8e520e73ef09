//! Which client-ids make up the rate of a bucket that several share (one user's bucket): the busiest
//! of them in a fixed table, by what they recorded, decayed over the quota window.
//!
//! The table is space-saving (Metwally et al., "Efficient computation of frequent and top-k elements
//! in data streams"): a client-id not in a full table takes the place of the one with the least
//! count, and that count with it, as an error it may have recorded before. A client's count less its
//! error is then a lower bound of what it recorded, and the errors together are what the table can
//! no longer say who recorded: the rest of the bucket. A flood of client-ids churns the smallest slots
//! and leaves the busy ones where they are, and the table never holds more than [`CLIENT_SLOTS`].
//!
//! Counts decay exponentially with a time constant of half the quota window, so that their mean age
//! is the window's (a uniform window of `W` has a mean age of `W / 2`): what a client stopped
//! recording fades as it leaves Kafka's window, and a steady client's count reads `rate × W / 2`.
//! Only proportions are reported; the bucket's own measure says how much.
//!
//! Memory: [`CLIENT_SLOTS`] slots of 32 bytes, allocated at a bucket's first attribution, plus the
//! client-id strings, which the slots share with the connections that recorded them.

use std::sync::Arc;

/// The most client-ids one bucket's table keeps.
pub(crate) const CLIENT_SLOTS: usize = 16;

/// A slot whose decayed count falls below this part of the table's total is dropped: its client has
/// been gone for about 14 time constants, and what it recorded no longer shows.
const FORGOTTEN: f64 = 1e-6;

#[derive(Debug)]
struct Slot {
    client_id: Arc<str>,
    /// What the client recorded (decayed), plus its error.
    count: f64,
    /// What the slot's previous holders recorded, inherited with the slot.
    error: f64,
}

/// The busiest client-ids of one bucket; lives under the bucket's lock.
#[derive(Debug, Default)]
pub(crate) struct ClientTable {
    /// At most [`CLIENT_SLOTS`]; empty (and unallocated) until a client is attributed.
    slots: Vec<Slot>,
    /// The time every count is decayed to.
    at_ms: u64,
}

impl ClientTable {
    /// Decays every count to `now` with time constant `tau_ms`, and drops the forgotten slots.
    fn decay(&mut self, now: u64, tau_ms: f64) {
        // A clock read before the latest update counts as that update's time.
        if now <= self.at_ms {
            return;
        }
        let factor = (-((now - self.at_ms) as f64) / tau_ms).exp();
        self.at_ms = now;
        let mut total = 0.0;
        for s in &mut self.slots {
            s.count *= factor;
            s.error *= factor;
            total += s.count;
        }
        self.slots.retain(|s| s.count > total * FORGOTTEN);
    }

    /// Attributes `value` (negative for a refund) recorded into the bucket at `now` to `client_id`.
    pub(crate) fn add(&mut self, client_id: &Arc<str>, value: f64, now: u64, tau_ms: f64) {
        self.decay(now, tau_ms);
        if let Some(s) = self
            .slots
            .iter_mut()
            .find(|s| Arc::ptr_eq(&s.client_id, client_id) || *s.client_id == **client_id)
        {
            // A refund takes back what the client recorded, not what it inherited.
            s.count = (s.count + value).max(s.error);
            return;
        }
        // A refund for a client no longer in the table (or nothing at all) has nothing to take from.
        if value.is_nan() || value <= 0.0 {
            return;
        }
        if self.slots.len() < CLIENT_SLOTS {
            if self.slots.capacity() == 0 {
                self.slots.reserve_exact(CLIENT_SLOTS);
            }
            self.slots.push(Slot {
                client_id: Arc::clone(client_id),
                count: value,
                error: 0.0,
            });
            return;
        }
        let Some(least) = self
            .slots
            .iter_mut()
            .min_by(|a, b| a.count.total_cmp(&b.count))
        else {
            return;
        };
        least.client_id = Arc::clone(client_id);
        least.error = least.count;
        least.count += value;
    }

    /// At `now`: each client-id's part of what the bucket recorded (the lower bound, between 0 and
    /// 1), busiest first and ties by name, and the part no client-id in the table accounts for.
    /// Empty and 0 while nothing is attributed.
    pub(crate) fn shares(&mut self, now: u64, tau_ms: f64) -> (Vec<(Arc<str>, f64)>, f64) {
        self.decay(now, tau_ms);
        let total: f64 = self.slots.iter().map(|s| s.count).sum();
        if total.is_nan() || total <= 0.0 {
            return (Vec::new(), 0.0);
        }
        let mut shares: Vec<(Arc<str>, f64)> = self
            .slots
            .iter()
            .filter(|s| s.count > s.error)
            .map(|s| (Arc::clone(&s.client_id), (s.count - s.error) / total))
            .collect();
        shares.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        let unknown: f64 = self.slots.iter().map(|s| s.error).sum();
        (shares, (unknown / total).clamp(0.0, 1.0))
    }

    /// How many client-ids the table holds.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.slots.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TAU: f64 = 5_500.0;

    fn id(s: &str) -> Arc<str> {
        Arc::from(s)
    }

    #[test]
    fn shares_are_each_clients_part_until_the_table_is_full() {
        let mut t = ClientTable::default();
        t.add(&id("a"), 300.0, 10, TAU);
        t.add(&id("b"), 100.0, 10, TAU);
        t.add(&id("a"), 0.0, 10, TAU);
        let (shares, unknown) = t.shares(10, TAU);
        assert_eq!(shares, vec![(id("a"), 0.75), (id("b"), 0.25)]);
        assert_eq!(unknown, 0.0);
        // Decay scales every count alike: the parts stay.
        let (later, _) = t.shares(3_000, TAU);
        assert!((later[0].1 - 0.75).abs() < 1e-12, "{later:?}");
    }

    #[test]
    fn the_rest_is_what_evicted_clients_recorded() {
        let mut t = ClientTable::default();
        for i in 0..CLIENT_SLOTS {
            t.add(&id(&format!("c{i}")), 10.0 + i as f64, 0, TAU);
        }
        t.add(&id("big"), 1_000.0, 0, TAU);
        assert_eq!(t.len(), CLIENT_SLOTS);
        let (shares, unknown) = t.shares(0, TAU);
        let total = (0..CLIENT_SLOTS).map(|i| 10.0 + i as f64).sum::<f64>() + 1_000.0;
        // "big" took c0's slot and its 10 as error.
        assert_eq!(shares[0], (id("big"), 1_000.0 / total));
        assert!(!shares.iter().any(|(c, _)| &**c == "c0"));
        assert_eq!(unknown, 10.0 / total);
        let listed: f64 = shares.iter().map(|(_, s)| s).sum();
        assert!((listed + unknown - 1.0).abs() < 1e-12);
    }

    #[test]
    fn a_flood_of_client_ids_keeps_the_busy_ones_and_the_bound() {
        let mut t = ClientTable::default();
        for step in 0..10_000u64 {
            let now = step * 10;
            t.add(&id("heavy"), 5_000.0, now, TAU);
            t.add(&id("steady"), 1_000.0, now, TAU);
            t.add(&id(&format!("once-{step}")), 50.0, now, TAU);
            assert!(t.len() <= CLIENT_SLOTS);
        }
        let (shares, unknown) = t.shares(100_000, TAU);
        assert_eq!(shares[0].0, id("heavy"));
        assert_eq!(shares[1].0, id("steady"));
        // 5,000 and 1,000 of every 6,050.
        assert!((shares[0].1 - 5_000.0 / 6_050.0).abs() < 1e-9, "{shares:?}");
        assert!((shares[1].1 - 1_000.0 / 6_050.0).abs() < 1e-9, "{shares:?}");
        assert!(unknown > 0.0 && unknown < 0.01, "{unknown}");
    }

    #[test]
    fn refunds_take_back_only_what_the_client_recorded() {
        let mut t = ClientTable::default();
        t.add(&id("a"), 100.0, 0, TAU);
        t.add(&id("b"), 100.0, 0, TAU);
        t.add(&id("a"), -60.0, 0, TAU);
        t.add(&id("gone"), -60.0, 0, TAU);
        assert_eq!(t.len(), 2);
        let (shares, _) = t.shares(0, TAU);
        assert_eq!(
            shares,
            vec![(id("b"), 100.0 / 140.0), (id("a"), 40.0 / 140.0)]
        );
        t.add(&id("a"), -1_000.0, 0, TAU);
        let (shares, _) = t.shares(0, TAU);
        assert_eq!(shares, vec![(id("b"), 1.0)], "a has nothing left");
    }

    #[test]
    fn a_client_that_stopped_is_forgotten() {
        let mut t = ClientTable::default();
        t.add(&id("gone"), 1_000.0, 0, TAU);
        for s in 1..=100u64 {
            t.add(&id("stays"), 1_000.0, s * 1_000, TAU);
        }
        let (shares, unknown) = t.shares(100_000, TAU);
        assert_eq!(shares, vec![(id("stays"), 1.0)]);
        assert_eq!((t.len(), unknown), (1, 0.0));
        // Everything decayed to nothing is nothing.
        let (shares, _) = t.shares(u64::MAX / 2, TAU);
        assert!(shares.is_empty());
    }
}
