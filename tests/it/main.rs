//! Integration tests, one file per area.

mod cli;
mod common;
mod concurrency;
mod golden;
mod metering;
mod notifications;
mod oracle;
mod properties;
mod security;
mod server;
mod store_recovery;
mod validation;
mod wire;
