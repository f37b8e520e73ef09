//! The proxy's paths run on arbitrary bytes, and what must hold of each result.

use std::collections::VecDeque;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsResponse, CreatePartitionsRequest, CreatePartitionsResponse,
    CreateTopicsRequest, CreateTopicsResponse, DeleteTopicsRequest, DeleteTopicsResponse,
    DescribeClusterResponse, FetchRequest as KFetchRequest, FetchResponse, FindCoordinatorResponse,
    MetadataResponse, ProduceResponse, RequestHeader, ResponseHeader,
};
use kafka_protocol::protocol::{Decodable, Encodable};
use kquota_wire::Principal;

use crate::messages::enforce::{
    self, FetchRequest, MutationRequest, PartitionCounts, Refused, Split,
};
use crate::messages::identity::{Identity, SaslNote};
use crate::messages::{header, rewrite, walk};

use super::samples::{sample_request, THROTTLED};

/// How many bytes kafka-protocol reads of the response `frame` (header and body) to `key` at
/// `version`, or `None` if it refuses it. Only called on a frame whose walk succeeded.
pub(crate) fn decoded_response_len(key: ApiKey, version: i16, frame: &[u8]) -> Option<usize> {
    let mut b = Bytes::copy_from_slice(frame);
    ResponseHeader::decode(&mut b, key.response_header_version(version)).ok()?;
    let v = version;
    match key {
        ApiKey::Metadata => drop(MetadataResponse::decode(&mut b, v).ok()?),
        ApiKey::FindCoordinator => drop(FindCoordinatorResponse::decode(&mut b, v).ok()?),
        ApiKey::DescribeCluster => drop(DescribeClusterResponse::decode(&mut b, v).ok()?),
        ApiKey::Produce => drop(ProduceResponse::decode(&mut b, v).ok()?),
        ApiKey::Fetch => drop(FetchResponse::decode(&mut b, v).ok()?),
        ApiKey::ApiVersions => drop(ApiVersionsResponse::decode(&mut b, v).ok()?),
        ApiKey::CreateTopics => drop(CreateTopicsResponse::decode(&mut b, v).ok()?),
        ApiKey::CreatePartitions => drop(CreatePartitionsResponse::decode(&mut b, v).ok()?),
        ApiKey::DeleteTopics => drop(DeleteTopicsResponse::decode(&mut b, v).ok()?),
        _ => return None,
    }
    Some(frame.len() - b.len())
}

/// How many bytes kafka-protocol reads of the request `frame` (header and body) of `key` at
/// `version`, or `None` if it refuses it. Only called on a frame whose walk succeeded.
pub(crate) fn decoded_request_len(key: ApiKey, version: i16, frame: &[u8]) -> Option<usize> {
    let mut b = Bytes::copy_from_slice(frame);
    RequestHeader::decode(&mut b, key.request_header_version(version)).ok()?;
    let v = version;
    match key {
        ApiKey::CreateTopics => drop(CreateTopicsRequest::decode(&mut b, v).ok()?),
        ApiKey::CreatePartitions => drop(CreatePartitionsRequest::decode(&mut b, v).ok()?),
        ApiKey::DeleteTopics => drop(DeleteTopicsRequest::decode(&mut b, v).ok()?),
        _ => return None,
    }
    Some(frame.len() - b.len())
}

/// Asserts that where the frame's walk succeeds and kafka-protocol decodes it too, both read the
/// same bytes: a walk that read differently would let the decoder see a count it never checked.
fn assert_walk_agrees(key: ApiKey, version: i16, frame: &[u8], request: bool) {
    let (walked, decoded) = if request {
        let Ok(walked) = walk::mutation_request_len(key, version, frame) else {
            return;
        };
        (walked, decoded_request_len(key, version, frame))
    } else {
        let Ok(walked) = walk::response_len(key, version, frame) else {
            return;
        };
        (walked, decoded_response_len(key, version, frame))
    };
    if let Some(decoded) = decoded {
        assert_eq!(
            walked, decoded,
            "{key:?} v{version}: the walk read {walked} bytes, kafka-protocol {decoded}"
        );
    }
}

/// Partition counts for [`MutationRequest::counts`]: a few names and ids known.
struct Known;

impl PartitionCounts for Known {
    fn by_name(&self, name: &str) -> Option<u32> {
        name.starts_with("topic-1").then_some(6)
    }
    fn by_id(&self, id: [u8; 16]) -> Option<u32> {
        (id[0] == 7).then_some(4)
    }
}

/// Runs the proxy's request side on one client `frame` (its bytes after the size prefix): the
/// header as every request's is read, the SASL identity's watch, a Fetch request's `max_bytes`
/// capped at `fetch_cap`, and a CreateTopics, CreatePartitions or DeleteTopics request decoded,
/// counted, and split with the topics `refuse` picks (bit i: topic i) refused for `throttle_ms`.
pub fn request(frame: &[u8], fetch_cap: u64, refuse: u64, throttle_ms: u64) {
    let Ok(head) = header::parse(frame) else {
        return;
    };
    assert_eq!(head.correlation_id.to_be_bytes(), frame[4..8]);
    assert!(head.body_at.is_none_or(|at| at <= frame.len()));
    let _ = head.client_id(frame);
    // Every request goes past the identity; only a SASL step leaves a note, and no request moves
    // the principal (only an answer can).
    let mut identity = Identity::new(Principal::anonymous());
    if let Ok(Some(note)) = identity.on_request(head.api_key, head.version, frame) {
        assert!(
            matches!(head.api_key, 17 | 36),
            "a note for api {}",
            head.api_key
        );
        assert!(note.user().is_none() || head.api_key == 36);
    }
    assert!(identity.principal().is_anonymous());
    let Ok(key) = ApiKey::try_from(head.api_key) else {
        return;
    };
    match key {
        ApiKey::Fetch => {
            let Some(at) = head.body_at else { return };
            let Some(fetch) = FetchRequest::parse(frame, head.version, at) else {
                return;
            };
            let mut capped = frame.to_vec();
            let changed = fetch.cap(&mut capped, fetch_cap);
            let after = FetchRequest::parse(&capped, head.version, at).expect("still parses");
            let cap = i32::try_from(fetch_cap).unwrap_or(i32::MAX);
            assert_eq!(after.max_bytes, fetch.max_bytes.min(cap));
            assert_eq!(changed, fetch.max_bytes > cap);
            // Only the four bytes of max_bytes change.
            let differ = frame.iter().zip(&capped).filter(|(a, b)| a != b).count();
            assert!(differ <= 4);
        }
        ApiKey::CreateTopics | ApiKey::CreatePartitions | ApiKey::DeleteTopics => {
            assert_walk_agrees(key, head.version, frame, true);
            let bytes = Bytes::copy_from_slice(frame);
            let Some(m) = MutationRequest::decode(head.api_key, head.version, &bytes) else {
                return;
            };
            let _ = m.strict();
            let counts = m.counts(&Known);
            let refused: Vec<usize> = (0..counts.len().min(64))
                .filter(|i| refuse & (1 << i) != 0)
                .collect();
            if refused.is_empty() {
                return;
            }
            match m.without(&refused, throttle_ms) {
                Split::Partly(forward, _) => {
                    assert!(refused.len() < counts.len());
                    let size = u32::from_be_bytes(forward[..4].try_into().unwrap());
                    assert_eq!(size as usize, forward.len() - 4);
                    // What is forwarded reads again, with the topics not refused.
                    let again =
                        MutationRequest::decode(head.api_key, head.version, &forward.slice(4..))
                            .expect("the forwarded request decodes");
                    assert_eq!(again.counts(&Known).len(), counts.len() - refused.len());
                }
                Split::All(answer) => {
                    assert_eq!(refused.len(), counts.len(), "topics dropped, not forwarded");
                    let size = u32::from_be_bytes(answer[..4].try_into().unwrap());
                    assert_eq!(size as usize, answer.len() - 4);
                    walk::response(key, head.version, &answer[4..])
                        .expect("the proxy's answer walks");
                }
            }
        }
        _ => {}
    }
}

/// One connection's SASL identity, driven by a sequence of client requests and broker answers
/// as the connection drives it (each answer goes with the oldest step not yet answered).
pub struct Sasl {
    identity: Identity,
    pending: VecDeque<SaslNote>,
}

/// What a SASL request left for its answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    /// SaslHandshake (17) or SaslAuthenticate (36).
    pub api_key: i16,
    /// The request's version.
    pub version: i16,
    /// The user a success of this step would authenticate.
    pub user: Option<String>,
}

/// A broker answer taken by the identity.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answered {
    /// The step it answered.
    pub step: Step,
    /// Whether the principal changed.
    pub changed: bool,
}

impl Sasl {
    /// A connection whose initial principal is `User:ANONYMOUS`, or `User:<tls>` (a TLS client
    /// certificate's).
    pub fn new(tls: Option<&str>) -> Sasl {
        Sasl {
            identity: Identity::new(tls.map_or_else(Principal::anonymous, Principal::user)),
            pending: VecDeque::new(),
        }
    }

    /// A client request `frame` (its bytes after the size prefix): its header read as the proxy
    /// reads it, then watched; the step it left, if it is a SASL request, or why the connection
    /// closes.
    pub fn request(&mut self, frame: &[u8]) -> Result<Option<Step>, String> {
        let head = header::parse(frame).map_err(|e| e.to_string())?;
        let note = self
            .identity
            .on_request(head.api_key, head.version, frame)
            .map_err(|e| e.to_string())?;
        Ok(note.map(|note| {
            let step = step(&note);
            self.pending.push_back(note);
            step
        }))
    }

    /// The broker's answer `frame` (its bytes after the size prefix) to the oldest step not yet
    /// answered; `None` if there is none.
    pub fn answer(&mut self, frame: &[u8]) -> Option<Answered> {
        let note = self.pending.pop_front()?;
        let step = step(&note);
        let changed = self.identity.on_response(note, frame);
        Some(Answered { step, changed })
    }

    /// The connection's principal, `User:<name>`.
    pub fn principal(&self) -> String {
        self.identity.principal().to_string()
    }

    /// How many steps wait for an answer.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }
}

fn step(note: &SaslNote) -> Step {
    Step {
        api_key: note.api_key(),
        version: note.version(),
        user: note.user().map(str::to_owned),
    }
}

/// Where the fuzzed answers' brokers are to be reached: `proxy-<id>`, and no listener for a
/// negative id below -1 (the proxy has none to give).
struct Listeners;

impl rewrite::Advertise for Listeners {
    fn advertise(
        &mut self,
        node_id: i32,
        _host: &str,
        _port: i32,
    ) -> Result<(String, i32), String> {
        if node_id < -1 {
            return Err(format!("no listener for broker {node_id}"));
        }
        Ok((format!("proxy-{node_id}"), 19_000 + (node_id & 0xfff)))
    }

    fn topic(&mut self, _name: Option<&str>, _id: [u8; 16], _partitions: u32) {}
}

/// Runs the proxy's answer side on one broker `frame` (its bytes after the size prefix) to a
/// request of `api_key` at `version`: the rewrite of the answers that name brokers, the throttle
/// read and raised to `throttle_ms`, the refusals of a mutation request (the topics `refuse`
/// picks of a sample request) merged into it, and the proxy's own throttled Fetch answer at
/// `version` for a request in session (`session_id`, `session_epoch`).
pub fn answer(
    api_key: i16,
    version: i16,
    frame: &[u8],
    throttle_ms: u64,
    refuse: u8,
    session: (i32, i32),
) {
    let key = ApiKey::try_from(api_key).ok();
    if let Some(key) = key {
        assert_walk_agrees(key, version, frame, false);
    }
    let bytes = Bytes::copy_from_slice(frame);
    let ms = i32::try_from(throttle_ms).unwrap_or(i32::MAX);
    if rewrite::needs_rewrite(api_key, version) {
        if let Ok(Some(out)) = rewrite::rewrite(api_key, version, &bytes, &mut Listeners) {
            let key = key.expect("only known APIs are rewritten");
            let size = u32::from_be_bytes(out[..4].try_into().unwrap());
            assert_eq!(size as usize, out.len() - 4);
            walk::response(key, version, &out[4..]).expect("a rewritten answer walks");
            // The header goes as it came.
            assert_eq!(out[4..8], frame[..4]);
            // Rewriting is done once: the rewritten answer rewrites to itself (ApiVersions is
            // left as it is).
            let again = rewrite::rewrite(api_key, version, &out.slice(4..), &mut Listeners)
                .expect("a rewritten answer rewrites");
            match key {
                ApiKey::ApiVersions => assert_eq!(again, None),
                _ => assert_eq!(again.as_ref(), Some(&out)),
            }
        }
    }
    let leading = enforce::leading_throttle(frame, api_key, version);
    if let Ok(Some(out)) = enforce::raise_throttle(api_key, version, &bytes, throttle_ms) {
        let size = u32::from_be_bytes(out[..4].try_into().unwrap());
        assert_eq!(size as usize, out.len() - 4);
        match leading {
            Some(before) => {
                assert!(before < ms);
                assert_eq!(
                    enforce::leading_throttle(&out[4..], api_key, version),
                    Some(ms)
                );
            }
            None => {
                let key = ApiKey::Produce;
                assert_eq!(key as i16, api_key);
                walk::response(key, version, &out[4..]).expect("a raised answer walks");
                let mut b = Bytes::copy_from_slice(&out[4..]);
                ResponseHeader::decode(&mut b, key.response_header_version(version)).unwrap();
                let r = ProduceResponse::decode(&mut b, version).unwrap();
                assert_eq!(r.throttle_time_ms, ms);
            }
        }
    }
    if let Some(key @ (ApiKey::CreateTopics | ApiKey::CreatePartitions | ApiKey::DeleteTopics)) =
        key
    {
        if let Some((refused, count)) = refusals(key, version, refuse, throttle_ms) {
            if let Some(out) =
                enforce::merge_refused(api_key, version, &bytes, refused, throttle_ms)
            {
                let size = u32::from_be_bytes(out[..4].try_into().unwrap());
                assert_eq!(size as usize, out.len() - 4);
                let merged = topics_in(key, version, &out[4..]).expect("a merged answer decodes");
                let broker = topics_in(key, version, frame).expect("the broker's answer decoded");
                // Every refused topic is back, refused, and the throttle is the longer one.
                assert_eq!(merged.0, broker.0 + count);
                assert_eq!(merged.1, broker.1.max(ms));
                assert_eq!(merged.2, broker.2 + count);
            }
        }
    }
    if key == Some(ApiKey::Fetch) && (4..=18).contains(&version) {
        throttled_fetch(version, throttle_ms, session);
    }
    if key == Some(ApiKey::Fetch) && version >= rewrite::FETCH_ENDPOINTS_FROM {
        passed_fetch(version, frame);
    }
}

/// The refusals of a sample request of `key` at `version` with four topics, the first three of
/// which `refuse` picks (one is always forwarded, so that there is an answer to merge into), and
/// how many there are.
fn refusals(key: ApiKey, version: i16, refuse: u8, throttle_ms: u64) -> Option<(Refused, usize)> {
    let frame = Bytes::from(sample_request(key as i16, version, 4)?);
    let m = MutationRequest::decode(key as i16, version, &frame)?;
    let at: Vec<usize> = (0..3).filter(|i| refuse & (1 << i) != 0).collect();
    if at.is_empty() {
        return None;
    }
    match m.without(&at, throttle_ms) {
        Split::Partly(_, refused) => Some((refused, at.len())),
        Split::All(_) => panic!("{key:?} v{version}: a topic kept, yet all refused"),
    }
}

/// A mutation answer's (topics, throttle, topics refused with THROTTLING_QUOTA_EXCEEDED), decoded
/// after its walk.
fn topics_in(key: ApiKey, version: i16, frame: &[u8]) -> Option<(usize, i32, usize)> {
    walk::response(key, version, frame).ok()?;
    let mut b = Bytes::copy_from_slice(frame);
    ResponseHeader::decode(&mut b, key.response_header_version(version)).ok()?;
    let throttled =
        |codes: &mut dyn Iterator<Item = i16>| codes.filter(|c| *c == THROTTLED).count();
    let v = version;
    Some(match key {
        ApiKey::CreateTopics => {
            let r = CreateTopicsResponse::decode(&mut b, v).ok()?;
            let codes = &mut r.topics.iter().map(|t| t.error_code);
            (r.topics.len(), r.throttle_time_ms, throttled(codes))
        }
        ApiKey::CreatePartitions => {
            let r = CreatePartitionsResponse::decode(&mut b, v).ok()?;
            let codes = &mut r.results.iter().map(|t| t.error_code);
            (r.results.len(), r.throttle_time_ms, throttled(codes))
        }
        ApiKey::DeleteTopics => {
            let r = DeleteTopicsResponse::decode(&mut b, v).ok()?;
            let codes = &mut r.responses.iter().map(|t| t.error_code);
            (r.responses.len(), r.throttle_time_ms, throttled(codes))
        }
        _ => return None,
    })
}

/// The proxy's throttled Fetch answer at `version`, to a sample request in session `session`:
/// it walks and decodes, empty, with the throttle, and the session kept only if incremental.
/// A Fetch answer passed on as it comes (as the proxy passes one over 32 KiB): what the client
/// gets has the broker's size, and where the bounded walk reads the broker's answer, reads as it
/// with its endpoints rewritten as a whole answer's are (or, longer so, left out).
fn passed_fetch(version: i16, frame: &[u8]) {
    static RUNTIME: std::sync::OnceLock<tokio::runtime::Runtime> = std::sync::OnceLock::new();
    let runtime = RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("a runtime for the walk")
    });
    let passed = runtime.block_on(crate::connection::fetch_walk::in_memory(
        frame,
        &mut Listeners,
    ));
    let bounded = walk::response(ApiKey::Fetch, version, frame).is_ok();
    let out = match passed {
        Ok(out) => out,
        // What the bounded walk reads, the walk on the way reads too, but for an endpoint with
        // no listener and tagged fields too large to hold.
        Err(e) if bounded => {
            assert!(e.contains("rewrite") || e.contains("larger than"), "{e}");
            return;
        }
        Err(_) => return,
    };
    assert_eq!(out.len(), frame.len() + 4, "a passed answer keeps its size");
    assert_eq!(out[..4], (frame.len() as u32).to_be_bytes());
    if !bounded {
        return;
    }
    walk::response(ApiKey::Fetch, version, &out[4..]).expect("a passed answer walks");
    let decode = |bytes: &[u8]| {
        let mut b = Bytes::copy_from_slice(bytes);
        ResponseHeader::decode(&mut b, ApiKey::Fetch.response_header_version(version)).ok()?;
        FetchResponse::decode(&mut b, version).ok()
    };
    // An answer kafka-protocol refuses (a string that is not UTF-8, say) is passed on as it is
    // where it names no endpoint; a whole one would have closed the connection.
    let Some(broker) = decode(frame) else {
        return;
    };
    let sent = decode(&out[4..]).expect("what decoded from the broker decodes as passed on");
    assert_eq!(sent.responses, broker.responses);
    assert_eq!(sent.throttle_time_ms, broker.throttle_time_ms);
    if !sent.node_endpoints.is_empty() {
        let whole = rewrite::rewrite(
            ApiKey::Fetch as i16,
            version,
            &Bytes::copy_from_slice(frame),
            &mut Listeners,
        )
        .expect("endpoints the walk rewrote rewrite whole")
        .expect("and change");
        let whole = decode(&whole[4..]).expect("a whole rewrite decodes");
        assert_eq!(sent.node_endpoints, whole.node_endpoints);
    }
}

fn throttled_fetch(version: i16, throttle_ms: u64, (session_id, epoch): (i32, i32)) {
    let mut request = KFetchRequest::default().with_max_bytes(1_000);
    if version >= 7 {
        request.session_id = session_id;
        request.session_epoch = epoch;
    }
    let key = ApiKey::Fetch;
    let mut frame = BytesMut::new();
    RequestHeader::default()
        .with_request_api_key(key as i16)
        .with_request_api_version(version)
        .with_correlation_id(9)
        .encode(&mut frame, key.request_header_version(version))
        .unwrap();
    let body_at = frame.len();
    request.encode(&mut frame, version).unwrap();
    let parsed = FetchRequest::parse(&frame, version, body_at).expect("a Fetch request parses");
    let out = enforce::throttled_fetch(version, 9, throttle_ms, &parsed);
    let size = u32::from_be_bytes(out[..4].try_into().unwrap());
    assert_eq!(size as usize, out.len() - 4);
    let len = walk::response_len(key, version, &out[4..]).expect("a throttled answer walks");
    assert_eq!(len, out.len() - 4);
    let mut b = out.slice(4..);
    let header = ResponseHeader::decode(&mut b, key.response_header_version(version)).unwrap();
    assert_eq!(header.correlation_id, 9);
    let r = FetchResponse::decode(&mut b, version).unwrap();
    assert!(r.responses.is_empty());
    assert_eq!(
        r.throttle_time_ms,
        i32::try_from(throttle_ms).unwrap_or(i32::MAX)
    );
    let incremental = version >= 7 && session_id != 0 && epoch > 0;
    assert_eq!(r.session_id, if incremental { session_id } else { 0 });
}
