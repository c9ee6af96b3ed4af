//! Ollama adapter: native `/api/chat`, `/api/generate` and `/api/embed`
//! objects (NDJSON lines when streamed, one object otherwise) in, metering
//! events out. Ollama's OpenAI-compatible `/v1` goes to the OpenAI adapter.
//!
//! The final object (`done: true`) carries the counts (`prompt_eval_count`
//! in, `eval_count` out) and the server's own timings in nanoseconds.

use std::time::Duration;

use serde::Deserialize;
use serde_json::value::RawValue;

use super::ProviderKind;
use super::spec::{FrameAdapter, JsonBody, ProviderSpec, Wire, no_model};
use super::wire::{Str, non_empty};
use super::{AdapterError, ContentKind, Event, Operation, UpstreamTiming, Usage};
use crate::framing::Frame;

/// Adapter state for one Ollama response.
#[derive(Debug)]
pub struct OllamaAdapter {
    operation: Option<Operation>,
    model_seen: bool,
}

impl OllamaAdapter {
    /// An adapter for a response to `operation` (`None` when unknown).
    pub fn new(operation: Option<Operation>) -> Self {
        OllamaAdapter {
            operation,
            model_seen: false,
        }
    }

    /// Map one frame to zero or more events.
    pub fn on_frame(
        &mut self,
        frame: Frame<'_>,
        out: &mut dyn FnMut(Event<'_>),
    ) -> Result<(), AdapterError> {
        let data = match frame {
            Frame::Json(line) => line.trim_ascii(),
            Frame::Sse { data, .. } => data.trim_ascii(),
            Frame::AwsEvent { .. } => {
                return Err(AdapterError("eventstream frame in an Ollama stream"));
            }
        };
        if data.is_empty() {
            return Ok(());
        }
        let doc: Doc<'_> =
            serde_json::from_slice(data).map_err(|_| AdapterError("malformed Ollama JSON line"))?;
        if doc.error.is_some() {
            out(Event::Error { kind: "error" });
        }
        if !self.model_seen {
            if let Some(m) = doc.model.as_ref().filter(|m| !m.as_str().is_empty()) {
                out(Event::Model(m.as_str()));
                self.model_seen = true;
            }
        }
        let (msg_visible, msg_thinking) =
            doc.message.as_ref().map_or((false, false), Message::kinds);
        let kind = ContentKind::of(
            msg_visible || non_empty(doc.response),
            msg_thinking || non_empty(doc.thinking),
        );
        if let Some(kind) = kind {
            out(Event::Content { pieces: 1, kind });
        }
        let embeddings = self.operation.is_some_and(Operation::is_embeddings)
            || doc.embeddings.is_some()
            || doc.embedding.is_some();
        if doc.prompt_eval_count.is_some() || doc.eval_count.is_some() || embeddings {
            out(Event::Usage(Usage {
                input: doc.prompt_eval_count,
                output: if embeddings { Some(0) } else { doc.eval_count },
                ..Usage::default()
            }));
        }
        let timing = UpstreamTiming {
            total: doc.total_duration.map(Duration::from_nanos),
            load: doc.load_duration.map(Duration::from_nanos),
            prompt_eval: doc.prompt_eval_duration.map(Duration::from_nanos),
            decode: doc.eval_duration.map(Duration::from_nanos),
            ..UpstreamTiming::default()
        };
        if !timing.is_empty() {
            out(Event::UpstreamTiming(timing));
        }
        if let Some(reason) = doc.done_reason.as_ref().filter(|r| !r.as_str().is_empty()) {
            out(Event::FinishReason(reason.as_str()));
        }
        // An embeddings answer is one whole object without `done`.
        if doc.done == Some(true) || embeddings {
            out(Event::Done);
        }
        Ok(())
    }
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

impl Message<'_> {
    /// `(visible, thinking)`: text or tool calls, and `thinking`.
    fn kinds(&self) -> (bool, bool) {
        (
            non_empty(self.content) || non_empty(self.tool_calls),
            non_empty(self.thinking),
        )
    }
}

impl FrameAdapter for OllamaAdapter {
    fn on_frame(
        &mut self,
        frame: Frame<'_>,
        out: &mut dyn FnMut(Event<'_>),
    ) -> Result<(), AdapterError> {
        OllamaAdapter::on_frame(self, frame, out)
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
    wire: &WIRE,
};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::tests::Summary;

    fn lines(op: Option<Operation>, lines: &[&str]) -> Result<Summary, AdapterError> {
        let mut a = OllamaAdapter::new(op);
        let mut s = Summary::default();
        for l in lines {
            a.on_frame(Frame::Json(l.as_bytes()), &mut |e| s.record(e))?;
        }
        Ok(s)
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
            UpstreamTiming {
                total: Some(Duration::from_nanos(5_191_566_416)),
                load: Some(Duration::from_nanos(2_154_458)),
                prompt_eval: Some(Duration::from_nanos(383_809_000)),
                decode: Some(Duration::from_nanos(4_799_921_000)),
                ..UpstreamTiming::default()
            }
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
