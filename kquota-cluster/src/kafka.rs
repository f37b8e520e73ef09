//! The topics the instances share: created when missing, checked when present.
//!
//! Everything here blocks (librdkafka's metadata requests do): call it from a thread of its own or
//! through `tokio::task::spawn_blocking`, never on an async worker.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, ResourceSpecifier, TopicReplication};
use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::ConsumerContext;
use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaErrorCode;

use crate::config::{ClusterConfig, ClusterError};

/// What a topic must be.
#[derive(Clone, Debug)]
pub(crate) struct TopicSpec<'a> {
    /// Its name.
    pub(crate) name: &'a str,
    /// The partitions it is created with; with `exact_partitions`, the only count accepted.
    pub(crate) partitions: i32,
    /// Whether an existing topic must have exactly `partitions` partitions.
    pub(crate) exact_partitions: bool,
    /// Its `cleanup.policy` when created (`compact`, `delete` or `compact,delete`).
    pub(crate) cleanup_policy: &'static str,
    /// Whether an existing topic must have exactly that policy (the log's records must never be
    /// deleted by retention); otherwise an existing topic's policy is its operator's choice.
    pub(crate) exact_policy: bool,
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
            exact_partitions: true,
            cleanup_policy: "compact",
            exact_policy: true,
            create_configs: &[],
        }
    }

    /// The heartbeat topic: the latest heartbeat of each instance kept by compaction, and
    /// everything gone after 10 minutes. Any partition count works (all are read).
    pub(crate) fn members(name: &'a str) -> Self {
        TopicSpec {
            name,
            partitions: 1,
            exact_partitions: false,
            cleanup_policy: "compact,delete",
            exact_policy: false,
            create_configs: &[
                ("retention.ms", "600000"),
                ("segment.ms", "60000"),
                ("min.compaction.lag.ms", "0"),
            ],
        }
    }

    /// The usage topic: records worth seconds, gone after 5 minutes. Any partition count works.
    pub(crate) fn usage(name: &'a str) -> Self {
        TopicSpec {
            name,
            partitions: 1,
            exact_partitions: false,
            cleanup_policy: "delete",
            exact_policy: false,
            create_configs: &[("retention.ms", "300000"), ("segment.ms", "60000")],
        }
    }
}

/// librdkafka's logs and errors, through `tracing` (the hosts log with it).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct TracingContext {
    /// Errors at `debug` only: a consumer's errors also come out of its `poll`, where they are
    /// logged (once per repeat) with what is done about them.
    pub(crate) quiet_errors: bool,
}

impl ClientContext for TracingContext {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        forward_log(level, fac, message);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        // The end of a partition is news, not an error.
        let eof = error.rdkafka_error_code() == Some(RDKafkaErrorCode::PartitionEOF);
        if self.quiet_errors || eof {
            tracing::debug!(target: "librdkafka", "{error}: {reason}");
        } else {
            tracing::warn!(target: "librdkafka", "{error}: {reason}");
        }
    }
}

impl ConsumerContext for TracingContext {}

/// A librdkafka log line at the matching `tracing` level.
pub(crate) fn forward_log(level: RDKafkaLogLevel, fac: &str, message: &str) {
    match level {
        RDKafkaLogLevel::Emerg
        | RDKafkaLogLevel::Alert
        | RDKafkaLogLevel::Critical
        | RDKafkaLogLevel::Error => tracing::error!(target: "librdkafka", "{fac} {message}"),
        RDKafkaLogLevel::Warning => tracing::warn!(target: "librdkafka", "{fac} {message}"),
        RDKafkaLogLevel::Notice | RDKafkaLogLevel::Info => {
            tracing::info!(target: "librdkafka", "{fac} {message}")
        }
        RDKafkaLogLevel::Debug => tracing::debug!(target: "librdkafka", "{fac} {message}"),
    }
}

/// Makes sure `spec.name` exists as `spec` says: creates it if missing (with `config`'s
/// replication factor, `-1` leaving it to the brokers' default; `min.insync.replicas` is left to
/// the brokers), or checks it. Fails with [`ClusterError::Topic`] naming what is wrong with an
/// existing topic, or [`ClusterError::Timeout`] if Kafka does not answer within `timeout`.
pub(crate) fn ensure_topic(
    config: &ClusterConfig,
    spec: &TopicSpec<'_>,
    timeout: Duration,
) -> Result<(), ClusterError> {
    // On a thread of its own: hosts call this from their async start-up, and the runtime that
    // waits for the admin client can be neither started nor dropped on a thread inside one.
    std::thread::scope(|scope| {
        scope
            .spawn(|| ensure_topic_here(config, spec, timeout))
            .join()
            .unwrap_or_else(|_| {
                Err(ClusterError::Kafka(format!(
                    "checking topic {} panicked",
                    spec.name
                )))
            })
    })
}

fn ensure_topic_here(
    config: &ClusterConfig,
    spec: &TopicSpec<'_>,
    timeout: Duration,
) -> Result<(), ClusterError> {
    let deadline = Instant::now() + timeout;
    let mut client = config.client();
    // A metadata request for a missing topic must not create it with the brokers' defaults.
    client.set("allow.auto.create.topics", "false");
    let admin: AdminClient<TracingContext> = client
        .create_with_context(TracingContext::default())
        .map_err(|e| ClusterError::Kafka(format!("the admin client: {e}")))?;
    // The admin calls are futures completed by librdkafka's own thread; a private runtime on this
    // thread waits for them, whatever runtime (if any) the caller has.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| ClusterError::Kafka(format!("a runtime for the admin client: {e}")))?;
    let name = spec.name;
    let mut created = false;
    loop {
        let left = remaining(deadline, || format!("the metadata of topic {name}"))?;
        let metadata = admin
            .inner()
            .fetch_metadata(Some(name), left)
            .map_err(|e| kafka_or_timeout(e, || format!("the metadata of topic {name}")))?;
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
                    return Err(ClusterError::Kafka(format!(
                        "the metadata of topic {name}: {}",
                        RDKafkaErrorCode::from(e)
                    )))
                }
            },
        };
        if missing {
            if created {
                // Created, not yet in the metadata this broker answers with: ask again.
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
            create(&admin, &runtime, config, spec, deadline)?;
            created = true;
            continue;
        }
        let partitions = topic.map_or(0, |t| t.partitions().len());
        if spec.exact_partitions && partitions != spec.partitions as usize {
            return Err(ClusterError::Topic(
                name.to_owned(),
                format!(
                    "it has {partitions} partitions and must have exactly {}: a single partition is \
                     what puts every batch in one order (delete it or name another topic)",
                    spec.partitions
                ),
            ));
        }
        if !spec.exact_policy {
            return Ok(());
        }
        return check_policy(&admin, &runtime, spec, deadline);
    }
}

/// Creates the topic; another instance creating it first is no error.
fn create(
    admin: &AdminClient<TracingContext>,
    runtime: &tokio::runtime::Runtime,
    config: &ClusterConfig,
    spec: &TopicSpec<'_>,
    deadline: Instant,
) -> Result<(), ClusterError> {
    let name = spec.name;
    let left = remaining(deadline, || format!("creating topic {name}"))?;
    let mut topic = NewTopic::new(
        name,
        spec.partitions,
        TopicReplication::Fixed(config.replication_factor),
    )
    .set("cleanup.policy", spec.cleanup_policy);
    for (k, v) in spec.create_configs {
        topic = topic.set(k, v);
    }
    let options = AdminOptions::new()
        .request_timeout(Some(left))
        .operation_timeout(Some(left));
    let results = runtime
        .block_on(admin.create_topics([&topic], &options))
        .map_err(|e| kafka_or_timeout(e, || format!("creating topic {name}")))?;
    for result in results {
        match result {
            Ok(_) => tracing::info!(
                topic = name,
                partitions = spec.partitions,
                replication_factor = config.replication_factor,
                cleanup_policy = spec.cleanup_policy,
                "created the topic"
            ),
            Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((_, code)) => {
                return Err(ClusterError::Kafka(format!(
                    "creating topic {name}: {code}"
                )))
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
    deadline: Instant,
) -> Result<(), ClusterError> {
    let name = spec.name;
    let left = remaining(deadline, || format!("the settings of topic {name}"))?;
    let options = AdminOptions::new().request_timeout(Some(left));
    let resources = runtime
        .block_on(admin.describe_configs([&ResourceSpecifier::Topic(name)], &options))
        .map_err(|e| kafka_or_timeout(e, || format!("the settings of topic {name}")))?;
    let resource = resources
        .into_iter()
        .next()
        .ok_or_else(|| ClusterError::Kafka(format!("no settings returned for topic {name}")))?
        .map_err(|code| ClusterError::Kafka(format!("the settings of topic {name}: {code}")))?;
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
    let why = if spec.cleanup_policy == "compact" {
        "its records are the configuration's whole history and must be kept: the topic must be \
         compacted (cleanup.policy=compact), and not deleted by retention"
    } else {
        "its records are kept and removed as kquota expects only with that policy"
    };
    Err(ClusterError::Topic(
        name.to_owned(),
        format!(
            "cleanup.policy is {policy:?}, not {:?}: {why}",
            spec.cleanup_policy
        ),
    ))
}

/// The time left before `deadline`, or a timeout naming `what`.
pub(crate) fn remaining(
    deadline: Instant,
    what: impl FnOnce() -> String,
) -> Result<Duration, ClusterError> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        Err(ClusterError::Timeout(what()))
    } else {
        Ok(left)
    }
}

/// A Kafka client's error as a [`ClusterError`]: a timeout as such, anything else as Kafka's.
pub(crate) fn kafka_or_timeout(e: KafkaError, what: impl FnOnce() -> String) -> ClusterError {
    let timed_out = matches!(
        e.rdkafka_error_code(),
        Some(RDKafkaErrorCode::OperationTimedOut | RDKafkaErrorCode::RequestTimedOut)
    );
    if timed_out {
        ClusterError::Timeout(format!("{} ({e})", what()))
    } else {
        ClusterError::Kafka(format!("{}: {e}", what()))
    }
}
