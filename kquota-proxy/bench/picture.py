"""The picture of one producer held to one quota by Kafka and by kquota-proxy (picture.sh runs it):
bytes acknowledged per second and the throttle times the client saw, from two ProduceTrace traces
taken at the same time. python3's standard library only.

    picture.py --kafka TRACE --proxy TRACE --quota BYTES_PER_S --out SVG --subtitle LINE... \
               --command CMD [--summary JSON]

Prints the run's summary (JSON) on stdout; the same numbers are kept in the SVG's <metadata>.
The rate of each side is the suites' (kquota-proxy/tests/kafka/suite.py measure()): from the end of
the first quota window (11 s), each end averaged over 12 s, one throttle cycle.
"""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "kafka"))
import suite  # noqa: E402  (measure(), at(), per_second(): the suites' own rate arithmetic)
import svgplot  # noqa: E402

KAFKA_COLOR, PROXY_COLOR, QUOTA_COLOR = "#1f77b4", "#e6550d", "#555555"
MIB = 1048576.0
LONG_MS = 500


def load(path):
    rows = []
    with open(path) as f:
        for line in f:
            if line.startswith("{"):
                rows.append(json.loads(line))
    if len(rows) < 20:
        sys.exit("picture.py: %s has %d samples; the producer did not run" % (path, len(rows)))
    return rows


def side(rows, t0, quota, window_s, smooth_s):
    """The samples as the suites take them ([[ms, acked]]), from the first acknowledgement (as
    Workload's produce-rate starts its clock), and the numbers of one side."""
    first = next((r["t"] for r in rows if r["acked"] > 0), None)
    if first is None:
        sys.exit("picture.py: no record was acknowledged")
    samples = [[r["t"] - first, r["acked"]] for r in rows if r["t"] >= first]
    end_s = samples[-1][0] / 1000.0
    seconds = end_s - window_s - smooth_s
    if seconds < 10:
        sys.exit("picture.py: the run is too short (%.1f s after the first acknowledgement)" % end_s)
    m = suite.measure(samples, window_s, seconds, smooth_s)
    per_s = suite.per_second(samples)
    after = per_s[int(window_s):]
    # Two kinds of throttle show: about a second (Kafka's cap, one quota window) once a burst has
    # filled the window, and a few ms on each response while the producer is paced near the quota.
    # A long one shows in one or two samples (the metric spans the last 100-200 ms): each run of
    # samples at LONG_MS or more is counted once, at its largest.
    long_peaks, cur, short = [], None, []
    for r in rows:
        v = r["tmax"] if r["tmax"] is not None else 0.0
        if v >= LONG_MS:
            cur = v if cur is None else max(cur, v)
            continue
        if cur is not None:
            long_peaks.append(cur)
            cur = None
        if v >= 1:
            short.append(v)
    if cur is not None:
        long_peaks.append(cur)
    long_peaks.sort()
    short.sort()
    return {
        "first_ack_s": round((first - t0) / 1000.0, 2),
        "rate": round(m["rate"]),
        "rate_vs_quota_pct": round(100 * (m["rate"] / quota - 1), 2),
        "rate_plain": round(m["plain"]),
        "measured_from_s": window_s, "measured_s": round(seconds, 1), "ends_averaged_s": smooth_s,
        "per_second_after_window_min": round(min(after)), "per_second_after_window_max": round(max(after)),
        "acked_bytes": rows[-1]["acked"],
        "long_throttles": len(long_peaks),
        "long_throttle_median_ms": long_peaks[len(long_peaks) // 2] if long_peaks else 0.0,
        "throttle_max_ms": max(long_peaks + short + [0.0]),
        "short_throttle_median_ms": short[len(short) // 2] if short else 0.0,
        "short_throttle_samples_pct": round(100.0 * len(short) / len(rows), 1),
    }, samples, first


def per_second_points(samples, offset_s):
    """(x, bytes in [x-1, x)) points for a step line, on the picture's clock."""
    vals = suite.per_second(samples)
    return [(offset_s + s, v) for s, v in enumerate(vals)] + [(offset_s + len(vals), vals[-1] if vals else 0)]


def trailing_mean(points, n):
    """The mean of the last n per-second values at each second, in MiB/s (a quota window's worth)."""
    vals = [v for _, v in points[:-1]]
    return [(points[i][0] + 1, sum(vals[i + 1 - n:i + 1]) / n / MIB) for i in range(n - 1, len(vals))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kafka", required=True)
    ap.add_argument("--proxy", required=True)
    ap.add_argument("--quota", type=float, required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--subtitle", action="append", default=[])
    ap.add_argument("--command", required=True)
    ap.add_argument("--summary")
    a = ap.parse_args()
    kafka, proxy = load(a.kafka), load(a.proxy)
    t0 = min(kafka[0]["t"], proxy[0]["t"])
    window_s, smooth_s = suite.FIRST_WINDOW_S, suite.SMOOTH_S
    k, ks, kfirst = side(kafka, t0, a.quota, window_s, smooth_s)
    p, ps, pfirst = side(proxy, t0, a.quota, window_s, smooth_s)
    summary = {"quota": a.quota, "kafka": k, "proxy": p,
               "proxy_vs_kafka_pct": round(100 * (p["rate"] / k["rate"] - 1), 2)}

    end = max(kafka[-1]["t"], proxy[-1]["t"])
    x1 = (end - t0) / 1000.0
    fig = svgplot.Figure(820, "One producer, one quota: enforced by Kafka, and by kquota-proxy", a.subtitle)
    kpts = per_second_points(ks, (kfirst - t0) / 1000.0)
    ppts = per_second_points(ps, (pfirst - t0) / 1000.0)
    top = max(v for _, v in kpts + ppts)
    ymax = max(2 * a.quota, top * 1.08) / MIB
    r = fig.panel(230, (0, x1), (0, ymax), "MiB/s acknowledged", y_fmt=lambda v: "%.1f" % v,
                  title="Bytes acknowledged to the producer, per second", legend_rows=2)
    r.band((kfirst - t0) / 1000.0 + window_s, x1, "#888888", 0.07,
           label="measured (after the first %d s window)" % window_s)
    r.line([], "#777777", width=1.2, dash="2 2", label="dotted: the mean of the last %d s" % window_s)
    r.hline(a.quota / MIB, QUOTA_COLOR, label="producer_byte_rate %.0f (1 MiB/s)" % a.quota if a.quota == MIB
            else "producer_byte_rate %.0f" % a.quota)
    for pts, color in ((kpts, KAFKA_COLOR), (ppts, PROXY_COLOR)):
        r.line(trailing_mean(pts, window_s), color, width=1.2, dash="2 2")
    r.line([(x, v / MIB) for x, v in kpts], KAFKA_COLOR, width=1.6, step=True,
           label="Kafka: %.3f MiB/s (%+.1f%%)" % (k["rate"] / MIB, k["rate_vs_quota_pct"]))
    r.line([(x, v / MIB) for x, v in ppts], PROXY_COLOR, width=1.6, step=True,
           label="kquota-proxy: %.3f MiB/s (%+.1f%%)" % (p["rate"] / MIB, p["rate_vs_quota_pct"]))

    def throttles(rows):
        return [((row["t"] - t0) / 1000.0, row["tmax"]) for row in rows]

    tmax = max([k["throttle_max_ms"], p["throttle_max_ms"], 10.0])
    t = fig.panel(190, (0, x1), (0, tmax * 1.1), "throttle ms", x_label="seconds",
                  title="throttle_time_ms in the producer's Produce responses (the largest of each 100 ms)",
                  legend_rows=2)
    for rows, color, offset, name, d in ((kafka, KAFKA_COLOR, -0.8, "Kafka", k), (proxy, PROXY_COLOR, 0.8, "kquota-proxy", p)):
        t.stems(throttles(rows), color, offset=offset, label="%s: %d throttles of ~%.0f ms (at most %.0f), %.0f ms ones while paced"
                % (name, d["long_throttles"], d["long_throttle_median_ms"], d["throttle_max_ms"],
                   d["short_throttle_median_ms"]))
    fig.note("Rates from %d s after each producer's first acknowledgement, over %.0f s, each end averaged over %d s (the"
             " suites' measure()); the proxy's is %+.1f%% of Kafka's." % (window_s, k["measured_s"], smooth_s,
                                                                       summary["proxy_vs_kafka_pct"]))
    fig.note("Made by: %s" % a.command)
    fig.metadata(summary)
    with open(a.out, "w") as f:
        f.write(fig.svg())
    text = json.dumps(summary, indent=1, sort_keys=True)
    if a.summary:
        with open(a.summary, "w") as f:
            f.write(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
