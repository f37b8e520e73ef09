#!/usr/bin/env bash
# Checks every PromQL expression of the Grafana dashboards here with promtool: each becomes a
# recording rule in a temporary rules file (Grafana's $variables replaced by values PromQL parses).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
rules=$(mktemp --suffix=.yml)
trap 'rm -f "$rules"' EXIT
python3 - "$rules" "$here"/*.json <<'PY'
import json, sys
out, files = sys.argv[1], sys.argv[2:]
exprs = []
def walk(node):
    if isinstance(node, dict):
        if isinstance(node.get("expr"), str):
            exprs.append(node["expr"])
        for v in node.values():
            walk(v)
    elif isinstance(node, list):
        for v in node:
            walk(v)
for f in files:
    walk(json.load(open(f)))
if not exprs:
    sys.exit("no expr fields found")
with open(out, "w") as o:
    o.write("groups:\n  - name: dashboard\n    rules:\n")
    for i, e in enumerate(exprs):
        e = e.replace("$__rate_interval", "5m").replace("$__interval", "1m").replace("$instance", ".*")
        o.write(f"      - record: dashboard:expr_{i}\n        expr: {json.dumps(e)}\n")
print(f"{len(exprs)} expressions from {len(files)} dashboard(s)")
PY
promtool check rules "$rules"
