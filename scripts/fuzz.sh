#!/usr/bin/env bash
# Bounded fuzzing: every cargo-fuzz target in fuzz/ for N seconds each
# (default 10), seeded from the committed corpus in fuzz/corpus/<target>/.
#
#   scripts/fuzz.sh [seconds-per-target]
#
# cargo-fuzz needs a nightly toolchain (sanitizer flags). Where there is
# none, or no cargo-fuzz, this prints why it skipped and exits 0: the
# committed corpus is replayed on stable by tests/fuzz_corpus.rs in any case.
# New inputs the fuzzer finds go to a scratch directory, so the committed
# corpus is never changed; a crash fails the script and leaves its input in
# fuzz/artifacts/<target>/ (see fuzz/README.md for what to do with it).
#
# The runs are seeded (FUZZ_SEED, default 1), so a run is a prefix of the
# same longer run on the same build: a machine slower than the one the
# seed was tried on explores a subset of it, not something new. Use
# FUZZ_SEED=0 (libFuzzer picks one) to explore afresh.
#
# Environment: FUZZ_TARGET_DIR (default fuzz/target) is where the
# instrumented build goes; it must not be the normal target directory's
# debug/release folders (cargo-fuzz builds for an explicit --target, so a
# shared CARGO_TARGET_DIR is safe).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root/fuzz"

seconds="${1:-10}"
seed="${FUZZ_SEED:-1}"
case "$seconds" in
    '' | *[!0-9]*) echo "usage: scripts/fuzz.sh [seconds-per-target]" >&2; exit 2 ;;
esac

skip() {
    echo "fuzz: skipped: no nightly toolchain/cargo-fuzz (corpus replay still runs in tests/fuzz_corpus.rs)"
    echo "fuzz: ($1)"
    exit 0
}

# Never let rustup download a toolchain here: CI cannot, and should not try.
export RUSTUP_AUTO_INSTALL=0
if command -v rustup >/dev/null 2>&1; then
    rustup toolchain list 2>/dev/null | grep -q '^nightly' \
        || skip "rustup has no nightly toolchain installed"
    nightly=(+nightly)
elif rustc --version 2>/dev/null | grep -q nightly; then
    nightly=()
else
    skip "no rustup, and the default rustc is not a nightly"
fi
cargo "${nightly[@]}" fuzz --version >/dev/null 2>&1 \
    || skip "cargo-fuzz is not installed (cargo install cargo-fuzz)"

target_dir="${FUZZ_TARGET_DIR:-$root/fuzz/target}"
echo "fuzz: building the targets (nightly, sanitizers) into $target_dir"
cargo "${nightly[@]}" fuzz build --target-dir "$target_dir"

scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
targets=$(cargo "${nightly[@]}" fuzz list)
failed=()
for t in $targets; do
    mkdir -p "$scratch/$t"
    log="$scratch/$t.log"
    echo "fuzz: $t for ${seconds}s (seed $seed)"
    if cargo "${nightly[@]}" fuzz run --target-dir "$target_dir" "$t" "$scratch/$t" "corpus/$t" \
        -- -max_total_time="$seconds" -seed="$seed" -timeout=20 -print_final_stats=1 >"$log" 2>&1; then
        runs=$(grep -oE 'Done [0-9]+ runs' "$log" | tail -n 1 || true)
        echo "fuzz: $t: ok (${runs:-no run count})"
    else
        echo "fuzz: $t: FAILED; the panic and the last lines of its log:"
        grep -m 3 -A 6 'panicked' "$log" || true
        tail -n 40 "$log"
        failed+=("$t")
    fi
done
if [ "${#failed[@]}" -gt 0 ]; then
    echo "fuzz: crashes in: ${failed[*]} (inputs in fuzz/artifacts/<target>/)"
    exit 1
fi
echo "fuzz: every target ran ${seconds}s without a crash"
