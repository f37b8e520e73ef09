//! Settings as both servers take them: one `key=value` at a time, from a properties file
//! ([`read_settings`]) or from a flag that names a key ([`Setting`]), each value checked once, as it
//! is set, into a type that holds only a usable value ([`values`]); a refusal names the key, the
//! value and why ([`SettingError`], [`Problem`]).
//!
//! Each server keeps its own table of keys (which flag sets each, its default, its help) and its
//! own raw and checked settings; what is the same for both is here, written once.

#[cfg(feature = "cluster")]
mod cluster;
mod error;
mod file;
mod table;
pub mod values;

#[cfg(feature = "cluster")]
pub use cluster::{ClusterSettings, CLUSTER_PREFIX};
pub use error::{Problem, SettingError, Source};
pub use file::{read_settings, LineProblem, SettingsFileError};
pub use table::{Setting, Settings};
