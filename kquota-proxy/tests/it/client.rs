//! A bare Kafka client: requests encoded with kafka-protocol, answers read as frames.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

pub(crate) struct Client {
    pub(crate) stream: TcpStream,
    /// The client id of the requests [`Client::send`] makes.
    pub(crate) client_id: String,
}

/// The bytes of a request (after its size prefix).
pub(crate) fn request<M: Encodable>(
    key: ApiKey,
    version: i16,
    correlation_id: i32,
    client_id: &str,
    body: &M,
) -> Vec<u8> {
    let mut out = BytesMut::new();
    RequestHeader::default()
        .with_request_api_key(key as i16)
        .with_request_api_version(version)
        .with_correlation_id(correlation_id)
        .with_client_id(Some(StrBytes::from_string(client_id.to_owned())))
        .encode(&mut out, key.request_header_version(version))
        .unwrap();
    body.encode(&mut out, version).unwrap();
    out.to_vec()
}

impl Client {
    pub(crate) async fn connect(addr: SocketAddr) -> Client {
        Client::connect_as(addr, "test-client").await
    }

    /// A client whose requests carry `client_id`.
    pub(crate) async fn connect_as(addr: SocketAddr, client_id: &str) -> Client {
        Client {
            stream: TcpStream::connect(addr).await.unwrap(),
            client_id: client_id.to_owned(),
        }
    }

    /// Sends one frame (its size prefix added).
    pub(crate) async fn send_frame(&mut self, frame: &[u8]) {
        let mut out = (frame.len() as u32).to_be_bytes().to_vec();
        out.extend_from_slice(frame);
        self.stream.write_all(&out).await.unwrap();
    }

    pub(crate) async fn send<M: Encodable>(
        &mut self,
        key: ApiKey,
        version: i16,
        id: i32,
        body: &M,
    ) {
        let frame = request(key, version, id, &self.client_id, body);
        self.send_frame(&frame).await;
    }

    /// The next answer's bytes (after its size prefix), or None if the proxy closed.
    pub(crate) async fn recv(&mut self) -> Option<Bytes> {
        let read = async {
            let mut prefix = [0u8; 4];
            self.stream.read_exact(&mut prefix).await.ok()?;
            let mut frame = vec![0u8; u32::from_be_bytes(prefix) as usize];
            self.stream.read_exact(&mut frame).await.ok()?;
            Some(Bytes::from(frame))
        };
        tokio::time::timeout(Duration::from_secs(10), read)
            .await
            .expect("an answer or a close within 10 s")
    }

    /// The next answer, decoded as the response to `key` at `version`: its correlation id and
    /// body.
    pub(crate) async fn recv_as<M: Decodable>(&mut self, key: ApiKey, version: i16) -> (i32, M) {
        let mut frame = self.recv().await.expect("an answer");
        let header =
            ResponseHeader::decode(&mut frame, key.response_header_version(version)).unwrap();
        let m = M::decode(&mut frame, version).unwrap();
        assert!(frame.is_empty(), "bytes after the body");
        (header.correlation_id, m)
    }

    /// Sends `body` and returns the answer.
    pub(crate) async fn call<Req: Encodable, Resp: Decodable>(
        &mut self,
        key: ApiKey,
        version: i16,
        body: &Req,
    ) -> Resp {
        self.send(key, version, 1000 + i32::from(version), body)
            .await;
        let (id, r) = self.recv_as(key, version).await;
        assert_eq!(id, 1000 + i32::from(version));
        r
    }

    /// True once the proxy has closed this connection (within 10 s).
    pub(crate) async fn closed(&mut self) -> bool {
        let mut byte = [0u8; 1];
        matches!(
            tokio::time::timeout(Duration::from_secs(10), self.stream.read(&mut byte)).await,
            Ok(Ok(0) | Err(_))
        )
    }
}
