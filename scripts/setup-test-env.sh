#!/usr/bin/env bash
# Create the Python virtual environment the drop-in SDK test uses
# (tests/python_sdk.rs): .venv at the repository root with the official
# openai and anthropic packages pinned in tests/sdk/requirements.txt; and
# install redis-server for tests/shared_state.rs and prometheus for
# tests/grafana_compare.rs.
# Idempotent: re-running only installs what changed.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=lib/retry.sh
. "$root/scripts/lib/retry.sh"
venv="$root/.venv"
req="$root/tests/sdk/requirements.txt"
python="${PYTHON:-python3}"

# redis-server (Debian) for the shared-state tests (tests/shared_state.rs),
# prometheus (Debian) for the compare dashboard's queries against a real
# Prometheus (tests/grafana_compare.rs): each test starts its own on a free
# port and stops it by its PID.
missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v prometheus >/dev/null 2>&1 || missing+=(prometheus)
if [ "${#missing[@]}" -gt 0 ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "setup-test-env: installing ${missing[*]} (Debian)" >&2
        export DEBIAN_FRONTEND=noninteractive
        retry apt-get update -qq >/dev/null
        retry apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    else
        echo "setup-test-env: ${missing[*]} not found; run as root: apt-get install -y --no-install-recommends ${missing[*]}" >&2
        exit 1
    fi
fi

if ! command -v "$python" >/dev/null 2>&1; then
    echo "setup-test-env: $python not found; install Python 3.9+ (e.g. apt-get install python3 python3-venv)" >&2
    exit 1
fi

if [ ! -x "$venv/bin/python" ]; then
    echo "setup-test-env: creating $venv" >&2
    if ! "$python" -m venv "$venv"; then
        echo "setup-test-env: '$python -m venv' failed; on Debian/Ubuntu install python3-venv" >&2
        exit 1
    fi
fi

stamp="$venv/.requirements.sha"
want="$(sha256sum "$req" | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null || true)" != "$want" ]; then
    retry "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip
    retry "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$req"
    echo "$want" >"$stamp"
fi

"$venv/bin/python" -c 'import openai, anthropic; print(f"setup-test-env: openai {openai.__version__}, anthropic {anthropic.__version__} in '"$venv"'")'

# Further requirement sets in the same venv: the deploy validation tools
# (scripts/validate-deploy.sh) and the examples (scripts/test-examples.sh).
# Each has its own stamp, so editing one re-installs only that one.
for extra in "$root/deploy/ci/requirements.txt" "$root/examples/requirements.txt"; do
    [ -f "$extra" ] || continue
    stamp="$venv/.$(basename "$(dirname "$extra")")-requirements.sha"
    want="$(sha256sum "$extra" | cut -d' ' -f1)"
    if [ "$(cat "$stamp" 2>/dev/null || true)" != "$want" ]; then
        echo "setup-test-env: installing ${extra#"$root"/}" >&2
        retry "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$extra"
        echo "$want" >"$stamp"
    fi
done
