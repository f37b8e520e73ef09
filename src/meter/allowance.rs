//! The lock-free fast path of a windowed rate: per-thread allowances of bytes that cannot throttle.
//!
//! Most requests are far below their quota, and for them Kafka's answer is always "0 ms". When a
//! bucket's lock holder has measured its rate, it knows how much more the bucket can take before any
//! request could be throttled: with `total` recorded in the window and at least `L` ms of elapsed
//! window (Kafka pads the window to `samples − 1` full samples, so `L = (samples − 1) × window`),
//! every request stays unthrottled while the total stays at or below `limit × L / 1000`. It splits that
//! headroom into one allowance per stripe, a cache line of its own. A request takes its bytes from its
//! thread's stripe with one compare-and-swap and answers 0 ms without the lock; a request that does not
//! fit takes the lock, which folds what the stripes consumed back into the current sample, measures
//! exactly as Kafka does, and grants new allowances.
//!
//! The answer is Kafka's, not an approximation: however the concurrent requests are ordered, the
//! window's total never exceeds the headroom, so Kafka's own measure would throttle none of them. An
//! allowance also ends where the current sample ends, or where one of the samples could become
//! obsolete, so that folding puts every byte in the sample, and at the time, Kafka would have.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use crossbeam_utils::CachePadded;

/// A stripe word holds, from the low bits up: the remaining allowance (32 bits), the latest request's
/// time as an offset from the grant (12 bits), and a tag (20 bits). The time goes with the bytes in
/// one compare-and-swap, so a reclaim never counts bytes without their time. The tag changes at every
/// reclaim, so a request that read a word before a reclaim cannot take from the next grant with stale
/// checks (its compare-and-swap fails).
const REMAINING: u64 = (1 << 32) - 1;
const OFFSET_SHIFT: u32 = 32;
/// The largest time offset; a grant lasts at most this many milliseconds past its start.
const OFFSET_MAX: u64 = (1 << 12) - 1;
const TAG_SHIFT: u32 = 44;
const TAG_MASK: u64 = (1 << (64 - TAG_SHIFT)) - 1;

#[inline]
fn offset(word: u64) -> u64 {
    (word >> OFFSET_SHIFT) & OFFSET_MAX
}

/// One thread's share of a bucket's headroom: everything a request served without the lock reads
/// or writes, in one cache line that no other thread writes between grants.
#[derive(Debug, Default)]
pub(crate) struct Stripe {
    /// Tag, time offset and remaining allowance.
    word: AtomicU64,
    /// The allowance holds only before this time (ms) ...
    valid_until: AtomicU64,
    /// ... and only for requests measured against this limit (`f64` bits).
    limit_bits: AtomicU64,
    /// When the allowance was granted: the origin of the word's time offset.
    base_ms: AtomicU64,
    /// The time of the latest request served from this stripe, for the bucket's idleness.
    last_ms: AtomicU64,
}

/// The stripes of one bucket. Unsized, and the last field of its bucket, so that the stripes sit in
/// the bucket's own allocation: a request served without the lock follows one pointer, from its
/// connection to its stripe. Built with a fixed count and used through [`Allowance`] (a slice).
#[derive(Debug)]
pub(crate) struct Allowance<S: ?Sized = [CachePadded<Stripe>]> {
    /// Requests served without the lock, so tests can tell the fast path ran.
    #[cfg(test)]
    pub(crate) taken: AtomicU64,
    stripes: S,
}

/// What the bucket's lock holder knows about the allowances it granted; lives under the bucket's lock.
#[derive(Debug)]
pub(crate) struct Grants {
    tag: u64,
    /// The time of the outstanding grant.
    base_ms: u64,
    granted: Box<[u64]>,
    outstanding: bool,
}

/// The stripe of the calling thread: threads are numbered in the order they first meter a request.
#[inline]
fn thread_stripe() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static STRIPE: usize = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    STRIPE.with(|s| *s)
}

/// How many stripes a bucket gets: one per core, as a power of two, at most 8 (the counts
/// [`Bucket`](super::Bucket) is built with). A stripe is 128 bytes, so the cap bounds a bucket's
/// stripes at 1 KiB; on larger machines threads share stripes, which costs a failed compare-and-swap
/// now and then, never a wrong answer.
pub(crate) fn stripe_count() -> usize {
    std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, 8)
        .next_power_of_two()
}

impl<const N: usize> Allowance<[CachePadded<Stripe>; N]> {
    /// Closed allowances over `N` stripes (a power of two), and their grants.
    pub(crate) fn new() -> (Self, Grants) {
        debug_assert!(N.is_power_of_two());
        let allowance = Allowance {
            stripes: std::array::from_fn(|_| CachePadded::default()),
            #[cfg(test)]
            taken: AtomicU64::new(0),
        };
        let grants = Grants {
            tag: 0,
            base_ms: 0,
            granted: vec![0; N].into_boxed_slice(),
            outstanding: false,
        };
        (allowance, grants)
    }
}

impl Allowance {
    #[inline]
    fn own(&self) -> (usize, &Stripe) {
        let index = thread_stripe() & (self.stripes.len() - 1);
        (index, &self.stripes[index])
    }

    /// Takes `value` from the calling thread's allowance: `true` means the request is recorded and not
    /// throttled. `false` means nothing was taken; the caller must take the bucket's lock.
    #[inline]
    pub(crate) fn try_take(&self, value: u64, limit: f64, now: u64) -> bool {
        let (_, stripe) = self.own();
        // Acquire throughout: a grant's fields are released after the reclaim that closed the
        // previous grant, so a request that sees a newer grant's field also sees its word closed (and
        // its compare-and-swap below fails) rather than take from an older grant with newer checks.
        let word = stripe.word.load(Ordering::Acquire);
        // A request of 0 bytes still needs a measure (the bucket may be over its limit already).
        if value == 0
            || word & REMAINING < value
            || now >= stripe.valid_until.load(Ordering::Acquire)
            || limit.to_bits() != stripe.limit_bits.load(Ordering::Acquire)
        {
            return false;
        }
        // The validity check bounds the offset; a clock read before the grant counts as its start.
        let at = now.saturating_sub(stripe.base_ms.load(Ordering::Acquire));
        let latest = offset(word).max(at);
        let taken = (word & !(OFFSET_MAX << OFFSET_SHIFT) | latest << OFFSET_SHIFT) - value;
        // A reclaim since the load changed the tag and fails this.
        if stripe
            .word
            .compare_exchange(word, taken, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
        {
            return false;
        }
        if stripe.last_ms.load(Ordering::Relaxed) < now {
            stripe.last_ms.fetch_max(now, Ordering::Relaxed);
        }
        #[cfg(test)]
        self.taken.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// The time of the latest request served from any stripe (0 if none was).
    pub(crate) fn last_ms(&self) -> u64 {
        self.stripes
            .iter()
            .map(|s| s.last_ms.load(Ordering::Relaxed))
            .max()
            .unwrap_or(0)
    }

    /// Closes every stripe and returns what they consumed since the last grant, with the time of the
    /// latest request served (`None` if nothing was consumed). Call with the bucket's lock held.
    pub(crate) fn reclaim(&self, grants: &mut Grants) -> Option<(u64, u64)> {
        if !grants.outstanding {
            return None;
        }
        grants.outstanding = false;
        grants.tag = (grants.tag + 1) & TAG_MASK;
        let closed = grants.tag << TAG_SHIFT;
        let mut consumed = 0;
        let mut last = 0;
        for (stripe, granted) in self.stripes.iter().zip(grants.granted.iter_mut()) {
            let word = stripe.word.swap(closed, Ordering::AcqRel);
            let used = *granted - (word & REMAINING);
            if used > 0 {
                consumed += used;
                last = last.max(grants.base_ms + offset(word));
            }
            *granted = 0;
        }
        (consumed > 0).then_some((consumed, last))
    }

    /// Grants `headroom` (bytes that cannot be throttled) at `now` for requests measured against
    /// `limit` before `valid_until` (and at most [`OFFSET_MAX`] ms): half to the calling thread's
    /// stripe, which is the one running hot, the rest split among the others. Call with the bucket's
    /// lock held, after [`Allowance::reclaim`].
    pub(crate) fn grant(
        &self,
        grants: &mut Grants,
        headroom: u64,
        limit: f64,
        now: u64,
        valid_until: u64,
    ) {
        debug_assert!(!grants.outstanding, "reclaim before granting");
        let count = self.stripes.len() as u64;
        let (own, _) = self.own();
        let others = if count == 1 {
            0
        } else {
            headroom / 2 / (count - 1)
        };
        let mine = headroom - others * (count - 1);
        if mine == 0 {
            return;
        }
        let valid_until = valid_until.min(now + OFFSET_MAX + 1);
        grants.base_ms = now;
        let tag = grants.tag << TAG_SHIFT;
        for (i, (stripe, granted)) in self
            .stripes
            .iter()
            .zip(grants.granted.iter_mut())
            .enumerate()
        {
            let amount = if i == own { mine } else { others }.min(REMAINING);
            *granted = amount;
            // Release: see `try_take`.
            stripe.valid_until.store(valid_until, Ordering::Release);
            stripe.limit_bits.store(limit.to_bits(), Ordering::Release);
            stripe.base_ms.store(now, Ordering::Release);
            stripe.word.store(tag | amount, Ordering::Release);
        }
        grants.outstanding = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn takes_within_the_grant_and_reclaims_exactly() {
        let (allowance, mut grants) = Allowance::<[_; 4]>::new();
        let allowance: &Allowance = &allowance;
        assert!(!allowance.try_take(1, 10.0, 0), "closed before a grant");
        allowance.grant(&mut grants, 1_000, 10.0, 0, 100);
        // The three other stripes hold 166 each; the calling thread's the other 502.
        assert!(allowance.try_take(300, 10.0, 5));
        assert!(!allowance.try_take(203, 10.0, 6), "more than is left");
        assert!(allowance.try_take(202, 10.0, 7));
        assert!(!allowance.try_take(1, 10.0, 8), "own stripe exhausted");
        assert_eq!(allowance.reclaim(&mut grants), Some((502, 7)));
        assert!(!allowance.try_take(1, 10.0, 9), "closed after a reclaim");
        assert_eq!(allowance.reclaim(&mut grants), None);
    }

    #[test]
    fn refuses_after_expiry_for_another_limit_and_for_nothing() {
        let (allowance, mut grants) = Allowance::<[_; 1]>::new();
        let allowance: &Allowance = &allowance;
        allowance.grant(&mut grants, 1_000, 10.0, 0, 100);
        assert!(!allowance.try_take(1, 10.0, 100), "expired");
        assert!(!allowance.try_take(1, 20.0, 50), "other limit");
        assert!(!allowance.try_take(0, 10.0, 50), "0 bytes are measured");
        assert!(allowance.try_take(1_000, 10.0, 99));
        assert_eq!(allowance.reclaim(&mut grants), Some((1_000, 99)));
    }

    #[test]
    fn other_threads_take_from_their_own_stripes() {
        let (allowance, mut grants) = Allowance::<[_; 2]>::new();
        let allowance: &Allowance = &allowance;
        allowance.grant(&mut grants, 1_000, 1.0, 0, 100);
        let taken = std::thread::scope(|s| {
            s.spawn(|| {
                let mut taken = 0;
                while allowance.try_take(7, 1.0, 3) {
                    taken += 7;
                }
                taken
            })
            .join()
            .unwrap()
        });
        // Whichever stripe that thread has, it holds 500: the grant split 1,000 in halves.
        assert_eq!(taken, 497);
        let (consumed, last) = allowance.reclaim(&mut grants).unwrap();
        assert_eq!((consumed, last), (taken, 3));
    }

    #[test]
    fn huge_headroom_is_capped_per_stripe() {
        let (allowance, mut grants) = Allowance::<[_; 1]>::new();
        let allowance: &Allowance = &allowance;
        allowance.grant(&mut grants, u64::MAX / 2, 1.0, 0, 100);
        assert!(allowance.try_take(REMAINING, 1.0, 1));
        assert!(!allowance.try_take(1, 1.0, 1));
        assert_eq!(allowance.reclaim(&mut grants), Some((REMAINING, 1)));
    }
}
