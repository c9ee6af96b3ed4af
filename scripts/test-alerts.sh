#!/usr/bin/env bash
# Check and unit-test the Prometheus rules shipped for users' own stacks:
#   promtool check rules deploy/prometheus/alerts.yml
#   promtool test rules  deploy/prometheus/alerts_test.yml
# promtool comes from Debian's `prometheus` package (2.42 on bookworm); when
# it is missing and we are root with apt-get, it is installed. Run by .ci/run.
# The metric names these rules (and the Grafana dashboard) use are checked
# against a live /metrics scrape by `cargo test --test grafana_names`.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

if ! command -v promtool >/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "test-alerts: installing promtool (Debian package prometheus)"
        apt-get update -qq >/dev/null
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null
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
echo "test-alerts: rules valid, unit tests passed"
