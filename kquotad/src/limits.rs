//! The connections open now, against `max.connections` (over all listeners) and
//! `max.connections.per.ip` (from one client address).

use std::collections::HashMap;
use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The open connections, shared by every listener.
pub(crate) struct Slots {
    all: Arc<Semaphore>,
    max_all: usize,
    per_ip: Mutex<HashMap<IpAddr, usize>>,
    max_per_ip: usize,
}

/// One open connection's place in [`Slots`], given back when dropped.
pub(crate) struct Slot {
    slots: Arc<Slots>,
    ip: IpAddr,
    _all: OwnedSemaphorePermit,
}

/// Which limit a new connection would pass.
#[derive(Debug)]
pub(crate) enum Full {
    /// `max.connections`, with its value.
    All(usize),
    /// `max.connections.per.ip` for this address, with its value.
    PerIp(IpAddr, usize),
}

impl fmt::Display for Full {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Full::All(max) => write!(f, "max.connections ({max}) reached"),
            Full::PerIp(ip, max) => write!(
                f,
                "{ip} already has the configured maximum of {max} connections (max.connections.per.ip)"
            ),
        }
    }
}

impl Slots {
    /// Room for `max_all` connections, `max_per_ip` of them from one address.
    pub(crate) fn new(max_all: usize, max_per_ip: usize) -> Arc<Slots> {
        Arc::new(Slots {
            all: Arc::new(Semaphore::new(max_all)),
            max_all,
            per_ip: Mutex::new(HashMap::new()),
            max_per_ip,
        })
    }

    /// A place for a connection from `ip` (canonical: an IPv4-mapped address as IPv4), or which
    /// limit is reached.
    pub(crate) fn take(self: &Arc<Self>, ip: IpAddr) -> Result<Slot, Full> {
        let Ok(all) = Arc::clone(&self.all).try_acquire_owned() else {
            return Err(Full::All(self.max_all));
        };
        let mut per_ip = self.per_ip.lock();
        let open = per_ip.entry(ip).or_insert(0);
        if *open >= self.max_per_ip {
            return Err(Full::PerIp(ip, self.max_per_ip));
        }
        *open += 1;
        Ok(Slot {
            slots: Arc::clone(self),
            ip,
            _all: all,
        })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut per_ip = self.slots.per_ip.lock();
        if let Some(open) = per_ip.get_mut(&self.ip) {
            *open -= 1;
            if *open == 0 {
                per_ip.remove(&self.ip);
            }
        }
    }
}
