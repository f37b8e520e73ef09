//! The bytes of one side of a connection as Kafka frames: a 4-byte size, then that many bytes.
//! [`FrameReader`] reads them through a small buffer, held only while it holds bytes (a frame's
//! size, header and small body come in one system call): a frame's head alone, the rest of it
//! whole, or the rest passed on to the other side as it arrives ([`FrameReader::pass`],
//! cut-through); [`write_frame`] writes one within a time bound.

use std::io;
use std::pin::pin;
use std::time::Duration;

use kquota_host::Frame;

use super::read_buffer::ReadBuffer;
use super::sides::Socket;
#[cfg(target_os = "linux")]
use super::splice;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::time::Instant;

/// The most a frame passed through ([`FrameReader::pass`]) reads in one go beyond what the read
/// buffer holds: the chunk it is read into comes from the caller's budget.
pub(super) const PASS_CHUNK: usize = 64 * 1024;

/// Frames at most this large are read whole before they are decided (one read and one write
/// each), requests and answers alike; larger ones (a Produce, a Fetch answer) are decided from
/// their head and passed on as their bytes come.
pub(super) const PASS_FROM: usize = 32 * 1024;

/// Incoming frames on one side of a connection.
pub(super) struct FrameReader<R> {
    stream: ReadBuffer<R>,
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

impl<R: AsyncRead + Socket + Unpin> FrameReader<R> {
    /// Frames from `stream`.
    pub(super) fn new(stream: R) -> FrameReader<R> {
        FrameReader {
            stream: ReadBuffer::new(stream),
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
        within(
            idle,
            kquota_host::read_frame(&mut self.stream, &prefix, size, None),
        )
        .await
    }
}

/// `read`, a read of a frame's bytes, within `idle`: a peer that closes within the frame sent a
/// truncated one, and one that sends nothing for `idle` stalled.
async fn within<T>(
    idle: Duration,
    read: impl std::future::Future<Output = io::Result<T>>,
) -> Result<T, BodyError> {
    match tokio::time::timeout(idle, read).await {
        Ok(Ok(t)) => Ok(t),
        Ok(Err(e)) if e.kind() == io::ErrorKind::UnexpectedEof => Err(BodyError::Truncated),
        Ok(Err(e)) => Err(BodyError::Io(e)),
        Err(_) => Err(BodyError::Stalled),
    }
}

/// Why a frame was not passed on whole.
pub(super) enum PassError {
    /// Reading it: the peer it came from closed, stalled, or failed.
    From(BodyError),
    /// Writing it: the peer it goes to took nothing for the idle time, or failed.
    To(WriteError),
}

#[cfg(target_os = "linux")]
impl From<splice::Stopped> for PassError {
    fn from(stopped: splice::Stopped) -> PassError {
        match stopped {
            splice::Stopped::Truncated => PassError::From(BodyError::Truncated),
            splice::Stopped::ReadStalled => PassError::From(BodyError::Stalled),
            splice::Stopped::Read(e) => PassError::From(BodyError::Io(e)),
            splice::Stopped::WriteStalled => PassError::To(WriteError::Stalled),
            splice::Stopped::Write(e) => PassError::To(WriteError::Io(e)),
        }
    }
}

impl<R: AsyncRead + Socket + Unpin> FrameReader<R> {
    /// The first `want` bytes of the frame whose size prefix was `prefix` (at most the frame's
    /// size), after the prefix: what the proxy reads before it decides whether the rest is
    /// needed whole. Read within `idle`.
    pub(super) async fn head(
        &mut self,
        prefix: [u8; 4],
        want: usize,
        idle: Duration,
    ) -> Result<Vec<u8>, BodyError> {
        let mut head = Vec::with_capacity(4 + want);
        head.extend_from_slice(&prefix);
        head.resize(4 + want, 0);
        within(idle, self.stream.read_exact(&mut head[4..])).await?;
        Ok(head)
    }

    /// The whole frame, of which `head` (its size prefix and first bytes, from
    /// [`FrameReader::head`]) is in and `rest` bytes are still to come, read within `idle`.
    pub(super) async fn rest(
        &mut self,
        head: &[u8],
        rest: usize,
        idle: Duration,
    ) -> Result<Frame, BodyError> {
        within(
            idle,
            kquota_host::read_frame(&mut self.stream, head, rest, None),
        )
        .await
    }

    /// Appends the next `n` bytes of the frame to `out`, within `idle`.
    pub(super) async fn read_into(
        &mut self,
        out: &mut Vec<u8>,
        n: usize,
        idle: Duration,
    ) -> Result<(), BodyError> {
        let from = out.len();
        out.resize(from + n, 0);
        within(idle, self.stream.read_exact(&mut out[from..]))
            .await
            .map(drop)
    }

    /// Passes the next `n` bytes to `to` as they arrive (`None`: reads and drops them), and
    /// flushes. `chunk` is the buffer for what the read buffer does not hold; its capacity is the
    /// most read at once (an empty one gets [`PASS_CHUNK`] when first needed). Each side may
    /// make no progress for at most `idle`: a peer that stops reading stalls this side's reads
    /// too, and costs nothing more than its socket.
    pub(super) async fn pass<W: AsyncWrite + Socket + Unpin>(
        &mut self,
        mut n: usize,
        mut to: Option<&mut W>,
        chunk: &mut Vec<u8>,
        idle: Duration,
    ) -> Result<(), PassError> {
        // One timer for the whole frame, pushed back at each step that moves bytes.
        let mut stall = pin!(tokio::time::sleep(idle));
        // A pipe is asked for once per frame: when none is free, the frame is copied whole
        // rather than asking again (under the pipes' lock) at every chunk.
        #[cfg(target_os = "linux")]
        let mut splice_tried = false;
        while n > 0 {
            let buffered = self.stream.buffer().len();
            #[cfg(target_os = "linux")]
            if buffered == 0 && !splice_tried {
                splice_tried = true;
                // Between two plain sockets, the rest need not pass through this process.
                let sockets = to
                    .as_deref()
                    .and_then(Socket::tcp)
                    .zip(self.stream.get_ref().tcp());
                if let Some((to, from)) = sockets {
                    if let Some(mut lent) = splice::PIPES.take() {
                        return splice::pass(from, to, n, &mut lent, stall.as_mut(), idle)
                            .await
                            .map_err(PassError::from);
                    }
                }
            }
            let got = if buffered > 0 {
                // What the read buffer already holds goes first, straight from it.
                let take = buffered.min(n);
                if let Some(w) = to.as_deref_mut() {
                    let buf = &self.stream.buffer()[..take];
                    tokio::select! {
                        r = w.write_all(buf) => r.map_err(|e| PassError::To(WriteError::Io(e)))?,
                        () = &mut stall => return Err(PassError::To(WriteError::Stalled)),
                    }
                }
                self.stream.consume(take);
                take
            } else {
                if chunk.capacity() == 0 {
                    // Allocated only when the bytes are copied, not for a frame spliced.
                    chunk.reserve_exact(PASS_CHUNK);
                }
                let room = chunk.capacity().min(n);
                chunk.clear();
                let mut source = self.stream.get_mut().take(room as u64);
                let read = tokio::select! {
                    r = source.read_buf(chunk) => r,
                    () = &mut stall => return Err(PassError::From(BodyError::Stalled)),
                };
                match read {
                    Ok(0) => return Err(PassError::From(BodyError::Truncated)),
                    Ok(got) => {
                        stall.as_mut().reset(Instant::now() + idle);
                        if let Some(w) = to.as_deref_mut() {
                            tokio::select! {
                                r = w.write_all(&chunk[..got]) => r.map_err(|e| PassError::To(WriteError::Io(e)))?,
                                () = &mut stall => return Err(PassError::To(WriteError::Stalled)),
                            }
                        }
                        got
                    }
                    Err(e) => return Err(PassError::From(BodyError::Io(e))),
                }
            };
            n -= got;
            stall.as_mut().reset(Instant::now() + idle);
        }
        if let Some(w) = to {
            tokio::select! {
                r = w.flush() => r.map_err(|e| PassError::To(WriteError::Io(e)))?,
                () = &mut stall => return Err(PassError::To(WriteError::Stalled)),
            }
        }
        Ok(())
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

/// Writes `bytes`, the first part of a frame whose rest follows, within `idle` (not flushed:
/// the rest's last write is).
pub(super) async fn write_part<W: AsyncWrite + Unpin>(
    stream: &mut W,
    bytes: &[u8],
    idle: Duration,
) -> Result<(), WriteError> {
    match tokio::time::timeout(idle, stream.write_all(bytes)).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(WriteError::Io(e)),
        Err(_) => Err(WriteError::Stalled),
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::DuplexStream;

    use super::*;

    const IDLE: Duration = Duration::from_secs(10);

    /// `n` bytes no two neighbours of which are alike.
    fn bytes(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 7 % 251) as u8).collect()
    }

    /// Frames read from an in-memory stream, and its peer.
    fn in_memory() -> (FrameReader<DuplexStream>, DuplexStream) {
        let (ours, theirs) = tokio::io::duplex(1 << 20);
        (FrameReader::new(ours), theirs)
    }

    #[tokio::test]
    async fn a_pass_between_streams_that_are_not_plain_sockets_copies_through_the_chunk() {
        let (mut from, mut sender) = in_memory();
        let (mut to, mut receiver) = tokio::io::duplex(1 << 20);
        let sent = bytes(300_000);
        let expected = sent.clone();
        let sending = tokio::spawn(async move { sender.write_all(&sent).await.map(|()| sender) });
        let mut chunk = Vec::new();
        let passed = from.pass(expected.len(), Some(&mut to), &mut chunk, IDLE);
        let mut got = vec![0; expected.len()];
        let (passed, read) = tokio::join!(passed, receiver.read_exact(&mut got));
        assert!(passed.is_ok());
        read.unwrap();
        assert!(got == expected, "the bytes changed on the way");
        assert!(
            chunk.capacity() >= PASS_CHUNK,
            "no socket to splice between: copied through the chunk"
        );
        drop(sending.await.unwrap().unwrap());
    }

    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn a_pass_between_plain_sockets_is_spliced_and_copies_nothing() {
        use super::super::sides::{loopback_pair, Side};

        let (mut sender, near) = loopback_pair().await;
        let (far, mut receiver) = loopback_pair().await;
        let (read, _w) = Side::Tcp(near).split();
        let (_r, mut write) = Side::Tcp(far).split();
        let mut from = FrameReader::new(read);
        let sent = bytes(1 << 20);
        let expected = sent.clone();
        let sending = tokio::spawn(async move { sender.write_all(&sent).await.map(|()| sender) });
        let receiving = tokio::spawn(async move {
            let mut got = vec![0; 1 << 20];
            receiver.read_exact(&mut got).await.map(|_| got)
        });
        let mut chunk = Vec::new();
        let passed = from.pass(1 << 20, Some(&mut write), &mut chunk, IDLE).await;
        assert!(passed.is_ok());
        assert!(
            receiving.await.unwrap().unwrap() == expected,
            "the bytes changed on the way"
        );
        assert_eq!(chunk.capacity(), 0, "spliced: the chunk was never needed");
        drop(sending.await.unwrap().unwrap());
    }

    #[tokio::test]
    async fn a_frame_drained_leaves_the_next_one_whole() {
        let (mut from, mut sender) = in_memory();
        let next = [&7u32.to_be_bytes()[..], b"kquota!"].concat();
        sender.write_all(&bytes(100_000)).await.unwrap();
        sender.write_all(&next).await.unwrap();
        let mut chunk = Vec::new();
        let drained = from
            .pass::<DuplexStream>(100_000, None, &mut chunk, IDLE)
            .await;
        assert!(drained.is_ok());
        assert!(from.fill_prefix().await.unwrap());
        let prefix = from.take_prefix();
        let Ok(frame) = from.body(prefix, 7, IDLE).await else {
            panic!("the next frame does not read");
        };
        assert_eq!(&frame[..], &next[..]);
    }

    #[tokio::test]
    async fn a_size_prefix_that_comes_in_pieces_is_kept_across_cancelled_reads() {
        let (mut from, mut sender) = in_memory();
        sender.write_all(&[0, 0]).await.unwrap();
        let short = Duration::from_millis(50);
        assert!(
            tokio::time::timeout(short, from.fill_prefix())
                .await
                .is_err(),
            "half a prefix is not a prefix"
        );
        assert!(from.started() && !from.has_prefix());
        sender.write_all(&[1, 2]).await.unwrap();
        assert!(from.fill_prefix().await.unwrap());
        assert_eq!(from.take_prefix(), [0, 0, 1, 2]);
        assert!(!from.started(), "ready for the next frame");
    }

    #[tokio::test]
    async fn a_peer_that_closes_within_a_frame_truncates_it_and_one_that_sends_nothing_stalls_it() {
        let (mut from, mut sender) = in_memory();
        sender.write_all(&[1, 2, 3]).await.unwrap();
        let short = Duration::from_millis(100);
        let stalled = from.body(10u32.to_be_bytes(), 10, short).await;
        assert!(matches!(stalled, Err(BodyError::Stalled)));
        let (mut from, mut sender) = in_memory();
        sender.write_all(&[1, 2, 3]).await.unwrap();
        drop(sender);
        let truncated = from.body(10u32.to_be_bytes(), 10, IDLE).await;
        assert!(matches!(truncated, Err(BodyError::Truncated)));
        let (mut from, mut sender) = in_memory();
        sender.write_all(&[1, 2, 3]).await.unwrap();
        drop(sender);
        let mut chunk = Vec::new();
        let passed = from.pass::<DuplexStream>(10, None, &mut chunk, IDLE).await;
        assert!(matches!(passed, Err(PassError::From(BodyError::Truncated))));
    }

    #[tokio::test]
    async fn a_peer_that_takes_nothing_stalls_a_write_and_a_pass() {
        // Room for 16 bytes, and nobody reading them.
        let (mut to, _receiver) = tokio::io::duplex(16);
        let short = Duration::from_millis(100);
        let written = write_frame(&mut to, &bytes(1_000), short).await;
        assert!(matches!(written, Err(WriteError::Stalled)));
        let (mut from, mut sender) = in_memory();
        sender.write_all(&bytes(1_000)).await.unwrap();
        let (mut to, _receiver) = tokio::io::duplex(16);
        let mut chunk = Vec::new();
        let passed = from.pass(1_000, Some(&mut to), &mut chunk, short).await;
        assert!(matches!(passed, Err(PassError::To(WriteError::Stalled))));
    }
}
