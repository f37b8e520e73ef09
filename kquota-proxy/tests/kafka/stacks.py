"""librdkafka (confluent-kafka) and kafka-python clients, at their default settings, for suite.py.

    python stacks.py STACK MODE CONFIG_JSON ARGS...

STACK is "librdkafka" or "kafka-python"; CONFIG_JSON the client configuration in that stack's own
names (bootstrap, client id, security settings). The modes are Workload.java's (interop/kafka):

    roundtrip TOPIC PARTITIONS SMALL LARGE BASE_MS
                                              create, produce, read back with a group, check byte for byte
    produce-rate TOPIC SECONDS RECORD_BYTES   produce to partition 0 as fast as the client takes records
    consume-rate TOPIC SECONDS                read partition 0 from the beginning
    authfail TOPIC                            expect the client to fail authenticating (bad password)
    verify TOPIC PARTITIONS SMALL LARGE BASE_MS
                                              (librdkafka) read and check a topic another stack produced

Each prints one JSON object as its last line; a failure raises (non-zero exit, traceback).
Nothing here shortens a client timeout: every wait is the client's own, bounded by a deadline of the
script's that only turns a hang into a failure.
"""
import json
import os
import sys
import threading
import time

import records

ROUNDTRIP_DEADLINE_S = 180
# How many bytes a rate producer keeps queued at most: the Java producer's buffer.memory default.
QUEUE_BYTES = 32 * 1024 * 1024


class Sampler:
    """Samples a byte counter every 100 ms from the first call of start(): [[ms, bytes], ...]."""

    def __init__(self):
        self.count = 0
        self.samples = []
        self.t0 = None
        self._stop = threading.Event()
        self._lock = threading.Lock()

    def add(self, n):
        with self._lock:
            self.count += n

    def start(self):
        if self.t0 is not None:
            return
        self.t0 = time.monotonic()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self):
        k = 0
        while not self._stop.is_set():
            with self._lock:
                self.samples.append([int((time.monotonic() - self.t0) * 1000), self.count])
            k += 1
            delay = self.t0 + k * 0.1 - time.monotonic()
            if delay > 0:
                self._stop.wait(delay)

    def elapsed(self):
        return 0.0 if self.t0 is None else time.monotonic() - self.t0

    def stop(self):
        self._stop.set()
        with self._lock:
            return list(self.samples)


def emit(obj):
    print(json.dumps(obj), flush=True)


# ---------------------------------------------------------------- librdkafka


def rd_roundtrip(conf, topic, partitions, small, large, base_ms):
    from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    t0 = time.monotonic()
    admin = AdminClient(dict(conf))
    for t, f in admin.create_topics([NewTopic(topic, partitions, 3)]).items():
        try:
            f.result()
        except KafkaException as e:
            if e.args[0].name() != "TOPIC_ALREADY_EXISTS":
                raise
    rd_wait_leaders(dict(conf), topic, partitions)
    errors = []

    def delivered(err, msg):
        if err is not None:
            errors.append(err)

    producer = Producer(dict(conf))
    nbytes = 0
    for p in range(partitions):
        for i in range(small + large):
            k, v, h, ts = records.record(topic, p, i, small, large, base_ms)
            nbytes += len(k) + len(v)
            while True:
                try:
                    producer.produce(topic, v, k, partition=p, timestamp=ts, headers=h, on_delivery=delivered)
                    break
                except BufferError:
                    producer.poll(0.1)
            producer.poll(0)
    left = producer.flush(ROUNDTRIP_DEADLINE_S)
    assert left == 0, "%d records not delivered" % left
    assert not errors, "delivery failed: %s" % errors[:3]
    producer_meta = rd_metadata(producer, topic)
    produce_s = time.monotonic() - t0

    c = dict(conf)
    c.update({"group.id": topic + "-group", "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer = Consumer(c)
    consumer.subscribe([topic])
    nxt = [0] * partitions
    seen, expected = 0, partitions * (small + large)
    deadline = time.monotonic() + ROUNDTRIP_DEADLINE_S
    while seen < expected:
        assert time.monotonic() < deadline, "read %d of %d records; next per partition %s" % (seen, expected, nxt)
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        if msg.error():
            raise KafkaException(msg.error())
        p, i = msg.partition(), nxt[msg.partition()]
        assert i < small + large, "partition %d: a record after the last one at offset %d" % (p, msg.offset())
        ts_type, ts = msg.timestamp()
        bad = records.mismatch(topic, p, i, small, large, base_ms, msg.key(), msg.value(), msg.headers(), ts)
        assert bad is None, "partition %d offset %d (record %d): %s" % (p, msg.offset(), i, bad)
        nxt[p] = i + 1
        seen += 1
    consumer.commit(asynchronous=False)
    committed = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=30)
    total = sum(max(tp.offset, 0) for tp in committed)
    assert total == expected, "committed offsets add up to %d, not %d" % (total, expected)
    consumer_meta = rd_metadata(consumer, topic)
    extra = consumer.poll(0.5)
    assert extra is None or extra.error(), "a record after the last one"
    consumer.close()
    emit({"ok": True, "records": expected, "bytes": nbytes, "produce_s": round(produce_s, 2),
          "total_s": round(time.monotonic() - t0, 2), "producer": producer_meta, "consumer": consumer_meta})


def rd_wait_leaders(conf, topic, partitions):
    """Until every partition's leader answers ListOffsets: a new topic's partitions become ready on
    their leaders one by one, and a producer that is not idempotent (librdkafka's default) would
    reorder the batches it retries after NOT_LEADER_OR_FOLLOWER."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    c = dict(conf)
    c["group.id"] = topic + "-ready"
    consumer = Consumer(c)
    deadline = time.monotonic() + 60
    for p in range(partitions):
        while True:
            try:
                consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)
                break
            except KafkaException:
                assert time.monotonic() < deadline, "partition %d of %s has no leader after 60 s" % (p, topic)
                time.sleep(0.2)
    consumer.close()


def rd_verify(conf, topic, partitions, small, large, base_ms):
    """Reads TOPIC from the beginning (assigned, no group) and checks every record, as roundtrip does:
    for records another stack produced."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition

    t0 = time.monotonic()
    c = dict(conf)
    c.update({"group.id": topic + "-verify", "enable.auto.commit": False})
    consumer = Consumer(c)
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    nxt = [0] * partitions
    seen, expected = 0, partitions * (small + large)
    deadline = time.monotonic() + ROUNDTRIP_DEADLINE_S
    while seen < expected:
        assert time.monotonic() < deadline, "read %d of %d records; next per partition %s" % (seen, expected, nxt)
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        if msg.error():
            raise KafkaException(msg.error())
        p, i = msg.partition(), nxt[msg.partition()]
        assert i < small + large, "partition %d: a record after the last one at offset %d" % (p, msg.offset())
        bad = records.mismatch(topic, p, i, small, large, base_ms, msg.key(), msg.value(), msg.headers(), msg.timestamp()[1])
        assert bad is None, "partition %d offset %d (record %d): %s" % (p, msg.offset(), i, bad)
        nxt[p] = i + 1
        seen += 1
    consumer.close()
    emit({"ok": True, "records": seen, "total_s": round(time.monotonic() - t0, 2)})


def rd_metadata(client, topic):
    md = client.list_topics(topic, timeout=30)
    brokers = {str(b.id): "%s:%d" % (b.host, b.port) for b in md.brokers.values()}
    leaders = {str(p.id): p.leader for p in md.topics[topic].partitions.values()}
    return {"brokers": brokers, "leaders": leaders}


class RdThrottle:
    """librdkafka's statistics: the brokers' `throttle` windows, summed over every interval."""

    def __init__(self):
        self.sum = 0
        self.cnt = 0
        self.max = 0

    def __call__(self, stats_json):
        stats = json.loads(stats_json)
        for b in stats.get("brokers", {}).values():
            if b.get("nodeid", -1) < 0:
                continue
            t = b.get("throttle") or {}
            self.sum += t.get("sum", 0)
            self.cnt += t.get("cnt", 0)
            self.max = max(self.max, t.get("max", 0))

    def result(self):
        return {"throttle_avg_ms": (self.sum / self.cnt) if self.cnt else 0.0, "throttle_max_ms": float(self.max),
                "throttle_count": self.cnt}


def rd_produce_rate(conf, topic, seconds, record_bytes):
    from confluent_kafka import Producer

    sampler = Sampler()
    throttle = RdThrottle()
    errors = []
    state = {"outstanding": 0}

    def delivered(err, msg):
        state["outstanding"] -= record_bytes
        if err is not None:
            errors.append(err)
            return
        sampler.start()
        sampler.add(record_bytes)

    c = dict(conf)
    c.update({"statistics.interval.ms": 1000, "stats_cb": throttle})
    producer = Producer(c)
    value = os.urandom(record_bytes)
    sent = 0
    while sampler.t0 is None or sampler.elapsed() < seconds:
        assert not errors, "delivery failed: %s" % errors[:3]
        if state["outstanding"] + record_bytes > QUEUE_BYTES:
            producer.poll(0.05)
            continue
        try:
            producer.produce(topic, value, partition=0, on_delivery=delivered)
            state["outstanding"] += record_bytes
            sent += 1
        except BufferError:
            producer.poll(0.05)
        producer.poll(0)
    samples = sampler.stop()
    producer.purge()
    producer.flush(10)
    emit(dict({"ok": True, "record_bytes": record_bytes, "sent": sent, "samples": samples}, **throttle.result()))


def rd_consume_rate(conf, topic, seconds):
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition

    sampler = Sampler()
    throttle = RdThrottle()
    c = dict(conf)
    c.update({"group.id": c.get("client.id", "rate") + "-group", "enable.auto.commit": False,
              "statistics.interval.ms": 1000, "stats_cb": throttle})
    consumer = Consumer(c)
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    n = 0
    deadline = time.monotonic() + 120
    while sampler.t0 is None or sampler.elapsed() < seconds:
        assert sampler.t0 is not None or time.monotonic() < deadline, "no record in 120 s"
        msgs = consumer.consume(1000, 0.1)
        got = 0
        for m in msgs:
            if m.error():
                raise KafkaException(m.error())
            got += len(m.value() or b"") + len(m.key() or b"")
            n += 1
        if got:
            sampler.start()
            sampler.add(got)
    samples = sampler.stop()
    consumer.close()
    emit(dict({"ok": True, "records": n, "samples": samples}, **throttle.result()))


def rd_authfail(conf, topic):
    from confluent_kafka import KafkaError, Producer

    failures = []

    def on_error(err):
        failures.append(err)

    c = dict(conf)
    c["error_cb"] = on_error
    producer = Producer(c)
    deadline = time.monotonic() + 60
    while not any(e.code() == KafkaError._AUTHENTICATION for e in failures):
        assert time.monotonic() < deadline, "no authentication failure in 60 s (errors: %s)" % failures
        producer.poll(0.2)
    md_ok = True
    try:
        producer.list_topics(timeout=5)
    except Exception:
        md_ok = False
    emit({"ok": True, "error": str([e for e in failures if e.code() == KafkaError._AUTHENTICATION][0]),
          "metadata_after_failure": md_ok})


# ---------------------------------------------------------------- kafka-python


def kp_roundtrip(conf, topic, partitions, small, large, base_ms):
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import NewTopic
    from kafka.errors import TopicAlreadyExistsError

    t0 = time.monotonic()
    admin = KafkaAdminClient(**conf)
    try:
        admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=3)])
    except TopicAlreadyExistsError:
        pass
    # DescribeCluster (API 60): rewritten by the proxy like Metadata.
    described = {str(b["broker_id"]): "%s:%d" % (b["host"], b["port"]) for b in admin.describe_cluster()["brokers"]}
    admin.close()
    # Until every partition's leader answers ListOffsets (see rd_wait_leaders).
    ready = KafkaConsumer(**conf)
    ready.end_offsets([TopicPartition(topic, p) for p in range(partitions)])
    ready.close()
    producer = KafkaProducer(**conf)
    # The last partition's records go with acks=0: Produce requests the broker does not answer
    # (the proxy owes them no answer either), read back like the others.
    fire_and_forget = KafkaProducer(acks=0, **conf)
    futures = []
    nbytes = 0
    for p in range(partitions):
        sender = fire_and_forget if p == partitions - 1 else producer
        for i in range(small + large):
            k, v, h, ts = records.record(topic, p, i, small, large, base_ms)
            nbytes += len(k) + len(v)
            futures.append(sender.send(topic, value=v, key=k, headers=h, partition=p, timestamp_ms=ts))
    producer.flush(ROUNDTRIP_DEADLINE_S)
    fire_and_forget.flush(ROUNDTRIP_DEADLINE_S)
    for f in futures:
        f.get(timeout=0)  # raises the delivery error, if any
    producer_meta = kp_metadata(producer._metadata, topic)
    producer.close()
    fire_and_forget.close()
    produce_s = time.monotonic() - t0

    consumer = KafkaConsumer(topic, group_id=topic + "-group", auto_offset_reset="earliest",
                             enable_auto_commit=False, **conf)
    nxt = [0] * partitions
    seen, expected = 0, partitions * (small + large)
    deadline = time.monotonic() + ROUNDTRIP_DEADLINE_S
    while seen < expected:
        assert time.monotonic() < deadline, "read %d of %d records; next per partition %s" % (seen, expected, nxt)
        for tp, msgs in consumer.poll(timeout_ms=500).items():
            for m in msgs:
                p, i = m.partition, nxt[m.partition]
                assert i < small + large, "partition %d: a record after the last one at offset %d" % (p, m.offset)
                bad = records.mismatch(topic, p, i, small, large, base_ms, m.key, m.value, m.headers, m.timestamp)
                assert bad is None, "partition %d offset %d (record %d): %s" % (p, m.offset, i, bad)
                nxt[p] = i + 1
                seen += 1
    consumer.commit()
    total = sum(consumer.committed(TopicPartition(topic, p)) or 0 for p in range(partitions))
    assert total == expected, "committed offsets add up to %d, not %d" % (total, expected)
    assert not consumer.poll(timeout_ms=500), "a record after the last one"
    consumer_meta = kp_metadata(consumer._client.cluster, topic)
    consumer.close()
    emit({"ok": True, "records": expected, "bytes": nbytes, "produce_s": round(produce_s, 2),
          "total_s": round(time.monotonic() - t0, 2), "producer": producer_meta, "consumer": consumer_meta,
          "describe_cluster": described})


def kp_metadata(cluster, topic):
    brokers = {str(b.node_id): "%s:%d" % (b.host, b.port) for b in cluster.brokers()}
    leaders = {str(p): cluster.leader_for_partition(__import__("kafka").TopicPartition(topic, p))
               for p in sorted(cluster.partitions_for_topic(topic) or [])}
    return {"brokers": brokers, "leaders": leaders}


def kp_metric(metrics, group, name):
    v = (metrics.get(group) or {}).get(name)
    return None if v is None or v != v else float(v)


def kp_produce_rate(conf, topic, seconds, record_bytes):
    from kafka import KafkaProducer
    from kafka.errors import KafkaTimeoutError

    sampler = Sampler()
    errors = []
    state = {"outstanding": 0}
    lock = threading.Lock()

    def ok(_md):
        with lock:
            state["outstanding"] -= record_bytes
        sampler.start()
        sampler.add(record_bytes)

    def failed(e):
        with lock:
            state["outstanding"] -= record_bytes
        errors.append(e)

    producer = KafkaProducer(**conf)
    value = os.urandom(record_bytes)
    sent = 0
    while sampler.t0 is None or sampler.elapsed() < seconds:
        assert not errors, "delivery failed: %s" % errors[:3]
        # kafka-python does not bound what it buffers (buffer_memory is not enforced): keep at most
        # the Java producer's buffer.memory queued.
        if state["outstanding"] + record_bytes > QUEUE_BYTES:
            time.sleep(0.01)
            continue
        with lock:
            state["outstanding"] += record_bytes
        producer.send(topic, value=value, partition=0).add_callback(ok).add_errback(failed)
        sent += 1
    m = producer.metrics()
    samples = sampler.stop()
    try:
        producer.close(timeout=0)
    except KafkaTimeoutError:
        pass  # what is still buffered is abandoned
    emit({"ok": True, "record_bytes": record_bytes, "sent": sent, "samples": samples,
          "throttle_avg_ms": kp_metric(m, "producer-metrics", "throttle-time-avg"),
          "throttle_max_ms": kp_metric(m, "producer-metrics", "throttle-time-max")})


def kp_consume_rate(conf, topic, seconds):
    from kafka import KafkaConsumer, TopicPartition

    sampler = Sampler()
    consumer = KafkaConsumer(enable_auto_commit=False, **conf)
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    n = 0
    deadline = time.monotonic() + 120
    while sampler.t0 is None or sampler.elapsed() < seconds:
        assert sampler.t0 is not None or time.monotonic() < deadline, "no record in 120 s"
        got = 0
        for msgs in consumer.poll(timeout_ms=100).values():
            for m in msgs:
                got += len(m.value or b"") + len(m.key or b"")
                n += 1
        if got:
            sampler.start()
            sampler.add(got)
    m = consumer.metrics()
    samples = sampler.stop()
    consumer.close()
    emit({"ok": True, "records": n, "samples": samples,
          "throttle_avg_ms": kp_metric(m, "consumer-metrics", "throttle-time-avg"),
          "throttle_max_ms": kp_metric(m, "consumer-metrics", "throttle-time-max")})


def kp_authfail(conf, topic):
    from kafka import KafkaProducer
    from kafka.errors import KafkaError

    try:
        p = KafkaProducer(**conf)
    except KafkaError as e:
        emit({"ok": True, "error": "%s: %s" % (type(e).__name__, e)})
        return
    # Connected lazily: the first send has to authenticate.
    try:
        p.send(topic, b"x").get(timeout=60)
    except KafkaError as e:
        emit({"ok": True, "error": "%s: %s" % (type(e).__name__, e)})
        return
    finally:
        p.close(timeout=0)
    raise AssertionError("a producer with a wrong password was able to produce")


MODES = {
    "librdkafka": {"roundtrip": rd_roundtrip, "produce-rate": rd_produce_rate, "consume-rate": rd_consume_rate,
                   "authfail": rd_authfail, "verify": rd_verify},
    "kafka-python": {"roundtrip": kp_roundtrip, "produce-rate": kp_produce_rate, "consume-rate": kp_consume_rate,
                     "authfail": kp_authfail},
}
ARGS = {"roundtrip": (str, int, int, int, int), "verify": (str, int, int, int, int), "produce-rate": (str, float, int), "consume-rate": (str, float),
        "authfail": (str,)}


def main():
    if len(sys.argv) < 4 or sys.argv[1] not in MODES or sys.argv[2] not in ARGS:
        sys.exit(__doc__)
    stack, mode, conf = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    types = ARGS[mode]
    args = sys.argv[4:]
    if len(args) != len(types):
        sys.exit("%s takes %d arguments" % (mode, len(types)))
    MODES[stack][mode](conf, *(t(a) for t, a in zip(types, args)))


if __name__ == "__main__":
    main()
