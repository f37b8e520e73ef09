#!/usr/bin/env bash
# A three-node Apache Kafka cluster on loopback (KRaft: three combined broker+controller nodes, ids 1-3,
# one static quorum), from the jars interop/kafka/pom.xml names (kafka.sh builds them), for the suites
# that need several brokers: partitions led by different brokers, replication factor 3.
#
#   interop/kafka/cluster.sh start <dir>    make certificates, format and start the nodes in <dir>
#   interop/kafka/cluster.sh stop <dir>     stop them (SIGTERM, then SIGKILL after 30 s)
#   interop/kafka/cluster.sh status <dir>   exit 0 and print the bootstrap addresses if all three run
#   interop/kafka/cluster.sh start-node <dir> <n>
#                                           start node n again after it was stopped or killed: the
#                                           same ports and data, its server.properties as it is now,
#                                           the java line `start` gave it (<dir>/node-<n>/launch.sh);
#                                           returns once its log says "Kafka Server started" once
#                                           more and it answers Metadata
#
# Every node has four listeners on 127.0.0.1, each at a port picked when it starts:
#   PLAINTEXT        no authentication (the brokers replicate over it)
#   SASL_PLAINTEXT   SCRAM-SHA-512 and SCRAM-SHA-256
#   SSL              server certificates signed by a CA made at start (no client certificates asked)
#   CONTROLLER       the KRaft quorum
# `start` prints, and writes to <dir>/bootstrap.env, one line per client listener:
#   PLAINTEXT=127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3
#   SASL_PLAINTEXT=...
#   SSL=...
#   SSL_CA=<dir>/certs/ca.pem          (PEM: the CA the brokers' certificates are signed with)
# SCRAM users (both mechanisms, in the bootstrap metadata of `kafka-storage format --add-scram`):
#   admin/admin-secret, alice/alice-secret, bob/bob-secret
# No authorizer is configured: every principal may do everything, super.users=User:admin regardless.
#
# Needs java (17+), mvn, openssl and python3 (stdlib only). Each node's heap is KAFKA_HEAP (default
# -Xmx512m -Xms128m, serial collector); KAFKA_START_TIMEOUT (seconds, default 180) bounds the start,
# which waits until every node answers a Metadata request listing all three brokers. Every failure
# exits non-zero with a message on stderr and the tail of the logs.
#
# Optional hooks for suites that run a broker plug-in (kquota-kafka/tests/cluster); unset, nothing
# changes:
#   KAFKA_EXTRA_CLASSPATH=PATH[:PATH...]  appended to every node's classpath (and to the format
#                                         step's, which loads the classes server.properties names)
#   KAFKA_EXTRA_PROPERTIES=FILE           its lines appended to every node's server.properties, with
#                                         @PLAINTEXT@ replaced by the PLAINTEXT bootstrap list (as in
#                                         bootstrap.env) and @NODE@ by the node's id
#   KAFKA_JMX=1                           remote JMX on a loopback port of each node's own (no
#                                         authentication, no TLS: loopback only), written to
#                                         <dir>/node-<n>/jmx.port and to bootstrap.env as
#                                         JMX=127.0.0.1:J1,127.0.0.1:J2,127.0.0.1:J3 (nodes 1, 2, 3)
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
KAFKA_SH="$HERE/kafka.sh"
HEAP="${KAFKA_HEAP:--Xmx512m -Xms128m}"
START_TIMEOUT="${KAFKA_START_TIMEOUT:-180}"
JVM_OPTS="$HEAP -XX:+UseSerialGC -XX:CICompilerCount=2 -Djava.awt.headless=true"
NODES="1 2 3"
USERS="admin:admin-secret alice:alice-secret bob:bob-secret"

die() {
  echo "interop/kafka/cluster.sh: error: $*" >&2
  exit 1
}

need_tools() {
  command -v java >/dev/null 2>&1 || die "java not found; install a JDK 17 or later (Debian: openjdk-17-jdk-headless)"
  command -v mvn >/dev/null 2>&1 || die "mvn not found; install Maven (Debian: maven)"
  command -v openssl >/dev/null 2>&1 || die "openssl not found; install it (Debian: openssl)"
  command -v python3 >/dev/null 2>&1 || die "python3 not found; install Python 3"
}

# Ports for all nodes' listeners at once, each bound while the others are picked so none repeats.
free_ports() { # <count>
  python3 - "$1" <<'PY'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
for s in socks:
    s.close()
PY
}

# Sends a Metadata v1 request (all topics) to 127.0.0.1:<port> and prints the brokers it names, one
# "id host:port" per line; fails if the node does not answer within 5 s.
metadata_brokers() { # <port>
  python3 - "$1" <<'PY'
import socket, struct, sys
port = int(sys.argv[1])
client = b"kquota-cluster-check"
# Metadata v1: header (api key 3, version 1, correlation id, client id), topics = null (all).
body = struct.pack(">hhih", 3, 1, 7, len(client)) + client + struct.pack(">i", -1)
with socket.create_connection(("127.0.0.1", port), 5) as s:
    s.settimeout(5)
    s.sendall(struct.pack(">i", len(body)) + body)
    def read(n):
        buf = b""
        while len(buf) < n:
            chunk = s.recv(n - len(buf))
            if not chunk:
                raise SystemExit("connection closed")
            buf += chunk
        return buf
    size = struct.unpack(">i", read(4))[0]
    frame = read(size)
corr, count = struct.unpack_from(">ii", frame, 0)
assert corr == 7, corr
pos = 8
for _ in range(count):
    node, hlen = struct.unpack_from(">ih", frame, pos)
    pos += 6
    host = frame[pos:pos + hlen].decode()
    pos += hlen
    (bport,) = struct.unpack_from(">i", frame, pos)
    pos += 4
    (rlen,) = struct.unpack_from(">h", frame, pos)  # rack (nullable)
    pos += 2 + max(rlen, 0)
    print(node, "%s:%d" % (host, bport))
PY
}

node_running() { # <dir> <node>
  [ -f "$1/node-$2/kafka.pid" ] || return 1
  local pid
  pid="$(cat "$1/node-$2/kafka.pid")"
  kill -0 "$pid" 2>/dev/null || return 1
  # A node killed is a zombie until whoever inherited it reaps it: it runs no more.
  [ "$(awk '{ print $3 }' "/proc/$pid/stat" 2>/dev/null)" != Z ]
}

show_logs() { # <dir>
  local n
  for n in $NODES; do
    echo "---- node $n: tail of $1/node-$n/logs/server.log and stdout.log" >&2
    tail -n 30 "$1/node-$n/logs/server.log" "$1/node-$n/logs/stdout.log" >&2 2>/dev/null || true
  done
}

make_certs() { # <dir>
  local c="$1/certs" n
  mkdir -p "$c"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 3 \
    -subj "/CN=kquota test cluster CA" -keyout "$c/ca.key" -out "$c/ca.pem" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    >"$c/openssl.log" 2>&1 || { cat "$c/openssl.log" >&2; die "openssl could not make the cluster CA"; }
  for n in $NODES; do
    printf '%s\n' "subjectAltName=IP:127.0.0.1,DNS:localhost" "basicConstraints=critical,CA:FALSE" \
      "keyUsage=critical,digitalSignature" "extendedKeyUsage=serverAuth,clientAuth" >"$c/broker-$n.ext"
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "/CN=broker-$n" \
      -keyout "$c/broker-$n.key" -out "$c/broker-$n.csr" >>"$c/openssl.log" 2>&1 &&
      openssl x509 -req -in "$c/broker-$n.csr" -CA "$c/ca.pem" -CAkey "$c/ca.key" -CAcreateserial \
        -days 3 -extfile "$c/broker-$n.ext" -out "$c/broker-$n.crt" >>"$c/openssl.log" 2>&1 ||
      { cat "$c/openssl.log" >&2; die "openssl could not make broker $n's certificate"; }
    # Kafka's PEM key store: the PKCS#8 key, then the chain.
    cat "$c/broker-$n.key" "$c/broker-$n.crt" "$c/ca.pem" >"$c/broker-$n.pem"
  done
}

# Runs node n's launch.sh in a session of its own (setsid: `stop` can end it, and only it, as a
# group), its output appended to its stdout.log, and writes its pid.
launch() { # <dir> <node>
  local nd="$1/node-$2"
  setsid "$nd/launch.sh" >>"$nd/logs/stdout.log" 2>&1 </dev/null &
  echo $! >"$nd/kafka.pid"
}

# How many times the node's log says it started.
starts() { # <node dir>
  local c
  c="$(grep -c "Kafka Server started" "$1/logs/server.log" 2>/dev/null || true)"
  echo "${c:-0}"
}

start_node() { # <dir> <node>
  local dir n="$2"
  case "$n" in 1 | 2 | 3) ;; *) die "no node '$n': the nodes are $NODES" ;; esac
  [ -d "$1" ] || die "no directory $1"
  dir="$(cd "$1" && pwd)"
  local nd="$dir/node-$n"
  [ -x "$nd/launch.sh" ] || die "$nd/launch.sh is missing: start the cluster with this cluster.sh first"
  node_running "$dir" "$n" && die "node $n is already running in $dir (pid $(cat "$nd/kafka.pid"))"
  local before port
  before="$(starts "$nd")"
  port="$(sed -n 's#^listeners=PLAINTEXT://127\.0\.0\.1:\([0-9]*\),.*#\1#p' "$nd/server.properties")"
  [ -n "$port" ] || die "no PLAINTEXT listener in $nd/server.properties"
  launch "$dir" "$n"
  local deadline=$((SECONDS + START_TIMEOUT))
  while :; do
    if ! node_running "$dir" "$n"; then
      tail -n 30 "$nd/logs/server.log" "$nd/logs/stdout.log" >&2 2>/dev/null || true
      die "node $n exited during start-up (logs in $nd/logs)"
    fi
    if [ "$(starts "$nd")" -gt "$before" ] &&
      [ -n "$(metadata_brokers "$port" 2>/dev/null)" ]; then
      return 0
    fi
    if [ "$SECONDS" -ge "$deadline" ]; then
      tail -n 30 "$nd/logs/server.log" >&2 2>/dev/null || true
      die "node $n did not start within ${START_TIMEOUT} s (it is left running; logs in $nd/logs)"
    fi
    sleep 0.5
  done
}

start() { # <dir>
  local dir="$1" n
  need_tools
  "$KAFKA_SH" build >/dev/null
  mkdir -p "$dir"
  dir="$(cd "$dir" && pwd)"
  for n in $NODES; do
    node_running "$dir" "$n" && die "node $n is already running in $dir (pid $(cat "$dir/node-$n/kafka.pid")); stop it first"
  done
  rm -rf "$dir"/node-* "$dir/certs" "$dir/bootstrap.env"
  make_certs "$dir"

  if [ -n "${KAFKA_EXTRA_PROPERTIES:-}" ] && ! [ -r "$KAFKA_EXTRA_PROPERTIES" ]; then
    die "KAFKA_EXTRA_PROPERTIES=$KAFKA_EXTRA_PROPERTIES is not a readable file"
  fi
  local jmx_on=""
  case "${KAFKA_JMX:-}" in
    "" | 0) ;;
    1) jmx_on=1 ;;
    *) die "KAFKA_JMX must be 1 or unset, not '$KAFKA_JMX'" ;;
  esac

  local ports
  read -r -a ports <<<"$(free_ports 15)"
  # ports[4*(n-1) + 0..3]: PLAINTEXT, SASL_PLAINTEXT, SSL, CONTROLLER of node n; ports[11 + n]: its
  # JMX port (used with KAFKA_JMX=1 only).
  local voters="" plain="" sasl="" ssl="" jmx=""
  for n in $NODES; do
    local i=$((4 * (n - 1)))
    voters="$voters${voters:+,}$n@127.0.0.1:${ports[$((i + 3))]}"
    plain="$plain${plain:+,}127.0.0.1:${ports[$i]}"
    sasl="$sasl${sasl:+,}127.0.0.1:${ports[$((i + 1))]}"
    ssl="$ssl${ssl:+,}127.0.0.1:${ports[$((i + 2))]}"
    jmx="$jmx${jmx:+,}127.0.0.1:${ports[$((11 + n))]}"
  done

  local cp
  cp="$(cat "$HERE/target/classpath.txt")"
  cp="$HERE/target/classes:$cp${KAFKA_EXTRA_CLASSPATH:+:$KAFKA_EXTRA_CLASSPATH}"
  local cluster_id
  cluster_id="$(java -Xmx128m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Dlog4j2.level=warn -cp "$cp" \
    kafka.tools.StorageTool random-uuid 2>"$dir/format.err")" ||
    { cat "$dir/format.err" >&2; die "kafka.tools.StorageTool random-uuid failed"; }

  local scram=() u
  for u in $USERS; do
    scram+=(--add-scram "SCRAM-SHA-512=[name=${u%%:*},password=${u#*:}]")
    scram+=(--add-scram "SCRAM-SHA-256=[name=${u%%:*},password=${u#*:}]")
  done

  for n in $NODES; do
    local i=$((4 * (n - 1))) nd="$dir/node-$n"
    mkdir -p "$nd/data" "$nd/logs"
    cat >"$nd/server.properties" <<EOF
process.roles=broker,controller
node.id=$n
controller.quorum.voters=$voters
listeners=PLAINTEXT://127.0.0.1:${ports[$i]},SASL_PLAINTEXT://127.0.0.1:${ports[$((i + 1))]},SSL://127.0.0.1:${ports[$((i + 2))]},CONTROLLER://127.0.0.1:${ports[$((i + 3))]}
advertised.listeners=PLAINTEXT://127.0.0.1:${ports[$i]},SASL_PLAINTEXT://127.0.0.1:${ports[$((i + 1))]},SSL://127.0.0.1:${ports[$((i + 2))]}
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,SSL:SSL
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
sasl.enabled.mechanisms=SCRAM-SHA-512,SCRAM-SHA-256
listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
ssl.keystore.type=PEM
ssl.keystore.location=$dir/certs/broker-$n.pem
ssl.truststore.type=PEM
ssl.truststore.location=$dir/certs/ca.pem
ssl.client.auth=none
super.users=User:admin
log.dirs=$nd/data
num.network.threads=2
num.io.threads=2
background.threads=2
num.replica.fetchers=1
num.partitions=6
default.replication.factor=3
offsets.topic.replication.factor=3
offsets.topic.num.partitions=6
transaction.state.log.replication.factor=3
transaction.state.log.min.isr=2
transaction.state.log.num.partitions=6
share.coordinator.state.topic.replication.factor=3
share.coordinator.state.topic.min.isr=2
group.initial.rebalance.delay.ms=0
EOF
    if [ -n "${KAFKA_EXTRA_PROPERTIES:-}" ]; then
      local line
      while IFS= read -r line || [ -n "$line" ]; do
        line="${line//@PLAINTEXT@/$plain}"
        printf '%s\n' "${line//@NODE@/$n}"
      done <"$KAFKA_EXTRA_PROPERTIES" >>"$nd/server.properties"
    fi
    cat >"$nd/log4j2.properties" <<EOF
status = error
appender.file.type = File
appender.file.name = file
appender.file.fileName = $nd/logs/server.log
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = file
EOF
    if ! java -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 "-Dlog4j2.configurationFile=$nd/log4j2.properties" \
        -cp "$cp" kafka.tools.StorageTool format -t "$cluster_id" -c "$nd/server.properties" "${scram[@]}" \
        >"$nd/logs/format.out" 2>&1; then
      cat "$nd/logs/format.out" >&2
      die "kafka.tools.StorageTool format failed for node $n ($nd/server.properties)"
    fi
  done

  for n in $NODES; do
    local nd="$dir/node-$n" jmx_opts=""
    if [ -n "$jmx_on" ]; then
      local jport="${ports[$((11 + n))]}"
      echo "$jport" >"$nd/jmx.port"
      jmx_opts="-Dcom.sun.management.jmxremote.port=$jport -Dcom.sun.management.jmxremote.rmi.port=$jport"
      jmx_opts="$jmx_opts -Dcom.sun.management.jmxremote.host=127.0.0.1"
      jmx_opts="$jmx_opts -Dcom.sun.management.jmxremote.authenticate=false"
      jmx_opts="$jmx_opts -Dcom.sun.management.jmxremote.ssl=false -Djava.rmi.server.hostname=127.0.0.1"
    fi
    # The node's java line, kept for start-node (exec: the pid written is java's).
    {
      echo '#!/usr/bin/env bash'
      printf 'exec java %s %s %q %q -cp %q kafka.Kafka %q\n' "$JVM_OPTS" "$jmx_opts" \
        "-Dlog4j2.configurationFile=$nd/log4j2.properties" "-Dkafka.logs.dir=$nd/logs" "$cp" \
        "$nd/server.properties"
    } >"$nd/launch.sh"
    chmod +x "$nd/launch.sh"
    : >"$nd/logs/stdout.log"
    launch "$dir" "$n"
  done

  local deadline=$((SECONDS + START_TIMEOUT)) ready
  while :; do
    ready=0
    for n in $NODES; do
      if ! node_running "$dir" "$n"; then
        show_logs "$dir"
        stop "$dir" >/dev/null 2>&1 || true
        die "node $n exited during start-up (logs in $dir/node-$n/logs)"
      fi
      local i=$((4 * (n - 1)))
      if grep -q "Kafka Server started" "$dir/node-$n/logs/server.log" 2>/dev/null &&
        [ "$(metadata_brokers "${ports[$i]}" 2>/dev/null | wc -l)" = 3 ]; then
        ready=$((ready + 1))
      fi
    done
    [ "$ready" = 3 ] && break
    if [ "$SECONDS" -ge "$deadline" ]; then
      show_logs "$dir"
      stop "$dir" >/dev/null 2>&1 || true
      die "the cluster did not come up (every node answering Metadata with three brokers) within ${START_TIMEOUT} s (logs in $dir/node-*/logs)"
    fi
    sleep 0.5
  done
  {
    echo "PLAINTEXT=$plain"
    echo "SASL_PLAINTEXT=$sasl"
    echo "SSL=$ssl"
    echo "SSL_CA=$dir/certs/ca.pem"
    [ -z "$jmx_on" ] || echo "JMX=$jmx"
  } >"$dir/bootstrap.env"
  cat "$dir/bootstrap.env"
}

stop() { # <dir>
  local dir="$1" n pid pids=()
  for n in $NODES; do
    [ -f "$dir/node-$n/kafka.pid" ] || continue
    pid="$(cat "$dir/node-$n/kafka.pid")"
    if kill -0 "$pid" 2>/dev/null; then
      kill -TERM "$pid" 2>/dev/null || true
      pids+=("$pid")
    fi
  done
  local deadline=$((SECONDS + 30))
  for pid in "${pids[@]}"; do
    while kill -0 "$pid" 2>/dev/null && [ "$SECONDS" -lt "$deadline" ]; do sleep 0.3; done
    if kill -0 "$pid" 2>/dev/null; then
      echo "interop/kafka/cluster.sh: node pid $pid ignored SIGTERM for 30 s; killing it" >&2
      kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
    fi
  done
  for n in $NODES; do rm -f "$dir/node-$n/kafka.pid"; done
  rm -f "$dir/bootstrap.env"
}

status() { # <dir>
  local n
  for n in $NODES; do
    node_running "$1" "$n" || { echo "node $n is not running in $1" >&2; return 1; }
  done
  [ -f "$1/bootstrap.env" ] || { echo "no bootstrap.env in $1" >&2; return 1; }
  cat "$1/bootstrap.env"
}

cmd="${1:-}"
case "$cmd" in
  start | stop | status)
    [ $# -eq 2 ] || die "usage: $0 $cmd <dir>"
    "$cmd" "$2"
    ;;
  start-node)
    [ $# -eq 3 ] || die "usage: $0 start-node <dir> <node>"
    start_node "$2" "$3"
    ;;
  *)
    die "usage: $0 start <dir> | stop <dir> | status <dir> | start-node <dir> <node>"
    ;;
esac
