//! The Kafka wire protocol: quota admin API handlers any broker can link.
//!
//! [`Handler`] answers one request frame at a time, independent of the transport: give it the bytes
//! after a request's 4-byte size prefix, and it returns either the response body to write (after
//! its own size prefix) or the instruction to close the connection, as Apache Kafka does for requests
//! it cannot serve.
//!
//! | API | key | versions |
//! | --- | --- | --- |
//! | Metadata | 3 | 0–12 |
//! | ApiVersions | 18 | 0–4 |
//! | DescribeClientQuotas | 48 | 0–1 |
//! | AlterClientQuotas | 49 | 0–1 |
//! | AlterQuotas (the seeds' draft) | 50 | 0 |
//! | DescribeCluster | 60 | 0–1 |
//! | SaslHandshake (SASL listeners) | 17 | 1 |
//! | SaslAuthenticate (SASL listeners) | 36 | 0–2 |
//!
//! Every request is handled for one connection's [`Session`]: its listener, principal and
//! authentication state. On a SASL listener only ApiVersions, SaslHandshake and SaslAuthenticate
//! are served until the client has authenticated. With an [`Authorizer`] installed, altering
//! quotas needs a super user and describing needs an authenticated principal (unless allowed);
//! a refusal is `CLUSTER_AUTHORIZATION_FAILED` (31) and changes nothing. Without one, every
//! principal may do everything, as a Kafka broker without an authorizer.
//!
//! Kafka's behaviour on bad input is kept: an ApiVersions request of a version this handler does not
//! serve is answered with `UNSUPPORTED_VERSION` in the v0 layout, listing ApiVersions' versions; an
//! unknown API key, an unsupported version of any other API, or a request that does not decode closes
//! the connection. None of these reaches the engine. `docs/wire.md` describes every message, the
//! draft apiKey 50 (which Apache Kafka later gave to DescribeUserScramCredentials) and each deviation
//! from Kafka.
//!
//! ```
//! use std::sync::Arc;
//! use kquota::Engine;
//! use kquota_wire::{Handler, Outcome, ServerInfo, Session};
//!
//! let handler = Handler::new(
//!     Arc::new(Engine::new()),
//!     ServerInfo { node_id: 1, host: "localhost".into(), port: 9092, cluster_id: "kquota".into() },
//! );
//! // An ApiVersions v0 request: api key 18, version 0, correlation id 7, client id "c".
//! let frame = [0, 18, 0, 0, 0, 0, 0, 7, 0, 1, b'c'];
//! let mut session = Session::plaintext();
//! match handler.handle(&mut session, &frame) {
//!     Outcome::Respond(body) => assert_eq!(&body[..4], &7i32.to_be_bytes()),
//!     other => panic!("unexpected: {other:?}"),
//! }
//! ```

mod alter;
mod alter_quotas;
mod api_versions;
mod cluster;
mod describe;
mod frame;
mod handler;
#[cfg(feature = "properties")]
pub mod properties;
mod sasl;
mod security;

// The public interface.

// The handler and what it answers.
pub use handler::{
    ApiSupport, CloseReason, Handler, Outcome, ServerInfo, ALTER_CLIENT_QUOTAS, ALTER_QUOTAS,
    API_VERSIONS, DESCRIBE_CLIENT_QUOTAS, DESCRIBE_CLUSTER, METADATA, SASL_APIS, SASL_AUTHENTICATE,
    SASL_HANDSHAKE, SUPPORTED_APIS,
};
// Framing and the limits on what a peer may send.
pub use alter::{MAX_OPS_PER_ENTRY, MAX_PARTS_PER_ENTRY};
pub use frame::{request_size, CodecError, DEFAULT_MAX_REQUEST_BYTES};
// The seeds' draft AlterQuotas (apiKey 50) and its codec.
pub use alter_quotas::{
    draft_key, AlterQuotasEntry, AlterQuotasRequest, AlterQuotasResponse, AlterQuotasResult,
    QuotaEntityData, QuotaOp,
};
// Who is asking: sessions, principals, SASL and the authorizer.
pub use security::{
    parse_super_users, AuthContext, Authorizer, DefaultPrincipalBuilder, Principal,
    PrincipalBuilder, SaslConfig, SaslMechanism, SecurityProtocol, Session,
};
// SCRAM (RFC 5802) for both ends, and the credentials file.
pub use security::credentials::Credentials;
pub use security::scram::{
    ClientFirst, CredentialError, ScramClient, ScramCredential, ScramError, ScramMechanism,
    ScramServer, MAX_ITERATIONS, MIN_ITERATIONS,
};
// Principals from client certificates.
pub use security::dn::{name_rfc2253, subject_dn, DnError};
/// TLS configurations from PEM files, for listeners and for clients (the `tls` feature).
#[cfg(feature = "tls")]
pub mod tls {
    pub use crate::security::tls::{
        certificates, client_config, private_key, read_pem_file, server_config, ClientAuth,
        KeyPair, TlsError,
    };
}
