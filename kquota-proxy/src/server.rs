//! [`Proxy`]: the bootstrap listener bound at start, the accept loops of it and of each broker
//! listener bound since, connections over their IP's rate held and closed, and the stop.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use kquota_host::{accept, AcceptErrors, Accepted, Budget, Slots, Stop};
use parking_lot::Mutex;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, Semaphore};
use tracing::{info, warn};

use crate::connection;
use crate::error::ProxyError;
use crate::metrics::{ProxyExporter, Stats};
use crate::quotas::Quotas;
use crate::reach::Reach;
use crate::settings::{HostPort, ProxyConfig};
use crate::shared::{NewListener, Shared, Target, TaskGuard, Tasks};
use kquota_host::NetworkThreads;

/// Accepts connections on one listener until the proxy stops. Each takes a slot first: at
/// `max.connections`, a connection not yet proven (or one idle long) gives way, and when the
/// process is out of descriptors one is made to.
async fn accept_loop(tcp: TcpListener, target: Target, shared: Arc<Shared>, _guard: TaskGuard) {
    let mut errors = AcceptErrors::default();
    let name = format!("{target:?}");
    loop {
        let accepted = tokio::select! {
            () = shared.stopping() => break,
            a = accept(&tcp, &shared.slots, &mut errors, &name) => a,
        };
        shared.stats.connection_accepted();
        let (stream, peer, slot) = match accepted {
            Accepted::Connection(stream, peer, slot) => (stream, peer, slot),
            Accepted::Refused(..) => {
                shared.stats.connection_refused();
                continue;
            }
        };
        let t = shared.quotas.meter.connection(&peer.ip().to_string());
        if t.is_throttled() {
            hold(stream, peer, t.ms, slot, &shared);
            continue;
        }
        // The socket moves to its network thread's I/O driver: deregistered from this one here,
        // registered with that one there.
        let stream = match stream.into_std() {
            Ok(s) => s,
            Err(e) => {
                warn!(%peer, "closing connection: cannot hand it to a network thread: {e}");
                continue;
            }
        };
        let guard = shared.guard();
        let served = Arc::clone(&shared);
        shared.network.spawn(async move {
            match tokio::net::TcpStream::from_std(stream) {
                Ok(stream) => connection::serve(stream, peer, target, &served, &slot).await,
                Err(e) => {
                    warn!(%peer, "closing connection: its network thread cannot take it: {e}")
                }
            }
            drop((slot, guard));
        });
    }
}

/// Sockets held open at most, unserved, for their connection throttle; past this, a throttled
/// connection is closed at once.
const MAX_HELD: usize = 1024;

/// A connection over its IP's `connection_creation_rate`: as Kafka's acceptor, the proxy holds
/// the socket for the throttle time without serving it, then closes it.
fn hold(
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
    ms: u64,
    slot: kquota_host::Slot,
    shared: &Arc<Shared>,
) {
    shared.stats.connection_throttled();
    tracing::debug!(%peer, throttle_ms = ms, "connection over connection_creation_rate: held, then closed");
    let Ok(permit) = Arc::clone(&shared.held).try_acquire_owned() else {
        return;
    };
    let shared = Arc::clone(shared);
    tokio::spawn(async move {
        // A held socket keeps its slot, unproven: it gives way to a new connection first.
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(ms)) => {}
            () = shared.stopping() => {}
            _ = slot.closing() => {}
        }
        drop((stream, permit, slot));
    });
}

/// Descriptors kept for what is not a client connection: listeners, the store, the metrics
/// server, the cluster clients' sockets, and the pipes that bytes passed on unchanged go through
/// (two each).
const RESERVED_DESCRIPTORS: u64 = 64 + 2 * crate::connection::PIPES_OPEN_AT_MOST as u64;

/// `max.connections`, lowered to what the process's descriptor limit allows: a client connection
/// holds two (its own and its broker's), and at the limit the slots, not the kernel, say who goes.
fn connections_within_descriptors(max: usize) -> usize {
    let Some(limit) = kquota_host::fd_limit() else {
        return max;
    };
    let room = usize::try_from(limit.saturating_sub(RESERVED_DESCRIPTORS) / 2)
        .unwrap_or(usize::MAX)
        .max(1);
    if room < max {
        // The default is a ceiling, not a promise: lowering it is the normal case on a host
        // with a modest limit. Lowering a value the operator chose deserves a warning.
        let why = format!(
            "max.connections lowered from {max} to {room}: the open-files limit is {limit} and \
             each connection holds two descriptors (raise LimitNOFILE or ulimit -n for more)"
        );
        if max == crate::settings::DEFAULT_MAX_CONNECTIONS {
            info!("{why}");
        } else {
            warn!("{why}");
        }
    }
    max.min(room)
}

/// A proxy whose bootstrap listener is bound, ready to serve.
pub struct Proxy {
    tcp: TcpListener,
    metrics: Option<TcpListener>,
    listeners: mpsc::UnboundedReceiver<NewListener>,
    shared: Arc<Shared>,
    stop: Stop,
    /// SIGHUP, listened for from the start (so that it never ends the process): the TLS files
    /// are read again.
    reload: kquota_host::ReloadSignal,
}

impl std::fmt::Debug for Proxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proxy")
            .field("config", &self.shared.config)
            .finish_non_exhaustive()
    }
}

impl Proxy {
    /// Binds the bootstrap listener (`config` was checked when it was built). Broker listeners are bound as the
    /// proxy learns of each broker, from the responses that name it.
    pub async fn bind(config: ProxyConfig) -> Result<Proxy, ProxyError> {
        // The ports first: a start that fails on a port in use leaves no store directory behind.
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
        let quotas = Quotas::open(&config).await?;
        let (stop, shutdown) = kquota_host::channel();
        let (new_listeners, listeners) = mpsc::unbounded_channel();
        let slots = Slots::new(
            connections_within_descriptors(config.max_connections),
            config.max_connections_per_ip,
            config.connection_grace,
        );
        let budget = Budget::new(Some(config.buffer_memory));
        let network =
            NetworkThreads::start(config.network_threads).map_err(ProxyError::NetworkThreads)?;
        Ok(Proxy {
            tcp,
            metrics,
            listeners,
            shared: Arc::new(Shared {
                config,
                quotas,
                stats: Arc::new(Stats::default()),
                held: Arc::new(Semaphore::new(MAX_HELD)),
                brokers: Mutex::new(HashMap::new()),
                slots,
                budget,
                shutdown,
                tasks: Tasks::default(),
                listeners: new_listeners,
                network,
                reach: Arc::new(Reach::default()),
            }),
            stop,
            reload: kquota_host::reload_signal(),
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
    /// gives each connection up to [`SHUTDOWN_GRACE`](crate::SHUTDOWN_GRACE) to deliver the answers to requests already
    /// forwarded, and returns once every connection is closed.
    pub async fn serve(self, shutdown: impl std::future::Future<Output = ()>) {
        let Proxy {
            tcp,
            metrics,
            mut listeners,
            shared,
            stop,
            reload,
        } = self;
        // Broker listeners are bound as the cluster's answers name brokers; each gets its own
        // accept loop here.
        let accepting = Arc::clone(&shared);
        tokio::spawn(async move {
            loop {
                let bound = tokio::select! {
                    () = accepting.stopping() => break,
                    l = listeners.recv() => l,
                };
                let Some((tcp, target, guard)) = bound else {
                    break;
                };
                tokio::spawn(accept_loop(tcp, target, Arc::clone(&accepting), guard));
            }
        });
        // Ready (for /readyz) once the bootstrap listener's accept loop is spawned.
        let serving = Arc::new(std::sync::atomic::AtomicBool::new(false));
        if let Some(listener) = metrics {
            let stopping = Arc::clone(&shared);
            let exporter = ProxyExporter {
                meter: shared.quotas.meter.clone(),
                stats: Arc::clone(&shared.stats),
                max_buckets: shared.config.metrics_max_buckets,
                slots: Arc::clone(&shared.slots),
                budget: shared.budget.clone(),
                cluster: shared.quotas.cluster_state.clone(),
                serving: Arc::clone(&serving),
                reach: Arc::clone(&shared.reach),
                upstream: shared.config.upstream.clone(),
            };
            // Only /readyz reads what the probe learns.
            let probed = Arc::clone(&shared);
            tokio::spawn(async move {
                let config = &probed.config;
                let stop = probed.shutdown.clone();
                crate::reach::probe(
                    &probed.reach,
                    &config.upstream,
                    config.connect_timeout,
                    stop,
                )
                .await;
            });
            tokio::spawn(kquota_host::http::serve_metrics(
                listener,
                Arc::new(exporter),
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
        serving.store(true, Ordering::Release);
        // What SIGHUP reloads: the TLS files towards clients and towards the cluster.
        let mut reloads: Vec<Arc<dyn kquota_host::Reload>> = Vec::new();
        if let Some(tls) = &shared.config.client_tls {
            reloads.push(Arc::clone(tls) as Arc<dyn kquota_host::Reload>);
        }
        if let Some(tls) = &shared.config.upstream_tls {
            reloads.push(Arc::clone(tls) as Arc<dyn kquota_host::Reload>);
        }
        tokio::spawn(kquota_host::reload_on_signal(
            reload,
            reloads,
            shared.shutdown.clone(),
        ));
        shutdown.await;
        info!("shutting down: no new connections or requests; delivering answers in flight");
        stop.stop();
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
