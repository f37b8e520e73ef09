//! The plug-in's settings: the `kquota.*` keys of a broker's `server.properties`, which Kafka hands
//! to the callback's `configure`. Every key is checked here, once: an unknown key or a bad value stops
//! the broker at start with a message naming the key and what it takes.
//!
//! The `kquota.cluster.*` keys are the ones `kquotad` and `kquota-proxy` take, under the same names:
//! with `kquota.cluster.bootstrap.servers` the broker follows kquota's configuration log and shares
//! its `bps` usage with the other brokers ([`ClusterSettings`]).

use std::collections::BTreeMap;
use std::fmt;

use kquota::SubQuotaPolicy;

/// Every key the plug-in reads, with what it accepts and its default.
pub const KEYS: &[Key] = &[
    Key {
        name: "kquota.sub.quota.policy",
        accepts: "`kafka` (answer exactly as Kafka's default callback) or `kip55` (a client's \
                  sub-quota is carved from its user's total; the user's other clients share the remainder)",
        default: "kafka",
    },
    Key {
        name: "kquota.cache.entries",
        accepts: "a whole number from 0 to 10000000: answers remembered per quota type, each \
                  stamped with the configuration it came from; 0 asks the engine on every call",
        default: "100000",
    },
    Key {
        name: BOOTSTRAP,
        accepts: "the Kafka cluster (host:port,...) whose topics hold kquota's configuration log, \
                  membership and usage: usually this cluster's own listeners",
        default: "none: the broker serves only the quotas of Kafka's metadata",
    },
    Key {
        name: "kquota.cluster.instance.id",
        accepts: "this broker's id among kquota's instances: unique, and the same across restarts",
        default: "broker-<node.id>",
    },
    Key {
        name: "kquota.cluster.config.topic",
        accepts: "a topic name (letters, digits, '.', '_', '-'; at most 249): the configuration log, \
                  the one kquotad and kquota-proxy follow",
        default: kquota_topic_default(),
    },
    Key {
        name: "kquota.cluster.replication.factor",
        accepts: "-1 (the cluster's default) or 1 to 32767: the replication factor of the topics \
                  the plug-in creates if they are missing",
        default: "-1",
    },
    Key {
        name: "kquota.cluster.client.*",
        accepts: "kquota.cluster.client.KEY=VALUE: a librdkafka property of the plug-in's own \
                  Kafka clients (security.protocol, sasl.*, ssl.*)",
        default: "none",
    },
];

const BOOTSTRAP: &str = "kquota.cluster.bootstrap.servers";
const CLIENT: &str = "kquota.cluster.client.";

/// The configuration topic's default name (kquota-cluster's).
const fn kquota_topic_default() -> &'static str {
    "_kquota_config"
}

/// The most answers the memo may be asked to hold per quota type.
pub const MAX_CACHE_ENTRIES: u32 = 10_000_000;

/// One settings key.
#[derive(Clone, Copy, Debug)]
pub struct Key {
    /// The key as written in `server.properties`.
    pub name: &'static str,
    /// What it accepts, for the message of a bad value and for the docs.
    pub accepts: &'static str,
    /// Its value when it is not set.
    pub default: &'static str,
}

/// The checked settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    policy: SubQuotaPolicy,
    cache_entries: u32,
    cluster: Option<ClusterSettings>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            policy: SubQuotaPolicy::Kafka,
            cache_entries: 100_000,
            cluster: None,
        }
    }
}

/// The `kquota.cluster.*` settings: where kquota's topics are and how the broker's own clients
/// reach them. Present only with `kquota.cluster.bootstrap.servers`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterSettings {
    bootstrap: String,
    instance_id: Option<String>,
    config_topic: String,
    replication_factor: i16,
    client: BTreeMap<String, String>,
}

impl ClusterSettings {
    /// `kquota.cluster.bootstrap.servers`.
    pub fn bootstrap(&self) -> &str {
        &self.bootstrap
    }

    /// This broker's instance id: `kquota.cluster.instance.id`, or `broker-<node_id>`.
    pub fn instance_id(&self, node_id: i32) -> String {
        self.instance_id
            .clone()
            .unwrap_or_else(|| format!("broker-{node_id}"))
    }

    /// The configuration topic.
    pub fn config_topic(&self) -> &str {
        &self.config_topic
    }

    /// The replication factor of the topics created (-1: the cluster's default).
    pub fn replication_factor(&self) -> i16 {
        self.replication_factor
    }

    /// The librdkafka properties of the plug-in's clients.
    pub fn client_properties(&self) -> &BTreeMap<String, String> {
        &self.client
    }
}

/// Why the settings were refused: the key and what it accepts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SettingsError {
    key: String,
    message: String,
}

impl SettingsError {
    /// The key that was refused.
    pub fn key(&self) -> &str {
        &self.key
    }
}

impl fmt::Display for SettingsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for SettingsError {}

impl Settings {
    /// Checks `pairs` (every `kquota.*` key a broker was given; other keys are the broker's own and
    /// are not passed here) into settings, or names the first key refused.
    pub fn parse<'a>(
        pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<Settings, SettingsError> {
        let mut settings = Settings::default();
        let mut bootstrap = None;
        let mut cluster = ClusterSettings {
            bootstrap: String::new(),
            instance_id: None,
            config_topic: kquota_topic_default().to_owned(),
            replication_factor: -1,
            client: BTreeMap::new(),
        };
        // The first cluster key given besides the bootstrap, for the message if it is missing.
        let mut needs_bootstrap = None;
        for (key, value) in pairs {
            let value = value.trim();
            let bad = |k: &Key| SettingsError {
                key: key.to_owned(),
                message: format!("{key}={value:?} is not valid: it takes {}", k.accepts),
            };
            if key.starts_with("kquota.cluster.") && key != BOOTSTRAP {
                needs_bootstrap.get_or_insert_with(|| key.to_owned());
            }
            match key {
                "kquota.sub.quota.policy" => {
                    settings.policy = match value {
                        "kafka" => SubQuotaPolicy::Kafka,
                        "kip55" => SubQuotaPolicy::Kip55,
                        _ => return Err(bad(&KEYS[0])),
                    }
                }
                "kquota.cache.entries" => {
                    settings.cache_entries = value
                        .parse::<u32>()
                        .ok()
                        .filter(|n| *n <= MAX_CACHE_ENTRIES)
                        .ok_or_else(|| bad(&KEYS[1]))?
                }
                BOOTSTRAP => {
                    bootstrap = Some(host_ports(value).ok_or_else(|| bad(&KEYS[2]))?);
                }
                "kquota.cluster.instance.id" => {
                    cluster.instance_id = Some(
                        Some(value)
                            .filter(|v| !v.is_empty())
                            .ok_or_else(|| bad(&KEYS[3]))?
                            .to_owned(),
                    )
                }
                "kquota.cluster.config.topic" => {
                    cluster.config_topic = Some(value)
                        .filter(|v| is_topic_name(v))
                        .ok_or_else(|| bad(&KEYS[4]))?
                        .to_owned()
                }
                "kquota.cluster.replication.factor" => {
                    cluster.replication_factor = value
                        .parse::<i16>()
                        .ok()
                        .filter(|n| *n == -1 || *n >= 1)
                        .ok_or_else(|| bad(&KEYS[5]))?
                }
                _ => match key.strip_prefix(CLIENT) {
                    Some(property) if !property.is_empty() => {
                        cluster.client.insert(property.to_owned(), value.to_owned());
                    }
                    _ => return Err(unknown(key)),
                },
            }
        }
        match bootstrap {
            Some(servers) => {
                if !cfg!(feature = "cluster") {
                    return Err(SettingsError {
                        key: BOOTSTRAP.to_owned(),
                        message: format!(
                            "{BOOTSTRAP} is set, but this build of the plug-in has no cluster \
                             support (kquota-kafka's `cluster` feature): build it with \
                             kquota-kafka/build.sh"
                        ),
                    });
                }
                cluster.bootstrap = servers;
                settings.cluster = Some(cluster);
            }
            None => {
                if let Some(key) = needs_bootstrap {
                    return Err(SettingsError {
                        message: format!(
                            "{key} needs {BOOTSTRAP}: without it the broker follows no \
                             configuration log, and the setting would be silently unused"
                        ),
                        key,
                    });
                }
            }
        }
        Ok(settings)
    }

    /// The cluster settings, with `kquota.cluster.bootstrap.servers`.
    pub fn cluster(&self) -> Option<&ClusterSettings> {
        self.cluster.as_ref()
    }

    /// The sub-quota policy.
    pub fn policy(&self) -> SubQuotaPolicy {
        self.policy
    }

    /// Answers the Java half remembers per quota type (0: none).
    pub fn cache_entries(&self) -> u32 {
        self.cache_entries
    }
}

/// `host:port,...` with every port a number, spaces around the commas dropped; `None` if empty
/// or malformed.
fn host_ports(value: &str) -> Option<String> {
    let parts: Vec<&str> = value.split(',').map(str::trim).collect();
    let ok = parts.iter().all(|p| {
        p.rsplit_once(':').is_some_and(|(host, port)| {
            !host.is_empty() && port.parse::<u16>().is_ok_and(|n| n > 0)
        })
    });
    ok.then(|| parts.join(","))
}

/// Kafka's rule for a topic name.
fn is_topic_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 249
        && name != "."
        && name != ".."
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// The message for a `kquota.*` key the plug-in does not know, with the nearest known key.
fn unknown(key: &str) -> SettingsError {
    let known: Vec<&str> = KEYS
        .iter()
        .map(|k| k.name)
        .filter(|k| !k.ends_with('*'))
        .collect();
    let nearest = known
        .iter()
        .map(|k| (strsim::levenshtein(key, k), *k))
        .min()
        .filter(|(d, _)| *d <= 3)
        .map(|(_, k)| format!(" (did you mean {k}?)"))
        .unwrap_or_default();
    SettingsError {
        key: key.to_owned(),
        message: format!(
            "{key} is not a kquota setting{nearest}; the plug-in takes {}",
            known.join(", ")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_when_nothing_is_set() {
        let s = Settings::parse([]).unwrap();
        assert_eq!(s.policy(), SubQuotaPolicy::Kafka);
        assert_eq!(s.cache_entries(), 100_000);
    }

    #[test]
    fn every_key_is_read() {
        let s = Settings::parse([
            ("kquota.sub.quota.policy", "kip55"),
            ("kquota.cache.entries", " 0 "),
        ])
        .unwrap();
        assert_eq!(s.policy(), SubQuotaPolicy::Kip55);
        assert_eq!(s.cache_entries(), 0);
    }

    #[test]
    fn a_bad_value_names_its_key_and_what_it_takes() {
        for (key, value) in [
            ("kquota.sub.quota.policy", "KIP55"),
            ("kquota.cache.entries", "-1"),
            ("kquota.cache.entries", "10000001"),
            ("kquota.cache.entries", "lots"),
        ] {
            let e = Settings::parse([(key, value)]).unwrap_err();
            assert_eq!(e.key(), key);
            assert!(e.to_string().starts_with(&format!("{key}=")), "{e}");
            assert!(e.to_string().contains("it takes"), "{e}");
        }
    }

    #[test]
    #[cfg(not(feature = "cluster"))]
    fn the_cluster_keys_are_refused_by_a_build_without_the_cluster() {
        let e = Settings::parse([("kquota.cluster.bootstrap.servers", "k:1")]).unwrap_err();
        assert_eq!(e.key(), "kquota.cluster.bootstrap.servers");
        assert!(e.to_string().contains("no cluster support"), "{e}");
    }

    #[test]
    #[cfg(feature = "cluster")]
    fn the_cluster_keys_are_read_with_the_bootstrap() {
        let s = Settings::parse([
            ("kquota.cluster.bootstrap.servers", "k1:9092, k2:9092"),
            ("kquota.cluster.replication.factor", "3"),
            ("kquota.cluster.config.topic", "quotas.log"),
            ("kquota.cluster.client.security.protocol", " SSL "),
        ])
        .unwrap();
        let c = s.cluster().unwrap();
        assert_eq!(c.bootstrap(), "k1:9092,k2:9092");
        assert_eq!(c.replication_factor(), 3);
        assert_eq!(c.config_topic(), "quotas.log");
        assert_eq!(c.instance_id(7), "broker-7");
        assert_eq!(c.client_properties()["security.protocol"], "SSL");
        assert!(Settings::parse([]).unwrap().cluster().is_none());
        let named = Settings::parse([
            ("kquota.cluster.bootstrap.servers", "k:1"),
            ("kquota.cluster.instance.id", "b1"),
        ])
        .unwrap();
        assert_eq!(named.cluster().unwrap().instance_id(7), "b1");
    }

    #[test]
    #[cfg(feature = "cluster")]
    fn cluster_keys_without_the_bootstrap_or_with_bad_values_are_refused() {
        let e = Settings::parse([("kquota.cluster.instance.id", "b1")]).unwrap_err();
        assert_eq!(e.key(), "kquota.cluster.instance.id");
        assert!(
            e.to_string()
                .contains("needs kquota.cluster.bootstrap.servers"),
            "{e}"
        );
        for (key, value) in [
            ("kquota.cluster.bootstrap.servers", ""),
            ("kquota.cluster.bootstrap.servers", "k1"),
            ("kquota.cluster.bootstrap.servers", "k1:x,k2:1"),
            ("kquota.cluster.bootstrap.servers", "k1:0"),
            ("kquota.cluster.replication.factor", "0"),
            ("kquota.cluster.replication.factor", "40000"),
            ("kquota.cluster.config.topic", "a/b"),
            ("kquota.cluster.instance.id", " "),
        ] {
            let e = Settings::parse([("kquota.cluster.bootstrap.servers", "k:1"), (key, value)])
                .unwrap_err();
            assert_eq!(e.key(), key);
            assert!(e.to_string().contains("it takes"), "{e}");
        }
        let e = Settings::parse([("kquota.cluster.client.", "x")]).unwrap_err();
        assert!(e.to_string().contains("not a kquota setting"), "{e}");
    }

    #[test]
    fn an_unknown_key_is_refused_with_the_nearest_known_one() {
        let e = Settings::parse([("kquota.sub.quota.polcy", "kafka")]).unwrap_err();
        assert_eq!(e.key(), "kquota.sub.quota.polcy");
        assert!(
            e.to_string()
                .contains("did you mean kquota.sub.quota.policy?"),
            "{e}"
        );
        let e = Settings::parse([("kquota.whatever", "1")]).unwrap_err();
        assert!(!e.to_string().contains("did you mean"), "{e}");
        assert!(e.to_string().contains("kquota.cache.entries"), "{e}");
    }
}
