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
//! Each message is deserialized once into borrowed structs holding only
//! the fields metering reads; deltas (audio deltas are large base64
//! strings) are borrowed as raw JSON and only checked for emptiness.

use std::fmt;
use std::marker::PhantomData;

use serde::Deserialize;
use serde::de::{IgnoredAny, SeqAccess, Visitor};
use serde_json::value::RawValue;

use super::openai::{Str, non_empty};
use super::{AdapterError, Usage, percent_decode, strip_query};

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
    Cancelled { reason: Option<&'a str> },
    /// It failed: the error's type, else its code, else `response_failed`.
    Failed { kind: &'a str },
    /// It stopped early: `max_output_tokens`, `content_filter`, a Gemini
    /// `turnCompleteReason`; `None` when the provider gave no status.
    Incomplete { reason: Option<&'a str> },
}

/// What one message of a session meant, as far as metering cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionEvent<'a> {
    /// The client asked for a response (`response.create`, Gemini
    /// `clientContent` with `turnComplete`, `realtimeInput.activityEnd`,
    /// `toolResponse`): the TTFT clock starts. `model` is the model the
    /// request names (Responses WebSocket mode carries one per request).
    ResponseRequested { model: Option<&'a str> },
    /// User input is complete and the server will answer without being
    /// asked (server VAD: `input_audio_buffer.speech_stopped` /
    /// `.committed`, Gemini `voiceActivity` end, `realtimeInput.text` or
    /// `audioStreamEnd`): the clock starts here if no request is pending.
    /// Several may arrive for one turn; the first counts.
    InputCommitted,
    /// A response began (`response.created`; Gemini: the first model
    /// content of a turn), with its id where the dialect has one.
    ResponseStarted { id: Option<&'a str> },
    /// One message carrying output of `kind`; `pieces` counts the
    /// non-empty pieces in it. Empty deltas produce nothing.
    Output { kind: OutputKind, pieces: u32 },
    /// The model serving the session or response (`session.created` /
    /// `session.updated`, `response.created`, Gemini `setup.model`).
    Model(&'a str),
    /// Usage of the current response, reported just before its
    /// `ResponseDone` (`response.done`, `response.completed`, Gemini
    /// `usageMetadata`).
    Usage(RealtimeUsage),
    /// The response ended.
    ResponseDone {
        id: Option<&'a str>,
        status: DoneStatus<'a>,
    },
    /// An `error` event not tied to a finished response (`error.type`,
    /// else `error.code`). In Responses WebSocket mode an error while a
    /// request is pending and no response started means that request failed.
    Error { kind: &'a str },
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
}

impl SessionParser {
    /// A parser for a session speaking `dialect`.
    pub fn new(dialect: Dialect) -> Self {
        SessionParser {
            dialect,
            in_turn: false,
            interrupted: false,
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
            Dialect::OpenaiRealtime | Dialect::OpenaiResponses => openai_client(json, out),
            Dialect::GeminiLive => gemini_client(json, out),
        }
    }

    /// Map one complete server → client message to events.
    pub fn server_message(
        &mut self,
        json: &[u8],
        out: &mut dyn FnMut(SessionEvent<'_>),
    ) -> Result<(), AdapterError> {
        match self.dialect {
            Dialect::OpenaiRealtime | Dialect::OpenaiResponses => openai_server(json, out),
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

fn openai_client(json: &[u8], out: &mut dyn FnMut(SessionEvent<'_>)) -> Result<(), AdapterError> {
    let event = parse_openai(json)?;
    let kind = event.kind.as_ref().map_or("", Str::as_str);
    if kind == "response.create" {
        if let Some(lane) = non_empty_str(event.stream_id.as_ref()) {
            out(SessionEvent::Lane(lane));
        }
        // Responses mode names the model at the top level; Realtime's
        // `response` parameters have no model (the session's applies).
        let model = non_empty_str(event.model.as_ref()).or_else(|| {
            event
                .response
                .as_ref()
                .and_then(|r| non_empty_str(r.model.as_ref()))
        });
        out(SessionEvent::ResponseRequested { model });
    }
    Ok(())
}

fn openai_server(json: &[u8], out: &mut dyn FnMut(SessionEvent<'_>)) -> Result<(), AdapterError> {
    let event = parse_openai(json)?;
    let kind = event.kind.as_ref().map_or("", Str::as_str);
    if let Some(lane) = non_empty_str(event.stream_id.as_ref()) {
        out(SessionEvent::Lane(lane));
    }
    if kind.starts_with("response.") && kind.ends_with(".delta") {
        if non_empty(event.delta) {
            let kind = output_kind(kind);
            out(SessionEvent::Output { kind, pieces: 1 });
        }
        return Ok(());
    }
    match kind {
        "session.created" | "session.updated" => {
            let model = event.session.as_ref().and_then(|s| s.model.as_ref());
            if let Some(model) = non_empty_str(model) {
                out(SessionEvent::Model(model));
            }
        }
        "input_audio_buffer.speech_stopped" | "input_audio_buffer.committed" => {
            out(SessionEvent::InputCommitted);
        }
        "response.created" => {
            let response = event.response.as_ref();
            if let Some(model) = response.and_then(|r| non_empty_str(r.model.as_ref())) {
                out(SessionEvent::Model(model));
            }
            let id = response.and_then(|r| non_empty_str(r.id.as_ref()));
            out(SessionEvent::ResponseStarted { id });
        }
        "response.done" | "response.completed" | "response.incomplete" | "response.failed" => {
            response_done(kind, event.response.as_ref(), out);
        }
        "error" => {
            let kind = event.error.as_ref().and_then(OaError::kind);
            out(SessionEvent::Error {
                kind: kind.unwrap_or("error"),
            });
        }
        _ => {}
    }
    Ok(())
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
    tool_call: Option<ToolCall>,
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
struct ToolCall {
    function_calls: Option<Count>,
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

/// The number of elements of a JSON array, read without keeping them.
#[derive(Debug, Clone, Copy, Default)]
struct Count(u32);

impl<'de> Deserialize<'de> for Count {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Count;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an array")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Count, A::Error> {
                let mut n = 0u32;
                while seq.next_element::<IgnoredAny>()?.is_some() {
                    n = n.saturating_add(1);
                }
                Ok(Count(n))
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

fn gemini_client(json: &[u8], out: &mut dyn FnMut(SessionEvent<'_>)) -> Result<(), AdapterError> {
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

impl SessionParser {
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
        let calls = msg.tool_call.as_ref().and_then(|t| t.function_calls);
        let turn_complete = content.and_then(|c| c.turn_complete) == Some(true);
        let outputs = [
            (OutputKind::Text, parts.text),
            (OutputKind::Audio, parts.audio),
            (OutputKind::Transcript, u32::from(transcript)),
            (OutputKind::Reasoning, parts.reasoning),
            (OutputKind::ToolArgs, parts.tool),
            (OutputKind::ToolArgs, calls.map_or(0, |c| c.0)),
            (OutputKind::Other, parts.other),
        ];
        let has_output = outputs.iter().any(|(_, n)| *n > 0);
        if !self.in_turn && (has_output || turn_complete || msg.tool_call.is_some()) {
            self.in_turn = true;
            out(SessionEvent::ResponseStarted { id: None });
        }
        for (kind, pieces) in outputs {
            if pieces > 0 {
                out(SessionEvent::Output { kind, pieces });
            }
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
            out(SessionEvent::ResponseDone { id: None, status });
        }
        if msg.go_away.is_some() {
            out(SessionEvent::Closing);
        }
        Ok(())
    }
}
