//! The meter's vocabulary: what one request was (`RequestFacts`) and what
//! it measured (`Measurement`, its `Outcome`, usage, reasoning, tools and
//! modalities) in one place; `Recorder` is what receives it. Built by the
//! meter (`body`, `ws_session`, `drain`), read by `telemetry`, `watch`,
//! `state` and `bench`.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use crate::providers::{Operation, ProviderKind, ServerTool, ServiceTier, UpstreamTiming, Usage};
/// What the sniffer did with the request body: `sniff`'s, re-exported for
/// `RequestFacts`.
pub use crate::sniff::RequestBody;

/// How a request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// The response body finished normally and carried no error.
    Complete,
    /// The client went away before the response finished.
    ClientCancelled,
    /// The upstream failed: connect/TLS, an error status, an error inside
    /// the body, or a body that broke off.
    UpstreamError,
    /// The upstream took too long: no response head or no body bytes within
    /// `upstream.idle_timeout`, the request past `upstream.total_timeout`, or
    /// a connect timeout (the client got a 504 or a cut stream).
    UpstreamTimeout,
    /// The body could not be parsed: the framing broke beyond resynchronising
    /// (oversized frame, broken eventstream prelude, JSON array cut short),
    /// a whole JSON body was not valid, or a stream had malformed events and
    /// no terminal event (the terminal may have been among them).
    Malformed,
    /// A streamed body ended cleanly (no break, no error) without its
    /// protocol's terminal event (an OpenAI choice's `finish_reason`, which
    /// `[DONE]` alone does not replace, `message_stop`, `finishReason`,
    /// `messageStop`, `response.completed`, `done: true`, …), including a
    /// 200 whose streamed body was empty.
    Incomplete,
    /// tokentap's own shutdown cut it: the drain's grace period ran out
    /// (`error.type` `shutdown_grace_expired`) or a second signal came
    /// (`shutdown_forced`). Neither the client's doing nor the upstream's.
    Shutdown,
}

impl Outcome {
    /// Every outcome, in the order the docs list them.
    pub const ALL: [Outcome; 7] = [
        Outcome::Complete,
        Outcome::ClientCancelled,
        Outcome::UpstreamError,
        Outcome::UpstreamTimeout,
        Outcome::Malformed,
        Outcome::Incomplete,
        Outcome::Shutdown,
    ];

    /// Counted as an error: the upstream failed, timed out, sent a body
    /// that could not be parsed, or ended a stream without its terminal
    /// event (client cancellations and tokentap's own shutdown cuts are
    /// not errors).
    pub fn is_error(self) -> bool {
        matches!(
            self,
            Outcome::UpstreamError
                | Outcome::UpstreamTimeout
                | Outcome::Malformed
                | Outcome::Incomplete
        )
    }

    /// The `tokentap.outcome` attribute value.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Complete => "complete",
            Outcome::ClientCancelled => "client_cancelled",
            Outcome::UpstreamError => "upstream_error",
            Outcome::UpstreamTimeout => "upstream_timeout",
            Outcome::Malformed => "malformed",
            Outcome::Incomplete => "incomplete",
            Outcome::Shutdown => "shutdown",
        }
    }
}

/// How the output token count was obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TokenSource {
    /// Reported by the provider (exact).
    Provider,
    /// Counted from content chunks (estimated).
    Chunks,
    /// Counted with the model family's tokenizer (estimated, but close).
    Tokenizer,
}

impl TokenSource {
    /// The `tokentap.tokens.source` attribute value.
    pub fn as_str(self) -> &'static str {
        match self {
            TokenSource::Provider => "provider",
            TokenSource::Chunks => "chunks",
            TokenSource::Tokenizer => "tokenizer",
        }
    }
}

/// Facts known when the request head and body were read, before forwarding.
#[derive(Debug, Clone)]
pub struct RequestFacts {
    /// Configured route name.
    pub route: Arc<str>,
    /// The route's operator labels (`routes[].labels`): span attributes,
    /// never metric labels.
    pub route_labels: crate::labels::RouteLabels,
    /// The provider: the route's or the path's at first (`openai` when
    /// neither says), then the one the response head resolved, if any.
    pub provider: ProviderKind,
    /// Operation the endpoint performs, when recognised.
    pub operation: Option<Operation>,
    /// `model` from the request body.
    pub request_model: Option<String>,
    /// The client asked for a streamed response.
    pub stream: bool,
    /// Tenant the request is attributed to, when configured and present.
    pub tenant: Option<String>,
    /// Agent session the request belongs to (`gen_ai.conversation.id`),
    /// when a session source found one. Never a metric label.
    pub session: Option<Arc<str>>,
    /// Upstream host and port (`server.address`, `server.port`).
    pub server_address: Arc<str>,
    /// Upstream port (`server.port`).
    pub server_port: u16,
    /// What the request body sniffer made of the body.
    pub request_body: RequestBody,
    /// `service_tier` the request asked for (the response's, when it says
    /// one, wins when pricing).
    pub service_tier: Option<ServiceTier>,
    /// Wall-clock time the request head arrived (for span start times).
    pub start_wall: SystemTime,
    /// Monotonic time the request head arrived (t_req).
    pub start: Instant,
}

/// When a request head arrived: the monotonic reading every figure is
/// measured from, and the wall time spans start at.
#[derive(Debug, Clone, Copy)]
pub struct Arrival {
    /// Monotonic (t_req).
    pub at: Instant,
    /// Wall clock, for span start times.
    pub wall: SystemTime,
}

impl Arrival {
    /// Read both clocks now.
    pub fn now() -> Arrival {
        Arrival {
            at: Instant::now(),
            wall: SystemTime::now(),
        }
    }
}

/// Why the response body was not metered, when it was not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unmetered {
    /// The response `Content-Type` is not a format tokentap parses.
    UnknownFormat(String),
    /// The `Content-Encoding` could not be decoded.
    Encoding(String),
}

/// What a response's reasoning added up to: when visible output and
/// reasoning first arrived, and the reasoning token count. See
/// docs/METRICS.md ("Reasoning-aware latency").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Reasoning {
    /// First frame with visible output (text, audio, refusal, tool-call
    /// delta), relative to t_req. For a whole body: the complete body.
    pub time_to_first_visible: Option<Duration>,
    /// First frame with reasoning output, relative to t_req (streams only).
    pub time_to_first_reasoning: Option<Duration>,
    /// Reasoning tokens: the provider's count, else the reasoning frames
    /// counted (estimated); `None` when there was neither.
    pub tokens: Option<u64>,
    /// Where `tokens` came from.
    pub source: Option<TokenSource>,
}

impl Reasoning {
    /// Thinking time: first visible output − first reasoning output, when
    /// the response reasoned before it showed anything.
    pub fn thinking_time(&self) -> Option<Duration> {
        let first = self.time_to_first_reasoning?;
        self.time_to_first_visible?.checked_sub(first)
    }

    /// Whether `tokens` is an estimate (counted from reasoning frames).
    pub fn estimated(&self) -> bool {
        matches!(
            self.source,
            Some(TokenSource::Chunks | TokenSource::Tokenizer)
        )
    }
}

/// The finished record of one request. Exactly one per request.
#[derive(Debug, Clone)]
pub struct Measurement {
    /// Facts known when the request was forwarded.
    pub request: RequestFacts,
    /// How the request ended.
    pub outcome: Outcome,
    /// HTTP status sent to the client (502/504 for proxy-side failures).
    pub status: u16,
    /// `error.type`, when the outcome is not `Complete`.
    pub error_type: Option<String>,
    /// Why the upstream failed before a response head (connection refused,
    /// DNS, TLS verification, timeout), for the access log only: unbounded
    /// text, never a metric label.
    pub error_cause: Option<String>,
    /// Model the provider reported in its response.
    pub response_model: Option<String>,
    /// Response id the provider assigned.
    pub response_id: Option<String>,
    /// Finish reasons the provider reported, in order.
    pub finish_reasons: Vec<String>,
    /// Token counts the provider reported.
    pub usage: Usage,
    /// Output tokens used for rates: provider usage, else content pieces.
    pub output_tokens: Option<u64>,
    /// Where `output_tokens` came from, when known.
    pub token_source: Option<TokenSource>,
    /// Number of frames that carried output content.
    pub content_chunks: u64,
    /// Response head received, relative to t_req.
    pub time_to_headers: Option<Duration>,
    /// First response body byte, relative to t_req.
    pub time_to_first_byte: Option<Duration>,
    /// TTFT: first content frame, relative to t_req.
    pub time_to_first_token: Option<Duration>,
    /// Last content frame, relative to t_req.
    pub time_to_last_token: Option<Duration>,
    /// Visible-output and reasoning clocks, reasoning tokens.
    pub reasoning: Reasoning,
    /// Body finished or aborted, relative to t_req.
    pub duration: Duration,
    /// Largest gap between consecutive content frames.
    pub max_gap: Option<Duration>,
    /// Response body bytes forwarded to the client.
    pub response_bytes: u64,
    /// Why the body was not metered, if it was not.
    pub unmetered: Option<Unmetered>,
    /// Events (frames) that could not be read and were skipped while
    /// metering went on: bad JSON in one event, an eventstream message
    /// with a bad CRC (`tokentap.malformed_events`).
    pub malformed_events: u64,
    /// Timings the upstream reported about its own work
    /// (`Event::UpstreamTiming`, merged field by field).
    pub upstream_timing: UpstreamTiming,
    /// The serving software the response head named (its `x-served-by`,
    /// else its `server` header), as sent: a reference-counted copy, no
    /// allocation; for `/api/compare`'s "served by".
    pub server_software: Option<http::HeaderValue>,
    /// Time waited for an upstream connection or HTTP/2 stream slot before
    /// the request could be sent (part of proxy overhead, not provider
    /// latency); `None` when the request never asked for one.
    pub pool_wait: Option<Duration>,
    /// Proxy overhead before the request left: t_req to the request being
    /// handed to the upstream client (routing, reading the body up to the
    /// sniff limit, tenant, rewriting, signing), not counting `pool_wait`;
    /// `None` when the request never reached the upstream client.
    pub request_overhead: Option<Duration>,
    /// Input and output tokens by modality (text, audio), where the
    /// provider reports them (realtime sessions); all `None` otherwise.
    pub modalities: ModalityTokens,
    /// Tool calls the model asked the client to run, and tools the
    /// provider ran itself (and bills).
    pub tools: ToolUse,
    /// Whether this request's usage counts, for responses whose usage can
    /// be seen again (stored and background responses, batch result
    /// files); `None` for every other request, whose usage always counts.
    pub counted: Option<Counted>,
    /// With a state store (`[state] url`): whether this request's shared
    /// state (its counted-once decision, its session's rollup) went to the
    /// store or, the store failing, stayed in process; `None` without a
    /// store or when the request has no shared state.
    pub shared_state: Option<SharedState>,
    /// A batch result file's totals (per model, lines by result) when the
    /// download was one, read to its end and the file held batch results;
    /// `None` otherwise. Its models are empty when `counted` is `Repeat`.
    pub batch: Option<crate::providers::batch::BatchTally>,
}

/// Where a request's shared state went (`tokentap.state` on its span).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SharedState {
    /// The fleet's store answered.
    Store,
    /// The store did not answer in time: this replica decided alone.
    Local,
}

impl SharedState {
    /// The `tokentap.state` attribute value.
    pub fn as_str(self) -> &'static str {
        match self {
            SharedState::Store => "store",
            SharedState::Local => "local",
        }
    }
}

/// Whether a response's usage was counted by this request. Usage is counted
/// once per response id (or batch result file) however often it is seen;
/// `Repeat` and `Withheld` measurements carry no usage, so no counter,
/// cost or rollup adds it again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Counted {
    /// The final usage was first seen here and is counted here.
    First,
    /// Already counted by an earlier request: the usage seen is dropped.
    Repeat,
    /// No final usage yet (a queued or running background response, a
    /// stream the client left while the response goes on): nothing is
    /// counted, not even an estimate; the request that sees the final
    /// usage counts it.
    Withheld,
}

impl Counted {
    /// The `tokentap.usage.counted` attribute value.
    pub fn as_str(self) -> &'static str {
        match self {
            Counted::First => "first",
            Counted::Repeat => "repeat",
            Counted::Withheld => "withheld",
        }
    }
}

/// The tools one response used.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolUse {
    /// Client tool calls (OpenAI `tool_calls`/`function_call`, Responses
    /// `function_call` items, Anthropic `tool_use`, Gemini `functionCall`,
    /// Bedrock `toolUse`, Ollama and Cohere tool calls).
    pub client_calls: u32,
    /// The client tools' names, in order of first call, each once (at
    /// most `MAX_TOOL_NAMES`, each cut to `MAX_TOOL_NAME_LEN` bytes).
    pub names: Vec<Arc<str>>,
    /// Calls of each name in `names`, index for index; calls without a
    /// name, or past the cap, are only in `client_calls`.
    pub calls_by_name: Vec<u32>,
    /// Provider-run (server) tools, which the provider bills per call.
    pub server: ServerTools,
}

/// Calls of provider-run tools in one response.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ServerTools {
    /// Web searches (Anthropic `web_search_requests`, OpenAI
    /// `web_search_call`).
    pub web_search: u32,
    /// Web fetches (Anthropic `web_fetch_requests`).
    pub web_fetch: u32,
    /// OpenAI `file_search_call` items.
    pub file_search: u32,
    /// OpenAI `code_interpreter_call` items.
    pub code_interpreter: u32,
    /// Gemini grounding (Google Search) queries.
    pub grounding: u32,
}

/// Distinct tool names kept per response; later names are counted in
/// `client_calls` but not named (span attributes stay bounded).
pub const MAX_TOOL_NAMES: usize = 16;

/// Longest tool name kept, in bytes; longer names are cut at a character
/// boundary.
pub const MAX_TOOL_NAME_LEN: usize = 64;

impl ToolUse {
    /// Count one client tool call, named `name` when the wire named it.
    /// Allocates only for a name not seen before in this response.
    pub fn record_call(&mut self, name: Option<&str>) {
        self.client_calls = self.client_calls.saturating_add(1);
        let Some(name) = name.map(str::trim).filter(|n| !n.is_empty()) else {
            return;
        };
        let name = cut_at_char(name, MAX_TOOL_NAME_LEN);
        if let Some(at) = self.names.iter().position(|n| &**n == name) {
            self.calls_by_name[at] = self.calls_by_name[at].saturating_add(1);
        } else if self.names.len() < MAX_TOOL_NAMES {
            self.names.push(Arc::from(name));
            self.calls_by_name.push(1);
        }
    }

    /// Calls not attributed to a kept name (unnamed, or past the cap).
    pub fn unnamed_calls(&self) -> u32 {
        let named = self
            .calls_by_name
            .iter()
            .fold(0u32, |a, n| a.saturating_add(*n));
        self.client_calls.saturating_sub(named)
    }

    /// Whether no tool, client or server, was used.
    pub fn is_empty(&self) -> bool {
        self.client_calls == 0 && self.server.total() == 0
    }
}

/// `s` cut to at most `max` bytes, at a character boundary (bounded
/// names and texts across the meter and the live statistics).
pub(crate) fn cut_at_char(s: &str, max: usize) -> &str {
    let mut end = max.min(s.len());
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

impl ServerTools {
    /// Calls of `tool`.
    pub fn get(&self, tool: ServerTool) -> u32 {
        match tool {
            ServerTool::WebSearch => self.web_search,
            ServerTool::WebFetch => self.web_fetch,
            ServerTool::FileSearch => self.file_search,
            ServerTool::CodeInterpreter => self.code_interpreter,
            ServerTool::Grounding => self.grounding,
        }
    }

    /// Set the calls of `tool`.
    pub fn set(&mut self, tool: ServerTool, calls: u32) {
        let slot = match tool {
            ServerTool::WebSearch => &mut self.web_search,
            ServerTool::WebFetch => &mut self.web_fetch,
            ServerTool::FileSearch => &mut self.file_search,
            ServerTool::CodeInterpreter => &mut self.code_interpreter,
            ServerTool::Grounding => &mut self.grounding,
        };
        *slot = calls;
    }

    /// All server-tool calls together.
    pub fn total(&self) -> u32 {
        self.web_search
            .saturating_add(self.web_fetch)
            .saturating_add(self.file_search)
            .saturating_add(self.code_interpreter)
            .saturating_add(self.grounding)
    }
}

/// Token counts split by modality, as realtime APIs report them (OpenAI
/// Realtime `input_token_details` / `output_token_details`, Gemini Live
/// `*TokensDetails`). Each is a part of the matching `Usage` total; a
/// field is `None` when the provider did not report it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ModalityTokens {
    /// Text input tokens (cached ones included).
    pub input_text: Option<u64>,
    /// Audio input tokens (cached ones included).
    pub input_audio: Option<u64>,
    /// Text input tokens served from cache.
    pub cached_text: Option<u64>,
    /// Audio input tokens served from cache.
    pub cached_audio: Option<u64>,
    /// Text output tokens.
    pub output_text: Option<u64>,
    /// Audio output tokens.
    pub output_audio: Option<u64>,
}

impl ModalityTokens {
    /// Overwrite every field `newer` reports; keep the rest.
    pub fn merge(&mut self, newer: ModalityTokens) {
        for (mine, theirs) in self.fields_mut().into_iter().zip(newer.fields()) {
            if theirs.is_some() {
                *mine = theirs;
            }
        }
    }

    /// Add `other`'s counts (a session's totals): a field stays `None`
    /// until some response reports it.
    pub fn add(&mut self, other: &ModalityTokens) {
        for (mine, theirs) in self.fields_mut().into_iter().zip(other.fields()) {
            if let Some(n) = theirs {
                *mine = Some(mine.unwrap_or(0).saturating_add(n));
            }
        }
    }

    /// No split was reported.
    pub fn is_empty(&self) -> bool {
        self.fields().iter().all(Option::is_none)
    }

    fn fields(&self) -> [Option<u64>; 6] {
        [
            self.input_text,
            self.input_audio,
            self.cached_text,
            self.cached_audio,
            self.output_text,
            self.output_audio,
        ]
    }

    fn fields_mut(&mut self) -> [&mut Option<u64>; 6] {
        [
            &mut self.input_text,
            &mut self.input_audio,
            &mut self.cached_text,
            &mut self.cached_audio,
            &mut self.output_text,
            &mut self.output_audio,
        ]
    }
}

impl Measurement {
    /// A record of `request` with nothing measured: complete, status 200,
    /// every figure absent or zero. For code that builds a record from the
    /// few fields it knows (tests, tools); the meter writes every field.
    pub fn empty(request: RequestFacts) -> Measurement {
        Measurement {
            request,
            outcome: Outcome::Complete,
            status: 200,
            error_type: None,
            error_cause: None,
            response_model: None,
            response_id: None,
            finish_reasons: Vec::new(),
            usage: Usage::default(),
            output_tokens: None,
            token_source: None,
            content_chunks: 0,
            time_to_headers: None,
            time_to_first_byte: None,
            time_to_first_token: None,
            time_to_last_token: None,
            reasoning: Reasoning::default(),
            duration: Duration::ZERO,
            max_gap: None,
            response_bytes: 0,
            unmetered: None,
            malformed_events: 0,
            upstream_timing: UpstreamTiming::default(),
            server_software: None,
            pool_wait: None,
            request_overhead: None,
            modalities: ModalityTokens::default(),
            tools: ToolUse::default(),
            counted: None,
            shared_state: None,
            batch: None,
        }
    }

    /// Time per output token: (t_last − t_first) / (n − 1), for n ≥ 2.
    pub fn time_per_output_token(&self) -> Option<Duration> {
        let (first, last, n) = self.decode_window()?;
        Some((last - first).div_f64((n - 1) as f64))
    }

    /// Decode tokens per second: (n − 1) / (t_last − t_first), for n ≥ 2.
    pub fn decode_tokens_per_second(&self) -> Option<f64> {
        let (first, last, n) = self.decode_window()?;
        let secs = (last - first).as_secs_f64();
        (secs > 0.0).then(|| (n - 1) as f64 / secs)
    }

    /// End-to-end tokens per second: n / (t_end − t_req).
    pub fn end_to_end_tokens_per_second(&self) -> Option<f64> {
        let n = self.output_tokens?;
        let secs = self.duration.as_secs_f64();
        (n > 0 && secs > 0.0).then(|| n as f64 / secs)
    }

    /// Prefill rate: input tokens / TTFT.
    pub fn prefill_tokens_per_second(&self) -> Option<f64> {
        let input = self.usage.input?;
        let secs = self.time_to_first_token?.as_secs_f64();
        (input > 0 && secs > 0.0).then(|| input as f64 / secs)
    }

    /// The prompt-size class of the request's input tokens.
    pub fn prompt_size_class(&self) -> PromptSize {
        PromptSize::of(self.usage.input)
    }

    /// Whether token counts are estimates rather than provider-reported.
    pub fn estimated(&self) -> bool {
        matches!(
            self.token_source,
            Some(TokenSource::Chunks | TokenSource::Tokenizer)
        )
    }

    fn decode_window(&self) -> Option<(Duration, Duration, u64)> {
        if !self.request.stream {
            return None;
        }
        let n = self.output_tokens?;
        let first = self.time_to_first_token?;
        let last = self.time_to_last_token?;
        (n >= 2 && last > first).then_some((first, last, n))
    }
}

/// A bounded class of prompt length (input tokens), for reading TTFT
/// and prefill rate by prompt size: 1k = 1,024 tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PromptSize {
    /// Input tokens not known.
    Unknown,
    /// At most 1,024 input tokens.
    UpTo1k,
    /// 1,025 to 8,192.
    UpTo8k,
    /// 8,193 to 32,768.
    UpTo32k,
    /// 32,769 to 131,072.
    UpTo128k,
    /// More than 131,072.
    Over128k,
}

impl PromptSize {
    /// The class of `input` tokens.
    pub fn of(input: Option<u64>) -> PromptSize {
        match input {
            None => PromptSize::Unknown,
            Some(0..=1024) => PromptSize::UpTo1k,
            Some(1025..=8192) => PromptSize::UpTo8k,
            Some(8193..=32_768) => PromptSize::UpTo32k,
            Some(32_769..=131_072) => PromptSize::UpTo128k,
            Some(_) => PromptSize::Over128k,
        }
    }

    /// The `tokentap.prompt.size_class` attribute value.
    pub fn as_str(self) -> &'static str {
        match self {
            PromptSize::Unknown => "unknown",
            PromptSize::UpTo1k => "le_1k",
            PromptSize::UpTo8k => "le_8k",
            PromptSize::UpTo32k => "le_32k",
            PromptSize::UpTo128k => "le_128k",
            PromptSize::Over128k => "gt_128k",
        }
    }
}

/// Where a request's measurement goes. Implemented by telemetry; the meter
/// calls `provider` at most once from the response head, `chunk_gap` per
/// content frame and `finish` exactly once.
pub trait Recorder: Send + 'static {
    /// A gap between two consecutive content frames (a per-chunk histogram).
    fn chunk_gap(&mut self, gap: Duration);
    /// The response head named a different provider than the request did
    /// (e.g. a Bedrock eventstream on a route without one): label what is
    /// recorded from now on with `provider`. Called before `finish`.
    fn provider(&mut self, provider: ProviderKind) {
        let _ = provider;
    }
    /// Proxy overhead of one sampled response frame: from the read of its
    /// first upstream bytes to its hand-over to the client connection.
    fn chunk_overhead(&mut self, overhead: Duration) {
        let _ = overhead;
    }
    /// The request is over.
    fn finish(self: Box<Self>, measurement: Measurement);
}

#[cfg(test)]
mod tests {
    use super::{MAX_TOOL_NAME_LEN, MAX_TOOL_NAMES, PromptSize, ToolUse};

    #[test]
    fn tool_names_are_capped_in_number_and_length_and_counted_per_name() {
        let mut t = ToolUse::default();
        let long = "é".repeat(MAX_TOOL_NAME_LEN); // 2 bytes each
        t.record_call(Some(&long));
        assert_eq!(t.names[0].len(), MAX_TOOL_NAME_LEN, "cut to the byte cap");
        assert!(long.starts_with(&*t.names[0]), "cut at a char boundary");
        t.record_call(Some("get_weather"));
        t.record_call(Some("get_weather"));
        t.record_call(None);
        t.record_call(Some("  "));
        for i in 0..MAX_TOOL_NAMES + 5 {
            t.record_call(Some(&format!("tool_{i}")));
        }
        assert_eq!(
            t.names.len(),
            MAX_TOOL_NAMES,
            "at most {MAX_TOOL_NAMES} names"
        );
        assert_eq!(&*t.names[1], "get_weather");
        assert_eq!(t.calls_by_name[1], 2, "repeat calls counted per name");
        let all = 5 + MAX_TOOL_NAMES as u32 + 5;
        assert_eq!(t.client_calls, all, "every call counted");
        // 2 unnamed, and the 7 tools past the cap (2 names kept before them).
        assert_eq!(t.unnamed_calls(), 2 + 7);
    }

    #[test]
    fn prompt_size_classes_have_inclusive_upper_bounds_of_binary_thousands() {
        for (input, want) in [
            (None, "unknown"),
            (Some(0), "le_1k"),
            (Some(1024), "le_1k"),
            (Some(1025), "le_8k"),
            (Some(8192), "le_8k"),
            (Some(8193), "le_32k"),
            (Some(32_768), "le_32k"),
            (Some(32_769), "le_128k"),
            (Some(131_072), "le_128k"),
            (Some(131_073), "gt_128k"),
        ] {
            assert_eq!(PromptSize::of(input).as_str(), want, "{input:?} tokens");
        }
    }
}
