//! What a provider says about itself: a `ProviderSpec` (names, detection,
//! framing, adapter) in, nothing out; plus the response format, read once
//! from the `Content-Type`, that detection, the parser and the meter share.

use std::borrow::Cow;

use super::{AdapterError, Event, Operation, ProviderKind};
use crate::framing::Frame;

/// One provider's description. Each provider module exports one as `SPEC`
/// (OpenAI-compatible servers are one-liners in `compat.rs`); the registry
/// in `providers.rs` lists them all.
#[derive(Clone, Copy)]
pub struct ProviderSpec {
    /// The kind this spec describes.
    pub kind: ProviderKind,
    /// The `gen_ai.provider.name` value.
    pub name: &'static str,
    /// The name used in configuration (`provider = "..."`); the kind's
    /// lowercase spelling.
    pub config_name: &'static str,
    /// Whether a request path (query stripped) and the operation read from
    /// it name this provider. Specs are disjoint: at most one matches.
    pub detect_path: fn(path: &str, operation: Option<Operation>) -> bool,
    /// Response formats that name this provider when neither the route nor
    /// the path did (Bedrock's eventstream, Ollama's `application/x-ndjson`).
    pub detect_response: fn(&ContentType<'_>) -> bool,
    /// The model named by the request path (query and trailing `/`
    /// stripped): `Some` when the path has this API's model shape, holding
    /// `None` when the model there is empty (no other shape is then tried).
    pub model_from_path: fn(path: &str) -> Option<Option<Cow<'_, str>>>,
    /// The wire format it speaks when the operation does not decide
    /// (OpenAI-compatible servers speak `openai::WIRE`).
    pub wire: &'static Wire,
    /// The provider's id in the embedded price table (`openai`, `google`,
    /// `aws`, …); `None` for self-hosted servers, priced only by overrides.
    pub price_table: Option<&'static str>,
}

impl ProviderSpec {
    /// This spec, priced from the table's provider `id`.
    pub const fn priced_as(self, id: &'static str) -> ProviderSpec {
        ProviderSpec {
            price_table: Some(id),
            ..self
        }
    }
}

/// One wire format: the adapter that reads it, how its bodies are framed,
/// and the operations (endpoints) that speak it.
#[derive(Clone, Copy)]
pub struct Wire {
    /// A short name for the format (the module that defines it).
    pub name: &'static str,
    /// The operations whose responses are in this format; a known
    /// operation picks its format whatever the provider kind.
    pub operations: &'static [Operation],
    /// Whether the client asked for a stream, for an operation listed
    /// above: `body_stream` is the request body's `"stream"`, if any.
    pub request_streams: fn(operation: Operation, body_stream: Option<bool>) -> bool,
    /// A fresh adapter for one response to `operation` (`None` = unknown).
    pub adapter: fn(operation: Option<Operation>) -> Box<dyn FrameAdapter>,
    /// How a JSON (or untyped) body is framed for this adapter.
    pub json_body: fn(operation: Option<Operation>) -> JsonBody,
}

impl Wire {
    /// Whether `operation` is one of this format's.
    pub fn owns(&self, operation: Option<Operation>) -> bool {
        operation.is_some_and(|op| self.operations.contains(&op))
    }
}

impl std::fmt::Debug for Wire {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wire")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for ProviderSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProviderSpec")
            .field("kind", &self.kind)
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// Maps one provider's frames to metering events; one value per response.
pub trait FrameAdapter: std::fmt::Debug + Send + Sync {
    /// Map one frame to zero or more events.
    fn on_frame(
        &mut self,
        frame: Frame<'_>,
        out: &mut dyn FnMut(Event<'_>),
    ) -> Result<(), AdapterError>;
}

/// The JSON text a frame carries, trimmed: an SSE event's data or a whole
/// document. An AWS eventstream frame is `AdapterError(wrong)`: the
/// adapter's provider never sends one.
pub(crate) fn frame_json<'a>(
    frame: Frame<'a>,
    wrong: &'static str,
) -> Result<&'a [u8], AdapterError> {
    match frame {
        Frame::Sse { data, .. } => Ok(data.trim_ascii()),
        Frame::Json(body) => Ok(body.trim_ascii()),
        Frame::AwsEvent { .. } => Err(AdapterError(wrong)),
    }
}

/// Each JSON document a frame carries (`frame_json`), through `each`:
/// none when it is empty, and a JSON array element by element (a streamed
/// array read as one body, or a response wrapped in an array);
/// `AdapterError(bad_array)` when such an array does not parse.
pub(crate) fn each_document(
    frame: Frame<'_>,
    wrong: &'static str,
    bad_array: &'static str,
    mut each: impl FnMut(&[u8]) -> Result<(), AdapterError>,
) -> Result<(), AdapterError> {
    let data = frame_json(frame, wrong)?;
    match data.first() {
        None => Ok(()),
        Some(b'[') => {
            let items: Vec<&serde_json::value::RawValue> =
                serde_json::from_slice(data).map_err(|_| AdapterError(bad_array))?;
            items.iter().try_for_each(|i| each(i.get().as_bytes()))
        }
        Some(_) => each(data),
    }
}

/// How a body labelled `application/json` (or with no type) is framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JsonBody {
    /// One JSON document, collected whole.
    Whole,
    /// One JSON document per line (Ollama streams under `application/json`).
    Lines,
    /// A streamed JSON array or a single document: the first byte decides
    /// (Gemini `streamGenerateContent` without `alt=sse`).
    ArrayOrWhole,
}

/// A `detect_path` that never matches: the kind comes from configuration.
pub const fn never_path(_: &str, _: Option<Operation>) -> bool {
    false
}

/// A `detect_response` that never matches.
pub const fn never_response(_: &ContentType<'_>) -> bool {
    false
}

/// No model in the path.
pub fn no_model(_: &str) -> Option<Option<Cow<'_, str>>> {
    None
}

/// Stream only when the body says `"stream": true`.
pub fn body_says(_: Operation, body_stream: Option<bool>) -> bool {
    body_stream.unwrap_or(false)
}

/// Every JSON body is one whole document.
pub fn whole_json(_: Option<Operation>) -> JsonBody {
    JsonBody::Whole
}

/// What a response body is, decided once from its `Content-Type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResponseFormat {
    /// `text/event-stream`.
    Sse,
    /// `application/x-ndjson`, `application/ndjson`, `application/jsonl`.
    Ndjson,
    /// `application/vnd.amazon.eventstream`.
    EventStream,
    /// `application/json`, or no type at all: one document, or (for some
    /// adapters) lines or a streamed array, see `JsonBody`.
    Json,
    /// Anything else: not metered.
    Other,
}

impl ResponseFormat {
    /// Whether the format is streamed in itself, whatever the request said.
    pub fn is_stream(self) -> bool {
        matches!(
            self,
            ResponseFormat::Sse | ResponseFormat::Ndjson | ResponseFormat::EventStream
        )
    }
}

/// A response `Content-Type`, parsed once: its media type (parameters
/// dropped) and the format it means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContentType<'a> {
    /// The media type as sent, without parameters or surrounding space.
    pub mime: &'a str,
    /// The body format it announces.
    pub format: ResponseFormat,
}

impl<'a> ContentType<'a> {
    /// Parse a `Content-Type` header value (empty when absent).
    pub fn parse(header: &'a str) -> ContentType<'a> {
        let mime = header.split(';').next().unwrap_or("").trim();
        let is = |m: &str| mime.eq_ignore_ascii_case(m);
        let format = if is("text/event-stream") {
            ResponseFormat::Sse
        } else if is("application/vnd.amazon.eventstream") {
            ResponseFormat::EventStream
        } else if is("application/x-ndjson") || is("application/ndjson") || is("application/jsonl")
        {
            ResponseFormat::Ndjson
        } else if is("application/json") || mime.is_empty() {
            ResponseFormat::Json
        } else {
            ResponseFormat::Other
        };
        ContentType { mime, format }
    }

    /// Whether the media type is `mime` (ASCII case-insensitive).
    pub fn is(&self, mime: &str) -> bool {
        self.mime.eq_ignore_ascii_case(mime)
    }

    /// Whether the body is streamed in itself, whatever the request said.
    pub fn is_stream(&self) -> bool {
        self.format.is_stream()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_types_parse_once_into_a_format() {
        let f = |h| ContentType::parse(h).format;
        assert_eq!(f("text/event-stream; charset=utf-8"), ResponseFormat::Sse);
        assert_eq!(f(" Text/Event-Stream "), ResponseFormat::Sse);
        assert_eq!(f("application/jsonl"), ResponseFormat::Ndjson);
        assert_eq!(
            f("application/vnd.amazon.eventstream"),
            ResponseFormat::EventStream
        );
        assert_eq!(f(""), ResponseFormat::Json);
        assert_eq!(f("application/json; charset=utf-8"), ResponseFormat::Json);
        assert_eq!(f("audio/mpeg"), ResponseFormat::Other);
        assert!(ContentType::parse("application/x-ndjson").is_stream());
        assert!(!ContentType::parse("application/json").is_stream());
        assert_eq!(ContentType::parse("a/b ; q=1").mime, "a/b");
    }
}
