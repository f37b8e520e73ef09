"""Fixtures: a kquotad per test module (fresh temp data dir, free port), a KafkaAdminClient bootstrapped
against it, and a factory for tests that need their own servers (restarts, a known data set).

A server that does not start fails the test loudly; nothing here skips."""

import pytest

from kqclient import Kquotad, QuotaClient, make_admin


class ServerFactory:
    def __init__(self, tmp_path_factory, label):
        self.tmp = tmp_path_factory
        self.label = label
        self.servers = []
        self.admins = []

    def data_dir(self):
        return self.tmp.mktemp(f"{self.label}-data")

    def start(self, data_dir=None, extra_args=(), **options):
        """options: listeners=, anonymous_super_user= (see Kquotad)."""
        data_dir = data_dir if data_dir is not None else self.data_dir()
        log = self.tmp.mktemp(f"{self.label}-log") / "kquotad.stderr"
        server = Kquotad(data_dir, log, extra_args, **options)
        self.servers.append(server)
        try:
            server.start()
        except AssertionError as e:
            pytest.fail(str(e), pytrace=False)
        return server

    def admin(self, server, **extra):
        admin = make_admin(server, **extra)
        self.admins.append(admin)
        return admin

    def close_admin(self, admin):
        if admin in self.admins:
            self.admins.remove(admin)
        admin.close()

    def quotas(self, server):
        return QuotaClient(self.admin(server))

    def teardown(self):
        errors = []
        for admin in self.admins:
            try:
                admin.close()
            except Exception as e:  # closing must not hide a server failure
                errors.append(f"admin close: {e!r}")
        self.admins.clear()
        for server in self.servers:
            try:
                server.stop()
            except AssertionError as e:
                errors.append(str(e))
        self.servers.clear()
        if errors:
            pytest.fail("\n".join(errors), pytrace=False)


@pytest.fixture(scope="module")
def module_servers(tmp_path_factory, request):
    factory = ServerFactory(tmp_path_factory, request.module.__name__)
    yield factory
    factory.teardown()


@pytest.fixture(scope="module")
def kquotad(module_servers):
    """The module's kquotad: fresh temp data dir, a free port."""
    return module_servers.start()


@pytest.fixture(scope="module")
def admin(module_servers, kquotad):
    return module_servers.admin(kquotad)


@pytest.fixture(scope="module")
def quotas(admin):
    return QuotaClient(admin)


@pytest.fixture
def servers(tmp_path_factory, request):
    """Per-test factory of kquotad processes (and admin clients); all stopped at teardown."""
    factory = ServerFactory(tmp_path_factory, request.node.name[:40])
    yield factory
    factory.teardown()


@pytest.fixture
def uniq(request):
    """Entity names unique to this test (and its parameters) on the shared module server."""
    base = request.node.name.replace("[", ".").replace("]", "").replace("test_", "", 1)

    def name(suffix):
        return f"{base}.{suffix}"

    return name


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
            f"kquotad suite: {passed} passed, {skipped} skipped/xfailed: skipping is not allowed", red=True)
