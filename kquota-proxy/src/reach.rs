//! Whether the cluster can be reached: what `/readyz` says of it. Every connect to a broker
//! reports how it went; while the last one failed (and once at start), a probe connects to the
//! bootstrap address every [`PROBE_EVERY`], so readiness comes back without waiting for a client
//! and goes when the broker does, with or without clients.

use std::time::Duration;

use kquota_host::Shutdown;
use parking_lot::Mutex;
use tokio::net::TcpStream;

use crate::settings::HostPort;

/// How often the probe connects while the cluster is unreachable.
pub(crate) const PROBE_EVERY: Duration = Duration::from_secs(1);

/// The last word on the cluster: reachable, or why not.
#[derive(Default)]
pub(crate) struct Reach {
    /// `None` while reachable (or before anything was tried); the last connect's failure else.
    down: Mutex<Option<String>>,
}

impl Reach {
    /// A connect to a broker succeeded.
    pub(crate) fn up(&self) {
        let mut down = self.down.lock();
        if down.is_some() {
            *down = None;
        }
    }

    /// A connect to a broker failed, for `why`.
    pub(crate) fn down(&self, why: &str) {
        *self.down.lock() = Some(why.to_owned());
    }

    /// Why the cluster is unreachable, if it is.
    pub(crate) fn why_down(&self) -> Option<String> {
        self.down.lock().clone()
    }

    fn is_down(&self) -> bool {
        self.down.lock().is_some()
    }
}

/// Probes `upstream` (the bootstrap address) for `reach` until `shutdown` stops the proxy: at
/// once, then every [`PROBE_EVERY`] while the last word is a failure. A plain TCP connect, closed
/// at once: enough to tell a broker that listens from one that does not, at no cost to the
/// broker's logs.
pub(crate) async fn probe(
    reach: &Reach,
    upstream: &HostPort,
    connect_timeout: Duration,
    mut shutdown: Shutdown,
) {
    let mut first = true;
    loop {
        if first || reach.is_down() {
            first = false;
            let connect = TcpStream::connect((upstream.host(), upstream.port()));
            match tokio::time::timeout(connect_timeout, connect).await {
                Ok(Ok(_)) => reach.up(),
                Ok(Err(e)) => reach.down(&format!("cannot connect to the broker: {e}")),
                Err(_) => reach.down("connecting to the broker timed out"),
            }
        }
        tokio::select! {
            () = shutdown.stopping() => return,
            () = tokio::time::sleep(PROBE_EVERY) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_connect_decides() {
        let reach = Reach::default();
        assert_eq!(reach.why_down(), None, "nothing tried: not down");
        reach.down("cannot connect to the broker: refused");
        assert_eq!(
            reach.why_down().as_deref(),
            Some("cannot connect to the broker: refused")
        );
        reach.up();
        assert_eq!(reach.why_down(), None);
    }
}
