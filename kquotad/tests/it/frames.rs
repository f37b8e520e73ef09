//! Kafka frames for the tests' blocking connections: a request with its header and size prefix,
//! and a response's bytes after its size prefix.

use std::io::Read;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::RequestHeader;
use kafka_protocol::protocol::{Encodable, Request, StrBytes};

/// `req` at `version` as a whole frame, size prefix included.
pub(crate) fn request<R: Request>(
    correlation_id: i32,
    client_id: &'static str,
    req: &R,
    version: i16,
) -> Vec<u8> {
    let mut buf = BytesMut::new();
    RequestHeader::default()
        .with_request_api_key(R::KEY)
        .with_request_api_version(version)
        .with_correlation_id(correlation_id)
        .with_client_id(Some(StrBytes::from_static_str(client_id)))
        .encode(&mut buf, R::header_version(version))
        .unwrap();
    req.encode(&mut buf, version).unwrap();
    let mut frame = (buf.len() as u32).to_be_bytes().to_vec();
    frame.extend_from_slice(&buf);
    frame
}

/// The next response's bytes (header and body), or `None` if the connection closed first.
pub(crate) fn response(stream: &mut impl Read) -> Option<Bytes> {
    let mut len = [0u8; 4];
    stream.read_exact(&mut len).ok()?;
    let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
    stream.read_exact(&mut body).ok()?;
    Some(Bytes::from(body))
}
