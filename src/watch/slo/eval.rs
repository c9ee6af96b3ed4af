//! The evaluator: `[[slo]]` rules and live `Snapshot`s in; breach and
//! recovery transitions (per SLO, model and objective) out. Pure: no I/O,
//! no clock (times come from the snapshot), so tests drive it with
//! hand-built snapshots.

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::super::live::{SeriesFilter, Snapshot, WindowStats};
use crate::config::SloConfig;

/// One objective of an SLO.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Objective {
    /// TTFT p95 above the threshold (seconds).
    TtftP95,
    /// Decode tokens/s p50 below the threshold.
    DecodeTpsP50Min,
    /// Largest stall above the threshold (seconds).
    MaxStall,
    /// errors / requests above the threshold.
    ErrorRatio,
    /// Decode tokens/s p50 more than a share below its own baseline.
    DecodeTpsDrop,
}

impl Objective {
    /// Every objective, in config order.
    pub const ALL: [Objective; 5] = [
        Objective::TtftP95,
        Objective::DecodeTpsP50Min,
        Objective::MaxStall,
        Objective::ErrorRatio,
        Objective::DecodeTpsDrop,
    ];

    /// The config key, also used in logs, metrics and events.
    pub fn as_str(self) -> &'static str {
        match self {
            Objective::TtftP95 => "ttft_p95",
            Objective::DecodeTpsP50Min => "decode_tps_p50_min",
            Objective::MaxStall => "max_stall",
            Objective::ErrorRatio => "error_ratio",
            Objective::DecodeTpsDrop => "decode_tps_drop",
        }
    }

    /// Unit of the observed value and threshold.
    pub fn unit(self) -> &'static str {
        match self {
            Objective::TtftP95 | Objective::MaxStall => "s",
            Objective::DecodeTpsP50Min | Objective::DecodeTpsDrop => "tokens/s",
            Objective::ErrorRatio => "ratio",
        }
    }
}

/// A breach starts or ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// The objective went from met to breached.
    Breach,
    /// The objective went from breached to met.
    Recovery,
}

impl Change {
    /// `breach` or `recovery`, as webhooks and logs spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Change::Breach => "breach",
            Change::Recovery => "recovery",
        }
    }
}

/// One objective of one group changing state.
#[derive(Debug, Clone, PartialEq)]
pub struct Transition {
    /// Whether the objective became breached or met.
    pub change: Change,
    /// Name of the SLO.
    pub slo: Arc<str>,
    /// The objective that changed state.
    pub objective: Objective,
    /// The SLO's route; `None` = every route.
    pub route: Option<Arc<str>>,
    /// The concrete model (SLOs with a `model` glob); `None` = the SLO's
    /// whole selection.
    pub model: Option<Arc<str>>,
    /// Observed value over the window (for `decode_tps_drop`: the p50).
    pub observed: f64,
    /// The objective's limit (for `decode_tps_drop`: baseline × (1 − share)).
    pub threshold: f64,
    /// `decode_tps_drop` only: the p50 over the baseline window.
    pub baseline: Option<f64>,
    /// Window the observed value covers.
    pub window: Duration,
    /// `decode_tps_drop` only.
    pub baseline_window: Option<Duration>,
    /// Wall-clock time of the snapshot that showed the change.
    pub at: SystemTime,
}

/// A compiled `[[slo]]`.
#[derive(Debug, Clone)]
pub struct Rule {
    /// Name of the SLO.
    pub name: Arc<str>,
    /// The route the SLO applies to; `None` = every route.
    pub route: Option<Arc<str>>,
    /// Model glob.
    model: Option<String>,
    window: Duration,
    baseline_window: Duration,
    min_requests: u64,
    /// Objective and threshold (seconds, tokens/s, ratio or share).
    checks: Vec<(Objective, f64)>,
}

impl Rule {
    /// Compile a validated `[[slo]]` entry.
    pub fn new(c: &SloConfig) -> Rule {
        let secs = |d: Option<Duration>| d.map(|d| d.as_secs_f64());
        let checks = [
            (Objective::TtftP95, secs(c.ttft_p95)),
            (Objective::DecodeTpsP50Min, c.decode_tps_p50_min),
            (Objective::MaxStall, secs(c.max_stall)),
            (Objective::ErrorRatio, c.error_ratio),
            (Objective::DecodeTpsDrop, c.decode_tps_drop),
        ];
        Rule {
            name: Arc::from(c.name.as_str()),
            route: c.route.as_deref().map(Arc::from),
            model: c.model.clone(),
            window: c.window,
            baseline_window: c.baseline_window,
            min_requests: c.min_requests,
            checks: checks
                .into_iter()
                .filter_map(|(o, t)| Some((o, t?)))
                .collect(),
        }
    }

    /// The objectives this SLO sets.
    pub fn objectives(&self) -> impl Iterator<Item = Objective> + '_ {
        self.checks.iter().map(|(o, _)| *o)
    }

    fn filter(&self) -> SeriesFilter {
        match &self.route {
            Some(r) => SeriesFilter::any().route(&**r),
            None => SeriesFilter::any(),
        }
    }

    /// The groups judged separately: one per concrete model matching the
    /// glob (requests without a model are not in a model glob's scope),
    /// or the whole selection when the SLO names no model.
    fn groups(&self, snap: &Snapshot) -> Vec<(Option<Arc<str>>, SeriesFilter)> {
        let Some(glob) = &self.model else {
            return vec![(None, self.filter())];
        };
        let scope = self.filter().model(glob);
        let models: BTreeSet<Arc<str>> = snap
            .keys()
            .filter(|k| scope.matches(k))
            .filter_map(|k| k.model.clone())
            .collect();
        models
            .into_iter()
            .map(|m| {
                let f = self.filter().model_exact(&m);
                (Some(m), f)
            })
            .collect()
    }
}

/// One check's reading over a window.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Reading {
    observed: f64,
    threshold: f64,
    baseline: Option<f64>,
    breached: bool,
}

/// Group state key: rule index, model (`None` = whole selection), objective.
type StateKey = (usize, Option<Arc<str>>, Objective);

/// Holds each rule's breached groups; turns snapshots into transitions.
#[derive(Debug)]
pub struct Evaluator {
    rules: Vec<Rule>,
    breached: BTreeSet<StateKey>,
}

impl Evaluator {
    /// An evaluator for `slos`, with nothing breached yet.
    pub fn new(slos: &[SloConfig]) -> Evaluator {
        Evaluator {
            rules: slos.iter().map(Rule::new).collect(),
            breached: BTreeSet::new(),
        }
    }

    /// The compiled rules, in config order.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// Judge every rule's groups on `snap`; return the state changes.
    /// A group with thin data (fewer than `min_requests` requests, or
    /// values for a quantile) keeps its state: no data is not a recovery.
    pub fn evaluate(&mut self, snap: &Snapshot) -> Vec<Transition> {
        let at = UNIX_EPOCH + Duration::from_millis(snap.generated_at_ms);
        let mut out = Vec::new();
        for (i, rule) in self.rules.iter().enumerate() {
            for (model, filter) in rule.groups(snap) {
                let w = snap.window(&filter, rule.window);
                if w.requests < rule.min_requests {
                    continue;
                }
                let mut base = None;
                for &(objective, limit) in &rule.checks {
                    let baseline = || snap.window(&filter, rule.baseline_window);
                    let Some(r) = read(rule, objective, limit, &w, &mut base, baseline) else {
                        continue;
                    };
                    let key = (i, model.clone(), objective);
                    let was = self.breached.contains(&key);
                    let change = match (was, r.breached) {
                        (false, true) => Change::Breach,
                        (true, false) => Change::Recovery,
                        _ => continue,
                    };
                    if r.breached {
                        self.breached.insert(key);
                    } else {
                        self.breached.remove(&key);
                    }
                    let drop = objective == Objective::DecodeTpsDrop;
                    out.push(Transition {
                        change,
                        slo: rule.name.clone(),
                        objective,
                        route: rule.route.clone(),
                        model: model.clone(),
                        observed: r.observed,
                        threshold: r.threshold,
                        baseline: r.baseline,
                        window: rule.window,
                        baseline_window: drop.then_some(rule.baseline_window),
                        at,
                    });
                }
            }
        }
        out
    }

    /// Groups of rule `rule` currently breaching `objective`.
    pub fn breached_count(&self, rule: usize, objective: Objective) -> usize {
        self.breached
            .iter()
            .filter(|(r, _, o)| *r == rule && *o == objective)
            .count()
    }

    /// What the request path marks: each breached (rule, model) once.
    pub fn marks(&self) -> Vec<Mark> {
        let mut seen = HashSet::new();
        self.breached
            .iter()
            .filter(|(r, m, _)| seen.insert((*r, m.clone())))
            .map(|(r, m, _)| Mark {
                slo: self.rules[*r].name.clone(),
                route: self.rules[*r].route.clone(),
                model: m.clone(),
            })
            .collect()
    }
}

/// A breached SLO group as requests are matched against it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mark {
    /// Name of the breached SLO.
    pub slo: Arc<str>,
    /// `None` = every route.
    pub route: Option<Arc<str>>,
    /// `Some` = only this model; `None` = every model (the SLO names none).
    pub model: Option<Arc<str>>,
}

impl Mark {
    /// Whether a request on `route` for `model` falls in this group.
    pub fn matches(&self, route: &str, model: Option<&str>) -> bool {
        self.route.as_deref().is_none_or(|r| r == route)
            && self.model.as_deref().is_none_or(|m| Some(m) == model)
    }
}

/// One objective over the window; `None` = no verdict (thin data, or no
/// value of that kind, e.g. no streams for `max_stall`).
fn read(
    rule: &Rule,
    objective: Objective,
    limit: f64,
    w: &WindowStats,
    base: &mut Option<WindowStats>,
    baseline: impl FnOnce() -> WindowStats,
) -> Option<Reading> {
    let enough = |n: u64| n >= rule.min_requests;
    let plain = |observed: f64, breached: bool| Reading {
        observed,
        threshold: limit,
        baseline: None,
        breached,
    };
    match objective {
        Objective::TtftP95 => {
            let v = w.ttft.quantile(0.95).filter(|_| enough(w.ttft.count()))?;
            Some(plain(v, v > limit))
        }
        Objective::DecodeTpsP50Min => {
            let v = w
                .decode_tps
                .quantile(0.5)
                .filter(|_| enough(w.decode_tps.count()))?;
            Some(plain(v, v < limit))
        }
        Objective::MaxStall => w.max_stall.map(|v| plain(v, v > limit)),
        Objective::ErrorRatio => w.error_ratio().map(|v| plain(v, v > limit)),
        Objective::DecodeTpsDrop => {
            let now = w
                .decode_tps
                .quantile(0.5)
                .filter(|_| enough(w.decode_tps.count()))?;
            let b = base.get_or_insert_with(baseline);
            // The baseline must hold history beyond the window itself.
            let older = b.decode_tps.count().saturating_sub(w.decode_tps.count());
            let reference = b.decode_tps.quantile(0.5).filter(|_| enough(older))?;
            let floor = reference * (1.0 - limit);
            Some(Reading {
                observed: now,
                threshold: floor,
                baseline: Some(reference),
                breached: now < floor,
            })
        }
    }
}
