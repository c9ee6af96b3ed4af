//! A WebSocket session's side view: the relayed bytes of each direction in (from the
//! relay, after they were written on); WebSocket messages decoded from
//! them (`framing::websocket`), realtime events parsed from those
//! (`providers::realtime`), and the WebSocket session meter fed, out. Never touches
//! the relayed bytes and never fails the relay: a bad message is counted
//! and skipped; a broken frame stream stops metering for the WebSocket session,
//! which is then marked unmetered with the reason.

use std::sync::Arc;

use crate::framing::websocket::{Sender, WsDecoder, WsMessage, negotiated_deflate};
use crate::meter::shutdown::{Cut, Shutdown};
use crate::meter::ws_session::{Done, Party, WsSessionEnd, WsSessionMeter, WsStartRecorder};
use crate::meter::{ModalityTokens, RequestFacts};
use crate::providers::realtime::{
    DoneStatus, RealtimeEvent, RealtimeParser, RealtimeUsage, dialect_for_path,
};
use crate::telemetry::WsSessionTelemetry;

use super::relay::{Dir, End, Side, Tap};

/// Metering for one session.
pub(super) struct Metering {
    facts: RequestFacts,
    meter: Option<WsSessionMeter>,
    ws_session: Option<WsSessionTelemetry>,
    /// The decoders and parser; `None` once metering cannot follow.
    view: Option<View>,
    /// Why a WebSocket session stopped by tokentap's shutdown was stopped.
    shutdown: Arc<Shutdown>,
}

/// What reads the WebSocket session's messages.
struct View {
    up: WsDecoder,
    down: WsDecoder,
    parser: RealtimeParser,
}

impl Metering {
    /// Metering for the WebSocket session `ws_session`, whose handshake `facts`
    /// describe; `extensions` are the upstream's `Sec-WebSocket-Extensions`
    /// answer (permessage-deflate parameters); messages larger than
    /// `max_message` pass unread.
    pub(super) fn new(
        facts: &RequestFacts,
        path_and_query: &str,
        extensions: &[String],
        max_message: usize,
        ws_session: WsSessionTelemetry,
        shutdown: Arc<Shutdown>,
    ) -> Metering {
        let child = ws_session.clone();
        let start: WsStartRecorder = Box::new(move |f| Box::new(child.begin_child(f)));
        let mut meter = WsSessionMeter::new(facts.clone(), start);
        let extensions: Vec<&str> = extensions.iter().map(String::as_str).collect();
        let view = match (
            dialect_for_path(path_and_query),
            negotiated_deflate(&extensions),
        ) {
            (None, _) => {
                meter.unmetered("no realtime dialect is known for this path".into());
                None
            }
            (_, Err(e)) => {
                meter.unmetered(format!("Sec-WebSocket-Extensions: {e}"));
                None
            }
            // Every dialect speaks JSON: binary that cannot be (raw audio)
            // is walked without being copied or reassembled.
            (Some(dialect), Ok(deflate)) => Some(View {
                up: WsDecoder::new(Sender::Client, max_message, deflate.map(|d| d.0))
                    .skip_opaque_binary(),
                down: WsDecoder::new(Sender::Server, max_message, deflate.map(|d| d.1))
                    .skip_opaque_binary(),
                parser: RealtimeParser::new(dialect),
            }),
        };
        Metering {
            facts: facts.clone(),
            meter: Some(meter),
            ws_session: Some(ws_session),
            view,
            shutdown,
        }
    }

    /// One side's upgrade never completed: the WebSocket session ends here.
    pub(super) fn not_upgraded(&mut self) {
        self.end(WsSessionEnd::NotUpgraded);
    }

    /// The relay is over: record what is in flight and the WebSocket session span.
    pub(super) fn finish(&mut self, end: End) {
        let end = match end {
            End::Closed { first } => WsSessionEnd::Closed(party(first)),
            End::Failed { side, error } => {
                tracing::debug!(?side, %error, "websocket session failed");
                WsSessionEnd::Failed(party(side))
            }
            End::Idle => WsSessionEnd::Idle,
            // WebSocket sessions are stopped just before the drain's cut, or with it.
            End::Shutdown => {
                WsSessionEnd::Shutdown(self.shutdown.is_cut().unwrap_or(Cut::GraceExpired))
            }
        };
        self.end(end);
    }

    fn end(&mut self, end: WsSessionEnd) {
        if let (Some(meter), Some(ws_session)) = (self.meter.take(), self.ws_session.take()) {
            let summary = meter.end(end);
            ws_session.finish(&self.facts, &summary);
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
    fn read(&mut self, dir: Dir) {
        if let Some(m) = &mut self.meter {
            m.stamp(dir == Dir::Up);
        }
    }

    fn relayed(&mut self, dir: Dir, bytes: &[u8]) {
        let Some(meter) = &mut self.meter else { return };
        let up = dir == Dir::Up;
        meter.bytes(up, bytes.len());
        let Some(view) = &mut self.view else { return };
        meter.reading(up);
        let (decoder, parser) = match dir {
            Dir::Up => (&mut view.up, &mut view.parser),
            Dir::Down => (&mut view.down, &mut view.parser),
        };
        let fed = decoder.feed(bytes, &mut |msg| match msg {
            WsMessage::Text(json) | WsMessage::Binary(json) => {
                let apply = &mut |ev: RealtimeEvent<'_>| apply(meter, ev);
                if parser.message(!up, json, apply).is_err() {
                    meter.bad_message();
                }
            }
            WsMessage::Close { code, .. } => {
                let party = if up { Party::Client } else { Party::Upstream };
                meter.close(party, code);
            }
            // Counted as before, when the parser rejected them: no
            // dialect defines a message that is not JSON.
            WsMessage::Skipped { .. } | WsMessage::Opaque { .. } => meter.bad_message(),
            WsMessage::Ping | WsMessage::Pong => {}
        });
        if let Err(e) = fed {
            let side = if up { "client" } else { "upstream" };
            meter.unmetered(format!("{side} frames: {e}"));
            self.view = None;
        }
    }
}

/// Fold one WebSocket session event into the meter.
fn apply(meter: &mut WsSessionMeter, ev: RealtimeEvent<'_>) {
    match ev {
        RealtimeEvent::ResponseRequested { model } => meter.requested(model),
        RealtimeEvent::InputCommitted => meter.input_committed(),
        RealtimeEvent::ResponseStarted { id } => meter.started(id),
        RealtimeEvent::Output { pieces, .. } => meter.output(pieces),
        RealtimeEvent::ToolCall { name } => meter.tool_call(name),
        RealtimeEvent::ServerToolCall(tool) => meter.server_tool(tool),
        RealtimeEvent::Model(model) => meter.model(model),
        RealtimeEvent::Usage(usage) => meter.usage(usage.to_usage(), split(&usage)),
        RealtimeEvent::ResponseDone { id, status } => {
            let done = match status {
                DoneStatus::Completed => Done::Completed,
                DoneStatus::Cancelled { .. } => Done::Cancelled,
                DoneStatus::Failed { kind } => Done::Failed(kind.to_owned()),
                DoneStatus::Incomplete { reason } => Done::Incomplete(reason.map(str::to_owned)),
            };
            meter.done(id, done);
        }
        RealtimeEvent::Error { kind } => meter.error(kind),
        RealtimeEvent::Lane(_) | RealtimeEvent::Closing => {}
    }
}

/// The text/audio split of a realtime usage report. Lives here, not in
/// `providers`, because `meter` already depends on `providers`.
fn split(u: &RealtimeUsage) -> ModalityTokens {
    ModalityTokens {
        input_text: u.input_text,
        input_audio: u.input_audio,
        cached_text: u.cached_input_text,
        cached_audio: u.cached_input_audio,
        output_text: u.output_text,
        output_audio: u.output_audio,
    }
}
