//! The bytes of one side of a connection as Kafka frames: a 4-byte size, then that many bytes.
//! [`FrameReader`] reads them through a small buffer (a frame's size, header and small body come
//! in one system call), and [`write_frame`] writes one within a time bound.

use std::io;
use std::time::Duration;

use kquota_host::Frame;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};

/// The read buffer of each side of a connection.
const READ_BUFFER: usize = 8 * 1024;

/// Incoming frames on one side of a connection.
pub(super) struct FrameReader<R> {
    stream: BufReader<R>,
    /// The next frame's size prefix, as far as it has arrived.
    prefix: [u8; 4],
    got: usize,
}

/// Why a frame's body was not read.
pub(super) enum BodyError {
    /// The peer closed within it.
    Truncated,
    /// The peer sent nothing for the idle time within it.
    Stalled,
    /// Another error of the socket's.
    Io(io::Error),
}

impl std::fmt::Display for BodyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BodyError::Truncated => f.write_str("a truncated frame"),
            BodyError::Stalled => f.write_str("stalled within a frame"),
            BodyError::Io(e) => write!(f, "{e}"),
        }
    }
}

impl<R: AsyncRead + Unpin> FrameReader<R> {
    /// Frames from `stream`.
    pub(super) fn new(stream: R) -> FrameReader<R> {
        FrameReader {
            stream: BufReader::with_capacity(READ_BUFFER, stream),
            prefix: [0; 4],
            got: 0,
        }
    }

    /// Reads what has arrived of the next frame's size prefix: `Ok(true)` once it is whole,
    /// `Ok(false)` if the peer closed. Cancel-safe: bytes read are kept for the next call.
    pub(super) async fn fill_prefix(&mut self) -> io::Result<bool> {
        while self.got < 4 {
            let n = self.stream.read(&mut self.prefix[self.got..]).await?;
            if n == 0 {
                return Ok(false);
            }
            self.got += n;
        }
        Ok(true)
    }

    /// Whether the next frame has begun to arrive.
    pub(super) fn started(&self) -> bool {
        self.got > 0
    }

    /// Whether the next frame's size prefix is whole.
    pub(super) fn has_prefix(&self) -> bool {
        self.got == 4
    }

    /// The whole size prefix of the next frame (after [`FrameReader::fill_prefix`] said so),
    /// and the reader ready for the frame after it.
    pub(super) fn take_prefix(&mut self) -> [u8; 4] {
        debug_assert_eq!(self.got, 4);
        self.got = 0;
        self.prefix
    }

    /// The frame whose size prefix was `prefix` and size `size`: the prefix, then its bytes,
    /// read within `idle` (a peer that stalls mid-frame is idle). The buffer grows as the bytes
    /// arrive.
    pub(super) async fn body(
        &mut self,
        prefix: [u8; 4],
        size: usize,
        idle: Duration,
    ) -> Result<Frame, BodyError> {
        match tokio::time::timeout(
            idle,
            kquota_host::read_frame(&mut self.stream, &prefix, size, None),
        )
        .await
        {
            Ok(Ok(frame)) => Ok(frame),
            Ok(Err(e)) if e.kind() == io::ErrorKind::UnexpectedEof => Err(BodyError::Truncated),
            Ok(Err(e)) => Err(BodyError::Io(e)),
            Err(_) => Err(BodyError::Stalled),
        }
    }
}

/// Why a frame was not written.
pub(super) enum WriteError {
    /// The peer took nothing for the idle time.
    Stalled,
    /// The socket's error.
    Io(io::Error),
}

/// Writes `bytes` (a frame with its size prefix) and flushes, within `idle`.
pub(super) async fn write_frame<W: AsyncWrite + Unpin>(
    stream: &mut W,
    bytes: &[u8],
    idle: Duration,
) -> Result<(), WriteError> {
    let write = async {
        stream.write_all(bytes).await?;
        stream.flush().await
    };
    match tokio::time::timeout(idle, write).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(WriteError::Io(e)),
        Err(_) => Err(WriteError::Stalled),
    }
}
