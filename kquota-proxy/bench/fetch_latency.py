"""The time a 1 MiB Fetch answer takes, direct and through forwarders: what a consumer that has one
fetch in flight per broker (as Kafka's Java consumer) loses to each hop.

    fetch_latency.py TOPIC BLOCKS SAMPLES NAME=ADDR [NAME=ADDR ...]

TOPIC's partition 0 must hold at least ~100 MiB (bench/run.sh's bench-consume-large). Each sample
is one Fetch v4 (max_wait 0, max_bytes 1 MiB, from an offset stepping through the partition, so
the answer is always ~1 MiB of records from the page cache), sent once the previous answer has
been read whole; timed from the request's first byte to the answer's last. BLOCKS blocks of
SAMPLES samples per address, the addresses' order alternating from block to block. Prints one JSON
line: {NAME: {"n", "p50_us", "p90_us", "mean_us", "answer_bytes"}, ...}.
"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "faults"))
import kwire  # noqa: E402


def main():
    topic = sys.argv[1]
    blocks, samples = int(sys.argv[2]), int(sys.argv[3])
    paths = [a.split("=", 1) for a in sys.argv[4:]]
    conns = {name: kwire.Conn(addr) for name, addr in paths}
    times = {name: [] for name in conns}
    sizes = {name: 0 for name in conns}
    step = 1000  # records of 1,000 bytes: ~1 MiB apart
    for b in range(blocks + 1):  # block 0 warms up and is not counted
        order = list(conns) if b % 2 == 0 else list(conns)[::-1]
        for name in order:
            c = conns[name]
            for i in range(samples):
                cid = c.next_id
                c.next_id += 1
                request = kwire.fetch(cid, topic, 0, ((b * samples + i) * step) % 90000, max_wait_ms=0, max_bytes=1 << 20)
                t0 = time.perf_counter_ns()
                c.s.sendall(request)
                answer = c.recv_frame()
                t1 = time.perf_counter_ns()
                if len(answer) < 512 * 1024:
                    raise SystemExit("a Fetch through %s answered %d bytes, not ~1 MiB" % (name, len(answer)))
                if b > 0:
                    times[name].append((t1 - t0) / 1000.0)
                    sizes[name] = len(answer)
    out = {}
    for name, t in times.items():
        t.sort()
        out[name] = {
            "n": len(t),
            "p50_us": round(t[len(t) // 2], 1),
            "p90_us": round(t[int(len(t) * 0.9)], 1),
            "mean_us": round(sum(t) / len(t), 1),
            "answer_bytes": sizes[name],
        }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
