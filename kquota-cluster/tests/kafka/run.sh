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
PORT="${BOOTSTRAP##*:}"

# The outage test's commands: stop the broker (SIGTERM, as kafka.sh stop does), and start it again
# from the same server.properties (kafka.sh start would format new data on new ports).
cat >"$WORK/broker-stop" <<EOF
#!/usr/bin/env bash
set -euo pipefail
pid="\$(cat "$KDIR/kafka.pid")"
kill -TERM "\$pid"
for _ in \$(seq 1 300); do kill -0 "\$pid" 2>/dev/null || exit 0; sleep 0.1; done
kill -KILL -- "-\$pid" 2>/dev/null || kill -KILL "\$pid"
EOF
cat >"$WORK/broker-start" <<EOF
#!/usr/bin/env bash
set -euo pipefail
before="\$(grep -c 'Kafka Server started' "$KDIR/logs/server.log" || true)"
cp="$ROOT/interop/kafka/target/classes:\$(cat "$ROOT/interop/kafka/target/classpath.txt")"
(setsid java \${KAFKA_HEAP:--Xmx512m -Xms64m} -XX:+UseSerialGC -XX:CICompilerCount=2 -Djava.awt.headless=true \\
  "-Dlog4j2.configurationFile=$KDIR/log4j2.properties" "-Dkafka.logs.dir=$KDIR/logs" -cp "\$cp" \\
  kafka.Kafka "$KDIR/server.properties" >>"$KDIR/logs/stdout.log" 2>&1 </dev/null &
  echo \$! >"$KDIR/kafka.pid")
for _ in \$(seq 1 900); do
  kill -0 "\$(cat "$KDIR/kafka.pid")" 2>/dev/null || { tail -n 30 "$KDIR/logs/server.log" >&2; echo "the broker exited while starting again" >&2; exit 1; }
  if [ "\$(grep -c 'Kafka Server started' "$KDIR/logs/server.log" || true)" -gt "\$before" ] &&
     python3 -c 'import socket, sys; socket.create_connection(("127.0.0.1", int(sys.argv[1])), 1).close()' "$PORT" 2>/dev/null; then
    exit 0
  fi
  sleep 0.1
done
tail -n 30 "$KDIR/logs/server.log" >&2
echo "the broker did not start again within 90 s" >&2
exit 1
EOF
chmod +x "$WORK/broker-stop" "$WORK/broker-start"

for target in kafka kafka_share; do
  echo "== the $target tests"
  KQUOTA_CLUSTER_BOOTSTRAP="$BOOTSTRAP" \
    KQUOTA_CLUSTER_BROKER_STOP="$WORK/broker-stop" \
    KQUOTA_CLUSTER_BROKER_START="$WORK/broker-start" \
    cargo test -p kquota-cluster --test "$target" -- --test-threads=1 --nocapture "$@"
done
echo "== OK: kquota-cluster's configuration log, membership and usage sharing against Kafka"
