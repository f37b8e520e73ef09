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
//! | DescribeUserScramCredentials (default) or AlterQuotas (the seeds' draft, when enabled) | 50 | 0 |
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
//! the connection. None of these reaches the engine. Bytes after a complete request body are
//! ignored, for every API the draft included, as Kafka's request parsing ignores them.
//! `docs/wire.md` describes every message, apiKey 50 (Kafka's DescribeUserScramCredentials by
//! default; the seeds' draft AlterQuotas with [`Handler::with_draft_alter_quotas`]) and each
//! deviation from Kafka.
//!
//! # Features
//!
//! The counts are of the crates in `cargo tree -p kquota-wire -e normal --prefix none [--features
//! ...]`, each crate once (the lines with `(*)`, repeats, are dropped), this crate and the engine
//! included; the engine alone, `kquota`, is 20.
//!
//! | feature | enables | dependency tree |
//! | --- | --- | --- |
//! | (default) | the handler, sessions, SASL (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512), the authorizer, the credentials file | 51 crates |
//! | `tls` | the `tls` module: rustls server and client configurations from PEM, for SSL and SASL_SSL listeners; `PrincipalMapper`, Kafka's `ssl.principal.mapping.rules` | 60 (+5: rustls, rustls-pki-types, rustls-webpki, subtle, zeroize; +4: regex, regex-automata, regex-syntax, aho-corasick) |
//! | `properties` | the `properties` module: Java properties files, read as `java.util.Properties.load` reads them | 61 (+10: java-properties, encoding_rs, regex and its parts, ...) |
//! | `tls` and `properties` | both | 66 |
//!
//! SCRAM and SASL are always on, not behind a default feature. The handler serves SASL listeners
//! itself ([`Handler::with_sasl`], a [`Session`]'s SASL stage), so a build without them would have a
//! [`SecurityProtocol`] it cannot serve and a handler whose type differs by feature; ring is needed
//! under `tls` anyway (it is rustls' provider here). Without them the tree would be 12 crates
//! smaller: ring (with getrandom and untrusted), base64, and serde, serde_derive and serde_json
//! (with their parts) for the credentials file. ring compiles C and assembly: building this crate
//! needs a C compiler (`cc`, or `clang`) for the target.
//!
//! # Example
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
mod apis;
mod audit;
mod body;
mod cluster;
mod describe;
mod dispatch;
mod frame;
mod handler;
mod outcome;
mod sasl;
mod scram_credentials;
mod security;
mod stream;

// The public interface: everything a broker, kquotad or kquota-cli uses, and nothing else. Each group
// is re-exported from the private module that implements it, so the crate's paths do not follow its
// file layout.

// The handler and what it answers: one frame in, one outcome out.
pub use crate::apis::{
    ApiSupport, ALTER_CLIENT_QUOTAS, ALTER_QUOTAS, API_VERSIONS, DESCRIBE_CLIENT_QUOTAS,
    DESCRIBE_CLUSTER, DESCRIBE_USER_SCRAM_CREDENTIALS, METADATA, SASL_APIS, SASL_AUTHENTICATE,
    SASL_HANDSHAKE, SUPPORTED_APIS,
};
pub use crate::handler::{Handler, ServerInfo};
pub use crate::outcome::{CloseReason, Outcome};

// The audit: one line per alteration request, under its own tracing target.
pub use crate::audit::AUDIT_TARGET;

// Answers made as they are written (Handler::handle_streaming).
pub use crate::stream::{Reply, ResponseStream};

// Framing, and the limits on what a peer may send.
pub use crate::alter::{MAX_OPS_PER_ENTRY, MAX_PARTS_PER_ENTRY};
pub use crate::frame::{
    encode_response, parse_request_head, request_size, CodecError, ReadResult, Reader, RequestHead,
    DEFAULT_MAX_REQUEST_BYTES,
};
// Kafka's API keys and error codes, by name.
pub use kafka_protocol::messages::ApiKey;
pub use kquota::ErrorCode;

// The seeds' draft AlterQuotas (apiKey 50) and its codec: `kafka-protocol` has none, so clients and
// tests of a broker serving the draft use these.
pub use crate::alter_quotas::{
    draft_key, AlterQuotasEntry, AlterQuotasRequest, AlterQuotasResponse, AlterQuotasResult,
    QuotaEntityData, QuotaOp,
};

// Who is asking: sessions, security protocols, principals and the authorizer.
pub use crate::security::{
    parse_super_users, AuthContext, Authorizer, DefaultPrincipalBuilder, ParseError, Principal,
    PrincipalBuilder, PrincipalError, SaslConfig, SaslMechanism, SecurityProtocol, Session,
};

// SASL/SCRAM (RFC 5802): the users a SASL listener knows, and the client side for admin tools.
pub use crate::security::credentials::Credentials;
pub use crate::security::scram::{
    CredentialError, ScramClient, ScramCredential, ScramError, ScramMechanism, MAX_ITERATIONS,
    MIN_ITERATIONS,
};

// Principals from client certificates, for a broker's own PrincipalBuilder.
pub use crate::security::dn::{subject_dn, DnError};
// Kafka's ssl.principal.mapping.rules, which turn that subject into the principal's name (the
// `tls` feature, which brings the `regex` crate for the rules' patterns).
#[cfg(feature = "tls")]
pub use crate::security::mapping::{MappingRuleError, PrincipalMapper, UnmappedName};

/// TLS configurations from PEM files, for listeners and for clients (the `tls` feature).
#[cfg(feature = "tls")]
pub mod tls {
    pub use crate::security::tls::{
        certificates, client_config, private_key, read_pem_file, server_config, ClientAuth,
        KeyPair, TlsError,
    };
}

// Java properties files, read as Kafka reads its configuration (the `properties` feature): a
// module of its own, whose docs say how its reading differs from Java's.
#[cfg(feature = "properties")]
pub mod properties;
