#!/usr/bin/env bash
# kquota-cluster against a real Apache Kafka 4.3.1 broker (interop/kafka/kafka.sh: a single KRaft
# broker and controller on loopback): starts the broker, runs the `kafka` test target (the
# configuration log, kquota-cluster/tests/kafka/main.rs) and the `kafka_share` one (membership and
# usage sharing, kquota-cluster/tests/share/kafka.rs) with KQUOTA_CLUSTER_BOOTSTRAP set, and stops
# the broker whatever the outcome. The outage test stops the broker and starts it again in the same directory,
# on the same port and with the same data, through the two commands exported for it.
#
#   bash kquota-cluster/tests/kafka/run.sh [test name filter]
#
#   KQUOTA_KEEP_KAFKA_DIR=1   keep the broker's directory and logs
#
# Needs cargo, java 17+ and mvn (the first run downloads Kafka's jars from Maven Central). Nothing is
# skipped: a broker that does not start fails the run, and so does every test without the broker.
set -euo pipefail
cd "$(dirname "$0")/../../.."
ROOT="$(pwd)"
KAFKA_SH="$ROOT/interop/kafka/kafka.sh"

die() {
  echo "kquota-cluster/tests/kafka/run.sh: error: $*" >&2
  exit 1
}

command -v cargo >/dev/null 2>&1 || die "cargo not found; install a Rust toolchain"
command -v java >/dev/null 2>&1 || die "java not found; install a JDK 17 or later"
command -v mvn >/dev/null 2>&1 || die "mvn not found; install Maven"

echo "== building the kafka and kafka_share test targets of kquota-cluster"
cargo test -p kquota-cluster --test kafka --test kafka_share --no-run

echo "== resolving Apache Kafka (Maven Central) and building interop/kafka"
"$KAFKA_SH" build >/dev/null

WORK="$(mktemp -d "${TMPDIR:-/tmp}/kquota-cluster-kafka.XXXXXX")"
KDIR="$WORK/kafka"
cleanup() {
  "$KAFKA_SH" stop "$KDIR" || echo "run.sh: could not stop the broker in $KDIR" >&2
  if [ "${KQUOTA_KEEP_KAFKA_DIR:-}" = "" ]; then rm -rf "$WORK"; else echo "files kept in $WORK"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "== starting the Kafka broker in $KDIR"
BOOTSTRAP="$("$KAFKA_SH" start "$KDIR")" || die "the Kafka broker did not start"
[ -n "$BOOTSTRAP" ] || die "kafka.sh printed no bootstrap address"
echo "   Kafka at $BOOTSTRAP"

# The outage's commands: stop the broker (SIGTERM), and start it again on the same ports with the
# same data.
printf '#!/usr/bin/env bash\nexec "%s" stop "%s"\n' "$KAFKA_SH" "$KDIR" >"$WORK/broker-stop"
printf '#!/usr/bin/env bash\nexec "%s" resume "%s" >/dev/null\n' "$KAFKA_SH" "$KDIR" >"$WORK/broker-start"
chmod +x "$WORK/broker-stop" "$WORK/broker-start"

for target in kafka kafka_share; do
  echo "== the $target tests"
  KQUOTA_CLUSTER_BOOTSTRAP="$BOOTSTRAP" \
    KQUOTA_CLUSTER_BROKER_STOP="$WORK/broker-stop" \
    KQUOTA_CLUSTER_BROKER_START="$WORK/broker-start" \
    cargo test -p kquota-cluster --test "$target" -- --test-threads=1 --nocapture "$@"
done
echo "== OK: kquota-cluster's configuration log, membership and usage sharing against Kafka"
