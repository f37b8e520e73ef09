//! Usage errors of both tools: one line on stderr that says what to write, exit status 2, and
//! nothing sent to a server; and --help.

use std::net::SocketAddr;

use super::run;

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
            &["--list", "--match=users=a"],
            "error: unknown entity type 'users' in --match; use user, client-id or ip (TYPE=PREFIX), or prefix=NAME for a name of any type",
        ),
        (
            &["--list", "--prefix=group=a"],
            "error: unknown entity type 'group' in --prefix; use user, client-id or ip (TYPE=PREFIX), or prefix=NAME for a name of any type",
        ),
        // As kafka-configs: --alter prints nothing, so any --output with it is a mistake.
        (
            &["--alter", "--names=user=a", "--add=producer_byte_rate=1", "--output", "json"],
            "error: --output applies only to --list and --describe; drop --output or use --list or --describe instead",
        ),
        (
            &["--alter", "--names=user=a", "--add=producer_byte_rate=1", "--output=text"],
            "error: --output applies only to --list and --describe; drop --output or use --list or --describe instead",
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

#[test]
fn messages_name_the_flag_typed_and_the_seeds_spellings_are_answered() {
    let addr: SocketAddr = "127.0.0.1:1".parse().unwrap();
    let quotas: &[(&[&str], &str)] = &[
        (
            &["--describe", "--names=user=a", "--match=prefix=x"],
            "error: --match applies only to --list; drop --match or use --list instead",
        ),
        (
            &["--alter", "--names=user=a", "--match=user=x", "--add=producer_byte_rate=1"],
            "error: --match applies only to --list; drop --match or use --list instead",
        ),
        (
            &["--list", "--match=user"],
            "error: --match takes type=prefix pairs such as user=test-user-, or prefix=NAME for a name of any type; got 'user'",
        ),
        (
            &["--list", "--match=prefix"],
            "error: --match takes type=prefix pairs such as user=test-user-, or prefix=NAME for a name of any type; got 'prefix'",
        ),
        (
            &["--list", "--match=group=g"],
            "error: unknown entity type 'group' in --match; use user, client-id or ip (TYPE=PREFIX), or prefix=NAME for a name of any type",
        ),
        (
            &["--list", "--prefix=group=g"],
            "error: unknown entity type 'group' in --prefix; use user, client-id or ip (TYPE=PREFIX), or prefix=NAME for a name of any type",
        ),
        (
            &["--list", "--names=user=a", "--match=user=b"],
            "error: user is given more than once; give each entity type once across --names, --defaults and --match",
        ),
        (
            &["--list", "--prefix=user=a", "--match=user=b"],
            "error: user is given more than once; give each entity type once across --names, --defaults, --prefix and --match",
        ),
        (
            &["--list", "--match=ip=10.,prefix=x", "--names=user=a"],
            "error: ip cannot be combined with user or client-id; give ip on its own",
        ),
    ];
    for (args, message) in quotas {
        let r = run(env!("CARGO_BIN_EXE_kafka-quotas"), Some(addr), args);
        assert_eq!(r.code, 2, "{args:?}: {r:?}");
        assert_eq!(r.stderr, format!("{message}\n"), "{args:?}");
        assert_eq!(r.stdout, "", "{args:?}");
    }

    let zookeeper = "error: --zookeeper is not supported: since Kafka 3 quotas are altered through --bootstrap-server (ZooKeeper mode was removed in Kafka 4); write --bootstrap-server HOST:PORT, e.g. --bootstrap-server localhost:9092";
    let configs: &[(&[&str], &str)] = &[
        // KIP-55's own command line, and the = form; nothing else is read.
        (
            &["--zookeeper", "localhost:2181", "--alter", "--add-config", "producer_byte_rate=1024,consumer_byte_rate=2048", "--entity-name", "user1", "--entity-type", "users"],
            zookeeper,
        ),
        (&["--zookeeper=localhost:2181", "--describe", "--entity-type", "users"], zookeeper),
        (&["--describe", "--bogus", "--zookeeper"], zookeeper),
        (
            &["--alter", "--ip", "1.2.3.4", "--user", "a", "--add-config", "connection_creation_rate=1"],
            "error: ips cannot be combined with users or clients; give --ip or --ip-defaults on its own",
        ),
        (
            &["--alter", "--user", "u", "--add-config", "connection_creation_rate=1"],
            "error: connection_creation_rate applies only to ips (--ip or --ip-defaults)",
        ),
        (
            &["--alter", "--user", "u", "--add-config", "producer_byte_rate=1", "--output", "json"],
            "error: --output applies only to --describe; drop --output or use --describe instead",
        ),
        (
            &["--alter", "--user", "u", "--add-config", "producer_byte_rate=1", "--output", "text"],
            "error: --output applies only to --describe; drop --output or use --describe instead",
        ),
    ];
    for (args, message) in configs {
        let r = run(env!("CARGO_BIN_EXE_kafka-configs"), Some(addr), args);
        assert_eq!(r.code, 2, "{args:?}: {r:?}");
        assert_eq!(r.stderr, format!("{message}\n"), "{args:?}");
        assert_eq!(r.stdout, "", "{args:?}");
    }
    // Without --bootstrap-server too: the answer is about --zookeeper.
    let r = run(
        env!("CARGO_BIN_EXE_kafka-configs"),
        None,
        &[
            "--zookeeper",
            "localhost:2181",
            "--describe",
            "--entity-type",
            "users",
        ],
    );
    assert_eq!((r.code, r.stderr), (2, format!("{zookeeper}\n")));
}
