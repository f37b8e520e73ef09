"""A bare Kafka wire client for the fault tests and the benchmarks: requests encoded by hand (no
client library between the socket and the bytes), so a test controls every byte it sends and a
benchmark times one round trip and nothing else.

Only what the scripts need: ApiVersions v0, Metadata v4, Produce v7 (one partition, one record
batch of magic 2 with its CRC-32C), Fetch v4, and frames read whole. Every API and version used here
is served by Kafka 4.x (its minimum Produce is v3, Fetch v4).
"""
import socket
import struct
import time

API_PRODUCE, API_FETCH, API_METADATA, API_API_VERSIONS = 0, 1, 3, 18


def _crc32c_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_CRC32C = _crc32c_table()


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = _CRC32C[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def _varint(n):
    n = (n << 1) ^ (n >> 63)  # zigzag
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def string(s):
    if s is None:
        return struct.pack(">h", -1)
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def record_batch(values, timestamp_ms=None):
    """A magic-2 record batch of `values` (bytes), no keys, no compression. The CRC does not cover
    the base offset or the leader epoch, so the same bytes may be sent again and again."""
    ts = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
    records = bytearray()
    for i, v in enumerate(values):
        body = b"\x00" + _varint(0) + _varint(i) + _varint(-1) + _varint(len(v)) + v + _varint(0)
        records += _varint(len(body)) + body
    after_crc = (
        struct.pack(">hiqqqhii", 0, len(values) - 1, ts, ts, -1, -1, -1, len(values)) + records
    )
    crc = crc32c(after_crc)
    # batchLength counts from the leader epoch on: epoch(4) + magic(1) + crc(4) + the rest.
    return struct.pack(">qiibI", 0, 4 + 1 + 4 + len(after_crc), -1, 2, crc) + after_crc


def header(api_key, version, correlation_id, client_id="kquota-faults"):
    """Request header v1 (every non-flexible version)."""
    return struct.pack(">hhi", api_key, version, correlation_id) + string(client_id)


def frame(body):
    return struct.pack(">i", len(body)) + body


def api_versions(correlation_id):
    return frame(header(API_API_VERSIONS, 0, correlation_id))


def metadata(correlation_id, topics=None, auto_create=False):
    """Metadata v4: `topics` None asks for every topic."""
    if topics is None:
        t = struct.pack(">i", -1)
    else:
        t = struct.pack(">i", len(topics)) + b"".join(string(x) for x in topics)
    return frame(header(API_METADATA, 4, correlation_id) + t + struct.pack(">?", auto_create))


def produce(correlation_id, topic, partition, batch, acks=1, timeout_ms=30000, client_id="kquota-faults"):
    """Produce v7 of one record batch to one partition."""
    body = (
        string(None)
        + struct.pack(">hi", acks, timeout_ms)
        + struct.pack(">i", 1)
        + string(topic)
        + struct.pack(">i", 1)
        + struct.pack(">ii", partition, len(batch))
        + batch
    )
    return frame(header(API_PRODUCE, 7, correlation_id, client_id) + body)


def fetch(correlation_id, topic, partition, offset, max_wait_ms=500, max_bytes=1 << 20):
    """Fetch v4 of one partition from `offset`."""
    body = struct.pack(">iiiib", -1, max_wait_ms, 1, max_bytes, 0)
    body += struct.pack(">i", 1) + string(topic) + struct.pack(">i", 1)
    body += struct.pack(">iqi", partition, offset, max_bytes)
    return frame(header(API_FETCH, 4, correlation_id) + body)


class Reader:
    def __init__(self, data):
        self.d, self.o = data, 0

    def take(self, fmt):
        v = struct.unpack_from(fmt, self.d, self.o)
        self.o += struct.calcsize(fmt)
        return v if len(v) > 1 else v[0]

    def string(self):
        n = self.take(">h")
        if n < 0:
            return None
        s = self.d[self.o : self.o + n].decode()
        self.o += n
        return s


def parse_produce(body):
    """(error code, base offset) of a Produce v7 answer to one partition (`body` after the
    correlation id)."""
    r = Reader(body)
    assert r.take(">i") == 1
    r.string()
    assert r.take(">i") == 1
    _, error, base_offset = r.take(">ihq")
    return error, base_offset


def produce_throttle_ms(body):
    """The throttle_time_ms of a Produce v7 answer (its last field)."""
    return struct.unpack(">i", body[-4:])[0]


def parse_metadata(body):
    """(brokers [(node, host, port)], topics {name: (error, {partition: leader})}) of Metadata v4."""
    r = Reader(body)
    r.take(">i")  # throttle
    brokers = []
    for _ in range(r.take(">i")):
        node = r.take(">i")
        host = r.string()
        port = r.take(">i")
        r.string()  # rack
        brokers.append((node, host, port))
    r.string()  # cluster id
    r.take(">i")  # controller
    topics = {}
    for _ in range(r.take(">i")):
        error = r.take(">h")
        name = r.string()
        r.take(">?")
        parts = {}
        for _ in range(r.take(">i")):
            _, index, leader = r.take(">hii")
            for _ in range(2):  # replicas, isr
                r.take(">%di" % r.take(">i"))
            parts[index] = leader
        topics[name] = (error, parts)
    return brokers, topics


class Conn:
    """One connection; `call` sends a request frame and returns its answer's body."""

    def __init__(self, addr, timeout=30.0):
        host, port = addr.rsplit(":", 1)
        self.s = socket.create_connection((host, int(port)), timeout=timeout)
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.next_id = 1

    def recv_exact(self, n):
        buf = bytearray()
        while len(buf) < n:
            chunk = self.s.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("closed after %d of %d bytes" % (len(buf), n))
            buf += chunk
        return bytes(buf)

    def recv_frame(self):
        (size,) = struct.unpack(">i", self.recv_exact(4))
        return self.recv_exact(size)

    def call(self, make, *args, **kw):
        cid = self.next_id
        self.next_id += 1
        self.s.sendall(make(cid, *args, **kw))
        answer = self.recv_frame()
        (got,) = struct.unpack_from(">i", answer)
        if got != cid:
            raise AssertionError("answer to correlation id %d, expected %d" % (got, cid))
        return answer[4:]

    def close(self):
        self.s.close()


def wait_for_leader(addr, topic, partitions=1, deadline_s=30.0):
    """Creates `topic` by Metadata auto-creation (Kafka's default) and waits until every partition
    has a leader; returns the brokers the answer named."""
    end = time.monotonic() + deadline_s
    while True:
        c = Conn(addr)
        try:
            brokers, topics = parse_metadata(c.call(metadata, [topic], True))
        finally:
            c.close()
        err, parts = topics.get(topic, (-1, {}))
        if err == 0 and len(parts) >= partitions and all(l >= 0 for l in parts.values()):
            return brokers
        if time.monotonic() > end:
            raise TimeoutError("topic %s has no leader after %.0f s (error %d)" % (topic, deadline_s, err))
        time.sleep(0.1)
