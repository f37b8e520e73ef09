//! What every client starts from: the librdkafka settings, logging through `tracing`, and the
//! way a Kafka error or a deadline becomes a [`ClusterError`].

use std::time::{Duration, Instant};

use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::ConsumerContext;
use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::ClientConfig;

use crate::config::ClusterConfig;
use crate::error::{ClusterError, Operation};

/// The librdkafka configuration every client starts from.
pub(crate) fn client(config: &ClusterConfig) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", &config.bootstrap_servers);
    c.set("client.id", format!("kquota-{}", config.instance_id));
    // librdkafka backs off up to 10 s between reconnects by default: after an outage, the
    // instances would follow the log again up to 10 s apart. Overridable, as any property.
    c.set("reconnect.backoff.max.ms", "1000");
    // Nothing here may create a topic with the brokers' defaults: the topics are made, with
    // their settings, by `ensure_topic`.
    c.set("allow.auto.create.topics", "false");
    for (k, v) in &config.client_properties {
        c.set(k, v);
    }
    c
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
            tracing::warn!(target: "librdkafka", peer = PEER, "{error}: {reason}");
        }
    }
}

impl ConsumerContext for TracingContext {}

/// The `peer` every librdkafka line is logged as: Kafka is the peer of this process's clients,
/// and what librdkafka says of it (a broker down, reconnects, `AllBrokersDown`) is bounded by the
/// log's per-peer guard as a client's lines are (a few lines a second and a count of the rest),
/// however many brokers and clients there are.
pub(crate) const PEER: &str = "librdkafka";

/// A librdkafka log line at the matching `tracing` level.
pub(crate) fn forward_log(level: RDKafkaLogLevel, fac: &str, message: &str) {
    // A broker that cannot be reached (`FAIL`: refused, reset, timed out) is what a rolling
    // restart or a broker's failure looks like to a client, and the client reconnects: a warning,
    // as Kafka's own clients log it, not an error.
    let level = match level {
        RDKafkaLogLevel::Error if fac == "FAIL" => RDKafkaLogLevel::Warning,
        other => other,
    };
    match level {
        RDKafkaLogLevel::Emerg
        | RDKafkaLogLevel::Alert
        | RDKafkaLogLevel::Critical
        | RDKafkaLogLevel::Error => {
            tracing::error!(target: "librdkafka", peer = PEER, "{fac} {message}")
        }
        RDKafkaLogLevel::Warning => {
            tracing::warn!(target: "librdkafka", peer = PEER, "{fac} {message}")
        }
        RDKafkaLogLevel::Notice | RDKafkaLogLevel::Info => {
            tracing::info!(target: "librdkafka", peer = PEER, "{fac} {message}")
        }
        RDKafkaLogLevel::Debug => tracing::debug!(target: "librdkafka", "{fac} {message}"),
    }
}

/// The time left before `deadline` (set `timeout` ago), or a timeout of `operation`.
pub(crate) fn remaining(
    deadline: Instant,
    timeout: Duration,
    operation: impl FnOnce() -> Operation,
) -> Result<Duration, ClusterError> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        Err(ClusterError::Timeout {
            operation: operation(),
            after: timeout,
        })
    } else {
        Ok(left)
    }
}

/// A Kafka client's error as a [`ClusterError`]: a timeout as such, anything else as Kafka's.
pub(crate) fn kafka_or_timeout(
    e: KafkaError,
    operation: Operation,
    timeout: Duration,
) -> ClusterError {
    let timed_out = matches!(
        e.rdkafka_error_code(),
        Some(RDKafkaErrorCode::OperationTimedOut | RDKafkaErrorCode::RequestTimedOut)
    );
    if timed_out {
        ClusterError::Timeout {
            operation,
            after: timeout,
        }
    } else {
        ClusterError::Kafka {
            operation,
            source: e,
        }
    }
}
