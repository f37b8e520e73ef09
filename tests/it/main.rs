//! The engine's integration tests, one file per area.

mod concurrency;
mod golden;
mod metering;
mod mirror;
mod notifications;
mod oracle;
mod properties;
mod validation;
