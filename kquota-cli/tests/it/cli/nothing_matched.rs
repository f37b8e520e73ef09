//! A list or describe that finds nothing says so on stderr (kafka-quotas), and stays silent where
//! Kafka's own tool is (kafka-configs).

use super::{kafka_configs, kafka_quotas, ok, seed, start};

#[test]
fn kafka_quotas_says_when_nothing_matched() {
    let server = start();
    seed(&server);
    let cases: &[(&[&str], &str, &str)] = &[
        (
            &["--list", "--names=user=nobody"],
            "",
            "note: no configured entity matches; nothing to show\n",
        ),
        (
            &["--list", "--match=prefix=zzz", "--output", "json"],
            "{\"entities\":[],\"version\":1}\n",
            "note: no configured entity matches; nothing to show\n",
        ),
        (
            &["--describe", "--names=user=nobody,client-id=other"],
            "",
            "note: no quota applies: no entity of this connection's precedence levels has an entry; nothing to show\n",
        ),
        (
            &["--describe", "--names=ip=10.0.0.1"],
            "",
            "note: no quota applies: neither this ip nor the default ip has an entry; nothing to show\n",
        ),
    ];
    for (args, stdout, stderr) in cases {
        let r = kafka_quotas(&server, args);
        assert_eq!(
            (r.code, r.stdout.as_str(), r.stderr.as_str()),
            (0, *stdout, *stderr),
            "{args:?}"
        );
    }
    // Something matched: stderr stays empty.
    assert_ne!(
        ok(kafka_quotas(&server, &["--list", "--names=user=user-one"])),
        ""
    );
    // kafka-configs keeps Kafka's output: nothing at all.
    let r = kafka_configs(
        &server,
        &[
            "--describe",
            "--entity-type",
            "users",
            "--entity-name",
            "nobody",
        ],
    );
    assert_eq!((r.code, r.stdout.as_str(), r.stderr.as_str()), (0, "", ""));
}
