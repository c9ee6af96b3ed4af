#!/bin/bash
# e2e.sh BIN_DIR LABEL [CONCURRENCY] [SECONDS] [API]
# tokentap (release, OTLP export on to a discarding sink) under callgrind,
# behind a simulator (fast, 100 tokens) and the bench load client; counters
# are zeroed after a warm-up and dumped after the load, so the profile
# (OUT_DIR/e2e-LABEL/cg.out.1) covers only the measured window. Then:
#   benches/callgrind/breakdown.py OUT_DIR/e2e-LABEL/cg.out.1
# BIN_DIR holds tokentap and tokentap-bench; OUT_DIR defaults to target/callgrind.
# Ports 14318, 18080 and 19090 on 127.0.0.1 must be free (or set SINK_PORT,
# PROXY_PORT and SIM_PORT to run several profiles side by side).
# Environment: WHOLE=1 sends non-streamed requests (one JSON body each)
# instead of streams; EXPORT=off turns OTLP export off (otlp_enabled = false).
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
valgrind --tool=callgrind --callgrind-out-file=$D/cg.out --dump-instr=no ${VGEXTRA:-} $BIN/tokentap --config tt.toml > tt.log 2>&1 & VG=$!; PIDS+=($VG)
for i in $(seq 1 120); do (exec 3<>/dev/tcp/127.0.0.1/$PROXY) 2>/dev/null && break; sleep 1; done
# The port accepts connections once bound, before start-up has finished (the
# price table's patterns are compiled after the bind, tens of millions of
# instructions, seconds under valgrind): wait for a first answer through the
# proxy so that start-up is not inside the measured window.
curl -s -o /dev/null -m 300 http://127.0.0.1:$PROXY/fast/v1/models
# warm-up (not measured)
$BIN/tokentap-bench load --addr 127.0.0.1:$PROXY --prefix /fast --api $API $STREAM --concurrency $CONC --duration 3 --warmup 1 > warm.json 2>&1
callgrind_control -z $VG > /dev/null
$BIN/tokentap-bench load --addr 127.0.0.1:$PROXY --prefix /fast --api $API $STREAM --concurrency $CONC --duration $SECS --warmup 0 > load.json 2>&1
callgrind_control -d $VG > /dev/null
sleep 2
kill -INT $VG; wait $VG
cat load.json
ls $D
