//! Gemini / Vertex AI adapter: `generateContent` bodies and
//! `streamGenerateContent` chunks (SSE with `alt=sse`, else elements of a
//! streamed JSON array) in, metering events out.
//!
//! Every chunk is a whole `GenerateContentResponse`. `usageMetadata` is
//! cumulative (the last report wins); `candidatesTokenCount` excludes the
//! thinking tokens, so output = candidates + thoughts and reasoning =
//! thoughts. `promptTokenCount` already includes the cached part.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;

use super::spec::{FrameAdapter, JsonBody, ProviderSpec, Wire, each_document, never_response};
use super::wire::{Fold, HasKind, Named, Str, deserialize_by_fold, non_empty};
use super::{AdapterError, ContentKind, Event, Identity, Operation, ServerTool, Usage};
use super::{ProviderKind, percent_decode};
use crate::framing::Frame;

/// Finish reasons kept per chunk; more candidates than this are not reported.
const MAX_FINISH_REASONS: usize = 16;

/// Adapter state for one Gemini response.
#[derive(Debug)]
pub struct GeminiAdapter {
    operation: Option<Operation>,
    identity: Identity,
}

impl GeminiAdapter {
    /// An adapter for a response to `operation` (`None` when unknown).
    pub fn new(operation: Option<Operation>) -> Self {
        GeminiAdapter {
            operation,
            identity: Identity::default(),
        }
    }
}

impl FrameAdapter for GeminiAdapter {
    /// Map one frame to zero or more events.
    fn on_frame(
        &mut self,
        frame: Frame<'_>,
        out: &mut dyn FnMut(Event<'_>),
    ) -> Result<(), AdapterError> {
        // A whole streamed array read as one body (or an error body
        // wrapped in an array): each element is one chunk.
        each_document(
            frame,
            "eventstream frame in a Gemini stream",
            "malformed Gemini JSON array",
            |chunk| self.on_chunk(chunk, out),
        )
    }
}

impl GeminiAdapter {
    fn on_chunk(
        &mut self,
        data: &[u8],
        out: &mut dyn FnMut(Event<'_>),
    ) -> Result<(), AdapterError> {
        let doc: Doc<'_> = serde_json::from_slice(data)
            .map_err(|_| AdapterError("malformed Gemini JSON payload"))?;
        if let Some(error) = &doc.error {
            out(Event::Error {
                kind: &error.kind(),
            });
        }
        self.identity.report(
            doc.model_version.as_ref().map(Str::as_str),
            doc.response_id.as_ref().map(Str::as_str),
            out,
        );
        if let Some(reason) = doc
            .prompt_feedback
            .as_ref()
            .and_then(|f| f.block_reason.as_ref())
            .filter(|r| !r.as_str().is_empty())
        {
            out(Event::Error {
                kind: reason.as_str(),
            });
        }
        if let Some(candidates) = &doc.candidates {
            if let (true, Some(kind)) = (
                candidates.pieces > 0,
                ContentKind::of(candidates.visible, candidates.reasoning),
            ) {
                let whole = self.operation == Some(Operation::GenerateContent);
                out(Event::Content {
                    pieces: if whole { 1 } else { candidates.pieces },
                    kind,
                });
            }
            // Gemini sends each function call whole, in one part.
            for name in &candidates.calls {
                out(Event::ToolCall {
                    name: name.as_ref().map(Str::as_str),
                });
            }
            if let Some(queries) = candidates.search_queries {
                // The grounding metadata lists the response's queries so
                // far: the latest list is the count.
                out(Event::ServerToolUsage {
                    tool: ServerTool::Grounding,
                    calls: queries,
                });
            }
        }
        if let Some(usage) = &doc.usage_metadata {
            out(Event::Usage(usage.to_usage()));
        } else if self.operation == Some(Operation::EmbedContent) {
            // Embeddings produce no output tokens; Gemini reports no usage.
            out(Event::Usage(Usage {
                output: Some(0),
                ..Usage::default()
            }));
        }
        if let Some(candidates) = &doc.candidates {
            for reason in &candidates.finish {
                out(Event::FinishReason(reason.as_str()));
            }
            // A stream ends with the chunk that gives a finish reason
            // (usage rides on the same chunk).
            if !candidates.finish.is_empty() {
                out(Event::Done);
            }
        }
        Ok(())
    }
}

/// The fields of one `GenerateContentResponse` that metering reads.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Doc<'a> {
    #[serde(borrow)]
    candidates: Option<Candidates<'a>>,
    usage_metadata: Option<WireUsage>,
    #[serde(borrow)]
    model_version: Option<Str<'a>>,
    #[serde(borrow)]
    response_id: Option<Str<'a>>,
    #[serde(borrow)]
    prompt_feedback: Option<PromptFeedback<'a>>,
    #[serde(borrow)]
    error: Option<ErrorObject<'a>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PromptFeedback<'a> {
    #[serde(borrow)]
    block_reason: Option<Str<'a>>,
}

/// A Google API error: `{"code": 429, "message": …, "status": "RESOURCE_EXHAUSTED"}`.
#[derive(Deserialize)]
struct ErrorObject<'a> {
    #[serde(borrow)]
    status: Option<Str<'a>>,
    #[serde(borrow)]
    code: Option<&'a RawValue>,
}

impl<'a> ErrorObject<'a> {
    /// `status`, else the numeric `code`, else "error".
    fn kind(&self) -> Cow<'_, str> {
        if let Some(s) = self.status.as_ref().filter(|s| !s.as_str().is_empty()) {
            return Cow::Borrowed(s.as_str());
        }
        match self.code.map(RawValue::get) {
            Some(raw) if !raw.is_empty() && raw.bytes().all(|b| b.is_ascii_digit()) => {
                Cow::Borrowed(raw)
            }
            _ => Cow::Borrowed("error"),
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireUsage {
    prompt_token_count: Option<u64>,
    candidates_token_count: Option<u64>,
    thoughts_token_count: Option<u64>,
    cached_content_token_count: Option<u64>,
    tool_use_prompt_token_count: Option<u64>,
}

impl WireUsage {
    fn to_usage(&self) -> Usage {
        let output = match (self.candidates_token_count, self.thoughts_token_count) {
            (None, None) => None,
            (c, t) => Some(c.unwrap_or(0).saturating_add(t.unwrap_or(0))),
        };
        let input = self
            .prompt_token_count
            .map(|p| p.saturating_add(self.tool_use_prompt_token_count.unwrap_or(0)));
        Usage {
            input,
            output,
            cache_read: self.cached_content_token_count,
            cache_creation: None,
            reasoning: self.thoughts_token_count,
            ..Usage::default()
        }
    }
}

/// `candidates`, folded while parsing: how many carry content, and their
/// finish reasons.
#[derive(Default)]
struct Candidates<'a> {
    pieces: u32,
    /// Some candidate carried a visible part, or a thought (`thought: true`).
    visible: bool,
    reasoning: bool,
    finish: Vec<Str<'a>>,
    /// Function calls, by name (allocates only when there are some).
    calls: Vec<Option<Str<'a>>>,
    /// Google Search queries the grounding metadata lists, when present.
    search_queries: Option<u32>,
}

impl<'de: 'a, 'a> Fold<'de> for Candidates<'a> {
    type Item = Candidate<'a>;
    const EXPECTING: &'static str = "an array of candidates";
    fn add(&mut self, mut c: Candidate<'a>) {
        if let Some(g) = c
            .grounding_metadata
            .as_ref()
            .and_then(|g| g.web_search_queries)
        {
            self.search_queries = Some(self.search_queries.unwrap_or(0).saturating_add(g.0));
        }
        let parts = c.content.as_mut().and_then(|c| c.parts.as_mut());
        if let Some(parts) = parts {
            self.calls.append(&mut parts.calls);
        }
        let parts = c.content.as_ref().and_then(|c| c.parts.as_ref());
        if let Some(kind) = parts.and_then(Parts::kind) {
            self.pieces = self.pieces.saturating_add(1);
            self.visible |= kind.is_visible();
            self.reasoning |= kind.is_reasoning();
        }
        if let Some(reason) = c.finish_reason {
            if self.finish.len() < MAX_FINISH_REASONS {
                self.finish.push(reason);
            }
        }
    }
}

deserialize_by_fold!(Candidates<'a>);

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Candidate<'a> {
    #[serde(borrow)]
    content: Option<Content<'a>>,
    #[serde(borrow)]
    finish_reason: Option<Str<'a>>,
    grounding_metadata: Option<Grounding>,
}

/// A candidate's `groundingMetadata`: the Google Search queries run.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Grounding {
    web_search_queries: Option<Count>,
}

/// The length of a JSON array, counted without keeping its elements.
#[derive(Clone, Copy, Default)]
struct Count(u32);

impl Fold<'_> for Count {
    type Item = serde::de::IgnoredAny;
    const EXPECTING: &'static str = "an array";
    fn add(&mut self, _: serde::de::IgnoredAny) {
        self.0 = self.0.saturating_add(1);
    }
}

deserialize_by_fold!(Count);

#[derive(Deserialize)]
struct Content<'a> {
    #[serde(borrow)]
    parts: Option<Parts<'a>>,
}

/// `parts`, folded while parsing: what output they carry (as `AnyKind`
/// folds it) and their function calls' names.
#[derive(Default)]
struct Parts<'a> {
    visible: bool,
    reasoning: bool,
    calls: Vec<Option<Str<'a>>>,
}

impl Parts<'_> {
    fn kind(&self) -> Option<ContentKind> {
        ContentKind::of(self.visible, self.reasoning)
    }
}

impl<'de: 'a, 'a> Fold<'de> for Parts<'a> {
    type Item = Part<'a>;
    const EXPECTING: &'static str = "an array of parts";
    fn add(&mut self, part: Part<'a>) {
        let (visible, reasoning) = part.kinds();
        self.visible |= visible;
        self.reasoning |= reasoning;
        if let Some(call) = part.function_call.filter(|c| non_empty(Some(c))) {
            self.calls.push(Named::of(call));
        }
    }
}

deserialize_by_fold!(Parts<'a>);

/// One part: text (including thought summaries), a function call,
/// generated code or inline data are output; a bare thought signature or a
/// code execution result (the tool's output, not the model's) is not. Text
/// in a part marked `thought: true` is reasoning.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Part<'a> {
    #[serde(borrow)]
    text: Option<&'a RawValue>,
    #[serde(borrow)]
    function_call: Option<&'a RawValue>,
    #[serde(borrow)]
    executable_code: Option<&'a RawValue>,
    #[serde(borrow)]
    inline_data: Option<&'a RawValue>,
    thought: Option<bool>,
}

impl HasKind for Part<'_> {
    fn kinds(&self) -> (bool, bool) {
        let thought = self.thought == Some(true) && non_empty(self.text);
        let visible = (non_empty(self.text) && !thought)
            || non_empty(self.function_call)
            || non_empty(self.executable_code)
            || non_empty(self.inline_data);
        (visible, thought)
    }
}

/// Gemini's `generateContent` format (Gemini API and Vertex AI).
pub const WIRE: Wire = Wire {
    name: "gemini",
    operations: &[
        Operation::GenerateContent,
        Operation::StreamGenerateContent,
        Operation::EmbedContent,
    ],
    request_streams: |op, _| op == Operation::StreamGenerateContent,
    adapter: |op| Box::new(GeminiAdapter::new(op)),
    // Without `alt=sse` a stream is one JSON array; an error is one object.
    json_body: |op| match op {
        Some(Operation::StreamGenerateContent) | None => JsonBody::ArrayOrWhole,
        _ => JsonBody::Whole,
    },
};

/// Google's custom methods (`models/{model}:method`), Claude's included.
fn google_method(op: Option<Operation>) -> bool {
    WIRE.owns(op)
        || matches!(
            op,
            Some(Operation::RawPredict | Operation::StreamRawPredict)
        )
}

/// Vertex paths name a project and a location.
fn vertex_path(path: &str) -> bool {
    path.contains("/projects/") && path.contains("/locations/")
}

/// The model in `.../models/{model}:method` or `.../tunedModels/{model}:method`.
fn google_model(path: &str) -> Option<Option<Cow<'_, str>>> {
    let (head, last) = path.rsplit_once('/')?;
    let google = head.ends_with("/models") || head.ends_with("/tunedModels");
    if !(google && last.contains(':')) {
        return None;
    }
    let model = last.split_once(':').map_or("", |(m, _)| m);
    Some((!model.is_empty()).then(|| percent_decode(model)))
}

/// The Gemini API (`generativelanguage.googleapis.com`).
pub const SPEC: ProviderSpec = ProviderSpec {
    kind: ProviderKind::Gemini,
    name: "gcp.gemini",
    config_name: "gemini",
    detect_path: |path, op| google_method(op) && !vertex_path(path),
    detect_response: never_response,
    model_from_path: google_model,
    price_table: Some("google"),
    wire: &WIRE,
};

/// Vertex AI: the same methods under `/projects/{p}/locations/{l}/`.
pub const VERTEX: ProviderSpec = ProviderSpec {
    kind: ProviderKind::Vertex,
    name: "gcp.vertex_ai",
    config_name: "vertex",
    detect_path: |path, op| google_method(op) && vertex_path(path),
    ..SPEC
};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::tests::{Summary, feed_sse};

    fn chunks(op: Option<Operation>, payloads: &[&str]) -> Summary {
        feed_sse(&mut GeminiAdapter::new(op), payloads).expect("valid chunk")
    }

    #[test]
    fn what_counts_as_content() {
        let part = |p: &str| {
            let c = format!(
                r#"{{"candidates":[{{"content":{{"parts":[{p}],"role":"model"}},"index":0}}]}}"#
            );
            chunks(None, &[&c]).pieces
        };
        assert_eq!(part(r#"{"text":"Hi"}"#), 1, "text");
        assert_eq!(part(r#"{"text":""}"#), 0, "empty text");
        assert_eq!(
            part(r#"{"text":"plan","thought":true}"#),
            1,
            "thought summary"
        );
        assert_eq!(
            part(r#"{"text":"","thoughtSignature":"c2ln"}"#),
            0,
            "bare signature"
        );
        assert_eq!(
            part(r#"{"functionCall":{"name":"f","args":{}}}"#),
            1,
            "function call"
        );
        assert_eq!(
            part(r#"{"codeExecutionResult":{"outcome":"OUTCOME_OK","output":"4"}}"#),
            0,
            "tool output"
        );
        assert_eq!(
            chunks(None, &[r#"{"candidates":[{"index":0}]}"#]).pieces,
            0,
            "no content"
        );
    }

    #[test]
    fn usage_adds_thoughts_to_candidates() {
        let s = chunks(
            None,
            &[
                r#"{"usageMetadata":{"promptTokenCount":10,"totalTokenCount":10}}"#,
                r#"{"usageMetadata":{"promptTokenCount":10,"thoughtsTokenCount":30,"totalTokenCount":40}}"#,
                r#"{"usageMetadata":{"promptTokenCount":10,"candidatesTokenCount":5,"thoughtsTokenCount":30,"cachedContentTokenCount":4,"totalTokenCount":45}}"#,
            ],
        );
        assert_eq!(
            s.usage,
            Usage {
                input: Some(10),
                output: Some(35),
                cache_read: Some(4),
                cache_creation: None,
                reasoning: Some(30),
                ..Usage::default()
            }
        );
    }

    #[test]
    fn errors_and_blocked_prompts() {
        let s = chunks(
            None,
            &[
                r#"{"error":{"code":503,"message":"The model is overloaded.","status":"UNAVAILABLE"}}"#,
            ],
        );
        assert_eq!(s.errors, ["UNAVAILABLE"]);
        let s = chunks(None, &[r#"{"error":{"code":500,"message":"m"}}"#]);
        assert_eq!(s.errors, ["500"]);
        let s = chunks(
            None,
            &[
                r#"{"promptFeedback":{"blockReason":"SAFETY","safetyRatings":[]},"usageMetadata":{"promptTokenCount":7,"totalTokenCount":7},"modelVersion":"gemini-2.5-flash"}"#,
            ],
        );
        assert_eq!(s.errors, ["SAFETY"]);
        assert_eq!(s.usage.input, Some(7));
    }

    #[test]
    fn whole_array_in_one_frame() {
        let body = br#"[{"candidates":[{"content":{"parts":[{"text":"a"}]}}],"modelVersion":"m"},
{"candidates":[{"content":{"parts":[{"text":"b"}]},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":1,"candidatesTokenCount":2}}]"#;
        let mut a = GeminiAdapter::new(Some(Operation::StreamGenerateContent));
        let mut s = Summary::default();
        a.on_frame(Frame::Json(body), &mut |e| s.record(e))
            .expect("valid array");
        assert_eq!(
            (s.content_frames, s.finish.clone()),
            (2, vec!["STOP".to_owned()])
        );
        assert_eq!((s.usage.input, s.usage.output), (Some(1), Some(2)));
    }

    #[test]
    fn embeddings_report_no_output() {
        let mut a = GeminiAdapter::new(Some(Operation::EmbedContent));
        let mut s = Summary::default();
        a.on_frame(
            Frame::Json(br#"{"embedding":{"values":[0.1,0.2]}}"#),
            &mut |e| s.record(e),
        )
        .expect("valid");
        assert_eq!((s.pieces, s.usage.output), (0, Some(0)));
    }

    #[test]
    fn malformed_chunks_are_errors() {
        let mut a = GeminiAdapter::new(None);
        let frame = Frame::Sse {
            event: b"",
            data: b"{\"candidates\":",
        };
        assert!(a.on_frame(frame, &mut |_| {}).is_err());
    }
}
