//! `kquotad`: the reference quota server. Serves Kafka's quota admin APIs on one PLAINTEXT listener from
//! an engine backed by a durable embedded store.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use kquota::server::{parse_properties, Server, ServerConfig, KNOWN_PROPERTIES};
use tracing::{error, info, warn};

#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Serve Kafka's client-quota admin APIs (DescribeClientQuotas, AlterClientQuotas, and the seeds'
/// draft AlterQuotas) from a durable local store.
///
/// Settings come from an optional properties file in Kafka's style, then from flags, which win.
/// Every alteration is on disk (fsync) before it is acknowledged; on start the store is loaded
/// through the same validation as an alteration.
///
/// Examples:
///
///   kquotad --data-dir ./quotas
///
///   kquotad --config server.properties --listeners PLAINTEXT://127.0.0.1:19092
///
/// A properties file:
///
///   listeners=PLAINTEXT://127.0.0.1:9092
///   kquota.data.dir=/var/lib/kquota
///   kquota.sub.quota.policy=kip55
///   kquota.broker.count=3
///   kquota.producer.capacity.bytes.per.sec=104857600
///   socket.request.max.bytes=104857600
///   max.connections=1024
///   connections.max.idle.ms=600000
///
/// Logs go to stderr; set RUST_LOG (for example RUST_LOG=debug) to change the level.
#[derive(Debug, Parser)]
#[command(name = "kquotad", version, verbatim_doc_comment)]
struct Args {
    /// A properties file (key=value lines, # comments).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Where to listen: PLAINTEXT://host:port [default: PLAINTEXT://127.0.0.1:9092]
    #[arg(long, value_name = "LISTENER")]
    listeners: Option<String>,
    /// What clients are told to connect to: PLAINTEXT://host:port [default: the listener]
    #[arg(long, value_name = "LISTENER")]
    advertised_listeners: Option<String>,
    /// Directory of the quota store [default: ./kquota-data]
    #[arg(long, value_name = "DIR")]
    data_dir: Option<String>,
    /// How client sub-quotas relate to a user's total: kip55 or kafka [default: kip55]
    #[arg(long, value_name = "POLICY")]
    sub_quota_policy: Option<String>,
    /// Live brokers that `bps` quotas are divided by [default: 1]
    #[arg(long, value_name = "N")]
    broker_count: Option<String>,
    /// This broker's produce capacity for `shares` quotas, bytes/s
    #[arg(long, value_name = "BYTES")]
    producer_capacity: Option<String>,
    /// This broker's fetch capacity for `shares` quotas, bytes/s
    #[arg(long, value_name = "BYTES")]
    consumer_capacity: Option<String>,
    /// Largest request frame in bytes [default: 104857600]
    #[arg(long, value_name = "BYTES")]
    max_request_bytes: Option<String>,
    /// Most connections open at once [default: 1024]
    #[arg(long, value_name = "N")]
    max_connections: Option<String>,
    /// Close connections idle this long, in milliseconds [default: 600000]
    #[arg(long, value_name = "MS")]
    idle_timeout_ms: Option<String>,
    /// This node's id [default: 1]
    #[arg(long, value_name = "ID")]
    node_id: Option<String>,
}

fn settings(args: &Args) -> Result<ServerConfig, String> {
    let mut config = ServerConfig::default();
    if let Some(path) = &args.config {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let props = parse_properties(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        for (key, value) in &props {
            if KNOWN_PROPERTIES.contains(&key.as_str()) {
                config
                    .set(key, value)
                    .map_err(|e| format!("{}: {e}", path.display()))?;
            } else {
                warn!("{}: ignoring unknown setting '{key}'", path.display());
            }
        }
    }
    let flags = [
        ("listeners", &args.listeners),
        ("advertised.listeners", &args.advertised_listeners),
        ("kquota.data.dir", &args.data_dir),
        ("kquota.sub.quota.policy", &args.sub_quota_policy),
        ("kquota.broker.count", &args.broker_count),
        (
            "kquota.producer.capacity.bytes.per.sec",
            &args.producer_capacity,
        ),
        (
            "kquota.consumer.capacity.bytes.per.sec",
            &args.consumer_capacity,
        ),
        ("socket.request.max.bytes", &args.max_request_bytes),
        ("max.connections", &args.max_connections),
        ("connections.max.idle.ms", &args.idle_timeout_ms),
        ("node.id", &args.node_id),
    ];
    for (key, value) in flags {
        if let Some(value) = value {
            config.set(key, value).map_err(|e| e.to_string())?;
        }
    }
    Ok(config)
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
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let config = match settings(&args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("kquotad: {e}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("kquotad: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async move {
        let started = std::time::Instant::now();
        let server = match Server::bind(config.clone()).await {
            Ok(s) => s,
            Err(e) => {
                error!("{e}");
                eprintln!("kquotad: {e}");
                return ExitCode::FAILURE;
            }
        };
        info!(
            listener = %server.local_addr(),
            data_dir = %config.data_dir.display(),
            policy = ?config.policy,
            entities = server.loaded(),
            startup_ms = started.elapsed().as_millis() as u64,
            "kquotad listening"
        );
        // Tests and scripts read this line to learn the port.
        println!("listening on {}", server.local_addr());
        server.serve(shutdown_signal()).await;
        ExitCode::SUCCESS
    })
}
