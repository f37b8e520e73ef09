//! kquotad's integration tests, one file per area: the server run as a process.

mod frames;
mod hostile;
mod metrics;
mod security;
mod server;
mod store_recovery;
