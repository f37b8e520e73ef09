//! kquota-cluster: many kquota instances (brokers, proxies, `kquotad`s) sharing one quota
//! configuration and cluster-wide quotas, through Kafka itself.
//!
//! * [`ConfigLog`]: the configuration as a replicated log, a single-partition compacted topic that
//!   every instance reads from its start and follows, applying each record in log order with the
//!   engine's deterministic validation. An alteration made at any instance is appended (acks=all,
//!   idempotent) and acknowledged only once the instance has applied it from the log, with the
//!   result it had there. It is a [`kquota::Persistence`], so an admin API commits through it.
//! * [`Membership`]: each instance's heartbeat in a topic, so the live instance count that `bps`
//!   limits divide by follows instances as they come and go.
//! * [`UsageShare`]: what the split needs of each instance's windowed usage of its `bps` buckets,
//!   shared at a short interval as what changed ([`UsageDelta`]), from which each instance takes
//!   its part of a cluster-wide limit ([`kquota::meter::BpsSplit`]).
//!
//! [`ConfigLog::open`], [`Membership::start`] and [`UsageShare::start`] are all `async`: each
//! does its work (Kafka's metadata requests block) on a thread of its own and resolves when that
//! thread is ready, so a host awaits them on its runtime without blocking a worker.
//!
//! The folders name the parts: `log/` (the configuration log and its records), `members.rs`,
//! `usage/` (the usage record, the split, the cadence, the thread that moves records),
//! `kafka/`, the one place that knows the topics and the clients' settings and calls librdkafka,
//! and `worker.rs`, the threads they run on.
//!
//! The engine crate does not depend on this one: a host that runs a single instance pays nothing
//! for it.

mod config;
mod error;
mod kafka;
mod log;
mod members;
mod time;
mod usage;
mod worker;

// The public interface: what a host needs to join its instances through Kafka.
//
// The settings every part shares, and why joining or committing failed.
pub use crate::config::ClusterConfig;
pub use crate::error::{
    ClusterError, ConfigProblem, KafkaClient, LogFailure, Operation, RecordProblem, TopicProblem,
    UsageProblem,
};
// The configuration as a replicated log, and the topic it is kept in by default.
pub use crate::config::DEFAULT_CONFIG_TOPIC;
pub use crate::log::{ConfigLog, LogProgress};
// Live membership: heartbeats through a topic, the engine's live instance count.
pub use crate::config::DEFAULT_MEMBERS_TOPIC;
pub use crate::members::Membership;
// Usage sharing, and the split of cluster-wide `bps` limits it feeds: the record, the split and
// the cadence are pure (no I/O), so that a simulation drives them exactly as the usage thread
// does.
pub use crate::config::UsageThreshold;
pub use crate::config::DEFAULT_USAGE_TOPIC;
pub use crate::usage::cadence::{UsageCadence, UsageDue};
pub use crate::usage::delta::{UsageDelta, UsagePublisher};
pub use crate::usage::demand::Demand;
pub use crate::usage::record::{
    BucketUsage, UsageRecord, UsageTracker, DEFAULT_MAX_BUCKETS, MAX_RECORD_BYTES,
};
pub use crate::usage::split::{split_limit, SharedSplit, SplitParams};
pub use crate::usage::{UsageShare, UsageSource};
