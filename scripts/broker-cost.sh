#!/usr/bin/env bash
# What a broker pays for linking the engine: builds a scratch crate that depends on one kquota checkout
# and embeds `Engine` and `Meter`, from an empty target directory, and prints the number of crates in
# its tree, the first debug build's wall time and the target directory's size. The meter lives in the
# same crate as `Engine`, so it costs nothing more to build.
#
#   scripts/broker-cost.sh [KQUOTA_DIR] [RUNS]
#
# KQUOTA_DIR is the root crate's directory (this checkout by default): give an older checkout (a
# `git worktree add`) to compare the two in one session. Crate sources must already be downloaded
# (any earlier build of the workspace does that), so the time is compilation, not the network.
set -euo pipefail
KQUOTA_DIR="$(cd "${1:-$(dirname "$0")/..}" && pwd)"
RUNS="${2:-1}"
SCRATCH="$(mktemp -d "${TMPDIR:-/tmp}/kquota-broker.XXXXXX")"
trap 'rm -rf "$SCRATCH"' EXIT

mkdir -p "$SCRATCH/src"
cat > "$SCRATCH/Cargo.toml" <<TOML
[package]
name = "scratch-broker"
version = "0.0.0"
edition = "2021"
publish = false

[dependencies]
kquota = { path = "$KQUOTA_DIR" }

[workspace]
TOML
cat > "$SCRATCH/src/main.rs" <<'RS'
use std::sync::Arc;

fn main() {
    let engine = Arc::new(kquota::Engine::new());
    let meter = kquota::meter::Meter::new(Arc::clone(&engine));
    let mut client = meter.client("alice", "app");
    println!("{:?}", client.produce(1_000));
}
RS
cd "$SCRATCH"
cargo generate-lockfile -q --offline 2>/dev/null || cargo generate-lockfile -q
crates=$(cargo tree -e normal --prefix none --offline 2>/dev/null | sed 's/ (\*)//' | sort -u | wc -l)
echo "kquota at $KQUOTA_DIR"
echo "crates in the scratch crate's tree (itself included): $crates"
for run in $(seq 1 "$RUNS"); do
  rm -rf target
  start=$(date +%s.%N)
  CARGO_INCREMENTAL=0 cargo build -q --offline
  end=$(date +%s.%N)
  size=$(du -sm target | cut -f1)
  printf 'run %d: first debug build %.1f s, target %s MB\n' "$run" "$(echo "$end - $start" | bc)" "$size"
done
