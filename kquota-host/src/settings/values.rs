//! The value parsers both servers use: each takes a trimmed value and gives a type that holds
//! only what the setting may be, or the [`Problem`] that names why not.

use std::net::SocketAddr;
use std::num::{NonZeroU32, NonZeroUsize};
use std::str::FromStr;
use std::time::Duration;

use super::error::Problem;

/// A number, if the trimmed `value` is one.
fn number<T: FromStr>(value: &str) -> Option<T> {
    value.trim().parse().ok()
}

/// `true` or `false`.
pub fn boolean(value: &str) -> Result<bool, Problem> {
    match value.trim() {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(Problem::NotBool),
    }
}

/// A value that must not be empty.
pub fn non_empty(value: &str) -> Result<&str, Problem> {
    match value.trim() {
        "" => Err(Problem::Empty),
        v => Ok(v),
    }
}

/// Kafka's `ssl.client.auth`.
pub fn client_auth(value: &str) -> Result<kquota_wire::tls::ClientAuth, Problem> {
    value
        .trim()
        .parse()
        .map_err(|_| Problem::OneOf("required, requested or none"))
}

/// A count of at least 1.
pub fn count(value: &str) -> Result<NonZeroUsize, Problem> {
    number(value).ok_or(Problem::WholeNumberAtLeast(1))
}

/// A count from 1 to `MAX`: of threads, or of requests in flight, where more than `MAX` would
/// only cost memory or panic a queue's constructor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Count<const MAX: u32>(NonZeroU32);

impl<const MAX: u32> Count<MAX> {
    /// `n`, if it is from 1 to `MAX`.
    pub const fn new(n: u32) -> Option<Count<MAX>> {
        match NonZeroU32::new(n) {
            Some(n) if n.get() <= MAX => Some(Count(n)),
            _ => None,
        }
    }

    /// The count, at most `MAX` and never 0.
    pub const fn get(self) -> usize {
        self.0.get() as usize
    }

    /// `n`, or `MAX` if it is larger (at least 1): a default made from the host, such as its CPUs.
    pub fn at_most(n: usize) -> Count<MAX> {
        let n = u32::try_from(n).unwrap_or(u32::MAX).clamp(1, MAX.max(1));
        Count(NonZeroU32::new(n).unwrap_or(NonZeroU32::MIN))
    }
}

/// A count from 1 to `MAX`.
pub fn count_up_to<const MAX: u32>(value: &str) -> Result<Count<MAX>, Problem> {
    number::<u32>(value)
        .and_then(Count::new)
        .ok_or(Problem::WholeNumberBetween(1, MAX))
}

/// A time a server waits for a peer: at least a millisecond (0 would close every connection at
/// once).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timeout(Duration);

impl Timeout {
    /// `d`, if it is at least a millisecond.
    pub const fn new(d: Duration) -> Option<Timeout> {
        if d.as_millis() >= 1 {
            Some(Timeout(d))
        } else {
            None
        }
    }

    /// `ms` milliseconds, if at least 1.
    pub const fn from_millis(ms: u64) -> Option<Timeout> {
        Timeout::new(Duration::from_millis(ms))
    }

    /// The time.
    pub const fn get(self) -> Duration {
        self.0
    }
}

/// A timeout in milliseconds, at least 1.
pub fn timeout(value: &str) -> Result<Timeout, Problem> {
    number::<u64>(value)
        .and_then(Timeout::from_millis)
        .ok_or(Problem::Milliseconds(1))
}

/// Milliseconds, at least `min`.
pub fn millis(value: &str, min: u32) -> Result<Duration, Problem> {
    number::<u64>(value)
        .filter(|n| *n >= u64::from(min))
        .map(Duration::from_millis)
        .ok_or(Problem::Milliseconds(min))
}

/// An IP address and a port.
pub fn ip_port(value: &str) -> Result<SocketAddr, Problem> {
    number(value).ok_or(Problem::NotIpPort)
}

/// A frame's largest size: Kafka's `int` settings, from 1 to 2³¹ − 1 (a frame's size is an
/// INT32 on the wire).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FrameSize(NonZeroU32);

impl FrameSize {
    /// The largest size Kafka's INT32 size prefix can state.
    pub const MAX: FrameSize = FrameSize(NonZeroU32::new(i32::MAX as u32).unwrap());

    /// `bytes`, if a frame may be that large.
    pub const fn new(bytes: u32) -> Option<FrameSize> {
        match NonZeroU32::new(bytes) {
            Some(n) if bytes <= i32::MAX as u32 => Some(FrameSize(n)),
            _ => None,
        }
    }

    /// The size in bytes.
    pub const fn get(self) -> usize {
        self.0.get() as usize
    }

    /// The size in bytes, which is never 0.
    pub const fn non_zero(self) -> NonZeroUsize {
        match NonZeroUsize::new(self.0.get() as usize) {
            Some(n) => n,
            None => unreachable!(),
        }
    }
}

/// A frame size.
pub fn frame_size(value: &str) -> Result<FrameSize, Problem> {
    number::<u32>(value)
        .and_then(FrameSize::new)
        .ok_or(Problem::FrameSize)
}

/// A capacity in bytes/s, for the `shares` quotas: a finite number above 0.
#[derive(Clone, Copy, Debug, PartialEq, PartialOrd)]
pub struct Capacity(f64);

impl Capacity {
    /// `bytes_per_second`, if it is finite and above 0.
    pub fn new(bytes_per_second: f64) -> Option<Capacity> {
        (bytes_per_second.is_finite() && bytes_per_second > 0.0)
            .then_some(Capacity(bytes_per_second))
    }

    /// The capacity in bytes/s.
    pub const fn get(self) -> f64 {
        self.0
    }
}

/// A capacity.
pub fn capacity(value: &str) -> Result<Capacity, Problem> {
    number::<f64>(value)
        .and_then(Capacity::new)
        .ok_or(Problem::PositiveNumber)
}

/// A replication factor for topics a server creates: -1 (the cluster's default), or 1 to 32767
/// (Kafka's INT16).
pub fn replication_factor(value: &str) -> Result<i16, Problem> {
    number::<i16>(value)
        .filter(|n| *n == -1 || *n > 0)
        .ok_or(Problem::ReplicationFactor)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_parser_takes_only_what_its_setting_may_be() {
        assert!(boolean(" true ").unwrap());
        assert!(!boolean("false").unwrap());
        assert!(matches!(boolean("yes"), Err(Problem::NotBool)));
        assert_eq!(non_empty(" a ").unwrap(), "a");
        assert_eq!(
            client_auth("required").unwrap(),
            kquota_wire::tls::ClientAuth::Required
        );
        assert_eq!(
            client_auth("always").unwrap_err().to_string(),
            "expected required, requested or none"
        );
        assert!(matches!(non_empty("  "), Err(Problem::Empty)));
        assert_eq!(count("3").unwrap().get(), 3);
        for bad in ["0", "-1", "x", ""] {
            assert!(
                matches!(count(bad), Err(Problem::WholeNumberAtLeast(1))),
                "{bad}"
            );
        }
        assert_eq!(count_up_to::<256>("256").unwrap().get(), 256);
        assert!(matches!(
            count_up_to::<256>("257"),
            Err(Problem::WholeNumberBetween(1, 256))
        ));
        assert!(matches!(
            count_up_to::<256>("0"),
            Err(Problem::WholeNumberBetween(1, 256))
        ));
        assert_eq!(Count::<256>::at_most(1000).get(), 256);
        assert_eq!(Count::<256>::at_most(0).get(), 1);
        assert_eq!(timeout("1").unwrap().get(), Duration::from_millis(1));
        assert!(matches!(timeout("0"), Err(Problem::Milliseconds(1))));
        assert_eq!(Timeout::new(Duration::from_micros(999)), None);
        assert_eq!(millis("0", 0).unwrap(), Duration::ZERO);
        assert!(matches!(millis("0", 1), Err(Problem::Milliseconds(1))));
        assert_eq!(ip_port("[::1]:9").unwrap().port(), 9);
        assert!(matches!(ip_port("localhost:9"), Err(Problem::NotIpPort)));
        assert_eq!(replication_factor("-1").unwrap(), -1);
        assert!(matches!(
            replication_factor("0"),
            Err(Problem::ReplicationFactor)
        ));
        assert!(matches!(
            replication_factor("32768"),
            Err(Problem::ReplicationFactor)
        ));
    }

    #[test]
    fn a_frame_size_is_an_int32_above_zero() {
        assert_eq!(frame_size("2147483647").unwrap(), FrameSize::MAX);
        assert_eq!(frame_size("1").unwrap().get(), 1);
        for bad in ["0", "2147483648", "-5", "1e3"] {
            assert!(matches!(frame_size(bad), Err(Problem::FrameSize)), "{bad}");
        }
        assert_eq!(FrameSize::new(0), None);
        assert_eq!(FrameSize::MAX.non_zero().get(), 2_147_483_647);
    }

    #[test]
    fn a_capacity_is_finite_and_above_zero() {
        assert_eq!(capacity("1048576").unwrap().get(), 1_048_576.0);
        for bad in ["0", "-1", "NaN", "inf", "x"] {
            assert!(
                matches!(capacity(bad), Err(Problem::PositiveNumber)),
                "{bad}"
            );
        }
    }

    #[test]
    fn the_messages_are_the_servers_wording() {
        assert_eq!(
            Problem::WholeNumberAtLeast(1).to_string(),
            "must be a whole number ≥ 1"
        );
        assert_eq!(
            Problem::NotBuilt { program: "kquotad", feature: "cluster" }.to_string(),
            "this kquotad was built without the `cluster` feature (build it with `--features cluster`)"
        );
    }
}
