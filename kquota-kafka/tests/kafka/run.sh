#!/usr/bin/env bash
# kquota-kafka, the KIP-257 client quota callback plug-in, on real Apache Kafka 4.3.1 brokers: one
# two-node KRaft cluster on loopback (node 1 controller+broker with Kafka's default callback, node 2 a
# broker with io.kquota.kafka.KquotaCallback) and Kafka's Java clients and librdkafka (confluent-kafka)
# at their default settings. suite.py says what each case checks and with which tolerance: the
# differential against Kafka's own callback (default policy), KIP-55 after a restart into the kip55
# policy, a restart keeping its quotas, a rolling change, and a failure drill on the live broker.
#
#   bash kquota-kafka/tests/kafka/run.sh
#
#   KQUOTA_KEEP_KAFKA_DIR=1   keep the cluster's and the clients' files and logs (and results.json)
#   KQUOTA_KAFKA_SUITE_TIMEOUT=SECONDS   the suite's bound (default 1500)
#   KQUOTA_KAFKA_CASES=REGEX  only the matching cases (for development: the run then fails, the others
#                             reported not run; a partial run never passes)
#
# Needs cargo, java 17+, mvn and python3 (with venv or pip), and PyPI and Maven Central on the first
# run (the virtualenv is target/python-venv, shared with tests/python). Nothing is skipped: a missing
# tool, client library or plug-in build fails the run. The cluster is stopped when this script exits,
# whatever the outcome.
set -euo pipefail
cd "$(dirname "$0")/../../.."
ROOT="$(pwd)"
PYTHON="${PYTHON:-python3}"
KAFKA_SH="$ROOT/interop/kafka/kafka.sh"
HERE="$ROOT/kquota-kafka/tests/kafka"
BEGIN=$SECONDS

die() {
  echo "kquota-kafka/tests/kafka/run.sh: error: $*" >&2
  exit 1
}

command -v cargo >/dev/null 2>&1 || die "cargo not found; install a Rust toolchain"
command -v java >/dev/null 2>&1 || die "java not found; install a JDK 17 or later"
command -v mvn >/dev/null 2>&1 || die "mvn not found; install Maven"
[ -f "$ROOT/kquota-kafka/build.sh" ] || die "kquota-kafka/build.sh is missing: the plug-in cannot be built"

# shellcheck source=tests/python/venv.sh
. "$ROOT/tests/python/venv.sh"

echo "== building the plug-in (kquota-kafka/build.sh)"
BUILD_OUT="$(mktemp "${TMPDIR:-/tmp}/kquota-kafka-build.XXXXXX")"
bash "$ROOT/kquota-kafka/build.sh" >"$BUILD_OUT" || { rm -f "$BUILD_OUT"; die "kquota-kafka/build.sh failed"; }
JAR="$(grep -v '^[[:space:]]*$' "$BUILD_OUT" | tail -n 1 || true)"
rm -f "$BUILD_OUT"
case "$JAR" in /*) ;; *) JAR="$ROOT/$JAR" ;; esac
[ -f "$JAR" ] || die "kquota-kafka/build.sh's last stdout line is not a jar: '$JAR'"
echo "   $JAR (built in $((SECONDS - BEGIN)) s)"

echo "== resolving Apache Kafka (Maven Central) and building interop/kafka"
"$KAFKA_SH" build >/dev/null

WORK="$(mktemp -d "${TMPDIR:-/tmp}/kquota-kafka-suite.XXXXXX")"
cleanup() {
  "$VENV/bin/python" "$HERE/cluster.py" stop "$WORK/cluster" ||
    echo "run.sh: could not stop the cluster in $WORK/cluster" >&2
  if [ "${KQUOTA_KEEP_KAFKA_DIR:-}" = "" ]; then rm -rf "$WORK"; else echo "files kept in $WORK"; fi
}
trap cleanup EXIT

export PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
STATUS=0
# In the background and waited for, so that a signal reaches this script's trap at once: the suite
# is told to stop (it ends its clients and stops the cluster), then cleanup runs. The suite bounds
# itself (KQUOTA_KAFKA_SUITE_TIMEOUT, default 1500 s, and every client, tool and wait within it).
"$VENV/bin/python" "$HERE/suite.py" --work "$WORK" --jar "$JAR" --kafka-sh "$KAFKA_SH" &
SUITE_PID=$!
trap 'kill -TERM "$SUITE_PID" 2>/dev/null; wait "$SUITE_PID"; exit 130' INT TERM
wait "$SUITE_PID" || STATUS=$?
if [ "$STATUS" != 0 ]; then
  echo "kquota-kafka/tests/kafka/run.sh: FAILED (logs in $WORK; KQUOTA_KEEP_KAFKA_DIR=1 keeps them)" >&2
  exit "$STATUS"
fi
echo "== OK: kquota-kafka/tests/kafka in $((SECONDS - BEGIN)) s"
