//! WebSocket session dialects: complete JSON messages of a relayed WebSocket session
//! (client → server and server → client) in, realtime events out.
//!
//! Three dialects share the realtime events and `RealtimeParser` here
//! because they share the shape "a client asks, the server streams deltas,
//! a terminal event carries usage"; each reads its messages in its own
//! file (`openai`, `gemini`):
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
//! nearly every message of a WebSocket session (audio deltas and client audio
//! appends are large base64 strings, walked once and never copied). An
//! event with a field only serde reads (`response`, `session`, `error`,
//! `model`), or anything the scan is unsure of, is deserialized once into
//! borrowed structs holding only the fields metering reads; malformed JSON
//! is rejected either way. Deltas are borrowed as raw JSON and only checked
//! for emptiness (the WebSocket session meter counts pieces, it reads no text).

use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::value::RawValue;

mod gemini;
mod openai;

use self::gemini::GeminiTurn;
#[cfg(test)]
use self::openai::scan_openai;
use self::openai::{openai_client, openai_message, openai_server};
use super::openai::{ItemTool, OutputItem};
use super::scan::{Scan, Seen};
use super::wire::{Fold, Str, deserialize_by_fold, non_empty, non_empty_raw};
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

/// What one message of a WebSocket session meant, as far as metering cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RealtimeEvent<'a> {
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
    /// The model serving the WebSocket session or response (`session.created` /
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
    /// The server announced it will close the WebSocket session soon (Gemini `goAway`).
    Closing,
}

/// Parser state of one relayed WebSocket session.
#[derive(Debug)]
pub struct RealtimeParser {
    dialect: Dialect,
    /// Gemini Live's turn state (unused by the other dialects).
    gemini: GeminiTurn,
    /// Take the serde path only (tests that compare it with the scan).
    no_scan: bool,
}

impl RealtimeParser {
    /// A parser for a WebSocket session speaking `dialect`.
    pub fn new(dialect: Dialect) -> Self {
        RealtimeParser {
            dialect,
            gemini: GeminiTurn::default(),
            no_scan: false,
        }
    }

    /// A parser that always takes the serde path, to check the scan
    /// against it.
    #[cfg(test)]
    fn without_scan(dialect: Dialect) -> Self {
        RealtimeParser {
            no_scan: true,
            ..RealtimeParser::new(dialect)
        }
    }

    /// The dialect this parser reads.
    pub fn dialect(&self) -> Dialect {
        self.dialect
    }

    /// Map one complete client → server message (the payload of a text or
    /// binary frame) to events. A malformed message is an error for that
    /// message only; the WebSocket session goes on.
    pub fn client_message(
        &mut self,
        json: &[u8],
        out: &mut dyn FnMut(RealtimeEvent<'_>),
    ) -> Result<(), AdapterError> {
        self.message(false, json, out)
    }

    /// Map one complete server → client message to events.
    pub fn server_message(
        &mut self,
        json: &[u8],
        out: &mut dyn FnMut(RealtimeEvent<'_>),
    ) -> Result<(), AdapterError> {
        self.message(true, json, out)
    }

    /// Map one complete message to events: a server → client one when
    /// `from_server`, else a client → server one.
    pub fn message(
        &mut self,
        from_server: bool,
        json: &[u8],
        out: &mut dyn FnMut(RealtimeEvent<'_>),
    ) -> Result<(), AdapterError> {
        match self.dialect {
            Dialect::OpenaiRealtime | Dialect::OpenaiResponses => {
                openai_message(json, self.no_scan, |e| {
                    if from_server {
                        openai_server(e, out);
                    } else {
                        openai_client(e, out);
                    }
                })
            }
            Dialect::GeminiLive if from_server => self.gemini.server(json, out),
            Dialect::GeminiLive => self.gemini.client(json, out),
        }
    }
}

/// An object of which metering reads only `model`: Gemini Live's `setup`,
/// OpenAI Realtime's `session`.
#[derive(Deserialize)]
struct ModelOnly<'a> {
    #[serde(borrow)]
    model: Option<Str<'a>>,
}

/// The string if present and not empty.
fn non_empty_str<'s>(s: Option<&'s Str<'_>>) -> Option<&'s str> {
    s.map(Str::as_str).filter(|s| !s.is_empty())
}

#[cfg(test)]
mod tests;
