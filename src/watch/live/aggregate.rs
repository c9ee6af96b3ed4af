//! The aggregator: samples and in-flight tokens in (with the time handed in),
//! per-series rolling buckets kept, immutable `Snapshot`s out.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use opentelemetry::trace::TraceId;
use serde::{Serialize, Serializer};

use super::hist::{Distribution, LogHist};
use super::{Sample, SeriesFilter, SeriesKey, ser_opt_str, ser_str};
use crate::capped_maps::{self, FxMap};
use crate::config::LiveConfig;

/// Per-series figures in the snapshot cover this much (clamped to the window).
const STATS_WINDOW: Duration = Duration::from_secs(60);
/// Models drawn in the timeline (the busiest in the window).
const TIMELINE_MODELS: usize = 8;
/// In-flight tokens tracked at once; more requests are not counted in flight.
const MAX_OPEN: usize = 65_536;

/// One series' figures in one time bucket. Shared between the aggregator and
/// published snapshots; the aggregator copies it on write.
#[derive(Debug, Clone, Default)]
pub(super) struct Bucket {
    /// Absolute bucket number since the aggregator's epoch.
    index: u64,
    requests: u64,
    errors: u64,
    cancelled: u64,
    tokens_in: u64,
    tokens_out: u64,
    cost: CostTotals,
    ttft: LogHist,
    tps: LogHist,
    max_stall: Option<f64>,
    /// Visible TTFT of every request; thinking time of those that reasoned.
    visible_ttft: LogHist,
    thinking: LogHist,
}

impl Bucket {
    fn add(&mut self, s: &Sample) {
        self.requests += 1;
        self.errors += u64::from(s.is_error());
        self.cancelled += u64::from(s.outcome == crate::meter::Outcome::ClientCancelled);
        self.tokens_in += s.tokens_in.unwrap_or(0);
        self.tokens_out += s.tokens_out.unwrap_or(0);
        self.cost.add(s);
        if let Some(v) = s.ttft {
            self.ttft.record(v);
        }
        if let Some(v) = s.decode_tps {
            self.tps.record(v);
        }
        if let Some(v) = s.max_stall {
            self.max_stall = Some(self.max_stall.map_or(v, |m| m.max(v)));
        }
        if let Some(v) = s.visible_ttft {
            self.visible_ttft.record(v);
        }
        if let Some(v) = s.thinking {
            self.thinking.record(v);
        }
    }
}

/// Spend, and the tokens it bought, summed over requests (tokens per
/// dollar come from priced requests only, so unpriced ones do not inflate
/// them).
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct CostTotals {
    /// USD spent by priced requests.
    pub usd: f64,
    /// Priced requests.
    pub priced: u64,
    /// Input tokens of priced requests.
    pub priced_tokens_in: u64,
    /// Output tokens of priced requests.
    pub priced_tokens_out: u64,
    /// Requests that used tokens but whose model has no price.
    pub unpriced: u64,
}

impl CostTotals {
    fn add(&mut self, s: &Sample) {
        if let Some(usd) = s.cost_usd {
            self.usd += usd;
            self.priced += 1;
            self.priced_tokens_in += s.tokens_in.unwrap_or(0);
            self.priced_tokens_out += s.tokens_out.unwrap_or(0);
        }
        self.unpriced += u64::from(s.unpriced);
    }

    fn fold(&mut self, o: &CostTotals) {
        self.usd += o.usd;
        self.priced += o.priced;
        self.priced_tokens_in += o.priced_tokens_in;
        self.priced_tokens_out += o.priced_tokens_out;
        self.unpriced += o.unpriced;
    }
}

/// One series' ring of buckets, indexed by `index % slots`.
#[derive(Debug)]
struct Series {
    ring: Vec<Option<Arc<Bucket>>>,
}

impl Series {
    fn new(slots: usize) -> Series {
        Series {
            ring: vec![None; slots],
        }
    }

    /// The bucket for `index`, or `None` when the slot already holds a newer
    /// bucket (the sample is older than the window).
    fn bucket_mut(&mut self, index: u64) -> Option<&mut Bucket> {
        let slots = self.ring.len() as u64;
        let slot = &mut self.ring[(index % slots) as usize];
        match slot {
            Some(b) if b.index > index => return None,
            Some(b) if b.index == index => {}
            _ => {
                *slot = Some(Arc::new(Bucket {
                    index,
                    ..Bucket::default()
                }));
            }
        }
        slot.as_mut().map(Arc::make_mut)
    }

    fn at(&self, index: u64) -> Option<&Bucket> {
        let slots = self.ring.len() as u64;
        self.ring[(index % slots) as usize]
            .as_deref()
            .filter(|b| b.index == index)
    }

    /// Forget buckets older than `oldest`; whether any bucket remains.
    fn expire(&mut self, oldest: u64) -> bool {
        let mut live = false;
        for slot in &mut self.ring {
            match slot {
                Some(b) if b.index < oldest => *slot = None,
                Some(_) => live = true,
                None => {}
            }
        }
        live
    }
}

/// Owns the rolling windows. Driven by the aggregator task in production
/// and directly, with explicit times, in tests.
#[derive(Debug)]
pub struct Aggregator {
    clock: Clock,
    max_series: usize,
    recent_cap: usize,
    series: FxMap<SeriesKey, Series>,
    open: Vec<(SeriesKey, Arc<()>)>,
    recent: VecDeque<RecentRequest>,
    overflowed: u64,
    late: u64,
    dropped: Arc<AtomicU64>,
}

/// Bucket arithmetic shared by the aggregator and its snapshots.
#[derive(Debug, Clone, Copy)]
struct Clock {
    bucket: Duration,
    slots: usize,
    epoch: Instant,
    /// `now − epoch` when the snapshot was taken.
    now: Duration,
}

impl Clock {
    fn new(cfg: &LiveConfig, epoch: Instant) -> Clock {
        let bucket = cfg.bucket.max(Duration::from_millis(1));
        let slots = cfg.window.as_nanos().div_ceil(bucket.as_nanos()).max(1);
        Clock {
            bucket,
            slots: usize::try_from(slots).unwrap_or(usize::MAX),
            epoch,
            now: Duration::ZERO,
        }
    }

    fn index(&self, t: Instant) -> u64 {
        let since = t.saturating_duration_since(self.epoch).as_nanos();
        u64::try_from(since / self.bucket.as_nanos()).unwrap_or(u64::MAX)
    }

    /// Offset of bucket `index`'s start from the epoch.
    fn start_of(&self, index: u64) -> Duration {
        let nanos = self.bucket.as_nanos() * u128::from(index);
        let secs = u64::try_from(nanos / 1_000_000_000).unwrap_or(u64::MAX);
        Duration::new(secs, (nanos % 1_000_000_000) as u32)
    }

    fn now_index(&self) -> u64 {
        u64::try_from(self.now.as_nanos() / self.bucket.as_nanos()).unwrap_or(u64::MAX)
    }

    fn window(&self) -> Duration {
        self.start_of(self.slots as u64)
    }

    /// The first bucket index covering the last `over` (whole buckets back
    /// from the current, partial one; at most the window), and the time
    /// that range actually spans: at least `over`, less than `over + bucket`,
    /// shorter only right after start-up or when clamped to the window.
    fn range(&self, over: Duration) -> (u64, Duration) {
        let n = over.as_nanos().div_ceil(self.bucket.as_nanos());
        let n = u64::try_from(n).unwrap_or(u64::MAX);
        let now = self.now_index();
        let oldest = (now + 1).saturating_sub(self.slots as u64);
        let from = now.saturating_sub(n).max(oldest);
        let span = self.now.saturating_sub(self.start_of(from));
        (from, span)
    }
}

impl Aggregator {
    /// An empty aggregator whose bucket 0 starts at `epoch`.
    pub fn new(cfg: &LiveConfig, epoch: Instant, dropped: Arc<AtomicU64>) -> Aggregator {
        Aggregator {
            clock: Clock::new(cfg, epoch),
            max_series: cfg.max_series,
            recent_cap: cfg.recent,
            series: capped_maps::map(),
            open: Vec::new(),
            recent: VecDeque::with_capacity(cfg.recent),
            overflowed: 0,
            late: 0,
            dropped,
        }
    }

    /// The series `key` is counted under: its own (`true`) while there is
    /// room, else the overflow series; one hash when the key is known.
    fn series_mut(&mut self, key: &SeriesKey) -> (&mut Series, bool) {
        let slots = self.clock.slots;
        let own = self.series.len() < self.max_series || self.series.contains_key(key);
        let key = match own {
            true => key.clone(),
            false => SeriesKey::overflow(),
        };
        let series = self.series.entry(key).or_insert_with(|| Series::new(slots));
        (series, own)
    }

    /// A request started; it is in flight while `token` has another owner.
    pub fn begin(&mut self, key: SeriesKey, token: Arc<()>) {
        if self.open.len() < MAX_OPEN {
            let key = match self.series_mut(&key).1 {
                true => key,
                false => SeriesKey::overflow(),
            };
            self.open.push((key, token));
        }
    }

    /// A request finished: count it in the bucket of its end time.
    pub fn record(&mut self, sample: Sample) {
        let index = self.clock.index(sample.end);
        let (series, own) = self.series_mut(&sample.key);
        match series.bucket_mut(index) {
            Some(bucket) => bucket.add(&sample),
            None => self.late += 1,
        }
        self.overflowed += u64::from(!own);
        if self.recent_cap > 0 {
            if self.recent.len() == self.recent_cap {
                self.recent.pop_back();
            }
            self.recent.push_front(RecentRequest::from(&sample));
        }
    }

    /// Samples that arrived after their bucket had left the window.
    pub fn late(&self) -> u64 {
        self.late
    }

    /// Number of series kept (including the overflow series).
    pub fn series_count(&self) -> usize {
        self.series.len()
    }

    /// Expire old buckets and idle series, then build the snapshot as of
    /// `now` (monotonic, for the windows) and `wall` (for display).
    pub fn snapshot(&mut self, now: Instant, wall: SystemTime) -> Snapshot {
        self.clock.now = now.saturating_duration_since(self.clock.epoch);
        let now_index = self.clock.now_index();
        let oldest = (now_index + 1).saturating_sub(self.clock.slots as u64);

        self.open.retain(|(_, token)| Arc::strong_count(token) > 1);
        let mut in_flight: HashMap<&SeriesKey, u64> = HashMap::new();
        for (key, _) in &self.open {
            *in_flight.entry(key).or_default() += 1;
        }
        let open_keys: std::collections::HashSet<SeriesKey> =
            in_flight.keys().map(|k| (*k).clone()).collect();
        self.series
            .retain(|k, s| s.expire(oldest) | open_keys.contains(k));

        let mut windows: Vec<SeriesWindow> = self
            .series
            .iter()
            .map(|(key, s)| {
                let mut buckets: Vec<Arc<Bucket>> = s
                    .ring
                    .iter()
                    .flatten()
                    .filter(|b| b.index <= now_index)
                    .cloned()
                    .collect();
                buckets.sort_by_key(|b| b.index);
                SeriesWindow {
                    key: key.clone(),
                    buckets,
                }
            })
            .collect();
        windows.sort_by(|a, b| a.key.cmp(&b.key));

        let series = windows
            .iter()
            .map(|w| {
                let flying = in_flight.get(&w.key).copied().unwrap_or(0);
                SeriesSummary::new(&self.clock, w, flying)
            })
            .collect();
        let models = self.timelines(&windows, oldest, now_index, wall);
        Snapshot {
            generated_at_ms: unix_ms(wall),
            window_s: self.clock.window().as_secs_f64(),
            bucket_s: self.clock.bucket.as_secs_f64(),
            stats_window_s: STATS_WINDOW.min(self.clock.window()).as_secs_f64(),
            dropped: self.dropped.load(Ordering::Relaxed),
            overflowed: self.overflowed,
            late: self.late,
            series,
            models,
            recent: self.recent.iter().cloned().collect(),
            windows,
            clock: self.clock,
        }
    }

    /// Per-model timelines for the busiest models, one point per bucket.
    fn timelines(
        &self,
        windows: &[SeriesWindow],
        oldest: u64,
        now_index: u64,
        wall: SystemTime,
    ) -> Vec<ModelTimeline> {
        let mut by_model: HashMap<Option<&Arc<str>>, (u64, Vec<&Series>)> = HashMap::new();
        for w in windows {
            let requests: u64 = w.buckets.iter().map(|b| b.requests).sum();
            if let Some(s) = self.series.get(&w.key) {
                let e = by_model.entry(w.key.model.as_ref()).or_default();
                e.0 += requests;
                e.1.push(s);
            }
        }
        let mut models: Vec<_> = by_model.into_iter().filter(|(_, (n, _))| *n > 0).collect();
        models.sort_by(|a, b| b.1.0.cmp(&a.1.0).then_with(|| a.0.cmp(&b.0)));
        models.truncate(TIMELINE_MODELS);
        models.sort_by(|a, b| a.0.cmp(&b.0));

        let bucket = self.clock.bucket;
        let into_current = self
            .clock
            .now
            .saturating_sub(self.clock.start_of(now_index));
        models
            .into_iter()
            .map(|(model, (_, series))| {
                let points = (oldest..=now_index)
                    .map(|index| {
                        let (mut ttft, mut tps) =
                            (Distribution::default(), Distribution::default());
                        let (mut requests, mut errors) = (0, 0);
                        for b in series.iter().filter_map(|s| s.at(index)) {
                            requests += b.requests;
                            errors += b.errors;
                            ttft.merge(&b.ttft);
                            tps.merge(&b.tps);
                        }
                        let span = if index == now_index {
                            into_current.max(Duration::from_secs(1)).min(bucket)
                        } else {
                            bucket
                        };
                        let age = self.clock.now.saturating_sub(self.clock.start_of(index));
                        TimelinePoint {
                            t_ms: unix_ms(wall.checked_sub(age).unwrap_or(UNIX_EPOCH)),
                            rps: requests as f64 / span.as_secs_f64(),
                            ttft_p50_s: ttft.quantile(0.5),
                            tps_p50: tps.quantile(0.5),
                            requests,
                            errors,
                        }
                    })
                    .collect();
                ModelTimeline {
                    model: model.cloned(),
                    points,
                }
            })
            .collect()
    }
}

fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// One series' buckets in a snapshot, oldest first.
#[derive(Debug, Clone)]
struct SeriesWindow {
    key: SeriesKey,
    buckets: Vec<Arc<Bucket>>,
}

/// Figures over one window for the series a filter matched.
#[derive(Debug, Clone, Default)]
pub struct WindowStats {
    /// Series that matched the filter.
    pub series: usize,
    /// Time the window actually covers (shorter than asked right after start).
    pub span: Duration,
    /// Requests that finished in the window.
    pub requests: u64,
    /// Outcomes `upstream_error`, `upstream_timeout`, `malformed` and
    /// `incomplete`.
    pub errors: u64,
    /// Outcome `client_cancelled` (not errors; a cut made by tokentap's
    /// own drain, outcome `shutdown`, is neither).
    pub cancelled: u64,
    /// Input tokens summed over the window.
    pub tokens_in: u64,
    /// Output tokens summed over the window.
    pub tokens_out: u64,
    /// Spend over the window.
    pub cost: CostTotals,
    /// Time to first token, seconds.
    pub ttft: Distribution,
    /// Decode tokens per second.
    pub decode_tps: Distribution,
    /// Largest stall, seconds.
    pub max_stall: Option<f64>,
    /// Time to the first visible output (reasoning excluded), seconds.
    pub visible_ttft: Distribution,
    /// Thinking time of the requests that reasoned, seconds.
    pub thinking: Distribution,
}

impl WindowStats {
    fn fold(&mut self, b: &Bucket) {
        self.requests += b.requests;
        self.errors += b.errors;
        self.cancelled += b.cancelled;
        self.tokens_in += b.tokens_in;
        self.tokens_out += b.tokens_out;
        self.cost.fold(&b.cost);
        self.ttft.merge(&b.ttft);
        self.decode_tps.merge(&b.tps);
        self.visible_ttft.merge(&b.visible_ttft);
        self.thinking.merge(&b.thinking);
        if let Some(v) = b.max_stall {
            self.max_stall = Some(self.max_stall.map_or(v, |m| m.max(v)));
        }
    }

    /// Requests per second over the span (0 when the span is empty).
    pub fn rate(&self) -> f64 {
        let secs = self.span.as_secs_f64();
        if secs > 0.0 {
            self.requests as f64 / secs
        } else {
            0.0
        }
    }

    /// errors / requests; `None` without requests.
    pub fn error_ratio(&self) -> Option<f64> {
        (self.requests > 0).then(|| self.errors as f64 / self.requests as f64)
    }
}

fn window_of<'a>(
    clock: &Clock,
    windows: impl Iterator<Item = &'a SeriesWindow>,
    over: Duration,
) -> WindowStats {
    let (from, span) = clock.range(over);
    let mut stats = WindowStats {
        span,
        ..WindowStats::default()
    };
    for w in windows {
        stats.series += 1;
        for b in w.buckets.iter().filter(|b| b.index >= from) {
            stats.fold(b);
        }
    }
    stats
}

/// The live statistics at one instant: immutable, shared as `Arc<Snapshot>`.
/// Serializes to the `/api/live` JSON (docs/METRICS.md).
#[derive(Debug, Clone, Serialize)]
pub struct Snapshot {
    /// Wall-clock time of the snapshot, Unix milliseconds.
    pub generated_at_ms: u64,
    /// Rolling window length (`live.window`).
    pub window_s: f64,
    /// Bucket length (`live.bucket`).
    pub bucket_s: f64,
    /// Span of the per-series figures in `series`.
    pub stats_window_s: f64,
    /// Messages dropped because the queue was full, since start-up.
    pub dropped: u64,
    /// Samples folded into the `other` series (over `live.max_series`).
    pub overflowed: u64,
    /// Samples that arrived after their bucket left the window.
    pub late: u64,
    /// One row per series, sorted by route, model, tenant.
    pub series: Vec<SeriesSummary>,
    /// Per-model timeline over the window (the busiest models).
    pub models: Vec<ModelTimeline>,
    /// Most recent requests, newest first.
    pub recent: Vec<RecentRequest>,
    #[serde(skip)]
    windows: Vec<SeriesWindow>,
    #[serde(skip)]
    clock: Clock,
}

impl Snapshot {
    /// The snapshot before the first tick.
    pub fn empty(cfg: &LiveConfig) -> Snapshot {
        #[allow(
            clippy::disallowed_methods,
            reason = "origin of the live-statistics bucket clock; request timings come from meter"
        )]
        let clock = Clock::new(cfg, Instant::now());
        Snapshot {
            generated_at_ms: 0,
            window_s: clock.window().as_secs_f64(),
            bucket_s: clock.bucket.as_secs_f64(),
            stats_window_s: STATS_WINDOW.min(clock.window()).as_secs_f64(),
            dropped: 0,
            overflowed: 0,
            late: 0,
            series: Vec::new(),
            models: Vec::new(),
            recent: Vec::new(),
            windows: Vec::new(),
            clock,
        }
    }

    /// Figures of the series matching `filter` over the last `over` (clamped
    /// to the window; the current, partial bucket included).
    pub fn window(&self, filter: &SeriesFilter, over: Duration) -> WindowStats {
        let matching = self.windows.iter().filter(|w| filter.matches(&w.key));
        window_of(&self.clock, matching, over)
    }

    /// The configured window length: the longest `over` worth asking for.
    pub fn window_len(&self) -> Duration {
        self.clock.window()
    }

    /// Every series key present.
    pub fn keys(&self) -> impl Iterator<Item = &SeriesKey> {
        self.windows.iter().map(|w| &w.key)
    }

    /// Distinct model names present (sorted; requests without a model skipped).
    pub fn models(&self) -> Vec<&str> {
        let mut m: Vec<&str> = self.keys().filter_map(|k| k.model.as_deref()).collect();
        m.sort_unstable();
        m.dedup();
        m
    }
}

/// One dashboard row: a series over the last `stats_window_s`.
#[derive(Debug, Clone, Serialize)]
pub struct SeriesSummary {
    /// The series this row describes (flattened into the row).
    #[serde(flatten)]
    pub key: SeriesKey,
    /// Requests in flight now.
    pub in_flight: u64,
    /// Requests per second.
    pub rps: f64,
    /// errors / requests (`null` without requests).
    pub error_ratio: Option<f64>,
    /// Requests that finished in the last `stats_window_s`.
    pub requests: u64,
    /// Of those, the ones that ended in an error outcome.
    pub errors: u64,
    /// Of those, the ones the client cancelled.
    pub cancelled: u64,
    /// Median time to first token (s).
    pub ttft_p50_s: Option<f64>,
    /// 95th percentile time to first token (s).
    pub ttft_p95_s: Option<f64>,
    /// Median decode rate (tokens/s).
    pub tps_p50: Option<f64>,
    /// 5th percentile decode rate, the slow tail (tokens/s).
    pub tps_p5: Option<f64>,
    /// Largest stall between content chunks (s).
    pub max_stall_s: Option<f64>,
    /// Median time to the first visible output, reasoning excluded (s).
    pub visible_ttft_p50_s: Option<f64>,
    /// 95th percentile time to the first visible output (s).
    pub visible_ttft_p95_s: Option<f64>,
    /// Median thinking time of the requests that reasoned (s).
    pub thinking_p50_s: Option<f64>,
    /// Requests that reasoned before their first visible output.
    pub reasoning_requests: u64,
    /// Totals over the whole window.
    pub window: WindowTotals,
}

/// Counts over the whole rolling window.
#[derive(Debug, Clone, Serialize)]
pub struct WindowTotals {
    /// Requests over the whole window.
    pub requests: u64,
    /// Error outcomes over the whole window.
    pub errors: u64,
    /// Input tokens over the whole window.
    pub tokens_in: u64,
    /// Output tokens over the whole window.
    pub tokens_out: u64,
    /// Spend over the whole window (USD, with the tokens it bought).
    pub cost: CostTotals,
}

impl SeriesSummary {
    fn new(clock: &Clock, w: &SeriesWindow, in_flight: u64) -> SeriesSummary {
        let s = window_of(clock, std::iter::once(w), STATS_WINDOW);
        let all = window_of(clock, std::iter::once(w), clock.window());
        SeriesSummary {
            key: w.key.clone(),
            in_flight,
            rps: s.rate(),
            error_ratio: s.error_ratio(),
            requests: s.requests,
            errors: s.errors,
            cancelled: s.cancelled,
            ttft_p50_s: s.ttft.quantile(0.5),
            ttft_p95_s: s.ttft.quantile(0.95),
            tps_p50: s.decode_tps.quantile(0.5),
            tps_p5: s.decode_tps.quantile(0.05),
            max_stall_s: s.max_stall,
            visible_ttft_p50_s: s.visible_ttft.quantile(0.5),
            visible_ttft_p95_s: s.visible_ttft.quantile(0.95),
            thinking_p50_s: s.thinking.quantile(0.5),
            reasoning_requests: s.thinking.count(),
            window: WindowTotals {
                requests: all.requests,
                errors: all.errors,
                tokens_in: all.tokens_in,
                tokens_out: all.tokens_out,
                cost: all.cost,
            },
        }
    }
}

/// One model's figures per bucket, oldest first.
#[derive(Debug, Clone, Serialize)]
pub struct ModelTimeline {
    /// Requested model (capped); `null` when requests named none.
    #[serde(serialize_with = "ser_opt_str")]
    pub model: Option<Arc<str>>,
    /// The model's buckets, oldest first.
    pub points: Vec<TimelinePoint>,
}

/// One bucket of a model's timeline.
#[derive(Debug, Clone, Serialize)]
pub struct TimelinePoint {
    /// Bucket start, Unix milliseconds.
    pub t_ms: u64,
    /// Requests per second in the bucket.
    pub rps: f64,
    /// Median time to first token in the bucket (s).
    pub ttft_p50_s: Option<f64>,
    /// Median decode rate in the bucket (tokens/s).
    pub tps_p50: Option<f64>,
    /// Requests that finished in the bucket.
    pub requests: u64,
    /// Of those, the ones that ended in an error outcome.
    pub errors: u64,
}

/// One recent request: figures only, never prompt or completion text.
#[derive(Debug, Clone, Serialize)]
pub struct RecentRequest {
    /// End of the request, Unix milliseconds.
    pub at_ms: u64,
    /// Configured route name.
    #[serde(serialize_with = "ser_str")]
    pub route: Arc<str>,
    /// Requested model (capped), when the request named one.
    #[serde(serialize_with = "ser_opt_str")]
    pub model: Option<Arc<str>>,
    /// Model the response named (capped), when it named one.
    #[serde(serialize_with = "ser_opt_str")]
    pub response_model: Option<Arc<str>>,
    /// Tenant (capped), when one was resolved.
    #[serde(serialize_with = "ser_opt_str")]
    pub tenant: Option<Arc<str>>,
    /// `complete`, `client_cancelled`, `upstream_error`, `upstream_timeout`,
    /// `malformed` or `incomplete`.
    pub outcome: &'static str,
    /// HTTP status sent to the client.
    pub status: u16,
    /// `error.type` (capped), when the outcome is not `complete`.
    #[serde(serialize_with = "ser_opt_str")]
    pub error_type: Option<Arc<str>>,
    /// Time to first token (s).
    pub ttft_s: Option<f64>,
    /// Time to the first visible output, reasoning excluded (s).
    pub visible_ttft_s: Option<f64>,
    /// Thinking time, when the response reasoned (s).
    pub thinking_s: Option<f64>,
    /// Decode rate (tokens/s).
    pub tps: Option<f64>,
    /// Largest gap between content chunks (s).
    pub max_stall_s: Option<f64>,
    /// Input tokens, when known.
    pub tokens_in: Option<u64>,
    /// Output tokens, when known.
    pub tokens_out: Option<u64>,
    /// Token counts are estimates, not provider-reported.
    pub estimated: bool,
    /// Cost in USD, when priced.
    pub cost_usd: Option<f64>,
    /// Request duration, t_end − t_req (s).
    pub duration_s: f64,
    /// Trace id of the request's span; `None` when the span has no valid context.
    #[serde(serialize_with = "ser_trace_id")]
    pub trace_id: Option<TraceId>,
    /// The span was exported (kept by sampling, export on): only then does
    /// `trace_id` lead to a trace in the backend.
    pub span_exported: bool,
    /// Prefill rate, input tokens / TTFT ({token}/s).
    pub prefill_tps: Option<f64>,
    /// Requests in flight to the same route and model when it started,
    /// itself included.
    pub in_flight: Option<u64>,
}

impl From<&Sample> for RecentRequest {
    fn from(s: &Sample) -> RecentRequest {
        RecentRequest {
            at_ms: unix_ms(s.end_wall),
            route: s.key.route.clone(),
            model: s.key.model.clone(),
            response_model: s.response_model.clone(),
            tenant: s.key.tenant.clone(),
            outcome: s.outcome.as_str(),
            status: s.status,
            error_type: s.error_type.clone(),
            ttft_s: s.ttft,
            visible_ttft_s: s.visible_ttft,
            thinking_s: s.thinking,
            tps: s.decode_tps,
            max_stall_s: s.max_stall,
            tokens_in: s.tokens_in,
            tokens_out: s.tokens_out,
            estimated: s.estimated,
            cost_usd: s.cost_usd,
            duration_s: s.duration,
            trace_id: s.trace_id,
            span_exported: s.span_exported,
            prefill_tps: s.prefill_tps,
            in_flight: s.in_flight,
        }
    }
}

fn ser_trace_id<S: Serializer>(v: &Option<TraceId>, s: S) -> Result<S::Ok, S::Error> {
    match v {
        Some(id) => s.collect_str(id),
        None => s.serialize_none(),
    }
}
