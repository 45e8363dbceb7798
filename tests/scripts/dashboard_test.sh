#!/usr/bin/env bash
# deploy/grafana/walserver.json against a running walserver on the real Kafka broker: every
# metric a panel (or the instance variable) queries is on /metrics, with every label the query
# filters or groups by and every label its legend shows. Prometheus adds `instance` itself.
source "$(dirname "$0")/lib.sh"
require_kafka
dashboard=$(cd "$(dirname "$0")/../.." && pwd)/deploy/grafana/walserver.json
# shellcheck disable=SC2046
start_walserver dashboard $(kafka_args dashboard)
W() { "$WALCTL" --server="$ADDR" "$@"; }

# Traffic that makes every labelled family show up: calls that succeed and fail, reads, pruning.
W create 1 >/dev/null
W append 1 one two three >/dev/null
W read 1 >/dev/null
W truncate 1 2 >/dev/null
W info 404 >/dev/null 2>&1 || true
# librdkafka statistics (broker connections, traffic) arrive every 5 s.
for _ in $(seq 1 80); do
  grep -q '^walserver_kafka_broker_up{' <<<"$(curl -sf "http://$HTTP/metrics")" && break
  sleep 0.25
done
curl -sf "http://$HTTP/metrics" >"$work/metrics"

python3 - "$dashboard" "$work/metrics" <<'PY' || fail "the dashboard queries what /metrics lacks"
import json, re, sys

dashboard = json.load(open(sys.argv[1]))
labels_of = {}  # sample name -> labels seen on it
for line in open(sys.argv[2]):
    if line.startswith("#") or not line.strip():
        continue
    m = re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([^}]*)\})?\s", line)
    labels_of.setdefault(m.group(1), set()).update(re.findall(r'([a-zA-Z_]+)="', m.group(3) or ""))

queries = []  # (where, expression, legend)
def walk(panels):
    for panel in panels:
        walk(panel.get("panels", []))
        for target in panel.get("targets", []):
            queries.append((panel["title"], target["expr"], target.get("legendFormat", "")))
walk(dashboard["panels"])
for variable in dashboard["templating"]["list"]:
    if variable["type"] == "query":
        queries.append((f"variable {variable['name']}", variable["definition"], ""))

problems = []
for where, expr, legend in queries:
    metrics = set(re.findall(r"\bwalserver_[a-z0-9_]+", expr))
    if len(metrics) != 1:
        problems.append(f"{where}: expected one metric per query, got {sorted(metrics)} in {expr}")
        continue
    metric = metrics.pop()
    if metric not in labels_of:
        problems.append(f"{where}: {metric} is not on /metrics")
        continue
    used = set()
    for group in re.findall(r"\bby \(([^)]*)\)", expr):
        used.update(label.strip() for label in group.split(","))
    for matchers in re.findall(r"\{([^}]*)\}", expr):
        used.update(re.findall(r'([a-zA-Z_]+)\s*(?:=~|!~|!=|=)\s*"', matchers))
    used.update(re.findall(r"\{\{\s*([a-zA-Z_]+)\s*\}\}", legend))
    used.update(re.findall(r"label_values\(\s*[a-z0-9_]+\s*,\s*([a-zA-Z_]+)\)", expr))
    for label in sorted(used - {"instance"} - labels_of[metric]):
        problems.append(f"{where}: {metric} has no label '{label}' ({expr})")
print(f"{len(queries)} queries checked against {len(labels_of)} series names")
for problem in problems:
    print("FAIL:", problem)
sys.exit(1 if problems or len(queries) < 20 else 0)
PY
echo "dashboard_test: all checks passed"
