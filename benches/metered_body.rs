//! The metered body's cost over the plain body: an in-memory upstream body
//! in, polled to its end the way hyper polls it, nanoseconds per chunk and
//! per 100-token stream out (goal: ≤ 1 µs per chunk).
//!
//! Variants, each over the same chunks:
//! - `plain`: the upstream body alone (the floor: what any proxy pays);
//! - `meter_only`: `MeteredBody` with an unmetered response (clock reading
//!   and byte count per chunk, no parsing);
//! - `metered_noop`: full metering (SSE framing + adapter) with a no-op
//!   `Recorder`;
//! - `metered_telemetry`: full metering recorded by the real telemetry
//!   (span, per-chunk gap histograms, end-of-request metrics) with
//!   exporters that discard.
#![allow(
    clippy::disallowed_methods,
    reason = "benches build request facts with a start instant, as meter's callers do"
)]
#![allow(
    missing_docs,
    reason = "criterion_group! generates a pub fn that cannot carry a doc"
)]

use std::convert::Infallible;
use std::hint::black_box;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use http::HeaderMap;
use http_body::{Body, Frame, SizeHint};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::metrics::Temporality;
use opentelemetry_sdk::metrics::data::ResourceMetrics;
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
use opentelemetry_sdk::trace::{SpanData, SpanExporter};
use tokentap::meter::body::{Meter, MeteredBody};
use tokentap::meter::{Measurement, Recorder, RequestBody, RequestFacts, Unmetered};
use tokentap::providers::{Operation, Parser, ProviderKind};
use tokentap::telemetry::Telemetry;

#[path = "support/streams.rs"]
mod streams;

use streams::{anthropic_stream, openai_stream, per_event};

/// An upstream body already in memory: one `Bytes` per frame.
struct MemBody {
    chunks: Arc<[Bytes]>,
    next: usize,
}

impl MemBody {
    fn new(chunks: &Arc<[Bytes]>) -> MemBody {
        MemBody {
            chunks: chunks.clone(),
            next: 0,
        }
    }
}

impl Body for MemBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = self.get_mut();
        let chunk = this.chunks.get(this.next).cloned();
        this.next += 1;
        Poll::Ready(chunk.map(|c| Ok(Frame::data(c))))
    }

    fn is_end_stream(&self) -> bool {
        self.next >= self.chunks.len()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

/// Poll `body` to its end, as hyper's connection task does.
fn drain<B: Body<Data = Bytes> + Unpin>(mut body: B) -> u64
where
    B::Error: std::fmt::Debug,
{
    let mut cx = Context::from_waker(Waker::noop());
    let mut bytes = 0u64;
    loop {
        match Pin::new(&mut body).poll_frame(&mut cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(d) = frame.data_ref() {
                    bytes += d.len() as u64;
                }
                drop(black_box(frame));
            }
            Poll::Ready(Some(Err(e))) => panic!("in-memory body failed: {e:?}"),
            Poll::Ready(None) => return bytes,
            Poll::Pending => unreachable!("an in-memory body is always ready"),
        }
    }
}

/// A recorder that keeps nothing.
struct Noop;

impl Recorder for Noop {
    fn chunk_gap(&mut self, gap: Duration) {
        black_box(gap);
    }
    fn finish(self: Box<Self>, m: Measurement) {
        black_box(m.content_chunks);
    }
}

/// Exporters that accept and discard.
#[derive(Debug)]
struct Discard;

impl SpanExporter for Discard {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        black_box(batch.len());
        Ok(())
    }
}

impl PushMetricExporter for Discard {
    async fn export(&self, _metrics: &ResourceMetrics) -> OTelSdkResult {
        Ok(())
    }
    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }
    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        Ok(())
    }
    fn temporality(&self) -> Temporality {
        Temporality::Cumulative
    }
}

fn telemetry() -> Telemetry {
    // Defaults for every telemetry key, export on (to exporters that discard).
    let cfg = tokentap::config::from_toml(
        "[[routes]]\nname = \"bench\"\nupstream = \"http://127.0.0.1:9\"\n\n[telemetry]\naccess_log = false\n",
    )
    .expect("a valid bench config")
    .telemetry;
    Telemetry::init_with(&cfg, Discard, Discard)
}

fn facts(provider: ProviderKind, operation: Operation) -> RequestFacts {
    RequestFacts {
        route: Arc::from("bench"),
        route_labels: Default::default(),
        provider,
        operation: Some(operation),
        request_model: Some("gpt-4o-mini".into()),
        stream: true,
        tenant: Some("key-0123456789ab".into()),
        session: None,
        server_address: Arc::from("127.0.0.1"),
        server_port: 9090,
        request_body: RequestBody::Sniffed,
        service_tier: None,
        start_wall: SystemTime::now(),
        start: Instant::now(),
    }
}

/// How the body is wrapped.
#[derive(Clone, Copy)]
enum Variant {
    Plain,
    MeterOnly,
    MeteredNoop,
    MeteredTelemetry,
}

impl Variant {
    fn name(self) -> &'static str {
        match self {
            Variant::Plain => "plain",
            Variant::MeterOnly => "meter_only",
            Variant::MeteredNoop => "metered_noop",
            Variant::MeteredTelemetry => "metered_telemetry",
        }
    }
}

/// One request: wrap a fresh body as `variant` says and drain it.
fn one_request(
    variant: Variant,
    chunks: &Arc<[Bytes]>,
    kind: ProviderKind,
    op: Operation,
    tel: &Telemetry,
) -> u64 {
    let body = MemBody::new(chunks);
    let recorder: Box<dyn Recorder> = match variant {
        Variant::Plain => return drain(body),
        Variant::MeterOnly | Variant::MeteredNoop => Box::new(Noop),
        Variant::MeteredTelemetry => Box::new(tel.begin(&facts(kind, op), &HeaderMap::new())),
    };
    let mut meter = Meter::new(facts(kind, op), recorder);
    let parser = match variant {
        Variant::MeterOnly => Err(Unmetered::UnknownFormat("bench".into())),
        _ => Parser::new(kind, Some(op), "text/event-stream", 4 << 20)
            .ok_or(Unmetered::UnknownFormat("bench".into())),
    };
    meter.on_head(200, true, parser, None);
    drain(MeteredBody::new(body, meter, None, None))
}

fn bench_metered(c: &mut Criterion) {
    let tel = telemetry();
    let streams = [
        (
            "openai_100tok",
            openai_stream(100),
            ProviderKind::Openai,
            Operation::ChatCompletions,
        ),
        (
            "anthropic_100tok",
            anthropic_stream(100),
            ProviderKind::Anthropic,
            Operation::Messages,
        ),
    ];
    for (name, body, kind, op) in &streams {
        let chunks: Arc<[Bytes]> = per_event(body)
            .into_iter()
            .map(Bytes::copy_from_slice)
            .collect();
        let mut group = c.benchmark_group(format!("metered_body/{name}"));
        // elem/s = chunks per second; time per iteration = one whole stream.
        group.throughput(Throughput::Elements(chunks.len() as u64));
        for variant in [
            Variant::Plain,
            Variant::MeterOnly,
            Variant::MeteredNoop,
            Variant::MeteredTelemetry,
        ] {
            group.bench_function(variant.name(), |b| {
                b.iter(|| one_request(variant, &chunks, *kind, *op, &tel))
            });
        }
        group.finish();
    }
    tel.shutdown();
}

criterion_group!(benches, bench_metered);
criterion_main!(benches);
