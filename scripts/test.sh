#!/usr/bin/env bash
# The test command (see README): installs what the tests need, then
# formatting, lints, every test target, and the repo's other checks.
# Set TOKENTAP_TEST_QUICK=1 to run only fmt, clippy and cargo test.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
# A one-shot build gains nothing from incremental state, which would take
# several GB of disk beside the test binaries.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
quick="${TOKENTAP_TEST_QUICK:-0}"
# Telemetry and tokentap settings from the caller's shell must not leak into the tests.
while IFS='=' read -r name _; do
    case "$name" in OTEL_*|TOKENTAP_*) unset "$name" ;; esac
done < <(env)
# The SDK's 5 s span batch delay only slows the telemetry tests down.
export OTEL_BSP_SCHEDULE_DELAY=100

echo "== scripts/setup-test-env.sh (Python SDKs for the drop-in tests, redis-server, prometheus)"
scripts/setup-test-env.sh
export TOKENTAP_PYTHON="$root/.venv/bin/python"
echo "== scripts/setup-browser-test.sh (Chromium + playwright-core for the dashboard test)"
scripts/setup-browser-test.sh

echo "== cargo fmt --check"
cargo fmt --all -- --check

echo "== cargo clippy --all-targets -- -D warnings"
cargo clippy --all-targets -- -D warnings

echo "== cargo test (lib, bins, integration tests)"
# Timing assertions have generous margins; two test threads keep a 2-core
# machine from starving the scripted clocks.
cargo test --lib --bins --tests -- --test-threads=2
echo "== OTLP receiver checks again over http/protobuf (tokentap's own span exporter)"
# The rigs export over gRPC unless told otherwise; http/protobuf is
# tokentap's default protocol and goes through src/telemetry/otlp_http.rs.
TOKENTAP_TEST_OTLP_PROTOCOL=http/protobuf cargo test \
    --test telemetry_export --test providers_e2e --test truth_rules \
    --test measures --test reasoning_latency -- --test-threads=2
echo "== cargo test --benches (each criterion bench once, as a smoke test)"
cargo test --benches

if [ "$quick" = 1 ]; then
    exit 0
fi

echo "== scripts/validate-deploy.sh"
scripts/validate-deploy.sh
echo "== scripts/test-alerts.sh"
scripts/test-alerts.sh
echo "== scripts/test-examples.sh"
scripts/test-examples.sh
echo "== scripts/scaleout-test.sh"
scripts/scaleout-test.sh
if [ -x scripts/bench.sh ]; then
    echo "== scripts/bench.sh --quick (smoke run; timings are not checked)"
    scripts/bench.sh --quick
fi
# --- fuzz (owner: fuzzing) ---------------------------------------------------
# A short bounded run of every cargo-fuzz target (10 s each) when a nightly
# toolchain and cargo-fuzz are installed; otherwise scripts/fuzz.sh prints
# "fuzz: skipped: ..." and why. The committed corpus is replayed on stable
# by tests/fuzz_corpus.rs in the cargo test step above either way.
echo "== scripts/fuzz.sh 10 (bounded fuzzing; skipped without nightly)"
scripts/fuzz.sh 10
# --- end fuzz -----------------------------------------------------------------
# --- soak smoke (see docs/RELIABILITY.md) --------------------------------
# 20 s of the soak at low load, debug build: random upstream faults and
# client cancels; fails on any byte mismatch, lost or duplicated
# measurement, wrong outcome, or an unclean tokentap exit. Keeps
# `tokentap-bench soak` from rotting; the figures of record come from the
# 30-minute run (scripts/soak.sh).
echo "== scripts/soak.sh 20s --debug --concurrency 4 (smoke)"
scripts/soak.sh 20s --debug --concurrency 4 --progress 10s
# --- end soak smoke -------------------------------------------------------
echo "== all checks passed"
