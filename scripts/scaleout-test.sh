#!/usr/bin/env bash
# Scale-out, proven locally: three tokentap replicas behind nginx, one
# simulated provider, a real Prometheus scraping the three admin endpoints
# every second. A known number of requests (fixed token count each) goes
# through nginx; Prometheus' aggregated queries must equal what was sent.
#
#   scripts/scaleout-test.sh            (about 30 s; run by .ci/run)
#
# Needs nginx and prometheus (Debian packages; installed with apt-get when
# missing and running as root), python3, and a tokentap binary ($TT_BIN,
# else the newer of target/{debug,release}/tokentap). Everything listens on
# free 127.0.0.1 ports; only the processes started here are stopped, by PID.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=lib/retry.sh
. "$root/scripts/lib/retry.sh"
cd "$root"
REPLICAS=3
REQUESTS="${SCALEOUT_REQUESTS:-300}"
TOKENS=20

need=()
command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || need+=(nginx)
command -v prometheus >/dev/null || need+=(prometheus)
if [ ${#need[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "scaleout: installing ${need[*]} (Debian packages)"
        retry apt-get update -qq >/dev/null
        DEBIAN_FRONTEND=noninteractive retry apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
    else
        echo "scaleout: needs ${need[*]} (apt-get install ${need[*]})" >&2; exit 1
    fi
fi
nginx_bin="$(command -v nginx || echo /usr/sbin/nginx)"

bin="${TT_BIN:-}"
if [ -z "$bin" ]; then
    for b in target/debug/tokentap target/release/tokentap; do
        if [ -x "$b" ] && { [ -z "$bin" ] || [ "$b" -nt "$bin" ]; }; then bin="$b"; fi
    done
fi
[ -n "$bin" ] || { echo "scaleout: no tokentap binary; cargo build --release" >&2; exit 1; }
bin="$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")"

work="$(mktemp -d /tmp/tokentap-scaleout.XXXXXX)"
chmod 755 "$work"
pids=()
cleanup() {
    local rc=$?
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    if [ $rc -ne 0 ]; then
        for f in "$work"/*.log; do echo "--- $f (last 15 lines)"; tail -15 "$f"; done >&2
    fi
    rm -rf "$work"
    exit $rc
}
trap cleanup EXIT INT TERM

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
wait_http() { # url, pid, name
    for _ in $(seq 1 150); do
        if python3 -c 'import sys,urllib.request; urllib.request.urlopen(sys.argv[1], timeout=1)' "$1" 2>/dev/null; then return 0; fi
        kill -0 "$2" 2>/dev/null || { echo "scaleout: $3 exited early" >&2; return 1; }
        sleep 0.1
    done
    echo "scaleout: $3 not answering at $1" >&2; return 1
}

# 1. The provider: exact and fast (fixed token count, no jitter, no errors).
sim_port="$(free_port)"
"$bin" simulate --listen "127.0.0.1:$sim_port" --ttft-ms 20 --tokens-per-second 1000 \
    --tokens "$TOKENS" --jitter 0 --error-rate 0 >"$work/simulate.log" 2>&1 &
pids+=($!)
wait_http "http://127.0.0.1:$sim_port/v1/models" "${pids[-1]}" simulate

# tokentap reads every TOKENTAP_* variable as configuration: none of the caller's.
strip_env=()
while IFS='=' read -r var _; do
    case "$var" in TOKENTAP_*) strip_env+=(-u "$var") ;; esac
done < <(env)

# 2. Three stateless replicas, same flags, OTLP off (Prometheus pulls).
proxy_ports=() admin_ports=()
for i in $(seq 1 $REPLICAS); do
    p="$(free_port)"; a="$(free_port)"
    proxy_ports+=("$p"); admin_ports+=("$a")
    env "${strip_env[@]}" OTEL_SDK_DISABLED=true RUST_LOG=warn \
        "$bin" --upstream "http://127.0.0.1:$sim_port" --listen "127.0.0.1:$p" \
        --admin-listen "127.0.0.1:$a" >"$work/tokentap-$i.log" 2>&1 &
    pids+=($!)
    wait_http "http://127.0.0.1:$a/healthz" "${pids[-1]}" "tokentap-$i"
done

# 3. nginx in front: round robin, no response buffering (streams pass through).
lb_port="$(free_port)"
mkdir -p "$work/nginx"
{
    [ "$(id -u)" = 0 ] && echo "user root;"
    cat <<NGINX
worker_processes 1;
pid $work/nginx/nginx.pid;
error_log $work/nginx.log warn;
events { worker_connections 1024; }
http {
    access_log off;
    client_body_temp_path $work/nginx/body;
    proxy_temp_path $work/nginx/proxy;
    fastcgi_temp_path $work/nginx/fastcgi;
    uwsgi_temp_path $work/nginx/uwsgi;
    scgi_temp_path $work/nginx/scgi;
    upstream tokentap {
$(for p in "${proxy_ports[@]}"; do echo "        server 127.0.0.1:$p;"; done)
        keepalive 32;
    }
    server {
        listen 127.0.0.1:$lb_port;
        # Readiness of nginx itself: answered here, so it is not counted by
        # the replicas as a request.
        location = /nginx-ready { return 200 "ok"; }
        location / {
            proxy_pass http://tokentap;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
            proxy_read_timeout 60s;
        }
    }
}
NGINX
} >"$work/nginx/nginx.conf"
"$nginx_bin" -t -q -p "$work/nginx" -c "$work/nginx/nginx.conf" -g 'daemon off;'
"$nginx_bin" -p "$work/nginx" -c "$work/nginx/nginx.conf" -g 'daemon off;' >"$work/nginx-stdout.log" 2>&1 &
pids+=($!)
wait_http "http://127.0.0.1:$lb_port/nginx-ready" "${pids[-1]}" nginx

# 4. Prometheus scraping every replica's /metrics each second.
prom_port="$(free_port)"
{
    cat <<PROM
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: tokentap
    static_configs:
      - targets: [$(printf '"127.0.0.1:%s",' "${admin_ports[@]}" | sed 's/,$//')]
PROM
} >"$work/prometheus.yml"
promtool check config "$work/prometheus.yml" >/dev/null
prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/prom-data" \
    --web.listen-address="127.0.0.1:$prom_port" --log.level=warn >"$work/prometheus.log" 2>&1 &
pids+=($!)
wait_http "http://127.0.0.1:$prom_port/-/ready" "${pids[-1]}" prometheus

echo "scaleout: simulate :$sim_port, tokentap proxies ${proxy_ports[*]} (admin ${admin_ports[*]}), nginx :$lb_port, prometheus :$prom_port"

# 5. Load through nginx, then compare Prometheus' sums with what was sent.
python3 - "$lb_port" "$prom_port" "$REQUESTS" "$TOKENS" "$REPLICAS" <<'PY'
import concurrent.futures as cf
import json
import sys
import time
import urllib.parse
import urllib.request

lb, prom, n, tokens, replicas = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
base = f"http://127.0.0.1:{lb}"

def post(path, body, headers):
    data = json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, headers={"content-type": "application/json", **headers})
    with urllib.request.urlopen(req, timeout=30) as r:
        return r.read().decode()

def one(i):
    """Request i; returns (input tokens, output tokens) as the provider reported them."""
    kind = i % 4
    tenant = {"x-tenant-id": f"tenant-{i % 5}"}
    msgs = [{"role": "user", "content": f"request {i} " + "x" * (i % 37)}]
    if kind == 0:  # OpenAI chat, non-streaming
        u = json.loads(post("/v1/chat/completions", {"model": "gpt-4o-mini", "messages": msgs}, tenant))["usage"]
        return u["prompt_tokens"], u["completion_tokens"]
    if kind == 1:  # OpenAI chat, streaming with usage
        sse = post("/v1/chat/completions", {"model": "gpt-4o-mini", "stream": True,
                   "stream_options": {"include_usage": True}, "messages": msgs}, tenant)
        usage = [json.loads(l[6:])["usage"] for l in sse.splitlines()
                 if l.startswith("data: {") and '"usage":{' in l]
        content = sum(1 for l in sse.splitlines() if '"content":" ' in l or '"content":"."' in l)
        assert content == tokens, f"stream carried {content} content chunks, expected {tokens}"
        return usage[-1]["prompt_tokens"], usage[-1]["completion_tokens"]
    if kind == 2:  # Anthropic messages, non-streaming
        m = json.loads(post("/v1/messages", {"model": "claude-sim", "max_tokens": 100, "messages": msgs},
                            {**tenant, "anthropic-version": "2023-06-01"}))
        return m["usage"]["input_tokens"], m["usage"]["output_tokens"]
    # Anthropic messages, streaming
    sse = post("/v1/messages", {"model": "claude-sim", "max_tokens": 100, "stream": True, "messages": msgs},
               {**tenant, "anthropic-version": "2023-06-01"})
    inp = out = None
    for l in sse.splitlines():
        if l.startswith("data: "):
            ev = json.loads(l[6:])
            if ev["type"] == "message_start":
                inp = ev["message"]["usage"]["input_tokens"]
            elif ev["type"] == "message_delta":
                out = ev["usage"]["output_tokens"]
    return inp, out

t0 = time.monotonic()
with cf.ThreadPoolExecutor(16) as pool:
    results = list(pool.map(one, range(n)))
sent_in = sum(r[0] for r in results)
sent_out = sum(r[1] for r in results)
assert sent_out == n * tokens, (sent_out, n * tokens)
print(f"scaleout: sent {n} requests through nginx in {time.monotonic() - t0:.1f}s: "
      f"{sent_in} input tokens, {sent_out} output tokens")

def query(q):
    url = f"http://127.0.0.1:{prom}/api/v1/query?" + urllib.parse.urlencode({"query": q})
    with urllib.request.urlopen(url, timeout=5) as r:
        res = json.load(r)["data"]["result"]
    return res

def scalar(q):
    res = query(q)
    return float(res[0]["value"][1]) if res else None

checks = [
    ("sum(tokentap_requests_total)", n),
    ('sum(tokentap_requests_total{tokentap_outcome="complete"})', n),
    ("sum(gen_ai_client_inference_usage_output_tokens_total)", sent_out),
    ("sum(gen_ai_client_inference_usage_input_tokens_total)", sent_in),
    ("sum(gen_ai_client_inference_operation_output_tokens_count)", n),
    ("sum(gen_ai_server_time_to_first_token_seconds_count)", n),
    ('sum(gen_ai_client_inference_duration_seconds_bucket{le="+Inf"})', n),
    # Streaming requests with >= 2 tokens (kinds 1 and 3) get a decode rate.
    ("sum(tokentap_decode_tokens_per_second_count)", sum(1 for i in range(n) if i % 4 in (1, 3))),
    ("sum(tokentap_streams_active)", 0),
]
# Prometheus scrapes every second; wait until the last scrape saw the end.
deadline = time.monotonic() + 30
while True:
    got = [scalar(q) for q, _ in checks]
    if all(g == want for g, (_, want) in zip(got, checks)) or time.monotonic() > deadline:
        break
    time.sleep(0.5)
failed = 0
for (q, want), g in zip(checks, got):
    ok = g == want
    failed += not ok
    print(f"  {'ok  ' if ok else 'FAIL'} {q} = {g if g is None else int(g)} (sent {want})")

# Every replica served a share: the load balancer really spread the load.
per = {r["metric"]["instance"]: float(r["value"][1]) for r in query("sum by (instance) (tokentap_requests_total)")}
ok = len(per) == replicas and all(v > 0 for v in per.values())
failed += not ok
print(f"  {'ok  ' if ok else 'FAIL'} sum by (instance) (tokentap_requests_total) = "
      f"{ {k: int(v) for k, v in sorted(per.items())} } ({replicas} replicas, each > 0)")

# Histograms aggregate across replicas by summing buckets per `le`.
q = "histogram_quantile(0.5, sum by (le) (gen_ai_server_time_to_first_token_seconds_bucket))"
p50 = scalar(q)
ok = p50 is not None and 0.015 <= p50 <= 1.0
failed += not ok
print(f"  {'ok  ' if ok else 'FAIL'} {q} = {p50} (simulated TTFT 20 ms: between 15 ms and 1 s)")
checks_total = len(checks) + 2
print(f"scaleout: {checks_total - failed} passed, {failed} failed")
sys.exit(1 if failed else 0)
PY
