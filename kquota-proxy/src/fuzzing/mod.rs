//! Entry points for the fuzz targets in `fuzz/` (cargo-fuzz), which cannot reach the proxy's
//! crate-private parsing and rewriting: each function here runs one of those paths on arbitrary
//! bytes and asserts what must hold of its result. This module exists only for the fuzz targets
//! (and the unit tests that share its sample messages); it is not a stable API.
//!
//! - `samples`: well-formed messages of every API and version the proxy reads, the seeds.
//! - `checks`: the paths run on arbitrary bytes, and what must hold of each.

mod checks;
mod samples;

pub use checks::{answer, request, Answered, Sasl, Step};
#[cfg(test)]
pub(crate) use checks::{decoded_request_len, decoded_response_len};
pub use samples::{sample_request, sample_response, REQUESTS, RESPONSES};
