//! Hostile clients: what a peer can make the server spend, and the limits that bound it.

mod auth;
mod client;
mod lockout;
mod logs;
mod memory;
