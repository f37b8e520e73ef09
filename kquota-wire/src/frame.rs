//! Framing and a bounded reader for Kafka's primitive types.
//!
//! Every request body is walked with [`Reader`] before `kafka-protocol` decodes it. The walk applies
//! the checks Kafka's generated Java readers make (an array count or string length larger than the
//! bytes left is an error, a compact string longer than 0x7fff is an error, a varint longer than five
//! bytes is an error), so the `kafka-protocol` decoders, which reserve `Vec` capacity straight from a
//! peer's count, only ever see counts that the frame really holds.

use std::fmt;

use bytes::{BufMut, BytesMut};

/// Kafka's default `socket.request.max.bytes`: the largest request frame a broker reads (100 MiB).
pub const DEFAULT_MAX_REQUEST_BYTES: usize = 104_857_600;

/// The longest string Kafka reads or writes (`0x7fff` bytes).
pub(crate) const MAX_STRING_BYTES: usize = 0x7fff;

/// A request or response that does not follow its schema, or a value that cannot be encoded.
///
/// `field` names the schema field being read or written (`correlation_id`, `entries`, `Op`...).
/// The messages are those of Kafka's own readers where Kafka has one.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum CodecError {
    /// A request's size prefix is negative (Kafka's `InvalidReceiveException`).
    NegativeSize {
        /// The size the prefix gave.
        size: i32,
    },
    /// A request's size prefix is above the limit (`socket.request.max.bytes`).
    SizeTooLarge {
        /// The size the prefix gave.
        size: usize,
        /// The largest size accepted.
        limit: usize,
    },
    /// The frame ends inside a field.
    Truncated {
        /// The field being read.
        field: &'static str,
        /// The bytes the field needs.
        needed: usize,
        /// The bytes left in the frame.
        left: usize,
    },
    /// An unsigned varint runs past five bytes.
    VarintTooLong {
        /// The field being read.
        field: &'static str,
    },
    /// A null (length -1) where the schema does not allow one.
    UnexpectedNull {
        /// The field being read.
        field: &'static str,
    },
    /// A length below -1.
    NegativeLength {
        /// The field being read.
        field: &'static str,
        /// `string`, `bytes` or `array`.
        kind: &'static str,
        /// The length read.
        length: i64,
    },
    /// A string longer than Kafka reads (`limit`, 0x7fff bytes).
    StringTooLong {
        /// The field being read.
        field: &'static str,
        /// The length read.
        length: usize,
        /// The longest string accepted.
        limit: usize,
    },
    /// A string that is not UTF-8.
    InvalidUtf8 {
        /// The field being read.
        field: &'static str,
    },
    /// An array count larger than the bytes left (each element takes at least one), so it cannot
    /// be what the frame holds.
    CountTooLarge {
        /// The array being read.
        field: &'static str,
        /// The count read.
        count: usize,
        /// The bytes left in the frame.
        left: usize,
    },
    /// A tagged-field count larger than the bytes left.
    TooManyTaggedFields {
        /// The section being read.
        field: &'static str,
        /// The count read.
        count: u32,
        /// The bytes left in the frame.
        left: usize,
    },
    /// Bytes after a message decoded on its own ([`AlterQuotasRequest::decode`] and
    /// [`AlterQuotasResponse::decode`]; the handler ignores bytes after a request instead, as
    /// Kafka does).
    ///
    /// [`AlterQuotasRequest::decode`]: crate::AlterQuotasRequest::decode
    /// [`AlterQuotasResponse::decode`]: crate::AlterQuotasResponse::decode
    TrailingBytes {
        /// How many bytes follow the message.
        count: usize,
    },
    /// `kafka-protocol` refused a body the schema walk accepted; its message.
    Decoder(String),
    /// `kafka-protocol` read a different length than the schema walk: a bug here, not the peer's.
    DecoderMismatch,
    /// A string too long for Kafka's 16-bit length.
    StringTooLongToEncode {
        /// The field being written.
        field: &'static str,
        /// Its length in bytes.
        length: usize,
    },
    /// An array with more items than Kafka's 32-bit count.
    ArrayTooLongToEncode {
        /// The field being written.
        field: &'static str,
        /// Its item count.
        count: usize,
    },
    /// `kafka-protocol` could not encode a response (a value outside its version); its message.
    Encoder(String),
}

impl fmt::Display for CodecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CodecError::NegativeSize { size } => write!(f, "Invalid receive (size = {size})"),
            CodecError::SizeTooLarge { size, limit } => {
                write!(f, "Invalid receive (size = {size} larger than {limit})")
            }
            CodecError::Truncated {
                field,
                needed,
                left,
            } => write!(f, "{field}: needs {needed} bytes, {left} left"),
            CodecError::VarintTooLong { field } => write!(f, "{field}: varint is too long"),
            CodecError::UnexpectedNull { field } => {
                write!(f, "non-nullable field {field} was serialized as null")
            }
            CodecError::NegativeLength {
                field,
                kind,
                length,
            } => write!(f, "{field}: negative {kind} length {length}"),
            CodecError::StringTooLong { field, length, .. } => {
                write!(f, "string field {field} had invalid length {length}")
            }
            CodecError::InvalidUtf8 { field } => write!(f, "{field}: invalid UTF-8"),
            // Kafka's words (`ByteBufferAccessor` and the generated readers).
            CodecError::CountTooLarge { count, left, .. } => write!(
                f,
                "Tried to allocate a collection of size {count}, but there are only {left} bytes remaining."
            ),
            CodecError::TooManyTaggedFields { field, count, left } => {
                write!(f, "{field}: {count} tagged fields, {left} bytes left")
            }
            CodecError::TrailingBytes { count } => write!(f, "{count} bytes after the message"),
            CodecError::Decoder(message) | CodecError::Encoder(message) => f.write_str(message),
            CodecError::DecoderMismatch => {
                f.write_str("the decoder and the schema walk disagree on the message length")
            }
            CodecError::StringTooLongToEncode { field, length } => {
                write!(f, "{field} is too long to encode ({length} bytes)")
            }
            CodecError::ArrayTooLongToEncode { field, count } => {
                write!(f, "{field} is too long to encode ({count} items)")
            }
        }
    }
}

impl std::error::Error for CodecError {}

/// Checks a request's 4-byte size prefix as Kafka's `NetworkReceive` does: a negative size or one
/// above `max_bytes` is refused (Kafka then closes the connection). Returns the body length to read.
pub fn request_size(prefix: [u8; 4], max_bytes: usize) -> Result<usize, CodecError> {
    let size = i32::from_be_bytes(prefix);
    let Ok(size) = usize::try_from(size) else {
        return Err(CodecError::NegativeSize { size });
    };
    if size > max_bytes {
        return Err(CodecError::SizeTooLarge {
            size,
            limit: max_bytes,
        });
    }
    Ok(size)
}

/// A bounded reader over one frame of Kafka's primitive types. Every read checks the bytes left,
/// every array count is checked against them, and nothing allocates: a walk with it is what makes
/// a peer's counts safe to hand to a decoder that reserves memory from them (`kafka-protocol`'s).
///
/// `what` in each read names the schema field, for the [`CodecError`] a bad frame gives.
///
/// ```
/// use kquota_wire::Reader;
/// // An array of 2^31 - 1 elements in a 4-byte frame: refused before anything is reserved.
/// let mut r = Reader::new(&[0x7f, 0xff, 0xff, 0xff]);
/// assert!(r.array_len(false, false, "topics").is_err());
/// ```
#[derive(Clone, Debug)]
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

/// What a [`Reader`] read, or why the frame does not follow its schema.
pub type ReadResult<T> = Result<T, CodecError>;

impl<'a> Reader<'a> {
    /// A reader over `buf` from its start.
    pub fn new(buf: &'a [u8]) -> Reader<'a> {
        Reader { buf, pos: 0 }
    }

    /// A reader over `buf` from `pos` (at most its end), to resume a walk.
    pub fn at(buf: &'a [u8], pos: usize) -> Reader<'a> {
        Reader {
            buf,
            pos: pos.min(buf.len()),
        }
    }

    /// Bytes read so far.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Bytes not read yet.
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// The next `n` bytes.
    pub fn take(&mut self, n: usize, what: &'static str) -> ReadResult<&'a [u8]> {
        if n > self.remaining() {
            return Err(CodecError::Truncated {
                field: what,
                needed: n,
                left: self.remaining(),
            });
        }
        let out = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }

    fn array<const N: usize>(&mut self, what: &'static str) -> ReadResult<[u8; N]> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N, what)?);
        Ok(out)
    }

    /// A big-endian `i8`.
    pub fn i8(&mut self, what: &'static str) -> ReadResult<i8> {
        Ok(i8::from_be_bytes(self.array(what)?))
    }

    /// A big-endian `i16`.
    pub fn i16(&mut self, what: &'static str) -> ReadResult<i16> {
        Ok(i16::from_be_bytes(self.array(what)?))
    }

    /// A big-endian `i32`.
    pub fn i32(&mut self, what: &'static str) -> ReadResult<i32> {
        Ok(i32::from_be_bytes(self.array(what)?))
    }

    /// A big-endian `i64`.
    pub fn i64(&mut self, what: &'static str) -> ReadResult<i64> {
        Ok(i64::from_be_bytes(self.array(what)?))
    }

    /// A big-endian `f64`.
    pub fn f64(&mut self, what: &'static str) -> ReadResult<f64> {
        Ok(f64::from_be_bytes(self.array(what)?))
    }

    /// A boolean: any non-zero byte is true, as in Kafka.
    pub fn bool(&mut self, what: &'static str) -> ReadResult<bool> {
        Ok(self.take(1, what)?[0] != 0)
    }

    /// Kafka's unsigned varint: at most five bytes; the fifth may not carry a continuation bit. Bits
    /// beyond 32 are dropped, as both Kafka and `kafka-protocol` do.
    pub fn uvarint(&mut self, what: &'static str) -> ReadResult<u32> {
        let mut value: u32 = 0;
        for i in 0..5 {
            let b = self.take(1, what)?[0];
            value |= u32::from(b & 0x7f) << (i * 7);
            if b & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(CodecError::VarintTooLong { field: what })
    }

    /// A length prefix: an unsigned varint + 1 when `compact`, else an `i32` (`wide`) or `i16`. `None`
    /// is null (−1); a null where the schema does not allow one, or another negative length, is an
    /// error.
    fn length(
        &mut self,
        compact: bool,
        wide: bool,
        nullable: bool,
        kind: &'static str,
        what: &'static str,
    ) -> ReadResult<Option<usize>> {
        let len: i64 = if compact {
            i64::from(self.uvarint(what)?) - 1
        } else if wide {
            i64::from(self.i32(what)?)
        } else {
            i64::from(self.i16(what)?)
        };
        match len {
            -1 if nullable => Ok(None),
            -1 => Err(CodecError::UnexpectedNull { field: what }),
            length if length < 0 => Err(CodecError::NegativeLength {
                field: what,
                kind,
                length,
            }),
            len => Ok(Some(len as usize)),
        }
    }

    /// A string (`compact` for flexible versions); `None` is null. A null where the schema does not
    /// allow one is an error.
    pub fn string(
        &mut self,
        compact: bool,
        nullable: bool,
        what: &'static str,
    ) -> ReadResult<Option<&'a [u8]>> {
        let Some(len) = self.length(compact, false, nullable, "string", what)? else {
            return Ok(None);
        };
        if len > MAX_STRING_BYTES {
            return Err(CodecError::StringTooLong {
                field: what,
                length: len,
                limit: MAX_STRING_BYTES,
            });
        }
        self.take(len, what).map(Some)
    }

    /// A non-null byte string (`compact` for flexible versions), bounded by the bytes left.
    pub fn bytes(&mut self, compact: bool, what: &'static str) -> ReadResult<&'a [u8]> {
        let len = self
            .length(compact, true, false, "bytes", what)?
            .unwrap_or_default();
        self.take(len, what)
    }

    /// A string that must be valid UTF-8.
    pub fn utf8(
        &mut self,
        compact: bool,
        nullable: bool,
        what: &'static str,
    ) -> ReadResult<Option<&'a str>> {
        match self.string(compact, nullable, what)? {
            None => Ok(None),
            Some(bytes) => std::str::from_utf8(bytes)
                .map(Some)
                .map_err(|_| CodecError::InvalidUtf8 { field: what }),
        }
    }

    /// An array's element count, checked against the bytes left (Kafka's "Tried to allocate a
    /// collection of size N, but there are only M bytes remaining"). `None` is a null array.
    pub fn array_len(
        &mut self,
        compact: bool,
        nullable: bool,
        what: &'static str,
    ) -> ReadResult<Option<usize>> {
        let Some(len) = self.length(compact, true, nullable, "array", what)? else {
            return Ok(None);
        };
        if len > self.remaining() {
            return Err(CodecError::CountTooLarge {
                field: what,
                count: len,
                left: self.remaining(),
            });
        }
        Ok(Some(len))
    }

    /// Walks an array, calling `each` once per element.
    pub fn each(
        &mut self,
        compact: bool,
        nullable: bool,
        what: &'static str,
        mut each: impl FnMut(&mut Reader<'a>) -> ReadResult<()>,
    ) -> ReadResult<Option<usize>> {
        let len = self.array_len(compact, nullable, what)?;
        for _ in 0..len.unwrap_or(0) {
            each(self)?;
        }
        Ok(len)
    }

    /// Skips a tagged-field section (flexible versions only).
    pub fn tagged_fields(&mut self, what: &'static str) -> ReadResult<()> {
        let count = self.uvarint(what)?;
        if count as usize > self.remaining() {
            return Err(CodecError::TooManyTaggedFields {
                field: what,
                count,
                left: self.remaining(),
            });
        }
        for _ in 0..count {
            self.uvarint(what)?;
            let size = self.uvarint(what)?;
            self.take(size as usize, what)?;
        }
        Ok(())
    }
}

/// Where a request's header puts things: what every Kafka request starts with, read from any
/// peer's frame by [`parse_request_head`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestHead {
    /// The API key.
    pub api_key: i16,
    /// The API version.
    pub api_version: i16,
    /// The correlation id the answer must carry.
    pub correlation_id: i32,
    /// Where the client id is in the frame, as (offset, length); `None` when it is null.
    pub client_id: Option<(usize, usize)>,
    /// Where the body starts; `None` for an API key `kafka-protocol` does not know, whose header
    /// version (and so the length of its tagged fields) is unknown.
    pub body_at: Option<usize>,
}

impl RequestHead {
    /// The client id from `frame`, the frame the head was read from (lossy for one that is not
    /// UTF-8; null is empty, as Kafka takes it).
    pub fn client_id<'a>(&self, frame: &'a [u8]) -> std::borrow::Cow<'a, str> {
        let bytes = self
            .client_id
            .and_then(|(at, len)| frame.get(at..at + len))
            .unwrap_or_default();
        String::from_utf8_lossy(bytes)
    }
}

/// The head of the request `frame` (its bytes after the size prefix): the api key, version and
/// correlation id, the client id's place, and where the body starts (the header's version comes
/// from the API and version, as Kafka's own `ApiKeys` give it). A frame too short for them, or
/// whose client id or tagged fields run past its end, is an error.
pub fn parse_request_head(frame: &[u8]) -> ReadResult<RequestHead> {
    let mut r = Reader::new(frame);
    let api_key = r.i16("request_api_key")?;
    let api_version = r.i16("request_api_version")?;
    let correlation_id = r.i32("correlation_id")?;
    let header_version = kafka_protocol::messages::ApiKey::try_from(api_key)
        .map(|k| k.request_header_version(api_version))
        .ok();
    // Header v0 (ControlledShutdown v0, gone from Kafka 4) has no client id. Every other has a
    // nullable, non-compact one, even v2; an unknown API is taken to have one too.
    let mut client_id = None;
    if header_version != Some(0) {
        let before = r.position();
        client_id = r
            .string(false, true, "client_id")?
            .map(|id| (before + 2, id.len()));
    }
    let body_at = match header_version {
        Some(v) if v >= 2 => {
            r.tagged_fields("request header tagged fields")?;
            Some(r.position())
        }
        Some(_) => Some(r.position()),
        None => None,
    };
    Ok(RequestHead {
        api_key,
        api_version,
        correlation_id,
        client_id,
        body_at,
    })
}

/// A response frame, its size prefix included: the response header of `key` at `version` (with
/// `correlation_id`), then `message` encoded at `version`.
pub fn encode_response<M: kafka_protocol::protocol::Encodable>(
    key: kafka_protocol::messages::ApiKey,
    version: i16,
    correlation_id: i32,
    message: &M,
) -> Result<bytes::Bytes, CodecError> {
    let mut out = BytesMut::with_capacity(64);
    out.put_u32(0);
    out.put_i32(correlation_id);
    if key.response_header_version(version) >= 1 {
        out.put_u8(0); // no tagged fields
    }
    message
        .encode(&mut out, version)
        .map_err(|e| CodecError::Encoder(format!("{e:#}")))?;
    let size = u32::try_from(out.len() - 4)
        .map_err(|_| CodecError::Encoder("a response over 4 GiB".into()))?;
    out[..4].copy_from_slice(&size.to_be_bytes());
    Ok(out.freeze())
}

/// The parts of a request header the handler uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Header {
    pub(crate) api_key: i16,
    pub(crate) api_version: i16,
    pub(crate) correlation_id: i32,
}

/// Reads a request header of `header_version` (1: client id; 2: client id and tagged fields) after
/// the api key and version, which the caller has read. The client id is checked, not kept.
pub(crate) fn read_header_rest(
    r: &mut Reader<'_>,
    api_key: i16,
    api_version: i16,
    header_version: i16,
) -> ReadResult<Header> {
    let correlation_id = r.i32("correlation_id")?;
    if header_version >= 1 {
        // A nullable, non-compact string even in header v2.
        r.string(false, true, "client_id")?;
    }
    if header_version >= 2 {
        r.tagged_fields("request header tagged fields")?;
    }
    Ok(Header {
        api_key,
        api_version,
        correlation_id,
    })
}

/// Starts a response: the response header (v0: correlation id; v1: plus an empty tagged-field
/// section).
pub(crate) fn response_header(correlation_id: i32, header_version: i16) -> BytesMut {
    let mut buf = BytesMut::with_capacity(64);
    buf.put_i32(correlation_id);
    if header_version >= 1 {
        buf.put_u8(0);
    }
    buf
}

/// Writes a non-compact string (`None` as null), refusing ones Kafka could not read.
pub(crate) fn put_string(
    buf: &mut BytesMut,
    s: Option<&str>,
    what: &'static str,
) -> Result<(), CodecError> {
    match s {
        None => buf.put_i16(-1),
        Some(s) => {
            if s.len() > MAX_STRING_BYTES {
                return Err(CodecError::StringTooLongToEncode {
                    field: what,
                    length: s.len(),
                });
            }
            buf.put_i16(s.len() as i16);
            buf.put_slice(s.as_bytes());
        }
    }
    Ok(())
}

/// Writes a non-compact array length.
pub(crate) fn put_array_len(
    buf: &mut BytesMut,
    len: usize,
    what: &'static str,
) -> Result<(), CodecError> {
    let len = i32::try_from(len).map_err(|_| CodecError::ArrayTooLongToEncode {
        field: what,
        count: len,
    })?;
    buf.put_i32(len);
    Ok(())
}

/// Writers for the pieces of a streamed answer, in either encoding (`compact` for flexible
/// versions). The values come from a request already walked, so they are within Kafka's limits.
pub(crate) mod put {
    use bytes::BufMut;

    /// An unsigned varint.
    pub(crate) fn uvarint(out: &mut Vec<u8>, mut v: u32) {
        while v >= 0x80 {
            out.put_u8((v as u8) | 0x80);
            v >>= 7;
        }
        out.put_u8(v as u8);
    }

    /// A string, or null (`None`).
    pub(crate) fn string(out: &mut Vec<u8>, compact: bool, s: Option<&[u8]>) {
        match (s, compact) {
            (None, true) => out.put_u8(0),
            (None, false) => out.put_i16(-1),
            (Some(s), true) => {
                uvarint(out, s.len() as u32 + 1);
                out.put_slice(s);
            }
            (Some(s), false) => {
                out.put_i16(s.len() as i16);
                out.put_slice(s);
            }
        }
    }

    /// A non-null array's length.
    pub(crate) fn array_len(out: &mut Vec<u8>, compact: bool, len: usize) {
        if compact {
            uvarint(out, len as u32 + 1);
        } else {
            out.put_i32(len as i32);
        }
    }
}

/// Cuts `message` to at most [`MAX_STRING_BYTES`] bytes on a character boundary, so that an error
/// message quoting a long name can always be encoded.
pub(crate) fn fit_message(mut message: String) -> String {
    if message.len() > MAX_STRING_BYTES {
        let mut end = MAX_STRING_BYTES;
        while !message.is_char_boundary(end) {
            end -= 1;
        }
        message.truncate(end);
    }
    message
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encoded_request(
        key: kafka_protocol::messages::ApiKey,
        version: i16,
        client: Option<&str>,
    ) -> Vec<u8> {
        use kafka_protocol::protocol::{Encodable, StrBytes};
        let mut out = BytesMut::new();
        kafka_protocol::messages::RequestHeader::default()
            .with_request_api_key(key as i16)
            .with_request_api_version(version)
            .with_correlation_id(77)
            .with_client_id(client.map(|c| StrBytes::from_string(c.to_owned())))
            .encode(&mut out, key.request_header_version(version))
            .unwrap();
        out.extend_from_slice(b"body");
        out.to_vec()
    }

    #[test]
    fn request_heads_of_every_header_version() {
        use kafka_protocol::messages::ApiKey;
        for (key, version) in [
            (ApiKey::Produce, 8),
            (ApiKey::Produce, 9),
            (ApiKey::Fetch, 17),
        ] {
            let frame = encoded_request(key, version, Some("app-1"));
            let head = parse_request_head(&frame).unwrap();
            assert_eq!(
                (head.api_key, head.api_version, head.correlation_id),
                (key as i16, version, 77)
            );
            assert_eq!(head.client_id(&frame), "app-1");
            assert_eq!(
                &frame[head.body_at.unwrap()..],
                b"body",
                "{key:?} v{version}"
            );
        }
        let null = encoded_request(ApiKey::Metadata, 12, None);
        let head = parse_request_head(&null).unwrap();
        assert_eq!((head.client_id, head.client_id(&null).as_ref()), (None, ""));
        // An API kafka-protocol does not know: its body's start is unknown.
        let mut unknown = encoded_request(ApiKey::Metadata, 1, Some("x"));
        unknown[..2].copy_from_slice(&9999i16.to_be_bytes());
        assert_eq!(parse_request_head(&unknown).unwrap().body_at, None);
        // Cut anywhere inside the header: an error, never a panic.
        let frame = encoded_request(ApiKey::Fetch, 17, Some("app-1"));
        let body_at = parse_request_head(&frame).unwrap().body_at.unwrap();
        for cut in 0..body_at {
            assert!(parse_request_head(&frame[..cut]).is_err(), "cut at {cut}");
        }
    }

    #[test]
    fn responses_are_framed_with_their_header() {
        use kafka_protocol::messages::{ApiKey, ApiVersionsResponse, MetadataResponse};
        use kafka_protocol::protocol::Decodable;
        for (key, version) in [(ApiKey::Metadata, 8), (ApiKey::Metadata, 12)] {
            let frame = encode_response(key, version, 9, &MetadataResponse::default()).unwrap();
            assert_eq!(
                u32::from_be_bytes(frame[..4].try_into().unwrap()) as usize,
                frame.len() - 4
            );
            let mut body = frame.slice(4..);
            let header = kafka_protocol::messages::ResponseHeader::decode(
                &mut body,
                key.response_header_version(version),
            )
            .unwrap();
            assert_eq!(header.correlation_id, 9);
            MetadataResponse::decode(&mut body, version).unwrap();
            assert!(body.is_empty());
        }
        // ApiVersions answers with header v0 at every version.
        let frame =
            encode_response(ApiKey::ApiVersions, 3, 1, &ApiVersionsResponse::default()).unwrap();
        let mut body = frame.slice(8..);
        ApiVersionsResponse::decode(&mut body, 3).unwrap();
    }

    #[test]
    fn varints() {
        assert_eq!(Reader::new(&[0x00]).uvarint("v"), Ok(0));
        assert_eq!(Reader::new(&[0x96, 0x01]).uvarint("v"), Ok(150));
        assert_eq!(
            Reader::new(&[0xff, 0xff, 0xff, 0xff, 0x0f]).uvarint("v"),
            Ok(u32::MAX)
        );
        assert!(Reader::new(&[0xff, 0xff, 0xff, 0xff, 0x8f, 0x01])
            .uvarint("v")
            .is_err());
        assert!(Reader::new(&[0x80]).uvarint("v").is_err());
    }

    #[test]
    fn counts_are_bounded_by_the_bytes_left() {
        let huge = [0x7f, 0xff, 0xff, 0xff];
        assert!(Reader::new(&huge).array_len(false, false, "a").is_err());
        let compact_huge = [0xff, 0xff, 0xff, 0xff, 0x0f];
        assert!(Reader::new(&compact_huge)
            .array_len(true, false, "a")
            .is_err());
        assert_eq!(
            Reader::new(&[0, 0, 0, 2, 1, 1]).array_len(false, false, "a"),
            Ok(Some(2))
        );
        assert_eq!(
            Reader::new(&[0xff, 0xff, 0xff, 0xff]).array_len(false, true, "a"),
            Ok(None)
        );
        assert!(Reader::new(&[0xff, 0xff, 0xff, 0xfe])
            .array_len(false, true, "a")
            .is_err());
    }

    #[test]
    fn strings() {
        assert_eq!(
            Reader::new(&[0, 2, b'h', b'i']).utf8(false, false, "s"),
            Ok(Some("hi"))
        );
        assert_eq!(
            Reader::new(&[0xff, 0xff]).string(false, true, "s"),
            Ok(None)
        );
        assert!(Reader::new(&[0xff, 0xff])
            .string(false, false, "s")
            .is_err());
        assert!(Reader::new(&[0, 3, b'h', b'i'])
            .string(false, false, "s")
            .is_err());
        assert_eq!(
            Reader::new(&[3, b'h', b'i']).utf8(true, false, "s"),
            Ok(Some("hi"))
        );
        assert_eq!(Reader::new(&[0]).string(true, true, "s"), Ok(None));
        assert!(Reader::new(&[0, 1, 0xff]).utf8(false, false, "s").is_err());
    }

    #[test]
    fn sizes() {
        assert_eq!(request_size(10i32.to_be_bytes(), 100), Ok(10));
        assert!(request_size((-1i32).to_be_bytes(), 100).is_err());
        assert!(request_size(101i32.to_be_bytes(), 100).is_err());
    }

    #[test]
    fn long_messages_are_cut_on_a_boundary() {
        let s = "é".repeat(20_000);
        let cut = fit_message(s);
        assert!(cut.len() <= MAX_STRING_BYTES);
        assert_eq!(cut.len() % 2, 0);
    }
}
