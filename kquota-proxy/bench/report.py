"""Turns the JSON lines of kquota-proxy/bench/run.sh into markdown tables.

    report.py RESULTS.jsonl
    report.py --many RESULTS.jsonl     (the MANY=1 run's lines: {"kind": "many", ...})

Each throughput line: {"kind": "throughput", "workload", "path" ("direct"|"proxy"|"forward"),
"round", "mb_s", "mb", "cpu_ms" (of the proxy or the forwarder, through them)}; each latency
line: {"kind": "latency", "round", "direct", "proxy", ...} as latency.py prints it. Ratios are
taken within a round (the proxied or forwarded run over the direct run beside it), then their
median and range over the rounds are given: the runs of one round share the machine's state, the
rounds do not.
"""
import json
import os
import statistics
import sys

TARGET_THROUGHPUT = 0.95
TARGET_ADDED_P50_US = 50.0
TARGET_ADDED_P99_US = 250.0
TARGET_CPU_MS_PER_MB = 2.0


def med_range(values, fmt="%.1f"):
    if not values:
        return "—"
    if len(values) == 1:
        return fmt % values[0]
    return (fmt + " (" + fmt + "–" + fmt + ")") % (statistics.median(values), min(values), max(values))


def verdict(ok_median, ok_all):
    if ok_all:
        return "**met** in every round"
    if ok_median:
        return "met by the median, not in every round"
    return "**not met**"


def many(rows):
    """The MANY=1 run: memory per connection, latency added, CPU per MiB, by round."""
    by_round = {}
    for r in rows:
        if r["kind"] == "many":
            by_round.setdefault(r["round"], {})[r["path"]] = r
    pairs = [v for v in by_round.values() if "direct" in v and "proxy" in v]
    print("Rounds: %d (each runs the same load directly and through the proxy, in alternating order)." % len(pairs))
    print()
    # Against the proxy's RSS before it first held these connections: the allocator keeps what
    # a round's connections freed, so a later round's growth alone would read near zero.
    first = min((r for r in rows if r["kind"] == "many" and r["path"] == "proxy"), key=lambda r: r["round"])
    per_conn = [(v["proxy"]["rss_open_kib"] - first["rss_before_kib"]) / v["proxy"]["open"]["connections"]
                for v in pairs]
    cpu = [v["proxy"]["cpu_ms"] / (v["proxy"]["done"]["bytes"] / 1048576.0) for v in pairs]
    cpu_request = [1000.0 * v["proxy"]["cpu_ms"] / v["proxy"]["done"]["requests"] for v in pairs]
    cpu_share = [100.0 * v["proxy"]["cpu_ms"] / 1000.0 / v["proxy"]["done"]["seconds"] for v in pairs]
    print("| figure | direct | kquota-proxy | added by the proxy |")
    print("| --- | --- | --- | --- |")
    print("| proxy memory per open connection (RSS with them open less RSS before the first round, / connections), KiB"
          " | — | %s | — |" % med_range(per_conn))
    for q in ("p50", "p99", "p999"):
        d = [v["direct"]["done"][q + "_us"] for v in pairs]
        p = [v["proxy"]["done"][q + "_us"] for v in pairs]
        print("| Produce round trip %s, µs | %s | %s | %s |" % (q, med_range(d, "%.0f"), med_range(p, "%.0f"),
                                                               med_range([b - a for a, b in zip(d, p)], "%.0f")))
    for label, key in (("requests answered a second", "requests"), ("MiB a second sent", "bytes")):
        scale = 1.0 if key == "requests" else 1 / 1048576.0
        d = [v["direct"]["done"][key] * scale / v["direct"]["done"]["seconds"] for v in pairs]
        p = [v["proxy"]["done"][key] * scale / v["proxy"]["done"]["seconds"] for v in pairs]
        print("| %s | %s | %s | — |" % (label, med_range(d), med_range(p)))
    print("| proxy CPU (user + system) per MiB sent, ms | — | %s | — |" % med_range(cpu, "%.2f"))
    print("| proxy CPU per request, µs | — | %s | — |" % med_range(cpu_request))
    print("| proxy CPU, %% of one core | — | %s | — |" % med_range(cpu_share))
    print()
    print("Figures are median (min–max) over the rounds.")


def main():
    if sys.argv[1] == "--many":
        many([json.loads(line) for line in open(sys.argv[2]) if line.strip()])
        return
    rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
    tp = [r for r in rows if r["kind"] == "throughput"]
    lat = [r for r in rows if r["kind"] == "latency"]
    workloads = []
    for r in tp:
        if r["workload"] not in workloads:
            workloads.append(r["workload"])
    rounds = sorted({r["round"] for r in tp} | {r["round"] for r in lat})
    fwd = any(r["path"] == "forward" for r in tp)
    print("Rounds: %d (each round runs every workload direct, through the proxy%s, the one leading in turn)."
          % (len(rounds), " and through the minimal forwarder" if fwd else ""))
    print()
    cores = os.cpu_count() or 1
    if fwd:
        print("| workload | direct MB/s | kquota-proxy MB/s | proxy / direct | minimal forwarder MB/s | forwarder / direct"
              " | proxy / forwarder | the proxy's share of the machine's CPU | target ≥ %.0f%% |" % (TARGET_THROUGHPUT * 100))
        print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    else:
        print("| workload | direct MB/s | kquota-proxy MB/s | proxy / direct | the proxy's share of the machine's CPU"
              " | target ≥ %.0f%% |" % (TARGET_THROUGHPUT * 100))
        print("| --- | --- | --- | --- | --- | --- |")
    cpu_rows = []
    for w in workloads:
        by_round = {}
        for r in tp:
            if r["workload"] == w:
                by_round.setdefault(r["round"], {})[r["path"]] = r
        pairs = [v for v in by_round.values() if "direct" in v and "proxy" in v]
        ratios = [v["proxy"]["mb_s"] / v["direct"]["mb_s"] for v in pairs if v["direct"]["mb_s"] > 0]
        d = [v["direct"]["mb_s"] for v in pairs]
        p = [v["proxy"]["mb_s"] for v in pairs]
        with_fwd = [v for v in pairs if "forward" in v]
        f = [v["forward"]["mb_s"] for v in with_fwd]
        f_ratios = [v["forward"]["mb_s"] / v["direct"]["mb_s"] for v in with_fwd if v["direct"]["mb_s"] > 0]
        # The proxy's CPU over its run (the client's start included) against the run's length
        # and the machine's cores: what it took from the broker and the clients beside it.
        shares = [v["proxy"]["cpu_ms"] / (1000.0 * v["proxy"]["mb"] / v["proxy"]["mb_s"]) / cores
                  for v in pairs if v["proxy"].get("cpu_ms") and v["proxy"].get("mb") and v["proxy"]["mb_s"] > 0]
        ok_med = bool(ratios) and statistics.median(ratios) >= TARGET_THROUGHPUT
        ok_all = bool(ratios) and min(ratios) >= TARGET_THROUGHPUT
        judged = verdict(ok_med, ok_all)
        if not ok_med and ratios and shares and 1 - statistics.median(ratios) <= statistics.median(shares):
            judged = "**not met**; the loss is within the proxy's share of the CPU"
        elif not ok_med and f_ratios and statistics.median(f_ratios) < TARGET_THROUGHPUT:
            judged = "**not met**, nor by the minimal forwarder"
        row = [w, med_range(d), med_range(p), med_range([x * 100 for x in ratios], "%.0f%%")]
        if fwd:
            p_f = [v["proxy"]["mb_s"] / v["forward"]["mb_s"] for v in with_fwd if v["forward"]["mb_s"] > 0]
            row += [med_range(f), med_range([x * 100 for x in f_ratios], "%.0f%%"),
                    med_range([x * 100 for x in p_f], "%.0f%%")]
        row += [med_range([x * 100 for x in shares], "%.1f%%"), judged]
        print("| " + " | ".join(row) + " |")
        cpu = [v["proxy"]["cpu_ms"] / v["proxy"]["mb"] for v in pairs if v["proxy"].get("mb")]
        fwd_cpu = [v["forward"]["cpu_ms"] / v["forward"]["mb"] for v in with_fwd
                   if v["forward"].get("mb") and v["forward"].get("cpu_ms") is not None]
        wire = [v["proxy"]["cpu_ms"] / v["proxy"]["wire_mb"] for v in pairs if v["proxy"].get("wire_mb")]
        cpu_rows.append((w, cpu, [v["proxy"]["mb"] for v in pairs], wire, [v["proxy"]["wire_mb"] for v in pairs if v["proxy"].get("wire_mb")],
                         [100.0 * v["proxy"]["sys_ms"] / v["proxy"]["cpu_ms"] for v in pairs if v["proxy"].get("cpu_ms") and v["proxy"].get("sys_ms") is not None],
                         fwd_cpu))
    print()
    have_wire = any(r[3] for r in cpu_rows)
    print("Proxy CPU time (user + system of /proc/PID/stat, 10 ms ticks, over each proxied run) per MiB:")
    print("per MiB of record payload%s." % (
        "; and per MiB that crossed the proxy (the bytes it read from and wrote to clients, requests and"
        " answers, from its kquota_proxy_bytes_{from,to}_clients_total; each also crossed its broker side)"
        if have_wire else ""))
    print()
    fwd_col = any(r[6] for r in cpu_rows)
    extra_head = " minimal forwarder CPU ms / payload MiB |" if fwd_col else ""
    extra_rule = " --- |" if fwd_col else ""
    if have_wire:
        print("| workload | payload MiB per run | CPU ms / payload MiB | MiB crossing per run | CPU ms / MiB crossing"
              " | system time |%s target ≤ %.0f ms |" % (extra_head, TARGET_CPU_MS_PER_MB))
        print("| --- | --- | --- | --- | --- | --- |%s --- |" % extra_rule)
    else:
        print("| workload | payload MiB per run | CPU ms / payload MiB | system time |%s target ≤ %.0f ms |"
              % (extra_head, TARGET_CPU_MS_PER_MB))
        print("| --- | --- | --- | --- |%s --- |" % extra_rule)
    for w, cpu, mb, wire, wire_mb, share, fwd_cpu in cpu_rows:
        judged = wire if wire else cpu
        ok_med = bool(judged) and statistics.median(judged) <= TARGET_CPU_MS_PER_MB
        ok_all = bool(judged) and max(judged) <= TARGET_CPU_MS_PER_MB
        said = verdict(ok_med, ok_all)
        if not ok_med and fwd_cpu and statistics.median(fwd_cpu) > TARGET_CPU_MS_PER_MB:
            said = "**not met**, nor by the minimal forwarder"
        forward = " %s |" % med_range(fwd_cpu, "%.2f") if fwd_col else ""
        if have_wire:
            print("| %s | %s | %s | %s | %s | %s |%s %s |" % (w, med_range(mb, "%.0f"), med_range(cpu, "%.2f"),
                  med_range(wire_mb, "%.0f"), med_range(wire, "%.2f"), med_range(share, "%.0f%%"), forward, said))
        else:
            print("| %s | %s | %s | %s |%s %s |" % (w, med_range(mb, "%.0f"), med_range(cpu, "%.2f"),
                  med_range(share, "%.0f%%"), forward, said))
    raw = [r for r in rows if r["kind"] == "raw"]
    if raw:
        print()
        print(
            "The floor: raw Produce requests of one fixed size (cpu.py, 5 in flight, acks=1), through kquota-proxy and"
            " through a minimal forwarder (forward.rs: two threads per connection copying bytes, no parsing); CPU ms"
            " (user + system) per MiB sent, and the system share:"
        )
        print()
        print("| request size | minimal forwarder ms / MiB | kquota-proxy ms / MiB | kquota-proxy / forwarder | kquota-proxy system time |")
        print("| --- | --- | --- | --- | --- |")
        for batch in sorted({r["batch"] for r in raw}):
            per = {}
            for r in raw:
                if r["batch"] == batch:
                    mib = r["result"]["bytes_sent"] / 1048576.0
                    per.setdefault(r["round"], {})[r["path"]] = (r["cpu_ms"] / mib, r["sys_ms"] / max(r["cpu_ms"], 1))
            pairs = [v for v in per.values() if "forward" in v and "kquota-proxy" in v]
            f = [v["forward"][0] for v in pairs]
            k = [v["kquota-proxy"][0] for v in pairs]
            ratio = [v["kquota-proxy"][0] / v["forward"][0] for v in pairs if v["forward"][0] > 0]
            share = [v["kquota-proxy"][1] * 100 for v in pairs]
            print("| %d KiB | %s | %s | %s | %s |" % (batch // 1024, med_range(f, "%.2f"), med_range(k, "%.2f"),
                  med_range(ratio, "%.2f"), med_range(share, "%.0f%%")))
    if lat:
        n = lat[0]["direct"]["n"]
        size = lat[0].get("record_bytes", 1000)
        print()
        print(
            "Produce round trip (acks=1, one %d-byte record per request, sequential; %d samples per path per round), µs:"
            % (size, n)
        )
        print()
        fwd = all("forward" in r for r in lat)
        print("| | direct | kquota-proxy | added by the proxy |%s target |" % (
            " added by the minimal forwarder |" if fwd else ""))
        print("| --- | --- | --- | --- |%s --- |" % (" --- |" if fwd else ""))
        for q, target in (("p50", TARGET_ADDED_P50_US), ("p99", TARGET_ADDED_P99_US)):
            d = [r["direct"][q + "_us"] for r in lat]
            p = [r["proxy"][q + "_us"] for r in lat]
            added = [r["added_%s_us" % q] for r in lat]
            ok_med = statistics.median(added) <= target
            ok_all = max(added) <= target
            forward = " %s |" % med_range([r["forward_added_%s_us" % q] for r in lat]) if fwd else ""
            print(
                "| %s | %s | %s | %s |%s ≤ %.0f µs: %s |"
                % (q, med_range(d), med_range(p), med_range(added), forward, target, verdict(ok_med, ok_all))
            )
    fetch = [r for r in rows if r["kind"] == "fetch"]
    if fetch:
        names = list(fetch[0]["paths"])
        n = fetch[0]["paths"][names[0]]["n"]
        print()
        print(
            "Fetch round trip of ~1 MiB (Fetch v4, sequential, %d samples per path per round), p50 µs, and what each"
            " hop adds to the direct p50 of the same round:" % n
        )
        print()
        print("| path | p50 | added to direct | p90 |")
        print("| --- | --- | --- | --- |")
        for name in names:
            p50 = [r["paths"][name]["p50_us"] for r in fetch]
            p90 = [r["paths"][name]["p90_us"] for r in fetch]
            added = [r["paths"][name]["p50_us"] - r["paths"]["direct"]["p50_us"] for r in fetch]
            print("| %s | %s | %s | %s |" % (name, med_range(p50, "%.0f"),
                  "—" if name == "direct" else med_range(added, "%.0f"), med_range(p90, "%.0f")))
    print()
    print("Figures are median (min–max) over the rounds.")


if __name__ == "__main__":
    main()
