//! Pricing: a finished request's provider, model, usage and time in; its
//! cost in USD (with where the price came from) out, or "unpriced".
//!
//! Prices come from the embedded genai-prices snapshot (`table`), under
//! overrides from the configuration (`overrides`): a route's own entries,
//! then the config file's `[[prices]]`, then a `--prices` file, then the
//! table. A cost the provider reported itself is used as it is. The table
//! is indexed once per process; a `PriceBook` is built per configuration
//! and swapped on reload. Pricing runs once per request, when its
//! measurement finishes, and allocates nothing on the common path.

mod date;
pub mod overrides;
pub mod rates;
pub mod table;
pub mod tools;

use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::SystemTime;

pub use self::date::{Day, When};
use self::overrides::{Override, compile_all};
pub use self::overrides::{PriceFile, PriceOverride};
use self::rates::{Bill, Counts, Rates, Unit};
use self::table::{Context, Resolved, Table};
use crate::providers::{ProviderKind, ServerTool, ServiceTier, Usage};

/// The currency of every price and cost (`tokentap.cost.currency`).
pub const CURRENCY: &str = "USD";

/// The genai-prices provider id whose prices apply to `kind`; `None` for
/// self-hosted servers (priced only by overrides).
pub fn table_provider(kind: ProviderKind) -> Option<&'static str> {
    // Each provider's spec names its table id (`price_table`), so adding a
    // provider never touches pricing.
    kind.spec().price_table
}

/// Where a cost came from (`tokentap.cost.source`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CostSource {
    /// The embedded price table.
    Table,
    /// A configured override (route, config file or `--prices` file).
    Override,
    /// The provider's own figure (OpenRouter `usage.cost`).
    Provider,
}

/// A priced or unpriced request, for `tokentap.cost.*`.
#[derive(Debug, Clone, Copy)]
pub(crate) enum CostRecord {
    /// `tokentap.cost.usd`, under the request's `begin` attributes plus
    /// the price's source and whether the usage was estimated.
    Priced {
        usd: f64,
        source: CostSource,
        estimated: bool,
    },
    /// `tokentap.cost.unpriced`, under the `begin` attributes.
    Unpriced,
}

impl CostSource {
    /// The attribute value.
    pub fn as_str(self) -> &'static str {
        match self {
            CostSource::Table => "table",
            CostSource::Override => "override",
            CostSource::Provider => "provider",
        }
    }
}

/// Which override list an entry is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum List {
    /// The request's route (`routes[].prices`).
    Route,
    /// The config file's `[[prices]]`.
    Config,
    /// The `--prices` file.
    File,
}

impl List {
    /// How `tokentap price` names the list.
    fn label(self) -> &'static str {
        match self {
            List::Route => "route",
            List::Config => "[[prices]]",
            List::File => "--prices",
        }
    }
}

/// What is asked of the price book: the entry and rates for `model`
/// (lowercased, except as [`PriceBook::explain`] takes it) from `provider`
/// on `route`, at `at`, in service tier `tier`.
#[derive(Debug, Clone, Copy)]
pub struct Query<'a> {
    /// Route name (selects the route's overrides).
    pub route: &'a str,
    /// The provider that answers.
    pub provider: ProviderKind,
    /// The model.
    pub model: &'a str,
    /// When (its prices are the ones in force then).
    pub at: When,
    /// The service tier, if one changes the price.
    pub tier: Option<ServiceTier>,
}

/// The price entry a cost used.
#[derive(Debug, Clone, Copy)]
pub enum Entry<'b> {
    /// A table model, at its dated prices and variants.
    Table(Resolved<'b>),
    /// An override entry (index in its list), possibly scaling a table model.
    Override {
        /// The list.
        list: List,
        /// Index within it.
        index: usize,
        /// The entry.
        entry: &'b Override,
        /// The table model it scales, when it has no prices of its own.
        scales: Option<Resolved<'b>>,
    },
    /// The provider reported the cost.
    Provider,
}

impl Entry<'_> {
    /// The entry's name (`tokentap.cost.price_entry`), as `Display` writes
    /// it; a table model's is shared, the others are written now.
    pub fn reference(&self) -> std::sync::Arc<str> {
        match self {
            Entry::Table(r) => r.model.reference.clone(),
            _ => self.to_string().into(),
        }
    }

    /// The cost source this entry makes.
    pub fn source(&self) -> CostSource {
        match self {
            Entry::Table(_) => CostSource::Table,
            Entry::Override { .. } => CostSource::Override,
            Entry::Provider => CostSource::Provider,
        }
    }
}

impl std::fmt::Display for Entry<'_> {
    /// A short reference (`tokentap.cost.price_entry`): `openai/gpt-4o`,
    /// `routes.chat.prices[0]`, `prices[1]`, `--prices[0]`, `provider`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Entry::Table(r) => write!(f, "{}/{}", r.provider.id, r.model.id),
            Entry::Override { list, index, .. } => match list {
                List::Route => write!(f, "route.prices[{index}]"),
                List::Config => write!(f, "prices[{index}]"),
                List::File => write!(f, "--prices[{index}]"),
            },
            Entry::Provider => f.write_str("provider"),
        }
    }
}

/// One request as pricing sees it.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    /// Route name (selects the route's overrides).
    pub route: &'a str,
    /// The provider that answered.
    pub provider: ProviderKind,
    /// Model the response named (tried first).
    pub response_model: Option<&'a str>,
    /// Model the request named.
    pub request_model: Option<&'a str>,
    /// The provider's usage, normalised by the adapter.
    pub usage: &'a Usage,
    /// Output tokens when the usage has none (counted, so estimated).
    pub counted_output: Option<u64>,
    /// Whether the measurement's token counts are estimates.
    pub estimated: bool,
    /// `service_tier` from the request body, if any (the response's wins).
    pub requested_tier: Option<ServiceTier>,
    /// When the request arrived (its prices are the ones in force then).
    pub at: SystemTime,
}

/// A request's cost.
#[derive(Debug, Clone, Copy)]
pub struct Cost<'b> {
    /// USD.
    pub usd: f64,
    /// The entry that priced it.
    pub entry: Entry<'b>,
    /// Token counts were estimated, so the cost is too.
    pub estimated: bool,
    /// Per-unit split (zero for provider-reported costs).
    pub bill: Bill,
}

/// What pricing made of a request.
#[derive(Debug, Clone, Copy)]
#[allow(
    clippy::large_enum_variant,
    reason = "returned once per request and matched at once; boxing would add the allocation pricing avoids"
)]
pub enum Priced<'b> {
    /// It has a cost.
    Cost(Cost<'b>),
    /// Tokens were used but no price covers the model: no cost, counted as
    /// unpriced under the model named here.
    Unpriced,
    /// Nothing to price: no model or no token counts (e.g. a failed request).
    Nothing,
}

/// Prices for one configuration: the table plus compiled overrides.
#[derive(Debug)]
pub struct PriceBook {
    table: &'static Table,
    config: Box<[Override]>,
    file: Box<[Override]>,
    routes: HashMap<Box<str>, Box<[Override]>>,
}

/// Overrides or the table could not be loaded; the message names the entry.
#[derive(Debug, Clone, thiserror::Error)]
#[error("prices: {0}")]
pub struct PriceError(pub String);

impl PriceBook {
    /// The table alone.
    pub fn table_only() -> Result<PriceBook, PriceError> {
        PriceBook::new(&[], None, std::iter::empty())
    }

    /// The table under `config` (`[[prices]]`), the entries of the
    /// `--prices` file at `file` (read now) and each route's entries.
    pub fn new<'r>(
        config: &[PriceOverride],
        file: Option<&std::path::Path>,
        routes: impl Iterator<Item = (&'r str, &'r [PriceOverride])>,
    ) -> Result<PriceBook, PriceError> {
        let table = Table::embedded().map_err(|e| PriceError(e.to_string()))?;
        let file = match file {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| PriceError(format!("--prices {}: {e}", path.display())))?;
                let parsed: PriceFile = toml::from_str(&text)
                    .map_err(|e| PriceError(format!("--prices {}: {e}", path.display())))?;
                compile_all(&parsed.prices, &format!("{} prices", path.display()))
                    .map_err(PriceError)?
            }
            None => Box::default(),
        };
        let routes = routes
            .filter(|(_, list)| !list.is_empty())
            .map(|(name, list)| {
                compile_all(list, &format!("routes.{name}.prices"))
                    .map(|c| (Box::<str>::from(name), c))
                    .map_err(PriceError)
            })
            .collect::<Result<_, _>>()?;
        Ok(PriceBook {
            table,
            config: compile_all(config, "prices").map_err(PriceError)?,
            file,
            routes,
        })
    }

    /// The embedded table.
    pub fn table(&self) -> &'static Table {
        self.table
    }

    /// Price one finished request.
    pub fn price<'b>(&'b self, r: &Request<'_>) -> Priced<'b> {
        if let Some(cost) = r.usage.cost {
            return Priced::Cost(Cost {
                usd: cost.usd(),
                entry: Entry::Provider,
                estimated: false,
                bill: Bill::default(),
            });
        }
        let Some(counts) = counts(r) else {
            return Priced::Nothing;
        };
        let tier = r.usage.service_tier.or(r.requested_tier);
        if r.response_model.is_none() && r.request_model.is_none() {
            return Priced::Nothing;
        }
        let names = [r.response_model, r.request_model].map(|n| n.map(lowercase));
        let names = || names.iter().flatten();
        let at = When::of(r.at);
        // An override for either name beats the table for either name (an
        // override on the requested alias wins over the dated model the
        // response names).
        let query = |model| Query {
            route: r.route,
            provider: r.provider,
            model,
            at,
            tier,
        };
        let found = names()
            .find_map(|name| self.quote_override(&query(name)))
            .or_else(|| names().find_map(|name| self.quote_table(&query(name))));
        match found {
            Some((entry, rates)) => {
                let bill = rates.cost(&counts);
                Priced::Cost(Cost {
                    usd: bill.total,
                    entry,
                    estimated: r.estimated || r.usage.input.is_none() || r.usage.output.is_none(),
                    bill,
                })
            }
            None => Priced::Unpriced,
        }
    }

    /// The entry and rates for `q`: overrides in order, then the table.
    pub fn quote(&self, q: &Query<'_>) -> Option<(Entry<'_>, Rates)> {
        self.quote_override(q).or_else(|| self.quote_table(q))
    }

    /// The table's entry and rates for `q`.
    fn quote_table(&self, q: &Query<'_>) -> Option<(Entry<'_>, Rates)> {
        self.resolve_table(q).map(|r| (Entry::Table(r), r.rates))
    }

    fn resolve_table(&self, q: &Query<'_>) -> Option<Resolved<'_>> {
        let id = table_provider(q.provider)?;
        self.table.lookup(id, q.model, q.at, &context(q.tier))
    }

    /// The override lists in the order they are tried: the route's, the
    /// config's, then the `--prices` file's.
    fn lists(&self, route: &str) -> [(List, &[Override]); 3] {
        [
            (
                List::Route,
                self.routes.get(route).map(|b| &**b).unwrap_or(&[]),
            ),
            (List::Config, &*self.config),
            (List::File, &*self.file),
        ]
    }

    /// The first override covering `q`, in the order of [`Self::lists`].
    fn quote_override(&self, q: &Query<'_>) -> Option<(Entry<'_>, Rates)> {
        for (list, entries) in self.lists(q.route) {
            for (index, o) in entries.iter().enumerate() {
                if !o.covers(q.provider.config_name(), q.model, q.at) {
                    continue;
                }
                if o.has_rates() {
                    let rates = match o.scale {
                        Some(f) => o.rates.scale(f),
                        None => o.rates,
                    };
                    return Some((
                        Entry::Override {
                            list,
                            index,
                            entry: o,
                            scales: None,
                        },
                        rates,
                    ));
                }
                // A scale-only entry discounts the table's price, if any.
                if let (Some(r), Some(f)) = (self.resolve_table(q), o.scale) {
                    return Some((
                        Entry::Override {
                            list,
                            index,
                            entry: o,
                            scales: Some(r),
                        },
                        r.rates.scale(f),
                    ));
                }
            }
        }
        None
    }

    /// A human-readable account of the price `q` gets (its model as the
    /// user wrote it): every override considered, the table entry, the
    /// dated price and variants in force, and the rates (`tokentap price`).
    pub fn explain(&self, q: &Query<'_>) -> String {
        let Query {
            route: _,
            provider,
            model,
            at,
            tier,
        } = *q;
        let lower = lowercase(model);
        let lowered = Query {
            model: &lower,
            ..*q
        };
        let mut out = String::new();
        let src = &self.table.source;
        let _ = writeln!(
            out,
            "provider {} ({}), model {model:?}, at {} (UTC)",
            provider.config_name(),
            provider.as_str(),
            at.day
        );
        if let Some(t) = tier {
            let _ = writeln!(out, "service tier: {}", t.as_str());
        }
        let _ = writeln!(
            out,
            "table: {} {} ({}, {})",
            src.package, src.version, src.license, src.url
        );
        match table_provider(provider) {
            Some(id) => {
                let _ = writeln!(out, "table provider: {id}");
            }
            None => {
                let _ = writeln!(
                    out,
                    "table provider: none ({} is self-hosted: only overrides price it)",
                    provider.config_name()
                );
            }
        }
        let lists = self.lists(q.route);
        for (list, entries) in lists {
            for (i, o) in entries.iter().enumerate() {
                let verdict = match (o.covers(provider.config_name(), &lower, at), o.scale) {
                    (false, _) => "does not match",
                    (true, _) if o.has_rates() => "matches",
                    (true, Some(_)) => "matches (scales the table's token prices)",
                    (true, None) => "matches, for per-call tool rates only (no token prices)",
                };
                let _ = writeln!(
                    out,
                    "override {}[{i}] (model {:?}{}): {verdict}",
                    list.label(),
                    o.glob,
                    o.provider
                        .as_deref()
                        .map(|p| format!(", provider {p}"))
                        .unwrap_or_default()
                );
            }
        }
        match self.quote(&lowered) {
            None => {
                let _ = writeln!(
                    out,
                    "price: none — requests for this model are counted as unpriced (tokentap.cost.unpriced); add a [[prices]] entry to price it"
                );
            }
            Some((entry, rates)) => {
                let _ = writeln!(
                    out,
                    "price used: {entry} (source {})",
                    entry.source().as_str()
                );
                let resolved = match entry {
                    Entry::Table(r) => Some(r),
                    Entry::Override {
                        scales, entry: o, ..
                    } => {
                        if let Some(f) = o.scale {
                            let _ = writeln!(out, "scaled by {f}");
                        }
                        scales
                    }
                    Entry::Provider => None,
                };
                if let Some(r) = resolved {
                    describe_table_entry(&mut out, &r);
                    // A tier the entry has no price for is billed at the
                    // standard rate: say so rather than show it silently.
                    match tier {
                        Some(t) if t != ServiceTier::Default && r.variants == 0 => {
                            let _ = writeln!(
                                out,
                                "note: the table has no {} price for this model; the standard \
                                 rates below apply",
                                t.as_str()
                            );
                        }
                        _ => {}
                    }
                }
                let _ = writeln!(out, "rates (USD per million tokens):");
                let probe = rates;
                for u in Unit::ALL {
                    if let Some(rate) = probe.get(u) {
                        let _ = match rate {
                            rates::Rate::Flat(p) => writeln!(out, "  {:<24} {p}", u.key()),
                            rates::Rate::Tiered { base, tiers } => {
                                let f = probe.factor.unwrap_or(1.0);
                                let t: Vec<String> = tiers
                                    .iter()
                                    .map(|t| {
                                        format!("{} above {} input tokens", t.price * f, t.start)
                                    })
                                    .collect();
                                writeln!(out, "  {:<24} {} ({})", u.key(), base * f, t.join(", "))
                            }
                        };
                    }
                }
                let _ = writeln!(
                    out,
                    "unpriced units are billed at the broader unit's rate (cache writes at input, reasoning at output)"
                );
            }
        }
        explain_call_rates(&mut out, &lists, provider, &lower, at);
        out
    }
}

/// The first override in `lists` (in order) covering `model` (lowercased)
/// from `provider` at `at` that sets a per-call rate for `tool`: the rate,
/// and the entry's list and index.
fn override_call_rate(
    lists: &[(List, &[Override])],
    provider: ProviderKind,
    model: &str,
    at: When,
    tool: ServerTool,
) -> Option<(f64, List, usize)> {
    lists.iter().find_map(|&(list, entries)| {
        entries
            .iter()
            .enumerate()
            .filter(|(_, o)| o.covers(provider.config_name(), model, at))
            .find_map(|(i, o)| Some((o.calls.get(tool)?, list, i)))
    })
}

/// The per-call rates of provider-run tools a request would be billed,
/// each with where it comes from: the first override covering the model
/// that sets it (as [`PriceBook::call_rates`] picks), else the built-in rate.
fn explain_call_rates(
    out: &mut String,
    lists: &[(List, &[Override])],
    provider: ProviderKind,
    model: &str,
    at: When,
) {
    let builtin = tools::CallRates::builtin(provider);
    let mut lines = Vec::new();
    for tool in ServerTool::ALL {
        let set = override_call_rate(lists, provider, model, at, tool)
            .map(|(usd, list, i)| (usd, format!("override {}[{i}]", list.label())));
        let rate = set.or_else(|| Some((builtin.get(tool)?, "built-in".to_owned())));
        if let Some((usd, from)) = rate {
            lines.push(format!("  {:<24} {usd} ({from})", tool.as_str()));
        }
    }
    if lines.is_empty() {
        let _ = writeln!(out, "per-call tool rates: none");
        return;
    }
    let _ = writeln!(
        out,
        "per-call tool rates (USD per call, beside the token price):"
    );
    for l in lines {
        let _ = writeln!(out, "{l}");
    }
}

fn describe_table_entry(out: &mut String, r: &Resolved<'_>) {
    let name = r.model.name.as_deref().unwrap_or("");
    let _ = writeln!(out, "table entry: {}/{} {name}", r.provider.id, r.model.id);
    match (r.dated.when.start, r.dated.when.daily) {
        (None, None) => {
            let _ = writeln!(out, "dated price: the entry's only or first price");
        }
        (start, daily) => {
            let _ = writeln!(
                out,
                "dated price: {}{}",
                start.map(|d| format!("from {d}")).unwrap_or_default(),
                daily
                    .map(|(a, b)| format!(
                        " daily {:02}:{:02}-{:02}:{:02} UTC",
                        a / 60,
                        a % 60,
                        b / 60,
                        b % 60
                    ))
                    .unwrap_or_default()
            );
        }
    }
    if r.model.prices.len() > 1 {
        let _ = writeln!(
            out,
            "the entry has {} dated prices; the last one in force at the request's time applies",
            r.model.prices.len()
        );
    }
    for (i, v) in r.model.variants.iter().enumerate() {
        if r.variants & (1 << i.min(63)) != 0 {
            let when: Vec<String> = v.when.iter().map(|(k, v)| format!("{k}={v}")).collect();
            let _ = writeln!(out, "variant applied: {}", when.join(", "));
        }
    }
}

/// The variant context for a service tier.
fn context(tier: Option<ServiceTier>) -> Context<'static> {
    match tier {
        Some(ServiceTier::Batch) => Context {
            service_tier: None,
            processing: Some("batch"),
        },
        Some(t) => Context {
            service_tier: Some(t.as_str()),
            processing: None,
        },
        None => Context::default(),
    }
}

/// Token totals to bill, or `None` when nothing was counted at all.
fn counts(r: &Request<'_>) -> Option<Counts> {
    let u = r.usage;
    let output = u.output.or(r.counted_output);
    if u.input.is_none() && output.is_none() {
        return None;
    }
    let mut c = Counts::default();
    let set = |c: &mut Counts, unit, v: Option<u64>| c.set(unit, v.unwrap_or(0));
    set(&mut c, Unit::Input, u.input);
    set(&mut c, Unit::CacheRead, u.cache_read);
    set(&mut c, Unit::CacheWrite, u.cache_creation);
    set(&mut c, Unit::CacheWrite5m, u.cache_write_5m);
    set(&mut c, Unit::CacheWrite1h, u.cache_write_1h);
    set(&mut c, Unit::InputAudio, u.input_audio);
    set(&mut c, Unit::CacheAudioRead, u.cache_read_audio);
    set(&mut c, Unit::Output, output);
    set(&mut c, Unit::OutputAudio, u.output_audio);
    set(&mut c, Unit::OutputReasoning, u.reasoning);
    Some(c)
}

/// `name` in lowercase, borrowed when it already is.
pub(crate) fn lowercase(name: &str) -> std::borrow::Cow<'_, str> {
    if name.bytes().any(|b| b.is_ascii_uppercase()) || !name.is_ascii() {
        std::borrow::Cow::Owned(name.to_lowercase())
    } else {
        std::borrow::Cow::Borrowed(name)
    }
}

#[cfg(test)]
mod tests;
