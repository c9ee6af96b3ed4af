#!/usr/bin/env python3
"""Per-stream and per-chunk user-space instructions by stage, from the dump
e2e.sh leaves (usage: breakdown.py DIR/cg.out.1). Stage = inclusive cost of
the function that starts it; see docs/BENCHMARKS.md "Optimisation pass 2"."""
import os, re, subprocess, sys

CALLS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "calls.py")
path = sys.argv[1]
out = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", path], capture_output=True, text=True).stdout
incl = {}
for line in out.splitlines():
    m = re.match(r'\s*([\d,]+) \([ \d.]+%\)\s+(\S.*)$', line)
    if not m: continue
    ir = int(m.group(1).replace(',', '')); name = m.group(2)
    name = re.sub(r' \[[^\]]*\]$', '', name)
    fn = name.split(':', 1)[1] if ':' in name else name
    incl[fn] = max(incl.get(fn, 0), ir)
def called_from(caller, callee):
    """Inclusive Ir of the calls from functions matching `caller` to ones
    matching `callee` (a stage reached from several places)."""
    out = subprocess.run(["python3", CALLS, path, f"{caller}=>{callee}"], capture_output=True, text=True).stdout
    return int(re.search(r'inclusive_Ir=(\d+)', out).group(1))
def get(pat):
    v = [ir for fn, ir in incl.items() if re.search(pat, fn)]
    return max(v) if v else 0
total = next(int(l.split()[1]) for l in open(path) if l.startswith(('totals:', 'summary:')))
streams_calls = subprocess.run(["python3", CALLS, path, r'Recorder>::finish$', r'Meter::on_data$'], capture_output=True, text=True).stdout
streams = int(re.search(r'finish\$: calls=(\d+)', streams_calls).group(1))
chunks = int(re.search(r'on_data\$: calls=(\d+)', streams_calls).group(1))
poll_frame = get(r'MeteredBody<B> as http_body::Body>::poll_frame$')
on_data = get(r'^tokentap::meter::body::Meter::on_data$')
adapter = get(r'^<tokentap::providers::[\w:]+Adapter as tokentap::providers::spec::FrameAdapter>::on_frame$')
gap = get(r'RequestTelemetry as tokentap::meter::(measurement::)?Recorder>::chunk_gap$')
meter_finish = get(r'^tokentap::meter::body::Meter::finish$')
tel_finish = get(r'RequestTelemetry as tokentap::meter::(measurement::)?Recorder>::finish$')
begin = get(r'^tokentap::telemetry::Telemetry::begin$')
span_thread = get(r'(BatchSpanProcessor::get_spans_and_export|as tokentap::telemetry::span_export::RecordExporter>::export)$')
metric_thread = get(r'(PeriodicReaderInner<E>::collect_and_export|^tokentap::ship::push::collect_and_export)$')
# Since pass 3 the upstream connection is driven from its body (inside
# MeteredBody::poll_frame), so it is split out of forwarding below.
client_task = called_from(r'MeteredBody<B> as http_body::Body>::poll_frame$', r'^tokentap::upstream::conn::H1::drive$')
join = sum(get(p) for p in (r'^tokentap::meter::body::Joined::push$', r'^tokentap::meter::body::Joined::take$'))
incoming = get(r'^<hyper::body::incoming::Incoming as http_body::Body>::poll_frame$')
rows = [
 ("extraction (adapter: JSON of each event)", adapter),
 ("framing + metering (SSE decoder, clock, tallies; on_data minus adapter and gap)", on_data - adapter - gap),
 ("telemetry per chunk (chunk_gap)", gap),
 ("telemetry per request (begin + finish + span/metric export threads)", begin + tel_finish + span_thread + metric_thread),
 ("forwarding in MeteredBody (poll_frame minus on_data, Meter::finish and the upstream connection)", poll_frame - on_data - meter_finish - client_task),
 ("  of which joining the frames of one read (Joined)", join),
 ("  of which receiving from hyper's body channel (Incoming::poll_frame)", incoming),
 ("upstream connection (hyper client driven from the body: read, de-chunk, send to channel)", client_task),
 ("hyper server, tokio, app::handle, the upstream request and head, rest", total - poll_frame - begin - span_thread - metric_thread + (meter_finish - tel_finish)),
]
print(f"total user-space Ir {total:,}; streams {streams}; chunks (on_data calls) {chunks}; chunks/stream {chunks/streams:.1f}")
print(f"| stage | Ir per stream | Ir per chunk | share |")
for name, ir in rows:
    print(f"| {name} | {ir/streams:,.0f} | {ir/chunks:,.0f} | {100*ir/total:.1f} % |")
print(f"| **total** | {total/streams:,.0f} | {total/chunks:,.0f} | 100 % |")
