//! One bound listener and its accept loop: each connection within the limits gets its own task;
//! when the server is full, a connection that has not authenticated (or one idle long) gives way
//! (see [`crate::limits`]).

use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tracing::warn;

use crate::budget::Budget;
use crate::limits::Slots;
use crate::peer::{self, Endpoint};
use crate::settings::ServerConfig;
use crate::shutdown::Shutdown;

/// One bound listener: its socket, and what its connections need.
pub(crate) struct Listener {
    pub(crate) tcp: TcpListener,
    pub(crate) endpoint: Arc<Endpoint>,
}

/// Accepts connections on one listener until the server stops, then waits for them.
pub(crate) async fn accept_loop(
    listener: Listener,
    config: Arc<ServerConfig>,
    slots: Arc<Slots>,
    budget: Budget,
    mut shutdown: Shutdown,
) {
    let mut tasks = tokio::task::JoinSet::new();
    // Accept errors carry no peer for the log's per-peer limit: at most one line a second, with
    // the count of those held back.
    let mut accept_errors = Throttled::default();
    loop {
        tokio::select! {
            () = shutdown.stopping() => break,
            accepted = listener.tcp.accept() => {
                let (stream, peer) = match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        // Out of file descriptors: a connection that has not authenticated gives
                        // way, so that one that will can be accepted.
                        let out_of_files = matches!(e.raw_os_error(), Some(23 | 24));
                        if !(out_of_files && slots.make_room()) {
                            if let Some(held_back) = accept_errors.line() {
                                match held_back {
                                    0 => warn!("accept failed: {e}"),
                                    n => warn!("accept failed: {e} ({n} more in the last second)"),
                                }
                            }
                        }
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    }
                };
                let permit = match slots.take(peer) {
                    Ok(slot) => slot,
                    Err(why) => {
                        warn!(%peer, "closing connection: {why}");
                        continue;
                    }
                };
                let endpoint = Arc::clone(&listener.endpoint);
                let config = Arc::clone(&config);
                let budget = budget.clone();
                let shutdown = shutdown.clone();
                tasks.spawn(async move {
                    peer::serve(stream, peer, &endpoint, &config, budget, shutdown, &permit).await;
                    drop(permit);
                });
            }
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
        }
    }
    while tasks.join_next().await.is_some() {}
}

/// One kind of line, written at most once per second: [`Throttled::line`] says whether to write it
/// now, and how many were held back since the last one.
#[derive(Default)]
struct Throttled {
    last: Option<std::time::Instant>,
    held_back: u64,
}

impl Throttled {
    fn line(&mut self) -> Option<u64> {
        let now = std::time::Instant::now();
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
        let mut t = Throttled::default();
        assert_eq!(t.line(), Some(0));
        for _ in 0..99 {
            assert_eq!(t.line(), None);
        }
        t.last = Some(std::time::Instant::now() - Duration::from_secs(2));
        assert_eq!(t.line(), Some(99));
        assert_eq!(t.line(), None);
    }
}
