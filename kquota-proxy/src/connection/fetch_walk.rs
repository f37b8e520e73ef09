//! A Fetch answer of a version that names leaders' endpoints (v16 and later, KIP-951), passed on
//! to the client as it comes and walked on the way: everything up to its last field goes through
//! unchanged (the records straight from the broker's socket to the client's), and its last bytes,
//! the tagged fields that may hold `node_endpoints`, are held and rewritten to the proxy's
//! listeners in as many bytes ([`rewrite::fetch_tail`]), since the answer's size went out first.
//!
//! The walk reads the answer's fields as kafka-protocol would, but never from a count: every
//! element read takes bytes, so a count larger than the answer ends the walk when its bytes do.

use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

use super::frames::{BodyError, FrameReader, PassError, WriteError};
use super::sides::Socket;
use crate::messages::rewrite::{self, Advertise, RewriteError};

/// Walked bytes are written to the client once this many are held.
const FLUSH_AT: usize = 8 * 1024;

/// A field's value at most this large is walked through the held bytes; a larger one goes from
/// the broker's socket to the client's as it comes.
const SMALL_VALUE: usize = 256;

/// Why a Fetch answer was not passed on whole.
pub(super) enum WalkError {
    /// Reading it, or writing it: as for any passed frame.
    Pass(PassError),
    /// It does not read as a Fetch answer: the client has part of it, so the connection closes.
    Malformed(&'static str),
    /// Its endpoints cannot be rewritten.
    Rewrite(RewriteError),
}

impl From<BodyError> for WalkError {
    fn from(e: BodyError) -> Self {
        WalkError::Pass(PassError::From(e))
    }
}

/// One answer on its way: what has been read of it and not yet written.
struct Walk<'a, R, W> {
    from: &'a mut FrameReader<R>,
    to: &'a mut W,
    /// The frame's bytes read and not yet written; `held[..at]` have been walked.
    held: Vec<u8>,
    at: usize,
    /// The frame's bytes not yet read.
    left: usize,
    idle: Duration,
}

impl<R: AsyncRead + Socket + Unpin, W: AsyncWrite + Socket + Unpin> Walk<'_, R, W> {
    /// The next `n` bytes of the answer, walked.
    async fn take(&mut self, n: usize, what: &'static str) -> Result<&[u8], WalkError> {
        let have = self.held.len() - self.at;
        if have < n {
            let more = n - have;
            if more > self.left {
                return Err(WalkError::Malformed(what));
            }
            self.from.read_into(&mut self.held, more, self.idle).await?;
            self.left -= more;
        }
        self.at += n;
        Ok(&self.held[self.at - n..self.at])
    }

    async fn skip(&mut self, n: usize, what: &'static str) -> Result<(), WalkError> {
        self.take(n, what).await.map(drop)
    }

    /// An unsigned varint.
    async fn uvarint(&mut self, what: &'static str) -> Result<u32, WalkError> {
        let mut v: u32 = 0;
        for shift in (0..35).step_by(7) {
            let b = self.take(1, what).await?[0];
            v |= u32::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(WalkError::Malformed(what))
    }

    /// Writes what has been walked, keeping what was read beyond it.
    async fn flush(&mut self) -> Result<(), WalkError> {
        if self.at == 0 {
            return Ok(());
        }
        let write = tokio::time::timeout(self.idle, self.to.write_all(&self.held[..self.at]));
        match write.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(WalkError::Pass(PassError::To(WriteError::Io(e)))),
            Err(_) => return Err(WalkError::Pass(PassError::To(WriteError::Stalled))),
        }
        self.held.drain(..self.at);
        self.at = 0;
        Ok(())
    }

    /// A value of `n` bytes the proxy does not read: walked through if small, else passed on
    /// as it comes.
    async fn value(
        &mut self,
        n: usize,
        chunk: &mut Vec<u8>,
        what: &'static str,
    ) -> Result<(), WalkError> {
        if n <= SMALL_VALUE {
            return self.skip(n, what).await;
        }
        // What was read ahead of the walk belongs to the value first.
        let ahead = (self.held.len() - self.at).min(n);
        self.at += ahead;
        let rest = n - ahead;
        if rest > self.left {
            return Err(WalkError::Malformed(what));
        }
        self.flush().await?;
        self.from
            .pass(rest, Some(&mut *self.to), chunk, self.idle)
            .await
            .map_err(WalkError::Pass)?;
        self.left -= rest;
        Ok(())
    }

    /// A tagged-field section whose values the proxy passes on as they are.
    async fn tags(&mut self, chunk: &mut Vec<u8>, what: &'static str) -> Result<(), WalkError> {
        let count = self.uvarint(what).await?;
        for _ in 0..count {
            self.uvarint(what).await?;
            let size = self.uvarint(what).await? as usize;
            self.value(size, chunk, what).await?;
            if self.held.len() > FLUSH_AT {
                self.flush().await?;
            }
        }
        Ok(())
    }
}

/// Passes on the Fetch answer (v16 or later) whose size prefix and first bytes are `head`, and
/// whose `rest` bytes are still the broker's to send, to `to`, its leaders' endpoints rewritten
/// through `advertise`. `chunk` carries what goes straight through, and holds the answer's last
/// field (which must fit it).
pub(super) async fn pass<R, W, A>(
    from: &mut FrameReader<R>,
    to: &mut W,
    head: Vec<u8>,
    rest: usize,
    chunk: &mut Vec<u8>,
    idle: Duration,
    advertise: &mut A,
) -> Result<(), WalkError>
where
    R: AsyncRead + Socket + Unpin,
    W: AsyncWrite + Socket + Unpin,
    A: Advertise,
{
    let mut w = Walk {
        from,
        to,
        held: head,
        // The size prefix goes as it came.
        at: 4,
        left: rest,
        idle,
    };
    w.skip(4, "correlation_id").await?;
    w.tags(chunk, "response header tagged fields").await?;
    w.skip(4 + 2 + 4, "throttle_time_ms, error_code, session_id")
        .await?;
    let topics = w.uvarint("responses").await?;
    if topics == 0 {
        return Err(WalkError::Malformed("responses"));
    }
    for _ in 1..topics {
        w.skip(16, "topic_id").await?;
        let partitions = w.uvarint("partitions").await?;
        for _ in 1..partitions {
            w.skip(
                4 + 2 + 8 + 8 + 8,
                "partition_index, error_code, high_watermark, last_stable_offset, log_start_offset",
            )
            .await?;
            let aborted = w.uvarint("aborted_transactions").await?;
            for _ in 1..aborted {
                w.skip(16, "producer_id, first_offset").await?;
                w.tags(chunk, "aborted transaction tagged fields").await?;
            }
            w.skip(4, "preferred_read_replica").await?;
            let records = w.uvarint("records").await? as usize;
            if records > 1 {
                w.value(records - 1, chunk, "records").await?;
            }
            w.tags(chunk, "partition tagged fields").await?;
            if w.held.len() > FLUSH_AT {
                w.flush().await?;
            }
        }
        w.tags(chunk, "topic tagged fields").await?;
    }
    // The rest is the answer's own tagged fields: held whole, rewritten in as many bytes.
    w.flush().await?;
    let tail_len = w.held.len() + w.left;
    if tail_len > chunk.capacity() {
        return Err(WalkError::Malformed(
            "the fetch answer's tagged fields are larger than the proxy holds",
        ));
    }
    let left = w.left;
    w.from.read_into(&mut w.held, left, idle).await?;
    w.left = 0;
    if let Some(rewritten) = rewrite::fetch_tail(&w.held, advertise).map_err(WalkError::Rewrite)? {
        w.held = rewritten;
    }
    w.at = w.held.len();
    w.flush().await?;
    match tokio::time::timeout(idle, w.to.flush()).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(WalkError::Pass(PassError::To(WriteError::Io(e)))),
        Err(_) => Err(WalkError::Pass(PassError::To(WriteError::Stalled))),
    }
}

/// The Fetch answer `frame` (its bytes after the size prefix, at `version` 16 or later) as
/// [`pass`] sends it on, read from memory: the bytes the client would get, or why the walk
/// stopped. For the fuzz targets and the tests.
#[cfg(any(test, feature = "fuzzing"))]
pub(crate) async fn in_memory<A: Advertise>(
    frame: &[u8],
    advertise: &mut A,
) -> Result<Vec<u8>, String> {
    let idle = Duration::from_secs(1);
    let prefix = u32::try_from(frame.len())
        .map_err(|_| "a frame over 4 GiB".to_owned())?
        .to_be_bytes();
    let mut from = FrameReader::new(frame);
    let first = frame.len().min(64);
    let head = from
        .head(prefix, first, idle)
        .await
        .map_err(|e| e.to_string())?;
    let mut out = Vec::with_capacity(frame.len() + 4);
    let mut chunk = Vec::with_capacity(super::frames::PASS_CHUNK);
    let walked = pass(
        &mut from,
        &mut out,
        head,
        frame.len() - first,
        &mut chunk,
        idle,
        advertise,
    )
    .await;
    match walked {
        Ok(()) => Ok(out),
        Err(WalkError::Pass(PassError::From(e))) => Err(format!("reading: {e}")),
        Err(WalkError::Pass(PassError::To(_))) => Err("writing".to_owned()),
        Err(WalkError::Malformed(what)) => Err(format!("does not read at {what}")),
        Err(WalkError::Rewrite(e)) => Err(format!("rewrite: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use bytes::{Bytes, BytesMut};
    use kafka_protocol::messages::fetch_response::{
        FetchableTopicResponse, NodeEndpoint, PartitionData,
    };
    use kafka_protocol::messages::{ApiKey, BrokerId, FetchResponse, ResponseHeader};
    use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

    use super::*;

    /// Brokers 1-3 advertised as `host` with ports 19001-19003.
    struct Listeners(&'static str);

    impl Advertise for Listeners {
        fn advertise(&mut self, id: i32, _: &str, _: i32) -> Result<(String, i32), String> {
            (1..=3)
                .contains(&id)
                .then(|| (self.0.to_owned(), 19_000 + id))
                .ok_or_else(|| format!("no listener for broker {id}"))
        }

        fn topic(&mut self, _: Option<&str>, _: [u8; 16], _: u32) {}
    }

    fn answer(version: i16, records: usize, endpoints: &[(i32, &str)]) -> Vec<u8> {
        let partition = |i: i32| {
            PartitionData::default()
                .with_partition_index(i)
                .with_high_watermark(1_000)
                .with_records(Some(Bytes::from(vec![i as u8; records])))
        };
        let r = FetchResponse::default()
            .with_throttle_time_ms(3)
            .with_session_id(11)
            .with_responses(vec![FetchableTopicResponse::default()
                .with_topic_id(uuid::Uuid::from_bytes([7; 16]))
                .with_partitions(vec![partition(0), partition(1)])])
            .with_node_endpoints(
                endpoints
                    .iter()
                    .map(|(id, host)| {
                        NodeEndpoint::default()
                            .with_node_id(BrokerId(*id))
                            .with_host(StrBytes::from_string((*host).to_owned()))
                            .with_port(9092)
                            .with_rack(Some(StrBytes::from_static_str("rack-a")))
                    })
                    .collect(),
            );
        let mut out = BytesMut::new();
        ResponseHeader::default()
            .with_correlation_id(5)
            .encode(&mut out, ApiKey::Fetch.response_header_version(version))
            .unwrap();
        r.encode(&mut out, version).unwrap();
        out.to_vec()
    }

    fn decoded(version: i16, frame: &[u8]) -> FetchResponse {
        crate::messages::walk::response(ApiKey::Fetch, version, frame).expect("walks");
        let mut b = Bytes::copy_from_slice(frame);
        ResponseHeader::decode(&mut b, ApiKey::Fetch.response_header_version(version)).unwrap();
        let r = FetchResponse::decode(&mut b, version).unwrap();
        assert!(b.is_empty());
        r
    }

    #[tokio::test]
    async fn an_answer_goes_through_unchanged_but_for_its_endpoints_in_as_many_bytes() {
        for version in [16, 17] {
            // Shorter once rewritten ("kafka-broker-N.internal" to "proxy"): padded.
            let frame = answer(
                version,
                40_000,
                &[(1, "kafka-broker-1.internal"), (2, "b2")],
            );
            let out = in_memory(&frame, &mut Listeners("proxy")).await.unwrap();
            assert_eq!(out.len(), frame.len() + 4, "the size went out first");
            assert_eq!(out[..4], (frame.len() as u32).to_be_bytes());
            let (sent, broker) = (decoded(version, &out[4..]), decoded(version, &frame));
            assert_eq!(sent.responses, broker.responses, "records byte for byte");
            assert_eq!(sent.throttle_time_ms, 3);
            let endpoints: Vec<_> = sent
                .node_endpoints
                .iter()
                .map(|n| (n.node_id.0, n.host.to_string(), n.port, n.rack.clone()))
                .collect();
            assert_eq!(
                endpoints,
                [
                    (
                        1,
                        "proxy".to_owned(),
                        19_001,
                        Some(StrBytes::from_static_str("rack-a"))
                    ),
                    (
                        2,
                        "proxy".to_owned(),
                        19_002,
                        Some(StrBytes::from_static_str("rack-a"))
                    )
                ]
            );
            // Longer once rewritten: left out, and the answer keeps its size.
            let out = in_memory(
                &frame,
                &mut Listeners("a-much-longer-proxy-host.example.com"),
            )
            .await
            .unwrap();
            assert_eq!(out.len(), frame.len() + 4);
            let sent = decoded(version, &out[4..]);
            assert!(sent.node_endpoints.is_empty());
            assert_eq!(sent.responses, broker.responses);
            // None to rewrite: byte for byte.
            let plain = answer(version, 300, &[]);
            let out = in_memory(&plain, &mut Listeners("proxy")).await.unwrap();
            assert_eq!(out[4..], plain[..]);
        }
    }

    #[tokio::test]
    async fn a_broken_answer_stops_the_walk_and_never_panics() {
        let frame = answer(16, 1_000, &[(1, "b1")]);
        // Cut anywhere: the walk stops (a cut inside the tail may still read as tagged fields).
        for cut in (0..frame.len()).step_by(7) {
            let _ = in_memory(&frame[..cut], &mut Listeners("proxy")).await;
        }
        // A count far beyond the answer's bytes.
        let mut huge = frame.clone();
        let at = 4 + 1 + 10; // correlation id, header tags, throttle, error, session
        huge[at] = 0xff;
        huge.splice(at + 1..at + 1, [0xff, 0xff, 0xff, 0x07]);
        assert!(in_memory(&huge, &mut Listeners("proxy")).await.is_err());
        // Bytes after the answer's tagged fields, as after a whole answer's body, are refused.
        let mut trailing = frame.clone();
        trailing.push(0);
        let err = in_memory(&trailing, &mut Listeners("proxy"))
            .await
            .unwrap_err();
        assert!(err.contains("after its body"), "{err}");
        // An endpoint the proxy has no listener for.
        let unknown = answer(16, 1_000, &[(9, "b9")]);
        let err = in_memory(&unknown, &mut Listeners("proxy"))
            .await
            .unwrap_err();
        assert!(err.contains("broker 9"), "{err}");
    }
}
