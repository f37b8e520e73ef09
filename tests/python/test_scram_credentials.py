"""kafka-python 3.0.12's describe_user_scram_credentials() against kquotad: apiKey 50 is Kafka's
DescribeUserScramCredentials by default. Without SASL users it knows nobody; with a credentials file it
tells each user's mechanisms and iterations (never salts or keys), Kafka's per-user errors for unknown
and repeated users, and CLUSTER_AUTHORIZATION_FAILED to a principal that may not describe. With
--draft-alter-quotas true, 50 is the seeds' draft again and the call fails at once.

Every call must answer within CALL_BOUND_S: the admin client's own timeouts are make_admin's, which
this suite uses everywhere; the bound is what shows that nothing waits for one of them."""

import subprocess
import time

import pytest
import kafka.errors as Errors
from kafka.admin._users import ScramMechanism

from kqclient import KQUOTAD_BIN

CALL_BOUND_S = 5
NOT_FOUND = "Attempt to describe a user credential that does not exist: "
DUPLICATE = "Cannot describe SCRAM credentials for the same user twice in a single request: "
# user -> [(mechanism, iterations)]; alice has both mechanisms (the tool's default), bob one.
USERS = {
    "admin": [("SCRAM-SHA-256", 4096), ("SCRAM-SHA-512", 4096)],
    "alice": [("SCRAM-SHA-256", 4096), ("SCRAM-SHA-512", 4096)],
    "bob": [("SCRAM-SHA-512", 8192)],
}
PASSWORD = "pw-of-"


def timed(call, *args):
    started = time.monotonic()
    result = call(*args)
    took = time.monotonic() - started
    assert took < CALL_BOUND_S, f"{call.__name__}{args} took {took:.1f} s"
    return result


def credentials_file(path):
    for user, creds in USERS.items():
        mechanisms = {m for m, _ in creds}
        args = ["--user", user, "--file", str(path)]
        if len(mechanisms) == 1:
            mechanism, iterations = creds[0]
            args += ["--mechanism", mechanism, "--iterations", str(iterations)]
        done = subprocess.run([str(KQUOTAD_BIN), "scram-credential", *args], input=PASSWORD + user + "\n",
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, f"kquotad scram-credential failed: {done.stderr}"
    return path


def described(creds):
    return {"error": None,
            "credential_infos": [{"mechanism": ScramMechanism[m.replace("-", "_")], "iterations": i}
                                 for m, i in creds]}


def missing(user):
    return {"error": NOT_FOUND + user, "credential_infos": []}


def test_without_sasl_users_nobody_is_known(admin):
    assert timed(admin.describe_user_scram_credentials) == {}
    assert timed(admin.describe_user_scram_credentials, []) == {}
    assert timed(admin.describe_user_scram_credentials, ["alice"]) == {"alice": missing("alice")}
    assert timed(admin.describe_user_scram_credentials, ["alice", "bob", "alice"]) == {
        "alice": {"error": DUPLICATE + "alice", "credential_infos": []},
        "bob": missing("bob"),
    }


@pytest.fixture(scope="module")
def with_users(module_servers, tmp_path_factory):
    creds = credentials_file(tmp_path_factory.mktemp("scram") / "users.json")
    text = creds.read_text()
    assert "stored_key" in text and PASSWORD not in text, text
    server = module_servers.start(
        listeners="PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        anonymous_super_user=False,
        extra_args=["--super-users", "User:admin", "--sasl-credentials-file", str(creds)])
    server.credentials_text = text
    return server


def sasl_admin(module_servers, server, user):
    return module_servers.admin(
        server, bootstrap_servers=server.bootstrap_for("SASL_PLAINTEXT"), security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="SCRAM-SHA-512", sasl_plain_username=user, sasl_plain_password=PASSWORD + user)


def test_sasl_users_are_described_to_a_super_user(module_servers, with_users):
    admin = sasl_admin(module_servers, with_users, "admin")
    everyone = {u: described(c) for u, c in USERS.items()}
    assert timed(admin.describe_user_scram_credentials) == everyone
    assert timed(admin.describe_user_scram_credentials, []) == everyone
    assert timed(admin.describe_user_scram_credentials, ["bob", "carol"]) == {
        "bob": described(USERS["bob"]), "carol": missing("carol")}
    assert timed(admin.describe_user_scram_credentials, ["bob", "bob"]) == {
        "bob": {"error": DUPLICATE + "bob", "credential_infos": []}}


@pytest.mark.parametrize("who", ["anonymous", "authenticated-user"])
def test_only_super_users_may_describe(module_servers, with_users, who):
    # Kafka's DESCRIBE on the cluster, which without ACLs only super users have: the answer names every
    # SASL user. PLAINTEXT is User:ANONYMOUS; alice is authenticated but not a super user.
    if who == "anonymous":
        client = module_servers.admin(with_users, bootstrap_servers=with_users.bootstrap_for("PLAINTEXT"))
    else:
        client = sasl_admin(module_servers, with_users, "alice")
    for users in (None, ["alice"]):
        with pytest.raises(Errors.ClusterAuthorizationFailedError) as e:
            timed(client.describe_user_scram_credentials, users)
        assert "Cluster authorization failed." in str(e.value)


def test_the_draft_setting_gives_50_back_to_the_draft(servers):
    server = servers.start(extra_args=["--draft-alter-quotas", "true"])
    admin = servers.admin(server)
    # The request does not decode as the draft's AlterQuotas: kquotad closes the connection.
    with pytest.raises(Errors.KafkaError):
        timed(admin.describe_user_scram_credentials, ["alice"])
    assert "error getting request for apiKey 50" in server.log()
