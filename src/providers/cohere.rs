//! Cohere v2 chat adapter: streamed events (`message-start`,
//! `content-delta`, `tool-call-delta`, `message-end`, …) and whole chat
//! responses in, metering events out.
//!
//! Usage prefers `tokens` (what the model processed) over `billed_units`
//! (what is charged), which can be smaller.

use serde::Deserialize;
use serde_json::value::RawValue;

use super::spec::{
    FrameAdapter, ProviderSpec, Wire, body_says, never_response, no_model, whole_json,
};
use super::wire::{AnyContent, HasContent, Str, non_empty};
use super::{AdapterError, ContentKind, Event, Usage};
use super::{Operation, ProviderKind};
use crate::framing::Frame;

/// Adapter state for one Cohere response.
#[derive(Debug, Default)]
pub struct CohereAdapter {
    id_seen: bool,
}

impl CohereAdapter {
    /// A fresh adapter for one response.
    pub fn new() -> Self {
        CohereAdapter::default()
    }

    /// Map one frame to zero or more events.
    pub fn on_frame(
        &mut self,
        frame: Frame<'_>,
        out: &mut dyn FnMut(Event<'_>),
    ) -> Result<(), AdapterError> {
        let data = match frame {
            Frame::Sse { data, .. } => data.trim_ascii(),
            Frame::Json(body) => body.trim_ascii(),
            Frame::AwsEvent { .. } => {
                return Err(AdapterError("eventstream frame in a Cohere stream"));
            }
        };
        if data.is_empty() || data == b"[DONE]" {
            return Ok(());
        }
        let doc: Doc<'_> = serde_json::from_slice(data)
            .map_err(|_| AdapterError("malformed Cohere JSON payload"))?;
        if !self.id_seen {
            if let Some(id) = doc.id.as_ref().filter(|i| !i.as_str().is_empty()) {
                out(Event::ResponseId(id.as_str()));
                self.id_seen = true;
            }
        }
        let delta_message = doc.delta.as_ref().and_then(|d| d.message.as_ref());
        match doc.kind.as_ref().map(Str::as_str) {
            Some("content-delta" | "tool-plan-delta" | "tool-call-delta" | "tool-call-start") => {
                if let Some(kind) = delta_message.and_then(DeltaMessage::kind) {
                    out(Event::Content { pieces: 1, kind });
                }
            }
            Some("message-end") => {
                if let Some(d) = &doc.delta {
                    emit_end(d.usage.as_ref(), d.finish_reason.as_ref(), out);
                }
                out(Event::Done);
            }
            Some("error") => out(Event::Error { kind: "error" }),
            Some(_) => {} // message-start, content-start/end, citations, tool-call-end
            None => {
                // A whole chat response.
                if doc.message.as_ref().is_some_and(WholeMessage::has_content) {
                    out(Event::Content {
                        pieces: 1,
                        kind: ContentKind::Visible,
                    });
                }
                emit_end(doc.usage.as_ref(), doc.finish_reason.as_ref(), out);
            }
        }
        Ok(())
    }
}

fn emit_end(usage: Option<&WireUsage>, finish: Option<&Str<'_>>, out: &mut dyn FnMut(Event<'_>)) {
    if let Some(u) = usage {
        let counts = u.tokens.as_ref().or(u.billed_units.as_ref());
        if let Some(c) = counts {
            out(Event::Usage(Usage {
                input: c.input_tokens,
                output: c.output_tokens,
                ..Usage::default()
            }));
        }
    }
    if let Some(r) = finish.filter(|r| !r.as_str().is_empty()) {
        out(Event::FinishReason(r.as_str()));
    }
}

/// The fields of one event or whole response that metering reads.
#[derive(Deserialize)]
struct Doc<'a> {
    #[serde(borrow, rename = "type")]
    kind: Option<Str<'a>>,
    #[serde(borrow)]
    id: Option<Str<'a>>,
    #[serde(borrow)]
    delta: Option<Delta<'a>>,
    // A whole response.
    #[serde(borrow)]
    message: Option<WholeMessage<'a>>,
    usage: Option<WireUsage>,
    #[serde(borrow)]
    finish_reason: Option<Str<'a>>,
}

#[derive(Deserialize)]
struct Delta<'a> {
    #[serde(borrow)]
    message: Option<DeltaMessage<'a>>,
    #[serde(borrow)]
    finish_reason: Option<Str<'a>>,
    usage: Option<WireUsage>,
}

/// `delta.message`: text or thinking in `content`, a tool plan, or tool
/// call arguments (the name in `tool-call-start` counts as for OpenAI).
/// `content` and `tool_calls` are objects in deltas but empty arrays in
/// `message-start`, so they are read only when they are objects.
#[derive(Deserialize)]
struct DeltaMessage<'a> {
    #[serde(borrow)]
    content: Option<&'a RawValue>,
    #[serde(borrow)]
    tool_plan: Option<&'a RawValue>,
    #[serde(borrow)]
    tool_calls: Option<&'a RawValue>,
}

impl DeltaMessage<'_> {
    /// Text, a tool plan or tool call are visible; `thinking` is reasoning.
    fn kind(&self) -> Option<ContentKind> {
        fn object(raw: Option<&RawValue>) -> Option<&RawValue> {
            raw.filter(|r| r.get().starts_with('{'))
        }
        let part =
            object(self.content).and_then(|r| serde_json::from_str::<Part<'_>>(r.get()).ok());
        let (text, thinking) = part.map_or((false, false), |p| {
            (non_empty(p.text), non_empty(p.thinking))
        });
        let tool = object(self.tool_calls)
            .and_then(|r| serde_json::from_str::<ToolCall<'_>>(r.get()).ok())
            .and_then(|t| t.function)
            .is_some_and(|f| non_empty(f.name) || non_empty(f.arguments));
        ContentKind::of(text || non_empty(self.tool_plan) || tool, thinking)
    }
}

#[derive(Deserialize)]
struct Part<'a> {
    #[serde(borrow)]
    text: Option<&'a RawValue>,
    #[serde(borrow)]
    thinking: Option<&'a RawValue>,
}

impl HasContent for Part<'_> {
    fn has_content(&self) -> bool {
        non_empty(self.text) || non_empty(self.thinking)
    }
}

#[derive(Deserialize)]
struct ToolCall<'a> {
    #[serde(borrow)]
    function: Option<Function<'a>>,
}

#[derive(Deserialize)]
struct Function<'a> {
    #[serde(borrow)]
    name: Option<&'a RawValue>,
    #[serde(borrow)]
    arguments: Option<&'a RawValue>,
}

/// A whole response's `message`.
#[derive(Deserialize)]
struct WholeMessage<'a> {
    #[serde(borrow)]
    content: Option<AnyContent<Part<'a>>>,
    #[serde(borrow)]
    tool_plan: Option<&'a RawValue>,
    #[serde(borrow)]
    tool_calls: Option<&'a RawValue>,
}

impl WholeMessage<'_> {
    fn has_content(&self) -> bool {
        self.content.as_ref().is_some_and(|c| c.0)
            || non_empty(self.tool_plan)
            || non_empty(self.tool_calls)
    }
}

#[derive(Deserialize)]
struct WireUsage {
    billed_units: Option<Counts>,
    tokens: Option<Counts>,
}

#[derive(Deserialize)]
struct Counts {
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
}

impl FrameAdapter for CohereAdapter {
    fn on_frame(
        &mut self,
        frame: Frame<'_>,
        out: &mut dyn FnMut(Event<'_>),
    ) -> Result<(), AdapterError> {
        CohereAdapter::on_frame(self, frame, out)
    }
}

/// Cohere's v2 chat format.
pub const WIRE: Wire = Wire {
    name: "cohere",
    operations: &[Operation::CohereChat],
    request_streams: body_says,
    adapter: |_| Box::new(CohereAdapter::new()),
    json_body: whole_json,
};

/// Cohere: `/v2/chat`.
pub const SPEC: ProviderSpec = ProviderSpec {
    kind: ProviderKind::Cohere,
    name: "cohere",
    config_name: "cohere",
    detect_path: |_, op| WIRE.owns(op),
    detect_response: never_response,
    model_from_path: no_model,
    wire: &WIRE,
};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::tests::Summary;

    fn events(payloads: &[&str]) -> Summary {
        let mut a = CohereAdapter::new();
        let mut s = Summary::default();
        for p in payloads {
            let frame = Frame::Sse {
                event: b"",
                data: p.as_bytes(),
            };
            a.on_frame(frame, &mut |e| s.record(e))
                .expect("valid event");
        }
        s
    }

    #[test]
    fn tool_call_stream() {
        let s = events(&[
            r#"{"id":"c1","type":"message-start","delta":{"message":{"role":"assistant","content":[],"tool_plan":"","tool_calls":[],"citations":[]}}}"#,
            r#"{"type":"tool-plan-delta","delta":{"message":{"tool_plan":"I will"}}}"#,
            r#"{"type":"tool-call-start","index":0,"delta":{"message":{"tool_calls":{"id":"t1","type":"function","function":{"name":"get_weather","arguments":""}}}}}"#,
            r#"{"type":"tool-call-delta","index":0,"delta":{"message":{"tool_calls":{"function":{"arguments":"{\""}}}}}"#,
            r#"{"type":"tool-call-delta","index":0,"delta":{"message":{"tool_calls":{"function":{"arguments":""}}}}}"#,
            r#"{"type":"tool-call-end","index":0}"#,
            r#"{"type":"message-end","delta":{"finish_reason":"TOOL_CALL","usage":{"billed_units":{"input_tokens":30,"output_tokens":20},"tokens":{"input_tokens":950,"output_tokens":20}}}}"#,
        ]);
        assert_eq!(s.content_frames, 3, "plan, tool name, arguments");
        assert_eq!((s.usage.input, s.usage.output), (Some(950), Some(20)));
        assert_eq!(s.finish, ["TOOL_CALL"]);
        assert_eq!(s.response_id.as_deref(), Some("c1"));
    }

    #[test]
    fn billed_units_when_tokens_are_absent() {
        let s = events(&[
            r#"{"type":"message-end","delta":{"finish_reason":"MAX_TOKENS","usage":{"billed_units":{"input_tokens":3,"output_tokens":9}}}}"#,
        ]);
        assert_eq!((s.usage.input, s.usage.output), (Some(3), Some(9)));
    }
}
