//! One connection's bytes: size-prefixed request frames read within the frame limit, the server's
//! request budget (`queued.max.request.bytes`) and `connections.max.idle.ms`, answers written the
//! same way (streamed ones piece by piece), and a close that cannot hang.

use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tracing::{debug, warn};

use kquota_wire::{request_size, ResponseStream};

use kquota_host::{read_frame, Budget, Reservation, Shutdown};

/// How long closing a connection may wait to send what is still buffered (a TLS close_notify).
const CLOSE_TIMEOUT: Duration = Duration::from_secs(1);

/// Once this much of a frame has arrived, the rest is read into an anonymous map of the frame's
/// whole size (which the budget has reserved; see [`read_frame`]): its pages cost memory only as
/// the peer's bytes fill them, and the map goes back to the system the moment the frame is
/// dropped. (Heap memory freed by mimalloc stays with the process until the allocator is next
/// used, which an idle server may not do for a long time.)
const MAP_AFTER: usize = 256 * 1024;
/// A streamed answer is made and written this many bytes at a time.
const STREAM_CHUNK: usize = 64 * 1024;

/// A stream of Kafka frames: a 4-byte big-endian size, then that many bytes.
pub(crate) struct Connection<S> {
    stream: S,
    /// The peer's address, for the log (empty if unknown).
    peer: String,
    /// `connections.max.idle.ms`: the longest wait for the next byte, or for the peer to take one.
    idle_timeout: Duration,
    /// The server's request budget (`queued.max.request.bytes`).
    budget: Budget,
    /// The last frame's reservation, held until its answer has been written.
    reserved: Option<Reservation>,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Connection<S> {
    /// Frames on `stream`, from `peer`, their bytes reserved from `budget`.
    pub(crate) fn new(
        stream: S,
        peer: String,
        idle_timeout: Duration,
        budget: Budget,
    ) -> Connection<S> {
        Connection {
            stream,
            peer,
            idle_timeout,
            budget,
            reserved: None,
        }
    }

    /// The next request frame (header and body, without its size), at most `max_bytes` long.
    /// `None` when the connection is to close: the peer left, idled out, sent a frame too large or
    /// cut short, or the server is stopping; each is logged but the peer leaving.
    ///
    /// The frame's size is reserved from the server's budget before its body is read (reading
    /// waits while the budget is spent), and stays reserved until the next call (or the close):
    /// the caller answers a request before it reads the next one. The buffer grows as the body
    /// arrives (see [`MAP_AFTER`]).
    ///
    /// `started` is called once the frame's size has arrived: from then on a request is coming.
    pub(crate) async fn read_frame(
        &mut self,
        max_bytes: usize,
        shutdown: &mut Shutdown,
        started: impl FnOnce(),
    ) -> Option<Bytes> {
        // The previous request has been answered: its bytes go back to the budget.
        self.reserved = None;
        let peer = &self.peer;
        let mut prefix = [0u8; 4];
        // Stopping is checked first: once the server stops, no further request is started.
        let read = tokio::select! {
            biased;
            () = shutdown.stopping() => return None,
            r = tokio::time::timeout(self.idle_timeout, self.stream.read_exact(&mut prefix)) => r,
        };
        match read {
            Err(_) => {
                debug!(%peer, "closing idle connection");
                return None;
            }
            Ok(Err(_)) => return None, // the peer closed, or reset
            Ok(Ok(_)) => {}
        }
        started();
        let size = match request_size(prefix, max_bytes) {
            Ok(size) => size,
            Err(e) => {
                warn!(%peer, "closing connection: {e}");
                return None;
            }
        };
        let limit = self.budget.limit();
        if size > limit {
            // Only when queued.max.request.bytes is below the frame limit (Kafka refuses such
            // settings; a host embedding the server might not): the frame could never fit.
            warn!(
                %peer,
                "closing connection: Invalid receive (size = {size} larger than \
                 queued.max.request.bytes {limit})"
            );
            return None;
        }
        // While the budget is spent the connection reads nothing more: it waits its turn. The
        // peer is not idle meanwhile, so there is no idle timeout; stopping ends the wait.
        let reservation = tokio::select! {
            biased;
            () = shutdown.stopping() => return None,
            r = self.budget.reserve(size) => r?,
        };
        let body = read_frame(&mut self.stream, &[], size, Some(MAP_AFTER));
        // The size is bounded above; a peer that stalls mid-frame is an idle peer. Nothing of a
        // request that has not fully arrived is applied, so stopping may drop it.
        // A request that has fully arrived is read (and answered) before stopping is checked.
        let read = tokio::select! {
            biased;
            r = tokio::time::timeout(self.idle_timeout, body) => r,
            () = shutdown.stopping() => {
                debug!(%peer, "closing connection: the server is stopping");
                return None;
            }
        };
        let frame = match read {
            Ok(Ok(frame)) => frame,
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::OutOfMemory => {
                // No memory to map the frame into: the server's, not the peer's, trouble.
                warn!(%peer, "closing connection: cannot map a frame of {size} bytes: {e}");
                return None;
            }
            Ok(Err(e)) if e.kind() != std::io::ErrorKind::UnexpectedEof => {
                debug!(%peer, "closing connection: {e}");
                return None;
            }
            _ => {
                debug!(%peer, "closing connection: truncated frame");
                return None;
            }
        };
        self.reserved = Some(reservation);
        Some(frame.into_bytes())
    }

    /// Writes one answer. Returns false if it failed, or if the peer did not take it within
    /// `connections.max.idle.ms`, or within [`SHUTDOWN_GRACE`](crate::SHUTDOWN_GRACE) of the server stopping: a peer that
    /// does not read must not hold its connection, or the server's shutdown, forever.
    pub(crate) async fn write_frame(&mut self, body: &[u8], shutdown: &mut Shutdown) -> bool {
        // One write for the size and the body: one segment (or TLS record) per response, not two.
        let mut frame = Vec::with_capacity(4 + body.len());
        frame.extend_from_slice(&(body.len() as u32).to_be_bytes());
        frame.extend_from_slice(body);
        let write = async {
            self.stream.write_all(&frame).await?;
            self.stream.flush().await
        };
        tokio::select! {
            r = tokio::time::timeout(self.idle_timeout, write) => matches!(r, Ok(Ok(()))),
            () = shutdown.grace_over() => false,
        }
    }

    /// Writes a streamed answer: its size, then its bytes as they are made, [`STREAM_CHUNK`] at a
    /// time, so that a large answer (every entry of a refused alteration, every topic of a
    /// Metadata request) is never whole in memory. Returns false as [`Connection::write_frame`]
    /// does.
    pub(crate) async fn write_stream(
        &mut self,
        mut body: ResponseStream,
        shutdown: &mut Shutdown,
    ) -> bool {
        // Kafka's size prefix is an i32: a larger answer cannot be sent.
        let Ok(len) = i32::try_from(body.len()) else {
            warn!(
                peer = %self.peer,
                "closing connection: a response of {} bytes is too large to send",
                body.len()
            );
            return false;
        };
        let stream = &mut self.stream;
        let write = async {
            let mut chunk: Vec<u8> = Vec::with_capacity(STREAM_CHUNK + 4);
            chunk.extend_from_slice(&len.to_be_bytes());
            loop {
                let more = body.fill(&mut chunk, STREAM_CHUNK);
                stream.write_all(&chunk).await?;
                chunk.clear();
                if !more {
                    break;
                }
            }
            stream.flush().await
        };
        tokio::select! {
            r = tokio::time::timeout(self.idle_timeout, write) => matches!(r, Ok(Ok(()))),
            () = shutdown.grace_over() => false,
        }
    }

    /// Closes the connection, sending what is buffered first (on TLS, its close_notify) for at most
    /// a second: a peer that does not read would hold the close forever.
    pub(crate) async fn close(mut self) {
        let _ = tokio::time::timeout(CLOSE_TIMEOUT, self.stream.shutdown()).await;
        debug!(peer = %self.peer, "connection closed");
    }
}
