#!/usr/bin/env bash
# Apache Kafka as the reference: starts a real Kafka broker (interop/kafka/kafka.sh) and runs the
# differential and client suites in tests/kafka against it and against kquotad.
#
#   bash tests/kafka/run.sh [extra pytest args]
#
# Needs python3 (with venv or pip), cargo, java 17+ and mvn, and network access to PyPI and Maven
# Central on the first run. The virtualenv is target/python-venv, shared with tests/python. The broker
# runs in a temporary directory and is stopped when this script exits, whatever the outcome. Any failure
# to set up the environment is an error: the suite is never skipped and never passes empty.
#
#   KQUOTA_DIFF_OPS=<n>   differential operations (default 1000)
#   KQUOTA_DIFF_SEED=<n>  the differential run's seed (default: fresh, printed)
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT="$(pwd)"
PYTHON="${PYTHON:-python3}"
KAFKA_SH="$ROOT/interop/kafka/kafka.sh"

die() {
  echo "tests/kafka/run.sh: error: $*" >&2
  exit 1
}

command -v cargo >/dev/null 2>&1 || die "cargo not found; install a Rust toolchain"
command -v java >/dev/null 2>&1 || die "java not found; install a JDK 17 or later (Debian: openjdk-17-jdk-headless)"
command -v mvn >/dev/null 2>&1 || die "mvn not found; install Maven (Debian: maven)"

# shellcheck source=tests/python/venv.sh
. "$ROOT/tests/python/venv.sh"

echo "== building kquotad, kafka-quotas and kafka-configs (release)"
cargo build --release --bin kquotad --bin kafka-quotas --bin kafka-configs
TARGET_DIR="${CARGO_TARGET_DIR:-target}"
case "$TARGET_DIR" in /*) ;; *) TARGET_DIR="$ROOT/$TARGET_DIR" ;; esac
export KQUOTA_BIN_DIR="$TARGET_DIR/release"
export KQUOTAD_BIN="$KQUOTA_BIN_DIR/kquotad"
for b in kquotad kafka-quotas kafka-configs; do
  [ -x "$KQUOTA_BIN_DIR/$b" ] || die "$KQUOTA_BIN_DIR/$b was not built"
done

echo "== resolving Apache Kafka (Maven Central) and building interop/kafka"
"$KAFKA_SH" build >/dev/null

KAFKA_DIR="$(mktemp -d "${TMPDIR:-/tmp}/kquota-kafka.XXXXXX")"
cleanup() {
  "$KAFKA_SH" stop "$KAFKA_DIR" || echo "tests/kafka/run.sh: could not stop the broker in $KAFKA_DIR" >&2
  if [ "${KQUOTA_KEEP_KAFKA_DIR:-}" = "" ]; then rm -rf "$KAFKA_DIR"; else echo "broker files kept in $KAFKA_DIR"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "== starting the reference Kafka broker in $KAFKA_DIR"
KQUOTA_KAFKA_BOOTSTRAP="$("$KAFKA_SH" start "$KAFKA_DIR")" || die "the reference Kafka broker did not start"
export KQUOTA_KAFKA_BOOTSTRAP KQUOTA_KAFKA_SH="$KAFKA_SH"
echo "   Kafka $(basename "$(tr ':' '\n' <"$ROOT/interop/kafka/target/classpath.txt" | grep -m1 '/kafka_2.13-')" .jar) at $KQUOTA_KAFKA_BOOTSTRAP"

echo "== pytest"
export PYTHONDONTWRITEBYTECODE=1
cd "$ROOT/tests/kafka"
"$VENV/bin/python" -m pytest -v "$@" .
