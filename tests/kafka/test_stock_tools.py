"""Kafka's own ConfigCommand, with its default timeouts, against a kquotad started as the README starts it
(default settings plus --super-users User:ANONYMOUS), and against the reference Kafka broker holding the
same quotas. Describing users asks apiKey 50 for SCRAM credentials (DescribeUserScramCredentials), which
kquotad now serves: each command exits 0 within STOCK_TOOL_BOUND_S and prints what Kafka prints. A second
kquotad, with SASL users from a credentials file, prints the same SCRAM lines as Kafka holding the same
users. Changing SCRAM credentials (AlterUserScramCredentials, apiKey 51) is not served: the tool fails at
once with UnsupportedVersionException."""

import os
import subprocess
import time
from pathlib import Path

import pytest
from kafka.admin._users import ScramMechanism

from kqclient import KQUOTAD_BIN, USER, CLIENT, Kquotad, QuotaClient, make_admin
from reference import clear_all, settle, wait_values
REPO = Path(__file__).resolve().parents[2]
KAFKA_SH = os.environ.get("KQUOTA_KAFKA_SH", str(REPO / "interop" / "kafka" / "kafka.sh"))
JVM_TIMEOUT_S = 120

# A JVM start plus a few requests; a wait for any of the client's timeouts (30 s per request by
# default) would exceed it many times over.
STOCK_TOOL_BOUND_S = 5

QUOTAS = [
    (((USER, "s-alice"),), {"producer_byte_rate": 1024.0}),
    (((USER, "s-bob"),), {"consumer_byte_rate": 2048.0, "request_percentage": 75.0}),
    (((USER, None),), {"producer_byte_rate": 500.0}),
    (((USER, "s-alice"), (CLIENT, "s-app")), {"consumer_byte_rate": 10.0}),
]
DESCRIBES = {
    "all users": ("--describe", "--entity-type", "users"),
    "one user": ("--describe", "--entity-type", "users", "--entity-name", "s-alice"),
    "the default user": ("--describe", "--entity-type", "users", "--entity-default"),
    "a user with SCRAM credentials": ("--describe", "--entity-type", "users", "--entity-name", "s-carol"),
}
# Kafka's wording, as the reference broker prints it (asserted against it below as well).
WANT = {
    "one user": "Quota configs for user-principal 's-alice' are producer_byte_rate=1024.0\n",
    "the default user": "Quota configs for the default user-principal are producer_byte_rate=500.0\n",
}
# One mechanism each: Kafka orders a user's mechanisms by an enum's identity hash, which varies by run;
# and names in different buckets of Kafka's HashMap (0 and 11), whose order within a bucket follows
# that hash too.
SCRAM_USERS = {"s-carol": ("SCRAM-SHA-256", 4096), "s-erin": ("SCRAM-SHA-512", 8192)}
PASSWORD = "stock-tools-secret"


def config_command(bootstrap, *args):
    """Kafka's ConfigCommand with no --command-config: the Admin client's default timeouts."""
    cmd = [KAFKA_SH, "java", "kafka.admin.ConfigCommand", "--bootstrap-server", bootstrap, *args]
    started = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=JVM_TIMEOUT_S, stdin=subprocess.DEVNULL)
    took = time.monotonic() - started
    err = "\n".join(line for line in p.stderr.splitlines() if "SLF4J" not in line)
    return p.returncode, p.stdout, err, took


def apply_quotas(side):
    side.alter(1, QUOTAS).assert_ok()
    for entity, values in QUOTAS:
        wait_values(side, entity, values)


def start_kquotad(tmp, label, **options):
    server = Kquotad(tmp.mktemp(f"{label}-data"), tmp.mktemp(f"{label}-log") / "stderr", **options)
    try:
        server.start()
    except AssertionError as e:
        pytest.fail(str(e), pytrace=False)
    return server


@pytest.fixture(scope="module")
def readme_kquotad(tmp_path_factory):
    """kquotad as the README starts it: defaults and --super-users User:ANONYMOUS."""
    server = start_kquotad(tmp_path_factory, "readme")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def scram_kquotad(tmp_path_factory):
    """The README's kquotad plus a SASL listener, so that its credentials file is loaded."""
    creds = tmp_path_factory.mktemp("scram") / "users.json"
    for user, (mechanism, iterations) in SCRAM_USERS.items():
        done = subprocess.run([str(KQUOTAD_BIN), "scram-credential", "--user", user, "--mechanism", mechanism,
                               "--iterations", str(iterations), "--file", str(creds)],
                              input=PASSWORD + "\n", capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
    server = start_kquotad(tmp_path_factory, "scram", listeners="PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
                           extra_args=["--sasl-credentials-file", str(creds)])
    yield server
    server.stop()


@pytest.fixture(scope="module")
def kafka_with_quotas(kafka, kafka_quotas):
    clear_all(kafka_quotas)
    apply_quotas(kafka_quotas)
    yield kafka
    clear_all(kafka_quotas)


def describe_both(kafka_bootstrap, kquotad_bootstrap, names):
    results = {}
    for name in names:
        results[name] = (config_command(kafka_bootstrap, *DESCRIBES[name]),
                         config_command(kquotad_bootstrap, *DESCRIBES[name]))
    return results


def test_config_command_describes_users_on_kquotad_as_on_kafka(kafka_with_quotas, readme_kquotad):
    admin = make_admin(readme_kquotad, client_id="stock-tools")
    apply_quotas(QuotaClient(admin))
    admin.close()
    results = describe_both(kafka_with_quotas.bootstrap, readme_kquotad.bootstrap,
                            ["all users", "one user", "the default user"])
    for name, (kafka_r, kq_r) in results.items():
        code, out, err, took = kq_r
        print(f"ConfigCommand {name}: kquotad {took:.1f} s, Kafka {kafka_r[3]:.1f} s")
        assert kafka_r[0] == 0 and kafka_r[2] == "", f"Kafka, {name}: {kafka_r}"
        assert (code, out, err) == (0, kafka_r[1], ""), f"kquotad, {name}: {kq_r}; Kafka: {kafka_r}"
        assert took < STOCK_TOOL_BOUND_S, f"kquotad, {name}: {took:.1f} s"
        if name in WANT:
            assert out == WANT[name], out
    # Every user, with no line about SCRAM credentials: there are none.
    assert sorted(results["all users"][1][1].splitlines()) == [
        "Quota configs for the default user-principal are producer_byte_rate=500.0",
        "Quota configs for user-principal 's-alice' are producer_byte_rate=1024.0",
        "Quota configs for user-principal 's-bob' are consumer_byte_rate=2048.0, request_percentage=75.0",
    ]


def test_config_command_prints_scram_users_as_kafka_does(kafka_with_quotas, scram_kquotad):
    kafka_bootstrap = kafka_with_quotas.bootstrap
    kafka_admin = make_admin(kafka_with_quotas, client_id="stock-tools")
    try:
        for user, (mechanism, iterations) in SCRAM_USERS.items():
            code, out, err, _ = config_command(
                kafka_bootstrap, "--alter", "--add-config", f"{mechanism}=[iterations={iterations},password={PASSWORD}]",
                "--entity-type", "users", "--entity-name", user)
            assert (code, err) == (0, ""), (out, err)
        want = {u: {"error": None, "credential_infos": [
            {"mechanism": ScramMechanism[m.replace("-", "_")], "iterations": i}]} for u, (m, i) in SCRAM_USERS.items()}
        settle(lambda: kafka_admin.describe_user_scram_credentials(list(SCRAM_USERS)) == want,
               "the SCRAM users")
        admin = make_admin(scram_kquotad, bootstrap_servers=scram_kquotad.bootstrap_for("PLAINTEXT"))
        assert admin.describe_user_scram_credentials(list(SCRAM_USERS)) == want
        apply_quotas(QuotaClient(admin))
        admin.close()

        results = describe_both(kafka_bootstrap, scram_kquotad.bootstrap_for("PLAINTEXT"),
                                ["all users", "a user with SCRAM credentials"])
        for name, (kafka_r, kq_r) in results.items():
            print(f"ConfigCommand {name}: kquotad {kq_r[3]:.1f} s, Kafka {kafka_r[3]:.1f} s")
            assert kafka_r[0] == 0 and kafka_r[2] == "", f"Kafka, {name}: {kafka_r}"
            assert kq_r[:3] == (0, kafka_r[1], ""), f"kquotad, {name}: {kq_r}; Kafka: {kafka_r}"
            assert kq_r[3] < STOCK_TOOL_BOUND_S, f"kquotad, {name}: {kq_r[3]:.1f} s"
        lines = results["all users"][1][1].splitlines()
        assert [line for line in lines if line.startswith("SCRAM")] == [
            "SCRAM credential configs for user-principal 's-carol' are SCRAM-SHA-256=iterations=4096",
            "SCRAM credential configs for user-principal 's-erin' are SCRAM-SHA-512=iterations=8192",
        ], "in the order of Kafka's HashMap of names"
        assert results["a user with SCRAM credentials"][1][1] == (
            "SCRAM credential configs for user-principal 's-carol' are SCRAM-SHA-256=iterations=4096\n")
    finally:
        for user, (mechanism, _) in SCRAM_USERS.items():
            config_command(kafka_bootstrap, "--alter", "--delete-config", mechanism, "--entity-type", "users",
                           "--entity-name", user)
        kafka_admin.close()


def test_altering_scram_credentials_fails_fast(readme_kquotad):
    """AlterUserScramCredentials (51) is not advertised: Kafka's Admin fails the call at once."""
    code, out, err, took = config_command(
        readme_kquotad.bootstrap, "--alter", "--add-config", f"SCRAM-SHA-256=[iterations=4096,password={PASSWORD}]",
        "--entity-type", "users", "--entity-name", "s-gina")
    print(f"ConfigCommand --alter SCRAM: kquotad {took:.1f} s, exit {code}")
    assert code == 1, (code, out, err)
    assert "UnsupportedVersionException" in out + err, (out, err)
    assert "ALTER_USER_SCRAM_CREDENTIALS" in out + err, (out, err)
    assert took < STOCK_TOOL_BOUND_S, f"{took:.1f} s"
