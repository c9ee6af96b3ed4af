//! WebSocket session dialects: complete JSON messages of a relayed session
//! (client → server and server → client) in, session events out.
//!
//! Three dialects share this file because they share the shape "a client
//! asks, the server streams deltas, a terminal event carries usage":
//! - **OpenAI Realtime** (`/v1/realtime`, Azure `/openai/realtime` and
//!   `/openai/v1/realtime`), GA and beta event names. Shapes from the
//!   openai-python SDK, `src/openai/types/realtime/*.py` (GA) and
//!   `src/openai/types/beta/realtime/*.py` (beta): `ResponseCreateEvent`,
//!   `SessionCreatedEvent`, `ResponseTextDeltaEvent`,
//!   `ResponseAudioDeltaEvent`, `ResponseDoneEvent` (`RealtimeResponse`,
//!   `RealtimeResponseStatus`, `RealtimeResponseUsage`), `RealtimeErrorEvent`,
//!   `InputAudioBufferCommittedEvent`, `InputAudioBufferSpeechStoppedEvent`.
//! - **OpenAI Responses WebSocket mode** (`/v1/responses` upgraded): the
//!   client sends `response.create` (`ResponsesClientEvent` in
//!   `types/responses/responses_client_event.py`: the Responses create
//!   body plus `type` and an optional `stream_id` lane); the server sends
//!   the Responses streaming events (`ResponsesServerEvent` in
//!   `types/responses/responses_server_event.py`), each echoing that lane.
//! - **Gemini Live** (`BidiGenerateContent`): `LiveClientMessage` and
//!   `LiveServerMessage` in google-genai `google/genai/types.py`, with
//!   the wire (camelCase) names from `_live_converters.py`. The Gemini API
//!   reports `responseTokenCount`, Vertex `candidatesTokenCount`.
//!
//! OpenAI events are first read by a validating scan (`providers::scan`)
//! that keeps only the top-level `type`, `delta` and `stream_id`: that is
//! all an output delta, a VAD event or an ignored event needs, and they are
//! nearly every message of a session (audio deltas and client audio
//! appends are large base64 strings, walked once and never copied). An
//! event with a field only serde reads (`response`, `session`, `error`,
//! `model`), or anything the scan is unsure of, is deserialized once into
//! borrowed structs holding only the fields metering reads; malformed JSON
//! is rejected either way. Deltas are borrowed as raw JSON and only checked
//! for emptiness (the session meter counts pieces, it reads no text).

use std::fmt;
use std::marker::PhantomData;

use serde::Deserialize;
use serde::de::{IgnoredAny, SeqAccess, Visitor};
use serde_json::value::RawValue;

use super::openai::{ItemTool, OutputItem};
use super::scan::{Scan, Seen};
use super::wire::{Str, non_empty, non_empty_raw};
use super::{AdapterError, ServerTool, Usage, percent_decode, strip_query};

/// The message protocol a WebSocket session speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dialect {
    /// OpenAI Realtime (also Azure OpenAI realtime).
    OpenaiRealtime,
    /// OpenAI Responses API in WebSocket mode.
    OpenaiResponses,
    /// Google Gemini Live (`BidiGenerateContent`, Gemini API and Vertex).
    GeminiLive,
}

/// From the path after the route prefix (query included): which dialect,
/// if any. Only meaningful for a request that asks for a WebSocket upgrade.
pub fn dialect_for_path(path_and_query: &str) -> Option<Dialect> {
    let path = strip_query(path_and_query).trim_end_matches('/');
    let last = path.rsplit('/').next().unwrap_or(path);
    match last {
        "realtime" => Some(Dialect::OpenaiRealtime),
        "responses" => Some(Dialect::OpenaiResponses),
        // `google.ai.generativelanguage.v1beta.GenerativeService.BidiGenerateContent`,
        // Vertex `LlmBidiService/BidiGenerateContent`, and the
        // ephemeral-token `BidiGenerateContentConstrained`.
        _ if last.ends_with("BidiGenerateContent")
            || last.ends_with("BidiGenerateContentConstrained") =>
        {
            Some(Dialect::GeminiLive)
        }
        _ => None,
    }
}

/// The model named in the handshake URL (`?model=`, else Azure's
/// `deployment=`), percent-decoded. Other parameters (`key=`, an API key)
/// are never read.
pub fn model_from_query(path_and_query: &str) -> Option<String> {
    let (_, query) = path_and_query.split_once('?')?;
    let value = |name: &str| {
        query
            .split('&')
            .filter_map(|pair| pair.split_once('='))
            .find(|(k, v)| *k == name && !v.is_empty())
            .map(|(_, v)| percent_decode(v).into_owned())
    };
    value("model").or_else(|| value("deployment"))
}

/// What a piece of output was.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OutputKind {
    /// Text (`response.output_text.delta`, Gemini text parts, refusals).
    Text,
    /// Audio bytes (`response.output_audio.delta`, Gemini `inlineData`).
    Audio,
    /// The transcript of output audio (`response.output_audio_transcript.delta`,
    /// Gemini `outputTranscription`).
    Transcript,
    /// Tool-call arguments (`response.function_call_arguments.delta`,
    /// MCP and custom tool input, Gemini `toolCall`).
    ToolArgs,
    /// Reasoning text or summaries (`response.reasoning_text.delta`,
    /// `response.reasoning_summary_text.delta`, Gemini `thought` parts).
    Reasoning,
    /// Any other `response.*.delta` with content, and Gemini parts of other
    /// kinds (images, executable code): output all the same.
    Other,
}

/// Token usage of one response, with the splits the realtime APIs report.
/// Absent fields were not reported.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RealtimeUsage {
    /// All input tokens (text, audio, image; cached ones included).
    pub input: Option<u64>,
    /// All output tokens (text, audio; reasoning included).
    pub output: Option<u64>,
    /// The total the provider reported.
    pub total: Option<u64>,
    /// Input tokens served from cache (included in `input`).
    pub cached_input: Option<u64>,
    /// Cached text input tokens (OpenAI Realtime `cached_tokens_details`).
    pub cached_input_text: Option<u64>,
    /// Cached audio input tokens.
    pub cached_input_audio: Option<u64>,
    /// Text input tokens.
    pub input_text: Option<u64>,
    /// Audio input tokens.
    pub input_audio: Option<u64>,
    /// Text output tokens.
    pub output_text: Option<u64>,
    /// Audio output tokens.
    pub output_audio: Option<u64>,
    /// Reasoning output tokens (included in `output`).
    pub reasoning: Option<u64>,
}

impl RealtimeUsage {
    /// The counts the HTTP meter's `Usage` carries.
    pub fn to_usage(&self) -> Usage {
        Usage {
            input: self.input,
            output: self.output,
            cache_read: self.cached_input,
            cache_creation: None,
            reasoning: self.reasoning,
            input_audio: self.input_audio,
            output_audio: self.output_audio,
            cache_read_audio: self.cached_input_audio,
            ..Usage::default()
        }
    }
}

/// How a response ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DoneStatus<'a> {
    /// It finished normally.
    Completed,
    /// It was cut short by the client or a new turn: Realtime
    /// `status_details.reason` (`turn_detected`, `client_cancelled`),
    /// Gemini `interrupted`.
    Cancelled {
        /// Why it was cut short, when the provider said.
        reason: Option<&'a str>,
    },
    /// It failed: the error's type, else its code, else `response_failed`.
    Failed {
        /// The error's type, else its code, else `response_failed`.
        kind: &'a str,
    },
    /// It stopped early: `max_output_tokens`, `content_filter`, a Gemini
    /// `turnCompleteReason`; `None` when the provider gave no status.
    Incomplete {
        /// Why it stopped, when the provider said.
        reason: Option<&'a str>,
    },
}

/// What one message of a session meant, as far as metering cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionEvent<'a> {
    /// The client asked for a response (`response.create`, Gemini
    /// `clientContent` with `turnComplete`, `realtimeInput.activityEnd`,
    /// `toolResponse`): the TTFT clock starts. `model` is the model the
    /// request names (Responses WebSocket mode carries one per request).
    ResponseRequested {
        /// Model the request names, if any.
        model: Option<&'a str>,
    },
    /// User input is complete and the server will answer without being
    /// asked (server VAD: `input_audio_buffer.speech_stopped` /
    /// `.committed`, Gemini `voiceActivity` end, `realtimeInput.text` or
    /// `audioStreamEnd`): the clock starts here if no request is pending.
    /// Several may arrive for one turn; the first counts.
    InputCommitted,
    /// A response began (`response.created`; Gemini: the first model
    /// content of a turn), with its id where the dialect has one.
    ResponseStarted {
        /// The response id, where the dialect has one.
        id: Option<&'a str>,
    },
    /// One message carrying output of `kind`; `pieces` counts the
    /// non-empty pieces in it. Empty deltas produce nothing.
    Output {
        /// What kind of output the message carries.
        kind: OutputKind,
        /// Non-empty output pieces in the message.
        pieces: u32,
    },
    /// The response in flight calls a client tool (an output item of type
    /// `function_call` or `custom_tool_call`; Gemini: one of `toolCall`'s
    /// `functionCalls`), named when the wire names it.
    ToolCall {
        /// The tool's name.
        name: Option<&'a str>,
    },
    /// The response in flight runs a provider tool (Responses WebSocket
    /// mode: a `web_search_call`, `file_search_call` or
    /// `code_interpreter_call` item).
    ServerToolCall(ServerTool),
    /// The model serving the session or response (`session.created` /
    /// `session.updated`, `response.created`, Gemini `setup.model`).
    Model(&'a str),
    /// Usage of the current response, reported just before its
    /// `ResponseDone` (`response.done`, `response.completed`, Gemini
    /// `usageMetadata`).
    Usage(RealtimeUsage),
    /// The response ended.
    ResponseDone {
        /// The response id, where the dialect has one.
        id: Option<&'a str>,
        /// How the response ended.
        status: DoneStatus<'a>,
    },
    /// An `error` event not tied to a finished response (`error.type`,
    /// else `error.code`). In Responses WebSocket mode an error while a
    /// request is pending and no response started means that request failed.
    Error {
        /// The error's type, else its code.
        kind: &'a str,
    },
    /// Responses WebSocket mode: the events that follow from the same
    /// message belong to this `stream_id` lane (lanes run concurrently;
    /// requests within a lane are answered in order).
    Lane(&'a str),
    /// The server announced it will close the session soon (Gemini `goAway`).
    Closing,
}

/// Per-session parser state: one per relayed WebSocket session.
#[derive(Debug)]
pub struct SessionParser {
    dialect: Dialect,
    /// Gemini has no response-created event: a turn opens with its first
    /// model content and closes at `turnComplete`.
    in_turn: bool,
    /// Gemini sends `interrupted` before the `turnComplete` that ends a
    /// cut-short turn.
    interrupted: bool,
    /// The open Gemini turn ended in a `toolCall`: the model waits for the
    /// client's `toolResponse`, which closes it and asks for the next one.
    awaiting_tool: bool,
    /// Take the serde path only (tests that compare it with the scan).
    no_scan: bool,
}

impl SessionParser {
    /// A parser for a session speaking `dialect`.
    pub fn new(dialect: Dialect) -> Self {
        SessionParser {
            dialect,
            in_turn: false,
            interrupted: false,
            awaiting_tool: false,
            no_scan: false,
        }
    }

    /// A parser that always takes the serde path, to check the scan
    /// against it.
    #[cfg(test)]
    fn without_scan(dialect: Dialect) -> Self {
        SessionParser {
            no_scan: true,
            ..SessionParser::new(dialect)
        }
    }

    /// The dialect this parser reads.
    pub fn dialect(&self) -> Dialect {
        self.dialect
    }

    /// Map one complete client → server message (the payload of a text or
    /// binary frame) to events. A malformed message is an error for that
    /// message only; the session goes on.
    pub fn client_message(
        &mut self,
        json: &[u8],
        out: &mut dyn FnMut(SessionEvent<'_>),
    ) -> Result<(), AdapterError> {
        match self.dialect {
            Dialect::OpenaiRealtime | Dialect::OpenaiResponses => {
                openai_message(json, self.no_scan, |e| openai_client(e, out))
            }
            Dialect::GeminiLive => self.gemini_client(json, out),
        }
    }

    /// Map one complete server → client message to events.
    pub fn server_message(
        &mut self,
        json: &[u8],
        out: &mut dyn FnMut(SessionEvent<'_>),
    ) -> Result<(), AdapterError> {
        match self.dialect {
            Dialect::OpenaiRealtime | Dialect::OpenaiResponses => {
                openai_message(json, self.no_scan, |e| openai_server(e, out))
            }
            Dialect::GeminiLive => self.gemini_server(json, out),
        }
    }
}

// ---------------------------------------------------------------- OpenAI

/// The fields of an OpenAI Realtime or Responses WebSocket event that
/// metering reads, client or server side.
#[derive(Deserialize)]
struct OaEvent<'a> {
    #[serde(borrow, rename = "type")]
    kind: Option<Str<'a>>,
    /// Every `*.delta` event; borrowed raw, never copied or unescaped.
    #[serde(borrow)]
    delta: Option<&'a RawValue>,
    /// `response.create` parameters (client) or the response resource.
    #[serde(borrow)]
    response: Option<OaResponse<'a>>,
    #[serde(borrow)]
    session: Option<OaSession<'a>>,
    #[serde(borrow)]
    error: Option<OaError<'a>>,
    /// Responses `response.create` names its model at the top level.
    #[serde(borrow)]
    model: Option<Str<'a>>,
    /// Responses WebSocket lane.
    #[serde(borrow)]
    stream_id: Option<Str<'a>>,
    /// The item of `response.output_item.added` (and other item events).
    #[serde(borrow)]
    item: Option<OutputItem<'a>>,
}

#[derive(Deserialize)]
struct OaResponse<'a> {
    #[serde(borrow)]
    id: Option<Str<'a>>,
    #[serde(borrow)]
    model: Option<Str<'a>>,
    #[serde(borrow)]
    status: Option<Str<'a>>,
    /// Realtime: `{type, reason, error: {type, code}}`.
    #[serde(borrow)]
    status_details: Option<StatusDetails<'a>>,
    /// Responses: `{reason}`.
    #[serde(borrow)]
    incomplete_details: Option<StatusDetails<'a>>,
    /// Responses: `{code, message}`.
    #[serde(borrow)]
    error: Option<OaError<'a>>,
    usage: Option<OaUsage>,
}

#[derive(Deserialize)]
struct StatusDetails<'a> {
    #[serde(borrow)]
    reason: Option<Str<'a>>,
    #[serde(borrow)]
    error: Option<OaError<'a>>,
}

#[derive(Deserialize)]
struct OaSession<'a> {
    #[serde(borrow)]
    model: Option<Str<'a>>,
}

#[derive(Deserialize)]
struct OaError<'a> {
    #[serde(borrow, rename = "type")]
    kind: Option<Str<'a>>,
    #[serde(borrow)]
    code: Option<Str<'a>>,
}

impl OaError<'_> {
    /// `type`, else `code`: what becomes `error.type`.
    fn kind(&self) -> Option<&str> {
        [self.kind.as_ref(), self.code.as_ref()]
            .into_iter()
            .flatten()
            .map(Str::as_str)
            .find(|s| !s.is_empty())
    }
}

/// Usage in both namings: Realtime `input_token_details` /
/// `output_token_details`, Responses `input_tokens_details` /
/// `output_tokens_details`.
#[derive(Deserialize)]
struct OaUsage {
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    total_tokens: Option<u64>,
    input_token_details: Option<InputDetails>,
    output_token_details: Option<OutputDetails>,
    input_tokens_details: Option<InputDetails>,
    output_tokens_details: Option<OutputDetails>,
}

#[derive(Deserialize)]
struct InputDetails {
    cached_tokens: Option<u64>,
    text_tokens: Option<u64>,
    audio_tokens: Option<u64>,
    cached_tokens_details: Option<CachedDetails>,
}

#[derive(Deserialize)]
struct CachedDetails {
    text_tokens: Option<u64>,
    audio_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct OutputDetails {
    text_tokens: Option<u64>,
    audio_tokens: Option<u64>,
    reasoning_tokens: Option<u64>,
}

impl OaUsage {
    fn to_usage(&self) -> RealtimeUsage {
        let input = self
            .input_token_details
            .as_ref()
            .or(self.input_tokens_details.as_ref());
        let output = self
            .output_token_details
            .as_ref()
            .or(self.output_tokens_details.as_ref());
        let cached = input.and_then(|d| d.cached_tokens_details.as_ref());
        RealtimeUsage {
            input: self.input_tokens,
            output: self.output_tokens,
            total: self.total_tokens,
            cached_input: input.and_then(|d| d.cached_tokens),
            cached_input_text: cached.and_then(|c| c.text_tokens),
            cached_input_audio: cached.and_then(|c| c.audio_tokens),
            input_text: input.and_then(|d| d.text_tokens),
            input_audio: input.and_then(|d| d.audio_tokens),
            output_text: output.and_then(|d| d.text_tokens),
            output_audio: output.and_then(|d| d.audio_tokens),
            reasoning: output.and_then(|d| d.reasoning_tokens),
        }
    }
}

fn parse_openai(json: &[u8]) -> Result<OaEvent<'_>, AdapterError> {
    let event: OaEvent<'_> = serde_json::from_slice(json)
        .map_err(|_| AdapterError("malformed OpenAI WebSocket message"))?;
    if event.kind.is_none() {
        return Err(AdapterError("OpenAI WebSocket message without a type"));
    }
    Ok(event)
}

/// The string if present and not empty.
fn non_empty_str<'s>(s: Option<&'s Str<'_>>) -> Option<&'s str> {
    s.map(Str::as_str).filter(|s| !s.is_empty())
}

/// An OpenAI event as metering reads it, from the scan or from serde.
struct OaView<'e> {
    /// The top-level `type`.
    kind: &'e str,
    /// The top-level `delta` as raw JSON (never unescaped); `None` when
    /// absent or `null`.
    delta: Option<&'e str>,
    /// The Responses WebSocket lane, when present and not empty.
    lane: Option<&'e str>,
    /// The serde parse, for the fields only it reads; `None` when the scan
    /// read the event (it had none of them).
    full: Option<&'e OaEvent<'e>>,
}

impl OaView<'_> {
    fn response(&self) -> Option<&OaResponse<'_>> {
        self.full.and_then(|e| e.response.as_ref())
    }
}

/// Read one OpenAI message and hand `on` its view: by the scan when it can
/// (`scan` on), else by serde, whose errors are the message's.
fn openai_message(
    json: &[u8],
    no_scan: bool,
    on: impl FnOnce(&OaView<'_>),
) -> Result<(), AdapterError> {
    if !no_scan
        && !serde_first(json)
        && let Some(view) = scan_openai(json)
    {
        on(&view);
        return Ok(());
    }
    let event = parse_openai(json)?;
    on(&OaView {
        kind: event.kind.as_ref().map_or("", Str::as_str),
        delta: event.delta.map(RawValue::get).filter(|d| *d != "null"),
        lane: non_empty_str(event.stream_id.as_ref()),
        full: Some(&event),
    });
    Ok(())
}

/// Whether the message opens with `{"type":"…"` naming an event whose
/// metering fields only serde reads (the scan would give up at them, after
/// checking the whole message as UTF-8): then the scan is not tried. Only a
/// shortcut; both paths read every event alike.
fn serde_first(json: &[u8]) -> bool {
    let Some(rest) = json.strip_prefix(br#"{"type":""#) else {
        return false;
    };
    let kind = memchr::memchr(b'"', rest).map_or(&[][..], |end| &rest[..end]);
    matches!(
        kind,
        b"response.done"
            | b"response.output_item.added"
            | b"response.completed"
            | b"response.incomplete"
            | b"response.failed"
            | b"response.created"
            | b"response.in_progress"
            | b"session.created"
            | b"session.updated"
            | b"error"
    )
}

/// The validating scan of an OpenAI message: its view, or `None` (take the
/// serde path) unless it is valid JSON, an object whose `type` is a string
/// without escapes, with no field serde would read into a struct
/// (`response`, `session`, `error`, `model`, `item`: their shapes are
/// serde's to check) and no repeated `type`, `delta` or `stream_id`
/// (serde rejects those). Only top-level keys count: a nested object's own
/// `type` (a `part`'s) is skipped with its value, and key order is free.
fn scan_openai(json: &[u8]) -> Option<OaView<'_>> {
    let mut s = Scan::new(json)?;
    let mut seen = Seen::default();
    let (mut kind, mut delta, mut lane) = (None, None, None);
    s.object(0, |s, key| match key {
        "type" => {
            seen.first(0)?;
            kind = s.str_or_null()?;
            Some(())
        }
        "delta" => {
            seen.first(1)?;
            delta = s.raw(1)?;
            Some(())
        }
        "stream_id" => {
            seen.first(2)?;
            lane = s.str_or_null()?;
            Some(())
        }
        "response" | "session" | "error" | "model" | "item" => None,
        _ => s.skip(1),
    })?;
    s.end()?;
    Some(OaView {
        kind: kind?,
        delta,
        lane: lane.filter(|l| !l.is_empty()),
        full: None,
    })
}

fn openai_client(event: &OaView<'_>, out: &mut dyn FnMut(SessionEvent<'_>)) {
    if event.kind == "response.create" {
        if let Some(lane) = event.lane {
            out(SessionEvent::Lane(lane));
        }
        // Responses mode names the model at the top level; Realtime's
        // `response` parameters document none (the session's applies), but
        // one is read if present.
        let model = event
            .full
            .and_then(|e| non_empty_str(e.model.as_ref()))
            .or_else(|| {
                event
                    .response()
                    .and_then(|r| non_empty_str(r.model.as_ref()))
            });
        out(SessionEvent::ResponseRequested { model });
    }
}

fn openai_server(event: &OaView<'_>, out: &mut dyn FnMut(SessionEvent<'_>)) {
    let kind = event.kind;
    // The lane goes first, and only before an event that belongs to it.
    let mut lane = event.lane;
    let out = &mut |e: SessionEvent<'_>| {
        if let Some(lane) = lane.take() {
            out(SessionEvent::Lane(lane));
        }
        out(e);
    };
    if kind.starts_with("response.") && kind.ends_with(".delta") {
        if event.delta.is_some_and(non_empty_raw) {
            let kind = output_kind(kind);
            out(SessionEvent::Output { kind, pieces: 1 });
        }
        return;
    }
    match kind {
        "session.created" | "session.updated" => {
            let session = event.full.and_then(|e| e.session.as_ref());
            if let Some(model) = non_empty_str(session.and_then(|s| s.model.as_ref())) {
                out(SessionEvent::Model(model));
            }
        }
        "input_audio_buffer.speech_stopped" | "input_audio_buffer.committed" => {
            out(SessionEvent::InputCommitted);
        }
        "response.created" => {
            let response = event.response();
            if let Some(model) = response.and_then(|r| non_empty_str(r.model.as_ref())) {
                out(SessionEvent::Model(model));
            }
            let id = response.and_then(|r| non_empty_str(r.id.as_ref()));
            out(SessionEvent::ResponseStarted { id });
        }
        "response.output_item.added" => {
            let item = event.full.and_then(|e| e.item.as_ref());
            match item.and_then(OutputItem::tool) {
                Some(ItemTool::Client(name)) => out(SessionEvent::ToolCall { name }),
                Some(ItemTool::Server(tool)) => out(SessionEvent::ServerToolCall(tool)),
                None => {}
            }
        }
        "response.done" | "response.completed" | "response.incomplete" | "response.failed" => {
            response_done(kind, event.response(), out);
        }
        "error" => {
            let error = event.full.and_then(|e| e.error.as_ref());
            out(SessionEvent::Error {
                kind: error.and_then(OaError::kind).unwrap_or("error"),
            });
        }
        _ => {}
    }
}

/// The kind of output a `response.*.delta` event carries, GA and beta names.
fn output_kind(event: &str) -> OutputKind {
    match event {
        "response.output_text.delta" | "response.text.delta" | "response.refusal.delta" => {
            OutputKind::Text
        }
        "response.output_audio.delta" | "response.audio.delta" => OutputKind::Audio,
        "response.output_audio_transcript.delta"
        | "response.audio_transcript.delta"
        | "response.audio.transcript.delta" => OutputKind::Transcript,
        "response.function_call_arguments.delta"
        | "response.mcp_call_arguments.delta"
        | "response.custom_tool_call_input.delta"
        | "response.code_interpreter_call_code.delta" => OutputKind::ToolArgs,
        "response.reasoning_text.delta"
        | "response.reasoning_summary_text.delta"
        | "response.reasoning.delta"
        | "response.reasoning_summary.delta" => OutputKind::Reasoning,
        _ => OutputKind::Other,
    }
}

/// Usage then the end of a response: Realtime `response.done` (status in
/// the response), Responses `response.completed` / `.incomplete` /
/// `.failed` (status in the event type).
fn response_done(
    event: &str,
    response: Option<&OaResponse<'_>>,
    out: &mut dyn FnMut(SessionEvent<'_>),
) {
    if let Some(usage) = response.and_then(|r| r.usage.as_ref()) {
        out(SessionEvent::Usage(usage.to_usage()));
    }
    let status = match event {
        "response.completed" => "completed",
        "response.incomplete" => "incomplete",
        "response.failed" => "failed",
        _ => response
            .and_then(|r| non_empty_str(r.status.as_ref()))
            .unwrap_or(""),
    };
    let details = response.and_then(|r| r.status_details.as_ref());
    let reason = details
        .or(response.and_then(|r| r.incomplete_details.as_ref()))
        .and_then(|d| non_empty_str(d.reason.as_ref()));
    let status = match status {
        "completed" => DoneStatus::Completed,
        "cancelled" => DoneStatus::Cancelled { reason },
        "failed" => {
            let error = details
                .and_then(|d| d.error.as_ref())
                .or(response.and_then(|r| r.error.as_ref()));
            DoneStatus::Failed {
                kind: error.and_then(OaError::kind).unwrap_or("response_failed"),
            }
        }
        "incomplete" => DoneStatus::Incomplete { reason },
        // No status, or one a finished response should not have.
        other => DoneStatus::Incomplete {
            reason: reason.or((!other.is_empty()).then_some(other)),
        },
    };
    let id = response.and_then(|r| non_empty_str(r.id.as_ref()));
    out(SessionEvent::ResponseDone { id, status });
}

// ---------------------------------------------------------------- Gemini

/// `LiveClientMessage`: exactly one of these is set per message.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct LiveClient<'a> {
    #[serde(borrow)]
    setup: Option<Setup<'a>>,
    client_content: Option<ClientContent>,
    #[serde(borrow)]
    realtime_input: Option<RealtimeInput<'a>>,
    tool_response: Option<IgnoredAny>,
}

#[derive(Deserialize)]
struct Setup<'a> {
    #[serde(borrow)]
    model: Option<Str<'a>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ClientContent {
    turn_complete: Option<bool>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RealtimeInput<'a> {
    activity_end: Option<IgnoredAny>,
    audio_stream_end: Option<bool>,
    #[serde(borrow)]
    text: Option<&'a RawValue>,
}

/// `LiveServerMessage`.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct LiveServer<'a> {
    #[serde(borrow)]
    server_content: Option<ServerContent<'a>>,
    #[serde(borrow)]
    tool_call: Option<ToolCall<'a>>,
    usage_metadata: Option<LiveUsage>,
    go_away: Option<IgnoredAny>,
    #[serde(borrow)]
    voice_activity: Option<VoiceActivity<'a>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ServerContent<'a> {
    model_turn: Option<ModelTurn>,
    #[serde(borrow)]
    output_transcription: Option<Transcription<'a>>,
    turn_complete: Option<bool>,
    interrupted: Option<bool>,
    #[serde(borrow)]
    turn_complete_reason: Option<Str<'a>>,
}

#[derive(Deserialize)]
struct ModelTurn {
    parts: Option<PartCounts>,
}

#[derive(Deserialize)]
struct Transcription<'a> {
    #[serde(borrow)]
    text: Option<&'a RawValue>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ToolCall<'a> {
    #[serde(borrow)]
    function_calls: Option<Vec<LiveCall<'a>>>,
}

/// A `FunctionCall` of a Live `toolCall`, as far as counting goes.
#[derive(Deserialize)]
struct LiveCall<'a> {
    #[serde(borrow)]
    name: Option<Str<'a>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct VoiceActivity<'a> {
    #[serde(borrow)]
    voice_activity_type: Option<Str<'a>>,
}

/// `UsageMetadata`; `promptTokenCount` includes the cached part.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct LiveUsage {
    prompt_token_count: Option<u64>,
    response_token_count: Option<u64>,
    /// Vertex's name for `responseTokenCount`.
    candidates_token_count: Option<u64>,
    cached_content_token_count: Option<u64>,
    tool_use_prompt_token_count: Option<u64>,
    thoughts_token_count: Option<u64>,
    total_token_count: Option<u64>,
    prompt_tokens_details: Option<Modalities>,
    response_tokens_details: Option<Modalities>,
    candidates_tokens_details: Option<Modalities>,
    cache_tokens_details: Option<Modalities>,
}

impl LiveUsage {
    /// Like the `generateContent` adapter: output = response + thoughts
    /// (the response count excludes thinking), input = prompt + tool-use
    /// prompt.
    fn to_usage(&self) -> RealtimeUsage {
        let response = self.response_token_count.or(self.candidates_token_count);
        let output = match (response, self.thoughts_token_count) {
            (None, None) => None,
            (r, t) => Some(r.unwrap_or(0).saturating_add(t.unwrap_or(0))),
        };
        let input = self
            .prompt_token_count
            .map(|p| p.saturating_add(self.tool_use_prompt_token_count.unwrap_or(0)));
        let prompt = self.prompt_tokens_details.unwrap_or_default();
        let cached = self.cache_tokens_details.unwrap_or_default();
        let resp = self
            .response_tokens_details
            .or(self.candidates_tokens_details)
            .unwrap_or_default();
        RealtimeUsage {
            input,
            output,
            total: self.total_token_count,
            cached_input: self.cached_content_token_count,
            cached_input_text: cached.text,
            cached_input_audio: cached.audio,
            input_text: prompt.text,
            input_audio: prompt.audio,
            output_text: resp.text,
            output_audio: resp.audio,
            reasoning: self.thoughts_token_count,
        }
    }
}

/// A `ModalityTokenCount` list folded while parsing: TEXT and AUDIO counts.
#[derive(Debug, Clone, Copy, Default)]
struct Modalities {
    text: Option<u64>,
    audio: Option<u64>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ModalityCount<'a> {
    #[serde(borrow)]
    modality: Option<Str<'a>>,
    token_count: Option<u64>,
}

impl<'de> Deserialize<'de> for Modalities {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Modalities;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list of modality token counts")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Modalities, A::Error> {
                let mut m = Modalities::default();
                while let Some(c) = seq.next_element::<ModalityCount<'de>>()? {
                    let n = c.token_count.unwrap_or(0);
                    let slot = match c.modality.as_ref().map(Str::as_str) {
                        Some("TEXT") => &mut m.text,
                        Some("AUDIO") => &mut m.audio,
                        _ => continue,
                    };
                    *slot = Some(slot.unwrap_or(0).saturating_add(n));
                }
                Ok(m)
            }
        }
        d.deserialize_seq(V)
    }
}

/// `modelTurn.parts` folded while parsing: non-empty parts per kind.
#[derive(Debug, Clone, Copy, Default)]
struct PartCounts {
    text: u32,
    audio: u32,
    reasoning: u32,
    tool: u32,
    other: u32,
}

/// One `Part`: only what tells its kind and whether it is empty.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Part<'a> {
    #[serde(borrow)]
    text: Option<&'a RawValue>,
    thought: Option<bool>,
    #[serde(borrow)]
    inline_data: Option<Blob<'a>>,
    function_call: Option<IgnoredAny>,
    executable_code: Option<IgnoredAny>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Blob<'a> {
    #[serde(borrow)]
    mime_type: Option<Str<'a>>,
    /// Base64 audio: borrowed raw, only checked for emptiness.
    #[serde(borrow)]
    data: Option<&'a RawValue>,
}

impl<'de> Deserialize<'de> for PartCounts {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'de>(PhantomData<&'de ()>);
        impl<'de> Visitor<'de> for V<'de> {
            type Value = PartCounts;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list of parts")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<PartCounts, A::Error> {
                let mut c = PartCounts::default();
                while let Some(part) = seq.next_element::<Part<'de>>()? {
                    let slot = if non_empty(part.text) {
                        if part.thought == Some(true) {
                            &mut c.reasoning
                        } else {
                            &mut c.text
                        }
                    } else if let Some(blob) = part.inline_data.filter(|b| non_empty(b.data)) {
                        let mime = blob.mime_type.as_ref().map_or("", Str::as_str);
                        if mime.starts_with("audio/") {
                            &mut c.audio
                        } else {
                            &mut c.other
                        }
                    } else if part.function_call.is_some() {
                        &mut c.tool
                    } else if part.executable_code.is_some() {
                        &mut c.other
                    } else {
                        continue;
                    };
                    *slot = slot.saturating_add(1);
                }
                Ok(c)
            }
        }
        d.deserialize_seq(V(PhantomData))
    }
}

impl SessionParser {
    fn gemini_client(
        &mut self,
        json: &[u8],
        out: &mut dyn FnMut(SessionEvent<'_>),
    ) -> Result<(), AdapterError> {
        let msg: LiveClient<'_> = serde_json::from_slice(json)
            .map_err(|_| AdapterError("malformed Gemini Live client message"))?;
        if let Some(model) = msg.setup.as_ref().and_then(|s| s.model.as_ref()) {
            // `models/gemini-…`, or Vertex `projects/…/publishers/google/models/gemini-…`.
            let model = model.as_str();
            let model = model.rsplit_once("models/").map_or(model, |(_, m)| m);
            if !model.is_empty() {
                out(SessionEvent::Model(model));
            }
        }
        if msg.tool_response.is_some() && self.in_turn && self.awaiting_tool {
            // The turn that asked for the tool gets no `turnComplete`.
            self.in_turn = false;
            self.awaiting_tool = false;
            out(SessionEvent::ResponseDone {
                id: None,
                status: DoneStatus::Completed,
            });
        }
        if msg.client_content.and_then(|c| c.turn_complete) == Some(true)
            || msg.tool_response.is_some()
        {
            out(SessionEvent::ResponseRequested { model: None });
        }
        if let Some(input) = &msg.realtime_input {
            if input.activity_end.is_some() {
                out(SessionEvent::ResponseRequested { model: None });
            } else if input.audio_stream_end == Some(true) || non_empty(input.text) {
                out(SessionEvent::InputCommitted);
            }
        }
        Ok(())
    }

    fn gemini_server(
        &mut self,
        json: &[u8],
        out: &mut dyn FnMut(SessionEvent<'_>),
    ) -> Result<(), AdapterError> {
        let msg: LiveServer<'_> = serde_json::from_slice(json)
            .map_err(|_| AdapterError("malformed Gemini Live server message"))?;
        let end = msg
            .voice_activity
            .as_ref()
            .and_then(|v| v.voice_activity_type.as_ref());
        if end.is_some_and(|t| t.as_str() == "ACTIVITY_END") {
            out(SessionEvent::InputCommitted);
        }
        let content = msg.server_content.as_ref();
        let parts = content
            .and_then(|c| c.model_turn.as_ref())
            .and_then(|t| t.parts)
            .unwrap_or_default();
        let transcript = content
            .and_then(|c| c.output_transcription.as_ref())
            .is_some_and(|t| non_empty(t.text));
        let calls = msg
            .tool_call
            .as_ref()
            .and_then(|t| t.function_calls.as_deref())
            .unwrap_or_default();
        let turn_complete = content.and_then(|c| c.turn_complete) == Some(true);
        let outputs = [
            (OutputKind::Text, parts.text),
            (OutputKind::Audio, parts.audio),
            (OutputKind::Transcript, u32::from(transcript)),
            (OutputKind::Reasoning, parts.reasoning),
            (OutputKind::ToolArgs, parts.tool),
            (
                OutputKind::ToolArgs,
                u32::try_from(calls.len()).unwrap_or(u32::MAX),
            ),
            (OutputKind::Other, parts.other),
        ];
        let has_output = outputs.iter().any(|(_, n)| *n > 0);
        if !self.in_turn && (has_output || turn_complete || msg.tool_call.is_some()) {
            self.in_turn = true;
            out(SessionEvent::ResponseStarted { id: None });
        }
        if msg.tool_call.is_some() {
            self.awaiting_tool = true;
        }
        for (kind, pieces) in outputs {
            if pieces > 0 {
                out(SessionEvent::Output { kind, pieces });
            }
        }
        for call in calls {
            let name = non_empty_str(call.name.as_ref());
            out(SessionEvent::ToolCall { name });
        }
        if content.and_then(|c| c.interrupted) == Some(true) {
            self.interrupted = true;
        }
        if let Some(usage) = &msg.usage_metadata {
            out(SessionEvent::Usage(usage.to_usage()));
        }
        if turn_complete {
            let reason = content
                .and_then(|c| c.turn_complete_reason.as_ref())
                .map(Str::as_str)
                .filter(|r| {
                    !matches!(
                        *r,
                        "" | "TURN_COMPLETE_REASON_UNSPECIFIED" | "NEED_MORE_INPUT"
                    )
                });
            let status = if std::mem::take(&mut self.interrupted) {
                DoneStatus::Cancelled {
                    reason: Some("interrupted"),
                }
            } else if let Some(reason) = reason {
                DoneStatus::Incomplete {
                    reason: Some(reason),
                }
            } else {
                DoneStatus::Completed
            };
            self.in_turn = false;
            self.awaiting_tool = false;
            out(SessionEvent::ResponseDone { id: None, status });
        }
        if msg.go_away.is_some() {
            out(SessionEvent::Closing);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One line of a transcript fixture: who sent it, the message as sent
    /// (its bytes are handed to the parser untouched), and whether it came
    /// in a binary frame (Gemini Live sends JSON in binary frames).
    #[derive(Deserialize)]
    struct Line<'a> {
        dir: &'a str,
        #[serde(borrow)]
        msg: &'a RawValue,
        #[serde(default)]
        binary: bool,
    }

    /// What a replay saw: each event in its `Debug` form (usage as just
    /// "Usage", its numbers in `usages`), and the lines that failed.
    #[derive(Debug, Default)]
    struct Replay {
        events: Vec<String>,
        usages: Vec<RealtimeUsage>,
        errors: Vec<usize>,
        binary_lines: usize,
    }

    fn record(r: &mut Replay, e: SessionEvent<'_>) {
        match e {
            SessionEvent::Usage(u) => {
                r.usages.push(u);
                r.events.push("Usage".to_owned());
            }
            other => r.events.push(format!("{other:?}")),
        }
    }

    fn replay(dialect: Dialect, transcript: &str) -> Replay {
        let mut parser = SessionParser::new(dialect);
        let mut r = Replay::default();
        for (n, text) in transcript.lines().enumerate() {
            let line: Line<'_> = serde_json::from_str(text).expect("a fixture line");
            r.binary_lines += usize::from(line.binary);
            let json = line.msg.get().as_bytes();
            let result = match line.dir {
                "client" => parser.client_message(json, &mut |e| record(&mut r, e)),
                "server" => parser.server_message(json, &mut |e| record(&mut r, e)),
                other => panic!("line {}: unknown direction {other}", n + 1),
            };
            if result.is_err() {
                r.errors.push(n + 1);
            }
        }
        r
    }

    #[track_caller]
    fn expect(dialect: Dialect, name: &str, events: &[&str], usages: &[RealtimeUsage]) {
        let path = format!(
            "{}/tests/fixtures/realtime/{name}",
            env!("CARGO_MANIFEST_DIR")
        );
        let transcript = std::fs::read_to_string(&path).expect("the fixture file");
        let r = replay(dialect, &transcript);
        assert_eq!(r.errors, Vec::<usize>::new(), "{name}: no malformed lines");
        assert_eq!(r.events, events, "{name}: event sequence");
        assert_eq!(r.usages, usages, "{name}: usage numbers");
    }

    const TEXT: &str = "Output { kind: Text, pieces: 1 }";
    const AUDIO: &str = "Output { kind: Audio, pieces: 1 }";
    const TRANSCRIPT: &str = "Output { kind: Transcript, pieces: 1 }";
    const TOOL: &str = "Output { kind: ToolArgs, pieces: 1 }";
    const REASONING: &str = "Output { kind: Reasoning, pieces: 1 }";
    const REQUESTED: &str = "ResponseRequested { model: None }";
    const COMMITTED: &str = "InputCommitted";
    const USAGE: &str = "Usage";
    const CALL_WEATHER: &str = r#"ToolCall { name: Some("get_weather") }"#;

    /// Realtime usage with every split reported.
    #[allow(clippy::too_many_arguments)]
    fn rt_usage(
        input: u64,
        output: u64,
        total: u64,
        cached: u64,
        cached_text: u64,
        input_text: u64,
        input_audio: u64,
        output_text: u64,
        output_audio: u64,
    ) -> RealtimeUsage {
        RealtimeUsage {
            input: Some(input),
            output: Some(output),
            total: Some(total),
            cached_input: Some(cached),
            cached_input_text: Some(cached_text),
            cached_input_audio: Some(0),
            input_text: Some(input_text),
            input_audio: Some(input_audio),
            output_text: Some(output_text),
            output_audio: Some(output_audio),
            reasoning: None,
        }
    }

    fn totals(input: u64, output: u64, total: u64) -> RealtimeUsage {
        RealtimeUsage {
            input: Some(input),
            output: Some(output),
            total: Some(total),
            ..RealtimeUsage::default()
        }
    }

    #[test]
    fn openai_realtime_text_response() {
        expect(
            Dialect::OpenaiRealtime,
            "openai_text.jsonl",
            &[
                r#"Model("gpt-realtime-2025-08-28")"#,
                r#"Model("gpt-realtime-2025-08-28")"#,
                REQUESTED,
                r#"ResponseStarted { id: Some("resp_Cq1d") }"#,
                TEXT,
                TEXT,
                USAGE,
                r#"ResponseDone { id: Some("resp_Cq1d"), status: Completed }"#,
            ],
            &[rt_usage(190, 11, 201, 128, 128, 190, 0, 11, 0)],
        );
    }

    #[test]
    fn openai_realtime_audio_with_transcript_under_server_vad() {
        // No response.create: speech_stopped then committed start the clock.
        expect(
            Dialect::OpenaiRealtime,
            "openai_audio_vad.jsonl",
            &[
                r#"Model("gpt-realtime-mini-2025-10-06")"#,
                COMMITTED,
                COMMITTED,
                r#"ResponseStarted { id: Some("resp_Dv1f") }"#,
                TRANSCRIPT,
                AUDIO,
                TRANSCRIPT,
                AUDIO,
                USAGE,
                r#"ResponseDone { id: Some("resp_Dv1f"), status: Completed }"#,
            ],
            &[rt_usage(318, 94, 412, 192, 192, 251, 67, 21, 73)],
        );
    }

    #[test]
    fn openai_realtime_function_call_then_answer() {
        let second = RealtimeUsage {
            cached_input_text: None,
            cached_input_audio: None,
            ..rt_usage(105, 8, 113, 64, 0, 105, 0, 8, 0)
        };
        expect(
            Dialect::OpenaiRealtime,
            "openai_function_call.jsonl",
            &[
                r#"Model("gpt-realtime")"#,
                REQUESTED,
                r#"ResponseStarted { id: Some("resp_Fc1b") }"#,
                CALL_WEATHER,
                TOOL,
                TOOL,
                USAGE,
                r#"ResponseDone { id: Some("resp_Fc1b"), status: Completed }"#,
                REQUESTED,
                r#"ResponseStarted { id: Some("resp_Fc1h") }"#,
                TEXT,
                USAGE,
                r#"ResponseDone { id: Some("resp_Fc1h"), status: Completed }"#,
            ],
            &[rt_usage(81, 15, 96, 0, 0, 81, 0, 15, 0), second],
        );
    }

    #[test]
    fn openai_realtime_cancelled_incomplete_and_failed_responses() {
        let cancelled = RealtimeUsage {
            cached_input_text: None,
            cached_input_audio: None,
            ..rt_usage(120, 20, 140, 0, 0, 100, 20, 5, 15)
        };
        expect(
            Dialect::OpenaiRealtime,
            "openai_cancelled_failed.jsonl",
            &[
                r#"Model("gpt-realtime")"#,
                r#"Error { kind: "invalid_request_error" }"#,
                REQUESTED,
                r#"ResponseStarted { id: Some("resp_Cx1c") }"#,
                AUDIO,
                USAGE,
                r#"ResponseDone { id: Some("resp_Cx1c"), status: Cancelled { reason: Some("turn_detected") } }"#,
                REQUESTED,
                r#"ResponseStarted { id: Some("resp_Cx1g") }"#,
                USAGE,
                r#"ResponseDone { id: Some("resp_Cx1g"), status: Cancelled { reason: Some("client_cancelled") } }"#,
                REQUESTED,
                r#"ResponseStarted { id: Some("resp_Cx1i") }"#,
                TRANSCRIPT,
                USAGE,
                r#"ResponseDone { id: Some("resp_Cx1i"), status: Incomplete { reason: Some("max_output_tokens") } }"#,
                REQUESTED,
                r#"ResponseStarted { id: Some("resp_Cx1l") }"#,
                USAGE,
                r#"ResponseDone { id: Some("resp_Cx1l"), status: Failed { kind: "server_error" } }"#,
            ],
            &[
                cancelled,
                totals(121, 0, 121),
                totals(121, 16, 137),
                totals(0, 0, 0),
            ],
        );
    }

    #[test]
    fn openai_realtime_beta_event_names() {
        let usage = |input, output, total, cached, text_in, text_out, audio_out| RealtimeUsage {
            input: Some(input),
            output: Some(output),
            total: Some(total),
            cached_input: Some(cached),
            input_text: Some(text_in),
            input_audio: Some(0),
            output_text: Some(text_out),
            output_audio: Some(audio_out),
            ..RealtimeUsage::default()
        };
        expect(
            Dialect::OpenaiRealtime,
            "openai_beta.jsonl",
            &[
                r#"Model("gpt-4o-realtime-preview-2024-12-17")"#,
                REQUESTED,
                r#"ResponseStarted { id: Some("resp_Bt1b") }"#,
                TRANSCRIPT,
                AUDIO,
                AUDIO,
                USAGE,
                r#"ResponseDone { id: Some("resp_Bt1b"), status: Completed }"#,
                REQUESTED,
                r#"ResponseStarted { id: Some("resp_Bt1h") }"#,
                TEXT,
                USAGE,
                r#"ResponseDone { id: Some("resp_Bt1h"), status: Completed }"#,
            ],
            &[
                usage(52, 35, 87, 0, 52, 9, 26),
                usage(95, 4, 99, 64, 95, 4, 0),
            ],
        );
    }

    fn responses_usage(input: u64, cached: u64, output: u64, reasoning: u64) -> RealtimeUsage {
        RealtimeUsage {
            input: Some(input),
            output: Some(output),
            total: Some(input + output),
            cached_input: Some(cached),
            reasoning: Some(reasoning),
            ..RealtimeUsage::default()
        }
    }

    #[test]
    fn responses_websocket_reasoning_tool_call_text_and_error() {
        expect(
            Dialect::OpenaiResponses,
            "responses_ws.jsonl",
            &[
                r#"ResponseRequested { model: Some("gpt-5.2") }"#,
                r#"Model("gpt-5.2-2025-12-11")"#,
                r#"ResponseStarted { id: Some("resp_Rw1a") }"#,
                REASONING,
                REASONING,
                CALL_WEATHER,
                TOOL,
                TOOL,
                USAGE,
                r#"ResponseDone { id: Some("resp_Rw1a"), status: Completed }"#,
                r#"ResponseRequested { model: Some("gpt-5.2") }"#,
                r#"Model("gpt-5.2-2025-12-11")"#,
                r#"ResponseStarted { id: Some("resp_Rw1d") }"#,
                REASONING,
                TEXT,
                TEXT,
                USAGE,
                r#"ResponseDone { id: Some("resp_Rw1d"), status: Completed }"#,
                r#"ResponseRequested { model: Some("gpt-5.2") }"#,
                r#"Error { kind: "invalid_request_error" }"#,
            ],
            &[
                responses_usage(312, 0, 58, 40),
                responses_usage(402, 256, 24, 12),
            ],
        );
    }

    #[test]
    fn responses_websocket_lanes_failed_and_incomplete() {
        expect(
            Dialect::OpenaiResponses,
            "responses_ws_lanes.jsonl",
            &[
                r#"Lane("lane-a")"#,
                r#"ResponseRequested { model: Some("gpt-5-mini") }"#,
                r#"Lane("lane-b")"#,
                r#"ResponseRequested { model: Some("gpt-5-nano") }"#,
                r#"Lane("lane-a")"#,
                r#"Model("gpt-5-mini-2025-08-07")"#,
                r#"ResponseStarted { id: Some("resp_La1") }"#,
                r#"Lane("lane-b")"#,
                r#"Model("gpt-5-nano-2025-08-07")"#,
                r#"ResponseStarted { id: Some("resp_Lb1") }"#,
                r#"Lane("lane-b")"#,
                TEXT,
                r#"Lane("lane-a")"#,
                TEXT,
                r#"Lane("lane-b")"#,
                r#"ResponseDone { id: Some("resp_Lb1"), status: Failed { kind: "server_error" } }"#,
                r#"Lane("lane-a")"#,
                USAGE,
                r#"ResponseDone { id: Some("resp_La1"), status: Incomplete { reason: Some("max_output_tokens") } }"#,
            ],
            &[responses_usage(11, 0, 32, 28)],
        );
    }

    #[test]
    fn gemini_live_text_turns_with_usage() {
        let first = RealtimeUsage {
            input: Some(41),
            output: Some(12),
            total: Some(53),
            input_text: Some(41),
            output_text: Some(12),
            ..RealtimeUsage::default()
        };
        // Output = response + thoughts, as for generateContent.
        let second = RealtimeUsage {
            input: Some(60),
            output: Some(10),
            total: Some(70),
            cached_input: Some(32),
            cached_input_text: Some(32),
            input_text: Some(60),
            output_text: Some(4),
            reasoning: Some(6),
            ..RealtimeUsage::default()
        };
        expect(
            Dialect::GeminiLive,
            "gemini_text.jsonl",
            &[
                r#"Model("gemini-live-2.5-flash-preview")"#,
                REQUESTED,
                "ResponseStarted { id: None }",
                TEXT,
                "Output { kind: Text, pieces: 2 }",
                USAGE,
                "ResponseDone { id: None, status: Completed }",
                REQUESTED,
                "ResponseStarted { id: None }",
                TEXT,
                USAGE,
                "ResponseDone { id: None, status: Completed }",
            ],
            &[first, second],
        );
    }

    #[test]
    fn gemini_live_audio_turns_interruption_and_tool_call() {
        let usage = |input, output, total, text_in, audio_in, audio_out| RealtimeUsage {
            input: Some(input),
            output: Some(output),
            total: Some(total),
            input_text: text_in,
            input_audio: audio_in,
            output_audio: Some(audio_out),
            ..RealtimeUsage::default()
        };
        expect(
            Dialect::GeminiLive,
            "gemini_audio.jsonl",
            &[
                r#"Model("gemini-live-2.5-flash")"#,
                COMMITTED,
                "ResponseStarted { id: None }",
                AUDIO,
                TRANSCRIPT,
                AUDIO,
                TRANSCRIPT,
                USAGE,
                "ResponseDone { id: None, status: Completed }",
                COMMITTED,
                "ResponseStarted { id: None }",
                AUDIO,
                USAGE,
                r#"ResponseDone { id: None, status: Cancelled { reason: Some("interrupted") } }"#,
                COMMITTED,
                "ResponseStarted { id: None }",
                TOOL,
                CALL_WEATHER,
                "ResponseDone { id: None, status: Completed }",
                REQUESTED,
                "ResponseStarted { id: None }",
                AUDIO,
                TRANSCRIPT,
                USAGE,
                "ResponseDone { id: None, status: Completed }",
                "Closing",
            ],
            &[
                usage(180, 75, 255, Some(120), Some(60), 75),
                usage(260, 10, 270, Some(150), Some(110), 10),
                // Tool-use prompt tokens count as input.
                usage(308, 20, 328, None, None, 20),
            ],
        );
    }

    #[test]
    fn gemini_fixtures_carry_binary_frames() {
        let path = format!(
            "{}/tests/fixtures/realtime/gemini_audio.jsonl",
            env!("CARGO_MANIFEST_DIR")
        );
        let transcript = std::fs::read_to_string(path).expect("the fixture file");
        let r = replay(Dialect::GeminiLive, &transcript);
        assert!(r.binary_lines > 10, "server messages are marked binary");
    }

    /// Events of one message, in `Debug` form; `Err` when it is rejected.
    fn one(dialect: Dialect, server: bool, json: &str) -> Result<Vec<String>, AdapterError> {
        let mut parser = SessionParser::new(dialect);
        let mut r = Replay::default();
        let result = if server {
            parser.server_message(json.as_bytes(), &mut |e| record(&mut r, e))
        } else {
            parser.client_message(json.as_bytes(), &mut |e| record(&mut r, e))
        };
        result.map(|()| r.events)
    }

    #[test]
    fn empty_and_null_deltas_are_not_output() {
        for json in [
            r#"{"type":"response.output_audio.delta","response_id":"r","delta":""}"#,
            r#"{"type":"response.output_text.delta","delta":null}"#,
            r#"{"type":"response.function_call_arguments.delta","delta":""}"#,
            r#"{"type":"response.audio_transcript.delta"}"#,
        ] {
            assert_eq!(
                one(Dialect::OpenaiRealtime, true, json),
                Ok(vec![]),
                "{json}"
            );
        }
        for json in [
            r#"{"serverContent":{"modelTurn":{"parts":[{"text":""},{"inlineData":{"mimeType":"audio/pcm","data":""}}]}}}"#,
            r#"{"serverContent":{"outputTranscription":{"text":""}}}"#,
            r#"{"serverContent":{"inputTranscription":{"text":"user speech is input"}}}"#,
        ] {
            assert_eq!(one(Dialect::GeminiLive, true, json), Ok(vec![]), "{json}");
        }
    }

    #[test]
    fn output_items_that_call_tools_are_counted_and_others_are_not() {
        let item = |item: &str| format!(r#"{{"type":"response.output_item.added","item":{item}}}"#);
        for (json, want) in [
            (
                item(r#"{"type":"custom_tool_call","name":"apply_patch"}"#),
                vec![r#"ToolCall { name: Some("apply_patch") }"#],
            ),
            (item(r#"{"type":"function_call","name":""}"#), vec!["ToolCall { name: None }"]),
            (item(r#"{"type":"web_search_call"}"#), vec!["ServerToolCall(WebSearch)"]),
            (item(r#"{"type":"file_search_call"}"#), vec!["ServerToolCall(FileSearch)"]),
            (
                item(r#"{"type":"code_interpreter_call"}"#),
                vec!["ServerToolCall(CodeInterpreter)"],
            ),
            (item(r#"{"type":"message","role":"assistant"}"#), vec![]),
            (item(r#"{"type":"reasoning"}"#), vec![]),
            // Only a new output item counts: its `.done` would count it twice.
            (
                r#"{"type":"response.output_item.done","item":{"type":"function_call","name":"f"}}"#
                    .to_owned(),
                vec![],
            ),
        ] {
            for dialect in [Dialect::OpenaiRealtime, Dialect::OpenaiResponses] {
                let want: Vec<String> = want.iter().map(|e| e.to_string()).collect();
                assert_eq!(one(dialect, true, &json), Ok(want), "{json}");
            }
        }
        // An item of the wrong shape is the message's error, as for any field.
        assert!(one(Dialect::OpenaiRealtime, true, &item(r#"{"type":7}"#)).is_err());
        // Gemini Live: each of `toolCall`'s calls, named.
        let calls =
            r#"{"toolCall":{"functionCalls":[{"id":"1","name":"a","args":{}},{"id":"2"}]}}"#;
        assert_eq!(
            one(Dialect::GeminiLive, true, calls),
            Ok(vec![
                "ResponseStarted { id: None }".to_owned(),
                "Output { kind: ToolArgs, pieces: 2 }".to_owned(),
                r#"ToolCall { name: Some("a") }"#.to_owned(),
                "ToolCall { name: None }".to_owned(),
            ])
        );
    }

    #[test]
    fn input_transcription_is_not_output() {
        for json in [
            r#"{"type":"conversation.item.input_audio_transcription.delta","item_id":"i","delta":"hello"}"#,
            r#"{"type":"conversation.item.input_audio_transcription.completed","item_id":"i","transcript":"hello"}"#,
        ] {
            assert_eq!(
                one(Dialect::OpenaiRealtime, true, json),
                Ok(vec![]),
                "{json}"
            );
        }
    }

    #[test]
    fn unknown_event_types_are_ignored_and_unknown_deltas_count_as_other() {
        let ignored = r#"{"type":"output_audio_buffer.started","response_id":"r"}"#;
        assert_eq!(one(Dialect::OpenaiRealtime, true, ignored), Ok(vec![]));
        let in_lane = r#"{"type":"response.in_progress","stream_id":"a","response":{"id":"r"}}"#;
        assert_eq!(one(Dialect::OpenaiResponses, true, in_lane), Ok(vec![]));
        let other = r#"{"type":"response.image_generation_call.partial.delta","delta":"abc"}"#;
        assert_eq!(
            one(Dialect::OpenaiResponses, true, other),
            Ok(vec!["Output { kind: Other, pieces: 1 }".to_owned()])
        );
        let refusal = r#"{"type":"response.refusal.delta","delta":"No."}"#;
        assert_eq!(
            one(Dialect::OpenaiResponses, true, refusal),
            Ok(vec![TEXT.to_owned()])
        );
        assert_eq!(
            one(
                Dialect::GeminiLive,
                true,
                r#"{"sessionResumptionUpdate":{"newHandle":"h","resumable":true}}"#
            ),
            Ok(vec![])
        );
    }

    #[test]
    fn malformed_messages_are_errors_and_the_session_goes_on() {
        let mut parser = SessionParser::new(Dialect::OpenaiRealtime);
        let mut events = Vec::new();
        for bad in [
            &b"{\"type\":"[..],
            b"not json",
            b"{}",
            b"{\"type\":\"response.output_text.delta\",\"delta\":}",
            b"{\"type\":7}",
            b"[1,2]",
            b"",
        ] {
            assert!(
                parser
                    .server_message(bad, &mut |e| events.push(format!("{e:?}")))
                    .is_err(),
                "{:?} is rejected",
                String::from_utf8_lossy(bad)
            );
            assert!(
                parser
                    .client_message(bad, &mut |e| events.push(format!("{e:?}")))
                    .is_err()
            );
        }
        assert!(events.is_empty(), "a rejected message yields nothing");
        let good = br#"{"type":"response.output_text.delta","delta":"x"}"#;
        assert_eq!(
            parser.server_message(good, &mut |e| events.push(format!("{e:?}"))),
            Ok(())
        );
        assert_eq!(events, [TEXT]);

        let mut gemini = SessionParser::new(Dialect::GeminiLive);
        for bad in [&b"\"text\""[..], b"{\"serverContent\":", b"{\"setup\""] {
            assert!(gemini.server_message(bad, &mut |_| {}).is_err());
            assert!(gemini.client_message(bad, &mut |_| {}).is_err());
        }
        // Known fields of the wrong shape, for the side that reads them.
        let bad_usage = br#"{"usageMetadata":{"promptTokenCount":"x"}}"#;
        assert!(gemini.server_message(bad_usage, &mut |_| {}).is_err());
        assert!(
            gemini
                .client_message(br#"{"setup":7}"#, &mut |_| {})
                .is_err()
        );
        assert_eq!(one(Dialect::GeminiLive, true, "{}"), Ok(vec![]));
    }

    #[test]
    fn escaped_strings_are_read() {
        let json = r#"{"type":"session.created","session":{"model":"gpt\u002drealtime"}}"#;
        assert_eq!(
            one(Dialect::OpenaiRealtime, true, json),
            Ok(vec![r#"Model("gpt-realtime")"#.to_owned()])
        );
    }

    /// OpenAI messages the scan must read exactly as serde does (or leave
    /// to it): escapes, nested `type` keys, key order, whitespace,
    /// duplicates, wrong shapes, malformed deltas.
    const SHAPES: &[&str] = &[
        r#"{"type":"response.output_text.delta","delta":"Hi"}"#,
        r#"{"delta":"Hi","event_id":"e","type":"response.output_text.delta"}"#,
        r#"{"item":{"type":"message","delta":""},"type":"response.output_text.delta","delta":"x"}"#,
        r#"{"item":{"type":"response.output_text.delta","delta":"x"},"type":"conversation.item.created"}"#,
        r#"{"part":{"type":"audio"},"type":"response.output_audio.delta","delta":""}"#,
        r#"{"content":[{"type":"x"},{"type":"response.done"}],"type":"response.text.delta","delta":"a"}"#,
        " \n\t{ \"type\" : \"response.output_text.delta\" ,\r\n \"delta\" : \"x\" } \n",
        r#"{"type":"response.output_text.delta","delta":"say \"type\":\"error\" \\ \n \u00e9"}"#,
        r#"{"type":"response.output_text.delta","delta":"\"\""}"#,
        r#"{"type":"response.output_text.delta","delta":"\ud83d\ude00"}"#,
        r#"{"type":"response.output_text.delt\u0061","delta":"x"}"#,
        r#"{"\u0074ype":"response.output_text.delta","delta":"x"}"#,
        r#"{"type":"response.output_text.delta","d\u0065lta":"x"}"#,
        r#"{"type":"response.output_text.delta","delta":"x","delta":"y"}"#,
        r#"{"type":"response.output_text.delta","type":"error"}"#,
        r#"{"type":"response.output_text.delta","delta":{"a":[1,2]}}"#,
        r#"{"type":"response.output_text.delta","delta":[]}"#,
        r#"{"type":"response.output_text.delta","delta":null}"#,
        r#"{"type":"response.output_text.delta","delta":7}"#,
        r#"{"type":"response.output_text.delta","delta":"bad \x escape"}"#,
        "{\"type\":\"response.output_text.delta\",\"delta\":\"raw\ttab\"}",
        r#"{"type":"response.output_text.delta","delta":"unterminated}"#,
        r#"{"type":"response.output_text.delta","delta":"x"} trailing"#,
        r#"{"type":"response.output_text.delta","delta":"x",}"#,
        r#"{"type":"response.output_text.delta","delta":"x","response":7}"#,
        r#"{"type":"response.output_text.delta","delta":"x","model":7}"#,
        r#"{"type":"response.output_text.delta","delta":"x","stream_id":7}"#,
        r#"{"type":"response.output_text.delta","delta":"x","stream_id":"a"}"#,
        r#"{"type":"response.output_text.delta","delta":"x","stream_id":""}"#,
        r#"{"type":"response.output_text.delta","delta":"x","stream_id":null}"#,
        r#"{"type":"response.output_text.delta","delta":"x","stream_id":"\u0061"}"#,
        r#"{"type":"response.output_audio.delta","delta":"AAAA/+8="}"#,
        r#"{"type":"response.function_call_arguments.delta","delta":"{\"city\":"}"#,
        r#"{"type":"input_audio_buffer.speech_stopped","audio_end_ms":1200,"item_id":"i"}"#,
        r#"{"type":"input_audio_buffer.committed","stream_id":"l"}"#,
        r#"{"type":"input_audio_buffer.append","audio":"AAAA"}"#,
        r#"{"type":"response.create","stream_id":"l"}"#,
        r#"{"type":"response.create","model":"gpt-5"}"#,
        r#"{"type":"response.create","response":{"model":"m"}}"#,
        r#"{"type":"response.created","response":{"id":"r","model":"m"}}"#,
        r#"{"type":"response.created"}"#,
        r#"{"type":"response.done"}"#,
        r#"{"type":"response.done","response":{"status":"completed","usage":{"input_tokens":1}}}"#,
        r#"{"type":"session.created","session":{"model":"m"}}"#,
        r#"{"type":"session.updated"}"#,
        r#"{"type":"error","error":{"type":"invalid_request_error"}}"#,
        r#"{"type":"error"}"#,
        r#"{"type":"rate_limits.updated","rate_limits":[{"name":"tokens","limit":1}]}"#,
        r#"{"type":null,"delta":"x"}"#,
        r#"{"type":7}"#,
        r#"{"delta":"x"}"#,
        r#"{}"#,
        r#"[{"type":"response.output_text.delta","delta":"x"}]"#,
        r#""response.output_text.delta""#,
        r#"{"type":"response.output_text.delta","x":[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]}"#,
    ];

    /// Every OpenAI message of the recorded transcripts, with its side.
    fn openai_fixture_messages() -> Vec<(bool, Vec<u8>)> {
        let dir = format!("{}/tests/fixtures/realtime", env!("CARGO_MANIFEST_DIR"));
        let mut out = Vec::new();
        for name in [
            "openai_audio_vad.jsonl",
            "openai_beta.jsonl",
            "openai_cancelled_failed.jsonl",
            "openai_function_call.jsonl",
            "openai_text.jsonl",
            "responses_ws.jsonl",
            "responses_ws_lanes.jsonl",
        ] {
            let text = std::fs::read_to_string(format!("{dir}/{name}")).expect("the fixture file");
            for line in text.lines() {
                let line: Line<'_> = serde_json::from_str(line).expect("a fixture line");
                out.push((line.dir == "server", line.msg.get().as_bytes().to_vec()));
            }
        }
        out
    }

    type Outcome = Result<Vec<String>, AdapterError>;

    /// One message through a parser, as events in `Debug` form.
    fn through(parser: &mut SessionParser, server: bool, json: &[u8]) -> Outcome {
        let mut r = Replay::default();
        let result = if server {
            parser.server_message(json, &mut |e| record(&mut r, e))
        } else {
            parser.client_message(json, &mut |e| record(&mut r, e))
        };
        result.map(|()| {
            let mut events = r.events;
            events.extend(r.usages.iter().map(|u| format!("{u:?}")));
            events
        })
    }

    /// The same message through the scan and through serde alone, in both
    /// OpenAI dialects.
    #[track_caller]
    fn same_as_serde(server: bool, json: &[u8]) {
        for dialect in [Dialect::OpenaiRealtime, Dialect::OpenaiResponses] {
            let scan = through(&mut SessionParser::new(dialect), server, json);
            let serde = through(&mut SessionParser::without_scan(dialect), server, json);
            assert_eq!(
                scan,
                serde,
                "{dialect:?} server={server}: {}",
                String::from_utf8_lossy(json)
            );
        }
    }

    #[test]
    fn scan_reads_fixture_messages_and_tricky_shapes_as_serde_does() {
        let messages = openai_fixture_messages();
        let mut deltas = 0;
        for (server, json) in &messages {
            same_as_serde(*server, json);
            let view = scan_openai(json);
            if let Some(view) = &view {
                assert!(view.full.is_none());
            }
            let kind = view.as_ref().map(|v| v.kind);
            if kind.is_some_and(|k| k.ends_with(".delta")) {
                deltas += 1;
            } else if std::str::from_utf8(json).is_ok_and(|j| j.contains(".delta\"")) {
                panic!("a delta left to serde: {}", String::from_utf8_lossy(json));
            }
        }
        assert!(deltas > 20, "fixture deltas read by the scan: {deltas}");
        for shape in SHAPES {
            same_as_serde(true, shape.as_bytes());
            same_as_serde(false, shape.as_bytes());
        }
    }

    #[test]
    fn scan_reads_mutated_messages_as_serde_does() {
        let messages = openai_fixture_messages();
        let inputs = messages
            .iter()
            .map(|(server, json)| (*server, json.as_slice()))
            .chain(SHAPES.iter().map(|s| (true, s.as_bytes())));
        for (i, (server, json)) in inputs.enumerate() {
            for m in crate::providers::scan::differential::mutations(json, i as u64, 60) {
                same_as_serde(server, &m);
            }
        }
    }

    #[test]
    fn only_top_level_keys_count_in_any_order() {
        let realtime = |json: &str| one(Dialect::OpenaiRealtime, true, json);
        let nested_first = r#"{"event_id":"e","item":{"type":"message","role":"assistant"},"output_index":0,"type":"response.output_audio_transcript.delta","delta":"Hel"}"#;
        assert_eq!(realtime(nested_first), Ok(vec![TRANSCRIPT.to_owned()]));
        let delta_inside = r#"{"type":"conversation.item.created","item":{"type":"response.output_text.delta","delta":"x"}}"#;
        assert_eq!(realtime(delta_inside), Ok(vec![]));
        let spaced = "{ \"delta\" :\n\"x\" ,\t\"type\" : \"response.output_text.delta\" }";
        assert_eq!(realtime(spaced), Ok(vec![TEXT.to_owned()]));
        let escaped = r#"{"type":"response.output_text.delta","delta":"\"\\\n\u00e9\ud83d\ude00"}"#;
        assert_eq!(realtime(escaped), Ok(vec![TEXT.to_owned()]));
        let escaped_type = r#"{"type":"response.output_text\u002edelta","delta":"x"}"#;
        assert_eq!(realtime(escaped_type), Ok(vec![TEXT.to_owned()]));
        let empty_string_literal = r#"{"type":"response.output_text.delta","delta":"\"\""}"#;
        assert_eq!(realtime(empty_string_literal), Ok(vec![TEXT.to_owned()]));
        let commit = r#"{"audio_end_ms":1200,"type":"input_audio_buffer.speech_stopped"}"#;
        assert_eq!(realtime(commit), Ok(vec![COMMITTED.to_owned()]));
    }

    #[test]
    fn malformed_deltas_are_still_malformed() {
        for bad in [
            r#"{"type":"response.output_text.delta","delta":"bad \q escape"}"#,
            "{\"type\":\"response.output_audio.delta\",\"delta\":\"AAAA\nAAAA\"}",
            r#"{"type":"response.output_audio.delta","delta":"AAAA"#,
            r#"{"type":"response.output_audio.delta","delta":"AAAA"}}"#,
            r#"{"type":"response.output_text.delta","delta":"x","delta":"y"}"#,
            r#"{"type":"response.output_text.delta","delta":"x","stream_id":7}"#,
            r#"{"type":"response.output_text.delta","delta":"x","response":"r"}"#,
        ] {
            for server in [true, false] {
                assert!(
                    one(Dialect::OpenaiRealtime, server, bad).is_err(),
                    "server={server}: {bad} is rejected"
                );
            }
        }
        let bytes = b"{\"type\":\"response.output_text.delta\",\"delta\":\"\xff\"}";
        let mut parser = SessionParser::new(Dialect::OpenaiRealtime);
        assert!(
            parser.server_message(bytes, &mut |_| {}).is_err(),
            "not UTF-8"
        );
    }

    #[test]
    fn large_audio_is_read_by_the_scan() {
        let audio = "QUJD".repeat(4096);
        let delta = format!(
            r#"{{"type":"response.output_audio.delta","response_id":"r","delta":"{audio}"}}"#
        );
        let view = scan_openai(delta.as_bytes()).expect("the scan reads it");
        assert_eq!(view.kind, "response.output_audio.delta");
        assert_eq!(view.delta.map(str::len), Some(audio.len() + 2));
        assert_eq!(
            one(Dialect::OpenaiRealtime, true, &delta),
            Ok(vec![AUDIO.to_owned()])
        );
        let append = format!(r#"{{"type":"input_audio_buffer.append","audio":"{audio}"}}"#);
        assert!(scan_openai(append.as_bytes()).is_some());
        assert_eq!(one(Dialect::OpenaiRealtime, false, &append), Ok(vec![]));
    }

    #[test]
    fn a_response_done_without_status_is_not_complete() {
        let json = r#"{"type":"response.done","response":{"id":"r1"}}"#;
        assert_eq!(
            one(Dialect::OpenaiRealtime, true, json),
            Ok(vec![
                r#"ResponseDone { id: Some("r1"), status: Incomplete { reason: None } }"#
                    .to_owned()
            ])
        );
        let failed =
            r#"{"type":"response.failed","response":{"id":"r2","status":"failed","error":null}}"#;
        assert_eq!(
            one(Dialect::OpenaiResponses, true, failed),
            Ok(vec![
                r#"ResponseDone { id: Some("r2"), status: Failed { kind: "response_failed" } }"#
                    .to_owned()
            ])
        );
    }

    #[test]
    fn gemini_client_messages() {
        let ask = |json| one(Dialect::GeminiLive, false, json);
        assert_eq!(
            ask(r#"{"realtimeInput":{"activityEnd":{}}}"#),
            Ok(vec![REQUESTED.to_owned()])
        );
        assert_eq!(ask(r#"{"realtimeInput":{"activityStart":{}}}"#), Ok(vec![]));
        assert_eq!(
            ask(r#"{"realtimeInput":{"audioStreamEnd":true}}"#),
            Ok(vec![COMMITTED.to_owned()])
        );
        assert_eq!(ask(r#"{"realtimeInput":{"text":""}}"#), Ok(vec![]));
        assert_eq!(ask(r#"{"clientContent":{"turns":[]}}"#), Ok(vec![]));
        assert_eq!(
            ask(r#"{"setup":{"model":"models/gemini-2.0-flash-live-001"}}"#),
            Ok(vec![r#"Model("gemini-2.0-flash-live-001")"#.to_owned()])
        );
    }

    #[test]
    fn gemini_turn_complete_reason_marks_incomplete() {
        let json =
            r#"{"serverContent":{"turnComplete":true,"turnCompleteReason":"RESPONSE_REJECTED"}}"#;
        assert_eq!(
            one(Dialect::GeminiLive, true, json),
            Ok(vec![
                "ResponseStarted { id: None }".to_owned(),
                r#"ResponseDone { id: None, status: Incomplete { reason: Some("RESPONSE_REJECTED") } }"#.to_owned(),
            ])
        );
    }

    #[test]
    fn dialects_from_real_paths() {
        use Dialect::*;
        let cases = [
            ("/v1/realtime?model=gpt-realtime", Some(OpenaiRealtime)),
            ("/v1/realtime/", Some(OpenaiRealtime)),
            (
                "/openai/realtime?api-version=2024-10-01-preview&deployment=gpt-4o-realtime-preview",
                Some(OpenaiRealtime),
            ),
            (
                "/openai/v1/realtime?model=my-realtime",
                Some(OpenaiRealtime),
            ),
            ("/v1/responses", Some(OpenaiResponses)),
            ("/openai/v1/responses", Some(OpenaiResponses)),
            (
                "/ws/google.ai.generativelanguage.v1beta.GenerativeService.BidiGenerateContent?key=AIzaSECRET",
                Some(GeminiLive),
            ),
            (
                "/ws/google.ai.generativelanguage.v1alpha.GenerativeService.BidiGenerateContent",
                Some(GeminiLive),
            ),
            (
                "/ws/google.ai.generativelanguage.v1alpha.GenerativeService.BidiGenerateContentConstrained",
                Some(GeminiLive),
            ),
            (
                "/ws/google.cloud.aiplatform.v1beta1.LlmBidiService/BidiGenerateContent",
                Some(GeminiLive),
            ),
            ("/v1/realtime/calls", None),
            ("/v1/chat/completions", None),
            ("/", None),
            ("", None),
        ];
        for (path, want) in cases {
            assert_eq!(dialect_for_path(path), want, "{path}");
        }
    }

    #[test]
    fn models_from_handshake_queries() {
        let cases = [
            ("/v1/realtime?model=gpt-realtime", Some("gpt-realtime")),
            (
                "/openai/realtime?api-version=2024-10-01-preview&deployment=gpt-4o-realtime-preview",
                Some("gpt-4o-realtime-preview"),
            ),
            (
                "/openai/v1/realtime?model=my%20deploy%2Fv2",
                Some("my deploy/v2"),
            ),
            ("/x?deployment=d&model=m", Some("m")),
            ("/x?model=&deployment=d", Some("d")),
            (
                "/ws/google.ai.generativelanguage.v1beta.GenerativeService.BidiGenerateContent?key=AIzaSECRET",
                None,
            ),
            ("/v1/realtime", None),
            ("/v1/realtime?model", None),
            ("/v1/realtime?amodel=x", None),
        ];
        for (path, want) in cases {
            assert_eq!(model_from_query(path).as_deref(), want, "{path}");
        }
    }

    #[test]
    fn realtime_usage_maps_onto_usage() {
        let u = RealtimeUsage {
            input: Some(10),
            output: Some(5),
            cached_input: Some(4),
            reasoning: Some(2),
            output_audio: Some(3),
            ..RealtimeUsage::default()
        };
        assert_eq!(
            u.to_usage(),
            Usage {
                input: Some(10),
                output: Some(5),
                cache_read: Some(4),
                cache_creation: None,
                reasoning: Some(2),
                output_audio: Some(3),
                ..Usage::default()
            }
        );
    }
}
