//! Either side of a connection (the client's, the broker's) as a read half and a write half: a
//! plain TCP socket split without a lock, or TLS over one split through tokio's. A half says
//! whether a bare TCP socket is under it ([`Socket::tcp`]): bytes passed on unchanged between two
//! of those need not pass through the proxy's memory at all (see [`super::splice`]).

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf, ReadHalf, WriteHalf};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;

/// A TLS stream over TCP, towards the client or the broker.
pub(super) trait Tls: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Tls for T {}

/// One side of a connection, whole.
pub(super) enum Side {
    /// A plain TCP socket.
    Tcp(TcpStream),
    /// TLS over TCP.
    Tls(Box<dyn Tls>),
}

impl Side {
    /// The side's two halves, used at once by the request and the answer side of the
    /// connection. The socket closes once both are dropped.
    pub(super) fn split(self) -> (ReadSide, WriteSide) {
        match self {
            Side::Tcp(tcp) => {
                let (r, w) = tcp.into_split();
                (ReadSide::Tcp(r), WriteSide::Tcp(Some(w)))
            }
            Side::Tls(tls) => {
                let (r, w) = tokio::io::split(tls);
                (ReadSide::Tls(r), WriteSide::Tls(w))
            }
        }
    }
}

/// The TCP socket under a half, if the bytes read from or written to it are the socket's own
/// (no TLS, no buffer between).
pub(super) trait Socket {
    /// The socket, or `None` where something stands between.
    fn tcp(&self) -> Option<&TcpStream> {
        None
    }
}

/// The read half of a [`Side`].
pub(super) enum ReadSide {
    /// A plain socket's.
    Tcp(OwnedReadHalf),
    /// A TLS stream's.
    Tls(ReadHalf<Box<dyn Tls>>),
}

/// The write half of a [`Side`].
pub(super) enum WriteSide {
    /// A plain socket's: always `Some` but in `drop`.
    Tcp(Option<OwnedWriteHalf>),
    /// A TLS stream's.
    Tls(WriteHalf<Box<dyn Tls>>),
}

impl Socket for ReadSide {
    fn tcp(&self) -> Option<&TcpStream> {
        match self {
            ReadSide::Tcp(r) => Some(r.as_ref()),
            ReadSide::Tls(_) => None,
        }
    }
}

impl Socket for WriteSide {
    fn tcp(&self) -> Option<&TcpStream> {
        match self {
            WriteSide::Tcp(w) => w.as_ref().map(AsRef::as_ref),
            WriteSide::Tls(_) => None,
        }
    }
}

// In memory, for the fuzz targets and the tests.
impl Socket for &[u8] {}
impl Socket for Vec<u8> {}

impl Drop for WriteSide {
    fn drop(&mut self) {
        // tokio's write half shuts the socket's sending side down when dropped; the request side
        // drops it while answers may still be owed, and a broker that reads the end of the
        // stream closes at once. Like the TLS half, it closes only with the read half.
        if let WriteSide::Tcp(w) = self {
            if let Some(w) = w.take() {
                w.forget();
            }
        }
    }
}

impl AsyncRead for ReadSide {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ReadSide::Tcp(r) => Pin::new(r).poll_read(cx, buf),
            ReadSide::Tls(r) => Pin::new(r).poll_read(cx, buf),
        }
    }
}

impl WriteSide {
    /// The half as a writer.
    fn writer(&mut self) -> Pin<&mut (dyn AsyncWrite + Send + Unpin)> {
        match self {
            WriteSide::Tcp(Some(w)) => Pin::new(w),
            WriteSide::Tls(w) => Pin::new(w),
            WriteSide::Tcp(None) => unreachable!("the write half is taken only when dropped"),
        }
    }
}

impl AsyncWrite for WriteSide {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.get_mut().writer().poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.get_mut().writer().poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            WriteSide::Tcp(Some(w)) => w.is_write_vectored(),
            WriteSide::Tcp(None) => false,
            WriteSide::Tls(w) => w.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_mut().writer().poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_mut().writer().poll_shutdown(cx)
    }
}

/// Two connected loopback sockets, for the tests.
#[cfg(test)]
pub(super) async fn loopback_pair() -> (TcpStream, TcpStream) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let near = TcpStream::connect(listener.local_addr().unwrap())
        .await
        .unwrap();
    let (far, _) = listener.accept().await.unwrap();
    (near, far)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::io::AsyncReadExt;

    use super::*;

    #[tokio::test]
    async fn a_plain_socket_closes_with_both_halves_not_with_the_write_half() {
        let (mut peer, ours) = loopback_pair().await;
        let (read, write) = Side::Tcp(ours).split();
        // The request side drops its half while answers are owed: the peer must not see the end.
        drop(write);
        let mut byte = [0u8; 1];
        let early = tokio::time::timeout(Duration::from_millis(200), peer.read(&mut byte)).await;
        assert!(
            early.is_err(),
            "the peer saw {early:?} with the read half still open"
        );
        drop(read);
        let late = tokio::time::timeout(Duration::from_secs(5), peer.read(&mut byte)).await;
        assert!(
            matches!(late, Ok(Ok(0))),
            "the peer did not see the end: {late:?}"
        );
    }
}
