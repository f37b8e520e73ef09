//! The quota configuration as a replicated log in a Kafka topic ([`ConfigLog`]).
//!
//! The parts: [`config_log`] (the log as the host holds it: joining, committing, progress),
//! [`state`] (what the committing threads, the delivery reports and the follower share),
//! [`follow`] (the follower thread), [`replica`] (the follower's rules, without I/O), [`record`]
//! (the records of the topic), [`snapshot`] (the configuration in canonical chunks) and
//! [`writer`] (the thread that writes claims, snapshots and tombstones).

mod config_log;
mod follow;
mod record;
mod replica;
mod snapshot;
mod state;
mod writer;

pub use config_log::{ConfigLog, LogProgress};
