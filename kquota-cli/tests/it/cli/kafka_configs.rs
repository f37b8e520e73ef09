//! kafka-configs with Kafka's ConfigCommand wording: the seed's sub-quota, the entity forms
//! (--entity-type/--entity-name, defaults, the shorter --user/--client/--ip), --add-config-file
//! and deleting a key that is not set.

use kquota_testkit::temp_dir;

use super::{kafka_configs, kafka_quotas, ok, start};

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
