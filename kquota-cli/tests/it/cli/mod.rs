//! `kafka-quotas` and `kafka-configs` end to end against a `kquotad` started by the test: the seeds'
//! examples byte for byte (docs/semantics.md's consistent form), the JSON schema, every usage error
//! with its message and exit status, and server errors. One file per area; the helpers that run the
//! tools are here.

use std::net::SocketAddr;
use std::process::Command;

use kquota_testkit::{temp_dir, Kquotad};

mod command_config;
mod errors;
mod file;
mod golden;
mod json;
mod kafka_configs;
mod nothing_matched;
mod read_anything;
mod usage;

/// A `kquotad` for the tools to talk to.
fn start() -> Kquotad {
    let dir = temp_dir("cli");
    Kquotad::start(&dir, &[]).owning(dir)
}

/// Runs `kafka-quotas` against `server`.
fn kafka_quotas(server: &Kquotad, args: &[&str]) -> Run {
    run(env!("CARGO_BIN_EXE_kafka-quotas"), Some(server.addr), args)
}

/// Runs `kafka-configs` against `server`.
fn kafka_configs(server: &Kquotad, args: &[&str]) -> Run {
    run(env!("CARGO_BIN_EXE_kafka-configs"), Some(server.addr), args)
}

/// How a tool ended.
#[derive(Debug)]
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

/// Runs `bin` with `--bootstrap-server addr` (if given) and `args`.
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

/// The standard output of a run that succeeded without a word on stderr.
#[track_caller]
fn ok(r: Run) -> String {
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(r.stderr, "", "{r:?}");
    r.stdout
}

/// The seeds' state: the three entities of docs/semantics.md's "The seeds' examples, made
/// consistent".
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
