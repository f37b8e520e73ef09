//! `kquotad`: the reference quota server. Serves Kafka's quota admin APIs on PLAINTEXT, SSL,
//! SASL_PLAINTEXT and SASL_SSL listeners from an engine backed by a durable embedded store.

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use kquota_wire::{Credentials, ScramCredential, ScramMechanism};
use kquotad::{parse_properties, Server, ServerConfig, ServerSettings, StartError, SETTINGS};
use tracing::{info, warn};

/// The name a fatal line starts with.
const PROGRAM: &str = "kquotad";

#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Serve Kafka's client-quota admin APIs (DescribeClientQuotas, AlterClientQuotas,
/// DescribeUserScramCredentials on apiKey 50, or there the seeds' draft AlterQuotas with
/// --draft-alter-quotas true) from a durable local store.
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
///   kquotad scram-credential --user alice --file users.json < password.txt
///
/// A properties file:
///
///   listeners=PLAINTEXT://127.0.0.1:9092,SASL_SSL://127.0.0.1:9093
///   super.users=User:admin
///   sasl.enabled.mechanisms=SCRAM-SHA-512
///   sasl.credentials.file=/etc/kquota/users.json
///   ssl.keystore.type=PEM
///   ssl.keystore.location=/etc/kquota/server.pem
///   kquota.data.dir=/var/lib/kquota
///   kquota.sub.quota.policy=kip55
///   kquota.broker.count=3
///   kquota.producer.capacity.bytes.per.sec=104857600
///   socket.request.max.bytes=104857600
///   queued.max.request.bytes=268435456
///   max.connections=1024
///   max.connections.per.ip=100
///   num.network.threads=4
///   connections.max.idle.ms=600000
///   kquota.connections.grace.ms=10000
///
/// A new connection has kquota.connections.grace.ms to authenticate (SASL) or, on PLAINTEXT and
/// SSL, to send a valid request; then it is closed. When max.connections is reached, a new
/// connection is still accepted: the oldest connection that has not authenticated (from the
/// address with the most), else the one idle longest (for at least the grace period), makes room.
/// Log lines about one client address are held to a few per second; the rest are counted.
///
/// On SIGHUP it reads its TLS keystore and truststore files and sasl.credentials.file again and
/// uses them for new connections (a file that does not load keeps the old; the log says why).
/// On SIGINT or SIGTERM it stops accepting, finishes and answers the requests it is handling
/// (alterations are already on disk by then) and exits; a client that has not taken its answer
/// 5 s after that, or that is still sending a request, is closed without one.
///
/// Only super.users may alter quotas; describing needs an authenticated principal unless
/// kquota.describe.allow.anonymous=true. docs/security.md has every security setting.
///
/// Logs go to stderr, as text or (--log-format json) one JSON object a line; set RUST_LOG (for
/// example RUST_LOG=debug) to change the level. Every alteration is logged once under the target
/// kquota::audit.
#[derive(Debug, Parser)]
#[command(
    name = "kquotad",
    version,
    verbatim_doc_comment,
    args_conflicts_with_subcommands = true,
    after_long_help = SETTINGS.help()
)]
struct Args {
    #[command(subcommand)]
    command: Option<Command>,
    /// A properties file (key=value lines, # comments).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Where to listen: NAME://host:port[,...] [default: PLAINTEXT://127.0.0.1:9092]
    #[arg(long, value_name = "LISTENERS")]
    listeners: Option<String>,
    /// Listener names to protocols: NAME:PROTOCOL[,...]
    #[arg(long, value_name = "MAP")]
    listener_security_protocol_map: Option<String>,
    /// What clients are told to connect to: NAME://host:port[,...] [default: each listener]
    #[arg(long, value_name = "LISTENERS")]
    advertised_listeners: Option<String>,
    /// Principals that may alter quotas: User:alice;User:bob [default: none]
    #[arg(long, value_name = "PRINCIPALS")]
    super_users: Option<String>,
    /// SCRAM credentials of SASL users (JSON; see `kquotad scram-credential`)
    #[arg(long, value_name = "FILE")]
    sasl_credentials_file: Option<String>,
    /// SASL mechanisms offered [default: SCRAM-SHA-256,SCRAM-SHA-512]
    #[arg(long, value_name = "MECHANISMS")]
    sasl_enabled_mechanisms: Option<String>,
    /// Any property, as in the properties file (repeatable); wins over the file
    #[arg(long = "override", value_name = "KEY=VALUE")]
    overrides: Vec<String>,
    /// Directory of the quota store [default: ./kquota-data]
    #[arg(long, value_name = "DIR")]
    data_dir: Option<String>,
    /// Serve Prometheus metrics at http://IP:PORT/metrics, with /healthz and /readyz
    /// (kquota.metrics.listen) [default: off]
    #[arg(long, value_name = "IP:PORT")]
    metrics_listen: Option<String>,
    /// Keep the configuration in this Kafka cluster's configuration topic instead, shared with
    /// every instance pointed at it (kquota.cluster.bootstrap.servers; see also
    /// kquota.cluster.instance.id and kquota.cluster.client.* with --override)
    #[arg(long, value_name = "HOST:PORT,...")]
    cluster_bootstrap: Option<String>,
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
    /// Request bytes read or queued at once over all connections; reading waits while they are
    /// spent; at least --max-request-bytes, or -1 for no limit [default: 268435456]
    #[arg(long, value_name = "BYTES")]
    queued_max_request_bytes: Option<String>,
    /// Most connections open at once [default: 1024]
    #[arg(long, value_name = "N")]
    max_connections: Option<String>,
    /// Threads that serve client connections, 1-256; each connection stays on the one it was
    /// given when accepted, in turn (num.network.threads) [default: one per CPU]
    #[arg(long, value_name = "N")]
    num_network_threads: Option<String>,
    /// Close connections idle this long, in milliseconds [default: 600000]
    #[arg(long, value_name = "MS")]
    idle_timeout_ms: Option<String>,
    /// This node's id [default: 1]
    #[arg(long, value_name = "ID")]
    node_id: Option<String>,
    /// What apiKey 50 serves: false (the default) serves Kafka's DescribeUserScramCredentials (the
    /// SASL users' mechanisms and iterations, which kafka-configs --describe --entity-type users
    /// asks for); true serves the seeds' draft AlterQuotas instead, for clients written against the
    /// draft (Kafka's tools then time out describing users) [default: false]
    #[arg(long, value_name = "BOOL")]
    draft_alter_quotas: Option<String>,
    /// How log lines are written: text, or json (one object a line) [default: text]
    #[arg(long, value_name = "FORMAT")]
    log_format: Option<String>,
}

/// Operator tools.
#[derive(Debug, Subcommand)]
enum Command {
    /// Make a SASL credentials entry from a password read on stdin (first line). The file stores
    /// only SCRAM salted hashes. Prints the credentials JSON, or adds the user to --file.
    ///
    ///   printf '%s\n' "$PASSWORD" | kquotad scram-credential --user alice --file users.json
    #[command(verbatim_doc_comment)]
    ScramCredential {
        /// The user name.
        #[arg(long)]
        user: String,
        /// SCRAM-SHA-256, SCRAM-SHA-512 or both [default: both]
        #[arg(long, value_name = "MECHANISM")]
        mechanism: Option<String>,
        /// PBKDF2 iterations, 4096-16384
        #[arg(long, default_value_t = 4096)]
        iterations: u32,
        /// A credentials file to add the user to (created if missing; other users are kept)
        #[arg(long, value_name = "FILE")]
        file: Option<PathBuf>,
    },
}

/// `kquotad scram-credential`.
fn scram_credential(
    user: &str,
    mechanism: Option<&str>,
    iterations: u32,
    file: Option<&std::path::Path>,
) -> Result<(), String> {
    if user.is_empty() {
        return Err("--user must not be empty".to_owned());
    }
    let mechanisms = match mechanism {
        None => ScramMechanism::ALL.to_vec(),
        Some(m) => vec![ScramMechanism::from_name(m)
            .ok_or_else(|| format!("--mechanism {m}: expected SCRAM-SHA-256 or SCRAM-SHA-512"))?],
    };
    let mut password = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut password)
        .map_err(|e| format!("cannot read the password from stdin: {e}"))?;
    let password = password.trim_end_matches(['\n', '\r']);
    if password.is_empty() {
        return Err("no password on stdin (write it as the first line)".to_owned());
    }
    let mut credentials = match file {
        Some(path) if path.exists() => Credentials::load(path).map_err(|e| e.to_string())?,
        _ => Credentials::new(),
    };
    for m in mechanisms {
        let c = ScramCredential::generate(m, password, iterations).map_err(|e| e.to_string())?;
        credentials.insert(user, c);
    }
    match file {
        None => {
            let mut out = std::io::stdout().lock();
            out.write_all(credentials.to_json().as_bytes())
                .and_then(|()| out.flush())
                .map_err(|e| format!("cannot write the credentials to stdout: {e}"))?;
        }
        Some(path) => {
            // Write a sibling and rename, so a crash never leaves a half-written file.
            let tmp = path.with_extension("tmp");
            std::fs::write(&tmp, credentials.to_json())
                .and_then(|_| std::fs::rename(&tmp, path))
                .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
            eprintln!("kquotad: {} users in {}", credentials.len(), path.display());
        }
    }
    Ok(())
}

/// The flags that set a key, as given: `(flag, value)`; the table names the key of each.
fn flag_settings(args: &Args) -> [(&'static str, &Option<String>); 21] {
    [
        ("--listeners", &args.listeners),
        (
            "--listener-security-protocol-map",
            &args.listener_security_protocol_map,
        ),
        ("--advertised-listeners", &args.advertised_listeners),
        ("--super-users", &args.super_users),
        ("--sasl-credentials-file", &args.sasl_credentials_file),
        ("--sasl-enabled-mechanisms", &args.sasl_enabled_mechanisms),
        ("--data-dir", &args.data_dir),
        ("--metrics-listen", &args.metrics_listen),
        ("--cluster-bootstrap", &args.cluster_bootstrap),
        ("--sub-quota-policy", &args.sub_quota_policy),
        ("--broker-count", &args.broker_count),
        ("--producer-capacity", &args.producer_capacity),
        ("--consumer-capacity", &args.consumer_capacity),
        ("--max-request-bytes", &args.max_request_bytes),
        ("--queued-max-request-bytes", &args.queued_max_request_bytes),
        ("--max-connections", &args.max_connections),
        ("--num-network-threads", &args.num_network_threads),
        ("--idle-timeout-ms", &args.idle_timeout_ms),
        ("--node-id", &args.node_id),
        ("--draft-alter-quotas", &args.draft_alter_quotas),
        ("--log-format", &args.log_format),
    ]
}

/// The key `flag` sets, from the settings' table.
fn key_of(flag: &str) -> &'static str {
    SETTINGS
        .by_flag(flag)
        .map(|s| s.key)
        .expect("every flag is in kquotad::SETTINGS (a test checks it)")
}

/// The settings: the file's, then `--override`'s, then the flags', checked together; and warnings
/// about them to log once the log (whose format they set) is up.
fn settings(args: &Args) -> Result<(ServerConfig, Vec<String>), String> {
    let mut given = ServerSettings::default();
    let mut warnings = Vec::new();
    if let Some(path) = &args.config {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let props = parse_properties(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        for p in &props {
            let at = format!("{}: line {}", path.display(), p.line);
            if SETTINGS.find(&p.key).is_some() {
                given
                    .set(&p.key, &p.value)
                    .map_err(|e| format!("{at}: {e}"))?;
            } else {
                // Warned and left, as Kafka's broker does with keys it does not use: a Kafka
                // server.properties, with its many broker keys, is a valid kquotad file.
                warnings.push(format!("{at}: ignoring {}", SETTINGS.unknown(&p.key)));
            }
        }
    }
    for item in &args.overrides {
        let (key, value) = item
            .split_once('=')
            .ok_or_else(|| format!("--override {item}: expected KEY=VALUE"))?;
        given
            .set(key.trim(), value.trim())
            .map_err(|e| format!("--override: {e}"))?;
    }
    for (flag, value) in flag_settings(args) {
        if let Some(value) = value {
            given.set(key_of(flag), value).map_err(|e| e.to_string())?;
        }
    }
    let config = given.build().map_err(|e| e.to_string())?;
    Ok((config, warnings))
}

fn main() -> ExitCode {
    // What a start that fails before the settings are read is written as.
    let asked = kquota_host::log_format_in_args(std::env::args_os());
    let args = match Args::try_parse() {
        Ok(args) => args,
        Err(e) => return kquota_host::refused_flags(PROGRAM, asked, e),
    };
    if let Some(Command::ScramCredential {
        user,
        mechanism,
        iterations,
        file,
    }) = &args.command
    {
        return match scram_credential(user, mechanism.as_deref(), *iterations, file.as_deref()) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("kquotad scram-credential: {e}");
                ExitCode::from(2)
            }
        };
    }
    let (config, warnings) = match settings(&args) {
        Ok(c) => c,
        Err(e) => {
            return kquota_host::fatal(PROGRAM, asked, &e.to_string(), kquota_host::exit::USAGE)
        }
    };
    // In the format the settings ask for; colour only on a terminal; no peer can flood the log.
    kquota_host::init_logging(config.log_format());
    for w in &warnings {
        warn!("{w}");
    }
    // A thousand idle sockets must not lock everyone out at a soft limit of 1,024.
    kquota_host::raise_fd_limit();
    let format = config.log_format();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            let message = format!("cannot start the runtime: {e}");
            return kquota_host::fatal(PROGRAM, format, &message, kquota_host::exit::FAILURE);
        }
    };
    runtime.block_on(async move {
        let started = std::time::Instant::now();
        let server = match Server::bind(config.clone()).await {
            Ok(s) => s,
            Err(e) => {
                // One line, as for a bad flag: not a log line as well. A setting that cannot work
                // (a missing keystore, an unreadable credentials file) is the operator's to fix,
                // like a bad flag; a port in use or a store that cannot be opened is a failure.
                let status = match e {
                    StartError::Config(_) => kquota_host::exit::USAGE,
                    _ => kquota_host::exit::FAILURE,
                };
                return kquota_host::fatal(PROGRAM, format, &e.to_string(), status);
            }
        };
        let listeners: Vec<String> = server
            .listeners()
            .iter()
            .map(|l| format!("{}://{}", l.name, l.addr))
            .collect();
        info!(
            listeners = %listeners.join(","),
            configuration = %config.configuration_source(),
            policy = ?config.policy(),
            entities = server.loaded(),
            startup_ms = started.elapsed().as_millis() as u64,
            "kquotad listening"
        );
        // Tests and scripts read these lines to learn the ports: the first listener's address,
        // then one line per listener. Serving does not depend on them, so a closed stdout is not a
        // reason to stop.
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "listening on {}", server.local_addr());
        for l in &listeners {
            let _ = writeln!(out, "listener {l}");
        }
        let _ = out.flush();
        drop(out);
        server.serve(kquota_host::signal()).await;
        ExitCode::SUCCESS
    })
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn every_settings_flag_is_the_tables_and_has_help() {
        let command = Args::command();
        command.clone().debug_assert();
        let args = Args::try_parse_from(["kquotad"]).unwrap();
        let mut given: Vec<&str> = flag_settings(&args).iter().map(|(f, _)| *f).collect();
        let mut table: Vec<&str> = SETTINGS.iter().filter_map(|s| s.flag).collect();
        given.sort_unstable();
        table.sort_unstable();
        assert_eq!(given, table, "the flags that set keys are the table's");
        for flag in table {
            let arg = command
                .get_arguments()
                .find(|a| a.get_long() == flag.strip_prefix("--"))
                .unwrap_or_else(|| panic!("no {flag}"));
            assert!(arg.get_help().is_some(), "{flag} has no help");
            // Each flag sets the key the table names.
            let argv = ["kquotad", flag, "x"];
            let args = Args::try_parse_from(argv).unwrap();
            let set: Vec<_> = flag_settings(&args)
                .into_iter()
                .filter(|(_, v)| v.is_some())
                .map(|(f, _)| key_of(f))
                .collect();
            assert_eq!(set, [SETTINGS.by_flag(flag).unwrap().key], "{flag}");
        }
    }
}
