#!/usr/bin/env bash
# Fault tests of the release kquota-proxy in front of a real single-node Apache Kafka 4.3.1
# (interop/kafka/kafka.sh):
#
#   (a) the broker restarted mid-stream, twice (SIGTERM, then SIGKILL), on the same port with the
#       same data, while Kafka's VerifiableProducer and VerifiableConsumer (default client settings)
#       run through the proxy: both recover through it, every record is acked, and every acked
#       record is consumed;
#   (b) clients that vanish mid-request: 600 connections a pass, 200 open at once, each closing
#       (FIN or RST) after nothing, part of a size, half a frame, a whole Produce, a held Fetch, or
#       pipelined requests (hostile.py vanish);
#   (c) garbage and oversized frames: random bytes, negative sizes, sizes above
#       --max-request-bytes, frames shorter than a header, truncated bodies (closed, half-closed,
#       stalled past the idle timeout), unknown api keys, versions above the caps
#       (hostile.py garbage);
#   (d) when the proxy enforces quotas: clients of a client id whose quota (set at the proxy with
#       Kafka's kafka-configs, and checked to be absent at the broker) they far exceed, each
#       throttled by its first answer, then sending more and vanishing while the proxy does not
#       read them (Kafka's mute: at most quota.window.num x quota.window.size.seconds, 11 s).
#
# After each (and (b), (c) and (d) run twice): the proxy is still running, a real client (kafka-python)
# writes and reads back through it, it logged no panic, and within SETTLE_S seconds its open file
# descriptors (/proc/PID/fd) and resident memory (/proc/PID/status VmRSS) come back to the baseline
# taken after a first round trip:
#   * descriptors other than pipes exactly: the proxy pools no socket, so with no client connected
#     it holds only its listeners, its runtime's, its store's and the inherited ones; one more is a
#     connection (two, with its broker side) that was never closed, or a task that still holds one;
#     pipes at most the baseline's plus 64 (the proxy keeps up to 32 pipes, two descriptors each,
#     for the bytes it passes on with splice, spare once used);
#   * memory at most RSS_TOLERANCE_KB (16 MiB) above the baseline, and after the second pass of
#     (b), (c) and (d) at most RSS_GROWTH_KB (6 MiB) above the first pass. glibc's malloc keeps what
#     the worker threads freed in their arenas, so RSS settles above a fresh process's, by up to
#     about what was held at the peak (frame buffers grow with the bytes that arrived: in (b) 40
#     large Produce requests among 200 connections at once, about 15 MiB; in (c) 16 frames of
#     1 MiB). Measured on kquota-proxy as of fd93a73: 11.5 MiB fresh, 16.5-19.5 MiB over 21 passes
#     of (b) and (c) (about 21,000 connections), with no trend. A leak of frame buffers is more than
#     the growth allowed: each pass of (b) has 120 connections that sent half or all of a 500 KB
#     Produce (about 45 MiB of buffers), each of (c) 16 frames of 1 MiB; a leaked task or socket
#     shows in the descriptors.
# Any failure prints the reason and the tail of the proxy's log, and exits 1.
#
#   bash kquota-proxy/tests/faults/run.sh        # about 1.5 minutes once built
#
# Needs cargo, python3, java 17+ and mvn (network access to PyPI and Maven Central on the first
# run, as kquota-proxy/tests/kafka/run.sh). Loopback only, free ports. The broker, the proxy and
# every client are stopped when this script exits. KQUOTA_KEEP_FAULTS_DIR=1 keeps the work files;
# KQUOTA_PROXY_BIN=PATH tests that binary instead of building target/release/kquota-proxy.
set -euo pipefail
cd "$(dirname "$0")/../../.."
ROOT="$(pwd)"
PYTHON="${PYTHON:-python3}"
KAFKA_SH="$ROOT/interop/kafka/kafka.sh"
HERE="$ROOT/kquota-proxy/tests/faults"
SETTLE_S=30
RSS_TOLERANCE_KB=16384
RSS_GROWTH_KB=6144
MAX_REQUEST_BYTES=1048576
IDLE_TIMEOUT_MS=5000
RECORDS=12000         # produced during (a), at RATE records/s
RATE=400
STARTED=$SECONDS

WORK="$(mktemp -d "${TMPDIR:-/tmp}/kquota-proxy-faults.XXXXXX")"
LOG="$WORK/proxy.log"
PROXY_PID=""
CHILDREN=()

log_tail() {
  if [ -f "$LOG" ]; then
    echo "---- the last 40 lines of the proxy's log ($LOG):" >&2
    tail -n 40 "$LOG" >&2
    echo "----" >&2
  fi
}
die() {
  echo "kquota-proxy/tests/faults/run.sh: FAILED: $*" >&2
  log_tail
  exit 1
}

command -v cargo >/dev/null 2>&1 || die "cargo not found; install a Rust toolchain"
command -v java >/dev/null 2>&1 || die "java not found; install a JDK 17 or later"
command -v mvn >/dev/null 2>&1 || die "mvn not found; install Maven"

cleanup() {
  local pid
  for pid in "${CHILDREN[@]}"; do
    kill -0 "$pid" 2>/dev/null && kill "$pid" 2>/dev/null || true
  done
  if [ -n "$PROXY_PID" ] && kill -0 "$PROXY_PID" 2>/dev/null; then kill "$PROXY_PID" 2>/dev/null || true; fi
  "$KAFKA_SH" stop "$WORK/kafka" || echo "run.sh: could not stop the broker in $WORK/kafka" >&2
  if [ -z "${KQUOTA_KEEP_FAULTS_DIR:-}" ]; then rm -rf "$WORK"; else echo "files kept in $WORK"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# shellcheck source=tests/python/venv.sh
. "$ROOT/tests/python/venv.sh"
PY="$VENV/bin/python"

if [ -n "${KQUOTA_PROXY_BIN:-}" ]; then
  PROXY_BIN="$KQUOTA_PROXY_BIN"
  echo "== kquota-proxy: $PROXY_BIN (KQUOTA_PROXY_BIN; not built here)"
else
  echo "== building kquota-proxy (release)"
  cargo build --release --bin kquota-proxy
  TARGET_DIR="${CARGO_TARGET_DIR:-target}"
  case "$TARGET_DIR" in /*) ;; *) TARGET_DIR="$ROOT/$TARGET_DIR" ;; esac
  PROXY_BIN="$TARGET_DIR/release/kquota-proxy"
fi
[ -x "$PROXY_BIN" ] || die "$PROXY_BIN is not an executable"

echo "== resolving Apache Kafka (Maven Central) and building interop/kafka"
"$KAFKA_SH" build >/dev/null

# ---- the broker: started by kafka.sh, and restarted by it in the same directory, on the same ports
# and with the same data (kafka.sh resume)
KDIR="$WORK/kafka"
mkdir -p "$KDIR"
echo "== starting the Kafka broker in $KDIR"
KAFKA="$("$KAFKA_SH" start "$KDIR")" || die "the Kafka broker did not start"
echo "   Kafka at $KAFKA"

# ---- the proxy
free_port() {
  "$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}
PROXY_PORT="$(free_port)"
# Broker 1's port, outside the ephemeral range: the proxy listens on it only once the cluster names
# broker 1, and an outgoing connection could take an ephemeral port before that.
BROKER_PORT="$("$PYTHON" "$ROOT/interop/ports.py")" || die "no port for the proxy's broker listener"
BASE=$((BROKER_PORT - 1))
PROXY="127.0.0.1:$PROXY_PORT"
BROKER1="127.0.0.1:$((BASE + 1))"
echo "== starting kquota-proxy on $PROXY (broker 1 on $BROKER1) in front of $KAFKA"
echo "   --max-request-bytes $MAX_REQUEST_BYTES --idle-timeout-ms $IDLE_TIMEOUT_MS"
EXTRA=()
# The durable quota store (once the proxy has one) goes in the work directory, not the checkout.
HELP="$("$PROXY_BIN" --help 2>&1 || true)"
if grep -q -- '--data-dir' <<<"$HELP"; then EXTRA+=(--data-dir "$WORK/proxy-data"); fi
# A proxy that enforces quotas (and serves AlterClientQuotas to its super users) gets (d).
THROTTLING=""
if grep -q -- '--super-users' <<<"$HELP"; then EXTRA+=(--super-users "User:ANONYMOUS"); THROTTLING=yes; fi
RUST_LOG=kquota_proxy=debug "$PROXY_BIN" --upstream "$KAFKA" --listen "$PROXY" --listen-base "127.0.0.1:$BASE" \
  --max-request-bytes "$MAX_REQUEST_BYTES" --idle-timeout-ms "$IDLE_TIMEOUT_MS" ${EXTRA[@]+"${EXTRA[@]}"} >"$LOG" 2>&1 &
PROXY_PID=$!
deadline=$((SECONDS + 10))
until grep -q "kquota-proxy serving" "$LOG"; do
  kill -0 "$PROXY_PID" 2>/dev/null || die "kquota-proxy exited at start"
  [ "$SECONDS" -lt "$deadline" ] || die "kquota-proxy did not log 'kquota-proxy serving' within 10 s"
  sleep 0.1
done

# Descriptors other than pipes, and pipes (kept spare for splice, at most MAX_PIPE_FDS more).
fds() { find "/proc/$PROXY_PID/fd" -mindepth 1 -maxdepth 1 -printf '%l\n' 2>/dev/null | grep -vc '^pipe:' || true; }
pipes() { find "/proc/$PROXY_PID/fd" -mindepth 1 -maxdepth 1 -printf '%l\n' 2>/dev/null | grep -c '^pipe:' || true; }
MAX_PIPE_FDS=64
rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$PROXY_PID/status"; }
mib() { awk -v k="$1" 'BEGIN { printf "%.1f MiB", k / 1024 }'; }
hwm_kb() { awk '/^VmHWM:/ {print $2}' "/proc/$PROXY_PID/status"; }

roundtrip() { # <tag>
  timeout 60 "$PY" "$HERE/client.py" roundtrip "$PROXY" "$1" || die "the round trip through the proxy after $1 failed"
}

alive() { # <after what>
  kill -0 "$PROXY_PID" 2>/dev/null || die "kquota-proxy is not running after $1"
  if grep -n -E 'panicked|RUST_BACKTRACE' "$LOG" >&2; then die "kquota-proxy panicked (above) during $1"; fi
}

# Waits until no client connection is left open (the descriptors are the baseline's), then until
# RSS stops falling, and checks it against the baseline (and against PREV_RSS, a first pass's).
PREV_RSS=""
settled() { # <after what>
  local t0=$SECONDS deadline=$((SECONDS + SETTLE_S)) f r last
  until [ "$(fds)" -eq "$FD0" ]; do
    if [ "$SECONDS" -ge "$deadline" ]; then
      echo "open descriptors of the proxy, by kind:" >&2
      find "/proc/$PROXY_PID/fd" -mindepth 1 -maxdepth 1 -printf '%l\n' 2>/dev/null | sed 's/:\[[0-9]*\]$//' | sort | uniq -c >&2 || true
      echo "its TCP connections to clients and to the broker, by state:" >&2
      ss -tanp 2>/dev/null | grep "pid=$PROXY_PID," | awk '{print $1}' | sort | uniq -c >&2 || true
      die "after $1 the proxy holds $(fds) descriptors other than pipes after ${SETTLE_S} s, not the baseline's $FD0${SETTLE_HINT:+ ($SETTLE_HINT)}"
    fi
    sleep 0.2
  done
  [ "$(pipes)" -le $((PIPES0 + MAX_PIPE_FDS)) ] ||
    die "after $1 the proxy holds $(pipes) pipe descriptors, more than the baseline's $PIPES0 + $MAX_PIPE_FDS"
  r="$(rss_kb)"
  last=-1
  while [ "$r" != "$last" ] && [ "$SECONDS" -lt "$deadline" ]; do
    sleep 0.5
    last="$r"
    r="$(rss_kb)"
  done
  echo "   after $1: $(fds) descriptors (baseline $FD0) and $(pipes) of pipes (baseline $PIPES0), RSS $(mib "$r") (baseline $(mib "$RSS0"), peak so far $(mib "$(hwm_kb)")), settled in $((SECONDS - t0)) s"
  [ "$r" -le $((RSS0 + RSS_TOLERANCE_KB)) ] ||
    die "after $1 the proxy's RSS is $r kB, more than the baseline's $RSS0 kB + $RSS_TOLERANCE_KB kB"
  if [ -n "$PREV_RSS" ]; then
    [ "$r" -le $((PREV_RSS + RSS_GROWTH_KB)) ] ||
      die "after $1 the proxy's RSS is $r kB, more than the first pass's $PREV_RSS kB + $RSS_GROWTH_KB kB: it grows"
  fi
  LAST_RSS="$r"
}

check_after() { # <what>
  alive "$1"
  roundtrip "$1"
  alive "$1"
  settled "$1"
}

echo "== baseline"
roundtrip "start"
quiet_deadline=$((SECONDS + 10))
# The round trip's connections close as the client exits: wait for the count to stop moving.
prev=-1
while :; do
  cur="$(fds)"
  [ "$cur" = "$prev" ] && break
  prev="$cur"
  [ "$SECONDS" -lt "$quiet_deadline" ] || break
  sleep 0.5
done
FD0="$(fds)"
PIPES0="$(pipes)"
RSS0="$(rss_kb)"
echo "   baseline: $FD0 descriptors and $PIPES0 of pipes, RSS $(mib "$RSS0")"

# ---- (a) the broker restarted mid-stream
echo "== (a) the broker restarted twice mid-stream (SIGTERM, then SIGKILL) under a producer and a consumer"
TOPIC="faults-restart"
timeout 60 "$PY" "$HERE/client.py" create-topic "$PROXY" "$TOPIC" 3 || die "could not create $TOPIC through the proxy"
PRODUCED="$WORK/produced.jsonl"
CONSUMED="$WORK/consumed.jsonl"
"$KAFKA_SH" java org.apache.kafka.tools.VerifiableConsumer --bootstrap-server "$PROXY" --topic "$TOPIC" \
  --group-id "$TOPIC-group" --verbose >"$CONSUMED" 2>"$WORK/consumer.err" &
CONSUMER_PID=$!
CHILDREN+=("$CONSUMER_PID")
# VerifiableProducer sets retries=0 for itself (Kafka's system tests count the failures); the
# client's default (Integer.MAX_VALUE, so retries within delivery.timeout.ms and idempotence) is
# put back, which is what "default settings" means here. Without it, a graceful broker stop fails
# the batches in flight with NOT_LEADER_OR_FOLLOWER even with no proxy between.
echo "retries=2147483647" >"$WORK/producer.properties"
"$KAFKA_SH" java org.apache.kafka.tools.VerifiableProducer --bootstrap-server "$PROXY" --topic "$TOPIC" \
  --max-messages "$RECORDS" --throughput "$RATE" --command-config "$WORK/producer.properties" \
  >"$PRODUCED" 2>"$WORK/producer.err" &
PRODUCER_PID=$!
CHILDREN+=("$PRODUCER_PID")

acked() { grep -c '"producer_send_success"' "$PRODUCED" || true; }
consumed() { grep -c '"record_data"' "$CONSUMED" || true; }
wait_acked() { # <count> <seconds>
  local deadline=$((SECONDS + $2))
  until [ "$(acked)" -ge "$1" ]; do
    kill -0 "$PRODUCER_PID" 2>/dev/null || { tail -n 20 "$WORK/producer.err" >&2; die "the producer exited with $(acked) acks, before $1"; }
    [ "$SECONDS" -lt "$deadline" ] || { tail -n 20 "$WORK/producer.err" >&2; die "the producer had $(acked) acks after $2 s, not $1"; }
    sleep 0.2
  done
}
# The broker is down long enough that the clients notice: the proxy has failed to reach it for a
# new client connection (the clients reconnect through it), and no ack comes meanwhile.
wait_refused() { # <how many refusals before>
  local deadline=$((SECONDS + 30))
  until [ "$(grep -c 'cannot connect to the broker' "$LOG" || true)" -gt "$1" ]; do
    [ "$SECONDS" -lt "$deadline" ] || die "no client reconnected through the proxy within 30 s of the broker's stop"
    sleep 0.1
  done
}
wait_consumed() { # <count> <seconds>
  local deadline=$((SECONDS + $2))
  until [ "$(consumed)" -ge "$1" ]; do
    kill -0 "$CONSUMER_PID" 2>/dev/null || { tail -n 20 "$WORK/consumer.err" >&2; die "the consumer exited"; }
    [ "$SECONDS" -lt "$deadline" ] || { tail -n 20 "$WORK/consumer.err" >&2; die "the consumer had read $(consumed) records after $2 s, not $1"; }
    sleep 0.2
  done
}
# Before each stop both clients have made progress since the last one: they recovered through the
# proxy (a consumer reads records again, a producer has acks again).
STOPPED_AT=0
restart() { # <how> <acks first>
  wait_acked "$2" 90
  wait_consumed $((STOPPED_AT + 1)) 90
  local refused
  refused="$(grep -c 'cannot connect to the broker' "$LOG" || true)"
  local t0=$SECONDS acked_at_stop
  if [ "$1" = kill ]; then "$KAFKA_SH" kill "$KDIR"; else "$KAFKA_SH" stop "$KDIR"; fi
  acked_at_stop="$(acked)"
  STOPPED_AT="$acked_at_stop"
  wait_refused "$refused"
  "$KAFKA_SH" resume "$KDIR" >/dev/null || die "the broker did not start again"
  echo "   broker stopped ($1) at $acked_at_stop acks, $(consumed) records consumed; up again after $((SECONDS - t0)) s"
}
restart term $((RECORDS / 4))
restart kill $((RECORDS * 5 / 8))

deadline=$((SECONDS + 150))
while kill -0 "$PRODUCER_PID" 2>/dev/null; do
  [ "$SECONDS" -lt "$deadline" ] || { tail -n 20 "$WORK/producer.err" >&2; die "the producer did not finish within 150 s ($(acked) acks)"; }
  sleep 0.2
done
wait "$PRODUCER_PID" || { tail -n 20 "$WORK/producer.err" >&2; die "the producer exited with an error"; }
[ "$(acked)" -eq "$RECORDS" ] ||
  { grep -m 5 '"producer_send_error"' "$PRODUCED" >&2 || true; die "the producer had $(acked) of $RECORDS records acked: it did not recover through the proxy"; }
deadline=$((SECONDS + 60))
until "$PY" "$HERE/client.py" consumed-all "$PRODUCED" "$CONSUMED"; do
  kill -0 "$CONSUMER_PID" 2>/dev/null || { tail -n 20 "$WORK/consumer.err" >&2; die "the consumer exited"; }
  [ "$SECONDS" -lt "$deadline" ] || break
  sleep 0.5
done
kill -TERM "$CONSUMER_PID" 2>/dev/null || true
deadline=$((SECONDS + 30))
while kill -0 "$CONSUMER_PID" 2>/dev/null && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.2; done
kill -KILL "$CONSUMER_PID" 2>/dev/null || true
"$PY" "$HERE/client.py" check-acked "$PRODUCED" "$CONSUMED" ||
  { tail -n 20 "$WORK/consumer.err" >&2; die "acked records were lost through the restarts"; }
check_after "the broker restarts"

# ---- (b) clients that vanish mid-request
echo "== (b) clients that vanish mid-request"
for pass in 1 2; do
  timeout 180 "$PY" "$HERE/hostile.py" vanish "$PROXY" "$BROKER1" faults-vanish || die "hostile.py vanish failed (pass $pass)"
  check_after "the vanishing clients (pass $pass)"
  PREV_RSS="$LAST_RSS"
  [ "$pass" = 2 ] && PREV_RSS=""
done

# ---- (c) garbage and oversized frames
echo "== (c) garbage and oversized frames"
for pass in 1 2; do
  timeout 180 "$PY" "$HERE/hostile.py" garbage "$PROXY" "$BROKER1" faults-garbage "$MAX_REQUEST_BYTES" "$IDLE_TIMEOUT_MS" ||
    die "hostile.py garbage failed (pass $pass)"
  check_after "the garbage frames (pass $pass)"
  PREV_RSS="$LAST_RSS"
  [ "$pass" = 2 ] && PREV_RSS=""
done
echo "   the proxy warned $(grep -c ' WARN ' "$LOG" || true) times (each refused frame is one warning naming the peer)"

# ---- (d) clients that vanish while throttled (a proxy that enforces quotas)
if [ -n "$THROTTLING" ]; then
  echo "== (d) clients that vanish while throttled"
  THROTTLED_ID="faults-throttled"
  "$KAFKA_SH" java kafka.admin.ConfigCommand --bootstrap-server "$PROXY" --alter --entity-type clients \
    --entity-name "$THROTTLED_ID" --add-config producer_byte_rate=1024,consumer_byte_rate=1024 >"$WORK/quota.out" 2>&1 ||
    { cat "$WORK/quota.out" >&2; die "AlterClientQuotas through the proxy failed"; }
  "$KAFKA_SH" java kafka.admin.ConfigCommand --bootstrap-server "$KAFKA" --describe --entity-type clients \
    --entity-name "$THROTTLED_ID" >"$WORK/quota-broker.out" 2>&1 || true
  if grep -q producer_byte_rate "$WORK/quota-broker.out"; then
    die "the quota set at the proxy reached the broker: $(cat "$WORK/quota-broker.out")"
  fi
  echo "   client id $THROTTLED_ID: producer_byte_rate and consumer_byte_rate 1024, at the proxy (the broker has none)"
  SETTLE_HINT="connections whose client left while throttled are still open: Kafka closes a muted channel after connections.max.idle.ms, which --idle-timeout-ms $IDLE_TIMEOUT_MS stands for"
  for pass in 1 2; do
    timeout 120 "$PY" "$HERE/hostile.py" throttled "$PROXY" "$BROKER1" faults-throttled "$THROTTLED_ID" ||
      die "hostile.py throttled failed (pass $pass)"
    check_after "the throttled clients (pass $pass)"
    PREV_RSS="$LAST_RSS"
    [ "$pass" = 2 ] && PREV_RSS=""
  done
  SETTLE_HINT=""
else
  echo "== (d) skipped: this kquota-proxy enforces no quotas (its --help has no --super-users)"
fi

echo "== stopping kquota-proxy (SIGTERM)"
kill -TERM "$PROXY_PID"
STATUS=0
wait "$PROXY_PID" || STATUS=$?
PROXY_PID=""
[ "$STATUS" = 0 ] || die "kquota-proxy exited with $STATUS on SIGTERM"
opened="$(grep -c 'connection opened' "$LOG" || true)"
closed="$(grep -c 'connection closed' "$LOG" || true)"
[ "$opened" = "$closed" ] || die "the proxy logged $opened connections opened and $closed closed"
echo "   $opened connections reached the broker through the proxy, and as many were closed"
echo "== OK: kquota-proxy survived the broker's restarts, vanishing clients, garbage frames$([ -n "$THROTTLING" ] && echo " and clients vanishing while throttled") in $((SECONDS - STARTED)) s"
