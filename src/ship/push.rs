//! OTLP metric push from the Prometheus pull reader: one cumulative
//! aggregation, collected on scrape by `/metrics` and every export interval
//! by a thread of ours that hands it to the OTLP exporter.
//!
//! The SDK keeps one aggregation per registered reader, so a `PeriodicReader`
//! beside the pull reader would record every measurement twice and hold
//! every instrument's attribute maps twice. `PushReader` is the only reader
//! registered when the exporter is cumulative; it shares the pull reader's
//! `ManualReader` and does what the SDK's `PeriodicReader` (0.33) does:
//! collect and export on a fixed schedule, on flush, and once more at
//! shutdown before the exporter shuts down. Like the SDK's, it puts no
//! timeout of its own on an export (the exporter's `otlp_timeout` bounds
//! it); flush and shutdown wait a bounded time for the thread.

use std::sync::Weak;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

use opentelemetry::Context;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::metrics::data::ResourceMetrics;
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
use opentelemetry_sdk::metrics::reader::MetricReader;
use opentelemetry_sdk::metrics::{InstrumentKind, Pipeline, Temporality};

use crate::telemetry::pull::PullReader;

/// The SDK's export interval when none is set (`OTEL_METRIC_EXPORT_INTERVAL`
/// is read into `telemetry.metrics_export_interval` by the config layers).
const DEFAULT_INTERVAL: Duration = Duration::from_secs(60);

/// Longest wait for a flush (the SDK's `PeriodicReader` waits unbounded;
/// `Telemetry::flush` promises a bounded wait).
const FLUSH_TIMEOUT: Duration = Duration::from_secs(5);

/// What the export thread is asked to do besides its schedule.
enum Message {
    /// Collect and export now.
    Flush(Sender<OTelSdkResult>),
    /// Collect and export a last time, shut the exporter down, exit.
    Shutdown(Sender<OTelSdkResult>),
}

/// The one metric reader: the pull reader's cumulative aggregation, pushed
/// to an OTLP exporter by its own thread.
pub(super) struct PushReader {
    pull: PullReader,
    /// `None` when the thread could not start (nothing is then exported).
    tx: Option<Sender<Message>>,
}

impl std::fmt::Debug for PushReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PushReader").finish_non_exhaustive()
    }
}

impl PushReader {
    /// Export what `pull` collects through `exporter` every `interval`
    /// (zero: the SDK default). `exporter` must be cumulative.
    pub(super) fn new<E: PushMetricExporter>(
        pull: PullReader,
        exporter: E,
        interval: Duration,
    ) -> PushReader {
        debug_assert_eq!(exporter.temporality(), Temporality::Cumulative);
        let interval = match interval.is_zero() {
            true => DEFAULT_INTERVAL,
            false => interval,
        };
        let (tx, rx) = mpsc::channel();
        let reader = pull.clone();
        let spawned = std::thread::Builder::new()
            .name("tokentap-metrics-push".into())
            .spawn(move || run(&reader, &exporter, interval, &rx));
        let tx = match spawned {
            Ok(_) => Some(tx),
            Err(e) => {
                tracing::error!(error = %e, "metric export thread did not start; OTLP metrics are off");
                None
            }
        };
        PushReader { pull, tx }
    }

    /// Ask the thread for `message` and wait at most `timeout` for its answer.
    fn ask(
        &self,
        message: fn(Sender<OTelSdkResult>) -> Message,
        timeout: Duration,
    ) -> OTelSdkResult {
        let gone = || OTelSdkError::InternalFailure("metric export thread is gone".into());
        let tx = self.tx.as_ref().ok_or_else(gone)?;
        let (done, answer) = mpsc::channel();
        tx.send(message(done)).map_err(|_| gone())?;
        match answer.recv_timeout(timeout) {
            Ok(result) => result,
            Err(RecvTimeoutError::Timeout) => Err(OTelSdkError::Timeout(timeout)),
            Err(RecvTimeoutError::Disconnected) => Err(gone()),
        }
    }
}

impl MetricReader for PushReader {
    fn register_pipeline(&self, pipeline: Weak<Pipeline>) {
        self.pull.register_pipeline(pipeline);
    }

    fn collect(&self, rm: &mut ResourceMetrics) -> OTelSdkResult {
        MetricReader::collect(&self.pull, rm)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.ask(Message::Flush, FLUSH_TIMEOUT)
    }

    /// The last export first (the reader still collects), then the reader.
    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        let pushed = self.ask(Message::Shutdown, timeout);
        let pulled = self.pull.shutdown_with_timeout(timeout);
        pushed.and(pulled)
    }

    fn temporality(&self, kind: InstrumentKind) -> Temporality {
        self.pull.temporality(kind)
    }
}

/// The export thread: on schedule, on flush, and once at shutdown. The
/// schedule is the SDK's: an export every `interval` from the start of the
/// previous timed one; flushes do not move it.
fn run<E: PushMetricExporter>(
    reader: &PullReader,
    exporter: &E,
    interval: Duration,
    rx: &Receiver<Message>,
) {
    // The exporter's own work (HTTP, gRPC) must not record telemetry.
    let _suppressed = Context::enter_telemetry_suppressed_scope();
    let mut rm = ResourceMetrics::default();
    #[allow(
        clippy::disallowed_methods,
        reason = "export schedule; not a measurement"
    )]
    let mut next = Instant::now() + interval;
    loop {
        #[allow(
            clippy::disallowed_methods,
            reason = "export schedule; not a measurement"
        )]
        let now = Instant::now();
        match rx.recv_timeout(next.saturating_duration_since(now)) {
            Ok(Message::Flush(done)) => {
                let _ = done.send(collect_and_export(reader, exporter, &mut rm));
            }
            Ok(Message::Shutdown(done)) => {
                let exported = collect_and_export(reader, exporter, &mut rm);
                let shut = exporter.shutdown();
                let _ = done.send(exported.and(shut));
                return;
            }
            Err(RecvTimeoutError::Timeout) => {
                #[allow(
                    clippy::disallowed_methods,
                    reason = "export schedule; not a measurement"
                )]
                let started = Instant::now();
                let _ = collect_and_export(reader, exporter, &mut rm);
                // An export longer than the interval: the next one at once.
                next = started + interval;
            }
            Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}

/// One collection of the shared reader, exported unless empty. Failed
/// exports are counted and logged by `CountingMetricExporter`.
fn collect_and_export<E: PushMetricExporter>(
    reader: &PullReader,
    exporter: &E,
    rm: &mut ResourceMetrics,
) -> OTelSdkResult {
    if let Err(e) = MetricReader::collect(reader, rm) {
        tracing::debug!(error = %e, "metric collection for OTLP export failed");
        return Err(e);
    }
    if rm.scope_metrics().next().is_none() {
        return Ok(());
    }
    futures_executor::block_on(exporter.export(rm))
}

#[cfg(test)]
#[allow(clippy::disallowed_methods, reason = "tests wait on deadlines")]
mod tests {
    use opentelemetry::metrics::MeterProvider as _;
    use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData};
    use opentelemetry_sdk::metrics::{InMemoryMetricExporter, SdkMeterProvider};

    use super::*;

    /// A provider whose only reader pushes to `exporter` every `interval`.
    fn provider(exporter: &InMemoryMetricExporter, interval: Duration) -> SdkMeterProvider {
        let push = PushReader::new(PullReader::new(), exporter.clone(), interval);
        SdkMeterProvider::builder().with_reader(push).build()
    }

    /// The counter `c`'s value in each export so far.
    fn values(exporter: &InMemoryMetricExporter) -> Vec<u64> {
        let all = exporter.get_finished_metrics().expect("in-memory metrics");
        all.iter()
            .flat_map(|rm| rm.scope_metrics())
            .flat_map(|s| s.metrics())
            .filter(|m| m.name() == "c")
            .filter_map(|m| match m.data() {
                AggregatedMetrics::U64(MetricData::Sum(s)) => {
                    Some(s.data_points().map(|p| p.value()).sum())
                }
                _ => None,
            })
            .collect()
    }

    #[test]
    fn flush_exports_the_running_total_and_nothing_while_empty() {
        let exporter = InMemoryMetricExporter::default();
        let p = provider(&exporter, Duration::from_secs(3600));
        p.force_flush().expect("flush");
        assert!(
            exporter.get_finished_metrics().expect("metrics").is_empty(),
            "nothing recorded: nothing exported"
        );
        let c = p.meter("t").u64_counter("c").build();
        c.add(2, &[]);
        p.force_flush().expect("flush");
        c.add(3, &[]);
        p.force_flush().expect("flush");
        assert_eq!(
            values(&exporter),
            vec![2, 5],
            "cumulative totals, one per flush"
        );
        p.shutdown().expect("shutdown");
    }

    #[test]
    fn exports_on_schedule_and_once_more_at_shutdown() {
        let exporter = InMemoryMetricExporter::default();
        let p = provider(&exporter, Duration::from_millis(40));
        let c = p.meter("t").u64_counter("c").build();
        c.add(1, &[]);
        let deadline = Instant::now() + Duration::from_secs(10);
        while values(&exporter).len() < 2 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(
            values(&exporter).len() >= 2,
            "at least two timed exports within 10 s at a 40 ms interval"
        );
        c.add(6, &[]);
        p.shutdown().expect("shutdown exports a last time");
        assert_eq!(
            values(&exporter).last(),
            Some(&7),
            "the shutdown's own export carries the last total"
        );
        assert!(
            p.force_flush().is_err(),
            "after shutdown the export thread is gone"
        );
    }

    #[test]
    fn zero_interval_is_the_sdk_default() {
        let exporter = InMemoryMetricExporter::default();
        let p = provider(&exporter, Duration::ZERO);
        let c = p.meter("t").u64_counter("c").build();
        c.add(1, &[]);
        std::thread::sleep(Duration::from_millis(200));
        assert!(
            values(&exporter).is_empty(),
            "no timed export within 200 ms: the interval is the 60 s default"
        );
        p.force_flush().expect("flush");
        assert_eq!(values(&exporter), vec![1]);
        p.shutdown().expect("shutdown");
    }
}
