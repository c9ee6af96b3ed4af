//! OpenAI adapter: chat completions, legacy completions, Responses and
//! embeddings frames (streamed or whole) in, metering events out.
//!
//! A streamed chat chunk of the common shape (one choice, a plain delta)
//! is read by a validating scan (`scan.rs`); every other frame is
//! deserialized once into borrowed structs that keep only the fields
//! metering needs. Either way text is never copied, only checked for being
//! non-empty and handed on as its JSON string literal.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;
use std::ops::Range;

use serde::Deserialize;
use serde::de::{Deserializer, SeqAccess, Visitor};
use serde_json::value::RawValue;

use super::ProviderKind;
use super::scan::{self, Scan, Seen};
use super::spec::{FrameAdapter, ProviderSpec, Wire, never_response, no_model, whole_json};
use super::wire::{HasContent, Str, non_empty, non_empty_raw, reported_cost};
use super::{
    AdapterError, ContentKind, Event, Operation, ReportedCost, ServerTool, ServiceTier,
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
    model_seen: bool,
    id_seen: bool,
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
            model_seen: false,
            id_seen: false,
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
        if let Some(chunk) = self.last.read(data, !(self.model_seen && self.id_seen)) {
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
        self.identify(
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
            out(Event::Content {
                pieces: 1,
                kind: ContentKind::Visible,
            });
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

    /// Report the model and response id the first time each appears.
    fn identify(&mut self, model: Option<&str>, id: Option<&str>, out: &mut dyn FnMut(Event<'_>)) {
        if !self.model_seen {
            if let Some(model) = model.filter(|m| !m.is_empty()) {
                out(Event::Model(model));
                self.model_seen = true;
            }
        }
        if !self.id_seen {
            if let Some(id) = id.filter(|i| !i.is_empty()) {
                out(Event::ResponseId(id));
                self.id_seen = true;
            }
        }
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
        self.identify(c.model, c.id, out);
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
        self.identify(b.model, b.id, out);
        if let (true, Some(kind)) = (b.content, ContentKind::of(b.visible, b.reasoning)) {
            out(Event::Content { pieces: 1, kind });
            if let Some(text) = b.text {
                out(Event::Text(text));
            }
        }
        let is_response_body = b.object == Some("response");
        if let Some(output) = b.output.filter(|o| is_response_body && non_empty_raw(o)) {
            out(Event::Content {
                pieces: 1,
                kind: ContentKind::Visible,
            });
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
        self.identify(
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

impl<'de: 'a, 'a> Deserialize<'de> for Choices<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Choices<'a>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an array of choices")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Choices<'a>, A::Error> {
                let mut choices = Choices::default();
                while let Some(mut choice) = seq.next_element::<Choice<'a>>()? {
                    choice.tool_starts(&mut choices.tools);
                    let (visible, reasoning) = choice.kinds();
                    if visible || reasoning {
                        choices.visible |= visible;
                        choices.reasoning |= reasoning;
                        choices.pieces = choices.pieces.saturating_add(1);
                        if choices.text.is_none() {
                            choices.text = choice.text();
                        }
                    }
                    if let Some(reason) = choice.finish_reason {
                        if choices.finish.len() < MAX_FINISH_REASONS {
                            choices.finish.push(reason);
                        }
                    }
                }
                Ok(choices)
            }
        }
        d.deserialize_seq(V(PhantomData))
    }
}

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
    function_call: Option<Function<'a>>,
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
    function: Option<Function<'a>>,
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

impl<'de: 'a, 'a> Deserialize<'de> for ToolCalls<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = ToolCalls<'a>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an array of tool calls")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<ToolCalls<'a>, A::Error> {
                let mut calls = ToolCalls::default();
                while let Some(call) = seq.next_element::<ToolCall<'a>>()? {
                    calls.any |= call.has_content();
                    let name = call.function.as_ref().and_then(|f| f.name_str());
                    if name.is_some() || non_empty(call.id) {
                        calls.starts.push((lenient_index(call.index), name));
                    }
                }
                Ok(calls)
            }
        }
        d.deserialize_seq(V(PhantomData))
    }
}

#[derive(Deserialize)]
struct Function<'a> {
    #[serde(borrow)]
    name: Option<&'a RawValue>,
    #[serde(borrow)]
    arguments: Option<&'a RawValue>,
}

impl HasContent for Function<'_> {
    fn has_content(&self) -> bool {
        non_empty(self.name) || non_empty(self.arguments)
    }
}

impl<'a> Function<'a> {
    /// The function's name, when it is a non-empty string.
    fn name_str(&self) -> Option<Str<'a>> {
        let raw = self.name.filter(|n| non_empty(Some(n)))?;
        serde_json::from_str::<Str<'a>>(raw.get()).ok()
    }
}

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
        let mut s = Scan::new(data)?;
        let mut c = ChatChunk::default();
        let mut seen = Seen::default();
        s.object(0, |s, key| match key {
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
        s.end()?;
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
        let text = texts.into_iter().flatten().find(|raw| non_empty_raw(raw));
        let has = |t: Option<&str>| t.is_some_and(non_empty_raw);
        self.only_content =
            texts[0].filter(|t| t.starts_with('"') && !texts[1..].iter().any(|t| has(*t)));
        self.kind = ContentKind::of(
            has(texts[0]) || has(texts[3]),
            has(texts[1]) || has(texts[2]),
        );
        self.text = text.filter(|t| t.starts_with('"'));
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
        let mut s = Scan::new(data)?;
        let mut b = WholeBody::default();
        let mut seen = Seen::default();
        s.object(0, |s, key| {
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
                    if !s.null()? {
                        b.incomplete = Some(incomplete_reason(s)?);
                    }
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
        s.end()?;
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
    let mut seen = Seen::default();
    let mut choice: WholeChoice<'a> = (false, false, None, None);
    s.object(2, |s, key| match key {
        "message" => {
            seen.first(0)?;
            if !s.null()? {
                let (visible, reasoning, text) = whole_message(s)?;
                choice.0 = visible;
                choice.1 = reasoning;
                choice.2 = text;
            }
            Some(())
        }
        "finish_reason" => {
            seen.first(1)?;
            choice.3 = s.str_or_null()?;
            Some(())
        }
        "delta" | "text" => None,
        _ => s.skip(3),
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
    let has = |t: Option<&str>| t.is_some_and(non_empty_raw);
    let text = texts.into_iter().flatten().find(|raw| non_empty_raw(raw));
    Some((
        has(texts[0]) || has(texts[3]),
        has(texts[1]) || has(texts[2]),
        text.filter(|t| t.starts_with('"')),
    ))
}

/// `incomplete_details.reason` (an object is required, as serde wants).
fn incomplete_reason<'a>(s: &mut Scan<'a>) -> Option<Option<&'a str>> {
    let mut seen = Seen::default();
    let mut reason = None;
    s.object(2, |s, key| {
        if key != "reason" {
            return s.skip(3);
        }
        seen.first(0)?;
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
                if !s.null()? {
                    details[at as usize] = Some(usage_details(s)?);
                }
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
    let mut seen = Seen::default();
    let mut d = [None; 3];
    s.object(2, |s, key| {
        let at = match key {
            "cached_tokens" => 0,
            "reasoning_tokens" => 1,
            "audio_tokens" => 2,
            _ => return s.skip(3),
        };
        seen.first(at)?;
        d[at as usize] = s.u64_or_null()?;
        Some(())
    })?;
    Some(d)
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
mod tests {
    use super::*;
    use crate::providers::ProviderKind;
    use crate::providers::scan::differential::{
        Outcome, edited, fixture_bodies, fixture_payloads, json_outcome, mutations, outcome,
    };
    use crate::providers::tests::{Summary, expect_summary as expect, fixture};

    fn usage(input: u64, output: u64, cached: u64, reasoning: u64) -> Usage {
        Usage {
            input: Some(input),
            output: Some(output),
            cache_read: Some(cached),
            cache_creation: None,
            reasoning: Some(reasoning),
            ..Usage::default()
        }
    }

    fn summary(content: u32, model: &str, id: &str, finish: &[&str]) -> Summary {
        Summary {
            content_frames: content,
            pieces: content,
            model: Some(model.to_owned()),
            response_id: (!id.is_empty()).then(|| id.to_owned()),
            finish: finish.iter().map(|s| s.to_string()).collect(),
            ..Summary::default()
        }
    }

    #[test]
    fn text_pieces_reassemble_the_answer() {
        let (got, _, _) = fixture("openai/chat_stream.sse").run();
        assert_eq!(
            got.texts.len(),
            got.pieces as usize,
            "one text per content piece"
        );
        assert!(!got.texts.concat().is_empty());
        let (tools, _, _) = fixture("openai/chat_stream_tool_calls.sse").run();
        assert!(
            tools.texts.is_empty(),
            "tool-call arguments inside tool_calls are counted as pieces, not text"
        );
    }

    #[test]
    fn chat_stream_with_usage() {
        let mut s = summary(
            9,
            "gpt-4o-mini-2024-07-18",
            "chatcmpl-BxY8pQ2mKf3r7VtH1nZcL0aWdE9sJ",
            &["stop"],
        );
        s.usage = Usage {
            input_audio: Some(0),
            output_audio: Some(0),
            service_tier: Some(ServiceTier::Default),
            ..usage(19, 9, 0, 0)
        };
        s.done = 1;
        expect("openai/chat_stream_usage.sse", s);
    }

    #[test]
    fn chat_stream_without_usage() {
        let mut s = summary(
            6,
            "gpt-4o-2024-08-06",
            "chatcmpl-BxYA1k9sVb2MwTq7Rr3eLhU0cNg5X",
            &["stop"],
        );
        s.done = 1;
        expect("openai/chat_stream.sse", s.clone());
        expect("openai/chat_stream_crlf.sse", s);
    }

    #[test]
    fn chat_stream_with_tool_calls() {
        // The first chunk names the tool (content), then 11 argument pieces.
        let mut s = summary(
            12,
            "gpt-4o-2024-08-06",
            "chatcmpl-BxYB7nR2dQw0pLk4Hs9Jt1Ve6Yc3M",
            &["tool_calls"],
        );
        s.usage = Usage {
            input_audio: Some(0),
            output_audio: Some(0),
            service_tier: Some(ServiceTier::Default),
            ..usage(85, 18, 0, 0)
        };
        s.done = 1;
        // One call however many argument deltas repeat its index.
        s.tool_calls = 1;
        s.tool_names = vec!["get_weather".into()];
        expect("openai/chat_stream_tool_calls.sse", s);
    }

    #[test]
    fn chat_stream_with_mid_stream_error() {
        let mut s = summary(
            3,
            "gpt-4o-2024-08-06",
            "chatcmpl-BxYC3aB8eT5qWn1Kz6Lp0Xr9Dm2Fs",
            &[],
        );
        s.errors = vec!["server_error".into()];
        expect("openai/chat_stream_error.sse", s);
    }

    #[test]
    fn azure_filter_chunks_are_not_content() {
        let mut s = summary(
            4,
            "gpt-4o-2024-11-20",
            "chatcmpl-BxYDq4Kc7Nh2Ze8Wv5Ta1Ur3Ps6Jm",
            &["stop"],
        );
        s.done = 1;
        expect("openai/azure_chat_stream.sse", s);
    }

    #[test]
    fn chat_whole_body() {
        let mut s = summary(
            1,
            "o4-mini-2025-04-16",
            "chatcmpl-BxYFa2Ts8Lk5Wq0Rn3Ve7Hc1Mz9Pj",
            &["stop"],
        );
        s.usage = Usage {
            input_audio: Some(0),
            output_audio: Some(0),
            service_tier: Some(ServiceTier::Default),
            ..usage(1536, 210, 1024, 192)
        };
        s.done = 1; // a whole body that parsed is its own terminal event
        expect("openai/chat.json", s);
    }

    #[test]
    fn legacy_completions_stream() {
        let mut s = summary(
            6,
            "gpt-3.5-turbo-instruct:20230824-v2",
            "cmpl-BxYEw7Lm3Qa9Vt2Rk5Hn0Jc8Zp4Xs",
            &["length"],
        );
        s.done = 1;
        expect("openai/completions_stream.sse", s);
    }

    #[test]
    fn responses_stream() {
        // 3 reasoning-summary deltas and 4 output-text deltas.
        let id = "resp_6887a1f3c2e08191b5a7d4e2f90c13ab0d9e4f6a7b8c9d01";
        let mut s = summary(7, "o4-mini-2025-04-16", id, &["completed"]);
        s.usage = Usage {
            service_tier: Some(ServiceTier::Default),
            ..usage(37, 150, 0, 128)
        };
        s.done = 1;
        expect("openai/responses_stream.sse", s);
    }

    #[test]
    fn background_stream_resume_and_polls() {
        let id = "resp_68b1c0d2e3f48193a5b6c7d8e9f0a1b20c3d4e5f6a7b8c9d";
        let final_usage = Usage {
            service_tier: Some(ServiceTier::Default),
            ..usage(37, 150, 0, 128)
        };
        let mut s = summary(7, "o4-mini-2025-04-16", id, &["completed"]);
        s.usage = final_usage;
        s.done = 1;
        expect("openai/responses_background_stream.sse", s);
        // Resumed after event 11: the four text deltas, then completion.
        let mut s = summary(4, "o4-mini-2025-04-16", id, &["completed"]);
        s.usage = final_usage;
        s.done = 1;
        expect("openai/responses_resume_stream.sse", s);
        for (file, status) in [
            ("openai/responses_background_queued.json", "queued"),
            (
                "openai/responses_background_in_progress.json",
                "in_progress",
            ),
        ] {
            let s = fixture(file).run().0;
            assert_eq!(
                (s.usage, s.content_frames, s.finish),
                (Usage::default(), 0, vec![status.to_owned()]),
                "{file}: no usage and no output before the response finishes"
            );
        }
        let s = fixture("openai/responses_background_completed.json")
            .run()
            .0;
        assert_eq!(
            s.usage, final_usage,
            "the finished poll carries the final usage"
        );
    }

    #[test]
    fn responses_whole_body() {
        let id = "resp_6887a1f3c2e08191b5a7d4e2f90c13ab0d9e4f6a7b8c9d01";
        let mut s = summary(1, "o4-mini-2025-04-16", id, &["completed"]);
        s.usage = Usage {
            service_tier: Some(ServiceTier::Default),
            ..usage(37, 150, 0, 128)
        };
        s.done = 1;
        expect("openai/responses.json", s);
    }

    #[test]
    fn responses_failed_stream() {
        let id = "resp_6887a2b0e5f48190a9b8c7d6e5f4a3b20c1d2e3f4a5b6c7d";
        let mut s = summary(2, "gpt-4.1-2025-04-14", id, &[]);
        s.errors = vec!["server_error".into()];
        expect("openai/responses_failed_stream.sse", s);
    }

    #[test]
    fn embeddings_have_input_and_no_output() {
        let mut s = summary(0, "text-embedding-3-small", "", &[]);
        s.usage = Usage {
            input: Some(8),
            output: Some(0),
            ..Usage::default()
        };
        s.done = 1;
        expect("openai/embeddings.json", s);
    }

    /// Feed SSE data payloads (and optionally whole bodies) to one adapter.
    fn sse(payloads: &[&str]) -> Result<Summary, AdapterError> {
        let mut adapter = OpenaiAdapter::new(Some(Operation::ChatCompletions));
        let mut s = Summary::default();
        for data in payloads {
            let frame = Frame::Sse {
                event: b"",
                data: data.as_bytes(),
            };
            adapter.on_frame(frame, &mut |e| s.record(e))?;
        }
        Ok(s)
    }

    fn json(body: &str) -> Result<Summary, AdapterError> {
        let mut adapter = OpenaiAdapter::new(None);
        let mut s = Summary::default();
        adapter.on_frame(Frame::Json(body.as_bytes()), &mut |e| s.record(e))?;
        Ok(s)
    }

    fn content(data: &str) -> u32 {
        sse(&[data]).expect("valid payload").pieces
    }

    #[test]
    fn what_counts_as_content() {
        let delta =
            |d: &str| format!(r#"{{"choices":[{{"index":0,"delta":{d},"finish_reason":null}}]}}"#);
        assert_eq!(
            content(&delta(r#"{"role":"assistant","content":""}"#)),
            0,
            "role only"
        );
        assert_eq!(content(&delta(r#"{"content":null}"#)), 0, "null content");
        assert_eq!(content(&delta("{}")), 0, "empty delta");
        assert_eq!(content(r#"{"choices":[]}"#), 0, "no choices");
        assert_eq!(content(&delta(r#"{"content":"\n"}"#)), 1, "escaped newline");
        assert_eq!(
            content(&delta(r#"{"content":"\"q\""}"#)),
            1,
            "escaped quotes"
        );
        assert_eq!(content(&delta(r#"{"refusal":"I can't"}"#)), 1, "refusal");
        assert_eq!(
            content(&delta(r#"{"reasoning_content":"hmm"}"#)),
            1,
            "reasoning_content"
        );
        assert_eq!(content(&delta(r#"{"reasoning":"hmm"}"#)), 1, "reasoning");
        assert_eq!(
            content(&delta(r#"{"content":[]}"#)),
            0,
            "empty content parts"
        );
        let tool = |f: &str| {
            delta(&format!(
                r#"{{"tool_calls":[{{"index":0,"function":{f}}}]}}"#
            ))
        };
        assert_eq!(content(&tool(r#"{"arguments":""}"#)), 0, "empty arguments");
        assert_eq!(content(&tool(r#"{"arguments":"{\"a"}"#)), 1, "arguments");
        assert_eq!(
            content(&tool(r#"{"name":"f","arguments":""}"#)),
            1,
            "tool name"
        );
        assert_eq!(
            content(&delta(r#"{"function_call":{"arguments":"x"}}"#)),
            1,
            "legacy function_call"
        );
        let legacy = |t: &str| format!(r#"{{"choices":[{{"text":{t},"index":0}}]}}"#);
        assert_eq!(content(&legacy(r#""""#)), 0, "empty legacy text");
        assert_eq!(content(&legacy(r#""hi""#)), 1, "legacy text");
        let azure = r#"{"choices":[{"content_filter_offsets":{"check_offset":1},"content_filter_results":{"hate":{"filtered":false}},"finish_reason":null,"index":0}],"id":"","model":""}"#;
        assert_eq!(
            sse(&[azure]).expect("valid"),
            Summary::default(),
            "Azure annotation"
        );
        let two = r#"{"choices":[{"index":0,"delta":{"content":"a"}},{"index":1,"delta":{"content":"b"}}]}"#;
        assert_eq!(content(two), 2, "one piece per choice with content");
    }

    #[test]
    fn usage_null_is_ignored_and_done_alone_is_no_terminal_event() {
        let s = sse(&[r#"{"choices":[],"usage":null}"#, " [DONE] "]).expect("valid");
        assert_eq!(
            (s.usage, s.done),
            (Usage::default(), 0),
            "`[DONE]` without any finish_reason: the answer was cut short"
        );
        let s = sse(&[
            r#"{"choices":[{"index":0,"delta":{"content":"x"},"finish_reason":"length"}]}"#,
            "[DONE]",
        ])
        .expect("valid");
        assert_eq!(s.done, 1, "a finish_reason is the terminal event");
    }

    #[test]
    fn model_and_id_are_reported_once() {
        let chunk = r#"{"id":"c1","model":"m","choices":[{"index":0,"delta":{"content":"x"}}]}"#;
        let mut adapter = OpenaiAdapter::new(None);
        let mut log = Vec::new();
        for _ in 0..3 {
            let frame = Frame::Sse {
                event: b"",
                data: chunk.as_bytes(),
            };
            adapter
                .on_frame(frame, &mut |e| log.push(format!("{e:?}")))
                .expect("valid");
        }
        assert_eq!(
            log.iter().filter(|e| e.starts_with("Model")).count(),
            1,
            "{log:?}"
        );
        assert_eq!(
            log.iter().filter(|e| e.starts_with("ResponseId")).count(),
            1,
            "{log:?}"
        );
    }

    #[test]
    fn error_kinds() {
        let kind = |body: &str| json(body).expect("valid").errors;
        assert_eq!(
            kind(r#"{"error":{"message":"m","type":"invalid_request_error","code":"x"}}"#),
            ["invalid_request_error"]
        );
        assert_eq!(
            kind(r#"{"error":{"message":"m","type":null,"code":"rate_limit_exceeded"}}"#),
            ["rate_limit_exceeded"]
        );
        assert_eq!(kind(r#"{"error":{"message":"m","code":429}}"#), ["429"]);
        assert_eq!(kind(r#"{"error":{"message":"m"}}"#), ["error"]);
        assert_eq!(kind(r#"{"error":"upstream exploded"}"#), ["error"]);
        assert_eq!(
            kind(
                r#"{"type":"error","code":"ERR_SOMETHING","message":"m","param":null,"sequence_number":4}"#
            ),
            ["ERR_SOMETHING"]
        );
        assert_eq!(
            kind(r#"{"type":"error","error":{"type":"server_error","message":"m"}}"#),
            ["server_error"]
        );
        assert!(
            kind(r#"{"id":"resp_1","object":"response","error":null,"output":[]}"#).is_empty(),
            "error: null"
        );
        let failed =
            r#"{"type":"response.failed","response":{"id":"r","status":"failed","error":null}}"#;
        assert_eq!(sse(&[failed]).expect("valid").errors, ["response_failed"]);
    }

    #[test]
    fn responses_incomplete_reports_its_reason() {
        let ev = r#"{"type":"response.incomplete","response":{"id":"r","model":"m","status":"incomplete","incomplete_details":{"reason":"max_output_tokens"},"usage":{"input_tokens":5,"output_tokens":16}}}"#;
        let s = sse(&[ev]).expect("valid");
        assert_eq!(s.finish, ["max_output_tokens"]);
        assert_eq!(
            (s.usage.input, s.usage.output, s.done),
            (Some(5), Some(16), 1)
        );
    }

    #[test]
    fn responses_events_without_text_are_not_content() {
        for ev in [
            r#"{"type":"response.output_text.delta","delta":""}"#,
            r#"{"type":"response.output_text.done","text":"Hello"}"#,
            r#"{"type":"response.content_part.added","part":{"type":"output_text","text":""}}"#,
            r#"{"type":"response.output_item.added","item":{"type":"function_call","name":"f"}}"#,
        ] {
            assert_eq!(content(ev), 0, "{ev}");
        }
        assert_eq!(
            content(r#"{"type":"response.function_call_arguments.delta","delta":"{\""}"#),
            1
        );
        assert_eq!(
            content(r#"{"type":"response.reasoning_text.delta","delta":"so"}"#),
            1
        );
    }

    #[test]
    fn whole_body_with_several_choices() {
        let body = r#"{"id":"c","model":"m","choices":[{"index":0,"message":{"content":"a"},"finish_reason":"stop"},{"index":1,"message":{"content":"b"},"finish_reason":"length"}]}"#;
        let s = json(body).expect("valid");
        assert_eq!(
            (s.pieces, s.finish.clone()),
            (1, vec!["stop".to_owned(), "length".to_owned()])
        );
        let tool = r#"{"choices":[{"index":0,"message":{"content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{}"}}]},"finish_reason":"tool_calls"}]}"#;
        assert_eq!(
            json(tool).expect("valid").pieces,
            1,
            "a tool call is content"
        );
    }

    /// Chunks the scan must read exactly as serde does (or leave to it).
    const SHAPES: &[&str] = &[
        r#"{"id":"c","model":"m","choices":[{"index":0,"delta":{"content":"a \"content\":\"b\" c"},"finish_reason":null}]}"#,
        r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"content":null}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"content":"\n\"q\"\\"}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"content":"x","content":"y"}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"content":[{"type":"text","text":"x"}]}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"content":[],"reasoning":"r"}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"content":{"a":"}"},"reasoning_content":"r"}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"content":1}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"refusal":"no","content":""}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"tool_calls":null,"content":"x"}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{}"}}]}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"function_call":{"arguments":"x"}}}]}"#,
        r#"{"id":"c\u0031","model":"m","choices":[{"delta":{"content":"x"}}]}"#,
        r#"{"id":1,"choices":[]}"#,
        r#"{"model":null,"choices":[{"delta":{"content":"x"},"finish_reason":"stop"}]}"#,
        r#"{"choices":[{"delta":{"content":"x"},"finish_reason":""}]}"#,
        r#"{"choices":[{"delta":{"content":"x"},"finish_reason":5}]}"#,
        r#"{"choices":[{"delta":{"content":"x"}},{"delta":{"content":"y"}}]}"#,
        r#"{"choices":null}"#,
        r#"{"choices":[null]}"#,
        r#"{"choices":[{"delta":null}]}"#,
        r#"{"choices":[{"delta":["x"]}]}"#,
        r#"{"choices":[{"delta":{"content":"x"}}],"usage":null,"error":null}"#,
        r#"{"choices":[{"delta":{"content":"x"}}],"usage":{"prompt_tokens":1}}"#,
        r#"{"choices":[{"delta":{"content":"x"}}],"error":{"type":"e"}}"#,
        r#"{"choices":[{"delta":{"content":"x"}}]} trailing"#,
        r#"{"object":"response","output":[1]}"#,
        r#"{"object":"response","choices":[{"delta":{"content":"x"}}]}"#,
        r#"{"choices":[{"delta":{"content":"caf\u00e9 😀"}}]}"#,
        r#"{"choices":[{"delta":{"content":"\ud83d\ude00"}}]}"#,
        r#"{"choices":[{"delta":{"content":"x"}}],"x_groq":{"id":"g"}}"#,
        r#"{"choices":[{"delta":{"content":"x"}}],"type":"chunk"}"#,
        r#"{"choices":[{"text":"x"}]}"#,
        r#" { "choices" : [ { "delta" : { "content" : "x" } , "logprobs" : null } ] , "created" : -1.5e3 } "#,
        r#"{"choices":[{"delta":{"content":"x"}}],"choices":[]}"#,
    ];

    /// The same payload through the scan and through serde alone.
    fn scan_and_serde(data: &[u8]) -> (Outcome, Outcome) {
        let op = Some(Operation::ChatCompletions);
        (
            outcome(|f, out| OpenaiAdapter::new(op).on_frame(f, out), data),
            outcome(
                |f, out| OpenaiAdapter::without_scan(op).on_frame(f, out),
                data,
            ),
        )
    }

    const OPENAI_FAMILY: &[ProviderKind] = &[
        ProviderKind::Openai,
        ProviderKind::Azure,
        ProviderKind::Vllm,
        ProviderKind::Llamacpp,
        ProviderKind::Mistral,
        ProviderKind::Groq,
        ProviderKind::Deepseek,
        ProviderKind::Openrouter,
        ProviderKind::Together,
        ProviderKind::Lmstudio,
    ];

    #[test]
    fn scan_reads_fixture_chunks_and_tricky_shapes_as_serde_does() {
        let payloads = fixture_payloads(OPENAI_FAMILY);
        let mut scanned = 0;
        for data in payloads
            .iter()
            .map(Vec::as_slice)
            .chain(SHAPES.iter().map(|s| s.as_bytes()))
        {
            let (scan, serde) = scan_and_serde(data);
            assert_eq!(scan, serde, "{}", String::from_utf8_lossy(data));
            scanned += usize::from(ChatChunk::scan(data.trim_ascii()).is_some());
        }
        // Tool-call chunks and Responses events are serde's by design.
        let serde_only = |p: &&Vec<u8>| {
            let has = |needle: &[u8]| p.windows(needle.len()).any(|w| w == needle);
            has(b"\"tool_calls\":[{") || has(b"\"function_call\":{") || has(b"\"type\":\"response.")
        };
        let plain = payloads.iter().filter(|p| !serde_only(p)).count();
        assert!(
            scanned * 2 > plain,
            "the scan reads most chunks: {scanned} of {} fixture chunks and {} shapes",
            payloads.len(),
            SHAPES.len()
        );
        // Model and id once per stream, whichever path read them.
        let op = Some(Operation::ChatCompletions);
        let (mut with, mut without) = (OpenaiAdapter::new(op), OpenaiAdapter::without_scan(op));
        let (a, b): (Vec<Outcome>, Vec<Outcome>) = payloads
            .iter()
            .map(|d| {
                (
                    outcome(|f, out| with.on_frame(f, out), d),
                    outcome(|f, out| without.on_frame(f, out), d),
                )
            })
            .unzip();
        assert_eq!(a, b, "the whole sequence of fixture chunks");
    }

    #[test]
    fn scan_reads_mutated_chunks_as_serde_does() {
        let payloads = fixture_payloads(OPENAI_FAMILY);
        let inputs = payloads
            .iter()
            .map(Vec::as_slice)
            .chain(SHAPES.iter().map(|s| s.as_bytes()));
        for (i, data) in inputs.enumerate() {
            for m in mutations(data, i as u64, 200) {
                let (scan, serde) = scan_and_serde(&m);
                assert_eq!(scan, serde, "{}", String::from_utf8_lossy(&m));
            }
        }
    }

    /// `data` with its `delta.content` string literal replaced by `with`.
    fn with_content(data: &[u8], with: &[u8]) -> Option<Vec<u8>> {
        let key = b"\"content\":";
        let at = data.windows(key.len()).position(|w| w == key)? + key.len();
        let len = scan::string_literal(&data[at..])?.len();
        Some([&data[..at], with, &data[at + len..]].concat())
    }

    /// Literals (and things that are not) to put where the content was.
    const CONTENTS: &[&[u8]] = &[
        b"\"x\"",
        b"\"\"",
        b"\"a longer piece of text, past a few words of eight bytes\"",
        b"\"q\\\"uote\\\\\"",
        b"\"\\u00e9\\n\"",
        b"\"\\ud83d\\ude00\"",
        b"\"\\x\"",
        b"\"a\x01\"",
        b"\"\xc3\"",
        b"\"open",
        b"null",
        b"7",
        b"\"a\",\"b\"",
    ];

    /// A stream with OpenAI's `obfuscation` padding, before and after the
    /// choices.
    const PADDED: &[&str] = &[
        r#"{"id":"c","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}],"obfuscation":"a"}"#,
        r#"{"id":"c","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[{"index":0,"delta":{"content":"Hel"},"finish_reason":null}],"obfuscation":"abcd"}"#,
        r#"{"id":"c","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[{"index":0,"delta":{"content":"lo, there"},"finish_reason":null}],"obfuscation":"ab"}"#,
        r#"{"id":"c","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[{"index":0,"delta":{"content":"!"},"finish_reason":null}],"obfuscation":""}"#,
        r#"{"obfuscation":"xyz","id":"c","model":"gpt-4o","choices":[{"index":0,"delta":{"content":"a"},"finish_reason":null}]}"#,
        r#"{"obfuscation":"x","id":"c","model":"gpt-4o","choices":[{"index":0,"delta":{"content":"bcd"},"finish_reason":null}]}"#,
        r#"{"id":"c","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"obfuscation":"abcdef"}"#,
    ];

    /// Chunks read by comparison with the last one agree with serde: each
    /// fixture stream in order, each chunk followed by the same chunk with
    /// other content (valid or not) and by random edits, through one
    /// adapter of each kind, so that most reads are by comparison.
    #[test]
    fn chunks_read_by_the_last_ones_shape_read_as_serde_does() {
        let op = Some(Operation::ChatCompletions);
        let (mut fast, mut serde) = (OpenaiAdapter::new(op), OpenaiAdapter::without_scan(op));
        let padded = PADDED.iter().map(|p| p.as_bytes().to_vec());
        let mut rng = fastrand::Rng::with_seed(30);
        let (mut variants, mut by_shape) = (0, 0);
        for data in fixture_payloads(OPENAI_FAMILY).into_iter().chain(padded) {
            let other = CONTENTS.iter().filter_map(|c| with_content(&data, c));
            let inputs: Vec<Vec<u8>> = std::iter::once(data.clone()).chain(other).collect();
            variants += inputs.len() - 1;
            let edits = (0..20).map(|_| edited(&data, b"\"\\{}[],: n0-.e1tu\x01\xc3", 2, &mut rng));
            for (n, m) in inputs
                .iter()
                .cloned()
                .chain(edits)
                .chain([data.clone()])
                .enumerate()
            {
                let hit = fast.last.read(m.trim_ascii(), true).is_some();
                by_shape += usize::from(hit && (1..inputs.len()).contains(&n));
                let a = outcome(|f, out| fast.on_frame(f, out), &m);
                let b = outcome(|f, out| serde.on_frame(f, out), &m);
                assert_eq!(a, b, "{}", String::from_utf8_lossy(&m));
            }
        }
        // Content variants are read by shape where the chunk is plain.
        assert!(
            by_shape * 4 > variants,
            "{by_shape} of {variants} content variants read by the last chunk's shape"
        );
    }

    #[test]
    fn a_padded_stream_is_read_by_shape_after_its_first_content_chunk() {
        let mut a = OpenaiAdapter::new(Some(Operation::ChatCompletions));
        let mut texts = Vec::new();
        let mut by_shape = Vec::new();
        for p in &PADDED[..4] {
            by_shape.push(a.last.read(p.as_bytes(), true).is_some());
            a.on_frame(
                Frame::Sse {
                    event: b"",
                    data: p.as_bytes(),
                },
                &mut |e| {
                    if let Event::Text(t) = e {
                        texts.push(t.to_owned());
                    }
                },
            )
            .expect("valid chunk");
        }
        assert_eq!(texts, [r#""Hel""#, r#""lo, there""#, r#""!""#]);
        assert_eq!(by_shape, [false, false, true, true]);
    }

    /// Whole bodies the scan must read exactly as serde does (or leave to it).
    const BODIES: &[&str] = &[
        r#"{"id":"c","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"a \"content\":\"b\" c","refusal":null},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7}}"#,
        r#"{"id":"c","model":"m","choices":[{"index":0,"message":{"content":"a"},"finish_reason":"stop"},{"index":1,"message":{"content":"b"},"finish_reason":"length"}]}"#,
        r#"{"choices":[{"message":{"content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{}"}}]},"finish_reason":"tool_calls"}]}"#,
        r#"{"choices":[{"message":{"content":null,"tool_calls":[{"function":{"name":"","arguments":""}},{"function":null}]}}]}"#,
        r#"{"choices":[{"message":{"content":"","tool_calls":[]}},{"message":{"reasoning_content":"r","content":"x"}}]}"#,
        r#"{"choices":[{"message":{"content":[{"type":"text","text":"x"}],"reasoning":"r"}}]}"#,
        r#"{"choices":[{"message":{"content":{"a":"}"},"refusal":"no"}}]}"#,
        r#"{"choices":[{"message":{"content":"x","content":"y"}}]}"#,
        r#"{"choices":[{"message":{"content":"\n\"q\"\\ caf\u00e9"}}]}"#,
        r#"{"choices":[{"message":{"content":"\ud83d\ude00"}}]}"#,
        r#"{"choices":[{"message":{"content":"x","audio":{"transcript":"t"}}}]}"#,
        r#"{"choices":[{"message":{"content":"x","audio":null,"function_call":null}}]}"#,
        r#"{"choices":[{"message":{"function_call":{"arguments":"x"}}}]}"#,
        r#"{"choices":[{"delta":{"content":"x"}}]}"#,
        r#"{"choices":[{"text":"x","finish_reason":"stop"}]}"#,
        r#"{"choices":[null]}"#,
        r#"{"choices":[{"message":null,"finish_reason":null}],"usage":null,"error":null}"#,
        r#"{"choices":[{"message":["x"]}]}"#,
        r#"{"choices":[{"message":{"content":"x"},"finish_reason":""}]}"#,
        r#"{"choices":[{"message":{"content":"x"},"finish_reason":5}]}"#,
        r#"{"choices":[{"message":{"content":"x"},"finish_reason":"a\u0062"}]}"#,
        r#"{"choices":[{"message":{"content":"x"},"finish_reason":"s"},{"finish_reason":"t"},{"finish_reason":"u"},{"finish_reason":"v"},{"finish_reason":"w"},{"finish_reason":"x"},{"finish_reason":"y"},{"finish_reason":"z"},{"finish_reason":"a"},{"finish_reason":"b"},{"finish_reason":"c"},{"finish_reason":"d"},{"finish_reason":"e"},{"finish_reason":"f"},{"finish_reason":"g"},{"finish_reason":"h"},{"finish_reason":"i"}]}"#,
        r#"{"id":"c\u0031","model":"m","choices":[]}"#,
        r#"{"id":1,"choices":[]}"#,
        r#"{"model":"","id":"","choices":[]}"#,
        r#"{"model":"m","model":"n","choices":[]}"#,
        r#"{"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":0,"prompt_tokens_details":{"cached_tokens":1,"audio_tokens":null},"completion_tokens_details":null}}"#,
        r#"{"choices":[],"usage":{"input_tokens":5,"output_tokens":6,"input_tokens_details":{"cached_tokens":2},"output_tokens_details":{"reasoning_tokens":3,"audio_tokens":1}}}"#,
        r#"{"choices":[],"usage":{"prompt_tokens":5,"input_tokens":6,"prompt_tokens_details":null,"input_tokens_details":{"cached_tokens":2}}}"#,
        r#"{"choices":[],"usage":{"prompt_tokens":5,"prompt_cache_hit_tokens":4,"prompt_cache_miss_tokens":1}}"#,
        r#"{"choices":[],"usage":{"prompt_tokens":-1}}"#,
        r#"{"choices":[],"usage":{"prompt_tokens":1.0}}"#,
        r#"{"choices":[],"usage":{"prompt_tokens":1e2}}"#,
        r#"{"choices":[],"usage":{"prompt_tokens":01}}"#,
        r#"{"choices":[],"usage":{"prompt_tokens":18446744073709551615}}"#,
        r#"{"choices":[],"usage":{"prompt_tokens":18446744073709551616}}"#,
        r#"{"choices":[],"usage":{"prompt_tokens":"1"}}"#,
        r#"{"choices":[],"usage":{"prompt_tokens":1,"prompt_tokens":2}}"#,
        r#"{"choices":[],"usage":{"prompt_tokens":1,"cost":0.5}}"#,
        r#"{"choices":[],"usage":{"prompt_tokens":1,"queue_time":0.5}}"#,
        r#"{"choices":[],"usage":{"prompt_tokens_details":{"cached_tokens":1,"cached_tokens":1}}}"#,
        r#"{"choices":[],"usage":[1]}"#,
        r#"{"choices":[],"usage":{"prompt_tokens":1},"service_tier":"flex"}"#,
        r#"{"choices":[],"usage":{"prompt_tokens":1},"service_tier":"unknown"}"#,
        r#"{"choices":[],"usage":{"prompt_tokens":1},"service_tier":3}"#,
        r#"{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.1,-2.5e-3,0]}],"model":"e","usage":{"prompt_tokens":8,"total_tokens":8}}"#,
        r#"{"object":"list","data":[],"usage":{"prompt_tokens":8,"completion_tokens":2}}"#,
        r#"{"id":"r","object":"response","status":"completed","error":null,"incomplete_details":null,"model":"m","output":[{"type":"message","content":[{"type":"output_text","text":"hi"}]}],"usage":{"input_tokens":1,"output_tokens":2}}"#,
        r#"{"id":"r","object":"response","status":"incomplete","incomplete_details":{"reason":"max_output_tokens"},"output":[]}"#,
        r#"{"object":"response","status":"incomplete","incomplete_details":{"reason":""}}"#,
        r#"{"object":"response","status":"incomplete","incomplete_details":{}}"#,
        r#"{"object":"response","status":"","incomplete_details":{"reason":null},"output":null}"#,
        r#"{"object":"response","incomplete_details":"x"}"#,
        r#"{"object":"response","error":{"type":"server_error"}}"#,
        r#"{"object":"response","choices":[{"message":{"content":"x"}}],"output":{}}"#,
        r#"{"error":{"message":"m","type":"invalid_request_error"}}"#,
        r#"{"type":"error","code":"E"}"#,
        r#"{"choices":[],"x_groq":{"id":"g"}}"#,
        r#"{"choices":[],"timings":{"prompt_n":1}}"#,
        r#"{"choices":[],"stats":{}}"#,
        r#"{"choices":[]} trailing"#,
        r#" { "choices" : [ { "message" : { "content" : "x" } , "logprobs" : null } ] , "created" : -1.5e3 } "#,
        r#"{"choices":[],"choices":[]}"#,
        "",
        "   ",
        "{",
        "not json",
    ];

    /// The same whole body through the scan and through serde alone.
    fn whole_scan_and_serde(body: &[u8], op: Option<Operation>) -> (Outcome, Outcome) {
        (
            json_outcome(|f, out| OpenaiAdapter::new(op).on_frame(f, out), body),
            json_outcome(
                |f, out| OpenaiAdapter::without_scan(op).on_frame(f, out),
                body,
            ),
        )
    }

    const OPERATIONS: [Option<Operation>; 4] = [
        None,
        Some(Operation::ChatCompletions),
        Some(Operation::Responses),
        Some(Operation::Embeddings),
    ];

    #[test]
    fn whole_body_scan_reads_fixtures_and_tricky_shapes_as_serde_does() {
        let fixtures = fixture_bodies(OPENAI_FAMILY);
        assert!(
            fixtures.len() >= 5,
            "whole-body fixtures: {}",
            fixtures.len()
        );
        let mut scanned = 0;
        for body in fixtures
            .iter()
            .copied()
            .chain(BODIES.iter().map(|s| s.as_bytes()))
        {
            for op in OPERATIONS {
                let (scan, serde) = whole_scan_and_serde(body, op);
                assert_eq!(scan, serde, "{op:?} {}", String::from_utf8_lossy(body));
            }
            scanned += usize::from(WholeBody::scan(body).is_some());
        }
        // The plain OpenAI bodies take the scan; Azure's error, llama.cpp's
        // timings and LM Studio's stats are left to serde.
        for name in [
            "openai/chat.json",
            "openai/responses.json",
            "openai/embeddings.json",
        ] {
            assert!(
                WholeBody::scan(fixture(name).body).is_some(),
                "{name} scanned"
            );
        }
        // Most shapes above are there to be left to serde; the plain ones
        // (32 when written) must still take the scan.
        assert!(scanned >= 30, "{scanned} bodies scanned");
    }

    #[test]
    fn whole_body_scan_reads_mutated_bodies_as_serde_does() {
        let fixtures = fixture_bodies(OPENAI_FAMILY);
        let inputs = fixtures
            .iter()
            .copied()
            .chain(BODIES.iter().map(|s| s.as_bytes()));
        for (i, body) in inputs.enumerate() {
            for m in mutations(body, 1000 + i as u64, 200) {
                let op = OPERATIONS[i % OPERATIONS.len()];
                let (scan, serde) = whole_scan_and_serde(&m, op);
                assert_eq!(scan, serde, "{op:?} {}", String::from_utf8_lossy(&m));
            }
        }
    }

    #[test]
    fn whole_body_scan_takes_the_bench_body() {
        // The simulator's answer, the shape of most non-streamed traffic.
        let body = br#"{"id":"chatcmpl-1","object":"chat.completion","created":1700000000,"model":"sim-1","choices":[{"index":0,"message":{"role":"assistant","content":"lorem ipsum dolor","refusal":null},"logprobs":null,"finish_reason":"length"}],"usage":{"prompt_tokens":12,"completion_tokens":100,"total_tokens":112}}"#;
        assert!(WholeBody::scan(body).is_some(), "scanned");
        let s = json(std::str::from_utf8(body).expect("UTF-8")).expect("valid");
        assert_eq!(
            (s.pieces, s.usage.input, s.usage.output, s.finish),
            (1, Some(12), Some(100), vec!["length".to_owned()])
        );
    }

    #[test]
    fn malformed_payloads_are_errors() {
        assert!(sse(&["{\"choices\":"]).is_err(), "truncated JSON");
        assert!(sse(&["not json"]).is_err(), "not JSON");
        assert!(
            sse(&[r#"{"usage":{"prompt_tokens":-1}}"#]).is_err(),
            "negative count"
        );
        assert_eq!(
            sse(&["", "  "]).expect("blank data is skipped"),
            Summary::default()
        );
    }
}
