//! The wire handler's integration tests, one file per area.

mod wire;
