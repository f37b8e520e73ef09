//! The server-wide budget for request bytes (Kafka's `queued.max.request.bytes`): every request
//! frame reserves its announced size here before its body is read, and keeps the reservation until
//! its answer has been written. While the budget is spent, connections stop reading instead of
//! allocating, and take what they need as soon as that much is free: not first come first served,
//! which would let one large frame waiting at the head of the line hold up every small request
//! behind it (and with them the requests an administrator needs), as Kafka's `SimpleMemoryPool`
//! does not either.
//!
//! A reservation is all or nothing, and no frame may ask for more than the whole budget
//! (`queued.max.request.bytes` must be at least `socket.request.max.bytes`, as in Kafka), so a
//! connection that waits only waits for others that are reading, handling or answering a request:
//! the budget cannot deadlock.

use std::fmt;
use std::sync::Arc;

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, TryAcquireError};

/// Kafka's `queued.max.request.bytes` default is −1 (unbounded); kquotad's is 256 MiB: room for
/// two requests of the largest size (`socket.request.max.bytes`, 100 MiB) and many small ones at
/// once, and a ceiling a small host can afford.
pub const DEFAULT_QUEUED_MAX_REQUEST_BYTES: usize = 268_435_456;

/// The request bytes that may be read or queued at once, shared by every connection of a server.
/// Clones share the budget.
#[derive(Clone, Default)]
pub struct Budget {
    /// `None`: unbounded.
    bytes: Option<Arc<Semaphore>>,
    limit: usize,
    /// Told whenever bytes are given back, so that every waiting reservation tries again.
    freed: Arc<Notify>,
}

/// Bytes reserved from a [`Budget`], given back when dropped.
#[derive(Debug)]
pub struct Reservation {
    permit: Option<OwnedSemaphorePermit>,
    freed: Option<Arc<Notify>>,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if self.permit.take().is_some() {
            if let Some(freed) = &self.freed {
                freed.notify_waiters();
            }
        }
    }
}

impl Budget {
    /// A budget of `limit` bytes, or an unbounded one.
    pub fn new(limit: Option<usize>) -> Budget {
        match limit {
            None => Budget::default(),
            Some(limit) => {
                let limit = limit.min(Semaphore::MAX_PERMITS);
                Budget {
                    bytes: Some(Arc::new(Semaphore::new(limit))),
                    limit,
                    freed: Arc::default(),
                }
            }
        }
    }

    /// The most bytes one reservation may take (`usize::MAX` if unbounded).
    pub fn limit(&self) -> usize {
        if self.bytes.is_some() {
            self.limit
        } else {
            usize::MAX
        }
    }

    /// Reserves `bytes`, waiting while the budget is spent. `None` if `bytes` is more than the
    /// whole budget (the caller refuses the frame): waiting for it would never end.
    pub async fn reserve(&self, bytes: usize) -> Option<Reservation> {
        let Some(semaphore) = &self.bytes else {
            return Some(Reservation {
                permit: None,
                freed: None,
            });
        };
        if bytes > self.limit {
            return None;
        }
        let n = u32::try_from(bytes).ok()?;
        loop {
            // Listening before trying, so that bytes given back in between are not missed.
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            match Arc::clone(semaphore).try_acquire_many_owned(n) {
                Ok(permit) => {
                    return Some(Reservation {
                        permit: Some(permit),
                        freed: Some(Arc::clone(&self.freed)),
                    })
                }
                Err(TryAcquireError::NoPermits) => freed.await,
                // The semaphore is never closed.
                Err(TryAcquireError::Closed) => return None,
            }
        }
    }

    /// Bytes reserved now (0 if unbounded: nothing is counted).
    pub fn in_use(&self) -> usize {
        self.bytes
            .as_ref()
            .map_or(0, |s| self.limit.saturating_sub(s.available_permits()))
    }

    /// Bytes not reserved now (`usize::MAX` if unbounded).
    pub fn available(&self) -> usize {
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

    #[tokio::test]
    async fn a_large_frame_waiting_does_not_hold_up_small_ones() {
        let budget = Budget::new(Some(100));
        let held = budget.reserve(70).await.unwrap();
        // 60 must wait for the 70 held; meanwhile 20 fit and are not kept behind it.
        let large = tokio::spawn({
            let budget = budget.clone();
            async move { budget.reserve(60).await.map(drop) }
        });
        tokio::task::yield_now().await;
        let small = tokio::time::timeout(Duration::from_millis(200), budget.reserve(20))
            .await
            .expect("a small frame is not held up by a large one waiting");
        drop(small);
        assert!(!large.is_finished());
        // Once the 70 come back, the large one gets its turn.
        drop(held);
        tokio::time::timeout(Duration::from_secs(5), large)
            .await
            .expect("the large frame is served once there is room")
            .unwrap()
            .unwrap();
        assert_eq!(budget.available(), 100);
    }
}
