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
//! use kquota::wire::{Handler, Outcome, ServerInfo};
//! use kquota::Engine;
//!
//! let handler = Handler::new(
//!     Arc::new(Engine::new()),
//!     ServerInfo { node_id: 1, host: "localhost".into(), port: 9092, cluster_id: "kquota".into() },
//! );
//! // An ApiVersions v0 request: api key 18, version 0, correlation id 7, client id "c".
//! let frame = [0, 18, 0, 0, 0, 0, 0, 7, 0, 1, b'c'];
//! match handler.handle(&frame) {
//!     Outcome::Respond(body) => assert_eq!(&body[..4], &7i32.to_be_bytes()),
//!     Outcome::Close(reason) => panic!("closed: {reason}"),
//! }
//! ```

use std::fmt;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use kafka_protocol::protocol::{Decodable, Encodable};

use crate::engine::Engine;
use crate::store::Store;

mod alter;
mod alter_quotas;
mod api_versions;
mod cluster;
mod describe;
mod frame;

pub use alter::{MAX_OPS_PER_ENTRY, MAX_PARTS_PER_ENTRY};
pub use alter_quotas::{
    draft_key, AlterQuotasEntry, AlterQuotasRequest, AlterQuotasResponse, AlterQuotasResult,
    QuotaEntityData, QuotaOp,
};
pub use frame::{request_size, CodecError, DEFAULT_MAX_REQUEST_BYTES};

use frame::{Header, ReadResult, Reader};

/// Metadata's API key.
pub const METADATA: i16 = 3;
/// ApiVersions' API key.
pub const API_VERSIONS: i16 = 18;
/// DescribeClientQuotas' API key.
pub const DESCRIBE_CLIENT_QUOTAS: i16 = 48;
/// AlterClientQuotas' API key.
pub const ALTER_CLIENT_QUOTAS: i16 = 49;
/// The seeds' draft AlterQuotas API key. Apache Kafka gave 50 to DescribeUserScramCredentials.
pub const ALTER_QUOTAS: i16 = 50;
/// DescribeCluster's API key.
pub const DESCRIBE_CLUSTER: i16 = 60;

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
const API_VERSIONS_SUPPORT: ApiSupport = ApiSupport::new(API_VERSIONS, 0, 4);

/// Every API the handler can serve, by key. AlterQuotas (50) is left out when the draft is disabled.
pub const SUPPORTED_APIS: [ApiSupport; 6] = [
    ApiSupport::new(METADATA, 0, 12),
    API_VERSIONS_SUPPORT,
    ApiSupport::new(DESCRIBE_CLIENT_QUOTAS, 0, 1),
    ApiSupport::new(ALTER_CLIENT_QUOTAS, 0, 1),
    ApiSupport::new(ALTER_QUOTAS, 0, 0),
    ApiSupport::new(DESCRIBE_CLUSTER, 0, 1),
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
/// connections (`&self` everywhere; `Send + Sync`).
#[derive(Clone, Debug)]
pub struct Handler {
    engine: Arc<Engine>,
    info: ServerInfo,
    draft_alter_quotas: bool,
    store: Option<Arc<Store>>,
}

impl Handler {
    /// A handler serving `engine` as the node `info`, with the draft AlterQuotas (50) enabled.
    pub fn new(engine: Arc<Engine>, info: ServerInfo) -> Handler {
        Handler {
            engine,
            info,
            draft_alter_quotas: true,
            store: None,
        }
    }

    /// Makes alterations durable: AlterClientQuotas and AlterQuotas commit through
    /// [`Engine::alter_durably`], writing the validated changes to `store` before they become
    /// visible. If the store fails, nothing is applied and every entry of the request is answered
    /// with `UNKNOWN_SERVER_ERROR` (-1), as Kafka answers a request that fails as a whole.
    pub fn with_store(mut self, store: Arc<Store>) -> Handler {
        self.store = Some(store);
        self
    }

    /// Enables or disables the seeds' draft AlterQuotas on apiKey 50 (enabled by default). Disabled,
    /// key 50 is not listed by ApiVersions and a request to it closes the connection, as a Kafka
    /// broker would for an API it does not know.
    pub fn with_draft_alter_quotas(mut self, enabled: bool) -> Handler {
        self.draft_alter_quotas = enabled;
        self
    }

    /// The engine.
    pub fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    /// The node this handler describes.
    pub fn server_info(&self) -> &ServerInfo {
        &self.info
    }

    /// The APIs served, by key, as ApiVersions lists them.
    pub fn supported_apis(&self) -> Vec<ApiSupport> {
        SUPPORTED_APIS
            .into_iter()
            .filter(|a| self.draft_alter_quotas || a.api_key != ALTER_QUOTAS)
            .collect()
    }

    fn support(&self, api_key: i16) -> Option<ApiSupport> {
        self.supported_apis()
            .into_iter()
            .find(|a| a.api_key == api_key)
    }

    /// Handles one request: `frame` is everything after the 4-byte size prefix (header and body).
    /// Never panics; only a fully decoded DescribeClientQuotas, AlterClientQuotas or AlterQuotas
    /// request reaches the engine.
    pub fn handle(&self, frame: &[u8]) -> Outcome {
        match self.dispatch(frame) {
            Ok(response) => Outcome::Respond(response),
            Err(reason) => Outcome::Close(reason),
        }
    }

    fn dispatch(&self, frame: &[u8]) -> Result<BytesMut, CloseReason> {
        let mut r = Reader::new(frame);
        let api_key = r
            .i16("request_api_key")
            .map_err(CloseReason::MalformedHeader)?;
        let api_version = r
            .i16("request_api_version")
            .map_err(CloseReason::MalformedHeader)?;
        let Some(support) = self.support(api_key) else {
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
        let header = frame::read_header_rest(
            &mut r,
            api_key,
            api_version,
            request_header_version(api_key, api_version),
        )
        .map_err(CloseReason::MalformedHeader)?;
        let body = &frame[r.position()..];
        match api_key {
            API_VERSIONS => api_versions::handle(self, header, body),
            METADATA => cluster::metadata(self, header, body),
            DESCRIBE_CLUSTER => cluster::describe_cluster(self, header, body),
            DESCRIBE_CLIENT_QUOTAS => describe::handle(self, header, body),
            ALTER_CLIENT_QUOTAS => alter::handle(self, header, body),
            ALTER_QUOTAS => alter_quotas::handle(self, header, body),
            _ => Err(CloseReason::UnsupportedApi {
                api_key,
                api_version,
            }),
        }
    }
}

/// The request header version Kafka uses for an API version (1: client id; 2: flexible).
fn request_header_version(api_key: i16, version: i16) -> i16 {
    let flexible = match api_key {
        METADATA => version >= 9,
        API_VERSIONS => version >= 3,
        DESCRIBE_CLIENT_QUOTAS | ALTER_CLIENT_QUOTAS => version >= 1,
        DESCRIBE_CLUSTER => true,
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
        _ => false,
    };
    if flexible {
        1
    } else {
        0
    }
}

/// Walks `body` with `walk` (bounding every count), then decodes the walked bytes with
/// `kafka-protocol`. Bytes after the message are ignored, as Kafka ignores them.
fn decode<T: Decodable>(
    header: Header,
    body: &[u8],
    walk: impl FnOnce(&mut Reader<'_>, i16) -> ReadResult<()>,
) -> Result<T, CloseReason> {
    let malformed = |error| CloseReason::MalformedRequest {
        api_key: header.api_key,
        api_version: header.api_version,
        correlation_id: header.correlation_id,
        error,
    };
    let mut r = Reader::new(body);
    walk(&mut r, header.api_version).map_err(malformed)?;
    let mut bytes = Bytes::copy_from_slice(&body[..r.position()]);
    let value = T::decode(&mut bytes, header.api_version)
        .map_err(|e| malformed(CodecError::new(e.to_string())))?;
    if !bytes.is_empty() {
        return Err(malformed(CodecError::new(
            "the decoder and the schema walk disagree on the message length",
        )));
    }
    Ok(value)
}

/// Encodes a response header and `body` at `version`.
fn encode<T: Encodable>(header: Header, version: i16, body: &T) -> Result<BytesMut, CodecError> {
    let mut buf = frame::response_header(
        header.correlation_id,
        response_header_version(header.api_key, header.api_version),
    );
    body.encode(&mut buf, version)
        .map_err(|e| CodecError::new(e.to_string()))?;
    Ok(buf)
}

/// [`encode`] at the request's version, closing the connection if the response cannot be encoded.
fn respond<T: Encodable>(header: Header, body: &T) -> Result<BytesMut, CloseReason> {
    encode(header, header.api_version, body).map_err(|error| CloseReason::Unencodable {
        api_key: header.api_key,
        api_version: header.api_version,
        error,
    })
}
