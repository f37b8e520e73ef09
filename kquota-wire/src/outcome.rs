//! What the handler answers: a response to write, or the instruction to close, and why.

use std::fmt;

use bytes::BytesMut;

use crate::frame::CodecError;

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
    /// An API key this handler does not serve (unknown to Kafka, or not one of [`SUPPORTED_APIS`](crate::SUPPORTED_APIS)).
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
