//! The metered body: the upstream response body in, the identical frames out
//! to the client, with a borrowed view of each chunk fed to the parser and
//! one clock reading per chunk folded into the request's `Meter`.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use http_body::{Body, Frame, SizeHint};
use tokio::time::Sleep;

use super::decompress::Decompressor;
use super::drain::{DrainEnd, DrainLimits, Drains};
use super::ledger::{Ledger, LedgerKey, SharedLedger};
use super::shutdown::{Cut, OpenStream, Shutdown};
use super::tokenize::{self, Plan};
use super::{
    Counted, Measurement, Outcome, Reasoning, Recorder, RequestFacts, SharedState, TokenSource,
    ToolUse, Unmetered,
};
use crate::providers::batch::BatchTally;
use crate::providers::{
    ContentKind, Event, Parser, ProviderKind, ServerTool, UpstreamTiming, Usage,
};
use crate::rewrite::UsageStripper;

use crate::error::BoxError;

/// `error.type` of a stream that ended without its terminal event.
pub const MISSING_TERMINAL: &str = "missing_terminal_event";

/// How the response ended, as seen by the meter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// The body finished.
    Eos,
    /// The upstream body broke off (connection reset, bad framing).
    Aborted,
    /// No body bytes arrived within `upstream.idle_timeout`.
    IdleTimeout,
    /// The request ran past `upstream.total_timeout`.
    TotalTimeout,
}

/// Per-request accumulator. Records exactly once: on `finish`, `fail`, or,
/// if neither ran, on drop as `ClientCancelled`.
pub struct Meter {
    recorder: Option<Box<dyn Recorder>>,
    facts: RequestFacts,
    parser: Option<Parser>,
    decompressor: Option<Decompressor>,
    scratch: Vec<u8>,
    unmetered: Option<Unmetered>,
    /// The framing broke beyond resynchronising: metering stopped.
    malformed: bool,
    /// The body is parsed (a parser was set up from the head).
    metered: bool,
    /// Events skipped because they could not be read (read from the
    /// parser after every chunk, so it survives the parser).
    malformed_events: u64,
    status: u16,
    /// The response head's `x-served-by` or `server` header.
    server_software: Option<http::HeaderValue>,
    time_to_headers: Option<Duration>,
    pool_wait: Option<Duration>,
    request_overhead: Option<Duration>,
    first_byte: Option<Instant>,
    first_token: Option<Instant>,
    last_token: Option<Instant>,
    /// First chunk with visible output / with reasoning.
    first_visible: Option<Instant>,
    first_reasoning: Option<Instant>,
    max_gap: Option<Duration>,
    bytes: u64,
    tally: Tally,
    /// Count tokens with a tokenizer when the provider reports none.
    plan: Option<Plan>,
    /// Set by the upstream client once the request's head is written to
    /// an upstream connection; `None` when nobody tracks it. The meter's
    /// own: the client borrows it while it sends (`Meter::sent_flag`).
    sent: Option<AtomicBool>,
    /// Count the usage once per response id (stored and background responses).
    once: Option<CountOnce>,
    /// Count a batch result file once per file or batch id.
    batch_once: Option<BatchOnce>,
    /// A batch result file's totals, once read to its end.
    batch: Option<BatchTally>,
    /// Holds the request among the instance's open streams until it is
    /// recorded; a drop after the drain's cut is recorded as that cut.
    open: Option<OpenStream>,
}

/// Counting a batch result file's usage once however often it is
/// downloaded.
#[derive(Debug)]
struct BatchOnce {
    ledger: Arc<Ledger>,
    /// The ledger namespace (`file`, `batch`) and the id.
    namespace: &'static str,
    key: String,
}

impl BatchOnce {
    /// The key to decide on: only a file read to its end is counted.
    fn key(&self, m: &Measurement) -> Option<LedgerKey> {
        let whole = m.batch.is_some();
        whole.then(|| LedgerKey::new(m.request.provider.as_str(), self.namespace, &self.key))
    }

    /// Decide whether `m`'s batch totals count: a file read to its end is
    /// counted by its first download only; one cut short counts nothing
    /// and is not remembered, so a later whole download counts it.
    /// `answer` is the fleet's decision, when the store gave one.
    fn settle(self, m: &mut Measurement, answer: Option<bool>) {
        let key = self.key(m);
        m.counted = match (&mut m.batch, key) {
            (None, _) if !(200..300).contains(&m.status) => None,
            (None, _) => Some(Counted::Withheld),
            (Some(tally), Some(key)) => {
                if decide(&self.ledger, &key, answer) {
                    Some(Counted::First)
                } else {
                    tally.models.clear();
                    Some(Counted::Repeat)
                }
            }
            (Some(_), None) => None,
        };
    }
}

/// The fleet's answer when there is one (remembered in process too, for
/// when the store is away), else this process's table.
fn decide(ledger: &Ledger, key: &LedgerKey, answer: Option<bool>) -> bool {
    match answer {
        Some(first) => {
            ledger.remember(key);
            first
        }
        None => ledger.first(key),
    }
}

/// Counting a response's usage once however often it is seen.
#[derive(Debug)]
struct CountOnce {
    ledger: Arc<Ledger>,
    /// The response goes on without this request (a background response,
    /// or one read back by id): without its final usage nothing counts.
    goes_on: bool,
}

impl CountOnce {
    /// The key to decide on: only a response that reported usage and has
    /// an id is counted once.
    fn key(&self, m: &Measurement) -> Option<LedgerKey> {
        let reported = m.usage.input.is_some() || m.usage.output.is_some();
        let id = m.response_id.as_deref().filter(|_| reported)?;
        Some(LedgerKey::new(m.request.provider.as_str(), "response", id))
    }

    /// Decide whether `m`'s usage counts, and drop it when it does not.
    fn settle(self, m: &mut Measurement, answer: Option<bool>) {
        let reported = m.usage.input.is_some() || m.usage.output.is_some();
        m.counted = match (reported, self.key(m)) {
            (true, Some(key)) if decide(&self.ledger, &key, answer) => Some(Counted::First),
            (true, Some(_)) => Some(Counted::Repeat),
            // Without an id it cannot be seen again as the same response.
            (true, None) => None,
            (false, _) if self.goes_on => Some(Counted::Withheld),
            (false, _) => None,
        };
        if matches!(m.counted, Some(Counted::Repeat | Counted::Withheld)) {
            m.usage = Usage::default();
            m.output_tokens = None;
            m.token_source = None;
            m.reasoning.tokens = None;
            m.reasoning.source = None;
        }
    }
}

/// The counted-once decisions a finished request still needs.
#[derive(Debug)]
struct Settle {
    once: Option<CountOnce>,
    batch: Option<BatchOnce>,
}

impl Settle {
    /// The fleet's ledger and the key to claim on it, when a decision is
    /// needed and a store is configured.
    fn claim(&self, m: &Measurement) -> Option<(Arc<dyn SharedLedger>, LedgerKey)> {
        let once = self
            .once
            .as_ref()
            .and_then(|o| Some((&o.ledger, o.key(m)?)));
        let batch = self
            .batch
            .as_ref()
            .and_then(|b| Some((&b.ledger, b.key(m)?)));
        let (ledger, key) = once.or(batch)?;
        Some((ledger.shared()?.clone(), key))
    }

    /// Decide, with the fleet's `answer` when `asked` the store.
    fn settle(self, m: &mut Measurement, asked: bool, answer: Option<bool>) {
        if let Some(once) = self.once {
            once.settle(m, answer);
        }
        if let Some(batch) = self.batch {
            batch.settle(m, answer);
        }
        if asked {
            m.shared_state = Some(match answer {
                Some(_) => SharedState::Store,
                None => SharedState::Local,
            });
        }
    }
}

impl std::fmt::Debug for Meter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Meter")
            .field("route", &self.facts.route)
            .finish_non_exhaustive()
    }
}

/// What the events of one response added up to.
#[derive(Debug, Default)]
struct Tally {
    content_chunks: u64,
    pieces: u64,
    usage: Usage,
    model: Option<String>,
    response_id: Option<String>,
    finish_reasons: Vec<String>,
    error: Option<String>,
    upstream_timing: UpstreamTiming,
    /// Output text literals for the tokenizer (`Some` only when planned).
    text: Option<Vec<u8>>,
    /// Content pieces whose text was collected.
    texted: u64,
    /// The protocol's terminal event arrived (`Event::Done`).
    done: bool,
    /// Set while feeding one chunk when any of its frames carried
    /// visible output / reasoning.
    chunk_visible: bool,
    chunk_reasoning: bool,
    /// Pieces of frames that carried reasoning (a `Mixed` frame counts one).
    reasoning_pieces: u64,
    /// Client tool calls and provider-run tools counted from the output.
    tools: ToolUse,
    /// Provider-run tool calls the provider billed (its usage), per
    /// `ServerTool::ALL` index: these replace the counted ones.
    billed_tools: [Option<u32>; 5],
}

impl Tally {
    fn apply(&mut self, event: Event<'_>) {
        match event {
            Event::Content { pieces, kind } => {
                self.content_chunks += 1;
                self.pieces += u64::from(pieces.max(1));
                self.chunk_visible |= kind.is_visible();
                self.chunk_reasoning |= kind.is_reasoning();
                self.reasoning_pieces += match kind {
                    ContentKind::Visible => 0,
                    ContentKind::Reasoning => u64::from(pieces.max(1)),
                    ContentKind::Mixed => 1,
                };
            }
            Event::Usage(u) => self.usage.merge(u),
            Event::Model(m) => set_if_changed(&mut self.model, m),
            Event::ResponseId(id) => set_if_changed(&mut self.response_id, id),
            Event::FinishReason(r) => {
                if !self.finish_reasons.iter().any(|have| have == r) {
                    self.finish_reasons.push(r.to_owned());
                }
            }
            Event::Error { kind } => {
                if self.error.is_none() {
                    self.error = Some(kind.to_owned());
                }
            }
            Event::UpstreamTiming(t) => self.upstream_timing.merge(t),
            Event::Text(literal) => {
                if let Some(buf) = self
                    .text
                    .as_mut()
                    .filter(|b| b.len() + literal.len() < tokenize::MAX_BYTES)
                {
                    buf.extend_from_slice(literal.as_bytes());
                    buf.push(b',');
                    self.texted += 1;
                }
            }
            Event::Done => self.done = true,
            Event::ToolCall { name } => self.tools.record_call(name),
            Event::ServerToolCalls { tool, calls } => {
                let seen = self.tools.server.get(tool).saturating_add(calls);
                self.tools.server.set(tool, seen);
            }
            Event::ServerToolUsage { tool, calls } => {
                self.billed_tools[tool as usize] = Some(calls)
            }
        }
    }

    /// The tools used: the provider's billed counts where it gave them,
    /// else the calls seen in the output.
    fn take_tools(&mut self) -> ToolUse {
        let mut tools = std::mem::take(&mut self.tools);
        for tool in ServerTool::ALL {
            if let Some(billed) = self.billed_tools[tool as usize] {
                tools.server.set(tool, billed);
            }
        }
        tools
    }
}

impl Tally {
    /// A new chunk: no output seen in it yet.
    fn start_chunk(&mut self) {
        self.chunk_visible = false;
        self.chunk_reasoning = false;
    }
}

/// Providers repeat the model and id in every chunk: allocate only on change.
fn set_if_changed(slot: &mut Option<String>, value: &str) {
    if slot.as_deref() != Some(value) {
        *slot = Some(value.to_owned());
    }
}

impl Meter {
    /// Start metering a request whose head arrived at `facts.start`.
    pub fn new(facts: RequestFacts, recorder: Box<dyn Recorder>) -> Meter {
        Meter::with(facts, Some(recorder))
    }

    fn with(facts: RequestFacts, recorder: Option<Box<dyn Recorder>>) -> Meter {
        Meter {
            recorder,
            facts,
            parser: None,
            decompressor: None,
            scratch: Vec::new(),
            unmetered: None,
            malformed: false,
            metered: false,
            malformed_events: 0,
            status: 0,
            server_software: None,
            time_to_headers: None,
            pool_wait: None,
            request_overhead: None,
            first_byte: None,
            first_token: None,
            last_token: None,
            first_visible: None,
            first_reasoning: None,
            max_gap: None,
            bytes: 0,
            tally: Tally::default(),
            plan: None,
            sent: None,
            once: None,
            batch_once: None,
            batch: None,
            open: None,
        }
    }

    /// Count the request among `shutdown`'s open streams until it is
    /// recorded; if it is dropped unfinished after the drain cut, the cut
    /// is recorded (outcome `shutdown`), not a client cancellation.
    pub fn watch_shutdown(&mut self, shutdown: &Arc<Shutdown>) {
        self.open = Some(shutdown.enter(self.facts.start));
    }

    /// The drain's cut, if the instance's drain has cut.
    fn cut(&self) -> Option<Cut> {
        self.open.as_ref().and_then(|o| o.shutdown().is_cut())
    }

    /// The facts this meter was started with.
    pub fn facts(&self) -> &RequestFacts {
        &self.facts
    }

    /// Collect output text so `plan` can count tokens if no usage arrives.
    pub fn count_tokens_with(&mut self, plan: Plan) {
        self.tally.text = Some(b"[".to_vec());
        self.plan = Some(plan);
    }

    /// Track whether the request's head is written upstream, starting
    /// with `sent`; the upstream client sets the flag ([`Meter::sent_flag`]).
    /// Until it is set the provider has received nothing: a request that
    /// ends before (no connection, a refused proxy, a full pool, a client
    /// that left) gets no input-token estimate and so no cost.
    pub fn track_sent(&mut self, sent: bool) {
        self.sent = Some(AtomicBool::new(sent));
    }

    /// The flag [`Meter::track_sent`] made, for the upstream client to
    /// set while it sends (`None` when nobody tracks it).
    pub fn sent_flag(&self) -> Option<&AtomicBool> {
        self.sent.as_ref()
    }

    /// Whether the provider may have received the request: a response
    /// head came, or its head was written upstream (or nobody tracked it).
    fn reached_provider(&self) -> bool {
        self.time_to_headers.is_some()
            || self.sent.as_ref().is_none_or(|s| s.load(Ordering::Acquire))
    }

    /// Count this response's usage once per response id in `ledger`; when
    /// `goes_on` (a background response, one read back by id), a request
    /// that ends without the final usage counts nothing, not even an
    /// estimate, and no tokenizer runs for it.
    pub fn count_once_with(&mut self, ledger: Arc<Ledger>, goes_on: bool) {
        if goes_on {
            self.plan = None;
            self.tally.text = None;
        }
        self.once = Some(CountOnce { ledger, goes_on });
    }

    /// Count this download's batch result totals once per `key` (a file
    /// or batch id) in `namespace` of `ledger`.
    pub fn count_batch_once_with(
        &mut self,
        ledger: Arc<Ledger>,
        namespace: &'static str,
        key: String,
    ) {
        self.batch_once = Some(BatchOnce {
            ledger,
            namespace,
            key,
        });
    }

    /// The request waited `wait` for an upstream connection or stream slot.
    pub fn on_pool_wait(&mut self, wait: Duration) {
        self.pool_wait = Some(wait);
    }

    /// The request is handed to the upstream client now: what tokentap
    /// spent on it since t_req is its request overhead.
    pub fn on_send(&mut self) {
        self.request_overhead = Some(self.facts.start.elapsed());
    }

    /// A response frame whose first bytes were read at `read` (the instant
    /// `on_data` returned) is handed to the client connection now.
    pub fn on_forwarded(&mut self, read: Instant) {
        if let Some(r) = self.recorder.as_mut() {
            r.chunk_overhead(read.elapsed());
        }
    }

    /// What the response head says served it: its `x-served-by`, else its
    /// `server` header (a handle to the header's bytes; nothing is copied).
    pub fn on_served_by(&mut self, headers: &http::HeaderMap) {
        self.server_software = headers
            .get("x-served-by")
            .or_else(|| headers.get(http::header::SERVER))
            .cloned();
    }

    /// The response head arrived. `parser` is `Err(reason)` when the body
    /// cannot be metered; `content_encoding` is the raw header value.
    pub fn on_head(
        &mut self,
        status: u16,
        stream: bool,
        parser: Result<Parser, Unmetered>,
        content_encoding: Option<&str>,
    ) {
        self.time_to_headers = Some(self.facts.start.elapsed());
        self.status = status;
        self.facts.stream |= stream;
        if let Ok(p) = &parser {
            self.set_provider(p.provider());
        }
        self.metered = parser.is_ok();
        match parser {
            Ok(p) => self.parser = Some(p),
            Err(why) => self.unmetered = Some(why),
        }
        if let (Some(enc), Some(_)) = (content_encoding, &self.parser) {
            match Decompressor::new(enc) {
                Ok(d) => self.decompressor = d,
                Err(e) => self.stop_metering(Unmetered::Encoding(e.to_string())),
            }
        }
    }

    /// The provider whose format the body is parsed as: everything
    /// recorded for this request carries its label.
    fn set_provider(&mut self, provider: ProviderKind) {
        if self.facts.provider != provider {
            self.facts.provider = provider;
            if let Some(recorder) = &mut self.recorder {
                recorder.provider(provider);
            }
        }
    }

    fn stop_metering(&mut self, why: Unmetered) {
        self.parser = None;
        self.decompressor = None;
        self.unmetered = Some(why);
    }

    /// One body chunk on its way to the client; returns the clock reading
    /// taken for it (when its bytes were read).
    pub fn on_data(&mut self, data: &[u8]) -> Instant {
        let now = Instant::now();
        self.read_chunk(now, data);
        now
    }

    fn read_chunk(&mut self, now: Instant, data: &[u8]) {
        self.bytes += data.len() as u64;
        self.first_byte.get_or_insert(now);
        let Some(parser) = self.parser.as_mut() else {
            return;
        };
        let tally = &mut self.tally;
        tally.start_chunk();
        let view: &[u8] = match self.decompressor.as_mut() {
            None => data,
            Some(d) => {
                self.scratch.clear();
                if let Err(e) = d.feed(data, &mut self.scratch) {
                    self.stop_metering(Unmetered::Encoding(e.to_string()));
                    return;
                }
                &self.scratch
            }
        };
        let fed = parser.feed(view, &mut |ev| tally.apply(ev));
        self.malformed_events = parser.malformed_events();
        if fed.is_err() {
            self.malformed = true;
            self.parser = None;
        } else if parser.is_other_file() {
            self.stop_metering(Unmetered::UnknownFormat(
                "a downloaded file that holds no batch results".into(),
            ));
            self.batch_once = None;
            return;
        }
        self.content_at(now);
    }

    /// Fold the chunk just fed in at `now`, if any frame of it was output.
    fn content_at(&mut self, now: Instant) {
        let (visible, reasoning) = (self.tally.chunk_visible, self.tally.chunk_reasoning);
        if !visible && !reasoning {
            return;
        }
        if visible {
            self.first_visible.get_or_insert(now);
        }
        if reasoning {
            self.first_reasoning.get_or_insert(now);
        }
        if let Some(prev) = self.last_token {
            let gap = now - prev;
            self.max_gap = Some(self.max_gap.map_or(gap, |m| m.max(gap)));
            if let Some(r) = self.recorder.as_mut() {
                r.chunk_gap(gap);
            }
        }
        self.first_token.get_or_insert(now);
        self.last_token = Some(now);
    }

    /// The body ended (normally or not): flush the parser and record.
    pub fn finish(&mut self, end: End) {
        if self.recorder.is_none() {
            return;
        }
        if end == End::Eos {
            self.flush_parser();
        }
        let (outcome, error_type) = match end {
            End::Eos => self.eos_outcome(),
            End::Aborted => (Outcome::UpstreamError, Some("upstream_aborted".to_owned())),
            End::IdleTimeout => (
                Outcome::UpstreamTimeout,
                Some("upstream_idle_timeout".to_owned()),
            ),
            End::TotalTimeout => (
                Outcome::UpstreamTimeout,
                Some("upstream_timeout".to_owned()),
            ),
        };
        self.record(outcome, error_type);
    }

    /// The body ended: whatever the parser still holds is the last frame.
    fn flush_parser(&mut self) {
        if let Some(mut parser) = self.parser.take() {
            let tally = &mut self.tally;
            tally.start_chunk();
            if parser.finish(&mut |ev| tally.apply(ev)).is_err() {
                self.malformed = true;
            }
            self.malformed_events = parser.malformed_events();
            self.batch = parser.batch().cloned();
            if parser.is_other_file() {
                self.unmetered = Some(Unmetered::UnknownFormat(
                    "a downloaded file that holds no batch results".into(),
                ));
                self.batch_once = None;
            }
            if self.tally.chunk_visible || self.tally.chunk_reasoning {
                self.content_at(Instant::now());
            }
        }
    }

    /// How a body that ended cleanly went. In order: an error status or an
    /// error inside the body is `upstream_error`; framing that broke beyond
    /// resynchronising is `malformed`; a body without its terminal event is
    /// `malformed` when events were skipped (the terminal may have been
    /// one of them) and otherwise `incomplete` for a 2xx stream; the rest
    /// is `complete` (with `malformed_events` telling what was skipped).
    fn eos_outcome(&mut self) -> (Outcome, Option<String>) {
        if self.status >= 400 || self.tally.error.is_some() {
            let kind = self
                .tally
                .error
                .take()
                .unwrap_or_else(|| self.status.to_string());
            (Outcome::UpstreamError, Some(kind))
        } else if self.malformed {
            (Outcome::Malformed, Some("malformed_body".to_owned()))
        } else if self.metered && self.unmetered.is_none() && !self.tally.done {
            if self.malformed_events > 0 {
                (Outcome::Malformed, Some("malformed_events".to_owned()))
            } else if self.facts.stream && (200..300).contains(&self.status) {
                (Outcome::Incomplete, Some(MISSING_TERMINAL.to_owned()))
            } else {
                (Outcome::Complete, None)
            }
        } else {
            (Outcome::Complete, None)
        }
    }

    /// The upstream failed before a response head: record the status sent
    /// to the client and the error code. A 504 means tokentap gave up
    /// waiting (connect or head timeout): outcome `upstream_timeout`.
    pub fn fail(&mut self, status: u16, code: &str) {
        self.fail_because(status, code, None);
    }

    /// As [`Meter::fail`], with why it failed (`cause`, for the access log).
    pub fn fail_because(&mut self, status: u16, code: &str, cause: Option<&str>) {
        self.status = status;
        let outcome = if status == 504 {
            Outcome::UpstreamTimeout
        } else {
            Outcome::UpstreamError
        };
        self.record_caused(outcome, Some(code.to_owned()), cause.map(str::to_owned));
    }

    /// The client went away: record `client_cancelled` with this `error.type`.
    pub fn cancel(&mut self, detail: &str) {
        self.record(Outcome::ClientCancelled, Some(detail.to_owned()));
    }

    /// A drain (the body read on after the client left) ended: flush the
    /// parser when the body finished, and record `client_cancelled` with
    /// what the upstream sent.
    pub fn finish_drain(&mut self, end: DrainEnd) {
        if end == DrainEnd::Complete {
            self.flush_parser();
        }
        self.cancel(end.error_type());
    }

    /// Whether the measurement was already recorded.
    pub fn is_finished(&self) -> bool {
        self.recorder.is_none()
    }

    /// Move the unfinished request out, leaving a spent meter behind.
    fn detach(&mut self) -> Meter {
        let spent = Meter::with(self.facts.clone(), None);
        std::mem::replace(self, spent)
    }

    fn record(&mut self, outcome: Outcome, error_type: Option<String>) {
        self.record_caused(outcome, error_type, None);
    }

    fn record_caused(
        &mut self,
        outcome: Outcome,
        error_type: Option<String>,
        error_cause: Option<String>,
    ) {
        let Some(recorder) = self.recorder.take() else {
            return;
        };
        self.open = None;
        let start = self.facts.start;
        let since = |t: Option<Instant>| t.map(|t| t - start);
        let duration = start.elapsed();
        let mut tally = std::mem::take(&mut self.tally);
        let tools = tally.take_tools();
        let (text, texted, pieces) = (tally.text.take(), tally.texted, tally.pieces);
        let (output_tokens, token_source) = match (tally.usage.output, tally.pieces) {
            (Some(n), _) => (Some(n), Some(TokenSource::Provider)),
            (None, 0) => (None, None),
            (None, pieces) => (Some(pieces), Some(TokenSource::Chunks)),
        };
        let mut time_to_first_token = since(self.first_token);
        let mut time_to_last_token = since(self.last_token);
        let mut reasoning = Reasoning {
            time_to_first_visible: since(self.first_visible),
            time_to_first_reasoning: since(self.first_reasoning),
            ..Reasoning::default()
        };
        (reasoning.tokens, reasoning.source) = match (tally.usage.reasoning, tally.reasoning_pieces)
        {
            (Some(n), _) => (Some(n), Some(TokenSource::Provider)),
            (None, 0) => (None, None),
            (None, pieces) => (Some(pieces), Some(TokenSource::Chunks)),
        };
        if !self.facts.stream && outcome == Outcome::Complete {
            // A whole body: its first token is the complete body, and no
            // thinking time can be seen inside it.
            time_to_first_token = Some(duration);
            time_to_last_token = Some(duration);
            reasoning.time_to_first_visible = Some(duration);
            reasoning.time_to_first_reasoning = None;
        }
        // The meter is spent from here on: the facts' strings move into the
        // measurement rather than being copied.
        let (request_model, tenant) = (self.facts.request_model.take(), self.facts.tenant.take());
        let request = RequestFacts {
            request_model,
            tenant,
            ..self.facts.clone()
        };
        let m = Measurement {
            request,
            outcome,
            status: self.status,
            error_type,
            error_cause,
            response_model: tally.model,
            response_id: tally.response_id,
            finish_reasons: tally.finish_reasons,
            usage: tally.usage,
            output_tokens,
            token_source,
            content_chunks: tally.content_chunks,
            time_to_headers: self.time_to_headers,
            time_to_first_byte: since(self.first_byte),
            time_to_first_token,
            time_to_last_token,
            reasoning,
            duration,
            max_gap: self.max_gap,
            response_bytes: self.bytes,
            unmetered: self.unmetered.take(),
            malformed_events: self.malformed_events,
            upstream_timing: tally.upstream_timing,
            server_software: self.server_software.take(),
            pool_wait: self.pool_wait,
            request_overhead: self.request_overhead,
            modalities: super::ModalityTokens::default(),
            tools,
            counted: None,
            shared_state: None,
            batch: self.batch.take(),
        };
        let settle = Settle {
            once: self.once.take(),
            batch: self.batch_once.take(),
        };
        let settle_claim = settle.claim(&m);
        let plan = self.plan.take();
        // Tokens and cost belong only to what the provider received.
        let reached_provider = self.reached_provider();
        // Recorded once the counted-once decision is taken: at once in
        // process, or when the store answered (after the last byte).
        let complete = move |mut m: Measurement, asked: bool, answer: Option<bool>| {
            settle.settle(&mut m, asked, answer);
            let needs_counting = reached_provider
                && m.counted.is_none()
                && (m.usage.output.is_none() || m.usage.input.is_none());
            match (plan, text) {
                (Some(plan), Some(text)) if needs_counting => {
                    let untexted = pieces.saturating_sub(texted);
                    plan.submit(m, recorder, text, untexted);
                }
                _ => recorder.finish(m),
            }
        };
        match settle_claim {
            Some((shared, key)) => {
                shared.claim(key, Box::new(move |answer| complete(m, true, answer)));
            }
            None => complete(m, false, None),
        }
    }
}

impl Drop for Meter {
    fn drop(&mut self) {
        // Nobody finished the request: the drain cut it, or else the
        // client went away.
        match self.cut() {
            Some(cut) => self.record_caused(
                Outcome::Shutdown,
                Some(cut.error_type().to_owned()),
                Some(cut.cause().to_owned()),
            ),
            None => self.record(
                Outcome::ClientCancelled,
                Some("client_cancelled".to_owned()),
            ),
        }
    }
}

/// The upstream response body, forwarded frame by frame, metered on the side.
pub struct MeteredBody<B> {
    /// `None` only once a drain took it (in `drop`).
    inner: Option<B>,
    meter: Meter,
    /// Set for `on_client_disconnect = "drain"`: takes the body and the
    /// unfinished meter when the client goes away mid-stream.
    drain: Option<DrainHook<B>>,
    /// Set when tokentap injected `include_usage`: restores the client's stream.
    stripper: Option<UsageStripper>,
    idle: Option<Duration>,
    deadline: Option<tokio::time::Instant>,
    timer: Option<Pin<Box<Sleep>>>,
    /// What comes after the data frame being returned now.
    held: Option<Held>,
    /// Data frames handed to the client so far (picks the sampled ones).
    frames: u32,
    /// When the first bytes of the frame being joined were read.
    first_read: Option<Instant>,
    /// The data frames being joined into the next client frame.
    joined: Joined,
}

/// One client frame in this many has its proxy overhead measured (the
/// first always): a second clock reading and a histogram record on every
/// frame would double the wrapper's own cost.
pub const OVERHEAD_SAMPLE: u32 = 16;

/// Hands a body whose client left, its meter and the total deadline to a drain.
type DrainHook<B> = Box<dyn FnOnce(B, Meter, Option<tokio::time::Instant>) + Send>;

impl<B> Drop for MeteredBody<B> {
    fn drop(&mut self) {
        // Dropped before the end: the client went away (hyper dropped the
        // response body). Cancel mode leaves that to the meter's own drop.
        if self.meter.is_finished() {
            return;
        }
        // The drain cut it: nobody is left to read on for.
        if self.meter.cut().is_some() {
            return;
        }
        if let (Some(hook), Some(inner)) = (self.drain.take(), self.inner.take()) {
            hook(inner, self.meter.detach(), self.deadline);
        }
    }
}

/// A frame, error or end kept for the next poll, behind joined data.
enum Held {
    Frame(Frame<Bytes>),
    /// The body failed; the client is told after one `Pending` (see
    /// `poll_frame`).
    Error(BoxError),
    /// The body failed and the server had its turn to flush: fail now.
    Failed(BoxError),
    End,
}

/// Most bytes joined into one frame.
const MAX_JOINED: usize = 64 * 1024;

/// Most pieces whose list is kept between frames (the list is reused, so
/// joining allocates nothing but the joined frame itself).
const KEPT_PIECES: usize = 256;

/// Data pieces that are ready together, joined into one frame: a single
/// piece as it is, several with one allocation of the joined length and one
/// copy of each (no growing buffer that copies again as it grows).
#[derive(Default)]
struct Joined {
    pieces: Vec<Bytes>,
    len: usize,
}

impl Joined {
    fn push(&mut self, piece: Bytes) {
        if piece.is_empty() {
            return;
        }
        self.len += piece.len();
        self.pieces.push(piece);
    }

    fn len(&self) -> usize {
        self.len
    }

    fn is_empty(&self) -> bool {
        self.pieces.is_empty()
    }

    /// The joined frame; the list is left empty for the next one.
    fn take(&mut self) -> Bytes {
        let len = std::mem::take(&mut self.len);
        let out = if self.pieces.len() == 1 {
            self.pieces.pop().unwrap_or_default()
        } else {
            let mut out = BytesMut::with_capacity(len);
            for piece in self.pieces.drain(..) {
                out.extend_from_slice(&piece);
            }
            out.freeze()
        };
        if self.pieces.capacity() > KEPT_PIECES {
            self.pieces = Vec::new();
        }
        out
    }
}

impl<B> std::fmt::Debug for MeteredBody<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MeteredBody")
            .field("meter", &self.meter)
            .finish_non_exhaustive()
    }
}

/// The body stalled or ran out of time.
#[derive(Debug, thiserror::Error)]
#[error("tokentap: upstream {0}")]
pub struct TimeoutError(&'static str);

impl<B> MeteredBody<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    /// Wrap `inner`; `idle` aborts after that long without a frame and
    /// `total` bounds the whole request (from its start).
    pub fn new(
        inner: B,
        mut meter: Meter,
        idle: Option<Duration>,
        total: Option<Duration>,
    ) -> Self {
        let deadline = total.map(|t| tokio::time::Instant::from_std(meter.facts.start + t));
        if inner.is_end_stream() {
            meter.finish(End::Eos);
        }
        let mut body = MeteredBody {
            inner: Some(inner),
            meter,
            drain: None,
            stripper: None,
            held: None,
            idle,
            deadline,
            timer: None,
            frames: 0,
            first_read: None,
            joined: Joined::default(),
        };
        body.arm();
        body
    }

    /// Forward the stream the client asked for, without the usage that
    /// tokentap injected (see `rewrite`). The meter still sees every byte.
    pub fn strip_injected_usage(mut self) -> Self {
        self.stripper = Some(UsageStripper::default());
        self
    }

    /// When the client goes away mid-stream, read the rest of the body in
    /// the background (within `limits`) so the final usage is metered.
    pub fn drain_on_disconnect(mut self, drains: Arc<Drains>, limits: DrainLimits) -> Self
    where
        B: Send + 'static,
    {
        self.drain = Some(Box::new(move |body, meter, total| {
            drains.start(body, meter, limits, total);
        }));
        self
    }

    /// The upstream body has nothing more to give.
    fn inner_ended(&self) -> bool {
        self.inner.as_ref().is_none_or(B::is_end_stream)
    }

    /// Meter one upstream data frame; the bytes the client gets for it
    /// (after usage stripping, which may hold part of it back). When
    /// `ended`, the caller finishes the meter once the frame is handed over.
    fn take_in(&mut self, data: Bytes, ended: bool) -> Option<Bytes> {
        let read = self.meter.on_data(&data);
        if self.idle.is_some() {
            self.arm();
        }
        let out = match self.stripper.as_mut() {
            None => data,
            Some(stripper) => {
                let mut out = stripper.push(&data);
                if ended {
                    out = [out, stripper.finish()].concat().into();
                }
                out
            }
        };
        if out.is_empty() {
            return None;
        }
        self.first_read.get_or_insert(read);
        Some(out)
    }

    /// A data frame goes to the client now: sample its proxy overhead, and
    /// finish the meter when it was the body's last.
    fn hand_over(&mut self, ended: bool) {
        if let Some(read) = self.first_read.take()
            && self.frames % OVERHEAD_SAMPLE == 0
        {
            self.meter.on_forwarded(read);
        }
        self.frames = self.frames.wrapping_add(1);
        if ended {
            self.meter.finish(End::Eos);
        }
    }

    fn arm(&mut self) {
        let idle = self.idle.map(|d| tokio::time::Instant::now() + d);
        let at = match (idle, self.deadline) {
            (Some(a), Some(b)) => a.min(b),
            (a, b) => match a.or(b) {
                Some(at) => at,
                None => return,
            },
        };
        match self.timer.as_mut() {
            Some(t) => t.as_mut().reset(at),
            None => self.timer = Some(Box::pin(tokio::time::sleep_until(at))),
        }
    }

    fn poll_timer(&mut self, cx: &mut Context<'_>) -> Option<End> {
        let timer = self.timer.as_mut()?;
        timer.as_mut().poll(cx).is_ready().then(|| {
            let total = self
                .deadline
                .is_some_and(|d| d <= tokio::time::Instant::now());
            if total {
                End::TotalTimeout
            } else {
                End::IdleTimeout
            }
        })
    }
}

impl<B> Body for MeteredBody<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        if let Some(held) = this.held.take() {
            return match held {
                Held::Frame(f) => Poll::Ready(Some(Ok(f))),
                // hyper's server drops what it has buffered for the client
                // (the head, the last frames) when the body fails. The
                // upstream's failure often arrives in the same read as the
                // bytes before it, so give the server one turn to write them
                // out first, and fail on the next poll.
                Held::Error(e) => {
                    this.held = Some(Held::Failed(e));
                    cx.waker().wake_by_ref();
                    Poll::Pending
                }
                Held::Failed(e) => Poll::Ready(Some(Err(e))),
                Held::End => Poll::Ready(None),
            };
        }
        // Everything the upstream has already delivered goes out as one frame
        // (one write to the client); nothing waits for more.
        let mut ended_here = false;
        loop {
            let Some(inner) = this.inner.as_mut() else {
                return Poll::Ready(None);
            };
            let polled = match Pin::new(inner).poll_frame(cx) {
                Poll::Ready(r) => r,
                Poll::Pending if !this.joined.is_empty() => break,
                Poll::Pending => {
                    if let Some(end) = this.poll_timer(cx) {
                        this.meter.finish(end);
                        let what = if end == End::TotalTimeout {
                            "total timeout"
                        } else {
                            "idle timeout"
                        };
                        this.held = Some(Held::Error(Box::new(TimeoutError(what))));
                        return Pin::new(this).poll_frame(cx);
                    }
                    return Poll::Pending;
                }
            };
            let held = match polled {
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => {
                        let ended = this.inner_ended();
                        if let Some(piece) = this.take_in(data, ended) {
                            this.joined.push(piece);
                        }
                        if ended || this.joined.len() >= MAX_JOINED {
                            ended_here = ended;
                            break;
                        }
                        continue;
                    }
                    Err(trailers) => {
                        if this.inner_ended() {
                            this.meter.finish(End::Eos);
                        }
                        Held::Frame(trailers)
                    }
                },
                Some(Err(e)) => {
                    this.meter.finish(End::Aborted);
                    Held::Error(e.into())
                }
                None => {
                    this.meter.finish(End::Eos);
                    if let Some(rest) = this.stripper.take().map(|mut s| s.finish()) {
                        this.joined.push(rest);
                    }
                    Held::End
                }
            };
            if this.joined.is_empty() {
                this.held = Some(held);
                return Pin::new(this).poll_frame(cx);
            }
            this.held = Some(held);
            break;
        }
        this.hand_over(ended_here);
        Poll::Ready(Some(Ok(Frame::data(this.joined.take()))))
    }

    fn is_end_stream(&self) -> bool {
        self.held.is_none()
            && self.inner_ended()
            && self.stripper.as_ref().is_none_or(UsageStripper::is_empty)
    }

    fn size_hint(&self) -> SizeHint {
        match (&self.stripper, &self.inner) {
            (None, Some(inner)) => inner.size_hint(),
            _ => SizeHint::default(),
        }
    }
}

#[cfg(test)]
mod tests;
