//! `kquota-proxy`: a Kafka protocol proxy in front of a Kafka cluster.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use kquota_proxy::{HostPort, Proxy, ProxyConfig};
use tracing::info;

/// Forward Kafka clients to a Kafka cluster, keeping them on the proxy.
///
/// Every request and response is forwarded as it is, except that the broker endpoints in
/// Metadata, FindCoordinator, DescribeCluster, and Produce/Fetch node_endpoints responses are
/// replaced by the proxy's own listener for each broker, and ApiVersions is capped to the versions
/// the proxy can rewrite.
///
/// Broker N listens on its --broker-map entry if it has one, else on --listen-base's IP at its
/// port plus N; each listener is bound when a response first names the broker.
///
/// Example:
///
///   kquota-proxy --upstream kafka-1:9092 --listen 127.0.0.1:9092 --listen-base 127.0.0.1:19000
///
/// On SIGINT or SIGTERM it stops accepting and reading requests, delivers the answers in flight
/// (5 s at most), and exits. Logs go to stderr; RUST_LOG=debug shows each connection.
#[derive(Debug, Parser)]
#[command(name = "kquota-proxy", version, verbatim_doc_comment)]
struct Args {
    /// The cluster's bootstrap address (host:port).
    #[arg(long, value_name = "HOST:PORT")]
    upstream: HostPort,
    /// The bootstrap listener clients are given as bootstrap.servers.
    #[arg(long, value_name = "IP:PORT", default_value = "127.0.0.1:9092")]
    listen: SocketAddr,
    /// Broker N listens on this IP at PORT+N (PORT 0: a port the system chooses).
    #[arg(long, value_name = "IP:PORT")]
    listen_base: Option<SocketAddr>,
    /// Broker NODE listens on LISTEN (repeatable; before --listen-base).
    #[arg(long = "broker-map", value_name = "NODE=IP:PORT", value_parser = parse_broker)]
    broker_map: Vec<(i32, SocketAddr)>,
    /// The host named in rewritten responses (default: each broker listener's IP).
    #[arg(long, value_name = "HOST")]
    advertised_host: Option<String>,
    /// socket.request.max.bytes: the largest request frame.
    #[arg(long, value_name = "BYTES", default_value_t = kquota_proxy::DEFAULT_MAX_REQUEST_BYTES)]
    max_request_bytes: usize,
    /// The largest response frame from the cluster.
    #[arg(long, value_name = "BYTES", default_value_t = kquota_proxy::DEFAULT_MAX_RESPONSE_BYTES)]
    max_response_bytes: usize,
    /// Unanswered requests per connection before the proxy stops reading its requests.
    #[arg(long, value_name = "N", default_value_t = kquota_proxy::DEFAULT_MAX_IN_FLIGHT)]
    max_in_flight: usize,
    /// connections.max.idle.ms.
    #[arg(long, value_name = "MS", default_value_t = 600_000)]
    idle_timeout_ms: u64,
    /// How long connecting to a broker may take.
    #[arg(long, value_name = "MS", default_value_t = 10_000)]
    connect_timeout_ms: u64,
    /// How many brokers the proxy listens for at most.
    #[arg(long, value_name = "N", default_value_t = kquota_proxy::DEFAULT_MAX_BROKERS)]
    max_brokers: usize,
}

fn parse_broker(s: &str) -> Result<(i32, SocketAddr), String> {
    let (node, addr) = s
        .split_once('=')
        .ok_or_else(|| format!("{s:?} is not NODE=IP:PORT"))?;
    let node = node
        .parse()
        .map_err(|_| format!("{node:?} is not a node id"))?;
    let addr = addr
        .parse()
        .map_err(|_| format!("{addr:?} is not an IP:PORT"))?;
    Ok((node, addr))
}

async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("install the SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => info!("SIGINT received"),
        _ = term.recv() => info!("SIGTERM received"),
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        // Colours only on a terminal: a log file stays greppable.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let mut config = ProxyConfig::new(args.listen, args.upstream);
    config.listen_base = args.listen_base;
    config.broker_map = args.broker_map.into_iter().collect::<BTreeMap<_, _>>();
    config.advertised_host = args.advertised_host;
    config.max_request_bytes = args.max_request_bytes;
    config.max_response_bytes = args.max_response_bytes;
    config.max_in_flight = args.max_in_flight;
    config.idle_timeout = Duration::from_millis(args.idle_timeout_ms);
    config.connect_timeout = Duration::from_millis(args.connect_timeout_ms);
    config.max_brokers = args.max_brokers;
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("kquota-proxy: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async {
        let upstream = config.upstream.clone();
        let proxy = match Proxy::bind(config).await {
            Ok(p) => p,
            Err(e) => {
                eprintln!("kquota-proxy: {e}");
                return ExitCode::from(2);
            }
        };
        info!(listen = %proxy.local_addr(), %upstream, "kquota-proxy serving");
        proxy.serve(shutdown_signal()).await;
        ExitCode::SUCCESS
    })
}
