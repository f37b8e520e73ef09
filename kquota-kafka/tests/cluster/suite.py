"""kquota's cluster-wide limits inside Apache Kafka 4.3.1's brokers: three brokers (interop/kafka/cluster.sh,
three combined KRaft nodes on loopback), each with the plug-in in cluster mode, following kquota's
configuration log in the cluster's own topics, counting the live brokers and sharing bps usage.

    python suite.py --work DIR --jar KQUOTA_KAFKA_JAR --kquotad target/debug/kquotad

run.sh builds the jar and kquotad and calls this. Every broker's server.properties gets (cluster.sh's
KAFKA_EXTRA_PROPERTIES, @PLAINTEXT@ being the cluster's PLAINTEXT bootstrap list):

    client.quota.callback.class=io.kquota.kafka.KquotaCallback
    metric.reporters=org.apache.kafka.common.metrics.JmxReporter,io.kquota.kafka.KquotaMetricsReporter
    kquota.cluster.bootstrap.servers=@PLAINTEXT@
    kquota.cluster.replication.factor=3
    broker.session.timeout.ms=2000, broker.heartbeat.interval.ms=500

The last line is Kafka's, not kquota's. The plug-ins' heartbeats travel through a replicated topic
(_kquota_members, replication factor 3), and a consumer reads only below the high watermark, which
stops while a dead replica is still in the ISR: Kafka's controller takes a dead broker out of every ISR
when it fences it, after its session timeout (9 s by default). Until then no instance reads its own
heartbeats back, and kquota's membership treats a gap in them longer than its expiry (3 s) as its own
outage, giving every member twice the expiry from the end of the gap (docs/cluster.md). So with
Kafka's default, a broker killed with kill -9 drops out ~9 + 6 s after the kill, and with 3 s ~3 + 6 s
at the instances whose gap passed 3 s (measured: 9.2 s at one survivor, 3.0 s at the other). At 2 s
Kafka's detection stays within kquota's expiry, and case 4a bounds kquota's own part: expiry, a
heartbeat and delivery, as docs/cluster.md states it. For the same reason the broker killed there is
not the active controller (measured: its death delayed the ISR change to 5.3 s, the drop to 11.7 s) and
leads neither _kquota_members nor _kquota_config (a dead leader holds a partition until Kafka fences
it).

The broker's state is read over JMX (bean io.kquota:type=ClientQuotaCallback,instance=0: ClusterState,
Ready, LiveBrokers, Sensors, ReporterInstalled, explain(user, clientId)) through one JVM for the whole run
(JmxShell.java). Quotas reach the brokers two ways: Kafka's own AlterClientQuotas sent to a broker (its
metadata), and AlterClientQuotas sent to a kquotad joined to the same cluster (--cluster-bootstrap,
--sub-quota-policy kafka like the brokers), which writes kquota's log; both encoded by kafka-python's
message classes (kquota-cluster/tests/instances/instances.py's Wire). Every entity is a client-id
(PLAINTEXT clients are all User:ANONYMOUS), so Kafka's shapes rule tags every Produce by client-id.

The kquotad joins kquota's membership too, but serves no clients' traffic and says so in its heartbeats,
so it is counted in no broker's live set and takes no part of a bps limit (docs/cluster.md): it starts in
case 2 and runs to the end, as it would beside a real cluster, and every LiveBrokers and every split below
is judged with it running.

Cases (each bounded; a case that fails says what was expected and what was seen, with the brokers'
kquota log lines):

1. ready: every broker's ClusterState "ready", Ready true, LiveBrokers 3, ReporterInstalled true,
   within READY_TIMEOUT_S of the cluster's start.
2. configuration, both ways, at every broker's explain(ANONYMOUS, client-id), once every broker still
   counts three live brokers over KQUOTAD_WATCH_S with the kquotad joined:
   {client-id=conflict-a} producer_byte_rate 2,000,000 through the log (served), then 1,000,000 through
   Kafka: 1,000,000 (Kafka's metadata wins); Kafka's removed: 2,000,000 again (the log's). The other
   order for conflict-b: Kafka's 1,000,000, then the log's 2,000,000 together with a marker entity in
   the same AlterClientQuotas (one record of the log): once every broker serves the marker, conflict-b
   is still 1,000,000; Kafka's removed: 2,000,000. And {client-id=bps-held} producer_byte_rate:bps
   1,500,000 (a key Kafka refuses) through the log: every broker's explain shows 1,500,000 and a limit.
3. accuracy (kquota-cluster/tests/instances test 6, inside the brokers): topic kq-load, three partitions,
   partition i led by node i+1; three producers (load.py: librdkafka at its defaults, one partition
   each) sharing ONE client-id offer 2,800,000 / 800,000 / 400,000 bytes/s to nodes 1/2/3; WARM_S
   warm-up, then the acknowledged bytes over WINDOW_S. Rounds, each with its own client-id (its own
   bucket): "kquota" producer_byte_rate:bps 3,000,000 through the log (split by usage), "kafka-1MB"
   Kafka's producer_byte_rate 1,000,000 (per broker: the static division of 3 MB/s by three), and
   "kafka-3MB" Kafka's 3,000,000 per broker. Each producer's rate is judged over its whole throttle
   cycles where Kafka throttled it into bursts (else over the span). Asserted: kquota's total within ACC_TOL = 10 % of
   3,000,000. The Kafka rounds are shown beside it (what the static division gives), not asserted
   beyond sanity (every producer acknowledged, no delivery error).
4. faults:
   a. kill -9 of a broker that is not the active KRaft controller and leads neither _kquota_members nor
      _kquota_config (see above: Kafka's own failover is not what is measured): both others' LiveBrokers
      2 within 3.5 s (expiry and a heartbeat) + 1 s (delivery) + 2 s (margin) of the kill;
   c. (after a) the broker started again: every broker ready, LiveBrokers 3;
   b. kill -9 of _kquota_config's leader during a storm of alterations through kquotad (three clients at
      once, one entity per alteration): every alteration kquotad acknowledged is served by both survivors
      afterwards, and the bps limit of bps-held is shown by every survivor's explain all along (sampled
      every ~0.3 s);
   c. (after b) the broker started again: every broker ready, LiveBrokers 3, and it serves every
      acknowledged alteration too;
   d. SIGTERM of a broker: it exits within EXIT_BOUND_S = 60 s (otherwise its threads are dumped with
      jstack, kquota's named, and it is killed); then started again.
6. usage traffic (run after 3, on the whole cluster): {client-id=<default>} producer_byte_rate:bps gives
   every client-id a bucket; kquota-cluster/tests/instances/buckets.py sends 1,000 of them (one 900-byte
   Produce every 2 s each, 1 % switching to three times that each second, 2 % at two brokers) straight
   to the brokers leading their partitions; the usage topic's bytes per broker over the measured span
   (instances.py's UsageReader), beside what whole records (version 1) would have taken. Asserted, as
   for the proxies: the brokers' records name at least 90 % of the buckets, and deltas cost under a
   third of whole records.
5. unreachable log at start: a broker restarted with kquota.cluster.bootstrap.servers at a closed
   port starts, logs a WARN line with "kquota: the configuration log is not reachable", says
   ClusterState "joining" (with its attempt and last error) and Ready false, and serves Kafka's quotas (one set before its restart and
   one set while it is up); restarted with the right bootstrap, it is ready and LiveBrokers 3.

A case that fails fails the run, and so does one that did not run: a partial run never passes
(KQUOTA_CLUSTER_CASES=REGEX runs the matching cases only, for development). results.json in the work
directory has every case's outcome, the accuracy table and the fault timings.
"""
import argparse
import importlib.util
import json
import os
import queue
import re
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
CLUSTER_SH = os.path.join(REPO, "interop", "kafka", "cluster.sh")
sys.path.insert(0, os.path.join(REPO, "interop"))
from ports import listen_ports  # noqa: E402


def _load_instances():
    """kquota-cluster's instances suite, for its Wire (AlterClientQuotas and DescribeClientQuotas over
    one socket, kafka-python's message classes), shared rather than copied."""
    path = os.path.join(REPO, "kquota-cluster", "tests", "instances", "instances.py")
    spec = importlib.util.spec_from_file_location("kquota_instances_suite", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


instances = _load_instances()
Wire, WireError, ekey = instances.Wire, instances.WireError, instances.ekey

MBEAN = "io.kquota:type=ClientQuotaCallback,instance=0"
KEY = "producer_byte_rate"
BPS = "producer_byte_rate:bps"
NODES = (1, 2, 3)
TOPIC = "kq-load"
ASSIGNMENT = [[1, 2, 3], [2, 3, 1], [3, 1, 2]]  # partition i led by node i+1
CONFIG_TOPIC = "_kquota_config"
MEMBERS_TOPIC = "_kquota_members"
USAGE_TOPIC = "_kquota_usage"
USER = "ANONYMOUS"  # every PLAINTEXT client
UNREACHABLE_WARN = "kquota: the configuration log is not reachable"

HEAP = os.environ.get("KAFKA_HEAP", "-Xmx384m -Xms128m")
START_TIMEOUT_S = int(os.environ.get("KAFKA_START_TIMEOUT", "240"))
SUITE_TIMEOUT_S = int(os.environ.get("KQUOTA_CLUSTER_SUITE_TIMEOUT", "1500"))
READY_TIMEOUT_S = 180  # from the cluster's start (or a broker's restart) to every broker ready
VISIBLE_TIMEOUT_S = 30  # an alteration, from its acknowledgement to every broker serving it
EXPIRY_BOUND_S = 3.5  # kquota's member expiry (3 s) and a heartbeat (0.5 s)
DELIVERY_S = 1.0
MARGIN_S = 2.0
KAFKA_SESSION_TIMEOUT_MS = 2000
KAFKA_HEARTBEAT_MS = 500
EXIT_BOUND_S = 60
ACC_LIMIT = 3000000
ACC_OFFERED = [2800000, 800000, 400000]
ACC_TOL = 0.10
WARM_S = 20
# The measured span (45 s by default: three of the ~12 s cycles a producer Kafka throttles goes in,
# so that every throttled producer's rate is judged over at least two whole cycles).
WINDOW_S = int(os.environ.get("KQUOTA_CLUSTER_ACC_WINDOW_S", "45"))
RECORD_BYTES = 16384
HELD_BPS = 1500000
KQUOTAD_WATCH_S = 3.0  # six of kquotad's heartbeats
STORM_CLIENTS = 3  # connections to kquotad altering at once, each its own entities
ALTER_TIMEOUT_MS = 10000
# Case 6: {client-id=<default>} producer_byte_rate:bps, high enough never to bind; the bucket counts
# (KQUOTA_CLUSTER_FULL=1 adds 10,000), warm-up and measured span, as the proxies' test 7.
TRAFFIC_LIMIT = 50000000
TRAFFIC_BUCKETS = [1000] + ([10000] if os.environ.get("KQUOTA_CLUSTER_FULL") else [])
TRAFFIC_WARM_S = 15
TRAFFIC_WINDOW_S = 20

CASES = [
    "setup: three brokers with the plug-in in cluster mode, the load topic",
    "1. ready: every broker joined, LiveBrokers 3, the metrics reporter installed",
    "2. configuration both ways: Kafka's metadata wins a conflict, the log's own keys served",
    "3. accuracy: a 3 MB/s cluster-wide bps limit under a 70/20/10 load, beside Kafka's static division",
    "4a. faults: a broker killed (kill -9), the others count two within 3.5 + 1 + 2 s",
    "4c. faults: the broker killed in 4a started again rejoins",
    "4b. faults: _kquota_config's leader killed in an alteration storm, nothing acknowledged lost",
    "4c. faults: the broker killed in 4b started again rejoins and serves every acknowledged alteration",
    "4d. faults: a SIGTERM'd broker exits within 60 s",
    "5. unreachable log at start: Kafka's quotas served, the WARN line, joining; then ready",
    "6. usage traffic: what each broker writes to kquota's usage topic against the bps buckets it serves",
]


class CaseFailure(Exception):
    pass


LIVE = set()  # child processes ended if the suite is told to stop
LIVE_LOCK = threading.Lock()
STOPPING = threading.Event()  # the suite was told to stop: no broker is started again


def log(msg=""):
    print(msg, flush=True)


def on_signal(signum, frame):
    STOPPING.set()
    if signum == signal.SIGALRM:
        log("suite.py: the suite did not finish within KQUOTA_CLUSTER_SUITE_TIMEOUT=%d s; stopping" % SUITE_TIMEOUT_S)
    with LIVE_LOCK:
        for p in list(LIVE):
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except OSError:
                pass
    raise SystemExit(143)


def reap(procs, timeout):
    """Waits for each of `procs` up to `timeout` s, kills the group of one still running, forgets them."""
    for p in procs:
        try:
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(10)
        forget(p)


def spawn(argv, log_path, env=None, stdin=subprocess.DEVNULL, stdout=None):
    out = open(log_path, "ab")
    try:
        p = subprocess.Popen(argv, stdin=stdin, stdout=stdout if stdout is not None else out, stderr=out, env=env,
                             start_new_session=True)
    finally:
        out.close()
    with LIVE_LOCK:
        LIVE.add(p)
    return p


def forget(p):
    with LIVE_LOCK:
        LIVE.discard(p)


def pid_alive(pid):
    """Whether pid runs: a zombie (killed, not yet reaped by whoever inherited it) does not."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def tail(path, n=30):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError:
        return ""


def burst_onsets(acked_at, a, b, quota):
    """The wall times in [a, b] at which a throttled producer's burst begins (kquota-kafka/tests/kafka's
    rule): the rate over the next 0.5 s above half the quota after 2 s under a quarter of it, with
    more than 2 s of quota acknowledged within the next 3 s. acked_at(t): bytes acknowledged by t."""
    out = []
    t = a + 2.0
    while t + 3.0 <= b:
        if (acked_at(t + 0.5) - acked_at(t)) / 0.5 > 0.5 * quota and \
                (acked_at(t) - acked_at(t - 2.0)) / 2.0 < 0.25 * quota and \
                acked_at(t + 3.0) - acked_at(t) > 2 * quota:
            out.append(t)
            t += 6.0  # a burst and its ramp last a few seconds; the next comes a cycle later
        else:
            t += 0.1
    return out


def closed_port():
    """A loopback port nobody listens on: bound, then closed."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


# ------------------------------------------------------------------ explain's text

NUM = r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?"


def section(text, key=KEY):
    """The lines of explain's answer about `key`'s quota type: its header line ("producer_byte_rate:
    bucket ..., limit N") and the indented lines under it."""
    lines = text.splitlines()
    out = []
    for i, line in enumerate(lines):
        if re.match(r"%s: bucket\b" % re.escape(key), line):
            out.append(line)
            for more in lines[i + 1:]:
                if more[:1] in (" ", "\t"):
                    out.append(more)
                else:
                    break
            break
    return out


def limit_of(text, key=KEY):
    """The limit explain says the bucket has: a float, or None for 'none'. Raises CaseFailure if the
    text has no such line."""
    sec = section(text, key)
    if not sec:
        raise CaseFailure("explain's answer has no '%s: bucket ..., limit ...' line:\n%s" % (key, text.strip()))
    m = re.search(r"\blimit\s+(none|%s)" % NUM, sec[0])
    if not m:
        raise CaseFailure("explain's '%s' line names no limit: %r" % (key, sec[0]))
    return None if m.group(1) == "none" else float(m.group(1))


def shows(text, value, key=KEY):
    """Whether explain's section about `key` shows `value` anywhere (as the limit, a matched entry or
    a cluster-wide value beside this broker's part)."""
    return any(abs(float(x) - value) < 0.5 for x in re.findall(NUM, "\n".join(section(text, key))))


def first_line(text, key=KEY):
    sec = section(text, key)
    return " | ".join(s.strip() for s in sec) if sec else text.strip().replace("\n", " | ")[:400]


# ------------------------------------------------------------------ JMX

class JmxShell:
    """JmxShell.java in one JVM, one request at a time (a lock), each answer awaited at most `timeout`
    seconds (the shell is started again after a timeout)."""

    def __init__(self, work):
        self.work = work
        self.lock = threading.Lock()
        self.proc = None
        self.lines = None
        self.start()

    def start(self):
        if self.proc is not None:
            self.stop()
        argv = ["java", "-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                "-Dsun.rmi.transport.tcp.responseTimeout=15000", "-Dsun.rmi.transport.tcp.handshakeTimeout=5000",
                "-Dsun.rmi.transport.proxy.connectTimeout=5000", os.path.join(HERE, "JmxShell.java")]
        self.proc = spawn(argv, os.path.join(self.work, "jmx-shell.log"), stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE)
        self.lines = queue.Queue()
        proc, lines = self.proc, self.lines

        def reader():
            for raw in proc.stdout:
                lines.put(raw.decode("utf-8", "replace"))
            lines.put(None)

        threading.Thread(target=reader, daemon=True).start()
        first = self._next(120)
        if not first.get("ready"):
            raise CaseFailure("JmxShell did not start: %s" % first)

    def _next(self, timeout):
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            raise CaseFailure("JmxShell gave no answer within %d s" % timeout)
        if line is None:
            raise CaseFailure("JmxShell exited (%s)" % tail(os.path.join(self.work, "jmx-shell.log"), 10))
        return json.loads(line)

    def request(self, *fields, timeout=40):
        with self.lock:
            try:
                self.proc.stdin.write(("\t".join(str(f) for f in fields) + "\n").encode())
                self.proc.stdin.flush()
                return self._next(timeout)
            except (CaseFailure, OSError, ValueError):
                self.start()  # a fresh shell for the next request
                raise

    def stop(self):
        if self.proc is not None:
            try:
                self.proc.stdin.close()
                self.proc.wait(10)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
            forget(self.proc)
            self.proc = None


# ------------------------------------------------------------------ the cluster

class Cluster:
    """interop/kafka/cluster.sh's three nodes, with the hooks for the plug-in."""

    def __init__(self, work, jar):
        self.dir = os.path.join(work, "cluster")
        self.work = work
        self.jar = jar
        self.env = {}
        self.props = os.path.join(work, "plugin.properties")
        with open(self.props, "w") as f:
            f.write("client.quota.callback.class=io.kquota.kafka.KquotaCallback\n"
                    "metric.reporters=org.apache.kafka.common.metrics.JmxReporter,io.kquota.kafka.KquotaMetricsReporter\n"
                    "kquota.cluster.bootstrap.servers=@PLAINTEXT@\n"
                    "kquota.cluster.replication.factor=3\n"
                    "broker.session.timeout.ms=%d\n"
                    "broker.heartbeat.interval.ms=%d\n" % (KAFKA_SESSION_TIMEOUT_MS, KAFKA_HEARTBEAT_MS))

    def sh_env(self):
        return dict(os.environ, KAFKA_HEAP=HEAP, KAFKA_START_TIMEOUT=str(START_TIMEOUT_S),
                    KAFKA_EXTRA_CLASSPATH=self.jar, KAFKA_EXTRA_PROPERTIES=self.props, KAFKA_JMX="1")

    def start(self):
        p = subprocess.run(["bash", CLUSTER_SH, "start", self.dir], capture_output=True, text=True,
                           env=self.sh_env(), timeout=START_TIMEOUT_S + 300, stdin=subprocess.DEVNULL)
        if p.returncode != 0:
            raise CaseFailure("cluster.sh start failed (exit %d):\n%s%s" % (p.returncode, p.stdout[-3000:],
                                                                            p.stderr[-6000:]))
        self.env = dict(line.split("=", 1) for line in open(os.path.join(self.dir, "bootstrap.env")).read().split()
                        if "=" in line)
        self.plain = self.env["PLAINTEXT"].split(",")
        self.jmx = self.env["JMX"].split(",")
        self.bootstrap = self.env["PLAINTEXT"]

    def start_node(self, n):
        t0 = time.monotonic()
        p = subprocess.run(["bash", CLUSTER_SH, "start-node", self.dir, str(n)], capture_output=True, text=True,
                           env=self.sh_env(), timeout=START_TIMEOUT_S + 60, stdin=subprocess.DEVNULL)
        if p.returncode != 0:
            raise CaseFailure("cluster.sh start-node %d failed (exit %d):\n%s" % (n, p.returncode, p.stderr[-6000:]))
        return time.monotonic() - t0

    def stop(self):
        p = subprocess.run(["bash", CLUSTER_SH, "stop", self.dir], capture_output=True, text=True, timeout=180,
                           stdin=subprocess.DEVNULL)
        return p.returncode

    def node_dir(self, n):
        return os.path.join(self.dir, "node-%d" % n)

    def log_path(self, n):
        return os.path.join(self.node_dir(n), "logs", "server.log")

    def log_size(self, n):
        try:
            return os.path.getsize(self.log_path(n))
        except OSError:
            return 0

    def log_since(self, n, mark):
        try:
            with open(self.log_path(n), "rb") as f:
                f.seek(mark)
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def kquota_lines(self, n, mark=0, limit=12, levels=None):
        """The broker's log lines of the plug-in's (logged by its classes, io.kquota.*), since `mark`:
        the last `limit` distinct ones (timestamps and numbers aside), each with how often it came.
        `levels`: only lines at these levels (e.g. ("WARN", "ERROR"))."""
        counts, last = {}, {}
        for line in self.log_since(n, mark).splitlines():
            m = re.match(r"\[([^\]]*)\] (\w+) (.*)\(io\.kquota\.[\w.]+\)\s*$", line)
            if not m or (levels and m.group(2) not in levels):
                continue
            k = m.group(2) + " " + re.sub(r"\d+", "N", m.group(3))
            counts[k] = counts.get(k, 0) + 1
            last[k] = line
        keys = sorted(last, key=lambda k: last[k])[-limit:]
        return ["%s%s" % ("%dx " % counts[k] if counts[k] > 1 else "", last[k].strip()[:400]) for k in keys]

    def pid(self, n):
        try:
            return int(open(os.path.join(self.node_dir(n), "kafka.pid")).read().strip())
        except (OSError, ValueError):
            return None

    def alive(self, n):
        pid = self.pid(n)
        return pid is not None and pid_alive(pid)

    def kill9(self, n):
        pid = self.pid(n)
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            os.kill(pid, signal.SIGKILL)
        t = time.monotonic()
        deadline = t + 20
        while pid_alive(pid):
            if time.monotonic() > deadline:
                raise CaseFailure("node %d (pid %d) outlived SIGKILL for 20 s" % (n, pid))
            time.sleep(0.05)
        return t

    def term(self, n, bound):
        """SIGTERM to node n; (seconds until it exited, None if it still ran after `bound` s)."""
        pid = self.pid(n)
        t0 = time.monotonic()
        os.kill(pid, signal.SIGTERM)
        while pid_alive(pid):
            if time.monotonic() - t0 > bound:
                return None
            time.sleep(0.1)
        return time.monotonic() - t0

    def set_bootstrap(self, n, value):
        path = os.path.join(self.node_dir(n), "server.properties")
        text = open(path).read()
        new, count = re.subn(r"(?m)^kquota\.cluster\.bootstrap\.servers=.*$",
                             "kquota.cluster.bootstrap.servers=%s" % value, text)
        if count != 1:
            raise CaseFailure("%s has %d kquota.cluster.bootstrap.servers lines" % (path, count))
        with open(path, "w") as f:
            f.write(new)

    # ---- metadata, through librdkafka's admin client

    def admin(self):
        from confluent_kafka.admin import AdminClient
        return AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})

    def partitions(self, topic, admin=None):
        """{partition: (leader, [isr])} of topic, or {} if the topic is unknown."""
        md = (admin or self.admin()).list_topics(topic=topic, timeout=10)
        t = md.topics.get(topic)
        if t is None or t.error is not None:
            return {}
        return {p: (pm.leader, list(pm.isrs)) for p, pm in t.partitions.items()}


# ------------------------------------------------------------------ kquotad

class Kquotad:
    """kquotad joined to the cluster: one more instance of kquota's configuration log, answering the
    quota APIs itself."""

    def __init__(self, suite):
        self.s = suite
        self.proc = None
        self.port = listen_ports(1, set())
        self.addr = "127.0.0.1:%d" % self.port
        self.log_path = os.path.join(suite.work, "kquotad.log")
        self.pid_file = os.path.join(suite.work, "kquotad.pid")

    def argv(self):
        return [self.s.kquotad_bin, "--listeners", "PLAINTEXT://%s" % self.addr,
                "--data-dir", os.path.join(self.s.work, "kquotad-data"), "--super-users", "User:ANONYMOUS",
                "--sub-quota-policy", "kafka", "--cluster-bootstrap", self.s.cluster.bootstrap,
                "--override", "kquota.cluster.instance.id=kquotad-suite",
                "--override", "kquota.cluster.replication.factor=3",
                "--override", "kquota.cluster.alter.timeout.ms=%d" % ALTER_TIMEOUT_MS]

    def text(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def start(self, timeout=120):
        if self.running():
            return 0.0
        t0 = time.monotonic()
        mark = len(self.text())
        self.proc = spawn(self.argv(), self.log_path, env=dict(os.environ, RUST_LOG=os.environ.get("RUST_LOG", "info")))
        with open(self.pid_file, "w") as f:
            f.write("%d\n" % self.proc.pid)
        while True:
            if not self.running():
                raise CaseFailure("kquotad exited with status %s while starting (%s); its log:\n%s" % (
                    self.proc.returncode, " ".join(self.argv()), self.text()[mark:][-4000:]))
            if "listening on " in self.text()[mark:] and instances.port_open(self.port):
                return time.monotonic() - t0
            if time.monotonic() - t0 > timeout:
                raise CaseFailure("kquotad did not listen within %d s; its log:\n%s" % (timeout, self.text()[-4000:]))
            time.sleep(0.1)

    def stop(self):
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        forget(self.proc)
        self.proc = None
        try:
            os.unlink(self.pid_file)
        except OSError:
            pass

    def alter(self, alterations):
        """[(entity, {key: value or None})] as one AlterClientQuotas: {entity key: (code, message)}."""
        w = Wire(self.addr, timeout=ALTER_TIMEOUT_MS / 1000 + 20)
        try:
            return w.alter(alterations)
        finally:
            w.close()

    def values_of(self, entity):
        w = Wire(self.addr)
        try:
            return w.values_of(entity)
        finally:
            w.close()


def cid(name):
    return (("client-id", name),)


# ------------------------------------------------------------------ the suite

class Suite:
    def __init__(self, args):
        self.work = os.path.abspath(args.work)
        self.jar = os.path.abspath(args.jar)
        self.kquotad_bin = os.path.abspath(args.kquotad)
        self.cluster = Cluster(self.work, self.jar)
        self.kquotad = Kquotad(self)
        self.jmx = None
        self.results = []
        self.data = {}

    # ---- reporting

    def case(self, name, fn, *args):
        assert name in CASES, name
        log("== %s" % name)
        t0 = time.monotonic()
        try:
            detail, ok = fn(*args), True
        except CaseFailure as e:
            detail, ok = str(e), False
        except (SystemExit, KeyboardInterrupt):
            raise
        except Exception:
            detail, ok = "the case raised:\n%s" % traceback.format_exc(), False
        secs = time.monotonic() - t0
        self.results.append({"case": name, "ok": ok, "seconds": round(secs, 1), "detail": detail})
        for line in (detail or "").splitlines():
            log("   " + line)
        log("%s %s (%.0f s)" % ("PASS" if ok else "FAIL", name, secs))
        return ok

    def broker_context(self, nodes=NODES, mark=None):
        """The brokers' kquota log lines, for a failure's message."""
        out = []
        for n in nodes:
            lines = self.cluster.kquota_lines(n, (mark or {}).get(n, 0))
            out.append("---- node %d's kquota log lines (last %d):" % (n, len(lines)))
            out += ["     " + l[:400] for l in lines]
        return "\n".join(out)

    # ---- JMX reads

    def attrs(self, n, *names):
        r = self.jmx.request("get", self.cluster.jmx[n - 1], MBEAN, *names)
        if not r.get("ok"):
            raise CaseFailure("node %d: reading %s over JMX failed: %s" % (n, ", ".join(names), r.get("error")))
        return r["attrs"]

    def state(self, n):
        return self.attrs(n, "ClusterState", "Ready", "LiveBrokers", "Sensors", "ReporterInstalled")

    def explain(self, n, client_id, user=USER):
        r = self.jmx.request("invoke", self.cluster.jmx[n - 1], MBEAN, "explain", user, client_id)
        if not r.get("ok"):
            raise CaseFailure("node %d: explain(%s, %s) over JMX failed: %s" % (n, user, client_id, r.get("error")))
        return r["result"]

    def wait_until(self, what, check, timeout, interval=0.3, context=None):
        """Calls check() until it answers (True, detail) or `timeout` s pass; returns (seconds,
        detail); raises CaseFailure naming `what` and the last detail otherwise."""
        t0 = time.monotonic()
        last = None
        while True:
            try:
                ok, last = check()
            except CaseFailure as e:
                ok, last = False, str(e)
            if ok:
                return time.monotonic() - t0, last
            if time.monotonic() - t0 > timeout:
                raise CaseFailure("%s: not within %.0f s; last seen: %s%s" % (
                    what, timeout, last, ("\n" + context()) if context else ""))
            time.sleep(interval)

    def wait_served(self, client_id, value, nodes=NODES, timeout=VISIBLE_TIMEOUT_S, what=None):
        """Until every node's explain(ANONYMOUS, client_id) gives producer_byte_rate the limit `value`."""
        def check():
            seen = {}
            for n in nodes:
                seen[n] = limit_of(self.explain(n, client_id))
            return all(v is not None and abs(v - value) < 0.5 for v in seen.values()), \
                ", ".join("node %d limit %s" % (n, v) for n, v in seen.items())
        return self.wait_until(what or "every broker serving {client-id=%s} %s=%d" % (client_id, KEY, value),
                               check, timeout, context=lambda: self.broker_context(nodes))

    def wait_shown(self, client_id, value, nodes=NODES, timeout=VISIBLE_TIMEOUT_S):
        """Until every node's explain(ANONYMOUS, client_id) shows `value` (a bps limit's cluster-wide
        value) and a limit for the bucket."""
        def check():
            seen, ok = {}, True
            for n in nodes:
                text = self.explain(n, client_id)
                seen[n] = first_line(text)
                ok = ok and shows(text, value) and limit_of(text) is not None
            return ok, "; ".join("node %d: %s" % (n, t) for n, t in seen.items())
        return self.wait_until("every broker's explain showing {client-id=%s} %s=%d and a limit" % (
            client_id, BPS, value), check, timeout, context=lambda: self.broker_context(nodes))

    def wait_ready(self, nodes=NODES, live=3, timeout=READY_TIMEOUT_S):
        """Until every node in `nodes` says ClusterState ready, Ready true and LiveBrokers `live`;
        returns {node: seconds it took} and the last states."""
        t0 = time.monotonic()
        when, last = {}, {}
        while True:
            for n in nodes:
                if n in when:
                    continue
                try:
                    st = self.state(n)
                except CaseFailure as e:
                    last[n] = str(e)
                    continue
                last[n] = st
                if st.get("ClusterState") == "ready" and st.get("Ready") is True and st.get("LiveBrokers") == live:
                    when[n] = time.monotonic() - t0
            if len(when) == len(nodes):
                return when, last
            if time.monotonic() - t0 > timeout:
                raise CaseFailure("not every broker ready with LiveBrokers %d within %d s: %s\n%s" % (
                    live, timeout, "; ".join("node %d %s" % (n, last.get(n)) for n in nodes),
                    self.broker_context(nodes)))
            time.sleep(0.5)

    # ---- Kafka's own quotas

    def kafka_alter(self, alterations):
        """AlterClientQuotas to a live broker (Kafka's metadata, through its controller); every entry
        must succeed."""
        last = None
        for n in NODES:
            if not self.cluster.alive(n):
                continue
            try:
                w = Wire(self.cluster.plain[n - 1], timeout=30)
                try:
                    res = w.alter(alterations)
                finally:
                    w.close()
            except (OSError, WireError) as e:
                last = "node %d: %s" % (n, e)
                continue
            bad = {k: v for k, v in res.items() if v[0] != 0}
            if bad:
                raise CaseFailure("Kafka refused AlterClientQuotas %s: %s" % (alterations, bad))
            return res
        raise CaseFailure("no broker answered AlterClientQuotas: %s" % last)

    def log_alter(self, alterations):
        res = self.kquotad.alter(alterations)
        bad = {k: v for k, v in res.items() if v[0] != 0}
        if bad:
            raise CaseFailure("kquotad refused AlterClientQuotas %s: %s" % (alterations, bad))
        return res

    # ------------------------------------------------------------ setup

    def setup(self):
        t0 = time.monotonic()
        self.cluster.start()
        started = time.monotonic() - t0
        self.cluster_started = time.monotonic()
        self.jmx = JmxShell(self.work)
        lines = ["cluster.sh started three nodes in %.0f s: PLAINTEXT %s, JMX %s" % (
            started, self.cluster.bootstrap, self.cluster.env["JMX"])]
        for n in NODES:
            self.wait_until("node %d registering %s (is the plug-in loaded?)" % (n, MBEAN),
                            lambda: self.registered(n), 30, context=lambda: self.broker_context((n,)))
        from confluent_kafka.admin import NewTopic
        admin = self.cluster.admin()
        fut = admin.create_topics([NewTopic(TOPIC, num_partitions=len(ASSIGNMENT), replica_assignment=ASSIGNMENT)], request_timeout=30)
        try:
            fut[TOPIC].result(60)
        except Exception as e:
            raise CaseFailure("creating %s with replica assignment %s: %s" % (TOPIC, ASSIGNMENT, e))
        secs, detail = self.wait_until("%s's leaders as assigned" % TOPIC, lambda: self.leaders_as_assigned(admin), 60)
        lines.append("topic %s: %d partitions, replicas %s, leaders as assigned (%s) after %.1f s" % (
            TOPIC, len(ASSIGNMENT), ASSIGNMENT, detail, secs))
        return "\n".join(lines)

    def registered(self, n):
        r = self.jmx.request("registered", self.cluster.jmx[n - 1], MBEAN)
        return bool(r.get("ok") and r.get("registered")), r

    def leaders_as_assigned(self, admin=None):
        parts = self.cluster.partitions(TOPIC, admin)
        leaders = {p: parts[p][0] for p in parts}
        want = {p: ASSIGNMENT[p][0] for p in range(len(ASSIGNMENT))}
        return leaders == want, "leaders %s" % leaders

    # ------------------------------------------------------------ 1

    def ready(self):
        when, last = self.wait_ready(timeout=max(10, READY_TIMEOUT_S - (time.monotonic() - self.cluster_started)))
        lines = []
        problems = []
        for n in NODES:
            st = self.state(n)
            beans = self.jmx.request("query", self.cluster.jmx[n - 1], "io.kquota:*").get("names")
            lines.append("node %d: ready %.1f s into this case; %s; its io.kquota beans: %s" % (n, when[n], st, beans))
            if st.get("ReporterInstalled") is not True:
                problems.append("node %d: ReporterInstalled is %r" % (n, st.get("ReporterInstalled")))
        if problems:
            raise CaseFailure("\n".join(lines + problems))
        return "\n".join(lines)

    # ------------------------------------------------------------ 2

    def configuration(self):
        lines, problems = [], []
        secs = self.kquotad.start()
        lines.append("kquotad joined the cluster and listens at %s (%.1f s)" % (self.kquotad.addr, secs))
        # kquotad heartbeats as an instance that serves no traffic: no broker may count it, over
        # several of its heartbeats (an observation span, not a readiness wait).
        seen = {}
        t_end = time.monotonic() + KQUOTAD_WATCH_S
        while time.monotonic() < t_end:
            for n in NODES:
                v = self.attrs(n, "LiveBrokers")["LiveBrokers"]
                seen.setdefault(n, set()).add(v)
            time.sleep(0.25)
        lines.append("with kquotad joined, the brokers' LiveBrokers over %.0f s: %s" % (
            KQUOTAD_WATCH_S, {n: sorted(v) for n, v in seen.items()}))
        if any(v != {3} for v in seen.values()):
            problems.append("a broker counted kquotad (or lost a broker) while kquotad ran: LiveBrokers %s, not "
                            "always 3 (kquotad serves no traffic and must be counted in nobody's live set)" % (
                                {n: sorted(v) for n, v in seen.items()}))

        # conflict-a: the log first, then Kafka.
        self.log_alter([(cid("conflict-a"), {KEY: 2000000})])
        s1, _ = self.wait_served("conflict-a", 2000000, what="conflict-a: the log's 2000000 served by every broker")
        self.kafka_alter([(cid("conflict-a"), {KEY: 1000000})])
        s2, _ = self.wait_served("conflict-a", 1000000, what="conflict-a: Kafka's 1000000 winning over the log's 2000000")
        self.kafka_alter([(cid("conflict-a"), {KEY: None})])
        s3, _ = self.wait_served("conflict-a", 2000000,
                                 what="conflict-a: the log's 2000000 served again once Kafka's was removed")
        lines.append("conflict-a: the log's 2000000 served by all three after %.1f s; Kafka's 1000000 set: served "
                     "after %.1f s (Kafka wins); Kafka's removed: the log's 2000000 again after %.1f s" % (s1, s2, s3))

        # conflict-b: Kafka first, then the log, with a marker in the same record.
        self.kafka_alter([(cid("conflict-b"), {KEY: 1000000})])
        s1, _ = self.wait_served("conflict-b", 1000000, what="conflict-b: Kafka's 1000000 served")
        self.log_alter([(cid("conflict-b"), {KEY: 2000000}), (cid("conflict-b-mark"), {KEY: 222222})])
        logged = self.kquotad.values_of(cid("conflict-b"))
        if logged.get(KEY) != 2000000:
            problems.append("conflict-b: kquotad's describe shows %s, not the log's 2000000" % logged)
        s2, _ = self.wait_served("conflict-b-mark", 222222,
                                 what="conflict-b: the marker of the log's record served by every broker")
        held = {n: limit_of(self.explain(n, "conflict-b")) for n in NODES}
        if any(v != 1000000 for v in held.values()):
            problems.append("conflict-b: once every broker applied the log's 2000000 (its marker served), the limits "
                            "are %s, not Kafka's 1000000 (Kafka's metadata must win)" % held)
        self.kafka_alter([(cid("conflict-b"), {KEY: None})])
        s3, _ = self.wait_served("conflict-b", 2000000, what="conflict-b: the log's 2000000 once Kafka's was removed")
        lines.append("conflict-b: Kafka's 1000000 served after %.1f s; the log's 2000000 (kquotad describes %s) "
                     "applied by all three after %.1f s, limits then %s (Kafka's kept); Kafka's removed: the log's "
                     "2000000 after %.1f s" % (s1, logged, s2, held, s3))

        # A key Kafka cannot hold, through the log.
        try:
            w = Wire(self.cluster.plain[0], timeout=30)
            try:
                refused = w.alter([(cid("bps-held"), {BPS: HELD_BPS})], validate_only=True)
            finally:
                w.close()
            lines.append("Kafka's own answer to %s (validate only): %s" % (BPS, list(refused.values())[0]))
        except (OSError, WireError) as e:
            lines.append("Kafka's own answer to %s (validate only): no answer (%s)" % (BPS, e))
        self.log_alter([(cid("bps-held"), {BPS: HELD_BPS})])
        s4, detail = self.wait_shown("bps-held", HELD_BPS)
        lines.append("{client-id=bps-held} %s=%d through the log: every broker's explain shows it after %.1f s: %s" % (
            BPS, HELD_BPS, s4, detail))
        if problems:
            raise CaseFailure("\n".join(lines + problems + [self.broker_context()]))
        return "\n".join(lines)

    # ------------------------------------------------------------ 3

    def accuracy(self):
        lines = []
        rounds = [("kquota", "acc-kquota", "%s=%d in kquota's log: cluster-wide" % (BPS, ACC_LIMIT)),
                  ("kafka-1MB", "acc-kafka-1mb", "Kafka's %s=1000000: per broker (3 MB/s / 3)" % KEY),
                  ("kafka-3MB", "acc-kafka-3mb", "Kafka's %s=3000000: per broker" % KEY)]
        self.kquotad.start()
        self.log_alter([(cid("acc-kquota"), {BPS: ACC_LIMIT})])
        self.kafka_alter([(cid("acc-kafka-1mb"), {KEY: 1000000}), (cid("acc-kafka-3mb"), {KEY: 3000000})])
        self.wait_shown("acc-kquota", ACC_LIMIT)
        self.wait_served("acc-kafka-1mb", 1000000)
        self.wait_served("acc-kafka-3mb", 3000000)
        self.wait_ready()
        ok, detail = self.leaders_as_assigned()
        if not ok:
            raise CaseFailure("%s's leaders moved: %s (want %s)" % (TOPIC, detail, ASSIGNMENT))
        lines.append("offered %s bytes/s to the partitions led by nodes 1/2/3 (load.py, librdkafka defaults, %d B "
                     "records), one client-id per round; %d s warm-up, %d s measured" % (
                         "/".join(str(r) for r in ACC_OFFERED), RECORD_BYTES, WARM_S, WINDOW_S))
        rows = []
        for name, client_id, what in rounds:
            rows.append(self.accuracy_round(name, client_id, what))
            if name == "kquota":
                # What each broker published of its usage while the round ran: shown, not asserted,
                # it says why a split is what it is.
                writers = self.usage_writers("acc-kquota")
                rows[-1]["usage_records"] = writers
                for inst, w in sorted(writers.items()):
                    log("   %s's records in %s over the round: %s" % (inst, USAGE_TOPIC, w))
        table = self.accuracy_table(rows)
        self.data["accuracy"] = {"limit": ACC_LIMIT, "offered": ACC_OFFERED, "warmup_s": WARM_S, "window_s": WINDOW_S,
                                 "rounds": rows, "table": table}
        lines += table
        problems = []
        kq = rows[0]
        # Judged over whole throttle cycles (a throttled producer moves in bursts a quota window apart:
        # a fixed span's average depends on where they fall), Kafka's rounds the same way beside it.
        dev = kq["judged_total"] / ACC_LIMIT - 1
        lines.append("kquota's total over whole throttle cycles %.0f bytes/s: %+.1f%% of %d (tolerance %.0f%%);"
                     " over the %d s span %.0f (%+.1f%%)" % (
                         kq["judged_total"], 100 * dev, ACC_LIMIT, 100 * ACC_TOL, WINDOW_S, kq["total"],
                         100 * (kq["total"] / ACC_LIMIT - 1)))
        for r in rows[1:]:
            lines.append("%s over whole throttle cycles: %.0f bytes/s (%+.1f%% of 3 MB/s)" % (
                r["round"], r["judged_total"], 100 * (r["judged_total"] / ACC_LIMIT - 1)))
        if abs(dev) > ACC_TOL:
            problems.append("kquota's cluster-wide total over whole throttle cycles %.0f bytes/s is %+.1f%% off %d,"
                            " more than %.0f%%" % (kq["judged_total"], 100 * dev, ACC_LIMIT, 100 * ACC_TOL))
        for r in rows:
            for i, (acked, errs) in enumerate(zip(r["achieved"], r["errors"])):
                if not acked > 0:
                    problems.append("round %s: the producer to node %d acknowledged nothing in the window" % (
                        r["round"], i + 1))
                if errs[0]:
                    problems.append("round %s: the producer to node %d had %d delivery errors (first: %s)" % (
                        r["round"], i + 1, errs[0], errs[1]))
        if problems:
            raise CaseFailure("\n".join(lines + problems + [self.broker_context()]))
        return "\n".join(lines)

    def accuracy_round(self, name, client_id, what):
        procs, progress = [], []
        for i, rate in enumerate(ACC_OFFERED):
            path = os.path.join(self.work, "load-%s-%d.jsonl" % (name, i))
            if os.path.exists(path):
                os.remove(path)
            progress.append(path)
            procs.append(spawn([sys.executable, os.path.join(HERE, "load.py"), self.cluster.bootstrap, TOPIC, str(i),
                                str(rate), str(WARM_S + WINDOW_S + 4), client_id, path, str(RECORD_BYTES)],
                               os.path.join(self.work, "load-%s-%d.log" % (name, i))))
        t_start = time.time()
        t0, t1 = t_start + WARM_S, t_start + WARM_S + WINDOW_S
        parts = {n: [] for n in NODES}
        texts = {}
        beans = None
        while time.time() < t1 + 1:
            now = time.time()
            if beans is None and now >= t0 + WINDOW_S / 2:
                beans = self.every_bean_explains(client_id)
            if t0 <= now <= t1:
                for n in NODES:
                    try:
                        text = self.explain(n, client_id)
                        texts[n] = text
                        parts[n].append(limit_of(text))
                    except CaseFailure:
                        pass
            time.sleep(2)
        reap(procs, 60)

        def at(lines, t, field="acked"):  # the cumulative `field` at wall time t, interpolated
            if not lines or t < lines[0]["t"] or t > lines[-1]["t"]:
                raise CaseFailure("round %s: a producer's progress does not cover %.1f (it covers %s)" % (
                    name, t, "%.1f..%.1f" % (lines[0]["t"], lines[-1]["t"]) if lines else "nothing"))
            for a, b in zip(lines, lines[1:]):
                if a["t"] <= t <= b["t"]:
                    f = 0.0 if b["t"] == a["t"] else (t - a["t"]) / (b["t"] - a["t"])
                    return a[field] + f * (b[field] - a[field])
            return lines[-1][field]

        achieved, skipped, errors, throttle, series = [], [], [], [], []
        for i, path in enumerate(progress):
            lines = []
            try:
                for raw in open(path):
                    try:
                        lines.append(json.loads(raw))
                    except ValueError:
                        pass
            except OSError:
                pass
            if not lines:
                raise CaseFailure("round %s: the producer to node %d wrote no progress; its log:\n%s" % (
                    name, i + 1, tail(os.path.join(self.work, "load-%s-%d.log" % (name, i)))))
            series.append(lines)
            achieved.append((at(lines, t1) - at(lines, t0)) / WINDOW_S)
            skipped.append((at(lines, t1, "skipped") - at(lines, t0, "skipped")) / WINDOW_S)
            errors.append((lines[-1]["errors"], lines[-1]["error"]))
            throttle.append(lines[-1].get("throttle_ms"))
        med = {n: (statistics.median([x for x in parts[n] if x is not None]) if any(x is not None for x in parts[n])
                   else None) for n in NODES}
        # A producer Kafka throttles hard goes in bursts, one per ~12 s cycle (its quota window's
        # worth, then muted); a span of two and a half cycles then depends on where they fall. What it
        # got over the whole cycles inside the span is shown beside the span's average (the asserted
        # figure), to tell that from the split.
        cycles = []
        for i, lines in enumerate(series):
            quota = med.get(i + 1)
            onsets = burst_onsets(lambda t: at(lines, t), t0, t1, quota) if quota else []
            if len(onsets) >= 2:
                a, b = onsets[0], onsets[-1]
                cycles.append({"node": i + 1, "cycles": len(onsets) - 1, "from_s": round(a - t0, 1),
                               "to_s": round(b - t0, 1), "rate": (at(lines, b) - at(lines, a)) / (b - a)})
        # The judged rate of each producer: over its whole throttle cycles where Kafka throttled it into
        # bursts, else over the span (an unthrottled producer's rate is steady).
        judged = list(achieved)
        for c in cycles:
            judged[c["node"] - 1] = c["rate"]
        row = {"round": name, "client_id": client_id, "limit": what, "achieved": achieved, "total": sum(achieved),
               "judged": judged, "judged_total": sum(judged), "whole_cycles": cycles,
               "skipped": skipped, "errors": errors, "max_throttle_ms": throttle, "part_median": med,
               "parts": parts, "explain_last": {n: first_line(texts[n]) for n in texts}, "beans": beans}
        log("   round %-9s %s: %s = %.0f bytes/s; limits at the brokers (median of explain over the window) %s" % (
            name, what, "/".join("%.0f" % a for a in achieved), sum(achieved),
            "/".join("-" if med[n] is None else "%.0f" % med[n] for n in NODES)))
        for c in cycles:
            log("     node %d's producer went in bursts: over its %d whole throttle cycles in the window (%.1f-%.1f s) "
                "%.0f bytes/s, over the window %.0f" % (c["node"], c["cycles"], c["from_s"], c["to_s"], c["rate"],
                                                        achieved[c["node"] - 1]))
        for line in beans or []:
            log("     mid-window: " + line)
        return row

    def every_bean_explains(self, client_id):
        """What every io.kquota bean of every node explains for client_id (a node that is both
        controller and broker may hold more than one callback)."""
        out = []
        for n in NODES:
            try:
                names = self.jmx.request("query", self.cluster.jmx[n - 1], "io.kquota:*").get("names") or []
                for bean in names:
                    r = self.jmx.request("invoke", self.cluster.jmx[n - 1], bean, "explain", USER, client_id)
                    out.append("node %d %s: %s" % (n, bean.split(",", 1)[-1], first_line(r.get("result") or str(r))))
            except CaseFailure as e:
                out.append("node %d: %s" % (n, e))
        return out

    def usage_writers(self, client_id, records=600):
        """The last `records` of each _kquota_usage partition, by instance: how many, how often a
        record's seq did not follow the instance's previous one (kquota-cluster's receivers then stop
        using that instance's usage until it sends its whole usage again), and the rates and limits it
        published for {client-id=client_id}'s bucket."""
        from confluent_kafka import Consumer, TopicPartition
        out = {}
        c = Consumer({"bootstrap.servers": self.cluster.bootstrap, "group.id": "kquota-cluster-suite",
                      "enable.auto.commit": False, "log_level": 0})
        try:
            ends, assign = {}, []
            for p in self.cluster.partitions(USAGE_TOPIC):
                lo, hi = c.get_watermark_offsets(TopicPartition(USAGE_TOPIC, p), timeout=10, cached=False)
                if hi > lo:
                    ends[p] = hi
                    assign.append(TopicPartition(USAGE_TOPIC, p, max(lo, hi - records)))
            c.assign(assign)
            seqs, rates = {}, {}
            done = set()
            deadline = time.monotonic() + 20
            while len(done) < len(ends) and time.monotonic() < deadline:
                m = c.poll(0.5)
                if m is None or m.error():
                    continue
                if m.offset() + 1 >= ends[m.partition()]:
                    done.add(m.partition())
                try:
                    v = json.loads(m.value() or b"null")
                except ValueError:
                    continue
                if not isinstance(v, dict):
                    continue
                inst = str(v.get("instance"))
                seqs.setdefault(inst, []).append(v.get("seq"))
                for b in v.get("buckets") or []:
                    if b.get("owner") == {"client-id": client_id}:
                        rates.setdefault(inst, []).append((b.get("rate"), b.get("limit")))
            for inst, ss in seqs.items():
                breaks = sum(1 for a, b in zip(ss, ss[1:]) if not (isinstance(a, int) and b == a + 1))
                rl = rates.get(inst, [])
                out[inst] = {"records": len(ss), "seq_breaks": breaks,
                             "rate_median": statistics.median([r for r, _ in rl if r is not None]) if rl else None,
                             "rates_last": [round(r) for r, _ in rl[-6:] if r is not None],
                             "limits_last": [round(x) for _, x in rl[-6:] if x is not None]}
        except Exception as e:  # a diagnosis only
            out["error"] = repr(e)
        finally:
            c.close()
        return out

    def accuracy_table(self, rows):
        out = ["%-10s %-62s %12s %12s %12s %12s %8s" % ("round", "limit", "node 1", "node 2", "node 3", "total",
                                                         "vs 3 MB/s")]
        out.append("%-10s %-62s %12d %12d %12d %12d" % ("offered", "", ACC_OFFERED[0], ACC_OFFERED[1], ACC_OFFERED[2],
                                                        sum(ACC_OFFERED)))
        for r in rows:
            out.append("%-10s %-62s %12.0f %12.0f %12.0f %12.0f %+7.1f%%" % (
                r["round"], r["limit"][:62], r["achieved"][0], r["achieved"][1], r["achieved"][2], r["total"],
                100 * (r["total"] / ACC_LIMIT - 1)))
            out.append("%-10s %-62s %12s %12s %12s" % (
                "", "  limit each broker served (median over the window)",
                *("-" if r["part_median"][n] is None else "%.0f" % r["part_median"][n] for n in NODES)))
            cyc = {c["node"]: c["rate"] for c in r.get("whole_cycles") or []}
            if cyc:
                rates = [cyc.get(n, r["achieved"][n - 1]) for n in NODES]
                out.append("%-10s %-62s %12s %12s %12s %12.0f %+7.1f%%" % (
                    "", "  over whole throttle cycles where bursty (judged)",
                    *("%.0f" % cyc[n] if n in cyc else "=" for n in NODES), sum(rates),
                    100 * (sum(rates) / ACC_LIMIT - 1)))
        return out

    # ------------------------------------------------------------ 4

    def leaders(self):
        out = {}
        admin = self.cluster.admin()
        for topic in (CONFIG_TOPIC, MEMBERS_TOPIC, USAGE_TOPIC):
            parts = self.cluster.partitions(topic, admin)
            out[topic] = {p: parts[p][0] for p in parts}
        return out

    def active_controller(self):
        """The node whose KRaft controller is active (Kafka's ActiveControllerCount 1), or None."""
        for n in NODES:
            try:
                r = self.jmx.request("get", self.cluster.jmx[n - 1],
                                     "kafka.controller:type=KafkaController,name=ActiveControllerCount", "Value")
                if r.get("ok") and r["attrs"].get("Value") == 1:
                    return n
            except CaseFailure:
                pass
        return None

    def fault_kill(self):
        self.kquotad.start()
        self.wait_ready(timeout=60)
        leaders = self.leaders()
        config = leaders[CONFIG_TOPIC].get(0)
        members = leaders[MEMBERS_TOPIC].get(0)
        if config is None or members is None:
            raise CaseFailure("kquota's topics have no leader: %s" % leaders)
        usage = set(leaders[USAGE_TOPIC].values())
        controller = self.active_controller()
        # Whatever the victim leads is unavailable until Kafka fences it, and killing the active
        # controller delays the fencing itself (a new quorum leader first, then its own session
        # timeout): the heartbeats would stall past kquota's expiry for Kafka's reasons. So the
        # victim is, first of all, not the active controller, then not the members' leader, then
        # (the configuration log's leader is 4b's) not _kquota_config's.
        victim = sorted(NODES, key=lambda n: (n == controller, n == members, n == config, n in usage, -n))[0]
        compromise = [what for what, n in (("the active controller", controller), ("%s's leader" % MEMBERS_TOPIC,
                                                                                    members),
                                           ("%s's leader" % CONFIG_TOPIC, config)) if n == victim]
        others = [n for n in NODES if n != victim]
        self.data.setdefault("faults", {})["4a"] = {"leaders": leaders, "controller": controller, "victim": victim}
        bound = EXPIRY_BOUND_S + DELIVERY_S + MARGIN_S
        isr_shrunk = {}
        stop = threading.Event()

        def watch_isr():
            admin = self.cluster.admin()
            while not stop.is_set():
                try:
                    parts = self.cluster.partitions(MEMBERS_TOPIC, admin)
                    if parts and victim not in parts[0][1] and "t" not in isr_shrunk:
                        isr_shrunk["t"] = time.monotonic()
                except Exception:
                    pass
                time.sleep(0.2)

        t_kill = self.cluster.kill9(victim)
        self.victim_4a = victim
        watcher = threading.Thread(target=watch_isr, daemon=True)
        watcher.start()
        seen = {}
        series = []
        try:
            while time.monotonic() - t_kill < bound + 15 and len(seen) < len(others):
                for n in others:
                    try:
                        v = self.attrs(n, "LiveBrokers")["LiveBrokers"]
                    except CaseFailure as e:
                        v = str(e)
                    t = time.monotonic() - t_kill
                    series.append((round(t, 2), n, v))
                    if v == 2 and n not in seen:
                        seen[n] = t
                time.sleep(0.1)
        finally:
            stop.set()
            watcher.join(5)
        isr = isr_shrunk.get("t")
        self.data["faults"]["4a"].update({"dropped_after_s": seen, "members_isr_shrunk_after_s":
                                          None if isr is None else isr - t_kill})
        lines = ["leaders: %s=%s, %s=%s, %s=%s, active controller node %s; killed node %d (kill -9), %s" % (
                     CONFIG_TOPIC, config, MEMBERS_TOPIC, members, USAGE_TOPIC, sorted(usage), controller, victim,
                     "neither of them" if not compromise else "though it is " + " and ".join(compromise) +
                     " (every node was one of them)"),
                 "Kafka took node %d out of %s's ISR %s" % (victim, MEMBERS_TOPIC, "after %.1f s" % (isr - t_kill)
                                                              if isr else "not within the watch")]
        for n in others:
            lines.append("node %d: LiveBrokers 2 after %s (bound %.1f s = %.1f expiry + %.1f delivery + %.1f margin)" % (
                n, "%.2f s" % seen[n] if n in seen else "NEVER within %.0f s" % (bound + 15), bound, EXPIRY_BOUND_S,
                DELIVERY_S, MARGIN_S))
        late = [n for n in others if seen.get(n, 1e9) > bound]
        if late:
            raise CaseFailure("\n".join(lines + ["not within %.1f s at node(s) %s; LiveBrokers over time (s, node, "
                                                 "value): %s" % (bound, late, series[:80]),
                                                 self.broker_context(others)]))
        return "\n".join(lines)

    def rejoin(self, n, storm=None):
        if self.cluster.alive(n):
            raise CaseFailure("node %d is still running" % n)
        secs = self.cluster.start_node(n)
        when, last = self.wait_ready()
        lines = ["node %d started again (cluster.sh start-node: %.1f s until Kafka says started); every broker ready "
                 "with LiveBrokers 3 after %s" % (n, secs, ", ".join("node %d %.1f s" % (k, v) for k, v in when.items()))]
        if storm:
            missing = self.wait_storm_served(storm, (n,))
            lines.append("node %d serves all %d alterations acknowledged in the storm%s" % (
                n, len(storm), "" if not missing else (": MISSING %s" % missing)))
            if missing:
                raise CaseFailure("\n".join(lines + [self.broker_context((n,))]))
        return "\n".join(lines)

    def wait_storm_served(self, acked, nodes, timeout=VISIBLE_TIMEOUT_S):
        """Until every node serves every acknowledged (client-id, value); returns what is still missing
        after `timeout` ([] if nothing)."""
        pending = {(n, c): v for n in nodes for c, v in acked}
        deadline = time.monotonic() + timeout
        while pending and time.monotonic() < deadline:
            for (n, c), v in list(pending.items()):
                try:
                    if limit_of(self.explain(n, c)) == v:
                        del pending[(n, c)]
                except CaseFailure:
                    pass
            if pending:
                time.sleep(0.5)
        out = []
        for (n, c), v in sorted(pending.items()):
            try:
                got = first_line(self.explain(n, c))
            except CaseFailure as e:
                got = str(e)
            out.append("node %d {client-id=%s} want %d, explain: %s" % (n, c, v, got))
        return out

    def ensure_held(self):
        """{client-id=bps-held}'s bps limit in the log (case 2 sets it; again here, the same value, for
        a case run alone)."""
        self.kquotad.start()
        self.log_alter([(cid("bps-held"), {BPS: HELD_BPS})])

    def fault_storm(self):
        self.ensure_held()
        self.wait_shown("bps-held", HELD_BPS, timeout=60)
        leaders = self.leaders()
        leader = leaders[CONFIG_TOPIC].get(0)
        if leader is None:
            raise CaseFailure("%s has no leader: %s" % (CONFIG_TOPIC, leaders))
        survivors = [n for n in NODES if n != leader]
        results = []  # (t, client-id, value, code, message)
        stop = threading.Event()
        samples = []  # (t, node, ok, detail)
        t_ref = time.monotonic()

        def storm(client):
            k = 0
            while not stop.is_set():
                c, v = "storm-%d-%03d" % (client, k), 100000 + 1000 * client + k
                t = time.monotonic() - t_ref
                try:
                    code, msg = self.kquotad.alter([(cid(c), {KEY: v})])[ekey(cid(c))]
                except (OSError, WireError) as e:
                    code, msg = None, "no answer: %s" % e
                results.append((round(t, 2), round(time.monotonic() - t_ref, 2), c, v, code, msg))
                k += 1
                time.sleep(0.1)

        def watch():
            while not stop.is_set():
                for n in survivors:
                    t = time.monotonic() - t_ref
                    try:
                        text = self.explain(n, "bps-held")
                        ok = shows(text, HELD_BPS) and limit_of(text) is not None
                        samples.append((round(t, 2), n, ok, first_line(text)))
                    except CaseFailure as e:
                        samples.append((round(t, 2), n, False, str(e)[:300]))
                time.sleep(0.3)

        threads = [threading.Thread(target=storm, args=(i,), daemon=True) for i in range(STORM_CLIENTS)]
        threads.append(threading.Thread(target=watch, daemon=True))
        for t in threads:
            t.start()
        try:
            deadline = time.monotonic() + 60
            while sum(1 for r in results if r[4] == 0) < 5:
                if time.monotonic() > deadline:
                    raise CaseFailure("the storm got fewer than 5 alterations acknowledged in 60 s: %s" % results[-5:])
                time.sleep(0.1)
            t_kill = self.cluster.kill9(leader) - t_ref
            self.victim_4b = leader
            # The storm goes on until 15 s after the kill and 5 alterations sent after it acknowledged (at
            # most 45 s).
            while True:
                now = time.monotonic() - t_ref
                after = sum(1 for r in results if r[4] == 0 and r[0] > t_kill)
                if (now > t_kill + 15 and after >= 5) or now > t_kill + 45:
                    break
                time.sleep(0.2)
        finally:
            stop.set()
            for t in threads:
                t.join(ALTER_TIMEOUT_MS / 1000 + 30)
        acked = [(r[2], r[3]) for r in results if r[4] == 0]
        self.storm_acked = acked
        failed = [r for r in results if r[4] != 0]
        first_after = min((r[1] for r in results if r[4] == 0 and r[0] > t_kill), default=None)
        new_leader = self.leaders()[CONFIG_TOPIC].get(0)
        missing = self.wait_storm_served(acked, survivors)
        bad_samples = [s for s in samples if not s[2]]
        self.data.setdefault("faults", {})["4b"] = {
            "killed": leader, "new_leader": new_leader, "kill_at_s": round(t_kill, 2), "alterations": results,
            "acknowledged": len(acked), "not_acknowledged": len(failed), "missing": missing,
            "held_samples": len(samples), "held_missed": bad_samples}
        lines = ["killed node %d (kill -9), %s's leader, %.1f s into a storm of alterations through kquotad (%d "
                 "clients, one {client-id=storm-C-NNN} per alteration, each client's next 0.1 s after its answer); "
                 "new leader: node %s" % (leader, CONFIG_TOPIC, t_kill, STORM_CLIENTS, new_leader),
                 "%d alterations acknowledged, %d not (%s); the first acknowledged after the kill answered %s" % (
                     len(acked), len(failed), "; ".join(sorted({"%s: %s" % (r[4], (r[5] or "")[:120]) for r in failed}))
                     or "none", "%.1f s after it" % (first_after - t_kill) if first_after else "never"),
                 "survivors %s serve every acknowledged one: %s" % (survivors, "yes" if not missing else
                                                                    "NO, %d missing" % len(missing)),
                 "{client-id=bps-held} %s=%d shown by the survivors' explain in %d of %d samples over the storm" % (
                     BPS, HELD_BPS, len(samples) - len(bad_samples), len(samples))]
        problems = []
        if missing:
            problems.append("acknowledged alterations not served: %s" % missing[:10])
        if bad_samples:
            problems.append("bps-held not shown at (s, node, detail): %s" % bad_samples[:5])
        if not samples:
            problems.append("no sample of bps-held was taken")
        if problems:
            raise CaseFailure("\n".join(lines + problems + [self.broker_context(survivors)]))
        return "\n".join(lines)

    def fault_term(self):
        leaders = self.leaders()
        n = leaders[CONFIG_TOPIC].get(0) or 2
        mark = self.cluster.log_size(n)
        pid = self.cluster.pid(n)
        secs = self.cluster.term(n, EXIT_BOUND_S)
        lines = []
        if secs is None:
            dump = os.path.join(self.work, "node-%d-threads.txt" % n)
            p = subprocess.run(["jstack", str(pid)], capture_output=True, text=True, timeout=60)
            with open(dump, "w") as f:
                f.write(p.stdout + p.stderr)
            names = re.findall(r'^"([^"]*)"[^\n]*', p.stdout, re.M)
            kq = [x for x in names if "kquota" in x.lower() or "rdk" in x.lower()]
            nondaemon = re.findall(r'^"([^"]*)"(?![^\n]*daemon)[^\n]*', p.stdout, re.M)
            self.cluster.kill9(n)
            raise CaseFailure("node %d (pid %d, %s's leader) still ran %d s after SIGTERM; killed. Threads (jstack, %s): "
                              "kquota's or librdkafka's %s; non-daemon %s\n%s" % (
                                  n, pid, CONFIG_TOPIC, EXIT_BOUND_S, dump, kq, nondaemon[:30],
                                  self.broker_context((n,), {n: mark})))
        lines.append("node %d (%s's leader) exited %.1f s after SIGTERM (bound %d s)" % (n, CONFIG_TOPIC, secs,
                                                                                       EXIT_BOUND_S))
        kq = self.cluster.kquota_lines(n, mark, 8, ("WARN", "ERROR"))
        lines.append("the plug-in's WARN/ERROR lines in its log from the SIGTERM on: %s" % (
            "none" if not kq else "\n     " + "\n     ".join(kq)))
        self.data.setdefault("faults", {})["4d"] = {"node": n, "exit_s": secs}
        s = self.cluster.start_node(n)
        when, _ = self.wait_ready()
        lines.append("started again (%.1f s), every broker ready with LiveBrokers 3 after %.1f s" % (
            s, max(when.values())))
        return "\n".join(lines)

    # ------------------------------------------------------------ 5

    def unreachable(self):
        n = 3
        lines, problems = [], []
        self.ensure_held()
        self.kafka_alter([(cid("unreach-kafka"), {KEY: 700000})])
        self.wait_served("unreach-kafka", 700000)
        port = closed_port()
        secs = self.cluster.term(n, EXIT_BOUND_S)
        if secs is None:
            self.cluster.kill9(n)
            problems.append("node %d still ran %d s after SIGTERM (killed)" % (n, EXIT_BOUND_S))
        good = self.cluster.bootstrap
        self.cluster.set_bootstrap(n, "127.0.0.1:%d" % port)
        try:
            # The node is stopped here; whatever happens below, it ends running with the right bootstrap.
            mark = self.cluster.log_size(n)
            s = self.cluster.start_node(n)
            lines.append("node %d restarted with kquota.cluster.bootstrap.servers=127.0.0.1:%d (closed): Kafka says "
                         "started after %.1f s" % (n, port, s))
            w, warn = self.wait_until("node %d's log saying '%s'" % (n, UNREACHABLE_WARN), lambda: (
                any(UNREACHABLE_WARN in l and " WARN " in l for l in self.cluster.log_since(n, mark).splitlines()),
                "its kquota lines: %s" % self.cluster.kquota_lines(n, mark, 5)), 60)
            line = [l for l in self.cluster.log_since(n, mark).splitlines() if UNREACHABLE_WARN in l][0]
            lines.append("its log: %s" % line[:300])
            states = []
            for _ in range(3):
                st = self.attrs(n, "ClusterState", "Ready", "LiveBrokers")
                states.append(st)
                time.sleep(1)
            lines.append("its JMX over 3 s: %s" % states)
            # "joining" with the attempt and the last error (docs/kafka.md).
            if any(not str(st["ClusterState"]).startswith("joining") or st["Ready"] is not False for st in states):
                problems.append("node %d: ClusterState/Ready %s, not 'joining'/false" % (n, states))
            text = self.explain(n, "unreach-kafka")
            if limit_of(text) != 700000:
                problems.append("node %d: Kafka's {client-id=unreach-kafka} 700000 not served: %s" % (n, first_line(text)))
            else:
                lines.append("Kafka's quota set before the restart served: %s" % first_line(text))
            self.kafka_alter([(cid("unreach-kafka-2"), {KEY: 600000})])
            try:
                s2, _ = self.wait_served("unreach-kafka-2", 600000, nodes=(n,))
                lines.append("Kafka's quota set while it cannot reach the log served after %.1f s" % s2)
            except CaseFailure as e:
                problems.append(str(e))
            others = [m for m in NODES if m != n]
            counted = {m: self.attrs(m, "LiveBrokers")["LiveBrokers"] for m in others}
            lines.append("the others' LiveBrokers meanwhile: %s" % counted)
            secs = self.cluster.term(n, EXIT_BOUND_S)
            lines.append("SIGTERM while joining: exited after %s" % ("%.1f s" % secs if secs is not None else
                                                                     "MORE than %d s (killed)" % EXIT_BOUND_S))
            if secs is None:
                self.cluster.kill9(n)
                problems.append("node %d, joining, still ran %d s after SIGTERM (its kquota thread stuck?)" % (
                    n, EXIT_BOUND_S))
        finally:
            self.cluster.set_bootstrap(n, good)
            if not STOPPING.is_set():
                if self.cluster.alive(n) and self.cluster.term(n, EXIT_BOUND_S) is None:
                    self.cluster.kill9(n)
                self.cluster.start_node(n)
        when, _ = self.wait_ready()
        lines.append("restarted with the right bootstrap: every broker ready with LiveBrokers 3 after %.1f s" % (
            max(when.values())))
        self.wait_shown("bps-held", HELD_BPS, nodes=(n,))
        lines.append("and node %d shows the log's bps-held again" % n)
        if problems:
            raise CaseFailure("\n".join(lines + problems + [self.broker_context((n,))]))
        return "\n".join(lines)

    # ------------------------------------------------------------ 6. usage traffic

    def traffic(self):
        """Usage traffic per broker against the bps buckets the brokers serve, read from kquota's usage
        topic (instances.py's UsageReader, which also works out what whole records, version 1, would
        have taken), as docs/cluster.md measures it for proxies: {client-id=<default>}
        producer_byte_rate:bps gives every client-id its bucket; buckets.py sends each bucket one 900-byte
        Produce (acks=0) every 2 s straight to the broker leading its partition, 1 % of the buckets
        switching to three times that each second, 2 % of them at two brokers."""
        anyone = (("client-id", None),)
        self.log_alter([(anyone, {BPS: TRAFFIC_LIMIT})])
        brokers = self.cluster.admin().list_topics(timeout=30).brokers
        addrs = {n: "%s:%d" % (brokers[n].host, brokers[n].port) for n in NODES}
        rows, problems = [], []
        try:
            self.wait_until("every broker serving {client-id=<default>} %s" % BPS,
                            lambda: (all(shows(self.explain(n, "traffic-probe"), TRAFFIC_LIMIT) for n in NODES), ""),
                            VISIBLE_TIMEOUT_S)
            for buckets in TRAFFIC_BUCKETS:
                reader = instances.UsageReader(self.cluster.bootstrap)
                reader.start()
                procs = []
                per = buckets // len(NODES)
                try:
                    for i, n in enumerate(NODES):
                        for first, step in ((i * per, 1), (((i + 1) % len(NODES)) * per, 50)):
                            name = "buckets-%d-%d-%d" % (buckets, n, first)
                            procs.append(spawn(
                                [sys.executable, os.path.join(REPO, "kquota-cluster", "tests", "instances", "buckets.py"),
                                 addrs[n], TOPIC, str(TRAFFIC_WARM_S + TRAFFIC_WINDOW_S + 3),
                                 "traffic-%d-" % buckets, str(first), str(per), "2.0", "900", str(n + 7 * first),
                                 str(step), str(i)],
                                os.path.join(self.work, "%s.log" % name)))
                    t_start = time.time()
                    time.sleep(TRAFFIC_WARM_S + TRAFFIC_WINDOW_S + 1)
                    t0, t1 = t_start + TRAFFIC_WARM_S, t_start + TRAFFIC_WARM_S + TRAFFIC_WINDOW_S
                finally:
                    reap(procs, 30)
                    reader.stop()
                m = reader.measure(t0, t1, ["broker-%d" % n for n in NODES])
                row = {"brokers": len(NODES), "buckets": buckets, **m}
                rows.append(row)
                log("   %d brokers x %d buckets: produced per broker %s (deltas) against %s (whole records), consumed"
                    " per broker %s against %s; %.0f records a second in all, %d whole statements, buckets seen %d"
                    % (len(NODES), buckets, instances.kbs(m["produced"]), instances.kbs(m["produced_v1"]),
                       instances.kbs(m["consumed"]), instances.kbs(m["consumed_v1"]), m["records_per_s"],
                       m["resets"], m["buckets_seen"]))
                if m["buckets_seen"] < buckets * 0.9:
                    problems.append("%d buckets: the brokers' usage records named %d" % (buckets, m["buckets_seen"]))
                if not m["produced"] * 3 < m["produced_v1"]:
                    problems.append("%d buckets: deltas %s a second per broker, not under a third of the whole records'"
                                    " %s" % (buckets, instances.kbs(m["produced"]), instances.kbs(m["produced_v1"])))
        finally:
            self.log_alter([(anyone, {BPS: None})])
        self.data["traffic"] = rows
        if problems:
            raise CaseFailure("; ".join(problems))
        return "\n".join("%d brokers x %d buckets: produced per broker %s (whole records: %s), consumed per broker %s"
                         " (%s)" % (r["brokers"], r["buckets"], instances.kbs(r["produced"]),
                                    instances.kbs(r["produced_v1"]), instances.kbs(r["consumed"]),
                                    instances.kbs(r["consumed_v1"])) for r in rows)

    # ------------------------------------------------------------ the run

    def restore(self):
        """After a failed fault case: every node running again, for the cases after it."""
        for n in NODES:
            if not self.cluster.alive(n) and not STOPPING.is_set():
                try:
                    self.cluster.start_node(n)
                except Exception as e:
                    log("   could not start node %d again: %s" % (n, e))

    def run(self):
        t0 = time.monotonic()
        only = re.compile(os.environ["KQUOTA_CLUSTER_CASES"]) if os.environ.get("KQUOTA_CLUSTER_CASES") else None

        def wanted(name):
            return only is None or only.search(name) is not None

        log("== kquota's cluster-wide limits inside Apache Kafka 4.3.1's brokers (%s)" % self.jar)
        stopped = None
        try:
            if self.case(CASES[0], self.setup):
                for name, fn in ((CASES[1], self.ready), (CASES[2], self.configuration), (CASES[3], self.accuracy),
                                 (CASES[10], self.traffic)):
                    if wanted(name):
                        self.case(name, fn)
                # A kill and the restart after it (4c) go together; 4c runs whenever its kill happened,
                # whatever else the kill's case found.
                self.victim_4a = self.victim_4b = None
                self.storm_acked = []
                if wanted(CASES[4]) or wanted(CASES[5]):
                    self.case(CASES[4], self.fault_kill)
                    if self.victim_4a is not None:
                        self.case(CASES[5], self.rejoin, self.victim_4a)
                    self.restore()
                if wanted(CASES[6]) or wanted(CASES[7]):
                    self.case(CASES[6], self.fault_storm)
                    if self.victim_4b is not None:
                        self.case(CASES[7], self.rejoin, self.victim_4b, self.storm_acked)
                    self.restore()
                if wanted(CASES[8]):
                    self.case(CASES[8], self.fault_term)
                    self.restore()
                if wanted(CASES[9]):
                    self.case(CASES[9], self.unreachable)
        except SystemExit as e:  # the suite's time bound, or run.sh told it to stop: summarised below
            stopped = e
        finally:
            self.kquotad.stop()
            if self.jmx:
                self.jmx.stop()
            rc = self.cluster.stop()
            log("   cluster stopped (cluster.sh stop: exit %s)" % rc)
        seen = {r["case"] for r in self.results}
        for name in CASES:
            if name not in seen:
                if only and not wanted(name):
                    why = "not run (KQUOTA_CLUSTER_CASES=%s)" % only.pattern
                elif stopped is not None:
                    why = "not run (the suite was stopped: KQUOTA_CLUSTER_SUITE_TIMEOUT=%d s, or a signal)" % (
                        SUITE_TIMEOUT_S)
                else:
                    why = "not run (an earlier step failed)"
                self.results.append({"case": name, "ok": False, "seconds": 0, "detail": why})
        self.results.sort(key=lambda r: CASES.index(r["case"]))
        passed = sum(r["ok"] for r in self.results)
        failed = len(self.results) - passed
        with open(os.path.join(self.work, "results.json"), "w") as f:
            json.dump({"seconds": round(time.monotonic() - t0, 1), "results": self.results, "data": self.data}, f,
                      indent=1, default=str)
        log("== summary (%.0f s)" % (time.monotonic() - t0))
        for r in self.results:
            log("   %s %s%s" % ("PASS" if r["ok"] else "FAIL", r["case"],
                               "" if r["ok"] else ": " + (r["detail"] or "").splitlines()[0][:300]))
        if "accuracy" in self.data:
            log("   accuracy:")
            for line in self.data["accuracy"]["table"]:
                log("     " + line)
        log("%d passed, %d failed" % (passed, failed))
        if stopped is not None:
            return 143
        return 0 if failed == 0 and passed == len(CASES) else 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", required=True)
    ap.add_argument("--jar", required=True)
    ap.add_argument("--kquotad", required=True)
    args = ap.parse_args()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGALRM):
        signal.signal(sig, on_signal)
    signal.alarm(SUITE_TIMEOUT_S)
    for path, what in ((args.jar, "plug-in jar"), (args.kquotad, "kquotad binary")):
        if not os.path.isfile(path):
            sys.exit("suite.py: no %s at %s" % (what, path))
    sys.exit(Suite(args).run())


if __name__ == "__main__":
    main()
