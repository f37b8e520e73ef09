//! kquotad: kquota's reference server.
//!
//! It serves Kafka's quota admin APIs (the `kquota-wire` handler) over TCP and TLS listeners, from an
//! engine whose configuration lives in the durable `kquota-store`. The `kquotad` binary is this
//! crate's [`Server`] behind a command line; a host embedding the server builds a [`ServerConfig`]
//! and calls [`Server::start`].

mod server;

// The public interface.
pub use server::*;
