//! Kafka's messages as the proxy reads and writes them, with no I/O: bytes in, a decision or new
//! bytes out. The connection loops (`crate::connection`) feed them what comes off the sockets.
//!
//! - [`header`]: what is read of a request's header (api key, version, correlation id, client-id).
//! - [`walk`]: reading a message's fields without decoding it whole, never from a count.
//! - [`rewrite`]: the answers that name brokers, rewritten to the proxy's listeners.
//! - [`enforce`]: what enforcing reads of a request (bytes, partitions, mutations) and writes
//!   back (a refused request's answer, a Fetch capped to the quota window).
//! - [`identity`]: who a connection is, from its SASL exchange with the broker.

pub(crate) mod enforce;
pub(crate) mod header;
pub(crate) mod identity;
pub(crate) mod rewrite;
pub(crate) mod walk;
