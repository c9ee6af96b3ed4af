#!/bin/sh
# Steady demo traffic through tokentap for the local stack: OpenAI chat
# (streaming and not) and Anthropic messages, three simulated models, three
# tenants. Runs until the container stops.
url="${PROXY_URL:-http://tokentap:8080}"
i=0
while true; do
    i=$((i + 1))
    case $((i % 3)) in
        0) tenant=team-search ;;
        1) tenant=team-support ;;
        *) tenant=team-batch ;;
    esac
    for model in sim-gpt-fast sim-gpt-large; do
        curl -sS -N -o /dev/null "$url/v1/chat/completions" \
            -H 'content-type: application/json' -H "x-tenant-id: $tenant" \
            -d "{\"model\":\"$model\",\"stream\":true,\"messages\":[{\"role\":\"user\",\"content\":\"hello $i\"}]}" &
    done
    curl -sS -o /dev/null "$url/v1/chat/completions" \
        -H 'content-type: application/json' -H "x-tenant-id: $tenant" \
        -d "{\"model\":\"sim-gpt-fast\",\"messages\":[{\"role\":\"user\",\"content\":\"hello $i\"}]}" &
    curl -sS -N -o /dev/null "$url/v1/messages" \
        -H 'content-type: application/json' -H "x-tenant-id: $tenant" \
        -H 'anthropic-version: 2023-06-01' \
        -d "{\"model\":\"sim-claude\",\"max_tokens\":200,\"stream\":true,\"messages\":[{\"role\":\"user\",\"content\":\"hello $i\"}]}" &
    wait
    sleep 0.5
done
