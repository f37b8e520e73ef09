#!/usr/bin/env bash
# kquota's KIP-257 client quota callback (kquota-kafka, kquota.sub.quota.policy=kafka) against Kafka
# 4.3.1's DefaultQuotaCallback, both inside Kafka's own ClientQuotaManagers in one JVM: seeded parity
# cases for all four quota types, a concurrency race, the failure drill and the settings checks
# (CallbackParity.java says what each proves).
#   interop/quota-manager/callback.sh [--seed N] [--cases N] [--case K]
# Needs cargo, java 17+ and maven; builds the plug-in with kquota-kafka/build.sh. Exits non-zero on any
# mismatch (printing the first ones and the seed to replay) or if anything cannot be built.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"

for tool in java mvn cargo python3; do
  command -v "$tool" >/dev/null || { echo "callback: $tool is required but not installed" >&2; exit 1; }
done

log="$(mktemp)"
trap 'rm -f "$log"' EXIT
echo "callback: building the plug-in (kquota-kafka/build.sh)"
jar="$(cd "$root" && bash kquota-kafka/build.sh 2>"$log" | tail -n 1)" ||
  { cat "$log" >&2; echo "callback: building the plug-in failed" >&2; exit 1; }
[ -f "$jar" ] || { cat "$log" >&2; echo "callback: kquota-kafka/build.sh printed no jar: '$jar'" >&2; exit 1; }

(cd "$here" && mvn -q -B -Dkquota.jar="$jar" compile >"$log" 2>&1) ||
  { cat "$log" >&2; echo "callback: building the harness failed" >&2; exit 1; }

java -cp "$here/target/classes:$(cat "$here/target/classpath.txt"):$jar" kquota.interop.callback.CallbackParity "$@"
