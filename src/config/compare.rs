//! `[compare]`: the comparison from production traffic (`/api/compare`):
//! the repeated windows, what counts as enough data, and the load classes
//! (also the `tokentap.load_class` metric attribute); the raw keys in,
//! checked settings out.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::units;

/// Most windows kept per cell (`compare.windows`).
pub const MAX_WINDOWS: usize = 60;
/// Most load-class bounds (`compare.load_classes`): at most 9 classes.
pub const MAX_LOAD_CLASSES: usize = 8;
/// Most requests sampled per cell and window (`compare.samples`).
pub const MAX_SAMPLES: usize = 1024;
/// Most (route, model) sides kept (`compare.max_sides`).
pub const MAX_SIDES: usize = 1000;

/// `[compare]` (restart-only: the windows are sized at start-up).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CompareConfig {
    /// Length of one window; each window gives one median per figure.
    #[serde(with = "units::positive")]
    pub window: Duration,
    /// Windows kept per cell (the last `window × windows` of traffic).
    pub windows: usize,
    /// Fewer requests in a cell (all its windows) than this: not enough data.
    pub min_requests: u64,
    /// Fewer windows with a request in a cell than this (at most
    /// `windows`: more counts as `windows`): not enough data.
    pub min_windows: usize,
    /// Upper bounds (inclusive) of the load classes, by requests in flight
    /// to the same route and model when a request started, itself
    /// included: `[1, 8]` gives the classes `1`, `2-8` and `9+`.
    pub load_classes: Vec<u64>,
    /// Requests kept per cell and window for its medians (a uniform sample
    /// of the window's requests beyond this).
    pub samples: usize,
    /// Distinct (route, model) sides kept; requests of further sides are
    /// not compared.
    pub max_sides: usize,
}

impl Default for CompareConfig {
    fn default() -> Self {
        CompareConfig {
            window: Duration::from_secs(300),
            windows: 12,
            min_requests: 20,
            min_windows: 3,
            load_classes: vec![1, 8],
            samples: 64,
            max_sides: 100,
        }
    }
}

/// Why a `[compare]` setting is refused: the key and the message.
pub(super) fn check(c: &CompareConfig) -> Result<(), (&'static str, String)> {
    if c.window < Duration::from_millis(100) {
        return Err(("compare.window", "must be at least 100ms".into()));
    }
    if !(1..=MAX_WINDOWS).contains(&c.windows) {
        return Err(("compare.windows", format!("must be 1 to {MAX_WINDOWS}")));
    }
    if c.load_classes.len() > MAX_LOAD_CLASSES {
        return Err((
            "compare.load_classes",
            format!("at most {MAX_LOAD_CLASSES} bounds"),
        ));
    }
    if c.load_classes.first() == Some(&0) {
        return Err((
            "compare.load_classes",
            "bounds start at 1 (a request counts itself)".into(),
        ));
    }
    if c.load_classes.windows(2).any(|w| w[0] >= w[1]) {
        return Err((
            "compare.load_classes",
            format!(
                "bounds must increase strictly, e.g. [1, 8]; got {:?}",
                c.load_classes
            ),
        ));
    }
    if !(1..=MAX_SAMPLES).contains(&c.samples) {
        return Err(("compare.samples", format!("must be 1 to {MAX_SAMPLES}")));
    }
    if !(1..=MAX_SIDES).contains(&c.max_sides) {
        return Err(("compare.max_sides", format!("must be 1 to {MAX_SIDES}")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_pass_and_each_bad_value_names_its_key() {
        assert_eq!(check(&CompareConfig::default()), Ok(()));
        let bad = |f: fn(&mut CompareConfig)| {
            let mut c = CompareConfig::default();
            f(&mut c);
            check(&c).expect_err("must be refused").0
        };
        assert_eq!(
            bad(|c| c.window = Duration::from_millis(10)),
            "compare.window"
        );
        assert_eq!(bad(|c| c.windows = 0), "compare.windows");
        assert_eq!(bad(|c| c.windows = 61), "compare.windows");
        assert_eq!(bad(|c| c.load_classes = vec![0, 8]), "compare.load_classes");
        assert_eq!(bad(|c| c.load_classes = vec![8, 8]), "compare.load_classes");
        assert_eq!(bad(|c| c.load_classes = vec![8, 2]), "compare.load_classes");
        assert_eq!(
            bad(|c| c.load_classes = (1..=9).collect()),
            "compare.load_classes"
        );
        assert_eq!(bad(|c| c.samples = 0), "compare.samples");
        assert_eq!(bad(|c| c.max_sides = 0), "compare.max_sides");
        let mut one = CompareConfig {
            load_classes: vec![],
            ..CompareConfig::default()
        };
        assert_eq!(check(&one), Ok(()), "no bounds: one class");
        one.load_classes = vec![1, 4, 16, 64];
        assert_eq!(check(&one), Ok(()));
    }
}
