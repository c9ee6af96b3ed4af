#!/usr/bin/env bash
# curl through tokentap: OpenAI chat (non-streaming and streaming) and an
# Anthropic message stream. Needs PROXY_URL (e.g. http://127.0.0.1:8080).
#   examples/run.sh curl
set -euo pipefail
url="${PROXY_URL:?set PROXY_URL, e.g. http://127.0.0.1:8080}"
fail() { echo "FAIL: $*" >&2; exit 1; }

echo "== OpenAI chat, non-streaming"
body="$(curl -sS --fail-with-body "$url/v1/chat/completions" \
    -H 'authorization: Bearer sk-example' -H 'content-type: application/json' \
    -H 'x-tenant-id: team-search' \
    -d '{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Say hi"}]}')"
echo "${body:0:200}..."
grep -q '"completion_tokens"' <<<"$body" || fail "no usage in the answer"

echo "== OpenAI chat, streaming (with usage)"
sse="$(curl -sS -N --fail-with-body "$url/v1/chat/completions" \
    -H 'authorization: Bearer sk-example' -H 'content-type: application/json' \
    -H 'x-tenant-id: team-search' \
    -d '{"model":"gpt-4o-mini","stream":true,"stream_options":{"include_usage":true},
         "messages":[{"role":"user","content":"Say hi"}]}')"
echo "$(grep -c '^data:' <<<"$sse") SSE events; last: $(grep '^data:' <<<"$sse" | tail -1)"
grep -q '^data: \[DONE\]' <<<"$sse" || fail "stream did not end with [DONE]"

echo "== Anthropic messages, streaming"
sse="$(curl -sS -N --fail-with-body "$url/v1/messages" \
    -H 'x-api-key: sk-ant-example' -H 'anthropic-version: 2023-06-01' \
    -H 'content-type: application/json' \
    -d '{"model":"claude-sonnet-4-6","max_tokens":64,"stream":true,
         "messages":[{"role":"user","content":"Say hi"}]}')"
echo "$(grep -c '^event:' <<<"$sse") SSE events; last: $(grep '^event:' <<<"$sse" | tail -1)"
grep -q '^event: message_stop' <<<"$sse" || fail "stream did not end with message_stop"

if [ -n "${PROXY_ADMIN_URL:-}" ]; then
    echo "== what tokentap measured (${PROXY_ADMIN_URL}/metrics)"
    if metrics="$(curl -sS --fail "$PROXY_ADMIN_URL/metrics" 2>/dev/null)"; then
        grep -E '^(tokentap_requests_total|gen_ai_server_time_to_first_token_seconds_count)' <<<"$metrics" | head -6 || true
    else
        echo "(admin listener not available in this build)"
    fi
fi
echo "curl example: ok"
