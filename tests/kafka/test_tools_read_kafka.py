"""kquota's tools read whatever Apache Kafka stores (docs/cli.md, "Entries as the server stores them").

Kafka keeps entries that kquotad would refuse: an ip entity under a host name (`localhost`, D7), a
user literally named `<default>`, names with commas, spaces at an end, non-ASCII or a thousand
characters, a NaN request_percentage (D3) and a byte rate of 5.0000001 (D4). They are stored here
through kquota's kafka-configs, Kafka's own ConfigCommand and (for what no tool sends) the protocol.
Then kafka-quotas --list and --describe and kafka-configs --describe must print them all, in text and
JSON, and kafka-configs --describe must print what Kafka's ConfigCommand prints for the same arguments."""

import json
import math
import os
import subprocess
from pathlib import Path

import pytest

from kqclient import CLIENT, IP, USER
from reference import clear_all, settle, wait_values

REPO = Path(__file__).resolve().parents[2]
BIN_DIR = Path(os.environ.get("KQUOTA_BIN_DIR", REPO / "target" / "release"))
KAFKA_SH = os.environ.get("KQUOTA_KAFKA_SH", str(REPO / "interop" / "kafka" / "kafka.sh"))
JVM_TIMEOUT_S = 120

NON_ASCII = "rk-Jürgen 李"
ODD_CLIENT = "rk app/1"
COMMA = "rk-a, b"
TRAILING = "rk-trailing "
LONG = "rk-" + "x" * 1000


def run(cmd, timeout=60):
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, encoding="utf-8", timeout=timeout,
                           stdin=subprocess.DEVNULL)
    except FileNotFoundError as e:
        pytest.fail(f"cannot run {cmd[0]}: {e} (tests/kafka/run.sh builds the tools)", pytrace=False)
    return p.returncode, p.stdout, p.stderr


def tool(name, bootstrap, *args):
    return run([str(BIN_DIR / name), "--bootstrap-server", bootstrap, *args])


def config_command(bootstrap, *args):
    code, out, err = run([KAFKA_SH, "java", "kafka.admin.ConfigCommand", "--bootstrap-server", bootstrap, *args],
                         timeout=JVM_TIMEOUT_S)
    return code, out, "\n".join(line for line in err.splitlines() if "SLF4J" not in line)


def ok(result, what):
    code, out, err = result
    assert (code, err) == (0, ""), f"{what}: exit {code}\nstdout:\n{out}\nstderr:\n{err}"
    return out


@pytest.fixture(scope="module")
def stored(kafka, kafka_quotas):
    """The odd entries, stored in Kafka; removed again afterwards so that no other suite sees them."""
    clear_all(kafka_quotas)
    bootstrap = kafka.bootstrap
    # The command: Kafka keeps the host name.
    assert ok(tool("kafka-configs", bootstrap, "--alter", "--ip", "localhost", "--add-config",
                   "connection_creation_rate=5"), "--ip localhost") == "Completed updating config for ip localhost.\n"
    for args in (
        ("--user", "<default>", "--add-config", "producer_byte_rate=1000"),  # the name, not the default
        ("--user-defaults", "--add-config", "producer_byte_rate=2000"),
        ("--user", NON_ASCII, "--client", ODD_CLIENT, "--add-config", "request_percentage=12.5"),
        ("--user", TRAILING, "--add-config", "producer_byte_rate=3"),
        ("--user", LONG, "--add-config", "producer_byte_rate=4"),
    ):
        ok(tool("kafka-configs", bootstrap, "--alter", *args), f"kafka-configs {args[:2]}")
    # Kafka's own tool: a name with a comma and a near-whole byte rate (D4), and the ip default.
    for args in (
        ("--entity-type", "users", "--entity-name", COMMA, "--add-config", "consumer_byte_rate=5.0000001"),
        ("--entity-type", "ips", "--entity-default", "--add-config", "connection_creation_rate=9"),
    ):
        code, out, err = config_command(bootstrap, "--alter", *args)
        assert code == 0, f"ConfigCommand {args}: {(code, out, err)}"
    # What no tool sends: a NaN value (Kafka accepts it, D3) and a key no Kafka 4.3 knows.
    kafka_quotas.alter(1, [(((USER, "rk-nan"),), {"request_percentage": math.nan})]).assert_ok()
    future = kafka_quotas.alter(1, [(((USER, "rk-future"),), {"future_quota_rate": 3.0})])
    code, message = future[((USER, "rk-future"),)]
    future_stored = code == 0
    if not future_stored:  # Kafka 4.3 knows its keys; a later Kafka may store more, and then it is listed
        assert (code, message) == (42, "Invalid configuration key future_quota_rate"), (code, message)

    wait_values(kafka_quotas, ((IP, "localhost"),), {"connection_creation_rate": 5.0})
    wait_values(kafka_quotas, ((IP, None),), {"connection_creation_rate": 9.0})
    wait_values(kafka_quotas, ((USER, "<default>"),), {"producer_byte_rate": 1000.0})
    wait_values(kafka_quotas, ((USER, None),), {"producer_byte_rate": 2000.0})
    wait_values(kafka_quotas, ((USER, NON_ASCII), (CLIENT, ODD_CLIENT)), {"request_percentage": 12.5})
    wait_values(kafka_quotas, ((USER, TRAILING),), {"producer_byte_rate": 3.0})
    wait_values(kafka_quotas, ((USER, LONG),), {"producer_byte_rate": 4.0})
    wait_values(kafka_quotas, ((USER, COMMA),), {"consumer_byte_rate": 5.0000001})
    # NaN is not equal to itself: wait until the key is there.
    settle(lambda: "request_percentage" in kafka_quotas.values_of(1, ((USER, "rk-nan"),)), "NaN for rk-nan")
    if future_stored:
        wait_values(kafka_quotas, ((USER, "rk-future"),), {"future_quota_rate": 3.0})
    yield bootstrap, future_stored
    clear_all(kafka_quotas)


def expected_list(future_stored):
    future = "{user=rk-future}\nfuture_quota_rate 3\n\n" if future_stored else ""
    return (
        '{user="<default>"}\nproducer_byte_rate broker_bps 1000\n\n'
        f"{{user={NON_ASCII}, client-id={ODD_CLIENT}}}\nrequest_percentage percent 12.5\n\n"
        f'{{user="{COMMA}"}}\nconsumer_byte_rate broker_bps 5.0000001\n\n'
        + future +
        "{user=rk-nan}\nrequest_percentage percent NaN\n\n"
        f'{{user="{TRAILING}"}}\nproducer_byte_rate broker_bps 3\n\n'
        f"{{user={LONG}}}\nproducer_byte_rate broker_bps 4\n\n"
        "{user=<default>}\nproducer_byte_rate broker_bps 2000\n\n"
        "{ip=localhost}\nconnection_creation_rate connections_per_sec 5\n\n"
        "{ip=<default>}\nconnection_creation_rate connections_per_sec 9\n"
    )


def test_kafka_quotas_lists_everything_kafka_stores(stored):
    bootstrap, future_stored = stored
    assert ok(tool("kafka-quotas", bootstrap, "--list"), "--list") == expected_list(future_stored)
    assert ok(tool("kafka-quotas", bootstrap, "--list", "--names=ip=localhost"), "--list ip") == (
        "{ip=localhost}\nconnection_creation_rate connections_per_sec 5\n")
    assert ok(tool("kafka-quotas", bootstrap, "--list", "--defaults=ip"), "--list the ip default") == (
        "{ip=<default>}\nconnection_creation_rate connections_per_sec 9\n")
    assert ok(tool("kafka-quotas", bootstrap, "--list", "--names=user=<default>"), "--list <default>") == (
        '{user="<default>"}\nproducer_byte_rate broker_bps 1000\n')
    # The seed's --match=prefix=NAME: a name of any type that begins with NAME.
    assert ok(tool("kafka-quotas", bootstrap, "--list", "--match=prefix=rk app"), "--match=prefix=") == (
        f"{{user={NON_ASCII}, client-id={ODD_CLIENT}}}\nrequest_percentage percent 12.5\n")
    assert ok(tool("kafka-quotas", bootstrap, "--list", "--match=prefix=local"), "--match=prefix=") == (
        "{ip=localhost}\nconnection_creation_rate connections_per_sec 5\n")

    listed = json.loads(ok(tool("kafka-quotas", bootstrap, "--list", "--output=json"), "--list json"))
    assert listed["version"] == 1
    by_entity = {json.dumps(e["entity"], sort_keys=True): e["quotas"] for e in listed["entities"]}
    assert len(by_entity) == len(listed["entities"]) == (10 if future_stored else 9)

    def quotas(**entity):
        return by_entity[json.dumps(entity, sort_keys=True)]

    assert quotas(ip="localhost") == [{"type": "connection_creation_rate", "unit": "connections_per_sec", "value": 5}]
    assert quotas(ip=None) == [{"type": "connection_creation_rate", "unit": "connections_per_sec", "value": 9}]
    assert quotas(user="<default>") == [{"type": "producer_byte_rate", "unit": "broker_bps", "value": 1000}]
    assert quotas(user=None) == [{"type": "producer_byte_rate", "unit": "broker_bps", "value": 2000}]
    assert quotas(**{"user": NON_ASCII, "client-id": ODD_CLIENT}) == [
        {"type": "request_percentage", "unit": "percent", "value": 12.5}]
    assert quotas(user=COMMA) == [{"type": "consumer_byte_rate", "unit": "broker_bps", "value": 5.0000001}]
    assert quotas(user=TRAILING) == [{"type": "producer_byte_rate", "unit": "broker_bps", "value": 3}]
    assert quotas(user=LONG) == [{"type": "producer_byte_rate", "unit": "broker_bps", "value": 4}]
    assert quotas(user="rk-nan") == [{"type": "request_percentage", "unit": "percent", "value": "NaN"}]
    if future_stored:
        assert quotas(user="rk-future") == [{"key": "future_quota_rate", "type": None, "unit": None, "value": 3}]


def test_kafka_quotas_describes_what_kafka_stores(stored):
    bootstrap, _ = stored
    assert ok(tool("kafka-quotas", bootstrap, "--describe", "--names=ip=localhost", "--include-overrides"),
              "describe ip") == (
        "connection_creation_rate    connections_per_sec 5 {ip=localhost}\n"
        " * connection_creation_rate connections_per_sec 9 {ip=<default>}\n")
    assert ok(tool("kafka-quotas", bootstrap, "--describe", "--names=user=<default>", "--include-overrides"),
              "describe the user named <default>") == (
        'producer_byte_rate    broker_bps 1000 {user="<default>"}\n'
        " * producer_byte_rate broker_bps 2000 {user=<default>}\n")
    assert ok(tool("kafka-quotas", bootstrap, "--describe", f"--names=user={NON_ASCII},client-id={ODD_CLIENT}"),
              "describe non-ASCII") == (
        "producer_byte_rate broker_bps 2000 {user=<default>}\n"
        f"request_percentage percent    12.5 {{user={NON_ASCII}, client-id={ODD_CLIENT}}}\n")
    assert ok(tool("kafka-quotas", bootstrap, "--describe", "--names=user=rk-nan"), "describe NaN") == (
        "producer_byte_rate broker_bps 2000 {user=<default>}\n"
        "request_percentage percent    NaN  {user=rk-nan}\n")
    assert ok(tool("kafka-quotas", bootstrap, "--describe", f"--names=user={LONG}"), "describe long") == (
        f"producer_byte_rate broker_bps 4 {{user={LONG}}}\n")

    described = json.loads(ok(tool("kafka-quotas", bootstrap, "--describe", "--names=ip=localhost",
                                    "--include-overrides", "--output", "json"), "describe ip json"))
    assert described == {"version": 1, "ip": "localhost", "quotas": [
        {"type": "connection_creation_rate", "unit": "connections_per_sec", "value": 5, "entity": {"ip": "localhost"},
         "level": None, "overridden": [{"value": 9, "entity": {"ip": None}, "level": None}]}]}
    described = json.loads(ok(tool("kafka-quotas", bootstrap, "--describe", "--names=user=<default>",
                                    "--output", "json"), "describe <default> json"))
    assert described == {"version": 1, "user": "<default>", "client-id": None, "quotas": [
        {"type": "producer_byte_rate", "unit": "broker_bps", "value": 1000, "entity": {"user": "<default>"},
         "level": 3, "overridden": []}]}


def test_kafka_configs_describes_what_kafka_stores_as_config_command_does(stored):
    bootstrap, future_stored = stored
    users = [
        "Quota configs for user-principal '<default>' are producer_byte_rate=1000.0",
        "Quota configs for the default user-principal are producer_byte_rate=2000.0",
        f"Quota configs for user-principal '{COMMA}' are consumer_byte_rate=5.0000001",
        f"Quota configs for user-principal '{TRAILING}' are producer_byte_rate=3.0",
        f"Quota configs for user-principal '{LONG}' are producer_byte_rate=4.0",
        "Quota configs for user-principal 'rk-nan' are request_percentage=NaN",
    ] + (["Quota configs for user-principal 'rk-future' are future_quota_rate=3.0"] if future_stored else [])
    for args, lines in (
        (("--entity-type", "users"), users),
        (("--entity-type", "ips"), ["Quota configs for ip 'localhost' are connection_creation_rate=5.0",
                                    "Quota configs for the default ip are connection_creation_rate=9.0"]),
        (("--ip", "localhost"), ["Quota configs for ip 'localhost' are connection_creation_rate=5.0"]),
    ):
        ours = ok(tool("kafka-configs", bootstrap, "--describe", *args), f"kafka-configs --describe {args}")
        assert sorted(ours.splitlines()) == sorted(lines), ours
        # Kafka's own tool prints the same bytes, in the same (HashMap) order.
        code, theirs, err = config_command(bootstrap, "--describe", *args)
        assert (code, theirs) == (0, ours), f"ConfigCommand --describe {args}: {(code, theirs, err)}"

    # Every user and client-id entity, the non-ASCII one too (not compared with the JVM, whose
    # standard output encoding depends on the locale).
    ours = ok(tool("kafka-configs", bootstrap, "--describe", "--entity-type", "users", "--entity-type", "clients"),
              "kafka-configs --describe users and clients")
    assert ours == (f"Quota configs for user-principal '{NON_ASCII}', client-id '{ODD_CLIENT}' are "
                    "request_percentage=12.5\n")

    described = json.loads(ok(tool("kafka-configs", bootstrap, "--describe", "--entity-type", "users",
                                   "--output", "json"), "kafka-configs --describe json"))
    assert described["version"] == 1
    entities = {json.dumps(e["entity"], sort_keys=True): e["quotas"] for e in described["entities"]}
    assert len(entities) == len(users)
    assert entities[json.dumps({"user": "<default>"})] == [
        {"type": "producer_byte_rate", "unit": "broker_bps", "value": 1000}]
    assert entities[json.dumps({"user": None})] == [
        {"type": "producer_byte_rate", "unit": "broker_bps", "value": 2000}]
    assert entities[json.dumps({"user": "rk-nan"})] == [
        {"type": "request_percentage", "unit": "percent", "value": "NaN"}]
    described = json.loads(ok(tool("kafka-configs", bootstrap, "--describe", "--entity-type", "ips",
                                   "--output", "json"), "kafka-configs --describe ips json"))
    assert sorted(described["entities"], key=lambda e: e["entity"]["ip"] or "") == [
        {"entity": {"ip": None}, "quotas": [
            {"type": "connection_creation_rate", "unit": "connections_per_sec", "value": 9}]},
        {"entity": {"ip": "localhost"}, "quotas": [
            {"type": "connection_creation_rate", "unit": "connections_per_sec", "value": 5}]},
    ]
