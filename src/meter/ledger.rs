//! Usage already counted: the key of a response (its id) or of a batch
//! result file (its file or batch id) in; whether this is the first time its
//! usage is counted out. Bounded: past the cap the oldest keys are forgotten.
//!
//! A response's usage can be seen many times (the original stream, a
//! resumed stream, every poll, every download of a batch result file);
//! DESIGN.md rule 3 counts it once, on every replica and across restarts.
//! A key is a stable hash (SHA-256, cut to 128 bits) of the provider, the
//! namespace and the id, so every replica and every restart computes the
//! same one: that is what a shared store (`[state] url`, through
//! [`SharedLedger`]) or a state file keeps. In process, keys are kept as
//! their first 64 bits, so memory per key is fixed whatever the id's
//! length (a collision, about one in 10^9 at the default cap, would skip
//! one count). Eviction is first in, first out: a key forgotten and then
//! seen again is counted again, so the cap should cover how long clients
//! keep polling or downloading the same result.

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use sha2::{Digest, Sha256};

/// The stable key of one counted thing: the same on every replica.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LedgerKey([u8; 16]);

impl LedgerKey {
    /// The key of `id` in `namespace` (`response`, `file`, `batch`) of
    /// `provider`.
    pub fn new(provider: &str, namespace: &str, id: &str) -> LedgerKey {
        let mut h = Sha256::new();
        for part in [provider, namespace, id] {
            h.update((part.len() as u64).to_le_bytes());
            h.update(part.as_bytes());
        }
        let digest = h.finalize();
        let mut key = [0; 16];
        key.copy_from_slice(&digest[..16]);
        LedgerKey(key)
    }

    /// The key as 32 lowercase hex digits (the store's key suffix).
    pub fn hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// The first 64 bits, which the in-process table keeps.
    fn short(&self) -> u64 {
        let mut b = [0; 8];
        b.copy_from_slice(&self.0[..8]);
        u64::from_le_bytes(b)
    }
}

/// What a claim's answer is handed to (see [`SharedLedger::claim`]).
pub type ClaimDone = Box<dyn FnOnce(Option<bool>) + Send>;

/// A ledger shared by every replica (the state store). It answers after
/// the response's last byte, off the request path.
pub trait SharedLedger: Send + Sync + std::fmt::Debug {
    /// Claim `key` for this replica: `done(Some(true))` when it is the
    /// first claim anywhere, `Some(false)` when another request claimed it
    /// first, `None` when the store could not answer in time (the caller
    /// then decides with the in-process table). `done` runs exactly once,
    /// maybe on another thread.
    fn claim(&self, key: LedgerKey, done: ClaimDone);
}

/// Keys whose usage was counted, at most `cap` of them.
#[derive(Debug)]
pub struct Ledger {
    cap: usize,
    /// Taken once per metered response that reports usage (not per chunk).
    keys: Mutex<Keys>,
    /// Keys forgotten to stay under the cap.
    evicted: AtomicU64,
    /// The fleet's ledger, when a store is configured.
    shared: Option<Arc<dyn SharedLedger>>,
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
            keys: Mutex::new(Keys::default()),
            evicted: AtomicU64::new(0),
            shared: None,
        }
    }

    /// The same ledger deciding through `shared` first.
    pub fn with_shared(mut self, shared: Arc<dyn SharedLedger>) -> Ledger {
        self.shared = Some(shared);
        self
    }

    /// The fleet's ledger, if any.
    pub fn shared(&self) -> Option<&Arc<dyn SharedLedger>> {
        self.shared.as_ref()
    }

    /// Whether `key` is seen for the first time in this process,
    /// remembering it if so.
    pub fn first(&self, key: &LedgerKey) -> bool {
        self.insert(key.short())
    }

    /// Remember `key` without asking (the store answered for it).
    pub fn remember(&self, key: &LedgerKey) {
        self.insert(key.short());
    }

    fn insert(&self, h: u64) -> bool {
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

    /// The keys remembered, oldest first (for the state file).
    pub fn snapshot(&self) -> Vec<u64> {
        let keys = self.keys.lock().unwrap_or_else(|e| e.into_inner());
        keys.order.iter().copied().collect()
    }

    /// Remember `keys` (oldest first), as a state file gave them.
    pub fn restore(&self, keys: impl IntoIterator<Item = u64>) {
        for k in keys {
            self.insert(k);
        }
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

    fn key(namespace: &str, id: &str) -> LedgerKey {
        LedgerKey::new("openai", namespace, id)
    }

    #[test]
    fn a_key_is_first_once_per_namespace() {
        let l = Ledger::new(8);
        assert!(l.first(&key("response", "resp_1")), "first sighting counts");
        assert!(!l.first(&key("response", "resp_1")), "second does not");
        assert!(l.first(&key("file", "resp_1")), "namespaces are apart");
        assert_eq!(l.len(), 2);
    }

    #[test]
    fn past_the_cap_the_oldest_key_is_forgotten() {
        let l = Ledger::new(3);
        for k in ["a", "b", "c", "d"] {
            assert!(l.first(&key("response", k)), "{k} is new");
        }
        assert_eq!((l.len(), l.evicted()), (3, 1), "bounded, one evicted");
        assert!(!l.first(&key("response", "d")), "recent keys are kept");
        assert!(l.first(&key("response", "a")), "the oldest was forgotten");
    }

    #[test]
    fn keys_are_stable_across_processes_and_apart_per_provider() {
        // A fixed value: every replica, every restart and every version
        // must compute it, or a store's keys would no longer match.
        assert_eq!(
            key("response", "resp_1").hex(),
            "5c0e6b397761f02e2674bbaa228f4cc6"
        );
        assert_eq!(key("response", "resp_1").hex().len(), 32);
        assert_ne!(
            key("response", "resp_1"),
            LedgerKey::new("azure.ai.openai", "response", "resp_1")
        );
        // Lengths are part of the hash: no two splits of one string meet.
        assert_ne!(
            LedgerKey::new("a", "bc", "d"),
            LedgerKey::new("ab", "c", "d")
        );
    }

    #[test]
    fn a_snapshot_restores_the_same_decisions() {
        let l = Ledger::new(8);
        l.first(&key("response", "resp_1"));
        let again = Ledger::new(8);
        again.restore(l.snapshot());
        assert!(!again.first(&key("response", "resp_1")), "kept across");
        assert!(again.first(&key("response", "resp_2")));
    }
}
