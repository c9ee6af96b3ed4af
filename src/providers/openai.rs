//! OpenAI adapter: chat completions, legacy completions, Responses and
//! embeddings frames (streamed or whole) in, metering events out.
//!
//! A streamed chat chunk of the common shape (one choice, a plain delta)
//! is read by a validating scan (`scan.rs`); every other frame is
//! deserialized once into borrowed structs that keep only the fields
//! metering needs. Either way text is never copied, only checked for being
//! non-empty and handed on as its JSON string literal.

use std::borrow::Cow;
use std::ops::Range;

use serde::Deserialize;
use serde_json::value::RawValue;

use super::ProviderKind;
use super::scan::{self, Scan, Seen};
use super::spec::{FrameAdapter, ProviderSpec, Wire, never_response, no_model, whole_json};
use super::wire::{
    Fold, HasContent, Str, ToolFunction, deserialize_by_fold, non_empty, non_empty_raw,
    reported_cost,
};
use super::{
    AdapterError, ContentKind, Event, Identity, Operation, ReportedCost, ServerTool, ServiceTier,
    UpstreamTiming, Usage, millis, seconds,
};
use crate::framing::Frame;

/// Finish reasons kept per frame; more choices than this are not reported.
const MAX_FINISH_REASONS: usize = 16;

/// Adapter state for one OpenAI response.
#[derive(Debug)]
pub struct OpenaiAdapter {
    operation: Option<Operation>,
    /// Model and id are reported once: every chunk repeats them.
    identity: Identity,
    /// Try the scan before serde (off only in tests that compare the two).
    scan: bool,
    /// Streamed tool calls already counted, by `(choice << 32) | index`:
    /// a call's argument deltas repeat its index.
    tools_seen: Vec<u64>,
    /// The shape of the last chunk the scan read, for the next one.
    last: LastChunk,
}

impl OpenaiAdapter {
    /// An adapter for a response to `operation` (`None` when unknown; the
    /// payload's shape then decides).
    pub fn new(operation: Option<Operation>) -> Self {
        OpenaiAdapter {
            operation,
            identity: Identity::default(),
            scan: true,
            tools_seen: Vec::new(),
            last: LastChunk::default(),
        }
    }

    /// An adapter that always takes the serde path, to check the scan
    /// against it.
    #[cfg(test)]
    pub(super) fn without_scan(operation: Option<Operation>) -> Self {
        OpenaiAdapter {
            scan: false,
            ..OpenaiAdapter::new(operation)
        }
    }
}

impl FrameAdapter for OpenaiAdapter {
    /// Map one frame to zero or more events.
    fn on_frame(
        &mut self,
        frame: Frame<'_>,
        out: &mut dyn FnMut(Event<'_>),
    ) -> Result<(), AdapterError> {
        match frame {
            Frame::Sse { data, .. } => {
                let data = data.trim_ascii();
                if data.is_empty() {
                    Ok(())
                } else if data == b"[DONE]" {
                    // `[DONE]` ends the stream, not the answer: a stream
                    // whose choices never said why they stopped was cut
                    // short (llama.cpp sends `[DONE]` when another request
                    // preempts the running one), so only a `finish_reason`
                    // is the terminal event.
                    Ok(())
                } else if let Some(chunk) = self.scan.then(|| self.chat_chunk(data)).flatten() {
                    self.on_chat_chunk(&chunk, out);
                    Ok(())
                } else {
                    self.on_json(data, false, out)
                }
            }
            Frame::Json(body) => match self.scan.then(|| WholeBody::scan(body)).flatten() {
                Some(b) => {
                    self.on_whole_body(&b, out);
                    Ok(())
                }
                None => self.on_json(body, true, out),
            },
            Frame::AwsEvent { .. } => Err(AdapterError("eventstream frame in an OpenAI stream")),
        }
    }
}

impl OpenaiAdapter {
    /// `data` read as a chat chunk of the common shape: by the last chunk's
    /// shape when it fits, else by the scan (and its shape kept).
    fn chat_chunk<'a>(&mut self, data: &'a [u8]) -> Option<ChatChunk<'a>> {
        if let Some(chunk) = self.last.read(data, !self.identity.known()) {
            return Some(chunk);
        }
        let chunk = ChatChunk::scan(data)?;
        self.last.keep(data, &chunk);
        Some(chunk)
    }

    fn on_json(
        &mut self,
        data: &[u8],
        whole: bool,
        out: &mut dyn FnMut(Event<'_>),
    ) -> Result<(), AdapterError> {
        let doc: Doc<'_> = serde_json::from_slice(data)
            .map_err(|_| AdapterError("malformed OpenAI JSON payload"))?;
        match doc.kind.as_ref().map(Str::as_str) {
            Some(kind) if kind.starts_with("response.") => {
                self.on_response_event(kind, &doc, out);
                return Ok(());
            }
            Some("error") => {
                out(Event::Error {
                    kind: &error_kind(doc.error, doc.code),
                });
                return Ok(());
            }
            _ => {}
        }
        if doc.error.is_some() {
            out(Event::Error {
                kind: &error_kind(doc.error, None),
            });
        }
        self.identity.report(
            doc.model.as_ref().map(Str::as_str),
            doc.id.as_ref().map(Str::as_str),
            out,
        );
        if let Some(choices) = &doc.choices {
            if let (true, Some(kind)) = (
                choices.pieces > 0,
                ContentKind::of(choices.visible, choices.reasoning),
            ) {
                let pieces = if whole { 1 } else { choices.pieces };
                out(Event::Content { pieces, kind });
                if let Some(text) = choices.text {
                    out(Event::Text(text.get()));
                }
            }
            for start in &choices.tools {
                // A whole body lists each call once, without indexes.
                let key = start.key.filter(|_| !whole);
                self.tool_call(key, start.name.as_ref().map(Str::as_str), out);
            }
        }
        let is_response_body = doc
            .object
            .as_ref()
            .is_some_and(|o| o.as_str() == "response");
        if is_response_body && non_empty(doc.output) {
            out(Event::ONE_VISIBLE);
            if let Some(output) = doc.output {
                output_items(output.get(), out);
            }
        }
        // Groq reports streamed usage inside `x_groq`.
        let wire_usage = doc
            .usage
            .as_ref()
            .or(doc.x_groq.as_ref().and_then(|x| x.usage.as_ref()));
        if let Some(usage) = wire_usage {
            let embeddings = self.operation == Some(Operation::Embeddings)
                || doc.object.as_ref().is_some_and(|o| o.as_str() == "list");
            let mut usage = usage.to_usage();
            usage.service_tier = tier(doc.service_tier.as_ref());
            if embeddings && usage.output.is_none() {
                // Embeddings produce no output tokens; say so exactly.
                usage.output = Some(0);
            }
            out(Event::Usage(usage));
        } else if let Some(usage) = doc.timings.as_ref().and_then(LlamaTimings::to_usage) {
            out(Event::Usage(usage));
        }
        emit_timing(wire_usage, doc.timings.as_ref(), doc.stats.as_ref(), out);
        if let Some(choices) = &doc.choices {
            for reason in &choices.finish {
                out(Event::FinishReason(reason.as_str()));
            }
            // In a stream, a finish reason is the terminal event (some
            // compatible servers send no `[DONE]`, and `[DONE]` alone does
            // not say the answer finished).
            if !whole && !choices.finish.is_empty() {
                out(Event::Done);
            }
        }
        if is_response_body {
            emit_finish(doc.status.as_ref(), doc.incomplete_details.as_ref(), out);
        }
        Ok(())
    }

    /// Count a tool call once: `key` (choice and index of a streamed call)
    /// is remembered, so the call's later deltas are not counted again.
    fn tool_call(&mut self, key: Option<u64>, name: Option<&str>, out: &mut dyn FnMut(Event<'_>)) {
        if let Some(key) = key {
            if self.tools_seen.contains(&key) {
                return;
            }
            self.tools_seen.push(key);
        }
        out(Event::ToolCall { name });
    }

    /// The events `on_json` gives for the same chunk, in the same order.
    fn on_chat_chunk(&mut self, c: &ChatChunk<'_>, out: &mut dyn FnMut(Event<'_>)) {
        self.identity.report(c.model, c.id, out);
        if let Some(kind) = c.kind {
            out(Event::Content { pieces: 1, kind });
            if let Some(text) = c.text {
                out(Event::Text(text));
            }
        }
        if let Some(reason) = c.finish_reason {
            out(Event::FinishReason(reason));
            out(Event::Done);
        }
    }

    /// The events `on_json` gives for the same whole body, in the same order.
    fn on_whole_body(&mut self, b: &WholeBody<'_>, out: &mut dyn FnMut(Event<'_>)) {
        self.identity.report(b.model, b.id, out);
        if let (true, Some(kind)) = (b.content, ContentKind::of(b.visible, b.reasoning)) {
            out(Event::Content { pieces: 1, kind });
            if let Some(text) = b.text {
                out(Event::Text(text));
            }
        }
        let is_response_body = b.object == Some("response");
        if let Some(output) = b.output.filter(|o| is_response_body && non_empty_raw(o)) {
            out(Event::ONE_VISIBLE);
            output_items(output, out);
        }
        if let Some(mut usage) = b.usage {
            let embeddings =
                self.operation == Some(Operation::Embeddings) || b.object == Some("list");
            usage.service_tier = b.service_tier.and_then(ServiceTier::parse);
            if embeddings && usage.output.is_none() {
                usage.output = Some(0);
            }
            out(Event::Usage(usage));
        }
        for reason in &b.finish[..b.finish_len] {
            out(Event::FinishReason(reason));
        }
        if is_response_body {
            let reason = b.incomplete.flatten().or(b.status);
            if let Some(reason) = reason.filter(|r| !r.is_empty()) {
                out(Event::FinishReason(reason));
            }
        }
    }

    /// One Responses API streaming event (`type: "response.*"`).
    fn on_response_event(&mut self, kind: &str, doc: &Doc<'_>, out: &mut dyn FnMut(Event<'_>)) {
        if kind.ends_with(".delta") && non_empty(doc.delta) {
            // `response.reasoning_text.delta`, `response.reasoning_summary_text.delta`.
            let kind = if kind.starts_with("response.reasoning") {
                ContentKind::Reasoning
            } else {
                ContentKind::Visible
            };
            out(Event::Content { pieces: 1, kind });
            if let Some(delta) = doc.delta.filter(|d| d.get().starts_with('"')) {
                out(Event::Text(delta.get()));
            }
        }
        if kind == "response.output_item.added" {
            if let Some(item) = &doc.item {
                item.emit(out);
            }
        }
        let Some(response) = &doc.response else {
            return;
        };
        self.identity.report(
            response.model.as_ref().map(Str::as_str),
            response.id.as_ref().map(Str::as_str),
            out,
        );
        if let Some(usage) = &response.usage {
            let mut usage = usage.to_usage();
            usage.service_tier = tier(response.service_tier.as_ref());
            out(Event::Usage(usage));
        }
        match kind {
            "response.completed" | "response.incomplete" => {
                emit_finish(
                    response.status.as_ref(),
                    response.incomplete_details.as_ref(),
                    out,
                );
                out(Event::Done);
            }
            "response.failed" => {
                let kind = match response.error {
                    Some(_) => error_kind(response.error, None),
                    None => Cow::Borrowed("response_failed"),
                };
                out(Event::Error { kind: &kind });
            }
            _ => {}
        }
    }
}

/// Server timings: Groq's usage times, llama.cpp `timings`, LM Studio `stats`.
fn emit_timing(
    usage: Option<&WireUsage>,
    timings: Option<&LlamaTimings>,
    stats: Option<&LmStudioStats>,
    out: &mut dyn FnMut(Event<'_>),
) {
    let mut t = UpstreamTiming::default();
    if let Some(u) = usage {
        t.queue = u.queue_time.and_then(seconds);
        t.prompt_eval = u.prompt_time.and_then(seconds);
        t.decode = u.completion_time.and_then(seconds);
        t.total = u.total_time.and_then(seconds);
    }
    if let Some(l) = timings {
        t.merge(UpstreamTiming {
            prompt_eval: l.prompt_ms.and_then(millis),
            decode: l.predicted_ms.and_then(millis),
            ..UpstreamTiming::default()
        });
    }
    if let Some(s) = stats {
        t.merge(UpstreamTiming {
            ttft: s.time_to_first_token.and_then(seconds),
            decode: s.generation_time.and_then(seconds),
            ..UpstreamTiming::default()
        });
    }
    if !t.is_empty() {
        out(Event::UpstreamTiming(t));
    }
}

/// A Responses finish reason: why it stopped early, else its status.
fn emit_finish(
    status: Option<&Str<'_>>,
    incomplete: Option<&Incomplete<'_>>,
    out: &mut dyn FnMut(Event<'_>),
) {
    let reason = incomplete.and_then(|i| i.reason.as_ref()).or(status);
    emit_str(reason, Event::FinishReason, out);
}

/// Emit a non-empty string as `event`; say whether it was emitted.
fn emit_str<'s>(
    value: Option<&'s Str<'_>>,
    event: fn(&'s str) -> Event<'s>,
    out: &mut dyn FnMut(Event<'_>),
) -> bool {
    match value.map(Str::as_str).filter(|s| !s.is_empty()) {
        Some(s) => {
            out(event(s));
            true
        }
        None => false,
    }
}

/// `error.type`, else `error.code` (or a top-level `code`), else "error".
fn error_kind<'a>(error: Option<&'a RawValue>, code: Option<&'a RawValue>) -> Cow<'a, str> {
    #[derive(Deserialize)]
    struct ErrorObject<'a> {
        #[serde(borrow, rename = "type")]
        kind: Option<Str<'a>>,
        #[serde(borrow)]
        code: Option<&'a RawValue>,
    }
    let mut code = code;
    if let Some(error) = error.filter(|e| e.get().starts_with('{')) {
        if let Ok(obj) = serde_json::from_str::<ErrorObject<'a>>(error.get()) {
            if let Some(kind) = obj.kind.filter(|k| !k.as_str().is_empty()) {
                return kind.0;
            }
            code = obj.code.or(code);
        }
    }
    match code.map(RawValue::get) {
        Some(raw) if raw.starts_with('"') => match serde_json::from_str::<Str<'a>>(raw) {
            Ok(s) if !s.as_str().is_empty() => s.0,
            _ => Cow::Borrowed("error"),
        },
        Some(raw) if raw.bytes().all(|b| b.is_ascii_digit()) => Cow::Borrowed(raw),
        _ => Cow::Borrowed("error"),
    }
}

/// The fields of one payload that metering reads. Chat chunks, completion
/// chunks, Responses events and whole bodies all fit this shape.
#[derive(Deserialize)]
struct Doc<'a> {
    #[serde(borrow, rename = "type")]
    kind: Option<Str<'a>>,
    #[serde(borrow)]
    object: Option<Str<'a>>,
    #[serde(borrow)]
    id: Option<Str<'a>>,
    #[serde(borrow)]
    model: Option<Str<'a>>,
    #[serde(borrow)]
    choices: Option<Choices<'a>>,
    usage: Option<WireUsage>,
    #[serde(borrow)]
    error: Option<&'a RawValue>,
    #[serde(borrow)]
    code: Option<&'a RawValue>,
    #[serde(borrow)]
    delta: Option<&'a RawValue>,
    #[serde(borrow)]
    response: Option<ResponseBody<'a>>,
    #[serde(borrow)]
    status: Option<Str<'a>>,
    #[serde(borrow)]
    incomplete_details: Option<Incomplete<'a>>,
    #[serde(borrow)]
    output: Option<&'a RawValue>,
    /// Groq: `{"id": …, "usage": {…}}` (usage in the last chunk).
    x_groq: Option<XGroq>,
    /// llama.cpp server.
    timings: Option<LlamaTimings>,
    /// LM Studio's REST API (`/api/v0`).
    stats: Option<LmStudioStats>,
    /// The tier the request was served at (chat bodies and chunks).
    #[serde(borrow)]
    service_tier: Option<Str<'a>>,
    /// The item of a Responses `response.output_item.added` event.
    #[serde(borrow)]
    item: Option<OutputItem<'a>>,
}

/// A Responses output item, as far as tools go: its type and name (over
/// HTTP and in the Responses and Realtime WebSocket dialects alike).
#[derive(Deserialize)]
pub(super) struct OutputItem<'a> {
    #[serde(borrow, rename = "type")]
    kind: Option<Str<'a>>,
    #[serde(borrow)]
    name: Option<Str<'a>>,
}

/// The tool an output item runs.
pub(super) enum ItemTool<'a> {
    /// A client tool (`function_call`, `custom_tool_call`), named when the
    /// item names one.
    Client(Option<&'a str>),
    /// A provider-run tool.
    Server(ServerTool),
}

impl OutputItem<'_> {
    /// The tool this item runs, if any.
    pub(super) fn tool(&self) -> Option<ItemTool<'_>> {
        Some(match self.kind.as_ref().map(Str::as_str)? {
            "function_call" | "custom_tool_call" => {
                let name = self.name.as_ref().map(Str::as_str);
                ItemTool::Client(name.filter(|n| !n.is_empty()))
            }
            "web_search_call" => ItemTool::Server(ServerTool::WebSearch),
            "file_search_call" => ItemTool::Server(ServerTool::FileSearch),
            "code_interpreter_call" => ItemTool::Server(ServerTool::CodeInterpreter),
            _ => return None,
        })
    }

    fn emit(&self, out: &mut dyn FnMut(Event<'_>)) {
        match self.tool() {
            Some(ItemTool::Client(name)) => out(Event::ToolCall { name }),
            Some(ItemTool::Server(tool)) => out(Event::ServerToolCalls { tool, calls: 1 }),
            None => {}
        }
    }
}

/// The tool events of a whole Responses `output` array (read once per
/// response; a malformed array only loses its tool counts).
fn output_items(raw: &str, out: &mut dyn FnMut(Event<'_>)) {
    if let Ok(items) = serde_json::from_str::<Vec<OutputItem<'_>>>(raw) {
        for item in &items {
            item.emit(out);
        }
    }
}

#[derive(Deserialize)]
struct XGroq {
    usage: Option<WireUsage>,
}

/// llama.cpp's `timings` (final chunk, or every chunk with
/// `timings_per_token`): `prompt_n` excludes the `cache_n` tokens reused
/// from the prompt cache.
#[derive(Deserialize)]
struct LlamaTimings {
    cache_n: Option<u64>,
    prompt_n: Option<u64>,
    prompt_ms: Option<f64>,
    predicted_n: Option<u64>,
    predicted_ms: Option<f64>,
}

impl LlamaTimings {
    /// Counts for when the response carries no `usage`.
    fn to_usage(&self) -> Option<Usage> {
        let input = self
            .prompt_n
            .map(|p| p.saturating_add(self.cache_n.unwrap_or(0)));
        (input.is_some() || self.predicted_n.is_some()).then_some(Usage {
            input,
            output: self.predicted_n,
            cache_read: self.cache_n,
            ..Usage::default()
        })
    }
}

#[derive(Deserialize)]
struct LmStudioStats {
    time_to_first_token: Option<f64>,
    generation_time: Option<f64>,
}

/// The `response` object inside Responses streaming events.
#[derive(Deserialize)]
struct ResponseBody<'a> {
    #[serde(borrow)]
    id: Option<Str<'a>>,
    #[serde(borrow)]
    model: Option<Str<'a>>,
    usage: Option<WireUsage>,
    #[serde(borrow)]
    status: Option<Str<'a>>,
    #[serde(borrow)]
    incomplete_details: Option<Incomplete<'a>>,
    #[serde(borrow)]
    error: Option<&'a RawValue>,
    #[serde(borrow)]
    service_tier: Option<Str<'a>>,
}

#[derive(Deserialize)]
struct Incomplete<'a> {
    #[serde(borrow)]
    reason: Option<Str<'a>>,
}

/// Usage in either naming: chat (`prompt_tokens`) or Responses (`input_tokens`).
#[derive(Deserialize)]
struct WireUsage {
    prompt_tokens: Option<u64>,
    completion_tokens: Option<u64>,
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    prompt_tokens_details: Option<Details>,
    completion_tokens_details: Option<Details>,
    input_tokens_details: Option<Details>,
    output_tokens_details: Option<Details>,
    /// DeepSeek: the cached part of `prompt_tokens`.
    prompt_cache_hit_tokens: Option<u64>,
    /// OpenRouter: what the request cost, in USD (credits).
    #[serde(default, deserialize_with = "reported_cost")]
    cost: Option<ReportedCost>,
    // Groq: server-side phases, in seconds.
    queue_time: Option<f64>,
    prompt_time: Option<f64>,
    completion_time: Option<f64>,
    total_time: Option<f64>,
}

#[derive(Deserialize)]
struct Details {
    cached_tokens: Option<u64>,
    reasoning_tokens: Option<u64>,
    audio_tokens: Option<u64>,
}

impl WireUsage {
    fn to_usage(&self) -> Usage {
        let input_details = self
            .prompt_tokens_details
            .as_ref()
            .or(self.input_tokens_details.as_ref());
        let output_details = self
            .completion_tokens_details
            .as_ref()
            .or(self.output_tokens_details.as_ref());
        Usage {
            input: self.prompt_tokens.or(self.input_tokens),
            output: self.completion_tokens.or(self.output_tokens),
            cache_read: input_details
                .and_then(|d| d.cached_tokens)
                .or(self.prompt_cache_hit_tokens),
            cache_creation: None,
            reasoning: output_details.and_then(|d| d.reasoning_tokens),
            input_audio: input_details.and_then(|d| d.audio_tokens),
            output_audio: output_details.and_then(|d| d.audio_tokens),
            cost: self.cost,
            ..Usage::default()
        }
    }
}

/// A `service_tier` value, when it is one that changes the price.
fn tier(value: Option<&Str<'_>>) -> Option<ServiceTier> {
    value.and_then(|v| ServiceTier::parse(v.as_str()))
}

/// `choices`, folded while parsing: how many carry content, and the
/// finish reasons (allocates only when a choice finishes).
#[derive(Default)]
struct Choices<'a> {
    pieces: u32,
    /// Some choice carried visible output, or reasoning.
    visible: bool,
    reasoning: bool,
    finish: Vec<Str<'a>>,
    /// The first content piece's text, as its JSON string literal.
    text: Option<&'a RawValue>,
    /// Tool calls that start in this payload (allocates only when one does).
    tools: Vec<ToolStart<'a>>,
}

/// A tool call's first appearance: it carries an id or a name.
struct ToolStart<'a> {
    /// `(choice << 32) | index` for a streamed call (its later deltas
    /// repeat it); `None` when the payload gives no index.
    key: Option<u64>,
    name: Option<Str<'a>>,
}

impl<'de: 'a, 'a> Fold<'de> for Choices<'a> {
    type Item = Choice<'a>;
    const EXPECTING: &'static str = "an array of choices";
    fn add(&mut self, mut choice: Choice<'a>) {
        choice.tool_starts(&mut self.tools);
        let (visible, reasoning) = choice.kinds();
        if visible || reasoning {
            self.visible |= visible;
            self.reasoning |= reasoning;
            self.pieces = self.pieces.saturating_add(1);
            if self.text.is_none() {
                self.text = choice.text();
            }
        }
        if let Some(reason) = choice.finish_reason {
            if self.finish.len() < MAX_FINISH_REASONS {
                self.finish.push(reason);
            }
        }
    }
}

deserialize_by_fold!(Choices<'a>);

#[derive(Deserialize)]
struct Choice<'a> {
    /// Raw, so an odd index (`-0`, a string) costs the tool key, not the chunk.
    #[serde(borrow)]
    index: Option<&'a RawValue>,
    #[serde(borrow)]
    delta: Option<Message<'a>>,
    #[serde(borrow)]
    message: Option<Message<'a>>,
    /// Legacy completions.
    #[serde(borrow)]
    text: Option<&'a RawValue>,
    #[serde(borrow)]
    finish_reason: Option<Str<'a>>,
}

/// An `index` that is a plain non-negative integer; anything else is no
/// index (the payload is still read: a peer's odd index must not cost the
/// chunk's content and usage).
fn lenient_index(raw: Option<&RawValue>) -> Option<u32> {
    raw.and_then(|r| r.get().parse().ok())
}

impl<'a> Choice<'a> {
    /// Move the tool calls that start here into `into`, keyed by this
    /// choice's index and theirs (the legacy `function_call` is index
    /// `u32::MAX`: one per choice).
    fn tool_starts(&mut self, into: &mut Vec<ToolStart<'a>>) {
        let choice = u64::from(lenient_index(self.index).unwrap_or(0)) << 32;
        for msg in [self.delta.as_mut(), self.message.as_mut()]
            .into_iter()
            .flatten()
        {
            if let Some(calls) = msg.tool_calls.as_mut() {
                into.extend(calls.starts.drain(..).map(|(index, name)| ToolStart {
                    key: index.map(|i| choice | u64::from(i)),
                    name,
                }));
            }
            if let Some(f) = &mut msg.function_call {
                if non_empty(f.name) {
                    into.push(ToolStart {
                        key: Some(choice | u64::from(u32::MAX)),
                        name: f.name_str(),
                    });
                }
            }
        }
    }

    /// The text this choice carries, if it is a plain string.
    fn text(&self) -> Option<&'a RawValue> {
        let msg = self.delta.as_ref().or(self.message.as_ref());
        msg.and_then(Message::text)
            .or(self.text)
            .filter(|t| t.get().starts_with('"'))
    }

    /// `(visible, reasoning)` output in this choice.
    fn kinds(&self) -> (bool, bool) {
        let none = (false, false);
        let d = self.delta.as_ref().map_or(none, Message::kinds);
        let m = self.message.as_ref().map_or(none, Message::kinds);
        (d.0 || m.0 || non_empty(self.text), d.1 || m.1)
    }
}

/// A chat `delta` or `message`.
#[derive(Deserialize)]
struct Message<'a> {
    #[serde(borrow)]
    content: Option<&'a RawValue>,
    #[serde(borrow)]
    refusal: Option<&'a RawValue>,
    #[serde(borrow)]
    reasoning_content: Option<&'a RawValue>,
    #[serde(borrow)]
    reasoning: Option<&'a RawValue>,
    /// Audio output (`data`, `transcript`).
    #[serde(borrow)]
    audio: Option<Audio<'a>>,
    #[serde(borrow)]
    tool_calls: Option<ToolCalls<'a>>,
    /// The deprecated single `function_call`.
    #[serde(borrow)]
    function_call: Option<ToolFunction<'a>>,
}

impl<'a> Message<'a> {
    fn text(&self) -> Option<&'a RawValue> {
        [
            self.content,
            self.reasoning_content,
            self.reasoning,
            self.refusal,
        ]
        .into_iter()
        .flatten()
        .chain(self.function_call.as_ref().and_then(|f| f.arguments))
        .find(|raw| non_empty(Some(raw)))
    }

    /// `(visible, reasoning)`: text, refusal, audio or tool calls, and
    /// `reasoning_content` / `reasoning` (DeepSeek, vLLM, OpenRouter, Groq).
    fn kinds(&self) -> (bool, bool) {
        let visible = non_empty(self.content)
            || non_empty(self.refusal)
            || self
                .audio
                .as_ref()
                .is_some_and(|a| non_empty(a.data) || non_empty(a.transcript))
            || self.tool_calls.as_ref().is_some_and(|t| t.any)
            || self
                .function_call
                .as_ref()
                .is_some_and(HasContent::has_content);
        let reasoning = non_empty(self.reasoning_content) || non_empty(self.reasoning);
        (visible, reasoning)
    }
}

/// A chat `delta.audio` / `message.audio`.
#[derive(Deserialize)]
struct Audio<'a> {
    #[serde(borrow)]
    data: Option<&'a RawValue>,
    #[serde(borrow)]
    transcript: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct ToolCall<'a> {
    #[serde(borrow)]
    index: Option<&'a RawValue>,
    #[serde(borrow)]
    id: Option<&'a RawValue>,
    #[serde(borrow)]
    function: Option<ToolFunction<'a>>,
}

impl HasContent for ToolCall<'_> {
    fn has_content(&self) -> bool {
        self.function.as_ref().is_some_and(HasContent::has_content)
    }
}

/// `tool_calls`, folded while parsing: whether any call carries content
/// (as `AnyContent` says), and the calls that start here (an id or a
/// name), by index and name.
#[derive(Default)]
struct ToolCalls<'a> {
    any: bool,
    starts: Vec<(Option<u32>, Option<Str<'a>>)>,
}

impl<'de: 'a, 'a> Fold<'de> for ToolCalls<'a> {
    type Item = ToolCall<'a>;
    const EXPECTING: &'static str = "an array of tool calls";
    fn add(&mut self, call: ToolCall<'a>) {
        self.any |= call.has_content();
        let name = call.function.as_ref().and_then(|f| f.name_str());
        if name.is_some() || non_empty(call.id) {
            self.starts.push((lenient_index(call.index), name));
        }
    }
}

deserialize_by_fold!(ToolCalls<'a>);

/// A streamed chat chunk of the common shape, borrowed from the payload:
/// at most one choice, whose delta carries only text fields.
#[derive(Default)]
struct ChatChunk<'a> {
    id: Option<&'a str>,
    model: Option<&'a str>,
    /// The kind of content the choice carries (what `Message::kinds` says).
    kind: Option<ContentKind>,
    /// Its text, as a JSON string literal (what `Choice::text` gives).
    text: Option<&'a str>,
    finish_reason: Option<&'a str>,
    /// `delta.content`'s string literal, when no other text field of the
    /// delta has text: then it alone decides `kind` and `text`.
    only_content: Option<&'a str>,
    /// The top-level `obfuscation` string literal (OpenAI's padding, a
    /// different length in every chunk).
    obfuscation: Option<&'a str>,
}

/// The last chat chunk the scan read, kept to read the next by comparison:
/// its bytes and the spans of the string literals that change from chunk
/// to chunk (`delta.content`, `obfuscation`). A payload with the same bytes
/// outside those spans and a valid string literal in each is the same
/// document with other strings there, which the scan reads the same way
/// but for the text: so the text is read and the rest compared.
#[derive(Debug, Default)]
struct LastChunk {
    bytes: Vec<u8>,
    /// The changing literals' spans in `bytes`, in order (`slots` of them).
    spans: [Range<usize>; 2],
    slots: usize,
    /// Which of them is `delta.content`.
    content: usize,
    /// Spans of the id, model and finish reason in `bytes` (outside the
    /// changing literals).
    id: Option<Range<usize>>,
    model: Option<Range<usize>>,
    finish_reason: Option<Range<usize>>,
}

/// Where `part`, borrowed from `data`, sits in it.
fn span_in(data: &[u8], part: &str) -> Range<usize> {
    let start = (part.as_ptr() as usize).wrapping_sub(data.as_ptr() as usize);
    start..start + part.len()
}

impl LastChunk {
    /// Keep `data`'s shape, read by the scan as `c`, when its text comes
    /// from `delta.content` alone.
    fn keep(&mut self, data: &[u8], c: &ChatChunk<'_>) {
        self.slots = 0;
        let Some(content) = c.only_content else {
            return;
        };
        let mut spans = [span_in(data, content), 0..0];
        let mut slots = 1;
        if let Some(padding) = c.obfuscation {
            spans[1] = span_in(data, padding);
            slots = 2;
        }
        let content = usize::from(slots == 2 && spans[1].start < spans[0].start);
        if content == 1 {
            spans.swap(0, 1);
        }
        self.bytes.clear();
        self.bytes.extend_from_slice(data);
        let span = |part: Option<&str>| part.map(|p| span_in(data, p));
        (self.spans, self.slots, self.content) = (spans, slots, content);
        (self.id, self.model, self.finish_reason) =
            (span(c.id), span(c.model), span(c.finish_reason));
    }

    /// `data` read by comparison with the kept chunk; `None` when it
    /// differs outside the changing literals (the scan reads it then). The
    /// id and model only when `named` (the adapter reports them once).
    fn read<'a>(&self, data: &'a [u8], named: bool) -> Option<ChatChunk<'a>> {
        if self.slots == 0 {
            return None;
        }
        let mut found = [0..0, 0..0];
        let mut content = "";
        let (mut old, mut new) = (0, 0);
        for (slot, span) in self.spans[..self.slots].iter().enumerate() {
            let fixed = &self.bytes[old..span.start];
            if data.get(new..new + fixed.len())? != fixed {
                return None;
            }
            new += fixed.len();
            let literal = scan::string_literal(&data[new..])?;
            if slot == self.content {
                content = literal;
            }
            found[slot] = new..new + literal.len();
            (old, new) = (span.end, new + literal.len());
        }
        if data.get(new..)? != &self.bytes[old..] {
            return None;
        }
        // The kept chunk's spans outside the literals, moved by how much
        // longer or shorter each literal before them is now.
        let moved = |r: &Option<Range<usize>>| -> Option<Option<&'a str>> {
            let Some(r) = r else {
                return Some(None);
            };
            let mut start = r.start;
            for (span, now) in self.spans[..self.slots].iter().zip(&found) {
                if span.end <= r.start {
                    start = start - span.len() + now.len();
                }
            }
            let text = std::str::from_utf8(data.get(start..start + r.len())?).ok()?;
            Some(Some(text))
        };
        let has = non_empty_raw(content);
        let (id, model) = match named {
            true => (moved(&self.id)?, moved(&self.model)?),
            false => (None, None),
        };
        Some(ChatChunk {
            id,
            model,
            kind: ContentKind::of(has, false),
            text: has.then_some(content),
            finish_reason: moved(&self.finish_reason)?,
            only_content: None,
            obfuscation: None,
        })
    }
}

impl<'a> ChatChunk<'a> {
    /// `None` (take the serde path) unless the payload is valid JSON of
    /// the common shape: no `usage`, `error`, tool calls, Responses or
    /// server-timing fields, no escapes in the strings read as text.
    fn scan(data: &'a [u8]) -> Option<ChatChunk<'a>> {
        let mut c = ChatChunk::default();
        let mut seen = Seen::default();
        Scan::document(data, |s, key| match key {
            "id" => {
                seen.first(0)?;
                c.id = s.str_or_null()?;
                Some(())
            }
            "model" => {
                seen.first(1)?;
                c.model = s.str_or_null()?;
                Some(())
            }
            "object" => {
                seen.first(2)?;
                (s.str_or_null()? != Some("response")).then_some(())
            }
            "choices" => {
                seen.first(3)?;
                c.choices(s)
            }
            "usage" | "error" => {
                seen.first(if key == "usage" { 4 } else { 5 })?;
                s.null()?.then_some(())
            }
            "obfuscation" => {
                c.obfuscation = s.raw(1)?.filter(|r| r.starts_with('"'));
                Some(())
            }
            "type" | "code" | "delta" | "response" | "status" | "incomplete_details" | "output"
            | "x_groq" | "timings" | "stats" => None,
            _ => s.skip(1),
        })?;
        Some(c)
    }

    fn choices(&mut self, s: &mut Scan<'a>) -> Option<()> {
        if s.null()? {
            return Some(());
        }
        let mut count = 0;
        s.array(1, |s| {
            count += 1;
            if count > 1 {
                return None; // several choices: serde keeps their order
            }
            self.choice(s)
        })
    }

    fn choice(&mut self, s: &mut Scan<'a>) -> Option<()> {
        let mut seen = Seen::default();
        s.object(2, |s, key| match key {
            "delta" => {
                seen.first(0)?;
                if s.null()? { Some(()) } else { self.delta(s) }
            }
            "finish_reason" => {
                seen.first(1)?;
                self.finish_reason = s.str_or_null()?;
                Some(())
            }
            "message" | "text" => None,
            _ => s.skip(3),
        })
    }

    fn delta(&mut self, s: &mut Scan<'a>) -> Option<()> {
        let mut seen = Seen::default();
        // In `Message::text`'s order of preference.
        let mut texts: [Option<&'a str>; 4] = [None; 4];
        s.object(3, |s, key| {
            let field = match key {
                "content" => 0,
                "reasoning_content" => 1,
                "reasoning" => 2,
                "refusal" => 3,
                "tool_calls" | "function_call" | "audio" => {
                    seen.first(match key {
                        "tool_calls" => 4,
                        "function_call" => 5,
                        _ => 6,
                    })?;
                    return s.null()?.then_some(());
                }
                _ => return s.skip(4),
            };
            seen.first(field)?;
            texts[field as usize] = s.raw(4)?;
            Some(())
        })?;
        let has = |t: Option<&str>| t.is_some_and(non_empty_raw);
        self.only_content =
            texts[0].filter(|t| t.starts_with('"') && !texts[1..].iter().any(|t| has(*t)));
        let (visible, reasoning, text) = text_kinds(texts);
        self.kind = ContentKind::of(visible, reasoning);
        self.text = text;
        Some(())
    }
}

/// A whole (non-streamed) body of the common shapes, borrowed from it: a
/// chat or legacy-free completion, a Responses `response` object, an
/// embeddings list. Read by the validating scan instead of serde, since
/// the body is read once whole and serde's cost grows with its size.
#[derive(Default)]
struct WholeBody<'a> {
    id: Option<&'a str>,
    model: Option<&'a str>,
    object: Option<&'a str>,
    /// Some choice carried content (what `Choices::pieces > 0` says).
    content: bool,
    visible: bool,
    reasoning: bool,
    /// The first content choice's text, as a JSON string literal.
    text: Option<&'a str>,
    finish: [&'a str; MAX_FINISH_REASONS],
    finish_len: usize,
    usage: Option<Usage>,
    /// The Responses `output`, raw.
    output: Option<&'a str>,
    status: Option<&'a str>,
    /// `incomplete_details` was an object; its `reason`.
    incomplete: Option<Option<&'a str>>,
    service_tier: Option<&'a str>,
}

impl<'a> WholeBody<'a> {
    /// `None` (take the serde path) unless the body is valid JSON whose
    /// metered fields all have the plain shape: no error, Responses or
    /// streaming event fields, server timings or reported cost, no
    /// escapes in the strings read, counts as plain integers.
    fn scan(data: &'a [u8]) -> Option<WholeBody<'a>> {
        let mut b = WholeBody::default();
        let mut seen = Seen::default();
        Scan::document(data, |s, key| {
            let (bit, value) = match key {
                "id" => (0, &mut b.id),
                "model" => (1, &mut b.model),
                "object" => (2, &mut b.object),
                "status" => (3, &mut b.status),
                "service_tier" => (4, &mut b.service_tier),
                "choices" => {
                    seen.first(5)?;
                    return b.choices(s);
                }
                "usage" => {
                    seen.first(6)?;
                    b.usage = whole_usage(s)?;
                    return Some(());
                }
                "error" => {
                    seen.first(7)?;
                    return s.null()?.then_some(());
                }
                "output" => {
                    seen.first(8)?;
                    b.output = s.raw(1)?;
                    return Some(());
                }
                "incomplete_details" => {
                    seen.first(9)?;
                    b.incomplete = s.or_null(incomplete_reason)?;
                    return Some(());
                }
                "type" | "code" | "delta" | "response" | "x_groq" | "timings" | "stats" => {
                    return None;
                }
                _ => return s.skip(1),
            };
            seen.first(bit)?;
            *value = s.str_or_null()?;
            Some(())
        })?;
        Some(b)
    }

    fn choices(&mut self, s: &mut Scan<'a>) -> Option<()> {
        if s.null()? {
            return Some(());
        }
        s.array(1, |s| {
            let (visible, reasoning, text, finish) = whole_choice(s)?;
            if visible || reasoning {
                self.content = true;
                self.visible |= visible;
                self.reasoning |= reasoning;
                if self.text.is_none() {
                    self.text = text;
                }
            }
            if let Some(reason) = finish {
                if self.finish_len < MAX_FINISH_REASONS {
                    self.finish[self.finish_len] = reason;
                    self.finish_len += 1;
                }
            }
            Some(())
        })
    }
}

/// One choice of a whole body: `(visible, reasoning, text, finish_reason)`
/// as `Choice::kinds`, `Choice::text` and its `finish_reason` give them.
/// A `delta` or legacy `text` gives up.
type WholeChoice<'a> = (bool, bool, Option<&'a str>, Option<&'a str>);

fn whole_choice<'a>(s: &mut Scan<'a>) -> Option<WholeChoice<'a>> {
    let mut choice: WholeChoice<'a> = (false, false, None, None);
    s.fields(2, ["message", "finish_reason", "delta", "text"], |s, at| {
        match at {
            0 => {
                if let Some((visible, reasoning, text)) = s.or_null(whole_message)? {
                    (choice.0, choice.1, choice.2) = (visible, reasoning, text);
                }
            }
            1 => choice.3 = s.str_or_null()?,
            _ => return None,
        }
        Some(())
    })?;
    Some(choice)
}

/// A whole body's `message`: `(visible, reasoning, text)` as
/// `Message::kinds` and `Message::text` give them. Audio and the legacy
/// `function_call` give up unless `null`.
fn whole_message<'a>(s: &mut Scan<'a>) -> Option<(bool, bool, Option<&'a str>)> {
    let mut seen = Seen::default();
    // In `Message::text`'s order of preference.
    let mut texts: [Option<&'a str>; 4] = [None; 4];
    s.object(3, |s, key| {
        let field = match key {
            "content" => 0,
            "reasoning_content" => 1,
            "reasoning" => 2,
            "refusal" => 3,
            "tool_calls" => {
                seen.first(4)?;
                // Tool calls are counted and named on the serde path.
                return s.raw(4)?.is_none_or(|r| !non_empty_raw(r)).then_some(());
            }
            "function_call" | "audio" => {
                seen.first(if key == "audio" { 5 } else { 6 })?;
                return s.null()?.then_some(());
            }
            _ => return s.skip(4),
        };
        seen.first(field)?;
        texts[field as usize] = s.raw(4)?;
        Some(())
    })?;
    Some(text_kinds(texts))
}

/// The raw text fields of a chat `delta` or `message`, in `Message::text`'s
/// order of preference (`content`, `reasoning_content`, `reasoning`,
/// `refusal`): `(visible, reasoning)` as `Message::kinds` gives them, and
/// the text `Message::text` picks, kept when it is a string literal.
fn text_kinds(texts: [Option<&str>; 4]) -> (bool, bool, Option<&str>) {
    let has = |t: Option<&str>| t.is_some_and(non_empty_raw);
    let text = texts.into_iter().flatten().find(|raw| non_empty_raw(raw));
    (
        has(texts[0]) || has(texts[3]),
        has(texts[1]) || has(texts[2]),
        text.filter(|t| t.starts_with('"')),
    )
}

/// `incomplete_details.reason` (an object is required, as serde wants).
fn incomplete_reason<'a>(s: &mut Scan<'a>) -> Option<Option<&'a str>> {
    let mut reason = None;
    s.fields(2, ["reason"], |s, _| {
        reason = s.str_or_null()?;
        Some(())
    })?;
    Some(reason)
}

/// A whole body's `usage`, as `WireUsage::to_usage` reads it (`None` for
/// `null`). Groq's timings and OpenRouter's `cost` give up.
fn whole_usage(s: &mut Scan<'_>) -> Option<Option<Usage>> {
    if s.null()? {
        return Some(None);
    }
    let mut seen = Seen::default();
    // prompt, completion, input, output tokens; DeepSeek's cache hits.
    let mut counts = [None; 5];
    // prompt, completion, input, output details: (cached, reasoning, audio).
    let mut details: [Option<[Option<u64>; 3]>; 4] = [None; 4];
    s.object(1, |s, key| {
        let count = match key {
            "prompt_tokens" => 0,
            "completion_tokens" => 1,
            "input_tokens" => 2,
            "output_tokens" => 3,
            "prompt_cache_hit_tokens" => 4,
            "prompt_tokens_details"
            | "completion_tokens_details"
            | "input_tokens_details"
            | "output_tokens_details" => {
                let at = match key {
                    "prompt_tokens_details" => 0,
                    "completion_tokens_details" => 1,
                    "input_tokens_details" => 2,
                    _ => 3,
                };
                seen.first(5 + at)?;
                details[at as usize] = s.or_null(usage_details)?;
                return Some(());
            }
            "cost" | "queue_time" | "prompt_time" | "completion_time" | "total_time" => {
                return None;
            }
            _ => return s.skip(2),
        };
        seen.first(count)?;
        counts[count as usize] = s.u64_or_null()?;
        Some(())
    })?;
    let input_details = details[0].or(details[2]);
    let output_details = details[1].or(details[3]);
    Some(Some(Usage {
        input: counts[0].or(counts[2]),
        output: counts[1].or(counts[3]),
        cache_read: input_details.and_then(|d| d[0]).or(counts[4]),
        cache_creation: None,
        reasoning: output_details.and_then(|d| d[1]),
        input_audio: input_details.and_then(|d| d[2]),
        output_audio: output_details.and_then(|d| d[2]),
        ..Usage::default()
    }))
}

/// A `*_tokens_details` object: `[cached, reasoning, audio]` (`Details`).
fn usage_details(s: &mut Scan<'_>) -> Option<[Option<u64>; 3]> {
    s.counts(2, ["cached_tokens", "reasoning_tokens", "audio_tokens"])
}

/// OpenAI's wire format, also spoken by every OpenAI-compatible server.
pub const WIRE: Wire = Wire {
    name: "openai",
    operations: &[
        Operation::ChatCompletions,
        Operation::Completions,
        Operation::Responses,
        Operation::Embeddings,
        Operation::FetchResponse,
        Operation::CancelResponse,
        Operation::DeleteResponse,
        Operation::ResponseInputItems,
        Operation::FileContent,
    ],
    request_streams: |op, body_stream| op != Operation::Embeddings && body_stream.unwrap_or(false),
    adapter: |op| Box::new(OpenaiAdapter::new(op)),
    json_body: whole_json,
};

/// OpenAI itself: its endpoints, outside Azure's `/deployments/`.
pub const SPEC: ProviderSpec = ProviderSpec {
    kind: ProviderKind::Openai,
    name: "openai",
    config_name: "openai",
    detect_path: |path, op| WIRE.owns(op) && !path.contains("/deployments/"),
    detect_response: never_response,
    model_from_path: no_model,
    price_table: Some("openai"),
    wire: &WIRE,
};

#[cfg(test)]
mod tests;
