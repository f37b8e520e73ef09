"""Many connections at once, a share of them producing, through one address.

    many.py ADDR TOPIC PARTITIONS CONNECTIONS PRODUCING RATE SECONDS [BATCH_BYTES]

Opens CONNECTIONS connections to ADDR (from source addresses 127.0.1.1, 127.0.1.2, ..., a thousand
connections each, so that no address runs out of ports), each sending ApiVersions and then
Metadata for TOPIC and reading their answers, as every client does first. Then PRODUCING of them send Produce v7 requests (acks=1,
one record batch of about BATCH_BYTES, 1024 by default, of 100-byte records) to partition
i % PARTITIONS of TOPIC, each at RATE requests a second (one in flight, paced from a random start
offset), for SECONDS; the others stay open and silent. Prints one JSON line when the connections
are open ({"phase": "open", ...}, then waits for a line on stdin, so that the caller can measure
the idle connections) and one when the producing is done:

    {"phase": "done", "requests": N, "bytes": B, "seconds": S, "p50_us": ..., "p99_us": ...,
     "p999_us": ..., "max_us": ...}

Latency is from the request's first byte written to its answer's last byte read. Every answer's
error code is checked; a connection that fails ends the run with a message and exit status 1.
"""
import asyncio
import json
import os
import random
import struct
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "faults"))
import kwire  # noqa: E402

PER_SOURCE = 1000


async def read_frame(reader):
    (size,) = struct.unpack(">i", await reader.readexactly(4))
    return await reader.readexactly(size)


async def open_one(host, port, topic, i):
    source = "127.0.1.%d" % (1 + i // PER_SOURCE)
    reader, writer = await asyncio.open_connection(host, port, local_addr=(source, 0))
    writer.write(kwire.api_versions(1))
    await writer.drain()
    body = await read_frame(reader)
    (error,) = struct.unpack(">h", body[4:6])
    if error != 0:
        raise RuntimeError("ApiVersions on connection %d: error %d" % (i, error))
    # Then Metadata, as every client asks next: an answer to ApiVersions alone proves nothing to
    # the proxy (a broker that wants SASL answers it too), and an unproven connection is closed
    # after kquota.connections.grace.ms.
    writer.write(kwire.metadata(2, [topic]))
    await read_frame(reader)
    return reader, writer


async def produce(conn, i, topic, partition, batch, rate, until, latencies, totals):
    reader, writer = conn
    period = 1.0 / rate
    next_at = time.monotonic() + random.random() * period
    correlation = 3
    while True:
        now = time.monotonic()
        if next_at > now:
            await asyncio.sleep(next_at - now)
        if time.monotonic() >= until:
            return
        frame = kwire.produce(correlation, topic, partition, batch)
        t0 = time.perf_counter_ns()
        writer.write(frame)
        body = await read_frame(reader)
        latencies.append((time.perf_counter_ns() - t0) / 1000)
        error, _ = kwire.parse_produce(body[4:])
        if error != 0:
            raise RuntimeError("Produce on connection %d: error %d" % (i, error))
        totals[0] += 1
        totals[1] += len(frame)
        correlation += 1
        next_at += period


def pct(values, q):
    return values[min(len(values) - 1, int(q * (len(values) - 1)))] if values else None


async def main():
    addr, topic = sys.argv[1], sys.argv[2]
    partitions, connections, producing = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    rate, seconds = float(sys.argv[6]), float(sys.argv[7])
    batch_bytes = int(sys.argv[8]) if len(sys.argv) > 8 else 1024
    host, port = addr.rsplit(":", 1)
    kwire.wait_for_leader(addr, topic, partitions)
    batch = kwire.record_batch([os.urandom(100) for _ in range(max(1, batch_bytes // 108))])
    t0 = time.monotonic()
    conns = []
    # A hundred at a time: the listen backlog is not what is measured.
    for start in range(0, connections, 100):
        conns += await asyncio.gather(*(open_one(host, int(port), topic, i)
                                        for i in range(start, min(connections, start + 100))))
    print(json.dumps({"phase": "open", "connections": len(conns), "seconds": round(time.monotonic() - t0, 2)}),
          flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    latencies, totals = [], [0, 0]
    started = time.monotonic()
    until = started + seconds
    await asyncio.gather(*(produce(conns[i], i, topic, i % partitions, batch, rate, until, latencies, totals)
                           for i in range(producing)))
    elapsed = time.monotonic() - started
    latencies.sort()
    print(json.dumps({"phase": "done", "requests": totals[0], "bytes": totals[1], "seconds": round(elapsed, 2),
                      "p50_us": pct(latencies, 0.5), "p99_us": pct(latencies, 0.99),
                      "p999_us": pct(latencies, 0.999), "max_us": latencies[-1] if latencies else None}),
          flush=True)
    for _, w in conns:
        w.close()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except Exception as e:  # noqa: BLE001 - one message, not a traceback per connection
        print("many.py: %s" % e, file=sys.stderr)
        sys.exit(1)
