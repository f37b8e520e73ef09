//! `kafka-quotas`: the seeds' QuotasCommand. Lists, describes and alters client quotas on any server
//! that speaks Kafka's DescribeClientQuotas / AlterClientQuotas (kquotad or Apache Kafka).

// Help text is written for the terminal: `name[:unit]` is an optional part, not a doc link.
#![allow(rustdoc::broken_intra_doc_links)]

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, ValueEnum};
use kquota::{
    Alteration, ComponentMatch, Entity, EntityName, EntityType, Level, ParseError, QuotaKey,
    QuotaType,
};
use kquota_cli::{
    bootstrap_servers, clap_failure, describe_quotas_json, describe_text, entity_text, exit_status,
    ip_or_resolvable_host, list_json, list_text, load_command_config, matches, refusal, resolve,
    sort_entries, usage, write_out, AdminClient, Candidate, ClientConfig, Condition, Failure,
};
use serde_json::{json, Value};

const EXAMPLES: &str = "\
Examples:

  List every entity configured for client-id my-client:
    kafka-quotas --bootstrap-server localhost:9092 --list --names=client-id=my-client

  List the entities of users whose name starts with user-:
    kafka-quotas --bootstrap-server localhost:9092 --list --prefix=user=user-

  List the entities with a name of any type (user, client-id, ip) that starts with user (the
  seed's form):
    kafka-quotas --bootstrap-server localhost:9092 --list --match=prefix=user

  The effective quotas of user-one's client my-client, with what they override:
    kafka-quotas --bootstrap-server localhost:9092 --describe \\
      --names=user=user-one,client-id=my-client --include-overrides

  Give my-client of every user without its own entry a 100-share producer weight, and drop its
  broker_bps producer quota:
    kafka-quotas --bootstrap-server localhost:9092 --alter --names=client-id=my-client \\
      --defaults=user --add=producer_byte_rate:shares=100 --delete=producer_byte_rate:broker_bps

  Copy every quota of one server into another (--file takes what --list --output json prints):
    kafka-quotas --bootstrap-server old:9092 --list --output json > quotas.json
    kafka-quotas --bootstrap-server new:9092 --alter --file quotas.json

--describe takes a user and/or a client-id (or an ip) from --names or --defaults. A default, or a
type left out, means a name with no entry of its own: only the defaults apply for it. The
entities that can apply (one per precedence level) are fetched with DescribeClientQuotas and
resolved here, so this works against Apache Kafka too.

Quota keys (name[:unit]; the first unit is the native one, which may be left out):
  producer_byte_rate, consumer_byte_rate  broker_bps | bps | shares   (user / client-id)
  request_percentage                      percent                     (user / client-id)
  controller_mutation_rate                mutations_per_sec           (user / client-id)
  connection_creation_rate                connections_per_sec         (ip)

Output:
  --list prints each entity, then one `type unit value` line per entry, a blank line between
  entities. --describe prints `type unit value entity` columns, an overridden entry after the
  entry that overrides it, marked ` * `. --output json prints the documented JSON form instead
  (docs/cli.md). A list or describe that matched nothing prints nothing on stdout (an empty
  document with --output json) and says so on stderr. --alter prints nothing on success, and
  takes no --output.
  Whatever the server stores is shown: a name that could be misread (empty, `<default>` spelled
  out, commas, quotes, white space at an end, characters that do not show) is quoted,
  \"<default>\"; a key this tool does not know prints as sent, `key value`, in place of
  `type unit value`; entity types it does not know follow user, client-id and ip.

Exit status:
  0  success
  1  the server refused the request or could not be reached (the entity, Kafka's error name and
     message are printed on stderr)
  2  the command line or the --command-config file is wrong (one line on stderr says what to
     write instead)";

/// List, describe and alter Kafka client quotas (the seeds' kafka-quotas.sh).
///
/// Talks Kafka's DescribeClientQuotas and AlterClientQuotas APIs to any broker (kquotad or Apache
/// Kafka). --describe computes the effective quotas on this side, from the configured entities, with
/// kquota's precedence rules; --prefix and --match are filtered on this side too.
#[derive(Debug, Parser)]
#[command(name = "kafka-quotas", version, after_help = EXAMPLES)]
struct Args {
    /// The server to connect to: HOST:PORT[,HOST:PORT...]
    #[arg(long, value_name = "SERVERS")]
    bootstrap_server: Option<String>,
    /// A Kafka admin-client properties file: security.protocol (PLAINTEXT, SSL, SASL_PLAINTEXT,
    /// SASL_SSL), sasl.mechanism, sasl.jaas.config, ssl.*, client.id, request.timeout.ms,
    /// bootstrap.servers (docs/cli.md lists them all)
    #[arg(long, value_name = "FILE")]
    command_config: Option<PathBuf>,
    /// List the entities that match --names / --defaults / --prefix / --match and their configured
    /// entries
    #[arg(long, help_heading = "Operations (give exactly one)")]
    list: bool,
    /// Describe the effective quotas of a user and/or client-id (or an ip), and where each comes
    /// from
    #[arg(long, help_heading = "Operations (give exactly one)")]
    describe: bool,
    /// Add, update or remove entries of one entity (or, with --file, set every entry a document
    /// lists)
    #[arg(long, help_heading = "Operations (give exactly one)")]
    alter: bool,
    /// Comma-separated type=name pairs, e.g. user=some-user,client-id=some-client (types: user,
    /// client-id, ip)
    #[arg(long, value_name = "TYPE=NAME,...", help_heading = "Entity")]
    names: Vec<String>,
    /// Comma-separated entity types that take their default, e.g. user,client-id
    #[arg(long, value_name = "TYPE,...", help_heading = "Entity")]
    defaults: Vec<String>,
    /// (--list) Comma-separated type=prefix pairs, e.g. user=test-user-
    #[arg(long, value_name = "TYPE=PREFIX,...", help_heading = "Entity")]
    prefix: Vec<String>,
    /// (--list) The seed's spelling: type=prefix pairs as for --prefix, or prefix=NAME for an
    /// entity with a name of any type that begins with NAME, e.g. --match=prefix=user
    #[arg(
        long = "match",
        value_name = "TYPE=PREFIX|prefix=NAME,...",
        help_heading = "Entity"
    )]
    match_: Vec<String>,
    /// (--describe) Also print the entries that the effective ones override
    #[arg(long, help_heading = "Describe")]
    include_overrides: bool,
    /// (--alter) Comma-separated name[:unit]=value entries to add or update, e.g.
    /// producer_byte_rate:shares=100
    #[arg(long, value_name = "KEY=VALUE,...", help_heading = "Alter")]
    add: Vec<String>,
    /// (--alter) Comma-separated name[:unit] entries to remove, e.g. producer_byte_rate:broker_bps
    #[arg(long, value_name = "KEY,...", help_heading = "Alter")]
    delete: Vec<String>,
    /// (--alter) Validate the alteration on the server without applying it
    #[arg(long, help_heading = "Alter")]
    validate_only: bool,
    /// (--alter) Set every entry of every entity in FILE, a document as --list --output json
    /// prints it (- for standard input), instead of --names/--defaults with --add/--delete
    #[arg(long, value_name = "FILE", help_heading = "Alter")]
    file: Option<PathBuf>,
    /// (--list, --describe) Output format [default: text]
    #[arg(long, value_enum)]
    output: Option<Output>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Output {
    /// The seeds' text
    Text,
    /// JSON, one document on stdout
    Json,
}

fn main() -> ExitCode {
    let args = match Args::try_parse() {
        Ok(args) => args,
        Err(e) => return clap_failure(e),
    };
    exit_status(run(args))
}

/// One entity component as the command line gives it.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Spec {
    Name(String),
    Default,
    Prefix(String),
}

/// What --names, --defaults, --prefix and --match ask for: one spec per entity type, and the
/// seed's untyped `prefix=NAME` conditions.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct EntitySpec {
    typed: Vec<(EntityType, Spec)>,
    any_name: Vec<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Operation {
    List,
    Describe,
    Alter,
}

fn run(args: Args) -> Result<(), Failure> {
    let op = operation(&args)?;
    let spec = entity_spec(&args)?;
    let components = &spec.typed;
    let output = args.output.unwrap_or(Output::Text);
    // A document is read and checked whole before anything is sent.
    let document = match &args.file {
        Some(path) => Some(read_document(path)?),
        None => None,
    };
    let config = load_command_config(args.command_config.as_deref())?;
    let bootstrap = bootstrap_servers(args.bootstrap_server.as_deref(), &config)?;
    match op {
        Operation::List => list(&bootstrap, &config, &spec, output),
        Operation::Describe => describe(
            &bootstrap,
            &config,
            components,
            args.include_overrides,
            output,
        ),
        Operation::Alter => match document {
            Some(alterations) => alter_all(&bootstrap, &config, &alterations, args.validate_only),
            None => {
                let ops = alter_ops(&args.add, &args.delete)?;
                alter(&bootstrap, &config, components, &ops, args.validate_only)
            }
        },
    }
}

/// Exactly one operation, and no flag that belongs to another one.
fn operation(args: &Args) -> Result<Operation, Failure> {
    let given: Vec<(&str, Operation)> = [
        (args.list, "--list", Operation::List),
        (args.describe, "--describe", Operation::Describe),
        (args.alter, "--alter", Operation::Alter),
    ]
    .into_iter()
    .filter(|(on, _, _)| *on)
    .map(|(_, name, op)| (name, op))
    .collect();
    let op = match given.as_slice() {
        [] => return usage("give one of --list, --describe or --alter"),
        [(_, op)] => *op,
        [(a, _), (b, _), ..] => {
            return usage(format!(
                "{a} and {b} cannot be combined; give one of --list, --describe or --alter"
            ))
        }
    };
    let misplaced = [
        (!args.prefix.is_empty(), "--prefix", Operation::List),
        (!args.match_.is_empty(), "--match", Operation::List),
        (
            args.include_overrides,
            "--include-overrides",
            Operation::Describe,
        ),
        (!args.add.is_empty(), "--add", Operation::Alter),
        (!args.delete.is_empty(), "--delete", Operation::Alter),
        (args.validate_only, "--validate-only", Operation::Alter),
        (args.file.is_some(), "--file", Operation::Alter),
    ];
    for (given, flag, belongs) in misplaced {
        if given && belongs != op {
            let home = match belongs {
                Operation::List => "--list",
                Operation::Describe => "--describe",
                Operation::Alter => "--alter",
            };
            return usage(format!(
                "{flag} applies only to {home}; drop {flag} or use {home} instead"
            ));
        }
    }
    // As kafka-configs: an alteration prints nothing, so a format for it is a mistake.
    if op == Operation::Alter && args.output.is_some() {
        return usage("--output applies only to --list and --describe; drop --output or use --list or --describe instead");
    }
    if args.file.is_some() {
        let with = [
            (!args.names.is_empty(), "--names"),
            (!args.defaults.is_empty(), "--defaults"),
            (!args.add.is_empty(), "--add"),
            (!args.delete.is_empty(), "--delete"),
        ];
        if let Some((_, flag)) = with.iter().find(|(given, _)| *given) {
            return usage(format!(
                "--file names its entities and entries itself; drop {flag} or drop --file"
            ));
        }
    }
    Ok(op)
}

fn split_list(values: &[String]) -> impl Iterator<Item = &str> {
    values.iter().flat_map(|v| v.split(','))
}

fn entity_type(ty: &str, flag: &str) -> Result<EntityType, Failure> {
    ty.parse::<EntityType>().or_else(|_| {
        usage(match flag {
            // Both also take the seed's untyped form.
            "--prefix" | "--match" => format!(
                "unknown entity type '{ty}' in {flag}; use user, client-id or ip (TYPE=PREFIX), or prefix=NAME for a name of any type"
            ),
            _ => format!("unknown entity type '{ty}' in {flag}; use user, client-id or ip"),
        })
    })
}

/// The prefix flags the command line uses, as the messages name them: `--prefix` unless only
/// `--match` is typed.
fn prefix_flags(args: &Args) -> &'static str {
    match (args.prefix.is_empty(), args.match_.is_empty()) {
        (true, false) => "--match",
        (false, false) => "--prefix and --match",
        _ => "--prefix",
    }
}

/// --names, --defaults, --prefix and --match as one component per entity type, and the untyped
/// `prefix=NAME` conditions of --match (and --prefix).
fn entity_spec(args: &Args) -> Result<EntitySpec, Failure> {
    let mut out: Vec<(EntityType, Spec)> = Vec::new();
    let mut any_name: Vec<String> = Vec::new();
    let across = match prefix_flags(args) {
        "--prefix and --match" => "--names, --defaults, --prefix and --match".to_owned(),
        flag => format!("--names, --defaults and {flag}"),
    };
    let mut push = |ty: EntityType, spec: Spec| {
        if out.iter().any(|(t, _)| *t == ty) {
            return usage(format!(
                "{ty} is given more than once; give each entity type once across {across}"
            ));
        }
        out.push((ty, spec));
        Ok(())
    };
    for pair in split_list(&args.names) {
        let Some((ty, name)) = pair.split_once('=') else {
            return usage(format!(
                "--names takes type=name pairs such as user=alice,client-id=app; got '{pair}'"
            ));
        };
        let ty = entity_type(ty, "--names")?;
        if name.is_empty() {
            return usage(format!(
                "empty {ty} name in --names; for the default {ty} write --defaults={ty}"
            ));
        }
        if ty == EntityType::Ip && !ip_or_resolvable_host(name) {
            return usage(format!(
                "'{name}' in --names is not a valid IP or resolvable host; write e.g. ip=192.168.0.1"
            ));
        }
        push(ty, Spec::Name(name.to_owned()))?;
    }
    for ty in split_list(&args.defaults) {
        if ty.contains('=') {
            return usage(format!(
                "--defaults takes entity types such as user,client-id; got '{ty}' (names go in --names)"
            ));
        }
        push(entity_type(ty, "--defaults")?, Spec::Default)?;
    }
    for (flag, values) in [("--prefix", &args.prefix), ("--match", &args.match_)] {
        for pair in split_list(values) {
            let Some((ty, prefix)) = pair.split_once('=') else {
                return usage(if flag == "--match" {
                    format!("--match takes type=prefix pairs such as user=test-user-, or prefix=NAME for a name of any type; got '{pair}'")
                } else {
                    format!(
                        "--prefix takes type=prefix pairs such as user=test-user-; got '{pair}'"
                    )
                });
            };
            // The seed's `--match=prefix=NAME`: "prefix" is not an entity type.
            if ty == "prefix" {
                any_name.push(prefix.to_owned());
                continue;
            }
            push(entity_type(ty, flag)?, Spec::Prefix(prefix.to_owned()))?;
        }
    }
    let has = |t: EntityType| out.iter().any(|(ty, _)| *ty == t);
    if has(EntityType::Ip) && (has(EntityType::User) || has(EntityType::ClientId)) {
        return usage("ip cannot be combined with user or client-id; give ip on its own");
    }
    Ok(EntitySpec {
        typed: out,
        any_name,
    })
}

fn connect(bootstrap: &str, config: &ClientConfig) -> Result<AdminClient, Failure> {
    AdminClient::connect(bootstrap, config).map_err(|e| Failure::Server(e.to_string()))
}

fn server_failure(e: kquota_cli::ClientError) -> Failure {
    Failure::Server(e.to_string())
}

/// The filter component for one spec.
fn component(spec: &Spec) -> ComponentMatch {
    match spec {
        Spec::Name(n) => ComponentMatch::Exact(n.clone()),
        Spec::Default => ComponentMatch::Default,
        Spec::Prefix(p) => ComponentMatch::Prefix(p.clone()),
    }
}

/// Lists what the server returns for the filter, as it returns it: every entity, name, key and
/// value is shown (kquota_cli's `show` layer), whether or not kquota's engine would store it.
fn list(
    bootstrap: &str,
    config: &ClientConfig,
    spec: &EntitySpec,
    output: Output,
) -> Result<(), Failure> {
    let components: Vec<(EntityType, ComponentMatch)> = spec
        .typed
        .iter()
        .map(|(ty, spec)| (*ty, component(spec)))
        .collect();
    let mut conditions: Vec<Condition> = components
        .iter()
        .map(|(ty, m)| Condition::Typed(*ty, m.clone()))
        .collect();
    conditions.extend(spec.any_name.iter().cloned().map(Condition::AnyName));
    let mut admin = connect(bootstrap, config)?;
    // Prefixes go out as "any name" (Kafka has none) and are applied here, with the rest of the
    // filter again.
    let mut entries = admin
        .describe_client_quotas(&components, false)
        .map_err(server_failure)?;
    entries.retain(|e| matches(&e.entity, &conditions));
    sort_entries(&mut entries);
    let text = match output {
        Output::Text => list_text(&entries),
        Output::Json => format!("{}\n", list_json(&entries)),
    };
    write_out(&text, "")?;
    if entries.is_empty() {
        nothing_matched("no configured entity matches");
    }
    Ok(())
}

/// An empty answer is not an error (a script may ask whether anything is set), but a person
/// reading an empty screen should know that the server was asked and found nothing.
fn nothing_matched(what: &str) {
    eprintln!("note: {what}; nothing to show");
}

fn describe(
    bootstrap: &str,
    config: &ClientConfig,
    components: &[(EntityType, Spec)],
    include_overrides: bool,
    output: Output,
) -> Result<(), Failure> {
    let mut user: Option<Option<String>> = None;
    let mut client: Option<Option<String>> = None;
    for (ty, spec) in components {
        let name = match spec {
            Spec::Name(n) => Some(n.clone()),
            Spec::Default => None,
            Spec::Prefix(_) => unreachable!("refused with --describe"),
        };
        match ty {
            EntityType::User => user = Some(name),
            EntityType::ClientId => client = Some(name),
            EntityType::Ip => {
                return describe_ip(bootstrap, config, name, include_overrides, output)
            }
        }
    }
    if user.is_none() && client.is_none() {
        return usage(
            "--describe needs a user and/or a client-id (or an ip), e.g. --names=user=alice,client-id=app",
        );
    }
    // A default (or an omitted type) describes a name with no entry of its own.
    let (user, client) = (user.flatten(), client.flatten());
    let candidates: Vec<Candidate> = Level::ALL
        .into_iter()
        .filter_map(|level| Candidate::of_level(level, user.as_deref(), client.as_deref()))
        .collect();
    let mut admin = connect(bootstrap, config)?;
    // One exact, strict query per precedence level: bounded, and stock Kafka answers it too.
    let entries = fetch_candidates(&mut admin, &candidates)?;
    // Resolved here, by the levels' order, for every key the server returned: values are shown
    // as configured, whether or not kquota's engine would accept them.
    let described = resolve(&candidates, &entries, include_overrides);
    let text = match output {
        Output::Text => describe_text(&described),
        Output::Json => format!(
            "{}\n",
            json!({
                "version": 1,
                "user": user,
                "client-id": client,
                "quotas": describe_quotas_json(&described),
            })
        ),
    };
    write_out(&text, "")?;
    if described.is_empty() {
        nothing_matched(
            "no quota applies: no entity of this connection's precedence levels has an entry",
        );
    }
    Ok(())
}

/// The configured entries of each candidate entity: one strict query with EXACT or DEFAULT
/// components per candidate.
fn fetch_candidates(
    admin: &mut AdminClient,
    candidates: &[Candidate],
) -> Result<Vec<kquota_cli::QuotaEntry>, Failure> {
    let mut entries = Vec::new();
    for candidate in candidates {
        let filter: Vec<(EntityType, ComponentMatch)> = candidate
            .entity
            .iter()
            .map(|(ty, name)| {
                let ty = ty
                    .parse::<EntityType>()
                    .expect("candidates have known types");
                let m = match name {
                    Some(n) => ComponentMatch::Exact(n.clone()),
                    None => ComponentMatch::Default,
                };
                (ty, m)
            })
            .collect();
        entries.extend(
            admin
                .describe_client_quotas(&filter, true)
                .map_err(server_failure)?,
        );
    }
    Ok(entries)
}

/// Describes an ip: `{ip=x}`, then `{ip=<default>}`, which it overrides (an ip with no entry of
/// its own when `ip` is `None`). Every key the server returns for them is shown.
fn describe_ip(
    bootstrap: &str,
    config: &ClientConfig,
    ip: Option<String>,
    include_overrides: bool,
    output: Output,
) -> Result<(), Failure> {
    let mut candidates = Vec::new();
    if let Some(ip) = &ip {
        candidates.push(Candidate {
            level: None,
            entity: vec![("ip".to_owned(), Some(ip.clone()))],
        });
    }
    candidates.push(Candidate {
        level: None,
        entity: vec![("ip".to_owned(), None)],
    });
    let mut admin = connect(bootstrap, config)?;
    let entries = fetch_candidates(&mut admin, &candidates)?;
    let described = resolve(&candidates, &entries, include_overrides);
    let text = match output {
        Output::Text => describe_text(&described),
        Output::Json => format!(
            "{}\n",
            json!({"version": 1, "ip": ip, "quotas": describe_quotas_json(&described)})
        ),
    };
    write_out(&text, "")?;
    if described.is_empty() {
        nothing_matched("no quota applies: neither this ip nor the default ip has an entry");
    }
    Ok(())
}

/// --add and --delete as `(key, value)` ops, `None` to remove.
fn alter_ops(add: &[String], delete: &[String]) -> Result<Vec<(QuotaKey, Option<f64>)>, Failure> {
    let mut ops: Vec<(QuotaKey, Option<f64>)> = Vec::new();
    let mut push = |key: QuotaKey, value: Option<f64>| {
        if ops.iter().any(|(k, _)| *k == key) {
            return usage(format!(
                "{key} is given more than once across --add and --delete; give each key once"
            ));
        }
        ops.push((key, value));
        Ok(())
    };
    for entry in split_list(add) {
        let Some((key, value)) = entry.split_once('=') else {
            return usage(format!(
                "--add takes name[:unit]=value entries such as producer_byte_rate:shares=100; got '{entry}'"
            ));
        };
        let key = quota_key(key, "--add")?;
        let number = value.trim().parse::<f64>().ok().filter(|v| v.is_finite());
        let Some(number) = number else {
            return usage(format!(
                "--add {key}: '{value}' is not a number; write e.g. {key}=1048576"
            ));
        };
        push(key, Some(number))?;
    }
    for key in split_list(delete) {
        if key.contains('=') {
            return usage(format!(
                "--delete takes name[:unit] entries without a value, such as producer_byte_rate:broker_bps; got '{key}'"
            ));
        }
        push(quota_key(key, "--delete")?, None)?;
    }
    if ops.is_empty() {
        return usage("--alter needs --add or --delete, e.g. --add=producer_byte_rate=1048576");
    }
    Ok(ops)
}

fn quota_key(text: &str, flag: &str) -> Result<QuotaKey, Failure> {
    text.parse::<QuotaKey>().or_else(|e| match e {
        ParseError::UnknownUnit { quota_type, unit } => {
            let ty: QuotaType = quota_type.parse().expect("parsed before the unit");
            let units: Vec<&str> = QuotaKey::all()
                .filter(|k| k.quota_type() == ty)
                .map(|k| k.unit().as_str())
                .collect();
            usage(format!(
                "unknown unit '{unit}' for {quota_type} in {flag}; use {}",
                units.join(", ")
            ))
        }
        _ => {
            let ty = text.split(':').next().unwrap_or(text);
            let types: Vec<&str> = QuotaType::ALL.iter().map(|t| t.as_str()).collect();
            usage(format!(
                "unknown quota type '{ty}' in {flag}; use one of {}",
                types.join(", ")
            ))
        }
    })
}

fn alter(
    bootstrap: &str,
    config: &ClientConfig,
    components: &[(EntityType, Spec)],
    ops: &[(QuotaKey, Option<f64>)],
    validate_only: bool,
) -> Result<(), Failure> {
    if components.is_empty() {
        return usage(
            "--alter needs an entity: give --names and/or --defaults, e.g. --names=user=alice",
        );
    }
    let parts: Vec<(EntityType, EntityName)> = components
        .iter()
        .map(|(ty, spec)| {
            let name = match spec {
                Spec::Name(n) => EntityName::named(n).expect("checked non-empty"),
                Spec::Default => EntityName::Default,
                Spec::Prefix(_) => unreachable!("refused with --alter"),
            };
            (*ty, name)
        })
        .collect();
    let entity = Entity::from_parts(&parts).expect("shape checked in entity_spec");
    for (key, _) in ops {
        if key.is_ip_key() != entity.is_ip() {
            return usage(if entity.is_ip() {
                format!("{key} does not apply to ip entities; ip entities take connection_creation_rate")
            } else {
                format!(
                    "{key} applies only to ip entities; use --names=ip=ADDRESS or --defaults=ip"
                )
            });
        }
    }
    let mut alteration = Alteration::new(&entity);
    for (key, value) in ops {
        alteration = match value {
            Some(v) => alteration.set(key, *v),
            None => alteration.remove(key),
        };
    }
    let mut admin = connect(bootstrap, config)?;
    let results = admin
        .alter_client_quotas(&[alteration], validate_only)
        .map_err(server_failure)?;
    let errors: Vec<String> = results
        .iter()
        .filter_map(|r| r.error.as_ref())
        .map(|e| refusal(&entity, e))
        .collect();
    if errors.is_empty() {
        Ok(())
    } else {
        Err(Failure::Server(errors.join("\nerror: ")))
    }
}

/// The entities one AlterClientQuotas request carries from a document: a store of any size goes
/// in requests a server's frame limit takes.
const FILE_BATCH: usize = 1000;

/// Reads `--file`: a `--list --output json` document (version 1), each entity with its entries,
/// as the alterations that set them. Anything this tool could not send as it is written is a
/// usage error naming the entity, before anything is sent.
fn read_document(path: &Path) -> Result<Vec<(Entity, Alteration)>, Failure> {
    let shown = path.display();
    let text = if path == Path::new("-") {
        std::io::read_to_string(std::io::stdin())
    } else {
        std::fs::read_to_string(path)
    }
    .or_else(|e| usage(format!("--file {shown}: {e}")))?;
    let document: Value = serde_json::from_str(&text)
        .or_else(|e| usage(format!("--file {shown}: not a JSON document: {e}")))?;
    if document.get("version") != Some(&json!(1)) {
        return usage(format!(
            "--file {shown}: not a --list --output json document (version 1, entities); write one with kafka-quotas --list --output json"
        ));
    }
    let Some(entities) = document.get("entities").and_then(Value::as_array) else {
        return usage(format!("--file {shown}: no \"entities\" list"));
    };
    let mut out: Vec<(Entity, Alteration)> = Vec::with_capacity(entities.len());
    let mut seen = std::collections::HashSet::new();
    for (i, item) in entities.iter().enumerate() {
        let at = |problem: String| usage(format!("--file {shown}: entity {}: {problem}", i + 1));
        let entity = match document_entity(item) {
            Ok(entity) => entity,
            Err(problem) => return at(problem),
        };
        if !seen.insert(entity.clone()) {
            return at(format!("{} is listed twice", wire_text(&entity)));
        }
        let quotas = item.get("quotas").and_then(Value::as_array);
        let mut alteration = Alteration::new(&entity);
        for quota in quotas.into_iter().flatten() {
            match document_quota(&entity, quota) {
                Ok((key, value)) => alteration = alteration.set(key, value),
                Err(problem) => return at(format!("{}: {problem}", wire_text(&entity))),
            }
        }
        // An entity listed without entries has nothing to set.
        if !alteration.ops.is_empty() {
            out.push((entity, alteration));
        }
    }
    Ok(out)
}

/// One document entity: `{"user": "alice", "client-id": null}`.
fn document_entity(item: &Value) -> Result<Entity, String> {
    if item.get("components").is_some() {
        return Err("names one entity type twice, which no server stores on request".to_owned());
    }
    let Some(object) = item.get("entity").and_then(Value::as_object) else {
        return Err("no \"entity\" object".to_owned());
    };
    let mut parts = Vec::new();
    for (ty, name) in object {
        let Ok(ty) = ty.parse::<EntityType>() else {
            return Err(format!(
                "unknown entity type '{ty}'; this tool alters user, client-id and ip"
            ));
        };
        let name = match name {
            Value::Null => EntityName::Default,
            Value::String(n) => EntityName::named(n)
                .map_err(|_| format!("an empty {ty} name; null is the default"))?,
            _ => {
                return Err(format!(
                    "the {ty} name must be a string, or null for the default"
                ))
            }
        };
        parts.push((ty, name));
    }
    Entity::from_parts(&parts)
        .ok_or_else(|| "an entity is user and/or client-id, or ip alone".to_owned())
}

/// One document quota: `{"type": "producer_byte_rate", "unit": "bps", "value": 1000}`.
fn document_quota(entity: &Entity, quota: &Value) -> Result<(QuotaKey, f64), String> {
    if let Some(key) = quota.get("key").and_then(Value::as_str) {
        return Err(format!("'{key}' is a key this tool does not know"));
    }
    let text = match (
        quota.get("type").and_then(Value::as_str),
        quota.get("unit").and_then(Value::as_str),
    ) {
        (Some(ty), Some(unit)) => format!("{ty}:{unit}"),
        (Some(ty), None) => ty.to_owned(),
        _ => return Err("a quota without a \"type\"".to_owned()),
    };
    let key = text
        .parse::<QuotaKey>()
        .map_err(|_| format!("'{text}' is not a quota key"))?;
    if key.is_ip_key() != entity.is_ip() {
        return Err(format!("{key} does not apply to this entity"));
    }
    match quota.get("value").and_then(Value::as_f64) {
        Some(value) if value.is_finite() => Ok((key, value)),
        _ => Err(format!("{key}: the value must be a finite number")),
    }
}

/// Sends the document's alterations, [`FILE_BATCH`] entities a request. Each entity is applied or
/// refused on its own, as in any AlterClientQuotas; every refusal is one line.
fn alter_all(
    bootstrap: &str,
    config: &ClientConfig,
    alterations: &[(Entity, Alteration)],
    validate_only: bool,
) -> Result<(), Failure> {
    let mut admin = connect(bootstrap, config)?;
    let mut errors = Vec::new();
    for chunk in alterations.chunks(FILE_BATCH) {
        let batch: Vec<Alteration> = chunk.iter().map(|(_, a)| a.clone()).collect();
        let results = admin
            .alter_client_quotas(&batch, validate_only)
            .map_err(server_failure)?;
        // Kafka answers the entries in the order they were sent.
        for ((entity, _), result) in chunk.iter().zip(&results) {
            if let Some(e) = &result.error {
                errors.push(refusal(entity, e));
            }
        }
    }
    if alterations.is_empty() {
        eprintln!("note: the document lists no entries; nothing was sent");
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(Failure::Server(errors.join("\nerror: ")))
    }
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
