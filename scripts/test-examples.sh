#!/usr/bin/env bash
# Run every example in examples/ against `tokentap simulate` (examples/run.sh
# starts the simulator and tokentap for each one). Called from .ci/run.
# Needs: .venv with examples/requirements.txt (scripts/setup-test-env.sh),
# node + npm, curl, and a tokentap binary (target/ or $TT_BIN).
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
# shellcheck source=lib/retry.sh
. "$root/scripts/lib/retry.sh"
# The caller's telemetry settings must not leak into the examples.
while IFS='=' read -r name _; do
    case "$name" in OTEL_*|TOKENTAP_CONFIG) unset "$name" ;; esac
done < <(env)

if [ -d examples/node ] && [ ! -d examples/node/node_modules/openai ]; then
    npm_ci examples/node || exit 1
fi

passed=0 failed=0 failures=()
start=$SECONDS
for name in $(examples/run.sh list); do
    t0=$SECONDS
    if examples/run.sh "$name" >"/tmp/tokentap-example-$$.log" 2>&1; then
        passed=$((passed + 1)); echo "example $name ... ok ($((SECONDS - t0))s)"
    else
        failed=$((failed + 1)); failures+=("$name")
        echo "example $name ... FAILED ($((SECONDS - t0))s)"; sed 's/^/    /' "/tmp/tokentap-example-$$.log"
    fi
done
rm -f "/tmp/tokentap-example-$$.log"
echo "examples: ${failures[*]:+failed: ${failures[*]}; }$((SECONDS - start))s"
echo "examples: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
