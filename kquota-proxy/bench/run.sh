#!/usr/bin/env bash
# kquota-proxy against a direct connection to the same broker, in one run (a real single-node Apache
# Kafka 4.3.1 from interop/kafka/kafka.sh, the release kquota-proxy in front of it):
#
#   * throughput, produce and consume, direct, through the proxy and through forward.rs (below;
#     the broker advertises it on a listener of its own, so the clients keep to it): Kafka's
#     ProducerPerformance (acks=1; small batches: 100-byte records, linger.ms=0, the default
#     batch.size; large batches: 1,000-byte records, batch.size=262144, linger.ms=5) and
#     ConsumerPerformance (its fetch MB/s, the group join left out) reading back topics filled once
#     at the start;
#   * the proxy's CPU time (utime + stime of /proc/PID/stat) per MiB of record payload it forwarded
#     in each proxied run, and the forwarder's in each of its runs;
#   * the latency the proxy adds to a produce request: latency.py times sequential acks=1 Produce
#     requests of one 1,000-byte record, direct and through the proxy in alternating blocks;
#   * what a hop costs a consumer: fetch_latency.py times sequential 1 MiB Fetch answers, direct,
#     through the proxy and through forward.rs (Kafka's consumer has one fetch in flight per broker,
#     so this time bounds its throughput);
#   * the floor for that CPU: raw Produce requests of 16 KiB and 256 KiB (cpu.py, 5 in flight)
#     through kquota-proxy and through forward.rs, a minimal forwarder (two threads per connection
#     copying bytes; built with rustc), CPU per MiB of each.
#
# ROUNDS rounds (default 3); in each, every workload runs direct, proxied and forwarded back to
# back, the one leading in turn from round to round, and the latency probe runs once. Ratios are
# taken within a round and reported as the median and range (min–max) over the rounds (report.py).
#
# When the proxy serves AlterClientQuotas itself (its --help lists --super-users), quotas are set at
# the proxy for every user (producer_byte_rate and consumer_byte_rate of 10 GiB/s, never reached)
# and the broker is checked to have none; otherwise the proxied runs have no quotas, and the report
# says so.
#
#   bash kquota-proxy/bench/run.sh                 # about 6 minutes with ROUNDS=3 (9 with 5), once built
#   ROUNDS=5 bash kquota-proxy/bench/run.sh
#   KQUOTA_PROXY_BIN=path/to/kquota-proxy bash kquota-proxy/bench/run.sh    # that binary, not built
#   BENCH_OUT=results.md bash kquota-proxy/bench/run.sh                      # the report, also there
#   MANY=1 bash kquota-proxy/bench/run.sh          # instead: 10,000 connections, 1,000 producing
#       (MANY_CONNECTIONS, MANY_PRODUCING, MANY_RATE requests/s each, MANY_SECONDS, MANY_ROUNDS),
#       directly and through the proxy: memory per connection, added latency, CPU per MiB
#   PROFILE=1 bash kquota-proxy/bench/run.sh       # instead: system calls, context switches and CPU
#       per small request through the proxy and through forward.rs (strace -c, /proc), and the
#       proxy's top symbols (perf); PROFILE_REQUESTS (20000) of one PROFILE_BATCH-byte batch (1024)
#
# Needs cargo, python3, java 17+ and mvn. The clients are Kafka's own tools on the classpath of
# interop/kafka (a JVM of their own per run, -Xmx512m, default JIT; kafka.sh's `java` caps the JIT at
# C1, which would make the clients the bottleneck sooner). Loopback only, free ports; the broker and
# the proxy are stopped when this script exits. Kroxylicious, the peer the targets name, is not
# run: io.kroxylicious:kroxylicious-app could not be had from Maven Central here (see the
# report's last line).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT="$(pwd)"
PYTHON="${PYTHON:-python3}"
KAFKA_SH="$ROOT/interop/kafka/kafka.sh"
HERE="$ROOT/kquota-proxy/bench"
ROUNDS="${ROUNDS:-3}"
SMALL_RECORDS="${SMALL_RECORDS:-1500000}"   # x 100 bytes
LARGE_RECORDS="${LARGE_RECORDS:-500000}"    # x 1,000 bytes
LAT_BLOCKS="${LAT_BLOCKS:-10}"              # latency: blocks per path per round
LAT_SAMPLES="${LAT_SAMPLES:-300}"           # latency: requests per block
RAW_MB="${RAW_MB:-200}"                     # the forwarding floor: MiB of raw Produce per run
QUOTA_RATE=10737418240                      # 10 GiB/s: configured, never reached
STARTED=$SECONDS

die() {
  echo "kquota-proxy/bench/run.sh: error: $*" >&2
  [ -n "${LOG:-}" ] && [ -f "$LOG" ] && tail -n 30 "$LOG" >&2
  exit 1
}
command -v cargo >/dev/null 2>&1 || die "cargo not found"
command -v java >/dev/null 2>&1 || die "java not found; install a JDK 17 or later"
command -v mvn >/dev/null 2>&1 || die "mvn not found"

WORK="$(mktemp -d "${TMPDIR:-/tmp}/kquota-proxy-bench.XXXXXX")"
PROXY_PID=""
cleanup() {
  if [ -n "$PROXY_PID" ] && kill -0 "$PROXY_PID" 2>/dev/null; then kill "$PROXY_PID" 2>/dev/null || true; fi
  if [ -n "${FWD_PID:-}" ] && kill -0 "$FWD_PID" 2>/dev/null; then kill "$FWD_PID" 2>/dev/null || true; fi
  "$KAFKA_SH" stop "$WORK/kafka" || echo "bench/run.sh: could not stop the broker in $WORK/kafka" >&2
  if [ -z "${KQUOTA_KEEP_BENCH_DIR:-}" ]; then rm -rf "$WORK"; else echo "files kept in $WORK" >&2; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [ -n "${KQUOTA_PROXY_BIN:-}" ]; then
  PROXY_BIN="$KQUOTA_PROXY_BIN"
else
  echo "== building kquota-proxy (release)" >&2
  cargo build --release --bin kquota-proxy >&2
  TARGET_DIR="${CARGO_TARGET_DIR:-target}"
  case "$TARGET_DIR" in /*) ;; *) TARGET_DIR="$ROOT/$TARGET_DIR" ;; esac
  PROXY_BIN="$TARGET_DIR/release/kquota-proxy"
fi
[ -x "$PROXY_BIN" ] || die "$PROXY_BIN is not an executable"

echo "== resolving Apache Kafka (Maven Central) and building interop/kafka" >&2
"$KAFKA_SH" build >/dev/null
CP="$ROOT/interop/kafka/target/classes:$(cat "$ROOT/interop/kafka/target/classpath.txt")"
jrun() { java -Xms128m -Xmx512m -XX:+UseSerialGC -Dlog4j2.level=warn -cp "$CP" "$@"; }

MANY_CONNECTIONS="${MANY_CONNECTIONS:-10000}" MANY_PRODUCING="${MANY_PRODUCING:-1000}" MANY_RATE="${MANY_RATE:-5}"
MANY_SECONDS="${MANY_SECONDS:-30}" MANY_ROUNDS="${MANY_ROUNDS:-3}" MANY_PARTITIONS="${MANY_PARTITIONS:-10}"
if [ -n "${MANY:-}" ]; then
  # Each connection costs the proxy two descriptors (client and broker) and the broker and the
  # clients one each: raise the limit, which the broker and the proxy inherit.
  # The proxy keeps 128 for itself (listeners, store, metrics, and 32 pipes for splice).
  want=$((2 * MANY_CONNECTIONS + 160))
  if [ "$(ulimit -Hn)" != unlimited ] && [ "$(ulimit -Hn)" -lt "$want" ] && ! ulimit -Hn "$want" 2>/dev/null; then
    die "MANY=1 with $MANY_CONNECTIONS connections needs $want descriptors and the hard limit is $(ulimit -Hn), which this process may not raise; set MANY_CONNECTIONS to at most $((($(ulimit -Hn) - 160) / 2))"
  fi
  ulimit -Sn "$want"
fi

LOAD_BEFORE="$(cut -d' ' -f1-3 /proc/loadavg)"
echo "== load average before: $LOAD_BEFORE" >&2

mkdir -p "$WORK/kafka"
# The forwarder's port, chosen before the broker starts: the broker advertises it on a listener of
# its own (FORWARDED), so Kafka's clients bootstrapped through the forwarder keep to it.
FWD_PORT="$("$PYTHON" "$ROOT/interop/ports.py")" || die "no port for the forwarder"
KAFKA="$(KAFKA_FORWARDED_ADVERTISED="127.0.0.1:$FWD_PORT" "$KAFKA_SH" start "$WORK/kafka")" ||
  die "the Kafka broker did not start"
echo "   Kafka at $KAFKA" >&2

free_port() {
  "$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}
PROXY="127.0.0.1:$(free_port)"
# Broker 1's port, outside the ephemeral range: the proxy listens on it only once the cluster names
# broker 1, and an outgoing connection could take an ephemeral port before that.
BROKER_PORT="$("$PYTHON" "$ROOT/interop/ports.py")" || die "no port for the proxy's broker listener"
BASE=$((BROKER_PORT - 1))
LOG="$WORK/proxy.log"
EXTRA=()
HELP="$("$PROXY_BIN" --help 2>&1 || true)"
QUOTAS=no
if grep -q -- '--data-dir' <<<"$HELP"; then EXTRA+=(--data-dir "$WORK/proxy-data"); fi
if [ -n "${MANY:-}" ]; then EXTRA+=(--max-connections $((MANY_CONNECTIONS + 10))); fi
if grep -q -- '--super-users' <<<"$HELP"; then EXTRA+=(--super-users "User:ANONYMOUS"); QUOTAS=maybe; fi
# The proxy's own count of the bytes it took from and gave to clients, when it exports one: the
# CPU per MiB is then per MiB that crossed it (requests and answers), not only the records.
METRICS=""
if grep -q -- '--metrics-listen' <<<"$HELP"; then METRICS="127.0.0.1:$(free_port)"; EXTRA+=(--metrics-listen "$METRICS"); fi
RUST_LOG="${RUST_LOG:-info}" "$PROXY_BIN" --upstream "$KAFKA" --listen "$PROXY" --listen-base "127.0.0.1:$BASE" \
  ${EXTRA[@]+"${EXTRA[@]}"} >"$LOG" 2>&1 &
PROXY_PID=$!
deadline=$((SECONDS + 10))
until grep -q "kquota-proxy serving" "$LOG"; do
  kill -0 "$PROXY_PID" 2>/dev/null || die "kquota-proxy exited at start"
  [ "$SECONDS" -lt "$deadline" ] || die "kquota-proxy did not start within 10 s"
  sleep 0.1
done
echo "   kquota-proxy at $PROXY (pid $PROXY_PID)" >&2

QUOTA_NOTE="no quotas configured: this kquota-proxy does not serve AlterClientQuotas (its --help has no --super-users)"
if [ "$QUOTAS" = maybe ]; then
  if jrun kafka.admin.ConfigCommand --bootstrap-server "$PROXY" --alter --entity-type users --entity-default \
      --add-config "producer_byte_rate=$QUOTA_RATE,consumer_byte_rate=$QUOTA_RATE" >"$WORK/quota.out" 2>&1; then
    jrun kafka.admin.ConfigCommand --bootstrap-server "$PROXY" --describe --entity-type users --entity-default \
      >"$WORK/quota-proxy.out" 2>&1 || true
    jrun kafka.admin.ConfigCommand --bootstrap-server "$KAFKA" --describe --entity-type users --entity-default \
      >"$WORK/quota-broker.out" 2>&1 || true
    if grep -q producer_byte_rate "$WORK/quota-broker.out"; then
      die "AlterClientQuotas sent to the proxy reached the broker: $(cat "$WORK/quota-broker.out")"
    fi
    grep -q producer_byte_rate "$WORK/quota-proxy.out" ||
      die "the proxy took AlterClientQuotas but does not describe it: $(cat "$WORK/quota-proxy.out")"
    QUOTA_NOTE="quotas configured at the proxy (not the broker) for the default user: producer_byte_rate and consumer_byte_rate $QUOTA_RATE (10 GiB/s, never reached)"
    QUOTAS=yes
  else
    QUOTA_NOTE="no quotas configured: AlterClientQuotas through the proxy failed: $(tail -n 3 "$WORK/quota.out" | tr '\n' ' ')"
    QUOTAS=no
  fi
fi
echo "   $QUOTA_NOTE" >&2

# "user system" clock ticks of a process (default: the proxy).
# The floor: a minimal std-only forwarder (forward.rs), built with rustc when there is one.
FWD_PID=""
FWD=""
if command -v rustc >/dev/null 2>&1 && rustc -O -o "$WORK/forward" "$HERE/forward.rs" 2>"$WORK/forward.build"; then
  "$WORK/forward" "127.0.0.1:$FWD_PORT" "$(cat "$WORK/kafka/forwarded")" >"$WORK/forward.log" 2>&1 &
  FWD_PID=$!
  deadline=$((SECONDS + 10))
  until grep -q '^forwarding ' "$WORK/forward.log"; do
    kill -0 "$FWD_PID" 2>/dev/null || die "the forwarder exited: $(cat "$WORK/forward.log")"
    [ "$SECONDS" -lt "$deadline" ] || die "the forwarder did not start"
    sleep 0.1
  done
  FWD="$(sed -n 's/^forwarding //p' "$WORK/forward.log")"
  echo "   minimal forwarder (forward.rs) at $FWD (pid $FWD_PID)" >&2
else
  echo "   no rustc, or forward.rs did not build: the forwarding floor is left out" >&2
fi

cpu_ticks() { awk '{print $14, $15}' "/proc/${1:-$PROXY_PID}/stat"; }
# The ticks of the process a path goes through ("0 0" direct: the broker's are not counted).
path_ticks() { # <path>
  case "$1" in
    proxy) cpu_ticks "$PROXY_PID" ;;
    forward) cpu_ticks "$FWD_PID" ;;
    *) echo "0 0" ;;
  esac
}
# "total system" CPU milliseconds between two cpu_ticks readings.
cpu_ms_between() { # <ticks before> <ticks after>
  local u0 s0 u1 s1
  read -r u0 s0 <<<"$1"
  read -r u1 s1 <<<"$2"
  echo "$(((u1 - u0 + s1 - s0) * 1000 / CLK_TCK)) $(((s1 - s0) * 1000 / CLK_TCK))"
}
# The proxy's resident memory, KiB.
rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$PROXY_PID/status"; }
# Bytes from and to clients, summed, from /metrics ("null" without metrics).
wire_bytes() {
  [ -n "$METRICS" ] || { echo null; return; }
  "$PYTHON" - "$METRICS" <<'PY'
import sys, urllib.request
text = urllib.request.urlopen("http://%s/metrics" % sys.argv[1], timeout=10).read().decode()
total = None
for line in text.splitlines():
    name = line.split(" ")[0]
    if name in ("kquota_proxy_bytes_from_clients_total", "kquota_proxy_bytes_to_clients_total"):
        total = (total or 0) + float(line.split()[-1])
print("null" if total is None else int(total))
PY
}
CLK_TCK="$(getconf CLK_TCK)"
RESULTS="$WORK/results.jsonl"
: >"$RESULTS"

topic() { # <name>
  jrun org.apache.kafka.tools.TopicCommand --bootstrap-server "$KAFKA" --create --topic "$1" --partitions 1 \
    --replication-factor 1 >/dev/null 2>&1 || die "could not create topic $1"
}

# ProducerPerformance's last line: "N records sent, R records/sec (M MB/sec), ..."
produce() { # <workload> <path> <round> <bootstrap> <records> <size> <props...>
  local workload="$1" path="$2" round="$3" bootstrap="$4" records="$5" size="$6"
  shift 6
  local before after out wire0 wire1
  wire0="$(wire_bytes)"
  before="$(path_ticks "$path")"
  out="$(jrun org.apache.kafka.tools.ProducerPerformance --topic "bench-$workload" --num-records "$records" \
    --record-size "$size" --throughput -1 --producer-props "bootstrap.servers=$bootstrap" acks=1 "$@" 2>&1)" ||
    { echo "$out" | tail -n 5 >&2; die "ProducerPerformance failed ($workload, $path)"; }
  after="$(path_ticks "$path")"
  wire1="$(wire_bytes)"
  local line
  line="$(grep 'records sent' <<<"$out" | tail -n 1)"
  [ -n "$line" ] || { echo "$out" | tail -n 5 >&2; die "no result from ProducerPerformance ($workload, $path)"; }
  record "$workload" "$path" "$round" "$(sed -E 's/.*\(([0-9.]+) MB\/sec\).*/\1/' <<<"$line")" \
    "$(awk -v n="$records" -v s="$size" 'BEGIN { print n * s / 1048576 }')" "$before" "$after" "$wire0" "$wire1"
  echo "   round $round $workload $path: $line" >&2
}

# ConsumerPerformance's CSV line: ..., data.consumed.in.MB, MB.sec, nMsg, nMsg.sec, rebalance ms,
# fetch ms, fetch.MB.sec, fetch.nMsg.sec
consume() { # <workload> <path> <round> <bootstrap> <topic> <records>
  local workload="$1" path="$2" round="$3" bootstrap="$4" topic="$5" records="$6"
  local before after out line wire0 wire1
  wire0="$(wire_bytes)"
  before="$(path_ticks "$path")"
  out="$(jrun org.apache.kafka.tools.ConsumerPerformance --bootstrap-server "$bootstrap" --topic "$topic" \
    --num-records "$records" --group "bench-$workload-$path-$round-$RANDOM" --timeout 30000 2>&1)" ||
    { echo "$out" | tail -n 5 >&2; die "ConsumerPerformance failed ($workload, $path)"; }
  after="$(path_ticks "$path")"
  wire1="$(wire_bytes)"
  line="$(grep -E '^[0-9]{4}-' <<<"$out" | tail -n 1)"
  [ -n "$line" ] || { echo "$out" | tail -n 5 >&2; die "no result from ConsumerPerformance ($workload, $path)"; }
  local mb fetch_mb_s
  mb="$(awk -F', ' '{print $3}' <<<"$line")"
  fetch_mb_s="$(awk -F', ' '{print $9}' <<<"$line")"
  record "$workload" "$path" "$round" "$fetch_mb_s" "$mb" "$before" "$after" "$wire0" "$wire1"
  echo "   round $round $workload $path: $mb MB at $fetch_mb_s MB/s (fetch time)" >&2
}

record() { # <workload> <path> <round> <mb_s> <mb> <ticks before> <ticks after> <wire before> <wire after>
  local cpu_ms=null sys_ms=null wire_mb=null
  [ "$2" = direct ] || read -r cpu_ms sys_ms <<<"$(cpu_ms_between "$6" "$7")"
  if [ "$2" = proxy ] && [ "$8" != null ]; then
    wire_mb="$(awk -v a="$8" -v b="$9" 'BEGIN { print (b - a) / 1048576 }')"
  fi
  printf '{"kind": "throughput", "workload": "%s", "path": "%s", "round": %d, "mb_s": %s, "mb": %s, "cpu_ms": %s, "sys_ms": %s, "wire_mb": %s}\n' \
    "$1" "$2" "$3" "$4" "$5" "$cpu_ms" "$sys_ms" "$wire_mb" >>"$RESULTS"
}

# Raw Produce requests of a fixed size (cpu.py) through a forwarding process; its CPU per MiB sent.
raw() { # <round> <label> <pid> <addr> <requests> <batch bytes>
  local before after out
  before="$(cpu_ticks "$3")"
  out="$("$PYTHON" "$HERE/cpu.py" "$4" bench-raw "$5" "$6")" || die "cpu.py failed through $2"
  after="$(cpu_ticks "$3")"
  local cpu_ms sys_ms
  read -r cpu_ms sys_ms <<<"$(cpu_ms_between "$before" "$after")"
  printf '{"kind": "raw", "round": %d, "path": "%s", "batch": %d, "cpu_ms": %d, "sys_ms": %d, "result": %s}\n' \
    "$1" "$2" "$6" "$cpu_ms" "$sys_ms" "$out" >>"$RESULTS"
  echo "   round $1 raw produce, $6-byte batches, through $2: $out, $cpu_ms ms CPU" >&2
}
floor() { # <round>
  [ -n "$FWD" ] || return 0
  local b n first second
  for b in 16384 262144; do
    n=$((RAW_MB * 1048576 / b))
    first=(kquota-proxy "$PROXY_PID" "$PROXY")
    second=(forward "$FWD_PID" "$FWD")
    if [ $(($1 % 2)) = 0 ]; then
      raw "$1" "${second[@]}" "$n" "$b"
      raw "$1" "${first[@]}" "$n" "$b"
    else
      raw "$1" "${first[@]}" "$n" "$b"
      raw "$1" "${second[@]}" "$n" "$b"
    fi
  done
}

both() { # <round> <function> <workload> <args before bootstrap...> -- <args after...>
  local round="$1" fn="$2" workload="$3"
  shift 3
  # Direct, through the proxy and through the minimal forwarder (when built), the one leading in
  # turn from round to round.
  local paths=(direct proxy)
  [ -z "$FWD" ] || paths+=(forward)
  local lead=$(((round - 1) % ${#paths[@]}))
  paths=("${paths[@]:$lead}" "${paths[@]:0:$lead}")
  local p
  for p in "${paths[@]}"; do
    local addr="$KAFKA"
    [ "$p" = proxy ] && addr="$PROXY"
    [ "$p" = forward ] && addr="$FWD"
    "$fn" "$workload" "$p" "$round" "$addr" "$@"
  done
}

# Context switches of a process, all its threads, voluntary and involuntary.
ctx_switches() {
  cat /proc/"$1"/task/*/status 2>/dev/null | awk '/^(non)?voluntary_ctxt_switches:/ {n += $2} END {print n}'
}

# PROFILE=1: what one small request costs each forwarding process, and where the proxy's CPU goes.
profile() {
  topic bench-profile
  local n="${PROFILE_REQUESTS:-20000}" b="${PROFILE_BATCH:-1024}" args=() name pid addr
  "$PYTHON" "$HERE/cpu.py" "$PROXY" bench-profile 2000 "$b" 1 >/dev/null || die "cpu.py failed (warm-up)"
  for name in kquota-proxy forward; do
    pid="$PROXY_PID" addr="$PROXY"
    [ "$name" = forward ] && { pid="$FWD_PID" addr="$FWD"; }
    [ -n "$addr" ] || continue
    local c0 c1 t0 t1 cpu_ms
    c0="$(ctx_switches "$pid")" t0="$(cpu_ticks "$pid")"
    "$PYTHON" "$HERE/cpu.py" "$addr" bench-profile "$n" "$b" 1 >"$WORK/profile-$name.cpu" || die "cpu.py failed through $name"
    c1="$(ctx_switches "$pid")" t1="$(cpu_ticks "$pid")"
    read -r cpu_ms _ <<<"$(cpu_ms_between "$t0" "$t1")"
    echo "   $name: $(cat "$WORK/profile-$name.cpu")" >&2
    strace -c -f -q -p "$pid" -o "$WORK/profile-$name.strace" &
    local strace_pid=$!
    sleep 1
    "$PYTHON" "$HERE/cpu.py" "$addr" bench-profile "$n" "$b" 1 >/dev/null || die "cpu.py failed through $name (strace)"
    kill -INT "$strace_pid"
    wait "$strace_pid" || true
    args+=("$name=$WORK/profile-$name.strace:$((c1 - c0)):$cpu_ms")
  done
  if command -v perf >/dev/null 2>&1; then
    perf record -q -F 1999 -g -o "$WORK/perf.data" -p "$PROXY_PID" >"$WORK/perf.log" 2>&1 &
    local perf_pid=$!
    sleep 1
    "$PYTHON" "$HERE/cpu.py" "$PROXY" bench-profile "$n" "$b" 1 >/dev/null || die "cpu.py failed (perf)"
    kill -INT "$perf_pid"
    wait "$perf_pid" || true
    perf report -q -i "$WORK/perf.data" --stdio --no-children --sort dso,symbol -g none --percent-limit 1 \
      >"$WORK/perf.txt" 2>>"$WORK/perf.log" || echo "   perf report failed: $(tail -n 3 "$WORK/perf.log")" >&2
    [ -s "$WORK/perf.txt" ] && args+=("$WORK/perf.txt")
  else
    echo "   no perf: where the CPU goes is left out" >&2
  fi
  echo
  echo "kquota-proxy profile, $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown): $n Produce requests of one $b-byte batch (acks=1), one in flight (cpu.py), through each process; $QUOTA_NOTE; load average $(cut -d' ' -f1-3 /proc/loadavg)."
  echo
  "$PYTHON" "$HERE/profile.py" "$n" "${args[@]}"
}

# MANY=1: MANY_CONNECTIONS connections at once, MANY_PRODUCING of them producing, directly and
# through the proxy (many.py), MANY_ROUNDS rounds in alternating order: the proxy's memory per
# connection, the latency it adds, and its CPU per MiB.
many_run() { # <round> <path> <addr>
  local round="$1" path="$2" addr="$3" rss0 rss1 open done_line t0 t1 cpu_ms=null
  # The broker lets go of the last run's connections first: both runs at once would be twice the
  # descriptors, and a broker busy closing answers late.
  local port="${KAFKA##*:}" deadline=$((SECONDS + 180))
  while [ "$(ss -Htn "( sport = :$port )" | wc -l)" -gt 100 ]; do
    [ "$SECONDS" -lt "$deadline" ] || die "the broker still holds $(ss -Htn "( sport = :$port )" | wc -l) connections after 180 s"
    sleep 1
  done
  rss0="$(rss_kib)"
  coproc MANYPY { "$PYTHON" "$HERE/many.py" "$addr" bench-many "$MANY_PARTITIONS" "$MANY_CONNECTIONS" \
    "$MANY_PRODUCING" "$MANY_RATE" "$MANY_SECONDS" 2>"$WORK/many.err"; }
  read -r open <&"${MANYPY[0]}" || die "many.py failed through $path: $(cat "$WORK/many.err")"
  # Settled: what the idle connections hold, not what opening them allocated on the way.
  sleep 2
  rss1="$(rss_kib)"
  t0="$(cpu_ticks)"
  echo go >&"${MANYPY[1]}"
  read -r done_line <&"${MANYPY[0]}" || die "many.py failed through $path: $(cat "$WORK/many.err")"
  t1="$(cpu_ticks)"
  wait "$MANYPY_PID" || die "many.py failed through $path: $(cat "$WORK/many.err")"
  [ "$path" = proxy ] && read -r cpu_ms _ <<<"$(cpu_ms_between "$t0" "$t1")"
  printf '{"kind": "many", "round": %d, "path": "%s", "rss_before_kib": %d, "rss_open_kib": %d, "cpu_ms": %s, "open": %s, "done": %s}\n' \
    "$round" "$path" "$rss0" "$rss1" "$cpu_ms" "$open" "$done_line" >>"$RESULTS"
  echo "   round $round many connections, $path: $open $done_line; proxy RSS $((rss0 / 1024)) -> $((rss1 / 1024)) MiB" >&2
}

many() {
  jrun org.apache.kafka.tools.TopicCommand --bootstrap-server "$KAFKA" --create --topic bench-many \
    --partitions "$MANY_PARTITIONS" --replication-factor 1 >/dev/null 2>&1 || die "could not create topic bench-many"
  local round p
  for round in $(seq 1 "$MANY_ROUNDS"); do
    echo "== round $round of $MANY_ROUNDS (load average $(cut -d' ' -f1-3 /proc/loadavg))" >&2
    local paths=(direct proxy)
    [ $((round % 2)) = 0 ] && paths=(proxy direct)
    for p in "${paths[@]}"; do
      if [ "$p" = proxy ]; then many_run "$round" proxy "$PROXY"; else many_run "$round" direct "$KAFKA"; fi
    done
  done
  echo
  echo "kquota-proxy with many connections, $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown): $MANY_CONNECTIONS connections, $MANY_PRODUCING of them producing $MANY_RATE Produce requests a second each (one 1 KiB batch, acks=1, one in flight) for $MANY_SECONDS s, to $MANY_PARTITIONS partitions (many.py); $QUOTA_NOTE; load average $LOAD_BEFORE before, $(cut -d' ' -f1-3 /proc/loadavg) after."
  echo
  "$PYTHON" "$HERE/report.py" --many "$RESULTS"
  echo
  echo "Command: \`MANY=1 MANY_ROUNDS=$MANY_ROUNDS MANY_CONNECTIONS=$MANY_CONNECTIONS MANY_PRODUCING=$MANY_PRODUCING MANY_RATE=$MANY_RATE MANY_SECONDS=$MANY_SECONDS bash kquota-proxy/bench/run.sh\` ($((SECONDS - STARTED)) s)."
}

if [ -n "${PROFILE:-}" ]; then
  profile
  exit 0
fi
if [ -n "${MANY:-}" ]; then
  many
  exit 0
fi

echo "== topics, and the records the consume runs read (written once, directly)" >&2
for t in produce-small produce-large consume-small consume-large latency raw; do topic "bench-$t"; done
jrun org.apache.kafka.tools.ProducerPerformance --topic bench-consume-small --num-records "$SMALL_RECORDS" \
  --record-size 100 --throughput -1 --producer-props "bootstrap.servers=$KAFKA" acks=1 linger.ms=5 >/dev/null 2>&1 ||
  die "could not fill bench-consume-small"
jrun org.apache.kafka.tools.ProducerPerformance --topic bench-consume-large --num-records "$LARGE_RECORDS" \
  --record-size 1000 --throughput -1 --producer-props "bootstrap.servers=$KAFKA" acks=1 linger.ms=5 batch.size=262144 \
  >/dev/null 2>&1 || die "could not fill bench-consume-large"

echo "== warm-up (not counted): one small produce each way" >&2
jrun org.apache.kafka.tools.ProducerPerformance --topic bench-produce-small --num-records 200000 --record-size 100 \
  --throughput -1 --producer-props "bootstrap.servers=$KAFKA" acks=1 >/dev/null 2>&1 || die "warm-up failed"
jrun org.apache.kafka.tools.ProducerPerformance --topic bench-produce-small --num-records 200000 --record-size 100 \
  --throughput -1 --producer-props "bootstrap.servers=$PROXY" acks=1 >/dev/null 2>&1 || die "warm-up through the proxy failed"

for round in $(seq 1 "$ROUNDS"); do
  echo "== round $round of $ROUNDS (load average $(cut -d' ' -f1-3 /proc/loadavg))" >&2
  both "$round" produce produce-small "$SMALL_RECORDS" 100 linger.ms=0
  both "$round" produce produce-large "$LARGE_RECORDS" 1000 linger.ms=5 batch.size=262144
  both "$round" consume consume-small bench-consume-small "$SMALL_RECORDS"
  both "$round" consume consume-large bench-consume-large "$LARGE_RECORDS"
  floor "$round"
  "$PYTHON" "$HERE/latency.py" "$KAFKA" "$PROXY" bench-latency 1 "$LAT_BLOCKS" "$LAT_SAMPLES" 1000 ${FWD:+"$FWD"} >"$WORK/latency.out" ||
    die "latency.py failed"
  sed "s/^{/{\"kind\": \"latency\", \"record_bytes\": 1000, /; s/\"round\": 1/\"round\": $round/" "$WORK/latency.out" >>"$RESULTS"
  echo "   round $round latency: $(cat "$WORK/latency.out")" >&2
  fetch_paths=("direct=$KAFKA" "kquota-proxy=$PROXY")
  [ -z "$FWD" ] || fetch_paths+=("forward=$FWD")
  "$PYTHON" "$HERE/fetch_latency.py" bench-consume-large 4 25 "${fetch_paths[@]}" >"$WORK/fetch.out" ||
    die "fetch_latency.py failed"
  printf '{"kind": "fetch", "round": %d, "paths": %s}\n' "$round" "$(cat "$WORK/fetch.out")" >>"$RESULTS"
  echo "   round $round 1 MiB fetch: $(cat "$WORK/fetch.out")" >&2
done
kill -0 "$PROXY_PID" 2>/dev/null || die "kquota-proxy exited during the benchmark"
RSS="$(rss_kib)"
HWM="$(awk '/^VmHWM:/ {print $2}' "/proc/$PROXY_PID/status")"
LOAD_AFTER="$(cut -d' ' -f1-3 /proc/loadavg)"

REPORT="$WORK/report.md"
{
  if [ -n "${KQUOTA_PROXY_BIN:-}" ]; then
    built="the binary $PROXY_BIN (KQUOTA_PROXY_BIN)"
  else
    built="kquota-proxy built from commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)"
    git -C "$ROOT" diff --quiet HEAD -- kquota-proxy/src kquota-proxy/Cargo.toml src Cargo.toml Cargo.lock 2>/dev/null ||
      built="$built, with changes in the work tree"
  fi
  echo "kquota-proxy benchmark, $(date -u '+%Y-%m-%d %H:%M UTC'), $built"
  echo
  echo "Machine: $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), load average $LOAD_BEFORE before, $LOAD_AFTER after; a single-node Kafka 4.3.1 (KAFKA_HEAP ${KAFKA_HEAP:--Xmx512m}), the clients and the proxy on the same machine, over loopback."
  echo "Proxy: $QUOTA_NOTE; default limits$([ -n "$METRICS" ] && echo "; /metrics on (read before and after each proxied run, outside its CPU count)"); RSS after the run $((RSS / 1024)) MiB (peak $((HWM / 1024)) MiB)."
  echo
  "$PYTHON" "$HERE/report.py" "$RESULTS"
  echo
  echo "Kroxylicious: not run. Tried from Maven Central with 'mvn dependency:get': io.kroxylicious:kroxylicious-app:0.26.0:tar.gz:bin, :0.26.0 (jar), :0.17.1:tar.gz:bin and :0.17.1 (jar); each failed with 'Could not find artifact ... in central' (not even the pom is served)."
  echo
  echo "Command: \`ROUNDS=$ROUNDS SMALL_RECORDS=$SMALL_RECORDS LARGE_RECORDS=$LARGE_RECORDS LAT_BLOCKS=$LAT_BLOCKS LAT_SAMPLES=$LAT_SAMPLES RAW_MB=$RAW_MB bash kquota-proxy/bench/run.sh\` ($((SECONDS - STARTED)) s)."
} >"$REPORT"
cat "$REPORT"
if [ -n "${BENCH_OUT:-}" ]; then
  cp "$REPORT" "$BENCH_OUT"
  cp "$RESULTS" "$BENCH_OUT.jsonl"
fi
