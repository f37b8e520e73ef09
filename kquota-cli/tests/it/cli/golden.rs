//! kafka-quotas' text output: the seeds' list, describe and alter examples byte for byte, in
//! docs/semantics.md's consistent form, and the defaults and ips that describe resolves.

use serde_json::Value;

use super::{kafka_quotas, ok, seed, start};

#[test]
fn the_seeds_examples_print_their_consistent_form() {
    let server = start();
    seed(&server);

    // Named before default, names in byte order (docs/semantics.md, D10: the seed's order is not
    // normative).
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
    let r = kafka_quotas(&server, &["--list"]);
    assert_eq!((r.code, r.stdout.as_str()), (0, ""), "{r:?}");
}

#[test]
fn the_seeds_match_prefix_form_lists_entities_with_a_name_that_begins_so() {
    let server = start();
    seed(&server);
    // The seed's `--match=prefix=user`: at least one name (of any type) begins with "user"; the
    // default user's entity has only the name my-client.
    let users = "{user=user-one, client-id=my-client}\n\
                 producer_byte_rate broker_bps 2000000\n\
                 \n\
                 {user=user-two, client-id=my-client}\n\
                 consumer_byte_rate shares 200\n\
                 producer_byte_rate bps 10000000\n";
    assert_eq!(
        ok(kafka_quotas(&server, &["--list", "--match=prefix=user"])),
        users
    );
    assert_eq!(
        ok(kafka_quotas(&server, &["--list", "--match", "prefix=user"])),
        users
    );
    assert_eq!(
        ok(kafka_quotas(&server, &["--list", "--prefix=prefix=user"])),
        users
    );
    // my-client is a client-id name of all three.
    let all = ok(kafka_quotas(&server, &["--list"]));
    assert_eq!(
        ok(kafka_quotas(&server, &["--list", "--match=prefix=my-"])),
        all
    );
    // Every pair holds, with the typed filters too.
    assert_eq!(
        ok(kafka_quotas(
            &server,
            &[
                "--list",
                "--match=prefix=user-t,prefix=my",
                "--names=client-id=my-client"
            ]
        )),
        "{user=user-two, client-id=my-client}\n\
         consumer_byte_rate shares 200\n\
         producer_byte_rate bps 10000000\n"
    );
    let r = kafka_quotas(
        &server,
        &["--list", "--match=prefix=user", "--defaults=user"],
    );
    assert_eq!(
        (r.code, r.stdout.as_str(), r.stderr.as_str()),
        (
            0,
            "",
            "note: no configured entity matches; nothing to show\n"
        )
    );
    let json: Value = serde_json::from_str(&ok(kafka_quotas(
        &server,
        &["--list", "--match=prefix=user", "--output=json"],
    )))
    .unwrap();
    assert_eq!(json["entities"].as_array().unwrap().len(), 2);
}
