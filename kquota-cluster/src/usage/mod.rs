//! Usage sharing: each instance's use of its `bps` buckets ([`UsageRecord`](crate::UsageRecord)),
//! published to the usage topic every `usage_interval` and read by the others, from which each
//! takes its part of every cluster-wide `bps` limit ([`SharedSplit`]).
//!
//! The topic is created if missing: one partition, `cleanup.policy=delete`, five minutes'
//! retention (only the latest records matter, and they are read from the end); a record's key is
//! the instance's id. A clean stop publishes a last record with no buckets, so that the others stop
//! counting this instance's usage at once.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use kquota::meter::{Clock, Meter, SystemClock};
use rdkafka::consumer::BaseConsumer;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Message, Offset};

use crate::config::{ClusterConfig, ClusterError};
use crate::members::{assign, consumer, kafka, millis, partitions, producer_config, Members, POLL};
use crate::report::{UsageRecord, UsageTracker, DEFAULT_MAX_BUCKETS, MAX_RECORD_BYTES};
use crate::split::{SharedSplit, SplitParams};
use crate::topics::{ensure_topic, TopicSpec, TracingContext};

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
