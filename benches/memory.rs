//! Memory per configured entity at 1,000,000 entities with one key each and short names, per shape:
//! `{user=u}`, `{client-id=c}`, `{user=u, client-id=c}` with one client per user, and with 1,000
//! clients per user. Target: ≤ 200 bytes per entity.
//!
//! Method: each shape is measured in a fresh child process (this binary, re-run with `--child SHAPE`),
//! so shapes do not share a heap. The child reads its resident set size (`VmRSS` in
//! `/proc/self/status`), builds the store with alteration batches of 1,000 entities, reads it again,
//! and reports the difference divided by the number of entities. That is what the store costs in RAM,
//! allocator overhead included (glibc rounds every allocation up to a 16-byte multiple of at least 32
//! bytes, including an 8-byte header), so it is an upper bound on live heap bytes. The transient
//! allocations of building (a batch's alterations, the path copies of replaced snapshots) are freed
//! and reused batch after batch; they add at most a few MB, well under 1% at this size.
//!
//! A counting `#[global_allocator]` would measure live heap bytes exactly, but it needs an
//! `unsafe impl GlobalAlloc`, and the package's `[lints.rust] unsafe_code = "forbid"` applies to every
//! target, benches included (`forbid` cannot be overridden with `#[allow]`). See
//! `docs/benchmarks.md` for the numbers a counting allocator gives in a scratch copy with that lint
//! relaxed.
//!
//! Run it with `cargo bench --bench memory`; `--entities N` changes the entity count (default
//! 1,000,000). Without `--bench` (as under `cargo test --benches`) it is a quick smoke run of 10,000.

use std::fs;
use std::hint::black_box;
use std::process::Command;
use std::time::Instant;

use kquota::{AlterResult, Alteration, Engine, Entity, EntityName};

/// Entities per alteration batch while building.
const BATCH: usize = 1_000;
/// Clients per user in the `user-client-1000` shape.
const CLIENTS_PER_USER: usize = 1_000;

/// The shapes measured: name, description.
const SHAPES: [(&str, &str); 4] = [
    ("user", "{user=u}"),
    ("client", "{client-id=c}"),
    ("user-client-1", "{user=u, client-id=c}, 1 client per user"),
    (
        "user-client-1000",
        "{user=u, client-id=c}, 1,000 clients per user",
    ),
];

/// Entity number `j` of `shape`, with short names.
fn entity(shape: &str, j: usize) -> Entity {
    let name = |s: String| EntityName::named(&s).expect("non-empty");
    match shape {
        "user" => Entity::User(name(format!("u{j}"))),
        "client" => Entity::ClientId(name(format!("c{j}"))),
        "user-client-1" => Entity::UserClient(name(format!("u{j}")), name(format!("c{j}"))),
        "user-client-1000" => Entity::UserClient(
            name(format!("u{}", j / CLIENTS_PER_USER)),
            name(format!("c{}", j % CLIENTS_PER_USER)),
        ),
        _ => panic!("unknown shape {shape}"),
    }
}

/// The resident set size of this process, in bytes.
fn rss() -> usize {
    let status = fs::read_to_string("/proc/self/status").expect("/proc/self/status (Linux only)");
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .expect("a VmRSS line");
    let kb: usize = line
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .expect("VmRSS in kB");
    kb * 1024
}

fn check(results: &[AlterResult]) {
    if let Some(e) = results.iter().find_map(|r| r.error.as_ref()) {
        panic!("alteration failed: {e}");
    }
}

/// Builds `n` entities of `shape` and prints `shape n rss_before rss_after build_seconds`.
fn child(shape: &str, n: usize) {
    let engine = Engine::new();
    let before = rss();
    let start = Instant::now();
    for first in (0..n).step_by(BATCH) {
        let batch: Vec<Alteration> = (first..n.min(first + BATCH))
            .map(|j| Alteration::new(&entity(shape, j)).set("producer_byte_rate", 1_000.0))
            .collect();
        check(&engine.alter(&batch, false));
    }
    let took = start.elapsed().as_secs_f64();
    let after = rss();
    assert_eq!(engine.entity_count(), n);
    black_box(&engine);
    println!("{shape} {n} {before} {after} {took:.1}");
}

/// The value following `flag` in the arguments, if present.
fn arg(args: &[String], flag: &str) -> Option<String> {
    let i = args.iter().position(|a| a == flag)?;
    args.get(i + 1).cloned()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: usize = arg(&args, "--entities")
        .map(|v| v.parse().expect("--entities takes a number"))
        .unwrap_or(if args.iter().any(|a| a == "--bench") {
            1_000_000
        } else {
            10_000
        });
    if let Some(shape) = arg(&args, "--child") {
        child(&shape, n);
        return;
    }
    let exe = std::env::current_exe().expect("own path");
    println!("memory per configured entity, {n} entities, one key each, short names (u123, c123)");
    println!();
    println!(
        "| shape | entities | RSS before | RSS after | bytes / entity | target ≤ 200 | build time |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | --- | ---: |");
    for (shape, description) in SHAPES {
        let out = Command::new(&exe)
            .args(["--child", shape, "--entities", &n.to_string()])
            .output()
            .expect("run the child");
        assert!(
            out.status.success(),
            "child for {shape} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let line = String::from_utf8(out.stdout).expect("utf-8");
        let fields: Vec<&str> = line.split_whitespace().collect();
        let num = |i: usize| -> usize { fields[i].parse().expect("a number") };
        let (count, before, after) = (num(1), num(2), num(3));
        let per = (after - before) as f64 / count as f64;
        println!(
            "| {description} | {count} | {:.1} MiB | {:.1} MiB | {per:.0} | {} | {} s |",
            before as f64 / (1 << 20) as f64,
            after as f64 / (1 << 20) as f64,
            // The target is stated for 1M entities; small smoke runs are dominated by fixed costs.
            match (n >= 1_000_000, per <= 200.0) {
                (false, _) => "n/a (not 1M)",
                (true, true) => "met",
                (true, false) => "NOT met",
            },
            fields[4],
        );
    }
}
