//! [`ClusterError`]: why joining the cluster, or committing through it, failed; and the parts it
//! is made of, each saying what failed and why in a form a caller can match.

use std::fmt;
use std::time::Duration;

use crate::kafka::types::KafkaError;

/// Why joining the cluster, or committing through it, failed.
///
/// Commits ([`ConfigLog::alter`](crate::ConfigLog::alter)) fail in three ways a client must tell
/// apart: [`Refused`](ClusterError::Refused) and [`Stopped`](ClusterError::Stopped) with nothing
/// produced mean the batch is not in the log; [`NotAcknowledged`](ClusterError::NotAcknowledged)
/// means it may still be applied, at every instance alike. The messages say so in words
/// (`refused`, `may still be applied`), since the wire carries only the message.
#[derive(Debug)]
#[non_exhaustive]
pub enum ClusterError {
    /// librdkafka refused the settings of one of this instance's clients.
    Client {
        /// Which client.
        client: KafkaClient,
        /// librdkafka's error.
        source: KafkaError,
    },
    /// Kafka answered a request with an error.
    Kafka {
        /// What was asked.
        operation: Operation,
        /// The error.
        source: KafkaError,
    },
    /// Kafka did not answer in time.
    Timeout {
        /// What was asked.
        operation: Operation,
        /// How long it was waited for.
        after: Duration,
    },
    /// A topic exists, or is found, in a state the instances cannot work with.
    Topic {
        /// The topic.
        topic: String,
        /// What is wrong with it.
        problem: TopicProblem,
    },
    /// A record of the configuration log cannot be applied: joining stops there (the engine
    /// holds the batches before it).
    Record {
        /// Its offset.
        offset: i64,
        /// Why.
        problem: RecordProblem,
    },
    /// A commit that Kafka refused: the batch is not in the log.
    Refused {
        /// The producer's or the broker's error.
        source: KafkaError,
    },
    /// This instance stopped applying the configuration log (see
    /// [`ConfigLog::failure`](crate::ConfigLog::failure)), so it refuses commits.
    Stopped {
        /// Where and why it stopped.
        failure: LogFailure,
        /// Whether the batch had been produced before it stopped: then it may still be applied
        /// (by the instances that can read on); otherwise it is not in the log.
        produced: bool,
    },
    /// A commit not applied here within
    /// [`ClusterConfig::alter_timeout`](crate::ClusterConfig::alter_timeout): it may still be
    /// applied, at every instance alike, if Kafka accepted it.
    NotAcknowledged {
        /// The alteration timeout.
        after: Duration,
        /// The producer's last word on it, if any (a delivery error after which the record may
        /// or may not be in the log).
        doubt: Option<KafkaError>,
    },
    /// The settings, or what they were given with, cannot work.
    Config(ConfigProblem),
    /// A thread of this crate could not be started.
    Thread {
        /// Which.
        thread: &'static str,
        /// The system's error.
        source: std::io::Error,
    },
}

/// The Kafka clients an instance makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum KafkaClient {
    /// The admin client that creates and checks the topics.
    Admin,
    /// The configuration log's producer (alteration batches).
    LogProducer,
    /// The configuration log's consumer (the follower).
    LogConsumer,
    /// The producer of snapshots of the configuration.
    SnapshotProducer,
    /// The membership's producer (heartbeats).
    MembersProducer,
    /// The membership's consumer.
    MembersConsumer,
    /// The usage sharing's producer.
    UsageProducer,
    /// The usage sharing's consumer.
    UsageConsumer,
}

impl fmt::Display for KafkaClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            KafkaClient::Admin => "the admin client",
            KafkaClient::LogProducer => "the configuration log's producer",
            KafkaClient::LogConsumer => "the configuration log's consumer",
            KafkaClient::SnapshotProducer => "the configuration snapshots' producer",
            KafkaClient::MembersProducer => "the membership's producer",
            KafkaClient::MembersConsumer => "the membership's consumer",
            KafkaClient::UsageProducer => "the usage sharing's producer",
            KafkaClient::UsageConsumer => "the usage sharing's consumer",
        })
    }
}

/// A request an instance makes of Kafka, naming its topic.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Operation {
    /// A topic's metadata (does it exist, its partitions).
    Metadata(String),
    /// Creating a topic.
    CreateTopic(String),
    /// A topic's settings (`cleanup.policy`).
    TopicSettings(String),
    /// Where a topic's partition starts and ends.
    Watermarks(String),
    /// Assigning a topic's partitions to a consumer.
    Assign(String),
    /// Reading the configuration log up to where it ended when the instance started: no record
    /// came for the timeout at `offset`, with the log ending at `end`.
    CatchUp {
        /// The topic.
        topic: String,
        /// The offset waited at.
        offset: i64,
        /// Where the log ended when the instance started.
        end: i64,
    },
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Operation::Metadata(t) => write!(f, "the metadata of topic {t}"),
            Operation::CreateTopic(t) => write!(f, "creating topic {t}"),
            Operation::TopicSettings(t) => write!(f, "the settings of topic {t}"),
            Operation::Watermarks(t) => write!(f, "the end of topic {t}"),
            Operation::Assign(t) => write!(f, "assigning topic {t}"),
            Operation::CatchUp { topic, offset, end } => write!(
                f,
                "catching up with topic {topic}: no record at offset {offset} (the log ended at \
                 {end} when this instance started)"
            ),
        }
    }
}

/// What is wrong with a topic.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TopicProblem {
    /// It has another partition count than the one it must have.
    Partitions {
        /// What it has.
        found: usize,
        /// What it must have.
        required: usize,
        /// What depends on that count.
        why: &'static str,
    },
    /// Its `cleanup.policy` is not the one it must have.
    CleanupPolicy {
        /// What it is.
        found: String,
        /// What it must be.
        required: &'static str,
        /// What depends on it.
        why: &'static str,
    },
    /// The configuration log does not start at offset 0: batches were deleted.
    LogStart {
        /// Where it starts.
        offset: i64,
    },
    /// The cluster does not know its partitions (yet).
    NoPartitions,
}

impl fmt::Display for TopicProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TopicProblem::Partitions {
                found,
                required,
                why,
            } => write!(
                f,
                "it has {found} partitions and must have exactly {required}: {why} (delete it or \
                 name another topic)"
            ),
            TopicProblem::CleanupPolicy {
                found,
                required,
                why,
            } => write!(f, "cleanup.policy is {found:?}, not {required:?}: {why}"),
            TopicProblem::LogStart { offset } => write!(
                f,
                "its log starts at offset {offset}, not 0: the batches before it were deleted, so \
                 replaying it cannot rebuild the configuration"
            ),
            TopicProblem::NoPartitions => {
                f.write_str("its partitions are not known to the cluster")
            }
        }
    }
}

/// The versions of the configuration log's records this crate reads, as an error names them.
const READS: &str = "versions 1 (batches) and 2 (claims and snapshots)";

/// Why a record of the configuration log cannot be applied.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RecordProblem {
    /// Its value does not decode (serde's description of why).
    Malformed(String),
    /// A record version this instance does not read.
    Version(u64),
    /// A tombstone (no value) that no snapshot read before it explains: compaction would remove
    /// a batch that later instances need.
    Tombstone {
        /// Its key.
        key: Option<String>,
    },
    /// Its key is not the one its value implies: written by something other than an instance.
    Key {
        /// The key it has.
        found: Option<String>,
        /// The key its value implies.
        expected: String,
    },
    /// A snapshot that the engine refuses to load, or that differs from this instance's state
    /// at the offset it was taken (instances running with different settings).
    Snapshot(String),
    /// The consumer cannot go on (the topic deleted or truncated): librdkafka's error.
    Consumer(String),
}

impl fmt::Display for RecordProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecordProblem::Malformed(why) => f.write_str(why),
            RecordProblem::Version(v) => {
                write!(f, "record version {v} (this instance reads {READS} only)")
            }
            RecordProblem::Tombstone { key } => write!(
                f,
                "a tombstone (no value) for key {key:?} that no snapshot before it covers: \
                 compaction would remove that batch, and instances that replay the log later \
                 would not hold it"
            ),
            RecordProblem::Key { found, expected } => write!(
                f,
                "its key is {found:?}, its value says {expected:?}: a record written by something \
                 other than a kquota instance"
            ),
            RecordProblem::Snapshot(why) => write!(f, "a snapshot: {why}"),
            RecordProblem::Consumer(e) => write!(
                f,
                "the consumer cannot go on: {e} (the topic may have been deleted or truncated)"
            ),
        }
    }
}

/// Why a usage record cannot be read ([`UsageRecord::decode`](crate::UsageRecord::decode),
/// [`UsageDelta::decode`](crate::UsageDelta::decode)): the record is skipped.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum UsageProblem {
    /// Its value does not decode (serde's description of why).
    Malformed(String),
    /// A record version this instance does not read.
    Version(u32),
}

impl fmt::Display for UsageProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UsageProblem::Malformed(why) => f.write_str(why),
            UsageProblem::Version(v) => write!(f, "version {v} is not understood"),
        }
    }
}

impl std::error::Error for UsageProblem {}

impl From<serde_json::Error> for UsageProblem {
    fn from(e: serde_json::Error) -> UsageProblem {
        UsageProblem::Malformed(e.to_string())
    }
}

/// Where and why an instance stopped applying the configuration log
/// ([`ConfigLog::failure`](crate::ConfigLog::failure)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogFailure {
    /// The configuration topic.
    pub topic: String,
    /// The offset of the record it could not apply.
    pub offset: i64,
    /// Why.
    pub problem: RecordProblem,
}

impl fmt::Display for LogFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "at offset {} of topic {}: {}",
            self.offset, self.topic, self.problem
        )
    }
}

/// Settings, or what they came with, that cannot work.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigProblem {
    /// The instance id is empty (it names this instance's records).
    EmptyInstanceId,
    /// The engine given to the configuration log already holds entities.
    EngineNotEmpty {
        /// How many.
        entities: usize,
    },
    /// The meter given to the usage sharing already has a `bps` split (a meter takes one, once).
    MeterHasSplit,
}

impl fmt::Display for ConfigProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigProblem::EmptyInstanceId => f.write_str(
                "the instance id is empty: it names this instance's records in the topics",
            ),
            ConfigProblem::EngineNotEmpty { entities } => write!(
                f,
                "the engine already holds {entities} entities: the configuration log is replayed \
                 into an empty engine"
            ),
            ConfigProblem::MeterHasSplit => {
                f.write_str("the meter already has a bps split (a meter takes one, once)")
            }
        }
    }
}

/// The words a client reads in a commit that may still land.
const MAY_STILL: &str = "the alteration was not acknowledged: it may still be applied if Kafka \
                         accepted it";

impl fmt::Display for ClusterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClusterError::Client { client, source } => write!(f, "Kafka: {client}: {source}"),
            ClusterError::Kafka { operation, source } => write!(f, "Kafka: {operation}: {source}"),
            ClusterError::Timeout { operation, after } => {
                write!(f, "timed out: {operation} (waited {after:?})")
            }
            ClusterError::Topic { topic, problem } => write!(f, "topic {topic}: {problem}"),
            ClusterError::Record { offset, problem } => {
                write!(f, "the configuration record at offset {offset}: {problem}")
            }
            ClusterError::Refused { source } => {
                write!(f, "alteration refused: Kafka did not accept it ({source})")
            }
            ClusterError::Stopped {
                failure,
                produced: false,
            } => write!(
                f,
                "alteration refused: this instance stopped applying the configuration log \
                 ({failure})"
            ),
            ClusterError::Stopped {
                failure,
                produced: true,
            } => write!(
                f,
                "{MAY_STILL} (this instance stopped applying the configuration log ({failure}))"
            ),
            ClusterError::NotAcknowledged { after, doubt } => {
                write!(f, "{MAY_STILL} (not applied here within {after:?}")?;
                if let Some(d) = doubt {
                    write!(f, "; Kafka: {d}")?;
                }
                f.write_str(")")
            }
            ClusterError::Config(problem) => write!(f, "cannot join: {problem}"),
            ClusterError::Thread { thread, source } => {
                write!(f, "cannot start the {thread} thread: {source}")
            }
        }
    }
}

impl std::error::Error for ClusterError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ClusterError::Client { source, .. }
            | ClusterError::Kafka { source, .. }
            | ClusterError::Refused { source } => Some(source),
            ClusterError::NotAcknowledged {
                doubt: Some(source),
                ..
            } => Some(source),
            ClusterError::Thread { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl ClusterError {
    /// Whether a commit that failed with this error may still be applied (it was produced, and
    /// Kafka may have accepted it): a client should read the configuration again before it
    /// retries, rather than take the alteration as not made.
    pub fn may_still_apply(&self) -> bool {
        matches!(
            self,
            ClusterError::NotAcknowledged { .. } | ClusterError::Stopped { produced: true, .. }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kafka::types::RDKafkaErrorCode;

    #[test]
    fn commit_errors_say_whether_they_may_still_apply() {
        let failure = LogFailure {
            topic: "_kquota_config".into(),
            offset: 7,
            problem: RecordProblem::Version(9),
        };
        let refused = ClusterError::Refused {
            source: KafkaError::MessageProduction(RDKafkaErrorCode::MessageSizeTooLarge),
        };
        let stopped = ClusterError::Stopped {
            failure: failure.clone(),
            produced: false,
        };
        let stopped_late = ClusterError::Stopped {
            failure,
            produced: true,
        };
        let timeout = ClusterError::NotAcknowledged {
            after: Duration::from_secs(10),
            doubt: Some(KafkaError::MessageProduction(
                RDKafkaErrorCode::MessageTimedOut,
            )),
        };
        for (e, may) in [
            (&refused, false),
            (&stopped, false),
            (&stopped_late, true),
            (&timeout, true),
        ] {
            let text = e.to_string();
            assert_eq!(e.may_still_apply(), may, "{text}");
            assert_eq!(text.contains("may still be applied"), may, "{text}");
            assert_eq!(text.contains("refused"), !may, "{text}");
        }
        assert!(stopped
            .to_string()
            .contains("at offset 7 of topic _kquota_config"));
        assert!(timeout
            .to_string()
            .contains("not applied here within 10s; Kafka:"));
        assert!(std::error::Error::source(&timeout).is_some());
    }
}
