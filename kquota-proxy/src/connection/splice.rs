//! Bytes passed on unchanged from one plain TCP socket to another go through a pipe with
//! splice(2): the kernel hands the pages of the one socket's buffer to the other, and the proxy
//! neither copies them nor holds them. On this host's loopback that halves what a hop adds to a
//! 1 MiB Fetch against copying through a buffer (docs/benchmarks.md).
//!
//! A pipe costs two descriptors while it is lent out, so at most [`MAX_PIPES`] are open in the
//! process (the proxy keeps descriptors for them beside its connections'); a pass that finds none
//! free copies through its buffer as before. A pipe goes back to the spares only empty: one left
//! holding bytes by a failed pass is closed.

use std::io;
use std::os::fd::OwnedFd;
use std::pin::Pin;
use std::time::Duration;

use parking_lot::Mutex;
use rustix::pipe::{pipe_with, splice, PipeFlags, SpliceFlags};
use tokio::io::Interest;
use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep};

/// The most pipes open at once in the process; each holds two descriptors.
pub(crate) const MAX_PIPES: usize = 32;

/// The process's pipes.
pub(super) static PIPES: Pipes = Pipes::new(MAX_PIPES);

/// The most one splice moves: a pipe's default capacity (16 pages).
const MOST: usize = 64 * 1024;

/// Pipes to lend to passes, at most `most` open at once.
pub(super) struct Pipes {
    state: Mutex<PipesState>,
}

struct PipesState {
    /// Not lent out, kept for the next pass.
    spare: Vec<Pipe>,
    /// Open, lent out or spare.
    open: usize,
    most: usize,
}

/// A pipe's two ends.
struct Pipe {
    read: OwnedFd,
    write: OwnedFd,
}

impl Pipes {
    /// No pipe open yet, at most `most` at once.
    const fn new(most: usize) -> Pipes {
        Pipes {
            state: parking_lot::const_mutex(PipesState {
                spare: Vec::new(),
                open: 0,
                most,
            }),
        }
    }

    /// A pipe, spare or new; `None` when the most are lent out or no pipe can be opened.
    pub(super) fn take(&self) -> Option<Lent<'_>> {
        let mut state = self.state.lock();
        let pipe = match state.spare.pop() {
            Some(pipe) => pipe,
            None if state.open < state.most => {
                let (read, write) = pipe_with(PipeFlags::CLOEXEC | PipeFlags::NONBLOCK).ok()?;
                state.open += 1;
                Pipe { read, write }
            }
            None => return None,
        };
        Some(Lent {
            pipes: self,
            pipe: Some(pipe),
            held: 0,
        })
    }
}

/// A pipe lent to one pass, and the bytes in it not yet passed on.
pub(super) struct Lent<'a> {
    pipes: &'a Pipes,
    pipe: Option<Pipe>,
    held: usize,
}

impl Drop for Lent<'_> {
    fn drop(&mut self) {
        let Some(pipe) = self.pipe.take() else { return };
        let mut state = self.pipes.state.lock();
        if self.held == 0 {
            state.spare.push(pipe);
        } else {
            // Bytes of a frame that was not passed on whole: never to be mixed into another.
            drop(pipe);
            state.open -= 1;
        }
    }
}

/// Why a pass stopped before its last byte.
#[derive(Debug)]
pub(super) enum Stopped {
    /// The sending peer closed within the bytes.
    Truncated,
    /// The sending peer sent nothing for the idle time.
    ReadStalled,
    /// Reading failed.
    Read(io::Error),
    /// The receiving peer took nothing for the idle time.
    WriteStalled,
    /// Writing failed.
    Write(io::Error),
}

/// Passes the next `n` bytes from `from` to `to` through `lent`, as they arrive. Each side may
/// make no progress for at most `idle`, measured by `stall` (pushed back at each step that moves
/// bytes): a peer that stops reading stalls this side's reads too.
pub(super) async fn pass(
    from: &TcpStream,
    to: &TcpStream,
    mut n: usize,
    lent: &mut Lent<'_>,
    mut stall: Pin<&mut Sleep>,
    idle: Duration,
) -> Result<(), Stopped> {
    // `None` only once dropped; never a pass that claims bytes it did not move.
    let Some(pipe) = &lent.pipe else {
        return Err(Stopped::Read(io::Error::other("the pipe was given back")));
    };
    let flags = SpliceFlags::MOVE | SpliceFlags::NONBLOCK;
    while n > 0 || lent.held > 0 {
        if lent.held == 0 {
            // The pipe is empty, so it has room: a splice that would block means the socket has
            // nothing to read (and only then may its readiness be cleared).
            let want = n.min(MOST);
            let fill = || splice(from, None, &pipe.write, None, want, flags);
            let moved = tokio::select! {
                r = when_ready(from, Interest::READABLE, fill) => r,
                () = &mut stall => return Err(Stopped::ReadStalled),
            };
            match moved {
                Ok(0) => return Err(Stopped::Truncated),
                Ok(k) => {
                    n -= k;
                    lent.held = k;
                }
                Err(e) => return Err(Stopped::Read(e)),
            }
        } else {
            // The pipe holds bytes: a splice that would block means the socket's send buffer is
            // full.
            let held = lent.held;
            let drain = || splice(&pipe.read, None, to, None, held, flags);
            let moved = tokio::select! {
                r = when_ready(to, Interest::WRITABLE, drain) => r,
                () = &mut stall => return Err(Stopped::WriteStalled),
            };
            match moved {
                Ok(k) => lent.held -= k,
                Err(e) => return Err(Stopped::Write(e)),
            }
        }
        stall.as_mut().reset(Instant::now() + idle);
    }
    Ok(())
}

/// `op` once `socket` is ready for `interest`, again while it would block.
async fn when_ready(
    socket: &TcpStream,
    interest: Interest,
    mut op: impl FnMut() -> rustix::io::Result<usize>,
) -> io::Result<usize> {
    loop {
        socket.ready(interest).await?;
        match socket.try_io(interest, || op().map_err(io::Error::from)) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            r => return r,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::pin::pin;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::super::sides::loopback_pair;
    use super::*;

    fn counts(pipes: &Pipes) -> (usize, usize) {
        let state = pipes.state.lock();
        (state.open, state.spare.len())
    }

    #[tokio::test]
    async fn bytes_go_through_unchanged_and_the_pipe_is_kept_for_the_next_pass() {
        let (mut sender, from) = loopback_pair().await;
        let (to, mut receiver) = loopback_pair().await;
        let bytes: Vec<u8> = (0..3 << 20).map(|i: u32| (i * 7 % 251) as u8).collect();
        let expected = bytes.clone();
        let sent = tokio::spawn(async move {
            sender.write_all(&bytes).await.unwrap();
            sender
        });
        let received = tokio::spawn(async move {
            let mut got = vec![0; expected.len()];
            receiver.read_exact(&mut got).await.unwrap();
            assert!(got == expected, "the bytes changed on the way");
        });
        let pipes = Pipes::new(2);
        let mut lent = pipes.take().expect("a pipe");
        let idle = Duration::from_secs(10);
        let stall = pin!(tokio::time::sleep(idle));
        // Two frames through the same pipe, cut where the sender's writes are not.
        let first = (1 << 20) + 12_345;
        assert!(pass(&from, &to, first, &mut lent, stall, idle)
            .await
            .is_ok());
        assert_eq!(lent.held, 0);
        let stall = pin!(tokio::time::sleep(idle));
        let second = (3 << 20) - first;
        assert!(pass(&from, &to, second, &mut lent, stall, idle)
            .await
            .is_ok());
        received.await.unwrap();
        drop(sent.await.unwrap());
        drop(lent);
        assert_eq!(counts(&pipes), (1, 1), "an empty pipe is kept");
        let again = pipes.take().expect("the spare");
        assert_eq!(
            counts(&pipes),
            (1, 0),
            "the spare is lent again, not a new one"
        );
        drop(again);
    }

    #[tokio::test]
    async fn a_receiver_that_stops_reading_stalls_the_pass_and_its_bytes_are_never_reused() {
        let (mut sender, from) = loopback_pair().await;
        let (to, _receiver) = loopback_pair().await;
        let bytes = vec![1u8; 16 << 20];
        let _sent = tokio::spawn(async move {
            let _ = sender.write_all(&bytes).await;
            sender
        });
        let pipes = Pipes::new(2);
        let mut lent = pipes.take().expect("a pipe");
        let idle = Duration::from_millis(300);
        let stall = pin!(tokio::time::sleep(idle));
        let r = pass(&from, &to, 16 << 20, &mut lent, stall, idle).await;
        assert!(matches!(r, Err(Stopped::WriteStalled)));
        assert!(
            lent.held > 0,
            "the pipe holds what the receiver did not take"
        );
        drop(lent);
        assert_eq!(
            counts(&pipes),
            (0, 0),
            "a pipe left holding bytes is closed"
        );
    }

    #[tokio::test]
    async fn a_sender_that_closes_within_the_frame_truncates_it() {
        let (mut sender, from) = loopback_pair().await;
        let (to, _receiver) = loopback_pair().await;
        sender.write_all(&[9u8; 1000]).await.unwrap();
        drop(sender);
        let pipes = Pipes::new(2);
        let mut lent = pipes.take().expect("a pipe");
        let idle = Duration::from_secs(10);
        let stall = pin!(tokio::time::sleep(idle));
        let r = pass(&from, &to, 5000, &mut lent, stall, idle).await;
        assert!(matches!(r, Err(Stopped::Truncated)));
    }

    #[tokio::test]
    async fn a_sender_that_sends_nothing_stalls_the_pass() {
        let (_sender, from) = loopback_pair().await;
        let (to, _receiver) = loopback_pair().await;
        let pipes = Pipes::new(2);
        let mut lent = pipes.take().expect("a pipe");
        let idle = Duration::from_millis(200);
        let stall = pin!(tokio::time::sleep(idle));
        let r = pass(&from, &to, 10, &mut lent, stall, idle).await;
        assert!(matches!(r, Err(Stopped::ReadStalled)));
    }

    #[test]
    fn no_more_than_the_most_pipes_are_open() {
        let pipes = Pipes::new(3);
        let held: Vec<_> = std::iter::from_fn(|| pipes.take()).take(10).collect();
        assert_eq!(held.len(), 3);
        assert_eq!(counts(&pipes), (3, 0));
        drop(held);
        assert_eq!(counts(&pipes), (3, 3));
        assert!(pipes.take().is_some(), "a spare is lent once one is back");
    }
}
