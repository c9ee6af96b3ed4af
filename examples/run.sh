#!/usr/bin/env bash
# Run one example against the simulated provider, with one command:
#
#   examples/run.sh NAME        NAME: curl | openai | anthropic | langchain | otel | node
#   examples/run.sh list
#
# Starts `tokentap simulate` and tokentap (`--upstream` the simulator) on free
# 127.0.0.1 ports, points the example at tokentap with the SDKs' standard
# variables (OPENAI_BASE_URL, ANTHROPIC_BASE_URL), runs it, and stops both
# processes again. Exit status = the example's.
#
# Binary: $TT_BIN (not TOKENTAP_*: tokentap reads those as config), else the newer of target/{debug,release}/tokentap,
# else `cargo build --release`. Python: $EXAMPLES_PYTHON, else .venv/bin/python
# (scripts/setup-test-env.sh installs examples/requirements.txt there).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
names=(curl openai anthropic langchain otel node)

usage() { echo "usage: examples/run.sh {$(IFS='|'; echo "${names[*]}")|list}" >&2; exit 2; }
[ $# -eq 1 ] || usage
name="$1"
if [ "$name" = list ]; then printf '%s\n' "${names[@]}"; exit 0; fi
[[ " ${names[*]} " == *" $name "* ]] || usage

bin="${TT_BIN:-}"
if [ -z "$bin" ]; then
    for b in "$root/target/debug/tokentap" "$root/target/release/tokentap"; do
        if [ -x "$b" ] && { [ -z "$bin" ] || [ "$b" -nt "$bin" ]; }; then bin="$b"; fi
    done
fi
if [ -z "$bin" ]; then
    (cd "$root" && cargo build --release --bin tokentap)
    bin="$root/target/release/tokentap"
fi
python="${EXAMPLES_PYTHON:-$root/.venv/bin/python}"
[ -x "$python" ] || python=python3

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
wait_port() { # port, pid, what
    for _ in $(seq 1 100); do
        if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
        kill -0 "$2" 2>/dev/null || { echo "run.sh: $3 exited early; log:" >&2; cat "$work/$3.log" >&2; return 1; }
        sleep 0.1
    done
    echo "run.sh: $3 did not open port $1" >&2
    return 1
}

work="$(mktemp -d)"
pids=()
cleanup() {
    local rc=$?
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    if [ $rc -ne 0 ] && [ -f "$work/tokentap.log" ]; then
        echo "--- tokentap log (last 20 lines)" >&2; tail -20 "$work/tokentap.log" >&2
    fi
    rm -rf "$work"
    exit $rc
}
trap cleanup EXIT INT TERM

sim_port="$(free_port)"; proxy_port="$(free_port)"; admin_port="$(free_port)"
# Fast and exact: 12 tokens per answer, 50 ms TTFT, no errors.
"$bin" simulate --listen "127.0.0.1:$sim_port" --ttft-ms 50 --tokens-per-second 400 \
    --tokens 12 --jitter 0 --error-rate 0 >"$work/simulate.log" 2>&1 &
pids+=($!)
wait_port "$sim_port" "${pids[-1]}" simulate

# tokentap reads every TOKENTAP_* variable as configuration (an unknown one
# is an error): start it without the caller's.
strip_env=()
while IFS='=' read -r var _; do
    case "$var" in TOKENTAP_*) strip_env+=(-u "$var") ;; esac
done < <(env)
# Telemetry goes nowhere, except for the otel example, which receives it.
otel_env=(OTEL_SDK_DISABLED=true)
if [ "$name" = otel ]; then
    otlp_port="$(free_port)"
    otel_env=(OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:$otlp_port"
              OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf OTEL_BSP_SCHEDULE_DELAY=100
              OTEL_SERVICE_NAME=tokentap)
    export EXAMPLE_OTLP_PORT="$otlp_port"
fi
env "${strip_env[@]}" "${otel_env[@]}" RUST_LOG="${RUST_LOG:-warn}" \
    "$bin" --upstream "http://127.0.0.1:$sim_port" --listen "127.0.0.1:$proxy_port" \
    --admin-listen "127.0.0.1:$admin_port" >"$work/tokentap.log" 2>&1 &
pids+=($!)
wait_port "$proxy_port" "${pids[-1]}" tokentap

export PROXY_URL="http://127.0.0.1:$proxy_port"
export PROXY_ADMIN_URL="http://127.0.0.1:$admin_port"
export OPENAI_BASE_URL="$PROXY_URL/v1"
export OPENAI_API_KEY=sk-example-not-a-real-key
export ANTHROPIC_BASE_URL="$PROXY_URL"
export ANTHROPIC_API_KEY=sk-ant-example-not-a-real-key
# Nothing from the caller's telemetry setup leaks into the examples.
unset OTEL_EXPORTER_OTLP_ENDPOINT OTEL_SERVICE_NAME OTEL_RESOURCE_ATTRIBUTES
echo "== example $name: tokentap $PROXY_URL (admin $PROXY_ADMIN_URL) -> simulate 127.0.0.1:$sim_port"

case "$name" in
    curl) "$here/curl/chat.sh" ;;
    openai) "$python" "$here/python/openai_sdk.py" ;;
    anthropic) "$python" "$here/python/anthropic_sdk.py" ;;
    langchain) "$python" "$here/python/langchain_chat.py" ;;
    otel) "$python" "$here/python/otel_app.py" ;;
    node)
        if [ ! -d "$here/node/node_modules/openai" ]; then
            npm ci --prefix "$here/node" --no-audit --no-fund --loglevel=error
        fi
        node "$here/node/openai_chat.mjs"
        ;;
esac
