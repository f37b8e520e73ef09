"""The records of the pass-through round trips, the same ones interop/kafka's Workload.java makes.

Record i of partition p of a topic (SMALL small records and LARGE ~1 MB ones per partition):

* key: "TOPIC/p/i" (UTF-8)
* value: SHA-256 in counter mode over the key (SHA256(key || be32(block)) for block 0, 1, ...), cut to
  990,000 bytes for the large records (at evenly spread positions) and to 1 + (37 i + 11 p) % 400
  bytes for the others
* headers, in this order: index=str(i), partition=str(p), digest=SHA256(key)[:16], empty=b"", and
  a second index=b"again" on every fifth record (a repeated header key)
* timestamp: BASE_MS + i (CreateTime, set by the producer); BASE_MS is the run's, and recent: Kafka's
  time-based retention deletes records whose timestamps are older than retention.ms (7 days)
"""
import hashlib

LARGE_BYTES = 990_000


def is_large(i, small, large):
    total = small + large
    return any(i == (k + 1) * total // (large + 1) for k in range(large))


def key(topic, p, i):
    return ("%s/%d/%d" % (topic, p, i)).encode()


def value(k, size):
    blocks = (size + 31) // 32
    return b"".join(hashlib.sha256(k + b.to_bytes(4, "big")).digest() for b in range(blocks))[:size]


def headers(k, p, i):
    h = [
        ("index", str(i).encode()),
        ("partition", str(p).encode()),
        ("digest", hashlib.sha256(k).digest()[:16]),
        ("empty", b""),
    ]
    if i % 5 == 0:
        h.append(("index", b"again"))
    return h


def record(topic, p, i, small, large, base_ms):
    """(key, value, headers, timestamp_ms) of record i of partition p."""
    k = key(topic, p, i)
    size = LARGE_BYTES if is_large(i, small, large) else 1 + (i * 37 + p * 11) % 400
    return k, value(k, size), headers(k, p, i), base_ms + i


def mismatch(topic, p, i, small, large, base_ms, got_key, got_value, got_headers, got_timestamp):
    """None if the record read is record i of partition p, else what differs."""
    k, v, h, ts = record(topic, p, i, small, large, base_ms)
    if got_key != k:
        return "key %r, expected %r" % (got_key, k)
    if got_value != v:
        return "value differs (%s bytes, expected %d)" % (
            None if got_value is None else len(got_value), len(v))
    if got_timestamp != ts:
        return "timestamp %r, expected %d" % (got_timestamp, ts)
    got_h = [(a, bytes(b) if b is not None else None) for a, b in (got_headers or [])]
    if got_h != h:
        return "headers %r, expected %r" % (got_h, h)
    return None
