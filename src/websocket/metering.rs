//! A session's side view: the relayed bytes of each direction in (from the
//! relay, after they were written on); WebSocket messages decoded from
//! them, session events parsed from those, and the session meter fed,
//! out. Never touches the relayed bytes and never fails the relay: a bad
//! frame or message is counted and metering of the session stops or skips.

use crate::meter::RequestFacts;
use crate::meter::session::{Party, SessionEnd, SessionMeter, StartRecorder};
use crate::telemetry::SessionTelemetry;

use super::relay::{Dir, End, Side, Tap};

/// Metering for one session.
pub struct Metering {
    facts: RequestFacts,
    meter: Option<SessionMeter>,
    session: Option<SessionTelemetry>,
}

impl Metering {
    /// Metering for the session `session`, whose handshake `facts`
    /// describe; `extensions` are the upstream's `Sec-WebSocket-Extensions`
    /// answer (permessage-deflate parameters).
    pub fn new(
        facts: &RequestFacts,
        _path_and_query: &str,
        _extensions: &[String],
        _max_message: usize,
        session: SessionTelemetry,
    ) -> Metering {
        let child = session.clone();
        let start: StartRecorder = Box::new(move |f| Box::new(child.begin_child(f)));
        let mut meter = SessionMeter::new(facts.clone(), start);
        meter.unmetered("websocket message decoding is not built in yet".into());
        Metering {
            facts: facts.clone(),
            meter: Some(meter),
            session: Some(session),
        }
    }

    /// One side's upgrade never completed: the session ends here.
    pub fn not_upgraded(&mut self) {
        self.end(SessionEnd::NotUpgraded);
    }

    /// The relay is over: record what is in flight and the session span.
    pub fn finish(&mut self, end: End) {
        let end = match end {
            End::Closed { first } => SessionEnd::Closed(party(first)),
            End::Failed { side, error } => {
                tracing::debug!(?side, %error, "websocket session failed");
                SessionEnd::Failed(party(side))
            }
            End::Idle => SessionEnd::Idle,
            End::Shutdown => SessionEnd::Shutdown,
        };
        self.end(end);
    }

    fn end(&mut self, end: SessionEnd) {
        if let (Some(meter), Some(session)) = (self.meter.take(), self.session.take()) {
            let summary = meter.end(end);
            session.finish(&self.facts, &summary);
        }
    }
}

fn party(side: Side) -> Party {
    match side {
        Side::Client => Party::Client,
        Side::Upstream => Party::Upstream,
    }
}

impl Tap for Metering {
    fn read(&mut self, _dir: Dir) {
        if let Some(m) = &mut self.meter {
            m.stamp();
        }
    }

    fn relayed(&mut self, dir: Dir, bytes: &[u8]) {
        if let Some(m) = &mut self.meter {
            m.bytes(dir == Dir::Up, bytes.len());
        }
    }
}
