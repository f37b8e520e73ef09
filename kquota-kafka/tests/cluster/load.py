"""One producer at a capped offered rate into ONE partition (confluent-kafka, librdkafka), for the
accuracy case of suite.py: the partition is led by one broker, so what this producer gets
acknowledged is what that broker let through.

    load.py BOOTSTRAP TOPIC PARTITION RATE_BYTES_PER_S SECONDS CLIENT_ID PROGRESS_FILE [RECORD_BYTES]

kquota-cluster/tests/instances/load.py's schedule, with librdkafka at its default settings (acks=all,
its own batching and timeouts) except the partition each record goes to: records of RECORD_BYTES
(default 16384) are offered on a fixed schedule (RATE bytes/s from the start); a record whose turn
comes while more than half a second of the rate (at least four records) is still unacknowledged is
skipped, not queued, so the offered load never exceeds RATE and a throttled producer does not catch
up later with a burst. Every 0.25 s a JSON line goes to PROGRESS_FILE: {"t": wall clock s, "sent":
bytes, "acked": bytes, "skipped": bytes, "errors": n, "error": the first delivery error or null,
"throttle_ms": the largest throttle time the brokers reported so far}. Exits after SECONDS (or at
SIGTERM), after a last line.
"""
import json
import os
import signal
import sys
import time

from confluent_kafka import Producer


def main():
    bootstrap, topic, partition, rate, seconds, client_id, progress = sys.argv[1:8]
    size = int(sys.argv[8]) if len(sys.argv) > 8 else 16384
    partition, rate, seconds = int(partition), float(rate), float(seconds)
    payload = os.urandom(size)
    state = {"acked": 0, "errors": 0, "error": None, "throttle_ms": 0}

    def delivered(err, msg):
        if err is None:
            state["acked"] += len(msg.value())
        else:
            state["errors"] += 1
            if state["error"] is None:
                state["error"] = str(err)

    def throttled(event):
        state["throttle_ms"] = max(state["throttle_ms"], int(event.throttle_time * 1000))

    producer = Producer({"bootstrap.servers": bootstrap, "client.id": client_id, "throttle_cb": throttled})
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    bound = max(rate * 0.5, 4 * size)
    out = open(progress, "a", buffering=1)
    start = time.monotonic()
    sent = skipped = 0
    next_report = start

    def report():
        out.write(json.dumps({"t": time.time(), "sent": sent, "acked": state["acked"], "skipped": skipped,
                              "errors": state["errors"], "error": state["error"],
                              "throttle_ms": state["throttle_ms"]}) + "\n")

    while not stop:
        now = time.monotonic()
        if now - start >= seconds:
            break
        due = rate * (now - start) - sent - skipped
        while due >= size:
            if sent - state["acked"] <= bound:
                try:
                    producer.produce(topic, payload, partition=partition, on_delivery=delivered)
                    sent += size
                except BufferError:
                    skipped += size
            else:
                skipped += size
            due -= size
        producer.poll(0.002)
        if now >= next_report:
            report()
            next_report += 0.25
    producer.flush(5)
    report()
    out.close()


if __name__ == "__main__":
    main()
