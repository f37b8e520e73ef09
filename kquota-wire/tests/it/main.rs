//! The wire handler's integration tests; `wire/` has one file per area.

mod wire;
