#!/usr/bin/env bash
# kquota's meter (criterion, benches/versus_kafka.rs) against Apache Kafka 4.3.1's ClientQuotaManager
# (JMH, QuotaBench.java) on the same workloads, back to back; prints throughput per core and the ratio.
#   interop/quota-manager/bench.sh
# Bounded: about 30 s of criterion and 70 s of JMH (2 forks x (3 + 5) 1-second iterations per benchmark)
# after the builds. JMH_ARGS replaces the JMH run settings.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
jmh_args=${JMH_ARGS:-"-f 2 -wi 3 -w 1s -i 5 -r 1s"}

for tool in java mvn python3 cargo; do
  command -v "$tool" >/dev/null || { echo "bench: $tool is required but not installed" >&2; exit 1; }
done

out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
(cd "$here" && mvn -q -B compile >"$out/mvn.log" 2>&1) || { cat "$out/mvn.log" >&2; echo "bench: building the Kafka harness failed" >&2; exit 1; }
(cd "$root" && cargo bench --bench versus_kafka --no-run >"$out/build.log" 2>&1) || { cat "$out/build.log" >&2; exit 1; }
target_dir="$(cd "$root" && cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')"

echo "== $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores; load before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== kquota (criterion): cargo bench --bench versus_kafka"
rm -rf "$target_dir/criterion/versus_kafka"
(cd "$root" && cargo bench --bench versus_kafka -- --noplot)
echo "== load between: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== Kafka (JMH): QuotaBench $jmh_args"
# shellcheck disable=SC2086
java -cp "$here/target/classes:$(cat "$here/target/classpath.txt")" org.openjdk.jmh.Main \
  'kquota.interop.QuotaBench' $jmh_args -rf json -rff "$out/jmh.json"
echo "== load after: $(cut -d' ' -f1-3 /proc/loadavg)"

python3 - "$target_dir/criterion/versus_kafka" "$out/jmh.json" <<'PY'
import json, os, sys
crit, jmh_path = sys.argv[1], sys.argv[2]
kafka = {}
for r in json.load(open(jmh_path)):
    threads = r["threads"]
    workload = r["params"]["workload"]
    m = r["primaryMetric"]
    # JMH's throughput is the sum over threads; per core is per thread (threads <= cores).
    kafka[(workload, threads)] = (m["score"] / threads, m["scoreError"] / threads)
names = {"hot": "one hot client", "spread": "100,000 clients, levels 1/3/8"}
print()
print("| workload | threads | Kafka ClientQuotaManager (ops/s per core) | kquota ClientMeter (ops/s per core) | kquota / Kafka |")
print("| --- | ---: | ---: | ---: | ---: |")
worst = None
for workload in ("hot", "spread"):
    for threads in (1, 2):
        est = json.load(open(os.path.join(crit, workload, str(threads), "new", "estimates.json")))
        ns = est["median"]["point_estimate"]  # wall time per operation on one thread
        kq = 1e9 / ns
        kf, kf_err = kafka[(workload, threads)]
        ratio = kq / kf
        worst = ratio if worst is None else min(worst, ratio)
        print(f"| {names[workload]} | {threads} | {kf/1e6:,.2f} M ± {kf_err/1e6:,.2f} M | {kq/1e6:,.2f} M ({ns:.1f} ns) | {ratio:.1f}× |")
print()
print(f"target: kquota at least 10x Kafka per core on every workload: {'met' if worst >= 10 else 'NOT met'} (lowest {worst:.1f}x)")
PY
