//! What a benchmark level asks for and what one request came to: the
//! [`Load`] of a level in; one [`Sample`] per metered request out. A leaf
//! of `bench`, shared by the load generator and the report.

use serde::{Deserialize, Serialize};

use crate::meter::{Measurement, Outcome};

/// How a level loads the target.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Load {
    /// This many requests in flight at once (closed loop).
    Concurrency(usize),
    /// This many requests started per second (open loop).
    Rate(f64),
}

impl Load {
    /// Connections the level may hold open at once.
    pub fn width(&self) -> usize {
        match self {
            Load::Concurrency(n) => *n,
            Load::Rate(r) => (r.ceil() as usize).saturating_mul(4).clamp(8, 256),
        }
    }

    /// Measured requests per run: `fixed`, else 4 × concurrency (10 s of
    /// a rate), at least 8.
    pub fn requests(&self, fixed: Option<usize>) -> usize {
        fixed.unwrap_or(match self {
            Load::Concurrency(n) => n.saturating_mul(4).max(8),
            Load::Rate(r) => ((r * 10.0).ceil() as usize).max(8),
        })
    }

    /// Uncounted warm-up requests: `fixed`, else the concurrency (one for a rate).
    pub fn warmup(&self, fixed: Option<usize>) -> usize {
        fixed.unwrap_or(match self {
            Load::Concurrency(n) => *n,
            Load::Rate(_) => 1,
        })
    }

    /// `c=8`, `2 req/s`.
    pub fn label(&self) -> String {
        match self {
            Load::Concurrency(n) => format!("c={n}"),
            Load::Rate(r) => format!("{r} req/s"),
        }
    }

    /// The level's x value on charts.
    pub fn value(&self) -> f64 {
        match self {
            Load::Concurrency(n) => *n as f64,
            Load::Rate(r) => *r,
        }
    }
}

/// What one request came to.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Sample {
    /// `None` when the request succeeded; else its error type.
    pub error: Option<String>,
    /// TTFT, seconds.
    pub ttft: Option<f64>,
    /// Prefill tokens per second (input tokens / TTFT).
    pub prefill_tps: Option<f64>,
    /// Decode tokens per second.
    pub decode_tps: Option<f64>,
    /// Input tokens the server counted.
    pub input_tokens: Option<u64>,
    /// Output tokens received.
    pub output_tokens: Option<u64>,
    /// Output tokens were estimated (no usage in the answer).
    pub estimated: bool,
    /// Model the response named.
    pub model: Option<String>,
    /// The response's `Server` header.
    pub server: Option<String>,
}

impl Sample {
    /// A request that failed with `kind` before anything was measured.
    pub fn failed(kind: &str) -> Sample {
        Sample {
            error: Some(kind.to_owned()),
            ..Sample::default()
        }
    }

    pub(super) fn from_measurement(m: &Measurement, server: Option<String>) -> Sample {
        let error = if m.outcome != Outcome::Complete || m.status >= 400 {
            Some(
                m.error_type
                    .clone()
                    .unwrap_or_else(|| format!("{} (HTTP {})", m.outcome.as_str(), m.status)),
            )
        } else {
            None
        };
        Sample {
            error,
            ttft: m.time_to_first_token.map(|d| d.as_secs_f64()),
            prefill_tps: m.prefill_tokens_per_second(),
            decode_tps: m.decode_tokens_per_second(),
            input_tokens: m.usage.input,
            output_tokens: m.output_tokens,
            estimated: m.estimated(),
            model: m.response_model.clone(),
            server,
        }
    }
}
