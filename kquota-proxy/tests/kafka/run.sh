#!/usr/bin/env bash
# kquota-proxy in front of a real three-broker Apache Kafka 4.3.1 cluster (interop/kafka/cluster.sh:
# PLAINTEXT, SASL_PLAINTEXT with SCRAM-SHA-512/256, and SSL listeners on loopback), with three client
# stacks at their default settings: Kafka's Java producer and consumer (interop/kafka Workload.java),
# librdkafka (confluent-kafka) and kafka-python. suite.py runs the cases and says what each checks:
# pass-through over PLAINTEXT, SASL SCRAM and TLS; quota convergence at the proxy; the proxy's
# enforcement against Kafka's own; the proxy's clean stop.
#
#   bash kquota-proxy/tests/kafka/run.sh
#
#   KQUOTA_PROXY_FULL=1            rates averaged over 30 s instead of 20 (KQUOTA_PROXY_RATE_SECONDS=N: N s)
#   KQUOTA_PROXY_RATE_PARALLEL=0   the rate clients one after the other (default: all at once)
#   KQUOTA_PROXY_CASES=REGEX       only the matching cases (the run then fails: a partial run never passes)
#   KQUOTA_PROXY_RESULTS=FILE      the results (JSON) written there too
#   KQUOTA_KEEP_KAFKA_DIR=1        keep the cluster's, the proxies' and the clients' files and logs
#
# Needs cargo, python3 (with venv or pip), java 17+, mvn and openssl, and network access to PyPI and
# Maven Central on the first run (the virtualenv is target/python-venv, shared with tests/python).
# Nothing is skipped: a missing tool, client library or proxy flag fails the run. The cluster and
# the proxies are stopped when this script exits, whatever the outcome.
set -euo pipefail
cd "$(dirname "$0")/../../.."
ROOT="$(pwd)"
PYTHON="${PYTHON:-python3}"
KAFKA_SH="$ROOT/interop/kafka/kafka.sh"
CLUSTER_SH="$ROOT/interop/kafka/cluster.sh"
HERE="$ROOT/kquota-proxy/tests/kafka"

die() {
  echo "kquota-proxy/tests/kafka/run.sh: error: $*" >&2
  exit 1
}

command -v cargo >/dev/null 2>&1 || die "cargo not found; install a Rust toolchain"
command -v java >/dev/null 2>&1 || die "java not found; install a JDK 17 or later"
command -v mvn >/dev/null 2>&1 || die "mvn not found; install Maven"
command -v openssl >/dev/null 2>&1 || die "openssl not found; install it (Debian: openssl)"

# shellcheck source=tests/python/venv.sh
. "$ROOT/tests/python/venv.sh"

echo "== building kquota-proxy (release)"
cargo build --release --bin kquota-proxy
TARGET_DIR="${CARGO_TARGET_DIR:-target}"
case "$TARGET_DIR" in /*) ;; *) TARGET_DIR="$ROOT/$TARGET_DIR" ;; esac
PROXY_BIN="$TARGET_DIR/release/kquota-proxy"
[ -x "$PROXY_BIN" ] || die "$PROXY_BIN was not built"

echo "== resolving Apache Kafka (Maven Central) and building interop/kafka"
"$KAFKA_SH" build >/dev/null

WORK="$(mktemp -d "${TMPDIR:-/tmp}/kquota-proxy-kafka.XXXXXX")"
cleanup() {
  "$CLUSTER_SH" stop "$WORK/cluster" || echo "run.sh: could not stop the cluster in $WORK/cluster" >&2
  if [ "${KQUOTA_KEEP_KAFKA_DIR:-}" = "" ]; then rm -rf "$WORK"; else echo "files kept in $WORK"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "== starting a three-node Kafka cluster in $WORK/cluster"
START=$SECONDS
"$CLUSTER_SH" start "$WORK/cluster" | sed 's/^/   /' || die "the Kafka cluster did not start"
[ -f "$WORK/cluster/bootstrap.env" ] || die "the Kafka cluster did not start"
echo "   up in $((SECONDS - START)) s"

export PYTHONDONTWRITEBYTECODE=1
STATUS=0
"$VENV/bin/python" "$HERE/suite.py" --cluster "$WORK/cluster" --proxy-bin "$PROXY_BIN" --kafka-sh "$KAFKA_SH" \
  --work "$WORK" || STATUS=$?
if [ "$STATUS" != 0 ]; then
  echo "kquota-proxy/tests/kafka/run.sh: FAILED (the clients' and the proxies' logs are in $WORK; KQUOTA_KEEP_KAFKA_DIR=1 keeps them)" >&2
  exit "$STATUS"
fi
echo "== OK: kquota-proxy/tests/kafka in $SECONDS s"
