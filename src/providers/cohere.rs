//! Cohere v2 chat adapter: streamed events (`message-start`,
//! `content-delta`, `tool-call-delta`, `message-end`, …) and whole chat
//! responses in, metering events out.
//!
//! Usage prefers `tokens` (what the model processed) over `billed_units`
//! (what is charged), which can be smaller. A whole response of the plain
//! shape is read by the validating scan (`scan.rs`); everything else, and
//! anything unusual, by serde.

use serde::Deserialize;
use serde_json::value::RawValue;

use super::scan::{Scan, Seen};
use super::spec::{
    FrameAdapter, ProviderSpec, Wire, body_says, frame_json, never_response, no_model, whole_json,
};
use super::wire::{AnyContent, HasContent, Str, ToolFunction, non_empty, non_empty_raw};
use super::{AdapterError, ContentKind, Event, Identity, Usage};
use super::{Operation, ProviderKind};
use crate::framing::Frame;

/// Adapter state for one Cohere response.
#[derive(Debug, Default)]
pub struct CohereAdapter {
    identity: Identity,
    /// Take the serde path only (tests that compare it with the scan).
    no_scan: bool,
}

impl CohereAdapter {
    /// A fresh adapter for one response.
    pub fn new() -> Self {
        CohereAdapter::default()
    }

    /// An adapter that always takes the serde path, to check the scan
    /// against it.
    #[cfg(test)]
    fn without_scan() -> Self {
        CohereAdapter {
            no_scan: true,
            ..CohereAdapter::default()
        }
    }
}

impl FrameAdapter for CohereAdapter {
    /// Map one frame to zero or more events.
    fn on_frame(
        &mut self,
        frame: Frame<'_>,
        out: &mut dyn FnMut(Event<'_>),
    ) -> Result<(), AdapterError> {
        let data = frame_json(frame, "eventstream frame in a Cohere stream")?;
        if data.is_empty() || data == b"[DONE]" {
            return Ok(());
        }
        if let (Frame::Json(_), false) = (frame, self.no_scan) {
            if let Some(w) = WholeResponse::scan(data) {
                self.on_whole(&w, out);
                return Ok(());
            }
        }
        let doc: Doc<'_> = serde_json::from_slice(data)
            .map_err(|_| AdapterError("malformed Cohere JSON payload"))?;
        self.identity.id(doc.id.as_ref().map(Str::as_str), out);
        let delta_message = doc.delta.as_ref().and_then(|d| d.message.as_ref());
        match doc.kind.as_ref().map(Str::as_str) {
            Some("content-delta" | "tool-plan-delta" | "tool-call-delta" | "tool-call-start") => {
                if let Some(kind) = delta_message.and_then(DeltaMessage::kind) {
                    out(Event::Content { pieces: 1, kind });
                }
                if doc
                    .kind
                    .as_ref()
                    .is_some_and(|k| k.as_str() == "tool-call-start")
                {
                    // One call per start; its arguments follow as deltas.
                    let call = delta_message.and_then(|m| m.tool_calls);
                    let call =
                        call.and_then(|r| serde_json::from_str::<ToolCall<'_>>(r.get()).ok());
                    let name = call.as_ref().and_then(ToolCall::name);
                    out(Event::ToolCall {
                        name: name.as_ref().map(Str::as_str),
                    });
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
                    out(Event::ONE_VISIBLE);
                }
                let calls = doc.message.as_ref().and_then(|m| m.tool_calls);
                let calls =
                    calls.and_then(|r| serde_json::from_str::<Vec<ToolCall<'_>>>(r.get()).ok());
                for call in calls.iter().flatten() {
                    let name = call.name();
                    out(Event::ToolCall {
                        name: name.as_ref().map(Str::as_str),
                    });
                }
                emit_end(doc.usage.as_ref(), doc.finish_reason.as_ref(), out);
            }
        }
        Ok(())
    }
}

impl CohereAdapter {
    /// The events the serde path gives for the same whole response.
    fn on_whole(&mut self, w: &WholeResponse<'_>, out: &mut dyn FnMut(Event<'_>)) {
        self.identity.id(w.id, out);
        if w.content {
            out(Event::ONE_VISIBLE);
        }
        if let Some(c) = w.tokens.or(w.billed_units) {
            out(Event::Usage(Usage {
                input: c[0],
                output: c[1],
                ..Usage::default()
            }));
        }
        if let Some(r) = w.finish_reason.filter(|r| !r.is_empty()) {
            out(Event::FinishReason(r));
        }
    }
}

/// A whole chat response, borrowed from the body: what the serde path
/// reads of it. Counts are `[input_tokens, output_tokens]`.
#[derive(Default)]
struct WholeResponse<'a> {
    id: Option<&'a str>,
    /// The message carries output (`WholeMessage::has_content`).
    content: bool,
    tokens: Option<[Option<u64>; 2]>,
    billed_units: Option<[Option<u64>; 2]>,
    finish_reason: Option<&'a str>,
}

impl<'a> WholeResponse<'a> {
    /// `None` (take the serde path) unless the body is valid JSON of a
    /// whole response (no `type`, no `delta`) with no escapes in the
    /// strings read and counts as plain integers.
    fn scan(data: &'a [u8]) -> Option<WholeResponse<'a>> {
        let mut w = WholeResponse::default();
        let mut seen = Seen::default();
        Scan::document(data, |s, key| match key {
            "id" => {
                seen.first(0)?;
                w.id = s.str_or_null()?;
                Some(())
            }
            "finish_reason" => {
                seen.first(1)?;
                w.finish_reason = s.str_or_null()?;
                Some(())
            }
            "type" | "delta" => {
                seen.first(if key == "type" { 2 } else { 3 })?;
                s.null()?.then_some(())
            }
            "message" => {
                seen.first(4)?;
                w.content = s.or_null(message_has_content)?.unwrap_or(false);
                Some(())
            }
            "usage" => {
                seen.first(5)?;
                if let Some(usage) = s.or_null(scan_usage)? {
                    [w.tokens, w.billed_units] = usage;
                }
                Some(())
            }
            _ => s.skip(1),
        })?;
        Some(w)
    }
}

/// A whole response's `message`: content parts (objects with `text` or
/// `thinking`), a tool plan or tool calls.
fn message_has_content(s: &mut Scan<'_>) -> Option<bool> {
    let mut seen = Seen::default();
    let mut any = false;
    s.object(1, |s, key| match key {
        "content" => {
            seen.first(0)?;
            if s.null()? {
                return Some(());
            }
            s.array(2, |s| {
                s.fields(3, ["text", "thinking"], |s, _| {
                    any |= s.raw(4)?.is_some_and(non_empty_raw);
                    Some(())
                })
            })
        }
        "tool_plan" | "tool_calls" => {
            seen.first(if key == "tool_plan" { 1 } else { 2 })?;
            let has = s.raw(2)?.is_some_and(non_empty_raw);
            any |= has;
            // Tool calls are counted and named on the serde path.
            (key == "tool_plan" || !has).then_some(())
        }
        _ => s.skip(2),
    })?;
    Some(any)
}

/// `usage`: `[tokens, billed_units]`, each `[input, output]`.
fn scan_usage(s: &mut Scan<'_>) -> Option<[Option<[Option<u64>; 2]>; 2]> {
    let mut usage = [None; 2];
    s.fields(1, ["tokens", "billed_units"], |s, at| {
        usage[at] = s.or_null(|s| s.counts(2, ["input_tokens", "output_tokens"]))?;
        Some(())
    })?;
    Some(usage)
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
            .is_some_and(|f| f.has_content());
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
    function: Option<ToolFunction<'a>>,
}

impl<'a> ToolCall<'a> {
    /// The function's name, when it is a non-empty string.
    fn name(&self) -> Option<Str<'a>> {
        self.function.as_ref()?.name_str()
    }
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
    price_table: Some("cohere"),
    wire: &WIRE,
};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::ProviderKind;
    use crate::providers::scan::differential::{fixture_bodies, json_outcome, mutations};
    use crate::providers::tests::{Summary, feed_sse};

    fn events(payloads: &[&str]) -> Summary {
        feed_sse(&mut CohereAdapter::new(), payloads).expect("valid event")
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

    /// Whole responses the scan must read exactly as serde does (or leave to it).
    const BODIES: &[&str] = &[
        r#"{"id":"c1","finish_reason":"COMPLETE","message":{"role":"assistant","content":[{"type":"text","text":"a \"text\":\"b\""}]},"usage":{"billed_units":{"input_tokens":5,"output_tokens":9},"tokens":{"input_tokens":71,"output_tokens":9}}}"#,
        r#"{"id":"c2","message":{"content":[{"type":"thinking","thinking":"hm"},{"type":"text","text":""}]},"usage":{"billed_units":{"input_tokens":3,"output_tokens":1}}}"#,
        r#"{"message":{"content":[],"tool_plan":"I will","tool_calls":[{"id":"t","function":{"name":"f","arguments":"{}"}}]},"finish_reason":"TOOL_CALL"}"#,
        r#"{"message":{"content":[{"type":"text","text":""}],"tool_plan":"","tool_calls":[]},"finish_reason":""}"#,
        r#"{"message":{"content":null,"tool_calls":null},"usage":{"tokens":null,"billed_units":{"input_tokens":null}}}"#,
        r#"{"message":null,"usage":null,"finish_reason":null,"id":null}"#,
        r#"{"type":null,"delta":null,"message":{"content":[{"text":"x"}]}}"#,
        r#"{"message":{"content":[{"text":"x","text":"y"}]}}"#,
        r#"{"message":{"content":[null]}}"#,
        r#"{"message":{"content":["x"]}}"#,
        r#"{"message":{"content":{"text":"x"}}}"#,
        r#"{"message":{"content":[{"text":"caf\u00e9 \ud83d\ude00"}]}}"#,
        r#"{"id":"c\u0031"}"#,
        r#"{"id":"a","id":"b"}"#,
        r#"{"finish_reason":5}"#,
        r#"{"usage":{"tokens":{"input_tokens":1.5}}}"#,
        r#"{"usage":{"tokens":{"input_tokens":-1}}}"#,
        r#"{"usage":{"tokens":{"output_tokens":18446744073709551616}}}"#,
        r#"{"usage":{"tokens":{"input_tokens":1,"input_tokens":2}}}"#,
        r#"{"usage":{"tokens":[1,2]}}"#,
        r#"{"usage":{"tokens":{},"billed_units":{"input_tokens":4}}}"#,
        r#"{"type":"message-end","delta":{"finish_reason":"COMPLETE"}}"#,
        r#"{"type":"content-delta","delta":{"message":{"content":{"text":"x"}}}}"#,
        r#"{"delta":{"message":{}}}"#,
        r#"{"message":{"content":[]}} x"#,
        r#" { "message" : { "content" : [ { "text" : "x" } ] } , "meta" : { "api_version" : { "version" : "2" } } } "#,
        "",
        "{",
        "[DONE]",
    ];

    #[test]
    fn whole_response_scan_reads_fixtures_shapes_and_mutations_as_serde_does() {
        let fixtures = fixture_bodies(&[ProviderKind::Cohere]);
        assert!(!fixtures.is_empty(), "a whole-body fixture");
        let mut scanned = 0;
        let inputs = fixtures
            .iter()
            .copied()
            .chain(BODIES.iter().map(|s| s.as_bytes()));
        for (i, body) in inputs.enumerate() {
            scanned += usize::from(WholeResponse::scan(body.trim_ascii()).is_some());
            for m in std::iter::once(body.to_vec()).chain(mutations(body, 3000 + i as u64, 200)) {
                let scan = json_outcome(|f, out| CohereAdapter::new().on_frame(f, out), &m);
                let serde = json_outcome(|f, o| CohereAdapter::without_scan().on_frame(f, o), &m);
                assert_eq!(scan, serde, "{}", String::from_utf8_lossy(&m));
            }
        }
        // Tool calls are left to serde, to be counted and named.
        let plain = |f: &&&[u8]| !f.windows(15).any(|w| w == b"\"tool_calls\":[{");
        for f in fixtures.iter().filter(plain) {
            assert!(
                WholeResponse::scan(f.trim_ascii()).is_some(),
                "fixture scanned"
            );
        }
        // Most shapes above are there to be left to serde (tool calls
        // too, to be counted and named); the plain ones must still take
        // the scan.
        assert!(scanned >= 9, "{scanned} bodies scanned");
    }

    #[test]
    fn billed_units_when_tokens_are_absent() {
        let s = events(&[
            r#"{"type":"message-end","delta":{"finish_reason":"MAX_TOKENS","usage":{"billed_units":{"input_tokens":3,"output_tokens":9}}}}"#,
        ]);
        assert_eq!((s.usage.input, s.usage.output), (Some(3), Some(9)));
    }
}
