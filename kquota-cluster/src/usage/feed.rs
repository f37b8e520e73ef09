//! The usage records handed to the split ([`SharedSplit`]) as what the split takes: the demands
//! each states ([`DemandReport`]). The split itself knows no record.

use std::sync::Arc;

use super::delta::UsageDelta;
use super::demand::Demand;
use super::record::UsageRecord;
use super::split::{DemandReport, SharedSplit};

impl From<&UsageDelta> for DemandReport {
    fn from(d: &UsageDelta) -> DemandReport {
        DemandReport {
            instance: Arc::from(d.instance.as_str()),
            seq: d.seq,
            reset: d.reset,
            complete: d.complete,
            demands: d
                .buckets
                .iter()
                .map(|b| {
                    (
                        b.key,
                        b.owner.clone(),
                        Demand::new(b.rate, b.limit, b.throttled),
                    )
                })
                .collect(),
            gone: d.gone.clone(),
        }
    }
}

/// A whole record of version 1: a whole, unnumbered report.
fn whole(r: &UsageRecord) -> DemandReport {
    DemandReport::from(&UsageDelta::from_record(r, 0))
}

impl SharedSplit {
    /// This instance's own usage as a whole record, as it was just published: the split decides
    /// from the same statement the others see, so that the parts add up.
    pub fn record_local(&self, record: &UsageRecord) {
        self.update(Some(record), []);
    }

    /// Other instances' whole records, received now (this instance's own are ignored).
    pub fn receive<I: IntoIterator<Item = UsageRecord>>(&self, records: I) {
        self.update(None, records);
    }

    /// [`record_local`](SharedSplit::record_local) and [`receive`](SharedSplit::receive) at
    /// once: each record a whole statement of its instance.
    pub fn update<I: IntoIterator<Item = UsageRecord>>(
        &self,
        local: Option<&UsageRecord>,
        received: I,
    ) {
        let local: Vec<DemandReport> = local.map(whole).into_iter().collect();
        self.take(&local, received.into_iter().map(|r| whole(&r)).collect());
    }

    /// This instance's records as just published (`local`, in order), and the others' records
    /// received now (in the order they arrived; this instance's own among them are ignored), at
    /// once.
    pub fn update_deltas<I: IntoIterator<Item = UsageDelta>>(
        &self,
        local: &[UsageDelta],
        received: I,
    ) {
        let local: Vec<DemandReport> = local.iter().map(DemandReport::from).collect();
        let received = received
            .into_iter()
            .filter(|r| *r.instance != *self.instance_id())
            .map(|r| DemandReport::from(&r))
            .collect();
        self.take(&local, received);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::UsageThreshold;
    use crate::usage::delta::UsagePublisher;
    use crate::usage::record::BucketUsage;
    use crate::usage::split::SplitParams;
    use kquota::meter::BucketOwner;
    use kquota::meter::{BpsSplit, Clock, ManualClock};
    use kquota::QuotaKey;
    use std::time::Duration;

    fn user(u: &str) -> BucketOwner {
        BucketOwner::User(Arc::from(u))
    }

    fn delta(instance: &str, seq: u64, reset: bool, buckets: &[(&str, f64)]) -> UsageDelta {
        UsageDelta {
            instance: instance.into(),
            at_ms: 0,
            seq,
            reset,
            complete: true,
            need: Vec::new(),
            buckets: buckets
                .iter()
                .map(|(u, rate)| BucketUsage {
                    key: QuotaKey::PRODUCER_BPS,
                    owner: user(u),
                    rate: *rate,
                    limit: 1e6,
                    throttled: false,
                })
                .collect(),
            gone: Vec::new(),
        }
    }

    fn split(me: &str, clock: &Arc<ManualClock>) -> SharedSplit {
        let s = SharedSplit::new(
            me,
            SplitParams::default(),
            Duration::from_secs(2),
            clock.clone(),
        );
        s.set_live(["a", "b"]);
        s
    }

    fn rate_of_b(s: &SharedSplit, u: &str) -> Option<f64> {
        s.demands(QuotaKey::PRODUCER_BPS, &user(u))
            .and_then(|(_, others)| others.first().map(|d| d.rate))
    }

    #[test]
    fn a_missed_record_declines_until_a_whole_statement_comes() {
        let clock = Arc::new(ManualClock::new(1_000));
        let s = split("a", &clock);
        s.update_deltas(&[delta("a", 1, true, &[])], []);
        s.update_deltas(&[], [delta("b", 10, true, &[("alice", 5.0)])]);
        assert!(s.is_fresh());
        s.update_deltas(&[], [delta("b", 11, false, &[("alice", 6.0)])]);
        assert_eq!(rate_of_b(&s, "alice"), Some(6.0));
        assert!(s.needs().is_empty());
        // 12 missed.
        s.update_deltas(&[], [delta("b", 13, false, &[("alice", 8.0)])]);
        assert!(!s.is_fresh());
        assert_eq!(s.needs(), ["b"]);
        // What comes before the whole statement is not applied.
        s.update_deltas(&[], [delta("b", 14, false, &[("alice", 9.0)])]);
        assert_eq!(rate_of_b(&s, "alice"), Some(6.0));
        let mut whole = delta("b", 15, true, &[("alice", 10.0)]);
        whole.complete = false;
        s.update_deltas(&[], [whole]);
        assert!(!s.is_fresh(), "a whole statement still in parts");
        assert!(s.needs().is_empty());
        s.update_deltas(&[], [delta("b", 16, false, &[("bob", 1.0)])]);
        assert!(s.is_fresh());
        assert_eq!(rate_of_b(&s, "alice"), Some(10.0));
        assert_eq!(rate_of_b(&s, "bob"), Some(1.0));
    }

    #[test]
    fn deltas_change_the_table_in_place_and_members_take_their_demands_along() {
        let clock = Arc::new(ManualClock::new(1_000));
        let s = split("a", &clock);
        s.update_deltas(&[delta("a", 1, true, &[("alice", 2.0)])], []);
        s.update_deltas(&[], [delta("b", 1, true, &[("alice", 5.0), ("bob", 3.0)])]);
        assert_eq!(s.buckets(), 2);
        assert!(s.is_shared(QuotaKey::PRODUCER_BPS, &user("alice")));
        assert!(s.is_shared(QuotaKey::PRODUCER_BPS, &user("bob")));
        assert!(!s.is_shared(QuotaKey::PRODUCER_BPS, &user("carol")));
        let mut gone = delta("b", 2, false, &[]);
        gone.gone = vec![(QuotaKey::PRODUCER_BPS, user("bob"))];
        s.update_deltas(&[], [gone]);
        assert_eq!(s.buckets(), 1);
        assert!(!s.is_shared(QuotaKey::PRODUCER_BPS, &user("bob")));
        // b leaves: its demands go; it returns: they come back.
        s.set_live(["a"]);
        assert_eq!(rate_of_b(&s, "alice"), None);
        assert!(!s.is_shared(QuotaKey::PRODUCER_BPS, &user("alice")));
        s.set_live(["a", "b"]);
        assert_eq!(rate_of_b(&s, "alice"), Some(5.0));
        // The cached part follows: alone, a has the whole limit; with b, less.
        let with_b = s
            .local_limit(QuotaKey::PRODUCER_BPS, &user("alice"), 3e6, 0)
            .unwrap();
        s.set_live(["a"]);
        let alone = s
            .local_limit(QuotaKey::PRODUCER_BPS, &user("alice"), 3e6, 0)
            .unwrap();
        assert!(
            (alone - 3e6).abs() < 1e-6 && with_b < alone,
            "{with_b} {alone}"
        );
    }

    /// A publisher and the splits it feeds agree on what the others hold of it, whatever the
    /// usage does and whichever records a receiver misses (it asks, the publisher sends its
    /// whole usage, and they agree again).
    #[test]
    fn what_a_receiver_holds_is_what_the_publisher_published() {
        let clock = Arc::new(ManualClock::new(1_000));
        let local = split("a", &clock);
        let remote = split("b", &clock);
        let mut p = UsagePublisher::new("a", 1, UsageThreshold::DEFAULT, 2_000, 500);
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut rates: Vec<f64> = vec![0.0; 40];
        let mut missed = 0;
        let mut compared = 0;
        for step in 0..400u64 {
            clock.advance(250);
            for r in rates.iter_mut() {
                match next() % 10 {
                    0 => *r = 0.0,
                    1 | 2 => *r *= 1.0 + (next() % 100) as f64 / 1000.0,
                    3 => *r = (next() % 1_000_000) as f64,
                    _ => {}
                }
            }
            let record = UsageRecord {
                instance: "a".into(),
                at_ms: 0,
                buckets: rates
                    .iter()
                    .enumerate()
                    .filter(|(_, r)| **r > 0.0)
                    .map(|(i, r)| BucketUsage {
                        key: QuotaKey::PRODUCER_BPS,
                        owner: user(&format!("u{i}")),
                        rate: *r,
                        limit: 1e6,
                        throttled: next() % 20 == 0,
                    })
                    .collect(),
            };
            let now = clock.now_ms();
            if remote.needs().contains(&"a".to_owned()) {
                p.request_reset(now);
            }
            let records = p.publish(&record, |_, _| false, vec![], now);
            local.update_deltas(&records, []);
            // A receiver knows it missed a record only at the next one it gets.
            let delivered = next() % 15 != 0;
            if delivered {
                remote.update_deltas(&[], records);
            } else {
                missed += 1;
            }
            if delivered && remote.needs().is_empty() {
                compared += 1;
                for i in 0..40 {
                    let owner = user(&format!("u{i}"));
                    let mine = local
                        .demands(QuotaKey::PRODUCER_BPS, &owner)
                        .map(|(me, _)| me);
                    let theirs = remote
                        .demands(QuotaKey::PRODUCER_BPS, &owner)
                        .and_then(|(_, o)| o.first().copied());
                    assert_eq!(mine, theirs, "step {step}, u{i}");
                }
            }
        }
        assert!(missed > 10 && compared > 250, "{missed} {compared}");
    }
}
