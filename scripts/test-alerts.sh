#!/usr/bin/env bash
# Check and unit-test the Prometheus rules shipped for users' own stacks:
#   promtool check rules deploy/prometheus/alerts.yml
#   promtool test rules  deploy/prometheus/alerts_test.yml
#   promtool check rules on every PromQL query of deploy/grafana/tokentap.json
#                        and deploy/grafana/compare.json (Grafana variables
#                        replaced), to catch syntax errors
# promtool comes from Debian's `prometheus` package (2.42 on bookworm); when
# it is missing and we are root with apt-get, it is installed. Run by .ci/run.
# The metric names these rules (and the Grafana dashboard) use are checked
# against a live /metrics scrape by `cargo test --test grafana_names`.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=lib/retry.sh
. "$root/scripts/lib/retry.sh"
cd "$root"

if ! command -v promtool >/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "test-alerts: installing promtool (Debian package prometheus)"
        retry apt-get update -qq >/dev/null
        DEBIAN_FRONTEND=noninteractive retry apt-get install -y -qq --no-install-recommends prometheus >/dev/null
    else
        echo "test-alerts: promtool missing (apt-get install prometheus)" >&2
        exit 1
    fi
fi
echo "== $(promtool --version 2>&1 | head -1)"

echo "-- promtool check rules deploy/prometheus/alerts.yml"
promtool check rules deploy/prometheus/alerts.yml
echo "-- promtool test rules deploy/prometheus/alerts_test.yml"
promtool test rules deploy/prometheus/alerts_test.yml
# The dashboard's queries, as recording rules promtool parses: panel targets,
# annotations and template variable queries (label_values(...) is Grafana's,
# not PromQL: its selector is checked).
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
python3 - "$tmp/dashboard-rules.yml" deploy/grafana/tokentap.json deploy/grafana/compare.json <<'PY'
import json, re, sys
subst = {"$__rate_interval": "5m", "$__interval": "1m", "$__range": "1h",
         "$route_a": "a", "$model_a": "m", "$route_b": "b", "$model_b": "m",
         "$prompt_size": ".+", "$load_class": ".+",
         "$route": ".*", "$model": ".*", "$tenant": ".*"}
exprs = []
def walk(v):
    if isinstance(v, dict):
        for k, x in v.items():
            if k in ("expr", "definition") and isinstance(x, str) and x:
                exprs.append(x)
            else:
                walk(x)
    elif isinstance(v, list):
        for x in v:
            walk(x)
for path in sys.argv[2:]:
    walk(json.load(open(path)))
with open(sys.argv[1], "w") as out:
    out.write("groups:\n  - name: dashboard\n    rules:\n")
    for i, e in enumerate(exprs):
        for k, val in subst.items():
            e = e.replace(k, val)
        m = re.fullmatch(r"\s*label_values\((.*),\s*\w+\)\s*", e, re.S)
        if m:
            e = m.group(1)
        out.write(f"      - record: dashboard:query:{i}\n        expr: {json.dumps(e)}\n")
print(f"{len(exprs)} dashboard queries")
PY
echo "-- promtool check rules: deploy/grafana/{tokentap,compare}.json queries"
promtool check rules "$tmp/dashboard-rules.yml"
echo "test-alerts: rules valid, unit tests passed, dashboard queries parse"
