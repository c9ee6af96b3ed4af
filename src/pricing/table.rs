//! The embedded price table: the converted genai-prices snapshot
//! (`data/prices/genai-prices.json`) in; per provider, models indexed for
//! lookup by name, with their dated prices and request variants, out.
//! Parsed and indexed once per process.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use rustc_hash::FxHashMap;
use serde::Deserialize;

use super::date::{Day, When, parse_minute};
use super::rates::{Rate, Rates, Tier, Unit};

/// The snapshot, as converted by `scripts/lib/prices_convert.py`.
static SNAPSHOT: &[u8] = include_bytes!("../../data/prices/genai-prices.json");

/// Where the table came from (shown by `tokentap price` and `/config`).
#[derive(Debug, Clone, Deserialize)]
pub struct Source {
    /// Package name (`genai-prices`).
    pub package: String,
    /// Pinned package version.
    pub version: String,
    /// Its licence.
    pub license: String,
    /// Where the data is published.
    pub url: String,
}

#[derive(Deserialize)]
struct RawTable {
    source: Source,
    providers: Vec<RawProvider>,
}

#[derive(Deserialize)]
struct RawProvider {
    id: String,
    name: String,
    #[serde(default)]
    fallback: Vec<String>,
    models: Vec<RawModel>,
}

#[derive(Deserialize)]
struct RawModel {
    id: String,
    #[serde(rename = "match")]
    matcher: RawClause,
    #[serde(default)]
    name: Option<String>,
    prices: Vec<RawPrices>,
    #[serde(default)]
    variants: Vec<RawVariant>,
}

#[derive(Deserialize)]
struct RawPrices {
    #[serde(default)]
    start: Option<String>,
    #[serde(default)]
    daily: Option<[String; 2]>,
    prices: HashMap<String, RawRate>,
}

#[derive(Deserialize)]
struct RawVariant {
    when: HashMap<String, String>,
    #[serde(default)]
    start: Option<String>,
    prices: HashMap<String, RawRate>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum RawRate {
    Flat(f64),
    Tiered { base: f64, tiers: Vec<RawTier> },
}

#[derive(Deserialize)]
struct RawTier {
    start: u64,
    price: f64,
}

#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
enum RawClause {
    Equals(String),
    StartsWith(String),
    EndsWith(String),
    Contains(String),
    Regex(String),
    Not(Box<RawClause>),
    Or(Vec<RawClause>),
    And(Vec<RawClause>),
}

/// A model-name test, on the lowercased name.
#[derive(Debug)]
enum Clause {
    Equals(Box<str>),
    StartsWith(Box<str>),
    EndsWith(Box<str>),
    Contains(Box<str>),
    Regex(regex::Regex),
    Not(Box<Clause>),
    Or(Box<[Clause]>),
    And(Box<[Clause]>),
}

impl Clause {
    fn matches(&self, name: &str) -> bool {
        match self {
            Clause::Equals(s) => name == &**s,
            Clause::StartsWith(s) => name.starts_with(&**s),
            Clause::EndsWith(s) => name.ends_with(&**s),
            Clause::Contains(s) => name.contains(&**s),
            Clause::Regex(r) => r.is_match(name),
            Clause::Not(c) => !c.matches(name),
            Clause::Or(cs) => cs.iter().any(|c| c.matches(name)),
            Clause::And(cs) => cs.iter().all(|c| c.matches(name)),
        }
    }

    /// The exact names this clause accepts on its own (top-level `equals`,
    /// through `or`), and whether it accepts anything else too.
    fn exact_names<'a>(&'a self, out: &mut Vec<&'a str>) -> bool {
        match self {
            Clause::Equals(s) => {
                out.push(s);
                false
            }
            Clause::Or(cs) => {
                // Every branch, not the first that accepts more: all exact
                // names must reach the index.
                let mut other = false;
                for c in cs.iter() {
                    other |= c.exact_names(out);
                }
                other
            }
            _ => true,
        }
    }
}

/// When a price applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Constraint {
    /// From this UTC day on.
    pub start: Option<Day>,
    /// Only between these minutes of the UTC day (end exclusive; may wrap
    /// midnight): off-peak prices.
    pub daily: Option<(u16, u16)>,
}

impl Constraint {
    fn active(&self, at: When) -> bool {
        let from = self.start.is_none_or(|d| at.day >= d);
        let window = self.daily.is_none_or(|(a, b)| {
            if b < a {
                at.minute >= a || at.minute < b
            } else {
                (a..b).contains(&at.minute)
            }
        });
        from && window
    }
}

/// One dated price set of a model.
#[derive(Debug)]
pub struct Dated {
    /// When it applies (always, when empty).
    pub when: Constraint,
    /// The rates.
    pub rates: Rates,
}

/// Prices that replace some of the standard ones for requests with a
/// given context (`service_tier = "flex"`, `processing = "batch"`).
#[derive(Debug)]
pub struct Variant {
    /// Context keys and the values they must have.
    pub when: Box<[(Box<str>, Box<str>)]>,
    /// From this UTC day on, when set.
    pub start: Option<Day>,
    /// The rates it replaces.
    pub rates: Rates,
}

/// One priced model.
#[derive(Debug)]
pub struct Model {
    /// The table's id for it.
    pub id: Box<str>,
    /// Display name.
    pub name: Option<Box<str>>,
    matcher: Clause,
    /// Dated prices; the last active one applies, else the first.
    pub prices: Box<[Dated]>,
    /// Request variants, first match per unit wins.
    pub variants: Box<[Variant]>,
    /// `provider/id`, the entry's name on every span it prices (shared,
    /// not formatted per request).
    pub reference: Arc<str>,
}

/// The request context variants are chosen by.
#[derive(Debug, Clone, Copy, Default)]
pub struct Context<'a> {
    /// `service_tier` (`default`, `flex`, `priority`).
    pub service_tier: Option<&'a str>,
    /// `processing` (`batch`).
    pub processing: Option<&'a str>,
}

impl Context<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        match key {
            "service_tier" => self.service_tier,
            "processing" => self.processing,
            _ => None,
        }
    }
}

/// What a lookup chose, to price and to explain.
#[derive(Debug, Clone, Copy)]
pub struct Resolved<'t> {
    /// The model entry.
    pub model: &'t Model,
    /// The provider the entry belongs to (may be a fallback provider).
    pub provider: &'t Provider,
    /// The dated price set in force.
    pub dated: &'t Dated,
    /// The variants applied, by index into `model.variants` (bit set).
    pub variants: u64,
    /// The rates after variants.
    pub rates: Rates,
}

impl Model {
    /// The model's rates at `at` with `cx`'s variants (none when `cx` is
    /// `None`: fallback providers' variants do not apply).
    fn resolve<'t>(
        &'t self,
        provider: &'t Provider,
        at: When,
        cx: Option<&Context<'_>>,
    ) -> Option<Resolved<'t>> {
        let dated = self
            .prices
            .iter()
            .rev()
            .find(|p| p.when.active(at))
            .or_else(|| self.prices.first())?;
        let mut rates = dated.rates;
        let mut used = 0u64;
        if let Some(cx) = cx {
            let mut seen = Rates::default();
            for (i, v) in self.variants.iter().enumerate() {
                let active = v.start.is_none_or(|d| at.day >= d)
                    && v.when.iter().all(|(k, val)| cx.get(k) == Some(&**val));
                if !active {
                    continue;
                }
                // First variant to price a unit wins it.
                let mut fresh = Rates::default();
                for u in Unit::ALL {
                    if let (Some(r), None) = (v.rates.get(u), seen.get(u)) {
                        fresh.set(u, r);
                    }
                }
                if !fresh.is_empty() {
                    used |= 1 << i.min(63);
                    seen = seen.overlay(&fresh);
                }
            }
            rates = rates.overlay(&seen);
        }
        Some(Resolved {
            model: self,
            provider,
            dated,
            variants: used,
            rates,
        })
    }
}

/// One provider's models.
#[derive(Debug)]
pub struct Provider {
    /// The table's provider id (`openai`, `google`, `aws`).
    pub id: Box<str>,
    /// Display name.
    pub name: Box<str>,
    /// Providers whose models this one also serves (Azure: OpenAI's).
    fallback: Box<[usize]>,
    /// Models in table order (the first match wins).
    pub models: Box<[Model]>,
    /// Exact lowercased names → the first model accepting each, patterns
    /// included (settled when the table is indexed). Fx, not SipHash: the
    /// keys are the table's own, so a peer's name can only look up.
    exact: FxHashMap<Box<str>, u32>,
    /// Models whose match accepts more than exact names, ascending.
    scan: Box<[u32]>,
}

impl Provider {
    /// The first model (in table order) whose match accepts `name`
    /// (lowercased): one hash lookup for a name the table spells out,
    /// else the patterns in order.
    fn find(&self, name: &str) -> Option<&Model> {
        let i = match self.exact.get(name) {
            Some(&i) => i,
            None => self.first_pattern(name, u32::MAX)?,
        };
        Some(&self.models[i as usize])
    }

    /// The first model before index `before` whose pattern accepts `name`.
    fn first_pattern(&self, name: &str, before: u32) -> Option<u32> {
        self.scan
            .iter()
            .take_while(|i| **i < before)
            .find(|i| self.models[**i as usize].matcher.matches(name))
            .copied()
    }
}

/// The whole table, indexed.
#[derive(Debug)]
pub struct Table {
    /// Where it came from.
    pub source: Source,
    /// Providers in table order.
    pub providers: Box<[Provider]>,
}

/// The table could not be read (a broken snapshot or a bad regex in it).
#[derive(Debug, Clone, thiserror::Error)]
#[error("price table: {0}")]
pub struct TableError(pub String);

impl Table {
    /// The embedded snapshot, parsed and indexed on first use.
    pub fn embedded() -> Result<&'static Table, TableError> {
        static TABLE: OnceLock<Result<Table, TableError>> = OnceLock::new();
        TABLE
            .get_or_init(|| Table::parse(SNAPSHOT))
            .as_ref()
            .map_err(Clone::clone)
    }

    /// Parse and index a snapshot.
    pub fn parse(bytes: &[u8]) -> Result<Table, TableError> {
        let raw: RawTable = serde_json::from_slice(bytes)
            .map_err(|e| TableError(format!("not a price snapshot: {e}")))?;
        let ids: Vec<String> = raw.providers.iter().map(|p| p.id.clone()).collect();
        let providers = raw
            .providers
            .into_iter()
            .map(|p| provider(p, &ids))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Table {
            source: raw.source,
            providers: providers.into(),
        })
    }

    /// The provider with table id `id`.
    pub fn provider(&self, id: &str) -> Option<&Provider> {
        self.providers.iter().find(|p| &*p.id == id)
    }

    /// Find `model` (lowercased) under provider `id`, then under its
    /// fallback providers, and resolve its rates at `at`.
    pub fn lookup(
        &self,
        id: &str,
        model: &str,
        at: When,
        cx: &Context<'_>,
    ) -> Option<Resolved<'_>> {
        let p = self.provider(id)?;
        if let Some(m) = find_with_dates(p, model) {
            return m.resolve(p, at, Some(cx));
        }
        p.fallback.iter().find_map(|i| {
            let f = &self.providers[*i];
            find_with_dates(f, model)?.resolve(f, at, None)
        })
    }
}

/// `find`, then again with a compact date suffix (`-20251211`) written the
/// dashed way (`-2025-12-11`), as some clients and routers send it.
fn find_with_dates<'p>(p: &'p Provider, model: &str) -> Option<&'p Model> {
    p.find(model).or_else(|| {
        let dashed = dash_compact_date(model)?;
        p.find(&dashed)
    })
}

fn dash_compact_date(model: &str) -> Option<String> {
    let b = model.as_bytes();
    (0..b.len().saturating_sub(8)).find_map(|i| {
        let digits = b.get(i + 1..i + 9)?;
        let after = b.get(i + 9).copied();
        let ok = b[i] == b'-'
            && digits.iter().all(u8::is_ascii_digit)
            && digits.starts_with(b"20")
            && matches!(after, None | Some(b'-' | b':'));
        let s = std::str::from_utf8(digits).ok()?;
        let day = Day::parse(&format!("{}-{}-{}", &s[0..4], &s[4..6], &s[6..8]))?;
        ok.then(|| format!("{}-{day}{}", &model[..i], &model[i + 9..]))
    })
}

fn provider(p: RawProvider, ids: &[String]) -> Result<Provider, TableError> {
    let fallback = p
        .fallback
        .iter()
        .filter_map(|f| ids.iter().position(|id| id == f))
        .collect::<Vec<_>>();
    let models = p
        .models
        .into_iter()
        .map(|m| model(&p.id, m).map_err(|e| TableError(format!("{}: {e}", p.id))))
        .collect::<Result<Vec<_>, _>>()?;
    let mut exact = FxHashMap::<Box<str>, u32>::default();
    let mut scan = Vec::new();
    for (i, m) in models.iter().enumerate() {
        let mut names = Vec::new();
        if m.matcher.exact_names(&mut names) {
            scan.push(i as u32);
        }
        for n in names {
            exact.entry(n.into()).or_insert(i as u32);
        }
    }
    let mut p = Provider {
        id: p.id.into(),
        name: p.name.into(),
        fallback: fallback.into(),
        models: models.into(),
        exact,
        scan: scan.into(),
    };
    // A pattern earlier in the table wins over a later exact name: settle
    // that now, so a lookup by exact name is one hash lookup.
    let earlier: Vec<(Box<str>, u32)> = p
        .exact
        .iter()
        .filter_map(|(name, &i)| Some((name.clone(), p.first_pattern(name, i)?)))
        .collect();
    p.exact.extend(earlier);
    Ok(p)
}

fn model(provider: &str, m: RawModel) -> Result<Model, String> {
    let matcher = clause(m.matcher).map_err(|e| format!("{}: {e}", m.id))?;
    let prices = m
        .prices
        .into_iter()
        .map(|p| {
            let start = p.start.as_deref().map(day).transpose()?;
            let daily = match &p.daily {
                Some([a, b]) => Some((minute(a)?, minute(b)?)),
                None => None,
            };
            Ok(Dated {
                when: Constraint { start, daily },
                rates: rates(p.prices)?,
            })
        })
        .collect::<Result<Vec<_>, String>>()
        .map_err(|e| format!("{}: {e}", m.id))?;
    let variants = m
        .variants
        .into_iter()
        .map(|v| {
            Ok(Variant {
                when: v
                    .when
                    .into_iter()
                    .map(|(k, v)| (k.into(), v.into()))
                    .collect(),
                start: v.start.as_deref().map(day).transpose()?,
                rates: rates(v.prices)?,
            })
        })
        .collect::<Result<Vec<_>, String>>()
        .map_err(|e| format!("{}: {e}", m.id))?;
    Ok(Model {
        reference: format!("{provider}/{}", m.id).into(),
        id: m.id.into(),
        name: m.name.map(Into::into),
        matcher,
        prices: prices.into(),
        variants: variants.into(),
    })
}

fn day(s: &str) -> Result<Day, String> {
    Day::parse(s).ok_or_else(|| format!("bad date {s:?}"))
}

fn minute(s: &str) -> Result<u16, String> {
    parse_minute(s).ok_or_else(|| format!("bad time of day {s:?}"))
}

fn clause(c: RawClause) -> Result<Clause, String> {
    Ok(match c {
        RawClause::Equals(s) => Clause::Equals(s.to_lowercase().into()),
        RawClause::StartsWith(s) => Clause::StartsWith(s.to_lowercase().into()),
        RawClause::EndsWith(s) => Clause::EndsWith(s.to_lowercase().into()),
        RawClause::Contains(s) => Clause::Contains(s.to_lowercase().into()),
        RawClause::Regex(r) => Clause::Regex(model_pattern(&r)?),
        RawClause::Not(c) => Clause::Not(Box::new(clause(*c)?)),
        RawClause::Or(cs) => Clause::Or(cs.into_iter().map(clause).collect::<Result<_, _>>()?),
        RawClause::And(cs) => Clause::And(cs.into_iter().map(clause).collect::<Result<_, _>>()?),
    })
}

/// A model-name pattern, with ASCII character classes: model ids are ASCII,
/// and Unicode `\d` (digits of every script) made the table's 47 patterns
/// 1.5 MB of automata resident from start-up. A pattern that needs Unicode
/// (one that could match part of a multi-byte character without it) is
/// built with it.
fn model_pattern(r: &str) -> Result<regex::Regex, String> {
    regex::RegexBuilder::new(r)
        .unicode(false)
        .build()
        .or_else(|_| regex::Regex::new(r))
        .map_err(|e| format!("regex {r:?}: {e}"))
}

fn rates(raw: HashMap<String, RawRate>) -> Result<Rates, String> {
    let mut out = Rates::default();
    for (key, rate) in raw {
        let unit = Unit::from_key(&key).ok_or_else(|| format!("unknown price key {key:?}"))?;
        let rate = match rate {
            RawRate::Flat(p) => Rate::Flat(price(p)?),
            RawRate::Tiered { base, tiers } => {
                let tiers: Vec<Tier> = tiers
                    .into_iter()
                    .map(|t| {
                        Ok(Tier {
                            start: t.start,
                            price: price(t.price)?,
                        })
                    })
                    .collect::<Result<_, String>>()?;
                // Table data lives for the whole process; leaking it once
                // lets rates stay `Copy` (no allocation when resolving).
                Rate::Tiered {
                    base: price(base)?,
                    tiers: Vec::leak(tiers),
                }
            }
        };
        out.set(unit, rate);
    }
    Ok(out)
}

fn price(p: f64) -> Result<f64, String> {
    (p.is_finite() && p >= 0.0)
        .then_some(p)
        .ok_or_else(|| format!("bad price {p}"))
}

#[cfg(test)]
pub(super) mod tests_support {
    /// `model_pattern`, for the module tests.
    pub(in crate::pricing) fn pattern(r: &str) -> Result<regex::Regex, String> {
        super::model_pattern(r)
    }

    /// `dash_compact_date`, for the module tests.
    pub(in crate::pricing) fn dash(model: &str) -> Option<String> {
        super::dash_compact_date(model)
    }

    /// Names `provider` finds a different model for than a walk of every
    /// model in table order (the definition of `find`), as
    /// `(name, found, walked)` model ids. `names` are tried as given and
    /// as every exact name in the table.
    pub(in crate::pricing) fn find_disagreements(
        provider: &super::Provider,
        names: &[&str],
    ) -> Vec<(String, Option<String>, Option<String>)> {
        let id = |m: Option<&super::Model>| m.map(|m| m.id.to_string());
        let exact = provider.exact.keys().map(|k| &**k);
        names
            .iter()
            .copied()
            .chain(exact)
            .filter_map(|name| {
                let found = id(provider.find(name));
                let walked = id(provider.models.iter().find(|m| m.matcher.matches(name)));
                (found != walked).then(|| (name.to_owned(), found, walked))
            })
            .collect()
    }
}
