//! What an instance publishes of its `bps` usage: what the split needs, as deltas against its
//! previous records ([`UsageDelta`], version 2 of the usage record), and the publisher that
//! decides what goes in each ([`UsagePublisher`]). No I/O.
//!
//! A record is JSON:
//!
//! ```json
//! {"v":2,"instance":"broker-1","at_ms":1767225600000,"seq":1767225600000001,"reset":false,
//!  "complete":true,"need":["broker-3"],
//!  "buckets":[{"key":"producer_byte_rate:bps","owner":{"user":"alice"},"rate":2800000.0,
//!              "limit":1680000.0,"throttled":true}],
//!  "gone":[{"key":"consumer_byte_rate:bps","owner":{"client-id":"batch"}}]}
//! ```
//!
//! * `seq`: each record's is one more than the instance's previous one (it starts at the
//!   microseconds of its start, so a restarted instance's never repeat); a receiver that misses
//!   one knows it, stops using that instance's usage, and asks for it again.
//! * `reset`: the record replaces all the instance said before (its buckets are its whole
//!   usage); otherwise `buckets` are buckets new or changed and `gone` buckets it no longer
//!   has. A whole statement too large for one record spans several: the first has `reset`, all
//!   but the last have `"complete":false`.
//! * `need`: the instances whose usage this one lacks; each of them publishes its whole usage at
//!   its next interval.
//!
//! A version 1 record (the whole usage every interval, from an instance of an earlier release)
//! reads as a whole statement of its own.

use std::collections::HashMap;

use kquota::meter::BucketOwner;
use kquota::QuotaKey;
use serde::{Deserialize, Serialize};

use super::demand::Demand;
use super::record::{
    bps_key, bucket_of, encode_bucket, owner_of, wire_owner, BucketUsage, UsageRecord, WireBucket,
    WireOwner,
};
use crate::config::UsageThreshold;
use crate::error::UsageProblem;

/// One usage record of version 2: what changed since the instance's previous one.
#[derive(Clone, Debug, PartialEq)]
pub struct UsageDelta {
    /// The instance's id.
    pub instance: String,
    /// When it was made, by the publisher's wall clock (ms since the Unix epoch): for reading,
    /// never for judging age.
    pub at_ms: u64,
    /// Its number: one more than the instance's previous record's.
    pub seq: u64,
    /// Whether it replaces all the instance said before.
    pub reset: bool,
    /// Whether the instance's statement is whole after it (false on all but the last record of
    /// a whole statement that spans several).
    pub complete: bool,
    /// The instances whose usage this one lacks.
    pub need: Vec<String>,
    /// Buckets new or changed (with `reset`: every bucket).
    pub buckets: Vec<BucketUsage>,
    /// Buckets the instance no longer has.
    pub gone: Vec<(QuotaKey, BucketOwner)>,
}

#[derive(Serialize, Deserialize)]
struct WireHead {
    v: u32,
}

#[derive(Serialize, Deserialize)]
struct WireDelta {
    v: u32,
    instance: String,
    #[serde(default)]
    at_ms: u64,
    seq: u64,
    reset: bool,
    complete: bool,
    #[serde(default)]
    need: Vec<String>,
    #[serde(default)]
    buckets: Vec<WireBucket>,
    #[serde(default)]
    gone: Vec<WireGone>,
}

#[derive(Serialize, Deserialize)]
struct WireGone {
    key: String,
    owner: WireOwner,
}

impl UsageDelta {
    /// A whole statement in one record: what a version 1 record says.
    pub fn from_record(record: &UsageRecord, seq: u64) -> UsageDelta {
        UsageDelta {
            instance: record.instance.clone(),
            at_ms: record.at_ms,
            seq,
            reset: true,
            complete: true,
            need: Vec::new(),
            buckets: record.buckets.clone(),
            gone: Vec::new(),
        }
    }

    /// The record as JSON.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(160 + 100 * (self.buckets.len() + self.gone.len()));
        out.extend_from_slice(b"{\"v\":2,\"instance\":");
        serde_json::to_writer(&mut out, &self.instance).expect("a string always encodes");
        out.extend_from_slice(
            format!(
                ",\"at_ms\":{},\"seq\":{},\"reset\":{},\"complete\":{},\"need\":",
                self.at_ms, self.seq, self.reset, self.complete
            )
            .as_bytes(),
        );
        serde_json::to_writer(&mut out, &self.need).expect("strings always encode");
        out.extend_from_slice(b",\"buckets\":[");
        let mut first = true;
        for b in &self.buckets {
            let at = out.len();
            if !first {
                out.push(b',');
            }
            if encode_bucket(b, &mut out) {
                first = false;
            } else {
                out.truncate(at);
            }
        }
        out.extend_from_slice(b"],\"gone\":[");
        let mut first = true;
        for (key, owner) in &self.gone {
            let Some(owner) = wire_owner(owner) else {
                continue;
            };
            if !first {
                out.push(b',');
            }
            first = false;
            let gone = WireGone {
                key: key.to_string(),
                owner,
            };
            serde_json::to_writer(&mut out, &gone).expect("a bucket always encodes");
        }
        out.extend_from_slice(b"]}");
        out
    }

    /// Reads a record of version 2, or of version 1 (as a whole statement, numbered 0).
    /// Buckets of keys that are unknown or not `bps`, or without an owner, are skipped; a record
    /// of another version, or that is not JSON, is refused.
    pub fn decode(bytes: &[u8]) -> Result<UsageDelta, UsageProblem> {
        let head: WireHead = serde_json::from_slice(bytes)?;
        match head.v {
            1 => UsageRecord::decode(bytes).map(|r| UsageDelta::from_record(&r, 0)),
            2 => {
                let w: WireDelta = serde_json::from_slice(bytes)?;
                Ok(UsageDelta {
                    instance: w.instance,
                    at_ms: w.at_ms,
                    seq: w.seq,
                    reset: w.reset,
                    complete: w.complete,
                    need: w.need,
                    buckets: w.buckets.into_iter().filter_map(bucket_of).collect(),
                    gone: w
                        .gone
                        .into_iter()
                        .filter_map(|g| Some((bps_key(&g.key)?, owner_of(g.owner)?)))
                        .collect(),
                })
            }
            v => Err(UsageProblem::Version(v)),
        }
    }

    /// The bytes of JSON one bucket of this record takes, about (for cutting records to size).
    fn bucket_bytes(b: &BucketUsage) -> usize {
        let mut out = Vec::with_capacity(128);
        encode_bucket(b, &mut out);
        out.len() + 1
    }
}

/// Decides what an instance publishes of its usage at each interval, and keeps what the others
/// hold of it (which is also what its own split decides from, so that every instance decides
/// from the same demands).
///
/// A bucket is published when it is new; when its throttle state changed; when it is served by
/// another instance too (the split needs both sides exactly) and anything of it changed; and
/// otherwise when its rate moved by more than `threshold` of its limit (or of its rate, if
/// larger), or, while it throttles, its limit did. A bucket that left the meter is published as
/// gone. Nothing changed: the record says so (and that the instance is alive) with no buckets.
/// The whole usage goes out at the first record, and again when another instance asks for it
/// (`need`), at most once per `2 × interval` (a request repeated before the whole statement can
/// have arrived is not answered twice).
#[derive(Debug)]
pub struct UsagePublisher {
    instance: String,
    threshold: f64,
    seq: u64,
    max_bytes: usize,
    published: HashMap<(QuotaKey, BucketOwner), Demand>,
    reset_due: bool,
    last_reset_ms: Option<u64>,
    cooldown_ms: u64,
}

impl UsagePublisher {
    /// The publisher of instance `instance_id`, numbering its records from `first_seq`, with
    /// `threshold`, records of at most `max_bytes` of JSON, and
    /// whole statements asked for again answered at most every `cooldown_ms`.
    pub fn new(
        instance_id: &str,
        first_seq: u64,
        threshold: UsageThreshold,
        max_bytes: usize,
        cooldown_ms: u64,
    ) -> UsagePublisher {
        UsagePublisher {
            instance: instance_id.to_owned(),
            threshold: threshold.fraction(),
            seq: first_seq,
            max_bytes: max_bytes.max(1_024),
            published: HashMap::new(),
            reset_due: true,
            last_reset_ms: None,
            cooldown_ms,
        }
    }

    /// Another instance lacks this one's usage (it named it in `need`) at `now_ms`: the next
    /// publication is a whole statement, unless one went out within the cooldown.
    pub fn request_reset(&mut self, now_ms: u64) {
        let recent = self
            .last_reset_ms
            .is_some_and(|at| now_ms.saturating_sub(at) < self.cooldown_ms);
        if !recent {
            self.reset_due = true;
        }
    }

    /// The buckets the others hold of this instance.
    pub fn published(&self) -> usize {
        self.published.len()
    }

    /// The last record, at a clean stop: a whole statement of no buckets, so that the others
    /// count this instance as idle at once.
    pub fn farewell(&mut self, at_ms: u64) -> UsageDelta {
        self.seq += 1;
        self.published.clear();
        UsageDelta {
            instance: self.instance.clone(),
            at_ms,
            seq: self.seq,
            reset: true,
            complete: true,
            need: Vec::new(),
            buckets: Vec::new(),
            gone: Vec::new(),
        }
    }

    /// The records to publish at `now_ms` for `current`, this instance's usage now (a
    /// [`UsageTracker`](crate::UsageTracker) record of every `bps` bucket), given which buckets
    /// another instance also serves, and the instances whose usage this one lacks.
    pub fn publish(
        &mut self,
        current: &UsageRecord,
        shared: impl Fn(QuotaKey, &BucketOwner) -> bool,
        need: Vec<String>,
        now_ms: u64,
    ) -> Vec<UsageDelta> {
        let reset = std::mem::take(&mut self.reset_due);
        let mut changed = Vec::new();
        let mut next: HashMap<(QuotaKey, BucketOwner), Demand> =
            HashMap::with_capacity(current.buckets.len());
        for b in &current.buckets {
            let id = (b.key, b.owner.clone());
            let d = Demand::new(b.rate, b.limit, b.throttled);
            let old = self.published.get(&id).copied();
            let send = reset
                || match old {
                    None => true,
                    Some(old) => self.moved(old, d, shared(b.key, &b.owner)),
                };
            if send {
                changed.push(b.clone());
                next.insert(id, d);
            } else if let Some(old) = old {
                // What the others hold stays what was last sent.
                next.insert(id, old);
            }
        }
        let gone: Vec<(QuotaKey, BucketOwner)> = if reset {
            Vec::new()
        } else {
            self.published
                .keys()
                .filter(|id| !next.contains_key(*id))
                .cloned()
                .collect()
        };
        self.published = next;
        if reset {
            self.last_reset_ms = Some(now_ms);
        }
        self.cut(current.at_ms, reset, need, changed, gone)
    }

    /// Whether a bucket published as `old` and now `new` is to be published again.
    fn moved(&self, old: Demand, new: Demand, shared: bool) -> bool {
        if old.throttled != new.throttled {
            return true;
        }
        if shared {
            return old != new;
        }
        let scale = old.limit.max(new.limit).max(old.rate).max(new.rate);
        let rate = (new.rate - old.rate).abs() > self.threshold * scale;
        // A limit matters to the split only while the bucket throttles (its ask is then what it
        // has plus the growth).
        let limit = new.throttled
            && (new.limit - old.limit).abs() > self.threshold * old.limit.max(new.limit);
        rate || limit
    }

    /// The records saying it, each of at most `max_bytes`.
    fn cut(
        &mut self,
        at_ms: u64,
        reset: bool,
        need: Vec<String>,
        changed: Vec<BucketUsage>,
        gone: Vec<(QuotaKey, BucketOwner)>,
    ) -> Vec<UsageDelta> {
        // The envelope, the need list, and room for the gone buckets' entries.
        let base = 200 + need.iter().map(|n| n.len() + 3).sum::<usize>();
        let mut records = Vec::new();
        let mut buckets = Vec::new();
        let mut bytes = base;
        let instance = self.instance.clone();
        let push = |records: &mut Vec<UsageDelta>, buckets: Vec<BucketUsage>, seq: &mut u64| {
            *seq += 1;
            records.push(UsageDelta {
                instance: instance.clone(),
                at_ms,
                seq: *seq,
                reset: reset && records.is_empty(),
                complete: true,
                need: if records.is_empty() {
                    need.clone()
                } else {
                    Vec::new()
                },
                buckets,
                gone: Vec::new(),
            });
        };
        for b in changed {
            let size = UsageDelta::bucket_bytes(&b);
            if !buckets.is_empty() && bytes + size > self.max_bytes {
                push(&mut records, std::mem::take(&mut buckets), &mut self.seq);
                bytes = base;
            }
            bytes += size;
            buckets.push(b);
        }
        push(&mut records, buckets, &mut self.seq);
        // The gone buckets ride in the last record, or in records of their own.
        let mut left = gone;
        while !left.is_empty() {
            let room = (self.max_bytes.saturating_sub(bytes) / 100).max(1);
            let rest = left.split_off(room.min(left.len()));
            let last = records.last_mut().expect("one record at least");
            last.gone.extend(left);
            left = rest;
            if !left.is_empty() {
                push(&mut records, Vec::new(), &mut self.seq);
                bytes = base;
            }
        }
        if reset {
            // A whole statement is whole after its last record only.
            let n = records.len();
            for r in &mut records[..n - 1] {
                r.complete = false;
            }
        }
        records
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn bucket(user: &str, rate: f64, limit: f64, throttled: bool) -> BucketUsage {
        BucketUsage {
            key: QuotaKey::PRODUCER_BPS,
            owner: BucketOwner::User(Arc::from(user)),
            rate,
            limit,
            throttled,
        }
    }

    fn record(buckets: Vec<BucketUsage>) -> UsageRecord {
        UsageRecord {
            instance: "a".into(),
            at_ms: 7,
            buckets,
        }
    }

    #[test]
    fn records_round_trip_in_the_documented_form() {
        let d = UsageDelta {
            instance: "broker-1".into(),
            at_ms: 17,
            seq: 41,
            reset: false,
            complete: true,
            need: vec!["broker-3".into()],
            buckets: vec![bucket("alice", 2.8e6, 1.68e6, true)],
            gone: vec![(
                QuotaKey::CONSUMER_BPS,
                BucketOwner::ClientId(Arc::from("batch")),
            )],
        };
        let text = String::from_utf8(d.encode()).unwrap();
        assert_eq!(
            text,
            r#"{"v":2,"instance":"broker-1","at_ms":17,"seq":41,"reset":false,"complete":true,"need":["broker-3"],"buckets":[{"key":"producer_byte_rate:bps","owner":{"user":"alice"},"rate":2800000.0,"limit":1680000.0,"throttled":true}],"gone":[{"key":"consumer_byte_rate:bps","owner":{"client-id":"batch"}}]}"#
        );
        assert_eq!(UsageDelta::decode(text.as_bytes()).unwrap(), d);
        // A version 1 record reads as a whole statement.
        let v1 = record(vec![bucket("bob", 5.0, 9.0, false)]);
        let back = UsageDelta::decode(&v1.encode(100_000).0).unwrap();
        assert!(back.reset && back.complete && back.seq == 0);
        assert_eq!(back.buckets, v1.buckets);
        assert_eq!(
            UsageDelta::decode(br#"{"v":3}"#),
            Err(UsageProblem::Version(3))
        );
        // Not an object, and an object that is not a record: malformed, with serde's reason.
        for bad in [&b"[]"[..], br#"{"v":2,"instance":"a"}"#] {
            match UsageDelta::decode(bad) {
                Err(UsageProblem::Malformed(why)) => assert!(!why.is_empty()),
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn only_what_moved_beyond_the_threshold_is_published_again() {
        let mut p = UsagePublisher::new("a", 100, UsageThreshold::DEFAULT, 900_000, 500);
        let alone = |_: QuotaKey, _: &BucketOwner| false;
        let first = p.publish(
            &record(vec![
                bucket("quiet", 1_000.0, 1e6, false),
                bucket("busy", 5e5, 1e6, false),
            ]),
            alone,
            vec![],
            0,
        );
        assert_eq!(first.len(), 1);
        assert!(first[0].reset && first[0].complete && first[0].seq == 101);
        assert_eq!(first[0].buckets.len(), 2);
        // quiet moves by 1 KB/s of a 1 MB/s limit (0.1 %), busy by 5 %: only busy.
        let second = p.publish(
            &record(vec![
                bucket("quiet", 2_000.0, 1e6, false),
                bucket("busy", 5.5e5, 1e6, false),
            ]),
            alone,
            vec![],
            250,
        );
        assert!(!second[0].reset);
        assert_eq!(second[0].seq, 102);
        let names: Vec<String> = second[0]
            .buckets
            .iter()
            .map(|b| b.owner.to_string())
            .collect();
        assert_eq!(names, ["(user=busy)"]);
        // Nothing moved: a record with no buckets (the instance is alive, its usage unchanged).
        let third = p.publish(
            &record(vec![
                bucket("quiet", 2_100.0, 1e6, false),
                bucket("busy", 5.5e5, 1.01e6, false),
            ]),
            alone,
            vec![],
            500,
        );
        assert!(third[0].buckets.is_empty() && third[0].gone.is_empty());
        // A throttle, however small the move; a limit that moves while throttling.
        let fourth = p.publish(
            &record(vec![
                bucket("quiet", 2_100.0, 1e6, true),
                bucket("busy", 5.5e5, 1.01e6, false),
            ]),
            alone,
            vec![],
            750,
        );
        assert_eq!(fourth[0].buckets.len(), 1);
        let fifth = p.publish(
            &record(vec![
                bucket("quiet", 2_100.0, 1.1e6, true),
                bucket("busy", 5.5e5, 1.01e6, false),
            ]),
            alone,
            vec![],
            1_000,
        );
        assert_eq!(fifth[0].buckets.len(), 1);
        // Served by another instance too: any change goes out.
        let shared = |_: QuotaKey, o: &BucketOwner| o.to_string() == "(user=busy)";
        let sixth = p.publish(
            &record(vec![
                bucket("quiet", 2_100.0, 1.1e6, true),
                bucket("busy", 5.5001e5, 1.01e6, false),
            ]),
            shared,
            vec![],
            1_250,
        );
        assert_eq!(sixth[0].buckets.len(), 1);
        assert_eq!(sixth[0].buckets[0].owner.to_string(), "(user=busy)");
        // Gone from the meter: published as gone.
        let seventh = p.publish(
            &record(vec![bucket("busy", 5.5001e5, 1.01e6, false)]),
            alone,
            vec![],
            1_500,
        );
        assert_eq!(seventh[0].gone.len(), 1);
        assert_eq!(p.published(), 1);
    }

    #[test]
    fn a_whole_statement_asked_for_goes_out_once_per_cooldown_and_in_parts() {
        let mut p = UsagePublisher::new("a", 0, UsageThreshold::DEFAULT, 4_000, 500);
        let alone = |_: QuotaKey, _: &BucketOwner| false;
        let many: Vec<BucketUsage> = (0..200)
            .map(|i| bucket(&format!("u{i}"), 1.0, 1e6, false))
            .collect();
        let first = p.publish(&record(many.clone()), alone, vec!["b".into()], 0);
        assert!(first.len() > 3, "{}", first.len());
        assert!(first[0].reset && !first[1].reset);
        assert_eq!(first[0].need, ["b"]);
        assert!(first[..first.len() - 1].iter().all(|r| !r.complete));
        assert!(first.last().unwrap().complete);
        assert!(first.iter().all(|r| r.encode().len() <= 4_000));
        let seqs: Vec<u64> = first.iter().map(|r| r.seq).collect();
        assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1));
        assert_eq!(first.iter().map(|r| r.buckets.len()).sum::<usize>(), 200);
        // Asked again at once: no second whole statement within the cooldown.
        p.request_reset(100);
        let again = p.publish(&record(many.clone()), alone, vec![], 250);
        assert!(!again[0].reset && again.len() == 1 && again[0].buckets.is_empty());
        p.request_reset(600);
        let later = p.publish(&record(many), alone, vec![], 750);
        assert!(later[0].reset);
    }
}
