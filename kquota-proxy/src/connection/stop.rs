//! The one way a connection's wait is cut short by a stop: [`or_stop`]. The stop is the proxy's
//! (it is stopping, or its grace is over) or the connection's own (it gives way to a new one).

use std::future::Future;

/// What `work` comes to, or `None` if `stop` resolves first. The stop is polled first each time:
/// once it has come, no more work is done, even work that is ready at the same moment.
pub(super) async fn or_stop<S: Future, T>(stop: S, work: impl Future<Output = T>) -> Option<T> {
    tokio::select! {
        biased;
        _ = stop => None,
        t = work => Some(t),
    }
}

#[cfg(test)]
mod tests {
    use std::future::{pending, ready};

    use super::*;

    #[tokio::test]
    async fn work_done_before_the_stop_is_kept() {
        assert_eq!(or_stop(pending::<()>(), ready(7)).await, Some(7));
    }

    #[tokio::test]
    async fn a_stop_that_has_come_wins_over_work_that_is_ready() {
        assert_eq!(or_stop(ready(()), ready(7)).await, None);
    }

    #[tokio::test]
    async fn a_stop_ends_work_that_waits() {
        let stop = tokio::time::sleep(std::time::Duration::from_millis(10));
        assert_eq!(or_stop(stop, pending::<u8>()).await, None);
    }
}
