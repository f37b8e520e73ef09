#!/usr/bin/env bash
# A broker's produce throughput under client quotas: Kafka 4.3.1's DefaultQuotaCallback against kquota's
# KIP-257 callback (io.kquota.kafka.KquotaCallback, kquota.sub.quota.policy=kafka, default memo).
#
#   bash kquota-kafka/bench/producer.sh
#
# Two single-node KRaft brokers on loopback, identical but for client.quota.callback.class, both up for
# the whole run (the idle one costs both rounds alike). Each gets the same quotas: {client-id=<default>}
# producer_byte_rate=1e12 and request_percentage=1e6 (kafka-configs, ConfigCommand), so the producer is
# never throttled, and ENTITIES entities of the three other shapes ({user, client-id}, {user},
# {client-id}, a third each, Admin.alterClientQuotas in batches of 1,000), so Kafka's default takes its
# full lookup on every request and both brokers meter PRODUCE and REQUEST quotas. Then Kafka's
# ProducerPerformance (RECORDS records of 100 B, acks=1, linger.ms=0, batch.size=BATCH_SIZE) against
# each broker in turn: one warm-up round each, then ROUNDS rounds in ABBA order (odd rounds default
# first, even rounds kquota first). Prints records/s and MB/s per round and broker, the broker
# process's CPU time per 1,000 records (/proc/PID/stat: steadier than throughput on a shared
# machine, where the same round's throughput moves by 20 %), the ratios kquota/default per round,
# their median and min-max, and the producer's throttle time (must be 0).
#
# Environment: ROUNDS (default 8), RECORDS (default 1000000), BATCH_SIZE (default 2048: many requests),
# ENTITIES (default 10000), KEEP=1 keeps the work directory (logs), BENCH_TIMEOUT (seconds, default 840:
# the whole run, builds included, is killed after it), CLUSTER=1 runs kquota's broker in the cluster mode
# (kquota.cluster.bootstrap.servers at itself, the metrics reporter installed: the log followed, the
# membership, usage sharing and the sensor feed running).
# Bounded: about 8-12 minutes on 2 shared cores. Needs cargo, java 17+, mvn, python3.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT="$(pwd)"
HERE="$ROOT/kquota-kafka/bench"
ROUNDS="${ROUNDS:-8}"
RECORDS="${RECORDS:-1000000}"
BATCH_SIZE="${BATCH_SIZE:-2048}"
ENTITIES="${ENTITIES:-10000}"
BENCH_TIMEOUT="${BENCH_TIMEOUT:-840}"
BEGIN=$SECONDS
# The broker's JVM as interop/kafka/kafka.sh runs it.
BROKER_JVM=(-Xmx512m -Xms64m -XX:+UseSerialGC -XX:CICompilerCount=2 -Djava.awt.headless=true)
# The producer with the full JIT (kafka.sh java stops at C1, which would make the client the bottleneck).
CLIENT_JVM=(-Xmx512m -XX:+UseSerialGC -XX:CICompilerCount=2 -Dlog4j2.level=warn)

die() {
  echo "kquota-kafka/bench/producer.sh: error: $*" >&2
  exit 1
}
for tool in cargo java mvn python3; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool not found"
done

# The whole run under one bound: re-run this script under timeout once.
if [ -z "${KQUOTA_PRODUCER_BENCH_INNER:-}" ]; then
  export KQUOTA_PRODUCER_BENCH_INNER=1
  exec timeout --signal=TERM --kill-after=30 "$BENCH_TIMEOUT" bash "$0" "$@"
fi

WORK="$(mktemp -d "${TMPDIR:-/tmp}/kquota-producer-bench.XXXXXX")"
PIDS=()
cleanup() {
  local pid
  for pid in "${PIDS[@]}"; do
    kill -TERM "$pid" 2>/dev/null || true
  done
  for pid in "${PIDS[@]}"; do
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -KILL -- "-$pid" 2>/dev/null || true
  done
  if [ -n "${KEEP:-}" ]; then echo "files kept in $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "== building the plug-in (kquota-kafka/build.sh)"
BUILT="$(bash kquota-kafka/build.sh 2>"$WORK/plugin.log" | tail -n 1)" ||
  { tail -n 40 "$WORK/plugin.log" >&2; die "kquota-kafka/build.sh failed"; }
[ -f "$BUILT" ] || die "kquota-kafka/build.sh printed no jar: '$BUILT'"
JAR="$WORK/kquota-kafka.jar"
cp "$BUILT" "$JAR" # a private copy: another build rewriting the shared jar cannot touch the brokers
echo "== resolving Apache Kafka 4.3.1 (interop/kafka/kafka.sh classpath)"
KAFKA_CP="$(interop/kafka/kafka.sh classpath | tail -n 1)"
# Both brokers and the tools run with the plug-in's jar on the class path; only one broker uses it.
CP="$KAFKA_CP:$JAR"

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}
port_open() {
  python3 -c 'import socket, sys; socket.create_connection(("127.0.0.1", int(sys.argv[1])), 1).close()' "$1" 2>/dev/null
}

# start_broker NAME [extra server.properties lines...]: formats and starts a broker in $WORK/NAME;
# sets BOOTSTRAP_<NAME> and JMX_<NAME>.
start_broker() {
  local name="$1"
  shift
  local dir="$WORK/$name" bport cport jport
  mkdir -p "$dir/data" "$dir/logs"
  bport="$(free_port)"
  cport="$(free_port)"
  jport="$(free_port)"
  cat >"$dir/server.properties" <<EOF
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=127.0.0.1:$cport
listeners=PLAINTEXT://127.0.0.1:$bport,CONTROLLER://127.0.0.1:$cport
advertised.listeners=PLAINTEXT://127.0.0.1:$bport
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=$dir/data
num.network.threads=2
num.io.threads=2
background.threads=2
num.partitions=1
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
log.retention.check.interval.ms=15000
EOF
  local line
  # @SELF@: this broker's own listener (the cluster mode's kquota.cluster.bootstrap.servers).
  for line in "$@"; do echo "${line//@SELF@/127.0.0.1:$bport}" >>"$dir/server.properties"; done
  cat >"$dir/log4j2.properties" <<EOF
status = error
appender.file.type = File
appender.file.name = file
appender.file.fileName = $dir/logs/server.log
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = file
EOF
  local java_cmd=(java "${BROKER_JVM[@]}" "-Dlog4j2.configurationFile=$dir/log4j2.properties" "-Dkafka.logs.dir=$dir/logs" -cp "$CP")
  local cluster
  cluster="$("${java_cmd[@]}" kafka.tools.StorageTool random-uuid 2>"$dir/logs/format.err")" ||
    { cat "$dir/logs/format.err" >&2; die "StorageTool random-uuid failed"; }
  "${java_cmd[@]}" kafka.tools.StorageTool format -t "$cluster" -c "$dir/server.properties" --standalone \
    >"$dir/logs/format.out" 2>&1 || { cat "$dir/logs/format.out" >&2; die "StorageTool format failed ($name)"; }
  setsid "${java_cmd[@]}" "-Dcom.sun.management.jmxremote.port=$jport" "-Dcom.sun.management.jmxremote.rmi.port=$jport" \
    -Dcom.sun.management.jmxremote.host=127.0.0.1 -Dcom.sun.management.jmxremote.authenticate=false \
    -Dcom.sun.management.jmxremote.ssl=false -Djava.rmi.server.hostname=127.0.0.1 \
    kafka.Kafka "$dir/server.properties" >"$dir/logs/stdout.log" 2>&1 </dev/null &
  local pid=$!
  PIDS+=("$pid")
  local deadline=$((SECONDS + 120))
  until grep -q "Kafka Server started" "$dir/logs/server.log" 2>/dev/null && port_open "$bport"; do
    kill -0 "$pid" 2>/dev/null || { tail -n 40 "$dir/logs/server.log" "$dir/logs/stdout.log" >&2; die "broker $name exited during start-up"; }
    [ "$SECONDS" -lt "$deadline" ] || die "broker $name did not start within 120 s"
    sleep 0.3
  done
  printf -v "BOOTSTRAP_$name" '%s' "127.0.0.1:$bport"
  printf -v "PID_$name" '%s' "$pid"
  printf -v "JMX_$name" '%s' "127.0.0.1:$jport"
}

tool() { # a Kafka tool's main class on the class path, quietly
  java -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Dlog4j2.level=warn -cp "$CP" "$@"
}

configure_broker() { # NAME
  local name="$1" b
  b="BOOTSTRAP_$name"
  b="${!b}"
  tool kafka.admin.ConfigCommand --bootstrap-server "$b" --alter --entity-type clients --entity-default \
    --add-config producer_byte_rate=1000000000000,request_percentage=1000000 >"$WORK/$name/configs.out" 2>&1 ||
    { cat "$WORK/$name/configs.out" >&2; die "kafka-configs failed on $name"; }
  local t0=$SECONDS described
  described="$(tool "$HERE/BenchAdmin.java" setup "$b" bench "$ENTITIES" 2>"$WORK/$name/setup.err" | sed -n 's/^described //p')" ||
    { cat "$WORK/$name/setup.err" >&2; die "loading $ENTITIES entities into $name failed"; }
  [ "${described:-0}" -gt "$ENTITIES" ] || { cat "$WORK/$name/setup.err" >&2; die "$name describes ${described:-no} entities, not $((ENTITIES + 1))"; }
  echo "   $name: $described entities with quotas (the default and $ENTITIES others), loaded in $((SECONDS - t0)) s"
}

echo "== starting two brokers: Kafka's default callback, and kquota's"
start_broker default
CLUSTER_LINES=()
if [ -n "${CLUSTER:-}" ]; then
  # The cluster mode on, with nothing cluster-wide configured: what following kquota's log, the
  # membership, the usage sharing and the sensor feed cost a broker that does not need them.
  CLUSTER_LINES=("kquota.cluster.bootstrap.servers=@SELF@" "kquota.cluster.replication.factor=1"
    "metric.reporters=org.apache.kafka.common.metrics.JmxReporter,io.kquota.kafka.KquotaMetricsReporter")
fi
start_broker kquota "client.quota.callback.class=io.kquota.kafka.KquotaCallback" "kquota.sub.quota.policy=kafka" \
  ${CLUSTER_LINES[@]+"${CLUSTER_LINES[@]}"}
echo "   default $BOOTSTRAP_default, kquota $BOOTSTRAP_kquota (JMX $JMX_kquota)"
configure_broker default
configure_broker kquota
entities="$(tool "$HERE/BenchAdmin.java" jmx "$JMX_kquota" 2>"$WORK/jmx.err" | sed -n 's/^entities //p')" ||
  { cat "$WORK/jmx.err" >&2; die "could not read the kquota callback's JMX bean"; }
echo "   kquota's callback holds $entities entities (JMX Entities)"
grep -q "kquota quota callback started" "$WORK/kquota/logs/server.log" || die "the kquota broker did not start kquota's callback"
! grep -q "kquota quota callback started" "$WORK/default/logs/server.log" || die "the default broker runs kquota's callback"
# What kquota answers for the producer's connection: the bucket it shares and its limit.
java -Xmx64m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -cp "$JAR" io.kquota.kafka.Explain --jmx "$JMX_kquota" \
  --user ANONYMOUS --client-id perf-producer-client >"$WORK/explain.txt" 2>&1 || true
sed 's/^/   explain: /' "$WORK/explain.txt" | head -n 8

# cpu_ticks PID: the process's user + system CPU time so far, in clock ticks (/proc/PID/stat).
cpu_ticks() {
  awk '{ print $14 + $15 }' "/proc/$1/stat"
}

# round NAME LABEL: one ProducerPerformance run against broker NAME; appends "LABEL NAME rec/s MB/s
# throttle-ms requests broker-cpu-ms" to results.
round() {
  local name="$1" label="$2" b out pid cpu0 cpu1
  b="BOOTSTRAP_$name"
  b="${!b}"
  pid="PID_$name"
  pid="${!pid}"
  out="$WORK/$label-$name.out"
  cpu0="$(cpu_ticks "$pid")"
  java "${CLIENT_JVM[@]}" -cp "$CP" org.apache.kafka.tools.ProducerPerformance --bootstrap-server "$b" --topic bench \
    --num-records "$RECORDS" --record-size 100 --throughput -1 --print-metrics \
    --command-property acks=1 linger.ms=0 batch.size="$BATCH_SIZE" client.id=perf-producer-client >"$out" 2>&1 ||
    { tail -n 20 "$out" >&2; die "ProducerPerformance failed against $name"; }
  cpu1="$(cpu_ticks "$pid")"
  python3 - "$out" "$label" "$name" "$(( (cpu1 - cpu0) * 1000 / $(getconf CLK_TCK) ))" >>"$WORK/results.txt" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
m = re.search(r"(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\)", text)
if not m:
    sys.exit("no summary line in " + sys.argv[1])
t = re.search(r"producer-metrics:produce-throttle-time-max:\{client-id=perf-producer-client\}\s*:\s*([\d.NaE-]+)", text)
rq = re.search(r"producer-metrics:request-total:\{client-id=perf-producer-client\}\s*:\s*([\d.E]+)", text)
print(sys.argv[2], sys.argv[3], m.group(2), m.group(3), t.group(1) if t else "?", rq.group(1) if rq else "?",
      sys.argv[4])
PY
  tail -n 1 "$WORK/results.txt" | awk '{printf "   %-8s %-8s %12s records/s %8s MB/s  throttle max %s ms, %s produce requests, broker CPU %s ms\n", $1, $2, $3, $4, $5, $6, $7}'
}

: >"$WORK/results.txt"
echo "== $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); $RECORDS records of 100 B, acks=1, linger.ms=0, batch.size=$BATCH_SIZE"
echo "== warm-up (not counted)"
round default warmup
round kquota warmup
# What each broker spends with no load at all, over the same IDLE_S seconds: its background threads
# (with CLUSTER=1, the plug-in's: the log follower, heartbeats, usage sharing, the sensor feed), so
# that a round's CPU can be told apart into that and what its requests cost.
IDLE_S="${IDLE_S:-20}"
idle0_default="$(cpu_ticks "$PID_default")"
idle0_kquota="$(cpu_ticks "$PID_kquota")"
sleep "$IDLE_S"
IDLE_default=$(( ($(cpu_ticks "$PID_default") - idle0_default) * 1000 / $(getconf CLK_TCK) ))
IDLE_kquota=$(( ($(cpu_ticks "$PID_kquota") - idle0_kquota) * 1000 / $(getconf CLK_TCK) ))
echo "== idle for $IDLE_S s: default broker CPU $IDLE_default ms, kquota broker CPU $IDLE_kquota ms"

for r in $(seq 1 "$ROUNDS"); do
  echo "== round $r/$ROUNDS (load $(cut -d' ' -f1-3 /proc/loadavg))"
  if [ $((r % 2)) -eq 1 ]; then
    round default "r$r"
    round kquota "r$r"
  else
    round kquota "r$r"
    round default "r$r"
  fi
done

python3 - "$WORK/results.txt" "$RECORDS" "$IDLE_default" "$IDLE_kquota" "$IDLE_S" <<'PY'
import statistics, sys
idle = {"default": float(sys.argv[3]) / float(sys.argv[5]), "kquota": float(sys.argv[4]) / float(sys.argv[5])}
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
by = {}
for label, name, rec, mb, thr, req, cpu in rows:
    by.setdefault(label, {})[name] = (float(rec), float(mb), thr, float(req), float(cpu))
print()
print("Broker CPU: the broker process's user + system time over the round, per 1,000 records.")
print()
print("| round | default: records/s | MB/s | broker CPU ms / 1k records | kquota: records/s | MB/s | broker CPU ms / 1k records | throughput kquota / default | CPU kquota / default |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
ratios, cpu_ratios, net_ratios = [], [], []
throttled = False
for label, d in by.items():
    if label == "warmup":
        continue
    dr, dm, dt, _, dc = d["default"]
    kr, km, kt, _, kc = d["kquota"]
    for t in (dt, kt):
        try:
            throttled |= float(t) > 0
        except ValueError:
            pass
    records = float(sys.argv[2])
    dcpu, kcpu = dc / records * 1000, kc / records * 1000
    ratio = kr / dr
    ratios.append(ratio)
    cpu_ratios.append(kcpu / dcpu)
    # Less each broker's idle CPU over the round's duration: what the requests themselves cost.
    dnet = (dc - idle["default"] * records / dr) / records * 1000
    knet = (kc - idle["kquota"] * records / kr) / records * 1000
    net_ratios.append(knet / dnet)
    print(f"| {label[1:]} | {dr:,.0f} | {dm:.2f} | {dcpu:.2f} | {kr:,.0f} | {km:.2f} | {kcpu:.2f} | {ratio:.3f} | {kcpu / dcpu:.3f} |")
med = statistics.median(ratios)
cmed = statistics.median(cpu_ratios)
print()
print(f"throughput kquota/default: median {med:.3f}, min {min(ratios):.3f}, max {max(ratios):.3f} over {len(ratios)} rounds")
print(f"within 2 %: {'yes' if abs(med - 1) <= 0.02 else 'NO'} (median {100 * (med - 1):+.1f} %)")
print(f"broker CPU per record kquota/default: median {cmed:.3f}, min {min(cpu_ratios):.3f}, max {max(cpu_ratios):.3f}")
print(f"idle broker CPU: default {idle['default']:.1f} ms/s, kquota {idle['kquota']:.1f} ms/s")
print(f"broker CPU per record less the idle rate, kquota/default: median {statistics.median(net_ratios):.3f}, "
      f"min {min(net_ratios):.3f}, max {max(net_ratios):.3f}")
print(f"producer throttled in any round: {'YES' if throttled else 'no'}")
PY
echo "== done in $((SECONDS - BEGIN)) s"
