//! Ollama adapter: native `/api/chat`, `/api/generate` and `/api/embed`
//! objects (NDJSON lines when streamed, one object otherwise) in, metering
//! events out. Ollama's OpenAI-compatible `/v1` goes to the OpenAI adapter.
//!
//! The final object (`done: true`) carries the counts (`prompt_eval_count`
//! in, `eval_count` out) and the server's own timings in nanoseconds.
//!
//! An object of the plain shape (a streamed line or a whole answer) is read
//! by the validating scan (`scan.rs`); everything else, and anything
//! unusual, by serde.

use std::time::Duration;

use serde::Deserialize;
use serde_json::value::RawValue;

use super::ProviderKind;
use super::scan::{Scan, Seen};
use super::spec::{FrameAdapter, JsonBody, ProviderSpec, Wire, frame_json, no_model};
use super::wire::{Named, Str, non_empty, non_empty_raw};
use super::{AdapterError, ContentKind, Event, Identity, Operation, UpstreamTiming, Usage};
use crate::framing::Frame;

/// Adapter state for one Ollama response.
#[derive(Debug)]
pub struct OllamaAdapter {
    operation: Option<Operation>,
    identity: Identity,
    /// Try the scan before serde (off only in tests that compare the two).
    scan: bool,
}

impl OllamaAdapter {
    /// An adapter for a response to `operation` (`None` when unknown).
    pub fn new(operation: Option<Operation>) -> Self {
        OllamaAdapter {
            operation,
            identity: Identity::default(),
            scan: true,
        }
    }

    /// An adapter that always takes the serde path, to check the scan
    /// against it.
    #[cfg(test)]
    fn without_scan(operation: Option<Operation>) -> Self {
        OllamaAdapter {
            scan: false,
            ..OllamaAdapter::new(operation)
        }
    }
}

impl FrameAdapter for OllamaAdapter {
    /// Map one frame to zero or more events.
    fn on_frame(
        &mut self,
        frame: Frame<'_>,
        out: &mut dyn FnMut(Event<'_>),
    ) -> Result<(), AdapterError> {
        let data = frame_json(frame, "eventstream frame in an Ollama stream")?;
        if data.is_empty() {
            return Ok(());
        }
        if let Some(line) = self.scan.then(|| Line::scan(data)).flatten() {
            self.on_line(&line, out);
            return Ok(());
        }
        let doc: Doc<'_> =
            serde_json::from_slice(data).map_err(|_| AdapterError("malformed Ollama JSON line"))?;
        if doc.error.is_some() {
            out(Event::Error { kind: "error" });
        }
        self.identity
            .model(doc.model.as_ref().map(Str::as_str), out);
        let (msg_visible, msg_thinking) =
            doc.message.as_ref().map_or((false, false), Message::kinds);
        let kind = ContentKind::of(
            msg_visible || non_empty(doc.response),
            msg_thinking || non_empty(doc.thinking),
        );
        if let Some(kind) = kind {
            out(Event::Content { pieces: 1, kind });
        }
        if let Some(calls) = doc.message.as_ref().and_then(|m| m.tool_calls) {
            emit_tool_calls(calls, out);
        }
        let embeddings = self.operation.is_some_and(Operation::is_embeddings)
            || doc.embeddings.is_some()
            || doc.embedding.is_some();
        let counts = [
            doc.prompt_eval_count,
            doc.eval_count,
            doc.total_duration,
            doc.load_duration,
            doc.prompt_eval_duration,
            doc.eval_duration,
        ];
        let reason = doc.done_reason.as_ref().map(Str::as_str);
        emit_end(counts, embeddings, reason, doc.done, out);
        Ok(())
    }
}

impl OllamaAdapter {
    /// The events the serde path gives for the same object, in order.
    fn on_line(&mut self, l: &Line<'_>, out: &mut dyn FnMut(Event<'_>)) {
        self.identity.model(l.model, out);
        if let Some(kind) = ContentKind::of(l.visible, l.thinking) {
            out(Event::Content { pieces: 1, kind });
        }
        let embeddings = self.operation.is_some_and(Operation::is_embeddings) || l.embeddings;
        emit_end(l.counts, embeddings, l.done_reason, l.done, out);
    }
}

/// One object of the plain shape, borrowed from it: what the serde path
/// reads of it.
#[derive(Default)]
struct Line<'a> {
    model: Option<&'a str>,
    /// Visible output: message text or tool calls, or `response`.
    visible: bool,
    /// Reasoning: `message.thinking` or `thinking`.
    thinking: bool,
    done: Option<bool>,
    done_reason: Option<&'a str>,
    /// `prompt_eval_count`, `eval_count`, `total_duration`,
    /// `load_duration`, `prompt_eval_duration`, `eval_duration`.
    counts: [Option<u64>; 6],
    /// `embeddings` or `embedding` is there (not `null`).
    embeddings: bool,
}

impl<'a> Line<'a> {
    /// `None` (take the serde path) unless the object is valid JSON with
    /// no `error`, no escapes in the strings read and counts as plain
    /// integers.
    fn scan(data: &'a [u8]) -> Option<Line<'a>> {
        let mut l = Line::default();
        let mut seen = Seen::default();
        Scan::document(data, |s, key| {
            let count = match key {
                "prompt_eval_count" => 0,
                "eval_count" => 1,
                "total_duration" => 2,
                "load_duration" => 3,
                "prompt_eval_duration" => 4,
                "eval_duration" => 5,
                "model" => {
                    seen.first(6)?;
                    l.model = s.str_or_null()?;
                    return Some(());
                }
                "done_reason" => {
                    seen.first(7)?;
                    l.done_reason = s.str_or_null()?;
                    return Some(());
                }
                "done" => {
                    seen.first(8)?;
                    l.done = s.bool_or_null()?;
                    return Some(());
                }
                "response" | "thinking" => {
                    seen.first(if key == "response" { 9 } else { 10 })?;
                    let has = s.raw(1)?.is_some_and(non_empty_raw);
                    if key == "response" {
                        l.visible |= has;
                    } else {
                        l.thinking |= has;
                    }
                    return Some(());
                }
                "embeddings" | "embedding" => {
                    seen.first(if key == "embeddings" { 11 } else { 12 })?;
                    l.embeddings |= s.raw(1)?.is_some();
                    return Some(());
                }
                "message" => {
                    seen.first(13)?;
                    if let Some((visible, thinking)) = s.or_null(scan_message)? {
                        l.visible |= visible;
                        l.thinking |= thinking;
                    }
                    return Some(());
                }
                "error" => {
                    seen.first(14)?;
                    return s.null()?.then_some(());
                }
                _ => return s.skip(1),
            };
            seen.first(count)?;
            l.counts[count as usize] = s.u64_or_null()?;
            Some(())
        })?;
        Some(l)
    }
}

/// The events after an object's content, on both paths: usage from
/// `counts` (`prompt_eval_count`, `eval_count`; output 0 for
/// embeddings), the timing from its durations in nanoseconds
/// (`total_duration`, `load_duration`, `prompt_eval_duration`,
/// `eval_duration`), the `done_reason`, and `Done` (an embeddings answer
/// is one whole object without `done`).
fn emit_end(
    [input, output, total, load, prompt_eval, decode]: [Option<u64>; 6],
    embeddings: bool,
    done_reason: Option<&str>,
    done: Option<bool>,
    out: &mut dyn FnMut(Event<'_>),
) {
    if input.is_some() || output.is_some() || embeddings {
        out(Event::Usage(Usage {
            input,
            output: if embeddings { Some(0) } else { output },
            ..Usage::default()
        }));
    }
    let timing = UpstreamTiming {
        total: total.map(Duration::from_nanos),
        load: load.map(Duration::from_nanos),
        prompt_eval: prompt_eval.map(Duration::from_nanos),
        decode: decode.map(Duration::from_nanos),
        ..UpstreamTiming::default()
    };
    if !timing.is_empty() {
        out(Event::UpstreamTiming(timing));
    }
    if let Some(reason) = done_reason.filter(|r| !r.is_empty()) {
        out(Event::FinishReason(reason));
    }
    if done == Some(true) || embeddings {
        out(Event::Done);
    }
}

/// `message`: `(visible, thinking)` as `Message::kinds` gives them.
fn scan_message(s: &mut Scan<'_>) -> Option<(bool, bool)> {
    let (mut visible, mut thinking) = (false, false);
    s.fields(1, ["content", "tool_calls", "thinking"], |s, at| {
        let has = s.raw(2)?.is_some_and(non_empty_raw);
        if at == 1 && has {
            return None; // tool calls are counted and named on the serde path
        }
        if at == 2 {
            thinking |= has;
        } else {
            visible |= has;
        }
        Some(())
    })?;
    Some((visible, thinking))
}

/// The fields of one Ollama object that metering reads.
#[derive(Deserialize)]
struct Doc<'a> {
    #[serde(borrow)]
    model: Option<Str<'a>>,
    /// `/api/chat`.
    #[serde(borrow)]
    message: Option<Message<'a>>,
    /// `/api/generate`.
    #[serde(borrow)]
    response: Option<&'a RawValue>,
    #[serde(borrow)]
    thinking: Option<&'a RawValue>,
    done: Option<bool>,
    #[serde(borrow)]
    done_reason: Option<Str<'a>>,
    prompt_eval_count: Option<u64>,
    eval_count: Option<u64>,
    total_duration: Option<u64>,
    load_duration: Option<u64>,
    prompt_eval_duration: Option<u64>,
    eval_duration: Option<u64>,
    #[serde(borrow)]
    error: Option<&'a RawValue>,
    /// `/api/embed`.
    #[serde(borrow)]
    embeddings: Option<&'a RawValue>,
    /// The older `/api/embeddings`.
    #[serde(borrow)]
    embedding: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct Message<'a> {
    #[serde(borrow)]
    content: Option<&'a RawValue>,
    #[serde(borrow)]
    thinking: Option<&'a RawValue>,
    #[serde(borrow)]
    tool_calls: Option<&'a RawValue>,
}

/// Ollama sends each tool call whole, in one object: each is one call.
fn emit_tool_calls(raw: &RawValue, out: &mut dyn FnMut(Event<'_>)) {
    #[derive(Deserialize)]
    struct Call<'a> {
        #[serde(borrow)]
        function: Option<Named<'a>>,
    }
    let Ok(calls) = serde_json::from_str::<Vec<Call<'_>>>(raw.get()) else {
        return;
    };
    for call in &calls {
        out(Event::ToolCall {
            name: call
                .function
                .as_ref()
                .and_then(|f| f.name.as_ref())
                .map(Str::as_str),
        });
    }
}

impl Message<'_> {
    /// `(visible, thinking)`: text or tool calls, and `thinking`.
    fn kinds(&self) -> (bool, bool) {
        (
            non_empty(self.content) || non_empty(self.tool_calls),
            non_empty(self.thinking),
        )
    }
}

/// Ollama's native format: JSON lines, even under `application/json`.
pub const WIRE: Wire = Wire {
    name: "ollama",
    operations: &[
        Operation::OllamaChat,
        Operation::OllamaGenerate,
        Operation::OllamaEmbed,
    ],
    // Ollama streams unless the body says `"stream": false`.
    request_streams: |op, body_stream| op != Operation::OllamaEmbed && body_stream.unwrap_or(true),
    adapter: |op| Box::new(OllamaAdapter::new(op)),
    json_body: |_| JsonBody::Lines,
};

/// Ollama: `/api/*` paths, or an `application/x-ndjson` response.
pub const SPEC: ProviderSpec = ProviderSpec {
    kind: ProviderKind::Ollama,
    name: "ollama",
    config_name: "ollama",
    detect_path: |_, op| WIRE.owns(op),
    detect_response: |ct| ct.is("application/x-ndjson"),
    model_from_path: no_model,
    price_table: None,
    wire: &WIRE,
};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::scan::differential::{Outcome, json_outcome, mutations};
    use crate::providers::tests::{FIXTURES, Summary, feed_json, ollama_timing};

    /// Objects the scan must read exactly as serde does (or leave to it).
    const LINES: &[&str] = &[
        r#"{"model":"llama3.2","created_at":"t","message":{"role":"assistant","content":"a \"content\":\"b\""},"done":false}"#,
        r#"{"model":"m","message":{"role":"assistant","content":"","thinking":"hm"},"done":false}"#,
        r#"{"model":"m","message":{"content":"","tool_calls":[{"function":{"name":"f","arguments":{}}}]},"done":false}"#,
        r#"{"model":"m","response":"x","thinking":"","done":false}"#,
        r#"{"model":"m","response":"","done":true,"done_reason":"stop","total_duration":5,"load_duration":1,"prompt_eval_count":3,"prompt_eval_duration":2,"eval_count":4,"eval_duration":2}"#,
        r#"{"model":"m","done":true,"done_reason":"","eval_count":null,"context":[1,2,3]}"#,
        r#"{"model":"e","embeddings":[[0.1,-2e-3]],"total_duration":7,"prompt_eval_count":2}"#,
        r#"{"embedding":[0.5]}"#,
        r#"{"embedding":null,"embeddings":null,"done":null,"message":null,"response":null}"#,
        r#"{"model":"","message":{"content":[]}}"#,
        r#"{"model":"m","model":"n"}"#,
        r#"{"model":"m\u0031"}"#,
        r#"{"message":{"content":"x","content":"y"}}"#,
        r#"{"message":{"content":"caf\u00e9 \ud83d\ude00"}}"#,
        r#"{"message":["x"]}"#,
        r#"{"done":1}"#,
        r#"{"done":"true"}"#,
        r#"{"done":tru}"#,
        r#"{"eval_count":1.0}"#,
        r#"{"eval_count":-1}"#,
        r#"{"eval_count":18446744073709551616}"#,
        r#"{"total_duration":18446744073709551615}"#,
        r#"{"done_reason":5}"#,
        r#"{"error":"model not found"}"#,
        r#"{"error":null,"response":"x"}"#,
        r#"{"response":"x"} x"#,
        r#" { "response" : "x" , "done" : false } "#,
        "{",
        "[]",
    ];

    /// The same object through the scan and through serde alone.
    fn scan_and_serde(op: Option<Operation>, line: &[u8]) -> (Outcome, Outcome) {
        (
            json_outcome(|f, out| OllamaAdapter::new(op).on_frame(f, out), line),
            json_outcome(
                |f, out| OllamaAdapter::without_scan(op).on_frame(f, out),
                line,
            ),
        )
    }

    #[test]
    fn scan_reads_fixture_lines_shapes_and_mutations_as_serde_does() {
        let ops = [
            None,
            Some(Operation::OllamaChat),
            Some(Operation::OllamaGenerate),
            Some(Operation::OllamaEmbed),
        ];
        let fixture_lines: Vec<&[u8]> = FIXTURES
            .iter()
            .filter(|f| f.kind == ProviderKind::Ollama)
            .flat_map(|f| f.body.split(|b| *b == b'\n'))
            .filter(|l| !l.trim_ascii().is_empty())
            .collect();
        assert!(
            fixture_lines.len() > 10,
            "{} fixture lines",
            fixture_lines.len()
        );
        // Every recorded line but the error object and tool calls (left to
        // serde to be counted and named) takes the scan.
        for line in &fixture_lines {
            let is_error = line.windows(7).any(|w| w == b"\"error\"");
            let tools = line.windows(15).any(|w| w == b"\"tool_calls\":[{");
            assert_eq!(
                Line::scan(line.trim_ascii()).is_some(),
                !is_error && !tools,
                "{}",
                String::from_utf8_lossy(line)
            );
        }
        let mut scanned = 0;
        let inputs = fixture_lines
            .iter()
            .copied()
            .chain(LINES.iter().map(|s| s.as_bytes()));
        for (i, line) in inputs.enumerate() {
            scanned += usize::from(Line::scan(line.trim_ascii()).is_some());
            let op = ops[i % ops.len()];
            for m in std::iter::once(line.to_vec()).chain(mutations(line, 4000 + i as u64, 100)) {
                let (scan, serde) = scan_and_serde(op, &m);
                assert_eq!(scan, serde, "{op:?} {}", String::from_utf8_lossy(&m));
            }
        }
        // Most shapes above are there to be left to serde (tool calls too);
        // the plain ones must still take the scan.
        let tool_lines = fixture_lines
            .iter()
            .filter(|l| l.windows(15).any(|w| w == b"\"tool_calls\":[{"))
            .count();
        assert!(
            scanned >= fixture_lines.len() - tool_lines + 10,
            "{scanned} scanned"
        );
        // Model once per response, whichever path read it.
        for op in ops {
            let (mut with, mut without) = (OllamaAdapter::new(op), OllamaAdapter::without_scan(op));
            for line in &fixture_lines {
                assert_eq!(
                    json_outcome(|f, out| with.on_frame(f, out), line),
                    json_outcome(|f, out| without.on_frame(f, out), line),
                    "{op:?} sequence"
                );
            }
        }
    }

    fn lines(op: Option<Operation>, lines: &[&str]) -> Result<Summary, AdapterError> {
        feed_json(&mut OllamaAdapter::new(op), lines)
    }

    #[test]
    fn content_thinking_and_tool_calls() {
        let one = |l: &str| lines(None, &[l]).expect("valid").pieces;
        assert_eq!(
            one(r#"{"model":"m","message":{"role":"assistant","content":"Hi"},"done":false}"#),
            1
        );
        assert_eq!(
            one(r#"{"model":"m","message":{"role":"assistant","content":""},"done":false}"#),
            0
        );
        assert_eq!(
            one(
                r#"{"model":"m","message":{"role":"assistant","content":"","thinking":"hm"},"done":false}"#
            ),
            1
        );
        assert_eq!(
            one(
                r#"{"model":"m","message":{"role":"assistant","content":"","tool_calls":[{"function":{"name":"f","arguments":{}}}]},"done":false}"#
            ),
            1
        );
        assert_eq!(one(r#"{"model":"m","response":"The","done":false}"#), 1);
        assert_eq!(
            one(r#"{"model":"m","response":"","thinking":"so","done":false}"#),
            1
        );
    }

    #[test]
    fn final_line_has_counts_and_timings() {
        let s = lines(
            Some(Operation::OllamaChat),
            &[r#"{"model":"llama3.2","created_at":"2025-01-01T00:00:00Z","message":{"role":"assistant","content":""},"done_reason":"stop","done":true,"total_duration":5191566416,"load_duration":2154458,"prompt_eval_count":26,"prompt_eval_duration":383809000,"eval_count":298,"eval_duration":4799921000}"#],
        )
        .expect("valid");
        assert_eq!((s.usage.input, s.usage.output), (Some(26), Some(298)));
        assert_eq!(s.finish, ["stop"]);
        assert_eq!(s.done, 1);
        assert_eq!(
            s.timing,
            ollama_timing([5_191_566_416, 2_154_458, 383_809_000, 4_799_921_000])
        );
    }

    #[test]
    fn error_lines_and_embeddings() {
        let s = lines(
            None,
            &[r#"{"error":"model \"nope\" not found, try pulling it first"}"#],
        )
        .expect("valid");
        assert_eq!(s.errors, ["error"]);
        let s = lines(
            Some(Operation::OllamaEmbed),
            &[r#"{"model":"all-minilm","embeddings":[[0.01,-0.02]],"total_duration":14143917,"load_duration":1019500,"prompt_eval_count":8}"#],
        )
        .expect("valid");
        assert_eq!(
            (s.usage.input, s.usage.output, s.pieces),
            (Some(8), Some(0), 0)
        );
    }

    #[test]
    fn malformed_line_is_an_error() {
        assert!(lines(None, &["{\"model\":"]).is_err());
    }
}
