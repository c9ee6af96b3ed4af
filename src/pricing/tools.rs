//! Provider-run tool fees: a request's server-tool calls (web search,
//! web fetch, file search, code interpreter, grounding queries), its
//! provider, model and time in; the fee per tool and in all (USD) out.
//!
//! Rates are USD per call: built in per provider from the providers'
//! published prices (docs/COST.md gives each source and date), under
//! `*_per_call` keys of `[[prices]]` entries (a route's, the config's,
//! then a `--prices` file's; the first entry covering the model that sets
//! a tool's rate wins for that tool). A `scale` does not apply to them.

use super::date::When;
use super::{PriceBook, Request, lowercase, override_call_rate};
use crate::meter::ServerTools;
use crate::providers::{ProviderKind, ServerTool};

/// USD per call of each provider-run tool, indexed by `ServerTool`;
/// `None` where no rate is known.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CallRates(pub [Option<f64>; 5]);

impl CallRates {
    /// The rate of `tool`, if known.
    pub fn get(&self, tool: ServerTool) -> Option<f64> {
        self.0[tool as usize]
    }

    /// Set the rate of `tool`.
    pub fn set(&mut self, tool: ServerTool, usd: f64) {
        self.0[tool as usize] = Some(usd);
    }

    /// Whether no tool has a rate.
    pub fn is_empty(&self) -> bool {
        self.0.iter().all(Option::is_none)
    }

    /// The built-in rates of `provider` (docs/COST.md#provider-run-tools).
    pub fn builtin(provider: ProviderKind) -> CallRates {
        use ProviderKind as K;
        let mut r = CallRates::default();
        match provider {
            // Web search $10 per 1,000 searches; web fetch has no fee
            // beyond its tokens. Vertex serves Claude with the same tools.
            K::Anthropic => {
                r.set(ServerTool::WebSearch, 10.0 / 1000.0);
                r.set(ServerTool::WebFetch, 0.0);
            }
            K::Vertex => {
                r.set(ServerTool::WebSearch, 10.0 / 1000.0);
                r.set(ServerTool::WebFetch, 0.0);
                r.set(ServerTool::Grounding, 14.0 / 1000.0);
            }
            // Web search $10 per 1,000 calls; file search $2.50 per 1,000.
            // Code interpreter is billed per container, not per call.
            K::Openai => {
                r.set(ServerTool::WebSearch, 10.0 / 1000.0);
                r.set(ServerTool::FileSearch, 2.5 / 1000.0);
            }
            // Grounding with Google Search: $14 per 1,000 search queries.
            K::Gemini => r.set(ServerTool::Grounding, 14.0 / 1000.0),
            _ => {}
        }
        r
    }
}

/// What a request's provider-run tools cost.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ToolFees {
    /// USD per tool, indexed by `ServerTool`.
    pub per_tool: [f64; 5],
    /// USD in all.
    pub total: f64,
    /// Calls of tools with no known rate (not in `total`).
    pub unpriced_calls: u32,
}

impl PriceBook {
    /// The per-call rates that apply to a request: per tool, the first
    /// override covering either model name that sets it, else the
    /// provider's built-in rate.
    pub fn call_rates(&self, r: &Request<'_>) -> CallRates {
        let mut rates = CallRates::builtin(r.provider);
        let at = When::of(r.at);
        let lists = self.lists(r.route);
        let names = [r.response_model, r.request_model].map(|n| n.map(lowercase));
        for tool in ServerTool::ALL {
            let set = names
                .iter()
                .flatten()
                .find_map(|model| override_call_rate(&lists, r.provider, model, at, tool));
            if let Some((usd, ..)) = set {
                rates.set(tool, usd);
            }
        }
        rates
    }

    /// The fees of `tools`, the provider-run tool calls of request `r`.
    pub fn tool_fees(&self, r: &Request<'_>, tools: &ServerTools) -> ToolFees {
        let mut fees = ToolFees::default();
        if tools.total() == 0 {
            return fees;
        }
        let rates = self.call_rates(r);
        for tool in ServerTool::ALL {
            let calls = tools.get(tool);
            match rates.get(tool) {
                Some(usd) => {
                    let fee = f64::from(calls) * usd;
                    fees.per_tool[tool as usize] = fee;
                    fees.total += fee;
                }
                None => fees.unpriced_calls = fees.unpriced_calls.saturating_add(calls),
            }
        }
        fees
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pricing::PriceOverride;
    use crate::providers::Usage;
    use std::time::SystemTime;

    /// Tool fees read no token counts.
    static NO_USAGE: std::sync::LazyLock<Usage> = std::sync::LazyLock::new(Usage::default);

    fn request(provider: ProviderKind) -> Request<'static> {
        Request {
            route: "default",
            provider,
            response_model: Some("claude-sonnet-4-5-20250929"),
            request_model: Some("claude-sonnet-4-5"),
            usage: &NO_USAGE,
            counted_output: None,
            estimated: false,
            requested_tier: None,
            at: SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_780_000_000),
        }
    }

    /// `tools` run by `provider`, priced from the embedded table.
    fn table_fees(provider: ProviderKind, tools: &ServerTools) -> ToolFees {
        let book = PriceBook::table_only().expect("table");
        book.tool_fees(&request(provider), tools)
    }

    #[track_caller]
    fn assert_total(fees: &ToolFees, want: f64, why: &str) {
        assert!((fees.total - want).abs() < 1e-12, "{why}: {fees:?}");
    }

    #[test]
    fn anthropic_web_search_is_ten_dollars_per_thousand() {
        let tools = ServerTools {
            web_search: 3,
            web_fetch: 2,
            ..ServerTools::default()
        };
        let fees = table_fees(ProviderKind::Anthropic, &tools);
        assert_total(&fees, 0.03, "3 searches at $0.01");
        assert_eq!(
            fees.per_tool[ServerTool::WebFetch as usize],
            0.0,
            "fetches are free"
        );
        assert_eq!(fees.unpriced_calls, 0);
    }

    #[test]
    fn tools_without_a_rate_are_counted_as_unpriced() {
        let tools = ServerTools {
            code_interpreter: 4,
            file_search: 2,
            ..ServerTools::default()
        };
        let fees = table_fees(ProviderKind::Openai, &tools);
        assert_total(&fees, 0.005, "2 file searches at $0.0025");
        assert_eq!(
            fees.unpriced_calls, 4,
            "code interpreter has no per-call rate"
        );
    }

    #[test]
    fn a_per_call_override_beats_the_builtin_rate_for_its_models_only() {
        let config = [PriceOverride {
            model: "claude-sonnet-*".into(),
            web_search_per_call: Some(0.02),
            ..PriceOverride::default()
        }];
        let book = PriceBook::new(&config, None, std::iter::empty()).expect("valid entry");
        let tools = ServerTools {
            web_search: 5,
            ..ServerTools::default()
        };
        let fees = book.tool_fees(&request(ProviderKind::Anthropic), &tools);
        assert_total(&fees, 0.10, "5 searches at $0.02");
        let mut other = request(ProviderKind::Anthropic);
        other.response_model = Some("claude-opus-4-1");
        other.request_model = None;
        let fees = book.tool_fees(&other, &tools);
        assert_total(&fees, 0.05, "other models keep $0.01");
    }

    #[test]
    fn a_per_call_only_entry_leaves_token_prices_to_the_table() {
        let config = [PriceOverride {
            model: "*".into(),
            grounding_per_call: Some(0.035),
            ..PriceOverride::default()
        }];
        let book = PriceBook::new(&config, None, std::iter::empty()).expect("valid entry");
        let at = When::of(SystemTime::now());
        let quote = book.quote(&crate::pricing::Query {
            route: "default",
            provider: ProviderKind::Gemini,
            model: "gemini-2.5-flash",
            at,
            tier: None,
        });
        assert!(
            matches!(quote, Some((crate::pricing::Entry::Table(_), _))),
            "token rates still come from the table"
        );
        let bad = PriceOverride {
            model: "*".into(),
            web_search_per_call: Some(-1.0),
            ..PriceOverride::default()
        };
        let err = PriceBook::new(&[bad], None, std::iter::empty()).expect_err("negative rate");
        assert!(err.0.contains("web_search_per_call"), "{err}");
    }
}
