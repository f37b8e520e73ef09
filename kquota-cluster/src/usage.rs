//! Usage sharing: each instance's use of its `bps` buckets, published to the usage topic every
//! `usage_interval` and read by the others, from which each takes its part of every cluster-wide
//! `bps` limit ([`SharedSplit`]).
//!
//! A record (key: the instance's id) is JSON:
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
//! Only buckets of `bps` keys are published, the largest rates first, at most
//! [`DEFAULT_MAX_BUCKETS`] of them and at most [`MAX_RECORD_BYTES`] of JSON (Kafka's default
//! largest record is 1 MB); a bucket left out counts, for the others, as idle on that instance.
//! The topic is created if missing: one partition, `cleanup.policy=delete`, five minutes'
//! retention (only the latest records matter, and they are read from the end). A clean stop
//! publishes a last record with no buckets, so that the others stop counting this instance's
//! usage at once.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use kquota::meter::{BucketOwner, BucketSnapshot, Clock, Meter, SystemClock};
use kquota::{QuotaKey, Unit};
use rdkafka::consumer::BaseConsumer;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Message, Offset};
use serde::{Deserialize, Serialize};

use crate::config::{ClusterConfig, ClusterError};
use crate::members::{assign, consumer, kafka, millis, partitions, producer_config, Members, POLL};
use crate::split::{sane_rate, SharedSplit, SplitParams};
use crate::topics::{ensure_topic, TopicSpec, TracingContext};

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
struct WireBucket {
    key: String,
    owner: WireOwner,
    rate: f64,
    #[serde(default)]
    limit: f64,
    #[serde(default)]
    throttled: bool,
}

#[derive(Serialize, Deserialize)]
struct WireOwner {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    user: Option<String>,
    #[serde(rename = "client-id", default, skip_serializing_if = "Option::is_none")]
    client_id: Option<String>,
}

/// A number JSON can carry (it has no NaN nor infinities).
fn finite(x: f64) -> f64 {
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
            let owner = match &b.owner {
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
                BucketOwner::Ip(_) => continue,
            };
            item.clear();
            if taken > 0 {
                item.push(b',');
            }
            let wire = WireBucket {
                key: b.key.to_string(),
                owner,
                rate: finite(b.rate),
                limit: finite(b.limit),
                throttled: b.throttled,
            };
            serde_json::to_writer(&mut item, &wire).expect("a bucket always encodes");
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
    pub fn decode(bytes: &[u8]) -> Result<UsageRecord, String> {
        let wire: WireRecord = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
        if wire.v != 1 {
            return Err(format!("version {} is not understood", wire.v));
        }
        let buckets = wire
            .buckets
            .into_iter()
            .filter_map(|b| {
                let key: QuotaKey = b.key.parse().ok()?;
                if key.unit() != Unit::Bps {
                    return None;
                }
                let owner = match (b.owner.user, b.owner.client_id) {
                    (Some(u), Some(c)) => BucketOwner::UserClient(Arc::from(u), Arc::from(c)),
                    (Some(u), None) => BucketOwner::User(Arc::from(u)),
                    (None, Some(c)) => BucketOwner::ClientId(Arc::from(c)),
                    (None, None) => return None,
                };
                Some(BucketUsage {
                    key,
                    owner,
                    rate: sane_rate(b.rate),
                    limit: finite(b.limit),
                    throttled: b.throttled,
                })
            })
            .collect();
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

    /// The record of `snapshot` ([`Meter::snapshot`]) taken at `now_ms` by a monotonic clock
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

fn wall_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, millis)
}

/// Shares this instance's `bps` usage through the usage topic and splits the cluster-wide `bps`
/// limits of its meter by everyone's ([`SharedSplit`], installed with
/// [`Meter::set_bps_split`]), among the instances [`Membership`](crate::Membership) says are live.
///
/// The split declines, and the meter divides the limit by the live instance count, while the
/// view is incomplete or older than `usage_max_age`: at start-up until every live instance's
/// record has arrived (within one `usage_interval`), when Kafka cannot be reached, and when an
/// instance stops publishing before the membership drops it. It answers again as soon as the
/// records do.
#[derive(Debug)]
pub struct UsageShare {
    split: Arc<SharedSplit>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl UsageShare {
    /// Starts sharing `meter`'s usage with the default [`SplitParams`].
    pub fn start(
        config: &ClusterConfig,
        meter: Meter,
        members: &crate::Membership,
    ) -> Result<UsageShare, ClusterError> {
        UsageShare::start_with(config, meter, members, SplitParams::default())
    }

    /// Starts sharing `meter`'s usage: creates the usage topic if it is missing, publishes every
    /// `usage_interval`, reads the others' records from the end, and installs the split in the
    /// meter. Fails if Kafka cannot be reached or refuses the topic or the clients' settings, and
    /// with [`ClusterError::Config`] if the meter already has a split (a meter keeps the first
    /// one it is given).
    pub fn start_with(
        config: &ClusterConfig,
        meter: Meter,
        members: &crate::Membership,
        params: SplitParams,
    ) -> Result<UsageShare, ClusterError> {
        if members.instance_id() != config.instance_id {
            tracing::warn!(
                "usage: the membership is instance {}, the usage instance {}",
                members.instance_id(),
                config.instance_id
            );
        }
        let topic = config.usage_topic.clone();
        ensure_topic(config, &TopicSpec::usage(&topic), config.open_timeout)?;
        let max_age_ms = millis(config.usage_max_age).max(1).to_string();
        let producer: BaseProducer = producer_config(config)
            // A record older than the view's age limit would be refused by every reader.
            .set("message.timeout.ms", &max_age_ms)
            .set("compression.codec", "lz4")
            .create()
            .map_err(kafka)?;
        let consumer = consumer(config, "usage")?;
        let all = partitions(&consumer, &topic, config.open_timeout)?;
        assign(&consumer, &topic, &all, Offset::End, config.open_timeout)?;

        let clock: Arc<dyn Clock> = Arc::new(SystemClock::new());
        let split = Arc::new(SharedSplit::new(
            &config.instance_id,
            params,
            config.usage_max_age,
            Arc::clone(&clock),
        ));
        let members = members.members();
        split.set_live(members.live().0.iter());
        if !meter.set_bps_split(Arc::clone(&split) as Arc<dyn kquota::meter::BpsSplit>) {
            // A meter keeps its first split: sharing into another one would change nothing here.
            return Err(ClusterError::Config(
                "the meter already has a bps split (a meter takes one, once)".to_owned(),
            ));
        }
        let stop = Arc::new(AtomicBool::new(false));
        let mut worker = Worker {
            topic,
            interval: config.usage_interval.max(Duration::from_millis(1)),
            tracker: UsageTracker::new(&config.instance_id, DEFAULT_MAX_BUCKETS),
            clock,
            meter,
            members,
            split: Arc::clone(&split),
            producer,
            consumer,
            stop: Arc::clone(&stop),
        };
        let thread = std::thread::Builder::new()
            .name(format!("kquota-usage-{}", config.instance_id))
            .spawn(move || worker.run())
            .map_err(|e| ClusterError::Kafka(format!("cannot start the usage thread: {e}")))?;
        Ok(UsageShare {
            split,
            stop,
            thread: Some(thread),
        })
    }

    /// The split, as installed in the meter (to see whether it answers, or ask it directly).
    pub fn split(&self) -> &Arc<SharedSplit> {
        &self.split
    }

    /// Stops sharing: publishes a last record with no buckets (the others then take this
    /// instance as idle at once), and the split declines from then on.
    pub fn stop(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        self.split.stop();
    }
}

impl Drop for UsageShare {
    fn drop(&mut self) {
        self.halt();
    }
}

/// The usage thread: this instance's records out, the others' in.
struct Worker {
    topic: String,
    interval: Duration,
    tracker: UsageTracker,
    clock: Arc<dyn Clock>,
    meter: Meter,
    members: Arc<Members>,
    split: Arc<SharedSplit>,
    producer: BaseProducer,
    consumer: BaseConsumer<TracingContext>,
    stop: Arc<AtomicBool>,
}

impl Worker {
    fn run(&mut self) {
        let mut next_publish = Instant::now();
        let mut generation = None;
        let me = self.split.instance_id().to_owned();
        // Others' records are gathered and handed to the split together, with this instance's
        // own at each publication or within half an interval, so that the split's table (whose
        // rebuild costs the buckets of every instance) is rebuilt at most about three times an
        // interval however many instances there are. A record's receipt counts from then: at
        // most half an interval late.
        let mut pending: Vec<UsageRecord> = Vec::new();
        let mut pending_since: Option<Instant> = None;
        while !self.stop.load(Ordering::Relaxed) {
            let (live, g) = self.members.live();
            if generation != Some(g) {
                generation = Some(g);
                self.split.set_live(live.iter());
            }
            let now = Instant::now();
            if now >= next_publish {
                let record = self.publish();
                self.split.update(Some(&record), pending.drain(..));
                pending_since = None;
                next_publish = now + self.interval;
            }
            self.producer.poll(Duration::ZERO);
            let wait = next_publish
                .saturating_duration_since(Instant::now())
                .min(POLL);
            let mut message = self.consumer.poll(wait);
            let mut taken = 0;
            while let Some(result) = message {
                match result {
                    Ok(m) => {
                        let from_me = m.key() == Some(me.as_bytes());
                        match m.payload().map(UsageRecord::decode) {
                            Some(Ok(record)) if !from_me && record.instance != me => {
                                pending.push(record);
                                pending_since.get_or_insert_with(Instant::now);
                            }
                            Some(Err(e)) => tracing::debug!("usage: an undecodable record: {e}"),
                            _ => {}
                        }
                    }
                    Err(e) => tracing::debug!("usage: consuming {}: {e}", self.topic),
                }
                taken += 1;
                message = if taken < 1_000 {
                    self.consumer.poll(Duration::ZERO)
                } else {
                    None
                };
            }
            if pending_since.is_some_and(|t| t.elapsed() >= self.interval / 2) {
                self.split.update(None, pending.drain(..));
                pending_since = None;
            }
        }
        // A last record with no buckets: the others stop reserving anything for this instance.
        let last = UsageRecord {
            instance: me.clone(),
            at_ms: wall_ms(),
            buckets: Vec::new(),
        };
        self.send(&last.encode(MAX_RECORD_BYTES).0);
        let _ = self.producer.flush(Duration::from_secs(1));
    }

    /// Publishes this instance's usage; returns the record as the others will read it.
    fn publish(&mut self) -> UsageRecord {
        let snapshot = self.meter.snapshot();
        let mut record = self
            .tracker
            .record(&snapshot, self.clock.now_ms(), wall_ms());
        let (bytes, taken) = record.encode(MAX_RECORD_BYTES);
        if taken < record.buckets.len() {
            tracing::debug!(
                "usage: {} of {} buckets fit in a record",
                taken,
                record.buckets.len()
            );
        }
        // The split decides from exactly what the others see.
        record.buckets.truncate(taken);
        self.send(&bytes);
        record
    }

    fn send(&self, bytes: &[u8]) {
        let key = self.split.instance_id();
        let record = BaseRecord::to(&self.topic).key(key).payload(bytes);
        if let Err((e, _)) = self.producer.send(record) {
            tracing::debug!("usage: record not queued: {e}");
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
        assert!(UsageRecord::decode(b"not json").is_err());
        assert!(UsageRecord::decode(br#"{"v":2,"instance":"a","buckets":[]}"#).is_err());
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
