//! The network threads (`num.network.threads`): each runs a single-threaded runtime with its own
//! I/O driver and timers, and serves the connections given to it, in turn, as they are accepted.
//! Both servers serve their client connections on them; their listeners, metrics and signals stay
//! on the runtime they were started on.
//!
//! Why not the work-stealing runtime the listeners run on: a request is two wake-ups (the request
//! arrives; its answer is ready, from the broker or from the handler's blocking thread), and there
//! each woke an idle worker to look for work, which found none: about four `futex` calls and five
//! context switches per request, more than forwarding a request cost (docs/benchmarks.md, "One
//! wake-up per request"). A connection that stays on one thread is woken by its own `epoll_wait`
//! and nothing else, as a connection on one of Kafka's network threads is.
//!
//! A socket accepted on another runtime is registered with that runtime's I/O driver: turn it
//! into a standard socket (`TcpStream::into_std`) before handing it over, and back
//! (`TcpStream::from_std`) in the task, which runs on the network thread.

use std::future::Future;
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::runtime::{Builder, Handle};
use tokio::sync::oneshot;

use crate::settings::values::Count;

/// The most `num.network.threads` a server takes: far more than a host has CPUs to run them.
pub const MAX_NETWORK_THREADS: u32 = 256;

/// How many network threads: 1 to [`MAX_NETWORK_THREADS`].
pub type ThreadCount = Count<MAX_NETWORK_THREADS>;

/// The blocking threads (the handler's work, a store's fsync) all network threads may have in
/// all, shared out among them: tokio's default for one runtime, so that N threads do not make N
/// times as many.
const BLOCKING_THREADS: usize = 512;

/// The network threads, and the turn of the next connection. Dropping them ends their threads,
/// and with them every task still running there.
pub struct NetworkThreads {
    handles: Vec<Handle>,
    next: AtomicUsize,
    /// Dropped with the threads: each then drops its runtime (and what still runs on it) and
    /// ends.
    _stops: Vec<oneshot::Sender<()>>,
}

impl NetworkThreads {
    /// One network thread per CPU the process may use, within [`MAX_NETWORK_THREADS`] (one where
    /// that cannot be told): a network thread only moves bytes, so more of them than CPUs would
    /// only take turns.
    pub fn default_count() -> ThreadCount {
        ThreadCount::at_most(std::thread::available_parallelism().map_or(1, usize::from))
    }

    /// Starts `n` network threads, named `kquota-network-<i>`.
    pub fn start(n: ThreadCount) -> io::Result<NetworkThreads> {
        let n = n.get();
        let mut handles = Vec::with_capacity(n);
        let mut stops = Vec::with_capacity(n);
        for i in 0..n {
            let runtime = Builder::new_current_thread()
                .enable_all()
                .max_blocking_threads((BLOCKING_THREADS / n).max(1))
                .build()?;
            handles.push(runtime.handle().clone());
            let (stop, stopped) = oneshot::channel::<()>();
            stops.push(stop);
            std::thread::Builder::new()
                .name(format!("kquota-network-{i}"))
                .spawn(move || {
                    // An error only means the sender is gone: the server has stopped.
                    let _ = runtime.block_on(stopped);
                })?;
        }
        Ok(NetworkThreads {
            handles,
            next: AtomicUsize::new(0),
            _stops: stops,
        })
    }

    /// How many threads there are.
    pub fn len(&self) -> usize {
        self.handles.len()
    }

    /// Always `false`: there is at least one thread.
    pub fn is_empty(&self) -> bool {
        self.handles.is_empty()
    }

    /// The runtime of the next network thread in turn: for a task whose end the caller waits for
    /// (`JoinSet::spawn_on`).
    pub fn next_thread(&self) -> &Handle {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.handles.len();
        &self.handles[i]
    }

    /// Runs `task` on the next network thread in turn, detached.
    pub fn spawn<F>(&self, task: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        drop(self.next_thread().spawn(task));
    }
}

impl std::fmt::Debug for NetworkThreads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NetworkThreads")
            .field("threads", &self.handles.len())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::time::Duration;

    use super::*;

    fn n(count: u32) -> ThreadCount {
        ThreadCount::new(count).unwrap()
    }

    /// The thread a task ran on, with a timer and a socket of that thread's runtime on the way.
    async fn thread_of_a_task_with_io(threads: &NetworkThreads) -> std::thread::ThreadId {
        let (tx, rx) = oneshot::channel();
        threads.spawn(async move {
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
        let threads = NetworkThreads::start(n(3)).unwrap();
        assert_eq!(threads.len(), 3);
        let mut ran_on = Vec::new();
        for _ in 0..6 {
            ran_on.push(thread_of_a_task_with_io(&threads).await);
        }
        let distinct: HashSet<_> = ran_on.iter().collect();
        assert_eq!(distinct.len(), 3, "{ran_on:?}");
        assert!(!distinct.contains(&std::thread::current().id()));
        // In turn: the fourth task went where the first did.
        assert_eq!(ran_on[0..3], ran_on[3..6]);
    }

    #[tokio::test]
    async fn one_thread_serves_and_the_default_is_within_bounds() {
        let threads = NetworkThreads::start(n(1)).unwrap();
        assert_eq!(threads.len(), 1);
        assert!(!threads.is_empty());
        thread_of_a_task_with_io(&threads).await;
        let default = NetworkThreads::default_count().get();
        assert!(
            (1..=MAX_NETWORK_THREADS as usize).contains(&default),
            "{default}"
        );
    }

    #[tokio::test]
    async fn a_task_spawned_into_a_join_set_is_waited_for_from_another_runtime() {
        let threads = NetworkThreads::start(n(2)).unwrap();
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..4 {
            tasks.spawn_on(
                async {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    std::thread::current().name().map(str::to_owned)
                },
                threads.next_thread(),
            );
        }
        let mut names = Vec::new();
        while let Some(name) = tasks.join_next().await {
            names.push(name.unwrap().unwrap());
        }
        names.sort();
        assert_eq!(
            names,
            [
                "kquota-network-0",
                "kquota-network-0",
                "kquota-network-1",
                "kquota-network-1"
            ]
        );
    }

    #[test]
    fn dropping_the_threads_ends_them() {
        let threads = NetworkThreads::start(n(2)).unwrap();
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        // A task that would run forever holds the sender: it is dropped with its runtime.
        threads.spawn(async move {
            let _tx = tx;
            std::future::pending::<()>().await;
        });
        drop(threads);
        assert_eq!(
            rx.recv_timeout(Duration::from_secs(10)),
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected)
        );
    }
}
