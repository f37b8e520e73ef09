//! What an instance says of its `bps` buckets: the usage record, its JSON form, and the tracker
//! that makes one from the meter's snapshot.
//!
//! A record is JSON:
//!
//! ```json
//! {"v":1,"instance":"broker-1","at_ms":1767225600000,"buckets":[
//!   {"key":"producer_byte_rate:bps","owner":{"user":"alice"},"rate":2800000.0,"limit":1680000.0,"throttled":true}]}
//! ```
//!
//! * `at_ms`: the publisher's wall clock, for people reading the topic; never used to judge age
//!   (the receiver's own clock is, so the hosts' clocks need not agree);
//! * `owner`: `user` and/or `client-id`, as the bucket is shared;
//! * `rate`: the bucket's windowed rate on the instance (bytes/s); `limit`: the limit it last
//!   applied there; `throttled`: whether it throttled a request lately ([`UsageTracker`] says
//!   how lately).
//!
//! Only buckets of `bps` keys are recorded, the largest rates first, at most
//! [`DEFAULT_MAX_BUCKETS`] of them and at most [`MAX_RECORD_BYTES`] of JSON (Kafka's default
//! largest record is 1 MB); a bucket left out counts, for the others, as idle on that instance.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use kquota::meter::{BucketOwner, BucketSnapshot};
use kquota::{QuotaKey, Unit};
use serde::{Deserialize, Serialize};

use super::demand::sane_rate;
use crate::error::UsageProblem;
use crate::time::millis;

/// The most buckets one usage record carries.
pub const DEFAULT_MAX_BUCKETS: usize = 10_000;
/// The most bytes of JSON one usage record takes (under Kafka's default largest record, 1 MB).
pub const MAX_RECORD_BYTES: usize = 900_000;

/// One instance's use of its `bps` buckets at one time: what a usage record says.
#[derive(Clone, Debug, PartialEq)]
pub struct UsageRecord {
    /// The instance's id.
    pub instance: String,
    /// When it was made, by the publisher's wall clock (ms since the Unix epoch): for reading,
    /// never for judging age.
    pub at_ms: u64,
    /// Its buckets, the largest rates first.
    pub buckets: Vec<BucketUsage>,
}

/// One bucket of a [`UsageRecord`].
#[derive(Clone, Debug, PartialEq)]
pub struct BucketUsage {
    /// The key metered (a `bps` key).
    pub key: QuotaKey,
    /// Who shares the bucket.
    pub owner: BucketOwner,
    /// Its windowed rate on the instance, bytes/s.
    pub rate: f64,
    /// The limit it last applied on the instance, bytes/s.
    pub limit: f64,
    /// Whether it throttled a request since the instance's previous record.
    pub throttled: bool,
}

#[derive(Serialize, Deserialize)]
struct WireRecord {
    v: u32,
    instance: String,
    #[serde(default)]
    at_ms: u64,
    #[serde(default)]
    buckets: Vec<WireBucket>,
}

#[derive(Serialize, Deserialize)]
pub(crate) struct WireBucket {
    key: String,
    owner: WireOwner,
    rate: f64,
    #[serde(default)]
    limit: f64,
    #[serde(default)]
    throttled: bool,
}

#[derive(Serialize, Deserialize)]
pub(crate) struct WireOwner {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    user: Option<String>,
    #[serde(rename = "client-id", default, skip_serializing_if = "Option::is_none")]
    client_id: Option<String>,
}

/// The owner as a record names it; `None` for an `ip` owner (no `bps` key has one).
pub(crate) fn wire_owner(owner: &BucketOwner) -> Option<WireOwner> {
    Some(match owner {
        BucketOwner::UserClient(u, c) => WireOwner {
            user: Some(u.to_string()),
            client_id: Some(c.to_string()),
        },
        BucketOwner::User(u) => WireOwner {
            user: Some(u.to_string()),
            client_id: None,
        },
        BucketOwner::ClientId(c) => WireOwner {
            user: None,
            client_id: Some(c.to_string()),
        },
        BucketOwner::Ip(_) => return None,
    })
}

/// The owner a record names; `None` for neither a user nor a client id.
pub(crate) fn owner_of(owner: WireOwner) -> Option<BucketOwner> {
    Some(match (owner.user, owner.client_id) {
        (Some(u), Some(c)) => BucketOwner::UserClient(Arc::from(u), Arc::from(c)),
        (Some(u), None) => BucketOwner::User(Arc::from(u)),
        (None, Some(c)) => BucketOwner::ClientId(Arc::from(c)),
        (None, None) => return None,
    })
}

/// A `bps` key a record names; `None` for a key unknown or not `bps`.
pub(crate) fn bps_key(key: &str) -> Option<QuotaKey> {
    let key: QuotaKey = key.parse().ok()?;
    (key.unit() == Unit::Bps).then_some(key)
}

/// Appends bucket `b`'s JSON to `out`; false (nothing appended) for an `ip` owner.
pub(crate) fn encode_bucket(b: &BucketUsage, out: &mut Vec<u8>) -> bool {
    let Some(owner) = wire_owner(&b.owner) else {
        return false;
    };
    let wire = WireBucket {
        key: b.key.to_string(),
        owner,
        rate: finite(b.rate),
        limit: finite(b.limit),
        throttled: b.throttled,
    };
    serde_json::to_writer(out, &wire).expect("a bucket always encodes");
    true
}

/// The bucket a record's entry names; `None` for one of a key unknown or not `bps`, or without
/// an owner.
pub(crate) fn bucket_of(b: WireBucket) -> Option<BucketUsage> {
    Some(BucketUsage {
        key: bps_key(&b.key)?,
        owner: owner_of(b.owner)?,
        rate: sane_rate(b.rate),
        limit: finite(b.limit),
        throttled: b.throttled,
    })
}

/// A number JSON can carry (it has no NaN nor infinities).
pub(crate) fn finite(x: f64) -> f64 {
    if x.is_finite() {
        x
    } else {
        0.0
    }
}

impl UsageRecord {
    /// The record as JSON, its buckets in order until the next one would take it over
    /// `max_bytes`; and how many buckets it holds. Buckets without a user / client-id owner
    /// (`ip` ones: no `bps` key has them) are left out.
    pub fn encode(&self, max_bytes: usize) -> (Vec<u8>, usize) {
        let mut out = Vec::with_capacity(128 + 96 * self.buckets.len().min(1_000));
        out.extend_from_slice(b"{\"v\":1,\"instance\":");
        serde_json::to_writer(&mut out, &self.instance).expect("a string always encodes");
        out.extend_from_slice(format!(",\"at_ms\":{},\"buckets\":[", self.at_ms).as_bytes());
        let mut taken = 0;
        let mut item = Vec::with_capacity(128);
        for b in &self.buckets {
            item.clear();
            if taken > 0 {
                item.push(b',');
            }
            if !encode_bucket(b, &mut item) {
                continue;
            }
            if out.len() + item.len() + 2 > max_bytes {
                break;
            }
            out.extend_from_slice(&item);
            taken += 1;
        }
        out.extend_from_slice(b"]}");
        (out, taken)
    }

    /// Reads a record. Buckets of keys that are unknown or not `bps`, or without an owner, are
    /// skipped; a record of another version than 1, or that is not JSON, is refused.
    pub fn decode(bytes: &[u8]) -> Result<UsageRecord, UsageProblem> {
        let wire: WireRecord = serde_json::from_slice(bytes)?;
        if wire.v != 1 {
            return Err(UsageProblem::Version(wire.v));
        }
        let buckets = wire.buckets.into_iter().filter_map(bucket_of).collect();
        Ok(UsageRecord {
            instance: wire.instance,
            at_ms: wire.at_ms,
            buckets,
        })
    }
}

/// Turns a meter's snapshots into usage records, keeping what it needs of each bucket from one
/// record to the next.
///
/// A bucket counts as throttled if it throttled a request within the last second (by default:
/// [`with_hold`](UsageTracker::with_hold)), or if its clients are still waiting out a throttle
/// handed out earlier (until the average throttle of the interval it was handed out in has
/// passed). A saturated bucket whose clients are all muted hands out no throttle for a while,
/// and is still short of what it was given; one that stops being throttled for a moment, as
/// its windowed rate goes up and down, is still short too.
#[derive(Debug)]
pub struct UsageTracker {
    instance: String,
    max_buckets: usize,
    hold_ms: u64,
    seen: HashMap<(QuotaKey, BucketOwner), Seen>,
}

/// A bucket as the previous record saw it.
#[derive(Clone, Copy, Debug, Default)]
struct Seen {
    throttle_count: u64,
    throttle_ms_total: u64,
    /// Until when (the tracker's clock) its clients are taken to wait out a throttle.
    muted_until: u64,
    /// When it last throttled (the tracker's clock), if ever.
    throttled_at: Option<u64>,
}

impl UsageTracker {
    /// The tracker of instance `instance_id`, putting at most `max_buckets` buckets in a record.
    pub fn new(instance_id: &str, max_buckets: usize) -> UsageTracker {
        UsageTracker {
            instance: instance_id.to_owned(),
            max_buckets,
            hold_ms: 1_000,
            seen: HashMap::new(),
        }
    }

    /// A bucket counts as throttled for `hold` after its last throttle (default one second).
    pub fn with_hold(mut self, hold: Duration) -> UsageTracker {
        self.hold_ms = millis(hold);
        self
    }

    /// The record of `snapshot` ([`Meter::snapshot`](kquota::meter::Meter::snapshot)) taken at `now_ms` by a monotonic clock
    /// (any: only differences are used), stamped `at_ms` (the wall clock): its `bps` buckets,
    /// the largest rates first, at most `max_buckets`.
    pub fn record(&mut self, snapshot: &[BucketSnapshot], now_ms: u64, at_ms: u64) -> UsageRecord {
        let mut seen = HashMap::with_capacity(self.seen.len());
        let mut buckets: Vec<BucketUsage> = snapshot
            .iter()
            .filter(|b| b.key.unit() == Unit::Bps)
            .map(|b| {
                let id = (b.key, b.owner.clone());
                let before = self.seen.get(&id).copied().unwrap_or_default();
                let count = b.throttle_count.saturating_sub(before.throttle_count);
                let mut now = Seen {
                    throttle_count: b.throttle_count,
                    throttle_ms_total: b.throttle_ms_total,
                    ..before
                };
                let ms = b.throttle_ms_total.saturating_sub(before.throttle_ms_total);
                if let Some(average) = ms.checked_div(count) {
                    now.muted_until = now.muted_until.max(now_ms.saturating_add(average));
                    now.throttled_at = Some(now_ms);
                }
                seen.insert(id, now);
                let held = now
                    .throttled_at
                    .is_some_and(|at| now_ms.saturating_sub(at) < self.hold_ms);
                BucketUsage {
                    key: b.key,
                    owner: b.owner.clone(),
                    rate: sane_rate(b.measured),
                    limit: finite(b.limit),
                    throttled: held || now_ms < now.muted_until,
                }
            })
            .collect();
        // Buckets gone from the meter are forgotten with it.
        self.seen = seen;
        buckets.sort_by(|a, b| b.rate.total_cmp(&a.rate));
        buckets.truncate(self.max_buckets);
        UsageRecord {
            instance: self.instance.clone(),
            at_ms,
            buckets,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kquota::Level;

    fn snap(key: QuotaKey, owner: BucketOwner, measured: f64, throttles: u64) -> BucketSnapshot {
        BucketSnapshot {
            key,
            owner,
            level: Some(Level::User),
            limit: 1e6,
            measured,
            recorded_total: 0.0,
            throttle_ms_total: 0,
            throttle_count: throttles,
            bps_view: Some(kquota::BpsView::SharedUsage),
            clients: Vec::new(),
            clients_other: 0.0,
        }
    }

    fn user(u: &str) -> BucketOwner {
        BucketOwner::User(Arc::from(u))
    }

    #[test]
    fn records_round_trip_in_the_documented_form() {
        let record = UsageRecord {
            instance: "broker-1".into(),
            at_ms: 17,
            buckets: vec![
                BucketUsage {
                    key: QuotaKey::PRODUCER_BPS,
                    owner: user("alice"),
                    rate: 123.5,
                    limit: 1000.0,
                    throttled: true,
                },
                BucketUsage {
                    key: QuotaKey::CONSUMER_BPS,
                    owner: BucketOwner::UserClient(Arc::from("bob"), Arc::from("c\"1")),
                    rate: 7.0,
                    limit: 8.0,
                    throttled: false,
                },
                BucketUsage {
                    key: QuotaKey::CONSUMER_BPS,
                    owner: BucketOwner::ClientId(Arc::from("c2")),
                    rate: 1.0,
                    limit: 2.0,
                    throttled: false,
                },
            ],
        };
        let (bytes, taken) = record.encode(MAX_RECORD_BYTES);
        assert_eq!(taken, 3);
        let text = String::from_utf8(bytes.clone()).unwrap();
        assert!(
            text.starts_with(
                "{\"v\":1,\"instance\":\"broker-1\",\"at_ms\":17,\"buckets\":[{\"key\":\"producer_byte_rate:bps\",\"owner\":{\"user\":\"alice\"},\"rate\":123.5,\"limit\":1000.0,\"throttled\":true},"
            ),
            "{text}"
        );
        assert!(text.contains("\"owner\":{\"user\":\"bob\",\"client-id\":\"c\\\"1\"}"));
        // It is JSON as a whole.
        let _: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(UsageRecord::decode(&bytes).unwrap(), record);
    }

    #[test]
    fn records_stop_before_the_byte_limit() {
        let record = UsageRecord {
            instance: "a".into(),
            at_ms: 0,
            buckets: (0..1_000)
                .map(|i| BucketUsage {
                    key: QuotaKey::PRODUCER_BPS,
                    owner: user(&format!("user-{i}")),
                    rate: f64::from(1_000 - i),
                    limit: 1.0,
                    throttled: false,
                })
                .collect(),
        };
        let (bytes, taken) = record.encode(10_000);
        assert!(bytes.len() <= 10_000, "{}", bytes.len());
        assert!(taken > 50 && taken < 1_000, "{taken}");
        let back = UsageRecord::decode(&bytes).unwrap();
        assert_eq!(back.buckets[..], record.buckets[..taken]);
    }

    #[test]
    fn odd_records_are_read_safely() {
        assert!(matches!(
            UsageRecord::decode(b"not json"),
            Err(UsageProblem::Malformed(_))
        ));
        let v2 = UsageRecord::decode(br#"{"v":2,"instance":"a","buckets":[]}"#);
        assert_eq!(v2, Err(UsageProblem::Version(2)));
        assert_eq!(v2.unwrap_err().to_string(), "version 2 is not understood");
        let r = UsageRecord::decode(
            br#"{"v":1,"instance":"a","future":1,"buckets":[
                {"key":"producer_byte_rate","owner":{"user":"x"},"rate":1},
                {"key":"furlongs","owner":{"user":"x"},"rate":1},
                {"key":"consumer_byte_rate:bps","owner":{},"rate":1},
                {"key":"consumer_byte_rate:bps","owner":{"client-id":"c"},"rate":-5,"extra":true}]}"#,
        )
        .unwrap();
        assert_eq!(r.at_ms, 0);
        assert_eq!(r.buckets.len(), 1);
        assert_eq!(r.buckets[0].owner, BucketOwner::ClientId(Arc::from("c")));
        assert_eq!(r.buckets[0].rate, 0.0);
        // Not-a-number cannot be written as JSON: it goes out as 0.
        let nan = UsageRecord {
            instance: "a".into(),
            at_ms: 0,
            buckets: vec![BucketUsage {
                key: QuotaKey::PRODUCER_BPS,
                owner: user("u"),
                rate: f64::NAN,
                limit: f64::INFINITY,
                throttled: false,
            }],
        };
        let back = UsageRecord::decode(&nan.encode(1_000).0).unwrap();
        assert_eq!((back.buckets[0].rate, back.buckets[0].limit), (0.0, 0.0));
    }

    #[test]
    fn the_tracker_keeps_bps_buckets_largest_first_and_sees_throttles_move() {
        let mut tracker = UsageTracker::new("a", 2);
        let first = tracker.record(
            &[
                snap(QuotaKey::PRODUCER_BPS, user("small"), 10.0, 0),
                snap(QuotaKey::PRODUCER_BROKER_BPS, user("native"), 1e9, 5),
                snap(QuotaKey::PRODUCER_BPS, user("big"), 1000.0, 3),
                snap(QuotaKey::CONSUMER_BPS, user("mid"), 100.0, 0),
            ],
            5_000,
            17,
        );
        assert_eq!(first.at_ms, 17);
        let names: Vec<String> = first.buckets.iter().map(|b| b.owner.to_string()).collect();
        assert_eq!(names, ["(user=big)", "(user=mid)"]);
        assert!(first.buckets[0].throttled, "a new bucket that throttled");
        assert!(!first.buckets[1].throttled);
        // Within the hold (a second), big still counts as throttled; mid throttles now.
        let second = tracker.record(
            &[
                snap(QuotaKey::PRODUCER_BPS, user("big"), 1000.0, 3),
                snap(QuotaKey::CONSUMER_BPS, user("mid"), 100.0, 1),
                snap(QuotaKey::PRODUCER_BPS, user("small"), 10.0, 0),
            ],
            5_900,
            18,
        );
        assert!(second.buckets[0].throttled, "big, held");
        assert!(second.buckets[1].throttled, "mid throttled since");
        // Past the hold, with no new throttle: no longer.
        let third = tracker.record(
            &[
                snap(QuotaKey::PRODUCER_BPS, user("big"), 1000.0, 3),
                snap(QuotaKey::CONSUMER_BPS, user("mid"), 100.0, 1),
            ],
            6_000,
            19,
        );
        assert!(!third.buckets[0].throttled, "big, a second after");
        assert!(third.buckets[1].throttled, "mid, held");
        // A bucket left out of a record still has its count kept.
        let fourth = tracker.record(
            &[snap(QuotaKey::PRODUCER_BPS, user("small"), 5000.0, 0)],
            9_000,
            20,
        );
        assert_eq!(fourth.buckets.len(), 1);
        assert!(!fourth.buckets[0].throttled);
    }

    #[test]
    fn a_bucket_waiting_out_a_long_throttle_still_counts_as_throttled() {
        let mut tracker = UsageTracker::new("a", 10).with_hold(Duration::from_millis(100));
        let mut s = snap(QuotaKey::PRODUCER_BPS, user("u"), 1000.0, 0);
        assert!(!tracker.record(&[s.clone()], 0, 0).buckets[0].throttled);
        // Two throttles of 4 s each on average, handed out by 1_000.
        s.throttle_count = 2;
        s.throttle_ms_total = 8_000;
        assert!(tracker.record(&[s.clone()], 1_000, 0).buckets[0].throttled);
        // No new throttle since, but the clients are still muted until 5_000.
        assert!(tracker.record(&[s.clone()], 4_900, 0).buckets[0].throttled);
        assert!(!tracker.record(&[s.clone()], 5_000, 0).buckets[0].throttled);
    }
}
