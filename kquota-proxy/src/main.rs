//! `kquota-proxy`: a Kafka protocol proxy in front of a Kafka cluster.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use kquota_proxy::{parse_properties, Proxy, ProxyConfig, ProxySettings, SETTINGS};
use tracing::{info, warn};

/// The name a fatal line starts with.
const PROGRAM: &str = "kquota-proxy";

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
/// Settings come from an optional properties file in Kafka's style (--config), then from flags,
/// which win: a flag replaces the file's value of its key (--broker-map entries replace the
/// file's whole map; --cluster-property KEY=VALUE replaces only kquota.cluster.client.KEY). Each
/// flag below names its key. An unknown key, a bad value or a bad line stops the proxy with a
/// line naming the file, the line and the key, and exit status 2; so does a bad flag.
///
/// Examples:
///
///   kquota-proxy --upstream kafka-1:9092 --listen 127.0.0.1:9092 --listen-base 127.0.0.1:19000
///
///   kquota-proxy --config proxy.properties --upstream kafka-2:9092
///
/// A properties file:
///
///   kquota.proxy.upstream=kafka-1:9092
///   kquota.proxy.listen=127.0.0.1:9092
///   kquota.proxy.listen.base=127.0.0.1:19000
///   super.users=User:admin
///   kquota.data.dir=/var/lib/kquota-proxy
///   max.connections.per.ip=100
///   kquota.proxy.metrics.listen=127.0.0.1:9404
///
/// On SIGINT or SIGTERM it stops accepting and reading requests, delivers the answers in flight
/// (5 s at most), and exits. On SIGHUP it reads its TLS certificate, key and CA files again for
/// new connections (a file that does not load keeps the old; the log says why). Logs go to
/// stderr, as text or (--log-format json) one JSON object a line; RUST_LOG=debug shows each
/// connection; every alteration is logged once under the target kquota::audit.
/// docs/proxy-settings.md describes every setting.
#[derive(Debug, Parser)]
#[command(
    name = "kquota-proxy",
    version,
    verbatim_doc_comment,
    after_long_help = SETTINGS.help()
)]
struct Args {
    /// A Java properties file of the settings below (KEY=VALUE lines, # comments); flags win
    /// over it.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// kquota.proxy.upstream: the cluster's bootstrap address (required).
    #[arg(long, value_name = "HOST:PORT")]
    upstream: Option<String>,
    /// kquota.proxy.listen: the bootstrap listener clients are given as bootstrap.servers
    /// [default: 127.0.0.1:9092]
    #[arg(long, value_name = "IP:PORT")]
    listen: Option<String>,
    /// kquota.proxy.listen.base: broker N listens on this IP at PORT+N (PORT 0: a port the system
    /// chooses).
    #[arg(long, value_name = "IP:PORT")]
    listen_base: Option<String>,
    /// kquota.proxy.broker.map: broker NODE listens on IP:PORT (repeatable, or comma-separated
    /// entries; before --listen-base).
    #[arg(long = "broker-map", value_name = "NODE=IP:PORT")]
    broker_map: Vec<String>,
    /// kquota.proxy.advertised.host: the host named in rewritten responses (default: each broker
    /// listener's IP).
    #[arg(long, value_name = "HOST")]
    advertised_host: Option<String>,
    /// socket.request.max.bytes: the largest request frame [default: 104857600]
    #[arg(long, value_name = "BYTES", help_heading = "Limits")]
    max_request_bytes: Option<String>,
    /// kquota.proxy.max.response.bytes: the largest response frame from the cluster
    /// [default: 104857600]
    #[arg(long, value_name = "BYTES", help_heading = "Limits")]
    max_response_bytes: Option<String>,
    /// kquota.proxy.max.in.flight.requests: unanswered requests per connection before the proxy
    /// stops reading its requests [default: 32]
    #[arg(long, value_name = "N", help_heading = "Limits")]
    max_in_flight: Option<String>,
    /// connections.max.idle.ms: how long a connection may wait for a peer that neither sends nor
    /// takes bytes [default: 600000]
    #[arg(long, value_name = "MS", help_heading = "Limits")]
    idle_timeout_ms: Option<String>,
    /// kquota.proxy.connect.timeout.ms: how long connecting to a broker may take [default: 10000]
    #[arg(long, value_name = "MS", help_heading = "Limits")]
    connect_timeout_ms: Option<String>,
    /// kquota.proxy.max.brokers: how many brokers the proxy listens for at most [default: 1024]
    #[arg(long, value_name = "N", help_heading = "Limits")]
    max_brokers: Option<String>,
    /// max.connections: client connections open at once. When it is reached, the oldest
    /// connection not yet proven (from the address with the most), else the one idle longest,
    /// gives way to a new one. Lowered at start to what the open-files limit allows
    /// [default: 10000]
    #[arg(long, value_name = "N", help_heading = "Limits")]
    max_connections: Option<String>,
    /// max.connections.per.ip: client connections open at once from one address (default: no
    /// limit).
    #[arg(long, value_name = "N", help_heading = "Limits")]
    max_connections_per_ip: Option<String>,
    /// num.network.threads: the threads that serve client connections; each connection stays on
    /// the one it was given when accepted, so that its wake-ups never cross threads (default:
    /// one per CPU)
    #[arg(long, value_name = "N", help_heading = "Limits")]
    num_network_threads: Option<String>,
    /// kquota.connections.grace.ms: how long a new connection has to prove itself (the broker
    /// authenticated it, or answered a request that needs no authentication) before it is
    /// closed; until then it is the first to give way at max.connections [default: 10000]
    #[arg(long, value_name = "MS", help_heading = "Limits")]
    connection_grace_ms: Option<String>,
    /// kquota.proxy.buffer.memory.bytes: the bytes held at once for requests being read and
    /// answers not yet taken by their clients, over every connection; reading waits while they
    /// are spent. At least the largest frame (--max-request-bytes, --max-response-bytes) plus 4
    /// [default: 268435456]
    #[arg(long, value_name = "BYTES", help_heading = "Limits")]
    buffer_memory_bytes: Option<String>,

    /// kquota.data.dir: where quotas altered at the proxy are kept (a redb store, created if
    /// missing) [default: kquota-proxy-data]
    #[arg(long, value_name = "DIR", help_heading = "Quotas")]
    data_dir: Option<String>,
    /// kquota.proxy.store.enable=false: keep quotas in memory only; they are lost when the proxy
    /// stops (the key's [default: true])
    #[arg(long, conflicts_with = "data_dir", help_heading = "Quotas")]
    no_store: bool,
    /// super.users: who may alter quotas at the proxy (User:NAME;User:NAME). On a PLAINTEXT
    /// listener without SASL every client is User:ANONYMOUS.
    #[arg(long, value_name = "PRINCIPALS", help_heading = "Quotas")]
    super_users: Option<String>,
    /// kquota.describe.allow.anonymous: let User:ANONYMOUS describe quotas (authenticated
    /// principals always may); the flag alone is true [default: false]
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true", help_heading = "Quotas")]
    describe_allow_anonymous: Option<String>,
    /// kquota.draft.alter.quotas.enable: serve the seeds' draft AlterQuotas on API key 50 (hides
    /// the cluster's DescribeUserScramCredentials); the flag alone is true [default: false]
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true", help_heading = "Quotas")]
    draft_alter_quotas: Option<String>,
    /// kquota.sub.quota.policy: how a user's client sub-quotas share its total: kip55
    /// (remainders) or kafka [default: kip55]
    #[arg(long, value_name = "POLICY", help_heading = "Quotas")]
    sub_quota_policy: Option<String>,
    /// kquota.broker.count: how many proxies share the :bps quotas (each enforces the limit
    /// divided by this) [default: 1]
    #[arg(long, value_name = "N", help_heading = "Quotas")]
    instance_count: Option<String>,
    /// kquota.producer.capacity.bytes.per.sec: the bytes/s that producer_byte_rate:shares
    /// divides.
    #[arg(long, value_name = "BYTES_PER_SEC", help_heading = "Quotas")]
    producer_capacity: Option<String>,
    /// kquota.consumer.capacity.bytes.per.sec: the bytes/s that consumer_byte_rate:shares
    /// divides.
    #[arg(long, value_name = "BYTES_PER_SEC", help_heading = "Quotas")]
    consumer_capacity: Option<String>,
    /// quota.window.num: the samples a rate is measured over [default: 11]
    #[arg(long, value_name = "N", help_heading = "Quotas")]
    quota_window_num: Option<String>,
    /// quota.window.size.seconds: each sample's length [default: 1]
    #[arg(long, value_name = "SECONDS", help_heading = "Quotas")]
    quota_window_size_seconds: Option<String>,

    /// kquota.cluster.bootstrap.servers: share one configuration, the membership and bps usage
    /// with the other proxies through this Kafka cluster (its bootstrap.servers; usually the
    /// cluster behind the proxy). Quotas are then kept in the configuration topic, not in
    /// --data-dir.
    #[arg(long, value_name = "HOST:PORT,...", help_heading = "Many proxies")]
    cluster_bootstrap: Option<String>,
    /// kquota.cluster.instance.id: this proxy's id among the others (default: the host name and
    /// the bootstrap listener's port); unique, and the same across restarts.
    #[arg(long, value_name = "ID", help_heading = "Many proxies")]
    instance_id: Option<String>,
    /// kquota.cluster.client.*: a librdkafka property for the proxy's own Kafka clients
    /// (repeatable): KEY=VALUE sets kquota.cluster.client.KEY, e.g. security.protocol=SASL_SSL.
    #[arg(
        long = "cluster-property",
        value_name = "KEY=VALUE",
        help_heading = "Many proxies"
    )]
    cluster_properties: Vec<String>,
    /// kquota.cluster.config.topic: the configuration topic (one partition, compacted; created if
    /// missing) [default: _kquota_config]
    #[arg(long, value_name = "TOPIC", help_heading = "Many proxies")]
    cluster_config_topic: Option<String>,
    /// kquota.cluster.replication.factor: the replication factor of the topics the proxy creates
    /// (-1: the cluster's default) [default: -1]
    #[arg(
        long,
        value_name = "N",
        allow_negative_numbers = true,
        help_heading = "Many proxies"
    )]
    cluster_replication_factor: Option<String>,
    /// kquota.cluster.alter.timeout.ms: how long an alteration may wait for the configuration log
    /// before it is refused [default: 10000]
    #[arg(long, value_name = "MS", help_heading = "Many proxies")]
    cluster_alter_timeout_ms: Option<String>,

    /// kquota.proxy.metrics.listen: serve Prometheus metrics at http://IP:PORT/metrics.
    #[arg(long, value_name = "IP:PORT", help_heading = "Metrics")]
    metrics_listen: Option<String>,
    /// kquota.proxy.metrics.max.buckets: buckets with series of their own; the rest are summed
    /// into one [default: 1000]
    #[arg(long, value_name = "N", help_heading = "Metrics")]
    metrics_max_buckets: Option<String>,

    /// log.format: how log lines are written: text, or json (one object a line) for log
    /// shippers [default: text]
    #[arg(long, value_name = "FORMAT", help_heading = "Logs")]
    log_format: Option<String>,

    /// kquota.proxy.ssl.certificate.location: TLS towards clients on every listener: the
    /// certificate chain (PEM); needs --tls-key.
    #[arg(long, value_name = "PEM", help_heading = "TLS")]
    tls_cert: Option<String>,
    /// kquota.proxy.ssl.key.location: the private key of --tls-cert (PEM, unencrypted; may be the
    /// same file).
    #[arg(long, value_name = "PEM", help_heading = "TLS")]
    tls_key: Option<String>,
    /// ssl.truststore.location: the CA certificates client certificates are checked against
    /// (PEM); needs --tls-cert.
    #[arg(long, value_name = "PEM", help_heading = "TLS")]
    tls_client_ca: Option<String>,
    /// ssl.client.auth: none, requested or required; requested or required need --tls-client-ca
    /// [default: none]
    #[arg(long, value_name = "MODE", help_heading = "TLS")]
    tls_client_auth: Option<String>,
    /// ssl.principal.mapping.rules: how a client certificate's DN becomes a user
    /// [default: DEFAULT]
    #[arg(long, value_name = "RULES", help_heading = "TLS")]
    ssl_principal_mapping_rules: Option<String>,
    /// kquota.proxy.upstream.ssl.enable: TLS towards the cluster; needs --upstream-ca; the flag
    /// alone is true [default: false]
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true", help_heading = "TLS")]
    upstream_tls: Option<String>,
    /// kquota.proxy.upstream.ssl.truststore.location: the CA certificates the cluster's
    /// certificates are checked against (PEM).
    #[arg(long, value_name = "PEM", help_heading = "TLS")]
    upstream_ca: Option<String>,
    /// kquota.proxy.upstream.ssl.certificate.location: a client certificate towards the cluster
    /// (PEM); needs --upstream-key.
    #[arg(long, value_name = "PEM", help_heading = "TLS")]
    upstream_cert: Option<String>,
    /// kquota.proxy.upstream.ssl.key.location: the private key of --upstream-cert (PEM).
    #[arg(long, value_name = "PEM", help_heading = "TLS")]
    upstream_key: Option<String>,
}

/// The key `flag` sets, from the settings' table.
fn key_of(flag: &str) -> &'static str {
    SETTINGS
        .by_flag(flag)
        .map(|s| s.key)
        .expect("every flag is in kquota_proxy::SETTINGS (a test checks it)")
}

/// The flags given, in the order they are applied: `(flag, key, value)`.
fn flag_settings(args: &Args) -> Result<Vec<(&'static str, String, String)>, String> {
    let mut out = Vec::new();
    let mut one = |flag: &'static str, value: &Option<String>| {
        if let Some(value) = value {
            out.push((flag, key_of(flag).to_owned(), value.clone()));
        }
    };
    one("--upstream", &args.upstream);
    one("--listen", &args.listen);
    one("--listen-base", &args.listen_base);
    // One key for every entry: the flag's entries replace the file's map.
    let broker_map = (!args.broker_map.is_empty()).then(|| args.broker_map.join(","));
    one("--broker-map", &broker_map);
    one("--advertised-host", &args.advertised_host);
    one("--max-request-bytes", &args.max_request_bytes);
    one("--max-response-bytes", &args.max_response_bytes);
    one("--max-in-flight", &args.max_in_flight);
    one("--idle-timeout-ms", &args.idle_timeout_ms);
    one("--connect-timeout-ms", &args.connect_timeout_ms);
    one("--max-brokers", &args.max_brokers);
    one("--max-connections", &args.max_connections);
    one("--max-connections-per-ip", &args.max_connections_per_ip);
    one("--num-network-threads", &args.num_network_threads);
    one("--connection-grace-ms", &args.connection_grace_ms);
    one("--buffer-memory-bytes", &args.buffer_memory_bytes);
    one("--data-dir", &args.data_dir);
    one("--no-store", &args.no_store.then(|| "false".to_owned()));
    one("--super-users", &args.super_users);
    one("--describe-allow-anonymous", &args.describe_allow_anonymous);
    one("--draft-alter-quotas", &args.draft_alter_quotas);
    one("--sub-quota-policy", &args.sub_quota_policy);
    one("--instance-count", &args.instance_count);
    one("--producer-capacity", &args.producer_capacity);
    one("--consumer-capacity", &args.consumer_capacity);
    one("--quota-window-num", &args.quota_window_num);
    one(
        "--quota-window-size-seconds",
        &args.quota_window_size_seconds,
    );
    one("--cluster-bootstrap", &args.cluster_bootstrap);
    one("--instance-id", &args.instance_id);
    one("--cluster-config-topic", &args.cluster_config_topic);
    one(
        "--cluster-replication-factor",
        &args.cluster_replication_factor,
    );
    one("--cluster-alter-timeout-ms", &args.cluster_alter_timeout_ms);
    one("--metrics-listen", &args.metrics_listen);
    one("--metrics-max-buckets", &args.metrics_max_buckets);
    one("--log-format", &args.log_format);
    one("--tls-cert", &args.tls_cert);
    one("--tls-key", &args.tls_key);
    one("--tls-client-ca", &args.tls_client_ca);
    one("--tls-client-auth", &args.tls_client_auth);
    one(
        "--ssl-principal-mapping-rules",
        &args.ssl_principal_mapping_rules,
    );
    one("--upstream-tls", &args.upstream_tls);
    one("--upstream-ca", &args.upstream_ca);
    one("--upstream-cert", &args.upstream_cert);
    one("--upstream-key", &args.upstream_key);
    // Each property is a key of its own: it replaces only the file's value of that property.
    for item in &args.cluster_properties {
        match item.split_once('=') {
            Some((k, v)) if !k.trim().is_empty() => out.push((
                "--cluster-property",
                format!("kquota.cluster.client.{}", k.trim()),
                v.to_owned(),
            )),
            _ => return Err(format!("--cluster-property {item}: expected KEY=VALUE")),
        }
    }
    Ok(out)
}

/// The settings as given: the file's, then the flags', each value checked as it is set; and
/// where each key was last set, for the errors that only building finds (TLS, cluster). An error
/// names where its setting came from: `FILE: line N: ` or `--flag: `.
fn given(args: &Args) -> Result<(ProxySettings, HashMap<String, String>), String> {
    let mut given = ProxySettings::default();
    let mut origin: HashMap<String, String> = HashMap::new();
    if let Some(path) = &args.config {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let props = parse_properties(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        for p in props {
            let at = format!("{}: line {}", path.display(), p.line);
            given
                .set(&p.key, &p.value)
                .map_err(|e| format!("{at}: {e}"))?;
            origin.insert(p.key, at);
        }
    }
    for (flag, key, value) in flag_settings(args)? {
        given
            .set(&key, &value)
            .map_err(|e| format!("{flag}: {e}"))?;
        origin.insert(key, flag.to_owned());
    }
    Ok((given, origin))
}

/// The configuration: the settings given, checked together.
fn settings(args: &Args) -> Result<ProxyConfig, String> {
    let (given, origin) = given(args)?;
    given
        .build()
        .map_err(|e| match e.key().and_then(|k| origin.get(k)) {
            Some(at) => format!("{at}: {e}"),
            None => e.to_string(),
        })
}

/// The kernel's ephemeral port range, from `ip_local_port_range`'s text ("32768\t60999").
fn ephemeral_range(text: &str) -> Option<(u32, u32)> {
    let mut parts = text.split_whitespace().map(str::parse::<u32>);
    match (parts.next(), parts.next(), parts.next()) {
        (Some(Ok(low)), Some(Ok(high)), None) if low <= high => Some((low, high)),
        _ => None,
    }
}

fn main() -> ExitCode {
    // What a start that fails before the settings are read is written as.
    let asked = kquota_host::log_format_in_args(std::env::args_os());
    let args = match Args::try_parse() {
        Ok(args) => args,
        Err(e) => return kquota_host::refused_flags(PROGRAM, asked, e),
    };
    let config = match settings(&args) {
        Ok(c) => c,
        // A setting that cannot work is the operator's to fix, like a bad flag.
        Err(e) => {
            return kquota_host::fatal(PROGRAM, asked, &e.to_string(), kquota_host::exit::USAGE)
        }
    };
    let format = config.log_format();
    // In the format the settings ask for; colours only on a terminal; no peer can flood the log.
    kquota_host::init_logging(format);
    // A thousand idle sockets must not lock everyone out at a soft limit of 1,024.
    kquota_host::raise_fd_limit();
    if let Some(base) = config.listen_base().filter(|b| b.port() != 0) {
        let range = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range");
        if let Some((low, high)) = range.ok().as_deref().and_then(ephemeral_range) {
            if u32::from(base.port()) + 1 >= low && u32::from(base.port()) < high {
                warn!(
                    "kquota.proxy.listen.base={base} (--listen-base): broker ports from {} are \
                     inside the ephemeral port range {low}-{high}; an outgoing connection may take \
                     one before the proxy listens on it (choose a base below {low})",
                    u32::from(base.port()) + 1
                );
            }
        }
    }
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            let message = format!("cannot start the runtime: {e}");
            return kquota_host::fatal(PROGRAM, format, &message, kquota_host::exit::FAILURE);
        }
    };
    runtime.block_on(async {
        let upstream = config.upstream().clone();
        let proxy = match Proxy::bind(config).await {
            Ok(p) => p,
            Err(e) => return kquota_host::fatal(PROGRAM, format, &e.to_string(), e.exit_status()),
        };
        info!(listen = %proxy.local_addr(), %upstream, "kquota-proxy serving");
        proxy.serve(kquota_host::signal()).await;
        ExitCode::SUCCESS
    })
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use clap::CommandFactory;
    use kquota::SubQuotaPolicy;
    use kquota_wire::Principal;

    use super::*;

    /// The flags clap knows, as `--long`, without --help, --version and --config.
    fn flags() -> Vec<String> {
        Args::command()
            .get_arguments()
            .filter_map(|a| a.get_long())
            .filter(|l| !["help", "version", "config"].contains(l))
            .map(|l| format!("--{l}"))
            .collect()
    }

    #[test]
    fn every_flag_has_a_key_and_sets_it() {
        Args::command().debug_assert();
        let flags = flags();
        assert_eq!(flags.len(), SETTINGS.iter().count(), "{flags:?}");
        for flag in &flags {
            let arg = Args::command()
                .get_arguments()
                .find(|a| a.get_long() == flag.strip_prefix("--"))
                .cloned()
                .unwrap();
            let takes_value = arg.get_action().takes_values();
            let mut argv = vec!["kquota-proxy", flag.as_str()];
            if takes_value {
                argv.push("k=v");
            }
            let args = Args::try_parse_from(&argv).unwrap();
            let given = flag_settings(&args).unwrap();
            let key = SETTINGS.by_flag(flag).unwrap().key;
            let key = key.replace('*', "k");
            assert_eq!(given.len(), 1, "{flag}: {given:?}");
            assert_eq!((given[0].0, given[0].1.as_str()), (flag.as_str(), &*key));
        }
    }

    #[test]
    fn every_flags_help_names_its_key_and_default() {
        let command = Args::command();
        for s in SETTINGS.iter() {
            let flag = s.flag.unwrap_or_else(|| panic!("{} has no flag", s.key));
            let arg = command
                .get_arguments()
                .find(|a| a.get_long() == flag.strip_prefix("--"))
                .unwrap_or_else(|| panic!("{} has no flag {flag}", s.key));
            let help = arg.get_help().map(ToString::to_string).unwrap_or_default();
            assert!(help.starts_with(s.key), "{flag}: {help}");
            if let Some(default) = s.default {
                assert!(
                    help.contains(&format!("[default: {default}]")),
                    "{flag}: {help}"
                );
            }
        }
    }

    #[test]
    fn the_bare_flags_keep_their_meaning() {
        let args = Args::try_parse_from([
            "kquota-proxy",
            "--no-store",
            "--describe-allow-anonymous",
            "--upstream-tls",
            "--upstream-ca",
            "ca.pem",
            "--draft-alter-quotas",
            "false",
        ])
        .unwrap();
        let given: Vec<_> = flag_settings(&args)
            .unwrap()
            .into_iter()
            .map(|(_, k, v)| format!("{k}={v}"))
            .collect();
        assert_eq!(
            given,
            [
                "kquota.proxy.store.enable=false",
                "kquota.describe.allow.anonymous=true",
                "kquota.draft.alter.quotas.enable=false",
                "kquota.proxy.upstream.ssl.enable=true",
                "kquota.proxy.upstream.ssl.truststore.location=ca.pem",
            ]
        );
        assert!(Args::try_parse_from(["kquota-proxy", "--no-store", "--data-dir", "d"]).is_err());
        let args = Args::try_parse_from(["kquota-proxy", "--cluster-property", "novalue"]).unwrap();
        assert_eq!(
            flag_settings(&args).unwrap_err(),
            "--cluster-property novalue: expected KEY=VALUE"
        );
    }

    /// A file in the temporary directory, removed when dropped.
    struct TempFile(PathBuf);

    impl TempFile {
        fn new(name: &str, text: &str) -> TempFile {
            let path = std::env::temp_dir()
                .join(format!("kquota-proxy-main-{}-{name}", std::process::id()));
            std::fs::write(&path, text).unwrap();
            TempFile(path)
        }

        fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for TempFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    fn args(file: &TempFile, flags: &[&str]) -> Args {
        let mut argv = vec!["kquota-proxy", "--config", file.path().to_str().unwrap()];
        argv.extend(flags);
        Args::try_parse_from(argv).unwrap()
    }

    fn parse(file: &TempFile, flags: &[&str]) -> Result<ProxyConfig, String> {
        settings(&args(file, flags))
    }

    fn parse_given(file: &TempFile, flags: &[&str]) -> Result<ProxySettings, String> {
        given(&args(file, flags)).map(|(given, _)| given)
    }

    #[test]
    fn flags_win_over_the_file() {
        let file = TempFile::new(
            "flags-win.properties",
            "kquota.proxy.upstream=file:9092\n\
             kquota.proxy.broker.map=1=127.0.0.1:19001,2=127.0.0.1:19002\n\
             max.connections=5\n\
             super.users=User:file\n\
             kquota.sub.quota.policy=kafka\n",
        );
        let config = parse_given(&file, &[]).unwrap();
        assert_eq!(config.upstream.unwrap().to_string(), "file:9092");
        assert_eq!(config.max_connections.get(), 5);
        assert_eq!(config.broker_map.len(), 2);
        let config = parse_given(
            &file,
            &[
                "--max-connections",
                "7",
                "--super-users",
                "User:flag",
                "--broker-map",
                "3=127.0.0.1:19003",
            ],
        )
        .unwrap();
        // The flags' keys take the flags' values; the others keep the file's.
        assert_eq!(config.max_connections.get(), 7);
        assert_eq!(config.super_users, [Principal::user("flag")]);
        assert_eq!(config.broker_map.keys().copied().collect::<Vec<_>>(), [3]);
        assert_eq!(config.upstream.unwrap().to_string(), "file:9092");
        assert_eq!(config.policy, SubQuotaPolicy::Kafka);
        // A flag's bad value is named by the flag and its key.
        assert_eq!(
            parse(&file, &["--max-connections", "0"]).unwrap_err(),
            "--max-connections: max.connections=0: must be a whole number ≥ 1"
        );
    }

    #[cfg(feature = "cluster")]
    #[test]
    fn cluster_properties_from_flags_replace_only_their_own() {
        let file = TempFile::new(
            "cluster.properties",
            "kquota.proxy.upstream=k:9092\nkquota.proxy.listen.base=127.0.0.1:0\n\
             kquota.cluster.bootstrap.servers=k:9092\n\
             kquota.cluster.client.security.protocol=SSL\n\
             kquota.cluster.client.client.rack=a\n",
        );
        let config = parse(&file, &["--cluster-property", "client.rack=b"]).unwrap();
        let cluster = config.cluster().unwrap();
        assert_eq!(
            cluster
                .client_properties
                .clone()
                .into_iter()
                .collect::<Vec<_>>(),
            [
                ("client.rack".to_owned(), "b".to_owned()),
                ("security.protocol".to_owned(), "SSL".to_owned()),
            ]
        );
    }

    #[test]
    fn errors_name_the_file_line_and_key() {
        let file = TempFile::new(
            "bad.properties",
            "# a comment\nkquota.proxy.upstream=k:9092\nmax.connections=lots\n",
        );
        assert_eq!(
            parse(&file, &[]).unwrap_err(),
            format!(
                "{}: line 3: max.connections=lots: must be a whole number ≥ 1",
                file.path().display()
            )
        );
        let file = TempFile::new(
            "rules.properties",
            "kquota.proxy.upstream=k:9092\nkquota.proxy.listen.base=127.0.0.1:0\n\
             ssl.principal.mapping.rules=RULE:^CN=(.*)$/$1/\n",
        );
        // Found when finishing, and still named by its line.
        assert_eq!(
            parse(&file, &[]).unwrap_err(),
            format!(
                "{}: line 3: ssl.principal.mapping.rules (--ssl-principal-mapping-rules) needs \
                 kquota.proxy.ssl.certificate.location (--tls-cert)",
                file.path().display()
            )
        );
        let none = Args::try_parse_from(["kquota-proxy"]).unwrap();
        assert_eq!(
            settings(&none).unwrap_err(),
            "kquota.proxy.upstream (--upstream) is required"
        );
    }

    #[test]
    fn the_ephemeral_range_is_read_from_the_kernels_text() {
        assert_eq!(ephemeral_range("32768\t60999\n"), Some((32768, 60999)));
        assert_eq!(ephemeral_range("1024 65535"), Some((1024, 65535)));
        for bad in ["", "32768", "a b", "60999 32768", "1 2 3"] {
            assert_eq!(ephemeral_range(bad), None, "{bad:?}");
        }
    }
}
