#!/usr/bin/env bash
# The replay benchmark of kquota-cluster/tests/kafka/replay_bench.rs: the time until a fresh
# instance serves, replaying the whole history (the baseline) and the compacted log (a snapshot
# and what came after), with 10K, 100K and 1M batches in the history and 100K entities. Starts a
# single Apache Kafka broker (interop/kafka/kafka.sh, 1 GiB heap for the log cleaner), runs the
# ignored test in a release build, and stops the broker whatever the outcome. Minutes: not part
# of CI; its figures are in docs/cluster.md.
#
#   bash kquota-cluster/tests/kafka/bench.sh
#
#   KQUOTA_BENCH_RUNS=5                   fresh instances timed per case (each way)
#   KQUOTA_BENCH_SIZES=10000,100000,1000000
set -euo pipefail
cd "$(dirname "$0")/../../.."
ROOT="$(pwd)"
KAFKA_SH="$ROOT/interop/kafka/kafka.sh"

die() {
  echo "kquota-cluster/tests/kafka/bench.sh: error: $*" >&2
  exit 1
}

command -v cargo >/dev/null 2>&1 || die "cargo not found"
command -v java >/dev/null 2>&1 || die "java not found; install a JDK 17 or later"
command -v mvn >/dev/null 2>&1 || die "mvn not found; install Maven"

echo "== building the kafka test target (release)"
cargo test --release -p kquota-cluster --test kafka --no-run
"$KAFKA_SH" build >/dev/null

WORK="$(mktemp -d "${TMPDIR:-/tmp}/kquota-cluster-bench.XXXXXX")"
cleanup() {
  "$KAFKA_SH" stop "$WORK/kafka" || echo "bench.sh: could not stop the broker in $WORK/kafka" >&2
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

BOOTSTRAP="$(KAFKA_HEAP="-Xmx1g -Xms256m" "$KAFKA_SH" start "$WORK/kafka")" || die "the Kafka broker did not start"
echo "   Kafka at $BOOTSTRAP"
KQUOTA_CLUSTER_BOOTSTRAP="$BOOTSTRAP" RUST_LOG="${RUST_LOG:-warn,kquota_cluster=warn,rdkafka::client=off}" \
  cargo test --release -p kquota-cluster --test kafka -- --ignored --exact replay_bench::replay_bench \
  --nocapture --test-threads=1
