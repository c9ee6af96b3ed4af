//! Cardinality guard: label values in, the value itself or `other` out.
//!
//! The first `cap` distinct values are admitted for the life of the process;
//! later values map to `other`. Looked up once per request (in `begin` or
//! `finish`), never per chunk: the read path is one uncontended `RwLock` read
//! and a hash lookup; the write lock is taken only while the set still grows.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use opentelemetry_sdk::metrics::{Instrument, Stream};

use crate::attrs::OTHER;
use crate::capped_maps::{self, FxSet};

/// Values longer than this are never admitted (they go to `other`).
const MAX_VALUE_LEN: usize = 256;

/// Admits at most `cap` distinct values of one label.
#[derive(Debug)]
pub struct CardinalityGuard {
    cap: usize,
    seen: RwLock<FxSet<Arc<str>>>,
    /// Set once the cap is reached, so new values skip the write lock.
    full: AtomicBool,
    other: Arc<str>,
}

impl CardinalityGuard {
    /// A guard admitting `cap` distinct values.
    pub fn new(cap: usize) -> CardinalityGuard {
        CardinalityGuard {
            cap,
            seen: RwLock::new(capped_maps::set()),
            full: AtomicBool::new(cap == 0),
            other: Arc::from(OTHER),
        }
    }

    /// `value` if admitted (already seen, or room left), else `other`.
    pub fn admit(&self, value: &str) -> Arc<str> {
        if value.len() > MAX_VALUE_LEN {
            return self.other.clone();
        }
        // A poisoned lock only means a panic elsewhere mid-insert; the set
        // itself is still valid.
        let seen = self.seen.read().unwrap_or_else(|e| e.into_inner());
        if let Some(v) = seen.get(value) {
            return v.clone();
        }
        drop(seen);
        if self.full.load(Ordering::Relaxed) {
            return self.other.clone();
        }
        let mut seen = self.seen.write().unwrap_or_else(|e| e.into_inner());
        if let Some(v) = seen.get(value) {
            return v.clone();
        }
        if seen.len() >= self.cap {
            self.full.store(true, Ordering::Relaxed);
            return self.other.clone();
        }
        let v: Arc<str> = Arc::from(value);
        seen.insert(v.clone());
        if seen.len() >= self.cap {
            self.full.store(true, Ordering::Relaxed);
        }
        v
    }

    /// Number of admitted values.
    pub fn len(&self) -> usize {
        self.seen.read().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Whether no value was admitted yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A metric view capping every instrument at `limit` distinct attribute
/// sets. The guards above cap each label; this caps their combinations
/// (e.g. 100 models × 100 tenants): measurements with a further set are
/// aggregated into the SDK's one overflow series, marked
/// `otel.metric.overflow = true`.
pub fn series_limit(
    limit: usize,
) -> impl Fn(&Instrument) -> Option<Stream> + Send + Sync + 'static {
    move |_| Stream::builder().with_cardinality_limit(limit).build().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admits_up_to_cap_then_other() {
        let g = CardinalityGuard::new(2);
        assert_eq!(&*g.admit("a"), "a", "first value admitted");
        assert_eq!(&*g.admit("b"), "b", "second value admitted");
        assert_eq!(&*g.admit("c"), OTHER, "third distinct value past cap 2");
        assert_eq!(
            &*g.admit("a"),
            "a",
            "admitted value stays admitted after cap"
        );
        assert_eq!(
            &*g.admit("b"),
            "b",
            "admitted value stays admitted after cap"
        );
        assert_eq!(g.len(), 2, "set does not grow past cap");
    }

    #[test]
    fn repeated_value_counts_once() {
        let g = CardinalityGuard::new(1);
        assert_eq!(&*g.admit("m"), "m");
        assert_eq!(
            &*g.admit("m"),
            "m",
            "same value is not a second distinct value"
        );
        assert_eq!(&*g.admit("n"), OTHER);
    }

    #[test]
    fn zero_cap_maps_everything_to_other() {
        let g = CardinalityGuard::new(0);
        assert_eq!(&*g.admit("a"), OTHER);
        assert!(g.is_empty(), "nothing admitted with cap 0");
    }

    #[test]
    fn overlong_value_is_other() {
        let g = CardinalityGuard::new(10);
        let long = "x".repeat(MAX_VALUE_LEN + 1);
        assert_eq!(
            &*g.admit(&long),
            OTHER,
            "values over {MAX_VALUE_LEN} bytes are not admitted"
        );
        assert!(g.is_empty(), "overlong value takes no slot");
    }

    #[test]
    fn concurrent_admits_respect_cap() {
        let g = Arc::new(CardinalityGuard::new(8));
        let handles: Vec<_> = (0..8)
            .map(|t| {
                let g = g.clone();
                std::thread::spawn(move || {
                    for i in 0..100 {
                        g.admit(&format!("{t}-{i}"));
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().expect("thread");
        }
        assert_eq!(g.len(), 8, "exactly cap values admitted under contention");
    }
}
