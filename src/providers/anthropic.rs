//! Anthropic adapter: Messages API frames (streamed events or a whole
//! message) in, metering events out.
//!
//! The payload's own `type` field decides what a frame is, since some
//! proxies drop the SSE `event:` line. Input usage is reported as the total
//! prompt size: Anthropic's `input_tokens` excludes cache reads and writes,
//! so they are added back, matching OpenAI's `prompt_tokens` and the GenAI
//! conventions (cache figures stay available on their own as well).
//!
//! The events that make up almost all of a stream (`content_block_delta`,
//! `ping`, `content_block_stop`, `message_stop`) are read by a validating
//! scan (`scan.rs`); everything else, and anything unusual, by serde.

use serde::Deserialize;
use serde_json::value::RawValue;

use super::scan::{Scan, Seen};
use super::spec::{FrameAdapter, ProviderSpec, Wire, never_response, no_model, whole_json};
use super::wire::{
    Fold, HasContent, Str, deserialize_by_fold, non_empty, non_empty_raw, service_tier,
};
use super::{AdapterError, ContentKind, Event, ServerTool, ServiceTier, Usage};
use super::{Operation, ProviderKind};
use crate::framing::Frame;

/// Adapter state for one Anthropic response: the input figures reported
/// so far, since `message_delta` may repeat only some of them.
#[derive(Debug, Default)]
pub struct AnthropicAdapter {
    uncached_input: Option<u64>,
    cache_read: Option<u64>,
    cache_creation: Option<u64>,
    cache_write_5m: Option<u64>,
    cache_write_1h: Option<u64>,
    /// Take the serde path only (tests that compare it with the scan).
    no_scan: bool,
}

impl AnthropicAdapter {
    /// A fresh adapter for one response.
    pub fn new() -> Self {
        AnthropicAdapter::default()
    }

    /// An adapter that always takes the serde path, to check the scan
    /// against it.
    #[cfg(test)]
    pub(super) fn without_scan() -> Self {
        AnthropicAdapter {
            no_scan: true,
            ..AnthropicAdapter::default()
        }
    }
}

impl FrameAdapter for AnthropicAdapter {
    /// Map one frame to zero or more events.
    fn on_frame(
        &mut self,
        frame: Frame<'_>,
        out: &mut dyn FnMut(Event<'_>),
    ) -> Result<(), AdapterError> {
        let data = match frame {
            Frame::Sse { data, .. } => data.trim_ascii(),
            Frame::Json(body) => body,
            Frame::AwsEvent { .. } => {
                return Err(AdapterError("eventstream frame in an Anthropic stream"));
            }
        };
        if data.is_empty() {
            return Ok(());
        }
        if !self.no_scan {
            if let Frame::Json(_) = frame {
                if let Some(m) = WholeMessage::scan(data) {
                    let view = MessageView {
                        id: m.id,
                        model: m.model,
                        content: m.content,
                        tools: &[],
                        usage: m.usage.as_ref(),
                        stop_reason: m.stop_reason,
                    };
                    self.on_message(&view, out);
                    return Ok(());
                }
            }
            if let Some(event) = StreamEvent::scan(data) {
                event.emit(out);
                return Ok(());
            }
        }
        let doc: Doc<'_> = serde_json::from_slice(data)
            .map_err(|_| AdapterError("malformed Anthropic JSON payload"))?;
        match doc.kind.as_ref().map(Str::as_str) {
            Some("message_start") => {
                if let Some(m) = &doc.message {
                    let view = MessageView {
                        id: m.id.as_ref().map(Str::as_str),
                        model: m.model.as_ref().map(Str::as_str),
                        content: false,
                        tools: &[],
                        usage: m.usage.as_ref(),
                        stop_reason: m.stop_reason.as_ref().map(Str::as_str),
                    };
                    self.on_message(&view, out);
                }
            }
            Some("content_block_start") => {
                if let Some(block) = &doc.content_block {
                    if let Some(kind) = block.start_kind() {
                        out(Event::Content { pieces: 1, kind });
                    }
                    if let Some(tool) = block.tool() {
                        tool.emit(out);
                    }
                }
            }
            Some("content_block_delta") => {
                if let Some(delta) = &doc.delta {
                    if let Some(kind) = delta.kind() {
                        out(Event::Content { pieces: 1, kind });
                        if let Some(text) = delta.text() {
                            out(Event::Text(text.get()));
                        }
                    }
                }
            }
            Some("message_delta") => {
                if let Some(reason) = doc.delta.as_ref().and_then(|d| d.stop_reason.as_ref()) {
                    out(Event::FinishReason(reason.as_str()));
                }
                if let Some(usage) = &doc.usage {
                    out(Event::Usage(self.usage(usage)));
                    usage.emit_server_tools(out);
                }
            }
            Some("message_stop") => out(Event::Done),
            Some("error") => out(Event::Error {
                kind: &error_kind(doc.error),
            }),
            Some("message") | None => {
                let view = MessageView {
                    id: doc.id.as_ref().map(Str::as_str),
                    model: doc.model.as_ref().map(Str::as_str),
                    content: doc.content.as_ref().is_some_and(|c| c.any),
                    tools: doc.content.as_ref().map_or(&[], |c| &c.tools),
                    usage: doc.usage.as_ref(),
                    stop_reason: doc.stop_reason.as_ref().map(Str::as_str),
                };
                self.on_message(&view, out);
            }
            Some(_) => {} // ping, content_block_stop, future event types
        }
        Ok(())
    }
}

impl AnthropicAdapter {
    /// A message object: the whole body (scanned or not), or the shell
    /// in `message_start`.
    fn on_message(&mut self, m: &MessageView<'_>, out: &mut dyn FnMut(Event<'_>)) {
        if let Some(model) = m.model.filter(|s| !s.is_empty()) {
            out(Event::Model(model));
        }
        if let Some(id) = m.id.filter(|s| !s.is_empty()) {
            out(Event::ResponseId(id));
        }
        if m.content {
            out(Event::ONE_VISIBLE);
        }
        for tool in m.tools {
            tool.emit(out);
        }
        if let Some(usage) = m.usage {
            out(Event::Usage(self.usage(usage)));
            usage.emit_server_tools(out);
        }
        if let Some(reason) = m.stop_reason {
            out(Event::FinishReason(reason));
        }
    }

    /// Fold a usage report (cumulative; later figures win) into totals.
    fn usage(&mut self, u: &WireUsage) -> Usage {
        let keep = |old: &mut Option<u64>, new: Option<u64>| {
            if new.is_some() {
                *old = new;
            }
        };
        keep(&mut self.uncached_input, u.input_tokens);
        keep(&mut self.cache_read, u.cache_read_input_tokens);
        keep(&mut self.cache_creation, u.cache_creation_input_tokens);
        if let Some(split) = &u.cache_creation {
            keep(&mut self.cache_write_5m, split.ephemeral_5m_input_tokens);
            keep(&mut self.cache_write_1h, split.ephemeral_1h_input_tokens);
        }
        let cached = self
            .cache_read
            .unwrap_or(0)
            .saturating_add(self.cache_creation.unwrap_or(0));
        Usage {
            input: self.uncached_input.map(|i| i.saturating_add(cached)),
            output: u.output_tokens,
            cache_read: self.cache_read,
            cache_creation: self.cache_creation,
            reasoning: None,
            cache_write_5m: self.cache_write_5m,
            cache_write_1h: self.cache_write_1h,
            service_tier: u.service_tier,
            ..Usage::default()
        }
    }
}

/// `error.type` of an error event or body, else "error".
fn error_kind<'a>(error: Option<&'a RawValue>) -> std::borrow::Cow<'a, str> {
    #[derive(Deserialize)]
    struct ErrorObject<'a> {
        #[serde(borrow, rename = "type")]
        kind: Option<Str<'a>>,
    }
    error
        .and_then(|e| serde_json::from_str::<ErrorObject<'a>>(e.get()).ok())
        .and_then(|e| e.kind)
        .filter(|k| !k.as_str().is_empty())
        .map_or(std::borrow::Cow::Borrowed("error"), |k| k.0)
}

/// The fields of one payload that metering reads.
#[derive(Deserialize)]
struct Doc<'a> {
    #[serde(borrow, rename = "type")]
    kind: Option<Str<'a>>,
    #[serde(borrow)]
    message: Option<MessageFields<'a>>,
    #[serde(borrow)]
    content_block: Option<Block<'a>>,
    #[serde(borrow)]
    delta: Option<Delta<'a>>,
    usage: Option<WireUsage>,
    #[serde(borrow)]
    error: Option<&'a RawValue>,
    // A whole (non-streamed) message's fields share the top level.
    #[serde(borrow)]
    id: Option<Str<'a>>,
    #[serde(borrow)]
    model: Option<Str<'a>>,
    #[serde(borrow)]
    content: Option<Blocks<'a>>,
    #[serde(borrow)]
    stop_reason: Option<Str<'a>>,
}

/// The `message` object in `message_start` (its content is always empty).
#[derive(Deserialize)]
struct MessageFields<'a> {
    #[serde(borrow)]
    id: Option<Str<'a>>,
    #[serde(borrow)]
    model: Option<Str<'a>>,
    usage: Option<WireUsage>,
    #[serde(borrow)]
    stop_reason: Option<Str<'a>>,
}

/// A message's metered fields, wherever they were found (a scanned
/// message has no tool blocks: the scan leaves those to serde).
struct MessageView<'s> {
    id: Option<&'s str>,
    model: Option<&'s str>,
    /// Some content block carries output.
    content: bool,
    tools: &'s [ToolBlock<'s>],
    usage: Option<&'s WireUsage>,
    stop_reason: Option<&'s str>,
}

/// A content block, in a whole message or a `content_block_start`.
#[derive(Deserialize)]
struct Block<'a> {
    #[serde(borrow, rename = "type")]
    kind: Option<Str<'a>>,
    #[serde(borrow)]
    text: Option<&'a RawValue>,
    #[serde(borrow)]
    thinking: Option<&'a RawValue>,
    /// `redacted_thinking` payload.
    #[serde(borrow)]
    data: Option<&'a RawValue>,
    /// A tool's name (`tool_use`, `server_tool_use`).
    #[serde(borrow)]
    name: Option<Str<'a>>,
}

/// A tool block: a client call (`tool_use`, with its name) or a
/// provider-run tool (`server_tool_use`).
enum ToolBlock<'a> {
    Client(Option<Str<'a>>),
    Server(ServerTool),
}

impl ToolBlock<'_> {
    fn emit(&self, out: &mut dyn FnMut(Event<'_>)) {
        match self {
            ToolBlock::Client(name) => out(Event::ToolCall {
                name: name.as_ref().map(Str::as_str),
            }),
            ToolBlock::Server(tool) => out(Event::ServerToolCalls {
                tool: *tool,
                calls: 1,
            }),
        }
    }
}

/// A message's `content`, folded while parsing: whether any block carries
/// output (`Block::has_content`), and its tool blocks (allocates only
/// when there are some).
#[derive(Default)]
struct Blocks<'a> {
    any: bool,
    tools: Vec<ToolBlock<'a>>,
}

impl<'de: 'a, 'a> Fold<'de> for Blocks<'a> {
    type Item = Block<'a>;
    const EXPECTING: &'static str = "an array of content blocks";
    fn add(&mut self, mut block: Block<'a>) {
        self.any |= block.has_content();
        if let Some(tool) = block.take_tool() {
            self.tools.push(tool);
        }
    }
}

deserialize_by_fold!(Blocks<'a>);

/// The provider-run tool a `server_tool_use` block's name stands for
/// (`None` for ones not counted).
fn server_tool(name: &str) -> Option<ServerTool> {
    match name {
        "web_search" => Some(ServerTool::WebSearch),
        "web_fetch" => Some(ServerTool::WebFetch),
        "code_execution" | "bash_code_execution" | "text_editor_code_execution" => {
            Some(ServerTool::CodeInterpreter)
        }
        _ => None,
    }
}

impl<'a> Block<'a> {
    /// A block start counts only when it already carries text; a tool
    /// call's start (name only) does not, its arguments follow as deltas.
    /// `thinking` and `redacted_thinking` (`data`) are reasoning.
    fn start_kind(&self) -> Option<ContentKind> {
        ContentKind::of(
            non_empty(self.text),
            non_empty(self.thinking) || non_empty(self.data),
        )
    }

    fn starts_with_content(&self) -> bool {
        self.start_kind().is_some()
    }

    /// The tool this block is, if any (borrowing its name).
    fn tool(&self) -> Option<ToolBlock<'_>> {
        match self.kind.as_ref()?.as_str() {
            "tool_use" => Some(ToolBlock::Client(
                self.name
                    .as_ref()
                    .map(|n| Str(std::borrow::Cow::Borrowed(n.as_str()))),
            )),
            "server_tool_use" => server_tool(self.name.as_ref()?.as_str()).map(ToolBlock::Server),
            _ => None,
        }
    }

    /// The tool this block is, if any, taking its name.
    fn take_tool(&mut self) -> Option<ToolBlock<'a>> {
        match self.kind.as_ref()?.as_str() {
            "tool_use" => Some(ToolBlock::Client(self.name.take())),
            "server_tool_use" => server_tool(self.name.as_ref()?.as_str()).map(ToolBlock::Server),
            _ => None,
        }
    }
}

impl HasContent for Block<'_> {
    /// In a whole message, a tool call is output in itself.
    fn has_content(&self) -> bool {
        let tool = self
            .kind
            .as_ref()
            .is_some_and(|k| matches!(k.as_str(), "tool_use" | "server_tool_use" | "mcp_tool_use"));
        tool || self.starts_with_content()
    }
}

/// A `content_block_delta` or `message_delta` delta.
#[derive(Deserialize)]
struct Delta<'a> {
    #[serde(borrow)]
    text: Option<&'a RawValue>,
    #[serde(borrow)]
    partial_json: Option<&'a RawValue>,
    #[serde(borrow)]
    thinking: Option<&'a RawValue>,
    #[serde(borrow)]
    stop_reason: Option<Str<'a>>,
}

impl<'a> Delta<'a> {
    /// The piece's text (or tool-input JSON, or thinking) as a JSON string literal.
    fn text(&self) -> Option<&'a RawValue> {
        [self.text, self.partial_json, self.thinking]
            .into_iter()
            .flatten()
            .find(|raw| non_empty(Some(raw)) && raw.get().starts_with('"'))
    }

    /// Text or tool arguments are visible, thinking is reasoning; a
    /// `signature_delta` is not output.
    fn kind(&self) -> Option<ContentKind> {
        ContentKind::of(
            non_empty(self.text) || non_empty(self.partial_json),
            non_empty(self.thinking),
        )
    }
}

/// A frequent stream event, borrowed from the payload.
enum StreamEvent<'a> {
    /// A `content_block_delta`: the kind of content it carries, and its
    /// text as a JSON string literal (what `Delta::kind` and `Delta::text`
    /// say).
    Delta {
        kind: Option<ContentKind>,
        text: Option<&'a str>,
    },
    /// `ping`, `content_block_stop`: nothing to meter.
    Quiet,
    /// `message_stop`.
    Stop,
}

impl<'a> StreamEvent<'a> {
    /// `None` (take the serde path) unless the payload is valid JSON, one
    /// of the event types above, with no field but `type`, `delta` and
    /// ones serde ignores.
    fn scan(data: &'a [u8]) -> Option<StreamEvent<'a>> {
        let mut seen = Seen::default();
        let mut kind = None;
        let mut delta = None;
        Scan::document(data, |s, key| match key {
            "type" => {
                seen.first(0)?;
                kind = s.str_or_null()?;
                Some(())
            }
            "delta" => {
                seen.first(1)?;
                delta = s.or_null(scan_delta)?;
                Some(())
            }
            "message" | "content_block" | "usage" | "error" | "id" | "model" | "content"
            | "stop_reason" => None,
            _ => s.skip(1),
        })?;
        match kind? {
            "content_block_delta" => {
                let texts: [Option<&str>; 3] = delta.unwrap_or_default();
                let has = |t: Option<&str>| t.is_some_and(non_empty_raw);
                Some(StreamEvent::Delta {
                    kind: ContentKind::of(has(texts[0]) || has(texts[1]), has(texts[2])),
                    text: texts
                        .into_iter()
                        .flatten()
                        .find(|raw| non_empty_raw(raw) && raw.starts_with('"')),
                })
            }
            "ping" | "content_block_stop" => Some(StreamEvent::Quiet),
            "message_stop" => Some(StreamEvent::Stop),
            _ => None,
        }
    }

    /// The events the serde path gives for the same payload.
    fn emit(&self, out: &mut dyn FnMut(Event<'_>)) {
        match *self {
            StreamEvent::Delta { kind, text } => {
                if let Some(kind) = kind {
                    out(Event::Content { pieces: 1, kind });
                    if let Some(text) = text {
                        out(Event::Text(text));
                    }
                }
            }
            StreamEvent::Quiet => {}
            StreamEvent::Stop => out(Event::Done),
        }
    }
}

/// A delta's `text`, `partial_json` and `thinking` (in `Delta::text`'s
/// order), its `stop_reason` checked to be a string as serde wants.
fn scan_delta<'a>(s: &mut Scan<'a>) -> Option<[Option<&'a str>; 3]> {
    let mut seen = Seen::default();
    let mut texts = [None; 3];
    s.object(2, |s, key| {
        let field = match key {
            "text" => 0,
            "partial_json" => 1,
            "thinking" => 2,
            "stop_reason" => {
                seen.first(3)?;
                return s.str_or_null().map(drop);
            }
            _ => return s.skip(3),
        };
        seen.first(field)?;
        texts[field as usize] = s.raw(3)?;
        Some(())
    })?;
    Some(texts)
}

/// A whole (non-streamed) message, borrowed from the body: what
/// `MessageView` holds for it. Read by the validating scan instead of
/// serde, since the body is read once whole and serde's cost grows with
/// its size.
#[derive(Default)]
struct WholeMessage<'a> {
    id: Option<&'a str>,
    model: Option<&'a str>,
    /// Some content block carries output (`AnyContent<Block>`).
    content: bool,
    usage: Option<WireUsage>,
    stop_reason: Option<&'a str>,
}

impl<'a> WholeMessage<'a> {
    /// `None` (take the serde path) unless the body is valid JSON of a
    /// message (`type` `"message"` or absent) with no error, no escapes
    /// in the strings read and counts as plain integers.
    fn scan(data: &'a [u8]) -> Option<WholeMessage<'a>> {
        let mut m = WholeMessage::default();
        let mut seen = Seen::default();
        Scan::document(data, |s, key| {
            let (bit, value) = match key {
                "id" => (0, &mut m.id),
                "model" => (1, &mut m.model),
                "stop_reason" => (2, &mut m.stop_reason),
                "type" => {
                    seen.first(3)?;
                    return matches!(s.str_or_null()?, None | Some("message")).then_some(());
                }
                "content" => {
                    seen.first(4)?;
                    m.content = s.or_null(any_block_content)?.unwrap_or(false);
                    return Some(());
                }
                "usage" => {
                    seen.first(5)?;
                    m.usage = s.or_null(scan_usage)?;
                    return Some(());
                }
                "error" => {
                    seen.first(6)?;
                    return s.null()?.then_some(());
                }
                "message" | "content_block" | "delta" => return None,
                _ => return s.skip(1),
            };
            seen.first(bit)?;
            *value = s.str_or_null()?;
            Some(())
        })?;
        Some(m)
    }
}

/// A message's `content`: whether any block carries output (what
/// `Block::has_content` says of each).
fn any_block_content(s: &mut Scan<'_>) -> Option<bool> {
    let mut any = false;
    s.array(1, |s| {
        let mut tool = false;
        let mut output = false;
        s.fields(2, ["type", "text", "thinking", "data"], |s, at| {
            if at == 0 {
                tool = matches!(
                    s.str_or_null()?,
                    Some("tool_use" | "server_tool_use" | "mcp_tool_use")
                );
            } else {
                output |= s.raw(3)?.is_some_and(non_empty_raw);
            }
            Some(())
        })?;
        any |= tool || output;
        // Tool blocks are counted and named on the serde path.
        (!tool).then_some(())
    })?;
    Some(any)
}

/// A `usage` object as serde reads it into `WireUsage`; a `service_tier`
/// that is not a plain string or `null` gives up.
fn scan_usage(s: &mut Scan<'_>) -> Option<WireUsage> {
    let mut seen = Seen::default();
    let mut u = WireUsage {
        input_tokens: None,
        output_tokens: None,
        cache_read_input_tokens: None,
        cache_creation_input_tokens: None,
        cache_creation: None,
        service_tier: None,
        server_tool_use: None,
    };
    s.object(1, |s, key| {
        let (bit, count) = match key {
            "input_tokens" => (0, &mut u.input_tokens),
            "output_tokens" => (1, &mut u.output_tokens),
            "cache_read_input_tokens" => (2, &mut u.cache_read_input_tokens),
            "cache_creation_input_tokens" => (3, &mut u.cache_creation_input_tokens),
            "cache_creation" => {
                seen.first(4)?;
                u.cache_creation = s.or_null(scan_cache_creation)?;
                return Some(());
            }
            "service_tier" => {
                seen.first(5)?;
                u.service_tier = s.str_or_null()?.and_then(ServiceTier::parse);
                return Some(());
            }
            // Provider-run tool counts are read on the serde path.
            "server_tool_use" => {
                seen.first(6)?;
                return s.null()?.then_some(());
            }
            _ => return s.skip(2),
        };
        seen.first(bit)?;
        *count = s.u64_or_null()?;
        Some(())
    })?;
    Some(u)
}

/// `usage.cache_creation`, the write split by lifetime.
fn scan_cache_creation(s: &mut Scan<'_>) -> Option<CacheCreation> {
    let [five_minutes, one_hour] = s.counts(
        2,
        ["ephemeral_5m_input_tokens", "ephemeral_1h_input_tokens"],
    )?;
    Some(CacheCreation {
        ephemeral_5m_input_tokens: five_minutes,
        ephemeral_1h_input_tokens: one_hour,
    })
}

#[derive(Deserialize)]
struct WireUsage {
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    cache_read_input_tokens: Option<u64>,
    cache_creation_input_tokens: Option<u64>,
    /// The write split by lifetime (5-minute and 1-hour rates differ).
    cache_creation: Option<CacheCreation>,
    /// `standard`, `priority` or `batch`.
    #[serde(default, deserialize_with = "service_tier")]
    service_tier: Option<ServiceTier>,
    /// Provider-run tool calls billed so far (cumulative).
    server_tool_use: Option<ServerToolUse>,
}

/// `usage.server_tool_use`: the billed provider-run tool calls.
#[derive(Deserialize)]
struct ServerToolUse {
    web_search_requests: Option<u32>,
    web_fetch_requests: Option<u32>,
}

impl WireUsage {
    /// The billed provider-run tool counts, which replace the counted blocks.
    fn emit_server_tools(&self, out: &mut dyn FnMut(Event<'_>)) {
        let Some(u) = &self.server_tool_use else {
            return;
        };
        let counts = [
            (ServerTool::WebSearch, u.web_search_requests),
            (ServerTool::WebFetch, u.web_fetch_requests),
        ];
        for (tool, calls) in counts {
            if let Some(calls) = calls {
                out(Event::ServerToolUsage { tool, calls });
            }
        }
    }
}

#[derive(Deserialize)]
struct CacheCreation {
    ephemeral_5m_input_tokens: Option<u64>,
    ephemeral_1h_input_tokens: Option<u64>,
}

/// Anthropic's Messages format, also Vertex `rawPredict`'s.
pub const WIRE: Wire = Wire {
    name: "anthropic",
    operations: &[
        Operation::Messages,
        Operation::RawPredict,
        Operation::StreamRawPredict,
        Operation::BatchResults,
    ],
    request_streams: |op, body_stream| match op {
        Operation::StreamRawPredict => true,
        Operation::RawPredict => false,
        _ => body_stream.unwrap_or(false),
    },
    adapter: |_| Box::new(AnthropicAdapter::new()),
    json_body: whole_json,
};

/// Anthropic: `/messages`, and the legacy `/complete`.
pub const SPEC: ProviderSpec = ProviderSpec {
    kind: ProviderKind::Anthropic,
    name: "anthropic",
    config_name: "anthropic",
    detect_path: |path, op| {
        matches!(op, Some(Operation::Messages | Operation::BatchResults))
            || path.ends_with("/complete")
    },
    detect_response: never_response,
    model_from_path: no_model,
    price_table: Some("anthropic"),
    wire: &WIRE,
};

#[cfg(test)]
mod tests;
