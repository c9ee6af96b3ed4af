#!/usr/bin/env bash
# The soak test in one command (see docs/RELIABILITY.md).
#
#   scripts/soak.sh                  30 minutes, release build, concurrency 24
#   scripts/soak.sh 2m               a shorter run (the duration comes first)
#   scripts/soak.sh 20s --debug --concurrency 4
#                                    CI smoke: debug build (what scripts/test.sh runs)
#
# Other flags go to `tokentap-bench soak` (--concurrency, --seed, --progress,
# --max-rss-growth-mib, --out; see `tokentap-bench soak --help`).
#
# It starts a scripted upstream with random faults and an OTLP receiver
# (both inside tokentap-bench) and a real tokentap process between them,
# drives steady load with random client cancels, checks every response byte
# and matches every request with its span and with tokentap_requests_total.
# Everything listens on 127.0.0.1; only the tokentap it started is stopped,
# by PID. Exit status 1 when a byte differed, a measurement was lost or
# duplicated, an outcome was wrong, tokentap's RSS grew past the bound or
# tokentap did not exit cleanly. Report: target/soak-results/soak-<time>/report.md.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

duration=30m profile=release args=()
case "${1:-}" in
    [0-9]*) duration="$1"; shift ;;
esac
for a in "$@"; do
    case "$a" in
        --release) profile=release ;;
        --debug) profile=debug ;;
        *) args+=("$a") ;;
    esac
done

echo "== cargo build ($profile): tokentap, tokentap-bench" >&2
flag=()
[ "$profile" = release ] && flag=(--release)
cargo build "${flag[@]}" --bin tokentap --bin tokentap-bench >&2

target_dir="${CARGO_TARGET_DIR:-$root/target}"
exec "$target_dir/$profile/tokentap-bench" soak --duration "$duration" \
    --bin-dir "$target_dir/$profile" "${args[@]}"
