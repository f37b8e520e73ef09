//! [`Worker`]: a thread of this crate's own (the configuration log's follower and snapshot writer,
//! the membership, the usage sharing), started under a name with a stop it reads, and stopped and
//! joined when its handle goes.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use crate::error::ClusterError;

/// What a worker's thread reads to know that it is to end.
#[derive(Clone, Debug, Default)]
pub(crate) struct Stop(Arc<AtomicBool>);

impl Stop {
    /// Whether the thread is to end.
    pub(crate) fn requested(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    fn request(&self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// A running thread and its stop. Dropping it (or [`stop`](Worker::stop)) asks the thread to
/// end and waits until it has: each thread looks at its stop at least every poll (50 to 100 ms;
/// the snapshot writer between its waits, and it ends when its jobs close) and bounds what it
/// does on the way out (a tombstone or a last record flushed for a second or two), so the wait
/// is bounded by the thread itself.
#[derive(Debug)]
pub(crate) struct Worker {
    stop: Stop,
    thread: Option<JoinHandle<()>>,
}

impl Worker {
    /// Starts `body` on a thread named `name`; `what` names it in the error if it cannot start.
    pub(crate) fn spawn(
        name: String,
        what: &'static str,
        body: impl FnOnce(Stop) + Send + 'static,
    ) -> Result<Worker, ClusterError> {
        let stop = Stop::default();
        let thread = {
            let stop = stop.clone();
            std::thread::Builder::new()
                .name(name)
                .spawn(move || body(stop))
                .map_err(|source| ClusterError::Thread {
                    thread: what,
                    source,
                })?
        };
        Ok(Worker {
            stop,
            thread: Some(thread),
        })
    }

    /// Asks the thread to end and waits until it has (at once if it already has). Called on the
    /// thread itself (the last owner of what holds it dropped there: an engine subscriber called
    /// on the follower, say), it only asks: a thread cannot wait for itself.
    pub(crate) fn stop(&mut self) {
        self.stop.request();
        if let Some(thread) = self.thread.take() {
            if thread.thread().id() != std::thread::current().id() {
                let _ = thread.join();
            }
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    #[test]
    fn dropping_a_worker_stops_and_joins_its_thread() {
        let (done_tx, done_rx) = mpsc::channel();
        let worker = Worker::spawn("kquota-test-worker".into(), "test", move |stop| {
            assert_eq!(
                std::thread::current().name(),
                Some("kquota-test-worker"),
                "the thread bears its name"
            );
            while !stop.requested() {
                std::thread::sleep(Duration::from_millis(5));
            }
            done_tx.send(()).unwrap();
        })
        .unwrap();
        assert!(done_rx.try_recv().is_err(), "running until stopped");
        drop(worker);
        // Joined: the thread finished before the drop returned.
        assert!(done_rx.try_recv().is_ok());
    }

    #[test]
    fn a_worker_dropped_on_its_own_thread_does_not_wait_for_itself() {
        let (tx, rx) = mpsc::channel::<Worker>();
        let (done_tx, done_rx) = mpsc::channel();
        let worker = Worker::spawn("kquota-test-self".into(), "test", move |_stop| {
            // Its own handle comes to it and is dropped here.
            let own = rx.recv().unwrap();
            drop(own);
            done_tx.send(()).unwrap();
        })
        .unwrap();
        tx.send(worker).unwrap();
        assert!(done_rx.recv_timeout(Duration::from_secs(10)).is_ok());
    }
}
