//! Instruments: a `Meter` in, every metric instrument tokentap records out,
//! created once at start-up with the bucket boundaries the GenAI semantic
//! conventions recommend (or our own for `tokentap.*`).

use std::sync::{Arc, OnceLock, RwLock};
use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry::metrics::{
    BoundCounter, BoundHistogram, BoundUpDownCounter, Counter, Histogram, Meter, ObservableCounter,
    UpDownCounter,
};

use super::drops::DropCounts;
use super::exemplars::{self, SeriesExemplars, TraceMark};
use crate::attrs::*;
use crate::config::Semconv;
use crate::meter::ModalityTokens;
use crate::pricing::{CostRecord, CostSource};

/// `gen_ai.client.inference.duration`, `gen_ai.client.embeddings.duration`,
/// `gen_ai.client.operation.duration`, `gen_ai.server.request.duration`,
/// `gen_ai.client.inference.time_to_first_chunk` and
/// `gen_ai.client.inference.time_per_output_chunk` (and the v1.41.0
/// `operation` names of the last two).
pub(super) const DURATION_BUCKETS: [f64; 14] = [
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
];
/// `gen_ai.client.inference.operation.{input,output}_tokens`,
/// `gen_ai.client.embeddings.operation.input_tokens` and the v1.41.0
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
/// `tokentap.prefill.tokens_per_second`: prompt processing runs from
/// hundreds to hundreds of thousands of tokens a second.
pub(super) const PREFILL_BUCKETS: [f64; 15] = [
    10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0, 10000.0, 25000.0, 50000.0,
    100000.0, 250000.0, 500000.0,
];
/// `tokentap.proxy.overhead`: tens of microseconds when healthy, so fine
/// at the low end; the top buckets catch a proxy that is the problem.
pub(super) const OVERHEAD_BUCKETS: [f64; 16] = [
    0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
    0.1, 0.25, 0.5, 1.0,
];
/// `tokentap.stream.max_stall`.
pub(super) const STALL_BUCKETS: [f64; 14] = [
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0,
];

/// The boundaries of `tokentap.chunk.gap` and
/// `gen_ai.client.inference.time_per_output_chunk` together (sorted
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

/// What kind of instrument a row of [`FINISH`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// An `f64` histogram with the row's buckets.
    Histogram,
    /// A `u64` histogram with the row's buckets.
    IntHistogram,
    /// A `u64` counter (the value is added).
    Counter,
}

/// Which attribute set of [`FinishAttrs`] a row records under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Set {
    /// `all`: every end-of-request attribute.
    All,
    /// `sized`: `all` plus the load and prompt-size classes when on.
    Sized,
    /// `loaded`: `all` plus the load class when that is on.
    Loaded,
}

/// One value a row reads from a finished request.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Num {
    F(f64),
    U(u64),
}

impl Num {
    fn f64(self) -> f64 {
        match self {
            Num::F(v) => v,
            Num::U(n) => n as f64,
        }
    }

    fn u64(self) -> u64 {
        match self {
            Num::F(v) => v as u64,
            Num::U(n) => n,
        }
    }
}

/// The measures that keep exemplars (`SeriesExemplars`, one slot set
/// each): rows of one measure record the same value with the same buckets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Measure {
    Duration,
    Ttft,
    DecodeTps,
    MaxStall,
}

/// How many [`Measure`]s there are.
const MEASURES: usize = 4;

/// One instrument recorded once per finished request from its
/// `FinishRecord`: everything about it in one place. `value` says whether
/// the request records it (the `telemetry.semconv` generation, the
/// operation's class) and with what; `None` records nothing.
struct Row {
    name: &'static str,
    unit: &'static str,
    kind: Kind,
    description: &'static str,
    /// Histogram bucket boundaries (empty for a counter).
    buckets: &'static [f64],
    set: Set,
    value: fn(&FinishRecord, Semconv) -> Option<Num>,
    /// The exemplar measure this histogram's value feeds, if any.
    exemplar: Option<Measure>,
}

/// A seconds histogram recorded under `all`.
const fn seconds_row(
    name: &'static str,
    description: &'static str,
    buckets: &'static [f64],
    value: fn(&FinishRecord, Semconv) -> Option<Num>,
) -> Row {
    Row {
        name,
        unit: "s",
        kind: Kind::Histogram,
        description,
        buckets,
        set: Set::All,
        value,
        exemplar: None,
    }
}

/// A per-operation token histogram of the current names.
const fn tokens_row(
    name: &'static str,
    description: &'static str,
    value: fn(&FinishRecord, Semconv) -> Option<Num>,
) -> Row {
    Row {
        name,
        unit: "{token}",
        kind: Kind::IntHistogram,
        description,
        buckets: &TOKEN_BUCKETS,
        set: Set::All,
        value,
        exemplar: None,
    }
}

impl Row {
    /// This row's exemplar measure.
    const fn exemplar(self, m: Measure) -> Row {
        Row {
            exemplar: Some(m),
            ..self
        }
    }

    /// This row recorded under `sized`.
    const fn sized(self) -> Row {
        Row {
            set: Set::Sized,
            ..self
        }
    }

    /// This row recorded under `loaded`.
    const fn loaded(self) -> Row {
        Row {
            set: Set::Loaded,
            ..self
        }
    }

    /// This row with unit `unit`.
    const fn unit(self, unit: &'static str) -> Row {
        Row { unit, ..self }
    }
}

fn f(v: Option<f64>) -> Option<Num> {
    v.map(Num::F)
}

/// A token count of the current names, when `on` (of the row's class);
/// known counts only: a `0` there would pull the percentiles down.
fn latest_tokens(s: Semconv, n: Option<u64>, on: bool) -> Option<Num> {
    n.filter(|_| on && s.latest()).map(Num::U)
}

/// The current name of a duration records a request of its class.
fn latest_of(r: &FinishRecord, s: Semconv, class: OpClass) -> Option<Num> {
    (s.latest() && r.class == class).then_some(Num::F(r.duration))
}

/// Declares [`FINISH`] from its rows, `ROWS` (how many) and [`each_row`],
/// which calls `f` with every row and its index, in order. The calls are
/// written out one per row with the index counted up, so once `f` is
/// inlined each row's index and fields are constants there: its value
/// function is called directly (and inlined), its kind, attribute set and
/// exemplar measure are known, and no value array or iterator stands
/// between a row and its record. A new row is visited by being written.
macro_rules! finish_table {
    ($(#[$doc:meta])* static FINISH = [$($row:expr),* $(,)?];) => {
        /// How many rows [`FINISH`] has.
        const ROWS: usize = [$(stringify!($row)),*].len();

        $(#[$doc])*
        static FINISH: [Row; ROWS] = [$($row),*];

        #[inline(always)]
        fn each_row(mut f: impl FnMut(&'static Row, usize)) {
            let mut i = 0;
            $(
                let _ = stringify!($row);
                f(&FINISH[i], i);
                i += 1;
            )*
            debug_assert_eq!(i, ROWS);
        }
    };
}

finish_table! {
    /// Every instrument a finished request records from its `FinishRecord`
    /// alone, under `all` or `sized`. Instruments with attributes of their own
    /// (token type, modality, cost source, proxy stage, estimated reasoning)
    /// are recorded by hand below.
    static FINISH = [
        seconds_row(
            M_INFERENCE_DURATION,
            "GenAI client inference operation duration.",
            &DURATION_BUCKETS,
            |r, s| latest_of(r, s, OpClass::Inference),
        )
        .exemplar(Measure::Duration),
        seconds_row(
            M_EMBEDDINGS_DURATION,
            "GenAI client embeddings operation duration.",
            &DURATION_BUCKETS,
            |r, s| latest_of(r, s, OpClass::Embeddings),
        )
        .exemplar(Measure::Duration),
        // Latest: unrecognised endpoints only; legacy: every request.
        seconds_row(
            M_OPERATION_DURATION,
            "GenAI operation duration.",
            &DURATION_BUCKETS,
            |r, s| (s.legacy() || r.class == OpClass::Unknown).then_some(Num::F(r.duration)),
        )
        .exemplar(Measure::Duration),
        seconds_row(
            M_SERVER_REQUEST_DURATION,
            "Request duration, to the last byte of the response.",
            &DURATION_BUCKETS,
            |r, _| Some(Num::F(r.duration)),
        )
        .exemplar(Measure::Duration),
        seconds_row(
            M_SERVER_TTFT,
            "Time to generate the first token.",
            &TTFT_BUCKETS,
            |r, _| f(r.ttft),
        )
        .sized()
        .exemplar(Measure::Ttft),
        seconds_row(
            M_INFERENCE_TIME_TO_FIRST_CHUNK,
            "Time to receive the first chunk of a streaming response.",
            &DURATION_BUCKETS,
            |r, s| f(r.first_chunk.filter(|_| s.latest())),
        )
        .sized(),
        // Legacy.
        seconds_row(
            M_TIME_TO_FIRST_CHUNK,
            "Time to receive the first chunk of a streaming response.",
            &DURATION_BUCKETS,
            |r, s| f(r.first_chunk.filter(|_| s.legacy())),
        )
        .sized(),
        seconds_row(
            M_PREFILL_TPS,
            "Prefill rate: input tokens / time to first token.",
            &PREFILL_BUCKETS,
            |r, _| f(r.prefill_tps),
        )
        .sized()
        .unit("{token}/s"),
        seconds_row(
            M_SERVER_TPOT,
            "Time per output token generated after the first token.",
            &TPOT_BUCKETS,
            |r, _| f(r.tpot),
        ),
        seconds_row(
            M_DECODE_TPS,
            "Decode rate: (output tokens - 1) / (last token - first token).",
            &TPS_BUCKETS,
            |r, _| f(r.decode_tps),
        )
        .loaded()
        .unit("{token}/s")
        .exemplar(Measure::DecodeTps),
        seconds_row(
            M_MAX_STALL,
            "Largest gap between content chunks in one response.",
            &STALL_BUCKETS,
            |r, _| f(r.max_stall),
        )
        .exemplar(Measure::MaxStall),
        seconds_row(
            M_POOL_WAIT,
            "Time a request waited for an upstream connection or HTTP/2 stream slot.",
            &POOL_WAIT_BUCKETS,
            |r, _| f(r.pool_wait),
        ),
        seconds_row(
            M_TIME_TO_FIRST_VISIBLE,
            "Time to the first visible output (text, audio, tool call), reasoning excluded.",
            &TTFT_BUCKETS,
            |r, _| f(r.visible_ttft),
        ),
        seconds_row(
            M_REASONING_DURATION,
            "Thinking time: first reasoning output to first visible output.",
            &DURATION_BUCKETS,
            |r, _| f(r.reasoning_duration),
        ),
        tokens_row(
            M_OPERATION_INPUT_TOKENS,
            "Input (prompt) tokens per inference operation.",
            |r, s| latest_tokens(s, r.input_tokens, r.class != OpClass::Embeddings),
        ),
        tokens_row(
            M_OPERATION_OUTPUT_TOKENS,
            "Output (completion) tokens per inference operation.",
            |r, s| latest_tokens(s, r.output_tokens, r.class != OpClass::Embeddings),
        ),
        tokens_row(
            M_EMBEDDINGS_INPUT_TOKENS,
            "Input tokens per embeddings operation.",
            |r, s| latest_tokens(s, r.input_tokens, r.class == OpClass::Embeddings),
        ),
        Row {
            name: M_REQUESTS,
            unit: "{request}",
            kind: Kind::Counter,
            description: "Finished requests, by outcome.",
            buckets: &[],
            set: Set::All,
            value: |_, _| Some(Num::U(1)),
            exemplar: None,
        },
    ];
}

/// One row's instrument.
enum Instrument {
    Histogram(Histogram<f64>),
    IntHistogram(Histogram<u64>),
    Counter(Counter<u64>),
}

/// One row's instrument bound to an attribute set.
enum Bound {
    Histogram(BoundHistogram<f64>),
    IntHistogram(BoundHistogram<u64>),
    Counter(BoundCounter<u64>),
}

impl Row {
    fn build(&self, meter: &Meter) -> Instrument {
        let (name, unit, desc, b) = (self.name, self.unit, self.description, self.buckets);
        match self.kind {
            Kind::Histogram => Instrument::Histogram(f64_histogram(meter, name, unit, desc, b)),
            Kind::IntHistogram => {
                Instrument::IntHistogram(u64_histogram(meter, name, unit, desc, b))
            }
            Kind::Counter => Instrument::Counter(counter(meter, name, unit, desc)),
        }
    }

    /// The attribute set this row records under.
    fn attrs<'a>(&self, a: &FinishAttrs<'a>) -> &'a [KeyValue] {
        match self.set {
            Set::All => a.all,
            Set::Sized => a.sized,
            Set::Loaded => a.loaded,
        }
    }
}

impl Instrument {
    fn bind(&self, attrs: &[KeyValue]) -> Bound {
        match self {
            Instrument::Histogram(h) => Bound::Histogram(h.bind(attrs)),
            Instrument::IntHistogram(h) => Bound::IntHistogram(h.bind(attrs)),
            Instrument::Counter(c) => Bound::Counter(c.bind(attrs)),
        }
    }

    fn record(&self, v: Num, attrs: &[KeyValue]) {
        match self {
            Instrument::Histogram(h) => h.record(v.f64(), attrs),
            Instrument::IntHistogram(h) => h.record(v.u64(), attrs),
            Instrument::Counter(c) => c.add(v.u64(), attrs),
        }
    }
}

impl Bound {
    fn record(&self, v: Num) {
        match self {
            Bound::Histogram(h) => h.record(v.f64()),
            Bound::IntHistogram(h) => h.record(v.u64()),
            Bound::Counter(c) => c.add(v.u64()),
        }
    }
}

/// The bucket boundaries of exemplar measure `m` (those of its rows).
#[cfg(test)]
fn measure_bounds(m: Measure) -> &'static [f64] {
    FINISH
        .iter()
        .find(|row| row.exemplar == Some(m))
        .map_or(&[], |row| row.buckets)
}

/// Every instrument, built once. All are created whatever
/// `telemetry.semconv` says (an instrument that never records exports
/// nothing); `semconv` picks the ones that record.
pub(super) struct Instruments {
    /// Which generation of GenAI names records.
    pub semconv: Semconv,
    /// The instruments of [`FINISH`], in its order.
    finish: [Instrument; ROWS],
    pub inference_time_per_output_chunk: Histogram<f64>,
    /// `gen_ai.client.inference.usage.*`, in `FinishRecord::served` order.
    pub usage: [Counter<u64>; 5],
    /// Legacy only, as are the next two, `tokens` and `modality_tokens`.
    pub token_usage: Histogram<u64>,
    pub time_per_output_chunk: Histogram<f64>,
    pub reasoning_tokens: Histogram<u64>,
    pub chunk_gap: Histogram<f64>,
    pub tokens: Counter<u64>,
    pub proxy_overhead: Histogram<f64>,
    /// `tokentap.token.modality.usage`.
    pub modality_tokens: Counter<u64>,
    pub streams_active: UpDownCounter<i64>,
    pub config_reloads: Counter<u64>,
    /// `tokentap.cost.usd`: spend, recorded once per priced request.
    pub cost: Counter<f64>,
    /// `tokentap.cost.unpriced`: requests whose model has no price.
    pub cost_unpriced: Counter<u64>,
    /// `tokentap.tool.calls`: client tool calls, by name.
    pub tool_calls: Counter<u64>,
    /// `tokentap.tool.server_calls`: provider-run tool calls, by tool.
    pub server_tool_calls: Counter<u64>,
    /// Kept so the callback lives as long as the instruments.
    _dropped: Option<ObservableCounter<u64>>,
    /// End-of-request instruments bound per attribute set.
    finish_sets: BoundSets<Vec<KeyValue>, Arc<FinishBound>>,
    /// `streams_active` bound per (route, provider).
    active_sets: BoundSets<[KeyValue; 2], BoundUpDownCounter<i64>>,
    /// Attribute sets that keep exemplars (the first ones bound); 0 = none.
    exemplar_sets: usize,
}

/// Distinct end-of-request attribute sets kept bound; past this, requests
/// record unbound (same data, more hashing).
const MAX_FINISH_SETS: usize = 4096;
/// Distinct (route, provider) sets of `streams_active` kept bound.
const MAX_ACTIVE_SETS: usize = 1024;

/// Attribute sets to the handles bound to them (Fx, see `capped_maps`: a lookup
/// hashes a dozen attributes per request). Each map is capped.
type BoundSets<K, V> = RwLock<crate::capped_maps::FxMap<K, V>>;

fn bound_sets<K, V>() -> BoundSets<K, V> {
    RwLock::new(crate::capped_maps::map())
}

/// The kind of operation, which picks the current conventions' names.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) enum OpClass {
    /// Chat, text completion, content generation: `gen_ai.client.inference.*`.
    #[default]
    Inference,
    /// `gen_ai.client.embeddings.*`.
    Embeddings,
    /// An unrecognised endpoint: `gen_ai.client.operation.duration`, and
    /// the inference token metrics only when it reported tokens.
    Unknown,
}

/// What one finished request records (seconds, tokens/s, tokens).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct FinishRecord {
    /// Which names the duration and tokens go under.
    pub class: OpClass,
    /// The response split its usage by modality: `record_modalities`
    /// records the usage counters instead of `record_finish`.
    pub split: bool,
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
    /// Time to the first visible output.
    pub visible_ttft: Option<f64>,
    /// Thinking time (first reasoning to first visible output).
    pub reasoning_duration: Option<f64>,
    /// Reasoning tokens, and whether they were counted from chunks.
    pub reasoning_tokens: Option<(u64, bool)>,
    /// Input tokens / TTFT.
    pub prefill_tps: Option<f64>,
    /// t_req to the request handed upstream, pool wait excluded.
    pub request_overhead: Option<f64>,
    pub cache_read_tokens: Option<u64>,
    pub cache_write_tokens: Option<u64>,
    /// The request's sampled trace, for exemplars.
    pub trace: Option<TraceMark>,
    /// What pricing made of it.
    pub cost: Option<CostRecord>,
}

/// The cell of `FinishBound::cost` for a source.
fn source_index(source: CostSource) -> usize {
    match source {
        CostSource::Table => 0,
        CostSource::Override => 1,
        CostSource::Provider => 2,
    }
}

/// `tokentap.cost.usd` attributes.
fn cost_attrs(begin: &[KeyValue], source: CostSource, estimated: bool) -> Vec<KeyValue> {
    let mut a = Vec::with_capacity(begin.len() + 2);
    a.extend_from_slice(begin);
    a.push(KeyValue::new(COST_SOURCE, source.as_str()));
    a.push(KeyValue::new(COST_ESTIMATED, estimated));
    a
}

/// `tokentap.proxy.overhead` attributes: the route (from the request's
/// attributes) and the stage. Overhead is the proxy's, so no model.
pub(super) fn overhead_attrs(attrs: &[KeyValue], stage: &'static str) -> [KeyValue; 2] {
    let route = attrs
        .iter()
        .find(|kv| kv.key.as_str() == ROUTE)
        .map_or_else(|| opentelemetry::Value::from(OTHER), |kv| kv.value.clone());
    [
        KeyValue::new(ROUTE, route),
        KeyValue::new(PROXY_STAGE, stage),
    ]
}

impl FinishRecord {
    /// Tokens served, per `gen_ai.token.type` (`tokentap.tokens`), in
    /// the order of `Instruments::usage`.
    fn served(&self) -> [(&'static str, Option<u64>); 5] {
        [
            (TOKEN_INPUT, self.input_tokens),
            (TOKEN_OUTPUT, self.output_tokens),
            (TOKEN_CACHE_READ, self.cache_read_tokens),
            (TOKEN_CACHE_WRITE, self.cache_write_tokens),
            (TOKEN_REASONING, self.reasoning_tokens.map(|(n, _)| n)),
        ]
    }
}

/// The attribute sets one finished request records under.
pub(super) struct FinishAttrs<'a> {
    /// Every end-of-request attribute.
    pub all: &'a [KeyValue],
    /// `loaded` plus `tokentap.prompt.size_class` when that is on (else
    /// `loaded`): TTFT and prefill histograms.
    pub sized: &'a [KeyValue],
    /// `all` plus `tokentap.load_class` when that is on (else `all`), a
    /// prefix of `sized`: the decode-rate histogram.
    pub loaded: &'a [KeyValue],
    /// The attributes known when the request began (a prefix of `all`):
    /// cost, and the route of the proxy overhead sets (`overhead_attrs`
    /// with stage `request`, and `pool_wait` for the wait for an upstream
    /// connection or stream slot).
    pub begin: &'a [KeyValue],
}

/// The end-of-request instruments bound to one attribute set, each bound
/// the first time it records (a bound instrument exports a data point even
/// before it records, and e.g. a non-streamed request must add none to
/// the streaming instruments).
struct FinishBound {
    /// The rows of [`FINISH`], in its order.
    finish: [OnceLock<Bound>; ROWS],
    /// The usage counters with `gen_ai.token.modality = unknown`.
    usage: [OnceLock<BoundCounter<u64>>; 5],
    /// Legacy `gen_ai.client.token.usage` by input and output token type.
    input_tokens: OnceLock<BoundHistogram<u64>>,
    output_tokens: OnceLock<BoundHistogram<u64>>,
    /// Exact and estimated reasoning counts (`tokentap.tokens.estimated`
    /// describes the reasoning count on this instrument).
    reasoning_tokens: [OnceLock<BoundHistogram<u64>>; 2],
    request_overhead: OnceLock<BoundHistogram<f64>>,
    pool_overhead: OnceLock<BoundHistogram<f64>>,
    /// `tokentap.tokens`, in `FinishRecord::served` order.
    served: [OnceLock<BoundCounter<u64>>; 5],
    /// `tokentap.cost.usd` by `source_index` and estimated.
    cost: [[OnceLock<BoundCounter<f64>>; 2]; 3],
    cost_unpriced: OnceLock<BoundCounter<u64>>,
    /// Latest trace per bucket of each [`Measure`]; `None` past the sets
    /// that keep exemplars.
    exemplars: Option<SeriesExemplars<MEASURES>>,
}

impl Default for FinishBound {
    fn default() -> FinishBound {
        FinishBound {
            finish: std::array::from_fn(|_| OnceLock::new()),
            usage: Default::default(),
            input_tokens: OnceLock::new(),
            output_tokens: OnceLock::new(),
            reasoning_tokens: Default::default(),
            request_overhead: OnceLock::new(),
            pool_overhead: OnceLock::new(),
            served: Default::default(),
            cost: Default::default(),
            cost_unpriced: OnceLock::new(),
            exemplars: None,
        }
    }
}

impl FinishBound {
    fn record(&self, ins: &Instruments, a: &FinishAttrs<'_>, r: &FinishRecord) {
        // The first value of each exemplar measure, with its buckets.
        let mut offers: [Option<(f64, &[f64])>; MEASURES] = [None; MEASURES];
        each_row(|row, i| {
            let Some(v) = (row.value)(r, ins.semconv) else {
                return;
            };
            self.finish[i]
                .get_or_init(|| ins.finish[i].bind(row.attrs(a)))
                .record(v);
            if let Some(m) = row.exemplar {
                offers[m as usize].get_or_insert((v.f64(), row.buckets));
            }
        });
        let (latest, legacy) = (ins.semconv.latest(), ins.semconv.legacy());
        for (cell, stage, v) in [
            (&self.request_overhead, STAGE_REQUEST, r.request_overhead),
            (&self.pool_overhead, STAGE_POOL_WAIT, r.pool_wait),
        ] {
            if let Some(v) = v {
                cell.get_or_init(|| ins.proxy_overhead.bind(&overhead_attrs(a.begin, stage)))
                    .record(v);
            }
        }
        match r.cost {
            Some(CostRecord::Priced {
                usd,
                source,
                estimated,
            }) => self.cost[source_index(source)][usize::from(estimated)]
                .get_or_init(|| ins.cost.bind(&cost_attrs(a.begin, source, estimated)))
                .add(usd),
            Some(CostRecord::Unpriced) => self
                .cost_unpriced
                .get_or_init(|| ins.cost_unpriced.bind(a.begin))
                .add(1),
            None => {}
        }
        if legacy {
            for (cell, (kind, n)) in self.served.iter().zip(r.served()) {
                if let Some(n) = n.filter(|&n| n > 0) {
                    cell.get_or_init(|| ins.tokens.bind(&with_token_type(a.all, kind)))
                        .add(n);
                }
            }
            for (cell, kind, v) in [
                (&self.input_tokens, TOKEN_INPUT, r.input_tokens),
                (&self.output_tokens, TOKEN_OUTPUT, r.output_tokens),
            ] {
                if let Some(v) = v {
                    cell.get_or_init(|| ins.token_usage.bind(&with_token_type(a.all, kind)))
                        .record(v);
                }
            }
        }
        if let Some((n, estimated)) = r.reasoning_tokens {
            self.reasoning_tokens[usize::from(estimated)]
                .get_or_init(|| ins.reasoning_tokens.bind(&with_estimated(a.all, estimated)))
                .record(n);
        }
        if latest && r.records_usage() {
            for ((cell, counter), (_, n)) in self.usage.iter().zip(&ins.usage).zip(r.served()) {
                if let Some(n) = n.or((r.class == OpClass::Inference).then_some(0)) {
                    cell.get_or_init(|| counter.bind(&with_modality(a.all, MODALITY_UNKNOWN)))
                        .add(n);
                }
            }
        }
        // After the histograms, so a scrape that sees an exemplar counts it.
        if let (Some(ex), Some(mark)) = (&self.exemplars, r.trace) {
            for (m, offer) in offers.into_iter().enumerate() {
                if let Some((v, buckets)) = offer {
                    ex.offer(m, buckets, v, mark);
                }
            }
        }
    }
}

impl FinishRecord {
    /// Whether the usage counters of the current names record this request
    /// under `gen_ai.token.modality = unknown` (`0` for an inference
    /// request that reported none, as the conventions ask): not for
    /// embeddings, nor for a response that split its usage by modality
    /// (`record_modalities` records those).
    fn records_usage(&self) -> bool {
        self.class != OpClass::Embeddings && !self.split
    }
}

/// `attrs` with `tokentap.tokens.estimated` set to `estimated`.
fn with_estimated(attrs: &[KeyValue], estimated: bool) -> Vec<KeyValue> {
    let mut a: Vec<KeyValue> = attrs
        .iter()
        .filter(|kv| kv.key.as_str() != TOKENS_ESTIMATED)
        .cloned()
        .collect();
    a.push(KeyValue::new(TOKENS_ESTIMATED, estimated));
    a
}

fn with_token_type(attrs: &[KeyValue], kind: &'static str) -> Vec<KeyValue> {
    let mut a = Vec::with_capacity(attrs.len() + 1);
    a.extend_from_slice(attrs);
    a.push(KeyValue::new(GEN_AI_TOKEN_TYPE, kind));
    a
}

fn with_modality(attrs: &[KeyValue], modality: &'static str) -> Vec<KeyValue> {
    let mut a = Vec::with_capacity(attrs.len() + 1);
    a.extend_from_slice(attrs);
    a.push(KeyValue::new(GEN_AI_TOKEN_MODALITY, modality));
    a
}

fn counter(
    meter: &Meter,
    name: &'static str,
    unit: &'static str,
    desc: &'static str,
) -> Counter<u64> {
    meter
        .u64_counter(name)
        .with_unit(unit)
        .with_description(desc)
        .build()
}

fn f64_histogram(
    meter: &Meter,
    name: &'static str,
    unit: &'static str,
    desc: &'static str,
    b: &[f64],
) -> Histogram<f64> {
    meter
        .f64_histogram(name)
        .with_unit(unit)
        .with_description(desc)
        .with_boundaries(b.to_vec())
        .build()
}

fn u64_histogram(
    meter: &Meter,
    name: &'static str,
    unit: &'static str,
    desc: &'static str,
    b: &[f64],
) -> Histogram<u64> {
    meter
        .u64_histogram(name)
        .with_unit(unit)
        .with_description(desc)
        .with_boundaries(b.to_vec())
        .build()
}

impl std::fmt::Debug for Instruments {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Instruments").finish_non_exhaustive()
    }
}

fn seconds(meter: &Meter, name: &'static str, desc: &'static str, b: &[f64]) -> Histogram<f64> {
    f64_histogram(meter, name, "s", desc, b)
}

impl Instruments {
    /// Create every instrument on `meter`; `drops`, when given, feeds the
    /// dropped-telemetry counter; the first `exemplar_sets` attribute sets
    /// recorded keep exemplars.
    pub(super) fn new(
        meter: &Meter,
        semconv: Semconv,
        drops: Option<Arc<DropCounts>>,
        exemplar_sets: usize,
    ) -> Instruments {
        Instruments {
            semconv,
            finish: std::array::from_fn(|i| FINISH[i].build(meter)),
            inference_time_per_output_chunk: seconds(
                meter,
                M_INFERENCE_TIME_PER_OUTPUT_CHUNK,
                "Time between consecutive output chunks of a streaming response.",
                &DURATION_BUCKETS,
            ),
            usage: [
                counter(
                    meter,
                    M_USAGE_INPUT,
                    "{token}",
                    "Input (prompt) tokens used, cached tokens included.",
                ),
                counter(
                    meter,
                    M_USAGE_OUTPUT,
                    "{token}",
                    "Output (completion) tokens used, reasoning tokens included.",
                ),
                counter(
                    meter,
                    M_USAGE_CACHE_READ,
                    "{token}",
                    "Input tokens served from a provider-managed cache.",
                ),
                counter(
                    meter,
                    M_USAGE_CACHE_WRITE,
                    "{token}",
                    "Input tokens written to a provider-managed cache.",
                ),
                counter(
                    meter,
                    M_USAGE_REASONING,
                    "{token}",
                    "Output tokens used for reasoning.",
                ),
            ],
            token_usage: u64_histogram(
                meter,
                M_TOKEN_USAGE,
                "{token}",
                "Number of input and output tokens used.",
                &TOKEN_BUCKETS,
            ),
            time_per_output_chunk: seconds(
                meter,
                M_TIME_PER_OUTPUT_CHUNK,
                "Time between consecutive output chunks of a streaming response.",
                &DURATION_BUCKETS,
            ),
            reasoning_tokens: u64_histogram(
                meter,
                M_REASONING_TOKENS,
                "{token}",
                "Reasoning tokens per response.",
                &TOKEN_BUCKETS,
            ),
            chunk_gap: seconds(
                meter,
                M_CHUNK_GAP,
                "Gap between consecutive content chunks.",
                &GAP_BUCKETS,
            ),
            tokens: counter(
                meter,
                M_TOKENS,
                "{token}",
                "Tokens served, by token type; rate() is tokens per second.",
            ),
            proxy_overhead: seconds(
                meter,
                M_PROXY_OVERHEAD,
                "Time tokentap itself adds: before the request leaves, and per response frame.",
                &OVERHEAD_BUCKETS,
            ),
            modality_tokens: counter(
                meter,
                M_MODALITY_TOKENS,
                "{token}",
                "Tokens by type, modality and (input) cache status, where the provider splits them.",
            ),
            streams_active: meter
                .i64_up_down_counter(M_STREAMS_ACTIVE)
                .with_unit("{request}")
                .with_description("Requests whose response has not finished yet.")
                .build(),
            config_reloads: counter(
                meter,
                M_CONFIG_RELOADS,
                "{reload}",
                "Configuration reloads (SIGHUP or file watch), by result.",
            ),
            cost: meter
                .f64_counter(M_COST)
                .with_unit("{USD}")
                .with_description(
                    "Spend in USD, from provider usage and the price table (docs/COST.md).",
                )
                .build(),
            cost_unpriced: counter(
                meter,
                M_COST_UNPRICED,
                "{request}",
                "Requests that used tokens but whose model has no price.",
            ),
            tool_calls: counter(
                meter,
                M_TOOL_CALLS,
                "{call}",
                "Tool calls the model asked the client to run, by tool name.",
            ),
            server_tool_calls: counter(
                meter,
                M_SERVER_TOOL_CALLS,
                "{call}",
                "Tools the provider ran itself (and bills per call), by tool.",
            ),
            _dropped: drops.map(|d| dropped_counter(meter, d)),
            finish_sets: bound_sets(),
            active_sets: bound_sets(),
            exemplar_sets,
        }
    }

    /// Every exemplar kept so far, by series (only histograms with one).
    pub(super) fn exemplars(&self) -> exemplars::Snapshot {
        let mut snap = exemplars::Snapshot::default();
        if self.exemplar_sets == 0 {
            return snap;
        }
        let Ok(sets) = self.finish_sets.read() else {
            return snap;
        };
        for (attrs, bound) in sets.iter() {
            let Some(ex) = &bound.exemplars else {
                continue;
            };
            // Bound per `sized` set (with the load and prompt-size
            // classes); the series of rows recorded under `loaded` lack
            // the prompt-size class, those under `all` both.
            let without = |keys: &[&str]| -> Vec<KeyValue> {
                let keep = |kv: &&KeyValue| !keys.contains(&kv.key.as_str());
                attrs.iter().filter(keep).cloned().collect()
            };
            let all = without(&[PROMPT_SIZE_CLASS, LOAD_CLASS]);
            let loaded = without(&[PROMPT_SIZE_CLASS]);
            for row in &FINISH {
                let Some(m) = row.exemplar else { continue };
                if let Some(buckets) = ex.read(m as usize) {
                    let series = match row.set {
                        Set::Sized => attrs,
                        Set::Loaded => &loaded,
                        Set::All => &all,
                    };
                    snap.insert(series, row.name, buckets);
                }
            }
        }
        snap
    }

    /// Record one finished request under `attrs`: through instruments bound
    /// to `attrs` (one hash of the set per request instead of one per
    /// record; one read lock, where the SDK takes one per record anyway).
    pub(super) fn record_finish(&self, a: &FinishAttrs<'_>, r: &FinishRecord) {
        // Keyed by the widest set: it tells every narrower one apart.
        match self.finish_bound(a.sized) {
            Some(bound) => bound.record(self, a, r),
            None => self.record_unbound(a, r),
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
        let bound = Arc::new(FinishBound {
            exemplars: (sets.len() < self.exemplar_sets).then(SeriesExemplars::default),
            ..FinishBound::default()
        });
        sets.insert(attrs.to_vec(), bound.clone());
        Some(bound)
    }

    /// Count one request in `tokentap.requests` under `attrs` alone (one
    /// that matched no route and records nothing else).
    pub(super) fn count_request(&self, attrs: &[KeyValue]) {
        let row = FINISH.iter().position(|row| row.name == M_REQUESTS);
        if let Some(i) = row {
            self.finish[i].record(Num::U(1), attrs);
        }
    }

    /// The same records, each hashing `attrs`.
    fn record_unbound(&self, a: &FinishAttrs<'_>, r: &FinishRecord) {
        let attrs = a.all;
        let (latest, legacy) = (self.semconv.latest(), self.semconv.legacy());
        each_row(|row, i| {
            if let Some(v) = (row.value)(r, self.semconv) {
                self.finish[i].record(v, row.attrs(a));
            }
        });
        for (stage, v) in [
            (STAGE_REQUEST, r.request_overhead),
            (STAGE_POOL_WAIT, r.pool_wait),
        ] {
            if let Some(v) = v {
                self.proxy_overhead
                    .record(v, &overhead_attrs(a.begin, stage));
            }
        }
        match r.cost {
            Some(CostRecord::Priced {
                usd,
                source,
                estimated,
            }) => self.cost.add(usd, &cost_attrs(a.begin, source, estimated)),
            Some(CostRecord::Unpriced) => self.cost_unpriced.add(1, a.begin),
            None => {}
        }
        if legacy {
            for (kind, n) in r.served() {
                if let Some(n) = n.filter(|&n| n > 0) {
                    self.tokens.add(n, &with_token_type(attrs, kind));
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
        if let Some((n, estimated)) = r.reasoning_tokens {
            self.reasoning_tokens
                .record(n, &with_estimated(attrs, estimated));
        }
        if latest && r.records_usage() {
            let unknown = with_modality(attrs, MODALITY_UNKNOWN);
            for (counter, (_, n)) in self.usage.iter().zip(r.served()) {
                if let Some(n) = n.or((r.class == OpClass::Inference).then_some(0)) {
                    counter.add(n, &unknown);
                }
            }
        }
    }
}

impl Instruments {
    /// One model's share of a batch result file: the token counters and
    /// its cost under `attrs` (the request's, with that model's capped
    /// label). The per-request instruments are recorded once per download
    /// by `record_finish`; only these are recorded once per model.
    pub(super) fn record_batch_model(
        &self,
        attrs: &[KeyValue],
        usage: &crate::providers::Usage,
        cost: Option<CostRecord>,
    ) {
        let served = [
            (TOKEN_INPUT, usage.input),
            (TOKEN_OUTPUT, usage.output),
            (TOKEN_CACHE_READ, usage.cache_read),
            (TOKEN_CACHE_WRITE, usage.cache_creation),
            (TOKEN_REASONING, usage.reasoning),
        ];
        if self.semconv.latest() {
            let unknown = with_modality(attrs, MODALITY_UNKNOWN);
            for (counter, (_, n)) in self.usage.iter().zip(served) {
                if let Some(n) = n {
                    counter.add(n, &unknown);
                }
            }
        }
        if self.semconv.legacy() {
            for (kind, n) in served {
                if let Some(n) = n.filter(|&n| n > 0) {
                    self.tokens.add(n, &with_token_type(attrs, kind));
                }
            }
        }
        match cost {
            Some(CostRecord::Priced {
                usd,
                source,
                estimated,
            }) => self.cost.add(usd, &cost_attrs(attrs, source, estimated)),
            Some(CostRecord::Unpriced) => self.cost_unpriced.add(1, attrs),
            None => {}
        }
    }

    /// Record a response's text/audio split (`r.split`): the usage
    /// counters per `gen_ai.token.modality` (latest) and
    /// `tokentap.token.modality.usage` (legacy). Only responses that
    /// report a split (realtime sessions) get here, so the unbound adds
    /// cost nothing on the HTTP path.
    pub(super) fn record_modalities(
        &self,
        attrs: &[KeyValue],
        m: &ModalityTokens,
        r: &FinishRecord,
    ) {
        if self.semconv.latest() && r.class != OpClass::Embeddings {
            self.record_usage_split(attrs, m, r);
        }
        if self.semconv.legacy() {
            self.record_modalities_legacy(attrs, m);
        }
    }

    /// Each usage counter's total as its text and audio parts plus the
    /// rest under `unknown`, so a counter's points for one response add up
    /// to its total; `0` under `unknown` when there is nothing to record
    /// for an inference request (as `record_tokens`).
    fn record_usage_split(&self, attrs: &[KeyValue], m: &ModalityTokens, r: &FinishRecord) {
        let totals = r.served().map(|(_, n)| n);
        let parts = [
            [m.input_text, m.input_audio],
            [m.output_text, m.output_audio],
            [m.cached_text, m.cached_audio],
            [None, None],
            [None, None],
        ];
        for ((counter, total), [text, audio]) in self.usage.iter().zip(totals).zip(parts) {
            let mut rest = total;
            for (modality, n) in [(MODALITY_TEXT, text), (MODALITY_AUDIO, audio)] {
                if let Some(n) = n {
                    counter.add(n, &with_modality(attrs, modality));
                    rest = rest.map(|t| t.saturating_sub(n));
                }
            }
            let split = text.is_some() || audio.is_some();
            let rest = match rest {
                Some(n) if n > 0 || !split => Some(n),
                None if !split && r.class == OpClass::Inference => Some(0),
                _ => None,
            };
            if let Some(n) = rest {
                counter.add(n, &with_modality(attrs, MODALITY_UNKNOWN));
            }
        }
    }

    /// Add a response's text/audio split to `tokentap.token.modality.usage`
    /// under `attrs`. Input splits into cached and uncached parts when the
    /// cached part's split is known, so that the points never overlap.
    fn record_modalities_legacy(&self, attrs: &[KeyValue], m: &ModalityTokens) {
        let input = [
            (MODALITY_TEXT, m.input_text, m.cached_text),
            (MODALITY_AUDIO, m.input_audio, m.cached_audio),
        ];
        for (modality, total, cached) in input {
            let Some(total) = total else { continue };
            let mut a = with_token_type(attrs, TOKEN_INPUT);
            a.push(KeyValue::new(GEN_AI_TOKEN_MODALITY, modality));
            match cached {
                Some(cached) => {
                    let mut read = a.clone();
                    read.push(KeyValue::new(GEN_AI_TOKEN_CACHE, CACHE_READ));
                    self.modality_tokens.add(cached.min(total), &read);
                    a.push(KeyValue::new(GEN_AI_TOKEN_CACHE, CACHE_NONE));
                    self.modality_tokens.add(total.saturating_sub(cached), &a);
                }
                None => self.modality_tokens.add(total, &a),
            }
        }
        for (modality, n) in [
            (MODALITY_TEXT, m.output_text),
            (MODALITY_AUDIO, m.output_audio),
        ] {
            if let Some(n) = n {
                let mut a = with_token_type(attrs, TOKEN_OUTPUT);
                a.push(KeyValue::new(GEN_AI_TOKEN_MODALITY, modality));
                self.modality_tokens.add(n, &a);
            }
        }
    }
}

/// `tokentap.streams.active` for one request: +1 on start, −1 when
/// dropped (finished or not).
pub(super) struct ActiveRequest {
    counter: UpDownCounter<i64>,
    attrs: [KeyValue; 2],
    /// `counter` bound to `attrs`; `None` past `MAX_ACTIVE_SETS` (adds
    /// hash `attrs`).
    bound: Option<BoundUpDownCounter<i64>>,
}

impl Instruments {
    /// Count a request in `streams_active` under (route, provider) `attrs`.
    pub(super) fn active_start(&self, attrs: [KeyValue; 2]) -> ActiveRequest {
        ActiveRequest {
            counter: self.streams_active.clone(),
            bound: self.active_enter(&attrs),
            attrs,
        }
    }

    /// +1 under `attrs`, through the handle bound to them when there is
    /// one, which is returned.
    fn active_enter(&self, attrs: &[KeyValue; 2]) -> Option<BoundUpDownCounter<i64>> {
        let found = (self.active_sets.read().ok()).and_then(|sets| sets.get(attrs).cloned());
        if let Some(bound) = found {
            bound.add(1);
            return Some(bound);
        }
        // The set's first request adds unbound, so its series starts at 1
        // (a handle bound first would export a 0 to a collection between
        // bind and add), and binds after.
        self.streams_active.add(1, attrs);
        let mut sets = self.active_sets.write().ok()?;
        if sets.len() >= MAX_ACTIVE_SETS && !sets.contains_key(attrs) {
            return None;
        }
        let bound = sets
            .entry(attrs.clone())
            .or_insert_with(|| self.streams_active.bind(attrs));
        Some(bound.clone())
    }
}

impl ActiveRequest {
    fn add(&self, n: i64) {
        match &self.bound {
            Some(bound) => bound.add(n),
            None => self.counter.add(n, &self.attrs),
        }
    }

    /// Move this request to the series labelled with `provider`.
    pub(super) fn relabel(&mut self, ins: &Instruments, provider: KeyValue) {
        self.add(-1);
        self.attrs[1] = provider;
        self.bound = ins.active_enter(&self.attrs);
    }
}

impl Drop for ActiveRequest {
    fn drop(&mut self) {
        self.add(-1);
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
mod tests;
