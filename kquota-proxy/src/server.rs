//! [`Proxy`]: the bootstrap listener bound at start, one listener per broker bound as the proxy
//! first learns of it, their accept loops, and the stop.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::net::TcpListener;
use tokio::sync::{watch, Notify, Semaphore};
use tracing::{info, warn};

use crate::config::{HostPort, ProxyConfig};
use crate::connection;
use crate::error::ProxyError;
use crate::metrics::{self, Stats};
use crate::quotas::Quotas;

/// How long, once the proxy is stopping, a connection has to deliver the answers to requests
/// already forwarded before it is closed without them.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// What a listener stands for: the cluster's bootstrap address, or one broker.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Target {
    Bootstrap,
    Broker(i32),
}

/// One broker the proxy listens for.
struct Broker {
    /// Where it is, as the cluster last named it.
    upstream: HostPort,
    /// Where clients reach it: the proxy's listener.
    advertised: (String, i32),
    listen: SocketAddr,
}

/// What every listener and connection shares.
pub(crate) struct Shared {
    pub(crate) config: ProxyConfig,
    pub(crate) quotas: Quotas,
    pub(crate) stats: Arc<Stats>,
    /// Sockets held open, unserved, for their connection throttle.
    held: Arc<Semaphore>,
    brokers: Mutex<HashMap<i32, Broker>>,
    stopping: watch::Receiver<bool>,
    tasks: Tasks,
}

/// The tasks still running (accept loops and connections), so that the stop can wait for them.
#[derive(Default)]
struct Tasks {
    running: AtomicUsize,
    done: Notify,
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
    fn guard(self: &Arc<Shared>) -> TaskGuard {
        self.tasks.running.fetch_add(1, Ordering::AcqRel);
        TaskGuard(Arc::clone(self))
    }

    /// Resolves once the proxy is stopping.
    pub(crate) async fn stopping(&self) {
        let mut rx = self.stopping.clone();
        let _ = rx.wait_for(|s| *s).await;
    }

    /// Resolves [`SHUTDOWN_GRACE`] after the proxy started stopping: a peer that takes no bytes
    /// must not hold the stop up.
    pub(crate) async fn grace_over(&self) {
        self.stopping().await;
        tokio::time::sleep(SHUTDOWN_GRACE).await;
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
        let upstream = HostPort {
            host: host.to_owned(),
            port: u16::try_from(port).map_err(|_| format!("broker {node_id} has port {port}"))?,
        };
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
        let guard = self.guard();
        tokio::spawn(accept_loop(
            tcp,
            Target::Broker(node_id),
            Arc::clone(self),
            guard,
        ));
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

/// Accepts connections on one listener until the proxy stops.
async fn accept_loop(tcp: TcpListener, target: Target, shared: Arc<Shared>, _guard: TaskGuard) {
    loop {
        let accepted = tokio::select! {
            () = shared.stopping() => break,
            a = tcp.accept() => a,
        };
        match accepted {
            Ok((stream, peer)) => {
                shared.stats.connection_accepted();
                let t = shared.quotas.meter.connection(&peer.ip().to_string());
                if t.is_throttled() {
                    hold(stream, peer, t.ms, &shared);
                    continue;
                }
                let guard = shared.guard();
                let shared = Arc::clone(&shared);
                tokio::spawn(async move {
                    connection::serve(stream, peer, target, &shared).await;
                    drop(guard);
                });
            }
            Err(e) => {
                warn!(?target, "accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

/// Sockets held open at most, unserved, for their connection throttle; past this, a throttled
/// connection is closed at once.
const MAX_HELD: usize = 1024;

/// A connection over its IP's `connection_creation_rate`: as Kafka's acceptor, the proxy holds
/// the socket for the throttle time without serving it, then closes it.
fn hold(stream: tokio::net::TcpStream, peer: SocketAddr, ms: u64, shared: &Arc<Shared>) {
    shared.stats.connection_throttled();
    tracing::debug!(%peer, throttle_ms = ms, "connection over connection_creation_rate: held, then closed");
    let Ok(permit) = Arc::clone(&shared.held).try_acquire_owned() else {
        return;
    };
    let shared = Arc::clone(shared);
    tokio::spawn(async move {
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(ms)) => {}
            () = shared.stopping() => {}
        }
        drop((stream, permit));
    });
}

/// A proxy whose bootstrap listener is bound, ready to serve.
pub struct Proxy {
    tcp: TcpListener,
    metrics: Option<TcpListener>,
    shared: Arc<Shared>,
    stop: watch::Sender<bool>,
}

impl std::fmt::Debug for Proxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proxy")
            .field("config", &self.shared.config)
            .finish_non_exhaustive()
    }
}

impl Proxy {
    /// Checks `config` and binds the bootstrap listener. Broker listeners are bound as the
    /// proxy learns of each broker, from the responses that name it.
    pub async fn bind(config: ProxyConfig) -> Result<Proxy, ProxyError> {
        config.check()?;
        let quotas = Quotas::open(&config)?;
        let tcp = TcpListener::bind(config.listen)
            .await
            .map_err(|e| ProxyError::Bind(config.listen, e))?;
        let metrics = match config.metrics_listen {
            Some(addr) => Some(
                TcpListener::bind(addr)
                    .await
                    .map_err(|e| ProxyError::Bind(addr, e))?,
            ),
            None => None,
        };
        let (stop, stopping) = watch::channel(false);
        Ok(Proxy {
            tcp,
            metrics,
            shared: Arc::new(Shared {
                config,
                quotas,
                stats: Arc::new(Stats::default()),
                held: Arc::new(Semaphore::new(MAX_HELD)),
                brokers: Mutex::new(HashMap::new()),
                stopping,
                tasks: Tasks::default(),
            }),
            stop,
        })
    }

    /// The bootstrap listener's address (useful with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.tcp.local_addr().unwrap_or(self.shared.config.listen)
    }

    /// The metrics listener's address, if metrics are served.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics.as_ref().and_then(|l| l.local_addr().ok())
    }

    /// The quota engine the proxy enforces (a host embedding the proxy may alter it directly).
    pub fn engine(&self) -> &Arc<kquota::Engine> {
        self.shared.quotas.meter.engine()
    }

    /// A handle that lists the broker listeners bound so far, valid while the proxy serves.
    pub fn brokers(&self) -> BrokerListeners {
        BrokerListeners(Arc::clone(&self.shared))
    }

    /// Serves until `shutdown` resolves; then accepts nothing more, stops reading requests,
    /// gives each connection up to [`SHUTDOWN_GRACE`] to deliver the answers to requests already
    /// forwarded, and returns once every connection is closed.
    pub async fn serve(self, shutdown: impl std::future::Future<Output = ()>) {
        let Proxy {
            tcp,
            metrics,
            shared,
            stop,
        } = self;
        if let Some(listener) = metrics {
            let stopping = Arc::clone(&shared);
            tokio::spawn(metrics::serve(
                listener,
                shared.quotas.meter.clone(),
                Arc::clone(&shared.stats),
                shared.config.metrics_max_buckets,
                async move { stopping.stopping().await },
            ));
        }
        let guard = shared.guard();
        tokio::spawn(accept_loop(
            tcp,
            Target::Bootstrap,
            Arc::clone(&shared),
            guard,
        ));
        shutdown.await;
        info!("shutting down: no new connections or requests; delivering answers in flight");
        let _ = stop.send(true);
        loop {
            let done = shared.tasks.done.notified();
            if shared.tasks.running.load(Ordering::Acquire) == 0 {
                break;
            }
            done.await;
        }
        info!("stopped");
    }
}

/// The broker listeners a [`Proxy`] has bound.
#[derive(Clone)]
pub struct BrokerListeners(Arc<Shared>);

impl std::fmt::Debug for BrokerListeners {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.list()).finish()
    }
}

impl BrokerListeners {
    /// Each broker's node id, the proxy's listener for it, and its upstream address, by node id.
    pub fn list(&self) -> Vec<(i32, SocketAddr, HostPort)> {
        let mut v: Vec<_> = self
            .0
            .brokers
            .lock()
            .iter()
            .map(|(id, b)| (*id, b.listen, b.upstream.clone()))
            .collect();
        v.sort_by_key(|(id, _, _)| *id);
        v
    }
}
