"""kquotad (--sub-quota-policy kafka) against Apache Kafka: seeded random sequences of AlterClientQuotas
and DescribeClientQuotas, valid and invalid, at v0 and v1, sent to both.

Per-entity alter results (code and message), the entity echo, the state each side holds afterwards and
every describe answer must match. A difference is allowed only when a rule in deviations.py explains it
by a deviation documented in docs/semantics.md; whatever else remains fails the test with the seed and
the command that replays it.

    KQUOTA_DIFF_SEED=<n>  the seed (default: a fresh one, printed)
    KQUOTA_DIFF_OPS=<n>   operations to run (default 1000)

Kafka applies alterations through its controller and its brokers see them later, so every alteration is
followed by a fence: a counter set on a reserved entity on both sides, then read back from Kafka until it
shows. Kafka's metadata log is ordered, so the broker then reflects the alteration too.
"""

import math
import os
import random
import time
from collections import Counter

import pytest

import deviations as dv
from kqclient import CLIENT, DEFAULT, EXACT, IP, REMOVE, SPECIFIED, USER, key_of, show

FENCE = ((USER, "kquota.fence"),)
FENCE_TIMEOUT_S = 15
MAX_REPORTED = 25

USERS = ["alice", "bob", "<default>", "", "ü名 前", "a b+c%41", " ", "nul\x00byte", "long-" + "x" * 300, None]
CLIENTS = ["app", "App", "<default>", "", "client-é", "*", "a/b", "%2F", None]
IPS = ["10.0.0.1", "192.168.1.1", "::1", "2001:db8::1", "2001:DB8::1", "0:0:0:0:0:0:0:1", "::ffff:10.0.0.1",
       "::FFFF:1.2.3.4", "[::1]", "127.1", "01.2.3.4", "0x7f.0.0.1", "1.2.3.4 ", "localhost", "not_an_ip!!",
       "999.1.1.1", "1.2.3.4.5", "fe80::1%1", "", None]
BAD_TYPES = ["group", "", "User"]
USER_CLIENT_KEYS = ["producer_byte_rate", "consumer_byte_rate", "request_percentage", "controller_mutation_rate"]
IP_KEYS = ["connection_creation_rate"]
ODD_KEYS = ["foo", "", "producer_byte_rate:bps", "consumer_byte_rate:shares", "producer_byte_rate:furlongs",
            "producer_byte_rate:broker_bps", "request_percentage:percent",
            "connection_creation_rate:connections_per_sec", "controller_mutation_rate:bps", "PRODUCER_BYTE_RATE",
            "producer_byte_rate ", "producer_byte_rate:", ":bps", "producer_byte_rate:bps:x", "ü"]
VALUES = [1.0, 1000.0, 1e6, 0.0, -0.0, -1.0, 0.5, 1.5, 123.456, 5.0000001, 1e-300, 2.0 ** 31 - 1, 2.0 ** 31,
          2.0 ** 63, 2.0 ** 64, 1e300, 9007199254740993.0, 5e-324, 1e-7, 0.9999999, 1.0000001, 2.0 ** 63 - 1024,
          math.nan, math.inf, -math.inf]
# A request_percentage on an entity that matches the suite's own admin connections (user ANONYMOUS,
# any client-id) would make Kafka throttle the suite; those entities get values that cannot.
HARMLESS_REQUEST_PERCENTAGES = [100.0, 250.5, 1000.0, 1e6, 0.0, -1.0, math.nan, math.inf, -math.inf]


def ops_count():
    raw = os.environ.get("KQUOTA_DIFF_OPS", "1000")
    try:
        n = int(raw)
    except ValueError:
        pytest.fail(f"KQUOTA_DIFF_OPS must be a whole number, not {raw!r}", pytrace=False)
    if n < 1:
        pytest.fail(f"KQUOTA_DIFF_OPS must be at least 1, not {n}", pytrace=False)
    return n


def seed_value():
    raw = os.environ.get("KQUOTA_DIFF_SEED")
    if raw is None:
        return random.SystemRandom().randrange(2 ** 32)
    try:
        return int(raw)
    except ValueError:
        pytest.fail(f"KQUOTA_DIFF_SEED must be a whole number, not {raw!r}", pytrace=False)


# --------------------------------------------------------------------------------------------------
# Generation.


def gen_entity(rng):
    shape = rng.choices(
        ["user", "client", "user+client", "ip", "empty", "ip+user", "ip+client", "bad", "user+user", "mixed-bad"],
        weights=[25, 18, 25, 20, 2, 3, 2, 3, 2, 3])[0]
    user, client, ip = rng.choice(USERS), rng.choice(CLIENTS), rng.choice(IPS)
    pairs = {
        "user": [(USER, user)],
        "client": [(CLIENT, client)],
        "user+client": [(USER, user), (CLIENT, client)],
        "ip": [(IP, ip)],
        "empty": [],
        "ip+user": [(IP, ip), (USER, user)],
        "ip+client": [(CLIENT, client), (IP, ip)],
        "bad": [(rng.choice(BAD_TYPES), rng.choice(USERS))],
        "user+user": [(USER, rng.choice(USERS)), (USER, user)],  # the wire keeps the last
        # Which of several problems Kafka reports follows its HashMap order of the components.
        "mixed-bad": [(rng.choice(BAD_TYPES), rng.choice(USERS))] + rng.sample(
            [(USER, user), (CLIENT, client), (IP, ip)], rng.randint(1, 3)),
    }[shape]
    if rng.random() < 0.5:
        pairs.reverse()
    return tuple(pairs)


def effective(entity):
    """The entity as both servers read it off the wire: a repeated type keeps its last name."""
    d = {}
    for t, n in entity:
        d[t] = n
    return key_of(d.items())


def matches_own_connections(entity):
    d = dict(effective(entity))
    return d.get(USER, "ANONYMOUS") in (None, "ANONYMOUS") and (CLIENT not in d or d[CLIENT] is None
                                                                or d[CLIENT] == "kquota-reference")


def gen_ops(rng, entity):
    is_ip = any(t == IP for t, _ in entity)
    ops = []
    for _ in range(rng.choices([0, 1, 2, 3, 4, 6], weights=[5, 40, 30, 15, 8, 2])[0]):
        r = rng.random()
        if r < 0.7:
            key = rng.choice(IP_KEYS if is_ip else USER_CLIENT_KEYS)
        elif r < 0.85:
            key = rng.choice(USER_CLIENT_KEYS + IP_KEYS)
        else:
            key = rng.choice(ODD_KEYS)
        if ops and rng.random() < 0.05:
            key = rng.choice(ops)[0]  # a duplicate key
        if rng.random() < 0.25:
            value = REMOVE if rng.random() < 0.5 else (REMOVE, rng.choice([0.0, -5.0, 1e9]))
        elif key.startswith("request_percentage") and matches_own_connections(entity):
            value = rng.choice(HARMLESS_REQUEST_PERCENTAGES)
        elif rng.random() < 0.5:
            value = float(rng.choice([1, 2, 10, 1024, 1_000_000, 2 ** 20]))
        else:
            value = rng.choice(VALUES)
        ops.append((key, value))
    return ops


def gen_batch(rng):
    batch = []
    for _ in range(rng.choices([0, 1, 2, 3, 4, 8], weights=[1, 50, 25, 15, 8, 2])[0]):
        entity = gen_entity(rng)
        batch.append((entity, gen_ops(rng, entity)))
    if rng.random() < 0.08 and batch:
        entity, _ = rng.choice(batch)
        copy = tuple(reversed(entity)) if rng.random() < 0.5 else entity
        batch.insert(rng.randrange(len(batch) + 1), (copy, gen_ops(rng, copy)))
    return batch


def gen_filter(rng):
    comps = []
    for _ in range(rng.choices([0, 1, 2, 3], weights=[15, 45, 30, 10])[0]):
        t = rng.choice([USER, CLIENT, IP]) if rng.random() < 0.9 else rng.choice(BAD_TYPES)
        pool = {USER: USERS, CLIENT: CLIENTS, IP: IPS}.get(t, USERS)
        r = rng.random()
        if r < 0.4:
            name = rng.choice([n for n in pool if n is not None] + ["kquota.fence"])
            comps.append((t, EXACT, name))
        elif r < 0.65:
            comps.append((t, DEFAULT, None))
        elif r < 0.9:
            comps.append((t, SPECIFIED, None))
        else:
            comps.append(rng.choice([(t, EXACT, None), (t, DEFAULT, "x"), (t, SPECIFIED, "x"), (t, 3, None),
                                     (t, -1, None), (t, 7, "x")]))
    return comps, rng.random() < 0.4


def fmt(x):
    """A batch or op list for messages, with REMOVE spelled out."""
    if x is REMOVE:
        return "REMOVE"
    if isinstance(x, (list, tuple)):
        return type(x)(fmt(i) for i in x)
    return x


def describable(key):
    """An entity both sides could hold (names are not checked: Kafka describes any)."""
    types = {t for t, _ in key}
    names_ok = all(n is None or n != "" for _, n in key)
    return names_ok and (types == {IP} or (types and types <= {USER, CLIENT}))


# --------------------------------------------------------------------------------------------------
# The run.


class Differential:
    def __init__(self, kafka, kq, seed, n_ops):
        self.kafka, self.kq = kafka, kq
        self.seed, self.n_ops = seed, n_ops
        self.rng = random.Random(seed)
        self.model = {}  # entity key -> values both sides agree on
        self.fence_counter = 0
        self.stats = Counter()
        self.devs = Counter()
        self.failures = []

    def fail(self, index, what):
        self.stats["unexplained"] += 1
        if len(self.failures) < MAX_REPORTED:
            self.failures.append(f"op #{index}: {what}")

    # -- synchronisation with Kafka's asynchronous metadata

    def fence(self):
        self.fence_counter += 1
        value = float(self.fence_counter)
        for side in (self.kafka, self.kq):
            side.alter(1, [(FENCE, [("producer_byte_rate", value)])]).assert_ok()
        deadline = time.monotonic() + FENCE_TIMEOUT_S
        while True:
            got = self.kafka.values_of(1, FENCE).get("producer_byte_rate")
            if got == value:
                break
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"Kafka's broker did not reflect an alteration within {FENCE_TIMEOUT_S} s "
                    f"(fence value {value}, broker shows {got})")
            time.sleep(0.005)
        self.model[key_of(FENCE)] = {"producer_byte_rate": value}

    def clear(self):
        """Removes every configured key on both sides, so the run starts from nothing."""
        for side in (self.kafka, self.kq):
            entries = side.everything(1)
            if entries:
                res = side.alter(1, [(tuple(k), [(q, REMOVE) for q in vals]) for k, vals in entries.items()])
                res.assert_ok()
        self.fence()
        for side in (self.kafka, self.kq):
            left = {k: v for k, v in side.everything(1).items() if k != key_of(FENCE)}
            assert not left, f"could not clear the starting state: {left}"

    # -- alterations

    def alter_step(self, index):
        batch = gen_batch(self.rng)
        version = self.rng.choice([0, 1])
        validate_only = self.rng.random() < 0.15
        self.stats[f"alter v{version}" + (" validate_only" if validate_only else "")] += 1
        kafka_res = self.kafka.alter(version, batch, validate_only)
        kq_res = self.kq.alter(version, batch, validate_only)
        self.compare_alter(index, batch, kafka_res, kq_res)
        self.fence()
        self.compare_state(index, batch, validate_only)

    def compare_alter(self, index, batch, kafka_res, kq_res):
        where = f"alter {fmt(batch)!r}\n  Kafka: {kafka_res.response}\n  kquota: {kq_res.response}"
        if set(kafka_res.results) != set(kq_res.results):
            self.fail(index, f"answered entities differ: Kafka {[show(k) for k in kafka_res.results]}, "
                             f"kquota {[show(k) for k in kq_res.results]}\n  {where}")
            return
        kafka_echo = {key_of(p): p for p in kafka_res.entity_orders}
        kq_echo = {key_of(p): p for p in kq_res.entity_orders}
        for k in kafka_res.results:
            if kafka_echo[k] != kq_echo[k]:
                self.fail(index, f"entity {show(k)} echoed as {kq_echo[k]}, Kafka {kafka_echo[k]}\n  {where}")
        if [key_of(p) for p in kafka_res.entity_orders] != [key_of(p) for p in kq_res.entity_orders]:
            self.devs[dv.RESULT_ORDER] += 1
        copies = {}
        for entity, ops in batch:
            copies.setdefault(effective(entity), []).append((entity, ops))
        for k, kafka_r in kafka_res.results.items():
            kq_r = kq_res.results[k]
            if kafka_r == kq_r:
                continue
            entity, ops = copies[k][0]
            if len(copies[k]) > 1:
                self.fail(index, f"repeated entity {show(k)}: Kafka {kafka_r}, kquota {kq_r}\n  {where}")
                continue
            self.explain_alter(index, tuple(sorted(k, key=lambda p: p[0])), ops, kafka_r, kq_r, where)

    def explain_alter(self, index, entity, ops, kafka_r, kq_r, where):
        """Classifies a per-entity difference, then re-sends the alteration without what that deviation
        concerns (validate_only, alone) until both sides agree, or no documented deviation is left."""
        tried = []
        while True:
            dev = dv.explain_alter(entity, ops, kafka_r, kq_r, tried)
            if dev is None:
                self.fail(index, f"entity {show(key_of(entity))} ops {fmt(ops)!r}: Kafka {kafka_r}, kquota {kq_r}"
                                 f" (deviations already applied: {tried})\n  {where}")
                return
            tried.append(dev)
            entity, ops = dv.neutralize(dev, entity, ops)
            self.stats["counterfactual checks"] += 1
            kafka_r = self.kafka.alter(1, [(entity, ops)], validate_only=True)[entity]
            kq_r = self.kq.alter(1, [(entity, ops)], validate_only=True)[entity]
            if kafka_r == kq_r:
                for d in tried:
                    self.devs[d] += 1
                return

    def compare_state(self, index, batch, validate_only):
        copies = {}
        for entity, ops in batch:
            copies.setdefault(effective(entity), []).append(ops)
        repairs = {"kafka": [], "kq": []}
        for k, entity_copies in copies.items():
            if not describable(k):
                continue
            entity = tuple(sorted(k, key=lambda p: p[0]))
            kafka_vals = self.kafka.values_of(self.rng.choice([0, 1]), entity)
            kq_vals = self.kq.values_of(self.rng.choice([0, 1]), entity)
            before = self.model.get(k, {})
            self.stats["entity states compared"] += 1
            if dv.same_values(kafka_vals, kq_vals):
                self.model[k] = kq_vals
                continue
            dev = None if validate_only else dv.explain_state(entity, entity_copies, before, kafka_vals, kq_vals)
            if dev is None:
                self.fail(index, f"{'validate_only ' if validate_only else ''}state of {show(k)} after "
                                 f"{fmt(batch)!r}: Kafka {kafka_vals}, kquota {kq_vals}, before {before}")
            else:
                self.devs[dev] += 1
            # Bring both sides back to what they agree on, so later comparisons stay exact.
            differing = [q for q in set(kafka_vals) | set(kq_vals)
                         if not dv.same_value(kafka_vals.get(q), kq_vals.get(q))]
            for side, vals in (("kafka", kafka_vals), ("kq", kq_vals)):
                ops = [(q, REMOVE) for q in differing if q in vals]
                if ops:
                    repairs[side].append((entity, ops))
            self.model[k] = {q: v for q, v in kq_vals.items() if q not in differing}
        if repairs["kafka"] or repairs["kq"]:
            self.stats["repairs"] += 1
            if repairs["kafka"]:
                self.kafka.alter(1, repairs["kafka"]).assert_ok()
            if repairs["kq"]:
                self.kq.alter(1, repairs["kq"]).assert_ok()
            self.fence()

    # -- describes

    def describe_step(self, index):
        comps, strict = gen_filter(self.rng)
        version = self.rng.choice([0, 1])
        self.stats[f"describe v{version}"] += 1
        kafka_res = self.kafka.describe(version, comps, strict)
        kq_res = self.kq.describe(version, comps, strict)
        where = f"describe {comps!r} strict={strict} v{version}\n  Kafka: {kafka_res.response}\n  kquota: {kq_res.response}"
        if (kafka_res.error_code, kafka_res.error_message) != (kq_res.error_code, kq_res.error_message):
            self.fail(index, f"describe error differs\n  {where}")
            return
        if kafka_res.entries is None or kq_res.entries is None:
            if kafka_res.entries is not kq_res.entries:
                self.fail(index, f"null entries on one side only\n  {where}")
            return
        if kafka_res.entries.keys() != kq_res.entries.keys() or not all(
                dv.same_values(kafka_res.entries[k], kq_res.entries[k]) for k in kafka_res.entries):
            k_e, q_e = kafka_res.entries, kq_res.entries
            detail = ([f"only Kafka has {show(k)} {k_e[k]}" for k in k_e if k not in q_e]
                      + [f"only kquota has {show(k)} {q_e[k]}" for k in q_e if k not in k_e]
                      + [f"{show(k)}: Kafka {k_e[k]}, kquota {q_e[k]}" for k in k_e
                         if k in q_e and not dv.same_values(k_e[k], q_e[k])])
            self.fail(index, f"describe entries differ: {'; '.join(detail)}\n  {where}")
            return
        kafka_echo = {key_of(p): p for p in kafka_res.entity_orders}
        for p in kq_res.entity_orders:
            if kafka_echo[key_of(p)] != p:
                self.fail(index, f"entity {show(key_of(p))} described as {p}, Kafka {kafka_echo[key_of(p)]}\n  {where}")
        kafka_order = [(key_of(p), [v.key for v in e.values]) for p, e in
                       zip(kafka_res.entity_orders, kafka_res.response.entries)]
        kq_order = [(key_of(p), [v.key for v in e.values]) for p, e in
                    zip(kq_res.entity_orders, kq_res.response.entries)]
        if kafka_order != kq_order:
            self.devs[dv.LIST_ORDER] += 1
        self.stats["describe entries compared"] += len(kq_res.entries)

    def run(self):
        self.clear()
        for index in range(self.n_ops):
            if self.rng.random() < 0.6:
                self.alter_step(index)
            else:
                self.describe_step(index)
        self.stats["ops"] = self.n_ops


def test_deviation_ids_used_here_are_documented():
    documented = dv.documented_ids()
    assert documented, f"no deviation ids found in {dv.SEMANTICS} under '{dv.SECTION}'"
    missing = sorted(dv.USED_IDS - set(documented))
    assert not missing, f"deviation ids used by tests/kafka but missing from {dv.SEMANTICS}: {missing}"


def test_differential_random_sequences(kafka_quotas, kquotad_quotas, capsys):
    seed, n_ops = seed_value(), ops_count()
    rerun = f"KQUOTA_DIFF_SEED={seed} KQUOTA_DIFF_OPS={n_ops} bash tests/kafka/run.sh -k differential"
    with capsys.disabled():
        print(f"\n[differential] seed {seed}, {n_ops} operations; re-run with: {rerun}")
    diff = Differential(kafka_quotas, kquotad_quotas, seed, n_ops)
    started = time.monotonic()
    try:
        diff.run()
    finally:
        elapsed = time.monotonic() - started
        with capsys.disabled():
            print(f"[differential] seed {seed}: {diff.stats.get('ops', 'interrupted before all')} operations in "
                  f"{elapsed:.1f} s; {dict(sorted(diff.stats.items()))}")
            print(f"[differential] documented deviations observed: {dict(sorted(diff.devs.items()))}")
    assert not diff.failures, (
        f"{diff.stats['unexplained']} difference(s) from Apache Kafka that no documented deviation "
        f"explains (seed {seed}; re-run: {rerun}):\n" + "\n".join(diff.failures))
    assert diff.stats["entity states compared"] > 0 and diff.stats["describe entries compared"] > 0, diff.stats
