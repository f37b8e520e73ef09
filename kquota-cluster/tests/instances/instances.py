"""Three kquota-proxy instances sharing one configuration, membership and bps usage through one real
Kafka (started by run.sh), and the tests of what that sharing promises. Run by run.sh:

    instances.py --kafka HOST:PORT --work DIR --proxy-bin PATH --broker-stop CMD --broker-start CMD
                 [--full] [--only 1,2,...]

Tests (numbered as in run.sh's header; run in the order 1, 3, 2, 4, 6, 5, the outage last):
  1 propagation   an alteration at one instance, visible at every instance within 1 s
  2 storm         kill -9 of instances during an alteration storm; acknowledged means everywhere
  3 race          conflicting KIP-55 sub-quota alterations at two instances at the same moment
  4 membership    an instance stops: the bps limits of the others change within the bound
  5 outage        Kafka away for 30 s: the configuration stays, alterations fail, then resume
  6 accuracy      70/20/10 load of one user over the three against a 3 MB/s bps quota, and the
                  static division (--instance-count 3, no cluster) beside it

Every request to a proxy goes over a plain socket, encoded and decoded by kafka-python's own
message classes (AlterClientQuotas v1, DescribeClientQuotas v1), so that a measurement times one
round trip and nothing else. Every wait is bounded; every failure says what was expected and what
was seen, and the run ends with a summary (and exit status 1 if anything failed).
"""
import argparse
import json
import math
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import traceback
import urllib.request

from kafka.protocol.admin import (
    AlterClientQuotasRequest as AlterReq,
    AlterClientQuotasResponse as AlterResp,
    DescribeClientQuotasRequest as DescReq,
    DescribeClientQuotasResponse as DescResp,
)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "interop"))
from ports import listen_ports  # noqa: E402
KEY = "producer_byte_rate"
BPS = "producer_byte_rate:bps"
POLICY_VIOLATION = 44
MAY_STILL = "may still be applied"
EXACT, DEFAULT = 0, 1
ALTER_TIMEOUT_S = 10.0
THINK_S = 0.01  # each storm client's pause between alterations  # the proxy's --cluster-alter-timeout-ms default, passed explicitly below


class Failure(Exception):
    pass


class WireError(Exception):
    pass


def say(msg=""):
    print(msg, flush=True)


def pct(values, p):
    """The p-th percentile by nearest rank."""
    s = sorted(values)
    if not s:
        return float("nan")
    return s[max(0, math.ceil(p / 100.0 * len(s)) - 1)]


def ms(x):
    return "%.1f ms" % (x * 1000.0)


def spread(values):
    return "p50 %s / p99 %s / max %s (n=%d)" % (ms(pct(values, 50)), ms(pct(values, 99)), ms(max(values)), len(values))


def ekey(pairs):
    """An entity as a hashable, order-independent key: its (type, name) pairs sorted by type."""
    return tuple(sorted(((t, n) for t, n in pairs), key=lambda p: p[0]))


def show(entity):
    return "{" + ", ".join("%s=%s" % (t, "<default>" if n is None else n) for t, n in entity) + "}"


def free_port(used):
    """A free port outside the ephemeral range, not in `used` (which gets it): a proxy listens on
    its broker's port only when the cluster first names the broker, and an outgoing connection
    could take an ephemeral port before that."""
    return listen_ports(1, used)


def port_open(port):
    try:
        socket.create_connection(("127.0.0.1", port), 1).close()
        return True
    except OSError:
        return False


# ---- the wire: AlterClientQuotas and DescribeClientQuotas over one socket


def alter_once(addr, entity, value):
    """Sets `entity`'s KEY to `value` on a connection of its own: (error code, message), or
    (None, "no answer: ...") if the instance did not answer."""
    try:
        w = Wire(addr)
        try:
            return w.alter([(entity, {KEY: value})])[ekey(entity)]
        finally:
            w.close()
    except (OSError, WireError) as e:
        return None, "no answer: %s" % e


class Wire:
    def __init__(self, addr, timeout=ALTER_TIMEOUT_S + 15):
        host, port = addr.rsplit(":", 1)
        self.addr = addr
        self.sock = socket.create_connection((host, int(port)), timeout=5)
        self.sock.settimeout(timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.cid = 0

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def _read(self, n):
        buf = bytearray()
        while len(buf) < n:
            try:
                chunk = self.sock.recv(n - len(buf))
            except socket.timeout:
                raise WireError("no answer from %s within %.0f s" % (self.addr, self.sock.gettimeout()))
            except OSError as e:
                raise WireError("connection to %s: %s" % (self.addr, e))
            if not chunk:
                raise WireError("%s closed the connection without an answer" % self.addr)
            buf += chunk
        return bytes(buf)

    def _roundtrip(self, req, resp_cls, version):
        self.cid += 1
        req.API_VERSION = version
        req.with_header(correlation_id=self.cid, client_id="kquota-instances")
        try:
            self.sock.sendall(req.encode(header=True, framed=True))
        except OSError as e:
            raise WireError("sending to %s: %s" % (self.addr, e))
        size = struct.unpack(">i", self._read(4))[0]
        resp = resp_cls.decode(self._read(size), version=version, header=True)
        if resp.header.correlation_id != self.cid:
            raise WireError("correlation id %d, expected %d" % (resp.header.correlation_id, self.cid))
        return resp

    def alter(self, alterations, validate_only=False):
        """alterations: [(entity pairs, {key: value, or None to remove})]; returns
        {entity key: (error code, error message)}."""
        entries = []
        for entity, ops in alterations:
            entries.append(AlterReq.EntryData(
                entity=[AlterReq.EntryData.EntityData(entity_type=t, entity_name=n) for t, n in entity],
                ops=[AlterReq.EntryData.OpData(key=k, value=0.0 if v is None else float(v), remove=v is None)
                     for k, v in ops.items()]))
        resp = self._roundtrip(AlterReq(entries=entries, validate_only=validate_only), AlterResp, 1)
        return {ekey((x.entity_type, x.entity_name) for x in e.entity): (e.error_code, e.error_message)
                for e in resp.entries}

    def describe(self, components=(), strict=False):
        """{entity key: {key: value}}; components: [(type, match type, match)]."""
        resp = self._roundtrip(DescReq(components=[DescReq.ComponentData(entity_type=t, match_type=m, match=s)
                                                   for t, m, s in components], strict=strict), DescResp, 1)
        if resp.error_code != 0:
            raise WireError("DescribeClientQuotas at %s: error %d %r" % (self.addr, resp.error_code, resp.error_message))
        return {ekey((x.entity_type, x.entity_name) for x in e.entity): {v.key: v.value for v in e.values}
                for e in (resp.entries or [])}

    def values_of(self, entity):
        comps = [(t, EXACT, n) if n is not None else (t, DEFAULT, None) for t, n in entity]
        return self.describe(comps, strict=True).get(ekey(entity), {})


# ---- processes


class Proc:
    """A child process in a session of its own, its pid noted for run.sh's cleanup."""

    def __init__(self, harness, name):
        self.h, self.name, self.proc = harness, name, None

    def spawn(self, argv, log_path, env=None):
        logf = open(log_path, "ab")
        self.proc = subprocess.Popen(argv, stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     start_new_session=True, env=env)
        logf.close()
        with open(os.path.join(self.h.work, "pids", "%s.%d" % (self.name, self.proc.pid)), "w") as f:
            f.write(str(self.proc.pid))

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def _forget(self):
        try:
            os.remove(os.path.join(self.h.work, "pids", "%s.%d" % (self.name, self.proc.pid)))
        except OSError:
            pass

    def kill9(self):
        if self.alive():
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        if self.proc is not None:
            self._forget()

    def term(self, timeout=20):
        """SIGTERM and wait; the exit status (None if it had to be killed)."""
        if not self.alive():
            return self.proc.returncode if self.proc else None
        os.kill(self.proc.pid, signal.SIGTERM)
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill9()
            return None
        self._forget()
        return code


class Proxy(Proc):
    def __init__(self, harness, name, cluster=True):
        super().__init__(harness, name)
        used = harness.used_ports
        self.cluster = cluster
        self.port = free_port(used)
        self.base = free_port(used) - 1  # broker 1 (the only node) listens on base + 1
        self.metrics_port = free_port(used)
        self.addr = "127.0.0.1:%d" % self.port
        self.log_path = os.path.join(harness.work, "%s.log" % name)
        self.data_dir = os.path.join(harness.work, "%s-data" % name)
        self.up = False
        self.mark = 0
        self.caught_up = None

    def argv(self):
        h = self.h
        a = [h.proxy_bin, "--upstream", h.kafka, "--listen", self.addr, "--listen-base", "127.0.0.1:%d" % self.base,
             "--super-users", "User:ANONYMOUS", "--metrics-listen", "127.0.0.1:%d" % self.metrics_port]
        if self.cluster:
            # The proxy closes a connection that has not proven itself within its grace (10 s by
            # default), and an alteration sent while Kafka is away is answered only when the
            # alteration timeout (10 s) runs out: with both defaults the client sees its connection
            # closed instead of the error. The grace here outlasts the timeout, so that test 5 sees
            # what the cluster answers.
            a += ["--cluster-bootstrap", h.kafka, "--instance-id", self.name, "--data-dir", self.data_dir,
                  "--cluster-alter-timeout-ms", str(int(ALTER_TIMEOUT_S * 1000)),
                  "--connection-grace-ms", str(int((ALTER_TIMEOUT_S + 5) * 1000))]
        else:
            a += ["--no-store", "--instance-count", "3"]
        return a

    def log_text(self, since_mark=False):
        try:
            with open(self.log_path, "rb") as f:
                if since_mark:
                    f.seek(self.mark)
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def tail(self, n=40):
        lines = self.log_text().splitlines()[-n:]
        return "---- the last %d lines of %s:\n%s\n----" % (len(lines), self.log_path, "\n".join(lines))

    def start(self, timeout=90):
        """Starts the proxy and waits until it logs that it serves and its port answers; the seconds
        that took."""
        self.mark = os.path.getsize(self.log_path) if os.path.exists(self.log_path) else 0
        env = dict(os.environ, RUST_LOG=os.environ.get("RUST_LOG", "info"))
        t0 = time.monotonic()
        self.spawn(self.argv(), self.log_path, env)
        while True:
            if not self.alive():
                raise Failure("%s exited with status %s while starting (%s)\n%s"
                              % (self.name, self.proc.returncode, " ".join(self.argv()), self.tail()))
            if "kquota-proxy serving" in self.log_text(True) and port_open(self.port):
                break
            if time.monotonic() - t0 > timeout:
                self.kill9()
                raise Failure("%s did not serve within %d s\n%s" % (self.name, timeout, self.tail()))
            time.sleep(0.05)
        took = time.monotonic() - t0
        m = re.findall(r"caught up with the configuration log.*?offset=(\d+) entities=(\d+)", self.log_text(True))
        self.caught_up = (int(m[-1][0]), int(m[-1][1])) if m else None
        self.up = True
        return took

    def kill9(self):
        self.up = False
        super().kill9()

    def term(self, timeout=20):
        self.up = False
        return super().term(timeout)

    def metrics(self):
        return urllib.request.urlopen("http://127.0.0.1:%d/metrics" % self.metrics_port, timeout=3).read().decode()

    def bucket(self, family, user="ANONYMOUS", quota=BPS, text=None):
        """The value of a bucket series of `user` for `quota`, or None."""
        text = self.metrics() if text is None else text
        pat = r'^%s\{user="%s",client_id="",ip="",quota="%s",level="[^"]*"\} (\S+)$' % (
            re.escape(family), re.escape(user), re.escape(quota))
        m = re.search(pat, text, re.M)
        return float(m.group(1)) if m else None

    def bps_view(self, user="ANONYMOUS", quota=BPS, text=None):
        """Which view the bps bucket's limit came from (kquota_proxy_bucket_limit_view), or None."""
        text = self.metrics() if text is None else text
        pat = r'^kquota_proxy_bucket_limit_view\{user="%s",client_id="",ip="",quota="%s",level="[^"]*",view="([^"]*)"\} 1' % (
            re.escape(user), re.escape(quota))
        m = re.search(pat, text, re.M)
        return m.group(1) if m else None


class Load(Proc):
    """load.py: one producer at a capped offered rate through one proxy."""

    def __init__(self, harness, name, proxy_addr, topic, rate, seconds, client_id, record=16384):
        super().__init__(harness, name)
        self.progress = os.path.join(harness.work, "%s.jsonl" % name)
        if os.path.exists(self.progress):
            os.remove(self.progress)
        self.rate = rate
        self.spawn([sys.executable, os.path.join(HERE, "load.py"), proxy_addr, topic, str(rate), str(seconds),
                    client_id, self.progress, str(record)], os.path.join(harness.work, "%s.log" % name))

    def lines(self):
        out = []
        try:
            with open(self.progress) as f:
                for line in f:
                    try:
                        out.append(json.loads(line))
                    except ValueError:
                        pass
        except OSError:
            pass
        return out

    def acked_at(self, t, field="acked"):
        """The cumulative `field` at wall time t, interpolated between progress lines."""
        lines = self.lines()
        if not lines or t < lines[0]["t"] or t > lines[-1]["t"]:
            raise Failure("%s's progress (%s) does not cover time %.2f (it covers %s)" % (
                self.name, self.progress, t, "%.2f..%.2f" % (lines[0]["t"], lines[-1]["t"]) if lines else "nothing"))
        for a, b in zip(lines, lines[1:]):
            if a["t"] <= t <= b["t"]:
                f = 0.0 if b["t"] == a["t"] else (t - a["t"]) / (b["t"] - a["t"])
                return a[field] + f * (b[field] - a[field])
        return lines[-1][field]

    def wait(self, timeout):
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill9()
            raise Failure("%s did not finish within %d s" % (self.name, timeout))
        self._forget()


class Kquotad(Proc):
    """kquotad with --cluster-bootstrap: one more instance of the configuration log, which answers
    the quota APIs itself (no broker behind it)."""

    def __init__(self, harness, name):
        super().__init__(harness, name)
        self.port = free_port(harness.used_ports)
        self.addr = "127.0.0.1:%d" % self.port
        self.log_path = os.path.join(harness.work, "%s.log" % name)
        self.data_dir = os.path.join(harness.work, "%s-data" % name)

    def argv(self):
        h = self.h
        return [h.kquotad_bin, "--listeners", "PLAINTEXT://%s" % self.addr, "--data-dir", self.data_dir,
                "--super-users", "User:ANONYMOUS", "--cluster-bootstrap", h.kafka,
                "--override", "kquota.cluster.instance.id=%s" % self.name,
                "--override", "kquota.cluster.alter.timeout.ms=%d" % int(ALTER_TIMEOUT_S * 1000)]

    def log_text(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def start(self, timeout=90):
        t0 = time.monotonic()
        self.spawn(self.argv(), self.log_path, dict(os.environ, RUST_LOG=os.environ.get("RUST_LOG", "info")))
        while True:
            if not self.alive():
                raise Failure("%s exited with status %s while starting (%s)\n---- its log:\n%s"
                              % (self.name, self.proc.returncode, " ".join(self.argv()), self.log_text()[-6000:]))
            if "listening on " in self.log_text() and port_open(self.port):
                return time.monotonic() - t0
            if time.monotonic() - t0 > timeout:
                self.kill9()
                raise Failure("%s did not listen within %d s\n%s" % (self.name, timeout, self.log_text()[-6000:]))
            time.sleep(0.05)


# ---- the harness


class Harness:
    def __init__(self, args):
        self.kafka = args.kafka
        self.work = args.work
        self.proxy_bin = args.proxy_bin
        self.broker_stop = args.broker_stop
        self.broker_start = args.broker_start
        self.full = args.full
        self.used_ports = set()
        os.makedirs(os.path.join(self.work, "pids"), exist_ok=True)
        self.proxies = [Proxy(self, "inst-%d" % i) for i in range(3)]
        self.loads = []
        self.statics = []
        self.kquotads = []
        self.kquotad_bin = args.kquotad_bin
        self.results = {}
        self.run_tag = "%x" % int(time.time())
        self.expiry, self.heartbeat = read_membership_timings()

    # -- helpers

    def wire(self, i):
        return Wire(self.proxies[i].addr)

    def snapshot(self, i):
        w = self.wire(i)
        try:
            return w.describe()
        finally:
            w.close()

    def snapshots(self):
        return [self.snapshot(i) for i in range(3)]

    def wait_same(self, timeout=20):
        """Waits until the three describe the same configuration twice in a row; returns it."""
        deadline = time.monotonic() + timeout
        last = None
        while True:
            snaps = self.snapshots()
            same = snaps[0] == snaps[1] == snaps[2]
            if same and last == snaps[0]:
                return snaps[0]
            last = snaps[0] if same else None
            if time.monotonic() > deadline:
                raise Failure("the three instances did not converge to one configuration within %d s: %s"
                              % (timeout, diff_snapshots(snaps)))
            time.sleep(0.5)

    def wait_visible(self, entity, key, value, timeout=5):
        """Waits until every instance describes `entity` with key = value (None: absent)."""
        deadline = time.monotonic() + timeout
        wires = [self.wire(i) for i in range(3)]
        try:
            while True:
                got = [w.values_of(entity).get(key) for w in wires]
                if all(g == value for g in got):
                    return
                if time.monotonic() > deadline:
                    raise Failure("%s %s: the instances describe %s after %d s, expected %s everywhere"
                                  % (show(entity), key, got, timeout, value))
                time.sleep(0.02)
        finally:
            for w in wires:
                w.close()

    def alter_ok(self, i, entity, ops):
        w = self.wire(i)
        try:
            res = w.alter([(entity, ops)])
        finally:
            w.close()
        code, msg = res.get(ekey(entity), (None, "no result for the entity: %r" % res))
        if code != 0:
            raise Failure("altering %s %s at %s: error %s %r" % (show(entity), ops, self.proxies[i].name, code, msg))

    def ensure_up(self):
        restarted = []
        for p in self.proxies:
            if not p.alive():
                p.start()
                restarted.append(p.name)
        return restarted

    def cleanup(self):
        for l in self.loads:
            l.kill9()
        for p in self.proxies + self.statics + self.kquotads:
            if p.alive():
                p.term(10)

    # ---- 1. propagation

    def t1_propagation(self):
        n = 120
        say("   %d alterations, at inst-0, inst-1, inst-2 in turn (each {user=prop-*} %s = a new value); each"
            " instance polls DescribeClientQuotas from the moment the request is sent" % (n, KEY))
        cond = threading.Condition()
        state = {"target": None, "stop": False}
        seen = {}
        errors = []

        def poller(i):
            try:
                w = self.wire(i)
                while True:
                    with cond:
                        while not state["stop"] and (state["target"] is None or (state["target"][0], i) in seen):
                            cond.wait(0.05)
                        if state["stop"]:
                            return
                        k, entity, value = state["target"]
                    got = w.values_of(entity).get(KEY)
                    t = time.perf_counter()
                    if got == value:
                        with cond:
                            seen.setdefault((k, i), t)
                            cond.notify_all()
            except Exception as e:  # reported by the main thread
                errors.append("poller at inst-%d: %r" % (i, e))
                with cond:
                    cond.notify_all()

        threads = [threading.Thread(target=poller, args=(i,), daemon=True) for i in range(3)]
        for t in threads:
            t.start()
        alters = [self.wire(i) for i in range(3)]
        acks, others, slow = [], [], []
        try:
            for k in range(n):
                origin = k % 3
                entity = (("user", "prop-%s-%d" % (self.run_tag, k)),)
                value = float(1000 + k)
                t0 = time.perf_counter()
                with cond:
                    state["target"] = (k, entity, value)
                    cond.notify_all()
                res = alters[origin].alter([(entity, {KEY: value})])
                t_ack = time.perf_counter()
                code, msg = res[ekey(entity)]
                if code != 0:
                    raise Failure("alteration %d at inst-%d answered %d %r" % (k, origin, code, msg))
                acks.append(t_ack - t0)
                if alters[origin].values_of(entity).get(KEY) != value:
                    raise Failure("alteration %d was acknowledged by inst-%d, but a describe there right after does"
                                  " not show it (a commit must be applied at its instance before its answer)" % (k, origin))
                deadline = time.monotonic() + 5
                with cond:
                    while not all((k, i) in seen for i in range(3)) and not errors and time.monotonic() < deadline:
                        cond.wait(0.05)
                    if errors:
                        raise Failure("; ".join(errors))
                    for i in range(3):
                        if (k, i) not in seen:
                            raise Failure("alteration %d (at inst-%d) was not visible at inst-%d within 5 s"
                                          % (k, origin, i))
                        if i != origin:
                            others.append(seen[(k, i)] - t0)
                            if seen[(k, i)] - t0 > 1.0:
                                slow.append((k, origin, i, seen[(k, i)] - t0))
        finally:
            with cond:
                state["stop"] = True
                cond.notify_all()
            for w in alters:
                w.close()
        say("   acknowledged at the instance altered (request sent to answer): " + spread(acks))
        say("   visible at each other instance (request sent to first describe showing it): " + spread(others))
        self.results["1"] = {"alterations": n, "ack_ms": summary_ms(acks), "visible_other_ms": summary_ms(others),
                             "over_1s": len(slow)}
        if pct(others, 99) > 1.0:
            raise Failure("p99 of the time to visibility at the other instances is %s, over 1 s (slow: %s)"
                          % (ms(pct(others, 99)), slow[:10]))

    # ---- 2. kill -9 during an alteration storm

    def t2_storm(self):
        clients_per = 2
        say("   %d clients per instance alter with %d ms between answer and next request (each alteration a new"
            " {user=storm-*} entity, one in three a batch of two); inst-1 and inst-2 are killed (-9) mid-storm and"
            " restarted" % (clients_per, THINK_S * 1000))
        stop = threading.Event()
        records = []
        lock = threading.Lock()

        def client(cid, p):
            n = 0
            w = None
            while not stop.is_set():
                if not p.up:
                    if w is not None:
                        w.close()
                        w = None
                    time.sleep(0.02)
                    continue
                try:
                    if w is None:
                        w = Wire(p.addr)
                except OSError:
                    time.sleep(0.02)
                    continue
                count = 2 if n % 3 == 0 else 1
                batch = []
                for _ in range(count):
                    batch.append(((("user", "storm-%s-%d-%d" % (self.run_tag, cid, n)),), {KEY: float(1000 + n)}))
                    n += 1
                t0 = time.monotonic()
                try:
                    res = w.alter(batch)
                    outcome = None
                except WireError as e:
                    res, outcome = None, str(e)
                    w.close()
                    w = None
                t1 = time.monotonic()
                # A short pause: a few hundred alterations a second in all, not tens of thousands of
                # entities for the later tests to describe again and again.
                time.sleep(THINK_S)
                with lock:
                    for entity, ops in batch:
                        if res is None:
                            records.append((entity, ops[KEY], "no-answer", None, outcome, p.name, t1 - t0))
                        else:
                            code, msg = res.get(ekey(entity), (None, "no result for this entity"))
                            records.append((entity, ops[KEY], "ok" if code == 0 else "error", code, msg, p.name, t1 - t0))

        threads = []
        cid = 0
        for p in self.proxies:
            for _ in range(clients_per):
                threads.append(threading.Thread(target=client, args=(cid, p), daemon=True))
                cid += 1
        events = []
        t_start = time.monotonic()
        for t in threads:
            t.start()

        def at(s):
            d = t_start + s - time.monotonic()
            if d > 0:
                time.sleep(d)

        def note(what):
            events.append("%5.1f s  %s" % (time.monotonic() - t_start, what))
            say("   " + events[-1])

        p0, p1, p2 = self.proxies
        restarts = {}
        try:
            at(3)
            p1.kill9()
            note("kill -9 inst-1")
            at(6)
            p2.kill9()
            note("kill -9 inst-2 (inst-0 alone)")
            at(9)
            took = p1.start()
            restarts.setdefault("inst-1", []).append((took, p1.caught_up))
            note("inst-1 serving again (%.2f s to start; replayed to offset %s, %s entities)" % (took, *p1.caught_up))
            at(12)
            took = p2.start()
            restarts.setdefault("inst-2", []).append((took, p2.caught_up))
            note("inst-2 serving again (%.2f s to start; replayed to offset %s, %s entities)" % (took, *p2.caught_up))
            at(15)
            p1.kill9()
            note("kill -9 inst-1")
            at(17)
            took = p1.start()
            restarts["inst-1"].append((took, p1.caught_up))
            note("inst-1 serving again (%.2f s to start; replayed to offset %s, %s entities)" % (took, *p1.caught_up))
            at(22)
        finally:
            stop.set()
            for t in threads:
                t.join(ALTER_TIMEOUT_S + 20)
        note("storm stopped")
        # A commit that timed out may still land (up to the alteration timeout later): wait, then compare.
        time.sleep(2)
        final = self.wait_same(timeout=ALTER_TIMEOUT_S + 15)
        by = {}
        for r in records:
            by.setdefault(r[2], []).append(r)
        ok = by.get("ok", [])
        errs = by.get("error", [])
        lost = by.get("no-answer", [])
        say("   %d alterations answered: %d acknowledged, %d answered with an error, %d without an answer (their"
            " instance was killed, or did not answer within %d s)" % (len(records), len(ok), len(errs), len(lost),
                                                                       ALTER_TIMEOUT_S + 15))
        lat = [r[6] for r in ok]
        if lat:
            say("   acknowledged alterations' answer time: " + spread(lat))
        problems = []
        for entity, value, _, _, _, pname, _ in ok:
            got = final.get(ekey(entity), {}).get(KEY)
            if got != value:
                problems.append("acknowledged by %s but described as %s: %s %s=%s" % (pname, got, show(entity), KEY, value))
        texts = {}
        applied_errors = {"may": [0, 0], "other": [0, 0]}
        for entity, value, _, code, msg, pname, _ in errs:
            kind = "may" if msg and MAY_STILL in msg else "other"
            present = final.get(ekey(entity), {}).get(KEY) == value
            applied_errors[kind][0 if present else 1] += 1
            texts.setdefault((code, re.sub(r"\d+", "N", msg or "")), []).append(pname)
            if kind == "other" and present:
                problems.append("answered as failed by %s (%d %r) yet applied: %s" % (pname, code, msg, show(entity)))
        for (code, text), who in sorted(texts.items()):
            say("   error %s x%d (at %s): %r" % (code, len(who), ",".join(sorted(set(who))), text))
        lost_applied = sum(1 for r in lost if final.get(ekey(r[0]), {}).get(KEY) == r[1])
        say("   of the errors saying it %r: %d applied, %d not; of the other errors: %d applied, %d not;"
            " of the unanswered: %d applied, %d not" % (MAY_STILL, *applied_errors["may"], *applied_errors["other"],
                                                       lost_applied, len(lost) - lost_applied))
        sent = {ekey(r[0]) for r in records}
        strays = [k for k in final if k[0][1].startswith("storm-%s-" % self.run_tag) and k not in sent]
        if strays:
            problems.append("%d storm entities that no client sent, e.g. %s" % (len(strays), strays[:3]))
        restart_txt = ", ".join("%s %s" % (k, ", ".join("%.2f s (offset %s)" % (t, c[0] if c else "?") for t, c in v))
                                for k, v in restarts.items())
        say("   restarts (start to serving, replaying the log): " + restart_txt)
        say("   after the storm all three instances describe the same %d entities" % len(final))
        self.results["2"] = {"alterations": len(records), "acknowledged": len(ok), "errors": len(errs),
                             "unanswered": len(lost), "error_texts": {"%s %s" % k: len(v) for k, v in texts.items()},
                             "restarts": {k: [t for t, _ in v] for k, v in restarts.items()},
                             "ack_ms": summary_ms(lat) if lat else None, "entities": len(final), "events": events}
        if not ok:
            problems.append("no alteration was acknowledged during the storm")
        if problems:
            raise Failure("%d problems: %s" % (len(problems), "; ".join(problems[:20])))

    # ---- 3. racing sub-quotas

    def t3_race(self):
        races_sub, races_total = 30, 10
        say("   %d races: {user=race-R} %s=1000, then at the same moment {client-id=a} 600 at one instance and"
            " {client-id=b} 600 at another (600 + 600 > 1000); %d races: {client-id=a} 600 at one, the total"
            " lowered to 500 at another" % (races_sub, KEY, races_total))
        wires = [self.wire(i) for i in range(3)]
        wins = {}
        winner_of = {}
        gaps = []
        problems = []
        race_users = []
        try:
            for r in range(races_sub + races_total):
                sub = r < races_sub
                user = "race-%s-%d" % (self.run_tag, r)
                race_users.append((user, sub))
                ia, ib, ic = r % 3, (r + 1) % 3, (r + 2) % 3
                total = (("user", user),)
                self.alter_ok(ic, total, {KEY: 1000.0})
                self.wait_visible(total, KEY, 1000.0)
                ea = (("user", user), ("client-id", "a"))
                eb = (("user", user), ("client-id", "b"))
                reqs = [(ia, ea, {KEY: 600.0}), (ib, eb if sub else total, {KEY: 600.0} if sub else {KEY: 500.0})]
                barrier = threading.Barrier(2)
                out = [None, None]

                def go(j):
                    i, entity, ops = reqs[j]
                    barrier.wait(5)
                    t = time.perf_counter()
                    try:
                        res = wires[i].alter([(entity, ops)])
                        out[j] = (t, res[ekey(entity)])
                    except Exception as e:
                        out[j] = (t, (None, repr(e)))

                ts = [threading.Thread(target=go, args=(j,)) for j in range(2)]
                for t in ts:
                    t.start()
                for t in ts:
                    t.join(ALTER_TIMEOUT_S + 20)
                gaps.append(abs(out[0][0] - out[1][0]))
                codes = [o[1][0] for o in out]
                msgs = [o[1][1] for o in out]
                if sorted(codes) != [0, POLICY_VIOLATION]:
                    problems.append("race %d: answers %s, expected one success and one POLICY_VIOLATION (44)"
                                    % (r, list(zip(codes, msgs))))
                    continue
                w = codes.index(0)
                loser_msg = msgs[1 - w]
                if not loser_msg or user not in loser_msg:
                    problems.append("race %d: the POLICY_VIOLATION message %r does not name the user" % (r, loser_msg))
                wins.setdefault("sub" if sub else "total", []).append(w)
                winner_of[user] = w
                # Every instance ends with the state of the winner only.
                expect = {ekey(total): {KEY: 1000.0}}
                if sub:
                    expect[ekey(ea if w == 0 else eb)] = {KEY: 600.0}
                elif w == 0:
                    expect[ekey(ea)] = {KEY: 600.0}
                else:
                    expect[ekey(total)] = {KEY: 500.0}
                deadline = time.monotonic() + 5
                while True:
                    states = [wi.describe([("user", EXACT, user)]) for wi in wires]
                    if all(s == expect for s in states) or time.monotonic() > deadline:
                        break
                    time.sleep(0.02)
                for i, s in enumerate(states):
                    if s != expect:
                        problems.append("race %d: inst-%d describes %s, the winner's answer says %s" % (r, i, s, expect))
                    t_ = s.get(ekey(total), {}).get(KEY, 0)
                    subs = sum(v.get(KEY, 0) for k, v in s.items() if len(k) == 2 and k[0][1] is not None)
                    if subs > t_:
                        problems.append("race %d: inst-%d holds sub-quotas summing to %s over the total %s" % (r, i, subs, t_))
        finally:
            for w in wires:
                w.close()
        # The winner must be the batch first in the log.
        order = config_log_order(self.kafka, race_users)
        checked = 0
        for r, (user, sub) in enumerate(race_users):
            first = order.get(user)
            winner = winner_of.get(user)
            if first is None or winner is None:
                continue
            checked += 1
            if first != winner:
                problems.append("race %d: the batch first in the configuration log is the %s one, but the %s one"
                                " was answered with success" % (r, "first" if first == 0 else "second",
                                                                "first" if winner == 0 else "second"))
        say("   sends of a race were %s apart (p50), %s at most" % (ms(pct(gaps, 50)), ms(max(gaps))))
        for kind, ws in sorted(wins.items()):
            say("   %s races: the first request won %d, the second %d; each loser got POLICY_VIOLATION"
                % (kind, ws.count(0), ws.count(1)))
        say("   checked against the configuration log's order (read from Kafka): %d races" % checked)
        self.results["3"] = {"races": len(race_users), "wins": wins, "log_checked": checked,
                             "send_gap_ms": summary_ms(gaps)}
        if checked < len(race_users) - len(problems):
            problems.append("only %d of %d races could be found in the configuration log" % (checked, len(race_users)))
        if problems:
            raise Failure("%d problems: %s" % (len(problems), "; ".join(problems[:10])))
        self.wait_same()

    # ---- 4. membership

    def t4_membership(self):
        limit = 3000000.0
        bound = self.expiry + self.heartbeat
        allowance = 1.0  # the heartbeats' trips through Kafka, as kquota-cluster's own Kafka tests allow
        say("   {user=ANONYMOUS} %s=%d; a producer at 300 kB/s through each instance (not throttled); the"
            " instances' kquota_proxy_bucket_limit sampled every 100 ms. Membership::expiry_bound ="
            " member_expiry %.1f s + heartbeat_interval %.1f s = %.1f s (from kquota-cluster/src)"
            % (BPS, limit, self.expiry, self.heartbeat, bound))
        self.alter_ok(0, (("user", "ANONYMOUS"),), {BPS: limit})
        self.wait_visible((("user", "ANONYMOUS"),), BPS, limit)
        loads = {}

        def start_load(i):
            l = Load(self, "member-load-%d-%d" % (i, int(time.time())), self.proxies[i].addr, "instances-members",
                     300000, 300, "member-%d" % i, 10000)
            self.loads.append(l)
            loads[i] = l

        for i in range(3):
            start_load(i)
        samples = []
        stop = threading.Event()

        def sampler():
            while not stop.is_set():
                t = time.monotonic()
                for i, p in enumerate(self.proxies):
                    if p.up:
                        try:
                            samples.append((t, i, p.bucket("kquota_proxy_bucket_limit")))
                        except Exception:
                            pass
                time.sleep(0.1)

        th = threading.Thread(target=sampler, daemon=True)
        th.start()
        third, half = limit / 3, limit / 2

        def latest(i, since):
            v = [s for s in samples if s[1] == i and s[0] >= since and s[2] is not None]
            return v[-1][2] if v else None

        def steady(who, target, timeout=30, hold=1.0):
            t0 = time.monotonic()
            ok_since = None
            while time.monotonic() - t0 < timeout:
                vals = [latest(i, time.monotonic() - 0.3) for i in who]
                if all(v is not None and abs(v - target) <= 0.1 * target for v in vals):
                    ok_since = ok_since or time.monotonic()
                    if time.monotonic() - ok_since >= hold:
                        return time.monotonic() - t0
                else:
                    ok_since = None
                time.sleep(0.1)
            raise Failure("the bucket limits of %s did not settle at %.0f (within 10%%) in %d s: last %s" % (
                [self.proxies[i].name for i in who], target, timeout, [latest(i, 0) for i in who]))

        def first_time(i, since, pred, timeout):
            deadline = since + timeout
            while time.monotonic() < deadline:
                for s in samples:
                    if s[1] == i and s[0] >= since and s[2] is not None and pred(s[2]):
                        return s[0] - since, s[2]
                time.sleep(0.05)
            return None, latest(i, since)

        out = {}
        problems = []
        try:
            steady([0, 1, 2], third)
            say("   steady: limits %s (L/3 = %.0f)" % (["%.0f" % latest(i, 0) for i in range(3)], third))
            for how in ("kill -9", "SIGTERM"):
                p2 = self.proxies[2]
                tk = time.monotonic()
                if how == "kill -9":
                    p2.kill9()
                else:
                    code = p2.term()
                    if code != 0:
                        problems.append("inst-2 exited with %s on SIGTERM" % code)
                t_stopped = time.monotonic() - tk
                delays = []
                for i in (0, 1):
                    changed, v1 = first_time(i, tk, lambda v: v > 1.1 * third, bound + 6)
                    reached, v2 = first_time(i, tk, lambda v: v >= 0.9 * half, bound + 6)
                    delays.append(changed)
                    say("   %s of inst-2 (gone %.2f s after the signal): inst-%d's limit moved off L/3 after %s"
                        " (to %s), reached 90%% of L/2 after %s (%s)" % (
                            how, t_stopped, i, "%.2f s" % changed if changed is not None else "never",
                            "%.0f" % v1 if v1 else v1, "%.2f s" % reached if reached is not None else "never",
                            "%.0f" % v2 if v2 else v2))
                    # Its last heartbeat arrived at most one interval before the kill, and it is dropped
                    # once an own heartbeat sent member_expiry after that one's arrival is back.
                    early = self.expiry - self.heartbeat - 0.2
                    if changed is not None and changed < early and how == "kill -9":
                        problems.append("after kill -9, inst-%d's limit changed %.2f s after, before the membership"
                                        " could have dropped inst-2 (member_expiry - heartbeat_interval - 0.2 s ="
                                        " %.1f s)" % (i, changed, early))
                out[how] = delays
                limit_s = bound + allowance if how == "kill -9" else bound + allowance + 5.0
                for i, d in zip((0, 1), delays):
                    if d is None or d > limit_s:
                        problems.append("after %s of inst-2, inst-%d's limit changed after %s, over %.1f s (%s)" % (
                            how, i, "%.2f s" % d if d is not None else "never (%.0f s)" % (bound + 6), limit_s,
                            "expiry_bound + 1 s of delivery" if how == "kill -9" else
                            "expiry_bound + 1 s + the proxy's 5 s drain at SIGTERM"))
                vals = [latest(i, 0) for i in (0, 1)]
                say("   survivors' limits now %s, sum %.0f (L = %.0f)" % (["%.0f" % v for v in vals], sum(vals), limit))
                tr = time.monotonic()
                took = p2.start()
                loads[2].kill9()
                start_load(2)
                ts = time.monotonic()
                joined = [first_time(i, ts, lambda v: v <= 1.15 * third, 10)[0] for i in (0, 1)]
                say("   inst-2 restarted (%.2f s to serve); the others' limits back to about L/3 %s after it served"
                    % (took, ["%.2f s" % j if j is not None else "never" for j in joined]))
                out[how + " rejoin"] = joined
                if any(j is None for j in joined):
                    problems.append("after inst-2 came back, the others' limits did not return to about L/3 in 10 s")
                steady([0, 1, 2], third)
        finally:
            stop.set()
            th.join(5)
            for l in loads.values():
                l.kill9()
        self.results["4"] = {"bound_s": bound, "delays_s": out}
        self.alter_ok(0, (("user", "ANONYMOUS"),), {BPS: None})
        self.wait_visible((("user", "ANONYMOUS"),), BPS, None)
        if problems:
            raise Failure("; ".join(problems))

    # ---- 6. accuracy

    def t6_accuracy(self):
        limit = 3000000.0
        rates = [2800000, 800000, 400000]
        warm, window, rounds = (20, 40, 2) if self.full else (12, 20, 1)
        say("   {user=ANONYMOUS} %s = %d bytes/s (3 MB/s, decimal) cluster-wide; producers (load.py, librdkafka,"
            " 16 KiB records, acks=1) offering %s bytes/s through the three; %d s warm-up, %d s measured; %d round(s)"
            " of the cluster (--cluster-bootstrap) and of the static division (--instance-count 3, no cluster)"
            % (BPS, limit, "/".join(str(r) for r in rates), warm, window, rounds))
        if not self.statics:
            for i in range(3):
                self.statics.append(Proxy(self, "static-%d" % i, cluster=False))
        rows = []
        problems = []
        for rnd in range(rounds):
            for mode in ("cluster", "static"):
                ps = self.proxies if mode == "cluster" else self.statics
                if mode == "static":
                    for p in ps:
                        if not p.alive():
                            p.start()
                    for i in range(3):
                        w = Wire(ps[i].addr)
                        code, msg = w.alter([((("user", "ANONYMOUS"),), {BPS: limit})])[ekey((("user", "ANONYMOUS"),))]
                        w.close()
                        if code != 0:
                            raise Failure("setting the quota at %s: %s %r" % (ps[i].name, code, msg))
                else:
                    self.alter_ok(0, (("user", "ANONYMOUS"),), {BPS: limit})
                    self.wait_visible((("user", "ANONYMOUS"),), BPS, limit)
                row = self._accuracy_round(mode, ps, rates, warm, window, "%s-%d" % (mode, rnd))
                rows.append(row)
                if mode == "static":
                    for p in ps:
                        p.term()
                else:
                    self.alter_ok(0, (("user", "ANONYMOUS"),), {BPS: None})
                    self.wait_visible((("user", "ANONYMOUS"),), BPS, None)
                    # the buckets' windows (11 s) forget this round before the next one measures
                    time.sleep(2)
                if mode == "cluster" and abs(row["total"] - limit) > 0.1 * limit:
                    problems.append("round %d: the cluster-wide total is %.0f bytes/s, %.1f%% off the limit %.0f (more"
                                    " than 10%%)" % (rnd, row["total"], 100 * (row["total"] - limit) / limit, limit))
        self.results["6"] = {"limit": limit, "offered": rates, "warmup_s": warm, "window_s": window, "rounds": rows}
        for mode in ("cluster", "static"):
            tot = [r["total"] for r in rows if r["mode"] == mode]
            say("   %s: total achieved %s bytes/s over %d round(s) (%s of the limit)" % (
                mode, "/".join("%.0f" % t for t in tot), len(tot), "/".join("%+.1f%%" % (100 * (t - limit) / limit) for t in tot)))
        if problems:
            raise Failure("; ".join(problems))

    def _accuracy_round(self, mode, ps, rates, warm, window, tag):
        loads = []
        for i, r in enumerate(rates):
            l = Load(self, "acc-%s-%d" % (tag, i), ps[i].addr, "instances-accuracy", r, warm + window + 4, "acc-%d" % i)
            self.loads.append(l)
            loads.append(l)
        t_start = time.time()
        samples = []  # (wall time, proxy, limit, recorded)
        views = []  # (wall time, proxy, view of the limit)
        deadline = time.monotonic() + warm + window + 2
        while time.monotonic() < deadline:
            t = time.time()
            for i, p in enumerate(ps):
                try:
                    text = p.metrics()
                    samples.append((t, i, p.bucket("kquota_proxy_bucket_limit", text=text),
                                    p.bucket("kquota_proxy_bucket_recorded_total", text=text)))
                    views.append((t, i, p.bps_view(text=text)))
                except Exception:
                    pass
            time.sleep(0.5)
        for l in loads:
            l.wait(30)
        t0, t1 = t_start + warm, t_start + warm + window
        achieved, metered, limits, skipped, errs = [], [], [], [], []
        for i, l in enumerate(loads):
            achieved.append((l.acked_at(t1) - l.acked_at(t0)) / window)
            skipped.append((l.acked_at(t1, "skipped") - l.acked_at(t0, "skipped")) / window)
            last = l.lines()[-1]
            errs.append((last["errors"], last["error"]))
            s = [(t, rec) for t, j, _, rec in samples if j == i and rec is not None]
            a = [x for x in s if x[0] <= t0]
            b = [x for x in s if x[0] >= t1]
            metered.append((b[0][1] - a[-1][1]) / (b[0][0] - a[-1][0]) if a and b else float("nan"))
            lim = sorted(v for t, j, v, _ in samples if j == i and t0 <= t <= t1 and v is not None)
            limits.append(lim[len(lim) // 2] if lim else float("nan"))
        # The limits over the window: each instance's mean, min and max, and the sum over the three
        # at each sampling (the parts should add up to the limit).
        lim_stats, sums = [], []
        for i in range(3):
            v = [x for t, j, x, _ in samples if j == i and t0 <= t <= t1 and x is not None]
            lim_stats.append((sum(v) / len(v), min(v), max(v)) if v else (float("nan"),) * 3)
        by_t = {}
        for t, j, x, _ in samples:
            if t0 <= t <= t1 and x is not None:
                by_t.setdefault(round(t, 1), {})[j] = x
        sums = [sum(d.values()) for d in by_t.values() if len(d) == 3]
        with open(os.path.join(self.work, "acc-samples-%s.jsonl" % tag), "w") as f:
            for t, j, x, rec in samples:
                f.write(json.dumps({"t": t, "proxy": j, "limit": x, "recorded": rec}) + "\n")
        total = sum(achieved)
        # Which view each limit came from, over the window: shared usage through the cluster, the
        # live count (3) for the static division.
        seen = {}
        for t, j, v in views:
            if t0 <= t <= t1:
                seen.setdefault(j, {}).setdefault(v, 0)
                seen[j][v] += 1
        want = "shared_usage" if mode == "cluster" else "live_count"
        view_problems = []
        for i in range(3):
            counts = seen.get(i, {})
            n = sum(counts.values())
            # A stale view may show for a moment (a usage record late on a loaded machine).
            if n == 0 or counts.get(want, 0) < 0.9 * n:
                view_problems.append("%s: %s" % (ps[i].name, counts))
        say("   %-8s views of the limits over the window (samples per view): %s" % (
            tag, " / ".join("%s" % seen.get(i, {}) for i in range(3))))
        if view_problems:
            raise Failure("%s: the bps limits did not say they came from %s in 90%% of the samples: %s"
                          % (tag, want, "; ".join(view_problems)))
        say("   %-8s achieved %s = %.0f bytes/s; metered by the proxies (Produce request bytes) %s = %.0f; their"
            " limits (median over the window) %s; skipped offers %s; delivery errors %s" % (
                tag, "/".join("%.0f" % a for a in achieved), total, "/".join("%.0f" % m for m in metered),
                sum(metered), "/".join("%.0f" % v for v in limits), "/".join("%.0f" % s for s in skipped),
                [e for e in errs if e[0]] or "none"))
        say("   %-8s limits over the window, mean [min, max]: %s; their sum at each sampling: mean %.0f [%.0f, %.0f]"
            % (tag, " / ".join("%.0f [%.0f, %.0f]" % x for x in lim_stats),
               sum(sums) / len(sums) if sums else float("nan"), min(sums) if sums else float("nan"),
               max(sums) if sums else float("nan")))
        return {"mode": mode, "tag": tag, "achieved": achieved, "total": total, "metered": metered,
                "limits": limits, "limit_mean_min_max": lim_stats,
                "limit_sum_mean": sum(sums) / len(sums) if sums else None, "skipped": skipped, "errors": errs}

    # ---- 5. outage

    def t5_outage(self):
        outage = 30.0
        client = "outage-%s" % self.run_tag
        centity = (("client-id", client),)
        say("   {client-id=%s} %s=200000 set with Kafka's ConfigCommand through inst-1; a kquotad joined to the"
            " same configuration log (kquotad-0, --cluster-bootstrap: it answers the quota APIs without a broker"
            " behind it); Kafka stopped for %.0f s (SIGTERM), started again on the same port with the same data"
            % (client, KEY, outage))
        cc = subprocess.run([os.path.join(ROOT, "interop/kafka/kafka.sh"), "java", "kafka.admin.ConfigCommand",
                             "--bootstrap-server", self.proxies[1].addr, "--alter", "--entity-type", "clients",
                             "--entity-name", client, "--add-config", "%s=200000" % KEY],
                            capture_output=True, text=True, timeout=120)
        if cc.returncode != 0:
            raise Failure("ConfigCommand --alter through inst-1 failed (%d): %s%s" % (cc.returncode, cc.stdout, cc.stderr))
        self.wait_visible(centity, KEY, 200000.0)
        problems = []
        kq = Kquotad(self, "kquotad-0")
        self.kquotads.append(kq)
        took = kq.start()
        # Everyone: the three proxies and the kquotad, by name and address.
        members = [(p.name, p.addr) for p in self.proxies] + [(kq.name, kq.addr)]
        before = self.wait_same()
        w = Wire(kq.addr)
        kq_before = w.describe()
        w.close()
        say("   kquotad-0 serving after %.2f s; it describes the same %d entities as the proxies: %s"
            % (took, len(before), kq_before == before))
        if kq_before != before:
            problems.append("kquotad-0 replayed the log into another configuration: %s" % diff_snapshots([before, kq_before]))
        before_rate = self._throttled_rate(1, client, "before")
        marks = [len(p.log_text()) for p in self.proxies]
        # Connections opened before the outage, kept through it.
        kept = {}
        for name, addr in members:
            kept[name] = Wire(addr)
            kept[name].describe([("client-id", EXACT, client)])
        t_stop0 = time.monotonic()
        r = subprocess.run([self.broker_stop], capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            raise Failure("stopping the broker failed: %s%s" % (r.stdout, r.stderr))
        t_down = time.monotonic()
        say("   broker stopped (%.1f s for it to exit)" % (t_down - t_stop0))
        attempts = []  # (entity, member, code, msg, seconds, sent at)
        lock = threading.Lock()

        def alter_during(name, addr, k):
            entity = (("user", "outage-%s-%d-%s" % (self.run_tag, k, name)),)
            t0 = time.monotonic()
            code, msg = alter_once(addr, entity, 1234.0)
            with lock:
                attempts.append((entity, name, code, msg, time.monotonic() - t0, t0 - t_down))

        threads = []
        describes = {name: [0, 0, None] for name, _ in members}  # answered, refused, first refusal
        kept_result = {}
        k = 0
        while time.monotonic() - t_down < outage:
            el = time.monotonic() - t_down
            if (k == 0 and el >= 2) or (k == 1 and el >= 14):
                for name, addr in members:
                    th = threading.Thread(target=alter_during, args=(name, addr, k), daemon=True)
                    th.start()
                    threads.append(th)
                k += 1
            for name, addr in members:
                try:
                    w = Wire(addr)
                    try:
                        snap = w.describe()
                    finally:
                        w.close()
                    describes[name][0] += 1
                    if snap != before:
                        problems.append("%.1f s into the outage %s describes another configuration: %s"
                                        % (el, name, diff_snapshots([before, snap])))
                except (OSError, WireError) as e:
                    describes[name][1] += 1
                    describes[name][2] = describes[name][2] or "%.1f s in: %s" % (el, e)
                if name not in kept_result and el >= 5:
                    try:
                        kept[name].describe([("client-id", EXACT, client)])
                        kept_result[name] = "answered"
                    except (OSError, WireError) as e:
                        kept_result[name] = "no answer (%s)" % e
            time.sleep(1)
        for th in threads:
            th.join(ALTER_TIMEOUT_S + 20)
        for w in kept.values():
            w.close()
        for name, (ok_n, bad_n, first) in describes.items():
            say("   %s during the outage: %d describes on new connections answered (each the configuration from"
                " before), %d not%s; a connection opened before the outage: %s"
                % (name, ok_n, bad_n, " (first: %s)" % first if first else "", kept_result.get(name)))
            if bad_n:
                problems.append("%s could not be described during the outage (%d of %d tries on new connections"
                                " got no answer; first: %s); a connection opened before it: %s"
                                % (name, bad_n, ok_n + bad_n, first, kept_result.get(name)))
        for entity, name, code, msg, took, at in sorted(attempts, key=lambda a: (a[5], a[1])):
            say("   alteration at %s sent %.1f s into the outage: %.2f s, %s %r" % (name, at, took, code, msg))
            if code == 0:
                problems.append("an alteration at %s was acknowledged while Kafka was down" % name)
            elif code is None:
                problems.append("an alteration at %s got no answer while Kafka was down (%s)" % (name, msg))
            elif took > ALTER_TIMEOUT_S + 2:
                problems.append("an alteration at %s took %.2f s to fail, over the alteration timeout %.0f s"
                                % (name, took, ALTER_TIMEOUT_S))
            elif not msg or not (MAY_STILL in msg or "refused" in msg):
                problems.append("the error of an alteration at %s does not say whether it may still apply: %r"
                                % (name, msg))
        if len(attempts) != 2 * len(members):
            problems.append("%d of %d alterations during the outage came back" % (len(attempts), 2 * len(members)))
        t_start0 = time.monotonic()
        r = subprocess.run([self.broker_start], capture_output=True, text=True, timeout=150)
        if r.returncode != 0:
            raise Failure("starting the broker again failed: %s%s" % (r.stdout, r.stderr))
        t_up = time.monotonic()
        say("   broker down %.1f s in all; started again in %.1f s" % (t_up - t_down, t_up - t_start0))
        # At once at every instance, each retrying until acknowledged; then how long until every
        # instance describes each of them.
        resumed = {}

        def resume(name, addr):
            n = 0
            errors = []
            while True:
                entity = (("user", "resume-%s-%s-%d" % (self.run_tag, name, n)),)
                n += 1
                t0 = time.monotonic()
                code, msg = alter_once(addr, entity, 4321.0)
                if code == 0:
                    t_ack = time.monotonic()
                    # How long until every instance describes it, polled from the answer on.
                    seen = {}
                    wires = {}
                    while len(seen) < len(members) and time.monotonic() - t_ack < 20:
                        for other, a2 in members:
                            if other in seen:
                                continue
                            try:
                                wires[other] = wires.get(other) or Wire(a2)
                                if wires[other].values_of(entity).get(KEY) == 4321.0:
                                    seen[other] = time.monotonic() - t_ack
                            except (OSError, WireError):
                                wires.pop(other, None)
                        time.sleep(0.005)
                    for w in wires.values():
                        w.close()
                    resumed[name] = (t_ack, t_ack - t0, entity, errors, seen)
                    return
                errors.append("%s %r after %.2f s" % (code, msg, time.monotonic() - t0))
                if time.monotonic() - t_up > 90:
                    resumed[name] = (None, None, None, errors, {})
                    return
                time.sleep(0.2)

        ths = [threading.Thread(target=resume, args=m, daemon=True) for m in members]
        for th in ths:
            th.start()
        for th in ths:
            th.join(120)
        for name, _ in members:
            t_ack, took, entity, errors, seen = resumed.get(name, (None, None, None, ["no result"], {}))
            if t_ack is None:
                problems.append("%s did not acknowledge an alteration within 90 s of Kafka's return: %s"
                                % (name, errors[-3:]))
                continue
            say("   %s acknowledged an alteration %.2f s after Kafka was back (the request took %.2f s; %d tries"
                " before it%s); described by %s" % (
                    name, t_ack - t_up, took, len(errors), (": %s" % errors[:2]) if errors else "",
                    ", ".join("%s after %s" % (o, ms(seen[o]) if o in seen else "NEVER (20 s)") for o, _ in members)))
            late_members = [o for o, _ in members if o not in seen or seen[o] > ALTER_TIMEOUT_S]
            if late_members:
                problems.append("an alteration acknowledged by %s after the outage was not described by %s within"
                                " %.0f s" % (name, late_members, ALTER_TIMEOUT_S))
            if seen.get(name, 99) > 0.5:
                problems.append("%s acknowledged an alteration after the outage that a describe there did not show"
                                " for %s (a commit is applied at its instance before it is answered)"
                                % (name, ms(seen[name]) if name in seen else "20 s"))
        final = self.wait_same(timeout=ALTER_TIMEOUT_S + 10)
        w = Wire(kq.addr)
        kq_final = w.describe()
        w.close()
        if kq_final != final:
            problems.append("after the outage kquotad-0 describes another configuration: %s" % diff_snapshots([final, kq_final]))
        late = [a for a in attempts if a[2] != 0 and ekey(a[0]) in final]
        say("   alterations answered with an error during the outage that were applied later: %d of %d"
            % (len(late), len(attempts)))
        after_rate = self._throttled_rate(1, client, "after")
        for rate, when in ((before_rate, "before"), (after_rate, "after")):
            if rate > 200000 * 1.25:
                problems.append("the producer of %s achieved %.0f bytes/s through inst-1 %s the outage, over its"
                                " 200000 quota" % (client, rate, when))
        code = kq.term()
        if code != 0:
            problems.append("kquotad-0 exited with %s on SIGTERM" % code)
        dropped = []
        for p, mark in zip(self.proxies, marks):
            for m in re.finditer(r"members: (\d+) live: (.*)", p.log_text()[mark:]):
                if not all(n in m.group(2).split(", ") for n in ("inst-0", "inst-1", "inst-2")):
                    dropped.append("%s: %s" % (p.name, m.group(0)))
        say("   membership changes the proxies logged since the outage began: %s"
            % (dropped or "none with fewer than the three proxies"))
        if dropped:
            problems.append("an instance counted fewer live instances around the outage: %s" % dropped[:6])
        self.results["5"] = {"outage_s": t_up - t_down, "describes": describes, "kept_connection": kept_result,
                             "during": [(a[1], a[2], a[3], round(a[4], 2)) for a in attempts],
                             "resumed_s": {k: (v[0] - t_up if v[0] else None) for k, v in resumed.items()},
                             "resumed_visible_s": {k: v[4] for k, v in resumed.items()},
                             "late_applied": len(late),
                             "throttled_rate": [before_rate, after_rate]}
        if problems:
            raise Failure("%d problems: %s" % (len(problems), "; ".join(problems[:12])))

    # ---- 7. usage traffic

    def t7_traffic(self):
        """Many bps buckets through the proxies: the usage topic's bytes per instance (what each
        produces, and the others' records it consumes), read from the topic itself, beside what
        the whole-usage records of before (version 1: every bucket every interval) would have
        taken for the same buckets; and, in the same run, the 70/20/10 load of one bucket against
        its cluster-wide limit."""
        every, skew_limit = 50000.0, 3000000.0
        rounds = [(3, 1000), (3, 10000), (5, 1000), (5, 10000)] if self.full else [(3, 1000)]
        warm, window = (15, 20)
        anyone = (("user", None), ("client-id", None))
        say("   {user=<default>, client-id=<default>} %s=%d (a bucket per client id); buckets.py sends each"
            " bucket one 900-byte request every 2 s (1 %% of them switching to three times that each second),"
            " 2 %% of the buckets through two proxies; {user=ANONYMOUS, client-id=skew-*} %s=%d loaded"
            " 2.8 / 0.8 / 0.4 MB/s through three; %d s warm-up, %d s measured; rounds (proxies, buckets): %s"
            % (BPS, every, BPS, skew_limit, warm, window, rounds))
        extra = []
        rows = []
        problems = []
        try:
            for n, buckets in rounds:
                while len(self.proxies) + len(extra) < n:
                    p = Proxy(self, "inst-%d" % (len(self.proxies) + len(extra)))
                    took = p.start()
                    say("   %s started for this round (%.2f s to serve)" % (p.name, took))
                    extra.append(p)
                # The rounds go up in proxies: those started for a round stay for the next.
                ps = (self.proxies + extra)[:n]
                tag = "%s-%d-%d" % (self.run_tag, n, buckets)
                skew = (("user", "ANONYMOUS"), ("client-id", "skew-%s" % tag))
                self.alter_ok(0, anyone, {BPS: every})
                self.alter_ok(0, skew, {BPS: skew_limit})
                self.wait_visible(skew, BPS, skew_limit, timeout=10)
                reader = UsageReader(self.kafka)
                reader.start()
                procs = []
                per = buckets // n
                for i, p in enumerate(ps):
                    for first, step in ((i * per, 1), (((i + 1) % n) * per, 50)):
                        name = "buckets-%s-%d-%d" % (tag, i, first)
                        pr = Proc(self, name)
                        pr.spawn([sys.executable, os.path.join(HERE, "buckets.py"), p.addr, "instances-traffic",
                                  str(warm + window + 3), "t7-%s-" % tag, str(first), str(per), "2.0", "900",
                                  str(i + 7 * first), str(step)], os.path.join(self.work, "%s.log" % name))
                        procs.append(pr)
                loads = []
                for i, r in enumerate([2800000, 800000, 400000]):
                    l = Load(self, "t7-skew-%s-%d" % (tag, i), ps[i].addr, "instances-accuracy", r, warm + window + 3,
                             "skew-%s" % tag)
                    self.loads.append(l)
                    loads.append(l)
                t_start = time.time()
                time.sleep(warm + window + 1)
                t0, t1 = t_start + warm, t_start + warm + window
                for l in loads:
                    l.wait(30)
                for pr in procs:
                    try:
                        pr.proc.wait(30)
                    except subprocess.TimeoutExpired:
                        pr.kill9()
                    pr._forget()
                reader.stop()
                m = reader.measure(t0, t1, [p.name for p in ps])
                skew_rate = sum((l.acked_at(t1) - l.acked_at(t0)) / window for l in loads)
                row = {"proxies": n, "buckets": buckets, "skew_bytes_per_s": skew_rate, **m}
                rows.append(row)
                say("   %d proxies x %d buckets: produced per instance %s (deltas) against %s (whole records),"
                    " consumed per instance %s against %s; %d records a second in all, %d whole statements;"
                    " buckets seen %d; the skewed bucket %.3f MB/s against 3 MB/s (%+.1f %%)" % (
                        n, buckets, kbs(m["produced"]), kbs(m["produced_v1"]), kbs(m["consumed"]),
                        kbs(m["consumed_v1"]), m["records_per_s"], m["resets"], m["buckets_seen"],
                        skew_rate / 1e6, (skew_rate / skew_limit - 1) * 100))
                if m["buckets_seen"] < buckets * 0.9:
                    problems.append("%d proxies x %d buckets: the usage records named %d buckets"
                                    % (n, buckets, m["buckets_seen"]))
                if not m["produced"] * 3 < m["produced_v1"]:
                    problems.append("%d proxies x %d buckets: deltas %s a second per instance, not under a third of"
                                    " the whole records' %s" % (n, buckets, kbs(m["produced"]), kbs(m["produced_v1"])))
                if abs(skew_rate - skew_limit) > 0.1 * skew_limit:
                    problems.append("%d proxies x %d buckets: the skewed bucket passed %.0f bytes/s, not within 10 %% of"
                                    " %.0f" % (n, buckets, skew_rate, skew_limit))
        finally:
            self.alter_ok(0, anyone, {BPS: None})
            for p in extra:
                if p.alive():
                    p.term()
        self.results["7"] = rows
        if problems:
            raise Failure("; ".join(problems))

    def _throttled_rate(self, i, client, when):
        l = Load(self, "outage-load-%s" % when, self.proxies[i].addr, "instances-outage", 600000, 14, client, 10000)
        self.loads.append(l)
        t0 = time.time()
        l.wait(40)
        rate = (l.acked_at(t0 + 13) - l.acked_at(t0 + 4)) / 9.0
        say("   a producer of %s offering 600000 bytes/s through inst-%d %s the outage: %.0f bytes/s acked"
            " (seconds 4 to 13), quota 200000" % (client, i, when, rate))
        return rate


def kbs(x):
    return "%.1f kB/s" % (x / 1e3) if x < 1e6 else "%.2f MB/s" % (x / 1e6)


class UsageReader:
    """Reads the usage topic (from its end on) on a thread: every record with when it came, and
    each instance's buckets as its records say them, so that the size a version 1 record (every
    bucket, every interval) would have had at each publication is known too."""

    def __init__(self, kafka):
        from confluent_kafka import Consumer, TopicPartition, OFFSET_END
        self.c = Consumer({"bootstrap.servers": kafka, "group.id": "kquota-instances-usage", "enable.auto.commit": False,
                           "log_level": 3})
        self.c.assign([TopicPartition("_kquota_usage", 0, OFFSET_END)])
        self.records = []  # (time, key, bytes, at_ms, v, buckets, gone, reset)
        self.stopping = threading.Event()
        self.th = threading.Thread(target=self.run, daemon=True)

    def start(self):
        self.th.start()

    def stop(self):
        self.stopping.set()
        self.th.join(10)
        self.c.close()

    def run(self):
        while not self.stopping.is_set():
            m = self.c.poll(0.2)
            if m is None or m.error() or m.value() is None:
                continue
            try:
                v = json.loads(m.value())
            except ValueError:
                continue
            self.records.append((time.time(), (m.key() or b"").decode(), len(m.value()), v.get("at_ms"), v.get("v"),
                                 v.get("buckets", []), v.get("gone", []), v.get("reset", True)))

    def measure(self, t0, t1, names):
        """Bytes a second per instance over t0..t1: produced (its records), consumed (the others'),
        and the same for version 1 records of its buckets as they stood at each publication."""
        window = t1 - t0
        state = {}  # instance -> {bucket id: encoded length}
        produced, produced_v1, seen_pub = {}, {}, set()
        resets = 0
        total = total_v1 = records = 0
        buckets_seen = set()
        for t, key, size, at_ms, v, buckets, gone, reset in self.records:
            st = state.setdefault(key, {})
            if v == 1 or reset:
                st.clear()
            for b in buckets:
                bid = (b.get("key"), json.dumps(b.get("owner"), sort_keys=True))
                st[bid] = len(json.dumps(b, separators=(",", ":")))
                buckets_seen.add(bid)
            for g in gone:
                st.pop((g.get("key"), json.dumps(g.get("owner"), sort_keys=True)), None)
            if not (t0 <= t <= t1):
                continue
            records += 1
            resets += 1 if reset and v == 2 else 0
            produced[key] = produced.get(key, 0) + size
            total += size
            if (key, at_ms) not in seen_pub:
                seen_pub.add((key, at_ms))
                v1 = 60 + len(key) + sum(st.values()) + len(st)
                v1 = min(v1, 900000)
                produced_v1[key] = produced_v1.get(key, 0) + v1
                total_v1 += v1
        n = len(names)
        mean = lambda d: sum(d.get(k, 0) for k in names) / n / window
        return {"produced": mean(produced), "produced_v1": mean(produced_v1),
                "consumed": (total - sum(produced.get(k, 0) for k in names) / n) / window,
                "consumed_v1": (total_v1 - sum(produced_v1.get(k, 0) for k in names) / n) / window,
                "records_per_s": records / window, "resets": resets, "buckets_seen": len(buckets_seen)}


def summary_ms(values):
    return {"p50": round(pct(values, 50) * 1000, 2), "p99": round(pct(values, 99) * 1000, 2),
            "max": round(max(values) * 1000, 2), "n": len(values)}


def diff_snapshots(snaps):
    keys = set().union(*snaps)
    diffs = []
    for k in sorted(keys, key=str):
        vals = [s.get(k) for s in snaps]
        if any(v != vals[0] for v in vals):
            diffs.append("%s: %s" % (show(k), vals))
    return "%d entities differ, e.g. %s" % (len(diffs), diffs[:5])


def read_membership_timings():
    """member_expiry and heartbeat_interval, as ClusterConfig::new sets them, and the bound as
    Membership::expiry_bound adds them up."""
    src = open(os.path.join(ROOT, "kquota-cluster/src/config.rs")).read()
    out = {}
    for name in ("member_expiry", "heartbeat_interval"):
        m = re.search(r"\b%s:\s*Duration::from_(secs|millis)\((\d+)\)" % name, src)
        if not m:
            raise Failure("cannot read %s's default from kquota-cluster/src/config.rs" % name)
        out[name] = int(m.group(2)) / (1.0 if m.group(1) == "secs" else 1000.0)
    members = open(os.path.join(ROOT, "kquota-cluster/src/members.rs")).read()
    if not re.search(r"fn expiry_bound\(config: &ClusterConfig\) -> Duration \{\s*config\.member_expiry \+ config\.heartbeat_interval\s*\}", members):
        raise Failure("Membership::expiry_bound in kquota-cluster/src/members.rs is no longer member_expiry +"
                      " heartbeat_interval: update test 4")
    return out["member_expiry"], out["heartbeat_interval"]


def config_log_order(kafka, race_users):
    """For each race user, which of its two racing batches is first in the configuration log: 0 for
    the one setting {client-id=a}, 1 for the other; read from Kafka directly."""
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": kafka, "group.id": "kquota-instances-reader", "enable.auto.commit": False,
                  "enable.partition.eof": True, "log_level": 3})
    try:
        _, high = c.get_watermark_offsets(TopicPartition("_kquota_config", 0), timeout=10)
        c.assign([TopicPartition("_kquota_config", 0, 0)])
        users = {u: sub for u, sub in race_users}
        first = {}
        deadline = time.monotonic() + 30
        pos = 0
        while pos < high and time.monotonic() < deadline:
            m = c.poll(1)
            if m is None or m.error():
                continue
            pos = m.offset() + 1
            # Batches only: claims and snapshot chunks (version 2) and tombstones carry none.
            rec = json.loads(m.value()) if m.value() is not None else {}
            if rec.get("v") != 1:
                continue
            for alt in rec["alterations"]:
                ent = {e["type"]: e["name"] for e in alt["entity"]}
                u = ent.get("user")
                if u not in users or u in first:
                    continue
                if ent.get("client-id") == "a":
                    first[u] = 0
                elif ent.get("client-id") == "b":
                    first[u] = 1
                elif "client-id" not in ent and any(op.get("value") == 500.0 for op in alt["ops"]):
                    first[u] = 1
        return first
    finally:
        c.close()


TESTS = [
    ("1", "an alteration at one instance is visible at every instance within 1 s", "t1_propagation"),
    ("3", "two instances racing conflicting KIP-55 sub-quota alterations", "t3_race"),
    ("2", "kill -9 of instances during an alteration storm", "t2_storm"),
    ("4", "an instance stops: the others' bps limits change within the membership bound", "t4_membership"),
    ("6", "accuracy of the cluster-wide bps split against the static division", "t6_accuracy"),
    ("7", "usage traffic with many bps buckets, and the split's accuracy in the same run", "t7_traffic"),
    ("5", "Kafka unreachable for 30 s", "t5_outage"),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kafka", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--proxy-bin", required=True)
    ap.add_argument("--kquotad-bin", required=True)
    ap.add_argument("--broker-stop", required=True)
    ap.add_argument("--broker-start", required=True)
    ap.add_argument("--full", action="store_true")
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    only = [x.strip() for x in args.only.split(",") if x.strip()]
    h = Harness(args)
    outcomes = []
    started = time.monotonic()
    try:
        say("== starting inst-0, inst-1, inst-2 (kquota-proxy --cluster-bootstrap %s)" % args.kafka)
        for p in h.proxies:
            took = p.start()
            say("   %s on %s (metrics %d, broker 1 on %d): serving after %.2f s" % (p.name, p.addr, p.metrics_port,
                                                                                   p.base + 1, took))
        for num, title, method in TESTS:
            if only and num not in only:
                say("== %s. %s: NOT RUN (KQUOTA_INSTANCES_ONLY=%s)" % (num, title, args.only))
                outcomes.append((num, "not run", ""))
                continue
            say("== %s. %s" % (num, title))
            t0 = time.monotonic()
            try:
                restarted = h.ensure_up()
                if restarted:
                    say("   (restarted %s, which the previous test left stopped)" % restarted)
                getattr(h, method)()
                outcomes.append((num, "PASS", "%.0f s" % (time.monotonic() - t0)))
                say("   PASS (%.0f s)" % (time.monotonic() - t0))
            except Failure as e:
                outcomes.append((num, "FAIL", str(e)))
                say("   FAIL: %s" % e)
            except Exception:
                tb = traceback.format_exc()
                outcomes.append((num, "FAIL", tb))
                say("   FAIL (error in the test):\n%s" % tb)
    except Failure as e:
        outcomes.append(("setup", "FAIL", str(e)))
        say("   FAIL: %s" % e)
    finally:
        h.cleanup()
    for p in h.proxies + h.statics + h.kquotads:
        text = p.log_text()
        if "panicked" in text:
            i = text.index("panicked")
            outcomes.append(("logs", "FAIL", "%s panicked:\n%s" % (p.name, text[max(0, i - 300):i + 1500])))
        # kquota's own warnings and errors (librdkafka's connection failures while Kafka is away left
        # out), by message with the numbers taken out.
        own = {}
        for line in text.splitlines():
            m = re.search(r" (WARN|ERROR) (kquota\S*): (.*)$", line)
            if m:
                k = "%s %s: %s" % (m.group(1), m.group(2), re.sub(r"\d+", "N", m.group(3))[:200])
                own[k] = own.get(k, 0) + 1
        if own:
            say("   %s logged: %s" % (p.name, "; ".join("%dx %s" % (n, k) for k, n in sorted(own.items()))))
    with open(os.path.join(args.work, "results.json"), "w") as f:
        json.dump({"outcomes": outcomes, "results": h.results}, f, indent=1, default=str)
    say("== summary (%.0f s)" % (time.monotonic() - started))
    for num, status, detail in outcomes:
        say("   %-5s %-7s %s" % (num, status, detail.splitlines()[0][:300] if detail else ""))
    passed = [o for o in outcomes if o[1] == "PASS"]
    failed = [o for o in outcomes if o[1] == "FAIL"]
    if failed or not passed:
        sys.exit(1)


if __name__ == "__main__":
    main()
