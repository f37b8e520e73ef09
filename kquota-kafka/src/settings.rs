//! The plug-in's settings: the `kquota.*` keys of a broker's `server.properties`, which Kafka hands
//! to the callback's `configure`. Every key is checked here, once: an unknown key or a bad value stops
//! the broker at start with a message naming the key and what it takes.

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
];

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
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Settings {
    policy: SubQuotaPolicy,
    cache_entries: u32,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            policy: SubQuotaPolicy::Kafka,
            cache_entries: 100_000,
        }
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
        for (key, value) in pairs {
            let value = value.trim();
            let bad = |k: &Key| SettingsError {
                key: key.to_owned(),
                message: format!("{key}={value:?} is not valid: it takes {}", k.accepts),
            };
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
                _ => return Err(unknown(key)),
            }
        }
        Ok(settings)
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

/// The message for a `kquota.*` key the plug-in does not know, with the nearest known key.
fn unknown(key: &str) -> SettingsError {
    let known: Vec<&str> = KEYS.iter().map(|k| k.name).collect();
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
