//! The comparison from production traffic (`GET /api/compare`): finished
//! requests in, per (route, requested model) side; within cells of
//! prompt-size class × load class, the medians of repeated windows with
//! their spread out, and whether the sides are like with like. See
//! docs/COMPARING.md.
//!
//! Fed by telemetry once per finished request (`record`: a read lock to
//! find the side, its mutex, one push into a reused buffer); read by
//! `admin` (`report`), which computes the medians. Memory is bounded by
//! `compare.max_sides`, the classes, `compare.windows` and
//! `compare.samples` (`memory_bound`).

pub mod classes;
pub mod report;
pub mod window;

pub use self::classes::LoadClasses;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use self::window::{Cell, FIGURES, Figures, SAMPLE_BYTES, Summary};
use crate::config::CompareConfig;
use crate::labels::RouteLabels;
use crate::meter::{Measurement, Outcome, PromptSize, cut_at_char};

/// The prompt-size classes, in report order.
pub const PROMPT_SIZES: [PromptSize; 6] = [
    PromptSize::UpTo1k,
    PromptSize::UpTo8k,
    PromptSize::UpTo32k,
    PromptSize::UpTo128k,
    PromptSize::Over128k,
    PromptSize::Unknown,
];

/// Longest response model and serving software kept (bytes).
const MAX_SERVED_BY_LEN: usize = 128;

/// A side: (route, requested model as capped by telemetry).
type SideKey = (Arc<str>, Arc<str>);

/// The comparison windows of every side. Shared by telemetry (writes) and
/// the admin listener (reads).
#[derive(Debug)]
pub struct Compare {
    settings: CompareConfig,
    classes: LoadClasses,
    /// Window numbers count from here.
    epoch: Instant,
    sides: RwLock<HashMap<SideKey, Arc<Mutex<Side>>>>,
}

/// One side's cells and what served it.
#[derive(Debug)]
struct Side {
    /// Requests recorded since start-up.
    requests: u64,
    served: Served,
    /// `PROMPT_SIZES.len() × classes.len()` cells, allocated on first use.
    cells: Vec<Option<Box<Cell>>>,
}

/// What served a side, as its latest request said (copied only when it
/// changes).
#[derive(Debug, Default, Clone)]
struct Served {
    response_model: Option<Box<str>>,
    software: Option<Box<str>>,
    tier: Option<&'static str>,
    /// The route's labels (`routes[].labels`; one shared `Arc`).
    labels: RouteLabels,
}

impl Compare {
    /// Empty windows sized by checked `[compare]` settings.
    pub fn new(settings: &CompareConfig) -> Compare {
        #[allow(
            clippy::disallowed_methods,
            reason = "the epoch window numbers count from, read once"
        )]
        let epoch = Instant::now();
        Compare::with_epoch(settings, epoch)
    }

    fn with_epoch(settings: &CompareConfig, epoch: Instant) -> Compare {
        Compare {
            settings: settings.clone(),
            classes: LoadClasses::new(&settings.load_classes),
            epoch,
            sides: RwLock::new(HashMap::new()),
        }
    }

    /// The load classes (`compare.load_classes`).
    pub fn classes(&self) -> &LoadClasses {
        &self.classes
    }

    /// The most bytes the sample buffers can hold: every side, class and
    /// window full.
    pub fn memory_bound(&self) -> usize {
        let s = &self.settings;
        s.max_sides * PROMPT_SIZES.len() * self.classes.len() * s.windows * s.samples * SAMPLE_BYTES
    }

    /// Bytes the sample buffers hold now.
    pub fn memory_used(&self) -> usize {
        let sides = self.sides.read().unwrap_or_else(|e| e.into_inner());
        sides
            .values()
            .map(|side| {
                let side = side.lock().unwrap_or_else(|e| e.into_inner());
                side.cells
                    .iter()
                    .flatten()
                    .map(|c| c.sample_bytes())
                    .sum::<usize>()
            })
            .sum()
    }

    /// The window a request that finished at `at` falls in.
    fn window_number(&self, at: Instant) -> u64 {
        let since = at.saturating_duration_since(self.epoch).as_nanos();
        let len = self.settings.window.as_nanos().max(1);
        u64::try_from(since / len).unwrap_or(u64::MAX - 1)
    }

    /// One finished request to `route` that asked for `model` (capped),
    /// in load class `load_class`. Only complete, successful responses
    /// with a first token count.
    pub fn record(&self, route: &Arc<str>, model: &Arc<str>, load_class: usize, m: &Measurement) {
        if m.outcome != Outcome::Complete || !(200..300).contains(&m.status) {
            return;
        }
        let Some(ttft) = m.time_to_first_token else {
            return;
        };
        let Some(side) = self.side(route, model) else {
            return;
        };
        let ms = |d: Duration| (d.as_secs_f64() * 1e3) as f32;
        let opt = |v: Option<f64>| v.map_or(f32::NAN, |v| v as f32);
        let figures: Figures = [
            ms(ttft),
            opt(m.prefill_tokens_per_second()),
            opt(m.decode_tokens_per_second()),
            ms(m.duration),
            opt(m.output_tokens.or(m.usage.output).map(|n| n as f64)),
        ];
        let prompt = PROMPT_SIZES
            .iter()
            .position(|p| *p == m.prompt_size_class())
            .unwrap_or(PROMPT_SIZES.len() - 1);
        let index = prompt * self.classes.len() + load_class.min(self.classes.len() - 1);
        let number = self.window_number(m.request.start + m.duration);
        let tier = m.usage.service_tier.or(m.request.service_tier);
        let mut side = side.lock().unwrap_or_else(|e| e.into_inner());
        side.requests += 1;
        side.served.update(
            m.response_model.as_deref(),
            m.server_software.as_ref().map(|v| v.as_bytes()),
            tier.map(|t| t.as_str()),
        );
        if side.served.labels != m.request.route_labels {
            side.served.labels = m.request.route_labels.clone();
        }
        let windows = self.settings.windows;
        if let Some(slot) = side.cells.get_mut(index) {
            slot.get_or_insert_with(|| Box::new(Cell::new(windows)))
                .record(number, figures, self.settings.samples);
        }
    }

    /// The side's state; created on first use while under `max_sides`.
    fn side(&self, route: &Arc<str>, model: &Arc<str>) -> Option<Arc<Mutex<Side>>> {
        let key = (route.clone(), model.clone());
        if let Some(s) = self
            .sides
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
        {
            return Some(s.clone());
        }
        let mut sides = self.sides.write().unwrap_or_else(|e| e.into_inner());
        if !sides.contains_key(&key) && sides.len() >= self.settings.max_sides {
            return None;
        }
        let cells = PROMPT_SIZES.len() * self.classes.len();
        let side = sides.entry(key).or_insert_with(|| {
            Arc::new(Mutex::new(Side {
                requests: 0,
                served: Served::default(),
                cells: (0..cells).map(|_| None).collect(),
            }))
        });
        Some(side.clone())
    }

    /// The window number now.
    fn now(&self) -> u64 {
        #[allow(clippy::disallowed_methods, reason = "read time, off the request path")]
        let now = Instant::now();
        self.window_number(now)
    }

    /// A snapshot of one side: what served it, its requests, and each
    /// cell's summary (`None` for a cell that never saw a request).
    fn snapshot(&self, key: &SideKey, now: u64) -> Option<SideSnapshot> {
        let side = self
            .sides
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(key)?
            .clone();
        let side = side.lock().unwrap_or_else(|e| e.into_inner());
        Some(SideSnapshot {
            requests: side.requests,
            served: side.served.clone(),
            cells: side
                .cells
                .iter()
                .map(|c| c.as_ref().map(|c| c.summary(now)))
                .collect(),
        })
    }

    /// Every side seen, sorted by route and model.
    fn keys(&self) -> Vec<SideKey> {
        let sides = self.sides.read().unwrap_or_else(|e| e.into_inner());
        let mut keys: Vec<SideKey> = sides.keys().cloned().collect();
        keys.sort();
        keys
    }
}

/// One side as read.
#[derive(Debug)]
struct SideSnapshot {
    requests: u64,
    served: Served,
    cells: Vec<Option<Summary>>,
}

impl Served {
    /// Take the latest request's facts; copies only what changed.
    fn update(&mut self, model: Option<&str>, software: Option<&[u8]>, tier: Option<&'static str>) {
        if let Some(model) = model
            && self.response_model.as_deref() != Some(bounded(model))
        {
            self.response_model = Some(bounded(model).into());
        }
        if let Some(bytes) = software {
            let text = String::from_utf8_lossy(bytes);
            let text = bounded(text.trim());
            if !text.is_empty() && self.software.as_deref() != Some(text) {
                self.software = Some(text.into());
            }
        }
        if tier.is_some() {
            self.tier = tier;
        }
    }
}

/// `s` cut to at most `MAX_SERVED_BY_LEN` bytes, at a character boundary.
fn bounded(s: &str) -> &str {
    cut_at_char(s, MAX_SERVED_BY_LEN)
}

/// The figures' names in report order (`window::FIGURES`).
pub const FIGURE_NAMES: [&str; FIGURES] = [
    "ttft_ms",
    "prefill_tps",
    "decode_tps",
    "duration_ms",
    "output_tokens",
];

#[cfg(test)]
#[allow(clippy::disallowed_methods, reason = "tests build instants freely")]
mod tests;
