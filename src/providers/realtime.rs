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
struct OpenAiEvent<'a> {
    #[serde(borrow, rename = "type")]
    kind: Option<Str<'a>>,
    /// Every `*.delta` event; borrowed raw, never copied or unescaped.
    #[serde(borrow)]
    delta: Option<&'a RawValue>,
    /// `response.create` parameters (client) or the response resource.
    #[serde(borrow)]
    response: Option<OpenAiResponse<'a>>,
    #[serde(borrow)]
    session: Option<OpenAiSession<'a>>,
    #[serde(borrow)]
    error: Option<OpenAiError<'a>>,
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
struct OpenAiResponse<'a> {
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
    error: Option<OpenAiError<'a>>,
    usage: Option<OpenAiUsage>,
}

#[derive(Deserialize)]
struct StatusDetails<'a> {
    #[serde(borrow)]
    reason: Option<Str<'a>>,
    #[serde(borrow)]
    error: Option<OpenAiError<'a>>,
}

#[derive(Deserialize)]
struct OpenAiSession<'a> {
    #[serde(borrow)]
    model: Option<Str<'a>>,
}

#[derive(Deserialize)]
struct OpenAiError<'a> {
    #[serde(borrow, rename = "type")]
    kind: Option<Str<'a>>,
    #[serde(borrow)]
    code: Option<Str<'a>>,
}

impl OpenAiError<'_> {
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
struct OpenAiUsage {
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

impl OpenAiUsage {
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

fn parse_openai(json: &[u8]) -> Result<OpenAiEvent<'_>, AdapterError> {
    let event: OpenAiEvent<'_> = serde_json::from_slice(json)
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
struct OpenAiView<'e> {
    /// The top-level `type`.
    kind: &'e str,
    /// The top-level `delta` as raw JSON (never unescaped); `None` when
    /// absent or `null`.
    delta: Option<&'e str>,
    /// The Responses WebSocket lane, when present and not empty.
    lane: Option<&'e str>,
    /// The serde parse, for the fields only it reads; `None` when the scan
    /// read the event (it had none of them).
    full: Option<&'e OpenAiEvent<'e>>,
}

impl OpenAiView<'_> {
    fn response(&self) -> Option<&OpenAiResponse<'_>> {
        self.full.and_then(|e| e.response.as_ref())
    }
}

/// Read one OpenAI message and hand `on` its view: by the scan when it can
/// (`scan` on), else by serde, whose errors are the message's.
fn openai_message(
    json: &[u8],
    no_scan: bool,
    on: impl FnOnce(&OpenAiView<'_>),
) -> Result<(), AdapterError> {
    if !no_scan
        && !serde_first(json)
        && let Some(view) = scan_openai(json)
    {
        on(&view);
        return Ok(());
    }
    let event = parse_openai(json)?;
    on(&OpenAiView {
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
fn scan_openai(json: &[u8]) -> Option<OpenAiView<'_>> {
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
    Some(OpenAiView {
        kind: kind?,
        delta,
        lane: lane.filter(|l| !l.is_empty()),
        full: None,
    })
}

fn openai_client(event: &OpenAiView<'_>, out: &mut dyn FnMut(SessionEvent<'_>)) {
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

fn openai_server(event: &OpenAiView<'_>, out: &mut dyn FnMut(SessionEvent<'_>)) {
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
                kind: error.and_then(OpenAiError::kind).unwrap_or("error"),
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
    response: Option<&OpenAiResponse<'_>>,
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
                kind: error
                    .and_then(OpenAiError::kind)
                    .unwrap_or("response_failed"),
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
mod tests;
