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
pub(crate) struct DropCounts {
    spans: AtomicU64,
    data_points: AtomicU64,
    health: Mutex<Health>,
    /// The collector URLs of traces and metrics, named in the WARNs.
    endpoints: std::sync::OnceLock<(String, String)>,
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
    pub(crate) fn spans(&self) -> u64 {
        self.spans.load(Ordering::Relaxed)
    }

    /// Metric data points in failed exports.
    pub(crate) fn data_points(&self) -> u64 {
        self.data_points.load(Ordering::Relaxed)
    }

    /// The collector URLs export goes to, for the failure WARNs.
    pub(crate) fn set_endpoints(&self, traces: String, metrics: String) {
        let _ = self.endpoints.set((traces, metrics));
    }

    /// `signal`'s collector URL, when known.
    fn endpoint(&self, signal: &str) -> &str {
        match (self.endpoints.get(), signal) {
            (Some((traces, _)), "traces") => traces,
            (Some((_, metrics)), _) => metrics,
            (None, _) => "the collector",
        }
    }

    /// An export of `signal` failed with `error`: WARN at the first
    /// failure, then a summary of what was dropped at most once per
    /// [`FAILURE_SUMMARY_INTERVAL`].
    pub(crate) fn export_failed(&self, signal: &str, error: &dyn std::fmt::Display) {
        let Ok(mut h) = self.health.lock() else {
            return;
        };
        #[allow(
            clippy::disallowed_methods,
            reason = "rate-limits export failure logs; not a measurement"
        )]
        let now = Instant::now();
        let (spans, points) = (self.spans(), self.data_points());
        let endpoint = self.endpoint(signal);
        let error = without_repeats(&error.to_string());
        match h.reported {
            Some((at, s0, p0)) if h.failing => {
                if now.duration_since(at) < FAILURE_SUMMARY_INTERVAL {
                    return;
                }
                tracing::warn!(
                    signal,
                    endpoint,
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
                endpoint,
                error = %error,
                "OTLP export failed ({signal} to {endpoint}); telemetry is dropped and counted \
                 (tokentap.telemetry.dropped) while the collector is unreachable; a summary \
                 follows at most once a minute"
            ),
        }
        h.failing = true;
        h.reported = Some((now, spans, points));
    }

    /// An export succeeded: after failures, say the collector is back.
    pub(crate) fn export_ok(&self) {
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

    pub(crate) fn add_spans(&self, n: u64) {
        self.spans.fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn add_data_points(&self, n: u64) {
        self.data_points.fetch_add(n, Ordering::Relaxed);
    }
}

/// `error` with each run of `: `-separated parts that repeats the run just
/// before it said once: the gRPC exporter renders a cause chain whose
/// links may already print their source (`…: proxy P refused CONNECT C:
/// 403 Forbidden: proxy P refused CONNECT C: 403 Forbidden`).
fn without_repeats(error: &str) -> String {
    let mut parts: Vec<&str> = error.split(": ").collect();
    let mut run = 1;
    while run <= parts.len() / 2 {
        let repeat =
            (0..=parts.len() - 2 * run).find(|&i| parts[i..i + run] == parts[i + run..i + 2 * run]);
        match repeat {
            Some(i) => {
                parts.drain(i + run..i + 2 * run);
                run = 1;
            }
            None => run += 1,
        }
    }
    parts.join(": ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeated_cause_is_said_once() {
        let twice = "TonicTracesClient export failed with gRPC code: Unknown: transport error: \
                     proxy http://127.0.0.1:9 refused CONNECT c:4317: 403 Forbidden: \
                     proxy http://127.0.0.1:9 refused CONNECT c:4317: 403 Forbidden";
        assert_eq!(
            without_repeats(twice),
            "TonicTracesClient export failed with gRPC code: Unknown: transport error: \
             proxy http://127.0.0.1:9 refused CONNECT c:4317: 403 Forbidden"
        );
        let once = "a: b: a: c";
        assert_eq!(without_repeats(once), once, "only adjacent repeats go");
        assert_eq!(without_repeats("x: x: x"), "x");
        assert_eq!(without_repeats(""), "");
    }
}
