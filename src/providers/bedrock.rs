//! AWS Bedrock Runtime adapter: eventstream messages (`ConverseStream`,
//! `InvokeModelWithResponseStream`) and whole bodies (`Converse`,
//! `InvokeModel`) in, metering events out.
//!
//! `ConverseStream` events are Bedrock's own (`contentBlockDelta`,
//! `metadata` with usage and `latencyMs`). `InvokeModelWithResponseStream`
//! wraps the model family's own JSON as base64 in `chunk` events; it is
//! decoded into a reused buffer and read as Anthropic events (delegated to
//! the Anthropic adapter), OpenAI chunks (delegated), or the Llama, Titan,
//! Nova, Mistral and Cohere shapes. The last chunk carries
//! `amazon-bedrock-invocationMetrics` (token counts and server latencies)
//! whatever the family. Input tokens include cache reads and writes, as for
//! Anthropic.

use base64::Engine as _;
use serde::Deserialize;
use serde_json::value::RawValue;

use std::borrow::Cow;

use super::anthropic::AnthropicAdapter;
use super::openai::OpenaiAdapter;
use super::spec::{FrameAdapter, ProviderSpec, Wire, whole_json};
use super::wire::{AnyContent, HasContent, Named, Str, non_empty};
use super::{AdapterError, ContentKind, Event, UpstreamTiming, Usage, millis};
use super::{Operation, ProviderKind, percent_decode};
use crate::framing::Frame;

/// Adapter state for one Bedrock response.
#[derive(Debug)]
pub struct BedrockAdapter {
    /// Decoded `chunk.bytes`, reused across chunks.
    scratch: Vec<u8>,
    anthropic: AnthropicAdapter,
    openai: OpenaiAdapter,
}

impl Default for BedrockAdapter {
    fn default() -> Self {
        BedrockAdapter::new()
    }
}

impl BedrockAdapter {
    /// A fresh adapter for one response.
    pub fn new() -> Self {
        BedrockAdapter {
            scratch: Vec::new(),
            anthropic: AnthropicAdapter::new(),
            openai: OpenaiAdapter::new(None),
        }
    }
}

impl FrameAdapter for BedrockAdapter {
    /// Map one frame to zero or more events.
    fn on_frame(
        &mut self,
        frame: Frame<'_>,
        out: &mut dyn FnMut(Event<'_>),
    ) -> Result<(), AdapterError> {
        match frame {
            Frame::AwsEvent {
                message_type,
                event_type,
                payload,
            } => match message_type {
                b"event" | b"" => self.on_event(event_type, payload, out),
                b"exception" | b"error" => {
                    let kind = std::str::from_utf8(event_type)
                        .ok()
                        .filter(|k| !k.is_empty())
                        .unwrap_or("exception");
                    out(Event::Error { kind });
                    Ok(())
                }
                _ => Ok(()),
            },
            Frame::Json(body) => {
                let body = body.trim_ascii();
                if body.is_empty() {
                    return Ok(());
                }
                self.on_model_json(body, true, out)
            }
            Frame::Sse { .. } => Err(AdapterError("SSE frame in a Bedrock response")),
        }
    }
}

impl BedrockAdapter {
    fn on_event(
        &mut self,
        event_type: &[u8],
        payload: &[u8],
        out: &mut dyn FnMut(Event<'_>),
    ) -> Result<(), AdapterError> {
        if event_type == b"chunk" {
            #[derive(Deserialize)]
            struct Chunk<'a> {
                #[serde(borrow)]
                bytes: Option<Str<'a>>,
            }
            let chunk: Chunk<'_> = serde_json::from_slice(payload)
                .map_err(|_| AdapterError("malformed Bedrock chunk event"))?;
            let Some(bytes) = chunk.bytes else {
                return Ok(());
            };
            let mut scratch = std::mem::take(&mut self.scratch);
            scratch.clear();
            let decoded = base64::engine::general_purpose::STANDARD
                .decode_vec(bytes.as_str(), &mut scratch)
                .map_err(|_| AdapterError("Bedrock chunk bytes are not base64"));
            let result = decoded.and_then(|()| self.on_model_json(&scratch, false, out));
            self.scratch = scratch;
            return result;
        }
        let ev: ConverseEvent<'_> = serde_json::from_slice(payload)
            .map_err(|_| AdapterError("malformed Bedrock ConverseStream event"))?;
        match event_type {
            b"contentBlockDelta" => {
                if let Some(kind) = ev.delta.as_ref().and_then(Delta::kind) {
                    out(Event::Content { pieces: 1, kind });
                }
            }
            b"messageStop" => {
                if let Some(r) = ev.stop_reason.as_ref().filter(|r| !r.as_str().is_empty()) {
                    out(Event::FinishReason(r.as_str()));
                }
                // ConverseStream's terminal event (`metadata` with the
                // usage may still follow).
                out(Event::Done);
            }
            b"metadata" => {
                emit_usage_and_latency(ev.usage.as_ref(), ev.metrics.as_ref(), out);
            }
            b"contentBlockStart" => {
                // A tool call starts with its name; its input follows as deltas.
                if let Some(tool) = ev.start.as_ref().and_then(|s| s.tool_use.as_ref()) {
                    out(Event::ToolCall {
                        name: tool.name.as_ref().map(Str::as_str),
                    });
                }
            }
            _ => {} // messageStart, contentBlockStop
        }
        Ok(())
    }

    /// A model family's JSON: a whole `Converse`/`InvokeModel` body, or one
    /// decoded `InvokeModelWithResponseStream` chunk.
    fn on_model_json(
        &mut self,
        data: &[u8],
        whole: bool,
        out: &mut dyn FnMut(Event<'_>),
    ) -> Result<(), AdapterError> {
        let doc: ModelJson<'_> = serde_json::from_slice(data)
            .map_err(|_| AdapterError("malformed Bedrock model JSON"))?;
        if doc.kind.is_some() {
            self.anthropic.on_frame(Frame::Json(data), out)?;
        } else if doc.choices.is_some() {
            let frame = if whole {
                Frame::Json(data)
            } else {
                Frame::Sse { event: b"", data }
            };
            self.openai.on_frame(frame, out)?;
        } else if doc.emit_family(out) && !whole {
            // A model family's stop reason ends its stream.
            out(Event::Done);
        }
        if let Some(m) = &doc.invocation_metrics {
            m.emit(out);
            if !whole {
                // Bedrock adds its metrics to the last chunk of every
                // family's stream.
                out(Event::Done);
            }
        }
        Ok(())
    }
}

/// Bedrock's own usage and latency (Converse `usage`/`metrics`, or Nova's
/// `metadata`).
fn emit_usage_and_latency(
    usage: Option<&ConverseUsage>,
    metrics: Option<&Metrics>,
    out: &mut dyn FnMut(Event<'_>),
) {
    if let Some(u) = usage {
        out(Event::Usage(u.to_usage()));
    }
    if let Some(total) = metrics.and_then(|m| m.latency_ms).and_then(millis) {
        out(Event::UpstreamTiming(UpstreamTiming {
            total: Some(total),
            ..UpstreamTiming::default()
        }));
    }
}

/// One ConverseStream event payload (each event type uses a few of these).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ConverseEvent<'a> {
    #[serde(borrow)]
    delta: Option<Delta<'a>>,
    #[serde(borrow)]
    stop_reason: Option<Str<'a>>,
    usage: Option<ConverseUsage>,
    metrics: Option<Metrics>,
    /// `contentBlockStart`'s start (a tool call's name).
    #[serde(borrow)]
    start: Option<BlockStart<'a>>,
}

/// A `contentBlockStart`'s `start`.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct BlockStart<'a> {
    #[serde(borrow)]
    tool_use: Option<Named<'a>>,
}

/// A `contentBlockDelta`'s delta: text, tool input or reasoning text are
/// output; a reasoning signature is not.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Delta<'a> {
    #[serde(borrow)]
    text: Option<&'a RawValue>,
    #[serde(borrow)]
    tool_use: Option<ToolUseDelta<'a>>,
    #[serde(borrow)]
    reasoning_content: Option<ReasoningDelta<'a>>,
}

impl Delta<'_> {
    /// Text or tool input is visible; reasoning text (or its redacted
    /// form) is reasoning; `None` for a signature-only or empty delta.
    fn kind(&self) -> Option<ContentKind> {
        ContentKind::of(
            non_empty(self.text) || self.tool_use.as_ref().is_some_and(|t| non_empty(t.input)),
            self.reasoning_content
                .as_ref()
                .is_some_and(|r| non_empty(r.text) || non_empty(r.redacted_content)),
        )
    }
}

#[derive(Deserialize)]
struct ToolUseDelta<'a> {
    #[serde(borrow)]
    input: Option<&'a RawValue>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ReasoningDelta<'a> {
    #[serde(borrow)]
    text: Option<&'a RawValue>,
    #[serde(borrow)]
    redacted_content: Option<&'a RawValue>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ConverseUsage {
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    cache_read_input_tokens: Option<u64>,
    cache_write_input_tokens: Option<u64>,
}

impl ConverseUsage {
    fn to_usage(&self) -> Usage {
        let cached = self
            .cache_read_input_tokens
            .unwrap_or(0)
            .saturating_add(self.cache_write_input_tokens.unwrap_or(0));
        Usage {
            input: self.input_tokens.map(|i| i.saturating_add(cached)),
            output: self.output_tokens,
            cache_read: self.cache_read_input_tokens,
            cache_creation: self.cache_write_input_tokens,
            reasoning: None,
            ..Usage::default()
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Metrics {
    latency_ms: Option<f64>,
}

/// `amazon-bedrock-invocationMetrics`, in the last chunk of every
/// InvokeModelWithResponseStream response.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct InvocationMetrics {
    input_token_count: Option<u64>,
    output_token_count: Option<u64>,
    cache_read_input_token_count: Option<u64>,
    cache_write_input_token_count: Option<u64>,
    invocation_latency: Option<f64>,
    first_byte_latency: Option<f64>,
}

impl InvocationMetrics {
    fn emit(&self, out: &mut dyn FnMut(Event<'_>)) {
        let usage = ConverseUsage {
            input_tokens: self.input_token_count,
            output_tokens: self.output_token_count,
            cache_read_input_tokens: self.cache_read_input_token_count,
            cache_write_input_tokens: self.cache_write_input_token_count,
        };
        if usage.input_tokens.is_some() || usage.output_tokens.is_some() {
            out(Event::Usage(usage.to_usage()));
        }
        let timing = UpstreamTiming {
            ttft: self.first_byte_latency.and_then(millis),
            total: self.invocation_latency.and_then(millis),
            ..UpstreamTiming::default()
        };
        if !timing.is_empty() {
            out(Event::UpstreamTiming(timing));
        }
    }
}

/// The fields of every model family's JSON that metering reads.
#[derive(Deserialize)]
struct ModelJson<'a> {
    /// Anthropic events and messages.
    #[serde(borrow, rename = "type")]
    kind: Option<&'a RawValue>,
    /// OpenAI-format models (gpt-oss, some Mistral models).
    #[serde(borrow)]
    choices: Option<&'a RawValue>,
    #[serde(rename = "amazon-bedrock-invocationMetrics")]
    invocation_metrics: Option<InvocationMetrics>,
    // Meta Llama.
    #[serde(borrow)]
    generation: Option<&'a RawValue>,
    prompt_token_count: Option<u64>,
    generation_token_count: Option<u64>,
    #[serde(borrow)]
    stop_reason: Option<Str<'a>>,
    // Amazon Titan.
    #[serde(borrow, rename = "outputText")]
    output_text: Option<&'a RawValue>,
    #[serde(rename = "inputTextTokenCount")]
    input_text_token_count: Option<u64>,
    #[serde(rename = "totalOutputTextTokenCount")]
    total_output_text_token_count: Option<u64>,
    #[serde(borrow, rename = "completionReason")]
    completion_reason: Option<Str<'a>>,
    #[serde(borrow)]
    results: Option<Vec<TitanResult<'a>>>,
    // Mistral (`outputs`), Cohere Command (`generations`) and Command R (`text`).
    #[serde(borrow)]
    outputs: Option<Vec<MistralOutput<'a>>>,
    #[serde(borrow)]
    generations: Option<AnyContent<TextItem<'a>>>,
    #[serde(borrow)]
    text: Option<&'a RawValue>,
    #[serde(borrow)]
    finish_reason: Option<Str<'a>>,
    // Amazon Nova streamed chunks: ConverseStream events keyed by name.
    #[serde(borrow, rename = "contentBlockDelta")]
    content_block_delta: Option<ConverseEvent<'a>>,
    #[serde(borrow, rename = "messageStop")]
    message_stop: Option<ConverseEvent<'a>>,
    metadata: Option<NovaMetadata>,
    // A whole Converse (or Nova InvokeModel) body.
    #[serde(borrow)]
    output: Option<ConverseOutput<'a>>,
    usage: Option<ConverseUsage>,
    metrics: Option<Metrics>,
    #[serde(borrow, rename = "stopReason")]
    stop_reason_camel: Option<Str<'a>>,
}

impl ModelJson<'_> {
    /// Events of the families tokentap reads itself (not Anthropic/OpenAI).
    /// Emit a model family's events; whether it gave a stop reason.
    fn emit_family(&self, out: &mut dyn FnMut(Event<'_>)) -> bool {
        let titan_results = self
            .results
            .as_ref()
            .is_some_and(|r| r.iter().any(|t| non_empty(t.output_text)));
        let content = non_empty(self.generation)
            || non_empty(self.output_text)
            || titan_results
            || self
                .outputs
                .as_ref()
                .is_some_and(|o| o.iter().any(|m| non_empty(m.text)))
            || self.generations.as_ref().is_some_and(|g| g.0)
            || non_empty(self.text)
            || self
                .output
                .as_ref()
                .and_then(|o| o.message.as_ref())
                .and_then(|m| m.content.as_ref())
                .is_some_and(|c| c.iter().any(HasContent::has_content));
        // Nova's streamed chunks carry ConverseStream deltas, reasoning included.
        let nova = self
            .content_block_delta
            .as_ref()
            .and_then(|e| e.delta.as_ref())
            .and_then(Delta::kind);
        let kind = ContentKind::of(
            content || nova.is_some_and(ContentKind::is_visible),
            nova.is_some_and(ContentKind::is_reasoning),
        );
        if let Some(kind) = kind {
            out(Event::Content { pieces: 1, kind });
        }
        let blocks = self.output.as_ref().and_then(|o| o.message.as_ref());
        for block in blocks
            .and_then(|m| m.content.as_ref())
            .into_iter()
            .flatten()
        {
            if let Some(tool) = block.tool_use.filter(|t| non_empty(Some(t))) {
                let name = Named::of(tool);
                out(Event::ToolCall {
                    name: name.as_ref().map(Str::as_str),
                });
            }
        }
        self.emit_family_usage(out);
        let nova_stop = self
            .message_stop
            .as_ref()
            .and_then(|m| m.stop_reason.as_ref());
        let mistral_stop = self
            .outputs
            .as_ref()
            .and_then(|o| o.first())
            .and_then(|m| m.stop_reason.as_ref());
        let titan_stop = self
            .results
            .as_ref()
            .and_then(|r| r.first())
            .and_then(|t| t.completion_reason.as_ref());
        let reason = [
            self.stop_reason.as_ref(),
            self.completion_reason.as_ref(),
            self.finish_reason.as_ref(),
            self.stop_reason_camel.as_ref(),
            nova_stop,
            titan_stop,
            mistral_stop,
        ]
        .into_iter()
        .flatten()
        .find(|r| !r.as_str().is_empty());
        if let Some(r) = reason {
            out(Event::FinishReason(r.as_str()));
        }
        reason.is_some()
    }

    fn emit_family_usage(&self, out: &mut dyn FnMut(Event<'_>)) {
        let titan_output = self
            .results
            .as_ref()
            .map(|r| r.iter().filter_map(|t| t.token_count).sum::<u64>());
        let input = self.prompt_token_count.or(self.input_text_token_count);
        let output = self
            .generation_token_count
            .or(self.total_output_text_token_count)
            .or(titan_output);
        if input.is_some() || output.is_some() {
            out(Event::Usage(Usage {
                input,
                output,
                ..Usage::default()
            }));
        }
        let nova = self.metadata.as_ref();
        let usage = self.usage.as_ref().or(nova.and_then(|m| m.usage.as_ref()));
        let metrics = self
            .metrics
            .as_ref()
            .or(nova.and_then(|m| m.metrics.as_ref()));
        emit_usage_and_latency(usage, metrics, out);
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct TitanResult<'a> {
    token_count: Option<u64>,
    #[serde(borrow)]
    output_text: Option<&'a RawValue>,
    #[serde(borrow)]
    completion_reason: Option<Str<'a>>,
}

#[derive(Deserialize)]
struct MistralOutput<'a> {
    #[serde(borrow)]
    text: Option<&'a RawValue>,
    #[serde(borrow)]
    stop_reason: Option<Str<'a>>,
}

#[derive(Deserialize)]
struct TextItem<'a> {
    #[serde(borrow)]
    text: Option<&'a RawValue>,
}

impl HasContent for TextItem<'_> {
    fn has_content(&self) -> bool {
        non_empty(self.text)
    }
}

#[derive(Deserialize)]
struct NovaMetadata {
    usage: Option<ConverseUsage>,
    metrics: Option<Metrics>,
}

#[derive(Deserialize)]
struct ConverseOutput<'a> {
    #[serde(borrow)]
    message: Option<ConverseMessage<'a>>,
}

#[derive(Deserialize)]
struct ConverseMessage<'a> {
    /// A whole message's blocks (read once per response).
    #[serde(borrow)]
    content: Option<Vec<ContentBlock<'a>>>,
}

/// A whole message's content block: text, a tool call or reasoning.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ContentBlock<'a> {
    #[serde(borrow)]
    text: Option<&'a RawValue>,
    #[serde(borrow)]
    tool_use: Option<&'a RawValue>,
    #[serde(borrow)]
    reasoning_content: Option<&'a RawValue>,
}

impl HasContent for ContentBlock<'_> {
    fn has_content(&self) -> bool {
        non_empty(self.text) || non_empty(self.tool_use) || non_empty(self.reasoning_content)
    }
}

/// Bedrock Runtime's format: AWS eventstream, or whole JSON.
pub const WIRE: Wire = Wire {
    name: "bedrock",
    operations: &[
        Operation::Converse,
        Operation::ConverseStream,
        Operation::InvokeModel,
        Operation::InvokeModelStream,
    ],
    request_streams: |op, _| matches!(op, Operation::ConverseStream | Operation::InvokeModelStream),
    adapter: |_| Box::new(BedrockAdapter::new()),
    json_body: whole_json,
};

/// The model id in `/model/{modelId}/{action}`, percent-decoded: ids and
/// ARNs carry `:` and `/`.
fn model_id(path: &str) -> Option<Option<Cow<'_, str>>> {
    let (head, last) = path.rsplit_once('/')?;
    if !matches!(
        last,
        "converse" | "converse-stream" | "invoke" | "invoke-with-response-stream"
    ) {
        return None;
    }
    let i = head.find("/model/")?;
    let id = &head[i + "/model/".len()..];
    Some((!id.is_empty()).then(|| percent_decode(id)))
}

/// AWS Bedrock: `/model/{id}/...` paths, or an eventstream response.
pub const SPEC: ProviderSpec = ProviderSpec {
    kind: ProviderKind::Bedrock,
    name: "aws.bedrock",
    config_name: "bedrock",
    detect_path: |_, op| WIRE.owns(op),
    detect_response: |ct| ct.is("application/vnd.amazon.eventstream"),
    model_from_path: model_id,
    price_table: Some("aws"),
    wire: &WIRE,
};

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use base64::Engine as _;

    use super::*;
    use crate::providers::tests::Summary;

    fn event(a: &mut BedrockAdapter, s: &mut Summary, ty: &str, payload: &str) {
        let frame = Frame::AwsEvent {
            message_type: b"event",
            event_type: ty.as_bytes(),
            payload: payload.as_bytes(),
        };
        a.on_frame(frame, &mut |e| s.record(e))
            .expect("valid event");
    }

    fn chunk(a: &mut BedrockAdapter, s: &mut Summary, json: &str) {
        let b64 = base64::engine::general_purpose::STANDARD.encode(json);
        event(
            a,
            s,
            "chunk",
            &format!(r#"{{"bytes":"{b64}","p":"abcdefgh"}}"#),
        );
    }

    #[test]
    fn converse_stream_events() {
        let (mut a, mut s) = (BedrockAdapter::new(), Summary::default());
        event(
            &mut a,
            &mut s,
            "messageStart",
            r#"{"p":"abcd","role":"assistant"}"#,
        );
        event(
            &mut a,
            &mut s,
            "contentBlockDelta",
            r#"{"contentBlockIndex":0,"delta":{"reasoningContent":{"text":"Let me"}},"p":"ab"}"#,
        );
        event(
            &mut a,
            &mut s,
            "contentBlockDelta",
            r#"{"contentBlockIndex":0,"delta":{"reasoningContent":{"signature":"EqoB"}},"p":"ab"}"#,
        );
        event(
            &mut a,
            &mut s,
            "contentBlockDelta",
            r#"{"contentBlockIndex":1,"delta":{"text":"Hi"},"p":"a"}"#,
        );
        event(
            &mut a,
            &mut s,
            "contentBlockStart",
            r#"{"contentBlockIndex":2,"start":{"toolUse":{"name":"f","toolUseId":"tooluse_1"}},"p":"a"}"#,
        );
        event(
            &mut a,
            &mut s,
            "contentBlockDelta",
            r#"{"contentBlockIndex":2,"delta":{"toolUse":{"input":"{\"city\""}},"p":"a"}"#,
        );
        event(
            &mut a,
            &mut s,
            "contentBlockStop",
            r#"{"contentBlockIndex":2,"p":"a"}"#,
        );
        event(
            &mut a,
            &mut s,
            "messageStop",
            r#"{"stopReason":"tool_use","p":"a"}"#,
        );
        event(
            &mut a,
            &mut s,
            "metadata",
            r#"{"metrics":{"latencyMs":812},"usage":{"inputTokens":20,"outputTokens":31,"totalTokens":151,"cacheReadInputTokens":100,"cacheWriteInputTokens":0},"p":"a"}"#,
        );
        assert_eq!(s.content_frames, 3, "reasoning text, text, tool input");
        assert_eq!(s.finish, ["tool_use"]);
        assert_eq!(
            (s.usage.input, s.usage.output, s.usage.cache_read),
            (Some(120), Some(31), Some(100))
        );
        assert_eq!(s.timing.total, Some(Duration::from_millis(812)));
        assert_eq!(s.done, 1);
    }

    #[test]
    fn exceptions_are_errors() {
        let mut a = BedrockAdapter::new();
        let mut s = Summary::default();
        let frame = Frame::AwsEvent {
            message_type: b"exception",
            event_type: b"throttlingException",
            payload: br#"{"message":"Too many requests, please wait before trying again."}"#,
        };
        a.on_frame(frame, &mut |e| s.record(e)).expect("handled");
        assert_eq!(s.errors, ["throttlingException"]);
    }

    #[test]
    fn invoke_stream_llama_titan_mistral_nova() {
        let metrics = r#""amazon-bedrock-invocationMetrics":{"inputTokenCount":9,"outputTokenCount":3,"invocationLatency":640,"firstByteLatency":210}"#;
        for (family, chunks) in [
            (
                "llama",
                vec![
                    r#"{"generation":"Hel","prompt_token_count":9,"generation_token_count":1,"stop_reason":null}"#.to_owned(),
                    r#"{"generation":"lo","prompt_token_count":null,"generation_token_count":2,"stop_reason":null}"#.to_owned(),
                    format!(r#"{{"generation":"!","prompt_token_count":null,"generation_token_count":3,"stop_reason":"stop",{metrics}}}"#),
                ],
            ),
            (
                "titan",
                vec![
                    r#"{"outputText":"Hel","index":0,"totalOutputTextTokenCount":null,"completionReason":null,"inputTextTokenCount":9}"#.to_owned(),
                    r#"{"outputText":"lo","index":0,"totalOutputTextTokenCount":null,"completionReason":null,"inputTextTokenCount":null}"#.to_owned(),
                    format!(r#"{{"outputText":"!","index":0,"totalOutputTextTokenCount":3,"completionReason":"FINISH","inputTextTokenCount":null,{metrics}}}"#),
                ],
            ),
            (
                "mistral",
                vec![
                    r#"{"outputs":[{"text":"Hel","stop_reason":null}]}"#.to_owned(),
                    r#"{"outputs":[{"text":"lo","stop_reason":null}]}"#.to_owned(),
                    format!(r#"{{"outputs":[{{"text":"!","stop_reason":"stop"}}],{metrics}}}"#),
                ],
            ),
            (
                "nova",
                vec![
                    r#"{"messageStart":{"role":"assistant"}}"#.to_owned(),
                    r#"{"contentBlockDelta":{"delta":{"text":"Hel"},"contentBlockIndex":0}}"#.to_owned(),
                    r#"{"contentBlockDelta":{"delta":{"text":"lo"},"contentBlockIndex":0}}"#.to_owned(),
                    r#"{"contentBlockDelta":{"delta":{"text":"!"},"contentBlockIndex":0}}"#.to_owned(),
                    r#"{"contentBlockStop":{"contentBlockIndex":0}}"#.to_owned(),
                    r#"{"messageStop":{"stopReason":"end_turn"}}"#.to_owned(),
                    format!(r#"{{"metadata":{{"usage":{{"inputTokens":9,"outputTokens":3}},"metrics":{{}},"trace":{{}}}},{metrics}}}"#),
                ],
            ),
        ] {
            let (mut a, mut s) = (BedrockAdapter::new(), Summary::default());
            for c in &chunks {
                chunk(&mut a, &mut s, c);
            }
            assert_eq!(s.content_frames, 3, "{family}: content chunks");
            assert_eq!((s.usage.input, s.usage.output), (Some(9), Some(3)), "{family}: usage");
            assert_eq!(s.finish.len(), 1, "{family}: finish reason {:?}", s.finish);
            assert_eq!(
                (s.timing.ttft, s.timing.total),
                (Some(Duration::from_millis(210)), Some(Duration::from_millis(640))),
                "{family}: invocation metrics"
            );
        }
    }

    #[test]
    fn bad_base64_is_an_adapter_error() {
        let mut a = BedrockAdapter::new();
        let frame = Frame::AwsEvent {
            message_type: b"event",
            event_type: b"chunk",
            payload: br#"{"bytes":"***"}"#,
        };
        assert!(a.on_frame(frame, &mut |_| {}).is_err());
    }

    #[test]
    fn whole_bodies_of_other_families() {
        let whole = |body: &str| {
            let mut a = BedrockAdapter::new();
            let mut s = Summary::default();
            a.on_frame(Frame::Json(body.as_bytes()), &mut |e| s.record(e))
                .expect("valid body");
            s
        };
        let titan = whole(
            r#"{"inputTextTokenCount":5,"results":[{"tokenCount":12,"outputText":"Hello there","completionReason":"FINISH"}]}"#,
        );
        assert_eq!(
            (titan.pieces, titan.usage.input, titan.usage.output),
            (1, Some(5), Some(12))
        );
        assert_eq!(titan.finish, ["FINISH"]);
        let llama = whole(
            r#"{"generation":"Hi!","prompt_token_count":11,"generation_token_count":3,"stop_reason":"stop"}"#,
        );
        assert_eq!(
            (llama.pieces, llama.usage.input, llama.usage.output),
            (1, Some(11), Some(3))
        );
        let cohere = whole(
            r#"{"response_id":"r","text":"Hi","generation_id":"g","finish_reason":"COMPLETE","chat_history":[]}"#,
        );
        assert_eq!(
            (cohere.pieces, cohere.finish.clone()),
            (1, vec!["COMPLETE".to_owned()])
        );
        let gpt_oss = whole(
            r#"{"id":"chatcmpl-1","object":"chat.completion","model":"openai.gpt-oss-20b-1:0","choices":[{"index":0,"message":{"role":"assistant","content":"Hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":4,"completion_tokens":2}}"#,
        );
        assert_eq!((gpt_oss.pieces, gpt_oss.usage.output), (1, Some(2)));
    }
}
