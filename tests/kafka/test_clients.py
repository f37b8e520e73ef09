"""Real clients both ways: kquota's kafka-quotas and kafka-configs against Apache Kafka, and Kafka's own
ConfigCommand and Java Admin client (interop/kafka AdminCheck) against kquotad. Each scenario runs
against both servers and must print the same thing, and what it prints is asserted."""

import os
import subprocess
import time
from pathlib import Path

import pytest

from kqclient import CLIENT, IP, USER
import deviations as dv
from reference import clear_all, wait_values

REPO = Path(__file__).resolve().parents[2]
BIN_DIR = Path(os.environ.get("KQUOTA_BIN_DIR", REPO / "target" / "release"))
KAFKA_SH = os.environ.get("KQUOTA_KAFKA_SH", str(REPO / "interop" / "kafka" / "kafka.sh"))
JVM_TIMEOUT_S = 120


@pytest.fixture(scope="module", autouse=True)
def fresh(kafka_quotas, kquotad_quotas):
    clear_all(kafka_quotas, kquotad_quotas)


@pytest.fixture(scope="module")
def servers(kafka, kquotad, kafka_quotas, kquotad_quotas):
    return {"kafka": (kafka.bootstrap, kafka_quotas), "kquotad": (kquotad.bootstrap, kquotad_quotas)}


def run(cmd, timeout=60):
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except FileNotFoundError as e:
        pytest.fail(f"cannot run {cmd[0]}: {e} (tests/kafka/run.sh builds the tools)", pytrace=False)
    return p.returncode, p.stdout, p.stderr


def tool(name, bootstrap, *args):
    return run([str(BIN_DIR / name), "--bootstrap-server", bootstrap, *args])


def java(*args):
    code, out, err = run([KAFKA_SH, "java", *args], timeout=JVM_TIMEOUT_S)
    return code, out, "\n".join(line for line in err.splitlines() if "SLF4J" not in line)


def ok(result, what):
    code, out, err = result
    assert code == 0, f"{what}: exit {code}\nstdout:\n{out}\nstderr:\n{err}"
    return out


# --------------------------------------------------------------------------------------------------
# kquota's tools against Apache Kafka (and the same commands against kquotad).

LIST_APP = """{user=t-u, client-id=t-app}
producer_byte_rate broker_bps 2000000

{user=<default>, client-id=t-app}
consumer_byte_rate broker_bps 100
producer_byte_rate broker_bps 500000
"""

DESCRIBE_U_APP = """consumer_byte_rate    broker_bps 100     {user=<default>, client-id=t-app}
producer_byte_rate    broker_bps 2000000 {user=t-u, client-id=t-app}
 * producer_byte_rate broker_bps 1000000 {user=t-u}
 * producer_byte_rate broker_bps 500000  {user=<default>, client-id=t-app}
"""

LIST_PREFIX = """{user=t-u, client-id=t-app}
producer_byte_rate broker_bps 2000000

{user=t-u}
producer_byte_rate broker_bps 1000000
"""

DESCRIBE_DEFAULT_APP = """consumer_byte_rate broker_bps 100    {user=<default>, client-id=t-app}
producer_byte_rate broker_bps 500000 {user=<default>, client-id=t-app}
"""

LIST_U_JSON = ('{"entities":[{"entity":{"client-id":"t-app","user":"t-u"},"quotas":[{"type":"producer_byte_rate",'
               '"unit":"broker_bps","value":2000000}]},{"entity":{"user":"t-u"},"quotas":[{"type":'
               '"producer_byte_rate","unit":"broker_bps","value":1000000}]}],"version":1}\n')


@pytest.mark.parametrize("side", ["kafka", "kquotad"])
def test_kafka_quotas_alter_list_describe(servers, side):
    bootstrap, quotas = servers[side]
    ok(tool("kafka-quotas", bootstrap, "--alter", "--names=user=t-u", "--add=producer_byte_rate=1000000"), "alter")
    ok(tool("kafka-quotas", bootstrap, "--alter", "--names=user=t-u,client-id=t-app",
            "--add=producer_byte_rate=2000000"), "alter")
    ok(tool("kafka-quotas", bootstrap, "--alter", "--names=client-id=t-app", "--defaults=user",
            "--add=producer_byte_rate=500000,consumer_byte_rate=100"), "alter")
    ok(tool("kafka-quotas", bootstrap, "--alter", "--names=user=t-v", "--add=producer_byte_rate=7",
            "--validate-only"), "validate-only alter")
    wait_values(quotas, ((USER, None), (CLIENT, "t-app")), {"producer_byte_rate": 500000.0,
                                                            "consumer_byte_rate": 100.0})
    wait_values(quotas, ((USER, "t-u"), (CLIENT, "t-app")), {"producer_byte_rate": 2000000.0})
    wait_values(quotas, ((USER, "t-u"),), {"producer_byte_rate": 1000000.0})
    assert quotas.values_of(1, ((USER, "t-v"),)) == {}, "--validate-only changed something"

    assert ok(tool("kafka-quotas", bootstrap, "--list", "--names=client-id=t-app"), "list") == LIST_APP
    assert ok(tool("kafka-quotas", bootstrap, "--describe", "--names=user=t-u,client-id=t-app",
                   "--include-overrides"), "describe") == DESCRIBE_U_APP
    assert ok(tool("kafka-quotas", bootstrap, "--list", "--names=user=t-u", "--output", "json"), "list") == LIST_U_JSON
    assert ok(tool("kafka-quotas", bootstrap, "--list", "--prefix=user=t-"), "list --prefix") == LIST_PREFIX
    assert ok(tool("kafka-quotas", bootstrap, "--describe", "--defaults=user", "--names=client-id=t-app"),
              "describe a default user") == DESCRIBE_DEFAULT_APP

    # Refusals: exit 1, the entity, Kafka's error name and message.
    assert tool("kafka-quotas", bootstrap, "--alter", "--names=user=t-v", "--add=request_percentage=-1") == (
        1, "", "error: {user=t-v}: INVALID_REQUEST: Quota request_percentage must be greater than 0\n")
    code, out, err = tool("kafka-quotas", bootstrap, "--alter", "--names=user=t-u", "--add=producer_byte_rate:bps=10")
    if side == "kafka":  # Apache Kafka knows no units
        assert (code, out, err) == (
            1, "", "error: {user=t-u}: INVALID_REQUEST: Invalid configuration key producer_byte_rate:bps\n"), dv.UNITS
    else:
        assert (code, out, err) == (0, "", "")
        ok(tool("kafka-quotas", bootstrap, "--alter", "--names=user=t-u", "--delete=producer_byte_rate:bps"), "delete")


@pytest.mark.parametrize("side", ["kafka", "kquotad"])
def test_kafka_configs_alter_describe(servers, side):
    bootstrap, quotas = servers[side]
    assert ok(tool("kafka-configs", bootstrap, "--alter", "--add-config", "producer_byte_rate=10,consumer_byte_rate=20",
                   "--entity-type", "clients", "--entity-name", "c-A", "--entity-type", "users",
                   "--entity-name", "c-user2"), "alter") == "Completed updating config for client c-A.\n"
    assert ok(tool("kafka-configs", bootstrap, "--alter", "--add-config", "consumer_byte_rate=20000000",
                   "--entity-type", "clients", "--entity-default"), "alter") == (
        "Completed updating default config for clients in the cluster.\n")
    wait_values(quotas, ((USER, "c-user2"), (CLIENT, "c-A")), {"producer_byte_rate": 10.0, "consumer_byte_rate": 20.0})
    wait_values(quotas, ((CLIENT, None),), {"consumer_byte_rate": 20000000.0})
    assert ok(tool("kafka-configs", bootstrap, "--describe", "--entity-type", "users", "--entity-name", "c-user2",
                   "--entity-type", "clients", "--entity-name", "c-A"), "describe") == (
        "Quota configs for user-principal 'c-user2', client-id 'c-A' are consumer_byte_rate=20.0, "
        "producer_byte_rate=10.0\n")
    assert ok(tool("kafka-configs", bootstrap, "--describe", "--entity-type", "clients", "--entity-default"),
              "describe") == "Quota configs for the default client-id are consumer_byte_rate=2.0E7\n"
    code, out, err = tool("kafka-configs", bootstrap, "--alter", "--entity-type", "ips", "--entity-name", "localhost",
                          "--add-config", "connection_creation_rate=5")
    if side == "kafka":  # Kafka resolves host names
        assert (code, err) == (0, ""), (dv.IP_NAMES, err)
        assert out == "Completed updating config for ip localhost.\n"
        # Kafka applies an alteration through its controller: wait until a describe sees it, since
        # deleting a key that a describe does not see is refused ("Invalid config(s)"), as in Kafka's tool.
        wait_values(quotas, ((IP, "localhost"),), {"connection_creation_rate": 5.0})
        ok(tool("kafka-configs", bootstrap, "--alter", "--entity-type", "ips", "--entity-name", "localhost",
                "--delete-config", "connection_creation_rate"), "delete")
    else:
        assert (code, out, err) == (
            1, "", "error: {ip=localhost}: INVALID_REQUEST: localhost is not a valid IP or resolvable host. "
                   "(this server names ip entities by IP address only, such as 127.0.0.1 or ::1, and 'localhost' "
                   "is a host name: docs/semantics.md, D7 \"ip names\")\n")
    ok(tool("kafka-configs", bootstrap, "--alter", "--delete-config", "consumer_byte_rate", "--entity-type", "clients",
            "--entity-default"), "delete")
    wait_values(quotas, ((CLIENT, None),), {})


# --------------------------------------------------------------------------------------------------
# Kafka's ConfigCommand and Java Admin client against kquotad (and, as the reference, against Kafka).


def config_command(bootstrap, *args):
    """Kafka's ConfigCommand with the Admin client's default timeouts (no --command-config)."""
    return java("kafka.admin.ConfigCommand", "--bootstrap-server", bootstrap, *args)

CONFIG_COMMANDS = [
    ("--alter", "--add-config", "producer_byte_rate=1024", "--entity-type", "users", "--entity-name", "k-alice"),
    ("--alter", "--add-config", "consumer_byte_rate=2048,producer_byte_rate=4096", "--entity-type", "users",
     "--entity-name", "k-alice", "--entity-type", "clients", "--entity-default"),
    ("--alter", "--add-config", "connection_creation_rate=7", "--entity-type", "ips", "--entity-name", "10.1.2.3"),
    ("--alter", "--add-config", "producer_byte_rate=300,request_percentage=150", "--entity-type", "users",
     "--entity-default", "--entity-type", "clients", "--entity-name", "k-app"),
    ("--alter", "--delete-config", "request_percentage", "--entity-type", "users", "--entity-default",
     "--entity-type", "clients", "--entity-name", "k-app"),
    ("--describe", "--entity-type", "users", "--entity-name", "k-alice", "--entity-type", "clients",
     "--entity-default"),
    ("--describe", "--entity-type", "ips", "--entity-name", "10.1.2.3"),
    ("--describe", "--entity-type", "users", "--entity-default", "--entity-type", "clients", "--entity-name", "k-app"),
    ("--describe", "--entity-type", "users", "--entity-name", "k-alice"),
]
CONFIG_OUTPUTS = [
    "Completed updating config for user k-alice.\n",
    "Completed updating config for user k-alice.\n",
    "Completed updating config for ip 10.1.2.3.\n",
    "Completed updating default config for users in the cluster.\n",
    "Completed updating default config for users in the cluster.\n",
    "Quota configs for user-principal 'k-alice', the default client-id are consumer_byte_rate=2048.0, "
    "producer_byte_rate=4096.0\n",
    "Quota configs for ip '10.1.2.3' are connection_creation_rate=7.0\n",
    "Quota configs for the default user-principal, client-id 'k-app' are producer_byte_rate=300.0\n",
    "Quota configs for user-principal 'k-alice' are producer_byte_rate=1024.0\n",
]


def test_kafka_config_command(servers):
    results = {}
    for side, (bootstrap, quotas) in servers.items():
        results[side] = [config_command(bootstrap, *args) for args in CONFIG_COMMANDS[:5]]
        wait_values(quotas, ((USER, "k-alice"),), {"producer_byte_rate": 1024.0})
        wait_values(quotas, ((USER, "k-alice"), (CLIENT, None)), {"consumer_byte_rate": 2048.0,
                                                                   "producer_byte_rate": 4096.0})
        wait_values(quotas, ((IP, "10.1.2.3"),), {"connection_creation_rate": 7.0})
        wait_values(quotas, ((USER, None), (CLIENT, "k-app")), {"producer_byte_rate": 300.0})
        results[side] += [config_command(bootstrap, *args) for args in CONFIG_COMMANDS[5:]]
    for args, want, kafka_r, kq_r in zip(CONFIG_COMMANDS, CONFIG_OUTPUTS, results["kafka"], results["kquotad"]):
        assert kafka_r == (0, want, ""), f"Kafka, ConfigCommand {args}: {kafka_r}"
        # Describing users without a client-id also asks apiKey 50 for SCRAM credentials
        # (DescribeUserScramCredentials), which kquotad answers as Kafka does: no credentials, no line.
        assert kq_r == (0, want, ""), f"kquotad, ConfigCommand {args}: {kq_r}"


# kquota's kafka-configs beside Kafka's own ConfigCommand, against Apache Kafka: the same arguments give
# the same exit status and the same output (Kafka's forms that kquota's tool reads as Kafka does: the
# shorter entity flags, two defaults, bracketed and suffixed values, deleting a key that is not set).
SAME_AS_CONFIG_COMMAND = [
    ("--alter", "--user", "m-alice", "--client", "m-app", "--add-config",
     "producer_byte_rate=[1024],consumer_byte_rate = 2048d"),
    ("--alter", "--entity-type", "users", "--entity-name", "m-bob", "--entity-type", "clients",
     "--entity-default", "--add-config", "request_percentage=44"),
    ("--alter", "--entity-type", "users", "--entity-name", "", "--entity-type", "clients", "--entity-name",
     "m-app", "--add-config", "controller_mutation_rate=3"),
]
SAME_AS_CONFIG_COMMAND_AFTER = [
    ("--describe", "--user", "m-alice", "--client", "m-app"),
    ("--describe", "--entity-type", "users", "--entity-name", "m-bob", "--entity-type", "clients",
     "--entity-default"),
    ("--describe", "--user-defaults", "--client", "m-app"),
    ("--alter", "--user", "m-alice", "--client", "m-app", "--delete-config", "request_percentage"),
]


def test_kafka_configs_matches_config_command_on_kafka(servers):
    bootstrap, quotas = servers["kafka"]
    for args in SAME_AS_CONFIG_COMMAND:
        java_r = config_command(bootstrap, *args)
        ours = tool("kafka-configs", bootstrap, *args)
        assert java_r[0] == 0, f"ConfigCommand {args}: {java_r}"
        assert ours == (0, java_r[1], ""), f"kafka-configs {args}: {ours}, ConfigCommand: {java_r}"
    wait_values(quotas, ((USER, "m-alice"), (CLIENT, "m-app")),
                {"producer_byte_rate": 1024.0, "consumer_byte_rate": 2048.0})
    wait_values(quotas, ((USER, "m-bob"), (CLIENT, None)), {"request_percentage": 44.0})
    wait_values(quotas, ((USER, None), (CLIENT, "m-app")), {"controller_mutation_rate": 3.0})
    for args in SAME_AS_CONFIG_COMMAND_AFTER:
        java_code, java_out, java_err = config_command(bootstrap, *args)
        code, out, err = tool("kafka-configs", bootstrap, *args)
        assert (code, out) == (java_code, java_out), (
            f"kafka-configs {args}: {(code, out, err)}, ConfigCommand: {(java_code, java_out, java_err)}")
        if java_code != 0:
            # Kafka prints the exception's message; kquota's tool the same words after "error: ".
            message = java_err.strip().splitlines()[-1]
            assert message in err, f"{message!r} not in {err!r}"
    # Nothing of the refused deletion was changed; then both entities are removed again.
    wait_values(quotas, ((USER, "m-alice"), (CLIENT, "m-app")),
                {"producer_byte_rate": 1024.0, "consumer_byte_rate": 2048.0})
    ok(tool("kafka-configs", bootstrap, "--alter", "--user", "m-alice", "--client", "m-app", "--delete-config",
            "producer_byte_rate,consumer_byte_rate"), "delete")
    ok(tool("kafka-configs", bootstrap, "--alter", "--user", "m-bob", "--client-defaults", "--delete-config",
            "request_percentage"), "delete")
    ok(tool("kafka-configs", bootstrap, "--alter", "--user-defaults", "--client", "m-app", "--delete-config",
            "controller_mutation_rate"), "delete")
    wait_values(quotas, ((USER, "m-alice"), (CLIENT, "m-app")), {})


ADMIN_CHECK = """alter {client-id=<default>, user=j-bob}: OK
alter {client-id=j-app, user=j-alice}: OK
alter {client-id=j-app, user=j-carol}: InvalidRequestException: producer_byte_rate cannot be a fractional value.
alter {ip=not_an_ip!!}: InvalidRequestException: not_an_ip!! is not a valid IP or resolvable host.
alter {user=j-alice}: OK
alter {user=j-carol}: InvalidRequestException: Quota request_percentage must be greater than 0
validate-only {client-id=j-app, user=j-dave}: InvalidRequestException: Invalid configuration key unknown_key
validate-only {user=j-alice}: OK
validate-only {user=j-dave}: OK
remove {user=j-alice}: OK
remove {user=j-dave}: OK
exact-strict: 1 entities
exact-strict {user=j-alice} {producer_byte_rate=1024.0}
exact: 2 entities
exact {client-id=j-app, user=j-alice} {producer_byte_rate=512.0}
exact {user=j-alice} {producer_byte_rate=1024.0}
default-strict: 1 entities
default-strict {client-id=<default>, user=j-bob} {controller_mutation_rate=5.5}
default-client: 1 entities
default-client {client-id=<default>, user=j-bob} {controller_mutation_rate=5.5}
any-user-strict: 1 entities
any-user-strict {user=j-alice} {producer_byte_rate=1024.0}
any-client: 2 entities
any-client {client-id=<default>, user=j-bob} {controller_mutation_rate=5.5}
any-client {client-id=j-app, user=j-alice} {producer_byte_rate=512.0}
validated-only: 0 entities
all: 3 entities
all {client-id=<default>, user=j-bob} {controller_mutation_rate=5.5}
all {client-id=j-app, user=j-alice} {producer_byte_rate=512.0}
all {user=j-alice} {producer_byte_rate=1024.0}
unsupported-type: UnsupportedVersionException: Unsupported entity type group
ip-with-user: InvalidRequestException: Invalid entity filter component combination. IP filter component should not be used with user or clientId filter component.
scram-every users: []
scram-every all: []
scram-named users: []
scram-named j-alice: ResourceNotFoundException: Attempt to describe a user credential that does not exist: j-alice
scram-named j-bob: ResourceNotFoundException: Attempt to describe a user credential that does not exist: j-bob
scram-named all: [j-alice, j-bob]
scram-twice users: [j-carol]
scram-twice j-carol: DuplicateResourceException: Cannot describe SCRAM credentials for the same user twice in a single request: j-carol
scram-twice all: DuplicateResourceException: Cannot describe SCRAM credentials for the same user twice in a single request: j-carol
"""


# AdminCheck runs with the Admin client's default timeouts (30 s per request); a run that waited for one
# would take longer than this.
ADMIN_CHECK_BOUND_S = 30


def test_java_admin_client(servers):
    outputs, took = {}, {}
    for side, (bootstrap, _) in servers.items():
        started = time.monotonic()
        outputs[side] = ok(java("kquota.interop.AdminCheck", bootstrap, "j-"), f"AdminCheck against {side}")
        took[side] = time.monotonic() - started
    print(f"AdminCheck: kquotad {took['kquotad']:.1f} s, Kafka {took['kafka']:.1f} s")
    assert outputs["kquotad"] == outputs["kafka"]
    assert outputs["kquotad"] == ADMIN_CHECK
    assert took["kquotad"] < ADMIN_CHECK_BOUND_S, took
