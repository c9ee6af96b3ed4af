//! Instruments: a `Meter` in, every metric instrument tokentap records out,
//! created once at start-up with the bucket boundaries the GenAI semantic
//! conventions recommend (or our own for `tokentap.*`).

use std::collections::HashMap;
use std::sync::{Arc, OnceLock, RwLock};
use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry::metrics::{
    BoundCounter, BoundHistogram, Counter, Histogram, Meter, ObservableCounter, UpDownCounter,
};

use super::attrs::*;
use super::export::DropCounts;

/// `gen_ai.client.operation.duration`, `gen_ai.server.request.duration`,
/// `gen_ai.client.operation.time_to_first_chunk` and
/// `gen_ai.client.operation.time_per_output_chunk`.
pub(super) const DURATION_BUCKETS: [f64; 14] = [
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
];
/// `gen_ai.client.token.usage`.
pub(super) const TOKEN_BUCKETS: [f64; 14] = [
    1.0, 4.0, 16.0, 64.0, 256.0, 1024.0, 4096.0, 16384.0, 65536.0, 262144.0, 1048576.0, 4194304.0,
    16777216.0, 67108864.0,
];
/// `gen_ai.server.time_to_first_token`.
pub(super) const TTFT_BUCKETS: [f64; 16] = [
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
];
/// `gen_ai.server.time_per_output_token`.
pub(super) const TPOT_BUCKETS: [f64; 13] = [
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5,
];
/// `tokentap.decode.tokens_per_second`.
pub(super) const TPS_BUCKETS: [f64; 16] = [
    1.0, 2.0, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 75.0, 100.0, 150.0, 200.0, 300.0, 500.0,
    1000.0,
];
/// `tokentap.chunk.gap`: fine below 50 ms, where inter-token gaps live.
pub(super) const GAP_BUCKETS: [f64; 20] = [
    0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.04, 0.05, 0.075, 0.1,
    0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];
/// `tokentap.upstream.pool.wait`: fine at the low end, where a healthy
/// pool's wait (a connection opening, or none) lives.
pub(super) const POOL_WAIT_BUCKETS: [f64; 14] = [
    0.0001, 0.0005, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];
/// `tokentap.stream.max_stall`.
pub(super) const STALL_BUCKETS: [f64; 14] = [
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0,
];

/// The boundaries of `tokentap.chunk.gap` and
/// `gen_ai.client.operation.time_per_output_chunk` together (sorted
/// union): each cell between two of them lies inside one bucket of each.
pub(super) const GAP_CELL_BOUNDS: [f64; 31] = [
    0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.04, 0.05, 0.075, 0.08,
    0.1, 0.16, 0.25, 0.32, 0.5, 0.64, 1.0, 1.28, 2.5, 2.56, 5.0, 5.12, 10.0, 10.24, 20.48, 40.96,
    81.92,
];
const GAP_CELLS: usize = GAP_CELL_BOUNDS.len() + 1;

/// One request's inter-chunk gaps, folded per chunk without a lock or an
/// allocation (a count and a nanosecond sum per cell of
/// `GAP_CELL_BOUNDS`), and recorded into the two per-chunk histograms once
/// the request ends. The histograms then hold what recording every gap on
/// its own gives: the same count, bucket counts, min and max, and the same
/// sum up to float rounding.
#[derive(Debug, Clone, Default)]
pub(super) struct GapTally {
    counts: [u32; GAP_CELLS],
    sums: [u64; GAP_CELLS],
    /// Smallest and largest gap (ns), once `any` gap was added.
    min: u64,
    max: u64,
    any: bool,
}

impl GapTally {
    /// Fold one gap in.
    pub(super) fn add(&mut self, gap: Duration) {
        let cell = cell_of(gap);
        let ns = nanos(gap);
        if self.any {
            self.min = self.min.min(ns);
            self.max = self.max.max(ns);
        } else {
            (self.min, self.max, self.any) = (ns, ns, true);
        }
        self.counts[cell] = self.counts[cell].saturating_add(1);
        self.sums[cell] = self.sums[cell].saturating_add(ns);
    }

    /// Hand every folded gap to `record`, in seconds: per cell, the
    /// request's smallest and largest gap where they fall, and the mean of
    /// the cell's other gaps for each of them (a mean of values inside a
    /// cell stays inside it, so every value lands in its own bucket).
    /// At most one `record` per gap folded in.
    pub(super) fn replay(&self, mut record: impl FnMut(f64)) {
        let secs = |ns: u64| Duration::from_nanos(ns).as_secs_f64();
        let (min_cell, max_cell) = (
            cell_of(Duration::from_nanos(self.min)),
            cell_of(Duration::from_nanos(self.max)),
        );
        for (cell, (&count, &sum)) in self.counts.iter().zip(&self.sums).enumerate() {
            let (mut count, mut sum) = (u64::from(count), sum);
            if count == 0 {
                continue;
            }
            for (extreme, its_cell) in [(self.min, min_cell), (self.max, max_cell)] {
                if its_cell == cell && count > 0 {
                    record(secs(extreme));
                    count -= 1;
                    sum = sum.saturating_sub(extreme);
                }
            }
            // The rest: `rem` of them one nanosecond above the floor of
            // their mean, so the nanosecond sum is exact.
            if let (Some(floor), Some(rem)) = (sum.checked_div(count), sum.checked_rem(count)) {
                for i in 0..count {
                    record(secs(floor + u64::from(i < rem)));
                }
            }
        }
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// The cell a gap falls in, by the SDK's rule (a value on a boundary
/// belongs to the bucket below it).
fn cell_of(gap: Duration) -> usize {
    let secs = Duration::from_nanos(nanos(gap)).as_secs_f64();
    GAP_CELL_BOUNDS.partition_point(|&b| b < secs)
}

/// Every instrument, built once.
pub(super) struct Instruments {
    pub operation_duration: Histogram<f64>,
    pub token_usage: Histogram<u64>,
    pub time_to_first_chunk: Histogram<f64>,
    pub time_per_output_chunk: Histogram<f64>,
    pub server_ttft: Histogram<f64>,
    pub server_tpot: Histogram<f64>,
    pub server_request_duration: Histogram<f64>,
    pub decode_tps: Histogram<f64>,
    pub chunk_gap: Histogram<f64>,
    pub max_stall: Histogram<f64>,
    pub pool_wait: Histogram<f64>,
    pub requests: Counter<u64>,
    pub streams_active: UpDownCounter<i64>,
    pub config_reloads: Counter<u64>,
    /// `tokentap.cost.usd`: spend, recorded once per priced request.
    pub cost: Counter<f64>,
    /// `tokentap.cost.unpriced`: requests whose model has no price.
    pub cost_unpriced: Counter<u64>,
    /// Kept so the callback lives as long as the instruments.
    _dropped: Option<ObservableCounter<u64>>,
    /// End-of-request instruments bound per attribute set.
    finish_sets: RwLock<HashMap<Vec<KeyValue>, Arc<FinishBound>>>,
}

/// Distinct end-of-request attribute sets kept bound; past this, requests
/// record unbound (same data, more hashing).
const MAX_FINISH_SETS: usize = 4096;

/// What one finished request records (seconds, tokens/s, tokens).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct FinishRecord {
    pub duration: f64,
    pub ttft: Option<f64>,
    /// TTFT of a streamed request.
    pub first_chunk: Option<f64>,
    pub tpot: Option<f64>,
    pub decode_tps: Option<f64>,
    /// Largest gap of a streamed request.
    pub max_stall: Option<f64>,
    /// Wait for an upstream connection or stream slot.
    pub pool_wait: Option<f64>,
    pub input_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
}

/// The end-of-request instruments bound to one attribute set, each bound
/// the first time it records (a bound instrument exports a data point even
/// before it records, and e.g. a non-streamed request must add none to
/// the streaming instruments).
#[derive(Default)]
struct FinishBound {
    operation_duration: OnceLock<BoundHistogram<f64>>,
    server_request_duration: OnceLock<BoundHistogram<f64>>,
    requests: OnceLock<BoundCounter<u64>>,
    server_ttft: OnceLock<BoundHistogram<f64>>,
    time_to_first_chunk: OnceLock<BoundHistogram<f64>>,
    server_tpot: OnceLock<BoundHistogram<f64>>,
    decode_tps: OnceLock<BoundHistogram<f64>>,
    max_stall: OnceLock<BoundHistogram<f64>>,
    pool_wait: OnceLock<BoundHistogram<f64>>,
    input_tokens: OnceLock<BoundHistogram<u64>>,
    output_tokens: OnceLock<BoundHistogram<u64>>,
}

impl FinishBound {
    fn record(&self, ins: &Instruments, attrs: &[KeyValue], r: &FinishRecord) {
        let seconds = [
            (
                &self.operation_duration,
                &ins.operation_duration,
                Some(r.duration),
            ),
            (
                &self.server_request_duration,
                &ins.server_request_duration,
                Some(r.duration),
            ),
            (&self.server_ttft, &ins.server_ttft, r.ttft),
            (
                &self.time_to_first_chunk,
                &ins.time_to_first_chunk,
                r.first_chunk,
            ),
            (&self.server_tpot, &ins.server_tpot, r.tpot),
            (&self.decode_tps, &ins.decode_tps, r.decode_tps),
            (&self.max_stall, &ins.max_stall, r.max_stall),
            (&self.pool_wait, &ins.pool_wait, r.pool_wait),
        ];
        for (cell, h, v) in seconds {
            if let Some(v) = v {
                cell.get_or_init(|| h.bind(attrs)).record(v);
            }
        }
        self.requests
            .get_or_init(|| ins.requests.bind(attrs))
            .add(1);
        for (cell, kind, v) in [
            (&self.input_tokens, TOKEN_INPUT, r.input_tokens),
            (&self.output_tokens, TOKEN_OUTPUT, r.output_tokens),
        ] {
            if let Some(v) = v {
                cell.get_or_init(|| ins.token_usage.bind(&with_token_type(attrs, kind)))
                    .record(v);
            }
        }
    }
}

fn with_token_type(attrs: &[KeyValue], kind: &'static str) -> Vec<KeyValue> {
    let mut a = Vec::with_capacity(attrs.len() + 1);
    a.extend_from_slice(attrs);
    a.push(KeyValue::new(GEN_AI_TOKEN_TYPE, kind));
    a
}

impl std::fmt::Debug for Instruments {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Instruments").finish_non_exhaustive()
    }
}

fn seconds(meter: &Meter, name: &'static str, desc: &'static str, b: &[f64]) -> Histogram<f64> {
    meter
        .f64_histogram(name)
        .with_unit("s")
        .with_description(desc)
        .with_boundaries(b.to_vec())
        .build()
}

impl Instruments {
    /// Create every instrument on `meter`; `drops`, when given, feeds the
    /// dropped-telemetry counter.
    pub(super) fn new(meter: &Meter, drops: Option<Arc<DropCounts>>) -> Instruments {
        Instruments {
            operation_duration: seconds(
                meter,
                M_OPERATION_DURATION,
                "GenAI operation duration.",
                &DURATION_BUCKETS,
            ),
            token_usage: meter
                .u64_histogram(M_TOKEN_USAGE)
                .with_unit("{token}")
                .with_description("Number of input and output tokens used.")
                .with_boundaries(TOKEN_BUCKETS.to_vec())
                .build(),
            time_to_first_chunk: seconds(
                meter,
                M_TIME_TO_FIRST_CHUNK,
                "Time to receive the first chunk of a streaming response.",
                &DURATION_BUCKETS,
            ),
            time_per_output_chunk: seconds(
                meter,
                M_TIME_PER_OUTPUT_CHUNK,
                "Time between consecutive output chunks of a streaming response.",
                &DURATION_BUCKETS,
            ),
            server_ttft: seconds(
                meter,
                M_SERVER_TTFT,
                "Time to generate the first token.",
                &TTFT_BUCKETS,
            ),
            server_tpot: seconds(
                meter,
                M_SERVER_TPOT,
                "Time per output token generated after the first token.",
                &TPOT_BUCKETS,
            ),
            server_request_duration: seconds(
                meter,
                M_SERVER_REQUEST_DURATION,
                "Request duration, to the last byte of the response.",
                &DURATION_BUCKETS,
            ),
            decode_tps: meter
                .f64_histogram(M_DECODE_TPS)
                .with_unit("{token}/s")
                .with_description("Decode rate: (output tokens - 1) / (last token - first token).")
                .with_boundaries(TPS_BUCKETS.to_vec())
                .build(),
            chunk_gap: seconds(
                meter,
                M_CHUNK_GAP,
                "Gap between consecutive content chunks.",
                &GAP_BUCKETS,
            ),
            max_stall: seconds(
                meter,
                M_MAX_STALL,
                "Largest gap between content chunks in one response.",
                &STALL_BUCKETS,
            ),
            pool_wait: seconds(
                meter,
                M_POOL_WAIT,
                "Time a request waited for an upstream connection or HTTP/2 stream slot.",
                &POOL_WAIT_BUCKETS,
            ),
            requests: meter
                .u64_counter(M_REQUESTS)
                .with_unit("{request}")
                .with_description("Finished requests, by outcome.")
                .build(),
            streams_active: meter
                .i64_up_down_counter(M_STREAMS_ACTIVE)
                .with_unit("{request}")
                .with_description("Requests whose response has not finished yet.")
                .build(),
            config_reloads: meter
                .u64_counter(M_CONFIG_RELOADS)
                .with_unit("{reload}")
                .with_description("Configuration reloads (SIGHUP or file watch), by result.")
                .build(),
            cost: meter
                .f64_counter(M_COST)
                .with_unit("{USD}")
                .with_description(
                    "Spend in USD, from provider usage and the price table (docs/COST.md).",
                )
                .build(),
            cost_unpriced: meter
                .u64_counter(M_COST_UNPRICED)
                .with_unit("{request}")
                .with_description("Requests that used tokens but whose model has no price.")
                .build(),
            _dropped: drops.map(|d| dropped_counter(meter, d)),
            finish_sets: RwLock::default(),
        }
    }

    /// Record one finished request under `attrs`: through instruments bound
    /// to `attrs` (one hash of the set per request instead of one per
    /// record; one read lock, where the SDK takes one per record anyway).
    pub(super) fn record_finish(&self, attrs: &[KeyValue], r: &FinishRecord) {
        match self.finish_bound(attrs) {
            Some(bound) => bound.record(self, attrs, r),
            None => self.record_unbound(attrs, r),
        }
    }

    fn finish_bound(&self, attrs: &[KeyValue]) -> Option<Arc<FinishBound>> {
        if let Some(bound) = self.finish_sets.read().ok()?.get(attrs) {
            return Some(bound.clone());
        }
        let mut sets = self.finish_sets.write().ok()?;
        if let Some(bound) = sets.get(attrs) {
            return Some(bound.clone());
        }
        if sets.len() >= MAX_FINISH_SETS {
            return None;
        }
        let bound = Arc::new(FinishBound::default());
        sets.insert(attrs.to_vec(), bound.clone());
        Some(bound)
    }

    /// The same records, each hashing `attrs`.
    fn record_unbound(&self, attrs: &[KeyValue], r: &FinishRecord) {
        self.operation_duration.record(r.duration, attrs);
        self.server_request_duration.record(r.duration, attrs);
        self.requests.add(1, attrs);
        let pairs = [
            (&self.server_ttft, r.ttft),
            (&self.time_to_first_chunk, r.first_chunk),
            (&self.server_tpot, r.tpot),
            (&self.decode_tps, r.decode_tps),
            (&self.max_stall, r.max_stall),
            (&self.pool_wait, r.pool_wait),
        ];
        for (h, v) in pairs {
            if let Some(v) = v {
                h.record(v, attrs);
            }
        }
        for (count, kind) in [
            (r.input_tokens, TOKEN_INPUT),
            (r.output_tokens, TOKEN_OUTPUT),
        ] {
            if let Some(n) = count {
                self.token_usage.record(n, &with_token_type(attrs, kind));
            }
        }
    }
}

/// `tokentap.telemetry.dropped`, read from `drops` at each collection.
fn dropped_counter(meter: &Meter, drops: Arc<DropCounts>) -> ObservableCounter<u64> {
    let span_attrs = [KeyValue::new(SIGNAL, SIGNAL_SPANS)];
    let metric_attrs = [KeyValue::new(SIGNAL, SIGNAL_METRICS)];
    meter
        .u64_observable_counter(M_TELEMETRY_DROPPED)
        .with_unit("{item}")
        .with_description("Spans and metric data points that never reached the collector.")
        .with_callback(move |obs| {
            obs.observe(drops.spans(), &span_attrs);
            obs.observe(drops.data_points(), &metric_attrs);
        })
        .build()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gap_cells_are_the_union_of_both_histograms_boundaries() {
        let mut union: Vec<f64> = GAP_BUCKETS
            .iter()
            .chain(&DURATION_BUCKETS)
            .copied()
            .collect();
        union.sort_by(f64::total_cmp);
        union.dedup();
        assert_eq!(union, GAP_CELL_BOUNDS.to_vec());
    }

    /// What a histogram with `bounds` holds after the given records.
    fn histogram(bounds: &[f64], values: &[f64]) -> (Vec<u64>, u64, f64, f64, f64) {
        let mut counts = vec![0u64; bounds.len() + 1];
        for v in values {
            counts[bounds.partition_point(|&b| b < *v)] += 1;
        }
        let min = values.iter().copied().fold(f64::INFINITY, f64::min);
        let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        (counts, values.len() as u64, values.iter().sum(), min, max)
    }

    #[test]
    fn replayed_gaps_fill_both_histograms_as_recording_each_would() {
        let mut rng = fastrand::Rng::with_seed(7);
        let mut cases: Vec<Vec<Duration>> = vec![
            vec![Duration::from_millis(5); 3], // on a boundary
            vec![Duration::from_millis(3)],
            vec![Duration::ZERO, Duration::from_secs(100)],
            (1..=40).map(Duration::from_millis).collect(),
        ];
        for _ in 0..50 {
            let n = rng.usize(1..200);
            cases.push(
                (0..n)
                    .map(|_| Duration::from_nanos(rng.u64(0..3_000_000_000) >> rng.u32(0..20)))
                    .collect(),
            );
        }
        for gaps in cases {
            let mut tally = GapTally::default();
            gaps.iter().for_each(|g| tally.add(*g));
            let mut replayed = Vec::new();
            tally.replay(|v| replayed.push(v));
            let each: Vec<f64> = gaps.iter().map(Duration::as_secs_f64).collect();
            for bounds in [&GAP_BUCKETS[..], &DURATION_BUCKETS[..]] {
                let (want, got) = (histogram(bounds, &each), histogram(bounds, &replayed));
                assert_eq!(
                    (&want.0, want.1, want.3, want.4),
                    (&got.0, got.1, got.3, got.4),
                    "{gaps:?}"
                );
                assert!(
                    (want.2 - got.2).abs() <= 1e-9 * want.2.max(1.0),
                    "sum {} vs {}",
                    want.2,
                    got.2
                );
            }
        }
        let mut none = Vec::new();
        GapTally::default().replay(|v| none.push(v));
        assert!(none.is_empty(), "nothing folded, nothing recorded");
    }
}
