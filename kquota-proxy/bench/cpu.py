"""Produce requests as fast as the answers come, for measuring what forwarding them costs.

    cpu.py ADDR TOPIC REQUESTS BATCH_BYTES [IN_FLIGHT]

Sends REQUESTS Produce v7 requests (acks=1) to partition 0 of TOPIC, each one record batch of
about BATCH_BYTES (records of 100 bytes), keeping IN_FLIGHT (default 5, the Java producer's
max.in.flight.requests.per.connection) unanswered. The batch is encoded once. Prints one JSON
line: {"requests", "bytes_sent", "seconds", "mb_s"}. Every answer's error code is checked.
"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "faults"))
import kwire  # noqa: E402


def main():
    addr, topic = sys.argv[1], sys.argv[2]
    requests, batch_bytes = int(sys.argv[3]), int(sys.argv[4])
    in_flight = int(sys.argv[5]) if len(sys.argv) > 5 else 5
    kwire.wait_for_leader(addr, topic)
    records = max(1, batch_bytes // 108)  # a 100-byte record takes about 108 bytes in a batch
    batch = kwire.record_batch([os.urandom(100) for _ in range(records)])
    c = kwire.Conn(addr)
    frames = [kwire.produce(i, topic, 0, batch) for i in range(in_flight + 1)]
    sent = answered = 0
    bytes_sent = 0
    t0 = time.perf_counter()
    while answered < requests:
        while sent < requests and sent - answered < in_flight:
            f = frames[sent % len(frames)]
            c.s.sendall(f)
            bytes_sent += len(f)
            sent += 1
        answer = c.recv_frame()
        error, _ = kwire.parse_produce(answer[4:])
        if error != 0:
            raise SystemExit("produce answered error %d" % error)
        answered += 1
    seconds = time.perf_counter() - t0
    c.close()
    print(json.dumps({"requests": requests, "bytes_sent": bytes_sent, "seconds": round(seconds, 3),
                      "mb_s": round(bytes_sent / seconds / 1048576, 1)}))


if __name__ == "__main__":
    main()
