//! One connection's bytes: size-prefixed request frames read within the frame limit and
//! `connections.max.idle.ms`, answers written the same way, and a close that cannot hang.

use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tracing::{debug, warn};

use kquota_wire::request_size;

use crate::shutdown::Shutdown;

/// How long closing a connection may wait to send what is still buffered (a TLS close_notify).
const CLOSE_TIMEOUT: Duration = Duration::from_secs(1);

/// A stream of Kafka frames: a 4-byte big-endian size, then that many bytes.
pub(crate) struct Connection<S> {
    stream: S,
    /// The peer's address, for the log (empty if unknown).
    peer: String,
    /// `connections.max.idle.ms`: the longest wait for the next byte, or for the peer to take one.
    idle_timeout: Duration,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Connection<S> {
    /// Frames on `stream`, from `peer`.
    pub(crate) fn new(stream: S, peer: String, idle_timeout: Duration) -> Connection<S> {
        Connection {
            stream,
            peer,
            idle_timeout,
        }
    }

    /// The next request frame (header and body, without its size), at most `max_bytes` long.
    /// `None` when the connection is to close: the peer left, idled out, sent a frame too large or
    /// cut short, or the server is stopping; each is logged but the peer leaving.
    pub(crate) async fn read_frame(
        &mut self,
        max_bytes: usize,
        shutdown: &mut Shutdown,
    ) -> Option<Vec<u8>> {
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
        let size = match request_size(prefix, max_bytes) {
            Ok(size) => size,
            Err(e) => {
                warn!(%peer, "closing connection: {e}");
                return None;
            }
        };
        let mut frame = vec![0u8; size];
        // The size is bounded above; a peer that stalls mid-frame is an idle peer. Nothing of a
        // request that has not fully arrived is applied, so stopping may drop it.
        // A request that has fully arrived is read (and answered) before stopping is checked.
        let read = tokio::select! {
            biased;
            r = tokio::time::timeout(self.idle_timeout, self.stream.read_exact(&mut frame)) => r,
            () = shutdown.stopping() => {
                debug!(%peer, "closing connection: the server is stopping");
                return None;
            }
        };
        if !matches!(read, Ok(Ok(_))) {
            debug!(%peer, "closing connection: truncated frame");
            return None;
        }
        Some(frame)
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

    /// Closes the connection, sending what is buffered first (on TLS, its close_notify) for at most
    /// a second: a peer that does not read would hold the close forever.
    pub(crate) async fn close(mut self) {
        let _ = tokio::time::timeout(CLOSE_TIMEOUT, self.stream.shutdown()).await;
        debug!(peer = %self.peer, "connection closed");
    }
}
