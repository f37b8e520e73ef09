//! The sub-quota policy: how a user's client sub-quotas relate to the user's total. Its own module
//! because both validation (`alter`) and resolution (`engine`) depend on it.

use std::fmt;
use std::str::FromStr;

use crate::error::ParseError;

/// How sub-quotas of a user's clients relate to the user's total.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum SubQuotaPolicy {
    /// The seeds' design (KIP-55): a user's named client sub-quotas may not exceed its total, and the
    /// clients that fall back to the user's total share what the sub-quotas leave of it.
    #[default]
    Kip55,
    /// Apache Kafka's behaviour: sub-quotas are independent, and the user's bucket keeps its full total.
    Kafka,
}

impl SubQuotaPolicy {
    /// The policy's spelling in settings: `kip55` or `kafka`.
    pub fn as_str(self) -> &'static str {
        match self {
            SubQuotaPolicy::Kip55 => "kip55",
            SubQuotaPolicy::Kafka => "kafka",
        }
    }
}

impl FromStr for SubQuotaPolicy {
    type Err = ParseError;

    /// Parses `kip55` or `kafka` (exactly: settings spell it in lower case).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "kip55" => Ok(SubQuotaPolicy::Kip55),
            "kafka" => Ok(SubQuotaPolicy::Kafka),
            _ => Err(ParseError::UnknownSubQuotaPolicy(s.to_owned())),
        }
    }
}

impl fmt::Display for SubQuotaPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
