#!/usr/bin/env bash
# Three release kquota-proxy instances in front of one real Apache Kafka 4.3.1 broker
# (interop/kafka/kafka.sh), all three with --cluster-bootstrap <that broker>: one quota
# configuration (the configuration log), one membership, bps usage shared. instances.py starts the
# proxies and runs, printing what each measures:
#
#   1. an alteration at one instance is visible at every instance: 120 alterations, the time from
#      the request to the first DescribeClientQuotas showing it at each other instance, p50/p99/max;
#      fails if p99 > 1 s (or a describe at the instance altered, right after its answer, misses it);
#   2. kill -9 of inst-1 and inst-2 (one, then both, then one again) during an alteration storm at
#      all three (two clients per instance): every acknowledged alteration is described by all three
#      afterwards, nothing answered with an error is applied unless the error says it "may still be
#      applied", the restarted instances replay the log and describe what the others do;
#   3. 40 races of conflicting KIP-55 sub-quota alterations sent at the same moment to two instances:
#      one success and one POLICY_VIOLATION each, all three instances with the winner's state, the
#      sum of sub-quotas never above the total, and the winner the batch first in the log (read from
#      the configuration topic);
#   4. an instance stops (kill -9, then SIGTERM): the bps limits of the other two
#      (kquota_proxy_bucket_limit, --metrics-listen, producers through each) move from L/3 to L/2
#      within Membership::expiry_bound (read from kquota-cluster/src) + 1 s of delivery, and back
#      when it returns;
#   5. Kafka stopped for 30 s (SIGTERM) and started again on the same port with the same data: the
#      configuration stays described everywhere, alterations fail within the alteration timeout with
#      an error saying so and are never acknowledged, a client-id quota set with Kafka's
#      ConfigCommand still throttles afterwards, and alterations succeed and propagate once Kafka is
#      back; a kquotad (--cluster-bootstrap, the same log) joins for this test as a fourth instance,
#      one that answers the quota APIs with no broker behind it;
#   6. accuracy: one user's producers offering 2.8 / 0.8 / 0.4 MB/s through the three against
#      producer_byte_rate:bps = 3000000 (3 MB/s, decimal) cluster-wide; the total the producers
#      achieved must be within 10% of it; the static division (three proxies without a cluster,
#      --instance-count 3, the quota set at each) is measured beside it and reported;
#   7. usage traffic: 1,000 bps buckets (a client id each, 2% through two proxies) through the
#      three (with FULL: also 10,000, and with five proxies): the usage topic's bytes per instance,
#      read from the topic, must be under a third of what version 1's whole records would have been
#      for the same buckets; a 70/20/10 load of one bucket in the same run within 10% of its limit.
#
#   bash kquota-cluster/tests/instances/run.sh        # about 4 minutes once built (7 with FULL)
#
#   KQUOTA_INSTANCES_FULL=1       test 6 with 20 s warm-up and 40 s windows, two rounds of each
#                                 (default: 12 s and 20 s, one round)
#   KQUOTA_INSTANCES_ONLY=1,3     run only these tests (the others are listed as not run)
#   KQUOTA_PROXY_BIN=PATH KQUOTAD_BIN=PATH
#                                 test these binaries instead of building target/release/kquota-proxy
#                                 and target/release/kquotad
#   KQUOTA_KEEP_INSTANCES_DIR=1   keep the work directory (proxies' logs, producers' progress,
#                                 results.json)
#
# Needs cargo, python3, java 17+ and mvn (PyPI and Maven Central on the first run: the virtualenv
# of tests/python/venv.sh, with kafka-python and confluent-kafka). Loopback only, free ports; every
# process started here is stopped when it exits. Exits 1 on any failure, and if no test ran.
set -euo pipefail
cd "$(dirname "$0")/../../.."
ROOT="$(pwd)"
PYTHON="${PYTHON:-python3}"
KAFKA_SH="$ROOT/interop/kafka/kafka.sh"
HERE="$ROOT/kquota-cluster/tests/instances"

die() {
  echo "kquota-cluster/tests/instances/run.sh: FAILED: $*" >&2
  exit 1
}

command -v cargo >/dev/null 2>&1 || die "cargo not found; install a Rust toolchain"
command -v java >/dev/null 2>&1 || die "java not found; install a JDK 17 or later"
command -v mvn >/dev/null 2>&1 || die "mvn not found; install Maven"

WORK="$(mktemp -d "${TMPDIR:-/tmp}/kquota-instances.XXXXXX")"
KDIR="$WORK/kafka"
cleanup() {
  local f pid
  for f in "$WORK"/pids/*; do
    [ -f "$f" ] || continue
    pid="$(cat "$f")"
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null || true
  done
  "$KAFKA_SH" stop "$KDIR" || echo "run.sh: could not stop the broker in $KDIR" >&2
  if [ -z "${KQUOTA_KEEP_INSTANCES_DIR:-}" ]; then rm -rf "$WORK"; else echo "files kept in $WORK"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# shellcheck source=tests/python/venv.sh
. "$ROOT/tests/python/venv.sh"
PY="$VENV/bin/python"

if [ -n "${KQUOTA_PROXY_BIN:-}" ] && [ -n "${KQUOTAD_BIN:-}" ]; then
  PROXY_BIN="$KQUOTA_PROXY_BIN"
  KQUOTAD="$KQUOTAD_BIN"
  echo "== kquota-proxy: $PROXY_BIN, kquotad: $KQUOTAD (KQUOTA_PROXY_BIN, KQUOTAD_BIN; not built here)"
else
  [ -z "${KQUOTA_PROXY_BIN:-}${KQUOTAD_BIN:-}" ] || die "set both KQUOTA_PROXY_BIN and KQUOTAD_BIN, or neither"
  echo "== building kquota-proxy and kquotad (release)"
  cargo build --release --bin kquota-proxy --bin kquotad
  TARGET_DIR="${CARGO_TARGET_DIR:-target}"
  case "$TARGET_DIR" in /*) ;; *) TARGET_DIR="$ROOT/$TARGET_DIR" ;; esac
  PROXY_BIN="$TARGET_DIR/release/kquota-proxy"
  KQUOTAD="$TARGET_DIR/release/kquotad"
fi
[ -x "$PROXY_BIN" ] || die "$PROXY_BIN is not an executable"
[ -x "$KQUOTAD" ] || die "$KQUOTAD is not an executable"
"$PROXY_BIN" --help 2>&1 | grep -q -- '--cluster-bootstrap' || die "$PROXY_BIN has no --cluster-bootstrap"

echo "== resolving Apache Kafka (Maven Central) and building interop/kafka"
"$KAFKA_SH" build >/dev/null

echo "== starting the Kafka broker in $KDIR"
KAFKA="$("$KAFKA_SH" start "$KDIR")" || die "the Kafka broker did not start"
[ -n "$KAFKA" ] || die "kafka.sh printed no bootstrap address"
echo "   Kafka at $KAFKA"

# The outage's commands: stop the broker (SIGTERM), and start it again on the same ports with the
# same data.
printf '#!/usr/bin/env bash\nexec "%s" stop "%s"\n' "$KAFKA_SH" "$KDIR" >"$WORK/broker-stop"
printf '#!/usr/bin/env bash\nexec "%s" resume "%s" >/dev/null\n' "$KAFKA_SH" "$KDIR" >"$WORK/broker-start"
chmod +x "$WORK/broker-stop" "$WORK/broker-start"

# The load's topics, made at the broker (not through a proxy) so that no test waits for auto-creation.
"$PY" - "$KAFKA" <<'PY' || die "could not create the load topics at the broker"
import sys
from confluent_kafka.admin import AdminClient, NewTopic
admin = AdminClient({"bootstrap.servers": sys.argv[1]})
futures = admin.create_topics([NewTopic(t, 1, 1) for t in ("instances-members", "instances-accuracy", "instances-outage",
                                                          "instances-traffic")],
                              request_timeout=30)
for t, f in futures.items():
    f.result(60)
PY

echo "== the tests"
ARGS=(--kafka "$KAFKA" --work "$WORK" --proxy-bin "$PROXY_BIN" --kquotad-bin "$KQUOTAD" --broker-stop "$WORK/broker-stop"
  --broker-start "$WORK/broker-start" --only "${KQUOTA_INSTANCES_ONLY:-}")
[ -n "${KQUOTA_INSTANCES_FULL:-}" ] && ARGS+=(--full)
STATUS=0
timeout 1200 "$PY" "$HERE/instances.py" "${ARGS[@]}" || STATUS=$?
[ "$STATUS" = 124 ] && die "instances.py did not finish within 20 minutes"
[ "$STATUS" = 0 ] || die "instances.py reported failures (above; the summary lists each)"
echo "== OK: three kquota-proxy instances through one Kafka"
