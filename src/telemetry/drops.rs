//! Drop counts: spans and metric data points that never reached the
//! collector in (from the span pipeline and the metric exporter); the
//! `tokentap.telemetry.dropped` totals and the export-health log lines
//! out. A leaf, so the exporters and the instruments that read it need not
//! know each other.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Items that never reached the collector, by signal, and what the log
/// has been told about it.
#[derive(Debug, Default)]
pub(super) struct DropCounts {
    spans: AtomicU64,
    data_points: AtomicU64,
    health: Mutex<Health>,
}

/// While a collector is unreachable the log gets one WARN at the first
/// failure, then at most one summary per this interval (never a pair of
/// lines per export interval).
pub(crate) const FAILURE_SUMMARY_INTERVAL: Duration = Duration::from_secs(60);

/// Export failures as the log has reported them.
#[derive(Debug, Default)]
struct Health {
    /// Exports are failing (since the last success).
    failing: bool,
    /// When the last failure line was written, and the drop totals then.
    reported: Option<(Instant, u64, u64)>,
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

    /// An export of `signal` failed with `error`: WARN at the first
    /// failure, then a summary of what was dropped at most once per
    /// [`FAILURE_SUMMARY_INTERVAL`].
    pub(super) fn export_failed(&self, signal: &str, error: &dyn std::fmt::Display) {
        let Ok(mut h) = self.health.lock() else {
            return;
        };
        #[allow(
            clippy::disallowed_methods,
            reason = "rate-limits export failure logs; not a measurement"
        )]
        let now = Instant::now();
        let (spans, points) = (self.spans(), self.data_points());
        match h.reported {
            Some((at, s0, p0)) if h.failing => {
                if now.duration_since(at) < FAILURE_SUMMARY_INTERVAL {
                    return;
                }
                tracing::warn!(
                    signal,
                    error = %error,
                    spans_dropped = spans - s0,
                    data_points_dropped = points - p0,
                    "OTLP export still failing: {} spans and {} metric data points dropped in the last {}s \
                     ({spans} and {points} since start-up)",
                    spans - s0,
                    points - p0,
                    now.duration_since(at).as_secs(),
                );
            }
            _ => tracing::warn!(
                signal,
                error = %error,
                "OTLP export failed; telemetry is dropped and counted (tokentap.telemetry.dropped) \
                 while the collector is unreachable; a summary follows at most once a minute"
            ),
        }
        h.failing = true;
        h.reported = Some((now, spans, points));
    }

    /// An export succeeded: after failures, say the collector is back.
    pub(super) fn export_ok(&self) {
        let Ok(mut h) = self.health.lock() else {
            return;
        };
        if h.failing {
            h.failing = false;
            tracing::info!(
                spans_dropped = self.spans(),
                data_points_dropped = self.data_points(),
                "OTLP export recovered"
            );
        }
    }

    pub(super) fn add_spans(&self, n: u64) {
        self.spans.fetch_add(n, Ordering::Relaxed);
    }

    pub(super) fn add_data_points(&self, n: u64) {
        self.data_points.fetch_add(n, Ordering::Relaxed);
    }
}
