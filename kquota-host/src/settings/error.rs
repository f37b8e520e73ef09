//! Why a setting is refused: [`SettingError`] for the setting, [`Problem`] for its value.

use std::error::Error;
use std::fmt;
use std::io;

use super::file::{LineProblem, SettingsFileError};

/// An error of another crate (the engine's, `kquota-wire`'s), kept as the [`Error::source`].
pub type Source = Box<dyn Error + Send + Sync>;

/// A setting that cannot be used, as both servers word it.
#[derive(Debug)]
#[non_exhaustive]
pub enum SettingError {
    /// A line of a settings file is not `key=value`.
    Line {
        /// The line's number (from 1).
        line: usize,
        /// What is wrong with it.
        problem: LineProblem,
    },
    /// The settings file cannot be read at all (a malformed `\uXXXX` escape); the source names
    /// the line.
    Properties(Source),
    /// A setting's value is refused.
    Value {
        /// The setting (`max.connections`).
        key: String,
        /// The value as given.
        value: String,
        /// Why it is refused.
        problem: Problem,
    },
    /// A key the server does not know, with the known key nearest it, if one is close.
    Unknown {
        /// The key as given.
        key: String,
        /// The known key it may be a misspelling of.
        nearest: Option<&'static str>,
    },
    /// A setting given without another it needs (`ssl.client.auth` without a certificate).
    Needs {
        /// The setting given.
        key: &'static str,
        /// Its flag, if it has one.
        key_flag: Option<&'static str>,
        /// The setting it needs.
        needs: &'static str,
        /// That setting's flag, if it has one.
        needs_flag: Option<&'static str>,
    },
}

impl SettingError {
    /// `key=value` is refused for `problem`.
    pub fn value(key: &str, value: &str, problem: Problem) -> SettingError {
        SettingError::Value {
            key: key.to_owned(),
            value: value.to_owned(),
            problem,
        }
    }

    /// The key the error is about, if it is about one.
    pub fn key(&self) -> Option<&str> {
        match self {
            SettingError::Value { key, .. } | SettingError::Unknown { key, .. } => Some(key),
            SettingError::Needs { key, .. } => Some(key),
            SettingError::Line { .. } | SettingError::Properties(_) => None,
        }
    }
}

/// `key (--flag)`, or the key alone.
fn named(f: &mut fmt::Formatter<'_>, key: &str, flag: Option<&str>) -> fmt::Result {
    match flag {
        Some(flag) => write!(f, "{key} ({flag})"),
        None => f.write_str(key),
    }
}

impl fmt::Display for SettingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SettingError::Line { line, problem } => write!(f, "line {line}: {problem}"),
            SettingError::Properties(e) => write!(f, "{e}"),
            SettingError::Value {
                key,
                value,
                problem,
            } => write!(f, "{key}={value}: {problem}"),
            SettingError::Unknown {
                key,
                nearest: Some(k),
            } => write!(f, "unknown setting '{key}' (did you mean {k}?)"),
            SettingError::Unknown { key, nearest: None } => write!(f, "unknown setting '{key}'"),
            SettingError::Needs {
                key,
                key_flag,
                needs,
                needs_flag,
            } => {
                named(f, key, *key_flag)?;
                f.write_str(" needs ")?;
                named(f, needs, *needs_flag)
            }
        }
    }
}

impl Error for SettingError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            SettingError::Properties(e) => Some(&**e),
            SettingError::Value { problem, .. } => problem.source(),
            _ => None,
        }
    }
}

impl From<SettingsFileError> for SettingError {
    fn from(e: SettingsFileError) -> Self {
        match e {
            SettingsFileError::Line { line, problem } => SettingError::Line { line, problem },
            e => SettingError::Properties(e.into()),
        }
    }
}

/// Why a setting's value is refused, where both servers refuse it for the same reason; a reason
/// of one server's alone is that server's error, kept as the source of [`Problem::Refused`].
#[derive(Debug)]
#[non_exhaustive]
pub enum Problem {
    /// Not `true` or `false`.
    NotBool,
    /// Not a whole number, or one below the given minimum.
    WholeNumberAtLeast(u32),
    /// Not a whole number, or one outside the given range.
    WholeNumberBetween(u32, u32),
    /// Not a whole number of milliseconds, or one below the given minimum (0: any).
    Milliseconds(u32),
    /// Not a frame size: a whole number from 1 to 2³¹ − 1, as Kafka's `int` settings.
    FrameSize,
    /// Not a whole number of bytes, or -1 for no limit (Kafka's LONG).
    Bytes,
    /// Not a finite number above 0.
    PositiveNumber,
    /// Not -1 or a replication factor from 1 to 32767 (Kafka's INT16).
    ReplicationFactor,
    /// Empty.
    Empty,
    /// A setting of a feature this build does not have.
    NotBuilt {
        /// The program (`kquotad`).
        program: &'static str,
        /// The feature (`cluster`).
        feature: &'static str,
    },
    /// Not an IP address and a port.
    NotIpPort,
    /// Not a host and a port.
    NotHostPort,
    /// Not one of the given words (`required, requested or none`).
    OneOf(&'static str),
    /// A file that cannot be opened.
    Unreadable(io::Error),
    /// Refused by the parser of the value's type (principals, mechanisms, policies,
    /// `ssl.client.auth`, a server's own listeners...), whose error is the source.
    Refused(Source),
}

impl Problem {
    /// The value's own parser refused it: its error is kept as the source.
    pub fn refused(e: impl Error + Send + Sync + 'static) -> Problem {
        Problem::Refused(Box::new(e))
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::NotBool => f.write_str("must be true or false"),
            Problem::WholeNumberAtLeast(min) => write!(f, "must be a whole number ≥ {min}"),
            Problem::WholeNumberBetween(min, max) => {
                write!(f, "must be a whole number between {min} and {max}")
            }
            Problem::Milliseconds(0) => f.write_str("must be a whole number of milliseconds"),
            Problem::Milliseconds(min) => {
                write!(f, "must be a whole number of milliseconds ≥ {min}")
            }
            Problem::FrameSize => f.write_str("must be a whole number between 1 and 2147483647"),
            Problem::Bytes => f.write_str("must be a whole number of bytes (-1 for no limit)"),
            Problem::PositiveNumber => f.write_str("must be a number > 0"),
            Problem::ReplicationFactor => f.write_str(
                "must be -1 (the cluster's default) or a whole number between 1 and 32767",
            ),
            Problem::Empty => f.write_str("must not be empty"),
            Problem::NotBuilt { program, feature } => write!(
                f,
                "this {program} was built without the `{feature}` feature (build it with `--features {feature}`)"
            ),
            Problem::NotIpPort => f.write_str(
                "must be an IP address and a port, IP:PORT (IPv6 in brackets: [::1]:9092)",
            ),
            Problem::NotHostPort => {
                f.write_str("must be host:port (an IPv6 address in brackets: [::1]:9092)")
            }
            Problem::OneOf(words) => write!(f, "expected {words}"),
            Problem::Unreadable(e) => write!(f, "cannot read: {e}"),
            Problem::Refused(e) => write!(f, "{e}"),
        }
    }
}

impl Error for Problem {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            Problem::Unreadable(e) => Some(e),
            Problem::Refused(e) => Some(&**e),
            _ => None,
        }
    }
}
