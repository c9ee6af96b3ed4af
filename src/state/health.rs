//! The store's health: each operation's result in; whether to try the
//! store now, the error count, and the rate-limited WARN out.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// First wait before the store is tried again after a failure; doubles.
const FIRST_BACKOFF: Duration = Duration::from_millis(250);
/// Longest wait between two tries.
const MAX_BACKOFF: Duration = Duration::from_secs(10);
/// At most one WARN per this long.
const WARN_EVERY: Duration = Duration::from_secs(60);

/// Whether the store answers, and when to try it again if not.
#[derive(Debug)]
pub(super) struct Health {
    /// The store's address, password redacted.
    shown: String,
    healthy: AtomicBool,
    errors: AtomicU64,
    tries: Mutex<Tries>,
}

#[derive(Debug, Default)]
struct Tries {
    /// No operation before this instant (after a failure).
    retry_at: Option<Instant>,
    backoff: Duration,
    last_warn: Option<Instant>,
    /// The last wrong-shape ERROR (rate-limited apart from the WARN).
    last_error: Option<Instant>,
    /// Failures since the last WARN.
    unwarned: u64,
}

#[allow(
    clippy::disallowed_methods,
    reason = "the store's backoff and WARN rate limit, off the request path"
)]
fn now() -> Instant {
    Instant::now()
}

impl Health {
    pub(super) fn new(shown: String) -> Health {
        Health {
            shown,
            // Assumed up until an operation says otherwise.
            healthy: AtomicBool::new(true),
            errors: AtomicU64::new(0),
            tries: Mutex::new(Tries::default()),
        }
    }

    /// Whether the latest operation succeeded.
    pub(super) fn healthy(&self) -> bool {
        self.healthy.load(Ordering::Relaxed)
    }

    /// Operations that failed or timed out since start-up.
    pub(super) fn errors(&self) -> u64 {
        self.errors.load(Ordering::Relaxed)
    }

    /// Whether to send an operation now (not while backing off).
    pub(super) fn may_try(&self) -> bool {
        if self.healthy() {
            return true;
        }
        let t = self.tries.lock().unwrap_or_else(|e| e.into_inner());
        t.retry_at.is_none_or(|at| now() >= at)
    }

    /// The store answered.
    pub(super) fn ok(&self) {
        if !self.healthy.swap(true, Ordering::Relaxed) {
            let mut t = self.tries.lock().unwrap_or_else(|e| e.into_inner());
            t.retry_at = None;
            t.backoff = Duration::ZERO;
            tracing::info!(store = %self.shown, "state store answers again: the fleet's ledger and sessions are back");
        }
    }

    /// `errors` operations failed with `why`: back off, count, and warn
    /// at most once a minute.
    pub(super) fn failed(&self, errors: u64, why: &str) {
        self.errors.fetch_add(errors, Ordering::Relaxed);
        self.healthy.store(false, Ordering::Relaxed);
        let now = now();
        let mut t = self.tries.lock().unwrap_or_else(|e| e.into_inner());
        t.backoff = (t.backoff * 2).clamp(FIRST_BACKOFF, MAX_BACKOFF);
        t.retry_at = Some(now + t.backoff);
        t.unwarned += errors;
        if t.last_warn
            .is_none_or(|w| now.duration_since(w) >= WARN_EVERY)
        {
            tracing::warn!(
                store = %self.shown,
                failed = t.unwarned,
                retry_in_ms = t.backoff.as_millis() as u64,
                "state store unavailable ({why}); metering with this replica's own ledger and \
                 sessions (tokentap.state = local) until it answers"
            );
            t.last_warn = Some(now);
            t.unwarned = 0;
        }
    }

    /// The store answered, but with data of the wrong shape under `key`.
    pub(super) fn wrong_shape(&self, key: &str, why: &str) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        let now = now();
        let mut t = self.tries.lock().unwrap_or_else(|e| e.into_inner());
        if t.last_error
            .is_none_or(|w| now.duration_since(w) >= WARN_EVERY)
        {
            tracing::error!(
                store = %self.shown,
                key,
                "state store key holds data tokentap did not write ({why}); it is skipped: \
                 delete the key or give this deployment its own state.key_prefix"
            );
            t.last_error = Some(now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_backs_off_and_a_success_ends_it() {
        let h = Health::new("redis://127.0.0.1:1".into());
        assert!(h.may_try() && h.healthy(), "assumed up at start");
        h.failed(2, "connection refused");
        assert!(!h.healthy(), "down after a failure");
        assert!(!h.may_try(), "backing off right after it");
        assert_eq!(h.errors(), 2, "each failed operation counts");
        h.ok();
        assert!(h.healthy() && h.may_try(), "up again after an answer");
    }
}
