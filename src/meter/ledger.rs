//! Usage already counted: the key of a response (its id) or of a batch
//! result file (its file or batch id) in; whether this is the first time its
//! usage is counted out. Bounded: past the cap the oldest keys are forgotten.
//!
//! A response's usage can be seen many times (the original stream, a
//! resumed stream, every poll, every download of a batch result file);
//! DESIGN.md rule 3 counts it once. Keys are kept as 64-bit hashes under a
//! per-process random seed, so memory per key is fixed whatever its length
//! (a collision, about one in 10^9 at the default cap, would skip one
//! count). Eviction is first in, first out: a key forgotten and then seen
//! again is counted again, so the cap should cover how long clients keep
//! polling or downloading the same result.

use std::collections::{HashSet, VecDeque};
use std::hash::{BuildHasher, RandomState};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// The default number of keys remembered (`meter.max_counted_ids`).
pub const DEFAULT_CAP: usize = 100_000;

/// Keys whose usage was counted, at most `cap` of them.
#[derive(Debug)]
pub struct Ledger {
    cap: usize,
    seed: RandomState,
    /// Taken once per metered response that reports usage (not per chunk).
    keys: Mutex<Keys>,
    /// Keys forgotten to stay under the cap.
    evicted: AtomicU64,
}

#[derive(Debug, Default)]
struct Keys {
    set: HashSet<u64>,
    order: VecDeque<u64>,
}

impl Ledger {
    /// An empty ledger remembering up to `cap` keys (at least one).
    pub fn new(cap: usize) -> Ledger {
        Ledger {
            cap: cap.max(1),
            seed: RandomState::new(),
            keys: Mutex::new(Keys::default()),
            evicted: AtomicU64::new(0),
        }
    }

    /// Whether `key` (in its namespace, e.g. `response`, `file`) is seen
    /// for the first time, remembering it if so.
    pub fn first(&self, namespace: &str, key: &str) -> bool {
        let h = self.seed.hash_one((namespace, key));
        // A poisoned lock only means another request panicked mid-insert;
        // the set is still a set.
        let mut keys = self.keys.lock().unwrap_or_else(|e| e.into_inner());
        if !keys.set.insert(h) {
            return false;
        }
        keys.order.push_back(h);
        while keys.order.len() > self.cap {
            if let Some(old) = keys.order.pop_front() {
                keys.set.remove(&old);
                self.evicted.fetch_add(1, Ordering::Relaxed);
            }
        }
        true
    }

    /// Keys remembered now.
    pub fn len(&self) -> usize {
        self.keys
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .order
            .len()
    }

    /// Whether no key is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Keys forgotten so far to stay under the cap.
    pub fn evicted(&self) -> u64 {
        self.evicted.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_first_once_per_namespace() {
        let l = Ledger::new(8);
        assert!(l.first("response", "resp_1"), "first sighting counts");
        assert!(!l.first("response", "resp_1"), "second does not");
        assert!(l.first("file", "resp_1"), "namespaces are apart");
        assert_eq!(l.len(), 2);
    }

    #[test]
    fn past_the_cap_the_oldest_key_is_forgotten() {
        let l = Ledger::new(3);
        for k in ["a", "b", "c", "d"] {
            assert!(l.first("response", k), "{k} is new");
        }
        assert_eq!((l.len(), l.evicted()), (3, 1), "bounded, one evicted");
        assert!(!l.first("response", "d"), "recent keys are kept");
        assert!(l.first("response", "a"), "the oldest was forgotten");
    }
}
