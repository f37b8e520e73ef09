"""The suite's two-node Apache Kafka 4.3.1 cluster on loopback (KRaft), from interop/kafka's Maven jars.

    node 1  process.roles=broker,controller   Kafka's DEFAULT quota callback (no client.quota.callback.class)
    node 2  process.roles=broker               client.quota.callback.class=io.kquota.kafka.KquotaCallback,
                                               the plug-in's jar appended to its classpath (Kafka's libs/
                                               convention, on a Maven classpath)

Every node listens on 127.0.0.1 only: PLAINTEXT (also the inter-broker listener), SASL_PLAINTEXT with
SCRAM-SHA-512 (the SCRAM users are in the bootstrap metadata, `StorageTool format --add-scram`, as
interop/kafka/cluster.sh does), node 1 also CONTROLLER (one static voter). Both run with JMX remote on a
loopback port of their own (no authentication, no TLS: loopback only), so the suite can read node 2's
io.kquota MBean and check that node 1 has none. Heaps -Xmx512m, serial collector, as kafka.sh does.

    python cluster.py stop DIR      stops whatever nodes of DIR still run (run.sh's exit trap)

The suite uses the Cluster class: start(), restart(2, extra_properties), stop(). Readiness is waited for,
never slept for: a node is up once its log says "Kafka Server started" (once more than before), its
listeners accept connections and node 1's and node 2's metadata both list both brokers.
"""
import json
import os
import signal
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, os.path.join(REPO, "interop"))
from ports import listen_ports  # noqa: E402

JVM_OPTS = ["-Xmx512m", "-Xms128m", "-XX:+UseSerialGC", "-XX:CICompilerCount=2", "-Djava.awt.headless=true"]
START_TIMEOUT_S = float(os.environ.get("KAFKA_START_TIMEOUT", "180"))
STOP_TIMEOUT_S = 30
USERS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}
CALLBACK_CLASS = "io.kquota.kafka.KquotaCallback"
NODES = (1, 2)


class ClusterError(Exception):
    pass


def tail(path, n=40):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError:
        return ""


def port_open(port):
    try:
        socket.create_connection(("127.0.0.1", port), 1).close()
        return True
    except OSError:
        return False


def pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (exited, not yet reaped by its parent, this process) counts as gone.
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def stop_pid(pid, label, timeout=STOP_TIMEOUT_S):
    """SIGTERM (a broker's controlled shutdown), then SIGKILL to its process group after `timeout`."""
    if not pid_alive(pid):
        return
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    if pid_alive(pid):
        print("cluster.py: %s (pid %d) ignored SIGTERM for %d s; killing it" % (label, pid, timeout), file=sys.stderr)
        for target in (lambda: os.killpg(pid, signal.SIGKILL), lambda: os.kill(pid, signal.SIGKILL)):
            try:
                target()
                break
            except (ProcessLookupError, PermissionError):
                continue
        deadline = time.monotonic() + 20
        while pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)


def stop_dir(d):
    """Stops the nodes of directory d from their pid files, node 2 (the broker) before node 1 (its
    controller: a broker's controlled shutdown asks the controller)."""
    for n in sorted(NODES, reverse=True):
        pf = os.path.join(d, "node-%d" % n, "kafka.pid")
        if os.path.exists(pf):
            try:
                pid = int(open(pf).read().strip())
            except ValueError:
                continue
            stop_pid(pid, "node %d" % n)
            os.unlink(pf)


class Node:
    def __init__(self, cluster, node_id, ports):
        self.cluster, self.id = cluster, node_id
        self.dir = os.path.join(cluster.dir, "node-%d" % node_id)
        self.plain, self.sasl, self.jmx = ports["plain"], ports["sasl"], ports["jmx"]
        self.controller = ports.get("controller")
        self.proc = None
        self.extra = {}

    @property
    def log_path(self):
        return os.path.join(self.dir, "logs", "server.log")

    @property
    def stdout_path(self):
        return os.path.join(self.dir, "logs", "stdout.log")

    @property
    def plugin(self):
        return self.id == 2

    def properties(self):
        c = self.cluster
        roles = "broker,controller" if self.id == 1 else "broker"
        listeners = "PLAINTEXT://127.0.0.1:%d,SASL_PLAINTEXT://127.0.0.1:%d" % (self.plain, self.sasl)
        if self.controller:
            listeners += ",CONTROLLER://127.0.0.1:%d" % self.controller
        props = [
            ("process.roles", roles),
            ("node.id", self.id),
            ("controller.quorum.voters", "1@127.0.0.1:%d" % c.nodes[1].controller),
            ("listeners", listeners),
            ("advertised.listeners", "PLAINTEXT://127.0.0.1:%d,SASL_PLAINTEXT://127.0.0.1:%d" % (self.plain, self.sasl)),
            ("listener.security.protocol.map",
             "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT"),
            ("controller.listener.names", "CONTROLLER"),
            ("inter.broker.listener.name", "PLAINTEXT"),
            ("sasl.enabled.mechanisms", "SCRAM-SHA-512"),
            ("listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config",
             "org.apache.kafka.common.security.scram.ScramLoginModule required;"),
            ("super.users", "User:admin"),
            ("log.dirs", os.path.join(self.dir, "data")),
            ("num.network.threads", 2),
            ("num.io.threads", 2),
            ("background.threads", 2),
            ("num.replica.fetchers", 1),
            ("num.partitions", 1),
            ("default.replication.factor", 1),
            ("offsets.topic.replication.factor", 1),
            ("offsets.topic.num.partitions", 2),
            ("transaction.state.log.replication.factor", 1),
            ("transaction.state.log.min.isr", 1),
            ("transaction.state.log.num.partitions", 2),
            ("share.coordinator.state.topic.replication.factor", 1),
            ("share.coordinator.state.topic.min.isr", 1),
            ("group.initial.rebalance.delay.ms", 0),
        ]
        if self.plugin:
            props.append(("client.quota.callback.class", CALLBACK_CLASS))
        props += sorted(self.extra.items())
        return "".join("%s=%s\n" % (k, v) for k, v in props)

    def write_config(self):
        os.makedirs(os.path.join(self.dir, "logs"), exist_ok=True)
        with open(os.path.join(self.dir, "server.properties"), "w") as f:
            f.write(self.properties())
        with open(os.path.join(self.dir, "log4j2.properties"), "w") as f:
            f.write("status = error\nappender.file.type = File\nappender.file.name = file\n"
                    "appender.file.fileName = %s\nappender.file.layout.type = PatternLayout\n"
                    "appender.file.layout.pattern = [%%d] %%p %%m (%%c)%%n\nrootLogger.level = INFO\n"
                    "rootLogger.appenderRef.file.ref = file\n" % self.log_path)

    def classpath(self):
        return self.cluster.classpath + ((":" + self.cluster.jar) if self.plugin else "")

    def java(self, *args, **kw):
        return [ "java"] + JVM_OPTS + ["-Dlog4j2.configurationFile=%s" % os.path.join(self.dir, "log4j2.properties"),
                                       "-Dkafka.logs.dir=%s" % os.path.join(self.dir, "logs")] + list(kw.get("jvm", [])) + [
            "-cp", self.classpath()] + list(args)

    def format(self, cluster_id):
        os.makedirs(os.path.join(self.dir, "data"), exist_ok=True)
        self.write_config()
        cmd = self.java("kafka.tools.StorageTool", "format", "-t", cluster_id, "-c",
                        os.path.join(self.dir, "server.properties"))
        if self.controller:  # the bootstrap metadata is the controller's
            for u, p in USERS.items():
                cmd += ["--add-scram", "SCRAM-SHA-512=[name=%s,password=%s]" % (u, p)]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
        if p.returncode != 0:
            raise ClusterError("StorageTool format failed for node %d:\n%s%s" % (self.id, p.stdout, p.stderr))

    def starts(self):
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read().count("Kafka Server started")
        except OSError:
            return 0

    def launch(self):
        """Starts the node from its server.properties; returns the count of starts before, for wait_up."""
        self.write_config()
        before = self.starts()
        jmx = ["-Dcom.sun.management.jmxremote.port=%d" % self.jmx,
               "-Dcom.sun.management.jmxremote.rmi.port=%d" % self.jmx,
               "-Dcom.sun.management.jmxremote.host=127.0.0.1",
               "-Dcom.sun.management.jmxremote.authenticate=false",
               "-Dcom.sun.management.jmxremote.ssl=false",
               "-Djava.rmi.server.hostname=127.0.0.1"]
        cmd = self.java("kafka.Kafka", os.path.join(self.dir, "server.properties"), jvm=jmx)
        out = open(self.stdout_path, "a")
        # A session of its own: stop_pid can end it (and only it) as a group.
        self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     start_new_session=True)
        out.close()
        with open(os.path.join(self.dir, "kafka.pid"), "w") as f:
            f.write("%d\n" % self.proc.pid)
        self.cmd = cmd
        return before

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def wait_up(self, before, deadline):
        while True:
            if not self.running():
                raise ClusterError("node %d exited during start-up (exit %s); its log:\n%s\n%s" % (
                    self.id, self.proc.returncode, tail(self.log_path), tail(self.stdout_path, 20)))
            if self.starts() > before and port_open(self.plain) and port_open(self.sasl) and port_open(self.jmx):
                return
            if time.monotonic() > deadline:
                raise ClusterError("node %d did not start within %.0f s; its log:\n%s" % (
                    self.id, START_TIMEOUT_S, tail(self.log_path)))
            time.sleep(0.2)

    def stop(self):
        if self.proc is not None:
            stop_pid(self.proc.pid, "node %d" % self.id)
            self.proc.wait(5) if self.proc.poll() is None else None
            rc = self.proc.returncode
            self.proc = None
            try:
                os.unlink(os.path.join(self.dir, "kafka.pid"))
            except OSError:
                pass
            return rc
        return None


class Cluster:
    def __init__(self, d, classpath, jar):
        self.dir = os.path.abspath(d)
        self.classpath, self.jar = classpath, jar
        used = set()
        self.nodes = {}
        for n in NODES:
            ports = {k: listen_ports(1, used) for k in ("plain", "sasl", "jmx")}
            if n == 1:
                ports["controller"] = listen_ports(1, used)
            self.nodes[n] = Node(self, n, ports)

    def bootstrap(self, proto="PLAINTEXT"):
        return ",".join("127.0.0.1:%d" % (nd.plain if proto == "PLAINTEXT" else nd.sasl) for nd in self.nodes.values())

    def jmx(self, n):
        return "127.0.0.1:%d" % self.nodes[n].jmx

    def start(self):
        os.makedirs(self.dir, exist_ok=True)
        p = subprocess.run(["java", "-Xmx128m", "-XX:+UseSerialGC", "-cp", self.classpath, "kafka.tools.StorageTool",
                            "random-uuid"], capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
        if p.returncode != 0:
            raise ClusterError("StorageTool random-uuid failed:\n%s" % p.stderr)
        cluster_id = p.stdout.strip().splitlines()[-1]
        for nd in self.nodes.values():
            nd.format(cluster_id)
        deadline = time.monotonic() + START_TIMEOUT_S
        befores = {n: nd.launch() for n, nd in self.nodes.items()}
        for n, nd in self.nodes.items():
            nd.wait_up(befores[n], deadline)
        self.wait_brokers(deadline)

    def restart(self, n, extra):
        """Stops node n (SIGTERM: a controlled shutdown) and starts it again on the same ports and data,
        with `extra` added to its server.properties; waits until it is back in the cluster."""
        nd = self.nodes[n]
        rc = nd.stop()
        nd.extra = dict(extra)
        deadline = time.monotonic() + START_TIMEOUT_S
        before = nd.launch()
        nd.wait_up(before, deadline)
        self.wait_brokers(deadline)
        return rc

    def wait_brokers(self, deadline):
        """Until each node's metadata names both brokers."""
        from confluent_kafka.admin import AdminClient

        last = None
        for nd in self.nodes.values():
            admin = AdminClient({"bootstrap.servers": "127.0.0.1:%d" % nd.plain, "log_level": 0})
            while True:
                try:
                    brokers = sorted(admin.list_topics(timeout=5).brokers)
                    if brokers == sorted(NODES):
                        break
                    last = "brokers %s" % brokers
                except Exception as e:  # the client's own errors, retried until the deadline
                    last = repr(e)
                for other in self.nodes.values():
                    if not other.running():
                        raise ClusterError("node %d exited; its log:\n%s" % (other.id, tail(other.log_path)))
                if time.monotonic() > deadline:
                    raise ClusterError("node %d's metadata did not name brokers %s in time (last: %s)" % (
                        nd.id, list(NODES), last))
                time.sleep(0.3)

    def stop(self):
        rcs = {}
        for n in sorted(self.nodes, reverse=True):
            rcs[n] = self.nodes[n].stop()
        return rcs

    def describe(self):
        return {"node-%d" % n: {"plain": nd.plain, "sasl": nd.sasl, "jmx": nd.jmx, "controller": nd.controller,
                                "callback": CALLBACK_CLASS if nd.plugin else "Kafka's default"}
                for n, nd in self.nodes.items()}


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "stop":
        stop_dir(sys.argv[2])
    else:
        sys.exit("usage: cluster.py stop DIR")
