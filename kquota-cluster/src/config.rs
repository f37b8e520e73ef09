//! [`ClusterConfig`]: where the Kafka cluster is, how to reach it, the topics and the timings.

use std::collections::BTreeMap;
use std::time::Duration;

/// The topic the configuration is kept in, by default.
pub const DEFAULT_CONFIG_TOPIC: &str = "_kquota_config";
/// The topic instances announce themselves in, by default.
pub const DEFAULT_MEMBERS_TOPIC: &str = "_kquota_members";
/// The topic instances share their `bps` usage in, by default.
pub const DEFAULT_USAGE_TOPIC: &str = "_kquota_usage";

/// How instances reach each other through Kafka. [`ClusterConfig::new`] gives the defaults.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ClusterConfig {
    /// Kafka's `bootstrap.servers`.
    pub bootstrap_servers: String,
    /// More librdkafka client properties (`security.protocol`, `sasl.*`, `ssl.*`...), applied to
    /// every client this crate makes.
    pub client_properties: BTreeMap<String, String>,
    /// This instance's id, unique among the instances (it names its heartbeats, its usage and
    /// its alterations in the log).
    pub instance_id: String,
    /// The configuration topic: one partition, compacted.
    pub config_topic: String,
    /// The membership topic.
    pub members_topic: String,
    /// The usage topic.
    pub usage_topic: String,
    /// The replication factor of the topics this crate creates (-1: the cluster's default).
    pub replication_factor: i32,
    /// The `min.insync.replicas` of the topics this crate creates (`None`: the brokers'). With
    /// three replicas, 2: an alteration is acknowledged only once two brokers hold it, and one
    /// broker lost loses no acknowledged alteration.
    pub min_insync_replicas: Option<u32>,
    /// How long an alteration may wait to be appended and applied before it is refused (it may
    /// still be applied later: the client is told it timed out, not that it failed).
    pub alter_timeout: Duration,
    /// How often an instance announces itself.
    pub heartbeat_interval: Duration,
    /// An instance not heard from for this long is no longer counted.
    pub member_expiry: Duration,
    /// How often an instance shares its `bps` usage.
    pub usage_interval: Duration,
    /// How far a bucket served by this instance alone must move before it is published again:
    /// its rate by this fraction of its limit (or of its rate, if larger), or, while it
    /// throttles, its limit by this fraction (default 0.02). A throttle state that changed, and
    /// any change of a bucket another instance serves too, are always published.
    pub usage_threshold: UsageThreshold,
    /// A shared view older than this is not used: `bps` limits fall back to the limit divided
    /// by the live instance count.
    pub usage_max_age: Duration,
    /// How many batches after the latest snapshot of the configuration make an instance claim
    /// the next one (0: this instance never claims; it still reads the others' snapshots). A
    /// snapshot costs about the configuration's size in the log, once per this many batches.
    pub snapshot_records: u64,
    /// How long joining may wait for Kafka: to create or check a topic, to learn where the
    /// configuration log ends, and (while catching up with it) for the next record.
    pub open_timeout: Duration,
    /// Whether this instance serves clients' traffic (a broker, a proxy): only those are counted
    /// among the live instances that `bps` limits divide by and that share usage. An instance
    /// that only answers the quota APIs (`kquotad`) heartbeats as one that does not, so that it
    /// never holds a part of a limit nor keeps the others' usage view from being whole.
    pub serves_clients: bool,
}

impl ClusterConfig {
    /// Instance `instance_id` of the cluster at `bootstrap_servers`, with the default topics and
    /// timings.
    pub fn new(bootstrap_servers: impl Into<String>, instance_id: impl Into<String>) -> Self {
        ClusterConfig {
            bootstrap_servers: bootstrap_servers.into(),
            client_properties: BTreeMap::new(),
            instance_id: instance_id.into(),
            config_topic: DEFAULT_CONFIG_TOPIC.to_owned(),
            members_topic: DEFAULT_MEMBERS_TOPIC.to_owned(),
            usage_topic: DEFAULT_USAGE_TOPIC.to_owned(),
            replication_factor: -1,
            min_insync_replicas: None,
            alter_timeout: Duration::from_secs(10),
            heartbeat_interval: Duration::from_millis(500),
            member_expiry: Duration::from_secs(3),
            usage_interval: Duration::from_millis(250),
            usage_threshold: UsageThreshold::DEFAULT,
            usage_max_age: Duration::from_secs(2),
            snapshot_records: 10_000,
            open_timeout: Duration::from_secs(30),
            serves_clients: true,
        }
    }
}

/// How far a bucket served by one instance alone must move before it is published again: a
/// fraction of its limit (or of its rate, if larger), from 0 (every change) to 1. Made only from a
/// fraction in that range, so that a publisher never meets NaN or a negative threshold.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct UsageThreshold(f64);

impl UsageThreshold {
    /// The default, 2 %: a bucket is published again when its rate moved by more than 2 % of its
    /// limit, or its throttle state changed. Below the split's margin (5 %), so a rate published
    /// never falls that far behind the real one.
    pub const DEFAULT: UsageThreshold = UsageThreshold(0.02);

    /// `fraction` as a threshold; `None` unless it is a number from 0 to 1.
    pub fn new(fraction: f64) -> Option<UsageThreshold> {
        (fraction.is_finite() && (0.0..=1.0).contains(&fraction))
            .then_some(UsageThreshold(fraction))
    }

    /// The fraction.
    pub fn fraction(self) -> f64 {
        self.0
    }
}

impl Default for UsageThreshold {
    fn default() -> Self {
        UsageThreshold::DEFAULT
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_threshold_is_a_fraction_from_0_to_1() {
        assert_eq!(
            UsageThreshold::new(0.05).map(UsageThreshold::fraction),
            Some(0.05)
        );
        assert_eq!(
            UsageThreshold::new(0.0).map(UsageThreshold::fraction),
            Some(0.0)
        );
        assert_eq!(
            UsageThreshold::new(1.0).map(UsageThreshold::fraction),
            Some(1.0)
        );
        for bad in [-0.01, 1.01, f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            assert_eq!(UsageThreshold::new(bad), None, "{bad}");
        }
        assert_eq!(UsageThreshold::default(), UsageThreshold::DEFAULT);
    }
}
