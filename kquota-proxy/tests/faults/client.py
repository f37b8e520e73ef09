"""Real-client steps of the fault tests (kafka-python, the shared virtualenv).

    client.py roundtrip PROXY TAG          produce 20 records (acks=all) and read them back
    client.py create-topic PROXY TOPIC N   create TOPIC with N partitions through the proxy
    client.py check-acked PRODUCED CONSUMED
        PRODUCED: VerifiableProducer's JSON lines; CONSUMED: VerifiableConsumer --verbose's.
        Exit 0 when every acked value was consumed; prints the counts either way.
    client.py consumed-all PRODUCED CONSUMED   as check-acked, silent: exit 0 or 1 (for polling)

Every step is bounded in time and exits non-zero with the reason on stderr.
"""
import json
import sys
import time

ROUNDTRIP_TIMEOUT_S = 30


def roundtrip(proxy, tag):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    topic = "faults-roundtrip"
    values = [("%s-%d-%d" % (tag, time.time_ns(), i)).encode() for i in range(20)]
    producer = KafkaProducer(bootstrap_servers=proxy, acks="all", request_timeout_ms=10000)
    try:
        futures = [producer.send(topic, value=v, partition=0) for v in values]
        producer.flush(ROUNDTRIP_TIMEOUT_S)
        offsets = [f.get(timeout=ROUNDTRIP_TIMEOUT_S).offset for f in futures]
    finally:
        producer.close(5)
    consumer = KafkaConsumer(bootstrap_servers=proxy, enable_auto_commit=False, request_timeout_ms=10000)
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, offsets[0])
        seen = []
        deadline = time.monotonic() + ROUNDTRIP_TIMEOUT_S
        while len(seen) < len(values) and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=1000).values():
                seen.extend(r.value for r in records)
    finally:
        consumer.close()
    if seen[: len(values)] != values:
        sys.exit("roundtrip %s: read back %d of %d records in order" % (tag, len(seen), len(values)))
    print("   round trip through the proxy (%s): 20 records written (acks=all) and read back" % tag)


def create_topic(proxy, topic, partitions):
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic

    admin = KafkaAdminClient(bootstrap_servers=proxy, request_timeout_ms=20000)
    try:
        admin.create_topics([NewTopic(topic, num_partitions=int(partitions), replication_factor=1)])
    finally:
        admin.close()


def read_events(path):
    events = []
    with open(path, errors="replace") as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                try:
                    events.append(json.loads(line))
                except ValueError:
                    pass  # a line cut short by the process's end
    return events


def gaps(times, at_least_ms=1000):
    """The pauses of at least `at_least_ms` between consecutive event times, in seconds."""
    times = sorted(times)
    return ["%.1f s" % ((b - a) / 1000.0) for a, b in zip(times, times[1:]) if b - a >= at_least_ms]


def compare(produced, consumed):
    acked, errors, sent = set(), 0, 0
    global ACK_TIMES, READ_TIMES
    ACK_TIMES, READ_TIMES = [], []
    for e in read_events(produced):
        if e.get("name") == "producer_send_success":
            acked.add(e["value"])
            ACK_TIMES.append(e["timestamp"])
        elif e.get("name") == "producer_send_error":
            errors += 1
        elif e.get("name") == "tool_data":
            sent = e.get("sent", sent)
    seen, records = set(), 0
    for e in read_events(consumed):
        if e.get("name") == "record_data":
            seen.add(e["value"])
            records += 1
            READ_TIMES.append(e["timestamp"])
    missing = acked - seen
    return acked, errors, sent, seen, records, missing


def check_acked(produced, consumed):
    acked, errors, sent, seen, records, missing = compare(produced, consumed)
    print(
        "   producer: %d sent, %d acked, %d send errors; consumer: %d records, %d distinct"
        % (sent, len(acked), errors, records, len(seen))
    )
    print(
        "   pauses of a second or more: in the acks %s; in the records read %s"
        % (", ".join(gaps(ACK_TIMES)) or "none", ", ".join(gaps(READ_TIMES)) or "none")
    )
    if not acked:
        sys.exit("no record was acked")
    if missing:
        sample = sorted(missing, key=lambda v: int(v.rsplit(".", 1)[-1]))[:5]
        sys.exit("%d acked records were never consumed, for example %s" % (len(missing), sample))


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "roundtrip":
        roundtrip(*args)
    elif cmd == "create-topic":
        create_topic(*args)
    elif cmd == "check-acked":
        check_acked(*args)
    elif cmd == "consumed-all":
        acked, _, _, _, _, missing = compare(*args)
        sys.exit(0 if acked and not missing else 1)
    else:
        sys.exit("unknown command %r" % cmd)


if __name__ == "__main__":
    main()
