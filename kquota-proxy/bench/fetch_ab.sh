#!/usr/bin/env bash
# Two kquota-proxy binaries side by side on one broker: the 1 MiB Fetch round trip direct, through
# A and through B, fetch_latency.py alternating the three paths from block to block, so that what
# the machine does to one it does to the others.
#
#   A=path/to/kquota-proxy B=path/to/other/kquota-proxy bash kquota-proxy/bench/fetch_ab.sh
#
# RUNS (4) runs of BLOCKS (6) blocks of SAMPLES (40) Fetches per path; one JSON line per run
# (fetch_latency.py's). Starts its own single-node Kafka (interop/kafka/kafka.sh) and stops it.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
: "${A:?A=path to the first kquota-proxy}" "${B:?B=path to the second kquota-proxy}"
RUNS="${RUNS:-4}" BLOCKS="${BLOCKS:-6}" SAMPLES="${SAMPLES:-40}"
KAFKA_SH="$ROOT/interop/kafka/kafka.sh"
WORK="$(mktemp -d)"
mkdir -p "$WORK/kafka"
PIDS=()
cleanup() {
  [ ${#PIDS[@]} -eq 0 ] || kill "${PIDS[@]}" 2>/dev/null || true
  "$KAFKA_SH" stop "$WORK/kafka" >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT
"$KAFKA_SH" build >/dev/null
CP="$ROOT/interop/kafka/target/classes:$(cat "$ROOT/interop/kafka/target/classpath.txt")"
KAFKA="$("$KAFKA_SH" start "$WORK/kafka")"
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
# Starts a proxy in front of the broker; its bootstrap address in ADDR once it serves.
start() {
  local bin=$1 log="$WORK/$2.log" listen
  listen="127.0.0.1:$(free_port)"
  local base=$(($(python3 "$ROOT/interop/ports.py") - 1))
  RUST_LOG=info "$bin" --upstream "$KAFKA" --listen "$listen" --listen-base "127.0.0.1:$base" --no-store >"$log" 2>&1 &
  PIDS+=($!)
  local deadline=$((SECONDS + 30))
  until grep -q "kquota-proxy serving" "$log"; do
    [ "$SECONDS" -lt "$deadline" ] || { echo "$bin did not start: $(tail -n 3 "$log")" >&2; exit 1; }
    sleep 0.1
  done
  ADDR="$listen"
}
start "$A" a; A_ADDR="$ADDR"
start "$B" b; B_ADDR="$ADDR"
java -Xms128m -Xmx512m -XX:+UseSerialGC -Dlog4j2.level=warn -cp "$CP" org.apache.kafka.tools.ProducerPerformance \
  --topic bench-consume-large --num-records 120000 --record-size 1000 --throughput -1 \
  --producer-props "bootstrap.servers=$KAFKA" acks=1 linger.ms=5 batch.size=262144 >/dev/null
for _ in $(seq 1 "$RUNS"); do
  python3 "$HERE/fetch_latency.py" bench-consume-large "$BLOCKS" "$SAMPLES" "direct=$KAFKA" "a=$A_ADDR" "b=$B_ADDR"
done
