//! Integration tests, one file per area.

mod common;
mod concurrency;
mod golden;
mod notifications;
mod properties;
mod validation;
