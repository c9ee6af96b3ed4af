//! Load classes: requests in flight to the same route and model when a
//! request started (itself included), in bounded classes (`1`, `2-8`, `9+`
//! by default, from `compare.load_classes`).

use std::sync::Arc;

/// The load classes, built once at start-up from their upper bounds.
#[derive(Debug, Clone)]
pub struct LoadClasses {
    /// Inclusive upper bounds, strictly increasing, the first ≥ 1.
    bounds: Vec<u64>,
    /// One label per class: `bounds.len() + 1` of them.
    labels: Vec<Arc<str>>,
}

impl LoadClasses {
    /// Classes from checked bounds (`config::compare::check`): each bound
    /// closes a class, and one more class holds everything above the last.
    pub fn new(bounds: &[u64]) -> LoadClasses {
        let mut labels = Vec::with_capacity(bounds.len() + 1);
        let mut low = 1;
        for &b in bounds {
            labels.push(if b == low {
                Arc::from(b.to_string())
            } else {
                Arc::from(format!("{low}-{b}"))
            });
            low = b.saturating_add(1);
        }
        labels.push(Arc::from(format!("{low}+")));
        LoadClasses {
            bounds: bounds.to_vec(),
            labels,
        }
    }

    /// The class of a request that found `in_flight` requests (itself
    /// included) when it started.
    pub fn index(&self, in_flight: u64) -> usize {
        self.bounds.partition_point(|&b| b < in_flight)
    }

    /// The label of class `i` (`1`, `2-8`, `9+`); the last class past it.
    pub fn label(&self, i: usize) -> &Arc<str> {
        &self.labels[i.min(self.labels.len() - 1)]
    }

    /// How many classes there are.
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    /// Never empty: at least the one class above the last bound.
    pub fn is_empty(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_bounds_give_one_user_moderate_and_heavy() {
        let c = LoadClasses::new(&[1, 8]);
        let labels: Vec<&str> = (0..c.len()).map(|i| &**c.label(i)).collect();
        assert_eq!(labels, ["1", "2-8", "9+"]);
        let of = |n| &**c.label(c.index(n));
        assert_eq!(
            [of(0), of(1), of(2), of(8), of(9), of(u64::MAX)],
            ["1", "1", "2-8", "2-8", "9+", "9+"]
        );
    }

    #[test]
    fn other_bounds_and_none() {
        let c = LoadClasses::new(&[2, 3, 16]);
        let labels: Vec<&str> = (0..c.len()).map(|i| &**c.label(i)).collect();
        assert_eq!(labels, ["1-2", "3", "4-16", "17+"]);
        assert_eq!(c.index(3), 1);
        assert_eq!(c.index(4), 2);
        let one = LoadClasses::new(&[]);
        assert_eq!((one.len(), &**one.label(one.index(50))), (1, "1+"));
    }
}
