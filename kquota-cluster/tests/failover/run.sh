#!/usr/bin/env bash
# kquota-cluster when a Kafka broker goes away: the project's three-broker Apache Kafka 4.3.1
# cluster (interop/kafka/cluster.sh: three combined KRaft nodes on loopback), the kquota topics
# at replication factor 3 with min.insync.replicas=2, and three instances in one process (each
# its own engine and its own Kafka clients), kquota-cluster/tests/failover/main.rs:
#
#   1. the configuration partition's leader killed (kill -9) during an alteration storm at all
#      three: no acknowledged alteration lost (every instance, and a fresh one replaying the log,
#      holds each), none refused applied, alterations acknowledged again within the alteration
#      timeout of the kill;
#   2. the members and usage partitions' leader restarted (SIGTERM, then started again), and the
#      members leader killed (kill -9) and started again: no instance's live count drops;
#   3. two instances sharing one configuration, one over the SSL listeners (the cluster's CA) and
#      one over SASL_PLAINTEXT with SCRAM-SHA-512: each sees the other's alteration.
#
#   bash kquota-cluster/tests/failover/run.sh [test name filter]
#
#   KQUOTA_KEEP_FAILOVER_DIR=1   keep the brokers' directories and logs
#
# A node is killed and started again by the commands exported here (the pid files and the start
# line are cluster.sh's: a node started here is one cluster.sh stops). Needs cargo, java 17+, mvn,
# openssl and python3. Nothing is skipped: a cluster that does not start fails the run, and so does
# every test without it.
set -euo pipefail
cd "$(dirname "$0")/../../.."
ROOT="$(pwd)"
CLUSTER_SH="$ROOT/interop/kafka/cluster.sh"
KAFKA_DIR="$ROOT/interop/kafka"

die() {
  echo "kquota-cluster/tests/failover/run.sh: error: $*" >&2
  exit 1
}

command -v cargo >/dev/null 2>&1 || die "cargo not found; install a Rust toolchain"
command -v java >/dev/null 2>&1 || die "java not found; install a JDK 17 or later"
command -v mvn >/dev/null 2>&1 || die "mvn not found; install Maven"

echo "== building the failover test target of kquota-cluster"
cargo test -p kquota-cluster --test kafka_failover --no-run

WORK="$(mktemp -d "${TMPDIR:-/tmp}/kquota-cluster-failover.XXXXXX")"
CDIR="$WORK/cluster"
cleanup() {
  "$CLUSTER_SH" stop "$CDIR" || echo "run.sh: could not stop the cluster in $CDIR" >&2
  if [ -z "${KQUOTA_KEEP_FAILOVER_DIR:-}" ]; then rm -rf "$WORK"; else echo "files kept in $WORK"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "== starting the three-broker cluster in $CDIR"
# Three JVMs on two shared cores: small heaps, and a generous start.
export KAFKA_HEAP="${KAFKA_HEAP:--Xmx384m -Xms128m}"
export KAFKA_START_TIMEOUT="${KAFKA_START_TIMEOUT:-240}"
"$CLUSTER_SH" start "$CDIR" >"$WORK/bootstrap.txt" || die "the three-broker cluster did not start"
BOOTSTRAP="$(sed -n 's/^PLAINTEXT=//p' "$CDIR/bootstrap.env")"
[ -n "$BOOTSTRAP" ] || die "cluster.sh wrote no PLAINTEXT bootstrap"
echo "   Kafka at $BOOTSTRAP"

# kill -9 of node N, and its start again: the java line is cluster.sh's own, with its heap, so
# that cluster.sh stop ends it like the others.
cat >"$WORK/node-kill" <<KILL
#!/usr/bin/env bash
set -euo pipefail
pid="\$(cat "$CDIR/node-\$1/kafka.pid")"
kill -KILL -- "-\$pid" 2>/dev/null || kill -KILL "\$pid"
for _ in \$(seq 1 200); do kill -0 "\$pid" 2>/dev/null || exit 0; sleep 0.1; done
echo "node \$1 (pid \$pid) outlived SIGKILL" >&2
exit 1
KILL
cat >"$WORK/node-stop" <<STOP
#!/usr/bin/env bash
set -euo pipefail
pid="\$(cat "$CDIR/node-\$1/kafka.pid")"
kill -TERM "\$pid"
for _ in \$(seq 1 600); do kill -0 "\$pid" 2>/dev/null || exit 0; sleep 0.1; done
echo "node \$1 (pid \$pid) ignored SIGTERM for 60 s" >&2
exit 1
STOP
cat >"$WORK/node-start" <<START
#!/usr/bin/env bash
set -euo pipefail
nd="$CDIR/node-\$1"
cp="$KAFKA_DIR/target/classes:\$(cat "$KAFKA_DIR/target/classpath.txt")"
setsid java $KAFKA_HEAP -XX:+UseSerialGC -XX:CICompilerCount=2 -Djava.awt.headless=true \\
  "-Dlog4j2.configurationFile=\$nd/log4j2.properties" "-Dkafka.logs.dir=\$nd/logs" \\
  -cp "\$cp" kafka.Kafka "\$nd/server.properties" >>"\$nd/logs/stdout.log" 2>&1 </dev/null &
echo \$! >"\$nd/kafka.pid"
START
chmod +x "$WORK/node-kill" "$WORK/node-stop" "$WORK/node-start"

echo "== the failover tests"
KQUOTA_CLUSTER_SSL="$(sed -n 's/^SSL=//p' "$CDIR/bootstrap.env")" \
  KQUOTA_CLUSTER_SSL_CA="$(sed -n 's/^SSL_CA=//p' "$CDIR/bootstrap.env")" \
  KQUOTA_CLUSTER_SASL_PLAINTEXT="$(sed -n 's/^SASL_PLAINTEXT=//p' "$CDIR/bootstrap.env")" \
  KQUOTA_CLUSTER_BOOTSTRAP="$BOOTSTRAP" \
  KQUOTA_FAILOVER_KILL="$WORK/node-kill" \
  KQUOTA_FAILOVER_STOP="$WORK/node-stop" \
  KQUOTA_FAILOVER_START="$WORK/node-start" \
  cargo test -p kquota-cluster --test kafka_failover -- --test-threads=1 --nocapture "$@"
echo "== OK: kquota-cluster through a broker's failure"
