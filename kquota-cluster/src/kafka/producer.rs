//! The producers: [`Producer`] for records nobody waits for one by one (heartbeats, usage,
//! snapshots), and [`LogProducer`] for the configuration log's batches, whose delivery reports
//! reach the commits waiting for them.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::KafkaError;
use rdkafka::message::DeliveryResult;
use rdkafka::producer::{
    BaseProducer, BaseRecord, Producer as _, ProducerContext, ThreadedProducer,
};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::ClientConfig;

use super::client::{client, forward_log, TracingContext};
use crate::config::ClusterConfig;
use crate::error::{ClusterError, KafkaClient};
use crate::time::millis;

/// A producer whose records are sent and not waited for one by one; its delivery failures are
/// counted, for whoever waits for a whole lot of them ([`take_failures`](Producer::take_failures)).
pub(crate) struct Producer {
    inner: BaseProducer<Counting>,
}

/// Delivery failures since they were last looked at.
#[derive(Debug, Default)]
struct Failures {
    count: AtomicUsize,
    first: Mutex<Option<KafkaError>>,
}

/// A producer's context: delivery failures counted, logs through `tracing`.
struct Counting {
    failures: Failures,
    /// `Some(name)`: librdkafka's errors at `debug`, under the producer's name (whoever uses it
    /// sees what matters in its deliveries); `None`: as [`TracingContext`] logs them.
    quiet: Option<&'static str>,
}

impl ClientContext for Counting {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        forward_log(level, fac, message);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        match self.quiet {
            Some(name) => tracing::debug!(target: "librdkafka", "{name}: {error}: {reason}"),
            None => TracingContext::default().error(error, reason),
        }
    }
}

impl ProducerContext for Counting {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if let Err((e, _)) = result {
            self.failures.count.fetch_add(1, Ordering::Relaxed);
            self.failures.first.lock().get_or_insert_with(|| e.clone());
        }
    }
}

/// A producer for small, frequent records whose worth is their freshness (heartbeats, usage):
/// no batching delay, the leader's acknowledgement is enough.
fn fresh(config: &ClusterConfig) -> ClientConfig {
    let mut c = client(config);
    c.set("linger.ms", "0").set("acks", "1");
    c
}

impl Producer {
    fn create(
        settings: &ClientConfig,
        kind: KafkaClient,
        quiet: Option<&'static str>,
    ) -> Result<Producer, ClusterError> {
        let inner = settings
            .create_with_context(Counting {
                failures: Failures::default(),
                quiet,
            })
            .map_err(|source| ClusterError::Client {
                client: kind,
                source,
            })?;
        Ok(Producer { inner })
    }

    /// The membership's producer of heartbeats.
    pub(crate) fn heartbeats(config: &ClusterConfig) -> Result<Producer, ClusterError> {
        let mut c = fresh(config);
        // A heartbeat older than the expiry says nothing any more.
        c.set(
            "message.timeout.ms",
            millis(config.member_expiry).max(1).to_string(),
        );
        Producer::create(&c, KafkaClient::MembersProducer, None)
    }

    /// The usage sharing's producer.
    pub(crate) fn usage(config: &ClusterConfig) -> Result<Producer, ClusterError> {
        let mut c = fresh(config);
        // A record older than the view's age limit would be refused by every reader.
        c.set(
            "message.timeout.ms",
            millis(config.usage_max_age).max(1).to_string(),
        )
        .set("compression.codec", "lz4");
        Producer::create(&c, KafkaClient::UsageProducer, None)
    }

    /// The snapshot writer's producer: idempotent, every record acknowledged by all the
    /// in-sync replicas within `ack_timeout`.
    pub(crate) fn snapshots(
        config: &ClusterConfig,
        ack_timeout: Duration,
    ) -> Result<Producer, ClusterError> {
        let mut c = client(config);
        c.set("enable.idempotence", "true")
            .set("acks", "all")
            // A snapshot is many records at once: batch them.
            .set("linger.ms", "20")
            .set("compression.codec", "lz4")
            .set("message.timeout.ms", ack_timeout.as_millis().to_string());
        Producer::create(
            &c,
            KafkaClient::SnapshotProducer,
            Some("the snapshot writer's producer"),
        )
    }

    /// Queues one record (`value` `None`: a tombstone), to `partition` or, without one, to the
    /// partition of its key.
    pub(crate) fn send(
        &self,
        topic: &str,
        partition: Option<i32>,
        key: &str,
        value: Option<&[u8]>,
    ) -> Result<(), KafkaError> {
        let mut record = BaseRecord::<str, [u8], ()>::to(topic).key(key);
        if let Some(p) = partition {
            record = record.partition(p);
        }
        if let Some(v) = value {
            record = record.payload(v);
        }
        self.inner.send(record).map_err(|(e, _)| e)
    }

    /// Serves the delivery reports and librdkafka's events, waiting up to `wait` for one.
    pub(crate) fn poll(&self, wait: Duration) {
        self.inner.poll(wait);
    }

    /// Waits up to `timeout` for everything queued to be delivered.
    pub(crate) fn flush(&self, timeout: Duration) -> Result<(), KafkaError> {
        self.inner.flush(timeout)
    }

    /// The records queued or sent and not yet acknowledged.
    pub(crate) fn in_flight(&self) -> i32 {
        self.inner.in_flight_count()
    }

    /// The first delivery failure since the last look, if any failed (every failure since is
    /// forgotten with it).
    pub(crate) fn take_failures(&self) -> Option<KafkaError> {
        let failures = &self.inner.context().failures;
        let n = failures.count.swap(0, Ordering::Relaxed);
        let first = failures.first.lock().take();
        (n > 0).then(|| first.unwrap_or(KafkaError::Canceled))
    }
}

/// Whether a send failed only because librdkafka's queue is full (serving deliveries makes room).
pub(crate) fn queue_full(e: &KafkaError) -> bool {
    matches!(
        e,
        KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull)
    )
}

/// A batch of the configuration log that was not delivered.
#[derive(Debug)]
pub(crate) enum Undelivered {
    /// The broker refused it: it is certainly not in the log.
    Refused(KafkaError),
    /// It may or may not be in the log (a timeout above all may follow an append whose answer
    /// was lost).
    Doubt(KafkaError),
}

impl Undelivered {
    fn of(e: &KafkaError) -> Undelivered {
        if surely_refused(e) {
            Undelivered::Refused(e.clone())
        } else {
            Undelivered::Doubt(e.clone())
        }
    }
}

/// Whether a delivery error means the record is certainly not in the log: the broker refused it.
/// Anything else (a timeout above all) may have followed an append whose answer was lost.
fn surely_refused(e: &KafkaError) -> bool {
    use RDKafkaErrorCode as C;
    matches!(
        e.rdkafka_error_code(),
        Some(
            C::MessageSizeTooLarge
                | C::InvalidMessage
                | C::InvalidMessageSize
                | C::TopicAuthorizationFailed
                | C::ClusterAuthorizationFailed
                | C::InvalidRequiredAcks
                | C::InvalidRecord
                | C::PolicyViolation
                | C::InvalidTopic
        )
    )
}

/// What becomes of a batch that was not delivered: given its number.
type OnUndelivered = Box<dyn Fn(u64, Undelivered) + Send + Sync>;

/// The configuration log's producer context: delivery failures reach the waiting commits.
struct Reports {
    undelivered: OnUndelivered,
}

impl ClientContext for Reports {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        forward_log(level, fac, message);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        // What matters reaches the committer in its delivery report, and an unreachable broker is
        // in librdkafka's own log lines already.
        tracing::debug!(target: "librdkafka", "the configuration log's producer: {error}: {reason}");
    }
}

impl ProducerContext for Reports {
    type DeliveryOpaque = Box<u64>;

    fn delivery(&self, result: &DeliveryResult<'_>, seq: Box<u64>) {
        if let Err((e, _)) = result {
            (self.undelivered)(*seq, Undelivered::of(e));
        }
        // Appended otherwise: the follower will apply it.
    }
}

/// The idempotent producer the configuration log's batches are appended with, on a thread of
/// librdkafka's that serves its delivery reports.
pub(crate) struct LogProducer {
    inner: ThreadedProducer<Reports>,
}

impl LogProducer {
    /// The producer; `undelivered` hears of each batch that was not delivered, by its number.
    pub(crate) fn new(
        config: &ClusterConfig,
        undelivered: impl Fn(u64, Undelivered) + Send + Sync + 'static,
    ) -> Result<LogProducer, ClusterError> {
        let mut c = client(config);
        c.set("enable.idempotence", "true")
            .set("acks", "all")
            // A record not delivered by the time its commit gives up is dropped rather than
            // appended much later; one sent whose answer was lost may still land (the commit says
            // so).
            .set(
                "message.timeout.ms",
                config
                    .alter_timeout
                    .as_millis()
                    .clamp(1, i32::MAX as u128)
                    .to_string(),
            )
            // Alterations are few and someone waits for each: send at once.
            .set("linger.ms", "0")
            .set("socket.nagle.disable", "true");
        let inner = c
            .create_with_context(Reports {
                undelivered: Box::new(undelivered),
            })
            .map_err(|source| ClusterError::Client {
                client: KafkaClient::LogProducer,
                source,
            })?;
        Ok(LogProducer { inner })
    }

    /// Queues batch `seq` to partition 0 of `topic`; an error means it was never handed to the
    /// network.
    pub(crate) fn send(
        &self,
        topic: &str,
        key: &str,
        value: &[u8],
        seq: u64,
    ) -> Result<(), KafkaError> {
        self.inner
            .send(
                BaseRecord::with_opaque_to(topic, Box::new(seq))
                    .partition(0)
                    .key(key)
                    .payload(value),
            )
            .map_err(|(e, _)| e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_that_are_certain() {
        let broker = |c| KafkaError::MessageProduction(c);
        assert!(surely_refused(&broker(
            RDKafkaErrorCode::MessageSizeTooLarge
        )));
        assert!(surely_refused(&broker(
            RDKafkaErrorCode::TopicAuthorizationFailed
        )));
        // A timeout may follow an append whose answer was lost.
        assert!(!surely_refused(&broker(RDKafkaErrorCode::MessageTimedOut)));
        assert!(!surely_refused(&broker(
            RDKafkaErrorCode::NotEnoughReplicasAfterAppend
        )));
        assert!(!surely_refused(&broker(RDKafkaErrorCode::RequestTimedOut)));
        assert!(matches!(
            Undelivered::of(&broker(RDKafkaErrorCode::InvalidRecord)),
            Undelivered::Refused(_)
        ));
        assert!(matches!(
            Undelivered::of(&broker(RDKafkaErrorCode::MessageTimedOut)),
            Undelivered::Doubt(_)
        ));
    }

    #[test]
    fn the_clients_speak_tls_and_sasl() {
        // librdkafka refuses these at creation when it was built without OpenSSL.
        let mut config = ClusterConfig::new("127.0.0.1:1", "t");
        for (k, v) in [
            ("security.protocol", "SASL_SSL"),
            ("sasl.mechanism", "SCRAM-SHA-512"),
            ("sasl.username", "alice"),
            ("sasl.password", "secret"),
        ] {
            config.client_properties.insert(k.to_owned(), v.to_owned());
        }
        Producer::heartbeats(&config).unwrap();
        config
            .client_properties
            .insert("security.protocol".to_owned(), "SSL".to_owned());
        Producer::usage(&config).unwrap();
    }

    #[test]
    fn only_a_full_queue_is_waited_out() {
        assert!(queue_full(&KafkaError::MessageProduction(
            RDKafkaErrorCode::QueueFull
        )));
        assert!(!queue_full(&KafkaError::MessageProduction(
            RDKafkaErrorCode::MessageSizeTooLarge
        )));
    }
}
