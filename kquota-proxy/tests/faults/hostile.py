"""Hostile clients against kquota-proxy (plain asyncio sockets, every byte chosen here).

    hostile.py vanish  PROXY BROKER_LISTENER TOPIC
        Clients that vanish mid-request: rounds of hundreds of connections open at once, each
        sending nothing, part of a size prefix, half a frame, a whole Produce (small and large),
        a Fetch the broker holds, or pipelined Metadata, then closing (FIN or RST) before the
        answer, some at once and some all together once every one has sent.
    hostile.py garbage PROXY BROKER_LISTENER TOPIC MAX_REQUEST_BYTES IDLE_TIMEOUT_MS
        Garbage and oversized frames: random bytes, negative sizes, sizes above MAX_REQUEST_BYTES,
        frames shorter than a request header, a Produce cut short before its acks, valid headers
        with truncated bodies (closed, half-closed, and stalled past the idle timeout), unknown api
        keys, versions above the proxy's caps, and a garbage frame of exactly MAX_REQUEST_BYTES.
        Each case states what the proxy must do (close the connection within a bound, or answer)
        and any other outcome fails.
    hostile.py throttled PROXY BROKER_LISTENER TOPIC CLIENT_ID
        Clients that vanish while throttled: CLIENT_ID's quota must be far below 64 KB/s. Each
        connection's first answer must carry a throttle; then it sends more and closes while the
        proxy is not reading it (Kafka's mute), some before their first answer.

Connections alternate between the bootstrap listener (PROXY) and broker 1's (BROKER_LISTENER).
Everything is bounded: at most CONCURRENCY connections at once, each case by its own deadline, the
whole run by RUN_DEADLINE_S. Exits 1 listing every case whose outcome was not the expected one.
"""
import asyncio
import os
import random
import socket
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kwire  # noqa: E402

CONCURRENCY = 250
RUN_DEADLINE_S = 150
rng = random.Random(int(os.environ.get("FAULTS_SEED", "1")))


def addr_of(s):
    host, port = s.rsplit(":", 1)
    return host, int(port)


async def open_conn(addr):
    reader, writer = await asyncio.wait_for(asyncio.open_connection(*addr), 10)
    writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return reader, writer


def reset(writer):
    """Closes with RST (SO_LINGER 0): unsent bytes are dropped and the proxy sees ECONNRESET."""
    sock = writer.get_extra_info("socket")
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    writer.transport.abort()


async def close(writer, rst):
    if rst:
        reset(writer)
    else:
        writer.close()
        try:
            await asyncio.wait_for(writer.wait_closed(), 5)
        except (OSError, asyncio.TimeoutError):
            pass


# ---- clients that vanish mid-request ---------------------------------------------------------


def vanish_payloads(topic):
    small = kwire.produce(1, topic, 0, kwire.record_batch([b"v" * 1000]))
    large = kwire.produce(1, topic, 0, kwire.record_batch([os.urandom(1000) for _ in range(500)]))
    acks_all = kwire.produce(1, topic, 0, kwire.record_batch([b"a" * 100] * 10), acks=-1)
    # Offset 0 of an empty partition is its end: the broker holds the Fetch for max_wait.
    hold = kwire.fetch(1, topic + "-empty", 0, 0, max_wait_ms=3000)
    pipelined = b"".join(kwire.metadata(i) for i in range(1, 21))
    return {
        "nothing": b"",
        "two bytes of a size": small[:2],
        "size only": small[:4],
        "half a Produce": small[: len(small) // 2],
        "a whole Produce (1 KB)": small,
        "a whole Produce, acks=all": acks_all,
        "half a large Produce (500 KB)": large[: len(large) // 2],
        "a whole large Produce (500 KB)": large,
        "a Fetch the broker holds 3 s": hold,
        "20 pipelined Metadata": pipelined,
    }


async def vanish(proxy, broker, topic):
    payloads = vanish_payloads(topic)
    kwire.wait_for_leader(proxy, topic + "-empty")
    names = list(payloads)
    rounds, per_round = 3, 200
    counts = {}
    failures = []

    async def one(i, sent_all, ready):
        name = names[i % len(names)]
        rst = (i // len(names)) % 2 == 1
        together = (i // (2 * len(names))) % 2 == 1
        counts[name] = counts.get(name, 0) + 1
        try:
            _, writer = await open_conn(addr_of(proxy if i % 2 == 0 else broker))
        except (OSError, asyncio.TimeoutError) as e:
            failures.append("connect (%s): %r" % (name, e))
            ready()
            return
        try:
            if payloads[name]:
                writer.write(payloads[name])
                if not rst:
                    await asyncio.wait_for(writer.drain(), 10)
        except (OSError, asyncio.TimeoutError):
            pass  # the proxy may close first (it never should here, but the test is the fds)
        ready()
        if together:
            await sent_all.wait()  # all of this round's connections are open at once
        await close(writer, rst)

    for r in range(rounds):
        sent_all = asyncio.Event()
        pending = [per_round]

        def ready():
            pending[0] -= 1
            if pending[0] == 0:
                sent_all.set()

        await asyncio.wait_for(
            asyncio.gather(*(one(r * per_round + i, sent_all, ready) for i in range(per_round))), 60
        )
    total = rounds * per_round
    print("   %d connections vanished mid-request (%d at once per round, FIN and RST):" % (total, per_round))
    for name in names:
        print("     %4d x %s" % (counts.get(name, 0), name))
    return failures


# ---- clients that vanish while throttled ------------------------------------------------------


async def throttled(proxy, broker, topic, client_id):
    """Connections of one client id whose quota is far below what they send: each sends a 64 KB
    Produce, reads its answer (which must carry a throttle: the proxy then stops reading the
    connection for that long), sends more or part of more, and closes (FIN or RST) while the
    proxy is not reading it; some close before the first answer."""
    kwire.wait_for_leader(proxy, topic)
    batch = kwire.record_batch([os.urandom(1000) for _ in range(64)])
    request = kwire.produce(1, topic, 0, batch, client_id=client_id)
    half = request[: len(request) // 2]
    n = 100
    failures, throttles, answered = [], [], [0]

    async def one(i):
        try:
            reader, writer = await open_conn(addr_of(proxy if i % 2 == 0 else broker))
        except (OSError, asyncio.TimeoutError) as e:
            failures.append("connect: %r" % e)
            return
        rst = i % 3 == 0
        try:
            writer.write(request)
            await asyncio.wait_for(writer.drain(), 10)
            if i % 5 != 4:  # one in five closes before its answer
                size = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), 15))[0]
                body = await asyncio.wait_for(reader.readexactly(size), 15)
                error, _ = kwire.parse_produce(body[4:])
                if error != 0:
                    failures.append("a throttled Produce answered error %d" % error)
                throttles.append(kwire.produce_throttle_ms(body[4:]))
                answered[0] += 1
                writer.write(request if i % 2 == 0 else half)  # not read while throttled
                await asyncio.wait_for(writer.drain(), 10)
        except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError) as e:
            failures.append("a throttled client's first answer: %r" % e)
        await close(writer, rst)

    await asyncio.gather(*(one(i) for i in range(n)))
    if throttles and max(throttles) <= 0:
        failures.append("no answer carried a throttle: is the quota for client id %s in force?" % client_id)
    print(
        "   %d connections of client id %s vanished while throttled: %d answered first, throttle_time_ms %s..%s"
        % (n, client_id, answered[0], min(throttles or [0]), max(throttles or [0]))
    )
    return failures


# ---- garbage and oversized frames ------------------------------------------------------------

CLOSES = "closes"  # the proxy closes the connection by itself, without the client half-closing
CLOSES_AT_EOF = "closes at EOF"  # once the client half-closes (a frame the proxy must wait for)
CLOSES_IDLE = "closes when idle"  # the client stalls mid-frame: closed after the idle timeout
ANSWERS = "answers"  # an answer frame comes back (the connection may stay open)


def garbage_cases(topic, max_request, idle_s):
    def sized(size, body=b""):
        return struct.pack(">i", size) + body

    hdr = kwire.header(kwire.API_METADATA, 4, 7)
    produce = kwire.produce(9, topic, 0, kwire.record_batch([b"g" * 100]))
    produce_body = produce[4:]
    acks_at = len(kwire.header(0, 7, 9)) + 2  # the transactional id (null) is 2 bytes
    cases = []

    def case(name, data, expect, n=1, within=15.0):
        cases.append((name, data, expect, n, within))

    # Random bytes: anything may happen first, but once half-closed the proxy must close.
    for i in range(150):
        case("random bytes", os.urandom(rng.randint(1, 3000)), CLOSES_AT_EOF)
    for size in (-1, -2, -(2 ** 31), -rng.randint(3, 2 ** 31 - 1)):
        case("a negative size (%d)" % size, sized(size, hdr), CLOSES, n=10)
    for size in (max_request + 1, max_request * 2, 2 ** 31 - 1):
        case("a size above --max-request-bytes (%d)" % size, sized(size, hdr), CLOSES, n=10)
    case("a size above --max-request-bytes, no body", sized(max_request + 1), CLOSES, n=10)
    for size in range(0, 8):
        case("a %d-byte frame (shorter than a header)" % size, sized(size, b"\x00" * size), CLOSES, n=5)
    case("a Produce cut short before its acks", sized(acks_at, produce_body[:acks_at]), CLOSES, n=10)
    case(
        "a Produce whose body stops after its acks",
        sized(acks_at + 2, produce_body[: acks_at + 2]),
        CLOSES,  # forwarded; Kafka cannot parse it and closes, and so does the proxy
        n=10,
    )
    case("a Metadata whose body is cut short", sized(len(hdr) + 3, hdr + b"\x00\x00\x00"), CLOSES, n=10)
    case(
        "a valid header, body truncated, half-closed",
        produce[: len(produce) // 2],
        CLOSES_AT_EOF,
        n=20,
    )
    case(
        "a valid header, body truncated, stalled",
        produce[: len(produce) // 2],
        CLOSES_IDLE,
        n=20,
        within=idle_s + 15,
    )
    case("a size prefix, stalled", sized(100), CLOSES_IDLE, n=10, within=idle_s + 15)
    for key in (999, 32767, -1, -32768, 200):
        case("an unknown api key %d" % key, kwire.frame(kwire.header(key, 0, 5)), CLOSES, n=5)
    for key, version in ((kwire.API_METADATA, 99), (kwire.API_PRODUCE, 99), (kwire.API_FETCH, 99)):
        case(
            "api key %d at v%d (above the proxy's cap)" % (key, version),
            kwire.frame(kwire.header(key, version, 5) + b"\x00" * 16),
            CLOSES,
            n=5,
        )
    case("ListOffsets at v99 (not rewritten: forwarded)", kwire.frame(kwire.header(2, 99, 5)), CLOSES, n=5)
    case(
        "ApiVersions at v99 (answered by the proxy)",
        kwire.frame(kwire.header(kwire.API_API_VERSIONS, 99, 5) + b"\x00" * 4),
        ANSWERS,
        n=10,
    )
    garbage = bytearray(os.urandom(max_request))
    garbage[0:2] = struct.pack(">h", 1234)  # an unknown api key: forwarded, then Kafka closes
    case("a garbage frame of exactly --max-request-bytes", sized(max_request, bytes(garbage)), CLOSES, n=16, within=30)
    return cases


async def run_case(name, data, expect, within, target, sem):
    async with sem:
        t0 = time.monotonic()
        try:
            reader, writer = await open_conn(target)
        except (OSError, asyncio.TimeoutError) as e:
            return "%s: cannot connect: %r" % (name, e)
        got = bytearray()
        closed = False
        try:
            writer.write(data)
            try:
                await asyncio.wait_for(writer.drain(), within)
            except (OSError, asyncio.TimeoutError):
                pass  # the proxy closed before taking it all: it will show as a close below
            if expect == CLOSES_AT_EOF:
                try:
                    writer.write_eof()
                except OSError:
                    pass
            deadline = t0 + within
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                try:
                    chunk = await asyncio.wait_for(reader.read(65536), left)
                except asyncio.TimeoutError:
                    break
                except OSError:
                    closed = True  # a reset is a close
                    break
                if not chunk:
                    closed = True
                    break
                got += chunk
                if expect == ANSWERS and len(got) >= 4 and len(got) >= 4 + struct.unpack(">i", got[:4])[0]:
                    break
        finally:
            reset(writer)
        took = time.monotonic() - t0
        if expect == ANSWERS:
            if len(got) < 10:
                return "%s: expected an answer, got %d bytes (closed: %s)" % (name, len(got), closed)
            cid, error = struct.unpack(">ih", bytes(got[4:10]))
            if cid != 5 or error != 35:
                return "%s: expected UNSUPPORTED_VERSION (35) to correlation id 5, got error %d to %d" % (name, error, cid)
            return None
        if not closed:
            return "%s: the proxy did not close the connection within %.0f s (%d bytes came back)" % (name, within, len(got))
        if expect == CLOSES_IDLE and took < 1.0:
            return "%s: closed after %.2f s, before any idle timeout" % (name, took)
        return None


async def garbage(proxy, broker, topic, max_request, idle_ms):
    kwire.wait_for_leader(proxy, topic)
    cases = garbage_cases(topic, int(max_request), int(idle_ms) / 1000.0)
    sem = asyncio.Semaphore(CONCURRENCY)
    jobs, tally = [], {}
    i = 0
    for name, data, expect, n, within in cases:
        for _ in range(n):
            target = addr_of(proxy if i % 2 == 0 else broker)
            i += 1
            jobs.append(run_case(name, data, expect, within, target, sem))
            tally[(name, expect)] = tally.get((name, expect), 0) + 1
    rng.shuffle(jobs)
    t0 = time.monotonic()
    results = await asyncio.gather(*jobs)
    failures = [r for r in results if r]
    print("   %d hostile connections in %.1f s (up to %d at once):" % (len(jobs), time.monotonic() - t0, CONCURRENCY))
    for (name, expect), n in tally.items():
        print("     %4d x %s: %s" % (n, name, expect))
    return failures


def main():
    cmd = sys.argv[1]
    if cmd == "vanish":
        work = vanish(*sys.argv[2:5])
    elif cmd == "garbage":
        work = garbage(*sys.argv[2:7])
    elif cmd == "throttled":
        work = throttled(*sys.argv[2:6])
    else:
        sys.exit("unknown command %r" % cmd)
    failures = asyncio.run(asyncio.wait_for(work, RUN_DEADLINE_S))
    if failures:
        shown = sorted(set(failures))
        print("hostile.py %s: %d unexpected outcomes (%d distinct):" % (cmd, len(failures), len(shown)), file=sys.stderr)
        for f in shown[:40]:
            print("  " + f, file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
