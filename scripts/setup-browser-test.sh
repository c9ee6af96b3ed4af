#!/usr/bin/env bash
# Install what the dashboard browser test (tests/dashboard.rs) needs:
# Debian's chromium and node/npm from apt, and playwright-core (pinned in
# tests/browser/package-lock.json) from the npm registry. playwright-core
# downloads no browser of its own; the test drives /usr/bin/chromium.
# Idempotent: installed pieces are left alone.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=lib/retry.sh
. "$root/scripts/lib/retry.sh"

missing=()
[ -x /usr/bin/chromium ] || missing+=(chromium)
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
if [ "${#missing[@]}" -gt 0 ]; then
    if [ "$(id -u)" -ne 0 ] && ! command -v sudo >/dev/null 2>&1; then
        echo "setup-browser-test: need ${missing[*]}; run as root: apt-get install -y ${missing[*]}" >&2
        exit 1
    fi
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo=sudo
    echo "setup-browser-test: apt-get install ${missing[*]}" >&2
    retry $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive retry $sudo apt-get install -y -qq "${missing[@]}"
fi

cd "$root/tests/browser"
stamp="node_modules/.package-lock.sha"
want="$(sha256sum package-lock.json | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null || true)" != "$want" ]; then
    npm_ci .
    echo "$want" >"$stamp"
fi

echo "setup-browser-test: $(/usr/bin/chromium --version 2>/dev/null || echo chromium), node $(node --version), playwright-core $(node -p 'require("playwright-core/package.json").version')"
