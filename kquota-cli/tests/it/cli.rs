//! `kafka-quotas` and `kafka-configs` end to end against a `kquotad` started by the test: the seeds'
//! examples byte for byte (DESIGN.md's consistent form), the JSON schema, every usage error with its
//! message and exit status, and server errors.

use std::net::SocketAddr;
use std::process::Command;

use serde_json::Value;

use kquota_testkit::{temp_dir, Kquotad};

/// A `kquotad` for the tools to talk to.
fn start() -> Kquotad {
    let dir = temp_dir("cli");
    Kquotad::start(&dir, &[]).owning(dir)
}

fn kafka_quotas(server: &Kquotad, args: &[&str]) -> Run {
    run(env!("CARGO_BIN_EXE_kafka-quotas"), Some(server.addr), args)
}

fn kafka_configs(server: &Kquotad, args: &[&str]) -> Run {
    run(env!("CARGO_BIN_EXE_kafka-configs"), Some(server.addr), args)
}

#[derive(Debug)]
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

fn run(bin: &str, addr: Option<SocketAddr>, args: &[&str]) -> Run {
    let mut cmd = Command::new(bin);
    if let Some(addr) = addr {
        cmd.arg("--bootstrap-server").arg(addr.to_string());
    }
    let out = cmd.args(args).output().expect("run the tool");
    Run {
        code: out.status.code().expect("exit status"),
        stdout: String::from_utf8(out.stdout).unwrap(),
        stderr: String::from_utf8(out.stderr).unwrap(),
    }
}

#[track_caller]
fn ok(r: Run) -> String {
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(r.stderr, "", "{r:?}");
    r.stdout
}

/// The seeds' state: the three entities of DESIGN.md's "Seed examples, made consistent".
fn seed(server: &Kquotad) {
    for args in [
        &[
            "--alter",
            "--names=user=user-two,client-id=my-client",
            "--add=consumer_byte_rate:shares=200,producer_byte_rate:bps=10000000",
        ][..],
        &[
            "--alter",
            "--names=user=user-one,client-id=my-client",
            "--add=producer_byte_rate:broker_bps=2000000",
        ],
        &[
            "--alter",
            "--names=client-id=my-client",
            "--defaults=user",
            "--add=consumer_byte_rate:shares=100,producer_byte_rate=500000",
        ],
    ] {
        assert_eq!(ok(kafka_quotas(server, args)), "", "alter prints nothing");
    }
}

#[test]
fn the_seeds_examples_print_designs_consistent_output() {
    let server = start();
    seed(&server);

    // Named before default, names in byte order (DESIGN.md: the seed's order is not normative).
    assert_eq!(
        ok(kafka_quotas(
            &server,
            &["--list", "--names=client-id=my-client"]
        )),
        "{user=user-one, client-id=my-client}\n\
         producer_byte_rate broker_bps 2000000\n\
         \n\
         {user=user-two, client-id=my-client}\n\
         consumer_byte_rate shares 200\n\
         producer_byte_rate bps 10000000\n\
         \n\
         {user=<default>, client-id=my-client}\n\
         consumer_byte_rate shares 100\n\
         producer_byte_rate broker_bps 500000\n"
    );
    let by_prefix = "{user=user-one, client-id=my-client}\n\
                     producer_byte_rate broker_bps 2000000\n\
                     \n\
                     {user=user-two, client-id=my-client}\n\
                     consumer_byte_rate shares 200\n\
                     producer_byte_rate bps 10000000\n";
    assert_eq!(
        ok(kafka_quotas(&server, &["--list", "--prefix=user=user-"])),
        by_prefix
    );
    assert_eq!(
        ok(kafka_quotas(&server, &["--list", "--match=user=user-"])),
        by_prefix
    );

    assert_eq!(
        ok(kafka_quotas(
            &server,
            &["--describe", "--names=user=user-two,client-id=my-client"]
        )),
        "consumer_byte_rate shares     200      {user=user-two, client-id=my-client}\n\
         producer_byte_rate bps        10000000 {user=user-two, client-id=my-client}\n\
         producer_byte_rate broker_bps 500000   {user=<default>, client-id=my-client}\n"
    );
    assert_eq!(
        ok(kafka_quotas(
            &server,
            &[
                "--describe",
                "--names=user=user-one,client-id=my-client",
                "--include-overrides",
            ]
        )),
        "consumer_byte_rate    shares     100     {user=<default>, client-id=my-client}\n\
         producer_byte_rate    broker_bps 2000000 {user=user-one, client-id=my-client}\n \
         * producer_byte_rate broker_bps 500000  {user=<default>, client-id=my-client}\n"
    );

    // The alter example, with --alter where the seed says --describe.
    assert_eq!(
        ok(kafka_quotas(
            &server,
            &[
                "--alter",
                "--names=client-id=my-client",
                "--defaults=user",
                "--add=producer_byte_rate:shares=100",
                "--delete=producer_byte_rate:broker_bps",
            ]
        )),
        ""
    );
    assert_eq!(
        ok(kafka_quotas(
            &server,
            &["--list", "--names=client-id=my-client", "--defaults=user"]
        )),
        "{user=<default>, client-id=my-client}\n\
         consumer_byte_rate shares 100\n\
         producer_byte_rate shares 100\n"
    );
}

#[test]
fn describe_with_a_default_or_an_omitted_type_uses_only_defaults_for_it() {
    let server = start();
    seed(&server);
    ok(kafka_quotas(
        &server,
        &[
            "--alter",
            "--defaults=client-id",
            "--add=request_percentage=25.5",
        ],
    ));
    // A user without its own entry: the {user=<default>, client-id=my-client} entries apply.
    let expected = "consumer_byte_rate shares     100    {user=<default>, client-id=my-client}\n\
                    producer_byte_rate broker_bps 500000 {user=<default>, client-id=my-client}\n\
                    request_percentage percent    25.5   {client-id=<default>}\n";
    assert_eq!(
        ok(kafka_quotas(
            &server,
            &["--describe", "--names=user=nobody,client-id=my-client"]
        )),
        expected
    );
    assert_eq!(
        ok(kafka_quotas(
            &server,
            &[
                "--describe",
                "--defaults=user",
                "--names=client-id=my-client"
            ]
        )),
        expected
    );
    assert_eq!(
        ok(kafka_quotas(
            &server,
            &["--describe", "--names=client-id=my-client"]
        )),
        expected
    );
    // Nothing configured for this user's other client but the client-id default.
    assert_eq!(
        ok(kafka_quotas(
            &server,
            &["--describe", "--names=user=user-one"]
        )),
        "request_percentage percent 25.5 {client-id=<default>}\n"
    );
}

#[test]
fn describe_an_ip_and_its_default() {
    let server = start();
    ok(kafka_quotas(
        &server,
        &[
            "--alter",
            "--defaults=ip",
            "--add=connection_creation_rate=10",
        ],
    ));
    ok(kafka_quotas(
        &server,
        &[
            "--alter",
            "--names=ip=10.0.0.1",
            "--add=connection_creation_rate=3",
        ],
    ));
    assert_eq!(
        ok(kafka_quotas(
            &server,
            &["--describe", "--names=ip=10.0.0.1", "--include-overrides"]
        )),
        "connection_creation_rate    connections_per_sec 3  {ip=10.0.0.1}\n \
         * connection_creation_rate connections_per_sec 10 {ip=<default>}\n"
    );
    assert_eq!(
        ok(kafka_quotas(
            &server,
            &["--describe", "--names=ip=10.0.0.2"]
        )),
        "connection_creation_rate connections_per_sec 10 {ip=<default>}\n"
    );
    let json: Value = serde_json::from_str(&ok(kafka_quotas(
        &server,
        &["--describe", "--names=ip=10.0.0.1", "--output=json"],
    )))
    .unwrap();
    assert_eq!(
        json,
        serde_json::json!({"version": 1, "ip": "10.0.0.1", "quotas": [{
            "type": "connection_creation_rate", "unit": "connections_per_sec", "value": 3,
            "entity": {"ip": "10.0.0.1"}, "level": null, "overridden": [],
        }]})
    );
}

#[test]
fn validate_only_changes_nothing() {
    let server = start();
    ok(kafka_quotas(
        &server,
        &[
            "--alter",
            "--names=user=alice",
            "--add=producer_byte_rate=1000",
            "--validate-only",
        ],
    ));
    assert_eq!(ok(kafka_quotas(&server, &["--list"])), "");
}

/// Checks a value against the documented JSON schema of docs/cli.md: an entity is an object whose
/// keys are entity types and whose values are a name or null (the default).
fn check_entity(v: &Value) {
    let obj = v.as_object().expect("entity is an object");
    assert!(!obj.is_empty());
    for (k, name) in obj {
        assert!(["user", "client-id", "ip"].contains(&k.as_str()), "{k}");
        assert!(name.is_null() || name.as_str().is_some_and(|s| !s.is_empty()));
    }
}

fn check_quota_fields(q: &Value) {
    assert!(q["type"].is_string() && q["unit"].is_string(), "{q}");
    assert!(q["value"].as_f64().is_some_and(|v| v > 0.0), "{q}");
}

#[test]
fn json_output_follows_its_schema() {
    let server = start();
    seed(&server);

    let list: Value = serde_json::from_str(&ok(kafka_quotas(
        &server,
        &["--list", "--names=client-id=my-client", "--output=json"],
    )))
    .unwrap();
    assert_eq!(list["version"], 1);
    let entities = list["entities"].as_array().expect("entities array");
    assert_eq!(entities.len(), 3);
    for e in entities {
        assert_eq!(e.as_object().unwrap().len(), 2, "{e}");
        check_entity(&e["entity"]);
        for q in e["quotas"].as_array().expect("quotas array") {
            assert_eq!(q.as_object().unwrap().len(), 3, "{q}");
            check_quota_fields(q);
        }
    }
    assert_eq!(
        entities[2],
        serde_json::json!({
            "entity": {"user": null, "client-id": "my-client"},
            "quotas": [
                {"type": "consumer_byte_rate", "unit": "shares", "value": 100},
                {"type": "producer_byte_rate", "unit": "broker_bps", "value": 500000},
            ],
        })
    );

    let described: Value = serde_json::from_str(&ok(kafka_quotas(
        &server,
        &[
            "--describe",
            "--names=user=user-one,client-id=my-client",
            "--include-overrides",
            "--output",
            "json",
        ],
    )))
    .unwrap();
    assert_eq!(described["version"], 1);
    assert_eq!(described["user"], "user-one");
    assert_eq!(described["client-id"], "my-client");
    let quotas = described["quotas"].as_array().unwrap();
    for q in quotas {
        check_quota_fields(q);
        check_entity(&q["entity"]);
        assert!(q["level"].as_u64().is_some_and(|l| (1..=8).contains(&l)));
        for o in q["overridden"].as_array().expect("overridden array") {
            check_entity(&o["entity"]);
            assert!(o["value"].as_f64().is_some() && o["level"].as_u64().is_some());
        }
    }
    assert_eq!(
        quotas[1],
        serde_json::json!({
            "type": "producer_byte_rate", "unit": "broker_bps", "value": 2000000,
            "entity": {"user": "user-one", "client-id": "my-client"}, "level": 1,
            "overridden": [
                {"value": 500000, "entity": {"user": null, "client-id": "my-client"}, "level": 4}
            ],
        })
    );
    // Alter prints nothing in either format.
    assert_eq!(
        ok(kafka_quotas(
            &server,
            &[
                "--alter",
                "--names=user=u",
                "--add=request_percentage=1.5",
                "--output=json",
            ]
        )),
        ""
    );
}

#[test]
fn usage_errors_say_what_to_write_and_exit_2() {
    // Nothing listens on port 1: every case must fail before connecting.
    let addr: SocketAddr = "127.0.0.1:1".parse().unwrap();
    let cases: &[(&[&str], &str)] = &[
        (&[], "error: give one of --list, --describe or --alter"),
        (
            &["--list", "--describe"],
            "error: --list and --describe cannot be combined; give one of --list, --describe or --alter",
        ),
        (
            &["--list", "--include-overrides"],
            "error: --include-overrides applies only to --describe; drop --include-overrides or use --describe instead",
        ),
        (
            &["--describe", "--names=user=a", "--prefix=client-id=x"],
            "error: --prefix applies only to --list; drop --prefix or use --list instead",
        ),
        (
            &["--list", "--add=producer_byte_rate=1"],
            "error: --add applies only to --alter; drop --add or use --alter instead",
        ),
        (
            &["--describe", "--names=user=a", "--delete=producer_byte_rate"],
            "error: --delete applies only to --alter; drop --delete or use --alter instead",
        ),
        (
            &["--list", "--validate-only"],
            "error: --validate-only applies only to --alter; drop --validate-only or use --alter instead",
        ),
        (
            &["--list", "--names=user"],
            "error: --names takes type=name pairs such as user=alice,client-id=app; got 'user'",
        ),
        (
            &["--list", "--names=group=g"],
            "error: unknown entity type 'group' in --names; use user, client-id or ip",
        ),
        (
            &["--list", "--names=user="],
            "error: empty user name in --names; for the default user write --defaults=user",
        ),
        (
            &["--list", "--defaults=users"],
            "error: unknown entity type 'users' in --defaults; use user, client-id or ip",
        ),
        (
            &["--list", "--defaults=user=a"],
            "error: --defaults takes entity types such as user,client-id; got 'user=a' (names go in --names)",
        ),
        (
            &["--list", "--prefix=user"],
            "error: --prefix takes type=prefix pairs such as user=test-user-; got 'user'",
        ),
        (
            &["--list", "--names=user=a", "--defaults=user"],
            "error: user is given more than once; give each entity type once across --names, --defaults and --prefix",
        ),
        (
            &["--list", "--names=ip=1.2.3.4,user=a"],
            "error: ip cannot be combined with user or client-id; give ip on its own",
        ),
        (
            &["--describe"],
            "error: --describe needs a user and/or a client-id (or an ip), e.g. --names=user=alice,client-id=app",
        ),
        (
            &["--alter", "--names=user=a"],
            "error: --alter needs --add or --delete, e.g. --add=producer_byte_rate=1048576",
        ),
        (
            &["--alter", "--add=producer_byte_rate=1"],
            "error: --alter needs an entity: give --names and/or --defaults, e.g. --names=user=alice",
        ),
        (
            &["--alter", "--names=user=a", "--add=producer_byte_rate"],
            "error: --add takes name[:unit]=value entries such as producer_byte_rate:shares=100; got 'producer_byte_rate'",
        ),
        (
            &["--alter", "--names=user=a", "--add=producer_byte_rate=fast"],
            "error: --add producer_byte_rate: 'fast' is not a number; write e.g. producer_byte_rate=1048576",
        ),
        (
            &["--alter", "--names=user=a", "--add=producer_byte_rate:furlongs=1"],
            "error: unknown unit 'furlongs' for producer_byte_rate in --add; use bps, broker_bps, shares",
        ),
        (
            &["--alter", "--names=user=a", "--delete=request_percentage:shares"],
            "error: unknown unit 'shares' for request_percentage in --delete; use percent",
        ),
        (
            &["--alter", "--names=user=a", "--add=byte_rate=1"],
            "error: unknown quota type 'byte_rate' in --add; use one of connection_creation_rate, consumer_byte_rate, controller_mutation_rate, producer_byte_rate, request_percentage",
        ),
        (
            &["--alter", "--names=user=a", "--delete=producer_byte_rate=1"],
            "error: --delete takes name[:unit] entries without a value, such as producer_byte_rate:broker_bps; got 'producer_byte_rate=1'",
        ),
        (
            &[
                "--alter",
                "--names=user=a",
                "--add=producer_byte_rate=1",
                "--delete=producer_byte_rate:broker_bps",
            ],
            "error: producer_byte_rate is given more than once across --add and --delete; give each key once",
        ),
        (
            &["--alter", "--names=user=a", "--add=connection_creation_rate=5"],
            "error: connection_creation_rate applies only to ip entities; use --names=ip=ADDRESS or --defaults=ip",
        ),
        (
            &["--alter", "--defaults=ip", "--add=producer_byte_rate=5"],
            "error: producer_byte_rate does not apply to ip entities; ip entities take connection_creation_rate",
        ),
        (
            &["--list", "--output=yaml"],
            "error: invalid value 'yaml' for '--output <OUTPUT>'; [possible values: text, json] (see --help)",
        ),
        (
            &["--lst"],
            "error: unexpected argument '--lst' found; a similar argument exists: '--list' (see --help)",
        ),
    ];
    for (args, message) in cases {
        let r = run(env!("CARGO_BIN_EXE_kafka-quotas"), Some(addr), args);
        assert_eq!(r.code, 2, "{args:?}: {r:?}");
        assert_eq!(r.stderr, format!("{message}\n"), "{args:?}");
        assert_eq!(r.stdout, "", "{args:?}");
    }
    let r = run(env!("CARGO_BIN_EXE_kafka-quotas"), None, &["--list"]);
    assert_eq!(r.code, 2);
    assert_eq!(
        r.stderr,
        "error: --bootstrap-server is required, e.g. --bootstrap-server localhost:9092\n"
    );
}

#[test]
fn server_errors_name_the_entity_and_kafkas_error_and_exit_1() {
    let server = start();
    let r = kafka_quotas(
        &server,
        &["--alter", "--names=user=x", "--add=request_percentage=-1"],
    );
    assert_eq!(r.code, 1, "{r:?}");
    assert_eq!(
        r.stderr,
        "error: {user=x}: INVALID_REQUEST: Quota request_percentage must be greater than 0\n"
    );
    // kquotad's default policy is kip55: a sub-quota above the user's total is refused.
    ok(kafka_quotas(
        &server,
        &["--alter", "--names=user=u", "--add=producer_byte_rate=100"],
    ));
    let r = kafka_quotas(
        &server,
        &[
            "--alter",
            "--names=user=u,client-id=c",
            "--add=producer_byte_rate=200",
        ],
    );
    assert_eq!(r.code, 1, "{r:?}");
    assert!(
        r.stderr
            .starts_with("error: {user=u, client-id=c}: POLICY_VIOLATION: "),
        "{r:?}"
    );
    assert_eq!(r.stderr.lines().count(), 1);

    let nobody: SocketAddr = "127.0.0.1:1".parse().unwrap();
    let r = run(
        env!("CARGO_BIN_EXE_kafka-quotas"),
        Some(nobody),
        &["--list"],
    );
    assert_eq!(r.code, 1, "{r:?}");
    assert!(
        r.stderr
            .starts_with("error: could not connect: 127.0.0.1:1: "),
        "{r:?}"
    );
}

#[test]
fn command_config_keys_are_used_and_unknown_keys_warned_about() {
    let server = start();
    let dir = temp_dir("props");
    std::fs::create_dir_all(&dir).unwrap();
    let props = dir.join("admin.properties");
    std::fs::write(
        &props,
        "# admin client\nsecurity.protocol=PLAINTEXT\nclient.id=ops\nrequest.timeout.ms=5000\nretries=3\n",
    )
    .unwrap();
    let props_arg = props.to_str().unwrap();
    let r = kafka_quotas(&server, &["--list", "--command-config", props_arg]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(
        r.stderr,
        format!(
            "warning: --command-config {props_arg}: ignoring unknown key 'retries' (understood: {})\n",
            kquota_cli::KNOWN_KEYS.join(", ")
        )
    );

    // bootstrap.servers from the file stands in for --bootstrap-server.
    std::fs::write(&props, format!("bootstrap.servers={}\n", server.addr)).unwrap();
    let r = run(
        env!("CARGO_BIN_EXE_kafka-quotas"),
        None,
        &["--list", "--command-config", props_arg],
    );
    assert_eq!((r.code, r.stderr.as_str()), (0, ""), "{r:?}");

    std::fs::write(&props, "security.protocol=SASL_SSL\n").unwrap();
    let r = kafka_quotas(&server, &["--list", "--command-config", props_arg]);
    assert_eq!(r.code, 2, "{r:?}");
    assert_eq!(
        r.stderr,
        format!("error: --command-config {props_arg}: security.protocol=SASL_SSL needs sasl.mechanism (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512)\n")
    );
}

#[test]
fn kafka_configs_sets_the_seeds_sub_quota_and_describes_it() {
    let server = start();
    // The second seed's command, with --bootstrap-server for --zookeeper.
    assert_eq!(
        ok(kafka_configs(
            &server,
            &[
                "--alter",
                "--add-config",
                "producer_byte_rate=10,consumer_byte_rate=20",
                "--entity-name",
                "clientA",
                "--entity-type",
                "clients",
                "--entity-name",
                "user2",
                "--entity-type",
                "users",
            ]
        )),
        "Completed updating config for client clientA.\n"
    );
    // Values in the order Kafka's admin client's HashMap gives them, doubles as Java prints them.
    let line = "Quota configs for user-principal 'user2', client-id 'clientA' are consumer_byte_rate=20.0, producer_byte_rate=10.0\n";
    assert_eq!(
        ok(kafka_configs(
            &server,
            &[
                "--describe",
                "--entity-type",
                "users",
                "--entity-name",
                "user2",
                "--entity-type",
                "clients",
                "--entity-name",
                "clientA",
            ]
        )),
        line
    );
    // kafka-quotas sees the same entity.
    assert_eq!(
        ok(kafka_quotas(&server, &["--list", "--names=user=user2"])),
        "{user=user2, client-id=clientA}\n\
         consumer_byte_rate broker_bps 20\n\
         producer_byte_rate broker_bps 10\n"
    );

    assert_eq!(
        ok(kafka_configs(
            &server,
            &[
                "--alter",
                "--entity-type",
                "clients",
                "--entity-default",
                "--add-config",
                "request_percentage=50",
            ]
        )),
        "Completed updating default config for clients in the cluster.\n"
    );
    assert_eq!(
        ok(kafka_configs(
            &server,
            &[
                "--alter",
                "--entity-type",
                "users",
                "--entity-name",
                "user2",
                "--add-config",
                "producer_byte_rate=20000000",
            ]
        )),
        "Completed updating config for user user2.\n"
    );
    assert_eq!(
        ok(kafka_configs(
            &server,
            &["--describe", "--entity-type", "clients"]
        )),
        "Quota configs for the default client-id are request_percentage=50.0\n"
    );
    assert_eq!(
        ok(kafka_configs(
            &server,
            &["--describe", "--entity-type", "users"]
        )),
        "Quota configs for user-principal 'user2' are producer_byte_rate=2.0E7\n"
    );
    assert_eq!(
        ok(kafka_configs(
            &server,
            &[
                "--alter",
                "--entity-type",
                "users",
                "--entity-name",
                "user2",
                "--entity-type",
                "clients",
                "--entity-name",
                "clientA",
                "--delete-config",
                "consumer_byte_rate",
            ]
        )),
        "Completed updating config for user user2.\n"
    );
    assert_eq!(
        ok(kafka_configs(
            &server,
            &[
                "--describe",
                "--entity-type",
                "users",
                "--entity-name",
                "user2",
                "--entity-type",
                "clients",
                "--entity-default",
            ]
        )),
        ""
    );

    // A server refusal: the sub-quota now exceeds a smaller total.
    let r = kafka_configs(
        &server,
        &[
            "--alter",
            "--entity-type",
            "users",
            "--entity-name",
            "user2",
            "--add-config",
            "producer_byte_rate=5",
        ],
    );
    assert_eq!(r.code, 1, "{r:?}");
    assert!(
        r.stderr
            .starts_with("error: {user=user2}: POLICY_VIOLATION: "),
        "{r:?}"
    );
}

#[test]
fn kafka_configs_usage_errors_exit_2() {
    let addr: SocketAddr = "127.0.0.1:1".parse().unwrap();
    let cases: &[(&[&str], &str)] = &[
        (&["--entity-type", "users"], "error: give one of --describe or --alter"),
        (
            &["--describe", "--alter", "--entity-type", "users"],
            "error: --describe and --alter cannot be combined; give one of them",
        ),
        (&["--describe"], "error: --entity-type is required: users, clients or ips"),
        (
            &["--describe", "--entity-type", "topics", "--entity-name", "t"],
            "error: entity type 'topics' is not supported: this kafka-configs manages quotas only; use --entity-type users, clients or ips",
        ),
        (
            &["--describe", "--entity-type", "users", "--entity-name", "a", "--entity-name", "b"],
            "error: each --entity-name or --entity-default needs its own --entity-type, e.g. --entity-type users --entity-name alice",
        ),
        (
            &["--alter", "--entity-type", "users", "--add-config", "producer_byte_rate=1"],
            "error: --entity-name or --entity-default must be specified with each --entity-type for --alter (missing for users)",
        ),
        (
            &["--alter", "--entity-type", "users", "--entity-name", "a"],
            "error: at least one of --add-config, --add-config-file or --delete-config must be specified with --alter",
        ),
        (
            &["--describe", "--entity-type", "users", "--add-config", "producer_byte_rate=1"],
            "error: --add-config, --add-config-file and --delete-config apply only to --alter; drop them or use --alter instead",
        ),
        (
            &["--alter", "--entity-type", "users", "--entity-name", "a", "--add-config", "bogus=1"],
            "error: invalid quota config 'bogus' in --add-config (unknown quota type 'bogus'); use producer_byte_rate, consumer_byte_rate, request_percentage, controller_mutation_rate or connection_creation_rate",
        ),
        (
            &["--alter", "--entity-type", "ips", "--entity-name", "1.2.3.4", "--entity-type", "users", "--entity-name", "a", "--add-config", "connection_creation_rate=1"],
            "error: ips cannot be combined with users or clients; give --entity-type ips on its own",
        ),
        (
            &["--alter", "--entity-type", "ips", "--entity-default", "--add-config", "producer_byte_rate=1"],
            "error: producer_byte_rate does not apply to ips; ips take connection_creation_rate",
        ),
    ];
    for (args, message) in cases {
        let r = run(env!("CARGO_BIN_EXE_kafka-configs"), Some(addr), args);
        assert_eq!(r.code, 2, "{args:?}: {r:?}");
        assert_eq!(r.stderr, format!("{message}\n"), "{args:?}");
    }
}

#[test]
fn help_has_examples_and_exit_codes() {
    for bin in [
        env!("CARGO_BIN_EXE_kafka-quotas"),
        env!("CARGO_BIN_EXE_kafka-configs"),
    ] {
        let r = run(bin, None, &["--help"]);
        assert_eq!(r.code, 0);
        assert!(r.stdout.contains("Examples:"), "{}", r.stdout);
        assert!(r.stdout.contains("Exit status:"), "{}", r.stdout);
    }
}

#[test]
fn kafka_configs_entity_forms_match_kafkas() {
    let server = start();
    // Two defaults on one command line: {user=<default>, client-id=<default>}.
    assert_eq!(
        ok(kafka_configs(
            &server,
            &[
                "--alter",
                "--entity-type",
                "users",
                "--entity-default",
                "--entity-type",
                "clients",
                "--entity-default",
                "--add-config",
                "request_percentage=44",
            ]
        )),
        "Completed updating default config for users in the cluster.\n"
    );
    // An empty --entity-name is the default, as in Kafka; the filter is the exact entity.
    assert_eq!(
        ok(kafka_configs(
            &server,
            &[
                "--describe",
                "--entity-type",
                "users",
                "--entity-name",
                "",
                "--entity-type",
                "clients",
                "--entity-default",
            ]
        )),
        "Quota configs for the default user-principal, the default client-id are request_percentage=44.0\n"
    );
    // Kafka's shorter flags: --client comes first in Kafka's order, so the message names it.
    assert_eq!(
        ok(kafka_configs(
            &server,
            &[
                "--alter",
                "--user",
                "alice",
                "--client",
                "app",
                "--add-config",
                "producer_byte_rate=[1024],consumer_byte_rate = 2048d",
            ]
        )),
        "Completed updating config for client app.\n"
    );
    assert_eq!(
        ok(kafka_configs(&server, &["--describe", "--user", "alice", "--client", "app"])),
        "Quota configs for user-principal 'alice', client-id 'app' are consumer_byte_rate=2048.0, producer_byte_rate=1024.0\n"
    );
    assert_eq!(
        ok(kafka_configs(
            &server,
            &[
                "--alter",
                "--ip-defaults",
                "--add-config",
                "connection_creation_rate=7"
            ]
        )),
        "Completed updating default config for ips in the cluster.\n"
    );
    assert_eq!(
        ok(kafka_configs(
            &server,
            &["--describe", "--entity-type", "ips"]
        )),
        "Quota configs for the default ip are connection_creation_rate=7.0\n"
    );
}

#[test]
fn kafka_configs_add_config_file_and_deleting_what_is_not_set() {
    let server = start();
    let dir = temp_dir("add-config-file");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("quotas.properties");
    // Java properties syntax: a comment, an escape in the key, ':' as the separator.
    std::fs::write(
        &file,
        "# quotas for bob\nproducer\\_byte_rate=4096\nconsumer_byte_rate: 8192\n",
    )
    .unwrap();
    let file = file.to_str().unwrap();
    assert_eq!(
        ok(kafka_configs(
            &server,
            &["--alter", "--user", "bob", "--add-config-file", file]
        )),
        "Completed updating config for user bob.\n"
    );
    assert_eq!(
        ok(kafka_configs(&server, &["--describe", "--user", "bob"])),
        "Quota configs for user-principal 'bob' are consumer_byte_rate=8192.0, producer_byte_rate=4096.0\n"
    );
    // Deleting a key that is not set changes nothing, as in Kafka ("Invalid config(s)").
    let r = kafka_configs(
        &server,
        &[
            "--alter",
            "--user",
            "bob",
            "--delete-config",
            "producer_byte_rate,request_percentage",
        ],
    );
    assert_eq!(r.code, 1, "{r:?}");
    assert_eq!(
        r.stderr,
        "error: Invalid config(s): request_percentage (not set for {user=bob}; nothing was changed)\n"
    );
    assert_eq!(
        ok(kafka_configs(&server, &["--describe", "--user", "bob"])),
        "Quota configs for user-principal 'bob' are consumer_byte_rate=8192.0, producer_byte_rate=4096.0\n",
        "the key that was set is still set"
    );
    let r = kafka_configs(
        &server,
        &[
            "--alter",
            "--add-config-file",
            file,
            "--add-config",
            "producer_byte_rate=1",
            "--user",
            "bob",
        ],
    );
    assert_eq!(r.code, 2, "{r:?}");
    assert_eq!(
        r.stderr,
        "error: give only one of --add-config or --add-config-file\n"
    );
}

#[test]
fn kafka_configs_new_usage_errors_exit_2() {
    let addr: SocketAddr = "127.0.0.1:1".parse().unwrap();
    let cases: &[(&[&str], &str)] = &[
        (
            &["--alter", "--entity-type", "clients", "--entity-default", "--entity-default", "--add-config", "request_percentage=1"],
            "error: each --entity-name or --entity-default needs its own --entity-type, e.g. --entity-type users --entity-name alice",
        ),
        (
            &["--describe", "--entity-type", "users", "--client", "c"],
            "error: --entity-type, --entity-name and --entity-default cannot be combined with --user, --client, --ip or their -defaults flags; use one form",
        ),
        (
            &["--describe", "--client", "c", "--client-defaults"],
            "error: entity type clients is given twice; give each entity type once",
        ),
        (
            &["--describe", "--entity-type", "ips", "--entity-name", "not_an_ip!!"],
            "error: the entity name for ips must be a valid IP or resolvable host, but it is: not_an_ip!!",
        ),
        (
            &["--alter", "--user", "u", "--add-config", "producer_byte_rate=1=2"],
            "error: --add-config takes key=value pairs such as producer_byte_rate=1024 (or key=[value] to group a value with commas); got 'producer_byte_rate=1=2'",
        ),
        (
            &["--alter", "--user", "u", "--add-config", "producer_byte_rate=12abc"],
            "error: --add-config: producer_byte_rate: '12abc' is not a number; write e.g. producer_byte_rate=1024",
        ),
        (
            &["--alter", "--user", "u", "--add-config-file", "/nonexistent/quotas.properties"],
            "error: cannot read --add-config-file /nonexistent/quotas.properties: No such file or directory (os error 2)",
        ),
    ];
    for (args, message) in cases {
        let r = run(env!("CARGO_BIN_EXE_kafka-configs"), Some(addr), args);
        assert_eq!(r.code, 2, "{args:?}: {r:?}");
        assert_eq!(r.stderr, format!("{message}\n"), "{args:?}");
    }
}

#[test]
fn malformed_bootstrap_lists_and_ips_are_usage_errors() {
    for (bin, args) in [
        (env!("CARGO_BIN_EXE_kafka-quotas"), &["--list"][..]),
        (
            env!("CARGO_BIN_EXE_kafka-configs"),
            &["--describe", "--user-defaults"][..],
        ),
    ] {
        for (list, bad) in [
            ("localhost", "localhost"),
            ("a:1,127.0.0.1:99999", "127.0.0.1:99999"),
        ] {
            let r = run(
                bin,
                None,
                &[&["--bootstrap-server", list][..], args].concat(),
            );
            assert_eq!(r.code, 2, "{bin} {list}: {r:?}");
            assert_eq!(
                r.stderr,
                format!("error: --bootstrap-server: invalid server '{bad}' in bootstrap list: write HOST:PORT with a port from 1 to 65535, e.g. localhost:9092\n"),
                "{bin} {list}"
            );
        }
        let r = run(
            bin,
            None,
            &[&["--bootstrap-server", " , "][..], args].concat(),
        );
        assert_eq!(r.code, 2, "{bin}: {r:?}");
        assert_eq!(
            r.stderr,
            "error: --bootstrap-server: no server in bootstrap list ' , '; write HOST:PORT, e.g. localhost:9092\n"
        );
    }
    let addr: SocketAddr = "127.0.0.1:1".parse().unwrap();
    let r = run(
        env!("CARGO_BIN_EXE_kafka-quotas"),
        Some(addr),
        &["--describe", "--names=ip=not_an_ip!!"],
    );
    assert_eq!(r.code, 2, "{r:?}");
    assert_eq!(
        r.stderr,
        "error: 'not_an_ip!!' in --names is not a valid IP or resolvable host; write e.g. ip=192.168.0.1\n"
    );
}

/// Runs a tool with its standard output on `/dev/full`, where every write fails.
fn run_to_full_disk(bin: &str, addr: Option<SocketAddr>, args: &[&str]) -> Run {
    let mut cmd = Command::new(bin);
    if let Some(addr) = addr {
        cmd.arg("--bootstrap-server").arg(addr.to_string());
    }
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .expect("/dev/full");
    let out = cmd.args(args).stdout(full).output().expect("run the tool");
    Run {
        code: out.status.code().expect("exit status"),
        stdout: String::new(),
        stderr: String::from_utf8(out.stderr).unwrap(),
    }
}

#[test]
fn output_that_cannot_be_written_is_an_error_not_a_panic() {
    let server = start();
    seed(&server);
    let enospc = "No space left on device (os error 28)";
    for (bin, args) in [
        (env!("CARGO_BIN_EXE_kafka-quotas"), &["--list"][..]),
        (
            env!("CARGO_BIN_EXE_kafka-quotas"),
            &["--describe", "--names=user=user-two,client-id=my-client"][..],
        ),
        (
            env!("CARGO_BIN_EXE_kafka-configs"),
            &[
                "--describe",
                "--entity-type",
                "users",
                "--entity-type",
                "clients",
            ][..],
        ),
    ] {
        let r = run_to_full_disk(bin, Some(server.addr), args);
        assert_eq!(r.code, 1, "{args:?}: {r:?}");
        assert_eq!(
            r.stderr,
            format!("error: could not write the output: {enospc}\n"),
            "{args:?}"
        );
    }
    let r = run_to_full_disk(
        env!("CARGO_BIN_EXE_kafka-configs"),
        Some(server.addr),
        &[
            "--alter",
            "--user",
            "carol",
            "--add-config",
            "producer_byte_rate=5",
        ],
    );
    assert_eq!(r.code, 1, "{r:?}");
    assert_eq!(
        r.stderr,
        format!("error: could not write the output: {enospc} (the alteration was applied)\n")
    );
    assert_eq!(
        ok(kafka_configs(&server, &["--describe", "--user", "carol"])),
        "Quota configs for user-principal 'carol' are producer_byte_rate=5.0\n"
    );
    for bin in [
        env!("CARGO_BIN_EXE_kafka-quotas"),
        env!("CARGO_BIN_EXE_kafka-configs"),
    ] {
        let r = run_to_full_disk(bin, None, &["--help"]);
        assert_eq!(r.code, 1, "{bin}: {r:?}");
        assert_eq!(
            r.stderr,
            format!("error: could not write the output: {enospc}\n")
        );
    }
}
