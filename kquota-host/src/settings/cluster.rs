//! The `kquota.cluster.*` settings both servers take: where the Kafka cluster is that instances
//! share one configuration through, and how this instance joins it. Set key by key, then made
//! into a `kquota_cluster::ClusterConfig` once every key is in.

use std::collections::BTreeMap;
use std::time::Duration;

use kquota_cluster::ClusterConfig;

use super::error::{Problem, SettingError};
use super::table::Settings;
use super::values::{millis, non_empty, replication_factor};

/// The prefix of every cluster setting.
pub const CLUSTER_PREFIX: &str = "kquota.cluster.";
/// The prefix of the librdkafka properties of the server's own Kafka clients.
const CLIENT: &str = "kquota.cluster.client.";
const BOOTSTRAP: &str = "kquota.cluster.bootstrap.servers";
const INSTANCE_ID: &str = "kquota.cluster.instance.id";

/// The `kquota.cluster.*` settings given so far.
#[derive(Clone, Debug)]
pub struct ClusterSettings {
    bootstrap: Option<String>,
    instance_id: Option<String>,
    client: BTreeMap<String, String>,
    config_topic: String,
    replication_factor: i16,
    alter_timeout: Duration,
}

impl Default for ClusterSettings {
    fn default() -> Self {
        let defaults = ClusterConfig::new("", "");
        ClusterSettings {
            bootstrap: None,
            instance_id: None,
            client: BTreeMap::new(),
            config_topic: defaults.config_topic,
            // The crate's default is -1, an INT16.
            replication_factor: i16::try_from(defaults.replication_factor).unwrap_or(-1),
            alter_timeout: defaults.alter_timeout,
        }
    }
}

impl ClusterSettings {
    /// Sets one `kquota.cluster.*` key, checked. `Err(None)`: not a cluster key.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), Option<Problem>> {
        match key {
            BOOTSTRAP => self.bootstrap = Some(non_empty(value)?.to_owned()),
            INSTANCE_ID => self.instance_id = Some(non_empty(value)?.to_owned()),
            "kquota.cluster.config.topic" => self.config_topic = non_empty(value)?.to_owned(),
            "kquota.cluster.replication.factor" => {
                self.replication_factor = replication_factor(value)?
            }
            "kquota.cluster.alter.timeout.ms" => self.alter_timeout = millis(value, 0)?,
            _ => match key.strip_prefix(CLIENT) {
                Some(property) if !property.is_empty() => {
                    self.client
                        .insert(property.to_owned(), value.trim().to_owned());
                }
                _ => return Err(None),
            },
        }
        Ok(())
    }

    /// The cluster to join, if `kquota.cluster.bootstrap.servers` was given; this instance's id
    /// is `default_id()` unless `kquota.cluster.instance.id` names it. An instance id or client
    /// properties without the cluster are refused (they would be silently unused), naming the
    /// flags of `table`.
    pub fn build(
        &self,
        table: &Settings,
        default_id: impl FnOnce() -> String,
    ) -> Result<Option<ClusterConfig>, SettingError> {
        let Some(bootstrap) = &self.bootstrap else {
            if self.instance_id.is_some() {
                return Err(table.needs(INSTANCE_ID, BOOTSTRAP));
            }
            if !self.client.is_empty() {
                return Err(table.needs("kquota.cluster.client.*", BOOTSTRAP));
            }
            return Ok(None);
        };
        let id = self.instance_id.clone().unwrap_or_else(default_id);
        let mut cluster = ClusterConfig::new(bootstrap.clone(), id);
        cluster.client_properties = self.client.clone();
        cluster.config_topic = self.config_topic.clone();
        cluster.replication_factor = self.replication_factor.into();
        cluster.alter_timeout = self.alter_timeout;
        Ok(Some(cluster))
    }
}

#[cfg(test)]
mod tests {
    use super::super::table::Setting;
    use super::*;

    const TABLE: Settings = Settings(&[
        Setting::key(BOOTSTRAP, "the cluster").flag("--cluster-bootstrap"),
        Setting::key(INSTANCE_ID, "this instance").flag("--instance-id"),
        Setting::key("kquota.cluster.client.*", "a property"),
    ]);

    #[test]
    fn the_cluster_is_built_from_its_keys() {
        let mut c = ClusterSettings::default();
        assert!(c.build(&TABLE, || "x".into()).unwrap().is_none());
        c.set(BOOTSTRAP, "kafka:9092").unwrap();
        c.set("kquota.cluster.client.security.protocol", " SSL ")
            .unwrap();
        c.set("kquota.cluster.replication.factor", "3").unwrap();
        c.set("kquota.cluster.alter.timeout.ms", "500").unwrap();
        let built = c.build(&TABLE, || "host:9092".into()).unwrap().unwrap();
        assert_eq!(built.bootstrap_servers, "kafka:9092");
        assert_eq!(built.instance_id, "host:9092");
        assert_eq!(built.replication_factor, 3);
        assert_eq!(built.alter_timeout, Duration::from_millis(500));
        assert_eq!(built.client_properties["security.protocol"], "SSL");
    }

    #[test]
    fn bad_values_and_lone_settings_are_refused() {
        let mut c = ClusterSettings::default();
        assert!(matches!(c.set("kquota.cluster.client.", "x"), Err(None)));
        assert!(matches!(c.set("kquota.cluster.nope", "x"), Err(None)));
        assert!(matches!(
            c.set("kquota.cluster.replication.factor", "0"),
            Err(Some(Problem::ReplicationFactor))
        ));
        assert!(matches!(c.set(BOOTSTRAP, " "), Err(Some(Problem::Empty))));
        c.set(INSTANCE_ID, "a").unwrap();
        assert_eq!(
            c.build(&TABLE, String::new).unwrap_err().to_string(),
            "kquota.cluster.instance.id (--instance-id) needs kquota.cluster.bootstrap.servers (--cluster-bootstrap)"
        );
    }
}
