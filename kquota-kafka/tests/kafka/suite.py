"""kquota-kafka, the KIP-257 client quota callback plug-in, on real Apache Kafka 4.3.1 brokers with real
clients at their default settings: Kafka's Java producer and consumer (interop/kafka Workload.java) and
librdkafka (confluent-kafka, kquota-proxy/tests/kafka/stacks.py).

    python suite.py --work DIR --jar KQUOTA_KAFKA_JAR --kafka-sh interop/kafka/kafka.sh

run.sh builds the plug-in and calls this. ONE cluster serves every case (cluster.py): node 1 is a combined
controller+broker with Kafka's DEFAULT quota callback, node 2 a broker with
client.quota.callback.class=io.kquota.kafka.KquotaCallback. A topic led by node 1 is metered by Kafka's
callback, one led by node 2 (explicit replica assignment, replication factor 1) by kquota's; each broker
meters its own quotas, so the two sides of a comparison run AT THE SAME TIME, under the same load. All
quotas are set once, before the first measurement, with Kafka's own kafka-configs (ConfigCommand):

    clients kq-java             producer_byte_rate=consumer_byte_rate=1 MiB/s   (Java clients, case 1)
    clients <default>           producer_byte_rate=consumer_byte_rate=1 MiB/s   (librdkafka, whose default
                                                                                 client.id "rdkafka" has none)
    users bob                   producer_byte_rate=1 MiB/s                      (case 4)
    users alice                 producer_byte_rate=1.5 MiB/s                    (case 2)
    users alice, clients a      producer_byte_rate=0.5 MiB/s                    (case 2)
    clients drill               producer_byte_rate=1 MiB/s, then 0.5 MiB/s      (case 5)

The cases, their tolerances and why:

1. Differential, default policy (node 2 with kquota.sub.quota.policy unset = `kafka`). The Java producer,
   the Java consumer, librdkafka's producer and its consumer, each run twice at once: against a node-1
   topic and a node-2 topic. kquota's achieved rate must be within DIFF_TOL = 3 % of Kafka's. Both
   callbacks feed the same broker machinery (ClientQuotaManager's sensors, windows and throttle times),
   so only the callback's answers differ; what is left is where each side's bursts fall in the ~11 s
   throttle cycle. Rates are therefore judged as kquota-proxy's suite judges them (its measure()): after
   the first quota window (11 x 1 s), over SPAN_S = 60 s, each end averaged over one throttle cycle
   (12 s) - a 20 s span with ~11 s cycles aliases (a burst more or less moves it by 5 %), which is why
   the proxy suite measures consumers and librdkafka's producers over 60 s; here every producer is, at
   no cost in wall time (its phase lasts that long anyway), and every consumer over CONSUMER_SPAN_S =
   120 s: a throttled consumer gets its window's worth in 1 MiB fetches, so a cycle brings 9.9 or 10.9 MB
   (seen alike on both sides), and over 60 s (five cycles) which side happened to have more of the
   larger ones moved the two rates apart by 4.1 % and 4.7 % in one of six runs (0.0-2.6 % in the
   others). Averaged ends still cut bursts: three runs of 120 s had the kquota side's consumers -4.1,
   -1.7 and -1.5 % (Java) where the bytes each side received over the phase were equal, and the same
   run with Kafka's callback on both nodes +0.1 and +1.5 %. So consumers are compared over whole
   throttle cycles (cycles_rate: from the first burst's onset after the first window to the last
   one's within the span, every burst counted whole): the same three runs give -3.5 (a run where node
   2's bursts were cut short all along), -0.1 and -0.1 % (Java) and -0.4, +0.1, +0.5 % (librdkafka).
   The averaged-ends figure is printed beside it. Runs with one side 9-11 % under on both consumers
   came from the source topics' layout, not from either callback (fill() says why); both topics are
   now filled in batches of the same size. Both sides must be throttled, or the
   comparison proves nothing: the client saw a throttle time, its rate is at most 3 % above the quota
   and under half the unthrottled rate measured on the same broker when the topics were filled (tens
   of MB/s on loopback), and at least PRODUCER_FLOOR = 90 % of the quota for producers (Kafka ends
   bursty producers a few percent under it) or CONSUMER_FLOOR = 75 % for consumers (Kafka holds a
   consumer 10-20 % under consumer_byte_rate at its default window: a throttled fetch is capped at what
   the window holds, then throttled until that has left it).
2. KIP-55 (node 2 restarted with kquota.sub.quota.policy=kip55): alice's clients a and b produce at
   full speed at once to a node-2 topic: a held to its sub-quota 0.5 MiB/s and b to the remainder of
   alice's 1.5 MiB/s total, 1.0 MiB/s, each within KIP55_TOL = 5 % (absolute: there is no Kafka
   counterpart to compare with; 5 % is the proxy suite's convergence tolerance, a Java producer over
   60 s ending within a few percent under its quota). The same workload at the same time on node 1:
   Kafka's sub-quotas are independent buckets, so its b gets alice's whole 1.5 MiB/s; printed side by
   side, and Kafka's b must be at least KAFKA_B_FLOOR = 1.25 MiB/s (clearly above kquota's 1.0 + 5 %):
   the difference the policy makes is real.
3. Restart keeps quotas: node 2's quotas come back from the metadata log (the restart is node 2's
   alone: SIGTERM, a controlled shutdown, then the same ports and data). After the restart (before
   case 2's measurement), the plug-in's MBean answers Policy=kip55, the same Entities count as before,
   and explain() (the plug-in's own Explain CLI over JMX) answers, before and after, the limits set
   before the restart for kq-java, the default client-id, bob, drill and alice's client a, and for
   alice's client b 1.5 MiB/s before (Kafka's rules) and the 1.0 MiB/s remainder after (kip55's);
   case 2 and case 5 then enforce quotas that were all set before the restart.
4. Rolling change: node 1 without the plug-in and node 2 with it (policy `kafka`) enforce one
   kafka-configs quota (bob's user quota) at the same time, a Java producer per broker (over 120 s, in
   the consumers' phase): each throttled
   and within PRODUCER_FLOOR..+3 % of the quota, and node 2's rate within DIFF_TOL = 3 % of node 1's
   (case 1's tolerance, for the same reasons).
5. Failure drill on the live node 2 (policy kip55 by then): the Java producer `drill` throttled at
   1 MiB/s; the MBean's operation setFailing(true) over JMX (interop/kafka Jmx.java; the case checks
   that it is an operation, as interface.md says); for DRILL_S = 30 s the broker keeps acknowledging
   (no delivery error, acknowledgements in every 3 s of it) and keeps throttling: the rate over those
   30 s within DRILL_TOL = 5 % of the quota (as case 2: one client, absolute). 30 s holds only two or
   three ~11 s throttle cycles of a bursty client, too few for averaged ends, so the rate is judged
   over whole cycles (cycles_rate: from one burst's start to a later one's; measured 11.0-11.6 s long
   and within 0.4-3.2 % of the quota each), or as a plain average where the producer is throttled
   smoothly. Its answers are remembered by the callback, so the producer alone calls nothing in the
   engine; a producer new to the broker (client-id drill-fresh) comes in the middle of the drill, must
   be served (every record acknowledged), and its calls make the Failures attribute grow, which must
   happen. Then setFailing(false), kafka-configs lowers drill's quota to 0.5 MiB/s, and from one window
   (11 s) after the change the rate over DRILL_AFTER_S = 30 s (whole cycles) is within DRILL_TOL of
   0.5 MiB/s, and explain() answers the new limit.

A case that fails fails the run, and so does one that did not run (an earlier step failed): a partial
run never passes. Every number is printed: PASS/FAIL lines with each side's rate, span and throttle
times; results.json in the work directory has the per-second series.
"""
import argparse
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
PROXY_TESTS = os.path.join(REPO, "kquota-proxy", "tests", "kafka")
sys.path.insert(0, HERE)

import cluster as clusters  # noqa: E402


def _load_proxy_suite():
    """kquota-proxy's Kafka suite, for its client configurations and its rate measurement (measure():
    after the first window, each end of the span averaged over one throttle cycle), shared rather than
    copied."""
    spec = importlib.util.spec_from_file_location("kquota_proxy_kafka_suite", os.path.join(PROXY_TESTS, "suite.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


proxy = _load_proxy_suite()
STACKS = os.path.join(PROXY_TESTS, "stacks.py")
PYTHON = sys.executable

MIB = 1048576
RATE = MIB
KIP55_USER_RATE = 1572864
KIP55_SUB_RATE = 524288
DRILL_NEW_RATE = 524288
DIFF_TOL = 0.03
KIP55_TOL = 0.05
DRILL_TOL = 0.05
CEIL_TOL = 0.03
PRODUCER_FLOOR = 0.90
CONSUMER_FLOOR = 0.75
KAFKA_B_FLOOR = 1.25 * MIB
UNTHROTTLED_FRACTION = 0.5
FIRST_WINDOW_S = proxy.FIRST_WINDOW_S  # quota.window.num x quota.window.size.seconds = 11 s (defaults)
SMOOTH_S = proxy.SMOOTH_S  # 12 s, about one throttle cycle
SPAN_S = 60
# Consumers (and the producers sharing their phase, case 4's) over twice as long: see the top.
CONSUMER_SPAN_S = 120
# A consumer's cycle is ~11-12 s: 120 s holds nine or ten; fewer than this means it was not bursty.
MIN_CYCLES = 6
# Records per batch in the consumers' source topics (see fill()).
FILL_BATCH_RECORDS = 8
RECORD_BYTES = proxy.RECORD_BYTES
DRILL_S = 30
DRILL_AFTER_S = 30
USERS = clusters.USERS
MBEAN = "io.kquota:type=ClientQuotaCallback,instance=0"
JAVA_ID = "kq-java"
RD_ID = "rdkafka"  # librdkafka's default client.id: the default client-id quota applies to it
CLIENT_SLACK_S = 120
SUITE_TIMEOUT_S = int(os.environ.get("KQUOTA_KAFKA_SUITE_TIMEOUT", "1500"))

CASES = [
    "setup: cluster, callbacks, topics, fill, quotas",
    "1. differential, default policy: Java producer",
    "1. differential, default policy: Java consumer",
    "1. differential, default policy: librdkafka producer",
    "1. differential, default policy: librdkafka consumer",
    "4. rolling change: bob's user quota on node 1 (Kafka) and node 2 (kquota) at once",
    "3. restart keeps quotas: node 2 restarted with kquota.sub.quota.policy=kip55",
    "2. KIP-55: alice's client a held to its sub-quota, b to the remainder (node 1 side by side)",
    "5. failure drill: setFailing(true) on the live node 2, then a quota change",
]


class CaseFailure(Exception):
    pass


# The client processes running, ended if the suite is told to stop (SIGTERM: run.sh's time bound).
LIVE = set()
LIVE_LOCK = threading.Lock()


def on_sigterm(signum, frame):
    if signum == signal.SIGALRM:
        print("suite.py: the suite did not finish within KQUOTA_KAFKA_SUITE_TIMEOUT=%s s; stopping" % SUITE_TIMEOUT_S,
              file=sys.stderr, flush=True)
    with LIVE_LOCK:
        for p in list(LIVE):
            try:
                p.kill()
            except OSError:
                pass
    raise SystemExit(143)


def log(msg):
    print(msg, flush=True)


def tail(path, n=25):
    return proxy.tail(path, n)


def burst_onsets(samples, a_s, b_s, quota):
    """The times (s) in [a_s, b_s] at which a throttled client's burst begins: the end of a quiet
    stretch, the rate over the next 0.5 s above half the quota after 2 s under a quarter of it, with the
    burst itself (more than 2 s of quota) within 3 s (a few batches let through inside the quiet part,
    then throttled again, are no burst: one such blip cut a 0.5 MiB/s cycle 3 s short). A bursty
    client (a consumer; a Java producer once its throttling has fallen into the cycle of a window's
    worth in a few seconds, then one ~16 KB batch a second under ~1 s throttles until that has left the
    11 s window) has one per cycle, and this end of the quiet part is its sharpest edge: the cycles it
    cuts measured 11.0-11.6 s, each within 0.4-3.2 % of the quota, where cuts at a fixed high rate
    inside the bursts' 2-4 s ramps moved a cycle's rate by up to 7 %. A client throttled smoothly has
    none."""
    at = proxy.at
    out = []
    t = max(a_s, 2.0)
    while t + 0.5 <= b_s:
        ms = t * 1000
        if (at(samples, ms + 500) - at(samples, ms)) / 0.5 > 0.5 * quota and \
                (at(samples, ms) - at(samples, ms - 2000)) / 2 < 0.25 * quota and \
                at(samples, min(ms + 3000, samples[-1][0])) - at(samples, ms) > 2 * quota:
            out.append(t)
            t += 6.0  # a burst and its ramp last 2-4 s (a dip inside one is no new cycle); the next comes ~11 s later
        else:
            t += 0.1
    return out


def cycles_rate(samples, a_s, b_s, quota):
    """The rate over [a_s, b_s] judged over whole throttle cycles: from the first burst's onset in the
    span to the last one's (so every burst counted is counted whole, with its cycle's quiet part)
    where there are at least two; a client throttled smoothly has no bursts, and its plain average over
    the span is then exact enough."""
    onsets = burst_onsets(samples, a_s, b_s, quota)
    if len(onsets) >= 2:
        a, b = onsets[0], onsets[-1]
        how = "%d whole throttle cycles from %.1f s to %.1f s (bursts at %s s)" % (
            len(onsets) - 1, a, b, ", ".join("%.1f" % x for x in onsets))
    else:
        a, b = a_s, b_s
        how = "from %.1f s to %.1f s (%s)" % (a, b, "throttled smoothly: no bursts" if not onsets else
                                             "one burst, at %.1f s: no whole cycle; the plain average" % onsets[0])
    rate = (proxy.at(samples, b * 1000) - proxy.at(samples, a * 1000)) / (b - a)
    return {"rate": rate, "from_s": a, "to_s": b, "onsets": onsets, "how": how}


def fmt_rate(r):
    return "%.0f B/s (%.3f MiB/s)" % (r, r / MIB)


class Suite:
    def __init__(self, args):
        self.work = os.path.abspath(args.work)
        self.jar = os.path.abspath(args.jar)
        self.kafka_sh = args.kafka_sh
        self.results = []
        self.seq = 0
        self.lock = threading.Lock()
        self.rates = {}
        os.makedirs(os.path.join(self.work, "clients"), exist_ok=True)
        cp = subprocess.run([self.kafka_sh, "classpath"], capture_output=True, text=True, timeout=600)
        if cp.returncode != 0 or not cp.stdout.strip():
            raise SystemExit("kafka.sh classpath failed:\n%s" % cp.stderr)
        self.cluster = clusters.Cluster(os.path.join(self.work, "cluster"), cp.stdout.strip().splitlines()[-1], self.jar)

    # ------------------------------------------------------------ reporting

    def case(self, name, fn, *args):
        assert name in CASES, name
        t0 = time.monotonic()
        try:
            detail, ok = fn(*args), True
        except CaseFailure as e:
            detail, ok = str(e), False
        except AssertionError as e:
            detail, ok = "assertion failed: %s" % e, False
        except Exception as e:  # a bug of the suite's, or a tool that failed: a failure with its traceback
            detail, ok = "%s: %s\n%s" % (type(e).__name__, e, traceback.format_exc()), False
        dt = time.monotonic() - t0
        self.results.append({"case": name, "ok": ok, "seconds": round(dt, 1), "detail": detail})
        log("%s %s (%.1f s)%s" % ("PASS" if ok else "FAIL", name, dt,
                                  "" if not detail else ":\n      " + detail.replace("\n", "\n      ")))
        return ok

    # ------------------------------------------------------------ tools

    def tool(self, args, timeout=120):
        """kafka.sh java CLASS ARGS...: stdout, or CaseFailure with the tool's output."""
        try:
            p = subprocess.run([self.kafka_sh, "java"] + args, capture_output=True, text=True, timeout=timeout,
                               stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise CaseFailure("%s did not finish within %d s" % (" ".join(args[:8]), timeout))
        if p.returncode != 0:
            raise CaseFailure("%s failed (exit %d):\n%s%s" % (" ".join(args[:8]), p.returncode, p.stdout[-2000:],
                                                             p.stderr[-3000:]))
        return p.stdout

    def configs(self, *args):
        """Kafka's kafka-configs (ConfigCommand) against the cluster."""
        return self.tool(["kafka.admin.ConfigCommand", "--bootstrap-server", self.cluster.bootstrap()] + list(args))

    def jmx(self, node, *args):
        out = self.tool(["kquota.interop.Jmx", self.cluster.jmx(node)] + list(args), timeout=60)
        return json.loads(out.strip().splitlines()[-1])

    def mbean(self, *attrs):
        return self.jmx(2, "get", MBEAN, *attrs)["attrs"]

    def explain(self, user, client_id):
        """The plug-in's own CLI (in its jar) against node 2's JMX: explain(user, clientId)."""
        cmd = ["java", "-Xmx64m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-cp", self.jar,
               "io.kquota.kafka.Explain", "--jmx", self.cluster.jmx(2), "--user", user, "--client-id", client_id]
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise CaseFailure("Explain --user %s --client-id %s did not finish within 60 s" % (user, client_id))
        if p.returncode != 0 or not p.stdout.strip():
            raise CaseFailure("Explain --user %s --client-id %s failed (exit %d):\n%s%s" % (
                user, client_id, p.returncode, p.stdout[-2000:], p.stderr[-2000:]))
        return p.stdout

    # ------------------------------------------------------------ clients

    def conf(self, stack, proto="PLAINTEXT", client_id=None, user=None):
        return proxy.client_conf(stack, proto, self.cluster.bootstrap(proto), client_id=client_id, user=user,
                                 password=USERS.get(user))

    def run_client(self, label, stack, mode, conf, *args, timeout):
        with self.lock:
            self.seq += 1
            base = os.path.join(self.work, "clients", "%03d-%s-%s" % (self.seq, re.sub(r"[^\w.-]", "_", label), stack))
        if stack == "java":
            props = base + ".properties"
            with open(props, "w") as f:
                for k, v in conf.items():
                    f.write("%s=%s\n" % (k, v.replace("\\", "\\\\")))
            cmd = [self.kafka_sh, "java", "kquota.interop.Workload", mode, props] + [str(a) for a in args]
        else:
            cmd = [PYTHON, STACKS, stack, mode, json.dumps(conf)] + [str(a) for a in args]
        with open(base + ".out", "w") as out, open(base + ".err", "w") as err:
            proc = subprocess.Popen(cmd, stdout=out, stderr=err, stdin=subprocess.DEVNULL)
            with LIVE_LOCK:
                LIVE.add(proc)
            try:
                rc = proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                raise CaseFailure("%s %s (%s) did not finish in %d s (logs %s.*):\n%s" % (
                    stack, mode, label, timeout, base, tail(base + ".err")))
            finally:
                with LIVE_LOCK:
                    LIVE.discard(proc)
        lines = [line for line in open(base + ".out", errors="replace") if line.startswith("{")]
        if rc != 0 or not lines:
            raise CaseFailure("%s %s (%s) exited with %d (logs %s.*):\n%s" % (stack, mode, label, rc, base,
                                                                             tail(base + ".err", 15)))
        result = json.loads(lines[-1])
        if not result.get("ok"):
            raise CaseFailure("%s %s (%s): %s" % (stack, mode, label, result))
        return result

    def run_seconds(self, span):
        """How long a rate client measured over `span` runs after its first byte: the first window, the
        span, the smoothing of its end, and 2 s to spare."""
        return FIRST_WINDOW_S + span + SMOOTH_S + 2

    def rate_job(self, job):
        """Runs one rate client (a dict: label, stack, mode, conf, topic) and measures it; an error is
        kept in the job, for its case to report."""
        span = job.get("span", SPAN_S)
        seconds = self.run_seconds(span)
        try:
            args = [job["topic"], seconds] + ([RECORD_BYTES] if job["mode"] == "produce-rate" else [])
            job["out"] = self.run_client(job["label"], job["stack"], job["mode"], job["conf"], *args,
                                         timeout=seconds + CLIENT_SLACK_S)
            job["m"] = proxy.measure(job["out"]["samples"], FIRST_WINDOW_S, span)
            job["rate"] = job["m"]["rate"]
            job["series"] = proxy.per_second(job["out"]["samples"])
        except Exception as e:
            job["error"] = e
        self.rates[job["label"]] = job
        return job

    def run_phase(self, title, jobs, span=SPAN_S):
        for j in jobs:
            j["span"] = span
        log("   %s: %d clients at once, %d s each (first window %d s, %d s measured, ends averaged over %d s)" % (
            title, len(jobs), self.run_seconds(span), FIRST_WINDOW_S, span, SMOOTH_S))
        with ThreadPoolExecutor(len(jobs)) as ex:
            return {j["label"]: j for j in ex.map(self.rate_job, jobs)}

    # ------------------------------------------------------------ setup

    def topics(self):
        """One-partition topics with replication factor 1 and an explicit replica assignment: *-n1 led
        by node 1 (Kafka's callback), *-n2 by node 2 (kquota's)."""
        from confluent_kafka.admin import AdminClient, NewTopic

        names = []
        for base in ("src", "p-java", "p-rd", "roll", "kip55", "drill"):
            for n in (1, 2):
                if base == "drill" and n == 1:
                    continue
                names.append(("%s-n%d" % (base, n), n))
        admin = AdminClient({"bootstrap.servers": self.cluster.bootstrap(), "log_level": 0})
        futures = admin.create_topics([NewTopic(t, 1, replica_assignment=[[n]]) for t, n in names], operation_timeout=60)
        for t, f in futures.items():
            f.result(60)
        self.wait_leaders(dict(names))
        return names

    def wait_leaders(self, topics, timeout=120):
        """Until every topic's partition 0 is led by its node and answers ListOffsets there."""
        from confluent_kafka import Consumer, TopicPartition

        c = Consumer({"bootstrap.servers": self.cluster.bootstrap(), "group.id": "kq-ready", "log_level": 0})
        deadline = time.monotonic() + timeout
        try:
            for t, n in topics.items():
                while True:
                    try:
                        md = c.list_topics(t, timeout=10).topics[t]
                        leader = md.partitions[0].leader if md.error is None and 0 in md.partitions else None
                        if leader == n:
                            c.get_watermark_offsets(TopicPartition(t, 0), timeout=10, cached=False)
                            break
                        last = "leader %s" % leader
                    except Exception as e:  # retried: a partition not yet led answers errors
                        last = repr(e)
                    if time.monotonic() > deadline:
                        raise CaseFailure("%s: partition 0 not led by node %d and answering within %d s (%s)" % (
                            t, n, timeout, last))
                    time.sleep(0.3)
        finally:
            c.close()

    def fill(self, topic, nbytes):
        """Fills topic (before any quota is set) and returns the unthrottled produce rate (B/s).

        In batches of FILL_BATCH_RECORDS records, so that both sides' topics have the same layout. A
        fetch returns up to 1 MiB from a batch boundary, and the part of a batch that does not fit is
        sent, counted against consumer_byte_rate and dropped by the client, which fetches that batch
        again. With librdkafka's default batching (up to 1 MB, as the producer's timing makes them)
        one side's topic had batches of 724 KB on average where the other's had 977 KB, and its
        consumers received 9-10 % less than the other's for the same bytes metered by the broker (its
        Fetch byte-rate was the same on both nodes): what was measured was the fill, not the callback.
        At 8 records (64 KB) a batch, what a fetch cannot use is the same on both sides and ~2 %."""
        from confluent_kafka import Producer

        # linger.ms: a batch waits for its 8 records (the loop below enqueues far faster than that).
        p = Producer({"bootstrap.servers": self.cluster.bootstrap(), "client.id": "kq-fill", "log_level": 0,
                      "batch.num.messages": FILL_BATCH_RECORDS, "linger.ms": 100})
        value = os.urandom(RECORD_BYTES)
        errors = []
        t0 = time.monotonic()
        for _ in range(nbytes // RECORD_BYTES + 1):
            while True:
                try:
                    p.produce(topic, value, partition=0, on_delivery=lambda e, m: e and errors.append(e))
                    break
                except BufferError:
                    p.poll(0.05)
        left = p.flush(180)
        dt = time.monotonic() - t0
        if left or errors:
            raise CaseFailure("filling %s: %d records not delivered, errors %s" % (topic, left, errors[:3]))
        return (nbytes // RECORD_BYTES + 1) * RECORD_BYTES / dt

    def read_unthrottled(self, topic, nbytes=64 * MIB, timeout=60):
        """Reads nbytes of topic from the start (no quota applies yet) and returns the rate (B/s)."""
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        c = Consumer({"bootstrap.servers": self.cluster.bootstrap(), "group.id": "kq-calibrate",
                      "client.id": "kq-calibrate", "enable.auto.commit": False, "log_level": 0})
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        got, t0 = 0, None
        deadline = time.monotonic() + timeout
        try:
            while got < nbytes:
                if time.monotonic() > deadline:
                    raise CaseFailure("reading %s unthrottled: %d bytes in %d s" % (topic, got, timeout))
                for m in c.consume(1000, 0.2):
                    if m.error():
                        raise CaseFailure("reading %s: %s" % (topic, m.error()))
                    t0 = t0 or time.monotonic()
                    got += len(m.value() or b"")
        finally:
            c.close()
        return got / max(time.monotonic() - t0, 1e-3)

    def setup(self):
        t0 = time.monotonic()
        self.cluster.start()
        up = time.monotonic() - t0
        lines = ["cluster up in %.1f s: %s" % (up, json.dumps(self.cluster.describe()))]
        # Node 1 really runs Kafka's callback, node 2 really kquota's (in its `kafka` policy).
        reg1 = self.jmx(1, "registered", MBEAN)["registered"]
        reg2 = self.jmx(2, "registered", MBEAN)["registered"]
        if reg1 or not reg2:
            raise CaseFailure("%s registered on node 1: %s, on node 2: %s (expected no, yes)" % (MBEAN, reg1, reg2))
        attrs = self.mbean("Policy", "Entities", "Failures", "Failing")
        if attrs["Policy"] != "kafka" or attrs["Failing"] is not False:
            raise CaseFailure("node 2's MBean: %s (expected Policy=kafka, Failing=false)" % attrs)
        lines.append("node 1 has no %s (Kafka's default callback); node 2's: %s" % (MBEAN, attrs))
        topics = self.topics()
        lines.append("topics (replication factor 1): %s" % ", ".join("%s->node %d" % tn for tn in topics))
        # Each consumer reads from the start of its side's source topic: more than any reads.
        fill = int((FIRST_WINDOW_S + CONSUMER_SPAN_S + SMOOTH_S) * RATE * 1.5 + 20 * RATE)
        with ThreadPoolExecutor(2) as ex:
            prod = dict(zip((1, 2), ex.map(lambda n: self.fill("src-n%d" % n, fill), (1, 2))))
        with ThreadPoolExecutor(2) as ex:
            cons = dict(zip((1, 2), ex.map(lambda n: self.read_unthrottled("src-n%d" % n), (1, 2))))
        self.unthrottled = {"produce": prod, "consume": cons}
        lines.append("src-n1, src-n2 filled with %.0f MB each; unthrottled (librdkafka, both nodes at once): "
                     "produce %.1f / %.1f MB/s, consume %.1f / %.1f MB/s (node 1 / node 2)" % (
                         fill / 1e6, prod[1] / 1e6, prod[2] / 1e6, cons[1] / 1e6, cons[2] / 1e6))
        lines.append(self.set_quotas())
        # Until node 2 has applied them from the metadata log (node 1 applies them as quickly).
        deadline = time.monotonic() + 60
        while self.mbean("Entities")["Entities"] < len(self.QUOTAS):
            if time.monotonic() > deadline:
                raise CaseFailure("node 2's callback holds %s entities 60 s after kafka-configs set %d" % (
                    self.mbean("Entities")["Entities"], len(self.QUOTAS)))
            time.sleep(0.5)
        self.before_restart = self.snapshot()
        lines.append("node 2 before any restart: %s" % self.before_restart["attrs"])
        return "\n".join(lines)

    QUOTAS = [
        (["--entity-type", "clients", "--entity-name", JAVA_ID],
         "producer_byte_rate=%d,consumer_byte_rate=%d" % (RATE, RATE)),
        (["--entity-type", "clients", "--entity-default"], "producer_byte_rate=%d,consumer_byte_rate=%d" % (RATE, RATE)),
        (["--entity-type", "users", "--entity-name", "bob"], "producer_byte_rate=%d" % RATE),
        (["--entity-type", "users", "--entity-name", "alice"], "producer_byte_rate=%d" % KIP55_USER_RATE),
        (["--entity-type", "users", "--entity-name", "alice", "--entity-type", "clients", "--entity-name", "a"],
         "producer_byte_rate=%d" % KIP55_SUB_RATE),
        (["--entity-type", "clients", "--entity-name", "drill"], "producer_byte_rate=%d" % RATE),
    ]

    def set_quotas(self):
        with ThreadPoolExecutor(3) as ex:
            list(ex.map(lambda q: self.configs("--alter", "--add-config", q[1], *q[0]), self.QUOTAS))
        clients = self.configs("--describe", "--entity-type", "clients")
        users = self.configs("--describe", "--entity-type", "users")
        sub = self.configs("--describe", "--entity-type", "users", "--entity-name", "alice", "--entity-type", "clients")
        for want, text in (("'%s'" % JAVA_ID, clients), ("default", clients), ("'drill'", clients), ("'bob'", users),
                           ("'alice'", users), ("'a'", sub)):
            if want not in text:
                raise CaseFailure("kafka-configs --describe does not show %s:\n%s%s%s" % (want, clients, users, sub))
        return "quotas set with kafka-configs:\n" + "\n".join(
            "  %-60s %s" % (" ".join(a), v) for a, v in self.QUOTAS)

    # ------------------------------------------------------------ snapshots of node 2's answers

    EXPLAINED = [("ANONYMOUS", JAVA_ID), ("ANONYMOUS", RD_ID), ("bob", "x"), ("alice", "a"), ("alice", "b"),
                 ("ANONYMOUS", "drill")]

    def snapshot(self):
        attrs = self.mbean("Policy", "Entities", "Failures", "Failing")
        return {"attrs": attrs, "explain": {"%s/%s" % uc: self.explain(*uc) for uc in self.EXPLAINED}}

    # ------------------------------------------------------------ judging rates

    def judged(self, job):
        if "error" in job:
            e = job["error"]
            raise e if isinstance(e, CaseFailure) else CaseFailure("%s: %r" % (job["label"], e))
        return job

    def throttled(self, job, quota, floor, node):
        """The client was throttled near `quota`: a throttle time seen, its rate at most CEIL_TOL above
        the quota, at least floor x the quota, and under UNTHROTTLED_FRACTION of the unthrottled rate
        measured on that node."""
        j = self.judged(job)
        kind = "produce" if j["mode"] == "produce-rate" else "consume"
        ref = self.unthrottled[kind][node]
        r = j["rate"]
        desc = "%s %s %s; throttle avg %s ms, max %s ms" % (
            j["label"], fmt_rate(r), proxy.describe_span(j["m"]), proxy.fmt(j["out"].get("throttle_avg_ms")),
            proxy.fmt(j["out"].get("throttle_max_ms")))
        problems = []
        if not (j["out"].get("throttle_max_ms") or 0) > 0:
            problems.append("never throttled")
        if not floor * quota <= r <= (1 + CEIL_TOL) * quota:
            problems.append("outside [%.0f, %.0f] (%.0f%%..+%.0f%% of the quota %d)" % (
                floor * quota, (1 + CEIL_TOL) * quota, 100 * (floor - 1), 100 * CEIL_TOL, quota))
        if not r < UNTHROTTLED_FRACTION * ref:
            problems.append("not under %.0f%% of the unthrottled %s rate %.0f B/s" % (
                100 * UNTHROTTLED_FRACTION, kind, ref))
        if problems:
            raise CaseFailure(desc + ": " + "; ".join(problems) + "; per second (MB/s): " + proxy.series_text(j["series"]))
        return desc

    def differential(self, kafka_job, kquota_job, quota, floor):
        lines = ["Kafka (node 1):  " + self.throttled(kafka_job, quota, floor, 1),
                 "kquota (node 2): " + self.throttled(kquota_job, quota, floor, 2)]
        k, q = kafka_job["rate"], kquota_job["rate"]
        if kafka_job["mode"] == "consume-rate":
            # Bursty: whole throttle cycles (see the top), where both sides have at least MIN_CYCLES.
            span = kafka_job.get("span", SPAN_S)
            kc, qc = (cycles_rate(j["out"]["samples"], FIRST_WINDOW_S, FIRST_WINDOW_S + span + SMOOTH_S, quota)
                      for j in (kafka_job, kquota_job))
            lines.append("ends averaged: kquota %+.2f%% of Kafka; over whole throttle cycles: Kafka %s, %s; "
                         "kquota %s, %s" % (100 * (q / k - 1), fmt_rate(kc["rate"]), kc["how"], fmt_rate(qc["rate"]),
                                            qc["how"]))
            if min(len(kc["onsets"]), len(qc["onsets"])) - 1 < MIN_CYCLES:
                raise CaseFailure("\n".join(lines) + "\nfewer than %d whole throttle cycles on a side: a consumer "
                                  "throttled smoothly is not the behaviour this case expects" % MIN_CYCLES)
            k, q = kc["rate"], qc["rate"]
        dev = q / k - 1
        lines.append("kquota %+.2f%% of Kafka (tolerance %.0f%%)" % (100 * dev, 100 * DIFF_TOL))
        if abs(dev) > DIFF_TOL:
            raise CaseFailure("\n".join(lines) + "\nper second (MB/s), Kafka: " + proxy.series_text(kafka_job["series"])
                              + "\nkquota: " + proxy.series_text(kquota_job["series"]))
        return "\n".join(lines)

    # ------------------------------------------------------------ case 1 and 4

    def job(self, label, stack, mode, topic, **conf):
        return {"label": label, "stack": stack, "mode": mode, "topic": topic, "conf": self.conf(stack, **conf)}

    def case1_and_4(self):
        producers = []
        for n in (1, 2):
            producers.append(self.job("java-producer-n%d" % n, "java", "produce-rate", "p-java-n%d" % n, client_id=JAVA_ID))
            producers.append(self.job("rd-producer-n%d" % n, "librdkafka", "produce-rate", "p-rd-n%d" % n))
        consumers = []
        for n in (1, 2):
            consumers.append(self.job("java-consumer-n%d" % n, "java", "consume-rate", "src-n%d" % n, client_id=JAVA_ID))
            consumers.append(self.job("rd-consumer-n%d" % n, "librdkafka", "consume-rate", "src-n%d" % n))
            # Case 4: bob's producers, one per broker, in the consumers' phase.
            consumers.append(self.job("rolling-bob-n%d" % n, "java", "produce-rate", "roll-n%d" % n,
                                      proto="SASL_PLAINTEXT", client_id="bob-roll", user="bob"))
        a = self.run_phase("case 1 producers (Java, librdkafka) on node 1 and node 2", producers)
        b = self.run_phase("case 1 consumers (Java, librdkafka) and case 4's producers on node 1 and node 2", consumers,
                           CONSUMER_SPAN_S)
        r = dict(a, **b)
        for what, label, floor in (("Java producer", "java-producer", PRODUCER_FLOOR),
                                   ("Java consumer", "java-consumer", CONSUMER_FLOOR),
                                   ("librdkafka producer", "rd-producer", PRODUCER_FLOOR),
                                   ("librdkafka consumer", "rd-consumer", CONSUMER_FLOOR)):
            self.case("1. differential, default policy: " + what, self.differential, r[label + "-n1"],
                      r[label + "-n2"], RATE, floor)
        self.case(CASES[5], self.differential, r["rolling-bob-n1"], r["rolling-bob-n2"], RATE, PRODUCER_FLOOR)

    # ------------------------------------------------------------ case 3

    @staticmethod
    def answers(text):
        """explain()'s answers: {quota key: (bucket, limit)}, from its lines
        "KEY: bucket {user=..., client-id=...}, limit L" (limit None where it says none)."""
        out = {}
        for key, bucket, limit in re.findall(r"^(\w+): bucket (\{.*?\}), limit (\S+)", text, re.M):
            try:
                out[key] = (bucket, float(limit))
            except ValueError:
                out[key] = (bucket, None)
        return out

    def check_limits(self, key, text, wants):
        """Problems: where explain(key)'s text does not answer a limit of `wants` ({quota key: limit})."""
        got = self.answers(text)
        bad = ["%s: %s, expected limit %d" % (k, got.get(k, "no answer"), v) for k, v in wants.items()
               if k not in got or got[k][1] != v]
        return ["explain(%s): %s; its text:\n  %s" % (key, "; ".join(bad), text.strip().replace("\n", "\n  "))] if bad else []

    def restart_keeps_quotas(self):
        t0 = time.monotonic()
        rc = self.cluster.restart(2, {"kquota.sub.quota.policy": "kip55"})
        self.wait_leaders({t: 2 for t in ("src-n2", "p-java-n2", "p-rd-n2", "roll-n2", "kip55-n2", "drill-n2")})
        lines = ["node 2 stopped (exit %s) and back, its topics led by it again, in %.1f s" % (rc, time.monotonic() - t0)]
        after = self.snapshot()
        self.after_restart = after
        before = self.before_restart
        lines.append("MBean before: %s; after: %s" % (before["attrs"], after["attrs"]))
        problems = []
        if after["attrs"]["Policy"] != "kip55":
            problems.append("Policy is %r after the restart, not 'kip55'" % after["attrs"]["Policy"])
        if after["attrs"]["Entities"] != before["attrs"]["Entities"] or after["attrs"]["Entities"] < len(self.QUOTAS):
            problems.append("Entities %s after the restart, %s before (%d entities were configured)" % (
                after["attrs"]["Entities"], before["attrs"]["Entities"], len(self.QUOTAS)))
        both = {"producer_byte_rate": RATE, "consumer_byte_rate": RATE}
        wants = {"ANONYMOUS/%s" % JAVA_ID: both, "ANONYMOUS/%s" % RD_ID: both,
                 "bob/x": {"producer_byte_rate": RATE}, "ANONYMOUS/drill": {"producer_byte_rate": RATE},
                 # kip55 now: a's sub-quota, and b the remainder of alice's total.
                 "alice/a": {"producer_byte_rate": KIP55_SUB_RATE},
                 "alice/b": {"producer_byte_rate": KIP55_USER_RATE - KIP55_SUB_RATE}}
        for key, w in wants.items():
            if key != "alice/b":  # the same answer under either policy
                problems += self.check_limits(key + " before the restart", before["explain"][key], w)
            else:  # Kafka's rules before the restart: b is metered against alice's whole total
                problems += self.check_limits(key + " before the restart (policy kafka)", before["explain"][key],
                                              {"producer_byte_rate": KIP55_USER_RATE})
            problems += self.check_limits(key + " after the restart", after["explain"][key], w)
        lines.append("explain() after the restart answers the limits set before it: %s" % "; ".join(
            "%s %s" % (k, ", ".join("%s=%d" % kv for kv in v.items())) for k, v in wants.items()))
        for key in ("alice/a", "alice/b"):
            lines.append("explain(%s) after the restart:\n  %s" % (
                key, after["explain"][key].strip().replace("\n", "\n  ")))
        if problems:
            raise CaseFailure("\n".join(lines + problems))
        return "\n".join(lines)

    # ------------------------------------------------------------ case 2

    def kip55(self):
        jobs = []
        for n in (1, 2):
            for c in ("a", "b"):
                jobs.append(self.job("kip55-%s-n%d" % (c, n), "java", "produce-rate", "kip55-n%d" % n,
                                     proto="SASL_PLAINTEXT", client_id=c, user="alice"))
        r = self.run_phase("case 2: alice's a and b on node 2 (kip55) and on node 1 (Kafka)", jobs)
        lines, problems = [], []
        for n, who in ((2, "kquota kip55 (node 2)"), (1, "Kafka default (node 1)")):
            for c in ("a", "b"):
                j = self.judged(r["kip55-%s-n%d" % (c, n)])
                lines.append("%-24s client %s: %s %s; throttle avg %s ms, max %s ms" % (
                    who, c, fmt_rate(j["rate"]), proxy.describe_span(j["m"]), proxy.fmt(j["out"].get("throttle_avg_ms")),
                    proxy.fmt(j["out"].get("throttle_max_ms"))))
        for c, want in (("a", KIP55_SUB_RATE), ("b", KIP55_USER_RATE - KIP55_SUB_RATE)):
            j = r["kip55-%s-n2" % c]
            dev = j["rate"] / want - 1
            lines.append("kquota client %s: %+.2f%% of %d (tolerance %.0f%%)" % (c, 100 * dev, want, 100 * KIP55_TOL))
            if abs(dev) > KIP55_TOL or not (j["out"].get("throttle_max_ms") or 0) > 0:
                problems.append("kquota's client %s: %.0f B/s, not within %.0f%% of %d (or never throttled); "
                                "per second (MB/s): %s" % (c, j["rate"], 100 * KIP55_TOL, want,
                                                           proxy.series_text(j["series"])))
        kb = r["kip55-b-n1"]["rate"]
        lines.append("Kafka's client b: %s, %.2f x kquota's (must be >= %.0f B/s: Kafka's sub-quotas are "
                     "independent, b gets alice's whole total)" % (fmt_rate(kb), kb / r["kip55-b-n2"]["rate"],
                                                                  KAFKA_B_FLOOR))
        if kb < KAFKA_B_FLOOR:
            problems.append("Kafka's client b got %.0f B/s, not clearly above 1 MiB/s: the difference is not shown" % kb)
        if problems:
            raise CaseFailure("\n".join(lines + problems))
        return "\n".join(lines)

    # ------------------------------------------------------------ case 5

    def end_offset(self, topic):
        from confluent_kafka import Consumer, TopicPartition

        c = Consumer({"bootstrap.servers": self.cluster.bootstrap(), "group.id": "kq-offsets", "log_level": 0})
        try:
            return c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10, cached=False)[1]
        finally:
            c.close()

    def set_failing(self, value):
        """setFailing(value): the MBean's operation, or (see drill()) its writable attribute Failing."""
        v = "true" if value else "false"
        if self.has_set_failing:
            self.jmx(2, "invoke", MBEAN, "setFailing", v)
        else:
            self.jmx(2, "set", MBEAN, "Failing", v)

    def fresh_producer(self, topic, client_id, records=50, timeout=30):
        """A producer new to the broker: `records` records, each acknowledged (acks=all, the default)."""
        from confluent_kafka import Producer

        p = Producer({"bootstrap.servers": self.cluster.bootstrap(), "client.id": client_id, "log_level": 0})
        value = os.urandom(RECORD_BYTES)
        acked, errors = [], []
        t0 = time.monotonic()
        for _ in range(records):
            p.produce(topic, value, partition=0, on_delivery=lambda e, m: (errors if e else acked).append(e or m))
        left = p.flush(timeout)
        if left or errors or len(acked) != records:
            raise CaseFailure("%s: %d of %d records acknowledged in %d s, %d undelivered, errors %s" % (
                client_id, len(acked), records, timeout, left, errors[:3]))
        return {"records": len(acked), "seconds": time.monotonic() - t0}

    def drill(self):
        # The producer's timeline (s after its first acknowledgement): throttled by 11 s; failing from
        # ~14 s for DRILL_S; then the quota change, one window, DRILL_AFTER_S measured, smoothing, slack.
        seconds = 14 + DRILL_S + 8 + FIRST_WINDOW_S + DRILL_AFTER_S + 3
        job = self.job("drill-n2", "java", "produce-rate", "drill-n2", client_id="drill")
        holder = {}

        def produce():
            try:
                holder["out"] = self.run_client(job["label"], "java", "produce-rate", job["conf"], job["topic"], seconds,
                                                RECORD_BYTES, timeout=seconds + CLIENT_SLACK_S)
            except Exception as e:
                holder["error"] = e

        start_offset = self.end_offset("drill-n2")
        t = threading.Thread(target=produce, daemon=True)
        t.start()
        events = {}
        info = self.jmx(2, "info", MBEAN)
        self.has_set_failing = any(op.endswith(" setFailing(boolean)") for op in info["operations"])
        lines = ["node 2's MBean: attributes %s; operations %s" % (", ".join(info["attributes"]),
                                                                  ", ".join(info["operations"]))]
        problems = []
        if not self.has_set_failing:
            # interface.md names setFailing(boolean) an operation; a Standard MBean with isFailing() and
            # setFailing(boolean) makes them the writable attribute Failing instead. The drill goes on
            # through the attribute (so what it measures is still seen), and the case fails.
            problems.append("setFailing(boolean) is not a JMX operation of %s (interface.md: Operations ... "
                            "void setFailing(boolean)); the drill set the writable attribute Failing instead" % MBEAN)
        try:
            deadline = time.monotonic() + 90
            while self.end_offset("drill-n2") <= start_offset:  # the first acknowledged batch
                if not t.is_alive() or time.monotonic() > deadline:
                    raise CaseFailure("the drill's producer acknowledged nothing in 90 s: %s" % holder.get("error"))
                time.sleep(0.2)
            first = time.time()
            time.sleep(max(0, first + 14 - time.time()))  # the measurement's timeline, not a readiness wait
            f0 = self.mbean("Failures", "Failing")
            events["fail_on"] = time.time()
            self.set_failing(True)
            on = self.mbean("Failures", "Failing")
            if on["Failing"] is not True:
                raise CaseFailure("Failing is %r after setFailing(true)" % on["Failing"])
            # A client that comes while failing (no answer of the callback's remembered for it yet, so
            # its requests call into the failing engine): the broker must serve it too.
            mid = {}
            time.sleep(max(0, events["fail_on"] + DRILL_S / 3 - time.time()))
            mid["before_fresh"] = self.mbean("Failures")["Failures"]
            try:
                mid["fresh"] = self.fresh_producer("drill-n2", "drill-fresh")
            except CaseFailure as e:
                mid["fresh_error"] = str(e)
            try:
                mid["explain"] = self.explain("ANONYMOUS", "drill")
            except CaseFailure as e:
                mid["explain_error"] = str(e)
            time.sleep(max(0, events["fail_on"] + DRILL_S - time.time()))
            f1 = self.mbean("Failures", "Failing")
            events["fail_off"] = time.time()
            self.set_failing(False)
            off = self.mbean("Failures", "Failing")
            self.configs("--alter", "--add-config", "producer_byte_rate=%d" % DRILL_NEW_RATE, "--entity-type", "clients",
                         "--entity-name", "drill")
            events["changed"] = time.time()
            explained = self.explain("ANONYMOUS", "drill")
        finally:
            t.join(seconds + CLIENT_SLACK_S + 30)
        if "error" in holder:
            e = holder["error"]
            raise e if isinstance(e, CaseFailure) else CaseFailure("the drill's producer failed: %r" % e)
        out = holder["out"]
        samples = out["samples"]
        t0 = out["start_ms"] / 1000.0

        def rel(ev):
            return events[ev] - t0

        lines.append("producer drill (Java, node 2, quota %d): first ack at %.1f s of the drill's clock; setFailing(true) "
                     "at %.1f s, setFailing(false) at %.1f s, quota -> %d at %.1f s (producer's time); throttle avg %s ms, "
                     "max %s ms; no delivery error" % (RATE, first - t0, rel("fail_on"), rel("fail_off"), DRILL_NEW_RATE,
                                                       rel("changed"), proxy.fmt(out.get("throttle_avg_ms")),
                                                       proxy.fmt(out.get("throttle_max_ms"))))
        lines.append("MBean: before %s, on %s, after %s s %s, off %s; Failures %s after %.0f s of the producer alone "
                     "(its answers are remembered: no call into the engine), %s at the end" % (
                         f0, on, DRILL_S, f1, off, mid["before_fresh"], DRILL_S / 3, f1["Failures"]))
        during = cycles_rate(samples, rel("fail_on"), rel("fail_off"), RATE)
        dev = during["rate"] / RATE - 1
        lines.append("while failing: %s over %s, %+.2f%% of the quota (tolerance %.0f%%)" % (
            fmt_rate(during["rate"]), during["how"], 100 * dev, 100 * DRILL_TOL))
        if abs(dev) > DRILL_TOL:
            problems.append("while failing the rate was not held within %.0f%% of %d" % (100 * DRILL_TOL, RATE))
        # Acknowledgements all along: in every 3 s of the failing span.
        gaps = []
        k = rel("fail_on")
        while k + 3 <= rel("fail_off"):
            if proxy.at(samples, (k + 3) * 1000) - proxy.at(samples, k * 1000) <= 0:
                gaps.append("%.0f-%.0f s" % (k, k + 3))
            k += 3
        lines.append("acknowledgements in every 3 s while failing: %s" % ("yes" if not gaps else "NO: " + ", ".join(gaps)))
        if gaps:
            problems.append("no acknowledgement in %s" % ", ".join(gaps))
        if not f1["Failures"] > f0["Failures"]:
            problems.append("Failures did not grow while failing: %s before, %s after %d s" % (
                f0["Failures"], f1["Failures"], DRILL_S))
        if off["Failing"] is not False:
            problems.append("Failing is %r after setFailing(false)" % off["Failing"])
        if "fresh" in mid:
            lines.append("a new producer (client-id drill-fresh) while failing: %d records of %d B acknowledged in %.2f s"
                         % (mid["fresh"]["records"], RECORD_BYTES, mid["fresh"]["seconds"]))
        else:
            problems.append("a new producer while failing was not served: %s" % mid["fresh_error"])
        lines.append("explain(ANONYMOUS, drill) while failing: %s" % (
            ("answered: " + mid["explain"].strip().splitlines()[0]) if "explain" in mid
            else "FAILED: " + mid.get("explain_error", "")[:300]))
        after = cycles_rate(samples, rel("changed") + FIRST_WINDOW_S, rel("changed") + FIRST_WINDOW_S + DRILL_AFTER_S,
                            DRILL_NEW_RATE)
        dev2 = after["rate"] / DRILL_NEW_RATE - 1
        lines.append("after setFailing(false) and the change to %d (from one window after it): %s over %s, %+.2f%% "
                     "(tolerance %.0f%%)" % (DRILL_NEW_RATE, fmt_rate(after["rate"]), after["how"], 100 * dev2,
                                             100 * DRILL_TOL))
        if abs(dev2) > DRILL_TOL:
            problems.append("the changed quota %d was not enforced within %.0f%%" % (DRILL_NEW_RATE, 100 * DRILL_TOL))
        problems += self.check_limits("ANONYMOUS/drill after the change", explained,
                                      {"producer_byte_rate": DRILL_NEW_RATE})
        series = proxy.per_second(samples)
        self.rates["drill-n2"] = {"label": "drill-n2", "out": out, "series": series,
                                  "m": {"during": during, "after": after},
                                  "events": {k: v - t0 for k, v in events.items()}}
        if problems:
            raise CaseFailure("\n".join(lines + problems) + "\nper second (MB/s): " + proxy.series_text(series))
        return "\n".join(lines)

    # ------------------------------------------------------------ the run

    def run(self):
        t0 = time.monotonic()
        log("== kquota-kafka on Apache Kafka 4.3.1: node 1 Kafka's callback, node 2 kquota's (%s)" % self.jar)
        only = re.compile(os.environ["KQUOTA_KAFKA_CASES"]) if os.environ.get("KQUOTA_KAFKA_CASES") else None

        def wanted(*names):
            return only is None or any(only.search(n) for n in names)

        try:
            if self.case(CASES[0], self.setup):
                if wanted(*CASES[1:6]):
                    log("== case 1 (differential, default policy) and case 4 (rolling change)")
                    self.case1_and_4()
                restarted = None
                if wanted(CASES[6], CASES[7]):
                    log("== case 3 (restart keeps quotas) and case 2 (KIP-55)")
                    restarted = self.case(CASES[6], self.restart_keeps_quotas)
                    if restarted and wanted(CASES[7]):
                        self.case(CASES[7], self.kip55)
                if restarted is not False and wanted(CASES[8]):
                    log("== case 5 (failure drill)")
                    self.case(CASES[8], self.drill)
        finally:
            rcs = self.cluster.stop()
            log("   cluster stopped (exit codes %s)" % rcs)
        seen = {r["case"] for r in self.results}
        for name in CASES:
            if name not in seen:
                why = "not run (KQUOTA_KAFKA_CASES=%s)" % only.pattern if only and not wanted(name) else \
                    "not run (an earlier step failed)"
                self.results.append({"case": name, "ok": False, "seconds": 0, "detail": why})
                log("FAIL %s: %s" % (name, why))
        passed = sum(r["ok"] for r in self.results)
        failed = len(self.results) - passed
        with open(os.path.join(self.work, "results.json"), "w") as f:
            json.dump({"seconds": round(time.monotonic() - t0, 1), "results": self.results,
                       "rates": {k: {"rate": j.get("rate"), "measure": j.get("m"), "events": j.get("events"),
                                     "throttle_avg_ms": (j.get("out") or {}).get("throttle_avg_ms"),
                                     "throttle_max_ms": (j.get("out") or {}).get("throttle_max_ms"),
                                     "per_second": [round(x) for x in j.get("series", [])],
                                     "error": str(j["error"]) if "error" in j else None}
                                 for k, j in self.rates.items()}}, f, indent=1)
        log("== %.0f s" % (time.monotonic() - t0))
        log("%d passed, %d failed" % (passed, failed))
        return 0 if failed == 0 and passed == len(CASES) else 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", required=True)
    ap.add_argument("--jar", required=True)
    ap.add_argument("--kafka-sh", required=True)
    args = ap.parse_args()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGALRM):
        signal.signal(sig, on_sigterm)
    signal.alarm(SUITE_TIMEOUT_S)
    if not os.path.isfile(args.jar):
        sys.exit("suite.py: no plug-in jar at %s" % args.jar)
    sys.exit(Suite(args).run())


if __name__ == "__main__":
    main()
