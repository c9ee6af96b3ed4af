//! Requests in flight per route and (capped) model: a request's start in,
//! the count it found (itself included) and a guard that ends it out; the
//! counts are read as the `tokentap.requests.in_flight` gauge.
//!
//! One atomic per (route, model): starting a request takes a read lock to
//! find its counter (a write lock only the first time a pair is seen) and
//! one atomic add. Pairs are bounded by the configured routes times the
//! model cardinality cap, and are never removed.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use crate::capped_maps::{self, FxMap};

/// (route, capped model; `None` when the request named none).
type Pair = (Arc<str>, Option<Arc<str>>);

/// The in-flight counters, shared by every request.
#[derive(Debug)]
pub(super) struct InFlight {
    counts: RwLock<FxMap<Pair, Arc<AtomicU64>>>,
}

impl Default for InFlight {
    fn default() -> InFlight {
        InFlight {
            counts: RwLock::new(capped_maps::map()),
        }
    }
}

/// Holds one request in its pair's count until dropped.
#[derive(Debug)]
pub(super) struct InFlightGuard(Arc<AtomicU64>);

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl InFlight {
    /// A request to `route` and `model` starts: the guard that holds it in
    /// the count, and the count with it included (≥ 1).
    /// Also whether this request is the first its pair has seen (span
    /// sampling keeps it: the pairs are bounded, so is this).
    pub(super) fn enter(
        &self,
        route: &Arc<str>,
        model: Option<&Arc<str>>,
    ) -> (InFlightGuard, u64, bool) {
        let (counter, first) = self.counter(route, model);
        let now = counter.fetch_add(1, Ordering::Relaxed) + 1;
        (InFlightGuard(counter), now, first)
    }

    /// The pair's counter, and whether this call created it.
    fn counter(&self, route: &Arc<str>, model: Option<&Arc<str>>) -> (Arc<AtomicU64>, bool) {
        let key = (route.clone(), model.cloned());
        // A poisoned lock only means a panic elsewhere mid-insert; the map
        // itself is still valid.
        if let Some(c) = self
            .counts
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
        {
            return (c.clone(), false);
        }
        let mut counts = self.counts.write().unwrap_or_else(|e| e.into_inner());
        // Another request may have created it between the two locks.
        let first = !counts.contains_key(&key);
        (counts.entry(key).or_default().clone(), first)
    }

    /// Every pair's count now: (route, model, requests in flight).
    pub(super) fn snapshot(&self) -> Vec<(Arc<str>, Option<Arc<str>>, u64)> {
        let counts = self.counts.read().unwrap_or_else(|e| e.into_inner());
        counts
            .iter()
            .map(|((route, model), c)| (route.clone(), model.clone(), c.load(Ordering::Relaxed)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_per_route_and_model_include_the_new_request_and_drop_on_guard_drop() {
        let f = InFlight::default();
        let (route, other_route): (Arc<str>, Arc<str>) = ("a".into(), "b".into());
        let model: Arc<str> = "m".into();
        let (g1, n1, _) = f.enter(&route, Some(&model));
        let (g2, n2, _) = f.enter(&route, Some(&model));
        let (_g3, n3, _) = f.enter(&other_route, Some(&model));
        let (_g4, n4, _) = f.enter(&route, None);
        assert_eq!((n1, n2), (1, 2), "same pair counts up, itself included");
        assert_eq!(
            (n3, n4),
            (1, 1),
            "another route or no model is its own pair"
        );
        let (_g, _, first) = f.enter(&route, Some(&model));
        let (_h, _, again) = f.enter(&"c".into(), None);
        assert!(!first && again, "first only for a pair never seen");
        drop((g1, g2));
        let (_g5, n5, _) = f.enter(&route, Some(&model));
        assert_eq!(n5, 2, "finished requests leave the count");
        let mut snap = f.snapshot();
        snap.sort();
        assert_eq!(snap.len(), 4, "one entry per pair seen: {snap:?}");
    }
}
