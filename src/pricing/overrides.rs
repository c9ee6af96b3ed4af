//! Price overrides: `[[prices]]` entries from the config file, a route, or
//! a `--prices` file in; compiled entries that match a provider and model
//! glob and give rates (their own, or the table's scaled) out.

use serde::{Deserialize, Serialize};

use super::date::{Day, When};
use super::rates::{Rate, Rates, Unit};
use super::tools::CallRates;
use crate::providers::ServerTool;

/// One override entry, as written in TOML (`[[prices]]`,
/// `[[routes.prices]]`, or a `--prices` file). Prices are USD per million
/// tokens.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PriceOverride {
    /// Model glob (`*` any run, `?` one character), matched case-insensitively
    /// against the response model, then the request model.
    pub model: String,
    /// Provider config name (`openai`, `azure`); any provider when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// Applies to requests from this UTC day on (`YYYY-MM-DD`); always when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<String>,
    /// Uncached input (USD per million tokens).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<f64>,
    /// Output, reasoning included (USD per million tokens).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<f64>,
    /// Cached input read (USD per million tokens).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_read: Option<f64>,
    /// Cache write, 5-minute (USD per million tokens).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write: Option<f64>,
    /// Cache write, 1-hour (USD per million tokens).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write_1h: Option<f64>,
    /// Audio input (USD per million tokens).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_audio: Option<f64>,
    /// Audio output (USD per million tokens).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_audio: Option<f64>,
    /// Reasoning output, when billed apart from output (USD per million tokens).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<f64>,
    /// Multiply the prices by this (0.8 = a 20% discount): this entry's own
    /// prices, or the table's when it gives none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale: Option<f64>,
    /// Provider-run web search (USD per call).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub web_search_per_call: Option<f64>,
    /// Provider-run web fetch (USD per call).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub web_fetch_per_call: Option<f64>,
    /// Provider-run file search (USD per call).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_search_per_call: Option<f64>,
    /// Provider-run code interpreter / code execution (USD per call).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code_interpreter_per_call: Option<f64>,
    /// Grounding with Google Search (USD per search query).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grounding_per_call: Option<f64>,
}

/// A `--prices` file: a list of `[[prices]]` entries.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PriceFile {
    /// The entries, first match wins.
    #[serde(default)]
    pub prices: Vec<PriceOverride>,
}

/// A compiled override.
#[derive(Debug, Clone)]
pub struct Override {
    /// The glob, lowercased.
    pub glob: Box<str>,
    /// Provider config name, when restricted.
    pub provider: Option<Box<str>>,
    /// From this UTC day on.
    pub since: Option<Day>,
    /// Its own rates (empty when it only scales the table).
    pub rates: Rates,
    /// Its scale factor.
    pub scale: Option<f64>,
    /// Its per-call rates of provider-run tools (USD per call).
    pub calls: CallRates,
}

impl Override {
    /// Check and compile one entry; the error says which field is wrong.
    pub fn compile(raw: &PriceOverride) -> Result<Override, String> {
        if raw.model.is_empty() {
            return Err("`model` must be a non-empty glob (\"*\" for every model)".into());
        }
        let since = match &raw.since {
            Some(s) => Some(
                Day::parse(s)
                    .ok_or_else(|| format!("`since` = {s:?} is not a date (YYYY-MM-DD)"))?,
            ),
            None => None,
        };
        let mut rates = Rates::default();
        let fields = [
            ("input", raw.input, Unit::Input),
            ("output", raw.output, Unit::Output),
            ("cache_read", raw.cache_read, Unit::CacheRead),
            ("cache_write", raw.cache_write, Unit::CacheWrite),
            ("cache_write_1h", raw.cache_write_1h, Unit::CacheWrite1h),
            ("input_audio", raw.input_audio, Unit::InputAudio),
            ("output_audio", raw.output_audio, Unit::OutputAudio),
            ("reasoning", raw.reasoning, Unit::OutputReasoning),
        ];
        for (name, value, unit) in fields {
            if let Some(v) = value {
                if !(v.is_finite() && v >= 0.0) {
                    return Err(format!(
                        "`{name}` = {v} must be a price ≥ 0 (USD per million tokens)"
                    ));
                }
                rates.set(unit, Rate::Flat(v));
            }
        }
        if let Some(s) = raw.scale {
            if !(s.is_finite() && s >= 0.0) {
                return Err(format!("`scale` = {s} must be a factor ≥ 0"));
            }
        }
        let mut calls = CallRates::default();
        let per_call = [
            (
                "web_search_per_call",
                raw.web_search_per_call,
                ServerTool::WebSearch,
            ),
            (
                "web_fetch_per_call",
                raw.web_fetch_per_call,
                ServerTool::WebFetch,
            ),
            (
                "file_search_per_call",
                raw.file_search_per_call,
                ServerTool::FileSearch,
            ),
            (
                "code_interpreter_per_call",
                raw.code_interpreter_per_call,
                ServerTool::CodeInterpreter,
            ),
            (
                "grounding_per_call",
                raw.grounding_per_call,
                ServerTool::Grounding,
            ),
        ];
        for (name, value, tool) in per_call {
            if let Some(v) = value {
                if !(v.is_finite() && v >= 0.0) {
                    return Err(format!("`{name}` = {v} must be a price ≥ 0 (USD per call)"));
                }
                calls.set(tool, v);
            }
        }
        if rates.is_empty() && raw.scale.is_none() && calls.is_empty() {
            return Err(
                "give at least one price (`input`, `output`, …, `web_search_per_call`, …) or a `scale`"
                    .into(),
            );
        }
        if !rates.is_empty()
            && rates.get(Unit::Input).is_none()
            && rates.get(Unit::Output).is_none()
        {
            return Err("an entry with prices needs `input` or `output`".into());
        }
        Ok(Override {
            glob: raw.model.to_lowercase().into(),
            provider: raw.provider.as_deref().map(Into::into),
            since,
            rates,
            scale: raw.scale,
            calls,
        })
    }

    /// Whether this entry covers `provider` (config name) and `model`
    /// (lowercased) at `at`.
    pub fn covers(&self, provider: &str, model: &str, at: When) -> bool {
        self.provider.as_deref().is_none_or(|p| p == provider)
            && self.since.is_none_or(|d| at.day >= d)
            && glob(&self.glob, model)
    }

    /// Whether it gives prices of its own (else it scales the table's).
    pub fn has_rates(&self) -> bool {
        !self.rates.is_empty()
    }
}

/// Compile a list, naming the failing entry as `{what}[{i}]`.
pub fn compile_all(list: &[PriceOverride], what: &str) -> Result<Box<[Override]>, String> {
    list.iter()
        .enumerate()
        .map(|(i, raw)| {
            Override::compile(raw).map_err(|e| format!("{what}[{i}] (model {:?}): {e}", raw.model))
        })
        .collect()
}

/// Glob match: `*` any run of characters, `?` exactly one byte (model
/// names are ASCII). Iterative with one backtrack point, so no pattern is
/// exponential, and allocation-free.
pub fn glob(pattern: &str, text: &str) -> bool {
    let (p, t) = (pattern.as_bytes(), text.as_bytes());
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        match p.get(pi) {
            Some(b'*') => {
                star = Some((pi, ti));
                pi += 1;
            }
            Some(c) if *c == b'?' || *c == t[ti] => {
                pi += 1;
                ti += 1;
            }
            _ => match star {
                Some((sp, st)) => {
                    pi = sp + 1;
                    ti = st + 1;
                    star = Some((sp, st + 1));
                }
                None => return false,
            },
        }
    }
    p[pi..].iter().all(|c| *c == b'*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_whole_names() {
        assert!(glob("gpt-4o*", "gpt-4o-mini"));
        assert!(glob("*", ""));
        assert!(glob("ft:gpt-4o:*:acme:*", "ft:gpt-4o:org:acme:abc"));
        assert!(glob("llama-?b", "llama-8b"));
        assert!(!glob("llama-?b", "llama-70b"));
        assert!(!glob("gpt-4o", "gpt-4o-mini"));
        assert!(glob("*sonnet*", "claude-sonnet-4-5"));
    }

    #[test]
    fn bad_entries_say_which_field() {
        let bad = |raw: PriceOverride| Override::compile(&raw).expect_err("refused");
        let base = PriceOverride {
            model: "m".into(),
            input: Some(1.0),
            ..PriceOverride::default()
        };
        assert!(
            bad(PriceOverride {
                input: Some(-1.0),
                ..base.clone()
            })
            .contains("`input`")
        );
        assert!(
            bad(PriceOverride {
                since: Some("2025-13-01".into()),
                ..base.clone()
            })
            .contains("`since`")
        );
        assert!(
            bad(PriceOverride {
                model: "m".into(),
                ..PriceOverride::default()
            })
            .contains("at least one price")
        );
        assert!(
            bad(PriceOverride {
                model: String::new(),
                ..base.clone()
            })
            .contains("`model`")
        );
        let list = compile_all(
            &[
                base.clone(),
                PriceOverride {
                    scale: Some(f64::NAN),
                    ..base
                },
            ],
            "prices",
        );
        assert!(list.expect_err("refused").starts_with("prices[1]"));
    }
}
