//! [`UsageShare`]: the thread that moves the usage records through the usage topic, and the
//! handle a host keeps. The only part of the usage sharing that does I/O.
//!
//! The topic is created if missing: one partition, `cleanup.policy=delete`, five minutes'
//! retention (only the latest records matter, and they are read from the end); a record's key is
//! the instance's id, so that an instance's records stay in order. A clean stop publishes a last
//! whole statement with no buckets, so that the others stop counting this instance's usage at
//! once.

use std::sync::Arc;
use std::time::Duration;

use kquota::meter::{BucketSnapshot, Clock, Meter, SystemClock};
use tokio::sync::oneshot;

use super::cadence::UsageCadence;
use super::delta::{UsageDelta, UsagePublisher};
use super::record::{UsageTracker, MAX_RECORD_BYTES};
use super::split::{SharedSplit, SplitParams};
use crate::config::ClusterConfig;
use crate::error::{ClusterError, ConfigProblem, KafkaClient};
use crate::kafka::{ensure_topic, Consumer, Polled, Producer, StartAt, TopicSpec};
use crate::members::{Members, Membership};
use crate::time::{millis, wall_micros, wall_ms};
use crate::worker::{Stop, Worker};

/// How late the usage thread notices a stop: its longest wait in one poll.
const POLL: Duration = Duration::from_millis(50);

/// Where an instance's use of its buckets comes from, read once every `usage_interval` by the
/// usage thread: its own [`Meter`], or, in a host that meters elsewhere (a Kafka broker, whose
/// quota sensors meter), what that host measured, in the meter's terms.
pub trait UsageSource: Send + Sync + 'static {
    /// Every bucket as it stands now ([`Meter::snapshot`]'s form); only `bps` buckets are shared.
    fn snapshot(&self) -> Vec<BucketSnapshot>;
}

impl UsageSource for Meter {
    fn snapshot(&self) -> Vec<BucketSnapshot> {
        Meter::snapshot(self)
    }
}

/// Shares this instance's `bps` usage through the usage topic and splits the cluster-wide `bps`
/// limits of its meter by everyone's ([`SharedSplit`], installed with
/// [`Meter::set_bps_split`]), among the instances [`Membership`] says are live.
///
/// The split declines, and the meter divides the limit by the live instance count, while the
/// view is incomplete or older than `usage_max_age`: at start-up until every live instance's
/// record has arrived (within one `usage_interval`), when Kafka cannot be reached, and when an
/// instance stops publishing before the membership drops it. It answers again as soon as the
/// records do.
#[derive(Debug)]
pub struct UsageShare {
    split: Arc<SharedSplit>,
    /// The usage thread, stopped (its last record published, the split stopped) when this goes.
    thread: Worker,
}

impl UsageShare {
    /// Starts sharing `meter`'s usage with the default [`SplitParams`].
    pub async fn start(
        config: &ClusterConfig,
        meter: Meter,
        members: &Membership,
    ) -> Result<UsageShare, ClusterError> {
        UsageShare::start_with(config, meter, members, SplitParams::default()).await
    }

    /// Starts sharing `meter`'s usage: creates the usage topic if it is missing, and on a thread
    /// of its own publishes every `usage_interval` and reads the others' records from the end;
    /// resolves once the thread is reading, with the split installed in the meter. Nothing
    /// blocks the caller's runtime meanwhile. Fails if Kafka cannot be reached or refuses the
    /// topic or the clients' settings, and with [`ConfigProblem::MeterHasSplit`] if the meter
    /// already has a split (a meter keeps the first one it is given).
    pub async fn start_with(
        config: &ClusterConfig,
        meter: Meter,
        members: &Membership,
        params: SplitParams,
    ) -> Result<UsageShare, ClusterError> {
        let share =
            UsageShare::start_from(config, Arc::new(meter.clone()), members, params).await?;
        if !meter.set_bps_split(Arc::clone(&share.split) as Arc<dyn kquota::meter::BpsSplit>) {
            // A meter keeps its first split: sharing into another one would change nothing here.
            return Err(ClusterError::Config(ConfigProblem::MeterHasSplit));
        }
        Ok(share)
    }

    /// Starts sharing the usage `source` reports, as [`start_with`](UsageShare::start_with)
    /// does, for a host that meters with something other than a [`Meter`]: the split is not
    /// installed anywhere; the host asks [`split`](UsageShare::split) for its parts itself.
    pub async fn start_from(
        config: &ClusterConfig,
        source: Arc<dyn UsageSource>,
        members: &Membership,
        params: SplitParams,
    ) -> Result<UsageShare, ClusterError> {
        if members.instance_id() != config.instance_id {
            tracing::warn!(
                "usage: the membership is instance {}, the usage instance {}",
                members.instance_id(),
                config.instance_id
            );
        }
        let clock: Arc<dyn Clock> = Arc::new(SystemClock::new());
        let split = Arc::new(SharedSplit::new(
            &config.instance_id,
            params,
            config.usage_max_age,
            Arc::clone(&clock),
        ));
        let members = members.members();
        split.set_live(members.live().0.iter());
        let (ready_tx, ready_rx) = oneshot::channel();
        let thread = {
            let config = config.clone();
            let split = Arc::clone(&split);
            Worker::spawn(
                format!("kquota-usage-{}", config.instance_id),
                "usage",
                move |stop| {
                    match UsageThread::new(&config, clock, source, members, Arc::clone(&split)) {
                        Ok(mut thread) => {
                            if ready_tx.send(Ok(())).is_ok() {
                                thread.run(&stop);
                            }
                        }
                        Err(e) => {
                            let _ = ready_tx.send(Err(e));
                        }
                    }
                    // From now on the meter divides by the live count again.
                    split.stop();
                },
            )?
        };
        let share = UsageShare { split, thread };
        // Dropping `share` on an error stops the thread.
        match ready_rx.await {
            Ok(Ok(())) => Ok(share),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(ClusterError::Thread {
                thread: "usage",
                source: std::io::Error::other("it ended while starting"),
            }),
        }
    }

    /// The split, as installed in the meter (to see whether it answers, or ask it directly).
    pub fn split(&self) -> &Arc<SharedSplit> {
        &self.split
    }

    /// Stops sharing: publishes a last record with no buckets (the others then take this
    /// instance as idle at once), and the split declines from then on.
    pub fn stop(mut self) {
        self.thread.stop();
    }
}

/// The usage thread: this instance's records out, the others' in.
struct UsageThread {
    topic: String,
    cadence: UsageCadence<UsageDelta>,
    tracker: UsageTracker,
    publisher: UsagePublisher,
    clock: Arc<dyn Clock>,
    source: Arc<dyn UsageSource>,
    members: Arc<Members>,
    split: Arc<SharedSplit>,
    producer: Producer,
    consumer: Consumer,
}

impl UsageThread {
    /// Checks or creates the topic and makes the clients, the consumer assigned at the end.
    fn new(
        config: &ClusterConfig,
        clock: Arc<dyn Clock>,
        source: Arc<dyn UsageSource>,
        members: Arc<Members>,
        split: Arc<SharedSplit>,
    ) -> Result<UsageThread, ClusterError> {
        let topic = config.usage_topic.clone();
        ensure_topic(config, &TopicSpec::usage(&topic), config.open_timeout)?;
        let producer = Producer::usage(config)?;
        let consumer = Consumer::assigned(config, "usage", KafkaClient::UsageConsumer)?;
        let all = consumer.partitions(&topic, config.open_timeout)?;
        consumer.assign(&topic, &all, StartAt::End, config.open_timeout)?;
        let now = clock.now_ms();
        Ok(UsageThread {
            topic,
            cadence: UsageCadence::new(config.usage_interval, now),
            // Every bucket: the publisher sends what changed, in records cut to size.
            tracker: UsageTracker::new(&config.instance_id, usize::MAX),
            publisher: UsagePublisher::new(
                &config.instance_id,
                wall_micros(),
                config.usage_threshold,
                MAX_RECORD_BYTES,
                millis(config.usage_interval).saturating_mul(2),
            ),
            clock,
            source,
            members,
            split,
            producer,
            consumer,
        })
    }

    /// Publishes and reads until `stop`; publishes a last record on the way out.
    fn run(&mut self, stop: &Stop) {
        let mut generation = None;
        let mut known: Vec<String> = Vec::new();
        let me = self.split.instance_id().to_owned();
        while !stop.requested() {
            let (live, g) = self.members.live();
            if generation != Some(g) {
                // A newcomer has none of this instance's usage: the next record is whole
                // (rather than waiting for it to ask).
                if generation.is_some() && live.iter().any(|id| !known.contains(id)) {
                    self.publisher.request_reset(self.clock.now_ms());
                }
                generation = Some(g);
                known = live.to_vec();
                self.split.set_live(live.iter());
            }
            let now = self.clock.now_ms();
            if let Some(due) = self.cadence.due(now) {
                let local = if due.publish {
                    self.publish(now)
                } else {
                    Vec::new()
                };
                self.split.update_deltas(&local, due.received);
            }
            self.producer.poll(Duration::ZERO);
            let wait = self.cadence.wait(self.clock.now_ms()).min(POLL);
            let mut message = self.consumer.poll(wait);
            let mut taken = 0;
            while let Some(polled) = message {
                match polled {
                    Polled::Record(m) => {
                        let from_me = m.key() == Some(me.as_bytes());
                        match m.value().map(UsageDelta::decode) {
                            Some(Ok(record)) if !from_me && record.instance != me => {
                                let now = self.clock.now_ms();
                                if record.need.contains(&me) {
                                    self.publisher.request_reset(now);
                                }
                                self.cadence.received(record, now);
                            }
                            Some(Err(e)) => tracing::debug!("usage: an undecodable record: {e}"),
                            _ => {}
                        }
                    }
                    Polled::End => {}
                    Polled::Passing(e) | Polled::Fatal(e) => {
                        tracing::debug!("usage: consuming {}: {e}", self.topic)
                    }
                }
                taken += 1;
                message = if taken < 1_000 {
                    self.consumer.poll(Duration::ZERO)
                } else {
                    None
                };
            }
        }
        // A last record with no buckets: the others stop reserving anything for this instance.
        let last = self.publisher.farewell(wall_ms());
        self.send(&last.encode());
        let _ = self.producer.flush(Duration::from_secs(1));
    }

    /// Publishes what changed of this instance's usage; returns the records as the others will
    /// read them (the split decides from exactly what the others hold of this instance).
    fn publish(&mut self, now_ms: u64) -> Vec<UsageDelta> {
        let snapshot = self.source.snapshot();
        let record = self.tracker.record(&snapshot, now_ms, wall_ms());
        let split = &self.split;
        let records = self.publisher.publish(
            &record,
            |key, owner| split.is_shared(key, owner),
            split.needs(),
            now_ms,
        );
        for r in &records {
            self.send(&r.encode());
        }
        records
    }

    fn send(&self, bytes: &[u8]) {
        let key = self.split.instance_id();
        if let Err(e) = self.producer.send(&self.topic, None, key, Some(bytes)) {
            tracing::debug!("usage: record not queued: {e}");
        }
    }
}
