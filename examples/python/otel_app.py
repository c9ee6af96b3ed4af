"""An app already instrumented with OpenTelemetry, whose traces continue
through tokentap.

tokentap reads the W3C `traceparent` header of each request, makes its span
a child of the caller's span, and passes its own span on to the provider.
Nothing tokentap-specific is needed in the app: any OpenTelemetry
propagation works. Shown twice:

1. the OpenAI SDK inside an app span, with the context injected by hand
   (`opentelemetry.propagate.inject` into `extra_headers`) — works with any
   HTTP client;
2. a plain httpx client auto-instrumented by
   opentelemetry-instrumentation-httpx, which creates a CLIENT span per
   request and injects it.

Then it checks what tokentap exported: for each request, tokentap's span
has the app's trace id and, as parent span id, the app span (1) or the
httpx CLIENT span (2).

To see those spans this example runs a minimal OTLP/HTTP receiver
(decoding with opentelemetry-proto) on EXAMPLE_OTLP_PORT, and tokentap is
started with OTEL_EXPORTER_OTLP_ENDPOINT pointing at it:

    examples/run.sh otel
"""

import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
from openai import OpenAI
from opentelemetry import propagate, trace
from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

MODEL = os.environ.get("EXAMPLE_MODEL", "gpt-4o-mini")
BASE_URL = os.environ["OPENAI_BASE_URL"]  # tokentap, e.g. http://127.0.0.1:8080/v1

# --- what tokentap exports, received over OTLP/HTTP -------------------------

received: list = []  # opentelemetry.proto.trace.v1.Span, with service name
lock = threading.Lock()


class OtlpHandler(BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802 (http.server's naming)
        body = self.rfile.read(int(self.headers.get("content-length", 0)))
        if self.path == "/v1/traces":
            req = ExportTraceServiceRequest.FromString(body)
            with lock:
                for rs in req.resource_spans:
                    service = next(
                        (a.value.string_value for a in rs.resource.attributes if a.key == "service.name"), ""
                    )
                    for ss in rs.scope_spans:
                        received.extend((service, s) for s in ss.spans)
            out = ExportTraceServiceResponse().SerializeToString()
        else:  # /v1/metrics: accepted, not needed here
            out = b""
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args):
        pass


def start_receiver() -> ThreadingHTTPServer:
    port = int(os.environ.get("EXAMPLE_OTLP_PORT", "0"))
    server = ThreadingHTTPServer(("127.0.0.1", port), OtlpHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


# --- the app ----------------------------------------------------------------

def main() -> int:
    server = start_receiver()
    if "EXAMPLE_OTLP_PORT" not in os.environ:
        print(f"note: receiving OTLP on 127.0.0.1:{server.server_port}; start tokentap with "
              f"OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:{server.server_port}")

    # The app's own tracing. A real app would export with an OTLP exporter;
    # in-memory keeps the span ids at hand for the check below.
    app_spans = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "example-app"}))
    provider.add_span_processor(SimpleSpanProcessor(app_spans))
    trace.set_tracer_provider(provider)
    tracer = trace.get_tracer("example-app")

    expected = {}  # trace_id -> (expected parent span id, how)

    # 1. OpenAI SDK, context injected by hand.
    client = OpenAI(base_url=BASE_URL)
    with tracer.start_as_current_span("answer-question") as span:
        headers: dict[str, str] = {}
        propagate.inject(headers)
        res = client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "Say hello."}],
            extra_headers=headers,
        )
        ctx = span.get_span_context()
        expected[ctx.trace_id] = (ctx.span_id, "app span 'answer-question' (manual inject)")
    print(f"1. openai SDK call in span {ctx.span_id:016x} of trace {ctx.trace_id:032x}: {res.choices[0].message.content[:30]!r}...")

    # 2. httpx, auto-instrumented: its CLIENT span is the parent.
    HTTPXClientInstrumentor().instrument()
    with tracer.start_as_current_span("summarize") as span:
        with httpx.Client(timeout=30) as http:
            with http.stream(
                "POST",
                f"{BASE_URL}/chat/completions",
                headers={"authorization": "Bearer sk-example"},
                json={"model": MODEL, "stream": True, "messages": [{"role": "user", "content": "Summarize."}]},
            ) as r:
                r.raise_for_status()
                body = "".join(r.iter_text())
        trace_id = span.get_span_context().trace_id
    HTTPXClientInstrumentor().uninstrument()
    client_spans = [
        s for s in app_spans.get_finished_spans()
        if s.context.trace_id == trace_id and s.kind == trace.SpanKind.CLIENT
    ]
    if len(client_spans) != 1:
        print(f"FAIL: expected one httpx CLIENT span, got {len(client_spans)}")
        return 1
    expected[trace_id] = (client_spans[0].context.span_id, f"httpx CLIENT span '{client_spans[0].name}'")
    print(f"2. httpx stream ({body.count('data:')} SSE events) in CLIENT span {client_spans[0].context.span_id:016x}")

    # tokentap batches spans; wait for both.
    deadline = time.monotonic() + 20
    found = {}
    while time.monotonic() < deadline and len(found) < len(expected):
        with lock:
            for service, s in received:
                tid = int.from_bytes(s.trace_id, "big")
                if tid in expected:
                    found[tid] = (service, s)
        time.sleep(0.1)
    server.shutdown()

    ok = True
    for tid, (parent, how) in expected.items():
        if tid not in found:
            print(f"FAIL: no tokentap span for trace {tid:032x} arrived within 20 s")
            ok = False
            continue
        service, s = found[tid]
        got = int.from_bytes(s.parent_span_id, "big") if s.parent_span_id else 0
        verdict = "ok" if got == parent else "FAIL"
        print(f"{verdict}: tokentap span {s.name!r} (service {service!r}) in trace {tid:032x}: "
              f"parent {got:016x}, expected {parent:016x} = {how}")
        ok &= got == parent
    if not ok:
        return 1
    print("otel example: ok (the trace continues through tokentap)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
