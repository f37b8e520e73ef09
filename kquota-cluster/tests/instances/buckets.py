"""Many bps buckets through one proxy, for the usage traffic test of run.sh: Produce requests
(acks=0) over a few plain sockets, each with a client id of its own among COUNT, so that
`{user=<default>, client-id=<default>} producer_byte_rate:bps` gives each a bucket.

    buckets.py ADDR TOPIC SECONDS PREFIX FIRST COUNT PERIOD_S VALUE_BYTES SEED [STEP [PARTITION]]

Client ids PREFIX+str(i) for every STEP-th i (default 1: all) of FIRST..FIRST+COUNT, to partition
PARTITION (default 0: a broker sent to directly must lead it); each sends
one request of VALUE_BYTES every PERIOD_S seconds (spread over the period), and every second 1 %
of them switch between that and three times as often. (The harness gives each proxy a range of
its own, and the next proxy's range with STEP 50: 2 % of the buckets are served by two.)
Requests are Produce v3 frames written by hand around a record batch of kafka-python's
(MemoryRecordsBuilder); acks=0, so nothing is read back. Exits after SECONDS, printing
"sent N requests" on stdout.
"""
import heapq
import random
import socket
import struct
import sys
import time

from kafka.record.memory_records import MemoryRecordsBuilder


def frame(client_id, correlation, topic, records, partition=0):
    cid = client_id.encode()
    header = struct.pack(">hhih", 0, 3, correlation, len(cid)) + cid
    name = topic.encode()
    body = (struct.pack(">hhi", -1, 0, 30000) + struct.pack(">i", 1) + struct.pack(">h", len(name)) + name
            + struct.pack(">i", 1) + struct.pack(">ii", partition, len(records)) + records)
    msg = header + body
    return struct.pack(">i", len(msg)) + msg


def main():
    addr, topic, seconds, prefix, first, count, period, size, seed = sys.argv[1:10]
    step = int(sys.argv[10]) if len(sys.argv) > 10 else 1
    partition = int(sys.argv[11]) if len(sys.argv) > 11 else 0
    first, count, period, size, seconds = int(first), int(count), float(period), int(size), float(seconds)
    rng = random.Random(int(seed))
    b = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=1 << 20)
    b.append(timestamp=None, key=None, value=rng.randbytes(size), headers=[])
    b.close()
    records = bytes(b.buffer())
    host, port = addr.rsplit(":", 1)
    socks = [socket.create_connection((host, int(port)), 10) for _ in range(4)]
    for s in socks:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    ids = list(range(first, first + count, step))
    fast = set()
    start = time.monotonic()
    # Each bucket's next send, spread over the first period.
    due = [(start + rng.random() * period, i) for i in ids]
    heapq.heapify(due)
    sent = 0
    corr = 0
    next_churn = start + 1.0
    while True:
        now = time.monotonic()
        if now - start >= seconds:
            break
        if now >= next_churn:
            next_churn += 1.0
            for i in rng.sample(ids, max(1, len(ids) // 100)):
                fast.symmetric_difference_update({i})
        out = [bytearray() for _ in socks]
        while due and due[0][0] <= now:
            at, i = heapq.heappop(due)
            corr += 1
            out[i % len(socks)] += frame(prefix + str(i), corr, topic, records, partition)
            heapq.heappush(due, (at + (period / 3.0 if i in fast else period), i))
            sent += 1
        for s, data in zip(socks, out):
            if data:
                s.sendall(data)
        time.sleep(0.01)
    for s in socks:
        s.close()
    print("sent %d requests" % sent, flush=True)


if __name__ == "__main__":
    main()
