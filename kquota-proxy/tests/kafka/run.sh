#!/usr/bin/env bash
# kquota-proxy in front of a real Apache Kafka 4.3.1 (interop/kafka/kafka.sh): produces and consumes
# through the proxy with kafka-python (check.py) and with Kafka's own Java console producer and
# consumer (the newest protocol versions: the ApiVersions caps and the rewriting are exercised), then
# stops the proxy with SIGTERM and checks it exits 0 and logged no connection it had to close.
#
#   bash kquota-proxy/tests/kafka/run.sh
#
# Needs cargo, python3 (with venv or pip), java 17+ and mvn, and network access to PyPI and Maven
# Central on the first run (the virtualenv is target/python-venv, shared with tests/python). .ci/run
# runs it after the Apache Kafka suite. The broker and the proxy are stopped when this script exits.
set -euo pipefail
cd "$(dirname "$0")/../../.."
ROOT="$(pwd)"
PYTHON="${PYTHON:-python3}"
KAFKA_SH="$ROOT/interop/kafka/kafka.sh"
HERE="$ROOT/kquota-proxy/tests/kafka"

die() {
  echo "kquota-proxy/tests/kafka/run.sh: error: $*" >&2
  exit 1
}

command -v cargo >/dev/null 2>&1 || die "cargo not found; install a Rust toolchain"
command -v java >/dev/null 2>&1 || die "java not found; install a JDK 17 or later"
command -v mvn >/dev/null 2>&1 || die "mvn not found; install Maven"

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
PROXY_PID=""
cleanup() {
  if [ -n "$PROXY_PID" ] && kill -0 "$PROXY_PID" 2>/dev/null; then kill "$PROXY_PID" 2>/dev/null || true; fi
  "$KAFKA_SH" stop "$WORK/kafka" || echo "run.sh: could not stop the broker in $WORK/kafka" >&2
  if [ "${KQUOTA_KEEP_KAFKA_DIR:-}" = "" ]; then rm -rf "$WORK"; else echo "files kept in $WORK"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "== starting the Kafka broker in $WORK/kafka"
mkdir -p "$WORK/kafka"
KAFKA="$("$KAFKA_SH" start "$WORK/kafka")" || die "the Kafka broker did not start"
echo "   Kafka at $KAFKA"

free_port() {
  "$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}
PROXY_PORT="$(free_port)"
# Broker N listens on BASE + N: the single broker is node 1.
BASE="$(free_port)"
[ "$BASE" -lt 65000 ] || BASE=40000
PROXY="127.0.0.1:$PROXY_PORT"
LOG="$WORK/proxy.log"

echo "== starting kquota-proxy on $PROXY (broker N on 127.0.0.1:$BASE+N) in front of $KAFKA"
RUST_LOG=kquota_proxy=debug "$PROXY_BIN" --upstream "$KAFKA" --listen "$PROXY" \
  --listen-base "127.0.0.1:$BASE" >"$LOG" 2>&1 &
PROXY_PID=$!
for _ in $(seq 50); do
  grep -q "kquota-proxy serving" "$LOG" && break
  kill -0 "$PROXY_PID" 2>/dev/null || { cat "$LOG" >&2; die "kquota-proxy exited"; }
  sleep 0.1
done
grep -q "kquota-proxy serving" "$LOG" || { cat "$LOG" >&2; die "kquota-proxy did not start"; }

echo "== kafka-python through the proxy"
"$VENV/bin/python" "$HERE/check.py" "$PROXY" "$BASE" "$KAFKA" || { tail -n 40 "$LOG" >&2; die "kafka-python check failed"; }

echo "== Kafka's console producer and consumer through the proxy"
TOPIC="proxy-java-$(date +%s)"
seq 1 100 | sed 's/^/java-/' >"$WORK/sent.txt"
"$KAFKA_SH" java org.apache.kafka.tools.ConsoleProducer --bootstrap-server "$PROXY" --topic "$TOPIC" \
  --producer-property acks=all <"$WORK/sent.txt" >"$WORK/producer.out" 2>&1 ||
  { cat "$WORK/producer.out" >&2; tail -n 40 "$LOG" >&2; die "the console producer failed"; }
"$KAFKA_SH" java org.apache.kafka.tools.consumer.ConsoleConsumer --bootstrap-server "$PROXY" --topic "$TOPIC" \
  --from-beginning --group "$TOPIC-group" --max-messages 100 --timeout-ms 30000 \
  >"$WORK/received.txt" 2>"$WORK/consumer.err" ||
  { cat "$WORK/consumer.err" >&2; tail -n 40 "$LOG" >&2; die "the console consumer failed"; }
sort "$WORK/sent.txt" >"$WORK/sent.sorted"
grep '^java-' "$WORK/received.txt" | sort >"$WORK/received.sorted" || true
cmp -s "$WORK/sent.sorted" "$WORK/received.sorted" ||
  die "the console consumer read $(wc -l <"$WORK/received.sorted") of the 100 messages sent"
echo "   100 messages written with the Java producer and read back by a Java consumer group"

# Every client reached the broker through the proxy's listener for node 1, not only the bootstrap one.
grep -q 'listener=Broker(1)' "$LOG" || die "no connection came through the broker listener"
echo "   $(grep -c 'connection opened' "$LOG") connections proxied, $(grep -c 'listener=Broker(1)' "$LOG") through broker 1's listener"

echo "== stopping kquota-proxy (SIGTERM)"
kill -TERM "$PROXY_PID"
STATUS=0
wait "$PROXY_PID" || STATUS=$?
PROXY_PID=""
[ "$STATUS" = 0 ] || { tail -n 40 "$LOG" >&2; die "kquota-proxy exited with $STATUS"; }
grep -q 'stopped' "$LOG" || die "kquota-proxy did not log its stop"
if grep -E ' WARN ' "$LOG" >&2; then
  die "kquota-proxy logged warnings (above)"
fi
echo "== OK: kquota-proxy forwarded kafka-python and the Java clients to Kafka, and stopped cleanly"
