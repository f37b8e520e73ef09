"""kquotad against kafka-python 3.0.12: an independent Kafka client bootstraps a KafkaAdminClient and drives
DescribeClientQuotas (48) and AlterClientQuotas (49) at versions 0 and 1, plus the bootstrap APIs.

Expected codes and messages are Apache Kafka's (KRaft controller and ClientQuotasImage), as
docs/wire.md and docs/semantics.md promise; where kquota deviates on purpose the deviation is the one
those documents name.
"""

import itertools
import math
import signal

import pytest
from kafka.protocol.admin import (
    AlterClientQuotasRequest, AlterClientQuotasResponse, DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
)

from kqclient import (
    CLIENT, DEFAULT, EXACT, IP, REMOVE, SPECIFIED, USER, QuotaClient, ent, error_name, key_of, show,
)

VERSIONS = [0, 1]
VERSION_PAIRS = list(itertools.product(VERSIONS, VERSIONS))  # (alter version, describe version)
pair_ids = [f"alter-v{a}-describe-v{d}" for a, d in VERSION_PAIRS]
version_ids = [f"v{v}" for v in VERSIONS]

INVALID_REQUEST, UNSUPPORTED_VERSION, POLICY_VIOLATION = 42, 35, 44


def ip_for(version, n):
    """A distinct IPv4 address per test and version."""
    return f"10.{version}.{n // 256}.{n % 256}"


# --------------------------------------------------------------------------------------------------
# Bootstrap: ApiVersions, Metadata, DescribeCluster through kafka-python's own admin calls.


def test_api_versions_advertised(admin):
    api = admin._manager.broker_version_data.api_versions
    assert api.get(48) == (0, 1), api
    assert api.get(49) == (0, 1), api
    assert api.get(18) == (0, 4), api
    assert api.get(3) == (0, 12), api
    assert api.get(60) == (0, 1), api


def test_describe_cluster(admin, kquotad):
    info = admin.describe_cluster()
    assert isinstance(info["cluster_id"], str) and info["cluster_id"], info
    assert info["controller_id"] == 1, info
    assert info["brokers"] == [{"broker_id": 1, "host": "127.0.0.1", "port": kquotad.port, "rack": None}], info


def test_list_topics(admin):
    assert admin.list_topics() == []


def test_describe_unknown_topic(admin):
    topics = admin.describe_topics(["no-such-topic"])
    assert [(t["name"], t["error_code"]) for t in topics] == [("no-such-topic", 3)], topics


def test_unpinned_requests_negotiate_v1(quotas, uniq):
    """Without a pinned version kafka-python picks min(its max, the broker's max) = 1 for both APIs."""
    A, D = AlterClientQuotasRequest, DescribeClientQuotasRequest
    req = A(entries=[A.EntryData(entity=[A.EntryData.EntityData(entity_type=USER, entity_name=uniq("u"))],
                                 ops=[A.EntryData.OpData(key="producer_byte_rate", value=1000.0, remove=False)])],
            validate_only=False)
    resp, _ = quotas.send(req)
    assert req.API_VERSION == 1 and resp.version == 1
    assert [(e.error_code, e.error_message) for e in resp.entries] == [(0, None)], resp
    req = D(components=[D.ComponentData(entity_type=USER, match_type=EXACT, match=uniq("u"))], strict=True)
    resp, _ = quotas.send(req)
    assert req.API_VERSION == 1 and resp.version == 1
    assert resp.error_code == 0, resp
    assert [[(e.entity_type, e.entity_name) for e in x.entity] for x in resp.entries] == [[(USER, uniq("u"))]]
    assert [(v.key, v.value) for v in resp.entries[0].values] == [("producer_byte_rate", 1000.0)]


# --------------------------------------------------------------------------------------------------
# Alter and describe round trips, every combination of versions.


@pytest.mark.parametrize("av,dv", VERSION_PAIRS, ids=pair_ids)
def test_entity_shapes_round_trip(quotas, uniq, av, dv):
    n = 4 * av + 2 * dv
    u, u2, u3, c = uniq("alice"), uniq("bob"), uniq("carol"), uniq("app")
    ip4, ip6 = ip_for(av, 10 + dv), f"2001:db8::{av}:{dv}"
    expected = {
        ent((USER, u)): {"producer_byte_rate": 1048576.0, "consumer_byte_rate": 2097152.0},
        ent((CLIENT, c)): {"consumer_byte_rate": 4096.0, "request_percentage": 12.5},
        ent((USER, u2), (CLIENT, c)): {"producer_byte_rate": 1024.0, "controller_mutation_rate": 0.5},
        ent((USER, u), (CLIENT, c)): {"producer_byte_rate": 1000.0},
        ent((CLIENT, uniq("solo")), (USER, u3)): {"request_percentage": 250.0},
        ent((IP, ip4)): {"connection_creation_rate": 25.0 + n},
        ent((IP, ip6)): {"connection_creation_rate": 7.0},
        ent((USER, u3)): {"producer_byte_rate:shares": 3.0, "producer_byte_rate": 5000.0,
                          "consumer_byte_rate:bps": 8000.0},
    }
    res = quotas.alter(av, list(expected.items()))
    assert set(res.results) == {key_of(e) for e in expected}, res
    res.assert_ok()

    for entity, values in expected.items():
        assert quotas.values_of(dv, entity) == values, show(key_of(entity))

    # Non-strict EXACT user: the user's own entity and its {user, client-id} entities.
    quotas.describe(dv, [(USER, EXACT, u)]).assert_entries({
        ent((USER, u)): expected[ent((USER, u))],
        ent((USER, u), (CLIENT, c)): expected[ent((USER, u), (CLIENT, c))],
    })
    # Non-strict EXACT client-id: every entity with that client-id.
    quotas.describe(dv, [(CLIENT, EXACT, c)]).assert_entries({
        ent((CLIENT, c)): expected[ent((CLIENT, c))],
        ent((USER, u2), (CLIENT, c)): expected[ent((USER, u2), (CLIENT, c))],
        ent((USER, u), (CLIENT, c)): expected[ent((USER, u), (CLIENT, c))],
    })
    quotas.describe(dv, [(IP, EXACT, ip4)]).assert_entries({ent((IP, ip4)): expected[ent((IP, ip4))]})

    everything = quotas.everything(dv)
    for entity, values in expected.items():
        assert everything.get(key_of(entity)) == values, show(key_of(entity))


@pytest.mark.parametrize("av,dv", VERSION_PAIRS, ids=pair_ids)
def test_default_entities_round_trip(quotas, uniq, av, dv):
    """Defaults are null names on the wire, in requests and responses. The module server is shared, so
    the defaults are removed again at the end."""
    u, c = uniq("u"), uniq("c")
    expected = {
        ent((USER, None)): {"producer_byte_rate": 10000.0},
        ent((CLIENT, None)): {"consumer_byte_rate": 3000.0},
        ent((USER, None), (CLIENT, None)): {"request_percentage": 50.0},
        ent((USER, u), (CLIENT, None)): {"consumer_byte_rate": 777.0},
        ent((USER, None), (CLIENT, c)): {"producer_byte_rate": 4000.0},
        ent((IP, None)): {"connection_creation_rate": 100.0},
    }
    try:
        quotas.alter(av, list(expected.items())).assert_ok(*expected)
        for entity, values in expected.items():
            assert quotas.values_of(dv, entity) == values, show(key_of(entity))
        defaults = {e: v for e, v in expected.items() if e[0][0] == USER and e[0][1] is None}
        quotas.describe(dv, [(USER, DEFAULT, None)]).assert_entries(defaults)
        quotas.describe(dv, [(USER, DEFAULT, None)], strict=True).assert_entries(
            {ent((USER, None)): expected[ent((USER, None))]})
        quotas.describe(dv, [(USER, DEFAULT, None), (CLIENT, DEFAULT, None)], strict=True).assert_entries(
            {ent((USER, None), (CLIENT, None)): expected[ent((USER, None), (CLIENT, None))]})
        quotas.describe(dv, [(CLIENT, DEFAULT, None)], strict=True).assert_entries(
            {ent((CLIENT, None)): expected[ent((CLIENT, None))]})
        quotas.describe(dv, [(IP, DEFAULT, None)]).assert_entries({ent((IP, None)): expected[ent((IP, None))]})
        quotas.describe(dv, [(USER, EXACT, u), (CLIENT, DEFAULT, None)]).assert_entries(
            {ent((USER, u), (CLIENT, None)): expected[ent((USER, u), (CLIENT, None))]})
    finally:
        removal = [(e, {k: REMOVE for k in v}) for e, v in expected.items()]
        quotas.alter(av, removal).assert_ok(*expected)
    for entity in expected:
        assert quotas.values_of(dv, entity) == {}, show(key_of(entity))
    quotas.describe(dv, [(USER, DEFAULT, None)]).assert_entries({})


@pytest.mark.parametrize("av,dv", VERSION_PAIRS, ids=pair_ids)
def test_remove(quotas, uniq, av, dv):
    e = ent((USER, uniq("u")), (CLIENT, uniq("c")))
    quotas.alter(av, [(e, {"producer_byte_rate": 1000, "consumer_byte_rate": 2000,
                           "request_percentage": 10, "controller_mutation_rate": 3})]).assert_ok()
    assert quotas.values_of(dv, e) == {"producer_byte_rate": 1000.0, "consumer_byte_rate": 2000.0,
                                       "request_percentage": 10.0, "controller_mutation_rate": 3.0}
    # The wire value of a removal is ignored, whatever it is.
    quotas.alter(av, [(e, [("producer_byte_rate", (REMOVE, float("nan")))])]).assert_ok()
    quotas.alter(av, [(e, [("consumer_byte_rate", (REMOVE, -1.0))])]).assert_ok()
    quotas.alter(av, [(e, [("request_percentage", (REMOVE, 1e300))])]).assert_ok()
    assert quotas.values_of(dv, e) == {"controller_mutation_rate": 3.0}
    # Removing a key that is not set is a successful no-op, on a configured entity and on a new one.
    quotas.alter(av, [(e, {"producer_byte_rate": REMOVE})]).assert_ok()
    quotas.alter(av, [(ent((USER, uniq("never"))), {"producer_byte_rate": REMOVE})]).assert_ok()
    assert quotas.values_of(dv, ent((USER, uniq("never")))) == {}
    # Removing the last key removes the entity from every listing.
    quotas.alter(av, [(e, {"controller_mutation_rate": REMOVE})]).assert_ok()
    assert quotas.values_of(dv, e) == {}
    quotas.describe(dv, [(USER, EXACT, uniq("u"))]).assert_entries({})
    assert key_of(e) not in quotas.everything(dv)


@pytest.mark.parametrize("av,dv", VERSION_PAIRS, ids=pair_ids)
def test_set_and_remove_in_one_entry(quotas, uniq, av, dv):
    e = ent((CLIENT, uniq("c")))
    quotas.alter(av, [(e, {"producer_byte_rate": 1000, "consumer_byte_rate": 2000})]).assert_ok()
    quotas.alter(av, [(e, [("producer_byte_rate", REMOVE), ("consumer_byte_rate", 2500),
                           ("request_percentage", 75.25)])]).assert_ok()
    assert quotas.values_of(dv, e) == {"consumer_byte_rate": 2500.0, "request_percentage": 75.25}
    # Setting the current value again is accepted.
    quotas.alter(av, [(e, {"consumer_byte_rate": 2500})]).assert_ok()
    assert quotas.values_of(dv, e) == {"consumer_byte_rate": 2500.0, "request_percentage": 75.25}


@pytest.mark.parametrize("av,dv", VERSION_PAIRS, ids=pair_ids)
def test_unit_keys(quotas, uniq, av, dv):
    """`type:unit` keys are their own keys; `type:<native unit>` is the bare type."""
    e = ent((USER, uniq("u")))
    quotas.alter(av, [(e, {"producer_byte_rate:shares": 3, "producer_byte_rate": 1000,
                           "consumer_byte_rate:bps": 8000, "consumer_byte_rate:shares": 1})]).assert_ok()
    assert quotas.values_of(dv, e) == {"producer_byte_rate:shares": 3.0, "producer_byte_rate": 1000.0,
                                       "consumer_byte_rate:bps": 8000.0, "consumer_byte_rate:shares": 1.0}
    quotas.alter(av, [(e, {"producer_byte_rate:broker_bps": 2500})]).assert_ok()
    quotas.alter(av, [(e, {"producer_byte_rate:shares": REMOVE})]).assert_ok()
    assert quotas.values_of(dv, e) == {"producer_byte_rate": 2500.0, "consumer_byte_rate:bps": 8000.0,
                                       "consumer_byte_rate:shares": 1.0}
    quotas.alter(av, [(ent((IP, ip_for(av, 40 + dv))), {"connection_creation_rate:connections_per_sec": 9})]
                 ).assert_ok()
    assert quotas.values_of(dv, ent((IP, ip_for(av, 40 + dv)))) == {"connection_creation_rate": 9.0}


@pytest.mark.parametrize("av,dv", VERSION_PAIRS, ids=pair_ids)
def test_values_keep_their_precision(quotas, uniq, av, dv):
    e = ent((USER, uniq("u")))
    values = {
        "producer_byte_rate": float(2 ** 53),
        "consumer_byte_rate": float(2 ** 63),  # Kafka's LONG check lets 2^63 through (a double compare)
        "request_percentage": 0.001,
        "controller_mutation_rate": 1.7976931348623157e308,
    }
    quotas.alter(av, [(e, values)]).assert_ok()
    assert quotas.values_of(dv, e) == values
    # connection_creation_rate is an INT in Kafka: 2^31 - 1 is the largest accepted value.
    ip = ent((IP, ip_for(av, 90 + dv)))
    quotas.alter(av, [(ip, {"connection_creation_rate": 2 ** 31 - 1})]).assert_ok()
    assert quotas.values_of(dv, ip) == {"connection_creation_rate": float(2 ** 31 - 1)}


@pytest.mark.parametrize("av,dv", VERSION_PAIRS, ids=pair_ids)
def test_unusual_names(quotas, uniq, av, dv):
    """Names are opaque UTF-8: multi-byte characters, separators, a literal `<default>`, and lengths that
    need 2- and 3-byte varints in the flexible (v1) encoding."""
    tag = f"{av}{dv}"
    names = [
        f"ユーザー-ü-{tag}",
        f"a b/c%2F+*?&=\\ \"q\" {tag}",
        f"emoji-\U0001F600-{tag}",
        f"<default>{tag}" if tag != "00" else "<default>",
        f"{tag}-" + "x" * 300,
        f"{tag}-" + "é" * 10000,  # 20,003 bytes
    ]
    alterations = []
    for i, name in enumerate(names):
        alterations.append((ent((USER, name)), {"producer_byte_rate": 1000 + i}))
        alterations.append((ent((CLIENT, name)), {"consumer_byte_rate": 2000 + i}))
    quotas.alter(av, alterations).assert_ok()
    for i, name in enumerate(names):
        assert quotas.values_of(dv, ent((USER, name))) == {"producer_byte_rate": 1000.0 + i}, name[:40]
        assert quotas.values_of(dv, ent((CLIENT, name))) == {"consumer_byte_rate": 2000.0 + i}, name[:40]
    # A user literally named <default> is not the default user.
    default_users = quotas.describe(dv, [(USER, DEFAULT, None)], strict=True).assert_ok().entries
    assert all(k == key_of(ent((USER, None))) for k in default_users), default_users
    everything = quotas.everything(dv)
    for name in names:
        assert key_of(ent((USER, name))) in everything


@pytest.mark.parametrize("version", VERSIONS, ids=version_ids)
def test_many_entities_in_one_request(quotas, uniq, version):
    """300 entries (a 2-byte compact array length at v1) in one alter and in one describe answer."""
    prefix = uniq("many")
    entities = [ent((CLIENT, f"{prefix}-{i:03}")) for i in range(300)]
    res = quotas.alter(version, [(e, {"consumer_byte_rate": 100 + i}) for i, e in enumerate(entities)])
    assert len(res.response.entries) == 300, res
    res.assert_ok()
    # Kafka answers per entity in HashMap order; kquota documents first appearance. Either way, by entity:
    assert [key_of(p) for p in res.entity_orders] == [key_of(e) for e in entities], "first-appearance order"
    listed = quotas.describe(version, [(CLIENT, SPECIFIED, None)], strict=True).assert_ok().entries
    mine = {k: v for k, v in listed.items() if (next(iter(k))[1] or "").startswith(prefix)}
    assert mine == {key_of(e): {"consumer_byte_rate": 100.0 + i} for i, e in enumerate(entities)}
    quotas.alter(version, [(e, {"consumer_byte_rate": REMOVE}) for e in entities]).assert_ok()
    listed = quotas.describe(version, [(CLIENT, SPECIFIED, None)], strict=True).assert_ok().entries
    assert not [k for k in listed if (next(iter(k))[1] or "").startswith(prefix)]


@pytest.mark.parametrize("version", VERSIONS, ids=version_ids)
def test_entity_component_order(quotas, uniq, version):
    """docs/wire.md: entities are echoed client-id before user (Kafka's HashMap order), defaults as null."""
    u, c = uniq("u"), uniq("c")
    res = quotas.alter(version, [(ent((USER, u), (CLIENT, c)), {"request_percentage": 5}),
                                 (ent((USER, u), (CLIENT, None)), {"request_percentage": 6})]).assert_ok()
    assert res.entity_orders == [[(CLIENT, c), (USER, u)], [(CLIENT, None), (USER, u)]], res
    d = quotas.describe(version, [(USER, EXACT, u)]).assert_ok()
    assert sorted(d.entity_orders, key=str) == sorted([[(CLIENT, c), (USER, u)], [(CLIENT, None), (USER, u)]],
                                                      key=str), d


# --------------------------------------------------------------------------------------------------
# The connection: pipelined requests and flexible-version tagged fields.


def test_pipelined_requests_answer_in_order(servers, kquotad, uniq):
    """kafka-python pipelines requests on one connection and matches answers by correlation id in order
    (a mismatch raises CorrelationIdError). Kafka handles one connection's requests one at a time, in
    order, so each describe sees exactly the alterations sent before it."""
    admin = servers.admin(kquotad, max_in_flight_requests_per_connection=100)
    manager = admin._manager
    A, D = AlterClientQuotasRequest, DescribeClientQuotasRequest
    name = uniq("u")
    requests = []
    for i in range(40):
        v = i % 2
        requests.append(A(entries=[A.EntryData(
            entity=[A.EntryData.EntityData(entity_type=USER, entity_name=name)],
            ops=[A.EntryData.OpData(key="producer_byte_rate", value=float(1000 + i), remove=False)])],
            validate_only=False, min_version=v, max_version=v))
        requests.append(D(components=[D.ComponentData(entity_type=USER, match_type=EXACT, match=name)],
                          strict=True, min_version=1 - v, max_version=1 - v))

    async def burst():
        node = manager.least_loaded_node()
        futures = [manager.send(r, node_id=node) for r in requests]
        return [await f for f in futures]

    responses = manager.run(burst)
    assert len(responses) == len(requests)
    for i in range(40):
        alter, describe = responses[2 * i], responses[2 * i + 1]
        assert [(e.error_code, e.error_message) for e in alter.entries] == [(0, None)], alter
        assert describe.error_code == 0, describe
        got = [[(v.key, v.value) for v in e.values] for e in describe.entries]
        assert got == [[("producer_byte_rate", float(1000 + i))]], (i, describe)


def _raw_roundtrip(port, frame_body):
    import socket
    import struct
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(struct.pack(">i", len(frame_body)) + frame_body)
        head = b""
        while len(head) < 4:
            chunk = sock.recv(4 - len(head))
            assert chunk, "kquotad closed the connection instead of answering"
            head += chunk
        size = struct.unpack(">i", head)[0]
        body = b""
        while len(body) < size:
            chunk = sock.recv(size - len(body))
            assert chunk, "kquotad closed the connection mid-answer"
            body += chunk
        return body


def test_unknown_tagged_fields_are_ignored(kquotad, quotas, uniq):
    """A newer client may add tagged fields to v1 (flexible) requests and headers; Kafka skips tags it does
    not know. The request is kafka-python's own encoding with unknown tags spliced in (kafka-python cannot
    send unknown tags itself)."""
    name = uniq("u")
    quotas.alter(1, [(ent((USER, name)), {"consumer_byte_rate": 321})]).assert_ok()
    D = DescribeClientQuotasRequest
    request = D(components=[D.ComponentData(entity_type=USER, match_type=EXACT, match=name)], strict=True,
                version=1)
    request.with_header(correlation_id=4242, client_id="kquota-pytest-raw")
    header = request.encode_header(flexible=True)
    body = request.encode(version=1)
    assert header[-1:] == b"\x00" and body[-1:] == b"\x00", (header.hex(), body.hex())
    tag = b"\x01" + b"\x90\x4e" + b"\x03" + b"abc"  # one field: tag 10000, 3 bytes
    # The component struct's tag buffer sits right before the top-level strict flag and tag buffer.
    comp_end = len(body) - 2
    assert body[comp_end - 1:comp_end] == b"\x00", body.hex()
    spliced = (header[:-1] + tag) + (body[:comp_end - 1] + tag + body[comp_end:-1] + tag)
    answer = _raw_roundtrip(kquotad.port, spliced)
    response = DescribeClientQuotasResponse.decode(answer, version=1, header=True)
    assert response.header.correlation_id == 4242
    assert response.error_code == 0, response
    got = [([(e.entity_type, e.entity_name) for e in x.entity], [(v.key, v.value) for v in x.values])
           for x in response.entries]
    assert got == [([(USER, name)], [("consumer_byte_rate", 321.0)])], (spliced.hex(), answer.hex(), response)


@pytest.mark.parametrize("version", VERSIONS, ids=version_ids)
def test_raw_alter_with_null_client_id_and_tags(kquotad, quotas, uniq, version):
    """The request header's client id is nullable (Kafka reads null as ""); at v1 the header and the body
    may carry unknown tagged fields."""
    import struct
    name = uniq("u")
    A = AlterClientQuotasRequest
    request = A(entries=[A.EntryData(entity=[A.EntryData.EntityData(entity_type=USER, entity_name=name)],
                                     ops=[A.EntryData.OpData(key="producer_byte_rate", value=99.0, remove=False)])],
                validate_only=False, version=version)
    body = request.encode(version=version)
    header = struct.pack(">hhih", 49, version, 77, -1)  # api key, version, correlation id, null client id
    if version == 1:
        tag = b"\x01" + b"\x05" + b"\x02" + b"hi"
        assert body[-1:] == b"\x00"
        header += tag
        body = body[:-1] + tag
    answer = _raw_roundtrip(kquotad.port, header + body)
    response = AlterClientQuotasResponse.decode(answer, version=version, header=True)
    assert response.header.correlation_id == 77
    got = [(e.error_code, e.error_message, [(x.entity_type, x.entity_name) for x in e.entity])
           for e in response.entries]
    assert got == [(0, None, [(USER, name)])], ((header + body).hex(), answer.hex(), response)
    assert quotas.values_of(1 - version, ent((USER, name))) == {"producer_byte_rate": 99.0}


# --------------------------------------------------------------------------------------------------
# validate_only


@pytest.mark.parametrize("av,dv", VERSION_PAIRS, ids=pair_ids)
def test_validate_only_changes_nothing(quotas, uniq, av, dv):
    new = ent((USER, uniq("new")))
    res = quotas.alter(av, [(new, {"producer_byte_rate": 1000})], validate_only=True)
    res.assert_ok(new)
    assert quotas.values_of(dv, new) == {}

    existing = ent((USER, uniq("old")), (CLIENT, uniq("c")))
    quotas.alter(av, [(existing, {"producer_byte_rate": 1000, "consumer_byte_rate": 2000})]).assert_ok()
    res = quotas.alter(av, [(existing, [("producer_byte_rate", 5000), ("consumer_byte_rate", REMOVE),
                                        ("request_percentage", 1)]),
                            (ent((IP, ip_for(av, 60 + dv))), {"connection_creation_rate": 3})],
                       validate_only=True)
    res.assert_ok()
    assert quotas.values_of(dv, existing) == {"producer_byte_rate": 1000.0, "consumer_byte_rate": 2000.0}
    assert quotas.values_of(dv, ent((IP, ip_for(av, 60 + dv)))) == {}

    # Errors are reported exactly as without validate_only, and still nothing changes.
    bad = ent((USER, uniq("bad")))
    res = quotas.alter(av, [(bad, {"bogus": 1}), (existing, {"producer_byte_rate": 7000})], validate_only=True)
    res.assert_error(bad, INVALID_REQUEST, "Invalid configuration key bogus").assert_ok(existing)
    assert quotas.values_of(dv, existing) == {"producer_byte_rate": 1000.0, "consumer_byte_rate": 2000.0}
    assert quotas.values_of(dv, bad) == {}


# --------------------------------------------------------------------------------------------------
# Per-entity errors: INVALID_REQUEST with the Kafka controller's messages.

# (id, entity, ops, expected message); every one is INVALID_REQUEST (42). Names get a per-test suffix.
ERROR_CASES = [
    ("bogus-key", [(USER, "u")], [("bogus", 1.0)], "Invalid configuration key bogus"),
    ("zero", [(USER, "u")], [("producer_byte_rate", 0.0)], "Quota producer_byte_rate must be greater than 0"),
    ("negative", [(CLIENT, "c")], [("consumer_byte_rate", -5.0)],
     "Quota consumer_byte_rate must be greater than 0"),
    ("negative-percentage", [(USER, "u"), (CLIENT, "c")], [("request_percentage", -0.5)],
     "Quota request_percentage must be greater than 0"),
    ("fraction", [(CLIENT, "c")], [("producer_byte_rate", 1.5)], "producer_byte_rate cannot be a fractional value."),
    # Kafka's own test (|v % 1| > 1e-6) lets these two through; docs/semantics.md refuses every fraction.
    ("near-whole", [(CLIENT, "c")], [("producer_byte_rate", 5.0000001)],
     "producer_byte_rate cannot be a fractional value."),
    ("tiny", [(USER, "u")], [("consumer_byte_rate", 1e-300)], "consumer_byte_rate cannot be a fractional value."),
    ("ip-key-on-user", [(USER, "u")], [("connection_creation_rate", 10.0)],
     "Invalid configuration key connection_creation_rate"),
    ("user-key-on-ip", [(IP, "10.200.0.1")], [("producer_byte_rate", 10.0)],
     "Invalid configuration key producer_byte_rate"),
    ("bad-ip", [(IP, "not_an_ip!!")], [("connection_creation_rate", 1.0)],
     "not_an_ip!! is not a valid IP or resolvable host."),
    ("ip-with-user", [(USER, "u"), (IP, "10.200.0.2")], [("connection_creation_rate", 1.0)],
     "Invalid quota entity combination, IP entity shouldnot be combined with User or ClientId"),
    ("unknown-type", [("group", "g")], [("producer_byte_rate", 1.0)], "Unhandled client quota entity type: group"),
    ("empty-entity", [], [("producer_byte_rate", 1.0)], "Invalid empty client quota entity"),
    ("empty-user", [(USER, "")], [("producer_byte_rate", 1.0)], "Empty user not supported"),
    ("empty-client-id", [(CLIENT, "")], [("producer_byte_rate", 1.0)], "Empty client-id not supported"),
    ("empty-ip", [(IP, "")], [("connection_creation_rate", 1.0)], "Empty ip not supported"),
    ("unknown-unit", [(USER, "u")], [("producer_byte_rate:furlongs", 5.0)],
     "Invalid configuration key producer_byte_rate:furlongs: unknown unit 'furlongs' for producer_byte_rate "
     "(expected bps, broker_bps, shares)"),
    ("too-large-long", [(USER, "u")], [("producer_byte_rate", float(2 ** 64))],
     "Proposed value for producer_byte_rate is too large for a LONG."),
    ("too-large-int", [(IP, "10.200.0.3")], [("connection_creation_rate", float(2 ** 31))],
     "Proposed value for connection_creation_rate is too large for an INT."),
    ("nan", [(USER, "u")], [("request_percentage", math.nan)], "Quota request_percentage must be a finite number"),
    ("duplicate-key", [(USER, "u")], [("producer_byte_rate", 1000.0), ("producer_byte_rate", 2000.0)],
     "Ignoring duplicate entity ClientQuotaEntity(entries={user=%(u)s})"),
    ("duplicate-key-spellings", [(USER, "u"), (CLIENT, "c")],
     [("producer_byte_rate", 1000.0), ("producer_byte_rate:broker_bps", 1000.0)],
     "Ignoring duplicate entity ClientQuotaEntity(entries={client-id=%(c)s, user=%(u)s})"),
]


def _instantiate(case, uniq, tag=""):
    """The case with its placeholder names "u" / "c" made unique, and its message filled in."""
    _, entity, ops, message = case
    names = {"u": uniq("u" + tag), "c": uniq("c" + tag)}
    entity = tuple((t, names[n] if t in (USER, CLIENT) and n in names else n) for t, n in entity)
    return entity, ops, message % names


@pytest.mark.parametrize("version", VERSIONS, ids=version_ids)
@pytest.mark.parametrize("case", ERROR_CASES, ids=[c[0] for c in ERROR_CASES])
def test_alter_error(quotas, uniq, version, case):
    entity, ops, message = _instantiate(case, uniq)
    res = quotas.alter(version, [(entity, ops)])
    assert len(res.response.entries) == 1, res
    res.assert_error(entity, INVALID_REQUEST, message)
    assert error_name(INVALID_REQUEST) == "InvalidRequestError"
    assert key_of(entity) not in quotas.everything(version), "a refused alteration changed the configuration"


@pytest.mark.parametrize("version", VERSIONS, ids=version_ids)
def test_errors_and_successes_in_one_batch(quotas, uniq, version):
    """Each entity is judged on its own: the valid ones commit, the others get their own error."""
    batch, expect = [], {}
    for i, case in enumerate(ERROR_CASES):
        entity, ops, message = _instantiate(case, uniq, tag=str(i))
        batch.append((entity, ops))
        expect[key_of(entity)] = message
    good = [ent((USER, uniq("good"))), ent((IP, ip_for(version, 80)))]
    batch.insert(3, (good[0], {"producer_byte_rate": 4242}))
    batch.append((good[1], {"connection_creation_rate": 12}))
    assert len({key_of(e) for e, _ in batch}) == len(batch)
    res = quotas.alter(version, batch)
    assert len(res.response.entries) == len(batch), res
    for entity, _ in batch:
        if entity in good:
            res.assert_ok(entity)
        else:
            res.assert_error(entity, INVALID_REQUEST, expect[key_of(entity)])
    assert [key_of(p) for p in res.entity_orders] == [key_of(e) for e, _ in batch], "first-appearance order"
    assert quotas.values_of(version, good[0]) == {"producer_byte_rate": 4242.0}
    assert quotas.values_of(version, good[1]) == {"connection_creation_rate": 12.0}
    everything = quotas.everything(version)
    assert not [show(k) for k in expect if k in everything], "a refused alteration changed the configuration"


def java_string_hash(s):
    h = 0
    for unit in s.encode("utf-16-be").hex(" ", 2).split():
        h = (31 * h + int(unit, 16)) & 0xFFFFFFFF
    return h


def java_hashmap_order(keys, initial_capacity):
    """Iteration order of a java.util.HashMap built by `new HashMap<>(initial_capacity)` and put() of keys
    in order (no treeification at these sizes)."""
    cap = 1
    while cap < max(initial_capacity, 1):
        cap <<= 1
    threshold = int(cap * 0.75)
    distinct = []
    for k in keys:
        if k not in distinct:
            distinct.append(k)
            if len(distinct) > threshold:
                cap *= 2
                threshold = int(cap * 0.75)
    def bucket(k):
        h = java_string_hash(k)
        return (h ^ (h >> 16)) & (cap - 1)
    return sorted(distinct, key=lambda k: (bucket(k), distinct.index(k)))


def test_java_hashmap_model():
    # String.hashCode by hand: "ip" = 105*31 + 112; "user" = 117*31^3 + 115*31^2 + 101*31 + 114.
    assert java_string_hash("ip") == 3367
    assert java_string_hash("user") == 3599307
    assert java_string_hash("\u00e9") == 0xE9
    assert java_hashmap_order(["user", "client-id"], 2) == ["client-id", "user"]


# (id, entity, ops in request order, message per bad op or bad component): when several things are wrong,
# Kafka reports the first one its HashMap iteration meets (docs/semantics.md keeps this).
HASH_ORDER_CASES = [
    ("ops-pct-then-pbr", [(USER, "u")], [("request_percentage", -1.0), ("producer_byte_rate", 1.5)]),
    ("ops-pbr-then-pct", [(USER, "u")], [("producer_byte_rate", 1.5), ("request_percentage", -1.0)]),
    ("ops-pbr-then-bogus", [(USER, "u")], [("producer_byte_rate", 0.0), ("bogus", 1.0)]),
    ("ops-cbr-pbr", [(CLIENT, "c")], [("producer_byte_rate", -3.0), ("consumer_byte_rate", 2.5)]),
    ("ops-four", [(USER, "u")], [("producer_byte_rate", 0.0), ("consumer_byte_rate", 0.5),
                                  ("request_percentage", -2.0), ("controller_mutation_rate", -1.0)]),
    ("ops-five", [(USER, "u"), (CLIENT, "c")],
     [("controller_mutation_rate", -1.0), ("producer_byte_rate:shares", 0.25), ("bogus", 3.0),
      ("consumer_byte_rate:bps", 1e30), ("request_percentage", 0.0)]),
]
OP_MESSAGES = {
    ("request_percentage", -1.0): "Quota request_percentage must be greater than 0",
    ("request_percentage", -2.0): "Quota request_percentage must be greater than 0",
    ("request_percentage", 0.0): "Quota request_percentage must be greater than 0",
    ("producer_byte_rate", 1.5): "producer_byte_rate cannot be a fractional value.",
    ("producer_byte_rate", 0.0): "Quota producer_byte_rate must be greater than 0",
    ("producer_byte_rate", -3.0): "Quota producer_byte_rate must be greater than 0",
    ("consumer_byte_rate", 2.5): "consumer_byte_rate cannot be a fractional value.",
    ("consumer_byte_rate", 0.5): "consumer_byte_rate cannot be a fractional value.",
    ("controller_mutation_rate", -1.0): "Quota controller_mutation_rate must be greater than 0",
    ("producer_byte_rate:shares", 0.25): "producer_byte_rate:shares cannot be a fractional value.",
    ("bogus", 1.0): "Invalid configuration key bogus",
    ("bogus", 3.0): "Invalid configuration key bogus",
    ("consumer_byte_rate:bps", 1e30): "Proposed value for consumer_byte_rate:bps is too large for a LONG.",
}
ENTITY_ORDER_CASES = [
    ("empty-user-and-client", [(USER, ""), (CLIENT, "")]),
    ("empty-client-and-user", [(CLIENT, ""), (USER, "")]),
    ("empty-user-and-group", [(USER, ""), ("group", "g")]),
    ("group-and-empty-user", [("group", "g"), (USER, "")]),
    ("ip-and-empty-user", [(IP, "10.0.0.1"), (USER, "")]),
    ("empty-ip-and-user", [(IP, ""), (USER, "u")]),
    ("bad-ip-and-empty-client", [(IP, "nope!!"), (CLIENT, "")]),
]


def _component_error(t, n):
    if t not in (USER, CLIENT, IP):
        return f"Unhandled client quota entity type: {t}"
    if t == IP and n and not n[0].isdigit():
        return f"{n} is not a valid IP or resolvable host."
    if n == "":
        return f"Empty {t} not supported"
    return None


@pytest.mark.parametrize("version", VERSIONS, ids=version_ids)
@pytest.mark.parametrize("case", HASH_ORDER_CASES, ids=[c[0] for c in HASH_ORDER_CASES])
def test_first_bad_op_in_kafka_hashmap_order(quotas, uniq, version, case):
    _, entity, ops = case
    entity = tuple((t, uniq(n)) for t, n in entity)
    first = java_hashmap_order([k for k, _ in ops], len(ops))[0]
    expected = OP_MESSAGES[(first, dict(ops)[first])]
    quotas.alter(version, [(entity, ops)]).assert_error(entity, INVALID_REQUEST, expected)


@pytest.mark.parametrize("version", VERSIONS, ids=version_ids)
@pytest.mark.parametrize("case", ENTITY_ORDER_CASES, ids=[c[0] for c in ENTITY_ORDER_CASES])
def test_first_bad_component_in_kafka_hashmap_order(quotas, version, case):
    _, entity = case
    errors = [_component_error(t, dict(entity)[t]) for t in java_hashmap_order([t for t, _ in entity], len(entity))]
    errors = [e for e in errors if e] or [
        "Invalid quota entity combination, IP entity shouldnot be combined with User or ClientId"]
    entity = tuple(entity)
    quotas.alter(version, [(entity, [("producer_byte_rate", 1.0)])]).assert_error(entity, INVALID_REQUEST, errors[0])


@pytest.mark.parametrize("version", VERSIONS, ids=version_ids)
def test_same_entity_twice_in_a_batch(quotas, uniq, version):
    """Kafka answers once per entity with `Ignoring duplicate entity`; kquota applies neither copy
    (docs/semantics.md, 'an entity twice in one batch')."""
    u, c = uniq("u"), uniq("c")
    e1 = ent((USER, u), (CLIENT, c))
    e2 = ent((CLIENT, c), (USER, u))  # the same entity, components in the other order
    res = quotas.alter(version, [(e1, {"producer_byte_rate": 1000}), (e2, {"consumer_byte_rate": 2000})])
    assert len(res.response.entries) == 1, res
    res.assert_error(e1, INVALID_REQUEST, f"Ignoring duplicate entity ClientQuotaEntity(entries={{client-id={c}, user={u}}})")
    assert quotas.values_of(version, e1) == {}


@pytest.mark.parametrize("version", VERSIONS, ids=version_ids)
def test_repeated_type_in_an_entity_collapses(quotas, uniq, version):
    """Kafka's AlterClientQuotasRequest.entries() builds a map per entry: a repeated type keeps the last
    name, and the answer names that entity."""
    first, last = uniq("first"), uniq("last")
    res = quotas.alter(version, [(ent((USER, first), (USER, last)), {"producer_byte_rate": 1234})])
    assert res.entity_orders == [[(USER, last)]], res
    res.assert_ok()
    assert quotas.values_of(version, ent((USER, last))) == {"producer_byte_rate": 1234.0}
    assert quotas.values_of(version, ent((USER, first))) == {}


# --------------------------------------------------------------------------------------------------
# Sub-quotas under the default kip55 policy: POLICY_VIOLATION (44).


@pytest.mark.parametrize("version", VERSIONS, ids=version_ids)
def test_kip55_sub_quota_policy(quotas, uniq, version):
    u = uniq("u")
    total = ent((USER, u))
    c1, c2, cd = ent((USER, u), (CLIENT, uniq("c1"))), ent((USER, u), (CLIENT, uniq("c2"))), ent((USER, u), (CLIENT, None))
    quotas.alter(version, [(total, {"producer_byte_rate": 1000})]).assert_ok()
    quotas.alter(version, [(c1, {"producer_byte_rate": 600})]).assert_ok()

    def violation(res, entity, *fragments):
        code, msg = res[entity]
        assert code == POLICY_VIOLATION, f"expected POLICY_VIOLATION (44), got ({code}, {msg!r}){res}"
        assert error_name(code) == "PolicyViolationError"
        for f in fragments:
            assert f in msg, f"{f!r} not in {msg!r}{res}"

    # 600 + 500 > 1000, checked and refused, also under validate_only.
    for validate_only in (True, False):
        res = quotas.alter(version, [(c2, {"producer_byte_rate": 500})], validate_only=validate_only)
        violation(res, c2, u, "producer_byte_rate", "1100", "exceeds the total", "1000")
    assert quotas.values_of(version, c2) == {}
    quotas.alter(version, [(c2, {"producer_byte_rate": 400})]).assert_ok()  # exactly the total

    # The default sub-quota is bounded by the total on its own.
    res = quotas.alter(version, [(cd, {"producer_byte_rate": 1001})])
    violation(res, cd, u, "producer_byte_rate", "1001", "exceeds the total")
    quotas.alter(version, [(cd, {"producer_byte_rate": 1000})]).assert_ok()

    # Lowering the total below the sum is refused too.
    res = quotas.alter(version, [(total, {"producer_byte_rate": 900})])
    violation(res, total, u, "producer_byte_rate")
    assert quotas.values_of(version, total) == {"producer_byte_rate": 1000.0}

    # Another key has no total: sub-quotas for it are free. A rule-abiding batch commits.
    quotas.alter(version, [(c1, {"consumer_byte_rate": 10 ** 9})]).assert_ok()
    quotas.alter(version, [(c1, {"producer_byte_rate": REMOVE}), (total, {"producer_byte_rate": 400}),
                           (cd, {"producer_byte_rate": 400})]).assert_ok()
    assert quotas.values_of(version, total) == {"producer_byte_rate": 400.0}
    assert quotas.values_of(version, c1) == {"consumer_byte_rate": 1e9}
    assert quotas.values_of(version, c2) == {"producer_byte_rate": 400.0}

    # The <default> user node follows the same rule.
    du = ent((USER, None))
    dc = ent((USER, None), (CLIENT, uniq("dc")))
    try:
        quotas.alter(version, [(du, {"consumer_byte_rate": 100})]).assert_ok()
        res = quotas.alter(version, [(dc, {"consumer_byte_rate": 101})])
        violation(res, dc, "consumer_byte_rate", "exceeds the total")
        assert quotas.values_of(version, dc) == {}
    finally:
        quotas.alter(version, [(du, {"consumer_byte_rate": REMOVE}), (dc, {"consumer_byte_rate": REMOVE})]
                     ).assert_ok()


# --------------------------------------------------------------------------------------------------
# DescribeClientQuotas filters over a known data set on a server of its own.

A_, B_, C_ = "alice", "bob", "carol"
DATASET = {
    ent((USER, A_)): {"producer_byte_rate": 1000000.0, "consumer_byte_rate": 2000000.0},
    ent((USER, A_), (CLIENT, "app1")): {"producer_byte_rate": 300000.0},
    ent((USER, A_), (CLIENT, None)): {"producer_byte_rate": 200000.0},
    ent((USER, B_)): {"request_percentage": 25.5},
    ent((USER, C_)): {"producer_byte_rate:shares": 3.0},
    ent((USER, None)): {"producer_byte_rate": 500000.0},
    ent((USER, None), (CLIENT, "app1")): {"consumer_byte_rate": 1000.0},
    ent((USER, None), (CLIENT, None)): {"request_percentage": 10.0},
    ent((CLIENT, "app1")): {"consumer_byte_rate": 4000.0},
    ent((CLIENT, None)): {"consumer_byte_rate": 3000.0},
    ent((IP, "10.1.2.3")): {"connection_creation_rate": 50.0},
    ent((IP, "2001:db8::1")): {"connection_creation_rate": 7.0},
    ent((IP, None)): {"connection_creation_rate": 100.0},
}


@pytest.fixture(scope="module")
def dataset(module_servers):
    server = module_servers.start()
    client = module_servers.quotas(server)
    client.alter(1, list(DATASET.items())).assert_ok(*DATASET)
    return client


def _pick(*entities):
    return {e: DATASET[e] for e in entities}


FILTER_CASES = [
    ("all", [], False, DATASET),
    ("all-strict", [], True, {}),
    ("user-exact", [(USER, EXACT, A_)], False,
     _pick(ent((USER, A_)), ent((USER, A_), (CLIENT, "app1")), ent((USER, A_), (CLIENT, None)))),
    ("user-exact-strict", [(USER, EXACT, A_)], True, _pick(ent((USER, A_)))),
    ("user-exact-unknown", [(USER, EXACT, "nobody")], False, {}),
    ("user-default", [(USER, DEFAULT, None)], False,
     _pick(ent((USER, None)), ent((USER, None), (CLIENT, "app1")), ent((USER, None), (CLIENT, None)))),
    ("user-default-strict", [(USER, DEFAULT, None)], True, _pick(ent((USER, None)))),
    ("user-specified", [(USER, SPECIFIED, None)], False,
     {e: v for e, v in DATASET.items() if USER in dict(e)}),
    ("user-specified-strict", [(USER, SPECIFIED, None)], True,
     _pick(ent((USER, A_)), ent((USER, B_)), ent((USER, C_)), ent((USER, None)))),
    ("client-exact", [(CLIENT, EXACT, "app1")], False,
     _pick(ent((USER, A_), (CLIENT, "app1")), ent((USER, None), (CLIENT, "app1")), ent((CLIENT, "app1")))),
    ("client-exact-strict", [(CLIENT, EXACT, "app1")], True, _pick(ent((CLIENT, "app1")))),
    ("client-default", [(CLIENT, DEFAULT, None)], False,
     _pick(ent((USER, A_), (CLIENT, None)), ent((USER, None), (CLIENT, None)), ent((CLIENT, None)))),
    ("client-default-strict", [(CLIENT, DEFAULT, None)], True, _pick(ent((CLIENT, None)))),
    ("user-exact-client-specified", [(USER, EXACT, A_), (CLIENT, SPECIFIED, None)], False,
     _pick(ent((USER, A_), (CLIENT, "app1")), ent((USER, A_), (CLIENT, None)))),
    ("user-exact-client-specified-strict", [(CLIENT, SPECIFIED, None), (USER, EXACT, A_)], True,
     _pick(ent((USER, A_), (CLIENT, "app1")), ent((USER, A_), (CLIENT, None)))),
    ("user-exact-client-default", [(USER, EXACT, A_), (CLIENT, DEFAULT, None)], True,
     _pick(ent((USER, A_), (CLIENT, None)))),
    ("user-default-client-exact", [(USER, DEFAULT, None), (CLIENT, EXACT, "app1")], False,
     _pick(ent((USER, None), (CLIENT, "app1")))),
    ("both-specified-strict", [(USER, SPECIFIED, None), (CLIENT, SPECIFIED, None)], True,
     {e: v for e, v in DATASET.items() if set(dict(e)) == {USER, CLIENT}}),
    ("both-default", [(USER, DEFAULT, None), (CLIENT, DEFAULT, None)], False,
     _pick(ent((USER, None), (CLIENT, None)))),
    ("ip-specified", [(IP, SPECIFIED, None)], False, {e: v for e, v in DATASET.items() if IP in dict(e)}),
    ("ip-exact", [(IP, EXACT, "10.1.2.3")], True, _pick(ent((IP, "10.1.2.3")))),
    ("ip-exact-v6", [(IP, EXACT, "2001:db8::1")], False, _pick(ent((IP, "2001:db8::1")))),
    ("ip-default", [(IP, DEFAULT, None)], False, _pick(ent((IP, None)))),
]


@pytest.mark.parametrize("version", VERSIONS, ids=version_ids)
@pytest.mark.parametrize("case", FILTER_CASES, ids=[c[0] for c in FILTER_CASES])
def test_describe_filter(dataset, version, case):
    _, components, strict, expected = case
    dataset.describe(version, components, strict=strict).assert_entries(expected)


# (id, components, code, message): a filter error is answered at the top level, entries null.
FILTER_ERRORS = [
    ("repeated-type", [(USER, EXACT, "a"), (USER, DEFAULT, None)], INVALID_REQUEST,
     "Entity type user cannot appear more than once in the filter."),
    ("repeated-client-id", [(CLIENT, SPECIFIED, None), (CLIENT, SPECIFIED, None)], INVALID_REQUEST,
     "Entity type client-id cannot appear more than once in the filter."),
    ("unsupported-type", [(USER, SPECIFIED, None), ("foo", SPECIFIED, None)], UNSUPPORTED_VERSION,
     "Unsupported entity type foo"),
    ("empty-type", [("", SPECIFIED, None)], INVALID_REQUEST, "Invalid empty entity type."),
    ("exact-null", [(USER, EXACT, None)], INVALID_REQUEST,
     "Request specified MATCH_TYPE_EXACT, but set match string to null."),
    ("default-with-match", [(CLIENT, DEFAULT, "x")], INVALID_REQUEST,
     "Request specified MATCH_TYPE_DEFAULT, but also specified a match string."),
    ("specified-with-match", [(IP, SPECIFIED, "x")], INVALID_REQUEST,
     "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string."),
    ("unknown-match-type", [(USER, 7, None)], INVALID_REQUEST, "Unknown match type 7"),
    ("ip-with-user", [(IP, SPECIFIED, None), (USER, EXACT, A_)], INVALID_REQUEST,
     "Invalid entity filter component combination. IP filter component should not be used with user or "
     "clientId filter component."),
    ("first-failure-wins", [("foo", SPECIFIED, None), (USER, EXACT, None)], UNSUPPORTED_VERSION,
     "Unsupported entity type foo"),
    ("first-failure-wins-2", [(USER, EXACT, None), ("foo", SPECIFIED, None)], INVALID_REQUEST,
     "Request specified MATCH_TYPE_EXACT, but set match string to null."),
]


@pytest.mark.parametrize("version", VERSIONS, ids=version_ids)
@pytest.mark.parametrize("case", FILTER_ERRORS, ids=[c[0] for c in FILTER_ERRORS])
def test_describe_filter_error(dataset, version, case):
    _, components, code, message = case
    for strict in (False, True):
        dataset.describe(version, components, strict=strict).assert_error(code, message)
    assert error_name(UNSUPPORTED_VERSION) == "UnsupportedVersionError"


# --------------------------------------------------------------------------------------------------
# Durability: a restart on the same data dir keeps every acknowledged alteration.

RESTART_SET = {
    ent((USER, "alice")): {"producer_byte_rate": 1048576.0, "producer_byte_rate:shares": 2.0},
    ent((CLIENT, "app one/ü")): {"consumer_byte_rate": 2048.0, "request_percentage": 33.3},
    ent((USER, "alice"), (CLIENT, "app1")): {"producer_byte_rate": 1000.0},
    ent((USER, None)): {"consumer_byte_rate:bps": 64000.0},
    ent((USER, None), (CLIENT, None)): {"controller_mutation_rate": 2.5},
    ent((CLIENT, None)): {"request_percentage": 200.0},
    ent((USER, "<default>")): {"producer_byte_rate": 77.0},
    ent((IP, "192.168.1.10")): {"connection_creation_rate": 30.0},
    ent((IP, None)): {"connection_creation_rate": 60.0},
}


def _load(client, version, entries):
    items = list(entries.items())
    half = len(items) // 2
    # Half at v0, half at v1 (or as asked).
    client.alter(0 if version is None else version, items[:half]).assert_ok()
    client.alter(1 if version is None else version, items[half:]).assert_ok()


def test_restart_keeps_quotas(servers):
    data = servers.data_dir()
    first = servers.start(data)
    client = servers.quotas(first)
    _load(client, None, RESTART_SET)
    client.alter(1, [(ent((USER, "temp")), {"producer_byte_rate": 5})]).assert_ok()
    client.alter(0, [(ent((USER, "temp")), {"producer_byte_rate": REMOVE})]).assert_ok()
    client.alter(0, [(ent((USER, "alice")), {"producer_byte_rate:shares": 9})]).assert_ok()
    client.alter(1, [(ent((USER, "ghost")), {"producer_byte_rate": 5})], validate_only=True).assert_ok()
    expected = dict(RESTART_SET)
    expected[ent((USER, "alice"))] = {"producer_byte_rate": 1048576.0, "producer_byte_rate:shares": 9.0}
    want = {key_of(e): v for e, v in expected.items()}
    assert client.everything(1) == want
    servers.close_admin(client.admin)
    first.stop()  # graceful: exit status 0 is asserted

    second = servers.start(data)
    assert second.port != 0
    client = servers.quotas(second)
    for v in VERSIONS:
        client.describe(v, []).assert_entries(expected)
    assert client.values_of(0, ent((USER, "temp"))) == {}
    assert client.values_of(1, ent((USER, "ghost"))) == {}
    # kip55 state was rebuilt too: alice's sub-quota sum is still checked against her total.
    res = client.alter(1, [(ent((USER, "alice"), (CLIENT, "app2")), {"producer_byte_rate": 1048576})])
    assert res[ent((USER, "alice"), (CLIENT, "app2"))][0] == POLICY_VIOLATION, res
    # And the restarted server keeps accepting and persisting changes.
    client.alter(0, [(ent((USER, "alice")), {"producer_byte_rate:shares": REMOVE})]).assert_ok()
    # An idle client still connected does not hold up a graceful stop (SIGINT this time).
    second.stop(signal.SIGINT)
    servers.close_admin(client.admin)

    third = servers.start(data)
    client = servers.quotas(third)
    expected[ent((USER, "alice"))] = {"producer_byte_rate": 1048576.0}
    client.describe(1, []).assert_entries(expected)


def test_sigkill_keeps_acknowledged_alterations(servers):
    """Every alteration is fsynced before it is acknowledged: SIGKILL right after the answer loses
    nothing."""
    data = servers.data_dir()
    first = servers.start(data)
    client = servers.quotas(first)
    _load(client, 1, RESTART_SET)
    client.alter(0, [(ent((CLIENT, "last")), {"consumer_byte_rate": 1})]).assert_ok()
    first.kill()
    servers.close_admin(client.admin)

    second = servers.start(data)
    client = servers.quotas(second)
    expected = dict(RESTART_SET)
    expected[ent((CLIENT, "last"))] = {"consumer_byte_rate": 1.0}
    for v in VERSIONS:
        client.describe(v, []).assert_entries(expected)
