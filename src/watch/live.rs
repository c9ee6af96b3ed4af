//! Live statistics: one [`Sample`] per finished request (and an in-flight
//! token per started one) in; every second an immutable [`Snapshot`] of
//! rolling per-series windows out — read by the dashboard (`/api/live`),
//! `tokentap demo` and the slowdown detector.
//!
//! ```text
//! RequestTelemetry ──try_send──► bounded mpsc ──(emptied every 50 ms)──► aggregator task ──watch──► Arc<Snapshot>
//! ```
//!
//! * The request path never waits or locks: [`Live::begin`] and
//!   [`Live::finish`] each do one `try_send`; a full queue drops the message
//!   and counts it ([`Snapshot::dropped`]). In-flight requests are counted by
//!   a token the request holds: the aggregator sees it released when the
//!   request's telemetry is dropped, so no second message is needed.
//! * A series is ([`SeriesKey`]) route, model, tenant, with model and tenant
//!   already capped by the telemetry cardinality guards. At most
//!   `live.max_series` series are kept; samples of further series are folded
//!   into one `other`/`other`/`other` series ([`Snapshot::overflowed`]).
//! * Each series keeps `live.window / live.bucket` time buckets (counts,
//!   errors, tokens, log-scale histograms of TTFT, decode tokens/s, visible
//!   TTFT and thinking time, max stall). Memory is bounded by config, not
//!   traffic: at most `max_series × buckets × ~4 KiB` plus `live.recent`
//!   recent requests.
//!   A series with nothing in its window and nothing in flight is removed.
//! * Errors are outcomes `upstream_error`, `upstream_timeout`, `malformed` and
//!   `incomplete` (`Outcome::is_error`); client cancellations are counted
//!   apart and are not errors.
//!
//! # Reading windows (slowdown detector)
//!
//! Every snapshot carries its buckets (shared, not copied), so any window up
//! to `live.window` can be queried from any thread without locking:
//!
//! ```ignore
//! let mut rx = telemetry.live().subscribe();
//! while rx.changed().await.is_ok() {
//!     let snap = rx.borrow_and_update().clone(); // Arc<Snapshot>, once per second
//!     let filter = SeriesFilter::any().route("openai").model("gpt-4o*");
//!     let w = snap.window(&filter, Duration::from_secs(300));
//!     let (ttft_p95, tps_p50) = (w.ttft.quantile(0.95), w.decode_tps.quantile(0.5));
//!     let (stall, errors) = (w.max_stall, w.error_ratio());
//!     for model in snap.models() {
//!         // Baseline over the whole configured window, per model.
//!         let base = snap.window(&SeriesFilter::any().model_exact(model), snap.window_len());
//!     }
//! }
//! ```
//!
//! [`Aggregator`] is public and takes "now" as an argument, so windows can be
//! driven deterministically in tests.

mod aggregate;
mod hist;

pub use self::aggregate::{
    Aggregator, ModelTimeline, RecentRequest, SeriesSummary, Snapshot, TimelinePoint, WindowStats,
};
pub use self::hist::{Distribution, RELATIVE_ERROR};

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use opentelemetry::trace::TraceId;
use serde::{Serialize, Serializer};
use tokio::sync::{mpsc, watch};

use crate::config::LiveConfig;
use crate::meter::{Measurement, Outcome};

/// Messages queued between the request path and the aggregator.
const QUEUE: usize = 16_384;
/// How often a snapshot is published.
pub const TICK: Duration = Duration::from_secs(1);
/// How often the aggregator empties the queue. It never waits on the queue
/// itself, so a `try_send` wakes nobody: at thousands of requests a second
/// a wake-up per message cost a cross-thread futex wake each. The queue
/// holds `QUEUE` messages, over 300,000 a second at this period.
const DRAIN: Duration = Duration::from_millis(50);

/// What one series is keyed by. Values are already capped (`other`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct SeriesKey {
    /// Configured route name.
    #[serde(serialize_with = "ser_str")]
    pub route: Arc<str>,
    /// Requested model (capped); `None` when the request named none.
    #[serde(serialize_with = "ser_opt_str")]
    pub model: Option<Arc<str>>,
    /// Tenant (capped); `None` when no tenant was resolved.
    #[serde(serialize_with = "ser_opt_str")]
    pub tenant: Option<Arc<str>>,
}

impl SeriesKey {
    /// The series that samples beyond `live.max_series` are folded into.
    pub fn overflow() -> SeriesKey {
        let other: Arc<str> = Arc::from(crate::attrs::OTHER);
        SeriesKey {
            route: other.clone(),
            model: Some(other.clone()),
            tenant: Some(other),
        }
    }
}

/// One finished request, as the live statistics see it. No prompt or
/// completion text, no headers.
#[derive(Debug, Clone)]
pub struct Sample {
    /// The series (route, model, tenant) the request belongs to.
    pub key: SeriesKey,
    /// Model the response named (capped).
    pub response_model: Option<Arc<str>>,
    /// How the request ended.
    pub outcome: Outcome,
    /// HTTP status sent to the client.
    pub status: u16,
    /// `error.type` (capped), when the outcome is not `complete`.
    pub error_type: Option<Arc<str>>,
    /// Time to first token, seconds.
    pub ttft: Option<f64>,
    /// Time to the first visible output (reasoning excluded), seconds.
    pub visible_ttft: Option<f64>,
    /// Thinking time (first reasoning to first visible output), seconds.
    pub thinking: Option<f64>,
    /// Decode tokens per second.
    pub decode_tps: Option<f64>,
    /// Largest gap between content chunks, seconds.
    pub max_stall: Option<f64>,
    /// Input tokens, when known.
    pub tokens_in: Option<u64>,
    /// Output tokens, when known.
    pub tokens_out: Option<u64>,
    /// Token counts are estimates.
    pub estimated: bool,
    /// t_end − t_req, seconds.
    pub duration: f64,
    /// Monotonic end of the request (t_req + duration): picks the bucket.
    pub end: Instant,
    /// Wall-clock end of the request, for display.
    pub end_wall: SystemTime,
    /// Trace id of the request's span; `None` when the span has no valid context.
    pub trace_id: Option<TraceId>,
    /// The span was exported: sampling kept it and export is on. A trace
    /// id without it leads to no trace in the backend.
    pub span_exported: bool,
    /// Prefill rate, input tokens / TTFT ({token}/s).
    pub prefill_tps: Option<f64>,
    /// Requests in flight to the same route and model when this one
    /// started, itself included.
    pub in_flight: Option<u64>,
    /// The request's cost in USD, when priced (docs/COST.md).
    pub cost_usd: Option<f64>,
    /// Tokens were used but the model has no price.
    pub unpriced: bool,
}

impl Sample {
    /// The sample for `m`, with labels already capped by the caller.
    pub fn new(
        key: SeriesKey,
        m: &Measurement,
        response_model: Option<Arc<str>>,
        error_type: Option<Arc<str>>,
        trace_id: TraceId,
    ) -> Sample {
        let secs = |d: Duration| d.as_secs_f64();
        Sample {
            key,
            response_model,
            outcome: m.outcome,
            status: m.status,
            error_type,
            ttft: m.time_to_first_token.map(secs),
            visible_ttft: m.reasoning.time_to_first_visible.map(secs),
            thinking: m.reasoning.thinking_time().map(secs),
            decode_tps: m.decode_tokens_per_second(),
            max_stall: m.max_gap.filter(|_| m.request.stream).map(secs),
            tokens_in: m.usage.input,
            tokens_out: m.output_tokens.or(m.usage.output),
            estimated: m.estimated(),
            duration: secs(m.duration),
            end: m.request.start + m.duration,
            end_wall: m.request.start_wall + m.duration,
            trace_id: (trace_id != TraceId::INVALID).then_some(trace_id),
            span_exported: false,
            prefill_tps: m.prefill_tokens_per_second(),
            in_flight: None,
            cost_usd: None,
            unpriced: false,
        }
    }

    /// Counted as an error (client cancellations are not).
    pub fn is_error(&self) -> bool {
        self.outcome.is_error()
    }
}

/// Which series a window query covers. Empty = all series.
#[derive(Debug, Clone, Default)]
pub struct SeriesFilter {
    route: Option<String>,
    model: Option<Glob>,
    tenant: Option<String>,
}

impl SeriesFilter {
    /// Every series.
    pub fn any() -> SeriesFilter {
        SeriesFilter::default()
    }

    /// Only this route (exact name).
    pub fn route(mut self, route: impl Into<String>) -> SeriesFilter {
        self.route = Some(route.into());
        self
    }

    /// Only models matching `glob` (`*` any run, `?` one character).
    /// Requests without a model match only `*`.
    pub fn model(mut self, glob: &str) -> SeriesFilter {
        self.model = Some(Glob::new(glob));
        self
    }

    /// Only this model (exact name, no glob characters interpreted).
    pub fn model_exact(mut self, model: &str) -> SeriesFilter {
        self.model = Some(Glob::exact(model));
        self
    }

    /// Only this tenant (exact value).
    pub fn tenant(mut self, tenant: impl Into<String>) -> SeriesFilter {
        self.tenant = Some(tenant.into());
        self
    }

    /// Whether the series `key` is covered.
    pub fn matches(&self, key: &SeriesKey) -> bool {
        self.route.as_deref().is_none_or(|r| r == &*key.route)
            && self.model.as_ref().is_none_or(|g| match &key.model {
                Some(m) => g.matches(m),
                None => g.matches_everything(),
            })
            && self
                .tenant
                .as_deref()
                .is_none_or(|t| key.tenant.as_deref() == Some(t))
    }
}

/// A model name pattern: `*` matches any run of characters, `?` one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Glob {
    pattern: Vec<char>,
    literal: bool,
}

impl Glob {
    /// A pattern with `*` and `?` wildcards.
    pub fn new(pattern: &str) -> Glob {
        Glob {
            pattern: pattern.chars().collect(),
            literal: false,
        }
    }

    /// A pattern that matches exactly `text`.
    pub fn exact(text: &str) -> Glob {
        Glob {
            pattern: text.chars().collect(),
            literal: true,
        }
    }

    fn matches_everything(&self) -> bool {
        !self.literal && !self.pattern.is_empty() && self.pattern.iter().all(|c| *c == '*')
    }

    /// Whether `text` matches.
    pub fn matches(&self, text: &str) -> bool {
        let t: Vec<char> = text.chars().collect();
        if self.literal {
            return t == self.pattern;
        }
        // Iterative wildcard match with single-star backtracking.
        let (p, mut pi, mut ti) = (&self.pattern, 0, 0);
        let mut star: Option<(usize, usize)> = None;
        while ti < t.len() {
            if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
                (pi, ti) = (pi + 1, ti + 1);
            } else if pi < p.len() && p[pi] == '*' {
                star = Some((pi, ti));
                pi += 1;
            } else if let Some((sp, st)) = star {
                (pi, ti) = (sp + 1, st + 1);
                star = Some((sp, st + 1));
            } else {
                return false;
            }
        }
        p[pi..].iter().all(|c| *c == '*')
    }
}

/// Request path → aggregator.
#[derive(Debug)]
enum Msg {
    /// A request started; in flight while `token` has another owner.
    Begin(SeriesKey, Arc<()>),
    /// A request finished.
    Finish(Box<Sample>),
}

/// Handle to the live statistics: cheap to clone, shared by the request path
/// (feeding) and readers (dashboard, demo, detector).
#[derive(Debug, Clone)]
pub struct Live {
    tx: mpsc::Sender<Msg>,
    snapshots: watch::Receiver<Arc<Snapshot>>,
    dropped: Arc<AtomicU64>,
    cost_note: Arc<OnceLock<Box<str>>>,
}

/// One request's part in the live statistics: its series and in-flight token.
#[derive(Debug)]
pub struct LiveRequest {
    key: SeriesKey,
    _in_flight: Arc<()>,
}

impl LiveRequest {
    /// The request's series.
    pub fn key(&self) -> &SeriesKey {
        &self.key
    }
}

impl Live {
    /// Start the aggregator task on the current tokio runtime. Without a
    /// runtime nothing aggregates: every message counts as dropped and the
    /// snapshot stays empty.
    pub fn start(cfg: &LiveConfig) -> Live {
        let dropped = Arc::new(AtomicU64::new(0));
        let (tx, rx) = mpsc::channel(QUEUE);
        let (publish, snapshots) = watch::channel(Arc::new(Snapshot::empty(cfg)));
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            #[allow(
                clippy::disallowed_methods,
                reason = "origin of the live-statistics bucket clock; request timings come from meter"
            )]
            let now = tokio::time::Instant::now().into_std();
            let agg = Aggregator::new(cfg, now, dropped.clone());
            rt.spawn(run(agg, rx, publish));
        }
        Live {
            tx,
            snapshots,
            dropped,
            cost_note: Arc::default(),
        }
    }

    /// A line the dashboard shows beside its cost figures, set once
    /// (`tokentap demo`: its prices are made up); later calls change nothing.
    pub fn set_cost_note(&self, note: &str) {
        let _ = self.cost_note.set(note.into());
    }

    /// The line [`Live::set_cost_note`] set, if any.
    pub fn cost_note(&self) -> Option<&str> {
        self.cost_note.get().map(|n| &**n)
    }

    /// A request started (request path: one `try_send`, never waits).
    pub fn begin(&self, key: SeriesKey) -> LiveRequest {
        let token = Arc::new(());
        self.send(Msg::Begin(key.clone(), token.clone()));
        LiveRequest {
            key,
            _in_flight: token,
        }
    }

    /// A request finished (request path: one `try_send`, never waits).
    pub fn finish(&self, sample: Sample) {
        self.send(Msg::Finish(Box::new(sample)));
    }

    fn send(&self, msg: Msg) {
        if self.tx.try_send(msg).is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The latest snapshot (published every [`TICK`]).
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.snapshots.borrow().clone()
    }

    /// A receiver that wakes on every published snapshot.
    pub fn subscribe(&self) -> watch::Receiver<Arc<Snapshot>> {
        self.snapshots.clone()
    }

    /// Statistics of the series matching `filter` over the last `over`
    /// (clamped to the configured window), from the latest snapshot.
    pub fn window(&self, filter: &SeriesFilter, over: Duration) -> WindowStats {
        self.snapshot().window(filter, over)
    }

    /// Messages dropped because the queue was full, since start-up.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

/// The aggregator task: drain the queue, publish a snapshot every tick; ends
/// when every `Live` handle is gone.
async fn run(
    mut agg: Aggregator,
    mut rx: mpsc::Receiver<Msg>,
    publish: watch::Sender<Arc<Snapshot>>,
) {
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut drain = tokio::time::interval(DRAIN);
    drain.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        let snapshot_at = tokio::select! {
            _ = drain.tick() => None,
            at = tick.tick() => Some(at),
        };
        loop {
            match rx.try_recv() {
                Ok(Msg::Begin(key, token)) => agg.begin(key, token),
                Ok(Msg::Finish(sample)) => agg.record(*sample),
                Err(mpsc::error::TryRecvError::Empty) => break,
                Err(mpsc::error::TryRecvError::Disconnected) => return,
            }
        }
        if let Some(at) = snapshot_at {
            let snapshot = agg.snapshot(at.into_std(), SystemTime::now());
            publish.send_replace(Arc::new(snapshot));
        }
    }
}

fn ser_str<S: Serializer>(v: &Arc<str>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(v)
}

fn ser_opt_str<S: Serializer>(v: &Option<Arc<str>>, s: S) -> Result<S::Ok, S::Error> {
    match v {
        Some(v) => s.serialize_some(&**v),
        None => s.serialize_none(),
    }
}

#[cfg(test)]
#[allow(
    clippy::disallowed_methods,
    reason = "tests build timestamps and deadlines freely"
)]
pub(crate) mod tests;
