//! Usage sharing: what the split needs of each instance's use of its `bps` buckets, published to
//! the usage topic every `usage_interval` as what changed ([`UsageDelta`](delta::UsageDelta)) and
//! read by the others, from which each takes its part of every cluster-wide `bps` limit
//! ([`SharedSplit`](split::SharedSplit)).
//!
//! The parts: [`demand`] (one instance's use of one bucket, what the split decides from),
//! [`split`] (the decision, and the shared view it is made from: demands, no records),
//! [`record`] (the tracker that reads the meter, and the whole-usage record of version 1),
//! [`delta`] (the record of version 2, and the publisher that decides what goes in it),
//! [`feed`] (the records handed to the split as the demands they state), [`cadence`] (when to
//! publish and when to hand the others' records to the split), and [`share`], the thread that
//! moves the records through Kafka. Only `share` does I/O.

pub(crate) mod cadence;
pub(crate) mod delta;
pub(crate) mod demand;
mod feed;
pub(crate) mod record;
mod share;
pub(crate) mod split;

pub use share::{UsageShare, UsageSource};
