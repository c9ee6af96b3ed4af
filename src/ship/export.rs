//! Export plumbing: `TelemetryConfig` in; OTLP exporters, wrapped so that
//! every span or data point that never reaches the collector is counted, out.
//!
//! Spans can be lost in two places: the queue is full, or the export fails
//! after the exporter's own retries; the span pipeline (`span_export`)
//! counts both into `DropCounts` (`drops`). `CountingMetricExporter` counts
//! data points in failed metric exports.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use opentelemetry::InstrumentationScope;
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig, WithTonicConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::metrics::Temporality;
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData, ResourceMetrics};
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;

use super::export_tls::{self, CollectorClient, Signal};
use super::otlp_http::OtlpSpanExporter;
use crate::config::{OtlpProtocol, TelemetryConfig};
use crate::telemetry::TelemetryError;
use crate::telemetry::drops::DropCounts;

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
        match &result {
            Ok(()) => self.drops.export_ok(),
            Err(e) => {
                self.drops.add_data_points(count_data_points(metrics));
                self.drops.export_failed("metrics", e);
            }
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

/// The OTLP span exporter for `cfg`, for spans of `resource` and `scope`
/// with at most `max_attributes` attributes each: both protocols write
/// their protobuf bytes directly from the records (`otlp_wire`) and send
/// them with tokentap's own client (`otlp_http`).
pub(super) fn otlp_spans(
    cfg: &TelemetryConfig,
    resource: &Resource,
    scope: InstrumentationScope,
    max_attributes: usize,
) -> Result<OtlpSpanExporter, TelemetryError> {
    OtlpSpanExporter::new(cfg, resource, &scope, max_attributes)
}

/// The OTLP metric exporter for `cfg`.
pub(super) fn otlp_metrics(
    cfg: &TelemetryConfig,
) -> Result<opentelemetry_otlp::MetricExporter, TelemetryError> {
    let builder = opentelemetry_otlp::MetricExporter::builder();
    let built = match cfg.otlp_protocol {
        OtlpProtocol::HttpProtobuf => {
            let endpoint = export_tls::http_endpoint(cfg, Signal::Metrics);
            let b = builder
                .with_http()
                .with_protocol(Protocol::HttpBinary)
                .with_timeout(cfg.otlp_timeout)
                .with_headers(http_headers(cfg));
            b.with_http_client(CollectorClient::new(cfg, Signal::Metrics)?)
                .with_endpoint(endpoint)
                .build()
        }
        OtlpProtocol::Grpc => {
            require_runtime()?;
            builder
                .with_tonic()
                .with_timeout(cfg.otlp_timeout)
                .with_metadata(grpc_metadata(cfg)?)
                .with_channel(export_tls::grpc_channel(cfg, Signal::Metrics)?)
                .build()
        }
    };
    built.map_err(|e| TelemetryError(format!("metric exporter: {e}")))
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
    use super::*;

    #[test]
    fn bad_grpc_header_is_an_error_without_its_value() {
        let mut cfg = crate::telemetry::tests::config();
        cfg.otlp_headers = vec![("authorization".into(), "secret\nvalue".into())];
        let err = grpc_metadata(&cfg).expect_err("newline in header value must fail");
        assert!(
            !err.to_string().contains("secret"),
            "error must not echo the header value: {err}"
        );
    }
}
