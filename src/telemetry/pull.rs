//! The SDK's pull reader, where its metric types meet tokentap's: the
//! meter provider's instruments in, cumulative `ResourceMetrics` out on
//! demand (for `/metrics`, and for the OTLP push when export is
//! cumulative), plus how much of each series the exposition writes.

use std::sync::{Arc, Weak};
use std::time::Duration;

use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::metrics::data::ResourceMetrics;
use opentelemetry_sdk::metrics::reader::MetricReader;
use opentelemetry_sdk::metrics::{InstrumentKind, ManualReader, Pipeline, Temporality};

/// A pull reader on the meter provider: one clone is registered with the
/// provider, another kept to collect on scrape. Always cumulative, whatever
/// temporality the OTLP exporter uses: Prometheus needs running totals.
#[derive(Debug, Clone)]
pub struct PullReader(Arc<ManualReader>);

impl PullReader {
    /// A cumulative reader, not yet registered with a provider.
    pub fn new() -> PullReader {
        PullReader(Arc::new(
            ManualReader::builder()
                .with_temporality(Temporality::Cumulative)
                .build(),
        ))
    }

    /// Collect every instrument now (runs observable callbacks). Blocking
    /// but short; callers keep it off the proxy's request path.
    pub fn collect(&self) -> Result<ResourceMetrics, OTelSdkError> {
        let mut rm = ResourceMetrics::default();
        self.0.collect(&mut rm)?;
        Ok(rm)
    }
}

impl Default for PullReader {
    fn default() -> Self {
        PullReader::new()
    }
}

impl MetricReader for PullReader {
    fn register_pipeline(&self, pipeline: Weak<Pipeline>) {
        self.0.register_pipeline(pipeline);
    }

    fn collect(&self, rm: &mut ResourceMetrics) -> OTelSdkResult {
        self.0.collect(rm)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.0.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.0.shutdown_with_timeout(timeout)
    }

    fn temporality(&self, kind: InstrumentKind) -> Temporality {
        self.0.temporality(kind)
    }
}

/// How much of each series `/metrics` writes (`telemetry.prometheus_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exposition {
    /// Each series carries `otel_scope_name` and `otel_scope_version`.
    pub scope_labels: bool,
    /// Write every `bucket_stride`-th bucket boundary of a histogram (from
    /// the first) and `+Inf`: buckets are cumulative, so the coarser
    /// histogram is exact at the boundaries kept.
    pub bucket_stride: usize,
}

impl Default for Exposition {
    fn default() -> Exposition {
        Exposition {
            scope_labels: true,
            bucket_stride: 1,
        }
    }
}
