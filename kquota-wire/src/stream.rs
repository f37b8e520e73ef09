//! Answers made as they are written: [`ResponseStream`] knows its length before its first byte and
//! makes its bytes piece by piece (one entry, one topic), so an answer with millions of entries is
//! never whole in memory. [`Handler::handle_streaming`](crate::Handler::handle_streaming) returns one
//! for the answers that grow with the request: a refused AlterClientQuotas or AlterQuotas (every
//! entry as sent) and a Metadata request that names topics.

use std::fmt;

use crate::outcome::Outcome;

/// What to do with one request, from [`Handler::handle_streaming`](crate::Handler::handle_streaming).
#[derive(Debug)]
pub enum Reply {
    /// What [`Handler::handle`](crate::Handler::handle) returns.
    Outcome(Outcome),
    /// Write this response: its length as a big-endian `i32`, then its bytes as
    /// [`ResponseStream::fill`] makes them.
    Stream(ResponseStream),
}

/// Makes one piece of a streamed answer.
pub(crate) trait Pieces: Send {
    /// Appends the next piece to `out`; false (and nothing appended) when there is none left.
    fn next_piece(&mut self, out: &mut Vec<u8>) -> bool;
}

/// A response (header and body, without the 4-byte size prefix) made as it is written.
pub struct ResponseStream {
    len: usize,
    head: Vec<u8>,
    pieces: Box<dyn Pieces>,
    tail: Vec<u8>,
    stage: Stage,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Stage {
    Head,
    Pieces,
    Tail,
    Done,
}

impl ResponseStream {
    /// `head`, then every piece, then `tail`. The length is counted now by making every piece once
    /// (into a scratch buffer the size of one piece), so `pieces_for_count` must make exactly what
    /// `pieces` will.
    pub(crate) fn new(
        head: Vec<u8>,
        mut pieces_for_count: Box<dyn Pieces>,
        pieces: Box<dyn Pieces>,
        tail: Vec<u8>,
    ) -> ResponseStream {
        let mut len = head.len() + tail.len();
        let mut scratch = Vec::new();
        while pieces_for_count.next_piece(&mut scratch) {
            len += scratch.len();
            scratch.clear();
        }
        ResponseStream {
            len,
            head,
            pieces,
            tail,
            stage: Stage::Head,
        }
    }

    /// The response's length in bytes (what the size prefix says).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the response is empty (it never is: it holds at least a correlation id).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Appends the next bytes of the response to `out`, stopping once `out` holds at least `max`
    /// bytes (a piece is never split, so it may hold a little more). Returns false once the whole
    /// response has been appended.
    pub fn fill(&mut self, out: &mut Vec<u8>, max: usize) -> bool {
        loop {
            if out.len() >= max && self.stage != Stage::Done {
                return true;
            }
            match self.stage {
                Stage::Head => {
                    out.extend_from_slice(&self.head);
                    self.head = Vec::new();
                    self.stage = Stage::Pieces;
                }
                Stage::Pieces => {
                    if !self.pieces.next_piece(out) {
                        self.stage = Stage::Tail;
                    }
                }
                Stage::Tail => {
                    out.extend_from_slice(&self.tail);
                    self.stage = Stage::Done;
                }
                Stage::Done => return false,
            }
        }
    }

    /// The whole response at once.
    pub fn into_bytes(mut self) -> bytes::BytesMut {
        let mut out = Vec::with_capacity(self.len);
        while self.fill(&mut out, usize::MAX) {}
        bytes::BytesMut::from(&out[..])
    }
}

impl fmt::Debug for ResponseStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseStream")
            .field("len", &self.len)
            .finish_non_exhaustive()
    }
}
