#!/usr/bin/env bash
# Regenerate tokentap's price snapshot (data/prices/genai-prices.json) from
# the pinned release of pydantic's MIT-licensed `genai-prices` on PyPI, and
# copy its licence beside it. To move to a newer release, change VERSION,
# run this, review `git diff data/prices`, and commit.
#
# Needs python3 (3.11+) with venv; installs the package in a throwaway venv.
set -euo pipefail

VERSION="${GENAI_PRICES_VERSION:-0.2.3}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=lib/retry.sh
. "$root/scripts/lib/retry.sh"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
python3 -m venv "$work/venv"
retry "$work/venv/bin/pip" install --quiet --disable-pip-version-check "genai-prices==$VERSION"
out="$root/data/prices"
mkdir -p "$out"
"$work/venv/bin/python" "$root/scripts/lib/prices_convert.py" >"$work/prices.json"
mv "$work/prices.json" "$out/genai-prices.json"
lic="$("$work/venv/bin/python" -c 'import importlib.metadata as m; d = m.distribution("genai-prices"); print([f for f in d.files if f.name == "LICENSE"][0].locate())')"
cp "$lic" "$out/LICENSE"
echo "refresh-prices: genai-prices $VERSION -> data/prices/genai-prices.json ($(wc -c <"$out/genai-prices.json") bytes)"
