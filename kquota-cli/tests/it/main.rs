//! The tools' integration tests, against a kquotad run as a process.

mod cli;
