//! `kafka-configs`: the quota subset of Apache Kafka's `kafka-configs.sh` (ConfigCommand), as the
//! second seed uses it, with Kafka's own output wording.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{ArgAction, ArgMatches, CommandFactory, FromArgMatches, Parser, ValueEnum};
use kquota::{Alteration, ComponentMatch, Entity, EntityName, EntityType, QuotaKey};
use kquota_cli::{
    bootstrap_servers, clap_failure, entity_text, entries_json_in_order, exit_status,
    ip_or_resolvable_host, load_command_config, refusal, usage, write_out, AdminClient, Failure,
    QuotaEntry, ShownKey,
};

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
order; an empty --entity-name is the default too. --user, --client and --ip (and --user-defaults,
--client-defaults, --ip-defaults) are Kafka's shorter form of the same and cannot be mixed with it.
users and clients combine into one entity; ips stand alone. Keys: producer_byte_rate,
consumer_byte_rate, request_percentage, controller_mutation_rate (users, clients) and
connection_creation_rate (ips); kquota's units are written type:unit (producer_byte_rate:shares).
--describe prints every entity the server returns, entity types and keys this tool does not know
included; --output json prints the same as one JSON document (docs/cli.md).

There is no --zookeeper: since Kafka 3 quotas are altered through --bootstrap-server, and Kafka 4
removed ZooKeeper mode.

Exit status:
  0  success
  1  the server refused the request or could not be reached, or a --delete-config key is not set
  2  the command line or the --command-config file is wrong";

/// Describe and alter client quotas the way Kafka's kafka-configs.sh does (--entity-type users,
/// clients or ips).
#[derive(Debug, Parser)]
#[command(name = "kafka-configs", version, after_help = EXAMPLES)]
struct Args {
    /// The server to connect to: HOST:PORT[,HOST:PORT...]
    #[arg(long, value_name = "SERVERS")]
    bootstrap_server: Option<String>,
    /// A Kafka admin-client properties file: security.protocol (PLAINTEXT, SSL, SASL_PLAINTEXT,
    /// SASL_SSL), sasl.mechanism, sasl.jaas.config, ssl.*, client.id, request.timeout.ms,
    /// bootstrap.servers (docs/cli.md lists them all)
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
    /// The name of the entity of the matching --entity-type (empty: the default)
    #[arg(long, value_name = "NAME")]
    entity_name: Vec<String>,
    /// The default entity of the matching --entity-type
    #[arg(long, num_args = 0, action = ArgAction::Append, default_missing_value = "")]
    entity_default: Vec<String>,
    /// The user principal: --entity-type users --entity-name USER
    #[arg(long, value_name = "USER")]
    user: Option<String>,
    /// The quota defaults for all users: --entity-type users --entity-default
    #[arg(long)]
    user_defaults: bool,
    /// The client id: --entity-type clients --entity-name CLIENT
    #[arg(long, value_name = "CLIENT")]
    client: Option<String>,
    /// The quota defaults for all clients: --entity-type clients --entity-default
    #[arg(long)]
    client_defaults: bool,
    /// The IP address: --entity-type ips --entity-name IP
    #[arg(long, value_name = "IP")]
    ip: Option<String>,
    /// The quota defaults for all IPs: --entity-type ips --entity-default
    #[arg(long)]
    ip_defaults: bool,
    /// Comma-separated key=value configs to set, e.g. 'producer_byte_rate=1024,consumer_byte_rate=2048';
    /// square brackets around a value are removed, as Kafka does
    #[arg(long, value_name = "K=V,...")]
    add_config: Vec<String>,
    /// A properties file of configs to set (key=value lines), instead of --add-config
    #[arg(long, value_name = "FILE")]
    add_config_file: Option<PathBuf>,
    /// Comma-separated keys to remove, e.g. 'producer_byte_rate,consumer_byte_rate'; each must be set
    #[arg(long, value_name = "K,...")]
    delete_config: Vec<String>,
    /// (--describe) Output format: Kafka's text, or one JSON document (docs/cli.md) [default: text]
    #[arg(long, value_enum)]
    output: Option<Output>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Output {
    /// Kafka's `Quota configs for ...` lines
    Text,
    /// JSON, one document on stdout
    Json,
}

/// KIP-55's `--zookeeper HOST:PORT` (or `--zookeeper=...`), anywhere before a `--`: answered
/// before anything else is read, so the one line says what to write instead.
fn zookeeper_given() -> bool {
    std::env::args_os()
        .skip(1)
        .take_while(|a| a != "--")
        .any(|a| {
            let a = a.to_string_lossy();
            a == "--zookeeper" || a.starts_with("--zookeeper=")
        })
}

fn main() -> ExitCode {
    if zookeeper_given() {
        return exit_status(usage(
            "--zookeeper is not supported: since Kafka 3 quotas are altered through --bootstrap-server (ZooKeeper mode was removed in Kafka 4); write --bootstrap-server HOST:PORT, e.g. --bootstrap-server localhost:9092",
        ));
    }
    let matches = match Args::command().try_get_matches() {
        Ok(m) => m,
        Err(e) => return clap_failure(e),
    };
    let args = match Args::from_arg_matches(&matches) {
        Ok(a) => a,
        Err(e) => return clap_failure(e),
    };
    exit_status(
        entities(&args, &matches)
            .and_then(|(types, names, short)| run(&args, &types, &names, short)),
    )
}

/// The entity types and names in Kafka's order (`ConfigCommandOptions.entityTypes` and
/// `entityNames`): `--entity-type`s, and names and defaults by command-line position, or else the
/// shorter flags (--client, --user, --ip, then their -defaults), and whether the shorter flags
/// were used. `""` names the default.
fn entities(
    args: &Args,
    matches: &ArgMatches,
) -> Result<(Vec<String>, Vec<String>, bool), Failure> {
    let mut positioned: Vec<(usize, String)> = Vec::new();
    for (id, values) in [
        ("entity_name", &args.entity_name),
        ("entity_default", &args.entity_default),
    ] {
        if let Some(indices) = matches.indices_of(id) {
            positioned.extend(indices.zip(values.iter().cloned()));
        }
    }
    positioned.sort_by_key(|(i, _)| *i);
    let mut types = args.entity_type.clone();
    let mut names: Vec<String> = positioned.into_iter().map(|(_, n)| n).collect();

    let named = [
        ("clients", &args.client),
        ("users", &args.user),
        ("ips", &args.ip),
    ];
    let defaults = [
        ("clients", args.client_defaults),
        ("users", args.user_defaults),
        ("ips", args.ip_defaults),
    ];
    let short = named.iter().any(|(_, n)| n.is_some()) || defaults.iter().any(|(_, d)| *d);
    if short && !(types.is_empty() && names.is_empty()) {
        return usage("--entity-type, --entity-name and --entity-default cannot be combined with --user, --client, --ip or their -defaults flags; use one form");
    }
    for (ty, name) in named {
        if let Some(name) = name {
            types.push(ty.to_owned());
            names.push(name.clone());
        }
    }
    for (ty, on) in defaults {
        if on {
            types.push(ty.to_owned());
            names.push(String::new());
        }
    }
    Ok((types, names, short))
}

fn run(args: &Args, types: &[String], names: &[String], short: bool) -> Result<(), Failure> {
    let alter = match (args.describe, args.alter) {
        (true, false) => false,
        (false, true) => true,
        (true, true) => {
            return usage("--describe and --alter cannot be combined; give one of them")
        }
        (false, false) => return usage("give one of --describe or --alter"),
    };
    if !alter
        && (!args.add_config.is_empty()
            || args.add_config_file.is_some()
            || !args.delete_config.is_empty())
    {
        return usage("--add-config, --add-config-file and --delete-config apply only to --alter; drop them or use --alter instead");
    }
    // Kafka's tool has no --output: with --alter, even `text` is refused, as kafka-quotas does.
    if alter && args.output.is_some() {
        return usage(
            "--output applies only to --describe; drop --output or use --describe instead",
        );
    }
    let spec = entity_spec(types, names, alter, short)?;
    let ops = if alter {
        config_ops(
            &args.add_config,
            args.add_config_file.as_deref(),
            &args.delete_config,
        )?
    } else {
        Vec::new()
    };
    if let Some((key, _)) = ops
        .iter()
        .find(|(k, _)| k.is_ip_key() != (spec[0].0 == EntityType::Ip))
    {
        return usage(if spec[0].0 == EntityType::Ip {
            format!("{key} does not apply to ips; ips take connection_creation_rate")
        } else if short {
            format!("{key} applies only to ips (--ip or --ip-defaults)")
        } else {
            format!("{key} applies only to --entity-type ips")
        });
    }
    let config = load_command_config(args.command_config.as_deref())?;
    let bootstrap = bootstrap_servers(args.bootstrap_server.as_deref(), &config)?;
    let mut admin =
        AdminClient::connect(&bootstrap, &config).map_err(|e| Failure::Server(e.to_string()))?;
    if alter {
        alter_entity(&mut admin, &types[0], &spec, &ops)
    } else {
        describe(&mut admin, &spec, args.output.unwrap_or(Output::Text))
    }
}

/// Which entities of one type a command names.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Target {
    /// `--entity-name`.
    Named(String),
    /// `--entity-default`, or an empty name.
    Default,
    /// No name: every entity of the type (describe only).
    All,
}

/// One `(type, target)` per entity type.
type Spec = Vec<(EntityType, Target)>;

/// Pairs each entity type with its name, as Kafka does. `short`: the command line used --user,
/// --client, --ip and their -defaults, which the messages then name.
fn entity_spec(
    types: &[String],
    names: &[String],
    alter: bool,
    short: bool,
) -> Result<Spec, Failure> {
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
                "entity type {} is given twice; give each entity type once",
                types[i]
            ));
        }
        let name = match names.get(i).map(String::as_str) {
            Some("") => Target::Default,
            Some(n) => Target::Named(n.to_owned()),
            None => Target::All,
        };
        if let (EntityType::Ip, Target::Named(ip)) = (ty, &name) {
            if !ip_or_resolvable_host(ip) {
                return usage(format!(
                    "the entity name for ips must be a valid IP or resolvable host, but it is: {ip}"
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
        return usage(if short {
            "ips cannot be combined with users or clients; give --ip or --ip-defaults on its own"
        } else {
            "ips cannot be combined with users or clients; give --entity-type ips on its own"
        });
    }
    Ok(out)
}

/// Whether a separator whose following text is `rest` splits, by the lookahead Kafka's
/// ConfigCommand puts after `,` and `=` (`(?=[^\]]*(?:\[|$))`): no `]` before the next `[` or the
/// end, which keeps separators inside `[...]` in the value.
fn splits_before(rest: &str) -> bool {
    rest.find(['[', ']'])
        .is_none_or(|at| rest.as_bytes()[at] == b'[')
}

/// Splits `text` at every `sep` outside square brackets.
fn split_outside_brackets(text: &str, sep: char) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut from = 0;
    for (at, c) in text.char_indices() {
        if c == sep && splits_before(&text[at + 1..]) {
            parts.push(&text[from..at]);
            from = at + 1;
        }
    }
    parts.push(&text[from..]);
    parts
}

/// One --add-config value as `(key, value)` pairs, parsed as Kafka's `parseConfigsToBeAdded` does:
/// entries at commas and keys at `=`, both outside `[...]`; trailing empty entries dropped (Java's
/// `String.split`); brackets removed from values.
fn add_config_entries(text: &str) -> Result<Vec<(String, String)>, Failure> {
    let mut entries = split_outside_brackets(text, ',');
    if entries.len() > 1 {
        while entries.last() == Some(&"") {
            entries.pop();
        }
    }
    entries
        .into_iter()
        .map(|entry| match split_outside_brackets(entry, '=').as_slice() {
            [key, value] => Ok((
                key.trim().to_owned(),
                value.replace(['[', ']'], "").trim().to_owned(),
            )),
            _ => usage(format!(
                "--add-config takes key=value pairs such as producer_byte_rate=1024 (or key=[value] to group a value with commas); got '{entry}'"
            )),
        })
        .collect()
}

/// Java's `Double.parseDouble` for decimal numbers: surrounding whitespace and a `d` or `f` type
/// suffix allowed. Only finite values are quotas.
fn java_parse_double(text: &str) -> Option<f64> {
    let t = text.trim_matches(|c: char| c <= ' ');
    let t = t.strip_suffix(['d', 'D', 'f', 'F']).unwrap_or(t);
    t.parse::<f64>().ok().filter(|v| v.is_finite())
}

fn config_key(key: &str, flag: &str) -> Result<QuotaKey, Failure> {
    key.parse::<QuotaKey>().or_else(|e| {
        usage(format!(
            "invalid quota config '{key}' in {flag} ({e}); use producer_byte_rate, consumer_byte_rate, request_percentage, controller_mutation_rate or connection_creation_rate"
        ))
    })
}

fn config_ops(
    add: &[String],
    add_file: Option<&Path>,
    delete: &[String],
) -> Result<Vec<(QuotaKey, Option<f64>)>, Failure> {
    let mut added: Vec<(String, String, String)> = Vec::new();
    if let Some(path) = add_file {
        if !add.is_empty() {
            return usage("give only one of --add-config or --add-config-file");
        }
        let flag = format!("--add-config-file {}", path.display());
        let text =
            std::fs::read_to_string(path).or_else(|e| usage(format!("cannot read {flag}: {e}")))?;
        let properties =
            kquota_wire::properties::parse(&text).or_else(|e| usage(format!("{flag}: {e}")))?;
        for p in properties {
            added.push((p.key, p.value, format!("{flag} line {}", p.line)));
        }
    }
    for text in add {
        for (key, value) in add_config_entries(text)? {
            added.push((key, value, "--add-config".to_owned()));
        }
    }
    let mut ops: Vec<(QuotaKey, Option<f64>)> = Vec::new();
    for (key, value, flag) in added {
        let key = config_key(&key, &flag)?;
        let Some(v) = java_parse_double(&value) else {
            return usage(format!(
                "{flag}: {key}: '{value}' is not a number; write e.g. {key}=1024"
            ));
        };
        ops.push((key, Some(v)));
    }
    for key in delete
        .iter()
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|s| !s.is_empty())
    {
        ops.push((config_key(key, "--delete-config")?, None));
    }
    if ops.is_empty() {
        return usage(
            "at least one of --add-config, --add-config-file or --delete-config must be specified with --alter",
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

/// The filter that matches the targets: exact names, defaults, or (describe only) any name.
fn filter(spec: &[(EntityType, Target)]) -> Vec<(EntityType, ComponentMatch)> {
    spec.iter()
        .map(|(ty, name)| {
            let m = match name {
                Target::Named(n) => ComponentMatch::Exact(n.clone()),
                Target::Default => ComponentMatch::Default,
                Target::All => ComponentMatch::Any,
            };
            (*ty, m)
        })
        .collect()
}

fn describe(
    admin: &mut AdminClient,
    spec: &[(EntityType, Target)],
    output: Output,
) -> Result<(), Failure> {
    let entries = admin
        .describe_client_quotas(&filter(spec), true)
        .map_err(|e| Failure::Server(e.to_string()))?;
    let ordered = java_entity_order(&entries);
    let text: String = match output {
        Output::Text => ordered
            .into_iter()
            .map(|entry| describe_line(entry) + "\n")
            .collect(),
        Output::Json => {
            let entities: Vec<(&QuotaEntry, Vec<(ShownKey, f64)>)> = ordered
                .into_iter()
                .map(|entry| {
                    let values = java_value_order(entry)
                        .into_iter()
                        .map(|(k, v)| (ShownKey::parse(k), v))
                        .collect();
                    (entry, values)
                })
                .collect();
            format!("{}\n", entries_json_in_order(&entities))
        }
    };
    write_out(&text, "")
}

/// An entity's values in the order Kafka's admin client iterates them: it puts them in a
/// `new HashMap<>(values.size())`.
fn java_value_order(entry: &QuotaEntry) -> Vec<(&str, f64)> {
    let keys: Vec<&str> = entry.values.iter().map(|(k, _)| k.as_str()).collect();
    kquota::java_map_order(&keys, keys.len())
        .into_iter()
        .map(|i| (entry.values[i].0.as_str(), entry.values[i].1))
        .collect()
}

/// Kafka's line: `Quota configs for user-principal 'u', client-id 'c' are k=v, k=v`, names as
/// Kafka prints them (between single quotes, as they are). Every component is named: user,
/// client-id and ip as Kafka does, then (where Kafka's tool would leave them out) any type this
/// tool does not know, as `type 'name'` or `the default type`, in the order the server sent them.
fn describe_line(entry: &QuotaEntry) -> String {
    fn label(ty: &str) -> &str {
        match ty {
            "user" => "user-principal",
            other => other,
        }
    }
    let mut parts: Vec<&(String, Option<String>)> = entry.entity.iter().collect();
    parts.sort_by_key(|(ty, _)| {
        ["user", "client-id", "ip"]
            .iter()
            .position(|t| t == ty)
            .unwrap_or(3)
    });
    let entity: Vec<String> = parts
        .into_iter()
        .map(|(ty, name)| match name {
            Some(n) => format!("{} '{n}'", label(ty)),
            None => format!("the default {}", label(ty)),
        })
        .collect();
    let values: Vec<String> = java_value_order(entry)
        .into_iter()
        .map(|(k, v)| format!("{k}={}", java_double(v)))
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
    // As Kafka's ConfigCommand: a key to delete must be set, or nothing is sent.
    let deleted: Vec<&QuotaKey> = ops
        .iter()
        .filter(|(_, v)| v.is_none())
        .map(|(k, _)| k)
        .collect();
    if !deleted.is_empty() {
        let current = admin
            .describe_client_quotas(&filter(spec), true)
            .map_err(|e| Failure::Server(e.to_string()))?;
        let set: Vec<QuotaKey> = current
            .iter()
            .flat_map(|entry| &entry.values)
            .filter_map(|(key, _)| key.parse().ok())
            .collect();
        let missing: Vec<String> = deleted
            .iter()
            .filter(|k| !set.contains(k))
            .map(|k| k.to_string())
            .collect();
        if !missing.is_empty() {
            return Err(Failure::Server(format!(
                "Invalid config(s): {} (not set for {}; nothing was changed)",
                missing.join(","),
                wire_text(&entity)
            )));
        }
    }
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
        return Err(Failure::Server(refusal(&entity, e)));
    }
    // Kafka names the first --entity-type and its name.
    let singular = first_type.strip_suffix('s').unwrap_or(first_type);
    let message = match &spec[0].1 {
        Target::Named(name) => format!("Completed updating config for {singular} {name}.\n"),
        _ => format!("Completed updating default config for {first_type} in the cluster.\n"),
    };
    write_out(&message, "the alteration was applied")
}

/// An entity as the tools print it (`kquota_cli::entity_text`): a name that could be misread, such
/// as `<default>` spelled out, is quoted.
fn wire_text(entity: &Entity) -> String {
    let parts: Vec<(String, Option<String>)> = entity
        .components()
        .map(|(ty, name)| (ty.as_str().to_owned(), name.as_option().map(str::to_owned)))
        .collect();
    entity_text(&parts)
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

/// The entries in the order ConfigCommand prints them: Kafka's admin client collects them in a
/// `new HashMap<>(entries.size())` keyed by `ClientQuotaEntity` (`DescribeClientQuotasResponse`).
fn java_entity_order(entries: &[QuotaEntry]) -> Vec<&QuotaEntry> {
    let keys: Vec<&[(String, Option<String>)]> = entries.iter().map(|e| &e.entity[..]).collect();
    kquota::java_hash_map_order(&keys, |entity| java_entity_hash(entity), entries.len())
        .into_iter()
        .map(|i| &entries[i])
        .collect()
}

/// `ClientQuotaEntity.hashCode`: `Objects.hash(entries)` over a `Map<String, String>`.
fn java_entity_hash(entity: &[(String, Option<String>)]) -> i32 {
    let map = entity.iter().fold(0i32, |sum, (ty, name)| {
        let value = name.as_deref().map_or(0, kquota::java_string_hash);
        sum.wrapping_add(kquota::java_string_hash(ty) ^ value)
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
        assert_eq!(kquota::java_string_hash("producer_byte_rate"), -832_502_454);
        let entry = QuotaEntry {
            entity: vec![("user".to_owned(), Some("u".to_owned()))],
            values: vec![
                ("producer_byte_rate".to_owned(), 1.0),
                ("consumer_byte_rate".to_owned(), 2.0),
            ],
        };
        // new HashMap<>(2) grows to 4 buckets: consumer (bucket 0) before producer (bucket 3).
        assert_eq!(
            describe_line(&entry),
            "Quota configs for user-principal 'u' are consumer_byte_rate=2.0, producer_byte_rate=1.0"
        );
    }

    #[test]
    fn every_component_is_named_as_kafka_names_them() {
        let entry = |entity: &[(&str, Option<&str>)]| QuotaEntry {
            entity: entity
                .iter()
                .map(|(t, n)| ((*t).to_owned(), n.map(str::to_owned)))
                .collect(),
            values: vec![("future_quota_rate".to_owned(), f64::NAN)],
        };
        type Parts<'a> = &'a [(&'a str, Option<&'a str>)];
        let cases: [(Parts, &str); 5] = [
            (&[("user", Some("<default>"))], "user-principal '<default>'"),
            (&[("user", Some(""))], "user-principal ''"),
            (&[("ip", Some("localhost"))], "ip 'localhost'"),
            (
                &[("group", None), ("client-id", Some("c")), ("user", None)],
                "the default user-principal, client-id 'c', the default group",
            ),
            (
                &[("user", Some("a")), ("user", Some("b"))],
                "user-principal 'a', user-principal 'b'",
            ),
        ];
        for (entity, printed) in cases {
            assert_eq!(
                describe_line(&entry(entity)),
                format!("Quota configs for {printed} are future_quota_rate=NaN")
            );
        }
    }

    #[test]
    fn entities_keep_javas_order_with_equal_hashes() {
        let entry = |user: &str| QuotaEntry {
            entity: vec![("user".to_owned(), Some(user.to_owned()))],
            values: vec![("producer_byte_rate".to_owned(), 1.0)],
        };
        // "Aa" and "BB" have the same String.hashCode, so the same entity hash: one bucket, in
        // insertion order, both kept.
        let entries = [entry("BB"), entry("x"), entry("Aa")];
        assert_eq!(
            java_entity_hash(&entries[0].entity),
            java_entity_hash(&entries[2].entity)
        );
        let users: Vec<&str> = java_entity_order(&entries)
            .into_iter()
            .map(|e| e.entity[0].1.as_deref().unwrap())
            .collect();
        let mut expected = [("BB", 0), ("x", 1), ("Aa", 2)];
        // Java's order: by bucket of (h ^ h >>> 16) & 3, insertion order within one.
        expected.sort_by_key(|(_, i)| {
            let h = java_entity_hash(&entries[*i].entity) as u32;
            (h ^ (h >> 16)) & 3
        });
        assert_eq!(users, expected.iter().map(|(u, _)| *u).collect::<Vec<_>>());
    }
}
