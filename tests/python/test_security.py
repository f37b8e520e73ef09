"""kafka-python 3.0.12 authenticates against kquotad with SASL PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512, over
SASL_PLAINTEXT and SASL_SSL, and is refused with wrong credentials. Only super.users alter quotas:
another authenticated user's AlterClientQuotas is answered CLUSTER_AUTHORIZATION_FAILED (31) per entity
and changes nothing.

Credentials are made with `kquotad scram-credential`; the SASL_SSL certificate with `cryptography`
(installed by run.sh from requirements.txt)."""

import datetime
import ipaddress
import subprocess
import time

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

import pytest
from kafka.errors import KafkaError

from kqclient import EXACT, KQUOTAD_BIN, USER, QuotaClient, ent

PASSWORDS = {"admin": "admin-secret", "alice": "alice pa$$word"}
MECHANISMS = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
CLUSTER_AUTHORIZATION_FAILED = 31


def scram_credentials(path):
    for user, password in PASSWORDS.items():
        done = subprocess.run(
            [str(KQUOTAD_BIN), "scram-credential", "--user", user, "--file", str(path)],
            input=password + "\n", capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, f"kquotad scram-credential failed: {done.stderr}"
    text = path.read_text()
    assert "admin-secret" not in text and "stored_key" in text, text
    return path


def self_signed(dir_path):
    """A self-signed server certificate for localhost and 127.0.0.1, and its key, as PEM files."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.SubjectAlternativeName(
            [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = dir_path / "server.crt", dir_path / "server.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    return cert_path, key_path


@pytest.fixture(scope="module")
def secured(module_servers, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("security")
    creds = scram_credentials(tmp / "users.json")
    cert, key = self_signed(tmp)
    server = module_servers.start(
        listeners="SASL_PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
        anonymous_super_user=False,
        extra_args=[
            "--super-users", "User:admin",
            "--sasl-enabled-mechanisms", ",".join(MECHANISMS),
            "--sasl-credentials-file", str(creds),
            "--override", "ssl.keystore.type=PEM",
            "--override", f"ssl.keystore.certificate.chain={cert.read_text()}",
            "--override", f"ssl.keystore.key={key.read_text()}",
            "--override", "connection.failed.authentication.delay.ms=10",
        ])
    server.cafile = str(cert)
    return server


def sasl_admin(module_servers, server, protocol, mechanism, user, password, **extra):
    config = dict(
        bootstrap_servers=server.bootstrap_for(protocol),
        security_protocol=protocol,
        sasl_mechanism=mechanism,
        sasl_plain_username=user,
        sasl_plain_password=password,
    )
    if protocol == "SASL_SSL":
        config.update(ssl_cafile=server.cafile, ssl_check_hostname=True)
    config.update(extra)
    return module_servers.admin(server, **config)


PROTOCOLS = ["SASL_PLAINTEXT", "SASL_SSL"]
CASES = [(p, m) for p in PROTOCOLS for m in MECHANISMS]
IDS = [f"{p}-{m}" for p, m in CASES]


@pytest.mark.parametrize("protocol,mechanism", CASES, ids=IDS)
def test_super_user_alters_and_user_describes(module_servers, secured, protocol, mechanism):
    admin = QuotaClient(sasl_admin(module_servers, secured, protocol, mechanism, "admin", PASSWORDS["admin"]))
    entity = ent((USER, f"{protocol}-{mechanism}"))
    admin.alter(1, [(entity, {"producer_byte_rate": 1024.0})]).assert_ok()
    alice = QuotaClient(sasl_admin(module_servers, secured, protocol, mechanism, "alice", PASSWORDS["alice"]))
    assert alice.values_of(1, entity) == {"producer_byte_rate": 1024.0}


@pytest.mark.parametrize("protocol,mechanism", CASES, ids=IDS)
def test_authenticated_non_super_user_may_not_alter(module_servers, secured, protocol, mechanism):
    alice = QuotaClient(sasl_admin(module_servers, secured, protocol, mechanism, "alice", PASSWORDS["alice"]))
    entity = ent((USER, f"denied-{protocol}-{mechanism}"))
    for version in (0, 1):
        for validate_only in (False, True):
            res = alice.alter(version, [(entity, {"consumer_byte_rate": 5.0})], validate_only=validate_only)
            res.assert_error(entity, CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")
    assert alice.values_of(1, entity) == {}


@pytest.mark.parametrize("protocol,mechanism", CASES, ids=IDS)
@pytest.mark.parametrize("user,password", [("admin", "not-the-password"), ("nobody", "admin-secret")],
                         ids=["wrong-password", "unknown-user"])
def test_wrong_credentials_are_refused(module_servers, secured, protocol, mechanism, user, password):
    before = secured.log().count("Failed authentication with /127.0.0.1")
    started = time.monotonic()
    with pytest.raises(KafkaError) as refused:
        sasl_admin(module_servers, secured, protocol, mechanism, user, password,
                   request_timeout_ms=3000, bootstrap_timeout_ms=3000)
    assert time.monotonic() - started < 30
    assert secured.log().count("Failed authentication with /127.0.0.1") > before, secured.log()
    # kquotad still serves a good client afterwards.
    admin = QuotaClient(sasl_admin(module_servers, secured, protocol, mechanism, "admin", PASSWORDS["admin"]))
    admin.describe(1, [(USER, EXACT, "nobody")]).assert_ok()
    assert refused.value is not None
