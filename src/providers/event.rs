//! The providers' vocabulary: what an adapter reads from a response
//! (`Event`s: content, usage, model, errors, tool calls; `Usage`, the
//! provider-reported timing and cost) and why parsing failed, out to the
//! meter. Types only; `providers.rs` maps frames to them.

use std::time::Duration;

use crate::framing::FramingError;

/// Timings the upstream server reported about its own work, beside the
/// ones tokentap measures. Absent fields were not reported.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UpstreamTiming {
    /// Server-side time to first token or byte (Bedrock `firstByteLatency`,
    /// LM Studio `time_to_first_token`).
    pub ttft: Option<Duration>,
    /// Server-side total (Bedrock `latencyMs` / `invocationLatency`, Ollama
    /// `total_duration`, Groq `total_time`).
    pub total: Option<Duration>,
    /// Prompt processing (Ollama `prompt_eval_duration`, llama.cpp
    /// `prompt_ms`, Groq `prompt_time`).
    pub prompt_eval: Option<Duration>,
    /// Token generation (Ollama `eval_duration`, llama.cpp `predicted_ms`,
    /// Groq `completion_time`, LM Studio `generation_time`).
    pub decode: Option<Duration>,
    /// Time queued before processing (Groq `queue_time`).
    pub queue: Option<Duration>,
    /// Model load before processing (Ollama `load_duration`).
    pub load: Option<Duration>,
}

impl UpstreamTiming {
    /// Overwrite every field `newer` reports; keep the rest.
    pub fn merge(&mut self, newer: UpstreamTiming) {
        self.ttft = newer.ttft.or(self.ttft);
        self.total = newer.total.or(self.total);
        self.prompt_eval = newer.prompt_eval.or(self.prompt_eval);
        self.decode = newer.decode.or(self.decode);
        self.queue = newer.queue.or(self.queue);
        self.load = newer.load.or(self.load);
    }

    /// Whether nothing was reported.
    pub fn is_empty(&self) -> bool {
        *self == UpstreamTiming::default()
    }

    /// The server's own share of what tokentap measures as TTFT: for a
    /// stream, its time to first token (`ttft`, else `queue + load +
    /// prompt_eval`); for a whole body, its total (`total`, else the sum
    /// of the phases). `None` when the server reported nothing that fits.
    pub fn first_token_equivalent(&self, stream: bool) -> Option<Duration> {
        let phases = |parts: &[Option<Duration>]| -> Option<Duration> {
            parts.iter().any(Option::is_some).then(|| {
                parts
                    .iter()
                    .flatten()
                    .fold(Duration::ZERO, |a, d| a.saturating_add(*d))
            })
        };
        if stream {
            self.ttft.or_else(|| {
                self.prompt_eval
                    .and_then(|_| phases(&[self.queue, self.load, self.prompt_eval]))
            })
        } else {
            self.total.or_else(|| {
                self.decode
                    .and_then(|_| phases(&[self.queue, self.load, self.prompt_eval, self.decode]))
            })
        }
    }
}

/// Milliseconds as reported (`latencyMs`, `prompt_ms`), to a `Duration`;
/// negative or non-finite values are dropped.
pub(crate) fn millis(ms: f64) -> Option<Duration> {
    Duration::try_from_secs_f64(ms / 1000.0).ok()
}

/// Seconds as reported (Groq `queue_time`), to a `Duration`.
pub(crate) fn seconds(s: f64) -> Option<Duration> {
    Duration::try_from_secs_f64(s).ok()
}

/// The model and response id of one response, each reported once: the
/// first time it appears and is not empty.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Identity {
    model: bool,
    id: bool,
}

impl Identity {
    /// Whether both have been reported.
    pub(crate) fn known(self) -> bool {
        self.model && self.id
    }

    /// `Event::Model`, unless a model was reported.
    pub(crate) fn model(&mut self, model: Option<&str>, out: &mut dyn FnMut(Event<'_>)) {
        once(&mut self.model, model, Event::Model, out);
    }

    /// `Event::ResponseId`, unless an id was reported.
    pub(crate) fn id(&mut self, id: Option<&str>, out: &mut dyn FnMut(Event<'_>)) {
        once(&mut self.id, id, Event::ResponseId, out);
    }

    /// `model`, then `id`.
    pub(crate) fn report(
        &mut self,
        model: Option<&str>,
        id: Option<&str>,
        out: &mut dyn FnMut(Event<'_>),
    ) {
        self.model(model, out);
        self.id(id, out);
    }
}

/// `event(value)` unless `sent` or `value` is empty; `sent` once it is.
fn once<'v>(
    sent: &mut bool,
    value: Option<&'v str>,
    event: fn(&'v str) -> Event<'v>,
    out: &mut dyn FnMut(Event<'_>),
) {
    if let Some(value) = value.filter(|v| !*sent && !v.is_empty()) {
        out(event(value));
        *sent = true;
    }
}

/// Token usage as reported by a provider. Absent fields were not reported.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// Input (prompt) tokens.
    pub input: Option<u64>,
    /// Output (completion) tokens.
    pub output: Option<u64>,
    /// Input tokens served from the provider's prompt cache.
    pub cache_read: Option<u64>,
    /// Input tokens written to the provider's prompt cache (Anthropic).
    pub cache_creation: Option<u64>,
    /// Output tokens spent on reasoning (included in `output`).
    pub reasoning: Option<u64>,
    /// Cache writes kept for 5 minutes (Anthropic
    /// `cache_creation.ephemeral_5m_input_tokens`; part of `cache_creation`).
    pub cache_write_5m: Option<u64>,
    /// Cache writes kept for 1 hour (Anthropic
    /// `cache_creation.ephemeral_1h_input_tokens`; part of `cache_creation`).
    pub cache_write_1h: Option<u64>,
    /// Audio input tokens (part of `input`).
    pub input_audio: Option<u64>,
    /// Audio output tokens (part of `output`).
    pub output_audio: Option<u64>,
    /// Audio input served from the prompt cache (part of `cache_read` and
    /// of `input_audio`; OpenAI Realtime).
    pub cache_read_audio: Option<u64>,
    /// The service tier the provider says it served the request at.
    pub service_tier: Option<ServiceTier>,
    /// The request's cost as the provider reported it (OpenRouter `usage.cost`).
    pub cost: Option<ReportedCost>,
}

impl Usage {
    /// Overwrite every field `newer` reports; keep the rest.
    pub fn merge(&mut self, newer: Usage) {
        self.input = newer.input.or(self.input);
        self.output = newer.output.or(self.output);
        self.cache_read = newer.cache_read.or(self.cache_read);
        self.cache_creation = newer.cache_creation.or(self.cache_creation);
        self.reasoning = newer.reasoning.or(self.reasoning);
        self.cache_write_5m = newer.cache_write_5m.or(self.cache_write_5m);
        self.cache_write_1h = newer.cache_write_1h.or(self.cache_write_1h);
        self.input_audio = newer.input_audio.or(self.input_audio);
        self.output_audio = newer.output_audio.or(self.output_audio);
        self.cache_read_audio = newer.cache_read_audio.or(self.cache_read_audio);
        self.service_tier = newer.service_tier.or(self.service_tier);
        self.cost = newer.cost.or(self.cost);
    }
}

/// A processing tier that changes the price (OpenAI and Anthropic
/// `service_tier`, in the request or the response).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ServiceTier {
    /// Standard processing (`default`, `auto`, `standard`).
    Default,
    /// OpenAI Flex processing (cheaper, slower).
    Flex,
    /// Priority processing (dearer, faster).
    Priority,
    /// Batch processing (Anthropic `usage.service_tier = "batch"`).
    Batch,
}

impl ServiceTier {
    /// The tier a `service_tier` value names; `None` for values that do
    /// not change the price or are unknown.
    pub fn parse(s: &str) -> Option<ServiceTier> {
        match s {
            "default" | "auto" | "standard" | "standard_only" => Some(ServiceTier::Default),
            "flex" => Some(ServiceTier::Flex),
            "priority" => Some(ServiceTier::Priority),
            "batch" => Some(ServiceTier::Batch),
            _ => None,
        }
    }

    /// The lowercase name (`tokentap.service_tier`).
    pub fn as_str(self) -> &'static str {
        match self {
            ServiceTier::Default => "default",
            ServiceTier::Flex => "flex",
            ServiceTier::Priority => "priority",
            ServiceTier::Batch => "batch",
        }
    }
}

/// A cost in USD the provider reported itself; finite and ≥ 0.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ReportedCost(f64);

// Finite by construction, so equality is total.
impl Eq for ReportedCost {}

impl ReportedCost {
    /// `usd` when it is a plausible cost (finite, ≥ 0).
    pub fn new(usd: f64) -> Option<ReportedCost> {
        (usd.is_finite() && usd >= 0.0).then_some(ReportedCost(usd))
    }

    /// The amount in USD.
    pub fn usd(self) -> f64 {
        self.0
    }
}

/// What a frame meant, as far as metering cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event<'a> {
    /// The frame carried output content (text, tool-call arguments,
    /// reasoning). `pieces` is the number of content pieces in the frame
    /// (usually 1), used to estimate tokens when no usage is reported;
    /// `kind` says whether the content was reasoning, visible, or both.
    Content {
        /// Content pieces in the frame (usually 1).
        pieces: u32,
        /// Reasoning, visible output, or both.
        kind: ContentKind,
    },
    /// The text of one content piece, as the JSON string literal found on
    /// the wire (quotes and escapes included, borrowed). Only used to count
    /// tokens off the request path when the provider reports no usage;
    /// adapters emit it where it is free (OpenAI, Anthropic).
    Text(&'a str),
    /// Usage reported by the provider; later reports overwrite earlier ones
    /// field by field.
    Usage(Usage),
    /// The model that answered (`gen_ai.response.model`).
    Model(&'a str),
    /// The provider's response id (`gen_ai.response.id`).
    ResponseId(&'a str),
    /// Why generation stopped (`gen_ai.response.finish_reasons`).
    FinishReason(&'a str),
    /// The provider reported an error inside the body, e.g. a mid-stream
    /// error event under HTTP 200. `kind` becomes `error.type`.
    Error {
        /// The provider's error type, used as `error.type`.
        kind: &'a str,
    },
    /// Timings the server reported about its own work; later reports
    /// overwrite earlier ones field by field.
    UpstreamTiming(UpstreamTiming),
    /// The provider's explicit end-of-answer marker (an OpenAI chunk's
    /// `finish_reason`, `message_stop`, `response.completed`; `[DONE]`
    /// alone is not one).
    Done,
    /// A client tool call began (the model asks the client to run a tool):
    /// given once per call, however many frames its arguments take.
    /// `name` is the tool's name as the wire gives it, when this frame
    /// names it.
    ToolCall {
        /// The tool's (function's) name.
        name: Option<&'a str>,
    },
    /// The provider ran `calls` tools of one kind itself (a
    /// `server_tool_use` block, a Responses `web_search_call` item,
    /// grounding queries): added to what was seen before.
    ServerToolCalls {
        /// Which provider-run tool.
        tool: ServerTool,
        /// Calls seen in this frame.
        calls: u32,
    },
    /// The provider's own count of billed calls of one provider-run tool
    /// (Anthropic `usage.server_tool_use`): it replaces the calls counted
    /// from the output for that tool. Cumulative; the latest wins.
    ServerToolUsage {
        /// Which provider-run tool.
        tool: ServerTool,
        /// Billed calls so far in this response.
        calls: u32,
    },
}

impl Event<'static> {
    /// One piece of visible output: a whole body with content, or a chunk
    /// whose one piece is visible.
    pub const ONE_VISIBLE: Event<'static> = Event::Content {
        pieces: 1,
        kind: ContentKind::Visible,
    };
}

/// A tool the provider runs itself and bills per call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ServerTool {
    /// Web search (Anthropic `web_search`, OpenAI `web_search_call`).
    WebSearch,
    /// Web fetch (Anthropic `web_fetch`).
    WebFetch,
    /// OpenAI `file_search_call`.
    FileSearch,
    /// OpenAI `code_interpreter_call`, Anthropic `code_execution`.
    CodeInterpreter,
    /// Gemini grounding with Google Search (per search query).
    Grounding,
}

impl ServerTool {
    /// Every kind, in `ServerTools` field order.
    pub const ALL: [ServerTool; 5] = [
        ServerTool::WebSearch,
        ServerTool::WebFetch,
        ServerTool::FileSearch,
        ServerTool::CodeInterpreter,
        ServerTool::Grounding,
    ];

    /// The lowercase name (span attribute suffix, price key stem).
    pub fn as_str(self) -> &'static str {
        match self {
            ServerTool::WebSearch => "web_search",
            ServerTool::WebFetch => "web_fetch",
            ServerTool::FileSearch => "file_search",
            ServerTool::CodeInterpreter => "code_interpreter",
            ServerTool::Grounding => "grounding",
        }
    }
}

/// What kind of output a content frame carried: the model's reasoning
/// (thinking, reasoning summaries, `reasoning_content`) or what the caller
/// sees (text, audio, refusals, tool calls). The meter keeps a clock for
/// each (DESIGN.md: TTFT, time to first visible output, thinking time).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContentKind {
    /// Text, audio, refusals or tool-call deltas.
    Visible,
    /// Reasoning the provider streams apart from the answer.
    Reasoning,
    /// Both in one frame (e.g. a Gemini chunk with a thought part and a
    /// text part, or several choices).
    Mixed,
}

impl ContentKind {
    /// The kind of a frame that carried `visible` and/or `reasoning`
    /// content; `None` when it carried neither (no clock starts).
    pub fn of(visible: bool, reasoning: bool) -> Option<ContentKind> {
        match (visible, reasoning) {
            (true, false) => Some(ContentKind::Visible),
            (false, true) => Some(ContentKind::Reasoning),
            (true, true) => Some(ContentKind::Mixed),
            (false, false) => None,
        }
    }

    /// The frame carried visible output.
    pub fn is_visible(self) -> bool {
        self != ContentKind::Reasoning
    }

    /// The frame carried reasoning.
    pub fn is_reasoning(self) -> bool {
        self != ContentKind::Visible
    }
}

/// A frame the adapter could not make sense of.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct AdapterError(pub &'static str);

/// Why a response body could not be metered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// The framing decoder gave up on the stream.
    #[error(transparent)]
    Framing(#[from] FramingError),
    /// A frame did not have the shape the provider adapter expects.
    #[error("unexpected payload: {0}")]
    Adapter(#[from] AdapterError),
}
