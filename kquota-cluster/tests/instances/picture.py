"""The picture in docs/cluster.md: one cluster-wide `producer_byte_rate:bps` limit split by three
kquota-proxy instances under a skewed load, from a real run (picture.sh runs it). python3's standard
library only; the SVG writer is kquota-proxy/bench/svgplot.py.

    picture.py sample OUT SECONDS QUOTA USER CLIENT_ID METRICS_ADDR...
        every 0.5 s for SECONDS, each proxy's bucket of {USER, CLIENT_ID} for QUOTA from its /metrics:
        one JSON line per proxy and sampling ({"t", "proxy", "limit", "recorded", "view", "members"})
    picture.py alter ADDR USER CLIENT_ID KEY VALUE
        AlterClientQuotas v0 of {user=USER, client-id=CLIENT_ID} KEY=VALUE at ADDR (Kafka's
        kafka-configs refuses a key with a colon, such as producer_byte_rate:bps); exits 1 on an error
    picture.py draw --samples OUT --trace TRACE... --offered B/S... --limit B/S --from S --out SVG
                    --subtitle LINE... --command CMD
        the producers' traces (ProduceTrace.java, one per proxy, in the proxies' order) and the
        samples into the SVG; prints the run's numbers (JSON), also kept in the SVG's <metadata>.
"""
import argparse
import json
import os
import re
import socket
import struct
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "kquota-proxy", "bench"))
import svgplot  # noqa: E402

COLORS = ["#e6550d", "#31a354", "#756bb1"]
SUM_COLOR, LIMIT_COLOR = "#222222", "#555555"


def bucket_value(text, family, user, client_id, quota):
    pat = r'^%s\{user="%s",client_id="%s",ip="",quota="%s",level="[^"]*"\} (\S+)$' % (
        re.escape(family), re.escape(user), re.escape(client_id), re.escape(quota))
    m = re.search(pat, text, re.M)
    return float(m.group(1)) if m else None


def sample(out, seconds, quota, user, client_id, addrs):
    deadline = time.monotonic() + seconds
    with open(out, "w", buffering=1) as f:
        k = 0
        start = time.monotonic()
        while time.monotonic() < deadline:
            for i, addr in enumerate(addrs):
                row = {"t": int(time.time() * 1000), "proxy": i}
                try:
                    text = urllib.request.urlopen("http://%s/metrics" % addr, timeout=2).read().decode()
                except OSError as e:
                    row["error"] = str(e)
                else:
                    row["limit"] = bucket_value(text, "kquota_proxy_bucket_limit", user, client_id, quota)
                    row["recorded"] = bucket_value(text, "kquota_proxy_bucket_recorded_total", user, client_id, quota)
                    m = re.search(r'^kquota_proxy_bucket_limit_view\{user="%s",client_id="%s",ip="",quota="%s",'
                                  r'level="[^"]*",view="([^"]*)"\} 1' % (re.escape(user), re.escape(client_id),
                                                                       re.escape(quota)), text, re.M)
                    row["view"] = m.group(1) if m else None
                    m = re.search(r"^kquota_cluster_members (\S+)$", text, re.M)
                    row["members"] = float(m.group(1)) if m else None
                f.write(json.dumps(row) + "\n")
            k += 1
            delay = start + 0.5 * k - time.monotonic()
            if delay > 0:
                time.sleep(delay)


def _str(s):
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def alter(addr, user, client_id, key, value):
    """One AlterClientQuotas v0 request over a plain socket; its entry's error, or exit 1."""
    body = struct.pack(">i", 1)  # one entry
    body += struct.pack(">i", 2) + _str("user") + _str(user) + _str("client-id") + _str(client_id)
    body += struct.pack(">i", 1) + _str(key) + struct.pack(">db", float(value), 0)
    body += struct.pack(">b", 0)  # validate_only
    msg = struct.pack(">hhi", 49, 0, 1) + _str("picture") + body
    host, port = addr.rsplit(":", 1)
    with socket.create_connection((host, int(port)), 10) as s:
        s.settimeout(30)
        s.sendall(struct.pack(">i", len(msg)) + msg)
        head = b""
        while len(head) < 4:
            chunk = s.recv(4 - len(head))
            if not chunk:
                sys.exit("picture.py: %s closed the connection without an answer" % addr)
            head += chunk
        (size,) = struct.unpack(">i", head)
        data = b""
        while len(data) < size:
            chunk = s.recv(size - len(data))
            if not chunk:
                sys.exit("picture.py: %s closed the connection mid-answer" % addr)
            data += chunk
    # correlation id, throttle_time_ms, entries (one): error_code, error_message
    _, _, n, code, mlen = struct.unpack(">iiihh", data[:16])
    message = data[16:16 + mlen].decode() if mlen >= 0 else None
    if n != 1 or code != 0:
        sys.exit("picture.py: AlterClientQuotas at %s: error %d %s" % (addr, code, message))


def load(path):
    with open(path) as f:
        rows = [json.loads(line) for line in f if line.startswith("{")]
    if len(rows) < 20:
        sys.exit("picture.py: %s has %d samples; the producer did not run" % (path, len(rows)))
    return rows


def at(rows, t, field="acked"):
    """The cumulative `field` at wall time t (ms), interpolated; None outside the trace."""
    if t < rows[0]["t"] or t > rows[-1]["t"]:
        return None
    lo, hi = 0, len(rows) - 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if rows[mid]["t"] <= t:
            lo = mid
        else:
            hi = mid
    a, b = rows[lo], rows[hi]
    f = 0.0 if b["t"] == a["t"] else (t - a["t"]) / (b["t"] - a["t"])
    return a[field] + f * (b[field] - a[field])


def draw(a):
    traces = [load(p) for p in a.trace]
    samples = []
    with open(a.samples) as f:
        samples = [json.loads(line) for line in f if line.startswith("{")]
    n = len(traces)
    t0 = min(t[0]["t"] for t in traces)
    t_end = min(t[-1]["t"] for t in traces)
    x1 = (max(t[-1]["t"] for t in traces) - t0) / 1000.0
    secs = int((t_end - t0) // 1000)

    # bytes acknowledged in each second [s, s+1) of the common clock
    per_s = []
    for tr in traces:
        vals = []
        for s in range(secs):
            a0, a1 = at(tr, t0 + 1000 * s), at(tr, t0 + 1000 * (s + 1))
            vals.append(None if a0 is None or a1 is None else a1 - a0)
        per_s.append(vals)
    total_s = [None if any(v[s] is None for v in per_s) else sum(v[s] for v in per_s) for s in range(secs)]

    # the measured span: from --from to the end of the shortest trace
    m0, m1 = t0 + 1000 * a.from_s, t_end
    span = (m1 - m0) / 1000.0
    achieved = [(at(tr, m1) - at(tr, m0)) / span for tr in traces]
    skipped = [(at(tr, m1, "skipped") - at(tr, m0, "skipped")) / span for tr in traces]
    total = sum(achieved)
    lims = [[(r["t"], r["limit"]) for r in samples if r["proxy"] == i and r.get("limit") is not None] for i in range(n)]
    in_span = [[v for t, v in l if m0 <= t <= m1] for l in lims]
    # the limits' sum at each round of sampling (a round is one row per proxy, proxy 0 first)
    by_round, cur = [], {}
    for r in samples:
        if r["proxy"] == 0 and cur:
            by_round.append(cur)
            cur = {}
        if r.get("limit") is not None:
            cur[r["proxy"]] = (r["t"], r["limit"])
    if cur:
        by_round.append(cur)
    sums = [(min(t for t, _ in d.values()), sum(v for _, v in d.values())) for d in by_round if len(d) == n]
    sums_in = [v for t, v in sums if m0 <= t <= m1]
    views = {}
    for r in samples:
        if m0 <= r["t"] <= m1 and r.get("view"):
            views.setdefault("inst-%d" % r["proxy"], {}).setdefault(r["view"], 0)
            views["inst-%d" % r["proxy"]][r["view"]] += 1
    after = [v for v in total_s[int(a.from_s):] if v is not None]

    def median(v):
        s = sorted(v)
        return s[len(s) // 2] if s else None

    summary = {
        "limit": a.limit, "offered": a.offered, "measured_from_s": a.from_s, "measured_s": round(span, 1),
        "achieved": [round(x) for x in achieved], "total": round(total),
        "total_vs_limit_pct": round(100 * (total / a.limit - 1), 2),
        "skipped_offers": [round(x) for x in skipped],
        "per_second_total_min": round(min(after)) if after else None,
        "per_second_total_max": round(max(after)) if after else None,
        "limit_median": [round(median(v)) if v else None for v in in_span],
        "limit_sum_mean": round(sum(sums_in) / len(sums_in)) if sums_in else None,
        "limit_sum_min": round(min(sums_in)) if sums_in else None,
        "limit_sum_max": round(max(sums_in)) if sums_in else None,
        "views": views,
    }

    MB = 1e6
    fig = svgplot.Figure(820, "One cluster-wide bps limit, three kquota-proxy instances, a skewed load", a.subtitle)
    top = max([v for v in total_s if v is not None] + [a.limit]) * 1.12 / MB
    p = fig.panel(250, (0, x1), (0, top), "MB/s acknowledged", y_fmt=lambda v: "%.1f" % v, legend_rows=3,
                  title="Bytes acknowledged per second, through each proxy, and their sum")
    p.band(a.from_s, (t_end - t0) / 1000.0, "#888888", 0.07, label="measured")
    p.hline(a.limit / MB, LIMIT_COLOR, label="producer_byte_rate:bps %.0f" % a.limit)
    for i in range(n):
        end = per_s[i][-1] / MB if per_s[i] and per_s[i][-1] is not None else None
        pts = [(s, None if v is None else v / MB) for s, v in enumerate(per_s[i])] + [(secs, end)]
        p.line(pts, COLORS[i], width=1.4, step=True,
               label="inst-%d, offered %.1f: %.2f MB/s" % (i, a.offered[i] / MB, achieved[i] / MB))
    mean_n = 11  # the quota window: quota.window.num x quota.window.size.seconds
    trail = [(s + 1, sum(total_s[s + 1 - mean_n:s + 1]) / mean_n / MB) for s in range(mean_n - 1, secs)
             if all(v is not None for v in total_s[s + 1 - mean_n:s + 1])]
    p.line(trail, SUM_COLOR, width=1.3, dash="2 2", label="the sum's mean over the last %d s" % mean_n)
    last = total_s[-1] / MB if total_s and total_s[-1] is not None else None
    p.line([(s, None if v is None else v / MB) for s, v in enumerate(total_s)] + [(secs, last)], SUM_COLOR,
           width=2.2, step=True, label="sum: %.3f MB/s (%+.1f%%)" % (total / MB, summary["total_vs_limit_pct"]))

    q = fig.panel(200, (0, x1), (0, top), "MB/s", y_fmt=lambda v: "%.1f" % v, x_label="seconds", legend_rows=2,
                  title="Each proxy's part of the limit (kquota_proxy_bucket_limit, every 0.5 s), and their sum")
    q.hline(a.limit / MB, LIMIT_COLOR, label="the limit")
    for i in range(n):
        q.line([((t - t0) / 1000.0, v / MB) for t, v in lims[i]], COLORS[i], width=1.4,
               label="inst-%d: median %.2f" % (i, (summary["limit_median"][i] or 0) / MB))
    q.line([((t - t0) / 1000.0, v / MB) for t, v in sums], SUM_COLOR, width=2.0,
           label="sum: mean %.3f MB/s, from %.3f to %.3f" % tuple((summary[k] or 0) / MB for k in
                                                        ("limit_sum_mean", "limit_sum_min", "limit_sum_max")))
    fig.note("Measured from %g s to the end (%.0f s): achieved %s = %.0f bytes/s, %+.1f%% of the limit; each proxy's"
             " view of its limit: %s." % (a.from_s, span, " / ".join("%.0f" % x for x in achieved), total,
                                          summary["total_vs_limit_pct"],
                                          "; ".join("%s %s" % (k, ", ".join("%s in %d of %d samples" % (view, c, sum(v.values()))
                                                          for view, c in sorted(v.items())))
                                          for k, v in sorted(views.items()))))
    fig.note("Made by: %s" % a.command)
    fig.metadata(summary)
    with open(a.out, "w") as f:
        f.write(fig.svg())
    text = json.dumps(summary, indent=1, sort_keys=True)
    if a.summary:
        with open(a.summary, "w") as f:
            f.write(text + "\n")
    print(text)


def main():
    if len(sys.argv) == 7 and sys.argv[1] == "alter":
        alter(*sys.argv[2:7])
        return
    if len(sys.argv) > 1 and sys.argv[1] == "sample":
        if len(sys.argv) < 9:
            sys.exit(__doc__)
        out, seconds, quota, user, client_id = sys.argv[2:7]
        sample(out, float(seconds), quota, user, client_id, sys.argv[7:])
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["draw"])
    ap.add_argument("--samples", required=True)
    ap.add_argument("--trace", action="append", required=True)
    ap.add_argument("--offered", type=float, action="append", required=True)
    ap.add_argument("--limit", type=float, required=True)
    ap.add_argument("--from", dest="from_s", type=float, default=15.0)
    ap.add_argument("--out", required=True)
    ap.add_argument("--subtitle", action="append", default=[])
    ap.add_argument("--command", required=True)
    ap.add_argument("--summary")
    a = ap.parse_args()
    if len(a.trace) != len(a.offered):
        sys.exit("picture.py: one --offered per --trace")
    draw(a)


if __name__ == "__main__":
    main()
