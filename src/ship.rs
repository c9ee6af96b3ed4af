//! Shipping: what `telemetry` recorded in; the same on the wire out. The
//! OTLP protobuf encoder (`otlp_wire`), OTLP/HTTP and OTLP/gRPC transport
//! with its TLS and egress (`otlp_http`, `export_tls`), the metric exporter
//! and push (`export`, `push`), the Prometheus text exposition
//! (`prometheus`), and the log subscriber with its queue (`log`,
//! `log_queue`). Nothing here runs on the request path: span records come
//! through `telemetry`'s batcher, metrics through the SDK's readers.
//!
//! `Telemetry`'s constructors that start exporters (`init`,
//! `init_with_prometheus`, `init_with`) and its `scrape` are defined here,
//! in an `impl Telemetry`, because they name these pieces; `telemetry`
//! itself never does.

mod export;
mod export_tls;
mod log;
mod log_queue;
mod otlp_http;
mod otlp_wire;
pub mod prometheus;
mod push;

pub use self::log::{LogGuard, STARTUP_TARGET, fatal, init_logging, log_filter};

use std::sync::Arc;

use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
use opentelemetry_sdk::metrics::{
    MeterProviderBuilder, PeriodicReader, SdkMeterProvider, Temporality,
};
use opentelemetry_sdk::trace::SpanExporter;

use crate::config::TelemetryConfig;
use crate::telemetry::drops::DropCounts;
use crate::telemetry::exemplars;
use crate::telemetry::pull::PullReader;
use crate::telemetry::sampling;
use crate::telemetry::span_export::{BatchSettings, RecordExporter, SdkSpans, SpanPipeline};
use crate::telemetry::span_record::Tracing;
use crate::telemetry::{self, Telemetry, TelemetryError};

impl Telemetry {
    /// Build exporters and instruments once at start-up. Must run inside the
    /// tokio runtime (the gRPC exporter's channel lives there).
    pub fn init(cfg: &TelemetryConfig) -> Result<Telemetry, TelemetryError> {
        Telemetry::init_readers(cfg, None)
    }

    /// Read the TLS files export is configured with (CA bundle, client
    /// certificate and key), as the exporters do, without starting them.
    pub fn check_files(cfg: &TelemetryConfig) -> Result<(), TelemetryError> {
        export_tls::check_files(cfg)
    }

    /// Like `init`, plus a cumulative pull reader on the same meter provider
    /// for `scrape` (the admin listener's `/metrics`).
    pub fn init_with_prometheus(cfg: &TelemetryConfig) -> Result<Telemetry, TelemetryError> {
        Telemetry::init_readers(cfg, Some(PullReader::new()))
    }

    fn init_readers(
        cfg: &TelemetryConfig,
        pull: Option<PullReader>,
    ) -> Result<Telemetry, TelemetryError> {
        let drops = Arc::new(DropCounts::default());
        let tracing = Tracing::new(sampling::Sampler::new(&cfg.sampling));
        let resource = telemetry::resource(cfg);
        let mut traces = None;
        let mut meters = SdkMeterProvider::builder();
        let export = cfg.otlp_enabled == Some(true);
        if export {
            let spans =
                export::otlp_spans(cfg, &resource, telemetry::scope(), tracing.max_attributes())?;
            let metrics = export::otlp_metrics(cfg)?;
            let traces_at = export_tls::endpoint(cfg, export_tls::Signal::Traces);
            let metrics_at = export_tls::endpoint(cfg, export_tls::Signal::Metrics);
            tracing::info!(
                traces_endpoint = %traces_at,
                metrics_endpoint = %metrics_at,
                protocol = cfg.otlp_protocol.as_str(),
                "OTLP export on"
            );
            drops.set_endpoints(traces_at, metrics_at);
            let (pipeline, with_reader) =
                with_exporters(cfg, &drops, meters, spans, metrics, pull.as_ref());
            (traces, meters) = (Some(pipeline), with_reader);
        } else {
            match cfg.otlp_enabled {
                // Turned off on purpose: no advice to turn it on.
                Some(false) => tracing::info!(
                    "OTLP export is off (telemetry.otlp_enabled = false or \
                     OTEL_SDK_DISABLED=true); /metrics and the dashboard work without it"
                ),
                _ => tracing::info!(
                    "OTLP export is off: no collector endpoint is configured; /metrics and the \
                     dashboard work without it; to export, set OTEL_EXPORTER_OTLP_ENDPOINT \
                     (e.g. http://localhost:4318), --otlp-endpoint or telemetry.otlp_endpoint"
                ),
            }
            if let Some(r) = &pull {
                meters = meters.with_reader(r.clone());
            }
        }
        let has_reader = export || pull.is_some();
        Ok(Telemetry::build(
            cfg, resource, drops, tracing, traces, meters, has_reader, pull,
        ))
    }

    /// Like `init`, with the given exporters in place of OTLP (whatever
    /// `otlp_enabled` says), behind the same batching and drop counting.
    #[doc(hidden)]
    pub fn init_with<S, M>(cfg: &TelemetryConfig, spans: S, metrics: M) -> Telemetry
    where
        S: SpanExporter + 'static,
        M: PushMetricExporter,
    {
        Telemetry::init_exporters(cfg, spans, metrics, None)
    }

    /// `init_with`, with the pull reader `pull` beside the push exporter.
    pub(crate) fn init_exporters<S, M>(
        cfg: &TelemetryConfig,
        spans: S,
        metrics: M,
        pull: Option<PullReader>,
    ) -> Telemetry
    where
        S: SpanExporter + 'static,
        M: PushMetricExporter,
    {
        let drops = Arc::new(DropCounts::default());
        let tracing = Tracing::new(sampling::Sampler::new(&cfg.sampling));
        let resource = telemetry::resource(cfg);
        let spans = SdkSpans::new(
            spans,
            &resource,
            telemetry::scope(),
            tracing.max_attributes(),
        );
        let (traces, meters) = with_exporters(
            cfg,
            &drops,
            SdkMeterProvider::builder(),
            spans,
            metrics,
            pull.as_ref(),
        );
        Telemetry::build(
            cfg,
            resource,
            drops,
            tracing,
            Some(traces),
            meters,
            true,
            pull,
        )
    }

    /// Every instrument's current cumulative value in a Prometheus format.
    /// Collects synchronously (short, but blocking): call it off the
    /// request path. Fails without a pull reader or after `shutdown`.
    pub fn scrape(&self, format: prometheus::Format) -> Result<String, TelemetryError> {
        let (pull, exposition) = self.pull().ok_or_else(|| {
            TelemetryError("no Prometheus reader (built without init_with_prometheus)".into())
        })?;
        // Exemplars first: each was kept after its request was counted, so
        // the collection below counts every one.
        let kept = match format {
            prometheus::Format::OpenMetrics => self.exemplars(),
            prometheus::Format::Text => exemplars::Snapshot::default(),
        };
        let metrics = pull
            .collect()
            .map_err(|e| TelemetryError(format!("metric collection failed: {e}")))?;
        Ok(prometheus::encode_with(&metrics, format, &kept, exposition))
    }
}

/// Start the span pipeline for the given exporters and attach the metric
/// readers, with the pull reader `pull` when there is one.
///
/// A cumulative exporter (the OTLP default) pushes what the pull reader
/// collects (`push`): one aggregation serves `/metrics` and OTLP. A delta or
/// low-memory one needs its own aggregation, so it keeps the SDK's periodic
/// reader and the pull reader stays cumulative beside it.
fn with_exporters<M: PushMetricExporter>(
    cfg: &TelemetryConfig,
    drops: &Arc<DropCounts>,
    meters: MeterProviderBuilder,
    spans: impl RecordExporter,
    metrics: M,
    pull: Option<&PullReader>,
) -> (SpanPipeline, MeterProviderBuilder) {
    let processor = SpanPipeline::start(
        spans,
        drops.clone(),
        BatchSettings::from_env(cfg.span_queue_size),
    );
    let metrics = export::CountingMetricExporter::new(metrics, drops.clone());
    let interval = cfg.metrics_export_interval;
    let meters = match pull {
        Some(pull) if metrics.temporality() == Temporality::Cumulative => {
            meters.with_reader(push::PushReader::new(pull.clone(), metrics, interval))
        }
        _ => {
            let periodic = PeriodicReader::builder(metrics)
                .with_interval(interval)
                .build();
            match pull {
                Some(pull) => meters.with_reader(periodic).with_reader(pull.clone()),
                None => meters.with_reader(periodic),
            }
        }
    };
    (processor, meters)
}
