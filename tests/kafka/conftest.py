"""Fixtures for the suites that take Apache Kafka as the reference: the broker that tests/kafka/run.sh
started (KQUOTA_KAFKA_BOOTSTRAP), a kquotad in Kafka's sub-quota policy, and admin clients for both.

A broker or server that is missing or does not answer fails the run loudly; nothing here skips."""

import os
import socket
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "python"))

from kqclient import Kquotad, QuotaClient, make_admin  # noqa: E402

class Endpoint:
    """Anything with a bootstrap address, as make_admin wants it."""

    def __init__(self, bootstrap):
        self.bootstrap = bootstrap
        self.port = int(bootstrap.rsplit(":", 1)[1])


@pytest.fixture(scope="session")
def kafka():
    bootstrap = os.environ.get("KQUOTA_KAFKA_BOOTSTRAP")
    if not bootstrap:
        pytest.fail("KQUOTA_KAFKA_BOOTSTRAP is not set: run this suite with tests/kafka/run.sh, which starts "
                    "the reference Apache Kafka broker (interop/kafka/kafka.sh start <dir>)", pytrace=False)
    host, port = bootstrap.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), 5).close()
    except OSError as e:
        pytest.fail(f"the reference Kafka broker at {bootstrap} does not answer: {e}", pytrace=False)
    return Endpoint(bootstrap)


@pytest.fixture(scope="session")
def kquotad(tmp_path_factory):
    """kquotad with Kafka's sub-quota rules, the configuration that claims to behave as Apache Kafka."""
    server = Kquotad(tmp_path_factory.mktemp("kquotad-data"), tmp_path_factory.mktemp("kquotad-log") / "stderr",
                     ["--sub-quota-policy", "kafka"])
    try:
        server.start()
    except AssertionError as e:
        pytest.fail(str(e), pytrace=False)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def kafka_quotas(kafka):
    admin = make_admin(kafka, client_id="kquota-reference")
    yield QuotaClient(admin)
    admin.close()


@pytest.fixture(scope="session")
def kquotad_quotas(kquotad):
    admin = make_admin(kquotad, client_id="kquota-reference")
    yield QuotaClient(admin)
    admin.close()


def pytest_sessionfinish(session, exitstatus):
    # The suite must never pass while skipping or expecting failures.
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None:
        return
    skipped = len(reporter.stats.get("skipped", [])) + len(reporter.stats.get("xfailed", []))
    passed = len(reporter.stats.get("passed", []))
    if exitstatus == 0 and (skipped or passed == 0):
        session.exitstatus = 1
        reporter.write_line(
            f"Kafka reference suite: {passed} passed, {skipped} skipped/xfailed: skipping is not allowed", red=True)
