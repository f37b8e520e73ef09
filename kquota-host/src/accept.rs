//! Accepting connections: each takes a slot first ([`Slots`]), the soft descriptor limit is raised
//! at start, and accept errors are logged at most once a second, a connection giving way when the
//! process is out of descriptors.

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::net::{TcpListener, TcpStream};
use tracing::warn;

use crate::slots::{Full, Slot, Slots};

/// What [`accept`] gave.
pub enum Accepted {
    /// A connection, and its slot (held for as long as it is open).
    Connection(TcpStream, SocketAddr, Slot),
    /// A connection refused at a limit (logged, and closed).
    Refused(SocketAddr, Full),
}

/// The next connection on `tcp` (named `listener` in the log): a slot is taken for it, making
/// room if the server is full and a connection can give way; or it is refused with a warning
/// naming the peer. Accept errors are retried after a short wait (logged at most once a second),
/// and when the process is out of descriptors a connection that gives way is told to close.
pub async fn accept(
    tcp: &TcpListener,
    slots: &Arc<Slots>,
    errors: &mut AcceptErrors,
    listener: &(dyn fmt::Display + Sync),
) -> Accepted {
    loop {
        match tcp.accept().await {
            Ok((stream, peer)) => {
                return match slots.take(peer) {
                    Ok(slot) => Accepted::Connection(stream, peer, slot),
                    Err(why) => {
                        warn!(%peer, "closing connection: {why}");
                        Accepted::Refused(peer, why)
                    }
                }
            }
            Err(e) => {
                if errors.failed(&e, listener) {
                    slots.make_room();
                }
                tokio::time::sleep(AcceptErrors::backoff()).await;
            }
        }
    }
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit (a common default soft limit, 1,024, is
/// reached by a thousand idle sockets), and returns the soft limit now in force; `None` where the
/// platform has no such limit or it cannot be read.
pub fn raise_fd_limit() -> Option<u64> {
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(limit) => Some(limit),
        Err(e) => {
            warn!("cannot raise the open-files limit: {e}");
            fd_limit()
        }
    }
}

/// The soft `RLIMIT_NOFILE` in force; `None` where it cannot be read.
pub fn fd_limit() -> Option<u64> {
    rlimit::getrlimit(rlimit::Resource::NOFILE)
        .ok()
        .map(|(soft, _)| soft)
}

/// Whether an accept error means the process (EMFILE) or the system (ENFILE) is out of
/// descriptors.
pub(crate) fn out_of_descriptors(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(23 | 24))
}

/// Accept errors carry no peer for the log's per-peer limit: they are written at most once a
/// second, with the count of those held back.
#[derive(Debug, Default)]
pub struct AcceptErrors {
    last: Option<Instant>,
    held_back: u64,
}

impl AcceptErrors {
    /// Logs `e` if a second has passed since the last line; says whether the process is out of
    /// descriptors (the caller then makes room by closing a connection that gives way).
    pub fn failed(&mut self, e: &io::Error, listener: &(dyn fmt::Display + Sync)) -> bool {
        if let Some(held_back) = self.line() {
            match held_back {
                0 => warn!(%listener, "accept failed: {e}"),
                n => warn!(%listener, "accept failed: {e} ({n} more in the last second)"),
            }
        }
        out_of_descriptors(e)
    }

    /// How long to wait before the next accept after a failure: long enough that a process out
    /// of descriptors does not spin, short enough that a freed one is soon used.
    pub fn backoff() -> Duration {
        Duration::from_millis(10)
    }

    fn line(&mut self) -> Option<u64> {
        let now = Instant::now();
        if self
            .last
            .is_some_and(|t| now.duration_since(t) < Duration::from_secs(1))
        {
            self.held_back += 1;
            return None;
        }
        self.last = Some(now);
        Some(std::mem::take(&mut self.held_back))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_a_second_with_the_count_held_back() {
        let mut t = AcceptErrors::default();
        assert_eq!(t.line(), Some(0));
        for _ in 0..99 {
            assert_eq!(t.line(), None);
        }
        t.last = Some(Instant::now() - Duration::from_secs(2));
        assert_eq!(t.line(), Some(99));
        assert_eq!(t.line(), None);
    }

    #[test]
    fn the_soft_limit_is_raised_to_the_hard_one() {
        let (_, hard) = rlimit::getrlimit(rlimit::Resource::NOFILE).unwrap();
        let soft = raise_fd_limit().unwrap();
        assert!(soft >= 1024.min(hard), "soft {soft}, hard {hard}");
        let (now, _) = rlimit::getrlimit(rlimit::Resource::NOFILE).unwrap();
        assert_eq!(now, soft);
    }

    #[test]
    fn emfile_and_enfile_are_out_of_descriptors() {
        assert!(out_of_descriptors(&io::Error::from_raw_os_error(24)));
        assert!(out_of_descriptors(&io::Error::from_raw_os_error(23)));
        assert!(!out_of_descriptors(&io::Error::from_raw_os_error(104)));
    }
}
