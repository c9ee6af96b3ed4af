//! The `/api/compare` answer: the sides available, or for chosen sides
//! each cell's figures, the ratios to the first side and what differs
//! between the sides (docs/COMPARING.md gives the shape).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde::Serialize;

use super::window::{FIGURES, Spread, Summary};
use super::{Compare, FIGURE_NAMES, PROMPT_SIZES, Served, SideKey};

/// The answer.
#[derive(Debug, Serialize)]
pub struct Report {
    /// `compare.window` in seconds.
    pub window_seconds: f64,
    /// `compare.windows`.
    pub windows: usize,
    /// `compare.min_requests`.
    pub min_requests: u64,
    /// `compare.min_windows` (at most `windows`).
    pub min_windows: usize,
    /// The load classes' labels, in order.
    pub load_classes: Vec<String>,
    /// The sides asked for, in order; or every side seen.
    pub sides: Vec<SideInfo>,
    /// At most one thing differs between the sides (only when sides
    /// were asked for).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub like_with_like: Option<bool>,
    /// What differs between the sides (only when sides were asked for).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub differences: Option<Vec<String>>,
    /// The cells (only when sides were asked for).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cells: Option<Vec<CellReport>>,
}

/// One side and what served it.
#[derive(Debug, Serialize)]
pub struct SideInfo {
    /// The route's name.
    pub route: String,
    /// The model as the requests named it (capped).
    pub model: String,
    /// Requests recorded since start-up.
    pub requests: u64,
    /// What served it.
    pub served_by: ServedBy,
}

/// What served a side.
#[derive(Debug, Default, Clone, PartialEq, Serialize)]
pub struct ServedBy {
    /// The model (version) the latest response named.
    pub response_model: Option<String>,
    /// The latest response head's `x-served-by` or `server` header.
    pub serving_software: Option<String>,
    /// The latest service tier reported or asked for.
    pub service_tier: Option<&'static str>,
    /// The route's labels (`routes[].labels`).
    pub labels: BTreeMap<String, String>,
}

/// One (prompt size, load class) cell.
#[derive(Debug, Serialize)]
pub struct CellReport {
    /// `tokentap.prompt.size_class`.
    pub prompt_size: &'static str,
    /// `tokentap.load_class`.
    pub load_class: String,
    /// Each side's figures, in the sides' order.
    pub sides: Vec<SideCell>,
    /// Second side / first side; `None` with fewer than two sides.
    pub ratio: Option<Ratios>,
    /// Each further side / the first side.
    pub ratios: Vec<Ratios>,
}

/// One side's figures in one cell.
#[derive(Debug, Serialize)]
pub struct SideCell {
    /// Requests in the live windows.
    pub requests: u64,
    /// Live windows with a request.
    pub windows: usize,
    /// At least `min_requests` requests and `min_windows` windows.
    pub enough_data: bool,
    #[serde(flatten)]
    /// Per figure name; `None` without a value.
    pub figures: BTreeMap<&'static str, Option<Figure>>,
}

/// A figure's median of window medians and their range.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Figure {
    /// Median of the window medians.
    pub median: f64,
    /// Smallest window median.
    pub min: f64,
    /// Largest window median.
    pub max: f64,
}

/// Ratio per figure (`None` unless both sides have enough data and a value).
pub type Ratios = BTreeMap<&'static str, Option<f64>>;

/// Why a `side` parameter is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadSide(pub String);

/// `route:model` (the first `:` splits: a model name may hold one).
pub fn parse_side(s: &str) -> Result<(String, String), BadSide> {
    match s.split_once(':') {
        Some((route, model)) if !route.is_empty() && !model.is_empty() => {
            Ok((route.to_owned(), model.to_owned()))
        }
        _ => Err(BadSide(format!(
            "side `{s}` is not route:model (e.g. side=openai:gpt-4o)"
        ))),
    }
}

impl Compare {
    /// The answer for `sides` (`route`, `model`) in order; none = the list
    /// of sides available.
    pub fn report(&self, sides: &[(String, String)]) -> Report {
        self.report_at(self.now(), sides)
    }

    /// `report` at window number `now`.
    pub(super) fn report_at(&self, now: u64, sides: &[(String, String)]) -> Report {
        let s = &self.settings;
        let served_by = |served: &Served| ServedBy {
            response_model: served.response_model.as_deref().map(str::to_owned),
            serving_software: served.software.as_deref().map(str::to_owned),
            service_tier: served.tier,
            labels: served
                .labels
                .iter()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect(),
        };
        let mut report = Report {
            window_seconds: s.window.as_secs_f64(),
            windows: s.windows,
            min_requests: s.min_requests,
            min_windows: s.min_windows.min(s.windows),
            load_classes: (0..self.classes.len())
                .map(|i| self.classes.label(i).to_string())
                .collect(),
            sides: Vec::new(),
            like_with_like: None,
            differences: None,
            cells: None,
        };
        if sides.is_empty() {
            for key in self.keys() {
                if let Some(snap) = self.snapshot(&key, now) {
                    report.sides.push(SideInfo {
                        route: key.0.to_string(),
                        model: key.1.to_string(),
                        requests: snap.requests,
                        served_by: served_by(&snap.served),
                    });
                }
            }
            return report;
        }
        let snaps: Vec<_> = sides
            .iter()
            .map(|(route, model)| {
                let key: SideKey = (Arc::from(route.as_str()), Arc::from(model.as_str()));
                self.snapshot(&key, now)
            })
            .collect();
        for ((route, model), snap) in sides.iter().zip(&snaps) {
            report.sides.push(SideInfo {
                route: route.clone(),
                model: model.clone(),
                requests: snap.as_ref().map_or(0, |s| s.requests),
                served_by: snap
                    .as_ref()
                    .map_or_else(ServedBy::default, |snap| served_by(&snap.served)),
            });
        }
        let fields: Vec<(&str, &ServedBy)> = report
            .sides
            .iter()
            .map(|s| (s.model.as_str(), &s.served_by))
            .collect();
        let (differences, count) = differences(&fields);
        report.like_with_like = Some(count <= 1);
        report.differences = Some(differences);
        report.cells = Some(self.cells(&snaps));
        report
    }

    /// Every cell any of the sides has a request in, in class order.
    fn cells(&self, snaps: &[Option<super::SideSnapshot>]) -> Vec<CellReport> {
        let s = &self.settings;
        let min_windows = s.min_windows.min(s.windows);
        let loads = self.classes.len();
        let mut out = Vec::new();
        for (p, prompt) in PROMPT_SIZES.iter().enumerate() {
            for load in 0..loads {
                let index = p * loads + load;
                let summaries: Vec<Option<&Summary>> = snaps
                    .iter()
                    .map(|snap| snap.as_ref().and_then(|s| s.cells.get(index)?.as_ref()))
                    .collect();
                if summaries.iter().flatten().all(|s| s.requests == 0) {
                    continue;
                }
                let sides: Vec<SideCell> = summaries
                    .iter()
                    .map(|summary| {
                        let mut c = side_cell(*summary);
                        c.enough_data = c.requests >= s.min_requests && c.windows >= min_windows;
                        c
                    })
                    .collect();
                let ratios: Vec<Ratios> = sides[1..].iter().map(|b| ratios(&sides[0], b)).collect();
                out.push(CellReport {
                    prompt_size: prompt.as_str(),
                    load_class: self.classes.label(load).to_string(),
                    ratio: ratios.first().cloned(),
                    ratios,
                    sides,
                });
            }
        }
        out
    }
}

/// One side's cell from its summary (`None`: no request in it); not yet
/// judged for enough data.
fn side_cell(summary: Option<&Summary>) -> SideCell {
    let figures = FIGURE_NAMES
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let f = summary
                .and_then(|s| s.figures[i])
                .map(|Spread { median, min, max }| Figure { median, min, max });
            (*name, f)
        })
        .collect();
    SideCell {
        requests: summary.map_or(0, |s| s.requests),
        windows: summary.map_or(0, |s| s.windows),
        enough_data: false,
        figures,
    }
}

/// `b / a` per figure, where both have enough data and a positive value.
fn ratios(a: &SideCell, b: &SideCell) -> Ratios {
    let both = a.enough_data && b.enough_data;
    FIGURE_NAMES
        .iter()
        .map(|name| {
            let r = match (a.figures.get(name), b.figures.get(name)) {
                (Some(Some(x)), Some(Some(y))) if both && x.median > 0.0 => {
                    Some(y.median / x.median)
                }
                _ => None,
            };
            (*name, r)
        })
        .collect()
}

/// What differs between the sides (`(requested model, served by)`), as
/// shown, and how many fields that is (each label key counts as one).
pub fn differences(sides: &[(&str, &ServedBy)]) -> (Vec<String>, usize) {
    let mut out = Vec::new();
    let mut count = 0;
    let differ = |f: &dyn Fn(&(&str, &ServedBy)) -> String| {
        let set: BTreeSet<String> = sides.iter().map(f).collect();
        set.len() > 1
    };
    let models_differ = differ(&|s| s.0.to_owned());
    if models_differ {
        out.push("models differ".to_owned());
        count += 1;
    } else if differ(&|s| format!("{:?}", s.1.response_model)) {
        out.push("model versions differ".to_owned());
        count += 1;
    }
    if differ(&|s| format!("{:?}", s.1.serving_software)) {
        out.push("serving software differs".to_owned());
        count += 1;
    }
    if differ(&|s| format!("{:?}", s.1.service_tier)) {
        out.push("service tiers differ".to_owned());
        count += 1;
    }
    let keys: BTreeSet<&String> = sides.iter().flat_map(|s| s.1.labels.keys()).collect();
    let differing: Vec<&str> = keys
        .into_iter()
        .filter(|k| differ(&|s| format!("{:?}", s.1.labels.get(*k))))
        .map(String::as_str)
        .collect();
    if !differing.is_empty() {
        count += differing.len();
        out.push(format!("labels differ: {}", differing.join(", ")));
    }
    debug_assert_eq!(FIGURES, FIGURE_NAMES.len());
    (out, count)
}
