#!/usr/bin/env bash
# The picture in docs/proxy.md: one producer and one quota, enforced once by Kafka and once by
# kquota-proxy, from a real run.
#
# A single-node Apache Kafka 4.3.1 (interop/kafka/kafka.sh) and the release kquota-proxy in front of
# it, on loopback. producer_byte_rate = QUOTA (1 MiB/s) is set with Kafka's kafka-configs
# (ConfigCommand) twice: for client id picture-kafka at the broker, and for client id picture-proxy
# at the proxy (which answers AlterClientQuotas itself; the broker is checked to have no quota for
# it). The same producer then runs twice at the same time for SECONDS (70): Kafka's Java producer
# at its default settings (ProduceTrace.java beside this script: Workload's produce-rate, as fast
# as the producer takes 8,000-byte records, with a trace of the bytes acknowledged and of the
# producer's produce-throttle-time every 100 ms), once directly against Kafka and once through the
# proxy. picture.py draws both traces into an SVG (bytes/s per second against the quota line, and
# the throttle times the client saw) and prints the run's numbers.
#
#   bash kquota-proxy/bench/picture.sh                       # writes docs/proxy-vs-kafka.svg; ~2.5 min once built
#   PICTURE_OUT=/tmp/x.svg bash kquota-proxy/bench/picture.sh # elsewhere
#   SECONDS_RUN=70 QUOTA=1048576 RECORD_BYTES=8000           # the defaults
#   KQUOTA_PROXY_BIN=path/to/kquota-proxy                    # that binary, not built; the picture names
#   KQUOTA_PROXY_BUILT="kquota-proxy built from ..."         # it so (default: by its path)
#   KQUOTA_KEEP_PICTURE_DIR=1                                # keep the traces and logs
#
# Needs cargo, python3 (its standard library only), java 17+ (javac) and mvn (Maven Central on the
# first run). Every missing dependency, and a broker or proxy that does not come up, fails the run
# with a message. Bounded: the whole run after the build is stopped after PICTURE_TIMEOUT seconds
# (default 600). Loopback only, free ports; the broker, the proxy and the producers are stopped
# when this script exits, however it exits.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT="$(pwd)"
PYTHON="${PYTHON:-python3}"
export PYTHONDONTWRITEBYTECODE=1
KAFKA_SH="$ROOT/interop/kafka/kafka.sh"
HERE="$ROOT/kquota-proxy/bench"
OUT="${PICTURE_OUT:-$ROOT/docs/proxy-vs-kafka.svg}"
RUN_S="${SECONDS_RUN:-70}"
QUOTA="${QUOTA:-1048576}"
RECORD_BYTES="${RECORD_BYTES:-8000}"
LIMIT_S="${PICTURE_TIMEOUT:-600}"

die() {
  echo "kquota-proxy/bench/picture.sh: error: $*" >&2
  exit 1
}
command -v "$PYTHON" >/dev/null 2>&1 || die "$PYTHON not found"
command -v java >/dev/null 2>&1 || die "java not found; install a JDK 17 or later (Debian: openjdk-17-jdk-headless)"
command -v javac >/dev/null 2>&1 || die "javac not found; install a JDK 17 or later, not only a JRE"
command -v mvn >/dev/null 2>&1 || die "mvn not found; install Maven (Debian: maven)"
command -v timeout >/dev/null 2>&1 || die "timeout (coreutils) not found"
[ -n "${KQUOTA_PROXY_BIN:-}" ] || command -v cargo >/dev/null 2>&1 || die "cargo not found (or set KQUOTA_PROXY_BIN)"

WORK="$(mktemp -d "${TMPDIR:-/tmp}/kquota-picture.XXXXXX")"
PROXY_PID=""
PIDS=()
WATCHDOG=""
cleanup() {
  local pid
  for pid in ${PIDS[@]+"${PIDS[@]}"} $PROXY_PID; do
    kill -0 "$pid" 2>/dev/null && kill -TERM "$pid" 2>/dev/null || true
  done
  sleep 0.5
  for pid in ${PIDS[@]+"${PIDS[@]}"} $PROXY_PID; do
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null || true
  done
  [ ! -d "$WORK/kafka" ] || "$KAFKA_SH" stop "$WORK/kafka" || echo "picture.sh: could not stop the broker in $WORK/kafka" >&2
  [ -z "$WATCHDOG" ] || kill "$WATCHDOG" 2>/dev/null || true
  if [ -z "${KQUOTA_KEEP_PICTURE_DIR:-}" ]; then rm -rf "$WORK"; else echo "files kept in $WORK" >&2; fi
}
trap cleanup EXIT
trap 'echo "picture.sh: stopped (signal or PICTURE_TIMEOUT=${LIMIT_S} s)" >&2; exit 130' INT TERM

if [ -n "${KQUOTA_PROXY_BIN:-}" ]; then
  PROXY_BIN="$KQUOTA_PROXY_BIN"
  BUILT="${KQUOTA_PROXY_BUILT:-the binary $PROXY_BIN}"
else
  # Whether the sources differ from HEAD, judged before the build (what the build then compiles).
  BUILT="kquota-proxy built from $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo "an unknown commit")"
  git -C "$ROOT" diff --quiet HEAD -- kquota-proxy/src src Cargo.lock kquota-wire kquota-host kquota-store 2>/dev/null ||
    BUILT="$BUILT with changes in the work tree"
  echo "== building kquota-proxy (release)" >&2
  cargo build --release --bin kquota-proxy >&2 || die "cargo could not build kquota-proxy"
  TARGET_DIR="${CARGO_TARGET_DIR:-target}"
  case "$TARGET_DIR" in /*) ;; *) TARGET_DIR="$ROOT/$TARGET_DIR" ;; esac
  PROXY_BIN="$TARGET_DIR/release/kquota-proxy"
fi
[ -x "$PROXY_BIN" ] || die "$PROXY_BIN is not an executable"
"$PROXY_BIN" --help 2>&1 | grep -q -- '--super-users' ||
  die "$PROXY_BIN has no --super-users: it does not serve AlterClientQuotas, so no quota can be set at it"

# From here on the run is bounded.
# shellcheck disable=SC2016
(trap 'kill "$s" 2>/dev/null; exit 0' TERM; sleep "$LIMIT_S" & s=$!; wait "$s" && kill -TERM $$ 2>/dev/null) >/dev/null 2>&1 &
WATCHDOG=$!

echo "== resolving Apache Kafka (Maven Central) and building interop/kafka" >&2
"$KAFKA_SH" build >/dev/null || die "interop/kafka could not be built (Java and Maven, Maven Central)"
CP="$ROOT/interop/kafka/target/classes:$(cat "$ROOT/interop/kafka/target/classpath.txt")"
mkdir -p "$WORK/classes"
javac -nowarn -cp "$CP" -d "$WORK/classes" "$HERE/ProduceTrace.java" 2>"$WORK/javac.log" ||
  { cat "$WORK/javac.log" >&2; die "ProduceTrace.java did not compile"; }
tool() { timeout 120 "$KAFKA_SH" java "$@"; }

mkdir -p "$WORK/kafka"
KAFKA="$("$KAFKA_SH" start "$WORK/kafka")" || die "the Kafka broker did not start"
echo "   Kafka at $KAFKA" >&2

PROXY="127.0.0.1:$("$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')"
# Broker 1's port outside the ephemeral range (interop/ports.py says why).
BROKER_PORT="$("$PYTHON" "$ROOT/interop/ports.py")" || die "no port for the proxy's broker listener"
LOG="$WORK/proxy.log"
"$PROXY_BIN" --upstream "$KAFKA" --listen "$PROXY" --listen-base "127.0.0.1:$((BROKER_PORT - 1))" \
  --data-dir "$WORK/proxy-data" --super-users User:ANONYMOUS >"$LOG" 2>&1 &
PROXY_PID=$!
deadline=$((SECONDS + 30))
until grep -q "kquota-proxy serving" "$LOG"; do
  kill -0 "$PROXY_PID" 2>/dev/null || { tail -n 20 "$LOG" >&2; die "kquota-proxy exited at start"; }
  [ "$SECONDS" -lt "$deadline" ] || { tail -n 20 "$LOG" >&2; die "kquota-proxy did not serve within 30 s"; }
  sleep 0.1
done
echo "   kquota-proxy at $PROXY (pid $PROXY_PID)" >&2

echo "== topics and quotas" >&2
for t in picture-kafka picture-proxy; do
  tool org.apache.kafka.tools.TopicCommand --bootstrap-server "$KAFKA" --create --topic "$t" --partitions 1 \
    --replication-factor 1 >"$WORK/topic-$t.out" 2>&1 || { cat "$WORK/topic-$t.out" >&2; die "could not create topic $t"; }
done
tool kafka.admin.ConfigCommand --bootstrap-server "$KAFKA" --alter --entity-type clients --entity-name picture-kafka \
  --add-config "producer_byte_rate=$QUOTA" >"$WORK/quota-kafka.out" 2>&1 ||
  { cat "$WORK/quota-kafka.out" >&2; die "kafka-configs could not set the quota at the broker"; }
tool kafka.admin.ConfigCommand --bootstrap-server "$PROXY" --alter --entity-type clients --entity-name picture-proxy \
  --add-config "producer_byte_rate=$QUOTA" >"$WORK/quota-proxy.out" 2>&1 ||
  { cat "$WORK/quota-proxy.out" >&2; die "kafka-configs could not set the quota at the proxy"; }
tool kafka.admin.ConfigCommand --bootstrap-server "$KAFKA" --describe --entity-type clients >"$WORK/describe-kafka.out" 2>&1 ||
  { cat "$WORK/describe-kafka.out" >&2; die "kafka-configs --describe failed at the broker"; }
tool kafka.admin.ConfigCommand --bootstrap-server "$PROXY" --describe --entity-type clients >"$WORK/describe-proxy.out" 2>&1 ||
  { cat "$WORK/describe-proxy.out" >&2; die "kafka-configs --describe failed at the proxy"; }
grep -q "'picture-kafka'.*producer_byte_rate=$QUOTA" "$WORK/describe-kafka.out" ||
  die "the broker does not describe picture-kafka's quota: $(cat "$WORK/describe-kafka.out")"
! grep -q "picture-proxy" "$WORK/describe-kafka.out" ||
  die "the proxy's quota reached the broker: $(cat "$WORK/describe-kafka.out")"
grep -q "'picture-proxy'.*producer_byte_rate=$QUOTA" "$WORK/describe-proxy.out" ||
  die "the proxy does not describe picture-proxy's quota: $(cat "$WORK/describe-proxy.out")"
echo "   broker: $(grep picture-kafka "$WORK/describe-kafka.out")" >&2
echo "   proxy:  $(grep picture-proxy "$WORK/describe-proxy.out")" >&2

echo "== the producers, for $RUN_S s, at the same time: picture-kafka directly, picture-proxy through the proxy" >&2
LOAD_BEFORE="$(cut -d' ' -f1-3 /proc/loadavg)"
produce() { # <name> <bootstrap>
  printf 'bootstrap.servers=%s\nclient.id=picture-%s\n' "$2" "$1" >"$WORK/$1.properties"
  timeout $((RUN_S + 60)) java -Xms64m -Xmx256m -XX:+UseSerialGC -XX:CICompilerCount=2 -Dlog4j2.level=warn \
    -cp "$WORK/classes:$CP" ProduceTrace "$WORK/$1.properties" "picture-$1" "$RUN_S" "$RECORD_BYTES" 0 \
    "$WORK/$1.trace" >"$WORK/$1.out" 2>"$WORK/$1.err" &
  PIDS+=($!)
}
produce kafka "$KAFKA"
produce proxy "$PROXY"
STATUS=0
for pid in "${PIDS[@]}"; do wait "$pid" || STATUS=$?; done
for side in kafka proxy; do
  grep -q '"ok":true' "$WORK/$side.out" 2>/dev/null ||
    { tail -n 20 "$WORK/$side.err" >&2; die "the $side producer failed (exit $STATUS)"; }
done
PIDS=()
kill -0 "$PROXY_PID" 2>/dev/null || die "kquota-proxy exited during the run"
LOAD_AFTER="$(cut -d' ' -f1-3 /proc/loadavg)"

DATE="$(date -u '+%Y-%m-%d')"
CMD="bash kquota-proxy/bench/picture.sh ($DATE)"
"$PYTHON" "$HERE/picture.py" --kafka "$WORK/kafka.trace" --proxy "$WORK/proxy.trace" --quota "$QUOTA" --out "$OUT" \
  --subtitle "Kafka's Java producer (default settings, ${RECORD_BYTES}-byte records, as fast as it takes them), two at once for $RUN_S s:" \
  --subtitle "client id picture-kafka straight to Kafka 4.3.1, its quota set in Kafka; picture-proxy through kquota-proxy, its quota set there." \
  --subtitle "One broker on loopback, $(nproc) shared cores, load average $LOAD_BEFORE before and $LOAD_AFTER after;" \
  --subtitle "$BUILT." \
  --command "$CMD" --summary "$WORK/summary.json" || die "picture.py failed"
echo "== wrote $OUT" >&2
