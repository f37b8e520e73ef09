#!/usr/bin/env bash
# kquota's cluster-wide limits inside Apache Kafka 4.3.1's brokers: the plug-in (kquota-kafka) in
# cluster mode on all three nodes of interop/kafka/cluster.sh (combined KRaft nodes on loopback),
# following kquota's configuration log in the cluster's own topics, counting the live brokers and
# splitting `bps` limits by what each broker serves; a kquotad joined to the same cluster writes the
# log. suite.py says what each case checks and with which bound:
#
#   1. ready: ClusterState ready, LiveBrokers 3 and the metrics reporter installed on every broker;
#   2. configuration both ways: quotas from Kafka's metadata and from kquota's log both served, Kafka's
#      winning where both set the same entity and key, the log's own keys (producer_byte_rate:bps) too;
#   3. accuracy: a 3 MB/s cluster-wide producer_byte_rate:bps limit under a 70/20/10 load over the three
#      brokers, within 10 %, beside Kafka's own per-broker quotas (the static division);
#   4. faults: a broker killed (the others count two within 3.5 + 1 + 2 s; Kafka fences a dead broker
#      within 2 s here, suite.py says why), the configuration log's leader killed in an alteration storm
#      (nothing acknowledged lost, a bps limit served throughout), both brokers rejoining, a SIGTERM'd
#      broker exiting within 60 s;
#   5. a broker whose log is unreachable at start: it serves Kafka's quotas, says so, and joins later.
#
#   bash kquota-kafka/tests/cluster/run.sh
#
#   KQUOTA_KEEP_CLUSTER_DIR=1           keep the brokers', kquotad's and the clients' files and logs
#                                       (and results.json)
#   KQUOTA_CLUSTER_SUITE_TIMEOUT=SECONDS  the suite's bound (default 1500)
#   KQUOTA_CLUSTER_CASES=REGEX          only the matching cases (for development: the run then fails,
#                                       the others reported not run; a partial run never passes)
#   KQUOTA_CLUSTER_ACC_WINDOW_S=SECONDS the accuracy case's measured span (default 45)
#
# Needs cargo, java 17+ (and jstack), mvn, openssl and python3 (with venv or pip), and PyPI and Maven
# Central on the first run (the virtualenv is target/python-venv, shared with tests/python). Nothing is
# skipped: a missing tool, client library or build fails the run. The cluster and kquotad are stopped
# when this script exits, whatever the outcome.
set -euo pipefail
cd "$(dirname "$0")/../../.."
ROOT="$(pwd)"
PYTHON="${PYTHON:-python3}"
HERE="$ROOT/kquota-kafka/tests/cluster"
CLUSTER_SH="$ROOT/interop/kafka/cluster.sh"
BEGIN=$SECONDS

die() {
  echo "kquota-kafka/tests/cluster/run.sh: error: $*" >&2
  exit 1
}

for tool in cargo java jstack mvn openssl; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool not found (a Rust toolchain, a JDK 17 or later, Maven, openssl)"
done
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

echo "== building kquotad (cargo build -p kquotad)"
cargo build -p kquotad || die "cargo build -p kquotad failed"
KQUOTAD="$(cargo metadata --format-version 1 --no-deps |
  "$VENV/bin/python" -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')/debug/kquotad"
[ -x "$KQUOTAD" ] || die "cargo built no $KQUOTAD"

echo "== resolving Apache Kafka (Maven Central) and building interop/kafka"
"$ROOT/interop/kafka/kafka.sh" build >/dev/null

WORK="$(mktemp -d "${TMPDIR:-/tmp}/kquota-kafka-cluster.XXXXXX")"
cleanup() {
  if [ -f "$WORK/kquotad.pid" ]; then
    pid="$(cat "$WORK/kquotad.pid")"
    kill -TERM "$pid" 2>/dev/null && sleep 1
    kill -KILL "$pid" 2>/dev/null || true
  fi
  "$CLUSTER_SH" stop "$WORK/cluster" || echo "run.sh: could not stop the cluster in $WORK/cluster" >&2
  if [ -z "${KQUOTA_KEEP_CLUSTER_DIR:-}" ]; then rm -rf "$WORK"; else echo "files kept in $WORK"; fi
}
trap cleanup EXIT

export PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
# Three brokers on two shared cores: small heaps, and a generous start.
export KAFKA_HEAP="${KAFKA_HEAP:--Xmx384m -Xms128m}"
export KAFKA_START_TIMEOUT="${KAFKA_START_TIMEOUT:-240}"
STATUS=0
# In the background and waited for, so that a signal reaches this script's trap at once: the suite is
# told to stop (it ends its clients, kquotad and the cluster), then cleanup runs. The suite bounds
# itself (KQUOTA_CLUSTER_SUITE_TIMEOUT, and every client, tool and wait within it).
"$VENV/bin/python" "$HERE/suite.py" --work "$WORK" --jar "$JAR" --kquotad "$KQUOTAD" &
SUITE_PID=$!
trap 'kill -TERM "$SUITE_PID" 2>/dev/null; wait "$SUITE_PID"; exit 130' INT TERM
wait "$SUITE_PID" || STATUS=$?
if [ "$STATUS" != 0 ]; then
  echo "kquota-kafka/tests/cluster/run.sh: FAILED (logs in $WORK; KQUOTA_KEEP_CLUSTER_DIR=1 keeps them)" >&2
  exit "$STATUS"
fi
echo "== OK: kquota-kafka/tests/cluster in $((SECONDS - BEGIN)) s"
