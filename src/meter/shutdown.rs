//! tokentap's own shutdown as the meter sees it: the streams still open
//! (how many, and the oldest one's age, for the drain's progress line and
//! `/readyz`), and the cut the drain makes when its grace period ends or a
//! second signal comes. A request dropped after the cut is recorded as cut
//! by tokentap (`Outcome::Shutdown`), not as the client's cancellation.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::watch;

/// Why tokentap cut what was still open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cut {
    /// `server.shutdown_grace` ran out.
    GraceExpired,
    /// A second SIGTERM or SIGINT during the drain.
    Forced,
}

impl Cut {
    /// The `error.type` of a request the cut ended.
    pub fn error_type(self) -> &'static str {
        match self {
            Cut::GraceExpired => "shutdown_grace_expired",
            Cut::Forced => "shutdown_forced",
        }
    }

    /// What the access log says cut it.
    pub fn cause(self) -> &'static str {
        match self {
            Cut::GraceExpired => "cut by drain: server.shutdown_grace ran out",
            Cut::Forced => "cut by drain: a second shutdown signal",
        }
    }
}

/// Seconds of start time one slot of the open-stream ring covers.
const SLOT_SECS: u64 = 1;

/// Slots in the ring: streams are told apart by start second over this
/// many seconds (a little over an hour, the longest Realtime session); an
/// older one shares a slot with a newer one and shows that one's age.
const SLOTS: usize = 4096;

/// One tokentap instance's shutdown state, shared by every request.
#[derive(Debug)]
pub struct Shutdown {
    cut: watch::Sender<Option<Cut>>,
    /// When the ring's second 0 began.
    base: Instant,
    /// Open streams per start second (modulo `SLOTS`): one atomic add at
    /// a stream's start and one at its end, no lock.
    open: Box<[AtomicU32]>,
    /// The last start second seen (the ring's newest slot).
    newest: AtomicU64,
}

/// What is still open during a drain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Open {
    /// Streams (HTTP requests and WebSocket sessions) not finished.
    pub streams: u64,
    /// The oldest one's age (to the second).
    pub oldest: Option<Duration>,
}

impl Shutdown {
    /// Nothing cut, nothing open.
    #[allow(
        clippy::disallowed_methods,
        reason = "the ring's origin for stream ages, not a measurement"
    )]
    pub fn new() -> std::sync::Arc<Shutdown> {
        Shutdown::since(Instant::now())
    }

    /// As [`Shutdown::new`], with the ring's second 0 at `base`.
    fn since(base: Instant) -> std::sync::Arc<Shutdown> {
        std::sync::Arc::new(Shutdown {
            cut: watch::Sender::new(None),
            base,
            open: (0..SLOTS).map(|_| AtomicU32::new(0)).collect(),
            newest: AtomicU64::new(0),
        })
    }

    /// Cut everything still open, for `why`; the first cut's reason stays.
    pub fn cut(&self, why: Cut) {
        self.cut.send_if_modified(|c| {
            let first = c.is_none();
            c.get_or_insert(why);
            first
        });
    }

    /// Whether (and why) the drain has cut.
    pub fn is_cut(&self) -> Option<Cut> {
        *self.cut.borrow()
    }

    /// Resolves once the drain cuts.
    pub async fn wait_cut(&self) -> Cut {
        let mut rx = self.cut.subscribe();
        match rx.wait_for(Option::is_some).await {
            Ok(c) => c.unwrap_or(Cut::GraceExpired),
            // The sender lives in `self`: not reached.
            Err(_) => Cut::GraceExpired,
        }
    }

    /// A stream that started at `start` is open until the guard drops.
    pub fn enter(self: &std::sync::Arc<Self>, start: Instant) -> OpenStream {
        let sec = start.saturating_duration_since(self.base).as_secs() / SLOT_SECS;
        // A read, and a write once a second: not a write per request on a
        // line every serving thread shares.
        if sec > self.newest.load(Ordering::Relaxed) {
            self.newest.fetch_max(sec, Ordering::Relaxed);
        }
        let slot = (sec % SLOTS as u64) as usize;
        self.open[slot].fetch_add(1, Ordering::Relaxed);
        OpenStream {
            shutdown: self.clone(),
            slot,
        }
    }

    /// The streams open now and the oldest one's age (a scan of the ring:
    /// for the drain's progress line and `/readyz`, never per request).
    #[allow(
        clippy::disallowed_methods,
        reason = "the age of the oldest open stream, for a log line"
    )]
    pub fn open(&self) -> Open {
        let now = Instant::now()
            .saturating_duration_since(self.base)
            .as_secs()
            / SLOT_SECS;
        let newest = self.newest.load(Ordering::Relaxed).max(now);
        let mut open = Open::default();
        // Oldest second first: the first non-empty slot is the oldest stream.
        for sec in newest.saturating_sub(SLOTS as u64 - 1)..=newest {
            let n = self.open[(sec % SLOTS as u64) as usize].load(Ordering::Relaxed);
            if n > 0 {
                open.streams += u64::from(n);
                open.oldest
                    .get_or_insert(Duration::from_secs((now.saturating_sub(sec)) * SLOT_SECS));
            }
        }
        open
    }
}

/// Holds one stream in [`Shutdown::open`] until dropped.
#[derive(Debug)]
pub struct OpenStream {
    shutdown: std::sync::Arc<Shutdown>,
    slot: usize,
}

impl OpenStream {
    /// The instance's shutdown state.
    pub fn shutdown(&self) -> &Shutdown {
        &self.shutdown
    }
}

impl Drop for OpenStream {
    fn drop(&mut self) {
        self.shutdown.open[self.slot].fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[allow(clippy::disallowed_methods, reason = "test clock")]
    fn open_streams_are_counted_with_the_oldest_age_until_they_end() {
        let now = Instant::now();
        let Some(base) = now.checked_sub(Duration::from_secs(100)) else {
            panic!("the monotonic clock cannot go back 100 s (booted just now?)");
        };
        let s = Shutdown::since(base);
        assert_eq!(s.open(), Open::default(), "nothing open");
        let old = s.enter(base + Duration::from_secs(70));
        let young = s.enter(now);
        let open = s.open();
        assert_eq!(open.streams, 2);
        let oldest = open.oldest.unwrap_or_default();
        assert!(
            (29..=31).contains(&oldest.as_secs()),
            "the oldest is the one 30 s old: {oldest:?}"
        );
        drop(old);
        assert_eq!(s.open().streams, 1, "one left");
        drop(young);
        assert_eq!(s.open(), Open::default(), "all ended");
    }

    #[tokio::test]
    async fn the_first_cut_keeps_its_reason() {
        let s = Shutdown::new();
        assert_eq!(s.is_cut(), None);
        s.cut(Cut::GraceExpired);
        s.cut(Cut::Forced);
        assert_eq!(s.is_cut(), Some(Cut::GraceExpired));
        assert_eq!(s.wait_cut().await, Cut::GraceExpired);
        assert_eq!(Cut::Forced.error_type(), "shutdown_forced");
    }
}
