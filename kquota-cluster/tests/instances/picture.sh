#!/usr/bin/env bash
# The picture in docs/cluster.md: one cluster-wide bps limit split by three kquota-proxy instances
# under a skewed load, from a real run.
#
# One real Apache Kafka 4.3.1 broker (interop/kafka/kafka.sh) and three release kquota-proxy
# instances in front of it, each with --cluster-bootstrap <that broker> (as run.sh and instances.py
# start them: one configuration log, one membership, bps usage shared). {user=ANONYMOUS,
# client-id=picture-split} producer_byte_rate:bps = LIMIT (3,000,000 bytes/s cluster-wide) is set
# at inst-0 (AlterClientQuotas v0 from picture.py: Kafka's kafka-configs refuses a key with a
# colon) and waited for at all three (kafka-configs --describe). Then one producer per proxy, all
# with that client id, offers 2.8 / 0.8 / 0.4 MB/s for SECONDS (75) at the same time, as test 6 and
# 7 of run.sh load them (16 KiB records, acks=1, linger.ms=5; an offer whose turn comes while half a
# second of its rate is unacknowledged is skipped, not queued): Kafka's Java producer through
# kquota-proxy/bench/ProduceTrace.java, which traces the bytes acknowledged every 100 ms. Every
# 0.5 s each proxy's /metrics gives the bucket's limit there (its part of LIMIT). picture.py draws
# each proxy's throughput and their sum against the limit, and each proxy's part of it, into an
# SVG, and prints the run's numbers (measured from 15 s on).
#
#   bash kquota-cluster/tests/instances/picture.sh          # writes docs/cluster-split.svg; ~2.5 min once built
#   PICTURE_OUT=/tmp/x.svg bash kquota-cluster/tests/instances/picture.sh
#   SECONDS_RUN=75 LIMIT=3000000                             # the defaults
#   KQUOTA_PROXY_BIN=path/to/kquota-proxy                    # that binary, not built; the picture names
#   KQUOTA_PROXY_BUILT="kquota-proxy built from ..."         # it so (default: by its path)
#   KQUOTA_KEEP_PICTURE_DIR=1                                # keep the traces, samples and logs
#
# Needs cargo, python3 (its standard library only), java 17+ (javac) and mvn (Maven Central on the
# first run). Every missing dependency, and a broker or proxy that does not come up, fails the run
# with a message. Bounded: the run after the build is stopped after PICTURE_TIMEOUT seconds
# (default 600). Loopback only, free ports; the broker, the proxies, the producers and the sampler
# are stopped when this script exits, however it exits.
set -euo pipefail
cd "$(dirname "$0")/../../.."
ROOT="$(pwd)"
PYTHON="${PYTHON:-python3}"
export PYTHONDONTWRITEBYTECODE=1
KAFKA_SH="$ROOT/interop/kafka/kafka.sh"
HERE="$ROOT/kquota-cluster/tests/instances"
BENCH="$ROOT/kquota-proxy/bench"
OUT="${PICTURE_OUT:-$ROOT/docs/cluster-split.svg}"
RUN_S="${SECONDS_RUN:-75}"
LIMIT="${LIMIT:-3000000}"
RATES=(2800000 800000 400000)
RECORD_BYTES=16384
CLIENT_ID=picture-split
FROM_S=15
LIMIT_S="${PICTURE_TIMEOUT:-600}"

die() {
  echo "kquota-cluster/tests/instances/picture.sh: error: $*" >&2
  exit 1
}
command -v "$PYTHON" >/dev/null 2>&1 || die "$PYTHON not found"
command -v java >/dev/null 2>&1 || die "java not found; install a JDK 17 or later (Debian: openjdk-17-jdk-headless)"
command -v javac >/dev/null 2>&1 || die "javac not found; install a JDK 17 or later, not only a JRE"
command -v mvn >/dev/null 2>&1 || die "mvn not found; install Maven (Debian: maven)"
command -v timeout >/dev/null 2>&1 || die "timeout (coreutils) not found"
[ -n "${KQUOTA_PROXY_BIN:-}" ] || command -v cargo >/dev/null 2>&1 || die "cargo not found (or set KQUOTA_PROXY_BIN)"

WORK="$(mktemp -d "${TMPDIR:-/tmp}/kquota-split-picture.XXXXXX")"
PIDS=()
WATCHDOG=""
cleanup() {
  local pid
  for pid in ${PIDS[@]+"${PIDS[@]}"}; do
    kill -0 "$pid" 2>/dev/null && kill -TERM "$pid" 2>/dev/null || true
  done
  # A proxy on the cluster writes its membership tombstone as it stops: up to 10 s, then SIGKILL.
  local deadline=$((SECONDS + 10))
  for pid in ${PIDS[@]+"${PIDS[@]}"}; do
    while kill -0 "$pid" 2>/dev/null && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.2; done
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
  git -C "$ROOT" diff --quiet HEAD -- kquota-proxy/src kquota-cluster/src src Cargo.lock kquota-wire kquota-host kquota-store 2>/dev/null ||
    BUILT="$BUILT with changes in the work tree"
  echo "== building kquota-proxy (release)" >&2
  cargo build --release --bin kquota-proxy >&2 || die "cargo could not build kquota-proxy"
  TARGET_DIR="${CARGO_TARGET_DIR:-target}"
  case "$TARGET_DIR" in /*) ;; *) TARGET_DIR="$ROOT/$TARGET_DIR" ;; esac
  PROXY_BIN="$TARGET_DIR/release/kquota-proxy"
fi
[ -x "$PROXY_BIN" ] || die "$PROXY_BIN is not an executable"
"$PROXY_BIN" --help 2>&1 | grep -q -- '--cluster-bootstrap' || die "$PROXY_BIN has no --cluster-bootstrap"

# From here on the run is bounded.
# shellcheck disable=SC2016
(trap 'kill "$s" 2>/dev/null; exit 0' TERM; sleep "$LIMIT_S" & s=$!; wait "$s" && kill -TERM $$ 2>/dev/null) >/dev/null 2>&1 &
WATCHDOG=$!

echo "== resolving Apache Kafka (Maven Central) and building interop/kafka" >&2
"$KAFKA_SH" build >/dev/null || die "interop/kafka could not be built (Java and Maven, Maven Central)"
CP="$ROOT/interop/kafka/target/classes:$(cat "$ROOT/interop/kafka/target/classpath.txt")"
mkdir -p "$WORK/classes"
javac -nowarn -cp "$CP" -d "$WORK/classes" "$BENCH/ProduceTrace.java" 2>"$WORK/javac.log" ||
  { cat "$WORK/javac.log" >&2; die "ProduceTrace.java did not compile"; }
tool() { timeout 120 "$KAFKA_SH" java "$@"; }

mkdir -p "$WORK/kafka"
KAFKA="$("$KAFKA_SH" start "$WORK/kafka")" || die "the Kafka broker did not start"
echo "   Kafka at $KAFKA" >&2
tool org.apache.kafka.tools.TopicCommand --bootstrap-server "$KAFKA" --create --topic instances-picture --partitions 1 \
  --replication-factor 1 >"$WORK/topic.out" 2>&1 || { cat "$WORK/topic.out" >&2; die "could not create the topic"; }

# Three ports per proxy (client listener, broker 1's listener, metrics), outside the ephemeral range.
read -r -a PORTS <<<"$("$PYTHON" - "$ROOT/interop" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
from ports import listen_ports
used = set()
print(" ".join(str(listen_ports(1, used)) for _ in range(9)))
PY
)" || die "no free ports"
[ "${#PORTS[@]}" = 9 ] || die "no free ports"
ADDRS=()
METRICS=()
for i in 0 1 2; do
  port="${PORTS[$((3 * i))]}" base=$((PORTS[3 * i + 1] - 1)) metrics="${PORTS[$((3 * i + 2))]}"
  ADDRS+=("127.0.0.1:$port")
  METRICS+=("127.0.0.1:$metrics")
  # instances.py's Proxy.argv (with its defaults for the alteration timeout and grace).
  RUST_LOG=info "$PROXY_BIN" --upstream "$KAFKA" --listen "127.0.0.1:$port" --listen-base "127.0.0.1:$base" \
    --super-users User:ANONYMOUS --metrics-listen "127.0.0.1:$metrics" --cluster-bootstrap "$KAFKA" \
    --instance-id "inst-$i" --data-dir "$WORK/inst-$i-data" >"$WORK/inst-$i.log" 2>&1 &
  PIDS+=($!)
done
ready() { # <metrics address>: ready, and counting three live instances
  "$PYTHON" - "$1" <<'PY'
import re, sys, urllib.request
try:
    urllib.request.urlopen("http://%s/readyz" % sys.argv[1], timeout=2).read()
    text = urllib.request.urlopen("http://%s/metrics" % sys.argv[1], timeout=2).read().decode()
except OSError:
    sys.exit(1)
m = re.search(r"^kquota_cluster_members (\S+)$", text, re.M)
sys.exit(0 if m and float(m.group(1)) == 3 else 1)
PY
}
deadline=$((SECONDS + 90))
for i in 0 1 2; do
  until ready "${METRICS[$i]}"; do
    kill -0 "${PIDS[$i]}" 2>/dev/null || { tail -n 20 "$WORK/inst-$i.log" >&2; die "inst-$i exited at start"; }
    [ "$SECONDS" -lt "$deadline" ] ||
      { tail -n 20 "$WORK/inst-$i.log" >&2; die "inst-$i was not ready with three members within 90 s"; }
    sleep 0.3
  done
  echo "   inst-$i on ${ADDRS[$i]} (metrics ${METRICS[$i]}): ready, three members" >&2
done

echo "== {user=ANONYMOUS, client-id=$CLIENT_ID} producer_byte_rate:bps=$LIMIT, set at inst-0" >&2
ENTITY=(--entity-type users --entity-name ANONYMOUS --entity-type clients --entity-name "$CLIENT_ID")
# AlterClientQuotas by hand: Kafka's kafka-configs refuses a key with a colon; it describes them.
"$PYTHON" "$HERE/picture.py" alter "${ADDRS[0]}" ANONYMOUS "$CLIENT_ID" "producer_byte_rate:bps" "$LIMIT" ||
  die "could not set the bps limit at inst-0"
for i in 0 1 2; do
  deadline=$((SECONDS + 30))
  until tool kafka.admin.ConfigCommand --bootstrap-server "${ADDRS[$i]}" --describe "${ENTITY[@]}" \
      >"$WORK/describe-$i.out" 2>&1 && grep -q "producer_byte_rate:bps=$LIMIT" "$WORK/describe-$i.out"; do
    [ "$SECONDS" -lt "$deadline" ] || { cat "$WORK/describe-$i.out" >&2; die "inst-$i does not describe the limit"; }
    sleep 1
  done
  echo "   inst-$i: $(grep -o "Quota configs.*" "$WORK/describe-$i.out")" >&2
done

echo "== producers offering ${RATES[*]} bytes/s through inst-0..2 for $RUN_S s" >&2
LOAD_BEFORE="$(cut -d' ' -f1-3 /proc/loadavg)"
"$PYTHON" "$HERE/picture.py" sample "$WORK/samples.jsonl" "$((RUN_S + 3))" "producer_byte_rate:bps" ANONYMOUS \
  "$CLIENT_ID" "${METRICS[@]}" >"$WORK/sampler.log" 2>&1 &
SAMPLER=$!
PIDS+=("$SAMPLER")
PRODUCERS=()
for i in 0 1 2; do
  printf 'bootstrap.servers=%s\nclient.id=%s\nacks=1\nlinger.ms=5\ncompression.type=none\n' "${ADDRS[$i]}" "$CLIENT_ID" \
    >"$WORK/p$i.properties"
  timeout $((RUN_S + 60)) java -Xms64m -Xmx256m -XX:+UseSerialGC -XX:CICompilerCount=2 -Dlog4j2.level=warn \
    -cp "$WORK/classes:$CP" ProduceTrace "$WORK/p$i.properties" instances-picture "$RUN_S" "$RECORD_BYTES" \
    "${RATES[$i]}" "$WORK/p$i.trace" >"$WORK/p$i.out" 2>"$WORK/p$i.err" &
  PRODUCERS+=($!)
  PIDS+=($!)
done
for i in 0 1 2; do
  wait "${PRODUCERS[$i]}" || true
  grep -q '"ok":true' "$WORK/p$i.out" 2>/dev/null || { tail -n 20 "$WORK/p$i.err" >&2; die "the producer through inst-$i failed"; }
done
wait "$SAMPLER" || die "the metrics sampler failed: $(tail -n 5 "$WORK/sampler.log")"
for i in 0 1 2; do kill -0 "${PIDS[$i]}" 2>/dev/null || die "inst-$i exited during the run"; done
LOAD_AFTER="$(cut -d' ' -f1-3 /proc/loadavg)"

DATE="$(date -u '+%Y-%m-%d')"
"$PYTHON" "$HERE/picture.py" draw --samples "$WORK/samples.jsonl" --trace "$WORK/p0.trace" --trace "$WORK/p1.trace" \
  --trace "$WORK/p2.trace" --offered "${RATES[0]}" --offered "${RATES[1]}" --offered "${RATES[2]}" --limit "$LIMIT" \
  --from "$FROM_S" --out "$OUT" \
  --subtitle "Three kquota-proxy instances (--cluster-bootstrap) on one Kafka 4.3.1 broker; {user=ANONYMOUS, client-id=$CLIENT_ID}" \
  --subtitle "producer_byte_rate:bps=$LIMIT set once; one Java producer per proxy with that client id (16 KiB records, acks=1), $RUN_S s." \
  --subtitle "Loopback, $(nproc) shared cores, load average $LOAD_BEFORE before and $LOAD_AFTER after; $BUILT." \
  --command "bash kquota-cluster/tests/instances/picture.sh ($DATE)" --summary "$WORK/summary.json" ||
  die "picture.py failed"
echo "== wrote $OUT" >&2
