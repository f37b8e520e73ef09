//! The topics the instances share: what each must be, created when missing (with its settings)
//! and checked when present, through the admin client.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, ResourceSpecifier, TopicReplication};
use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaErrorCode;

use super::client::{client, kafka_or_timeout, remaining, TracingContext};
use crate::config::ClusterConfig;
use crate::error::{ClusterError, KafkaClient, Operation, TopicProblem};

/// What a topic must be.
#[derive(Clone, Debug)]
pub(crate) struct TopicSpec<'a> {
    /// Its name.
    pub(crate) name: &'a str,
    /// The partitions it is created with; with `exact_partitions`, the only count accepted.
    pub(crate) partitions: i32,
    /// Why an existing topic must have exactly `partitions` partitions, if it must.
    pub(crate) exact_partitions: Option<&'static str>,
    /// Its `cleanup.policy` when created (`compact`, `delete` or `compact,delete`).
    pub(crate) cleanup_policy: &'static str,
    /// Why an existing topic must have exactly that policy, if it must; otherwise an existing
    /// topic's policy is its operator's choice.
    pub(crate) exact_policy: Option<&'static str>,
    /// More topic settings, only when the topic is created.
    pub(crate) create_configs: &'a [(&'a str, &'a str)],
}

impl<'a> TopicSpec<'a> {
    /// The configuration log's topic: one partition (one order for every batch), compacted and
    /// never deleted by retention.
    pub(crate) fn config_log(name: &'a str) -> Self {
        TopicSpec {
            name,
            partitions: 1,
            exact_partitions: Some("a single partition is what puts every batch in one order"),
            cleanup_policy: "compact",
            exact_policy: Some(
                "its records are the configuration's whole history and must be kept: the topic \
                 must be compacted (cleanup.policy=compact), and not deleted by retention",
            ),
            // Compaction works on closed segments only: segments of at most 16 MiB or an hour,
            // so that the log shrinks to the snapshot within about an hour of one. Tombstones
            // need not outlive their records for long: a reader never needs one (it reads the
            // snapshot they follow).
            create_configs: &[
                ("segment.bytes", "16777216"),
                ("segment.ms", "3600000"),
                ("delete.retention.ms", "3600000"),
            ],
        }
    }

    /// The heartbeat topic: the latest heartbeat of each instance kept by compaction, and
    /// everything gone after 10 minutes. Exactly one partition: an instance's own heartbeat
    /// read back is what tells it that it has read everyone's before it (the expiry rests on
    /// it).
    pub(crate) fn members(name: &'a str) -> Self {
        TopicSpec {
            name,
            partitions: 1,
            exact_partitions: Some(
                "an instance's own heartbeat read back is what tells it that it has read \
                 everyone's",
            ),
            cleanup_policy: "compact,delete",
            exact_policy: None,
            create_configs: &[
                ("retention.ms", "600000"),
                ("segment.ms", "60000"),
                ("min.compaction.lag.ms", "0"),
            ],
        }
    }

    /// The usage topic: records worth seconds, gone after 5 minutes. Any partition count works:
    /// every partition is read, and an instance's records (keyed by its id) stay in order in
    /// one of them.
    pub(crate) fn usage(name: &'a str) -> Self {
        TopicSpec {
            name,
            partitions: 1,
            exact_partitions: None,
            cleanup_policy: "delete",
            exact_policy: None,
            create_configs: &[("retention.ms", "300000"), ("segment.ms", "60000")],
        }
    }
}

/// Makes sure `spec.name` exists as `spec` says: creates it if missing (with `config`'s
/// replication factor, `-1` leaving it to the brokers' default, and `config`'s
/// `min.insync.replicas` if set), or checks it. Fails with [`ClusterError::Topic`] naming what is
/// wrong with an existing topic, or [`ClusterError::Timeout`] if Kafka does not answer within
/// `timeout`.
pub(crate) fn ensure_topic(
    config: &ClusterConfig,
    spec: &TopicSpec<'_>,
    timeout: Duration,
) -> Result<(), ClusterError> {
    // On a thread of its own: the runtime that waits for the admin client can be neither started
    // nor dropped on a thread inside another runtime, whoever calls this.
    std::thread::scope(|scope| {
        scope
            .spawn(|| ensure_topic_here(config, spec, timeout))
            .join()
            .unwrap_or_else(|_| {
                Err(ClusterError::Thread {
                    thread: "topic check",
                    source: std::io::Error::other("it panicked"),
                })
            })
    })
}

fn ensure_topic_here(
    config: &ClusterConfig,
    spec: &TopicSpec<'_>,
    timeout: Duration,
) -> Result<(), ClusterError> {
    let deadline = Instant::now() + timeout;
    let admin: AdminClient<TracingContext> = client(config)
        .create_with_context(TracingContext::default())
        .map_err(|source| ClusterError::Client {
            client: KafkaClient::Admin,
            source,
        })?;
    // The admin calls are futures completed by librdkafka's own thread; a private runtime on this
    // thread waits for them.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|source| ClusterError::Thread {
            thread: "admin client's runtime",
            source,
        })?;
    let name = spec.name;
    let metadata_op = || Operation::Metadata(name.to_owned());
    let mut created = false;
    loop {
        let left = remaining(deadline, timeout, metadata_op)?;
        let metadata = admin
            .inner()
            .fetch_metadata(Some(name), left)
            .map_err(|e| kafka_or_timeout(e, metadata_op(), timeout))?;
        let topic = metadata.topics().iter().find(|t| t.name() == name);
        let missing = match topic {
            None => true,
            Some(t) => match t.error() {
                None => false,
                Some(e)
                    if RDKafkaErrorCode::from(e) == RDKafkaErrorCode::UnknownTopicOrPartition =>
                {
                    true
                }
                Some(e) => {
                    return Err(ClusterError::Kafka {
                        operation: metadata_op(),
                        source: KafkaError::MetadataFetch(RDKafkaErrorCode::from(e)),
                    })
                }
            },
        };
        if missing {
            if created {
                // Created, not yet in the metadata this broker answers with: ask again.
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
            create(&admin, &runtime, config, spec, deadline, timeout)?;
            created = true;
            continue;
        }
        let partitions = topic.map_or(0, |t| t.partitions().len());
        if let Some(why) = spec.exact_partitions {
            if partitions != spec.partitions as usize {
                return Err(ClusterError::Topic {
                    topic: name.to_owned(),
                    problem: TopicProblem::Partitions {
                        found: partitions,
                        required: spec.partitions as usize,
                        why,
                    },
                });
            }
        }
        return match spec.exact_policy {
            Some(why) => check_policy(&admin, &runtime, spec, why, deadline, timeout),
            None => Ok(()),
        };
    }
}

/// Creates the topic; another instance creating it first is no error.
fn create(
    admin: &AdminClient<TracingContext>,
    runtime: &tokio::runtime::Runtime,
    config: &ClusterConfig,
    spec: &TopicSpec<'_>,
    deadline: Instant,
    timeout: Duration,
) -> Result<(), ClusterError> {
    let name = spec.name;
    let op = || Operation::CreateTopic(name.to_owned());
    let left = remaining(deadline, timeout, op)?;
    let mut topic = NewTopic::new(
        name,
        spec.partitions,
        TopicReplication::Fixed(config.replication_factor),
    )
    .set("cleanup.policy", spec.cleanup_policy);
    for (k, v) in spec.create_configs {
        topic = topic.set(k, v);
    }
    let min_isr = config.min_insync_replicas.map(|n| n.to_string());
    if let Some(n) = &min_isr {
        topic = topic.set("min.insync.replicas", n);
    }
    let options = AdminOptions::new()
        .request_timeout(Some(left))
        .operation_timeout(Some(left));
    let results = runtime
        .block_on(admin.create_topics([&topic], &options))
        .map_err(|e| kafka_or_timeout(e, op(), timeout))?;
    for result in results {
        match result {
            Ok(_) => tracing::info!(
                topic = name,
                partitions = spec.partitions,
                replication_factor = config.replication_factor,
                min_insync_replicas = min_isr.as_deref().unwrap_or("the brokers'"),
                cleanup_policy = spec.cleanup_policy,
                "created the topic"
            ),
            Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((_, code)) => {
                return Err(ClusterError::Kafka {
                    operation: op(),
                    source: KafkaError::AdminOp(code),
                })
            }
        }
    }
    Ok(())
}

/// Checks an existing topic's `cleanup.policy`.
fn check_policy(
    admin: &AdminClient<TracingContext>,
    runtime: &tokio::runtime::Runtime,
    spec: &TopicSpec<'_>,
    why: &'static str,
    deadline: Instant,
    timeout: Duration,
) -> Result<(), ClusterError> {
    let name = spec.name;
    let op = || Operation::TopicSettings(name.to_owned());
    let left = remaining(deadline, timeout, op)?;
    let options = AdminOptions::new().request_timeout(Some(left));
    let resources = runtime
        .block_on(admin.describe_configs([&ResourceSpecifier::Topic(name)], &options))
        .map_err(|e| kafka_or_timeout(e, op(), timeout))?;
    let resource = resources
        .into_iter()
        .next()
        .ok_or(ClusterError::Kafka {
            operation: op(),
            source: KafkaError::AdminOp(RDKafkaErrorCode::UnknownTopicOrPartition),
        })?
        .map_err(|code| ClusterError::Kafka {
            operation: op(),
            source: KafkaError::AdminOp(code),
        })?;
    let policy = resource
        .get("cleanup.policy")
        .and_then(|e| e.value.clone())
        .unwrap_or_default();
    let tokens: BTreeSet<&str> = policy
        .split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .collect();
    let wanted: BTreeSet<&str> = spec.cleanup_policy.split(',').collect();
    if tokens == wanted {
        return Ok(());
    }
    Err(ClusterError::Topic {
        topic: name.to_owned(),
        problem: TopicProblem::CleanupPolicy {
            found: policy,
            required: spec.cleanup_policy,
            why,
        },
    })
}
