//! Hugging Face TGI adapter: native `/generate_stream` token events and
//! `/generate` bodies in, metering events out. TGI's `/v1` Messages API is
//! OpenAI-compatible and goes to the OpenAI adapter.
//!
//! Each stream event carries one token; special tokens (end of sequence)
//! are not output. The last event's `details` has `generated_tokens` (and,
//! in recent versions, `input_length`).

use serde::Deserialize;
use serde_json::value::RawValue;

use super::spec::{
    FrameAdapter, ProviderSpec, Wire, each_document, never_response, no_model, whole_json,
};
use super::wire::{Str, non_empty};
use super::{AdapterError, Event, Usage};
use super::{Operation, ProviderKind};
use crate::framing::Frame;

/// Adapter state for one TGI response.
#[derive(Debug, Default)]
pub struct TgiAdapter;

impl TgiAdapter {
    /// A fresh adapter for one response.
    pub fn new() -> Self {
        TgiAdapter
    }
}

impl FrameAdapter for TgiAdapter {
    /// Map one frame to zero or more events.
    fn on_frame(
        &mut self,
        frame: Frame<'_>,
        out: &mut dyn FnMut(Event<'_>),
    ) -> Result<(), AdapterError> {
        // `/generate` on some versions (and the `/` route) wraps the
        // response in an array.
        each_document(
            frame,
            "eventstream frame in a TGI stream",
            "malformed TGI JSON array",
            |doc| on_doc(doc, out),
        )
    }
}

fn on_doc(data: &[u8], out: &mut dyn FnMut(Event<'_>)) -> Result<(), AdapterError> {
    let doc: Doc<'_> =
        serde_json::from_slice(data).map_err(|_| AdapterError("malformed TGI JSON payload"))?;
    if doc.error.is_some() {
        let kind = doc
            .error_type
            .as_ref()
            .map(Str::as_str)
            .filter(|k| !k.is_empty())
            .unwrap_or("error");
        out(Event::Error { kind });
    }
    let content = match &doc.token {
        Some(token) => !token.special.unwrap_or(false) && non_empty(token.text),
        None => non_empty(doc.generated_text),
    };
    if content {
        out(Event::ONE_VISIBLE);
    }
    if let Some(details) = &doc.details {
        if details.generated_tokens.is_some() || details.input_length.is_some() {
            out(Event::Usage(Usage {
                input: details.input_length,
                output: details.generated_tokens,
                ..Usage::default()
            }));
        }
        if let Some(r) = details
            .finish_reason
            .as_ref()
            .filter(|r| !r.as_str().is_empty())
        {
            out(Event::FinishReason(r.as_str()));
        }
        if doc.token.is_some() {
            out(Event::Done);
        }
    }
    Ok(())
}

#[derive(Deserialize)]
struct Doc<'a> {
    #[serde(borrow)]
    token: Option<Token<'a>>,
    #[serde(borrow)]
    generated_text: Option<&'a RawValue>,
    #[serde(borrow)]
    details: Option<Details<'a>>,
    #[serde(borrow)]
    error: Option<&'a RawValue>,
    #[serde(borrow)]
    error_type: Option<Str<'a>>,
}

#[derive(Deserialize)]
struct Token<'a> {
    #[serde(borrow)]
    text: Option<&'a RawValue>,
    special: Option<bool>,
}

#[derive(Deserialize)]
struct Details<'a> {
    #[serde(borrow)]
    finish_reason: Option<Str<'a>>,
    generated_tokens: Option<u64>,
    input_length: Option<u64>,
}

/// TGI's native format (`/generate`, `/generate_stream`).
pub const WIRE: Wire = Wire {
    name: "tgi",
    operations: &[Operation::TgiGenerate, Operation::TgiGenerateStream],
    request_streams: |op, _| op == Operation::TgiGenerateStream,
    adapter: |_| Box::new(TgiAdapter::new()),
    json_body: whole_json,
};

/// Hugging Face TGI: `/generate`, `/generate_stream`.
pub const SPEC: ProviderSpec = ProviderSpec {
    kind: ProviderKind::Tgi,
    name: "tgi",
    config_name: "tgi",
    detect_path: |_, op| WIRE.owns(op),
    detect_response: never_response,
    model_from_path: no_model,
    price_table: None,
    wire: &WIRE,
};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::tests::{Summary, feed_json};

    fn run(payloads: &[&str]) -> Summary {
        feed_json(&mut TgiAdapter::new(), payloads).expect("valid")
    }

    #[test]
    fn special_tokens_and_final_text_are_not_content() {
        let s = run(&[
            r#"{"index":1,"token":{"id":22557,"text":"Hello","logprob":-0.4,"special":false},"generated_text":null,"details":null}"#,
            r#"{"index":2,"token":{"id":2,"text":"</s>","logprob":-0.1,"special":true},"generated_text":"Hello","details":{"finish_reason":"eos_token","generated_tokens":2,"seed":null,"input_length":7}}"#,
        ]);
        assert_eq!(s.content_frames, 1);
        assert_eq!((s.usage.input, s.usage.output), (Some(7), Some(2)));
        assert_eq!(
            (s.finish.clone(), s.done),
            (vec!["eos_token".to_owned()], 1)
        );
    }

    #[test]
    fn whole_bodies_and_errors() {
        let s = run(&[
            r#"{"generated_text":"Deep learning is","details":{"finish_reason":"length","generated_tokens":3,"seed":null,"prefill":[],"tokens":[]}}"#,
        ]);
        assert_eq!((s.pieces, s.usage.output), (1, Some(3)));
        let s = run(&[r#"[{"generated_text":"Hi"}]"#]);
        assert_eq!(s.pieces, 1);
        let s = run(&[
            r#"{"error":"Input validation error: `inputs` must not be empty","error_type":"validation"}"#,
        ]);
        assert_eq!(s.errors, ["validation"]);
    }
}
