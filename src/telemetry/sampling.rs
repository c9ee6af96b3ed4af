//! Span sampling, decided when a request ends: `[telemetry.sampling]` and
//! a request's trace context in (`Head`, read when it starts); whether its
//! span is exported, why, and how many requests it stands for out
//! (`Kept`). Metrics never ask: they count every request.
//!
//! Ordinary requests are picked by the OpenTelemetry consistent
//! probability rule (specification, "TraceState: Probability Sampling",
//! Development status as of 2025): a 56-bit randomness value (the
//! incoming `ot=rv:…`, else the trace id's low 56 bits) is kept when it is
//! at least the rejection threshold `th = (1 − ratio) · 2^56`, rounded to
//! four significant hex digits as the specification recommends; the kept
//! span carries `ot=th:…` in its trace state. Any sampler that follows the
//! specification with the same ratio keeps the same traces.
//! (`opentelemetry_sdk` 0.33's `TraceIdRatioBased` predates that rule: it
//! compares the low 63 bits with `ratio · 2^63`, so it does not agree.)

use std::time::Duration;

use opentelemetry::trace::{SpanContext, TraceState};

use crate::config::SamplingConfig;
use crate::meter::{Measurement, Outcome};

/// 2^56: the number of distinct randomness values.
const MAX_ADJUSTED: u64 = 1 << 56;
/// Significant hex digits of a threshold (the specification's default).
const PRECISION: i32 = 4;

/// Why a span was exported (`tokentap.sampling.reason`), in the order the
/// rules are asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reason {
    /// The upstream failed or timed out (`error.type`).
    Error,
    /// A stream ended without its terminal event.
    Incomplete,
    /// The client went away.
    Cancelled,
    /// tokentap's own shutdown cut it.
    Shutdown,
    /// Events or the whole body could not be read.
    Malformed,
    /// An SLO of the route and model is breached.
    Slo,
    /// TTFT above `keep_ttft_over`.
    SlowTtft,
    /// An inter-chunk gap above `keep_stall_over`.
    Stall,
    /// Duration above `keep_duration_over`.
    SlowDuration,
    /// The first request of its (route, model) pair.
    FirstOfPair,
    /// A WebSocket session kept because one of its responses was.
    Response,
    /// The incoming `traceparent` was sampled (`respect_parent`).
    Parent,
    /// Picked by the ratio.
    Ratio,
    /// Ratio 1: every request.
    All,
}

impl Reason {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Reason::Error => "error",
            Reason::Incomplete => "incomplete",
            Reason::Cancelled => "cancelled",
            Reason::Shutdown => "shutdown",
            Reason::Malformed => "malformed",
            Reason::Slo => "slo",
            Reason::SlowTtft => "slow_ttft",
            Reason::Stall => "stall",
            Reason::SlowDuration => "slow_duration",
            Reason::FirstOfPair => "first_of_pair",
            Reason::Response => "response",
            Reason::Parent => "parent",
            Reason::Ratio => "ratio",
            Reason::All => "all",
        }
    }
}

/// An exported span's verdict: why, its rejection threshold (`None` when
/// the probability is unknown: a parent's decision without a `th`) and its
/// weight, the number of requests it stands for (1 / probability).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Kept {
    pub(crate) reason: Reason,
    pub(crate) th: Option<u64>,
    pub(crate) weight: Option<f64>,
}

impl Kept {
    /// Kept whatever the randomness: probability 1.
    pub(crate) fn always(reason: Reason) -> Kept {
        Kept {
            reason,
            th: Some(0),
            weight: Some(1.0),
        }
    }

    fn with_threshold(reason: Reason, th: u64) -> Kept {
        Kept {
            reason,
            th: Some(th),
            weight: Some(adjusted_count(th)),
        }
    }
}

/// What is known of sampling when a request starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Head {
    /// The ratio keeps this trace.
    pub(crate) by_ratio: bool,
    /// `respect_parent` is on and the remote parent is sampled.
    pub(crate) by_parent: bool,
    /// The parent's `th`, when it sent one consistent with its flag.
    pub(crate) parent_th: Option<u64>,
}

impl Head {
    /// The sampled flag sent upstream: what is known to keep the span now.
    pub(crate) fn sampled(&self) -> bool {
        self.by_ratio || self.by_parent
    }
}

/// The sampling rules, built once from `[telemetry.sampling]`.
#[derive(Debug, Clone)]
pub(crate) struct Sampler {
    /// Rejection threshold; `None` for ratio 0 (no ordinary span).
    threshold: Option<u64>,
    keep_ttft_over: Option<Duration>,
    keep_stall_over: Option<Duration>,
    keep_duration_over: Option<Duration>,
    respect_parent: bool,
}

impl Default for Sampler {
    fn default() -> Self {
        Sampler::new(&SamplingConfig::default())
    }
}

impl Sampler {
    pub(crate) fn new(cfg: &SamplingConfig) -> Sampler {
        Sampler {
            threshold: threshold(cfg.ratio),
            keep_ttft_over: cfg.keep_ttft_over,
            keep_stall_over: cfg.keep_stall_over,
            keep_duration_over: cfg.keep_duration_over,
            respect_parent: cfg.respect_parent,
        }
    }

    /// The verdict known at the start: the ratio's, from the trace's
    /// randomness, and the remote parent's flag.
    pub(crate) fn head(&self, trace_id: u128, parent: Option<&SpanContext>) -> Head {
        let state = parent.map(SpanContext::trace_state);
        let ot = state.and_then(|s| s.get("ot"));
        let rv = ot.and_then(|ot| sub_key(ot, "rv")).and_then(parse_rv);
        let rv = rv.unwrap_or(trace_id as u64 & (MAX_ADJUSTED - 1));
        let by_ratio = self.threshold.is_some_and(|th| rv >= th);
        let parent_sampled = parent.is_some_and(|p| p.is_remote() && p.is_sampled());
        let parent_th = ot
            .and_then(|ot| sub_key(ot, "th"))
            .and_then(parse_th)
            .filter(|th| parent_sampled && rv >= *th);
        Head {
            by_ratio,
            by_parent: self.respect_parent && parent_sampled,
            parent_th,
        }
    }

    /// Whether the finished request's span is exported, and why. `slo`:
    /// an SLO of its route and model is breached; `first`: it is the first
    /// request of its (route, model) pair.
    pub(crate) fn decide(
        &self,
        m: &Measurement,
        head: &Head,
        slo: bool,
        first: bool,
    ) -> Option<Kept> {
        if let Some(reason) = self.always(m, slo, first) {
            return Some(Kept::always(reason));
        }
        self.ordinary(head)
    }

    /// The rule that keeps whatever happened: parent, then ratio.
    pub(crate) fn ordinary(&self, head: &Head) -> Option<Kept> {
        if head.by_parent {
            return Some(match head.parent_th {
                Some(th) => Kept::with_threshold(Reason::Parent, th),
                None => Kept {
                    reason: Reason::Parent,
                    th: None,
                    weight: None,
                },
            });
        }
        let th = self.threshold.filter(|_| head.by_ratio)?;
        let reason = if th == 0 { Reason::All } else { Reason::Ratio };
        Some(Kept::with_threshold(reason, th))
    }

    /// The first rule that always keeps this request, if any.
    fn always(&self, m: &Measurement, slo: bool, first: bool) -> Option<Reason> {
        let over = |v: Option<Duration>, limit: Option<Duration>| matches!((v, limit), (Some(v), Some(l)) if v > l);
        let reason = match m.outcome {
            Outcome::UpstreamError | Outcome::UpstreamTimeout => Reason::Error,
            Outcome::Incomplete => Reason::Incomplete,
            Outcome::ClientCancelled => Reason::Cancelled,
            Outcome::Shutdown => Reason::Shutdown,
            Outcome::Malformed => Reason::Malformed,
            Outcome::Complete if m.malformed_events > 0 => Reason::Malformed,
            Outcome::Complete if slo => Reason::Slo,
            Outcome::Complete if over(m.time_to_first_token, self.keep_ttft_over) => {
                Reason::SlowTtft
            }
            Outcome::Complete if over(m.max_gap, self.keep_stall_over) => Reason::Stall,
            Outcome::Complete if over(Some(m.duration), self.keep_duration_over) => {
                Reason::SlowDuration
            }
            Outcome::Complete if first => Reason::FirstOfPair,
            Outcome::Complete => return None,
        };
        Some(reason)
    }
}

/// The rejection threshold for `ratio`, by the specification's rounding
/// to [`PRECISION`] significant hex digits; `None` for 0 (or below
/// 2^-56, the least probability it can express).
pub(crate) fn threshold(ratio: f64) -> Option<u64> {
    if ratio >= 1.0 {
        return Some(0);
    }
    if ratio.is_nan() || ratio < 1.0 / MAX_ADJUSTED as f64 {
        return None;
    }
    // frexp: ratio = m · 2^exp with m in [0.5, 1); more digits for small
    // ratios, so the precision applies to their significant digits.
    let biased = ((ratio.to_bits() >> 52) & 0x7ff) as i32;
    let exp = biased - 1022;
    let precision = (PRECISION + (-exp) / 4).clamp(1, 12);
    // 2 − ratio is in (1, 2): its 52 mantissa bits are the threshold's
    // first 13 hex digits. Add half of the last kept digit to round.
    let rejection = 2.0 - ratio + f64::powi(2.0, -4 * precision - 1);
    let digits = if rejection >= 2.0 {
        (1u64 << 52) - 1
    } else {
        rejection.to_bits() & ((1u64 << 52) - 1)
    };
    let shift = 52 - 4 * precision as u32;
    Some((digits >> shift) << (shift + 4))
}

/// `th` as written in the trace state: hex without trailing zeros, `0`
/// for zero.
pub(crate) fn th_value(th: u64) -> String {
    if th == 0 {
        return "0".into();
    }
    let hex = format!("{th:014x}");
    hex.trim_end_matches('0').to_owned()
}

/// 2^56 / (2^56 − th): how many requests a span kept at `th` stands for.
pub(crate) fn adjusted_count(th: u64) -> f64 {
    MAX_ADJUSTED as f64 / (MAX_ADJUSTED - th.min(MAX_ADJUSTED - 1)) as f64
}

/// A 1–14 digit `th` value, extended with zeros to 56 bits.
fn parse_th(v: &str) -> Option<u64> {
    if v.is_empty() || v.len() > 14 || !v.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let n = u64::from_str_radix(v, 16).ok()?;
    Some(n << (4 * (14 - v.len())))
}

/// An `rv` value: exactly 14 hex digits.
fn parse_rv(v: &str) -> Option<u64> {
    if v.len() != 14 || !v.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u64::from_str_radix(v, 16).ok()
}

/// The value of `key` in an `ot` entry (`th:c;rv:…`).
fn sub_key<'a>(ot: &'a str, key: &str) -> Option<&'a str> {
    ot.split(';')
        .filter_map(|kv| kv.split_once(':'))
        .find(|(k, _)| *k == key)
        .map(|(_, v)| v)
}

/// `state` with its `ot` entry's `th` set to `th`, or removed for `None`
/// (a probability that is not known), the other `ot` sub-keys and other
/// entries kept.
pub(crate) fn with_threshold(state: &TraceState, th: Option<u64>) -> TraceState {
    let old = state.get("ot").unwrap_or("");
    let mut parts: Vec<String> = old
        .split(';')
        .filter(|kv| !kv.is_empty() && !kv.starts_with("th:"))
        .map(str::to_owned)
        .collect();
    if let Some(th) = th {
        parts.insert(0, format!("th:{}", th_value(th)));
    }
    if parts.is_empty() {
        return if old.is_empty() {
            state.clone()
        } else {
            state.delete("ot").unwrap_or_else(|_| state.clone())
        };
    }
    state
        .insert("ot", parts.join(";"))
        .unwrap_or_else(|_| state.clone())
}

#[cfg(test)]
mod tests;
