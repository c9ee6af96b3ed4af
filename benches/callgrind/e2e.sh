#!/bin/bash
# e2e.sh BIN_DIR LABEL [CONCURRENCY] [SECONDS] [API]
# tokentap (release, OTLP export on to a discarding sink) under callgrind,
# or with TARGET=floor `tokentap-bench floor` (the bare hyper proxy) or with
# TARGET=nginx nginx (one process, one worker; NGINX_BIN, default
# /usr/sbin/nginx) configured like the suite's, behind a simulator (fast, 100 tokens) and the bench load client; counters
# are zeroed after a warm-up and dumped after the load, so the profile
# (OUT_DIR/e2e-LABEL/cg.out.1) covers only the measured window. Then:
#   benches/callgrind/breakdown.py OUT_DIR/e2e-LABEL/cg.out.1
# BIN_DIR holds tokentap and tokentap-bench; OUT_DIR defaults to target/callgrind.
# Ports 14318, 18080 and 19090 on 127.0.0.1 must be free (or set SINK_PORT,
# PROXY_PORT and SIM_PORT to run several profiles side by side).
# Environment: WHOLE=1 sends non-streamed requests (one JSON body each)
# instead of streams; EXPORT=off turns OTLP export off (otlp_enabled = false);
# RATIO=0.01 sets telemetry.sampling.ratio (spans exported, default 1).
# NOVG=1 runs the target natively instead (wall clock: load-dependent) and
# prints its user and system CPU per request from /proc/PID/stat.
# Last line: Ir per request (total Ir of cg.out.1 / `requests` in load.json).
set -u
SINK=${SINK_PORT:-14318}; PROXY=${PROXY_PORT:-18080}; SIMP=${SIM_PORT:-19090}
STREAM=--stream; [ "${WHOLE:-0}" = 1 ] && STREAM=
OTLP=true; [ "${EXPORT:-on}" = off ] && OTLP=false
BIN=$(cd "$1" && pwd); LABEL=$2; CONC=${3:-8}; SECS=${4:-20}; API=${5:-chat}
D=${OUT_DIR:-target/callgrind}/e2e-$LABEL; mkdir -p $D; D=$(cd $D && pwd); rm -rf $D; mkdir -p $D; cd $D
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill $p 2>/dev/null; done; }
trap cleanup EXIT
$BIN/tokentap-bench sink --listen 127.0.0.1:$SINK > sink.log 2>&1 & PIDS+=($!)
$BIN/tokentap simulate --listen 127.0.0.1:$SIMP --ttft-ms 0 --tokens-per-second 0 --tokens 100 --jitter 0 > sim.log 2>&1 & PIDS+=($!)
cat > tt.toml <<CONF
listen = "127.0.0.1:$PROXY"

[server]
max_connections = 20000

[upstream]
pool_max_idle_per_host = 1024

[tenant]
sources = ["header", "body", "api_key"]
salt = "bench-salt"

[telemetry]
access_log = false
otlp_enabled = $OTLP
otlp_endpoint = "http://127.0.0.1:$SINK"
otlp_protocol = "http/protobuf"
metrics_export_interval = "5s"

[[routes]]
name = "fast"
prefix = "/fast"
upstream = "http://127.0.0.1:$SIMP"
CONF
[ -n "${RATIO:-}" ] && printf '\n[telemetry.sampling]\nratio = %s\n' "$RATIO" >> tt.toml
case ${TARGET:-tokentap} in
tokentap) CMD=("$BIN/tokentap" --config tt.toml) ;;
floor) CMD=("$BIN/tokentap-bench" floor --listen 127.0.0.1:$PROXY --upstream /fast=http://127.0.0.1:$SIMP) ;;
nginx)
    # As tools/bench/targets.rs writes it, in one process with one worker.
    cat > nginx.conf <<CONF
daemon off;
master_process off;
worker_processes 1;
worker_rlimit_nofile 20000;
pid $D/nginx.pid;
error_log $D/error.log error;
events { worker_connections 20000; multi_accept on; }
http {
  access_log off;
  client_body_temp_path $D/body;
  proxy_temp_path $D/proxy;
  fastcgi_temp_path $D/fastcgi;
  uwsgi_temp_path $D/uwsgi;
  scgi_temp_path $D/scgi;
  keepalive_requests 1000000;
  keepalive_timeout 120s;
  upstream fast { server 127.0.0.1:$SIMP; keepalive 512; keepalive_requests 1000000; }
  server {
    listen 127.0.0.1:$PROXY backlog=4096;
    location /fast/ { proxy_pass http://fast; proxy_http_version 1.1; proxy_set_header Connection ""; proxy_buffering off; proxy_request_buffering off; proxy_read_timeout 3600s; }
  }
}
CONF
    CMD=("${NGINX_BIN:-/usr/sbin/nginx}" -p "$D" -c "$D/nginx.conf" -e "$D/error.log") ;;
*) echo "TARGET must be tokentap, floor or nginx" >&2; exit 2 ;;
esac
VALGRIND=(valgrind --tool=callgrind --callgrind-out-file=$D/cg.out --dump-instr=no ${VGEXTRA:-})
[ "${NOVG:-0}" = 1 ] && VALGRIND=()
"${VALGRIND[@]}" "${CMD[@]}" > tt.log 2>&1 & VG=$!; PIDS+=($VG)
ticks() { awk '{print $14, $15}' /proc/$VG/stat; }
for i in $(seq 1 120); do (exec 3<>/dev/tcp/127.0.0.1/$PROXY) 2>/dev/null && break; sleep 1; done
# The port accepts connections once bound, before start-up has finished (the
# price table's patterns are compiled after the bind, tens of millions of
# instructions, seconds under valgrind): wait for a first answer through the
# proxy so that start-up is not inside the measured window.
curl -s -o /dev/null -m 300 http://127.0.0.1:$PROXY/fast/v1/models
# warm-up (not measured)
$BIN/tokentap-bench load --addr 127.0.0.1:$PROXY --prefix /fast --api $API $STREAM --concurrency $CONC --duration 3 --warmup 1 > warm.json 2>&1
if [ "${NOVG:-0}" = 1 ]; then
    read U0 S0 < <(ticks)
    $BIN/tokentap-bench load --addr 127.0.0.1:$PROXY --prefix /fast --api $API $STREAM --concurrency $CONC --duration $SECS --warmup 0 > load.json 2>&1
    read U1 S1 < <(ticks)
    cat load.json
    python3 -c 'import json, sys; u, s, hz = map(int, sys.argv[1:]); n = json.load(open("load.json"))["requests"]; print(f"CPU per request: user {1e3 * u / hz / n:.4f} ms, system {1e3 * s / hz / n:.4f} ms ({n} requests)")' $((U1 - U0)) $((S1 - S0)) "$(getconf CLK_TCK)"
    exit 0
fi
callgrind_control -z $VG > /dev/null
$BIN/tokentap-bench load --addr 127.0.0.1:$PROXY --prefix /fast --api $API $STREAM --concurrency $CONC --duration $SECS --warmup 0 > load.json 2>&1
callgrind_control -d $VG > /dev/null
sleep 2
kill -INT $VG; wait $VG
cat load.json
ls $D
python3 -c 'import json, sys; ir = int(sys.argv[1]); n = json.load(open("load.json"))["requests"]; print(f"Ir {ir} / {n} requests = {ir / max(n, 1):.0f} Ir per request")' "$(awk '/^summary:/ {print $2}' cg.out.1)"
