//! Export plumbing: `TelemetryConfig` in; OTLP exporters, wrapped so that
//! every span or data point that never reaches the collector is counted, out.
//!
//! Spans can be lost in two places: the batch queue is full (the SDK keeps
//! that count private), or the export fails after the exporter's own retries.
//! `GatedSpanProcessor` bounds the queue itself, with one atomic, so a full
//! queue is counted here; `CountingSpanExporter` and `CountingMetricExporter`
//! count items in failed exports.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use opentelemetry::Context;
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig, WithTonicConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::metrics::Temporality;
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData, ResourceMetrics};
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, Span, SpanData, SpanExporter, SpanProcessor,
};

use super::TelemetryError;
use crate::config::{OtlpProtocol, TelemetryConfig};

/// Items that never reached the collector, by signal.
#[derive(Debug, Default)]
pub(super) struct DropCounts {
    spans: AtomicU64,
    data_points: AtomicU64,
}

impl DropCounts {
    /// Spans dropped: batch queue full, or in a failed export.
    pub(super) fn spans(&self) -> u64 {
        self.spans.load(Ordering::Relaxed)
    }

    /// Metric data points in failed exports.
    pub(super) fn data_points(&self) -> u64 {
        self.data_points.load(Ordering::Relaxed)
    }

    fn add_spans(&self, n: u64) {
        self.spans.fetch_add(n, Ordering::Relaxed);
    }

    fn add_data_points(&self, n: u64) {
        self.data_points.fetch_add(n, Ordering::Relaxed);
    }
}

/// Spans handed to the batch processor and not yet picked up by the exporter.
#[derive(Debug)]
struct QueueGate {
    pending: AtomicUsize,
    cap: usize,
}

/// A `BatchSpanProcessor` behind an admission gate of the same size as its
/// queue. A span is admitted only while fewer than `cap` are pending, so the
/// processor's own queue never overflows and every drop is counted here.
#[derive(Debug)]
pub(super) struct GatedSpanProcessor {
    inner: BatchSpanProcessor,
    gate: Arc<QueueGate>,
    drops: Arc<DropCounts>,
}

impl SpanProcessor for GatedSpanProcessor {
    fn on_start(&self, span: &mut Span, cx: &Context) {
        self.inner.on_start(span, cx);
    }

    fn on_end(&self, span: SpanData) {
        if self.gate.pending.fetch_add(1, Ordering::AcqRel) >= self.gate.cap {
            self.gate.pending.fetch_sub(1, Ordering::AcqRel);
            self.drops.add_spans(1);
            return;
        }
        self.inner.on_end(span);
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

/// Counts spans in failed exports and releases them from the queue gate.
#[derive(Debug)]
struct CountingSpanExporter<E> {
    inner: E,
    gate: Arc<QueueGate>,
    drops: Arc<DropCounts>,
}

impl<E: SpanExporter> SpanExporter for CountingSpanExporter<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let n = batch.len();
        // The batch has left the queue: admit as many new spans.
        self.gate.pending.fetch_sub(n, Ordering::AcqRel);
        let result = self.inner.export(batch).await;
        if result.is_err() {
            self.drops.add_spans(n as u64);
        }
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

/// The span pipeline: `exporter` behind a counted batch processor whose
/// queue holds at most `telemetry.span_queue_size` spans.
pub(super) fn span_processor<E>(
    exporter: E,
    drops: Arc<DropCounts>,
    cfg: &TelemetryConfig,
) -> GatedSpanProcessor
where
    E: SpanExporter + 'static,
{
    gated_processor(exporter, drops, cfg.span_queue_size.max(1))
}

fn gated_processor<E>(exporter: E, drops: Arc<DropCounts>, cap: usize) -> GatedSpanProcessor
where
    E: SpanExporter + 'static,
{
    let gate = Arc::new(QueueGate {
        pending: AtomicUsize::new(0),
        cap,
    });
    let exporter = CountingSpanExporter {
        inner: exporter,
        gate: gate.clone(),
        drops: drops.clone(),
    };
    // Delay and batch size come from OTEL_BSP_*; the SDK's batch thread
    // ignores its export timeout, so the exporter's own (`otlp_timeout`)
    // is what bounds a stuck export.
    let config = BatchConfigBuilder::default()
        .with_max_queue_size(cap)
        .build();
    let inner = BatchSpanProcessor::builder(exporter)
        .with_batch_config(config)
        .build();
    GatedSpanProcessor { inner, gate, drops }
}

/// Counts data points in failed metric exports.
#[derive(Debug)]
pub(super) struct CountingMetricExporter<E> {
    inner: E,
    drops: Arc<DropCounts>,
}

impl<E> CountingMetricExporter<E> {
    /// Wrap `inner`, counting into `drops`.
    pub(super) fn new(inner: E, drops: Arc<DropCounts>) -> Self {
        CountingMetricExporter { inner, drops }
    }
}

impl<E: PushMetricExporter> PushMetricExporter for CountingMetricExporter<E> {
    async fn export(&self, metrics: &ResourceMetrics) -> OTelSdkResult {
        let result = self.inner.export(metrics).await;
        if result.is_err() {
            self.drops.add_data_points(count_data_points(metrics));
        }
        result
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn temporality(&self) -> Temporality {
        self.inner.temporality()
    }
}

fn count_data_points(metrics: &ResourceMetrics) -> u64 {
    fn points<T>(data: &MetricData<T>) -> usize {
        match data {
            MetricData::Gauge(g) => g.data_points().count(),
            MetricData::Sum(s) => s.data_points().count(),
            MetricData::Histogram(h) => h.data_points().count(),
            MetricData::ExponentialHistogram(h) => h.data_points().count(),
        }
    }
    let n: usize = metrics
        .scope_metrics()
        .flat_map(|s| s.metrics())
        .map(|m| match m.data() {
            AggregatedMetrics::F64(d) => points(d),
            AggregatedMetrics::U64(d) => points(d),
            AggregatedMetrics::I64(d) => points(d),
        })
        .sum();
    n as u64
}

/// The OTLP span exporter for `cfg`.
pub(super) fn otlp_spans(
    cfg: &TelemetryConfig,
) -> Result<opentelemetry_otlp::SpanExporter, TelemetryError> {
    let builder = opentelemetry_otlp::SpanExporter::builder();
    let built = match cfg.otlp_protocol {
        OtlpProtocol::HttpProtobuf => {
            let mut b = builder
                .with_http()
                .with_protocol(Protocol::HttpBinary)
                .with_timeout(cfg.otlp_timeout);
            if let Some(base) = &cfg.otlp_endpoint {
                b = b.with_endpoint(signal_url(base, "/v1/traces"));
            }
            b.with_headers(http_headers(cfg)).build()
        }
        OtlpProtocol::Grpc => {
            require_runtime()?;
            let mut b = builder.with_tonic().with_timeout(cfg.otlp_timeout);
            if let Some(base) = &cfg.otlp_endpoint {
                b = b.with_endpoint(base.clone());
            }
            b.with_metadata(grpc_metadata(cfg)?).build()
        }
    };
    built.map_err(|e| TelemetryError(format!("span exporter: {e}")))
}

/// The OTLP metric exporter for `cfg`.
pub(super) fn otlp_metrics(
    cfg: &TelemetryConfig,
) -> Result<opentelemetry_otlp::MetricExporter, TelemetryError> {
    let builder = opentelemetry_otlp::MetricExporter::builder();
    let built = match cfg.otlp_protocol {
        OtlpProtocol::HttpProtobuf => {
            let mut b = builder
                .with_http()
                .with_protocol(Protocol::HttpBinary)
                .with_timeout(cfg.otlp_timeout);
            if let Some(base) = &cfg.otlp_endpoint {
                b = b.with_endpoint(signal_url(base, "/v1/metrics"));
            }
            b.with_headers(http_headers(cfg)).build()
        }
        OtlpProtocol::Grpc => {
            require_runtime()?;
            let mut b = builder.with_tonic().with_timeout(cfg.otlp_timeout);
            if let Some(base) = &cfg.otlp_endpoint {
                b = b.with_endpoint(base.clone());
            }
            b.with_metadata(grpc_metadata(cfg)?).build()
        }
    };
    built.map_err(|e| TelemetryError(format!("metric exporter: {e}")))
}

/// `base` + `/v1/<signal>`, as OTLP/HTTP does for `OTEL_EXPORTER_OTLP_ENDPOINT`.
fn signal_url(base: &str, path: &str) -> String {
    format!("{}{path}", base.trim_end_matches('/'))
}

fn http_headers(cfg: &TelemetryConfig) -> HashMap<String, String> {
    cfg.otlp_headers.iter().cloned().collect()
}

fn grpc_metadata(
    cfg: &TelemetryConfig,
) -> Result<opentelemetry_otlp::tonic_types::metadata::MetadataMap, TelemetryError> {
    let mut headers = http::HeaderMap::new();
    for (k, v) in &cfg.otlp_headers {
        // Never echo the value: export headers usually carry credentials.
        let name = http::HeaderName::from_bytes(k.as_bytes())
            .map_err(|_| TelemetryError(format!("invalid OTLP header name {k:?}")))?;
        let value = http::HeaderValue::from_str(v)
            .map_err(|_| TelemetryError(format!("invalid value for OTLP header {k:?}")))?;
        headers.append(name, value);
    }
    Ok(opentelemetry_otlp::tonic_types::metadata::MetadataMap::from_headers(headers))
}

/// tonic's channel spawns its worker on the current tokio runtime; the batch
/// threads then drive exports through it.
fn require_runtime() -> Result<(), TelemetryError> {
    tokio::runtime::Handle::try_current()
        .map(|_| ())
        .map_err(|_| {
            TelemetryError("OTLP/gRPC export must be set up inside a tokio runtime".into())
        })
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::sync::mpsc;

    use opentelemetry::trace::{Tracer as _, TracerProvider as _};
    use opentelemetry_sdk::trace::SdkTracerProvider;

    use super::*;

    /// Blocks every export until the test drops the sender.
    #[derive(Debug)]
    struct StuckExporter(Mutex<mpsc::Receiver<()>>);

    impl SpanExporter for StuckExporter {
        async fn export(&self, _batch: Vec<SpanData>) -> OTelSdkResult {
            let _ = self.0.lock().map(|rx| rx.recv());
            Ok(())
        }
    }

    #[test]
    fn full_queue_drops_are_counted() {
        let (release, rx) = mpsc::channel();
        let drops = Arc::new(DropCounts::default());
        let cap = 2;
        let processor = gated_processor(StuckExporter(Mutex::new(rx)), drops.clone(), cap);
        let provider = SdkTracerProvider::builder()
            .with_span_processor(processor)
            .build();
        let tracer = provider.tracer("test");
        let total = 20;
        for _ in 0..total {
            tracer.start("s");
        }
        // At most `cap` spans wait in the queue and `cap` sit in the stuck export.
        assert!(
            drops.spans() >= total - 2 * cap as u64,
            "expected at least {} drops, got {}",
            total - 2 * cap as u64,
            drops.spans()
        );
        drop(release);
        let _ = provider.shutdown();
    }

    #[test]
    fn signal_url_appends_path_once() {
        assert_eq!(
            signal_url("http://c:4318", "/v1/traces"),
            "http://c:4318/v1/traces"
        );
        assert_eq!(
            signal_url("http://c:4318/", "/v1/metrics"),
            "http://c:4318/v1/metrics"
        );
    }

    #[test]
    fn bad_grpc_header_is_an_error_without_its_value() {
        let mut cfg = super::super::tests::config();
        cfg.otlp_headers = vec![("authorization".into(), "secret\nvalue".into())];
        let err = grpc_metadata(&cfg).expect_err("newline in header value must fail");
        assert!(
            !err.to_string().contains("secret"),
            "error must not echo the header value: {err}"
        );
    }
}
