#!/usr/bin/env bash
# The test command (see README): formatting, lints, then every test target.
# The drop-in SDK test needs the venv from scripts/setup-test-env.sh.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

export TOKENTAP_PYTHON="${TOKENTAP_PYTHON:-$root/.venv/bin/python}"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
# Telemetry settings from the caller's shell must not leak into the tests.
while IFS='=' read -r name _; do
    case "$name" in OTEL_*|TOKENTAP_CONFIG) unset "$name" ;; esac
done < <(env)
# The SDK's 5 s span batch delay only slows the telemetry tests down.
export OTEL_BSP_SCHEDULE_DELAY=100

echo "== cargo fmt --check"
cargo fmt --all -- --check

echo "== cargo clippy --all-targets -- -D warnings"
cargo clippy --all-targets -- -D warnings

echo "== cargo test --all-targets"
# Timing assertions have generous margins; two test threads keep a 2-core
# machine from starving the scripted clocks.
cargo test --all-targets -- --test-threads="${TOKENTAP_TEST_THREADS:-2}"
