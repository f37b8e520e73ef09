"""The latency kquota-proxy adds to a produce request, measured directly.

    latency.py DIRECT PROXY TOPIC ROUNDS BLOCKS SAMPLES [RECORD_BYTES [FORWARD]]

One connection straight to the broker and one through the proxy, both kept open, to the same
partition. Each sample is one Produce v7 request (acks=1, one record batch holding one record of
RECORD_BYTES, 1000 by default), sent only once the previous answer has arrived, and timed from the
first byte written to the last byte of the answer read (time.perf_counter_ns). A round is BLOCKS
blocks of SAMPLES samples on each connection, alternating (the first connection alternates from
block to block), after a warm-up of 200 requests on each; so both see the same machine, and drift
in its load falls on both. Prints one JSON object per round:

    {"round": 1, "direct": {"n": ..., "p50_us": ..., "p99_us": ..., "mean_us": ...},
     "proxy": {...}, "added_p50_us": ..., "added_p99_us": ...}

With FORWARD (the minimal forwarder's address) a third connection goes through it, in the same
rotation, and the line also has "forward" and "forward_added_p50_us"/"forward_added_p99_us".

The request is encoded once (kwire.py, beside the fault tests), so the client's own cost is a
sendall and a recv or two, the same on both paths. Every answer's error code is checked.
"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "faults"))
import kwire  # noqa: E402


def percentile(sorted_values, q):
    if not sorted_values:
        return float("nan")
    i = min(len(sorted_values) - 1, max(0, int(round(q * (len(sorted_values) - 1)))))
    return sorted_values[i]


class Timed:
    def __init__(self, addr, topic, batch):
        self.c = kwire.Conn(addr)
        self.topic, self.batch = topic, batch

    def one(self):
        c = self.c
        cid = c.next_id
        c.next_id += 1
        request = kwire.produce(cid, self.topic, 0, self.batch, acks=1)
        t0 = time.perf_counter_ns()
        c.s.sendall(request)
        answer = c.recv_frame()
        t1 = time.perf_counter_ns()
        error, _ = kwire.parse_produce(answer[4:])
        if error != 0:
            raise SystemExit("produce answered error %d" % error)
        return (t1 - t0) / 1000.0


def summary(samples):
    s = sorted(samples)
    return {
        "n": len(s),
        "p50_us": round(percentile(s, 0.50), 1),
        "p99_us": round(percentile(s, 0.99), 1),
        "mean_us": round(sum(s) / len(s), 1),
    }


def main():
    direct, proxy, topic = sys.argv[1:4]
    rounds, blocks, samples = (int(x) for x in sys.argv[4:7])
    size = int(sys.argv[7]) if len(sys.argv) > 7 else 1000
    forward = sys.argv[8] if len(sys.argv) > 8 else None
    kwire.wait_for_leader(direct, topic)
    batch = kwire.record_batch([os.urandom(size)])
    conns = {"direct": Timed(direct, topic, batch), "proxy": Timed(proxy, topic, batch)}
    if forward:
        conns["forward"] = Timed(forward, topic, batch)
    names = list(conns)
    for c in conns.values():
        for _ in range(200):
            c.one()
    for r in range(1, rounds + 1):
        got = {name: [] for name in names}
        for b in range(blocks):
            # Each path leads in turn, so that none always follows the same one.
            k = (b + r) % len(names)
            for name in names[k:] + names[:k]:
                c = conns[name]
                got[name].extend(c.one() for _ in range(samples))
        line = {"round": r}
        line.update({name: summary(got[name]) for name in names})
        for name, prefix in (("proxy", "added"), ("forward", "forward_added")):
            if name in line:
                for q in ("p50", "p99"):
                    line["%s_%s_us" % (prefix, q)] = round(line[name][q + "_us"] - line["direct"][q + "_us"], 1)
        print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
