//! `kquota-proxy`: a Kafka protocol proxy in front of a Kafka cluster.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use kquota::meter::MeterConfig;
use kquota::SubQuotaPolicy;
use kquota_proxy::{ClientTls, HostPort, Proxy, ProxyConfig, UpstreamTls};
use kquota_wire::tls::ClientAuth;
use kquota_wire::Principal;
use tracing::{info, warn};

/// Enforce client quotas on Kafka traffic, in front of a Kafka cluster.
///
/// Every request and response is forwarded as it is, except that the broker endpoints in
/// Metadata, FindCoordinator, DescribeCluster, and Produce/Fetch node_endpoints responses are
/// replaced by the proxy's own listener for each broker, and ApiVersions is capped to the versions
/// the proxy can rewrite. Quotas are enforced as Kafka's broker enforces them (produce and fetch
/// bytes, request time, partition mutations, connections per IP), and configured at the proxy
/// with DescribeClientQuotas / AlterClientQuotas, which the proxy answers itself:
///
///   kafka-configs --bootstrap-server 127.0.0.1:9092 --alter --entity-type users \
///     --entity-name alice --add-config producer_byte_rate=1048576
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
    #[arg(long, value_name = "BYTES", default_value_t = kquota_proxy::DEFAULT_MAX_REQUEST_BYTES, help_heading = "Limits")]
    max_request_bytes: usize,
    /// The largest response frame from the cluster.
    #[arg(long, value_name = "BYTES", default_value_t = kquota_proxy::DEFAULT_MAX_RESPONSE_BYTES, help_heading = "Limits")]
    max_response_bytes: usize,
    /// Unanswered requests per connection before the proxy stops reading its requests.
    #[arg(long, value_name = "N", default_value_t = kquota_proxy::DEFAULT_MAX_IN_FLIGHT, help_heading = "Limits")]
    max_in_flight: usize,
    /// connections.max.idle.ms.
    #[arg(
        long,
        value_name = "MS",
        default_value_t = 600_000,
        help_heading = "Limits"
    )]
    idle_timeout_ms: u64,
    /// How long connecting to a broker may take.
    #[arg(
        long,
        value_name = "MS",
        default_value_t = 10_000,
        help_heading = "Limits"
    )]
    connect_timeout_ms: u64,
    /// How many brokers the proxy listens for at most.
    #[arg(long, value_name = "N", default_value_t = kquota_proxy::DEFAULT_MAX_BROKERS, help_heading = "Limits")]
    max_brokers: usize,
    /// max.connections: client connections open at once. When it is reached, the oldest
    /// connection not yet proven (from the address with the most), else the one idle longest,
    /// gives way to a new one. Lowered at start to what the open-files limit allows.
    #[arg(long, value_name = "N", default_value_t = kquota_proxy::DEFAULT_MAX_CONNECTIONS, help_heading = "Limits")]
    max_connections: usize,
    /// max.connections.per.ip: client connections open at once from one address (default:
    /// no limit).
    #[arg(long, value_name = "N", help_heading = "Limits")]
    max_connections_per_ip: Option<usize>,
    /// kquota.connections.grace.ms: how long a new connection has to prove itself (the broker
    /// authenticated it, or answered a request that needs no authentication) before it is
    /// closed; until then it is the first to give way at max.connections.
    #[arg(
        long,
        value_name = "MS",
        default_value_t = 10_000,
        help_heading = "Limits"
    )]
    connection_grace_ms: u64,
    /// The bytes held at once for requests being read and answers not yet taken by their
    /// clients, over every connection; reading waits while they are spent. At least the largest
    /// frame (--max-request-bytes, --max-response-bytes).
    #[arg(long, value_name = "BYTES", default_value_t = kquota_proxy::DEFAULT_BUFFER_MEMORY, help_heading = "Limits")]
    buffer_memory_bytes: usize,

    /// Where quotas altered at the proxy are kept (a redb store, created if missing).
    #[arg(
        long,
        value_name = "DIR",
        default_value = "kquota-proxy-data",
        help_heading = "Quotas"
    )]
    data_dir: PathBuf,
    /// Keep quotas in memory only: they are lost when the proxy stops.
    #[arg(long, conflicts_with = "data_dir", help_heading = "Quotas")]
    no_store: bool,
    /// super.users: who may alter quotas at the proxy (User:NAME;User:NAME). On a PLAINTEXT
    /// listener without SASL every client is User:ANONYMOUS.
    #[arg(long, value_name = "PRINCIPALS", value_parser = parse_super_users, help_heading = "Quotas")]
    super_users: Option<SuperUsers>,
    /// Let User:ANONYMOUS describe quotas (authenticated principals always may).
    #[arg(long, help_heading = "Quotas")]
    describe_allow_anonymous: bool,
    /// Serve the seeds' draft AlterQuotas on API key 50 (hides the cluster's
    /// DescribeUserScramCredentials).
    #[arg(long, help_heading = "Quotas")]
    draft_alter_quotas: bool,
    /// How a user's client sub-quotas share its total: kip55 (remainders) or kafka.
    #[arg(long, value_name = "POLICY", default_value = "kip55", value_parser = parse_policy, help_heading = "Quotas")]
    sub_quota_policy: SubQuotaPolicy,
    /// How many proxies share the :bps quotas (each enforces the limit divided by this).
    #[arg(long, value_name = "N", default_value = "1", help_heading = "Quotas")]
    instance_count: std::num::NonZeroU32,
    /// The bytes/s that producer_byte_rate:shares divides.
    #[arg(long, value_name = "BYTES_PER_SEC", help_heading = "Quotas")]
    producer_capacity: Option<f64>,
    /// The bytes/s that consumer_byte_rate:shares divides.
    #[arg(long, value_name = "BYTES_PER_SEC", help_heading = "Quotas")]
    consumer_capacity: Option<f64>,
    /// quota.window.num: the samples a rate is measured over.
    #[arg(long, value_name = "N", default_value_t = 11, help_heading = "Quotas")]
    quota_window_num: u32,
    /// quota.window.size.seconds: each sample's length.
    #[arg(
        long,
        value_name = "SECONDS",
        default_value_t = 1,
        help_heading = "Quotas"
    )]
    quota_window_size_seconds: u64,

    /// Share one configuration, the membership and bps usage with the other proxies through this
    /// Kafka cluster (its bootstrap.servers; usually the cluster behind the proxy). Quotas are
    /// then kept in the configuration topic, not in --data-dir.
    #[arg(long, value_name = "HOST:PORT,...", help_heading = "Many proxies")]
    cluster_bootstrap: Option<String>,
    /// This proxy's id among the others (default: the host name and the bootstrap listener's
    /// port); unique, and the same across restarts.
    #[arg(
        long,
        value_name = "ID",
        requires = "cluster_bootstrap",
        help_heading = "Many proxies"
    )]
    instance_id: Option<String>,
    /// A librdkafka property for the proxy's own Kafka clients (repeatable), e.g.
    /// security.protocol=SASL_SSL.
    #[arg(long = "cluster-property", value_name = "KEY=VALUE", value_parser = parse_property, requires = "cluster_bootstrap", help_heading = "Many proxies")]
    cluster_properties: Vec<(String, String)>,
    /// The configuration topic (one partition, compacted; created if missing).
    #[arg(long, value_name = "TOPIC", default_value = DEFAULT_CONFIG_TOPIC, help_heading = "Many proxies")]
    cluster_config_topic: String,
    /// The replication factor of the topics the proxy creates (-1: the cluster's default).
    #[arg(long, value_name = "N", default_value_t = -1, allow_negative_numbers = true, help_heading = "Many proxies")]
    cluster_replication_factor: i32,
    /// How long an alteration may wait for the configuration log before it is refused.
    #[arg(
        long,
        value_name = "MS",
        default_value_t = 10_000,
        help_heading = "Many proxies"
    )]
    cluster_alter_timeout_ms: u64,

    /// Serve Prometheus metrics at http://IP:PORT/metrics.
    #[arg(long, value_name = "IP:PORT", help_heading = "Metrics")]
    metrics_listen: Option<SocketAddr>,
    /// Buckets with series of their own; the rest are summed into one.
    #[arg(long, value_name = "N", default_value_t = kquota_proxy::DEFAULT_METRICS_MAX_BUCKETS, help_heading = "Metrics")]
    metrics_max_buckets: usize,

    /// TLS towards clients on every listener: the certificate chain (PEM).
    #[arg(long, value_name = "PEM", requires = "tls_key", help_heading = "TLS")]
    tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM).
    #[arg(long, value_name = "PEM", requires = "tls_cert", help_heading = "TLS")]
    tls_key: Option<PathBuf>,
    /// The CA certificates client certificates are checked against (PEM).
    #[arg(long, value_name = "PEM", requires = "tls_cert", help_heading = "TLS")]
    tls_client_ca: Option<PathBuf>,
    /// ssl.client.auth: none, requested or required.
    #[arg(long, value_name = "MODE", default_value = "none", value_parser = parse_client_auth, help_heading = "TLS")]
    tls_client_auth: ClientAuth,
    /// ssl.principal.mapping.rules: how a client certificate's DN becomes a user.
    #[arg(
        long,
        value_name = "RULES",
        default_value = "DEFAULT",
        help_heading = "TLS"
    )]
    ssl_principal_mapping_rules: String,
    /// TLS towards the cluster.
    #[arg(long, requires = "upstream_ca", help_heading = "TLS")]
    upstream_tls: bool,
    /// The CA certificates the cluster's certificates are checked against (PEM).
    #[arg(
        long,
        value_name = "PEM",
        requires = "upstream_tls",
        help_heading = "TLS"
    )]
    upstream_ca: Option<PathBuf>,
    /// A client certificate towards the cluster (PEM).
    #[arg(long, value_name = "PEM", requires_all = ["upstream_tls", "upstream_key"], help_heading = "TLS")]
    upstream_cert: Option<PathBuf>,
    /// The private key of --upstream-cert (PEM).
    #[arg(
        long,
        value_name = "PEM",
        requires = "upstream_cert",
        help_heading = "TLS"
    )]
    upstream_key: Option<PathBuf>,
}

/// `super.users`, parsed (one value: clap would take a bare `Vec` for a repeated flag).
#[derive(Clone, Debug)]
struct SuperUsers(Vec<Principal>);

fn parse_super_users(s: &str) -> Result<SuperUsers, String> {
    kquota_wire::parse_super_users(s)
        .map(SuperUsers)
        .map_err(|e| e.to_string())
}

fn parse_property(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_owned(), v.to_owned())),
        _ => Err(format!("{s:?} is not KEY=VALUE")),
    }
}

/// The kernel's ephemeral port range, from `ip_local_port_range`'s text ("32768\t60999").
fn ephemeral_range(text: &str) -> Option<(u32, u32)> {
    let mut parts = text.split_whitespace().map(str::parse::<u32>);
    match (parts.next(), parts.next(), parts.next()) {
        (Some(Ok(low)), Some(Ok(high)), None) if low <= high => Some((low, high)),
        _ => None,
    }
}

/// The configuration topic's default name (`kquota_cluster::DEFAULT_CONFIG_TOPIC`, spelt out so
/// that a build without the `cluster` feature has the same `--help`).
const DEFAULT_CONFIG_TOPIC: &str = "_kquota_config";

/// The default instance id: this host's name and the bootstrap listener's port.
#[cfg(feature = "cluster")]
fn default_instance_id(listen: SocketAddr) -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "kquota-proxy".to_owned());
    format!("{host}:{}", listen.port())
}

fn parse_policy(s: &str) -> Result<SubQuotaPolicy, String> {
    s.parse().map_err(|e: kquota::ParseError| e.to_string())
}

fn parse_client_auth(s: &str) -> Result<ClientAuth, String> {
    s.parse()
        .map_err(|e: kquota_wire::ParseError| e.to_string())
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

/// A setting that cannot work: its message, and the usage error's exit status.
fn usage(message: &str) -> ExitCode {
    eprintln!("kquota-proxy: {message}");
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let args = Args::parse();
    // Colours only on a terminal; no peer can flood the log.
    kquota_host::init_logging();
    // A thousand idle sockets must not lock everyone out at a soft limit of 1,024.
    kquota_host::raise_fd_limit();
    let mut config = ProxyConfig::new(args.listen, args.upstream);
    config.listen_base = args.listen_base;
    if let Some(base) = args.listen_base.filter(|b| b.port() != 0) {
        let range = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range");
        if let Some((low, high)) = range.ok().as_deref().and_then(ephemeral_range) {
            if u32::from(base.port()) + 1 >= low && u32::from(base.port()) < high {
                warn!(
                    "--listen-base {base}: broker ports from {} are inside the ephemeral port range \
                     {low}-{high}; an outgoing connection may take one before the proxy listens on it \
                     (choose a base below {low})",
                    u32::from(base.port()) + 1
                );
            }
        }
    }
    config.broker_map = args.broker_map.into_iter().collect::<BTreeMap<_, _>>();
    config.advertised_host = args.advertised_host;
    config.max_request_bytes = args.max_request_bytes;
    config.max_response_bytes = args.max_response_bytes;
    config.max_in_flight = args.max_in_flight;
    config.idle_timeout = Duration::from_millis(args.idle_timeout_ms);
    config.connect_timeout = Duration::from_millis(args.connect_timeout_ms);
    config.max_brokers = args.max_brokers;
    config.max_connections = args.max_connections;
    config.max_connections_per_ip = args.max_connections_per_ip.unwrap_or(usize::MAX);
    config.connection_grace = Duration::from_millis(args.connection_grace_ms);
    config.buffer_memory = args.buffer_memory_bytes;
    config.data_dir = (!args.no_store).then_some(args.data_dir);
    if let Some(bootstrap) = args.cluster_bootstrap {
        #[cfg(feature = "cluster")]
        {
            let id = args
                .instance_id
                .unwrap_or_else(|| default_instance_id(args.listen));
            let mut cluster = kquota_cluster::ClusterConfig::new(bootstrap, id);
            cluster.client_properties = args.cluster_properties.into_iter().collect();
            cluster.config_topic = args.cluster_config_topic;
            cluster.replication_factor = args.cluster_replication_factor;
            cluster.alter_timeout = Duration::from_millis(args.cluster_alter_timeout_ms);
            config.cluster = Some(cluster);
        }
        #[cfg(not(feature = "cluster"))]
        return usage(&format!(
            "--cluster-bootstrap {bootstrap}: this kquota-proxy was built without the `cluster` \
             feature (build it with `--features cluster`)"
        ));
    }
    config.super_users = args.super_users.map(|s| s.0).unwrap_or_default();
    config.describe_allow_anonymous = args.describe_allow_anonymous;
    config.draft_alter_quotas = args.draft_alter_quotas;
    config.policy = args.sub_quota_policy;
    config.instance_count = args.instance_count;
    config.producer_capacity = args.producer_capacity;
    config.consumer_capacity = args.consumer_capacity;
    config.metrics_listen = args.metrics_listen;
    config.metrics_max_buckets = args.metrics_max_buckets;
    config.meter = match MeterConfig::builder()
        .window_samples(args.quota_window_num)
        .window_size(Duration::from_secs(args.quota_window_size_seconds))
        .build()
    {
        Ok(m) => m,
        Err(e) => return usage(&e.to_string()),
    };
    if let (Some(cert), Some(key)) = (&args.tls_cert, &args.tls_key) {
        match ClientTls::from_files(
            cert,
            key,
            args.tls_client_ca.as_deref(),
            args.tls_client_auth,
            &args.ssl_principal_mapping_rules,
        ) {
            Ok(tls) => config.client_tls = Some(Arc::new(tls)),
            Err(e) => return usage(&e.to_string()),
        }
    }
    if let (true, Some(ca)) = (args.upstream_tls, &args.upstream_ca) {
        let client = args
            .upstream_cert
            .as_deref()
            .zip(args.upstream_key.as_deref());
        match UpstreamTls::from_files(ca, client) {
            Ok(tls) => config.upstream_tls = Some(Arc::new(tls)),
            Err(e) => return usage(&e.to_string()),
        }
    }
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
        proxy.serve(kquota_host::signal()).await;
        ExitCode::SUCCESS
    })
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn every_flag_parses_to_its_type() {
        Args::command().debug_assert();
        let args = Args::try_parse_from([
            "kquota-proxy",
            "--upstream",
            "kafka:9092",
            "--listen-base",
            "127.0.0.1:0",
            "--super-users",
            "User:admin;User:ops",
            "--sub-quota-policy",
            "kafka",
            "--tls-client-auth",
            "required",
            "--quota-window-num",
            "5",
            "--metrics-listen",
            "127.0.0.1:9404",
        ])
        .unwrap();
        let users = args.super_users.unwrap().0;
        assert_eq!(
            users,
            vec![Principal::user("admin"), Principal::user("ops")]
        );
        assert_eq!(args.sub_quota_policy, SubQuotaPolicy::Kafka);
        assert_eq!(args.tls_client_auth, ClientAuth::Required);
        assert_eq!(args.quota_window_num, 5);
        for bad in [
            &["--super-users", "alice"][..],
            &["--sub-quota-policy", "fair"],
            &["--tls-client-auth", "sometimes"],
            &["--upstream-tls"],
        ] {
            let argv = ["kquota-proxy", "--upstream", "k:9092"].iter().chain(bad);
            assert!(Args::try_parse_from(argv).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_ephemeral_range_is_read_from_the_kernels_text() {
        assert_eq!(ephemeral_range("32768\t60999\n"), Some((32768, 60999)));
        assert_eq!(ephemeral_range("1024 65535"), Some((1024, 65535)));
        for bad in ["", "32768", "a b", "60999 32768", "1 2 3"] {
            assert_eq!(ephemeral_range(bad), None, "{bad:?}");
        }
    }

    #[cfg(feature = "cluster")]
    #[test]
    fn the_config_topics_default_is_kquota_clusters() {
        assert_eq!(DEFAULT_CONFIG_TOPIC, kquota_cluster::DEFAULT_CONFIG_TOPIC);
    }
}
