//! What every listener and connection shares: the settings, the quota state, the brokers the
//! proxy listens for (bound as the cluster's answers name them), the stop, and the count of
//! running tasks the stop waits for.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use kquota_host::{Budget, Shutdown, Slots};
use parking_lot::Mutex;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, Notify, Semaphore};
use tracing::info;

use crate::metrics::Stats;
use crate::quotas::Quotas;
use crate::reach::Reach;
use crate::settings::{HostPort, ProxyConfig};
use kquota_host::NetworkThreads;

/// What a listener stands for: the cluster's bootstrap address, or one broker.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Target {
    Bootstrap,
    Broker(i32),
}

/// One broker the proxy listens for.
pub(crate) struct Broker {
    /// Where it is, as the cluster last named it.
    pub(crate) upstream: HostPort,
    /// Where clients reach it: the proxy's listener.
    advertised: (String, i32),
    pub(crate) listen: SocketAddr,
}

/// What every listener and connection shares.
pub(crate) struct Shared {
    pub(crate) config: ProxyConfig,
    pub(crate) quotas: Quotas,
    pub(crate) stats: Arc<Stats>,
    /// Sockets held open, unserved, for their connection throttle.
    pub(crate) held: Arc<Semaphore>,
    pub(crate) brokers: Mutex<HashMap<i32, Broker>>,
    /// The client connections open, against `max.connections` and `max.connections.per.ip`.
    pub(crate) slots: Arc<Slots>,
    /// The bytes of requests being read and of answers not yet taken by their clients.
    pub(crate) budget: Budget,
    pub(crate) shutdown: Shutdown,
    pub(crate) tasks: Tasks,
    /// Broker listeners just bound, for the proxy's serving task to accept on.
    pub(crate) listeners: mpsc::UnboundedSender<NewListener>,
    /// The network threads the connections are served on.
    pub(crate) network: NetworkThreads,
    /// Whether the cluster can be reached, for `/readyz`.
    pub(crate) reach: Arc<Reach>,
}

/// A listener bound for a broker, with the guard its accept loop will hold.
pub(crate) type NewListener = (TcpListener, Target, TaskGuard);

/// The tasks still running (accept loops and connections), so that the stop can wait for them.
#[derive(Default)]
pub(crate) struct Tasks {
    pub(crate) running: AtomicUsize,
    pub(crate) done: Notify,
}

/// Held by a running task.
pub(crate) struct TaskGuard(Arc<Shared>);

impl Drop for TaskGuard {
    fn drop(&mut self) {
        if self.0.tasks.running.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.tasks.done.notify_waiters();
        }
    }
}

impl Shared {
    /// Counts a task as running until the guard is dropped.
    pub(crate) fn guard(self: &Arc<Shared>) -> TaskGuard {
        self.tasks.running.fetch_add(1, Ordering::AcqRel);
        TaskGuard(Arc::clone(self))
    }

    /// Resolves once the proxy is stopping.
    pub(crate) async fn stopping(&self) {
        self.shutdown.clone().stopping().await;
    }

    /// Resolves [`kquota_host::SHUTDOWN_GRACE`] after the proxy started stopping: a peer that
    /// takes no bytes must not hold the stop up.
    pub(crate) async fn grace_over(&self) {
        self.shutdown.clone().grace_over().await;
    }

    /// Where a connection to a listener for `target` is forwarded.
    pub(crate) fn upstream(&self, target: Target) -> Option<HostPort> {
        match target {
            Target::Bootstrap => Some(self.config.upstream.clone()),
            Target::Broker(id) => self.brokers.lock().get(&id).map(|b| b.upstream.clone()),
        }
    }

    /// The proxy's endpoint for broker `node_id`, which the cluster names `host`:`port`; its
    /// listener is bound (and its accept loop started) the first time.
    pub(crate) fn advertise(
        self: &Arc<Shared>,
        node_id: i32,
        host: &str,
        port: i32,
    ) -> Result<(String, i32), String> {
        let port = u16::try_from(port).map_err(|_| format!("broker {node_id} has port {port}"))?;
        let upstream =
            HostPort::new(host, port).map_err(|_| format!("broker {node_id} has an empty host"))?;
        let mut brokers = self.brokers.lock();
        if let Some(b) = brokers.get_mut(&node_id) {
            if b.upstream != upstream {
                info!(node_id, listen = %b.listen, from = %b.upstream, to = %upstream, "broker moved");
                b.upstream = upstream;
            }
            return Ok(b.advertised.clone());
        }
        if brokers.len() >= self.config.max_brokers {
            return Err(format!(
                "broker {node_id} is one more than the {} the proxy listens for",
                self.config.max_brokers
            ));
        }
        let addr = self.placement(node_id)?;
        let tcp = std::net::TcpListener::bind(addr)
            .and_then(|l| l.set_nonblocking(true).map(|()| l))
            .and_then(TcpListener::from_std)
            .map_err(|e| format!("cannot listen for broker {node_id} on {addr}: {e}"))?;
        let listen = tcp
            .local_addr()
            .map_err(|e| format!("cannot listen for broker {node_id} on {addr}: {e}"))?;
        let host = self
            .config
            .advertised_host
            .clone()
            .unwrap_or_else(|| listen.ip().to_string());
        let advertised = (host, i32::from(listen.port()));
        info!(node_id, %listen, %upstream, "listening for broker");
        brokers.insert(
            node_id,
            Broker {
                upstream,
                advertised: advertised.clone(),
                listen,
            },
        );
        drop(brokers);
        // The proxy's serving task accepts on it (if it is stopping, the listener is dropped).
        let _ = self
            .listeners
            .send((tcp, Target::Broker(node_id), self.guard()));
        Ok(advertised)
    }

    /// The address broker `node_id` listens on: its entry in the broker map, else the listen
    /// base's port plus its node id.
    fn placement(&self, node_id: i32) -> Result<SocketAddr, String> {
        if let Some(addr) = self.config.broker_map.get(&node_id) {
            return Ok(*addr);
        }
        let Some(base) = self.config.listen_base else {
            return Err(format!("broker {node_id} is not in the broker map"));
        };
        if base.port() == 0 {
            return Ok(base);
        }
        let port = u16::try_from(i64::from(base.port()) + i64::from(node_id))
            .ok()
            .filter(|p| *p != 0)
            .ok_or_else(|| {
                format!(
                    "broker {node_id}: port {} + {node_id} is not a port",
                    base.port()
                )
            })?;
        Ok(SocketAddr::new(base.ip(), port))
    }
}
