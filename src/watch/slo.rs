//! Slowdown detection: `[[slo]]` rules and the live statistics' snapshots
//! (one a second) in; on every breach and recovery a log line (target
//! `tokentap::slo`), `tokentap.slo.*` metrics, a mark on the spans of
//! matching requests and, when `[alerts]` is set, a webhook event out.
//!
//! ```text
//! Live ──watch<Arc<Snapshot>>──► evaluator task ──► log, tokentap.slo.breaches, gauge cells
//!                                      │        └──try_send──► webhook task ──POST──► URL
//!                                      └──publish──► Marks ◄── RequestTelemetry::finish (one atomic load)
//! ```
//!
//! * Verdicts: an SLO with a `model` glob is judged once per concrete model
//!   it matches (each model against its own windows and baseline); an SLO
//!   without `model` is judged once over its whole selection. Each
//!   objective has its own state, so a breach and its recovery are reported
//!   per (SLO, model, objective).
//! * Thin data (fewer than `min_requests` requests, or values for a
//!   quantile) gives no verdict and keeps the state: no data is no recovery.
//! * Nothing here runs on the request path except [`Slo::mark`]: one atomic
//!   load while nothing is breached; otherwise one uncontended read lock
//!   to clone an `Arc` (written only on transitions), once per request.

mod eval;
mod webhook;

pub use self::eval::{Change, Evaluator, Mark, Objective, Rule, Transition};
pub use self::webhook::{Backoff, Event, Limiter, Notifier, Offer, Webhook};

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use opentelemetry::metrics::{Counter, Meter, ObservableGauge};
use opentelemetry::{Array, KeyValue, StringValue, Value};
use tokio::sync::watch;

use super::live::{Live, SeriesKey, Snapshot};
use crate::attrs::*;
use crate::config::SloSettings;

/// The running detector's request-side handle.
#[derive(Debug)]
pub struct Slo {
    marks: Arc<Marks>,
    /// Kept so the gauge's callback lives as long as telemetry.
    _gauge: Option<ObservableGauge<u64>>,
}

impl Slo {
    /// Start the evaluator (and the webhook sender) on the current tokio
    /// runtime. `None` without SLOs or without a runtime.
    pub fn start(cfg: &SloSettings, meter: &Meter, has_reader: bool, live: &Live) -> Option<Slo> {
        if cfg.slos.is_empty() {
            return None;
        }
        let rt = tokio::runtime::Handle::try_current().ok()?;
        let eval = Evaluator::new(&cfg.slos);
        let cells = Arc::new(GaugeCells::new(&eval));
        // An observable instrument with no reader only logs an SDK error.
        let gauge = has_reader.then(|| breached_gauge(meter, cells.clone()));
        let marks = Arc::new(Marks::default());
        let webhook = cfg
            .alerts
            .as_ref()
            .and_then(|a| webhook::start(a, webhook::results_counter(meter), &rt));
        let out = Outputs {
            breaches: meter
                .u64_counter(M_SLO_BREACHES)
                .with_unit("{breach}")
                .with_description("SLO objectives that went from met to breached.")
                .build(),
            cells,
            marks: marks.clone(),
            webhook,
        };
        rt.spawn(run(eval, live.subscribe(), out));
        Some(Slo {
            marks,
            _gauge: gauge,
        })
    }

    /// `tokentap.slo.breached = [names]` for a request of `key`, when SLOs
    /// matching its route and model are breached.
    pub fn mark(&self, key: &SeriesKey) -> Option<KeyValue> {
        self.marks.names(&key.route, key.model.as_deref())
    }
}

/// Breached SLO groups, as the request path reads them.
#[derive(Debug, Default)]
struct Marks {
    /// False while nothing is breached: the request path stops here.
    any: AtomicBool,
    set: RwLock<Arc<[Mark]>>,
}

impl Marks {
    fn publish(&self, marks: Vec<Mark>) {
        let any = !marks.is_empty();
        match self.set.write() {
            Ok(mut g) => *g = marks.into(),
            Err(poisoned) => *poisoned.into_inner() = marks.into(),
        }
        self.any.store(any, Ordering::Release);
    }

    fn names(&self, route: &str, model: Option<&str>) -> Option<KeyValue> {
        if !self.any.load(Ordering::Acquire) {
            return None;
        }
        let set = match self.set.read() {
            Ok(g) => g.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        };
        let mut names: Vec<StringValue> = Vec::new();
        for m in set.iter().filter(|m| m.matches(route, model)) {
            let name = StringValue::from(m.slo.clone());
            if !names.contains(&name) {
                names.push(name);
            }
        }
        (!names.is_empty()).then(|| KeyValue::new(SLO_BREACHED, Value::Array(Array::String(names))))
    }
}

/// `tokentap.slo.breached` per (SLO, objective): how many groups breach it.
#[derive(Debug)]
struct GaugeCells {
    cells: Vec<(usize, Objective, [KeyValue; 2], AtomicU64)>,
}

impl GaugeCells {
    fn new(eval: &Evaluator) -> GaugeCells {
        let mut cells = Vec::new();
        for (i, rule) in eval.rules().iter().enumerate() {
            for o in rule.objectives() {
                let attrs = [
                    KeyValue::new(SLO_NAME, rule.name.to_string()),
                    KeyValue::new(SLO_OBJECTIVE, o.as_str()),
                ];
                cells.push((i, o, attrs, AtomicU64::new(0)));
            }
        }
        GaugeCells { cells }
    }

    fn update(&self, eval: &Evaluator) {
        for (rule, o, _, n) in &self.cells {
            n.store(eval.breached_count(*rule, *o) as u64, Ordering::Relaxed);
        }
    }
}

fn breached_gauge(meter: &Meter, cells: Arc<GaugeCells>) -> ObservableGauge<u64> {
    meter
        .u64_observable_gauge(M_SLO_BREACHED)
        .with_description("1 while an SLO objective is breached (for any of its models), else 0.")
        .with_callback(move |obs| {
            for (_, _, attrs, n) in &cells.cells {
                obs.observe(u64::from(n.load(Ordering::Relaxed) > 0), attrs);
            }
        })
        .build()
}

/// Where transitions go.
struct Outputs {
    breaches: Counter<u64>,
    cells: Arc<GaugeCells>,
    marks: Arc<Marks>,
    webhook: Option<Notifier>,
}

impl Outputs {
    fn emit(&self, t: &Transition) {
        log(t);
        if t.change == Change::Breach {
            let model = t.model.as_deref().unwrap_or(SLO_ALL_MODELS);
            self.breaches.add(
                1,
                &[
                    KeyValue::new(SLO_NAME, t.slo.to_string()),
                    KeyValue::new(SLO_OBJECTIVE, t.objective.as_str()),
                    KeyValue::new(GEN_AI_REQUEST_MODEL, model.to_owned()),
                ],
            );
        }
        if let Some(w) = &self.webhook {
            w.notify(Event::from(t));
        }
    }
}

fn log(t: &Transition) {
    let route = t.route.as_deref().unwrap_or("*");
    let model = t.model.as_deref().unwrap_or(SLO_ALL_MODELS);
    let window_s = t.window.as_secs_f64();
    let baseline_window_s = t.baseline_window.map(|d| d.as_secs_f64());
    // One field list for both levels: `tracing` needs the level at compile
    // time, so the macro names it.
    macro_rules! transition {
        ($level:ident, $message:literal) => {
            tracing::$level!(
                target: "tokentap::slo",
                slo = %t.slo,
                objective = t.objective.as_str(),
                route,
                model,
                observed = t.observed,
                threshold = t.threshold,
                unit = t.objective.unit(),
                window_s,
                baseline = t.baseline,
                baseline_window_s,
                $message
            )
        };
    }
    match t.change {
        Change::Breach => transition!(warn, "SLO breached"),
        Change::Recovery => transition!(info, "SLO recovered"),
    }
}

/// The evaluator task: one evaluation per snapshot; ends with the live
/// statistics.
async fn run(mut eval: Evaluator, mut rx: watch::Receiver<Arc<Snapshot>>, out: Outputs) {
    while rx.changed().await.is_ok() {
        let snap = rx.borrow_and_update().clone();
        let changes = eval.evaluate(&snap);
        if changes.is_empty() {
            continue;
        }
        for t in &changes {
            out.emit(t);
        }
        out.cells.update(&eval);
        out.marks.publish(eval.marks());
    }
}

#[cfg(test)]
#[allow(
    clippy::disallowed_methods,
    reason = "tests build timestamps and deadlines freely"
)]
mod tests;
