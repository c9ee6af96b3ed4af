# Sourced by the scripts that download packages (npm, PyPI, Debian).
#
# retry CMD...   run CMD up to 3 times, 5 s then 15 s apart; a registry that
#                resets one connection must not fail the whole test run.
# npm_ci DIR     `npm ci` in DIR through retry. npm ci deletes node_modules
#                first, so a half-extracted tree from a failed try is never
#                used. On the last failure it prints the tail of npm's own
#                debug log, since --loglevel=error keeps the cause out of sight.
retry() {
    local attempt=1 pause=5
    until "$@"; do
        if [ "$attempt" -ge 3 ]; then
            echo "retry: '$*' failed $attempt times; giving up" >&2
            return 1
        fi
        echo "retry: '$*' failed (attempt $attempt of 3); again in ${pause}s" >&2
        sleep "$pause"
        attempt=$((attempt + 1)) pause=$((pause * 3))
    done
}

npm_ci() {
    local dir="$1" logs
    logs="$(mktemp -d)"
    if retry npm ci --prefix "$dir" --no-audit --no-fund --loglevel=error --logs-dir "$logs"; then
        rm -rf "$logs"
        return 0
    fi
    echo "npm_ci: npm ci in $dir failed; the end of npm's last debug log:" >&2
    tail -n 30 "$(ls -t "$logs"/*.log 2>/dev/null | head -n 1)" >&2 2>/dev/null || true
    rm -rf "$logs"
    return 1
}
