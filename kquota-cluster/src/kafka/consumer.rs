//! [`Consumer`]: the consumers that follow the topics, assigned their partitions (none joins a
//! group or commits an offset), and what a poll of one gives ([`Polled`]).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer as _};
use rdkafka::error::KafkaError;
use rdkafka::message::{BorrowedMessage, Message as _};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};

use super::client::{client, kafka_or_timeout, TracingContext};
use crate::config::ClusterConfig;
use crate::error::{ClusterError, KafkaClient, Operation, TopicProblem};

/// Where a consumer starts reading a partition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StartAt {
    /// Its first record.
    Beginning,
    /// What is appended from now on.
    End,
    /// This offset.
    Offset(i64),
}

impl From<StartAt> for Offset {
    fn from(at: StartAt) -> Offset {
        match at {
            StartAt::Beginning => Offset::Beginning,
            StartAt::End => Offset::End,
            StartAt::Offset(o) => Offset::Offset(o),
        }
    }
}

/// A consumer, logging through `tracing` (its errors at `debug`: the poll loops log them too,
/// with what they do about them).
pub(crate) struct Consumer {
    inner: BaseConsumer<TracingContext>,
}

/// One record read, borrowed from the consumer's buffer until it is dropped.
pub(crate) struct Record<'a>(BorrowedMessage<'a>);

impl Record<'_> {
    /// Its partition.
    pub(crate) fn partition(&self) -> i32 {
        self.0.partition()
    }

    /// Its offset.
    pub(crate) fn offset(&self) -> i64 {
        self.0.offset()
    }

    /// Its key, if it has one.
    pub(crate) fn key(&self) -> Option<&[u8]> {
        self.0.key()
    }

    /// Its value; `None` for a tombstone.
    pub(crate) fn value(&self) -> Option<&[u8]> {
        self.0.payload()
    }
}

/// What one poll gave.
pub(crate) enum Polled<'a> {
    /// A record.
    Record(Record<'a>),
    /// The end of a partition (only with `enable.partition.eof`: the configuration log's).
    End,
    /// An error the consumer goes on after (Kafka unreachable and the like: librdkafka retries
    /// and reconnects by itself).
    Passing(KafkaError),
    /// An error it cannot go on after: a fatal one, or an offset that fell out of the log (the
    /// topic deleted or truncated).
    Fatal(KafkaError),
}

impl<'a> From<Result<BorrowedMessage<'a>, KafkaError>> for Polled<'a> {
    fn from(polled: Result<BorrowedMessage<'a>, KafkaError>) -> Polled<'a> {
        match polled {
            Ok(m) => Polled::Record(Record(m)),
            Err(KafkaError::PartitionEOF(_)) => Polled::End,
            Err(e) if is_fatal(&e) => Polled::Fatal(e),
            Err(e) => Polled::Passing(e),
        }
    }
}

/// Whether a consumer cannot go on after `e`.
fn is_fatal(e: &KafkaError) -> bool {
    matches!(e, KafkaError::MessageConsumptionFatal(_))
        || matches!(
            e.rdkafka_error_code(),
            Some(RDKafkaErrorCode::AutoOffsetReset | RDKafkaErrorCode::OffsetOutOfRange)
        )
}

impl Consumer {
    /// The configuration log's consumer: read from its start every time, committed batches
    /// only, told of the partition's end, and stopped (not sent back to the start) by an offset
    /// that falls out of the log.
    pub(crate) fn config_log(config: &ClusterConfig) -> Result<Consumer, ClusterError> {
        let mut c = client(config);
        // The partition is assigned, read from its start every time, and no offset is kept:
        // librdkafka wants a group id to assign at all, but this one never joins or commits.
        c.set(
            "group.id",
            format!("kquota-config-log-{}", config.instance_id),
        )
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("isolation.level", "read_committed")
        .set("enable.partition.eof", "true")
        // An offset that falls out of the log (a deleted or truncated topic) must stop the
        // follower, not send it back to the start to apply everything again.
        .set("auto.offset.reset", "error")
        // A fetch that finds nothing new returns within 100 ms, not librdkafka's 500: reading on
        // after a snapshot waits for the fetch in flight.
        .set("fetch.wait.max.ms", "100")
        .set("socket.nagle.disable", "true");
        let inner = c
            .create_with_context(TracingContext { quiet_errors: true })
            .map_err(|source| ClusterError::Client {
                client: KafkaClient::LogConsumer,
                source,
            })?;
        Ok(Consumer { inner })
    }

    /// A consumer of the members or the usage topic (`what`), made as client `kind`.
    pub(crate) fn assigned(
        config: &ClusterConfig,
        what: &str,
        kind: KafkaClient,
    ) -> Result<Consumer, ClusterError> {
        let mut c = client(config);
        c.set("group.id", format!("kquota-{what}-{}", config.instance_id))
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("auto.offset.reset", "earliest")
            // A record reaches the others' views within 100 ms of its append, not librdkafka's
            // 500.
            .set("fetch.wait.max.ms", "100");
        let inner = c
            .create_with_context(TracingContext { quiet_errors: true })
            .map_err(|source| ClusterError::Client {
                client: kind,
                source,
            })?;
        Ok(Consumer { inner })
    }

    /// The next record or event, waiting up to `wait` for one.
    pub(crate) fn poll(&self, wait: Duration) -> Option<Polled<'_>> {
        self.inner.poll(wait).map(Polled::from)
    }

    /// Where partition `partition` of `topic` starts and ends (its low and high watermarks).
    pub(crate) fn watermarks(
        &self,
        topic: &str,
        partition: i32,
        timeout: Duration,
    ) -> Result<(i64, i64), KafkaError> {
        self.inner.fetch_watermarks(topic, partition, timeout)
    }

    /// Reads partition `partition` of `topic`, alone, from `at`.
    pub(crate) fn assign_at(
        &self,
        topic: &str,
        partition: i32,
        at: StartAt,
    ) -> Result<(), KafkaError> {
        let mut list = TopicPartitionList::new();
        list.add_partition_offset(topic, partition, at.into())?;
        self.inner.assign(&list)
    }

    /// Assigns `partitions` of `topic` from `from`; returns, for each that is not empty, where
    /// it ended at that time (its high watermark).
    pub(crate) fn assign(
        &self,
        topic: &str,
        partitions: &[i32],
        from: StartAt,
        timeout: Duration,
    ) -> Result<HashMap<i32, i64>, ClusterError> {
        let mut list = TopicPartitionList::new();
        let mut ends = HashMap::new();
        let assign_error = |source| ClusterError::Kafka {
            operation: Operation::Assign(topic.to_owned()),
            source,
        };
        for &p in partitions {
            let (_, high) = self.watermarks(topic, p, timeout).map_err(|e| {
                kafka_or_timeout(e, Operation::Watermarks(topic.to_owned()), timeout)
            })?;
            list.add_partition_offset(topic, p, from.into())
                .map_err(assign_error)?;
            if high > 0 {
                ends.insert(p, high);
            }
        }
        self.inner.assign(&list).map_err(assign_error)?;
        Ok(ends)
    }

    /// The partitions of `topic`, waiting up to `timeout` for a topic just created to show them.
    pub(crate) fn partitions(
        &self,
        topic: &str,
        timeout: Duration,
    ) -> Result<Vec<i32>, ClusterError> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline
                .saturating_duration_since(Instant::now())
                .max(Duration::from_millis(1));
            match self.inner.fetch_metadata(Some(topic), left) {
                Ok(m) => {
                    let found: Vec<i32> = m
                        .topics()
                        .iter()
                        .filter(|t| t.name() == topic && t.error().is_none())
                        .flat_map(|t| t.partitions().iter().map(|p| p.id()))
                        .collect();
                    if !found.is_empty() {
                        return Ok(found);
                    }
                }
                Err(e) if Instant::now() >= deadline => {
                    return Err(kafka_or_timeout(
                        e,
                        Operation::Metadata(topic.to_owned()),
                        timeout,
                    ))
                }
                Err(_) => {}
            }
            if Instant::now() >= deadline {
                return Err(ClusterError::Topic {
                    topic: topic.to_owned(),
                    problem: TopicProblem::NoPartitions,
                });
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_a_consumer_cannot_go_on_after() {
        let polled = |e| Polled::from(Err::<BorrowedMessage<'_>, _>(e));
        assert!(matches!(
            polled(KafkaError::MessageConsumption(
                RDKafkaErrorCode::AutoOffsetReset
            )),
            Polled::Fatal(_)
        ));
        assert!(matches!(
            polled(KafkaError::MessageConsumption(
                RDKafkaErrorCode::OffsetOutOfRange
            )),
            Polled::Fatal(_)
        ));
        assert!(matches!(
            polled(KafkaError::MessageConsumptionFatal(RDKafkaErrorCode::Fatal)),
            Polled::Fatal(_)
        ));
        // Kafka unreachable: librdkafka retries.
        assert!(matches!(
            polled(KafkaError::MessageConsumption(
                RDKafkaErrorCode::AllBrokersDown
            )),
            Polled::Passing(_)
        ));
        assert!(matches!(polled(KafkaError::PartitionEOF(0)), Polled::End));
    }
}
