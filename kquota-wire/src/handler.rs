//! The request handler: one frame in, one outcome out.

use std::fmt;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use kafka_protocol::protocol::{Decodable, Encodable};

use crate::security::{
    Authorizer, DefaultPrincipalBuilder, PrincipalBuilder, SaslConfig, SaslStage, Session,
};
use kquota::{Engine, Persistence};

use crate::frame::{CodecError, Header, ReadResult, Reader};
use crate::stream::Reply;

/// Metadata's API key.
pub const METADATA: i16 = 3;
/// ApiVersions' API key.
pub const API_VERSIONS: i16 = 18;
/// DescribeClientQuotas' API key.
pub const DESCRIBE_CLIENT_QUOTAS: i16 = 48;
/// AlterClientQuotas' API key.
pub const ALTER_CLIENT_QUOTAS: i16 = 49;
/// The seeds' draft AlterQuotas API key, served only with the draft enabled. Apache Kafka gave 50
/// to DescribeUserScramCredentials, which 50 serves otherwise (the default).
pub const ALTER_QUOTAS: i16 = 50;
/// DescribeUserScramCredentials' API key, served unless the seeds' draft AlterQuotas is enabled.
pub const DESCRIBE_USER_SCRAM_CREDENTIALS: i16 = 50;
/// DescribeCluster's API key.
pub const DESCRIBE_CLUSTER: i16 = 60;
/// SaslHandshake's API key.
pub const SASL_HANDSHAKE: i16 = 17;
/// SaslAuthenticate's API key.
pub const SASL_AUTHENTICATE: i16 = 36;

/// One API this handler serves and its version range, as ApiVersions lists it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ApiSupport {
    /// The API key.
    pub api_key: i16,
    /// The oldest version served.
    pub min_version: i16,
    /// The newest version served.
    pub max_version: i16,
}

impl ApiSupport {
    const fn new(api_key: i16, min_version: i16, max_version: i16) -> ApiSupport {
        ApiSupport {
            api_key,
            min_version,
            max_version,
        }
    }

    /// Whether `version` is in the range.
    pub fn supports(&self, version: i16) -> bool {
        (self.min_version..=self.max_version).contains(&version)
    }
}

/// ApiVersions' own range, which an UNSUPPORTED_VERSION answer lists.
pub(crate) const API_VERSIONS_SUPPORT: ApiSupport = ApiSupport::new(API_VERSIONS, 0, 4);

/// Every API the handler can serve, by key. 50 is DescribeUserScramCredentials v0, or with the draft
/// enabled the seeds' AlterQuotas v0: the same key and range, so always listed.
pub const SUPPORTED_APIS: [ApiSupport; 6] = [
    ApiSupport::new(METADATA, 0, 12),
    API_VERSIONS_SUPPORT,
    ApiSupport::new(DESCRIBE_CLIENT_QUOTAS, 0, 1),
    ApiSupport::new(ALTER_CLIENT_QUOTAS, 0, 1),
    ApiSupport::new(ALTER_QUOTAS, 0, 0),
    ApiSupport::new(DESCRIBE_CLUSTER, 0, 1),
];

/// The SASL APIs, served (and listed by ApiVersions) on SASL listeners. SaslHandshake v0, whose
/// tokens follow without Kafka framing, is not served (Kafka 4 dropped it too).
pub const SASL_APIS: [ApiSupport; 2] = [
    ApiSupport::new(SASL_HANDSHAKE, 1, 1),
    ApiSupport::new(SASL_AUTHENTICATE, 0, 2),
];

/// What the handler reports about the node it runs on (Metadata and DescribeCluster): the only
/// broker of its cluster and its controller.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerInfo {
    /// This node's id.
    pub node_id: i32,
    /// The host clients should connect to.
    pub host: String,
    /// The port clients should connect to.
    pub port: i32,
    /// The cluster id.
    pub cluster_id: String,
}

/// What to do with one request.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Write this response (header and body, without the 4-byte size prefix).
    Respond(BytesMut),
    /// Close the connection, as Kafka does; the reason is for the log.
    Close(CloseReason),
    /// Authentication failed: write this response, then close the connection. A server should
    /// wait first (Kafka's `connection.failed.authentication.delay.ms`) and log the peer.
    RespondAndClose(BytesMut, CloseReason),
}

/// Why a request closes the connection.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CloseReason {
    /// The frame does not hold a request header.
    MalformedHeader(CodecError),
    /// An API key this handler does not serve (unknown to Kafka, or not one of [`SUPPORTED_APIS`]).
    UnsupportedApi {
        /// The request's API key.
        api_key: i16,
        /// The request's API version.
        api_version: i16,
    },
    /// A served API at a version this handler does not serve (ApiVersions is answered instead).
    UnsupportedVersion {
        /// The request's API key.
        api_key: i16,
        /// The request's API version.
        api_version: i16,
    },
    /// The request body does not follow its schema.
    MalformedRequest {
        /// The request's API key.
        api_key: i16,
        /// The request's API version.
        api_version: i16,
        /// The request's correlation id.
        correlation_id: i32,
        /// What is wrong with it.
        error: CodecError,
    },
    /// A request other than ApiVersions, SaslHandshake or SaslAuthenticate before a SASL
    /// connection authenticated.
    Unauthenticated {
        /// The request's API key.
        api_key: i16,
        /// The request's API version.
        api_version: i16,
    },
    /// Authentication failed; the text is for the log (the client got an error response).
    AuthenticationFailed(String),
    /// The response could not be encoded (a configured host name longer than Kafka's strings).
    Unencodable {
        /// The request's API key.
        api_key: i16,
        /// The request's API version.
        api_version: i16,
        /// What could not be encoded.
        error: CodecError,
    },
}

impl fmt::Display for CloseReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CloseReason::MalformedHeader(e) => write!(f, "malformed request header: {e}"),
            CloseReason::UnsupportedApi {
                api_key,
                api_version,
            } => write!(
                f,
                "unsupported api with key {api_key} and version {api_version}"
            ),
            CloseReason::UnsupportedVersion {
                api_key,
                api_version,
            } => write!(
                f,
                "received request for api with key {api_key} and unsupported version {api_version}"
            ),
            CloseReason::MalformedRequest {
                api_key,
                api_version,
                correlation_id,
                error,
            } => write!(
                f,
                "error getting request for apiKey {api_key}, apiVersion {api_version}, \
                 correlationId {correlation_id}: {error}"
            ),
            CloseReason::Unauthenticated {
                api_key,
                api_version,
            } => write!(
                f,
                "unexpected request with api key {api_key} (version {api_version}) during SASL authentication"
            ),
            CloseReason::AuthenticationFailed(why) => write!(f, "failed authentication: {why}"),
            CloseReason::Unencodable {
                api_key,
                api_version,
                error,
            } => write!(
                f,
                "cannot encode the response to apiKey {api_key}, apiVersion {api_version}: {error}"
            ),
        }
    }
}

/// Serves the quota admin APIs from an engine, one request frame at a time. Cheap to share between
/// connections (`&self` everywhere; `Send + Sync`); per-connection state lives in the
/// [`Session`] each call is given.
#[derive(Clone, Debug)]
pub struct Handler {
    pub(crate) engine: Arc<Engine>,
    pub(crate) info: ServerInfo,
    pub(crate) draft_alter_quotas: bool,
    pub(crate) store: Option<Arc<dyn Persistence>>,
    pub(crate) sasl: Option<SaslConfig>,
    pub(crate) authorizer: Option<Authorizer>,
    pub(crate) principal_builder: Arc<dyn PrincipalBuilder>,
    /// Keys the stand-in SCRAM salts of unknown users, so they are stable but unpredictable.
    pub(crate) decoy_key: ring::hmac::Key,
}

impl Handler {
    /// A handler serving `engine` as the node `info`, with DescribeUserScramCredentials on 50 (the
    /// seeds' draft AlterQuotas disabled).
    pub fn new(engine: Arc<Engine>, info: ServerInfo) -> Handler {
        Handler {
            engine,
            info,
            draft_alter_quotas: false,
            store: None,
            sasl: None,
            authorizer: None,
            principal_builder: Arc::new(DefaultPrincipalBuilder),
            decoy_key: decoy_key(),
        }
    }

    /// Serves SASL on SASL sessions with these mechanisms and users. Without it, a SASL
    /// session's handshake offers no mechanism and every authentication fails.
    pub fn with_sasl(mut self, sasl: SaslConfig) -> Handler {
        self.sasl = Some(sasl);
        self
    }

    /// Decides who may describe and alter quotas (see [`Authorizer`]).
    pub fn with_authorizer(mut self, authorizer: Authorizer) -> Handler {
        self.authorizer = Some(authorizer);
        self
    }

    /// Replaces [`DefaultPrincipalBuilder`] for SASL authentications.
    pub fn with_principal_builder(mut self, builder: Arc<dyn PrincipalBuilder>) -> Handler {
        self.principal_builder = builder;
        self
    }

    /// The principal builder in use.
    pub fn principal_builder(&self) -> &Arc<dyn PrincipalBuilder> {
        &self.principal_builder
    }

    /// Makes alterations durable: AlterClientQuotas and AlterQuotas commit through
    /// [`Engine::alter_durably`], writing the validated changes to `store` before they become
    /// visible. If the store fails, nothing is applied and every entry of the request is answered
    /// with `UNKNOWN_SERVER_ERROR` (-1), as Kafka answers a request that fails as a whole.
    pub fn with_store(mut self, store: Arc<dyn Persistence>) -> Handler {
        self.store = Some(store);
        self
    }

    /// Enables or disables the seeds' draft AlterQuotas on apiKey 50 (disabled by default). Enabled,
    /// 50 is the draft (v0, request header v1); disabled, 50 is Kafka's DescribeUserScramCredentials
    /// (v0, flexible). ApiVersions lists `{50, 0, 0}` either way. A request cannot say which it
    /// means, so the server decides (`docs/wire.md`).
    pub fn with_draft_alter_quotas(mut self, enabled: bool) -> Handler {
        self.draft_alter_quotas = enabled;
        self
    }

    /// The engine.
    pub fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    /// Describes another node (a server gives each listener its advertised host and port).
    pub fn with_server_info(mut self, info: ServerInfo) -> Handler {
        self.info = info;
        self
    }

    /// The node this handler describes.
    pub fn server_info(&self) -> &ServerInfo {
        &self.info
    }

    /// The APIs served on `session`'s listener, by key, as ApiVersions lists them: the SASL APIs
    /// only on SASL listeners.
    pub fn supported_apis(&self, session: &Session) -> Vec<ApiSupport> {
        let sasl = session.protocol().uses_sasl();
        let mut apis: Vec<ApiSupport> = SUPPORTED_APIS
            .into_iter()
            .chain(SASL_APIS.into_iter().filter(|_| sasl))
            .collect();
        apis.sort_by_key(|a| a.api_key);
        apis
    }

    fn support(&self, session: &Session, api_key: i16) -> Option<ApiSupport> {
        self.supported_apis(session)
            .into_iter()
            .find(|a| a.api_key == api_key)
    }

    /// Handles one request of `session`'s connection: `frame` is everything after the 4-byte size
    /// prefix (header and body). SaslHandshake and SaslAuthenticate advance the session's
    /// authentication. Never panics; only a fully decoded DescribeClientQuotas, AlterClientQuotas
    /// or AlterQuotas request from an authorized principal reaches the engine.
    pub fn handle(&self, session: &mut Session, frame: &[u8]) -> Outcome {
        match self.dispatch(session, &Bytes::copy_from_slice(frame)) {
            Ok(Reply::Outcome(outcome)) => outcome,
            Ok(Reply::Stream(stream)) => Outcome::Respond(stream.into_bytes()),
            Err(reason) => Outcome::Close(reason),
        }
    }

    /// [`Handler::handle`] for a server that writes answers as they are made: an answer that grows
    /// with its request (a refused AlterClientQuotas or AlterQuotas echoes every entry; a Metadata
    /// request answers every topic it names) comes as a [`ResponseStream`](crate::ResponseStream),
    /// made from the request's bytes as it is written, so it is never whole in memory and the
    /// request is never decoded into one. Everything else is the [`Outcome`] `handle` gives, and
    /// the bytes written are the same either way.
    pub fn handle_streaming(&self, session: &mut Session, frame: Bytes) -> Reply {
        match self.dispatch(session, &frame) {
            Ok(reply) => reply,
            Err(reason) => Reply::Outcome(Outcome::Close(reason)),
        }
    }

    /// Whether `session` may describe quotas.
    fn may_describe(&self, session: &Session) -> bool {
        self.authorizer
            .as_ref()
            .is_none_or(|a| a.may_describe(session.principal()))
    }

    /// Whether `session` may alter quotas.
    fn may_alter(&self, session: &Session) -> bool {
        self.authorizer
            .as_ref()
            .is_none_or(|a| a.may_alter(session.principal()))
    }

    fn dispatch(&self, session: &mut Session, frame: &Bytes) -> Result<Reply, CloseReason> {
        let mut r = Reader::new(frame);
        let api_key = r
            .i16("request_api_key")
            .map_err(CloseReason::MalformedHeader)?;
        let api_version = r
            .i16("request_api_version")
            .map_err(CloseReason::MalformedHeader)?;
        let Some(support) = self.support(session, api_key) else {
            return Err(CloseReason::UnsupportedApi {
                api_key,
                api_version,
            });
        };
        // Kafka answers ApiVersions at any version (KIP-511); every other API must be in range.
        if api_key != API_VERSIONS && !support.supports(api_version) {
            return Err(CloseReason::UnsupportedVersion {
                api_key,
                api_version,
            });
        }
        let header = crate::frame::read_header_rest(
            &mut r,
            api_key,
            api_version,
            if api_key == DESCRIBE_USER_SCRAM_CREDENTIALS && !self.draft_alter_quotas {
                2
            } else {
                request_header_version(api_key, api_version)
            },
        )
        .map_err(CloseReason::MalformedHeader)?;
        let body = &frame[r.position()..];
        // Kafka's SaslServerAuthenticator: before authentication only these are read.
        let allowed = match &session.sasl {
            SaslStage::Done => true,
            SaslStage::Handshake => matches!(api_key, API_VERSIONS | SASL_HANDSHAKE),
            SaslStage::Authenticate(_) | SaslStage::ScramFinal(_) => api_key == SASL_AUTHENTICATE,
        };
        if !allowed {
            return Err(CloseReason::Unauthenticated {
                api_key,
                api_version,
            });
        }
        let ok = |body| Reply::Outcome(Outcome::Respond(body));
        match api_key {
            API_VERSIONS => crate::api_versions::handle(self, session, header, body).map(ok),
            METADATA => crate::cluster::metadata(self, header, frame.slice_ref(body)),
            DESCRIBE_CLUSTER => crate::cluster::describe_cluster(self, header, body).map(ok),
            DESCRIBE_CLIENT_QUOTAS => {
                let allowed = self.may_describe(session);
                log_denial(session, allowed, "DescribeClientQuotas");
                crate::describe::handle(self, allowed, header, body).map(ok)
            }
            ALTER_CLIENT_QUOTAS => {
                let allowed = self.may_alter(session);
                log_denial(session, allowed, "AlterClientQuotas");
                if !allowed {
                    // Answered from the request's bytes, without decoding its entries.
                    return crate::alter::refuse(header, frame.slice_ref(body)).map(Reply::Stream);
                }
                crate::alter::handle(self, allowed, header, body).map(ok)
            }
            ALTER_QUOTAS if self.draft_alter_quotas => {
                let allowed = self.may_alter(session);
                log_denial(session, allowed, "AlterQuotas");
                if !allowed {
                    return crate::alter_quotas::refuse(header, frame.slice_ref(body))
                        .map(Reply::Stream);
                }
                crate::alter_quotas::handle(self, allowed, header, body).map(ok)
            }
            DESCRIBE_USER_SCRAM_CREDENTIALS => {
                // Kafka: DESCRIBE on the cluster, mapped as describing quotas is.
                let allowed = self.may_describe(session);
                log_denial(session, allowed, "DescribeUserScramCredentials");
                crate::scram_credentials::handle(self, allowed, header, body).map(ok)
            }
            SASL_HANDSHAKE => {
                crate::sasl::handshake(self, session, header, body).map(Reply::Outcome)
            }
            SASL_AUTHENTICATE => {
                crate::sasl::authenticate(self, session, header, body).map(Reply::Outcome)
            }
            _ => Err(CloseReason::UnsupportedApi {
                api_key,
                api_version,
            }),
        }
    }
}

/// Logs a refused request with its principal, as Kafka's authorizer log does.
fn log_denial(session: &Session, allowed: bool, api: &str) {
    if !allowed {
        tracing::warn!(
            peer = ?session.peer(),
            listener = session.listener(),
            "Principal = {} is Denied operation {api} on the cluster (CLUSTER_AUTHORIZATION_FAILED)",
            session.principal()
        );
    }
}

/// A random key for [`Handler`]'s stand-in SCRAM salts.
fn decoy_key() -> ring::hmac::Key {
    use ring::rand::SecureRandom;
    let mut bytes = [0u8; 32];
    // If the system random source fails the salts are merely predictable, not wrong.
    let _ = ring::rand::SystemRandom::new().fill(&mut bytes);
    ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &bytes)
}

/// The request header version Kafka uses for an API version (1: client id; 2: flexible).
fn request_header_version(api_key: i16, version: i16) -> i16 {
    let flexible = match api_key {
        METADATA => version >= 9,
        API_VERSIONS => version >= 3,
        DESCRIBE_CLIENT_QUOTAS | ALTER_CLIENT_QUOTAS => version >= 1,
        DESCRIBE_CLUSTER => true,
        SASL_AUTHENTICATE => version >= 2,
        _ => false,
    };
    if flexible {
        2
    } else {
        1
    }
}

/// The response header version Kafka uses (0: correlation id; 1: plus tagged fields). ApiVersions
/// always answers with v0 (KIP-511).
fn response_header_version(api_key: i16, version: i16) -> i16 {
    let flexible = match api_key {
        METADATA => version >= 9,
        API_VERSIONS => false,
        DESCRIBE_CLIENT_QUOTAS | ALTER_CLIENT_QUOTAS => version >= 1,
        DESCRIBE_CLUSTER => true,
        SASL_AUTHENTICATE => version >= 2,
        _ => false,
    };
    if flexible {
        1
    } else {
        0
    }
}

/// Reads a request body with `read`: the one place every API's body is decoded, so the rule for
/// bytes left after the message is the same for all of them. Kafka's rule: its
/// `RequestContext.parseRequest` hands the whole buffer to `AbstractRequest.parseRequest`, whose
/// generated `read` methods stop at the message's last field (or tagged-field section) and never
/// check that the buffer is used up; the bytes after it are ignored. So are they here.
pub(crate) fn read_body<T>(
    header: Header,
    body: &[u8],
    read: impl FnOnce(&mut Reader<'_>, i16) -> ReadResult<T>,
) -> Result<T, CloseReason> {
    let mut r = Reader::new(body);
    let value =
        read(&mut r, header.api_version).map_err(|error| CloseReason::MalformedRequest {
            api_key: header.api_key,
            api_version: header.api_version,
            correlation_id: header.correlation_id,
            error,
        })?;
    if r.remaining() > 0 {
        tracing::debug!(
            api_key = header.api_key,
            api_version = header.api_version,
            correlation_id = header.correlation_id,
            "ignoring {} bytes after the request",
            r.remaining()
        );
    }
    Ok(value)
}

/// Walks `body` with `walk` (bounding every count), then decodes the walked bytes with
/// `kafka-protocol`; bytes after the message are ignored (see [`read_body`]).
pub(crate) fn decode<T: Decodable>(
    header: Header,
    body: &[u8],
    walk: impl FnOnce(&mut Reader<'_>, i16) -> ReadResult<()>,
) -> Result<T, CloseReason> {
    read_body(header, body, |r, version| {
        walk(r, version)?;
        // Only the walked bytes reach the decoder, so its counts are ones the frame holds.
        let mut bytes = Bytes::copy_from_slice(&body[..r.position()]);
        let value =
            T::decode(&mut bytes, version).map_err(|e| CodecError::Decoder(e.to_string()))?;
        if !bytes.is_empty() {
            return Err(CodecError::DecoderMismatch);
        }
        Ok(value)
    })
}

/// Encodes a response header and `body` at `version`.
pub(crate) fn encode<T: Encodable>(
    header: Header,
    version: i16,
    body: &T,
) -> Result<BytesMut, CodecError> {
    let mut buf = crate::frame::response_header(
        header.correlation_id,
        response_header_version(header.api_key, header.api_version),
    );
    body.encode(&mut buf, version)
        .map_err(|e| CodecError::Encoder(e.to_string()))?;
    Ok(buf)
}

/// [`encode`] at the request's version, closing the connection if the response cannot be encoded.
pub(crate) fn respond<T: Encodable>(header: Header, body: &T) -> Result<BytesMut, CloseReason> {
    encode(header, header.api_version, body).map_err(|error| CloseReason::Unencodable {
        api_key: header.api_key,
        api_version: header.api_version,
        error,
    })
}
