//! Placeholder; filled in by its area's tests.
