#!/usr/bin/env bash
# A reference Apache Kafka (single-node KRaft broker + controller on loopback) for the differential and
# client suites, from the jars on Maven Central that interop/kafka/pom.xml names.
#
#   interop/kafka/kafka.sh build            resolve the jars, compile AdminCheck, print the classpath file
#   interop/kafka/kafka.sh start <dir>      format and start a broker in <dir>; prints its bootstrap address
#   interop/kafka/kafka.sh stop <dir>       stop the broker started in <dir> (SIGTERM, then SIGKILL)
#   interop/kafka/kafka.sh kill <dir>       kill the broker started in <dir> (SIGKILL, as a crash)
#   interop/kafka/kafka.sh resume <dir>     start the broker of <dir> again after stop or kill: the same
#                                           ports and data, not formatted again; prints its address
#   interop/kafka/kafka.sh status <dir>     exit 0 and print the bootstrap address if it is running
#   interop/kafka/kafka.sh java <class> ... run a main class on the Kafka classpath (tools, AdminCheck,
#                                           Jmx: a JMX client for a broker's MBeans)
#   interop/kafka/kafka.sh classpath        build, then print the classpath `java` runs with (for suites
#                                           that start brokers of their own, e.g. kquota-kafka/tests/kafka)
#
# Needs java (17+) and mvn; the first run downloads the jars into ~/.m2. Every failure exits non-zero
# with a message on stderr; `start` shows the tail of the broker's log when the broker does not come up.
# Environment: KAFKA_HEAP (default -Xmx512m), KAFKA_START_TIMEOUT (seconds, default 90).
# KAFKA_FORWARDED_ADVERTISED=HOST:PORT (start only): a second listener, FORWARDED, on a free port
# written to <dir>/forwarded and advertised as HOST:PORT, so that a plain forwarder listening there
# and passing bytes to that port is what Kafka's clients bootstrapped through it connect to
# (metadata names the listener a request came in on): kquota-proxy/bench/run.sh's peer.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
BUILD="$HERE/target"
CP_FILE="$BUILD/classpath.txt"
HEAP="${KAFKA_HEAP:--Xmx512m -Xms64m}"
START_TIMEOUT="${KAFKA_START_TIMEOUT:-90}"
# Two cores, shared: a serial collector and few compiler threads keep the broker from crowding them.
JVM_OPTS="$HEAP -XX:+UseSerialGC -XX:CICompilerCount=2 -Djava.awt.headless=true"

die() {
  echo "interop/kafka/kafka.sh: error: $*" >&2
  exit 1
}

need_tools() {
  command -v java >/dev/null 2>&1 || die "java not found; install a JDK 17 or later (Debian: openjdk-17-jdk-headless)"
  command -v mvn >/dev/null 2>&1 || die "mvn not found; install Maven (Debian: maven)"
}

# Resolves the jars and compiles AdminCheck once; later runs reuse both unless the pom or the source changed.
build() {
  need_tools
  local stamp="$BUILD/.built"
  if [ -f "$stamp" ] && [ -f "$CP_FILE" ] && [ -z "$(find "$HERE/pom.xml" "$HERE/src" -newer "$stamp" -print -quit)" ]; then
    return 0
  fi
  mkdir -p "$BUILD"
  if ! (cd "$HERE" && mvn -B -q compile dependency:build-classpath -Dmdep.outputFile="$CP_FILE" >"$BUILD/mvn.log" 2>&1); then
    tail -n 40 "$BUILD/mvn.log" >&2
    die "Maven could not resolve Apache Kafka from Maven Central or compile AdminCheck (full log: $BUILD/mvn.log)"
  fi
  [ -s "$CP_FILE" ] || die "Maven wrote no classpath to $CP_FILE"
  touch "$stamp"
}

classpath() {
  echo "$BUILD/classes:$(cat "$CP_FILE")"
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

port_open() {
  python3 -c 'import socket, sys; socket.create_connection(("127.0.0.1", int(sys.argv[1])), 1).close()' "$1" 2>/dev/null
}

running() { # <dir>
  [ -f "$1/kafka.pid" ] && kill -0 "$(cat "$1/kafka.pid")" 2>/dev/null
}

start() { # <dir>
  local dir="$1"
  if [ -n "${KAFKA_FORWARDED_ADVERTISED:-}" ] && ! [[ "$KAFKA_FORWARDED_ADVERTISED" =~ ^[^:]+:[0-9]+$ ]]; then
    die "KAFKA_FORWARDED_ADVERTISED must be HOST:PORT, not '$KAFKA_FORWARDED_ADVERTISED'"
  fi
  build
  mkdir -p "$dir"
  dir="$(cd "$dir" && pwd)"
  running "$dir" && die "a broker is already running in $dir (pid $(cat "$dir/kafka.pid")); stop it first"
  rm -rf "$dir/data" "$dir/logs" "$dir/kafka.pid" "$dir/bootstrap" "$dir/forwarded"
  mkdir -p "$dir/data" "$dir/logs"
  local bport cport
  bport="$(free_port)"
  cport="$(free_port)"
  [ "$bport" != "$cport" ] || cport="$(free_port)"
  local listeners="PLAINTEXT://127.0.0.1:$bport,CONTROLLER://127.0.0.1:$cport"
  local advertised="PLAINTEXT://127.0.0.1:$bport"
  local protocols="CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT"
  if [ -n "${KAFKA_FORWARDED_ADVERTISED:-}" ]; then
    local fport
    fport="$(free_port)"
    while [ "$fport" = "$bport" ] || [ "$fport" = "$cport" ]; do fport="$(free_port)"; done
    listeners="$listeners,FORWARDED://127.0.0.1:$fport"
    advertised="$advertised,FORWARDED://$KAFKA_FORWARDED_ADVERTISED"
    protocols="$protocols,FORWARDED:PLAINTEXT"
    echo "127.0.0.1:$fport" >"$dir/forwarded"
  fi
  cat >"$dir/server.properties" <<EOF
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=127.0.0.1:$cport
listeners=$listeners
advertised.listeners=$advertised
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=$protocols
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
EOF
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
  local cp cluster
  cp="$(classpath)"
  local java_cmd=(java $JVM_OPTS "-Dlog4j2.configurationFile=$dir/log4j2.properties" "-Dkafka.logs.dir=$dir/logs" -cp "$cp")
  cluster="$("${java_cmd[@]}" kafka.tools.StorageTool random-uuid 2>"$dir/logs/format.err")" ||
    { cat "$dir/logs/format.err" >&2; die "kafka.tools.StorageTool random-uuid failed"; }
  if ! "${java_cmd[@]}" kafka.tools.StorageTool format -t "$cluster" -c "$dir/server.properties" --standalone \
      >"$dir/logs/format.out" 2>&1; then
    cat "$dir/logs/format.out" >&2
    die "kafka.tools.StorageTool format failed for $dir/server.properties"
  fi
  launch "$dir" "$bport"
}

# How many times the broker of <dir> has logged its start.
starts() { # <dir>
  local n
  n="$(grep -c "Kafka Server started" "$1/logs/server.log" 2>/dev/null || true)"
  echo "${n:-0}"
}

# Runs the broker of <dir> from its server.properties and waits until it logs one more start and
# answers on <port>; prints its bootstrap address.
launch() { # <dir> <port>
  local dir="$1" bport="$2" before
  before="$(starts "$dir")"
  # setsid: the broker gets its own process group, so `stop` can end it (and only it) as a group.
  setsid java $JVM_OPTS "-Dlog4j2.configurationFile=$dir/log4j2.properties" "-Dkafka.logs.dir=$dir/logs" \
    -cp "$(classpath)" kafka.Kafka "$dir/server.properties" >>"$dir/logs/stdout.log" 2>&1 </dev/null &
  echo $! >"$dir/kafka.pid"
  local deadline=$((SECONDS + START_TIMEOUT))
  while :; do
    if ! running "$dir"; then
      tail -n 60 "$dir/logs/server.log" "$dir/logs/stdout.log" >&2 2>/dev/null || true
      rm -f "$dir/kafka.pid"
      die "the Kafka broker exited during start-up (logs in $dir/logs)"
    fi
    if [ "$(starts "$dir")" -gt "$before" ] && port_open "$bport"; then
      break
    fi
    if [ "$SECONDS" -ge "$deadline" ]; then
      tail -n 60 "$dir/logs/server.log" "$dir/logs/stdout.log" >&2 2>/dev/null || true
      stop "$dir" >/dev/null 2>&1 || true
      die "the Kafka broker did not answer on 127.0.0.1:$bport within ${START_TIMEOUT} s (logs in $dir/logs)"
    fi
    sleep 0.2
  done
  echo "127.0.0.1:$bport" >"$dir/bootstrap"
  echo "127.0.0.1:$bport"
}

resume() { # <dir>
  local dir bport
  build
  dir="$(cd "$1" && pwd)" || die "no directory $1"
  [ -f "$dir/server.properties" ] || die "no broker was started in $dir (no server.properties)"
  running "$dir" && die "the broker in $dir is running (pid $(cat "$dir/kafka.pid"))"
  bport="$(sed -n 's#^advertised.listeners=PLAINTEXT://127.0.0.1:\([0-9]*\).*#\1#p' "$dir/server.properties")"
  [ -n "$bport" ] || die "no PLAINTEXT listener in $dir/server.properties"
  launch "$dir" "$bport"
}

kill_broker() { # <dir>
  local dir="$1" pid
  [ -f "$dir/kafka.pid" ] || die "no broker running in $dir"
  pid="$(cat "$dir/kafka.pid")"
  kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
  local deadline=$((SECONDS + 20))
  while kill -0 "$pid" 2>/dev/null; do
    [ "$SECONDS" -lt "$deadline" ] || die "the broker (pid $pid) outlived SIGKILL for 20 s"
    sleep 0.1
  done
  rm -f "$dir/kafka.pid" "$dir/bootstrap"
}

stop() { # <dir>
  local dir="$1"
  [ -f "$dir/kafka.pid" ] || return 0
  local pid
  pid="$(cat "$dir/kafka.pid")"
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    local deadline=$((SECONDS + 30))
    while kill -0 "$pid" 2>/dev/null && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.3; done
    if kill -0 "$pid" 2>/dev/null; then
      echo "interop/kafka/kafka.sh: the broker (pid $pid) ignored SIGTERM for 30 s; killing it" >&2
      kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
    fi
  fi
  rm -f "$dir/kafka.pid" "$dir/bootstrap"
}

status() { # <dir>
  if running "$1" && [ -f "$1/bootstrap" ]; then
    cat "$1/bootstrap"
  else
    echo "no broker running in $1" >&2
    return 1
  fi
}

cmd="${1:-}"
case "$cmd" in
  build)
    build
    echo "$CP_FILE"
    ;;
  classpath)
    build
    classpath
    ;;
  start | stop | status | resume)
    [ $# -eq 2 ] || die "usage: $0 $cmd <dir>"
    "$cmd" "$2"
    ;;
  kill)
    [ $# -eq 2 ] || die "usage: $0 kill <dir>"
    kill_broker "$2"
    ;;
  java)
    [ $# -ge 2 ] || die "usage: $0 java <main class> [args...]"
    shift
    build
    exec java -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Dlog4j2.level=warn -cp "$(classpath)" "$@"
    ;;
  *)
    die "usage: $0 build | classpath | start <dir> | stop <dir> | kill <dir> | resume <dir> | status <dir> | java <class> [args...]"
    ;;
esac
