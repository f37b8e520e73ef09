//! The server-wide budget for request bytes (Kafka's `queued.max.request.bytes`): every request
//! frame reserves its announced size here before its body is read, and keeps the reservation until
//! its answer has been written. While the budget is spent, connections stop reading (they wait in
//! line, first come first served) instead of allocating.
//!
//! A reservation is all or nothing, and no frame may ask for more than the whole budget
//! (`queued.max.request.bytes` must be at least `socket.request.max.bytes`, as in Kafka), so a
//! connection that waits only waits for others that are reading, handling or answering a request:
//! the budget cannot deadlock.

use std::fmt;
use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Kafka's `queued.max.request.bytes` default is −1 (unbounded); kquotad's is 256 MiB: room for
/// two requests of the largest size (`socket.request.max.bytes`, 100 MiB) and many small ones at
/// once, and a ceiling a small host can afford.
pub(crate) const DEFAULT_QUEUED_MAX_REQUEST_BYTES: usize = 268_435_456;

/// The request bytes that may be read or queued at once, shared by every connection of a server.
/// Clones share the budget.
#[derive(Clone, Default)]
pub(crate) struct Budget {
    /// `None`: unbounded.
    bytes: Option<Arc<Semaphore>>,
    limit: usize,
}

/// Bytes reserved from a [`Budget`], given back when dropped.
#[derive(Debug)]
pub(crate) struct Reservation {
    _permit: Option<OwnedSemaphorePermit>,
}

impl Budget {
    /// A budget of `limit` bytes, or an unbounded one.
    pub(crate) fn new(limit: Option<usize>) -> Budget {
        match limit {
            None => Budget::default(),
            Some(limit) => {
                let limit = limit.min(Semaphore::MAX_PERMITS);
                Budget {
                    bytes: Some(Arc::new(Semaphore::new(limit))),
                    limit,
                }
            }
        }
    }

    /// The most bytes one reservation may take (`usize::MAX` if unbounded).
    pub(crate) fn limit(&self) -> usize {
        if self.bytes.is_some() {
            self.limit
        } else {
            usize::MAX
        }
    }

    /// Reserves `bytes`, waiting while the budget is spent. `None` if `bytes` is more than the
    /// whole budget (the caller refuses the frame): waiting for it would never end.
    pub(crate) async fn reserve(&self, bytes: usize) -> Option<Reservation> {
        let Some(semaphore) = &self.bytes else {
            return Some(Reservation { _permit: None });
        };
        if bytes > self.limit {
            return None;
        }
        let n = u32::try_from(bytes).ok()?;
        // The semaphore is never closed, so acquiring fails only if it were.
        let permit = Arc::clone(semaphore).acquire_many_owned(n).await.ok()?;
        Some(Reservation {
            _permit: Some(permit),
        })
    }

    /// Bytes not reserved now (`usize::MAX` if unbounded).
    #[cfg(test)]
    pub(crate) fn available(&self) -> usize {
        self.bytes
            .as_ref()
            .map_or(usize::MAX, |s| s.available_permits())
    }
}

impl fmt::Debug for Budget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.bytes {
            None => f.write_str("Budget(unbounded)"),
            Some(s) => write!(
                f,
                "Budget({} of {} bytes free)",
                s.available_permits(),
                self.limit
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn reservations_wait_for_the_budget_and_give_it_back() {
        let budget = Budget::new(Some(100));
        let a = budget.reserve(60).await.unwrap();
        assert_eq!(budget.available(), 40);
        // 50 more do not fit: the reservation waits until `a` is given back.
        let waiting = tokio::time::timeout(Duration::from_millis(50), budget.reserve(50)).await;
        assert!(waiting.is_err());
        drop(a);
        let b = budget.reserve(50).await.unwrap();
        assert_eq!(budget.available(), 50);
        drop(b);
        assert_eq!(budget.available(), 100);
        // More than the whole budget is refused, never waited for.
        assert!(budget.reserve(101).await.is_none());
        assert!(budget.reserve(100).await.is_some());
        // An empty frame reserves nothing, and does not wait.
        let all = budget.reserve(100).await.unwrap();
        assert!(budget.reserve(0).await.is_some());
        drop(all);
        assert!(Budget::new(None).reserve(usize::MAX).await.is_some());
    }
}
