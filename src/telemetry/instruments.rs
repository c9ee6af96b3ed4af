//! Instruments: a `Meter` in, every metric instrument tokentap records out,
//! created once at start-up with the bucket boundaries the GenAI semantic
//! conventions recommend (or our own for `tokentap.*`).

use std::sync::Arc;

use opentelemetry::KeyValue;
use opentelemetry::metrics::{Counter, Histogram, Meter, ObservableCounter, UpDownCounter};

use super::attrs::*;
use super::export::DropCounts;

/// `gen_ai.client.operation.duration`, `gen_ai.server.request.duration`,
/// `gen_ai.client.operation.time_to_first_chunk` and
/// `gen_ai.client.operation.time_per_output_chunk`.
pub const DURATION_BUCKETS: [f64; 14] = [
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
];
/// `gen_ai.client.token.usage`.
pub const TOKEN_BUCKETS: [f64; 14] = [
    1.0, 4.0, 16.0, 64.0, 256.0, 1024.0, 4096.0, 16384.0, 65536.0, 262144.0, 1048576.0, 4194304.0,
    16777216.0, 67108864.0,
];
/// `gen_ai.server.time_to_first_token`.
pub const TTFT_BUCKETS: [f64; 16] = [
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
];
/// `gen_ai.server.time_per_output_token`.
pub const TPOT_BUCKETS: [f64; 13] = [
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5,
];
/// `tokentap.decode.tokens_per_second`.
pub const TPS_BUCKETS: [f64; 16] = [
    1.0, 2.0, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 75.0, 100.0, 150.0, 200.0, 300.0, 500.0,
    1000.0,
];
/// `tokentap.chunk.gap`: fine below 50 ms, where inter-token gaps live.
pub const GAP_BUCKETS: [f64; 20] = [
    0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.04, 0.05, 0.075, 0.1,
    0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];
/// `tokentap.stream.max_stall`.
pub const STALL_BUCKETS: [f64; 14] = [
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0,
];

/// Every instrument, built once.
pub struct Instruments {
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
    pub requests: Counter<u64>,
    pub streams_active: UpDownCounter<i64>,
    pub config_reloads: Counter<u64>,
    /// Kept so the callback lives as long as the instruments.
    _dropped: Option<ObservableCounter<u64>>,
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
    pub fn new(meter: &Meter, drops: Option<Arc<DropCounts>>) -> Instruments {
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
            _dropped: drops.map(|d| dropped_counter(meter, d)),
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
