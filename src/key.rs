//! Quota keys (a quota type plus a unit) and quota values.

use std::fmt;
use std::str::FromStr;

use crate::error::ParseError;

/// What a quota limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum QuotaType {
    /// Bytes produced per second.
    ProducerByteRate,
    /// Bytes fetched per second.
    ConsumerByteRate,
    /// Percent of one request-handler thread's time.
    RequestPercentage,
    /// Partition mutations (create, delete, add partitions) per second.
    ControllerMutationRate,
    /// New connections per second, per IP.
    ConnectionCreationRate,
}

/// How a value must look for a quota type, as Kafka's config definitions type it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValueKind {
    /// A whole number that fits an `i64` (Kafka's LONG).
    Long,
    /// A whole number that fits an `i32` (Kafka's INT).
    Int,
    /// Any finite number (Kafka's DOUBLE).
    Double,
}

impl QuotaType {
    /// Every quota type.
    pub const ALL: [QuotaType; 5] = [
        QuotaType::ConnectionCreationRate,
        QuotaType::ConsumerByteRate,
        QuotaType::ControllerMutationRate,
        QuotaType::ProducerByteRate,
        QuotaType::RequestPercentage,
    ];

    /// Kafka's config key for the type, e.g. `producer_byte_rate`.
    pub fn as_str(self) -> &'static str {
        match self {
            QuotaType::ProducerByteRate => "producer_byte_rate",
            QuotaType::ConsumerByteRate => "consumer_byte_rate",
            QuotaType::RequestPercentage => "request_percentage",
            QuotaType::ControllerMutationRate => "controller_mutation_rate",
            QuotaType::ConnectionCreationRate => "connection_creation_rate",
        }
    }

    /// The unit a bare type name means.
    pub fn native_unit(self) -> Unit {
        match self {
            QuotaType::ProducerByteRate | QuotaType::ConsumerByteRate => Unit::BrokerBps,
            QuotaType::RequestPercentage => Unit::Percent,
            QuotaType::ControllerMutationRate => Unit::MutationsPerSec,
            QuotaType::ConnectionCreationRate => Unit::ConnectionsPerSec,
        }
    }

    /// The value type Kafka declares for this quota.
    pub fn value_kind(self) -> ValueKind {
        match self {
            QuotaType::ProducerByteRate | QuotaType::ConsumerByteRate => ValueKind::Long,
            QuotaType::RequestPercentage | QuotaType::ControllerMutationRate => ValueKind::Double,
            QuotaType::ConnectionCreationRate => ValueKind::Int,
        }
    }

    /// Whether the type is configured on `{ip}` entities (and only there).
    pub fn is_ip_type(self) -> bool {
        self == QuotaType::ConnectionCreationRate
    }
}

impl FromStr for QuotaType {
    type Err = ParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        QuotaType::ALL
            .into_iter()
            .find(|t| t.as_str() == s)
            .ok_or_else(|| ParseError::UnknownQuotaType(s.to_owned()))
    }
}

impl fmt::Display for QuotaType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The unit a quota value is expressed in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Unit {
    /// Bytes per second on this broker (the native unit of the byte rates).
    BrokerBps,
    /// Bytes per second across the cluster, divided by the live broker count.
    Bps,
    /// A weight in a split of the broker's configured capacity.
    Shares,
    /// Percent of one request-handler thread.
    Percent,
    /// Partition mutations per second.
    MutationsPerSec,
    /// Connections per second.
    ConnectionsPerSec,
}

impl Unit {
    /// The unit's spelling, e.g. `broker_bps`.
    pub fn as_str(self) -> &'static str {
        match self {
            Unit::BrokerBps => "broker_bps",
            Unit::Bps => "bps",
            Unit::Shares => "shares",
            Unit::Percent => "percent",
            Unit::MutationsPerSec => "mutations_per_sec",
            Unit::ConnectionsPerSec => "connections_per_sec",
        }
    }
}

impl fmt::Display for Unit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A quota key: a type and one of its units. Only valid pairs can be built.
///
/// Spelled `type` for the native unit and `type:unit` otherwise (`producer_byte_rate:shares`).
///
/// The `u8` is a dense index (see [`QuotaKey::index`]); `Debug` prints the spelling instead, so that
/// `QuotaKey::PRODUCER_BPS` shows as `QuotaKey(producer_byte_rate:bps)`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct QuotaKey(u8);

impl fmt::Debug for QuotaKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "QuotaKey({self})")
    }
}

/// Every key, in output order (by type name, then unit name), as `(type, unit)`.
const KEYS: [(QuotaType, Unit); QuotaKey::COUNT] = [
    (QuotaType::ConsumerByteRate, Unit::Bps),
    (QuotaType::ConsumerByteRate, Unit::BrokerBps),
    (QuotaType::ConsumerByteRate, Unit::Shares),
    (QuotaType::ControllerMutationRate, Unit::MutationsPerSec),
    (QuotaType::ProducerByteRate, Unit::Bps),
    (QuotaType::ProducerByteRate, Unit::BrokerBps),
    (QuotaType::ProducerByteRate, Unit::Shares),
    (QuotaType::RequestPercentage, Unit::Percent),
    (QuotaType::ConnectionCreationRate, Unit::ConnectionsPerSec),
];

impl QuotaKey {
    /// How many keys exist.
    pub const COUNT: usize = 9;
    /// How many keys apply to user / client-id entities (indices `0..CLIENT_COUNT`).
    pub const CLIENT_COUNT: usize = 8;

    /// `consumer_byte_rate:bps`.
    pub const CONSUMER_BPS: QuotaKey = QuotaKey(0);
    /// `consumer_byte_rate` (broker_bps).
    pub const CONSUMER_BROKER_BPS: QuotaKey = QuotaKey(1);
    /// `consumer_byte_rate:shares`.
    pub const CONSUMER_SHARES: QuotaKey = QuotaKey(2);
    /// `controller_mutation_rate`.
    pub const CONTROLLER_MUTATION_RATE: QuotaKey = QuotaKey(3);
    /// `producer_byte_rate:bps`.
    pub const PRODUCER_BPS: QuotaKey = QuotaKey(4);
    /// `producer_byte_rate` (broker_bps).
    pub const PRODUCER_BROKER_BPS: QuotaKey = QuotaKey(5);
    /// `producer_byte_rate:shares`.
    pub const PRODUCER_SHARES: QuotaKey = QuotaKey(6);
    /// `request_percentage`.
    pub const REQUEST_PERCENTAGE: QuotaKey = QuotaKey(7);
    /// `connection_creation_rate`.
    pub const CONNECTION_CREATION_RATE: QuotaKey = QuotaKey(8);

    /// The keys whose totals bound sub-quotas (byte rates in `broker_bps` or `bps`).
    pub const SUB_QUOTA_KEYS: [QuotaKey; 4] = [
        QuotaKey::CONSUMER_BPS,
        QuotaKey::CONSUMER_BROKER_BPS,
        QuotaKey::PRODUCER_BPS,
        QuotaKey::PRODUCER_BROKER_BPS,
    ];

    /// Every key, in output order.
    pub fn all() -> impl Iterator<Item = QuotaKey> {
        (0..Self::COUNT as u8).map(QuotaKey)
    }

    /// The keys of user / client-id entities, in output order.
    pub fn client_keys() -> impl Iterator<Item = QuotaKey> {
        (0..Self::CLIENT_COUNT as u8).map(QuotaKey)
    }

    /// The key for `ty` in `unit`, if that unit applies to the type.
    pub fn new(ty: QuotaType, unit: Unit) -> Option<QuotaKey> {
        KEYS.iter()
            .position(|&k| k == (ty, unit))
            .map(|i| QuotaKey(i as u8))
    }

    /// The key for `ty` in its native unit.
    pub fn native(ty: QuotaType) -> QuotaKey {
        QuotaKey::new(ty, ty.native_unit()).expect("every type has its native unit")
    }

    /// The quota type.
    pub fn quota_type(self) -> QuotaType {
        KEYS[self.0 as usize].0
    }

    /// The unit.
    pub fn unit(self) -> Unit {
        KEYS[self.0 as usize].1
    }

    /// A dense index in `0..COUNT`, in output order.
    pub fn index(self) -> usize {
        self.0 as usize
    }

    /// The key with the given dense index.
    pub fn from_index(index: usize) -> Option<QuotaKey> {
        (index < Self::COUNT).then_some(QuotaKey(index as u8))
    }

    /// Whether this key's total bounds the sub-quotas of a user's clients.
    pub fn is_sub_quota_key(self) -> bool {
        matches!(self.unit(), Unit::Bps | Unit::BrokerBps)
    }

    /// Whether the key is configured on `{ip}` entities (otherwise on user / client-id entities).
    pub fn is_ip_key(self) -> bool {
        self.quota_type().is_ip_type()
    }
}

impl FromStr for QuotaKey {
    type Err = ParseError;

    /// Parses `type` or `type:unit`; `type:<native unit>` means the same as `type`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (ty, unit) = match s.split_once(':') {
            Some((ty, unit)) => (ty.parse::<QuotaType>()?, Some(unit)),
            None => (s.parse::<QuotaType>()?, None),
        };
        let Some(unit) = unit else {
            return Ok(QuotaKey::native(ty));
        };
        QuotaKey::all()
            .find(|k| k.quota_type() == ty && k.unit().as_str() == unit)
            .ok_or_else(|| ParseError::UnknownUnit {
                quota_type: ty.as_str().to_owned(),
                unit: unit.to_owned(),
            })
    }
}

impl fmt::Display for QuotaKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ty = self.quota_type();
        if self.unit() == ty.native_unit() {
            f.write_str(ty.as_str())
        } else {
            write!(f, "{}:{}", ty, self.unit())
        }
    }
}

/// A quota value: finite and greater than zero.
#[derive(Clone, Copy, Debug, PartialEq, PartialOrd)]
pub struct QuotaValue(f64);

impl QuotaValue {
    /// Wraps `value` if it is finite and greater than zero.
    pub fn new(value: f64) -> Result<QuotaValue, ParseError> {
        if value.is_finite() && value > 0.0 {
            Ok(QuotaValue(value))
        } else {
            Err(ParseError::InvalidValue(value.to_string()))
        }
    }

    /// The value.
    pub fn get(self) -> f64 {
        self.0
    }
}

impl fmt::Display for QuotaValue {
    /// Whole numbers print without a fraction (`2000000`), others as Rust prints an `f64`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        format_value(self.0, f)
    }
}

/// Prints a quota number: whole numbers without a fraction, others in the shortest exact form.
pub(crate) fn format_value(v: f64, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    if v.fract() == 0.0 && v.abs() < 1e17 {
        write!(f, "{}", v as i64)
    } else {
        write!(f, "{v}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spelling_round_trips() {
        for key in QuotaKey::all() {
            assert_eq!(key.to_string().parse::<QuotaKey>().unwrap(), key);
            let explicit = format!("{}:{}", key.quota_type(), key.unit());
            assert_eq!(explicit.parse::<QuotaKey>().unwrap(), key);
        }
        assert_eq!(
            "producer_byte_rate:broker_bps"
                .parse::<QuotaKey>()
                .unwrap()
                .to_string(),
            "producer_byte_rate"
        );
        assert_eq!(
            QuotaKey::PRODUCER_SHARES.to_string(),
            "producer_byte_rate:shares"
        );
    }

    #[test]
    fn bad_spellings() {
        assert!(matches!(
            "nope".parse::<QuotaKey>(),
            Err(ParseError::UnknownQuotaType(_))
        ));
        assert!(matches!(
            "request_percentage:bps".parse::<QuotaKey>(),
            Err(ParseError::UnknownUnit { .. })
        ));
        assert!(matches!(
            "producer_byte_rate:".parse::<QuotaKey>(),
            Err(ParseError::UnknownUnit { .. })
        ));
    }

    #[test]
    fn debug_shows_the_spelling() {
        assert_eq!(
            format!("{:?}", QuotaKey::PRODUCER_BPS),
            "QuotaKey(producer_byte_rate:bps)"
        );
        assert_eq!(
            format!("{:?}", QuotaKey::PRODUCER_BROKER_BPS),
            "QuotaKey(producer_byte_rate)"
        );
    }

    #[test]
    fn output_order_is_type_then_unit() {
        let names: Vec<(String, String)> = QuotaKey::client_keys()
            .map(|k| (k.quota_type().to_string(), k.unit().to_string()))
            .collect();
        let mut sorted = names.clone();
        sorted.sort();
        assert_eq!(names, sorted);
    }

    #[test]
    fn values_are_finite_and_positive() {
        assert!(QuotaValue::new(1.5).is_ok());
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            assert!(QuotaValue::new(bad).is_err());
        }
        assert_eq!(QuotaValue::new(2_000_000.0).unwrap().to_string(), "2000000");
        assert_eq!(QuotaValue::new(12.5).unwrap().to_string(), "12.5");
    }
}
