"""The documented deviations from Apache Kafka, and the rules that explain an observed difference by one.

The ids come from the "Deviations from Apache Kafka" table of docs/semantics.md. Every rule here names
one id; a difference that no rule explains is a failure, and so is a rule whose id the table lacks.

A rule is specific: it looks at the request that produced the difference and at both answers, and says
yes only when the difference is exactly the one its deviation describes. Where the rest of the request
can still be compared, the caller then checks it (see `neutralize`).
"""

import ipaddress
import math
import re
from pathlib import Path

from kqclient import REMOVE

SEMANTICS = Path(__file__).resolve().parents[2] / "docs" / "semantics.md"
SECTION = "## Deviations from Apache Kafka"

UNITS = "D1"          # type:unit keys
NON_FINITE = "D3"     # NaN and infinite values
NEAR_WHOLE = "D4"     # near-whole values of whole-number keys
DUP_ENTITY = "D5"     # an entity twice in one batch
RESULT_ORDER = "D6"   # results of a batch: order
IP_NAMES = "D7"       # ip names: literals only
TWO_SPELLINGS = "D8"  # two spellings of one key in an entity
LIST_ORDER = "D10"    # describe entry and value order
SCRAM_CLASH = "D11"   # with the draft enabled, apiKey 50 is the seeds' AlterQuotas, not DescribeUserScramCredentials

USED_IDS = {UNITS, NON_FINITE, NEAR_WHOLE, DUP_ENTITY, RESULT_ORDER, IP_NAMES, TWO_SPELLINGS, LIST_ORDER,
            SCRAM_CLASH}

# Kafka's config types (QuotaConfig): LONG and INT keys must be whole numbers, DOUBLE keys need not.
KAFKA_TYPES = {
    "producer_byte_rate": "LONG",
    "consumer_byte_rate": "LONG",
    "request_percentage": "DOUBLE",
    "controller_mutation_rate": "DOUBLE",
    "connection_creation_rate": "INT",
}
NATIVE_UNITS = {
    "producer_byte_rate": "broker_bps",
    "consumer_byte_rate": "broker_bps",
    "request_percentage": "percent",
    "controller_mutation_rate": "mutations_per_sec",
    "connection_creation_rate": "connections_per_sec",
}


def documented_ids(path=SEMANTICS):
    """The ids in the first column of the deviations table, in order; duplicates are an error."""
    text = path.read_text()
    start = text.index(SECTION)
    end = text.find("\n## ", start + len(SECTION))
    section = text[start:end if end != -1 else len(text)]
    ids = re.findall(r"^\|\s*(D\d+)\s*\|", section, flags=re.M)
    dups = sorted({i for i in ids if ids.count(i) > 1})
    if dups:
        raise AssertionError(f"{path}: deviation ids {dups} appear more than once")
    return ids


def canonical(key):
    """kquota's reading of a key: `type:native-unit` is `type`."""
    if ":" in key:
        t, unit = key.split(":", 1)
        if NATIVE_UNITS.get(t) == unit:
            return t
    return key


def is_set(value):
    return value is not REMOVE and not (isinstance(value, tuple) and value and value[0] is REMOVE)


def same_value(a, b):
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


def same_values(a, b):
    return a.keys() == b.keys() and all(same_value(a[k], b[k]) for k in a)


def kafka_accepts_non_finite(key, value):
    """Kafka's controller lets NaN through every check, and +inf through DOUBLE keys."""
    if not isinstance(value, float) or math.isfinite(value):
        return False
    if math.isnan(value):
        return key in KAFKA_TYPES
    return value > 0 and KAFKA_TYPES.get(key) == "DOUBLE"


def kafka_near_whole(key, value):
    """A fraction Kafka's `|value % 1| <= 1e-6` test lets through on a LONG or INT key."""
    kind = KAFKA_TYPES.get(key)
    if kind not in ("LONG", "INT") or not isinstance(value, float) or not math.isfinite(value) or value <= 0:
        return False
    limit = 2.0 ** 63 if kind == "LONG" else 2.0 ** 31 - 1
    rem = abs(math.fmod(value, 1.0))
    return value <= limit and 0 < rem <= 1e-6


def ip_literal(name):
    try:
        ipaddress.ip_address(name)
        return "%" not in name  # a scoped address is not a literal Rust's IpAddr reads
    except ValueError:
        return False


def ip_only(entity):
    return len(entity) == 1 and entity[0][0] == "ip" and entity[0][1] is not None


# --------------------------------------------------------------------------------------------------
# Per-entity AlterClientQuotas results. Each rule: (entity pairs, ops, kafka (code, msg), kquota (code,
# msg)) -> bool. `neutralize` then removes what the deviation concerns, so the rest can be compared.


def _finite_rule(entity, ops, kafka, kq):
    m = re.fullmatch(r"Quota (.+) must be a finite number", kq[1] or "")
    return kq[0] == 42 and m is not None and any(
        k == m.group(1) and is_set(v) and kafka_accepts_non_finite(k, v) for k, v in ops)


def _near_whole_rule(entity, ops, kafka, kq):
    m = re.fullmatch(r"(.+) cannot be a fractional value\.", kq[1] or "")
    return kq[0] == 42 and m is not None and any(
        k == m.group(1) and is_set(v) and kafka_near_whole(k, v) for k, v in ops)


def _two_spellings_rule(entity, ops, kafka, kq):
    keys = [k for k, _ in ops]
    return ((kq[1] or "").startswith("Ignoring duplicate entity") and len(set(keys)) == len(keys)
            and len({canonical(k) for k in keys}) < len(keys))


def _units_rule(entity, ops, kafka, kq):
    # Kafka refuses to set a `type:unit` key as unknown; kquota refuses a bad unit with Kafka's message
    # plus what is wrong with the unit. Either way the key is one of the entity's ops.
    unit_keys = {k for k, _ in ops if ":" in k}
    kafka_refused = kafka[0] == 42 and any(kafka[1] == f"Invalid configuration key {k}" for k in unit_keys)
    kq_refused = kq[0] == 42 and any((kq[1] or "").startswith(f"Invalid configuration key {k}: ") for k in unit_keys)
    return kafka_refused or kq_refused


def _ip_rule(entity, ops, kafka, kq):
    if not ip_only(entity) or ip_literal(entity[0][1]):
        return False
    return kq == (42, f"{entity[0][1]} is not a valid IP or resolvable host.")


ALTER_RULES = [
    (NON_FINITE, _finite_rule),
    (NEAR_WHOLE, _near_whole_rule),
    (TWO_SPELLINGS, _two_spellings_rule),
    (UNITS, _units_rule),
    (IP_NAMES, _ip_rule),
]

STAND_IN_IP = "10.255.255.254"  # a literal no generator uses


def neutralize(dev, entity, ops):
    """The alteration without what deviation `dev` concerns: both sides must then agree."""
    if dev == NON_FINITE:
        return entity, [(k, v) for k, v in ops if not (is_set(v) and kafka_accepts_non_finite(k, v))]
    if dev == NEAR_WHOLE:
        return entity, [(k, v) for k, v in ops if not (is_set(v) and kafka_near_whole(k, v))]
    if dev in (UNITS, TWO_SPELLINGS):
        return entity, [(k, v) for k, v in ops if ":" not in k]
    if dev == IP_NAMES:
        return (("ip", STAND_IN_IP),), ops
    raise AssertionError(f"no neutralization for {dev}")


def explain_alter(entity, ops, kafka, kq, tried=()):
    """The first deviation (not in `tried`) whose rule explains this per-entity difference, or None."""
    for dev, rule in ALTER_RULES:
        if dev not in tried and rule(entity, ops, kafka, kq):
            return dev
    return None


# --------------------------------------------------------------------------------------------------
# State after an alteration: the values one entity holds on each side.


def apply_ops(before, ops, spell=lambda k: k):
    after = dict(before)
    for k, v in ops:
        if is_set(v):
            after[spell(k)] = float(v)
        else:
            after.pop(spell(k), None)
    return after


def explain_state(entity, copies, before, kafka_vals, kq_vals):
    """Why `entity` holds different values on the two sides after a batch that altered it through
    `copies` (the op lists of every copy of the entity, in request order), or None. `before` is what both
    held before the batch. Each side applies an entity's ops whole or not at all, so the cases are exact."""
    if len(copies) > 1:
        # Kafka commits the first copy's changes although every copy reports an error; kquota nothing.
        if same_values(kq_vals, before) and same_values(kafka_vals, apply_ops(before, copies[0])):
            return DUP_ENTITY
        return None
    ops = copies[0]
    # Kafka never holds a `type:unit` key: setting one is refused, removing one removes nothing.
    kafka_applied = apply_ops(before, [(k, v) for k, v in ops if ":" not in k])
    kq_applied = apply_ops(before, ops, canonical)
    unit_ops = [k for k, _ in ops if ":" in k]
    if same_values(kq_vals, before) and same_values(kafka_vals, kafka_applied):
        # Kafka took the entity and kquota refused it.
        if any(is_set(v) and kafka_accepts_non_finite(k, float(v)) for k, v in ops):
            return NON_FINITE
        if any(is_set(v) and kafka_near_whole(k, float(v)) for k, v in ops):
            return NEAR_WHOLE
        if len({canonical(k) for k, _ in ops}) < len(ops) and len({k for k, _ in ops}) == len(ops):
            return TWO_SPELLINGS
        if unit_ops:
            return UNITS
        if ip_only(entity) and not ip_literal(entity[0][1]):
            return IP_NAMES
        return None
    if unit_ops and same_values(kq_vals, kq_applied) and (
            same_values(kafka_vals, before) or same_values(kafka_vals, kafka_applied)):
        # kquota took the unit keys; Kafka refused them, or took the rest and ignored their removal.
        return UNITS
    return None
