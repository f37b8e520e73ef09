"""Each deviation docs/semantics.md documents, shown against the real broker: what Apache Kafka does, what
kquotad does instead, and that the rest of the same request still agrees. D11 (apiKey 50) is in test_stock_tools.py."""

import math

import pytest

import deviations as dv
from kqclient import CLIENT, IP, REMOVE, USER, Kquotad, QuotaClient, key_of, make_admin
from reference import settle, wait_values

OK = (0, None)


def both(kafka_quotas, kquotad_quotas, batch, validate_only=False, version=1):
    return kafka_quotas.alter(version, batch, validate_only), kquotad_quotas.alter(version, batch, validate_only)


def test_every_documented_deviation_is_checked_here_or_in_the_runs():
    documented = set(dv.documented_ids())
    # D12 concerns resolution, not the wire; interop/quota-manager/parity.sh checks it.
    known = dv.USED_IDS | {"D2", "D9", "D12"}
    assert documented == known, (
        f"docs/semantics.md lists {sorted(documented)}; tests/kafka knows {sorted(known)}")


def test_d1_unit_keys(kafka_quotas, kquotad_quotas):
    e = ((USER, "kd-units"),)
    k, q = both(kafka_quotas, kquotad_quotas, [(e, [("producer_byte_rate:bps", 10.0)])])
    assert k[e] == (42, "Invalid configuration key producer_byte_rate:bps")
    assert q[e] == OK
    # Bare types keep Kafka's meaning on both sides.
    k, q = both(kafka_quotas, kquotad_quotas, [(e, [("producer_byte_rate", 5.0), ("producer_byte_rate:bps", REMOVE)])])
    assert k[e] == q[e] == OK
    wait_values(kafka_quotas, e, {"producer_byte_rate": 5.0})
    assert kquotad_quotas.values_of(1, e) == {"producer_byte_rate": 5.0}
    assert dv.explain_state(e, [[("producer_byte_rate:bps", 10.0)]], {}, {}, {"producer_byte_rate:bps": 10.0}) == dv.UNITS


def test_d2_kip55_sub_quotas_are_kquota_only(kafka_quotas, kquotad_quotas, tmp_path):
    server = Kquotad(tmp_path / "data", tmp_path / "stderr")  # the default policy: kip55
    server.start()
    admin = make_admin(server)
    try:
        kip55 = QuotaClient(admin)
        total, sub = ((USER, "kd-kip55"),), ((USER, "kd-kip55"), (CLIENT, "c"))
        for side in (kafka_quotas, kquotad_quotas, kip55):
            assert side.alter(1, [(total, [("producer_byte_rate", 10.0)])])[total] == OK
        results = [side.alter(1, [(sub, [("producer_byte_rate", 20.0)])])[sub]
                   for side in (kafka_quotas, kquotad_quotas, kip55)]
        assert results[0] == results[1] == OK  # Kafka, and kquotad --sub-quota-policy kafka
        assert results[2] == (44, "The sub-quotas of {user=kd-kip55} for producer_byte_rate would sum to 20, "
                                  "which exceeds the total 10 of {user=kd-kip55}")
    finally:
        admin.close()
        server.stop()


def test_d3_nan_and_infinity(kafka_quotas, kquotad_quotas):
    e = ((USER, "kd-nan"),)
    k, q = both(kafka_quotas, kquotad_quotas, [(e, [("producer_byte_rate", math.nan)])])
    assert (k[e], q[e]) == (OK, (42, "Quota producer_byte_rate must be a finite number"))
    k, q = both(kafka_quotas, kquotad_quotas, [(e, [("request_percentage", math.inf)])])
    assert (k[e], q[e]) == (OK, (42, "Quota request_percentage must be a finite number"))
    # +inf on a LONG key is too large for both.
    k, q = both(kafka_quotas, kquotad_quotas, [(e, [("consumer_byte_rate", math.inf)])])
    assert k[e] == q[e] == (42, "Proposed value for consumer_byte_rate is too large for a LONG.")
    kafka_vals = {}

    def stored():
        kafka_vals.update(kafka_quotas.values_of(1, e))
        return len(kafka_vals) == 2

    settle(stored, "NaN and +inf stored by Kafka")
    assert math.isnan(kafka_vals["producer_byte_rate"]) and kafka_vals["request_percentage"] == math.inf
    assert kquotad_quotas.values_of(1, e) == {}
    kafka_quotas.alter(1, [(e, [("producer_byte_rate", REMOVE), ("request_percentage", REMOVE)])]).assert_ok()


def test_d4_near_whole_values(kafka_quotas, kquotad_quotas):
    e = ((USER, "kd-frac"),)
    for v in (5.0000001, 1e-300):
        k, q = both(kafka_quotas, kquotad_quotas, [(e, [("producer_byte_rate", v)])])
        assert (k[e], q[e]) == (OK, (42, "producer_byte_rate cannot be a fractional value.")), v
        wait_values(kafka_quotas, e, {"producer_byte_rate": v})
    # A fraction above 1e-6 is refused by both.
    k, q = both(kafka_quotas, kquotad_quotas, [(e, [("producer_byte_rate", 5.5)])])
    assert k[e] == q[e] == (42, "producer_byte_rate cannot be a fractional value.")
    assert kquotad_quotas.values_of(1, e) == {}


def test_d5_entity_twice_in_a_batch(kafka_quotas, kquotad_quotas):
    e = ((USER, "kd-dup"),)
    k, q = both(kafka_quotas, kquotad_quotas, [(e, [("producer_byte_rate", 1.0)]), (e, [("consumer_byte_rate", 2.0)])])
    dup = (42, "Ignoring duplicate entity ClientQuotaEntity(entries={user=kd-dup})")
    assert k[e] == q[e] == dup
    wait_values(kafka_quotas, e, {"producer_byte_rate": 1.0})  # the first copy, committed
    assert kquotad_quotas.values_of(1, e) == {}


def test_d6_result_order(kafka_quotas, kquotad_quotas):
    batch = [(((USER, f"kd-order-{i}"),), [("producer_byte_rate", 1.0)]) for i in range(6)]
    orders = {}
    for name, b in (("forward", batch), ("reversed", batch[::-1])):
        k, q = both(kafka_quotas, kquotad_quotas, b, validate_only=True)
        assert set(k.results) == set(q.results) and all(r == OK for r in q.results.values())
        assert [key_of(p) for p in q.entity_orders] == [key_of(e) for e, _ in b]  # request order
        orders[name] = [key_of(p) for p in k.entity_orders]
    assert orders["forward"] == orders["reversed"]  # HashMap order, whatever the request order


def test_d7_ip_names(kafka_quotas, kquotad_quotas):
    for name in ("localhost", "127.1"):
        e = ((IP, name),)
        k, q = both(kafka_quotas, kquotad_quotas, [(e, [("connection_creation_rate", 5.0)])], validate_only=True)
        assert (k[e], q[e]) == (OK, (42, f"{name} is not a valid IP or resolvable host.")), name
    for name in ("10.0.0.1", "2001:db8::1"):
        e = ((IP, name),)
        k, q = both(kafka_quotas, kquotad_quotas, [(e, [("connection_creation_rate", 5.0)])], validate_only=True)
        assert k[e] == q[e] == OK, name


def test_d8_two_spellings_of_one_key(kafka_quotas, kquotad_quotas):
    e = ((USER, "kd-spell"),)
    k, q = both(kafka_quotas, kquotad_quotas,
                [(e, [("producer_byte_rate", 1.0), ("producer_byte_rate:broker_bps", 2.0)])], validate_only=True)
    assert k[e] == (42, "Invalid configuration key producer_byte_rate:broker_bps")
    assert q[e] == (42, "Ignoring duplicate entity ClientQuotaEntity(entries={user=kd-spell})")


def test_d9_repeated_type_folds_the_same_on_the_wire(kafka_quotas, kquotad_quotas):
    """D9 is the library's refusal; on the wire both servers keep the last name of a repeated type."""
    sent = ((USER, "kd-first"), (USER, "kd-last"))
    k, q = both(kafka_quotas, kquotad_quotas, [(sent, [("producer_byte_rate", 3.0)])])
    assert set(k.results) == set(q.results) == {key_of([(USER, "kd-last")])}
    assert k[((USER, "kd-last"),)] == q[((USER, "kd-last"),)] == OK
    wait_values(kafka_quotas, ((USER, "kd-last"),), {"producer_byte_rate": 3.0})
    assert kquotad_quotas.values_of(1, ((USER, "kd-last"),)) == {"producer_byte_rate": 3.0}


@pytest.mark.parametrize("version", [0, 1])
def test_d10_describe_order(kafka_quotas, kquotad_quotas, version):
    e = ((USER, "kd-list"), (CLIENT, "c"))
    values = {"producer_byte_rate": 1.0, "consumer_byte_rate": 2.0, "request_percentage": 300.0}
    both(kafka_quotas, kquotad_quotas, [(e, list(values.items()))])[1].assert_ok()
    wait_values(kafka_quotas, e, values)
    filt = [(USER, 0, "kd-list"), (CLIENT, 0, "c")]
    k, q = kafka_quotas.describe(version, filt, True), kquotad_quotas.describe(version, filt, True)
    assert k.entries == q.entries == {key_of(e): values}
    kq_keys = [v.key for v in q.response.entries[0].values]
    kafka_keys = [v.key for v in k.response.entries[0].values]
    assert kq_keys == sorted(values)  # sorted by key
    assert sorted(kafka_keys) == kq_keys and kafka_keys != kq_keys  # Kafka: HashMap order
