//! Request bodies in and response bodies out: the one place every API's body is read (and the rule
//! for bytes left after it), decoded through `kafka-protocol`, and its answer encoded.

use bytes::{Bytes, BytesMut};
use kafka_protocol::protocol::{Decodable, Encodable};

use crate::apis::{
    ALTER_CLIENT_QUOTAS, API_VERSIONS, DESCRIBE_CLIENT_QUOTAS, DESCRIBE_CLUSTER, METADATA,
    SASL_AUTHENTICATE,
};
use crate::frame::{CodecError, Header, ReadResult, Reader};
use crate::outcome::CloseReason;

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
