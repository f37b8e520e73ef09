//! Edits the proxy targets make to well-formed sample frames, so that what libFuzzer varies lands
//! inside messages deep enough to reach every field the proxy reads (raw bytes alone rarely get
//! past a Metadata answer's first array).

use arbitrary::Arbitrary;

/// One change to a frame, at a place taken modulo its length.
#[derive(Arbitrary, Debug)]
pub enum Edit {
    /// The largest count an `i32` carries (2^31 - 1).
    HugeCount(u16),
    /// The largest count a compact array carries (a five-byte varint, 2^32 - 2).
    HugeCompactCount(u16),
    /// A null length: -1 as an `i16` or `i32`, 0 as a varint.
    Null(u16, u8),
    /// One byte.
    Set(u16, u8),
    /// Bytes written over the frame's.
    Overwrite(u16, Vec<u8>),
    /// Bytes inserted.
    Insert(u16, Vec<u8>),
    /// Bytes removed.
    Remove(u16, u8),
    /// The frame cut short.
    Truncate(u16),
}

fn at(place: u16, len: usize) -> usize {
    usize::from(place) % (len + 1)
}

fn overwrite(frame: &mut Vec<u8>, place: u16, bytes: &[u8]) {
    let from = at(place, frame.len());
    let end = (from + bytes.len()).min(frame.len());
    frame[from..end].copy_from_slice(&bytes[..end - from]);
}

/// `frame` with `edits` made, in order (at most 8).
pub fn apply(frame: &mut Vec<u8>, edits: &[Edit]) {
    for edit in edits.iter().take(8) {
        match edit {
            Edit::HugeCount(p) => overwrite(frame, *p, &[0x7f, 0xff, 0xff, 0xff]),
            Edit::HugeCompactCount(p) => overwrite(frame, *p, &[0xff, 0xff, 0xff, 0xff, 0x07]),
            Edit::Null(p, width) => match width % 3 {
                0 => overwrite(frame, *p, &[0xff, 0xff]),
                1 => overwrite(frame, *p, &[0xff, 0xff, 0xff, 0xff]),
                _ => overwrite(frame, *p, &[0]),
            },
            Edit::Set(p, b) => overwrite(frame, *p, &[*b]),
            Edit::Overwrite(p, bytes) => overwrite(frame, *p, bytes),
            Edit::Insert(p, bytes) => {
                let from = at(*p, frame.len());
                frame.splice(from..from, bytes.iter().copied());
            }
            Edit::Remove(p, n) => {
                let from = at(*p, frame.len());
                let end = (from + usize::from(*n)).min(frame.len());
                frame.drain(from..end);
            }
            Edit::Truncate(p) => frame.truncate(at(*p, frame.len())),
        }
    }
}
