//! Failures after the command line is accepted: a server's refusal or no server (exit status 1,
//! the entity and Kafka's error name), and output that cannot be written.

use std::net::SocketAddr;
use std::process::Command;

use super::{kafka_configs, kafka_quotas, ok, run, seed, start, Run};

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

    // A host name for an ip: the server's words are Kafka's, so the tool gives the real reason.
    let reason =
        "(this server names ip entities by IP address only, such as 127.0.0.1 or ::1, and \
                  'localhost' is a host name: docs/semantics.md, D7 \"ip names\")";
    let r = kafka_configs(
        &server,
        &[
            "--alter",
            "--ip",
            "localhost",
            "--add-config",
            "connection_creation_rate=5",
        ],
    );
    assert_eq!(
        (r.code, r.stdout.as_str(), r.stderr),
        (
            1,
            "",
            format!("error: {{ip=localhost}}: INVALID_REQUEST: localhost is not a valid IP or resolvable host. {reason}\n")
        )
    );
    let r = kafka_quotas(
        &server,
        &[
            "--alter",
            "--names=ip=localhost",
            "--add=connection_creation_rate=5",
        ],
    );
    assert_eq!(
        (r.code, r.stderr),
        (
            1,
            format!("error: {{ip=localhost}}: INVALID_REQUEST: localhost is not a valid IP or resolvable host. {reason}\n")
        )
    );
    // An address is taken, and any other refusal of an ip is left as the server words it.
    ok(kafka_configs(
        &server,
        &[
            "--alter",
            "--ip",
            "127.0.0.1",
            "--add-config",
            "connection_creation_rate=5",
        ],
    ));
    let r = kafka_configs(
        &server,
        &[
            "--alter",
            "--ip",
            "127.0.0.1",
            "--add-config",
            "connection_creation_rate=0.5",
        ],
    );
    assert_eq!(r.code, 1, "{r:?}");
    assert!(!r.stderr.contains("D7"), "{r:?}");

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
