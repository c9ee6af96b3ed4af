//! WebSocket session metering: the relay's read stamps and the WebSocket session's
//! events (a response asked for, input committed, output deltas, usage,
//! response done, errors, close frames) in; one `Measurement` per
//! response, each through a `Recorder` of its own, and one
//! `WsSessionSummary` when the WebSocket session ends, out. Reads the clock.
//!
//! TTFT of a response runs from the client message that asked for it
//! (`response.create`) or, with server-side voice activity detection, from
//! the server's "input committed / speech stopped" event, to its first
//! output delta: read at the relay's read of the bytes that carried them.

use std::time::{Duration, Instant, SystemTime};

use super::shutdown::Cut;

use super::{
    Measurement, ModalityTokens, Outcome, Reasoning, Recorder, RequestFacts, TokenSource, ToolUse,
};
use crate::providers::{ServerTool, UpstreamTiming, Usage};

/// Starts one response's recorder (its span is the WebSocket session span's child).
pub type WsStartRecorder = Box<dyn FnMut(&RequestFacts) -> Box<dyn Recorder> + Send>;

/// What started a response's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// The client asked for it (`response.create`).
    Requested,
    /// The server committed the user's input (voice activity detection).
    InputCommitted,
    /// Neither was seen: the server's first event for the response.
    ServerStarted,
}

/// How the upstream said a response ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Done {
    /// Finished normally.
    Completed,
    /// Cancelled at the client's request.
    Cancelled,
    /// Failed, with the upstream's error type.
    Failed(String),
    /// Stopped early for a reason that is not an error (a token limit, a
    /// content filter): complete, with the reason as its finish reason.
    Incomplete(Option<String>),
}

/// A side of the WebSocket session (who sent a close frame, who left).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Party {
    /// The downstream client.
    Client,
    /// The upstream server.
    Upstream,
}

/// How a WebSocket session ended, as the relay saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WsSessionEnd {
    /// Both sides closed; this one first.
    Closed(Party),
    /// The connection to this side failed (reset, broken pipe).
    Failed(Party),
    /// Nothing moved for `websocket.idle_timeout`.
    Idle,
    /// tokentap's shutdown stopped it, for this reason.
    Shutdown(Cut),
    /// The upgrade never completed on one side.
    NotUpgraded,
}

impl WsSessionEnd {
    /// The `tokentap.session.end` attribute value.
    pub fn as_str(self) -> &'static str {
        match self {
            WsSessionEnd::Closed(Party::Client) => "client_closed",
            WsSessionEnd::Closed(Party::Upstream) => "upstream_closed",
            WsSessionEnd::Failed(Party::Client) => "client_failed",
            WsSessionEnd::Failed(Party::Upstream) => "upstream_failed",
            WsSessionEnd::Idle => "idle_timeout",
            WsSessionEnd::Shutdown(_) => "shutdown",
            WsSessionEnd::NotUpgraded => "not_upgraded",
        }
    }
}

/// The WebSocket session's record, for its span.
#[derive(Debug, Clone, Default)]
pub struct WsSessionSummary {
    /// From the handshake request to the end of the relay.
    pub duration: Duration,
    /// Responses measured (each also recorded on its own).
    pub responses: u64,
    /// Input tokens summed over the WebSocket session's responses.
    pub input_tokens: u64,
    /// Output tokens summed over the WebSocket session's responses.
    pub output_tokens: u64,
    /// Cached input tokens summed over the responses that reported them.
    pub cached_input_tokens: Option<u64>,
    /// The text/audio split summed over the responses that reported it.
    pub modalities: ModalityTokens,
    /// Client tool calls summed over the WebSocket session's responses.
    pub tool_calls: u64,
    /// `error` events and bad messages seen.
    pub errors: u64,
    /// Close code the client sent, when seen.
    pub close_client: Option<u16>,
    /// Close code the upstream sent, when seen.
    pub close_upstream: Option<u16>,
    /// `WsSessionEnd::as_str`.
    pub end: &'static str,
    /// Why the WebSocket session's messages were not metered, when they were not.
    pub unmetered: Option<String>,
    /// Bytes relayed from client to upstream.
    pub bytes_up: u64,
    /// Bytes relayed from upstream to client.
    pub bytes_down: u64,
    /// The last response's model, else the WebSocket session's.
    pub model: Option<String>,
}

/// One response in flight.
struct Response {
    facts: RequestFacts,
    recorder: Box<dyn Recorder>,
    trigger: Trigger,
    id: Option<String>,
    first: Option<Instant>,
    last: Option<Instant>,
    pieces: u64,
    max_gap: Option<Duration>,
    usage: Usage,
    modalities: ModalityTokens,
    finish_reason: Option<String>,
    tools: ToolUse,
}

/// Folds one WebSocket session's events into per-response measurements.
pub struct WsSessionMeter {
    facts: RequestFacts,
    start_child: WsStartRecorder,
    /// When the bytes being read now were read: the time of their events.
    last_read: Instant,
    /// The last read in each direction (client to upstream, back).
    reads: [Instant; 2],
    current: Option<Response>,
    model: Option<String>,
    /// Who sent the first close frame: who closed the session.
    first_close: Option<Party>,
    summary: WsSessionSummary,
}

impl std::fmt::Debug for WsSessionMeter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WsSessionMeter")
            .field("route", &self.facts.route)
            .field("in_flight", &self.current.is_some())
            .finish_non_exhaustive()
    }
}

impl WsSessionMeter {
    /// A WebSocket session whose handshake is described by `facts`.
    pub fn new(facts: RequestFacts, start_child: WsStartRecorder) -> WsSessionMeter {
        WsSessionMeter {
            model: facts.request_model.clone(),
            facts,
            start_child,
            last_read: Instant::now(),
            reads: [Instant::now(); 2],
            current: None,
            first_close: None,
            summary: WsSessionSummary::default(),
        }
    }

    /// The relay just read bytes (`up`: from the client): events in them
    /// happened now.
    pub fn stamp(&mut self, up: bool) {
        self.reads[usize::from(!up)] = Instant::now();
    }

    /// The events that follow come from the last read in this direction.
    pub fn reading(&mut self, up: bool) {
        self.last_read = self.reads[usize::from(!up)];
    }

    /// Count relayed bytes (`up`: client to upstream).
    pub fn bytes(&mut self, up: bool, n: usize) {
        let n = n as u64;
        if up {
            self.summary.bytes_up += n;
        } else {
            self.summary.bytes_down += n;
        }
    }

    /// Metering cannot read this WebSocket session's messages, and why.
    pub fn unmetered(&mut self, why: String) {
        self.summary.unmetered = Some(why);
    }

    /// A message that could not be read was skipped.
    pub fn bad_message(&mut self) {
        self.summary.errors += 1;
    }

    /// The client asked for a response (its clock starts now).
    pub fn requested(&mut self, model: Option<&str>) {
        if self.current.is_none() {
            self.open(Trigger::Requested, model);
        }
    }

    /// The server committed the user's input (server-side VAD): a
    /// response follows, and its clock starts now.
    pub fn input_committed(&mut self) {
        if self.current.is_none() {
            self.open(Trigger::InputCommitted, None);
        }
    }

    /// The server started a response.
    pub fn started(&mut self, id: Option<&str>) {
        if self.current.is_none() {
            self.open(Trigger::ServerStarted, None);
        }
        if let (Some(r), Some(id)) = (&mut self.current, id) {
            r.id.get_or_insert_with(|| id.to_owned());
        }
    }

    /// An output delta carrying `pieces` content pieces.
    pub fn output(&mut self, pieces: u32) {
        if self.current.is_none() {
            self.open(Trigger::ServerStarted, None);
        }
        let at = self.last_read;
        let Some(r) = &mut self.current else { return };
        match r.last {
            None => r.first = Some(at),
            Some(last) => {
                let gap = at.saturating_duration_since(last);
                r.recorder.chunk_gap(gap);
                r.max_gap = Some(r.max_gap.map_or(gap, |m| m.max(gap)));
            }
        }
        r.last = Some(at);
        r.pieces += u64::from(pieces);
    }

    /// The response calls a client tool, named `name` when the wire names
    /// it. A call before any output opens the response, as output does.
    pub fn tool_call(&mut self, name: Option<&str>) {
        self.response().tools.record_call(name);
    }

    /// The response runs one call of a provider tool.
    pub fn server_tool(&mut self, tool: ServerTool) {
        let server = &mut self.response().tools.server;
        server.set(tool, server.get(tool).saturating_add(1));
    }

    /// The response in flight, opened by the server if none is.
    fn response(&mut self) -> &mut Response {
        match self.current {
            Some(ref mut r) => r,
            None => self.open(Trigger::ServerStarted, None),
        }
    }

    /// The model the WebSocket session (or response) runs on, from a server event.
    pub fn model(&mut self, model: &str) {
        if self.model.as_deref() != Some(model) {
            self.model = Some(model.to_owned());
        }
    }

    /// Usage reported for the response in flight, with its text/audio
    /// split (`split`, empty when not reported).
    pub fn usage(&mut self, usage: Usage, split: ModalityTokens) {
        if let Some(r) = &mut self.current {
            r.usage.merge(usage);
            r.modalities.merge(split);
        }
    }

    /// The upstream said the response in flight is over.
    pub fn done(&mut self, id: Option<&str>, done: Done) {
        if let (Some(r), Some(id)) = (&mut self.current, id) {
            r.id.get_or_insert_with(|| id.to_owned());
        }
        match done {
            Done::Completed => self.finish(Outcome::Complete, None),
            Done::Cancelled => self.finish(Outcome::ClientCancelled, None),
            Done::Failed(why) => self.finish(Outcome::UpstreamError, Some(why)),
            Done::Incomplete(reason) => {
                if let (Some(r), Some(reason)) = (&mut self.current, reason) {
                    r.finish_reason = Some(reason);
                }
                self.finish(Outcome::Complete, None);
            }
        }
    }

    /// The upstream sent an `error` event of type `kind`.
    pub fn error(&mut self, kind: &str) {
        self.summary.errors += 1;
        self.finish(Outcome::UpstreamError, Some(kind.to_owned()));
    }

    /// `party` sent a close frame with `code`.
    pub fn close(&mut self, party: Party, code: Option<u16>) {
        self.first_close.get_or_insert(party);
        match party {
            Party::Client => {
                self.summary.close_client = code;
                self.finish(Outcome::ClientCancelled, None);
            }
            Party::Upstream => {
                self.summary.close_upstream = code;
                match code {
                    Some(c) if !matches!(c, 1000 | 1001) => {
                        self.finish(Outcome::UpstreamError, Some(format!("websocket_close_{c}")));
                    }
                    _ => self.finish(
                        Outcome::UpstreamError,
                        Some("upstream_closed_mid_response".into()),
                    ),
                }
            }
        }
    }

    /// The WebSocket session is over: a response still in flight is recorded with
    /// the outcome the end implies; the WebSocket session's summary is returned.
    pub fn end(mut self, end: WsSessionEnd) -> WsSessionSummary {
        // The server closes TCP first after a close handshake (RFC 6455
        // §7.1.1), whoever started it: the first close frame says who did.
        let end = match (end, self.first_close) {
            (WsSessionEnd::Closed(_), Some(party)) => WsSessionEnd::Closed(party),
            _ => end,
        };
        let (outcome, why) = match end {
            WsSessionEnd::Closed(Party::Client) | WsSessionEnd::Failed(Party::Client) => {
                (Outcome::ClientCancelled, None)
            }
            WsSessionEnd::Closed(Party::Upstream) => {
                (Outcome::UpstreamError, Some("upstream_closed_mid_response"))
            }
            WsSessionEnd::Failed(Party::Upstream) => {
                (Outcome::UpstreamError, Some("upstream_reset"))
            }
            WsSessionEnd::Idle => (Outcome::UpstreamTimeout, Some("websocket_idle_timeout")),
            WsSessionEnd::Shutdown(cut) => (Outcome::Shutdown, Some(cut.error_type())),
            WsSessionEnd::NotUpgraded => (Outcome::UpstreamError, Some("upgrade_failed")),
        };
        self.finish(outcome, why.map(str::to_owned));
        let mut summary = std::mem::take(&mut self.summary);
        summary.duration = Instant::now().saturating_duration_since(self.facts.start);
        summary.end = end.as_str();
        summary.model = self.model.take();
        summary
    }

    fn open(&mut self, trigger: Trigger, model: Option<&str>) -> &mut Response {
        let at = self.last_read;
        let mut facts = self.facts.clone();
        facts.request_model = model.map(str::to_owned).or_else(|| self.model.clone());
        facts.stream = true;
        facts.start = at;
        facts.start_wall = wall_at(&self.facts, at);
        let recorder = (self.start_child)(&facts);
        self.current.insert(Response {
            facts,
            recorder,
            trigger,
            id: None,
            first: None,
            last: None,
            pieces: 0,
            max_gap: None,
            usage: Usage::default(),
            modalities: ModalityTokens::default(),
            finish_reason: None,
            tools: ToolUse::default(),
        })
    }

    /// Record the response in flight, if any.
    fn finish(&mut self, outcome: Outcome, error_type: Option<String>) {
        let Some(r) = self.current.take() else { return };
        let since = |t: Option<Instant>| t.map(|t| t.saturating_duration_since(r.facts.start));
        let (output_tokens, token_source) = match (r.usage.output, r.pieces) {
            (Some(n), _) => (Some(n), Some(TokenSource::Provider)),
            (None, 0) => (None, None),
            (None, n) => (Some(n), Some(TokenSource::Chunks)),
        };
        self.summary.responses += 1;
        self.summary.input_tokens += r.usage.input.unwrap_or(0);
        self.summary.output_tokens += output_tokens.unwrap_or(0);
        if let Some(n) = r.usage.cache_read {
            let total = self.summary.cached_input_tokens.get_or_insert(0);
            *total = total.saturating_add(n);
        }
        self.summary.modalities.add(&r.modalities);
        self.summary.tool_calls += u64::from(r.tools.client_calls);
        let end = match outcome {
            Outcome::Complete => r.last.unwrap_or(self.last_read),
            _ => Instant::now(),
        };
        let m = Measurement {
            outcome,
            status: 101,
            error_type: error_type.filter(|_| outcome != Outcome::Complete),
            error_cause: None,
            response_model: self.model.clone(),
            response_id: r.id,
            finish_reasons: r.finish_reason.into_iter().collect(),
            usage: r.usage,
            output_tokens,
            token_source,
            content_chunks: r.pieces,
            time_to_headers: None,
            // A WebSocket session's responses never wait for an upstream connection.
            pool_wait: None,
            // Nothing is forwarded per response: the relay's cost is the WebSocket session's.
            request_overhead: None,
            modalities: r.modalities,
            tools: r.tools,
            counted: None,
            shared_state: None,
            batch: None,
            time_to_first_byte: since(r.first),
            time_to_first_token: since(r.first),
            time_to_last_token: since(r.last),
            // Realtime output (audio, transcripts, text) is all visible.
            reasoning: Reasoning {
                time_to_first_visible: since(r.first),
                tokens: r.usage.reasoning,
                source: r.usage.reasoning.map(|_| TokenSource::Provider),
                ..Reasoning::default()
            },
            duration: end.saturating_duration_since(r.facts.start),
            max_gap: r.max_gap,
            response_bytes: 0,
            unmetered: None,
            malformed_events: 0,
            upstream_timing: UpstreamTiming::default(),
            server_software: None,
            request: r.facts,
        };
        let _ = r.trigger;
        r.recorder.finish(m);
    }
}

/// The wall-clock time of `at`, from the WebSocket session's start readings.
fn wall_at(facts: &RequestFacts, at: Instant) -> SystemTime {
    facts.start_wall + at.saturating_duration_since(facts.start)
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::providers::ProviderKind;

    type Seen = Arc<Mutex<Vec<Measurement>>>;

    struct Sink(Seen);
    impl Recorder for Sink {
        fn chunk_gap(&mut self, _: Duration) {}
        fn finish(self: Box<Self>, m: Measurement) {
            self.0.lock().expect("lock").push(m);
        }
    }

    fn meter() -> (WsSessionMeter, Seen) {
        let seen = Seen::default();
        let facts = RequestFacts {
            route: "rt".into(),
            route_labels: Default::default(),
            provider: ProviderKind::Openai,
            operation: None,
            request_model: Some("gpt-realtime".into()),
            stream: false,
            tenant: None,
            session: None,
            server_address: "upstream".into(),
            server_port: 443,
            request_body: crate::meter::RequestBody::Empty,
            service_tier: None,
            start_wall: SystemTime::now(),
            start: Instant::now(),
        };
        let sink = seen.clone();
        let start: WsStartRecorder = Box::new(move |_| Box::new(Sink(sink.clone())));
        (WsSessionMeter::new(facts, start), seen)
    }

    #[test]
    fn each_response_is_recorded_once_with_usage_and_outcome() {
        let (mut m, seen) = meter();
        m.stamp(true);
        m.reading(true);
        m.requested(None);
        m.started(Some("resp_1"));
        m.output(1);
        m.output(1);
        m.output(1);
        m.usage(
            Usage {
                input: Some(10),
                output: Some(7),
                cache_read: Some(4),
                ..Usage::default()
            },
            ModalityTokens {
                input_text: Some(6),
                input_audio: Some(4),
                cached_text: Some(4),
                output_audio: Some(7),
                ..ModalityTokens::default()
            },
        );
        // A later report overwrites only what it carries.
        m.usage(
            Usage::default(),
            ModalityTokens {
                output_text: Some(0),
                ..ModalityTokens::default()
            },
        );
        m.done(Some("resp_1"), Done::Completed);
        m.done(None, Done::Completed); // nothing in flight: ignored
        m.input_committed();
        m.output(1);
        m.close(Party::Client, Some(1000));
        let summary = m.end(WsSessionEnd::Closed(Party::Client));
        let seen = seen.lock().expect("lock");
        assert_eq!(seen.len(), 2, "two responses, each once");
        assert_eq!(seen[0].outcome, Outcome::Complete);
        assert_eq!(seen[0].output_tokens, Some(7), "provider usage wins");
        assert_eq!(seen[0].response_id.as_deref(), Some("resp_1"));
        assert_eq!(seen[0].content_chunks, 3);
        assert!(seen[0].time_to_first_token.is_some());
        assert_eq!(
            seen[0].request.request_model.as_deref(),
            Some("gpt-realtime")
        );
        assert_eq!(
            seen[1].outcome,
            Outcome::ClientCancelled,
            "client left mid-response"
        );
        assert_eq!(seen[1].token_source, Some(TokenSource::Chunks));
        assert_eq!(summary.responses, 2);
        assert_eq!(summary.input_tokens, 10);
        assert_eq!(summary.output_tokens, 8);
        let split = ModalityTokens {
            input_text: Some(6),
            input_audio: Some(4),
            cached_text: Some(4),
            cached_audio: None,
            output_text: Some(0),
            output_audio: Some(7),
        };
        assert_eq!(seen[0].modalities, split, "the response's own split");
        assert!(seen[1].modalities.is_empty(), "no usage, no split");
        assert_eq!(summary.modalities, split, "session sums what was reported");
        assert_eq!(summary.cached_input_tokens, Some(4));
        assert_eq!(summary.close_client, Some(1000));
        assert_eq!(summary.end, "client_closed");
    }

    #[test]
    fn upstream_error_close_and_error_events_are_upstream_errors() {
        let (mut m, seen) = meter();
        m.requested(Some("other-model"));
        m.output(2);
        m.close(Party::Upstream, Some(1011));
        m.requested(None);
        m.error("server_error");
        m.error("rate_limit"); // between responses: counted, nothing recorded
        let summary = m.end(WsSessionEnd::Closed(Party::Upstream));
        let seen = seen.lock().expect("lock");
        assert_eq!(seen.len(), 2);
        assert_eq!(seen[0].outcome, Outcome::UpstreamError);
        assert_eq!(seen[0].error_type.as_deref(), Some("websocket_close_1011"));
        assert_eq!(
            seen[0].request.request_model.as_deref(),
            Some("other-model")
        );
        assert_eq!(seen[1].error_type.as_deref(), Some("server_error"));
        assert_eq!(summary.errors, 2);
    }

    #[test]
    fn a_session_ending_between_responses_records_no_response() {
        let (mut m, seen) = meter();
        m.requested(None);
        m.output(1);
        m.done(None, Done::Completed);
        let summary = m.end(WsSessionEnd::Shutdown(Cut::GraceExpired));
        assert_eq!(seen.lock().expect("lock").len(), 1);
        assert_eq!(summary.end, "shutdown");
    }

    #[test]
    fn a_response_in_flight_at_shutdown_is_recorded_as_cut_by_tokentap() {
        for (cut, want) in [
            (Cut::GraceExpired, "shutdown_grace_expired"),
            (Cut::Forced, "shutdown_forced"),
        ] {
            let (mut m, seen) = meter();
            m.requested(None);
            m.output(1);
            let summary = m.end(WsSessionEnd::Shutdown(cut));
            let seen = seen.lock().expect("lock");
            assert_eq!(seen.len(), 1, "the response in flight is recorded");
            assert_eq!(
                seen[0].outcome,
                Outcome::Shutdown,
                "not the upstream's failure"
            );
            assert_eq!(seen[0].error_type.as_deref(), Some(want));
            assert_eq!(summary.end, "shutdown");
        }
    }
}
