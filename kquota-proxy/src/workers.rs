//! The network threads (`num.network.threads`): each runs a single-threaded runtime with its own
//! I/O driver and timers, and serves the connections given to it, in turn, as they are accepted.
//!
//! Why not the work-stealing runtime the listeners run on: a proxied request is two wake-ups
//! (the request arrives, its answer arrives), and there each woke an idle worker to look for
//! work, which found none: about four `futex` calls and five context switches per request, more
//! than the forwarding itself cost (docs/benchmarks.md, "One wake-up per request"). A connection
//! that stays on one thread is woken by its own `epoll_wait` and nothing else, as a connection on
//! one of Kafka's network threads is.

use std::future::Future;
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::runtime::{Builder, Handle};
use tokio::sync::oneshot;

/// The network threads, and the turn of the next connection.
pub(crate) struct Workers {
    handles: Vec<Handle>,
    next: AtomicUsize,
    /// Dropped with the workers: each thread then drops its runtime (and what still runs on
    /// it) and ends.
    _stops: Vec<oneshot::Sender<()>>,
}

impl Workers {
    /// Starts `n` network threads (at least one).
    pub(crate) fn start(n: usize) -> io::Result<Workers> {
        let n = n.max(1);
        let mut handles = Vec::with_capacity(n);
        let mut stops = Vec::with_capacity(n);
        for i in 0..n {
            let runtime = Builder::new_current_thread().enable_all().build()?;
            handles.push(runtime.handle().clone());
            let (stop, stopped) = oneshot::channel::<()>();
            stops.push(stop);
            std::thread::Builder::new()
                .name(format!("kquota-network-{i}"))
                .spawn(move || {
                    // An error only means the sender is gone: the proxy has stopped.
                    let _ = runtime.block_on(stopped);
                })?;
        }
        Ok(Workers {
            handles,
            next: AtomicUsize::new(0),
            _stops: stops,
        })
    }

    /// Runs `task` on the next network thread in turn.
    pub(crate) fn spawn<F>(&self, task: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.handles.len();
        drop(self.handles[i].spawn(task));
    }
}

impl std::fmt::Debug for Workers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Workers")
            .field("threads", &self.handles.len())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::time::Duration;

    use super::*;

    /// The thread a task ran on, with a timer and a socket of that thread's runtime on the way.
    async fn thread_of_a_task_with_io(workers: &Workers) -> std::thread::ThreadId {
        let (tx, rx) = oneshot::channel();
        workers.spawn(async move {
            tokio::time::sleep(Duration::from_millis(1)).await;
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let (connected, accepted) =
                tokio::join!(tokio::net::TcpStream::connect(addr), listener.accept());
            connected.unwrap();
            accepted.unwrap();
            let _ = tx.send(std::thread::current().id());
        });
        rx.await.unwrap()
    }

    #[tokio::test]
    async fn connections_are_given_to_each_thread_in_turn_and_each_has_its_own_io_and_timers() {
        let workers = Workers::start(3).unwrap();
        assert_eq!(workers.handles.len(), 3);
        let mut threads = Vec::new();
        for _ in 0..6 {
            threads.push(thread_of_a_task_with_io(&workers).await);
        }
        let distinct: HashSet<_> = threads.iter().collect();
        assert_eq!(distinct.len(), 3, "{threads:?}");
        assert!(!distinct.contains(&std::thread::current().id()));
        // In turn: the fourth task went where the first did.
        assert_eq!(threads[0..3], threads[3..6]);
    }

    #[tokio::test]
    async fn no_threads_asked_for_is_one() {
        let workers = Workers::start(0).unwrap();
        assert_eq!(workers.handles.len(), 1);
        thread_of_a_task_with_io(&workers).await;
    }

    #[test]
    fn dropping_the_workers_ends_their_threads() {
        let workers = Workers::start(2).unwrap();
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        // A task that would run forever holds the sender: it is dropped with its runtime.
        workers.spawn(async move {
            let _tx = tx;
            std::future::pending::<()>().await;
        });
        drop(workers);
        assert_eq!(
            rx.recv_timeout(Duration::from_secs(10)),
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected)
        );
    }
}
