//! A read buffer held only while it holds bytes. A side of a connection reads through a small
//! buffer, so that a frame's size, header and small body come in one system call; but most
//! connections are silent most of the time, and a buffer each while they wait would be most of
//! what an idle connection costs. So the buffer is taken from a spare list of its network thread
//! once a plain socket is readable, and goes back as soon as everything in it has been consumed.
//! (A TLS side keeps one while it waits: its reads go through the TLS layer, which buffers
//! anyway.)

use std::cell::RefCell;
use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncBufRead, AsyncRead, ReadBuf};

use super::sides::Socket;

/// The size of each read buffer.
const READ_BUFFER: usize = 8 * 1024;

/// Spare buffers kept per thread, beyond which a returned one is freed.
const SPARE_PER_THREAD: usize = 64;

thread_local! {
    static SPARE: RefCell<Vec<Box<[u8]>>> = const { RefCell::new(Vec::new()) };
}

fn take_buffer() -> Box<[u8]> {
    SPARE
        .with_borrow_mut(Vec::pop)
        .unwrap_or_else(|| vec![0; READ_BUFFER].into_boxed_slice())
}

fn give_back(buffer: Box<[u8]>) {
    SPARE.with_borrow_mut(|spare| {
        if spare.len() < SPARE_PER_THREAD {
            spare.push(buffer);
        }
    });
}

/// `inner`, read through a buffer held only while it holds bytes.
pub(super) struct ReadBuffer<R> {
    inner: R,
    buffer: Option<Box<[u8]>>,
    /// The bytes of `buffer` not yet consumed: `buffer[pos..filled]`.
    pos: usize,
    filled: usize,
}

impl<R: AsyncRead + Socket + Unpin> ReadBuffer<R> {
    /// `inner`, with no buffer yet.
    pub(super) fn new(inner: R) -> ReadBuffer<R> {
        ReadBuffer {
            inner,
            buffer: None,
            pos: 0,
            filled: 0,
        }
    }

    /// The bytes read and not yet consumed.
    pub(super) fn buffer(&self) -> &[u8] {
        match &self.buffer {
            Some(b) => &b[self.pos..self.filled],
            None => &[],
        }
    }

    /// The stream read from.
    pub(super) fn get_ref(&self) -> &R {
        &self.inner
    }

    /// The stream read from, to read past the buffer (once [`ReadBuffer::buffer`] is empty).
    pub(super) fn get_mut(&mut self) -> &mut R {
        &mut self.inner
    }

    /// Marks `n` buffered bytes consumed; the buffer goes back once all are.
    fn consumed(&mut self, n: usize) {
        self.pos = (self.pos + n).min(self.filled);
        if self.pos == self.filled {
            self.pos = 0;
            self.filled = 0;
            if let Some(b) = self.buffer.take() {
                give_back(b);
            }
        }
    }

    /// Fills the empty buffer from `inner`, taking one only once a plain socket is readable.
    fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        debug_assert_eq!(self.pos, self.filled);
        if let Some(tcp) = self.inner.tcp() {
            ready!(tcp.poll_read_ready(cx))?;
        }
        let mut buffer = self.buffer.take().unwrap_or_else(take_buffer);
        let mut read = ReadBuf::new(&mut buffer);
        match Pin::new(&mut self.inner).poll_read(cx, &mut read) {
            Poll::Ready(Ok(())) => {
                let n = read.filled().len();
                if n > 0 {
                    self.pos = 0;
                    self.filled = n;
                    self.buffer = Some(buffer);
                } else {
                    give_back(buffer);
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => {
                give_back(buffer);
                Poll::Ready(Err(e))
            }
            Poll::Pending => {
                // Readiness that was stale; the socket's waker is set again.
                if self.inner.tcp().is_some() {
                    give_back(buffer);
                } else {
                    self.buffer = Some(buffer);
                }
                Poll::Pending
            }
        }
    }
}

impl<R: AsyncRead + Socket + Unpin> AsyncRead for ReadBuffer<R> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        // A read at least as large as the buffer goes straight to the stream once it is empty.
        if this.pos == this.filled && out.remaining() >= READ_BUFFER {
            return Pin::new(&mut this.inner).poll_read(cx, out);
        }
        let buffered = ready!(Pin::new(&mut *this).poll_fill_buf(cx))?;
        let n = buffered.len().min(out.remaining());
        out.put_slice(&buffered[..n]);
        this.consumed(n);
        Poll::Ready(Ok(()))
    }
}

impl<R: AsyncRead + Socket + Unpin> AsyncBufRead for ReadBuffer<R> {
    fn poll_fill_buf(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<&[u8]>> {
        let this = self.get_mut();
        if this.pos == this.filled {
            ready!(this.poll_fill(cx))?;
        }
        Poll::Ready(Ok(this.buffer()))
    }

    fn consume(self: Pin<&mut Self>, n: usize) {
        self.get_mut().consumed(n);
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    use super::super::sides::{loopback_pair, ReadSide, Side};
    use super::*;

    async fn socket_pair() -> (TcpStream, ReadSide) {
        let (near, far) = loopback_pair().await;
        let (read, write) = Side::Tcp(far).split();
        drop(write);
        (near, read)
    }

    #[tokio::test]
    async fn a_silent_socket_holds_no_buffer_and_a_consumed_one_is_given_back() {
        let (mut peer, read) = socket_pair().await;
        let mut r = ReadBuffer::new(read);
        let mut four = [0u8; 4];
        // Waiting for bytes holds no buffer.
        let waited = tokio::time::timeout(
            std::time::Duration::from_millis(50),
            r.read_exact(&mut four),
        )
        .await;
        assert!(waited.is_err());
        assert!(r.buffer.is_none(), "a buffer held while nothing came");
        peer.write_all(b"abcdefgh").await.unwrap();
        r.read_exact(&mut four).await.unwrap();
        assert_eq!(&four, b"abcd");
        assert_eq!(r.buffer(), b"efgh", "the rest came in the same read");
        r.read_exact(&mut four).await.unwrap();
        assert_eq!(&four, b"efgh");
        assert!(r.buffer.is_none(), "a consumed buffer is kept");
    }

    #[tokio::test]
    async fn bytes_come_in_order_across_buffered_and_direct_reads() {
        let (mut peer, read) = socket_pair().await;
        let bytes: Vec<u8> = (0..100_000u32).map(|i| (i % 253) as u8).collect();
        let sent = bytes.clone();
        tokio::spawn(async move {
            for piece in sent.chunks(777) {
                peer.write_all(piece).await.unwrap();
            }
        });
        let mut r = ReadBuffer::new(read);
        let mut got = Vec::new();
        let mut sizes = [3usize, 20_000, 1, 9_000, 500].into_iter().cycle();
        while got.len() < bytes.len() {
            let want = sizes.next().unwrap().min(bytes.len() - got.len());
            let mut piece = vec![0; want];
            r.read_exact(&mut piece).await.unwrap();
            got.extend_from_slice(&piece);
        }
        assert!(got == bytes, "the bytes changed order or value");
    }

    #[tokio::test]
    async fn in_memory_bytes_read_through() {
        let bytes: &[u8] = b"0123456789";
        let mut r = ReadBuffer::new(bytes);
        let mut all = Vec::new();
        r.read_to_end(&mut all).await.unwrap();
        assert_eq!(all, bytes);
    }
}
