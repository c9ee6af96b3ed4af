//! WebSocket sessions of one instance (`WsSessions`): the count of relayed
//! WebSocket sessions and its cap, the stop signal, and their place among the
//! drain's open streams; not agent sessions (`watch::rollups`). In:
//! `enter`/`stop` from the relay, `active`/`wait_idle` from admin and the
//! drain; out: a `Slot` per running session.

use std::sync::Arc;

use tokio::sync::watch;

use super::shutdown::{OpenStream, Shutdown};

/// The WebSocket sessions of one tokentap instance: how many run, the cap
/// on them, and the shutdown signal they watch. Shared across reloads.
#[derive(Debug)]
pub struct WsSessions {
    count: watch::Sender<usize>,
    stop: watch::Sender<bool>,
    /// The instance's shutdown: WebSocket sessions count among its open streams,
    /// and one stopped after its cut is recorded as that cut.
    shutdown: Arc<Shutdown>,
}

impl WsSessions {
    /// No WebSocket sessions yet; they count among `shutdown`'s open streams.
    pub fn new(shutdown: Arc<Shutdown>) -> Arc<WsSessions> {
        Arc::new(WsSessions {
            count: watch::Sender::new(0),
            stop: watch::Sender::new(false),
            shutdown,
        })
    }

    /// The instance's shutdown state (its open streams, its cut).
    pub fn shutdown(&self) -> &Arc<Shutdown> {
        &self.shutdown
    }

    /// Watches the stop signal (`stop`): true once every WebSocket session is told
    /// to end.
    pub(crate) fn stopping(&self) -> watch::Receiver<bool> {
        self.stop.subscribe()
    }

    /// WebSocket sessions running now.
    pub fn active(&self) -> usize {
        *self.count.borrow()
    }

    /// A place for one more WebSocket session (started at `start`), unless `cap`
    /// are running.
    pub(crate) fn enter(self: &Arc<Self>, cap: usize, start: std::time::Instant) -> Option<Slot> {
        let admitted = self.count.send_if_modified(|n| {
            let room = *n < cap;
            if room {
                *n += 1;
            }
            room
        });
        admitted.then(|| Slot {
            sessions: self.clone(),
            _open: self.shutdown.enter(start),
        })
    }

    /// Resolves once no WebSocket session is running.
    pub async fn wait_idle(&self) {
        let _ = self.count.subscribe().wait_for(|n| *n == 0).await;
    }

    /// End every WebSocket session: each direction gets a close frame 1001 (going
    /// away) when it stands at a frame boundary, and is closed either way.
    pub fn stop(&self) {
        self.stop.send_replace(true);
    }
}

/// A running WebSocket session's place in the count and among the open streams.
pub(crate) struct Slot {
    sessions: Arc<WsSessions>,
    _open: OpenStream,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.sessions
            .count
            .send_modify(|n| *n = n.saturating_sub(1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_are_capped_and_counted() {
        let s = WsSessions::new(Shutdown::new());
        #[allow(clippy::disallowed_methods, reason = "test clock")]
        let now = std::time::Instant::now();
        let a = s.enter(2, now).expect("first");
        let _b = s.enter(2, now).expect("second");
        assert!(s.enter(2, now).is_none(), "third over the cap");
        assert_eq!(s.shutdown.open().streams, 2, "open streams");
        assert_eq!(s.active(), 2);
        drop(a);
        assert_eq!(s.active(), 1);
        assert!(s.enter(2, now).is_some(), "room again");
    }
}
