"""Helpers for the kquotad interop suite: run a kquotad process, and speak DescribeClientQuotas (48) and
AlterClientQuotas (49) through kafka-python 3.0.12's KafkaAdminClient.

kafka-python has the message classes (JSON-schema driven ApiMessage) but no quota methods on the admin
client, so requests go through the admin client's own connection manager: the request is pinned to one
version with min_version = max_version = v, kafka-python negotiates it against the ApiVersions answer it
got while bootstrapping, encodes it, sends it on the admin client's connection and decodes the answer.
"""

import logging
import os
import re
import select
import signal
import subprocess
import threading
import time
from pathlib import Path

import kafka.errors as Errors
from kafka import KafkaAdminClient
from kafka.protocol.admin import AlterClientQuotasRequest, DescribeClientQuotasRequest

REPO = Path(__file__).resolve().parents[2]
KQUOTAD_BIN = Path(os.environ.get("KQUOTAD_BIN", REPO / "target" / "release" / "kquotad"))

USER, CLIENT, IP = "user", "client-id", "ip"
EXACT, DEFAULT, SPECIFIED = 0, 1, 2
REMOVE = object()  # an op value meaning "remove this key"

START_TIMEOUT_S = 20
STOP_TIMEOUT_S = 15


class KquotadError(AssertionError):
    pass


class Kquotad:
    """One kquotad process on 127.0.0.1:<free port> with the given data dir."""

    def __init__(self, data_dir, log_path, extra_args=(), listeners="PLAINTEXT://127.0.0.1:0",
                 anonymous_super_user=True):
        """anonymous_super_user: pass --super-users User:ANONYMOUS, so that plain (unauthenticated)
        admin clients may alter quotas, as the interop tests of the quota APIs need."""
        self.data_dir = Path(data_dir)
        self.log_path = Path(log_path)
        self.extra_args = list(extra_args)
        if anonymous_super_user:
            self.extra_args = ["--super-users", "User:ANONYMOUS", *self.extra_args]
        self.listener_spec = listeners
        self.listeners = {}  # name -> port
        self.proc = None
        self.port = None
        self._stdout_lines = []
        self._pending = b""

    def start(self):
        if not KQUOTAD_BIN.is_file() or not os.access(KQUOTAD_BIN, os.X_OK):
            raise KquotadError(
                f"kquotad binary not found at {KQUOTAD_BIN}; build it with "
                "`cargo build --release --bin kquotad` or set KQUOTAD_BIN (tests/python/run.sh does both)")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")
        cmd = [str(KQUOTAD_BIN), "--listeners", self.listener_spec,
               "--data-dir", str(self.data_dir), *self.extra_args]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL)
        log.close()
        first = self._read_first_line(START_TIMEOUT_S)
        m = re.fullmatch(r"listening on 127\.0\.0\.1:(\d+)", first.strip()) if first is not None else None
        if m is None:
            code = self.proc.poll()
            if code is None:
                self.proc.kill()
                self.proc.wait()
            raise KquotadError(
                f"kquotad did not start: command {cmd!r}, exit status {self.proc.returncode}, "
                f"first stdout line {first!r} (expected 'listening on 127.0.0.1:<port>' within "
                f"{START_TIMEOUT_S} s)\n--- stderr ---\n{self.log()}")
        self.port = int(m.group(1))
        # Then one "listener NAME://127.0.0.1:<port>" line per listener.
        for _ in [x for x in self.listener_spec.split(",") if x.strip()]:
            line = self._read_first_line(START_TIMEOUT_S)
            lm = re.fullmatch(r"listener (\w+)://127\.0\.0\.1:(\d+)", (line or "").strip())
            if lm is None:
                self.proc.kill()
                self.proc.wait()
                raise KquotadError(f"unexpected listener line {line!r}\n--- stderr ---\n{self.log()}")
            self.listeners[lm.group(1)] = int(lm.group(2))
        # Keep draining stdout so the server can never block on a full pipe.
        threading.Thread(target=self._drain, daemon=True).start()
        return self

    def _read_first_line(self, timeout):
        """The next stdout line (bytes after it are kept for the next call)."""
        deadline = time.monotonic() + timeout
        buf, self._pending = self._pending, b""
        fd = self.proc.stdout.fileno()
        while b"\n" not in buf:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                continue
            chunk = os.read(fd, 4096)
            if not chunk:  # EOF: the process exited
                return buf.decode(errors="replace") if buf else None
            buf += chunk
        line, self._pending = buf.split(b"\n", 1)
        return line.decode(errors="replace")

    def _drain(self):
        try:
            for line in self.proc.stdout:
                self._stdout_lines.append(line)
        except (ValueError, OSError):
            pass

    def log(self):
        try:
            return self.log_path.read_text(errors="replace")[-20000:]
        except OSError:
            return "<no log>"

    @property
    def bootstrap(self):
        return f"127.0.0.1:{self.port}"

    def bootstrap_for(self, listener):
        return f"127.0.0.1:{self.listeners[listener]}"

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self, sig=signal.SIGTERM):
        """SIGTERM (or SIGINT) and wait: kquotad must exit 0 (a graceful stop)."""
        if self.proc is None:
            return None
        if self.proc.poll() is not None:
            code = self.proc.returncode
            self.proc = None if code == 0 else self.proc
            if code != 0:
                raise KquotadError(f"kquotad had already exited with status {code}\n{self.log()}")
            return code
        name = signal.Signals(sig).name
        self.proc.send_signal(sig)
        try:
            code = self.proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise KquotadError(f"kquotad did not stop within {STOP_TIMEOUT_S} s of {name}\n{self.log()}")
        if code != 0:
            raise KquotadError(f"kquotad exited with status {code} after {name}\n{self.log()}")
        return code

    def kill(self):
        """SIGKILL: no chance to flush anything."""
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self.proc = None


def make_admin(server, **extra):
    config = dict(
        bootstrap_servers=server.bootstrap,
        client_id="kquota-pytest",
        request_timeout_ms=10000,
        bootstrap_timeout_ms=15000,
    )
    config.update(extra)
    return KafkaAdminClient(**config)


class _RecvRecorder(logging.Handler):
    """Records the raw bytes kafka-python's protocol parser logs at DEBUG ("Recv: %r"), so a failure can
    show what came off the wire."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.chunks = []  # (sequence number, parser ident, bytes), the last 64
        self.seq = 0
        self._mu = threading.Lock()

    def emit(self, record):
        if isinstance(record.msg, str) and record.msg.endswith("Recv: %r") and record.args:
            data = record.args[-1]
            ident = record.args[0] if len(record.args) > 1 else None
            if isinstance(data, (bytes, bytearray, memoryview)):
                with self._mu:
                    self.seq += 1
                    self.chunks.append((self.seq, str(ident), bytes(data)))
                    del self.chunks[:-64]

    def mark(self):
        with self._mu:
            return self.seq

    def since(self, mark, correlation_id=None):
        """The response frame (size prefix included) with this correlation id received after mark, or
        everything received after mark if it cannot be singled out."""
        with self._mu:
            chunks = [(ident, data) for seq, ident, data in self.chunks if seq > mark]
        everything = b"".join(data for _, data in chunks)
        if correlation_id is None:
            return everything
        for ident in dict.fromkeys(i for i, _ in chunks):
            stream = b"".join(data for i, data in chunks if i == ident)
            pos = 0
            while pos + 8 <= len(stream):
                size = int.from_bytes(stream[pos:pos + 4], "big", signed=True)
                if size < 4:
                    break
                if int.from_bytes(stream[pos + 4:pos + 8], "big", signed=True) == correlation_id:
                    return stream[pos:pos + 4 + size]
                pos += 4 + size
        return everything


_RECORDER = _RecvRecorder()
_parser_log = logging.getLogger("kafka.protocol.parser")
_parser_log.addHandler(_RECORDER)
_parser_log.setLevel(logging.DEBUG)
_parser_log.propagate = False  # keep pytest's log capture free of the byte dumps


def ent(*pairs):
    """An entity as ordered (type, name) pairs; name None is the default."""
    return tuple(pairs)


def key_of(pairs):
    """Order-independent identity of an entity: a frozenset of (type, name)."""
    return frozenset(pairs)


def show(entity_key):
    items = sorted(entity_key, key=lambda p: p[0])
    return "{" + ", ".join(f"{t}={'<default>' if n is None else n}" for t, n in items) + "}"


class Exchange:
    """A request, the response, and the bytes, for assertion messages."""

    def __init__(self, request, response, recv):
        self.request = request
        self.response = response
        self.recv = recv

    def __str__(self):
        try:
            req_hex = self.request.encode(header=True).hex()
        except Exception as e:  # pragma: no cover - diagnostics only
            req_hex = f"<cannot encode: {e!r}>"
        return (f"\n  request  {type(self.request).__name__} v{self.request.API_VERSION}: {self.request}"
                f"\n  request bytes (header+body, no size prefix): {req_hex}"
                f"\n  response {self.response}"
                f"\n  response bytes as received (size prefix included, best effort): {self.recv.hex()}")


class AlterResult(Exchange):
    def __init__(self, request, response, recv):
        super().__init__(request, response, recv)
        self.results = {}
        self.entity_orders = []
        for entry in response.entries:
            pairs = [(e.entity_type, e.entity_name) for e in entry.entity]
            k = key_of(pairs)
            assert len(k) == len(pairs), f"an entity type repeats in a response entity {pairs}{self}"
            assert k not in self.results, f"two response entries for entity {show(k)}{self}"
            self.results[k] = (entry.error_code, entry.error_message)
            self.entity_orders.append(pairs)

    def __getitem__(self, entity):
        k = key_of(entity)
        assert k in self.results, f"no response entry for entity {show(k)}{self}"
        return self.results[k]

    def assert_ok(self, *entities):
        entities = entities or [tuple(k) for k in self.results]
        for e in entities:
            code, msg = self[e]
            assert (code, msg) == (0, None), f"entity {show(key_of(e))}: expected (0, None), got ({code}, {msg!r}){self}"
        return self

    def assert_error(self, entity, code, message):
        got = self[entity]
        assert got == (code, message), (
            f"entity {show(key_of(entity))}: expected ({code}, {message!r}), got {got!r}{self}")
        return self


class DescribeResult(Exchange):
    def __init__(self, request, response, recv):
        super().__init__(request, response, recv)
        self.error_code = response.error_code
        self.error_message = response.error_message
        self.entries = None
        self.entity_orders = []
        if response.entries is not None:
            self.entries = {}
            for entry in response.entries:
                pairs = [(e.entity_type, e.entity_name) for e in entry.entity]
                k = key_of(pairs)
                assert len(k) == len(pairs), f"an entity type repeats in a described entity {pairs}{self}"
                assert k not in self.entries, f"entity {show(k)} described twice{self}"
                values = {}
                for v in entry.values:
                    assert v.key not in values, f"key {v.key} twice for {show(k)}{self}"
                    values[v.key] = v.value
                self.entries[k] = values
                self.entity_orders.append(pairs)

    def assert_ok(self):
        assert (self.error_code, self.error_message) == (0, ""), (
            f"expected success (0, ''), got ({self.error_code}, {self.error_message!r}){self}")
        assert self.entries is not None, f"success with null entries{self}"
        return self

    def assert_entries(self, expected):
        """expected: {entity (pairs): {key: value}}; compares the whole answer."""
        self.assert_ok()
        want = {key_of(e): v for e, v in expected.items()}
        if self.entries != want:
            missing = [show(k) for k in want if k not in self.entries]
            extra = [show(k) for k in self.entries if k not in want]
            wrong = [f"{show(k)}: got {self.entries[k]} want {want[k]}"
                     for k in want if k in self.entries and self.entries[k] != want[k]]
            raise AssertionError(
                f"describe mismatch: missing {missing}, unexpected {extra}, wrong values {wrong}{self}")
        return self

    def assert_error(self, code, message):
        got = (self.error_code, self.error_message, self.entries)
        assert got == (code, message, None), (
            f"expected top-level error ({code}, {message!r}) with null entries, got {got!r}{self}")
        return self


class QuotaClient:
    """DescribeClientQuotas / AlterClientQuotas over a KafkaAdminClient, at an explicit version."""

    def __init__(self, admin):
        self.admin = admin

    def send(self, request):
        manager = self.admin._manager

        async def _send():
            return await manager.send(request)

        mark = _RECORDER.mark()
        response = manager.run(_send)
        header = request.header
        return response, _RECORDER.since(mark, header.correlation_id if header is not None else None)

    def _check_versions(self, request, response, version, recv):
        ex = Exchange(request, response, recv)
        assert request.API_VERSION == version, f"kafka-python sent v{request.API_VERSION}, wanted v{version}{ex}"
        assert response.version == version, f"response decoded as v{response.version}, wanted v{version}{ex}"
        assert response.throttle_time_ms == 0, f"throttle_time_ms {response.throttle_time_ms}{ex}"

    def alter(self, version, alterations, validate_only=False):
        """alterations: list of (entity pairs, ops); ops: list of (key, value) pairs or a dict, value REMOVE
        to remove a key (sent with a meaningless value)."""
        A = AlterClientQuotasRequest
        entries = []
        for entity, ops in alterations:
            if isinstance(ops, dict):
                ops = list(ops.items())
            wire_ops = []
            for k, v in ops:
                if v is REMOVE:
                    wire_ops.append(A.EntryData.OpData(key=k, value=0.0, remove=True))
                elif isinstance(v, tuple) and v and v[0] is REMOVE:  # (REMOVE, junk value)
                    wire_ops.append(A.EntryData.OpData(key=k, value=float(v[1]), remove=True))
                else:
                    wire_ops.append(A.EntryData.OpData(key=k, value=float(v), remove=False))
            wire_entity = [A.EntryData.EntityData(entity_type=t, entity_name=n) for t, n in entity]
            entries.append(A.EntryData(entity=wire_entity, ops=wire_ops))
        request = A(entries=entries, validate_only=validate_only, min_version=version, max_version=version)
        response, recv = self.send(request)
        self._check_versions(request, response, version, recv)
        return AlterResult(request, response, recv)

    def describe(self, version, components, strict=False):
        """components: list of (entity type, match type, match)."""
        D = DescribeClientQuotasRequest
        wire = [D.ComponentData(entity_type=t, match_type=m, match=s) for t, m, s in components]
        request = D(components=wire, strict=strict, min_version=version, max_version=version)
        response, recv = self.send(request)
        self._check_versions(request, response, version, recv)
        return DescribeResult(request, response, recv)

    def values_of(self, version, entity):
        """The configured values of exactly this entity ({} when it has none)."""
        comps = [(t, EXACT, n) if n is not None else (t, DEFAULT, None) for t, n in entity]
        res = self.describe(version, comps, strict=True).assert_ok()
        extra = [k for k in res.entries if k != key_of(entity)]
        assert not extra, f"strict exact describe of {show(key_of(entity))} returned {[show(k) for k in extra]}{res}"
        return res.entries.get(key_of(entity), {})

    def everything(self, version):
        return self.describe(version, [], strict=False).assert_ok().entries


def error_name(code):
    return Errors.for_code(code).__name__
