#!/usr/bin/env python3
"""Resolution parity: kquota (kafka sub-quota policy) against Apache Kafka's own ClientQuotaManager.

Generates seeded random quota configurations and (user, client-id) pairs, runs both sides on the same
input and compares, per pair and key, the limit and the bucket (Kafka's `user` / `client-id` metric
tags). Exits 1 with a readable diff on any mismatch (the first 20; PARITY_SHOW=N shows N). Run by
parity.sh, which builds both sides.
"""
import argparse
import json
import os
import random
import subprocess
import sys
import tempfile

KEYS = ["producer_byte_rate", "consumer_byte_rate", "request_percentage"]
# Kafka has no "unlimited": a pair without a quota gets a sensor bounded by Long.MAX_VALUE as a double.
KAFKA_UNLIMITED = float(2**63)
# Names that stress sanitizing and the default sentinel: a user or client literally named <default>,
# its sanitized spelling, separators Kafka's sensor names use, non-ASCII, and characters URLEncoder
# treats specially.
NAMES = ["alice", "bob", "carol", "<default>", "%3Cdefault%3E", "a b", "x:y", "ü-名前", "😀",
         "dot.dash-under_", "*+~", "default", "A", "a"]
EMPTY_REFUSAL = {"user": "Empty user not supported", "client_id": "Empty client-id not supported"}


def byte_rate(rng):
    if rng.random() < 0.01:
        return 2**63  # the largest accepted value, equal to Kafka's no-quota bound
    return int(10 ** rng.uniform(0, 12))


def percentage(rng):
    return rng.choice([rng.randint(1, 1000), rng.randint(1, 4000) / 4, round(rng.uniform(0.01, 500), 3)])


def gen_case(rng, case, pairs_per_case):
    users = rng.sample(NAMES, rng.randint(2, 5))
    clients = rng.sample(NAMES, rng.randint(2, 5))
    entities = {}
    for _ in range(rng.randint(1, 12)):
        kind = rng.choice(["user", "user+client", "client"])
        ent = {}
        if kind in ("user", "user+client"):
            ent["user"] = None if rng.random() < 0.3 else ("" if rng.random() < 0.03 else rng.choice(users))
        if kind in ("client", "user+client"):
            ent["client_id"] = None if rng.random() < 0.3 else ("" if rng.random() < 0.03 else rng.choice(clients))
        ident = json.dumps(ent, sort_keys=True)
        if ident in entities:
            continue
        values = {}
        for key in rng.sample(KEYS, rng.randint(1, 3)):
            values[key] = percentage(rng) if key == "request_percentage" else byte_rate(rng)
        entities[ident] = dict(ent, values=values)
    pair_users = users + ["", "zed"]
    pair_clients = clients + ["", "unseen"]
    pairs = [[rng.choice(pair_users), rng.choice(pair_clients)] for _ in range(pairs_per_case)]
    return {"case": case, "quotas": list(entities.values()), "pairs": pairs}


def empty_component(quota):
    # The controller checks components in its HashMap's order, where client-id comes before user.
    for field in ("client_id", "user"):
        if quota.get(field) == "":
            return field
    return None


def configures(case, key, user, client):
    """Whether the case configures `key` on the entity with these components (MISSING: absent)."""
    for q in case["quotas"]:
        if q.get("user", MISSING) == user and q.get("client_id", MISSING) == client and key in q["values"]:
            return True
    return False


MISSING = object()


def empty_user_deviation(case, key, user, client, k, q):
    """The one documented deviation (docs/semantics.md, D12): for an empty user, Kafka's metric-tag shortcut
    stops at a configured {user=<default>} (unless {user=<default>, client-id=c} or
    {user=<default>, client-id=<default>} comes first) and picks tags whose lookup finds no quota, so the
    connection escapes its client-id quota; kquota applies the client-id level (7 or 8) that Kafka's own
    lookup (findQuota) names for an empty user."""
    return (user == "" and client != "" and k["limit"] == KAFKA_UNLIMITED
            and q["limit"] is not None and q.get("level") in (7, 8)
            and configures(case, key, None, MISSING)
            and not configures(case, key, None, client)
            and not configures(case, key, None, None))


def run(cmd, stdin_path):
    with open(stdin_path, "rb") as f:
        p = subprocess.run(cmd, stdin=f, capture_output=True)
    if p.returncode != 0:
        sys.exit(f"parity: {' '.join(cmd[:3])}... failed ({p.returncode}):\n{p.stderr.decode(errors='replace')}")
    return [json.loads(line) for line in p.stdout.decode().splitlines() if line.strip()]


def entity_str(q):
    parts = []
    for field, label in (("user", "user"), ("client_id", "client-id")):
        if field in q:
            parts.append(f"{label}={'<default>' if q[field] is None else repr(q[field])}")
    return "{" + ", ".join(parts) + "}"


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--cases", type=int, default=400)
    ap.add_argument("--pairs", type=int, default=25, help="pairs per case")
    ap.add_argument("--java", required=True, help="java command line, space separated")
    ap.add_argument("--kquota", required=True, help="path of the kafka_parity example binary")
    args = ap.parse_args()
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**32)
    print(f"parity: seed {seed} (re-run: interop/quota-manager/parity.sh --seed {seed}"
          f" --cases {args.cases} --pairs {args.pairs})")
    rng = random.Random(seed)
    cases = [gen_case(rng, c, args.pairs) for c in range(args.cases)]

    with tempfile.TemporaryDirectory() as tmp:
        kq_in = os.path.join(tmp, "kquota.jsonl")
        jv_in = os.path.join(tmp, "kafka.jsonl")
        with open(kq_in, "w") as f:
            for c in cases:
                f.write(json.dumps(c, ensure_ascii=False) + "\n")
        # Kafka's controller refuses an empty name before any broker sees it, so its quota manager
        # never receives one; kquota must refuse it with the controller's message instead.
        with open(jv_in, "w") as f:
            for c in cases:
                kept = [q for q in c["quotas"] if empty_component(q) is None]
                f.write(json.dumps(dict(c, quotas=kept), ensure_ascii=False) + "\n")
        kafka_rows = run(args.java.split() + ["kquota.interop.Parity"], jv_in)
        kquota_rows = run([args.kquota], kq_in)

    mismatches = []
    refused = {}
    kq = {}
    for r in kquota_rows:
        if "error" in r:
            refused[(r["case"], r["quota"])] = r["error"]
        else:
            kq[(r["case"], r["pair"], r["key"])] = r
    kf = {(r["case"], r["pair"], r["key"]): r for r in kafka_rows}

    empty_refusals = 0
    for c in cases:
        for i, q in enumerate(c["quotas"]):
            field = empty_component(q)
            got = refused.pop((c["case"], i), None)
            if field is None:
                if got is not None:
                    mismatches.append((c, None, None, f"kquota refused {entity_str(q)} {q['values']}: {got};"
                                       " Kafka's quota manager accepts it"))
            elif got != EMPTY_REFUSAL[field]:
                mismatches.append((c, None, None, f"{entity_str(q)}: kquota answered {got!r}, Kafka's controller"
                                   f" refuses it with {EMPTY_REFUSAL[field]!r}"))
            else:
                empty_refusals += 1

    compared = limited = deviations = 0
    for c in cases:
        for p, (user, client) in enumerate(c["pairs"]):
            for key in KEYS:
                k = kf.get((c["case"], p, key))
                q = kq.get((c["case"], p, key))
                if k is None or q is None:
                    mismatches.append((c, p, key, f"missing row: kafka={k} kquota={q}"))
                    continue
                compared += 1
                problem = None
                if q["limit"] is None:
                    if k["limit"] != KAFKA_UNLIMITED:
                        problem = "kquota: unlimited"
                else:
                    limited += 1
                    if float(q["limit"]) != float(k["limit"]):
                        problem = "limits differ"
                    # At 2^63 Kafka cannot tell a quota from no quota, so its tags may be those of
                    # "no quota"; the limit still agrees.
                    elif float(q["limit"]) != KAFKA_UNLIMITED and (q["user"], q["client_id"]) != (k["user"], k["client_id"]):
                        problem = "buckets differ"
                if problem and empty_user_deviation(c, key, user, client, k, q):
                    deviations += 1
                elif problem:
                    mismatches.append((c, p, key, problem))

    pairs = sum(len(c["pairs"]) for c in cases)
    quotas = sum(len(c["quotas"]) for c in cases)
    print(f"parity: {len(cases)} configurations ({quotas} quota entities, {empty_refusals} with an empty name"
          f" refused as Kafka's controller does), {pairs} pairs, {compared} (pair, key) results compared,"
          f" {limited} of them limited; {deviations} differ by the documented empty-user deviation")
    if not mismatches:
        print("parity: kquota and Kafka's ClientQuotaManager agree on every limit and bucket")
        return 0
    print(f"parity: {len(mismatches)} MISMATCHES", file=sys.stderr)
    shown = 0
    for c, p, key, problem in mismatches:
        if shown == int(os.environ.get("PARITY_SHOW", "20")):
            print(f"... and {len(mismatches) - shown} more", file=sys.stderr)
            break
        shown += 1
        print(f"\n-- case {c['case']}: {problem}", file=sys.stderr)
        for q in c["quotas"]:
            print(f"   {entity_str(q)} {json.dumps(q['values'])}", file=sys.stderr)
        if p is not None:
            user, client = c["pairs"][p]
            k = kf.get((c["case"], p, key), {})
            q = kq.get((c["case"], p, key), {})
            lim = lambda v: "unlimited" if v is None or v == KAFKA_UNLIMITED else v
            print(f"   pair {p}: user={user!r} client-id={client!r} key={key}", file=sys.stderr)
            print(f"   - kafka : limit={lim(k.get('limit'))} tags=(user={k.get('user')!r}, client-id={k.get('client_id')!r})",
                  file=sys.stderr)
            print(f"   + kquota: limit={lim(q.get('limit'))} tags=(user={q.get('user')!r}, client-id={q.get('client_id')!r})"
                  f" level={q.get('level')}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
