//! Security end to end: every listener type with the CLI binaries, SASL PLAIN and SCRAM, client
//! certificates and `ssl.principal.mapping.rules`, `super.users` authorization, and bad input (wrong passwords, truncated and replayed
//! SCRAM exchanges, plaintext on a TLS port, bad certificates, requests before authentication).
//! Certificates are made at test time with rcgen. One file per area; what they share is in
//! `support.rs`.

mod audit;
mod authorization;
mod listeners;
mod mapping;
mod reload;
mod sasl;
mod settings;
mod support;
mod tls;
