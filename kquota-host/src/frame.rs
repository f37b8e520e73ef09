//! Reading one Kafka frame's bytes from a peer: the buffer grows as the bytes arrive, so memory
//! follows what was sent, not what was announced, and (when asked) a large frame's rest goes into
//! an anonymous map whose pages go back to the system the moment the frame is dropped.
//!
//! The caller has checked the size against its limits and reserved it from the [`Budget`]
//! first, and bounds the read in time (a peer that stalls mid-frame is an idle peer).
//!
//! [`Budget`]: crate::Budget

use std::io;
use std::ops::{Deref, DerefMut};

use bytes::Bytes;
use memmap2::MmapMut;
use tokio::io::{AsyncRead, AsyncReadExt};

/// A frame's buffer starts this large (or at its size, if smaller) and doubles as its bytes
/// arrive.
pub const FIRST_CHUNK: usize = 64 * 1024;

/// One frame's bytes.
#[derive(Debug)]
pub enum Frame {
    /// On the heap.
    Heap(Vec<u8>),
    /// In an anonymous map, of which the first `len` bytes are the frame.
    Mapped(MmapMut, usize),
}

impl Frame {
    /// The frame's bytes, shared without a copy.
    pub fn into_bytes(self) -> Bytes {
        match self {
            Frame::Heap(v) => Bytes::from(v),
            Frame::Mapped(map, len) => Bytes::from_owner(map).slice(..len),
        }
    }
}

impl From<Vec<u8>> for Frame {
    fn from(v: Vec<u8>) -> Frame {
        Frame::Heap(v)
    }
}

impl Deref for Frame {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            Frame::Heap(v) => v,
            Frame::Mapped(map, len) => &map[..*len],
        }
    }
}

impl DerefMut for Frame {
    fn deref_mut(&mut self) -> &mut [u8] {
        match self {
            Frame::Heap(v) => v,
            Frame::Mapped(map, len) => &mut map[..*len],
        }
    }
}

/// Reads `size` bytes from `stream` into a frame that starts with `head` (bytes the caller has
/// already read and wants kept, such as the size prefix a proxy forwards; empty for none). Once
/// `map_after` bytes are in (`None`: never), the rest goes into an anonymous map of the whole
/// frame. A peer that closes before the frame is whole is `UnexpectedEof`; a map that cannot be
/// made is `OutOfMemory`.
pub async fn read_frame<R: AsyncRead + Unpin>(
    stream: &mut R,
    head: &[u8],
    size: usize,
    map_after: Option<usize>,
) -> io::Result<Frame> {
    let total = head.len() + size;
    let mut heap: Vec<u8> = Vec::with_capacity(total.min(FIRST_CHUNK.max(head.len())));
    heap.extend_from_slice(head);
    loop {
        if heap.len() == total {
            return Ok(Frame::Heap(heap));
        }
        if heap.len() == heap.capacity() {
            if map_after.is_some_and(|after| heap.capacity() >= after) {
                return read_mapped(stream, heap, total).await;
            }
            let target = heap.capacity().saturating_mul(2).clamp(FIRST_CHUNK, total);
            heap.try_reserve_exact(target - heap.len())
                .map_err(|_| io::Error::from(io::ErrorKind::OutOfMemory))?;
        }
        let room = heap.capacity().min(total) - heap.len();
        let n = (&mut *stream).take(room as u64).read_buf(&mut heap).await?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
    }
}

/// The rest of a frame of `total` bytes, of which `heap` holds the first, read into a map.
async fn read_mapped<R: AsyncRead + Unpin>(
    stream: &mut R,
    heap: Vec<u8>,
    total: usize,
) -> io::Result<Frame> {
    let mut map = MmapMut::map_anon(total)?;
    map[..heap.len()].copy_from_slice(&heap);
    let mut filled = heap.len();
    drop(heap);
    while filled < total {
        let n = stream.read(&mut map[filled..total]).await?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        filled += n;
    }
    Ok(Frame::Mapped(map, total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_frame_grows_as_its_bytes_arrive_and_keeps_its_head() {
        let body: Vec<u8> = (0..200_000u32).map(|i| i as u8).collect();
        let mut stream = &body[..];
        let frame = read_frame(&mut stream, b"head", body.len(), None)
            .await
            .unwrap();
        assert!(matches!(frame, Frame::Heap(_)));
        assert_eq!(&frame[..4], b"head");
        assert_eq!(&frame[4..], &body[..]);
        let mut stream = &body[..];
        let mapped = read_frame(&mut stream, &[], body.len(), Some(FIRST_CHUNK))
            .await
            .unwrap();
        assert!(matches!(mapped, Frame::Mapped(..)));
        assert_eq!(&mapped.into_bytes()[..], &body[..]);
    }

    #[tokio::test]
    async fn a_frame_cut_short_is_unexpected_eof_and_announcing_costs_nothing() {
        let mut stream: &[u8] = b"only a few bytes";
        // 1 GiB announced, 16 bytes sent: the buffer never grew past its first chunk.
        let e = read_frame(&mut stream, &[], 1 << 30, None)
            .await
            .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
        let mut stream: &[u8] = b"";
        let empty = read_frame(&mut stream, &[1, 2], 0, None).await.unwrap();
        assert_eq!(&empty[..], &[1, 2]);
    }
}
