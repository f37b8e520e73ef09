//! `kquotad`'s server: the wire handler over TCP, backed by the durable store.
//!
//! One tokio task per connection reads size-prefixed frames, answers them strictly in order (Kafka's
//! pipelining guarantee), and closes the connection where Kafka would. Limits: the request frame size
//! (`socket.request.max.bytes`, 100 MiB by default), the number of open connections (`max.connections`)
//! and the idle time between requests (`connections.max.idle.ms`, 10 minutes). On SIGINT or SIGTERM the
//! server stops accepting, lets every connection finish the request it is on, and exits.

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};
use tracing::{debug, info, warn};

use crate::engine::{Engine, SubQuotaPolicy};
use crate::store::Store;
use crate::wire::{request_size, Handler, Outcome, ServerInfo, DEFAULT_MAX_REQUEST_BYTES};

/// Everything `kquotad` is configured with.
#[derive(Clone, Debug, PartialEq)]
pub struct ServerConfig {
    /// Where to listen (`listeners=PLAINTEXT://127.0.0.1:9092`).
    pub listener: SocketAddr,
    /// The host and port clients are told to connect to (`advertised.listeners`); defaults to the
    /// listener's.
    pub advertised: Option<(String, u16)>,
    /// The data directory (`kquota.data.dir`).
    pub data_dir: PathBuf,
    /// The sub-quota policy (`kquota.sub.quota.policy`: `kip55` or `kafka`).
    pub policy: SubQuotaPolicy,
    /// The live broker count `bps` quotas divide by (`kquota.broker.count`).
    pub broker_count: u32,
    /// Producer capacity for `shares` quotas, bytes/s (`kquota.producer.capacity.bytes.per.sec`).
    pub producer_capacity: Option<f64>,
    /// Consumer capacity for `shares` quotas, bytes/s (`kquota.consumer.capacity.bytes.per.sec`).
    pub consumer_capacity: Option<f64>,
    /// Largest request frame (`socket.request.max.bytes`).
    pub max_request_bytes: usize,
    /// Most connections open at once (`max.connections`).
    pub max_connections: usize,
    /// Idle time after which a connection is closed (`connections.max.idle.ms`).
    pub idle_timeout: Duration,
    /// This node's id (`node.id`).
    pub node_id: i32,
    /// The cluster id reported to clients (`cluster.id`).
    pub cluster_id: String,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listener: SocketAddr::from(([127, 0, 0, 1], 9092)),
            advertised: None,
            data_dir: PathBuf::from("kquota-data"),
            policy: SubQuotaPolicy::Kip55,
            broker_count: 1,
            producer_capacity: None,
            consumer_capacity: None,
            max_request_bytes: DEFAULT_MAX_REQUEST_BYTES,
            max_connections: 1024,
            idle_timeout: Duration::from_millis(600_000),
            node_id: 1,
            cluster_id: "kquota-cluster".to_owned(),
        }
    }
}

/// A configuration value that cannot be used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError(pub String);

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

/// The property keys `kquotad` understands.
pub const KNOWN_PROPERTIES: [&str; 12] = [
    "listeners",
    "advertised.listeners",
    "kquota.data.dir",
    "kquota.sub.quota.policy",
    "kquota.broker.count",
    "kquota.producer.capacity.bytes.per.sec",
    "kquota.consumer.capacity.bytes.per.sec",
    "socket.request.max.bytes",
    "max.connections",
    "connections.max.idle.ms",
    "node.id",
    "cluster.id",
];

/// Parses a properties file in Java's simple form: `key=value` or `key: value` per line, `#` and `!`
/// comments, surrounding whitespace ignored. Returns the pairs, or the first bad line.
pub fn parse_properties(text: &str) -> Result<BTreeMap<String, String>, ConfigError> {
    let mut out = BTreeMap::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with('!') {
            continue;
        }
        let Some(at) = line.find(['=', ':']) else {
            return Err(ConfigError(format!(
                "line {}: expected key=value, got '{line}'",
                i + 1
            )));
        };
        let key = line[..at].trim();
        if key.is_empty() {
            return Err(ConfigError(format!("line {}: empty key", i + 1)));
        }
        out.insert(key.to_owned(), line[at + 1..].trim().to_owned());
    }
    Ok(out)
}

impl ServerConfig {
    /// Applies one `key=value` setting. Unknown keys are an error here; callers that read files warn
    /// about them instead (see [`KNOWN_PROPERTIES`]).
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), ConfigError> {
        let bad = |what: &str| ConfigError(format!("{key}={value}: {what}"));
        fn number<T: std::str::FromStr>(v: &str) -> Option<T> {
            v.trim().parse().ok()
        }
        match key {
            "listeners" => self.listener = parse_listener(value).map_err(|e| bad(&e))?,
            "advertised.listeners" => {
                let addr = value
                    .strip_prefix("PLAINTEXT://")
                    .ok_or_else(|| bad("expected PLAINTEXT://host:port"))?;
                let (host, port) = addr
                    .rsplit_once(':')
                    .ok_or_else(|| bad("expected PLAINTEXT://host:port"))?;
                let port = number(port).ok_or_else(|| bad("port must be a number 0-65535"))?;
                self.advertised = Some((host.trim_matches(['[', ']']).to_owned(), port));
            }
            "kquota.data.dir" => {
                if value.is_empty() {
                    return Err(bad("must not be empty"));
                }
                self.data_dir = PathBuf::from(value);
            }
            "kquota.sub.quota.policy" => {
                self.policy = value.parse().map_err(|e: String| bad(&e))?
            }
            "kquota.broker.count" => {
                self.broker_count = number(value)
                    .filter(|n| *n >= 1)
                    .ok_or_else(|| bad("must be a whole number ≥ 1"))?
            }
            "kquota.producer.capacity.bytes.per.sec" | "kquota.consumer.capacity.bytes.per.sec" => {
                let v: f64 = number(value)
                    .filter(|v: &f64| v.is_finite() && *v > 0.0)
                    .ok_or_else(|| bad("must be a number > 0"))?;
                if key.starts_with("kquota.producer") {
                    self.producer_capacity = Some(v);
                } else {
                    self.consumer_capacity = Some(v);
                }
            }
            "socket.request.max.bytes" => {
                self.max_request_bytes = number::<i32>(value)
                    .filter(|n| *n > 0)
                    .ok_or_else(|| bad("must be a whole number between 1 and 2147483647"))?
                    as usize
            }
            "max.connections" => {
                self.max_connections = number(value)
                    .filter(|n| *n >= 1)
                    .ok_or_else(|| bad("must be a whole number ≥ 1"))?
            }
            "connections.max.idle.ms" => {
                self.idle_timeout = Duration::from_millis(
                    number(value)
                        .filter(|n| *n >= 1)
                        .ok_or_else(|| bad("must be a whole number of milliseconds ≥ 1"))?,
                )
            }
            "node.id" => {
                self.node_id = number(value)
                    .filter(|n| *n >= 0)
                    .ok_or_else(|| bad("must be a whole number ≥ 0"))?
            }
            "cluster.id" => {
                if value.is_empty() {
                    return Err(bad("must not be empty"));
                }
                self.cluster_id = value.to_owned();
            }
            _ => return Err(ConfigError(format!("unknown setting '{key}'"))),
        }
        Ok(())
    }
}

/// `PLAINTEXT://host:port` (one listener; the port may be 0 for any free port).
fn parse_listener(value: &str) -> Result<SocketAddr, String> {
    let Some(addr) = value.strip_prefix("PLAINTEXT://") else {
        return Err(
            "expected PLAINTEXT://host:port (only PLAINTEXT listeners are served)".to_owned(),
        );
    };
    if addr.contains(',') {
        return Err("only one listener is supported".to_owned());
    }
    let addr = addr.replace("localhost", "127.0.0.1");
    addr.parse::<SocketAddr>()
        .map_err(|_| format!("'{addr}' is not an IP address and port"))
}

/// A server that is bound and ready to serve.
pub struct Server {
    listener: TcpListener,
    handler: Arc<Handler>,
    config: ServerConfig,
    loaded: usize,
}

impl fmt::Debug for Server {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Server")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// Why the server could not start.
#[derive(Debug)]
#[non_exhaustive]
pub enum StartError {
    /// A setting is unusable.
    Config(ConfigError),
    /// The store failed to open or load.
    Store(crate::store::StoreError),
    /// The listener could not be bound.
    Bind(SocketAddr, std::io::Error),
}

impl fmt::Display for StartError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StartError::Config(e) => write!(f, "{e}"),
            StartError::Store(e) => write!(f, "{e}"),
            StartError::Bind(addr, e) => write!(f, "cannot listen on {addr}: {e}"),
        }
    }
}

impl std::error::Error for StartError {}

impl Server {
    /// Opens the store, loads it into a new engine, and binds the listener.
    pub async fn bind(config: ServerConfig) -> Result<Server, StartError> {
        let mut builder = Engine::builder()
            .policy(config.policy)
            .broker_count(config.broker_count);
        if let Some(c) = config.producer_capacity {
            builder = builder.producer_capacity(c);
        }
        if let Some(c) = config.consumer_capacity {
            builder = builder.consumer_capacity(c);
        }
        let engine = Arc::new(
            builder
                .build()
                .map_err(|e| StartError::Config(ConfigError(e)))?,
        );
        let store = Arc::new(Store::open(&config.data_dir).map_err(StartError::Store)?);
        let loaded = store.load_into(&engine).map_err(StartError::Store)?;
        let listener = TcpListener::bind(config.listener)
            .await
            .map_err(|e| StartError::Bind(config.listener, e))?;
        let local = listener
            .local_addr()
            .map_err(|e| StartError::Bind(config.listener, e))?;
        let (host, port) = config
            .advertised
            .clone()
            .unwrap_or_else(|| (local.ip().to_string(), local.port()));
        let info = ServerInfo {
            node_id: config.node_id,
            host,
            port: i32::from(port),
            cluster_id: config.cluster_id.clone(),
        };
        let handler = Handler::new(Arc::clone(&engine), info).with_store(store);
        Ok(Server {
            listener,
            handler: Arc::new(handler),
            config,
            loaded,
        })
    }

    /// The address the server listens on (useful with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .expect("a bound listener has an address")
    }

    /// How many entities were loaded from the store.
    pub fn loaded(&self) -> usize {
        self.loaded
    }

    /// Serves until `shutdown` resolves, then waits for open connections to finish their current
    /// request.
    pub async fn serve(self, shutdown: impl std::future::Future<Output = ()>) {
        let (stop_tx, stop_rx) = watch::channel(false);
        let slots = Arc::new(Semaphore::new(self.config.max_connections));
        let mut tasks = tokio::task::JoinSet::new();
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                _ = &mut shutdown => break,
                accepted = self.listener.accept() => {
                    let (stream, peer) = match accepted {
                        Ok(a) => a,
                        Err(e) => {
                            warn!("accept failed: {e}");
                            tokio::time::sleep(Duration::from_millis(10)).await;
                            continue;
                        }
                    };
                    let Ok(permit) = Arc::clone(&slots).try_acquire_owned() else {
                        warn!(%peer, "closing connection: max.connections ({}) reached", self.config.max_connections);
                        continue;
                    };
                    let handler = Arc::clone(&self.handler);
                    let config = self.config.clone();
                    let stop = stop_rx.clone();
                    tasks.spawn(async move {
                        serve_connection(stream, peer, handler, config, stop).await;
                        drop(permit);
                    });
                }
                Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
            }
        }
        info!("shutting down: no new connections; finishing requests in flight");
        let _ = stop_tx.send(true);
        while tasks.join_next().await.is_some() {}
        info!("stopped");
    }
}

/// Reads frames from one connection and answers them in order until the peer leaves, the connection
/// idles out, a request calls for closing, or the server stops.
async fn serve_connection(
    mut stream: TcpStream,
    peer: SocketAddr,
    handler: Arc<Handler>,
    config: ServerConfig,
    mut stop: watch::Receiver<bool>,
) {
    let _ = stream.set_nodelay(true);
    debug!(%peer, "connection opened");
    loop {
        let mut prefix = [0u8; 4];
        let read = tokio::select! {
            r = tokio::time::timeout(config.idle_timeout, stream.read_exact(&mut prefix)) => r,
            _ = stop.changed() => break,
        };
        match read {
            Err(_) => {
                debug!(%peer, "closing idle connection");
                break;
            }
            Ok(Err(_)) => break, // the peer closed, or reset
            Ok(Ok(_)) => {}
        }
        let size = match request_size(prefix, config.max_request_bytes) {
            Ok(size) => size,
            Err(e) => {
                warn!(%peer, "closing connection: {e}");
                break;
            }
        };
        let mut frame = vec![0u8; size];
        // The size is bounded above; a peer that stalls mid-frame is an idle peer.
        match tokio::time::timeout(config.idle_timeout, stream.read_exact(&mut frame)).await {
            Ok(Ok(_)) => {}
            _ => {
                debug!(%peer, "closing connection: truncated frame");
                break;
            }
        }
        // Alterations fsync; keep them off the async workers.
        let h = Arc::clone(&handler);
        let outcome = match tokio::task::spawn_blocking(move || h.handle(&frame)).await {
            Ok(outcome) => outcome,
            Err(e) => {
                warn!(%peer, "closing connection: request handler failed: {e}");
                break;
            }
        };
        match outcome {
            Outcome::Respond(body) => {
                let len = (body.len() as u32).to_be_bytes();
                if stream.write_all(&len).await.is_err() || stream.write_all(&body).await.is_err() {
                    break;
                }
            }
            Outcome::Close(reason) => {
                warn!(%peer, "closing connection: {reason}");
                break;
            }
        }
    }
    debug!(%peer, "connection closed");
}
