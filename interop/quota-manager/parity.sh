#!/usr/bin/env bash
# Resolution parity of kquota (kafka sub-quota policy) with Apache Kafka 4.3.1's ClientQuotaManager.
#   interop/quota-manager/parity.sh [--seed N] [--cases N] [--pairs N]
# Needs java 17+, maven and python3; fetches the Kafka jars from Maven Central on first use.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"

for tool in java mvn python3 cargo; do
  command -v "$tool" >/dev/null || { echo "parity: $tool is required but not installed" >&2; exit 1; }
done

log="$(mktemp)"
trap 'rm -f "$log"' EXIT
(cd "$here" && mvn -q -B compile >"$log" 2>&1) || { cat "$log" >&2; echo "parity: building the Kafka harness failed" >&2; exit 1; }
(cd "$root" && cargo build --quiet --example kafka_parity)
target_dir="$(cd "$root" && cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')"

python3 "$here/parity.py" "$@" \
  --java "java -cp $here/target/classes:$(cat "$here/target/classpath.txt")" \
  --kquota "$target_dir/debug/examples/kafka_parity"
