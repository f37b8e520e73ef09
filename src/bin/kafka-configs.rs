//! `kafka-configs`: the quota subset of Apache Kafka's `kafka-configs.sh` (ConfigCommand), as the
//! second seed uses it, with Kafka's own output wording.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{ArgAction, CommandFactory, FromArgMatches, Parser};
use kquota::client::{
    clap_failure, error_name, exit_status, load_command_config, usage, AdminClient, Failure,
    QuotaEntry,
};
use kquota::{Alteration, ComponentMatch, Entity, EntityName, EntityType, QuotaKey};

const EXAMPLES: &str = "\
Examples:

  Quotas for user2's client clientA (a KIP-55 sub-quota):
    kafka-configs --bootstrap-server localhost:9092 --alter \\
      --add-config 'producer_byte_rate=10,consumer_byte_rate=20' \\
      --entity-name clientA --entity-type clients --entity-name user2 --entity-type users

  Show them:
    kafka-configs --bootstrap-server localhost:9092 --describe \\
      --entity-type users --entity-name user2 --entity-type clients --entity-name clientA
    Quota configs for user-principal 'user2', client-id 'clientA' are consumer_byte_rate=20.0, producer_byte_rate=10.0

  The default for every client-id without its own entry, then every user's quotas:
    kafka-configs --bootstrap-server localhost:9092 --alter --entity-type clients --entity-default \\
      --add-config request_percentage=50
    kafka-configs --bootstrap-server localhost:9092 --describe --entity-type users

  Remove a key:
    kafka-configs --bootstrap-server localhost:9092 --alter --entity-type users --entity-name user2 \\
      --delete-config producer_byte_rate

The n-th --entity-name or --entity-default belongs to the n-th --entity-type, in command-line
order. users and clients combine into one entity; ips stand alone. Keys: producer_byte_rate,
consumer_byte_rate, request_percentage, controller_mutation_rate (users, clients) and
connection_creation_rate (ips); kquota's units are written type:unit (producer_byte_rate:shares).

Exit status:
  0  success
  1  the server refused the request or could not be reached
  2  the command line or the --command-config file is wrong";

/// Describe and alter client quotas the way Kafka's kafka-configs.sh does (--entity-type users,
/// clients or ips).
#[derive(Debug, Parser)]
#[command(name = "kafka-configs", version, after_help = EXAMPLES)]
struct Args {
    /// The server to connect to: HOST:PORT[,HOST:PORT...]
    #[arg(long, value_name = "SERVERS")]
    bootstrap_server: Option<String>,
    /// An admin-client properties file: security.protocol (PLAINTEXT), client.id,
    /// request.timeout.ms, bootstrap.servers
    #[arg(long, value_name = "FILE")]
    command_config: Option<PathBuf>,
    /// Print the quota configs of the given entities
    #[arg(long)]
    describe: bool,
    /// Add or delete quota configs of one entity
    #[arg(long)]
    alter: bool,
    /// users, clients or ips; repeat to combine users and clients
    #[arg(long, value_name = "TYPE")]
    entity_type: Vec<String>,
    /// The name of the entity of the matching --entity-type
    #[arg(long, value_name = "NAME")]
    entity_name: Vec<String>,
    /// The default entity of the matching --entity-type
    #[arg(long, action = ArgAction::Count)]
    entity_default: u8,
    /// Comma-separated key=value configs to set, e.g. 'producer_byte_rate=1024,consumer_byte_rate=2048'
    #[arg(long, value_name = "K=V,...")]
    add_config: Vec<String>,
    /// Comma-separated keys to remove, e.g. 'producer_byte_rate,consumer_byte_rate'
    #[arg(long, value_name = "K,...")]
    delete_config: Vec<String>,
}

fn main() -> ExitCode {
    let matches = match Args::command().try_get_matches() {
        Ok(m) => m,
        Err(e) => return clap_failure(e),
    };
    let args = match Args::from_arg_matches(&matches) {
        Ok(a) => a,
        Err(e) => return clap_failure(e),
    };
    // Names and defaults pair with types by command-line position, as in Kafka.
    let mut names: Vec<(usize, Option<String>)> = Vec::new();
    if let Some(idx) = matches.indices_of("entity_name") {
        names.extend(idx.zip(args.entity_name.iter().cloned().map(Some)));
    }
    // A count flag has a default value; only occurrences on the command line have positions.
    if matches.value_source("entity_default") == Some(clap::parser::ValueSource::CommandLine) {
        if let Some(idx) = matches.indices_of("entity_default") {
            names.extend(idx.map(|i| (i, None)));
        }
    }
    names.sort_by_key(|(i, _)| *i);
    let names: Vec<Option<String>> = names.into_iter().map(|(_, n)| n).collect();
    exit_status(run(&args, &names))
}

fn run(args: &Args, names: &[Option<String>]) -> Result<(), Failure> {
    let alter = match (args.describe, args.alter) {
        (true, false) => false,
        (false, true) => true,
        (true, true) => {
            return usage("--describe and --alter cannot be combined; give one of them")
        }
        (false, false) => return usage("give one of --describe or --alter"),
    };
    if !alter && (!args.add_config.is_empty() || !args.delete_config.is_empty()) {
        return usage("--add-config and --delete-config apply only to --alter; drop them or use --alter instead");
    }
    let spec = entity_spec(&args.entity_type, names, alter)?;
    let ops = if alter {
        config_ops(&args.add_config, &args.delete_config)?
    } else {
        Vec::new()
    };
    if let Some((key, _)) = ops
        .iter()
        .find(|(k, _)| k.is_ip_key() != (spec[0].0 == EntityType::Ip))
    {
        return usage(if spec[0].0 == EntityType::Ip {
            format!("{key} does not apply to ips; ips take connection_creation_rate")
        } else {
            format!("{key} applies only to --entity-type ips")
        });
    }
    let config = load_command_config(args.command_config.as_deref())?;
    let bootstrap = match (&args.bootstrap_server, &config.bootstrap_servers) {
        (Some(b), _) | (None, Some(b)) => b.clone(),
        (None, None) => {
            return usage("--bootstrap-server is required, e.g. --bootstrap-server localhost:9092")
        }
    };
    let mut admin =
        AdminClient::connect(&bootstrap, &config).map_err(|e| Failure::Server(e.to_string()))?;
    if alter {
        alter_entity(&mut admin, &args.entity_type[0], &spec, &ops)
    } else {
        describe(&mut admin, &spec)
    }
}

/// Which entities of one type a command names.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Target {
    /// `--entity-name`.
    Named(String),
    /// `--entity-default`.
    Default,
    /// No name: every entity of the type (describe only).
    All,
}

/// One `(type, target)` per --entity-type.
type Spec = Vec<(EntityType, Target)>;

/// Pairs each --entity-type with its name, as Kafka does.
fn entity_spec(types: &[String], names: &[Option<String>], alter: bool) -> Result<Spec, Failure> {
    if types.is_empty() {
        return usage("--entity-type is required: users, clients or ips");
    }
    if names.len() > types.len() {
        return usage("each --entity-name or --entity-default needs its own --entity-type, e.g. --entity-type users --entity-name alice");
    }
    let mut out: Spec = Vec::new();
    for (i, ty) in types.iter().enumerate() {
        let ty = match ty.as_str() {
            "users" => EntityType::User,
            "clients" => EntityType::ClientId,
            "ips" => EntityType::Ip,
            other => {
                return usage(format!(
                    "entity type '{other}' is not supported: this kafka-configs manages quotas only; use --entity-type users, clients or ips"
                ))
            }
        };
        if out.iter().any(|(t, _)| *t == ty) {
            return usage(format!(
                "--entity-type {} is given twice; give each entity type once",
                types[i]
            ));
        }
        let name = match names.get(i) {
            Some(Some(n)) => Target::Named(n.clone()),
            Some(None) => Target::Default,
            None => Target::All,
        };
        if let Target::Named(n) = &name {
            if n.is_empty() {
                return usage(format!(
                    "empty --entity-name for {}; use --entity-default for the default",
                    types[i]
                ));
            }
        }
        if alter && name == Target::All {
            return usage(format!(
                "--entity-name or --entity-default must be specified with each --entity-type for --alter (missing for {})",
                types[i]
            ));
        }
        out.push((ty, name));
    }
    let has = |t: EntityType| out.iter().any(|(ty, _)| *ty == t);
    if has(EntityType::Ip) && out.len() > 1 {
        return usage(
            "ips cannot be combined with users or clients; give --entity-type ips on its own",
        );
    }
    Ok(out)
}

fn split(values: &[String]) -> impl Iterator<Item = &str> {
    values
        .iter()
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|s| !s.is_empty())
}

fn config_key(key: &str, flag: &str) -> Result<QuotaKey, Failure> {
    key.parse::<QuotaKey>().or_else(|e| {
        usage(format!(
            "invalid quota config '{key}' in {flag} ({e}); use producer_byte_rate, consumer_byte_rate, request_percentage, controller_mutation_rate or connection_creation_rate"
        ))
    })
}

fn config_ops(add: &[String], delete: &[String]) -> Result<Vec<(QuotaKey, Option<f64>)>, Failure> {
    let mut ops: Vec<(QuotaKey, Option<f64>)> = Vec::new();
    for entry in split(add) {
        let Some((key, value)) = entry.split_once('=') else {
            return usage(format!(
                "--add-config takes key=value pairs such as producer_byte_rate=1024; got '{entry}'"
            ));
        };
        let key = config_key(key.trim(), "--add-config")?;
        let Some(v) = value.trim().parse::<f64>().ok().filter(|v| v.is_finite()) else {
            return usage(format!(
                "--add-config {key}: '{value}' is not a number; write e.g. {key}=1024"
            ));
        };
        ops.push((key, Some(v)));
    }
    for key in split(delete) {
        ops.push((config_key(key, "--delete-config")?, None));
    }
    if ops.is_empty() {
        return usage(
            "at least one of --add-config or --delete-config must be specified with --alter",
        );
    }
    for (i, (k, _)) in ops.iter().enumerate() {
        if ops[..i].iter().any(|(o, _)| o == k) {
            return usage(format!(
                "{k} is given more than once across --add-config and --delete-config; give each key once"
            ));
        }
    }
    Ok(ops)
}

fn describe(admin: &mut AdminClient, spec: &[(EntityType, Target)]) -> Result<(), Failure> {
    let filter: Vec<(EntityType, ComponentMatch)> = spec
        .iter()
        .map(|(ty, name)| {
            let m = match name {
                Target::Named(n) => ComponentMatch::Exact(n.clone()),
                Target::Default => ComponentMatch::Default,
                Target::All => ComponentMatch::Any,
            };
            (*ty, m)
        })
        .collect();
    let entries = admin
        .describe_client_quotas(&filter, true)
        .map_err(|e| Failure::Server(e.to_string()))?;
    for entry in java_hash_map_order(&entries, java_entity_hash) {
        println!("{}", describe_line(entry));
    }
    Ok(())
}

/// Kafka's line: `Quota configs for user-principal 'u', client-id 'c' are k=v, k=v`.
fn describe_line(entry: &QuotaEntry) -> String {
    let part = |wire: &str, label: &str| {
        entry
            .entity
            .iter()
            .find(|(t, _)| t == wire)
            .map(|(_, name)| match name {
                Some(n) => format!("{label} '{n}'"),
                None => format!("the default {label}"),
            })
    };
    let entity: Vec<String> = [
        part("user", "user-principal"),
        part("client-id", "client-id"),
        part("ip", "ip"),
    ]
    .into_iter()
    .flatten()
    .collect();
    let values: Vec<String> = java_hash_map_order(&entry.values, |(k, _)| java_string_hash(k))
        .into_iter()
        .map(|(k, v)| format!("{k}={}", java_double(*v)))
        .collect();
    format!(
        "Quota configs for {} are {}",
        entity.join(", "),
        values.join(", ")
    )
}

fn alter_entity(
    admin: &mut AdminClient,
    first_type: &str,
    spec: &[(EntityType, Target)],
    ops: &[(QuotaKey, Option<f64>)],
) -> Result<(), Failure> {
    let parts: Vec<(EntityType, EntityName)> = spec
        .iter()
        .map(|(ty, name)| {
            let name = match name {
                Target::Named(n) => EntityName::named(n).expect("checked non-empty"),
                _ => EntityName::Default,
            };
            (*ty, name)
        })
        .collect();
    let entity = Entity::from_parts(&parts).expect("shape checked in entity_spec");
    let mut alteration = Alteration::new(&entity);
    for (key, value) in ops {
        alteration = match value {
            Some(v) => alteration.set(key, *v),
            None => alteration.remove(key),
        };
    }
    let results = admin
        .alter_client_quotas(&[alteration], false)
        .map_err(|e| Failure::Server(e.to_string()))?;
    if let Some(e) = results.iter().find_map(|r| r.error.as_ref()) {
        return Err(Failure::Server(format!(
            "{entity}: {}: {}",
            error_name(e.code),
            e.message
        )));
    }
    // Kafka names the first --entity-type and its name.
    let singular = first_type.strip_suffix('s').unwrap_or(first_type);
    match &spec[0].1 {
        Target::Named(name) => println!("Completed updating config for {singular} {name}."),
        _ => println!("Completed updating default config for {first_type} in the cluster."),
    }
    Ok(())
}

/// Java's `Double.toString`: `10.0`, `0.5`, `1.0E7`.
fn java_double(v: f64) -> String {
    if v.is_nan() {
        return "NaN".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "Infinity" } else { "-Infinity" }.into();
    }
    if v == 0.0 {
        return if v.is_sign_negative() { "-0.0" } else { "0.0" }.into();
    }
    if (1e-3..1e7).contains(&v.abs()) {
        let s = format!("{v}");
        if s.contains('.') {
            s
        } else {
            s + ".0"
        }
    } else {
        let s = format!("{v:e}");
        let (mantissa, exp) = s.split_once('e').expect("exponent form");
        if mantissa.contains('.') {
            format!("{mantissa}E{exp}")
        } else {
            format!("{mantissa}.0E{exp}")
        }
    }
}

/// Java's `String.hashCode`.
fn java_string_hash(s: &str) -> i32 {
    s.encode_utf16()
        .fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(c as i32))
}

/// The iteration order of a Java `HashMap` built with `new HashMap<>(n)` and filled with `items` in
/// order, given each item's `hashCode`: Kafka's admin client builds its describe results this way
/// (`DescribeClientQuotasResponse.complete`), and ConfigCommand prints them in that order.
fn java_hash_map_order<T>(items: &[T], hash: impl Fn(&T) -> i32) -> Vec<&T> {
    let n = items.len();
    if n == 0 {
        return Vec::new();
    }
    // tableSizeFor(n), then a doubling whenever the size passes 3/4 of the capacity.
    let mut cap = n.next_power_of_two();
    let mut threshold = cap * 3 / 4;
    for size in 1..=n {
        if size > threshold {
            cap *= 2;
            threshold = cap * 3 / 4;
        }
    }
    let bucket = |item: &T| {
        let h = hash(item) as u32;
        (h ^ (h >> 16)) as usize & (cap - 1)
    };
    // Buckets in index order; a bucket keeps insertion order (a stable sort).
    let mut out: Vec<&T> = items.iter().collect();
    out.sort_by_key(|item| bucket(item));
    out
}

/// `ClientQuotaEntity.hashCode`: `Objects.hash(entries)` over a `Map<String, String>`.
fn java_entity_hash(entry: &QuotaEntry) -> i32 {
    let map = entry.entity.iter().fold(0i32, |sum, (ty, name)| {
        let value = name.as_deref().map_or(0, java_string_hash);
        sum.wrapping_add(java_string_hash(ty) ^ value)
    });
    31i32.wrapping_add(map)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_print_as_java_does() {
        assert_eq!(java_double(10.0), "10.0");
        assert_eq!(java_double(0.5), "0.5");
        assert_eq!(java_double(1e7), "1.0E7");
        assert_eq!(java_double(12_345_678.0), "1.2345678E7");
        assert_eq!(java_double(1e-4), "1.0E-4");
    }

    #[test]
    fn hash_map_order_is_javas() {
        assert_eq!(java_string_hash("producer_byte_rate"), -832_502_454);
        let two = [("producer_byte_rate", 1), ("consumer_byte_rate", 2)];
        let order: Vec<_> = java_hash_map_order(&two, |(k, _)| java_string_hash(k))
            .into_iter()
            .map(|(k, _)| *k)
            .collect();
        // new HashMap<>(2) grows to 4 buckets: consumer (bucket 0) before producer (bucket 3).
        assert_eq!(order, ["consumer_byte_rate", "producer_byte_rate"]);
    }
}
