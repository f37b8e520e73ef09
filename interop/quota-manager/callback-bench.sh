#!/usr/bin/env bash
# What a broker pays per request in its KIP-257 quota callback: quotaMetricTags + quotaLimit through the
# ClientQuotaCallback interface, Kafka 4.3.1's DefaultQuotaCallback against kquota's KquotaCallback
# (kquota.sub.quota.policy=kafka) with its memo (default settings) and without (kquota.cache.entries=0),
# at 1K / 100K / 1M configured entities and 1 / 8 threads: JMH (CallbackBench.java, one fork per
# variant), then the same in paired windows in one JVM (CallbackBench$Paired: the three callbacks in
# turn, 200 ms each, 15 repetitions; the ratio per repetition, on the threads' CPU time), then the memory
# per configured entity at 1M (CallbackBench$Memory, one fresh JVM per callback).
#
#   interop/quota-manager/callback-bench.sh
#
# Environment:
#   RUNS=N        JMH runs, back to back (default 1; run the script again for another run of everything)
#   JMH_ARGS=...  replaces the JMH run settings (default: 1 fork, 3 x 1 s warm-up, 5 x 1 s measured)
#   SIZES=a,b,c   entity counts (default 1000,100000,1000000)
#   PAIRED_REPS=N repetitions of the paired windows (default 15; 0 skips them)
#   MEMORY=0      skip the memory measurement
# Bounded: about 11-13 minutes on 2 shared cores: JMH about 6 minutes (18 trials; the 1M kquota
# trials spend most of it loading entities, about 40 s each), the paired windows about 3, memory 1. Builds the plug-in with kquota-kafka/build.sh;
# compiles CallbackBench alone into target/callback-bench (not target/classes, which parity.sh,
# bench.sh and callback.sh share).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
runs=${RUNS:-1}
paired_reps=${PAIRED_REPS:-15}
jmh_args=${JMH_ARGS:-"-f 1 -wi 3 -w 1s -i 5 -r 1s"}
sizes=${SIZES:-1000,100000,1000000}

die() { echo "callback-bench: $*" >&2; exit 1; }
for tool in java javac mvn python3 cargo; do
  command -v "$tool" >/dev/null || die "$tool is required but not installed"
done

begin=$SECONDS
build="$here/target/callback-bench"
rm -rf "$build"
mkdir -p "$build/classes"
out="$build/results"
mkdir -p "$out"

echo "== building the plug-in (kquota-kafka/build.sh)"
built="$(cd "$root" && bash kquota-kafka/build.sh 2>"$build/plugin.log" | tail -n 1)" ||
  { tail -n 40 "$build/plugin.log" >&2; die "kquota-kafka/build.sh failed"; }
[ -f "$built" ] || die "kquota-kafka/build.sh printed no jar: '$built'"
# A private copy: a later build rewriting the shared jar does not change what the forks load.
jar="$build/kquota-kafka.jar"
cp "$built" "$jar"

echo "== building CallbackBench"
(cd "$here" && mvn -q -B dependency:build-classpath -Dmdep.includeScope=compile \
  -Dmdep.outputFile="$build/classpath.txt" >"$build/mvn.log" 2>&1) ||
  { cat "$build/mvn.log" >&2; die "Maven could not resolve the harness's class path"; }
cp="$(cat "$build/classpath.txt")"
# jmh-generator-annprocess is on that class path: javac runs it and writes META-INF/BenchmarkList.
mkdir -p "$build/generated"
javac --release 17 -nowarn -cp "$cp" -d "$build/classes" -s "$build/generated" \
  "$here/src/main/java/kquota/interop/CallbackBench.java" >"$build/javac.log" 2>&1 ||
  { cat "$build/javac.log" >&2; die "javac failed"; }
run_cp="$build/classes:$cp:$jar"

echo "== $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, commit $(cd "$root" && git rev-parse --short HEAD)$(cd "$root" && git diff --quiet HEAD -- . 2>/dev/null || echo ' (with uncommitted changes)')"
for run in $(seq 1 "$runs"); do
  echo "== JMH run $run/$runs: CallbackBench -p size=$sizes $jmh_args; load before: $(cut -d' ' -f1-3 /proc/loadavg)"
  t0=$SECONDS
  # shellcheck disable=SC2086
  java -cp "$run_cp" org.openjdk.jmh.Main 'kquota.interop.CallbackBench' -p size="$sizes" $jmh_args \
    -rf json -rff "$out/jmh-$run.json" >"$out/jmh-$run.log" 2>&1 ||
    { tail -n 60 "$out/jmh-$run.log" >&2; die "JMH run $run failed (log: $out/jmh-$run.log)"; }
  # Forked output lands after JMH's "# Warmup Iteration 1:" on the same line.
  grep -o 'CALLBACK-BENCH-SETUP.*' "$out/jmh-$run.log" >"$out/setup-$run.txt" || true
  echo "   $((SECONDS - t0)) s; load after: $(cut -d' ' -f1-3 /proc/loadavg)"
done

if [ "$paired_reps" != 0 ]; then
  echo "== paired windows: CallbackBench\$Paired $sizes 1,8 $paired_reps 200; load before: $(cut -d' ' -f1-3 /proc/loadavg)"
  t0=$SECONDS
  java -Xms3g -Xmx3g -cp "$run_cp" 'kquota.interop.CallbackBench$Paired' "$sizes" 1,8 "$paired_reps" 200 \
    >"$out/paired.log" 2>&1 || { tail -n 40 "$out/paired.log" >&2; die "the paired windows failed"; }
  echo "   $((SECONDS - t0)) s; load after: $(cut -d' ' -f1-3 /proc/loadavg)"
fi

if [ "${MEMORY:-1}" != 0 ]; then
  msize="${sizes##*,}"
  echo "== memory: $msize entities into each callback alone (fresh JVM, -Xms3g -Xmx3g -XX:+AlwaysPreTouch)"
  : >"$out/memory.txt"
  for v in default kquota; do
    java -Xms3g -Xmx3g -XX:+AlwaysPreTouch -cp "$run_cp" 'kquota.interop.CallbackBench$Memory' "$v" "$msize" \
      >"$out/memory-$v.log" 2>&1 || { cat "$out/memory-$v.log" >&2; die "the memory measurement ($v) failed"; }
    grep '^CALLBACK-BENCH-MEMORY' "$out/memory-$v.log" >>"$out/memory.txt"
  done
fi

python3 - "$out" "$runs" <<'PY'
import glob, json, os, re, statistics, sys
out, runs = sys.argv[1], int(sys.argv[2])
def kv(line):
    return dict(re.findall(r'(\w+)=(\S+)', line))
threads_of = {"oneThread": 1, "eightThreads": 8}
variants = ["default", "kquota", "kquota-nomemo"]
for run in range(1, runs + 1):
    res = {}
    for r in json.load(open(os.path.join(out, f"jmh-{run}.json"))):
        t = threads_of[r["benchmark"].rsplit(".", 1)[1]]
        p = r["params"]
        m = r["primaryMetric"]
        err = m["scoreError"] if isinstance(m["scoreError"], (int, float)) else float("nan")
        res[(p["variant"], int(p["size"]), t)] = (m["score"], err, min(m["rawData"][0]), max(m["rawData"][0]))
    sizes = sorted({k[1] for k in res})
    print(f"\n### run {run}: ns per request (quotaMetricTags + quotaLimit), JMH average ± 99.9 % error [min–max of iterations]\n")
    print("| entities | threads | Kafka default | kquota (memo) | kquota (no memo) | memo / default | no memo / default |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    verdict = []
    for t in (1, 8):
        for s in sizes:
            cells = []
            for v in variants:
                sc, err, lo, hi = res[(v, s, t)]
                cells.append(f"{sc:,.1f} ± {err:,.1f} [{lo:,.1f}–{hi:,.1f}]")
            d = res[("default", s, t)][0]
            r1 = res[("kquota", s, t)][0] / d
            r2 = res[("kquota-nomemo", s, t)][0] / d
            verdict.append((s, t, r1, r2))
            print(f"| {s:,} | {t} | " + " | ".join(cells) + f" | {r1:.2f} | {r2:.2f} |")
    print()
    worst = max(v[2] for v in verdict)
    print(f"kquota (memo) at most the default's cost at every size and thread count: "
          f"{'yes' if worst <= 1.0 else 'NO'} (highest ratio {worst:.2f})")
    for v in variants:
        for t in (1, 8):
            lo, hi = res[(v, sizes[0], t)][0], res[(v, sizes[-1], t)][0]
            print(f"  {v}, {t} thread(s): {sizes[-1]:,} over {sizes[0]:,} entities = {hi / lo:.2f}")
    setup = {}
    p = os.path.join(out, f"setup-{run}.txt")
    if os.path.exists(p):
        for line in open(p):
            d = kv(line)
            setup.setdefault((d["variant"], int(d["size"])), []).append((int(d["ms"]), int(d["entities"])))
    if setup:
        print("\nsetup (updateQuota for every entity, one per trial; ms):")
        for (v, s), xs in sorted(setup.items(), key=lambda kv_: (kv_[0][1], variants.index(kv_[0][0]))):
            ms = [x[0] for x in xs]
            print(f"  {v:14s} {s:>9,} entities ({xs[0][1]:,} with the defaults): {', '.join(f'{m:,}' for m in ms)} ms"
                  f"  ({statistics.median(ms) * 1e6 / xs[0][1]:,.0f} ns per updateQuota)")
p = os.path.join(out, "paired.log")
if os.path.exists(p):
    win = {}
    setup = {}
    for line in open(p):
        d = kv(line)
        if line.startswith("CALLBACK-BENCH-PAIRED"):
            key = (int(d["size"]), int(d["threads"]))
            win.setdefault(key, {}).setdefault(int(d["rep"]), {})[d["variant"]] = (
                int(d["cpu_ns"]) / int(d["ops"]), int(d["wall_ns"]) * int(d["threads"]) / int(d["ops"]))
        elif line.startswith("CALLBACK-BENCH-SETUP"):
            setup[(d["variant"], int(d["size"]))] = (int(d["ms"]), int(d["entities"]))
    print("\n### paired windows: CPU ns per request (median over repetitions [min–max]), ratio per repetition (median [min–max])\n")
    print("Kafka default (session): the same callback called as the broker calls it, with the user sanitized once per connection.\n")
    print("| entities | threads | Kafka default | kquota (memo) | kquota (no memo) | memo / default | no memo / default | Kafka default (session) | memo / default (session) |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    med = {}
    worst = 0
    worst_session = 0
    for t in (1, 8):
        for s_ in sorted({k[0] for k in win}):
            reps = win[(s_, t)].values()
            cells = []
            for v in variants:
                xs = [r[v][0] for r in reps]
                med[(v, s_, t)] = statistics.median(xs)
                cells.append(f"{statistics.median(xs):,.1f} [{min(xs):,.1f}–{max(xs):,.1f}]")
            for v in ("kquota", "kquota-nomemo"):
                rs = [r[v][0] / r["default"][0] for r in reps]
                cells.append(f"**{statistics.median(rs):.2f}** [{min(rs):.2f}–{max(rs):.2f}]")
                if v == "kquota":
                    worst = max(worst, statistics.median(rs))
            xs = [r["default-session"][0] for r in reps]
            cells.append(f"{statistics.median(xs):,.1f} [{min(xs):,.1f}–{max(xs):,.1f}]")
            rs = [r["kquota"][0] / r["default-session"][0] for r in reps]
            cells.append(f"**{statistics.median(rs):.2f}** [{min(rs):.2f}–{max(rs):.2f}]")
            worst_session = max(worst_session, statistics.median(rs))
            print(f"| {s_:,} | {t} | " + " | ".join(cells) + " |")
    print()
    print(f"kquota (memo) at most the default's cost at every size and thread count (median ratio): "
          f"{'yes' if worst <= 1.0 else 'NO'} (highest {worst:.2f}); against the broker's own call path: "
          f"{'yes' if worst_session <= 1.0 else 'NO'} (highest {worst_session:.2f})")
    sizes_ = sorted({k[0] for k in win})
    for v in variants:
        print(f"  {v}: {sizes_[-1]:,} over {sizes_[0]:,} entities = " + ", ".join(
            f"{med[(v, sizes_[-1], t)] / med[(v, sizes_[0], t)]:.2f} ({t} thread{'s' if t > 1 else ''})" for t in (1, 8)))
    print("setup in that JVM (ms): " + "; ".join(f"{v} {s_:,}: {ms:,}" for (v, s_), (ms, _) in sorted(setup.items(), key=lambda x: (x[0][1], variants.index(x[0][0])))))
p = os.path.join(out, "memory.txt")
if os.path.exists(p):
    print("\n### memory per configured entity\n")
    print("| callback | entities | Java heap after GC, delta | bytes per entity (heap) | resident set (VmRSS), delta | bytes per entity (RSS) | load |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for line in open(p):
        d = kv(line)
        print(f"| {d['variant']} | {int(d['entities']):,} | {int(d['heap_delta'])/2**20:,.1f} MiB | {float(d['heap_per_entity']):,.1f} |"
              f" {int(d['rss_delta'])/2**20:,.1f} MiB | {float(d['rss_per_entity']):,.1f} | {int(d['load_ms']):,} ms |")
PY
echo
echo "== done in $((SECONDS - begin)) s (raw results in $out)"
