//! What the connection's tests drive its loops with: the proxy's shared state over a meter on a
//! [`ManualClock`], a connection of it, in-memory streams, and Kafka frames.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{ApiKey, ProduceRequest, RequestHeader, ResponseHeader, TopicName};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use kquota::meter::{ManualClock, MeterConfig};
use kquota::{Alteration, Engine};
use kquota_host::{Budget, Frame, Slot, Slots};
use kquota_wire::Principal;
use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncReadExt, DuplexStream};
use tokio::sync::{mpsc, Semaphore};

use super::conn::Conn;
use super::decide::{Decisions, Pending};
use super::sides::{Side, Socket};
use crate::messages::header;
use crate::messages::rewrite::Advertise;
use crate::metrics::Stats;
use crate::quotas::Quotas;
use crate::reach::Reach;
use crate::settings::{HostPort, ProxyConfig, ProxySettings};
use crate::shared::{Shared, Tasks};

// An in-memory stream has no socket under it: bytes passed on from it are copied.
impl Socket for DuplexStream {}

/// The client's address in the tests.
const PEER: SocketAddr = SocketAddr::V4(std::net::SocketAddrV4::new(
    std::net::Ipv4Addr::LOCALHOST,
    40_000,
));

/// A proxy's shared state, its meter on a manual clock (windows of 2 × 500 ms), and the slot of
/// one connection.
pub(super) struct Harness {
    pub(super) clock: Arc<ManualClock>,
    pub(super) shared: Arc<Shared>,
    stop: kquota_host::Stop,
    slot: Slot,
}

impl Harness {
    /// With `quotas` altered in, and the configuration's defaults changed by `set`.
    pub(super) fn with(quotas: &[Alteration], set: impl FnOnce(&mut ProxyConfig)) -> Harness {
        let (quotas, clock) = manual_quotas(quotas);
        let upstream = HostPort::new("kafka", 9092).unwrap();
        let mut settings = ProxySettings::new(PEER, upstream);
        settings
            .set("kquota.proxy.listen.base", "127.0.0.1:0")
            .unwrap();
        let mut config = settings.build().unwrap();
        set(&mut config);
        let (stop, shutdown) = kquota_host::channel();
        let (listeners, _) = mpsc::unbounded_channel();
        let slots = Slots::new(8, 8, config.connection_grace);
        let slot = slots.take(PEER).expect("a free slot");
        let shared = Arc::new(Shared {
            quotas,
            stats: Arc::new(Stats::default()),
            held: Arc::new(Semaphore::new(1)),
            brokers: Mutex::new(HashMap::new()),
            slots,
            budget: Budget::new(Some(config.buffer_memory)),
            shutdown,
            tasks: Tasks::default(),
            listeners,
            network: kquota_host::NetworkThreads::start(kquota_host::ThreadCount::new(1).unwrap())
                .expect("a network thread"),
            reach: Arc::new(Reach::default()),
            config,
        });
        Harness {
            clock,
            shared,
            stop,
            slot,
        }
    }

    /// With `quotas` and the default configuration.
    pub(super) fn new(quotas: &[Alteration]) -> Harness {
        Harness::with(quotas, |_| {})
    }

    /// A new connection, anonymous so far.
    pub(super) fn conn(&self) -> Conn<'_> {
        Conn {
            shared: &self.shared,
            slot: &self.slot,
            peer: PEER,
            decisions: Decisions::new(
                &self.shared.quotas,
                &self.shared.stats,
                Principal::anonymous(),
            ),
        }
    }

    /// The proxy starts stopping.
    pub(super) fn stop(&self) {
        self.stop.stop();
    }
}

/// Quotas with `alterations` altered in, metered on a manual clock (windows of 2 × 500 ms),
/// and the clock.
pub(super) fn manual_quotas(alterations: &[Alteration]) -> (Quotas, Arc<ManualClock>) {
    let engine = Arc::new(Engine::new());
    let results = engine.alter(alterations, false);
    assert!(results.iter().all(|r| r.error.is_none()), "{results:?}");
    let clock = Arc::new(ManualClock::new(1_000));
    let meter = MeterConfig::builder()
        .window_samples(2)
        .window_size(Duration::from_millis(500))
        .build()
        .unwrap();
    let quotas = Quotas::for_tests(engine, clock.clone(), meter, Vec::new());
    (quotas, clock)
}

/// One side of a connection in memory (not a plain socket, as a TLS one is not), and its peer.
pub(super) fn in_memory() -> (Side, DuplexStream) {
    let (ours, theirs) = tokio::io::duplex(1 << 20);
    (Side::Tls(Box::new(ours)), theirs)
}

/// The next frame from `from`, its size prefix included.
pub(super) async fn next_frame(from: &mut (impl AsyncRead + Unpin)) -> Bytes {
    let mut prefix = [0u8; 4];
    from.read_exact(&mut prefix).await.unwrap();
    let size = u32::from_be_bytes(prefix) as usize;
    let mut frame = vec![0; 4 + size];
    frame[..4].copy_from_slice(&prefix);
    from.read_exact(&mut frame[4..]).await.unwrap();
    Bytes::from(frame)
}

/// The correlation id of a request frame (size prefix included).
pub(super) fn request_id(frame: &[u8]) -> i32 {
    header::parse(&frame[4..]).unwrap().correlation_id
}

/// The correlation id of an answer frame (size prefix included).
pub(super) fn answer_id(frame: &[u8]) -> i32 {
    i32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]])
}

/// `text` as the protocol's string.
pub(super) fn s(text: &str) -> StrBytes {
    StrBytes::from_string(text.to_owned())
}

/// A request frame, size prefix included, from client `app`.
pub(super) fn request<M: Encodable>(key: ApiKey, version: i16, id: i32, m: &M) -> Frame {
    let mut out = BytesMut::from(&[0u8; 4][..]);
    RequestHeader::default()
        .with_request_api_key(key as i16)
        .with_request_api_version(version)
        .with_correlation_id(id)
        .with_client_id(Some(s("app")))
        .encode(&mut out, key.request_header_version(version))
        .unwrap();
    m.encode(&mut out, version).unwrap();
    let size = (out.len() - 4) as u32;
    out[..4].copy_from_slice(&size.to_be_bytes());
    Frame::from(out.to_vec())
}

/// A response frame, size prefix included.
pub(super) fn response<M: Encodable>(key: ApiKey, version: i16, id: i32, m: &M) -> Bytes {
    let mut out = BytesMut::from(&[0u8; 4][..]);
    ResponseHeader::default()
        .with_correlation_id(id)
        .encode(&mut out, key.response_header_version(version))
        .unwrap();
    m.encode(&mut out, version).unwrap();
    let size = (out.len() - 4) as u32;
    out[..4].copy_from_slice(&size.to_be_bytes());
    out.freeze()
}

/// The message of a response frame (size prefix included).
pub(super) fn decoded<M: Decodable>(key: ApiKey, version: i16, mut frame: Bytes) -> M {
    let _ = frame.split_to(4);
    ResponseHeader::decode(&mut frame, key.response_header_version(version)).unwrap();
    M::decode(&mut frame, version).unwrap()
}

/// A Produce of `records` bytes to one partition.
pub(super) fn produce(records: usize, acks: i16) -> ProduceRequest {
    ProduceRequest::default()
        .with_acks(acks)
        .with_timeout_ms(1_000)
        .with_topic_data(vec![TopicProduceData::default()
            .with_name(TopicName(s("orders")))
            .with_partition_data(vec![PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(Bytes::from(vec![7u8; records])))])])
}

/// A Fetch answer with `records` bytes of one partition.
pub(super) fn fetch_answer(version: i16, id: i32, records: usize) -> Bytes {
    use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
    use kafka_protocol::messages::FetchResponse;
    let r = FetchResponse::default().with_responses(vec![FetchableTopicResponse::default()
        .with_topic(TopicName(s("orders")))
        .with_partitions(vec![
            PartitionData::default().with_records(Some(Bytes::from(vec![1u8; records])))
        ])]);
    response(ApiKey::Fetch, version, id, &r)
}

/// What `d` decides for the request `frame` (which may change in place).
pub(super) fn decided(d: &Decisions<'_>, frame: &mut Frame) -> Pending {
    let head = header::parse(&frame[4..]).unwrap();
    d.request(&head, frame, Instant::now()).unwrap()
}

/// Brokers named in answers are not rewritten in these tests.
pub(super) struct NoBrokers;

impl Advertise for NoBrokers {
    fn advertise(&mut self, node: i32, host: &str, port: i32) -> Result<(String, i32), String> {
        Ok((format!("{host}-{node}"), port))
    }

    fn topic(&mut self, _: Option<&str>, _: [u8; 16], _: u32) {}
}
