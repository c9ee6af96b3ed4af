//! Drains: an upstream body whose client went away, plus its unfinished
//! `Meter`, in; the body read on in a background task (bounded in time,
//! bytes and number of drains) and one `client_cancelled` measurement with
//! the counts the upstream sent after the client left, out.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http_body::Body;
use http_body_util::BodyExt;
use tokio::sync::{Notify, watch};

use super::body::Meter;
use crate::error::BoxError;

/// How far one drain may go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DrainLimits {
    /// Longest a drain reads after the client left.
    pub timeout: Duration,
    /// Most body bytes a drain reads.
    pub max_bytes: u64,
}

/// How a drain ended; each has its own `error.type` detail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DrainEnd {
    /// The upstream body finished: the counts are complete.
    Complete,
    /// `drain_timeout` (or `upstream.total_timeout`) ran out first.
    Timeout,
    /// `upstream.drain_max_bytes` were read first.
    TooLarge,
    /// tokentap shut down first.
    Shutdown,
    /// The upstream body broke off.
    Aborted,
}

impl DrainEnd {
    /// The `error.type` of the `client_cancelled` measurement.
    pub fn error_type(self) -> &'static str {
        match self {
            DrainEnd::Complete => "client_cancelled_drained",
            DrainEnd::Timeout => "client_cancelled_drain_timeout",
            DrainEnd::TooLarge => "client_cancelled_drain_too_large",
            DrainEnd::Shutdown => "client_cancelled_drain_shutdown",
            DrainEnd::Aborted => "client_cancelled_drain_aborted",
        }
    }
}

/// `error.type` when a drain was refused (`upstream.max_drains` running).
pub const DRAIN_REFUSED: &str = "client_cancelled_drain_refused";

/// Every drain of one tokentap instance: how many run, a cap, and the stop
/// signal shutdown sends.
#[derive(Debug)]
pub struct Drains {
    active: AtomicUsize,
    max: usize,
    stop: watch::Sender<bool>,
    idle: Notify,
}

impl Drains {
    /// At most `max` drains at once.
    pub fn new(max: usize) -> Arc<Drains> {
        Arc::new(Drains {
            active: AtomicUsize::new(0),
            max,
            stop: watch::channel(false).0,
            idle: Notify::new(),
        })
    }

    /// Drains running now.
    pub fn active(&self) -> usize {
        self.active.load(Ordering::Acquire)
    }

    /// A slot for one more drain, unless `max` run or tokentap is stopping.
    fn admit(self: &Arc<Self>) -> Option<Ticket> {
        if *self.stop.borrow() {
            return None;
        }
        self.active
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.max).then_some(n + 1)
            })
            .ok()?;
        Some(Ticket(self.clone()))
    }

    /// End every drain now (each records what it has) and refuse new ones.
    pub fn stop(&self) {
        self.stop.send_replace(true);
    }

    /// Resolves once no drain runs.
    pub async fn wait_idle(&self) {
        loop {
            let notified = self.idle.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.active() == 0 {
                return;
            }
            notified.await;
        }
    }

    /// Start draining `body` for `meter` in the background, or (no runtime,
    /// at the cap, stopping) drop both: the upstream is cancelled and the
    /// request recorded as cancelled.
    pub(super) fn start<B>(
        self: &Arc<Self>,
        body: B,
        mut meter: Meter,
        limits: DrainLimits,
        total: Option<tokio::time::Instant>,
    ) where
        B: Body<Data = Bytes> + Unpin + Send + 'static,
        B::Error: Into<BoxError>,
    {
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let Some(ticket) = self.admit() else {
            tracing::debug!(route = %meter.facts().route, "drain refused: upstream.max_drains running");
            meter.cancel(DRAIN_REFUSED);
            return;
        };
        rt.spawn(run(body, meter, limits, total, ticket));
    }
}

/// One running drain; frees its slot when dropped.
struct Ticket(Arc<Drains>);

impl Drop for Ticket {
    fn drop(&mut self) {
        if self.0.active.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

async fn run<B>(
    mut body: B,
    mut meter: Meter,
    limits: DrainLimits,
    total: Option<tokio::time::Instant>,
    ticket: Ticket,
) where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    let mut until = tokio::time::Instant::now() + limits.timeout;
    if let Some(total) = total {
        until = until.min(total);
    }
    let mut stop = ticket.0.stop.subscribe();
    let mut read = 0u64;
    let end = loop {
        tokio::select! {
            biased;
            _ = stop.wait_for(|s| *s) => break DrainEnd::Shutdown,
            () = tokio::time::sleep_until(until) => break DrainEnd::Timeout,
            frame = body.frame() => match frame {
                None => break DrainEnd::Complete,
                Some(Err(_)) => break DrainEnd::Aborted,
                Some(Ok(frame)) => {
                    if let Some(data) = frame.data_ref() {
                        meter.on_data(data);
                        read += data.len() as u64;
                    }
                    if body.is_end_stream() {
                        break DrainEnd::Complete;
                    }
                    if read >= limits.max_bytes {
                        break DrainEnd::TooLarge;
                    }
                }
            },
        }
    };
    tracing::debug!(route = %meter.facts().route, ?end, bytes = read, "drain ended");
    meter.finish_drain(end);
    // An unfinished upstream body is dropped here: the upstream is cancelled.
    drop(body);
    drop(ticket);
}
