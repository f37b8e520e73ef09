//! The connections open now, against `max.connections` (over all listeners) and
//! `max.connections.per.ip` (from one client address), and which of them give way to a new one.
//!
//! A connection is *proven* once it has authenticated: on a SASL listener when SaslAuthenticate
//! succeeded, on PLAINTEXT and SSL once it has sent a request that was answered. One that is not
//! proven within `kquota.connections.grace.ms` (10 s by default; the TLS handshake counts) is
//! closed, as sshd closes a login that takes longer than `LoginGraceTime`.
//!
//! When `max.connections` is reached a new connection is still accepted if another can make room:
//! the oldest connection not yet proven, from the address that has the most of them; else the
//! proven connection idle longest, if it has been idle (no request in flight) for at least the
//! grace period. That one is told to close ([`Slot::closing`]) and the new one takes its place.
//! So connections that never send a byte, or sent one request long ago, cannot keep an
//! administrator out; only proven connections that are in use can fill the server.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::sync::Notify;
use tracing::{debug, warn};

/// The open connections, shared by every listener.
pub struct Slots {
    max_all: usize,
    max_per_ip: usize,
    grace: Duration,
    state: Mutex<State>,
}

/// Every open connection, by the order it was accepted in.
#[derive(Default)]
struct State {
    next: u64,
    open: BTreeMap<u64, Entry>,
    per_ip: HashMap<IpAddr, usize>,
    /// Connections not proven and not told to close, per address.
    unproven: HashMap<IpAddr, usize>,
    /// Connections told to close that have not yet.
    closing: usize,
}

struct Entry {
    ip: IpAddr,
    proven: bool,
    /// A request is being read, handled or answered.
    busy: bool,
    last_active: Instant,
    told: Option<Closing>,
    notify: Arc<Notify>,
}

/// One open connection's place in [`Slots`], given back when dropped.
pub struct Slot {
    slots: Arc<Slots>,
    peer: SocketAddr,
    id: u64,
    opened: Instant,
    notify: Arc<Notify>,
}

/// Which limit a new connection would pass.
#[derive(Debug)]
pub enum Full {
    /// `max.connections`, with its value.
    All(usize),
    /// `max.connections.per.ip` for this address, with its value.
    PerIp(IpAddr, usize),
}

impl fmt::Display for Full {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Full::All(max) => write!(
                f,
                "max.connections ({max}) reached, and every connection is authenticated and in use"
            ),
            Full::PerIp(ip, max) => write!(
                f,
                "{ip} already has the configured maximum of {max} connections (max.connections.per.ip)"
            ),
        }
    }
}

/// Why a connection is to close before it is done.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Closing {
    /// It did not authenticate (or send a valid request) within the grace period.
    Grace(Duration),
    /// It had not authenticated, and a new connection needed its place.
    EvictedUnproven(usize),
    /// It had been idle the longest, and a new connection needed its place.
    EvictedIdle(usize),
}

impl fmt::Display for Closing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Closing::Grace(grace) => write!(
                f,
                "not authenticated within {} ms (kquota.connections.grace.ms)",
                grace.as_millis()
            ),
            Closing::EvictedUnproven(max) => write!(
                f,
                "max.connections ({max}) reached: the oldest connection not yet authenticated makes room for a new one"
            ),
            Closing::EvictedIdle(max) => write!(
                f,
                "max.connections ({max}) reached: the connection idle longest makes room for a new one"
            ),
        }
    }
}

impl Slots {
    /// Room for `max_all` connections, `max_per_ip` of them from one address; `grace` to prove
    /// themselves.
    pub fn new(max_all: usize, max_per_ip: usize, grace: Duration) -> Arc<Slots> {
        Arc::new(Slots {
            max_all,
            max_per_ip,
            grace,
            state: Mutex::new(State::default()),
        })
    }

    /// Connections holding a place now (their metrics' "slots in use").
    pub fn in_use(&self) -> usize {
        self.state.lock().open.len()
    }

    /// `max.connections`: the places there are.
    pub fn max(&self) -> usize {
        self.max_all
    }

    /// A place for a connection from `peer`, making room if the server is full and a connection
    /// can give way; or which limit is reached. One address counts once, whether it arrives as
    /// IPv4 or IPv4-mapped IPv6.
    pub fn take(self: &Arc<Self>, peer: SocketAddr) -> Result<Slot, Full> {
        let ip = peer.ip().to_canonical();
        let now = Instant::now();
        let mut state = self.state.lock();
        let from_ip = state.per_ip.get(&ip).copied().unwrap_or(0);
        if from_ip >= self.max_per_ip {
            return Err(Full::PerIp(ip, self.max_per_ip));
        }
        if state.open.len() - state.closing >= self.max_all {
            // Connections told to close go at once; this bounds the overlap if some are slow to.
            if state.open.len() >= self.max_all.saturating_mul(2) || !self.evict(&mut state, now) {
                return Err(Full::All(self.max_all));
            }
        }
        let id = state.next;
        state.next += 1;
        let notify = Arc::new(Notify::new());
        state.open.insert(
            id,
            Entry {
                ip,
                proven: false,
                busy: false,
                last_active: now,
                told: None,
                notify: Arc::clone(&notify),
            },
        );
        *state.per_ip.entry(ip).or_insert(0) += 1;
        *state.unproven.entry(ip).or_insert(0) += 1;
        Ok(Slot {
            slots: Arc::clone(self),
            peer,
            id,
            opened: now,
            notify,
        })
    }

    /// Tells one connection to close to make room (when the process is out of file descriptors,
    /// say): whether one was.
    pub fn make_room(&self) -> bool {
        let mut state = self.state.lock();
        self.evict(&mut state, Instant::now())
    }

    /// Tells the connection that gives way to close: the oldest unproven one from the address
    /// with the most, else the proven one idle longest if idle for the grace period.
    fn evict(&self, state: &mut State, now: Instant) -> bool {
        let crowded = state
            .unproven
            .iter()
            .max_by_key(|(ip, n)| (**n, std::cmp::Reverse(**ip)))
            .map(|(ip, _)| *ip);
        let unproven = crowded.and_then(|ip| {
            state
                .open
                .iter()
                .find(|(_, e)| e.ip == ip && !e.proven && e.told.is_none())
                .map(|(id, _)| *id)
        });
        let (id, why) = match unproven {
            Some(id) => (id, Closing::EvictedUnproven(self.max_all)),
            None => {
                let idle = state
                    .open
                    .iter()
                    .filter(|(_, e)| {
                        e.proven
                            && !e.busy
                            && e.told.is_none()
                            && now.duration_since(e.last_active) >= self.grace
                    })
                    .min_by_key(|(_, e)| e.last_active)
                    .map(|(id, _)| *id);
                match idle {
                    Some(id) => (id, Closing::EvictedIdle(self.max_all)),
                    None => return false,
                }
            }
        };
        let Some(entry) = state.open.get_mut(&id) else {
            return false;
        };
        let (ip, was_unproven) = (entry.ip, !entry.proven);
        entry.told = Some(why);
        entry.notify.notify_one();
        state.closing += 1;
        if was_unproven {
            State::less(&mut state.unproven, ip);
        }
        true
    }

    fn with<T>(&self, id: u64, f: impl FnOnce(&mut Entry, &mut HashMap<IpAddr, usize>) -> T) -> T
    where
        T: Default,
    {
        let mut state = self.state.lock();
        let state = &mut *state;
        match state.open.get_mut(&id) {
            Some(e) => f(e, &mut state.unproven),
            None => T::default(),
        }
    }
}

impl State {
    fn less(map: &mut HashMap<IpAddr, usize>, ip: IpAddr) {
        if let Some(n) = map.get_mut(&ip) {
            *n -= 1;
            if *n == 0 {
                map.remove(&ip);
            }
        }
    }
}

impl Slot {
    /// A request has started to arrive: the connection is in use until [`Slot::answered`].
    pub fn busy(&self) {
        self.slots.with(self.id, |e, _| e.busy = true);
    }

    /// A request was answered; `authenticated`: the connection is now proven (it authenticated,
    /// or on PLAINTEXT and SSL it sent a valid request).
    pub fn answered(&self, authenticated: bool) {
        self.slots.with(self.id, |e, unproven| {
            e.busy = false;
            e.last_active = Instant::now();
            if authenticated && !e.proven {
                e.proven = true;
                if e.told.is_none() {
                    State::less(unproven, e.ip);
                }
            }
        });
    }

    fn proven(&self) -> bool {
        self.slots.with(self.id, |e, _| e.proven)
    }

    /// Resolves when the connection is to close: it was told to make room, or its grace period
    /// ended before it was proven; logged (making room as a warning). Never, otherwise.
    pub async fn closing(&self) -> Closing {
        let why = self.why_closing().await;
        let peer = self.peer;
        match why {
            Closing::Grace(_) => debug!(%peer, "closing connection: {why}"),
            _ => warn!(%peer, "closing connection: {why}"),
        }
        why
    }

    async fn why_closing(&self) -> Closing {
        let grace = self.slots.grace;
        let deadline = tokio::time::Instant::from_std(self.opened) + grace;
        let unproven_at_deadline = async {
            tokio::time::sleep_until(deadline).await;
            if self.proven() {
                std::future::pending::<()>().await;
            }
        };
        tokio::select! {
            () = self.notify.notified() => {
                self.slots
                    .with(self.id, |e, _| e.told)
                    .unwrap_or(Closing::EvictedUnproven(self.slots.max_all))
            }
            () = unproven_at_deadline => Closing::Grace(grace),
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut state = self.slots.state.lock();
        let Some(entry) = state.open.remove(&self.id) else {
            return;
        };
        if entry.told.is_some() {
            state.closing -= 1;
        } else if !entry.proven {
            State::less(&mut state.unproven, entry.ip);
        }
        State::less(&mut state.per_ip, entry.ip);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn at(ip: &str) -> SocketAddr {
        SocketAddr::new(ip.parse().unwrap(), 9092)
    }

    const GRACE: Duration = Duration::from_millis(200);

    /// `closing` resolves at once (it was told), not after the grace period.
    async fn told(slot: &Slot) -> Closing {
        tokio::time::timeout(GRACE / 4, slot.closing())
            .await
            .expect("told to close")
    }

    #[tokio::test]
    async fn a_full_server_makes_room_from_the_unproven_then_the_idle() {
        let slots = Slots::new(3, 10, GRACE);
        let a1 = slots.take(at("10.0.0.1")).unwrap();
        let b1 = slots.take(at("10.0.0.2")).unwrap();
        let a2 = slots.take(at("10.0.0.1")).unwrap();
        a1.answered(true);
        // Full: 10.0.0.1 has one unproven (a2) and 10.0.0.2 one (b1); the tie goes to the lower
        // address's oldest.
        let c = slots.take(at("10.0.0.3")).unwrap();
        assert_eq!(told(&a2).await, Closing::EvictedUnproven(3));
        drop(a2);
        // b1 and c are unproven: b1 goes (10.0.0.2 < 10.0.0.3).
        let d = slots.take(at("10.0.0.3")).unwrap();
        assert_eq!(told(&b1).await, Closing::EvictedUnproven(3));
        drop(b1);
        // 10.0.0.3 now has two unproven (c, d): its oldest, c, goes.
        let e = slots.take(at("10.0.0.4")).unwrap();
        assert_eq!(told(&c).await, Closing::EvictedUnproven(3));
        drop(c);
        d.answered(true);
        e.answered(true);
        // Every connection proven, none idle for the grace period: refused.
        assert!(matches!(slots.take(at("10.0.0.5")), Err(Full::All(3))));
        tokio::time::sleep(GRACE + GRACE / 4).await;
        // a1 has been idle longest, but a busy connection never gives way: d goes.
        a1.busy();
        let f = slots.take(at("10.0.0.5")).unwrap();
        assert_eq!(told(&d).await, Closing::EvictedIdle(3));
        assert!(tokio::time::timeout(GRACE / 4, a1.closing()).await.is_err());
        drop((a1, d, e, f));
        let state = slots.state.lock();
        assert!(state.open.is_empty() && state.unproven.is_empty() && state.per_ip.is_empty());
        assert_eq!(state.closing, 0);
    }

    #[tokio::test]
    async fn the_unproven_close_after_the_grace_period() {
        let slots = Slots::new(10, 1, GRACE);
        let a = slots.take(at("10.0.0.1")).unwrap();
        assert!(matches!(slots.take(at("10.0.0.1")), Err(Full::PerIp(_, 1))));
        let b = slots.take(at("10.0.0.2")).unwrap();
        b.answered(true);
        let started = Instant::now();
        assert_eq!(a.closing().await, Closing::Grace(GRACE));
        assert!(started.elapsed() >= GRACE - GRACE / 10);
        // A proven connection is never closed for it.
        assert!(tokio::time::timeout(GRACE * 2, b.closing()).await.is_err());
        // Nothing to make room with: a busy proven connection stays.
        drop(a);
        b.busy();
        assert!(!slots.make_room());
    }
}
