//! [`Server`]: the settings checked, the store loaded into a new engine, every listener bound;
//! then served until the shutdown future resolves.

use std::fmt;
use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::sync::Arc;

use tokio::net::TcpListener;
use tracing::{info, warn};

use kquota_host::{open_engine, ConfigSource, EngineSettings, OpenError, Opened};
use kquota_wire::{
    Authorizer, Credentials, Handler, SaslConfig, SaslMechanism, SecurityProtocol, ServerInfo,
};

use crate::error::{ConfigError, StartError};
use crate::listener::{accept_loop, Listener};
use crate::metrics::{Metrics, ServerExporter, Timed};
use crate::peer::Endpoint;
use crate::settings::{ListenerConfig, ServerConfig};
use crate::tls;
use kquota_host::http::ClusterState;
use kquota_host::{Budget, NetworkThreads, Slots};

/// A server that is bound and ready to serve.
pub struct Server {
    listeners: Vec<Listener>,
    /// What SIGHUP reloads, and SIGHUP (listened for from the start, so that it never ends the
    /// process).
    reloads: Vec<Arc<dyn kquota_host::Reload>>,
    reload_signal: kquota_host::ReloadSignal,
    config: ServerConfig,
    loaded: usize,
    /// With a cluster: this instance's heartbeats, kept running.
    _members: Option<Arc<Members>>,
    /// Where `/metrics`, `/healthz` and `/readyz` are served, if anywhere.
    metrics_listener: Option<TcpListener>,
    metrics: Arc<Metrics>,
    /// The configuration log and membership, for readiness and metrics.
    cluster: ClusterState,
    /// Where the connections are served (`num.network.threads`); the listeners stay on the
    /// runtime that serves.
    threads: Arc<NetworkThreads>,
}

/// This instance's membership among the others, when it shares their configuration.
#[cfg(feature = "cluster")]
type Members = kquota_cluster::Membership;
/// Without the `cluster` feature there is none.
#[cfg(not(feature = "cluster"))]
type Members = std::convert::Infallible;

/// The engine with its configuration (the cluster's configuration log, or the store in the data
/// dir), and with a cluster this instance's membership.
async fn open(config: &ServerConfig) -> Result<(Opened, Option<Members>), StartError> {
    let settings = EngineSettings {
        policy: config.policy,
        broker_count: config.broker_count,
        producer_capacity: config.producer_capacity,
        consumer_capacity: config.consumer_capacity,
    };
    let opened = |e: OpenError| match e {
        OpenError::Engine(e) => StartError::Config(ConfigError::Engine(e.into())),
        OpenError::Store(_, e) => StartError::Store(e),
        #[cfg(feature = "cluster")]
        OpenError::Cluster(e) => StartError::Cluster(e),
        // OpenError is non-exhaustive.
        e => StartError::Config(ConfigError::Engine(e.into())),
    };
    #[cfg(feature = "cluster")]
    if let Some(cluster) = &config.cluster {
        let engine = open_engine(
            &settings,
            ConfigSource::LogBeside(cluster, &config.data_dir),
        )
        .await
        .map_err(opened)?;
        let members = Members::start(cluster, Arc::clone(&engine.engine))
            .await
            .map_err(StartError::Cluster)?;
        return Ok((engine, Some(members)));
    }
    let engine = open_engine(&settings, ConfigSource::Store(&config.data_dir))
        .await
        .map_err(opened)?;
    Ok((engine, None))
}

impl fmt::Debug for Server {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Server")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// The SASL settings, if a listener uses SASL: the credentials file is read now, so a bad one
/// stops the start.
fn sasl_config(
    config: &ServerConfig,
    listeners: &[ListenerConfig],
) -> Result<Option<SaslConfig>, ConfigError> {
    if !listeners.iter().any(|l| l.protocol.uses_sasl()) {
        return Ok(None);
    }
    let path = config
        .sasl_credentials_file
        .as_ref()
        .ok_or(ConfigError::NoCredentialsFile)?;
    let credentials = Credentials::load(path).map_err(|e| ConfigError::Credentials(e.into()))?;
    if credentials.is_empty() {
        warn!(
            "{}: no users; every SASL authentication will fail",
            path.display()
        );
    }
    if config.sasl_mechanisms.contains(&SaslMechanism::Plain)
        && listeners
            .iter()
            .any(|l| l.protocol == SecurityProtocol::SaslPlaintext)
    {
        warn!("PLAIN is enabled on a SASL_PLAINTEXT listener: passwords cross the network in the clear");
    }
    Ok(Some(SaslConfig {
        mechanisms: config.sasl_mechanisms.clone(),
        credentials: Arc::new(credentials),
    }))
}

impl Server {
    /// Loads the TLS identity and the SASL credentials (a file that does not load stops the start
    /// here), binds every listener, opens the store, and loads it into a new engine.
    pub async fn bind(config: ServerConfig) -> Result<Server, StartError> {
        let listeners = config.listeners.clone();
        let acceptor = if listeners.iter().any(|l| l.protocol.uses_tls()) {
            Some(Arc::new(tls::reloadable_acceptor(&config.ssl)?))
        } else {
            None
        };
        let sasl = sasl_config(&config, &listeners)?;
        // The ports first: a start that fails on a port in use leaves no store directory behind.
        let metrics_listener = match config.metrics_listen {
            Some(addr) => Some(
                TcpListener::bind(addr)
                    .await
                    .map_err(|e| StartError::Bind(addr, e))?,
            ),
            None => None,
        };
        let mut sockets = Vec::with_capacity(listeners.len());
        for listener in listeners {
            let tcp = TcpListener::bind(listener.addr)
                .await
                .map_err(|e| StartError::Bind(listener.addr, e))?;
            let local = tcp
                .local_addr()
                .map_err(|e| StartError::Bind(listener.addr, e))?;
            sockets.push((tcp, local, listener));
        }
        let threads =
            NetworkThreads::start(config.network_threads).map_err(StartError::NetworkThreads)?;
        let (opened, members) = open(&config).await?;
        #[allow(unused_mut)] // Without the cluster feature nothing more is filled in.
        let mut cluster = ClusterState::default();
        let members = members.map(Arc::new);
        #[cfg(feature = "cluster")]
        {
            cluster.log = opened.log.clone();
            cluster.members = members.clone();
        }
        let Opened {
            engine,
            persistence,
            loaded,
            ..
        } = opened;
        let metrics = Arc::new(Metrics::new(config.draft_alter_quotas));
        // Every commit timed and its results counted, whichever store it goes to.
        let store: Arc<dyn kquota::Persistence> = Arc::new(Timed {
            inner: persistence.expect("a store or a configuration log"),
            metrics: Arc::clone(&metrics),
        });
        let authorizer = Authorizer::new(config.super_users.iter().cloned())
            .allow_anonymous_describe(config.describe_allow_anonymous);
        let mut base = Handler::new(
            Arc::clone(&engine),
            ServerInfo {
                node_id: config.node_id,
                host: String::new(),
                port: 0,
                cluster_id: config.cluster_id.clone(),
            },
        )
        .with_store(store)
        .with_authorizer(authorizer)
        // A client certificate's subject becomes its principal through ssl.principal.mapping.rules.
        .with_principal_builder(config.ssl.principal_mapping.clone())
        .with_draft_alter_quotas(config.draft_alter_quotas);
        if let Some(sasl) = sasl {
            base = base.with_sasl(sasl);
        }
        let mut bound = Vec::with_capacity(sockets.len());
        for (tcp, local, listener) in sockets {
            // Metadata answers with the listener the request came on, as Kafka does.
            let (host, port) = config
                .advertised
                .get(&listener.name)
                .map(|(host, port)| (host.to_owned(), port))
                .unwrap_or_else(|| (local.ip().to_string(), local.port()));
            let mut info = base.server_info().clone();
            info.host = host;
            info.port = i32::from(port);
            let handler = base.clone().with_server_info(info);
            bound.push(Listener {
                tcp,
                endpoint: Arc::new(Endpoint {
                    tls: listener
                        .protocol
                        .uses_tls()
                        .then(|| acceptor.clone())
                        .flatten(),
                    config: ListenerConfig {
                        addr: local,
                        ..listener
                    },
                    handler: arc_swap::ArcSwap::from_pointee(handler),
                    metrics: Arc::clone(&metrics),
                }),
            });
        }
        let reloads = crate::reload::targets(
            &config,
            acceptor,
            bound.iter().map(|l| Arc::clone(&l.endpoint)),
        );
        Ok(Server {
            reloads,
            reload_signal: kquota_host::reload_signal(),
            listeners: bound,
            config,
            loaded,
            _members: members,
            metrics_listener,
            metrics,
            cluster,
            threads: Arc::new(threads),
        })
    }

    /// The first listener's address (useful with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.listeners[0].endpoint.config.addr
    }

    /// Every listener, with its bound address.
    pub fn listeners(&self) -> Vec<ListenerConfig> {
        self.listeners
            .iter()
            .map(|l| l.endpoint.config.clone())
            .collect()
    }

    /// The metrics listener's address, if `kquota.metrics.listen` is set (useful with port 0).
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_listener
            .as_ref()
            .and_then(|l| l.local_addr().ok())
    }

    /// How many entities were loaded from the store.
    pub fn loaded(&self) -> usize {
        self.loaded
    }

    /// Serves until `shutdown` resolves, then waits for open connections to finish their current
    /// request (see the crate docs for what happens to one that does not).
    pub async fn serve(self, shutdown: impl std::future::Future<Output = ()>) {
        let (stop, stopping) = kquota_host::channel();
        let slots = Slots::new(
            self.config.max_connections.get(),
            self.config.max_connections_per_ip.get(),
            self.config.connection_grace,
        );
        let config = Arc::new(self.config);
        // One budget of request bytes for every connection of every listener.
        let budget = Budget::new(config.queued_max_request_bytes.map(NonZeroUsize::get));
        let mut acceptors = tokio::task::JoinSet::new();
        for listener in self.listeners {
            acceptors.spawn(accept_loop(
                listener,
                Arc::clone(&config),
                Arc::clone(&slots),
                budget.clone(),
                Arc::clone(&self.threads),
                stopping.clone(),
            ));
        }
        if let Some(listener) = self.metrics_listener {
            let exporter = ServerExporter {
                metrics: Arc::clone(&self.metrics),
                slots: Arc::clone(&slots),
                budget: budget.clone(),
                cluster: self.cluster.clone(),
                serving: Arc::new(std::sync::atomic::AtomicBool::new(true)),
            };
            let mut stopping = stopping.clone();
            tokio::spawn(kquota_host::http::serve_metrics(
                listener,
                Arc::new(exporter),
                async move { stopping.stopping().await },
            ));
        }
        tokio::spawn(kquota_host::reload_on_signal(
            self.reload_signal,
            self.reloads,
            stopping.clone(),
        ));
        shutdown.await;
        info!("shutting down: no new connections; finishing requests in flight");
        stop.stop();
        // Every connection has ended: the network threads can go.
        while acceptors.join_next().await.is_some() {}
        drop(self.threads);
        info!("stopped");
    }
}
