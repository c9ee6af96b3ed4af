//! Provider adapters: frames in, metering events out.
//!
//! An adapter knows one API family's wire format and nothing about HTTP.
//! It decides cheaply, per frame, whether the frame carries output content,
//! usage, a model name or an error, without building a `serde_json::Value`.

pub mod anthropic;
pub mod openai;

use crate::framing::{Frame, FramingError, sse::SseDecoder};

/// The API family a route speaks; picks the adapter and the
/// `gen_ai.provider.name` value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ProviderKind {
    /// OpenAI and OpenAI-compatible servers.
    Openai,
    /// Anthropic Messages API.
    Anthropic,
}

impl ProviderKind {
    /// The `gen_ai.provider.name` value.
    pub fn as_str(self) -> &'static str {
        match self {
            ProviderKind::Openai => "openai",
            ProviderKind::Anthropic => "anthropic",
        }
    }

    /// Guess the provider from a request path (after the route prefix is stripped).
    pub fn detect(path: &str) -> Option<ProviderKind> {
        if path.ends_with("/messages") || path.ends_with("/complete") {
            Some(ProviderKind::Anthropic)
        } else if Operation::from_path(path).is_some() {
            Some(ProviderKind::Openai)
        } else {
            None
        }
    }
}

/// The operation a request performs (`gen_ai.operation.name`), with the
/// endpoint shape the adapter needs to know.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operation {
    /// OpenAI `/chat/completions`.
    ChatCompletions,
    /// OpenAI legacy `/completions`.
    Completions,
    /// OpenAI `/responses`.
    Responses,
    /// OpenAI `/embeddings`.
    Embeddings,
    /// Anthropic `/messages`.
    Messages,
}

impl Operation {
    /// The `gen_ai.operation.name` value.
    pub fn name(self) -> &'static str {
        match self {
            Operation::ChatCompletions | Operation::Responses | Operation::Messages => "chat",
            Operation::Completions => "text_completion",
            Operation::Embeddings => "embeddings",
        }
    }

    /// Recognise the operation from the request path's last segments.
    pub fn from_path(path: &str) -> Option<Operation> {
        let path = path.split('?').next().unwrap_or(path).trim_end_matches('/');
        if path.ends_with("/chat/completions") {
            Some(Operation::ChatCompletions)
        } else if path.ends_with("/completions") {
            Some(Operation::Completions)
        } else if path.ends_with("/responses") {
            Some(Operation::Responses)
        } else if path.ends_with("/embeddings") {
            Some(Operation::Embeddings)
        } else if path.ends_with("/messages") {
            Some(Operation::Messages)
        } else {
            None
        }
    }
}

/// Token usage as reported by a provider. Absent fields were not reported.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub input: Option<u64>,
    pub output: Option<u64>,
    /// Input tokens served from the provider's prompt cache.
    pub cache_read: Option<u64>,
    /// Input tokens written to the provider's prompt cache (Anthropic).
    pub cache_creation: Option<u64>,
    /// Output tokens spent on reasoning (included in `output`).
    pub reasoning: Option<u64>,
}

impl Usage {
    /// Overwrite every field `newer` reports; keep the rest.
    pub fn merge(&mut self, newer: Usage) {
        let pick = |old: &mut Option<u64>, new: Option<u64>| {
            if new.is_some() {
                *old = new;
            }
        };
        pick(&mut self.input, newer.input);
        pick(&mut self.output, newer.output);
        pick(&mut self.cache_read, newer.cache_read);
        pick(&mut self.cache_creation, newer.cache_creation);
        pick(&mut self.reasoning, newer.reasoning);
    }
}

/// What a frame meant, as far as metering cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event<'a> {
    /// The frame carried output content (text, tool-call arguments,
    /// reasoning). `pieces` is the number of content pieces in the frame
    /// (usually 1), used to estimate tokens when no usage is reported.
    Content { pieces: u32 },
    /// Usage reported by the provider; later reports overwrite earlier ones
    /// field by field.
    Usage(Usage),
    /// The model that answered (`gen_ai.response.model`).
    Model(&'a str),
    /// The provider's response id (`gen_ai.response.id`).
    ResponseId(&'a str),
    /// Why generation stopped (`gen_ai.response.finish_reasons`).
    FinishReason(&'a str),
    /// The provider reported an error inside the body, e.g. a mid-stream
    /// error event under HTTP 200. `kind` becomes `error.type`.
    Error { kind: &'a str },
    /// The provider's explicit end-of-stream marker (`[DONE]`, `message_stop`,
    /// `response.completed`).
    Done,
}

/// A frame the adapter could not make sense of.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct AdapterError(pub &'static str);

/// Why a response body could not be metered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error(transparent)]
    Framing(#[from] FramingError),
    #[error("unexpected payload: {0}")]
    Adapter(#[from] AdapterError),
}

/// Adapter state for one response.
#[derive(Debug)]
pub enum Adapter {
    Openai(openai::OpenaiAdapter),
    Anthropic(anthropic::AnthropicAdapter),
}

impl Adapter {
    /// The adapter for `kind` answering `operation`.
    pub fn new(kind: ProviderKind, operation: Option<Operation>) -> Adapter {
        match kind {
            ProviderKind::Openai => Adapter::Openai(openai::OpenaiAdapter::new(operation)),
            ProviderKind::Anthropic => Adapter::Anthropic(anthropic::AnthropicAdapter::new()),
        }
    }

    /// Map one frame to zero or more events.
    pub fn on_frame(
        &mut self,
        frame: Frame<'_>,
        out: &mut dyn FnMut(Event<'_>),
    ) -> Result<(), AdapterError> {
        match self {
            Adapter::Openai(a) => a.on_frame(frame, out),
            Adapter::Anthropic(a) => a.on_frame(frame, out),
        }
    }
}

/// The body's framing, chosen from the response `Content-Type`.
#[derive(Debug)]
pub enum Framing {
    /// `text/event-stream`.
    Sse(SseDecoder),
    /// A whole JSON body, collected up to the frame limit.
    Json { buf: Vec<u8>, limit: usize },
}

/// Framing plus adapter: response body chunks in, events out.
#[derive(Debug)]
pub struct Parser {
    framing: Framing,
    adapter: Adapter,
}

impl Parser {
    /// A parser for a response with the given `Content-Type`, or `None`
    /// when the body is in a format tokentap does not meter.
    pub fn new(
        kind: ProviderKind,
        operation: Option<Operation>,
        content_type: &str,
        max_frame: usize,
    ) -> Option<Parser> {
        let mime = content_type.split(';').next().unwrap_or("").trim();
        let framing = if mime.eq_ignore_ascii_case("text/event-stream") {
            Framing::Sse(SseDecoder::new(max_frame))
        } else if mime.eq_ignore_ascii_case("application/json") || mime.is_empty() {
            Framing::Json { buf: Vec::new(), limit: max_frame }
        } else {
            return None;
        };
        Some(Parser { framing, adapter: Adapter::new(kind, operation) })
    }

    /// Feed one chunk of the (decompressed) response body.
    pub fn feed(&mut self, chunk: &[u8], out: &mut dyn FnMut(Event<'_>)) -> Result<(), ParseError> {
        let adapter = &mut self.adapter;
        match &mut self.framing {
            Framing::Sse(dec) => {
                let mut failed = None;
                dec.feed(chunk, &mut |frame| {
                    if failed.is_none() {
                        if let Err(e) = adapter.on_frame(frame, out) {
                            failed = Some(e);
                        }
                    }
                })?;
                failed.map_or(Ok(()), |e| Err(e.into()))
            }
            Framing::Json { buf, limit } => {
                if buf.len() + chunk.len() > *limit {
                    return Err(FramingError::TooLarge { limit: *limit }.into());
                }
                buf.extend_from_slice(chunk);
                Ok(())
            }
        }
    }

    /// The body ended: flush what the framing still holds.
    pub fn finish(&mut self, out: &mut dyn FnMut(Event<'_>)) -> Result<(), ParseError> {
        let adapter = &mut self.adapter;
        match &mut self.framing {
            Framing::Sse(dec) => {
                let mut failed = None;
                dec.finish(&mut |frame| {
                    if failed.is_none() {
                        if let Err(e) = adapter.on_frame(frame, out) {
                            failed = Some(e);
                        }
                    }
                })?;
                failed.map_or(Ok(()), |e| Err(e.into()))
            }
            Framing::Json { buf, .. } => {
                let body = std::mem::take(buf);
                if body.iter().all(u8::is_ascii_whitespace) {
                    return Ok(());
                }
                adapter.on_frame(Frame::Json(&body), out)?;
                Ok(())
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// What a whole response amounted to, folded from its events.
    #[derive(Debug, Default, Clone, PartialEq, Eq)]
    pub(crate) struct Summary {
        /// Number of `Content` events.
        pub content_frames: u32,
        /// Sum of their `pieces`.
        pub pieces: u32,
        /// Usage merged field by field, as the meter does.
        pub usage: Usage,
        pub model: Option<String>,
        pub response_id: Option<String>,
        pub finish: Vec<String>,
        pub errors: Vec<String>,
        pub done: u32,
    }

    impl Summary {
        pub(crate) fn record(&mut self, event: Event<'_>) {
            match event {
                Event::Content { pieces } => {
                    self.content_frames += 1;
                    self.pieces += pieces;
                }
                Event::Usage(u) => self.usage.merge(u),
                Event::Model(m) => self.model = Some(m.to_owned()),
                Event::ResponseId(id) => self.response_id = Some(id.to_owned()),
                Event::FinishReason(r) => self.finish.push(r.to_owned()),
                Event::Error { kind } => self.errors.push(kind.to_owned()),
                Event::Done => self.done += 1,
            }
        }
    }

    /// Everything a parse produced: the folded summary, every event in
    /// order, and the first error.
    pub(crate) type Run = (Summary, Vec<String>, Result<(), ParseError>);

    /// Parse `pieces` in order with a fresh parser, then finish.
    pub(crate) fn run(
        kind: ProviderKind,
        operation: Option<Operation>,
        content_type: &str,
        pieces: &[&[u8]],
    ) -> Run {
        let mut parser =
            Parser::new(kind, operation, content_type, 1 << 20).expect("a metered content type");
        let mut summary = Summary::default();
        let mut log = Vec::new();
        let mut on = |e: Event<'_>| {
            log.push(format!("{e:?}"));
            summary.record(e);
        };
        let mut result = Ok(());
        for piece in pieces {
            result = parser.feed(piece, &mut on);
            if result.is_err() {
                break;
            }
        }
        if result.is_ok() {
            result = parser.finish(&mut on);
        }
        (summary, log, result)
    }

    /// A fixture and the route it came from.
    pub(crate) struct Fixture {
        pub name: &'static str,
        pub kind: ProviderKind,
        pub operation: Operation,
        pub body: &'static [u8],
    }

    impl Fixture {
        pub(crate) fn content_type(&self) -> &'static str {
            if self.name.ends_with(".json") {
                "application/json"
            } else {
                "text/event-stream; charset=utf-8"
            }
        }

        /// Parse the whole body in one piece.
        pub(crate) fn run(&self) -> Run {
            run(self.kind, Some(self.operation), self.content_type(), &[self.body])
        }
    }

    macro_rules! fixture {
        ($kind:ident, $op:ident, $path:literal) => {
            Fixture {
                name: $path,
                kind: ProviderKind::$kind,
                operation: Operation::$op,
                body: include_bytes!(concat!("../tests/fixtures/", $path)),
            }
        };
    }

    pub(crate) const FIXTURES: &[Fixture] = &[
        fixture!(Openai, ChatCompletions, "openai/chat_stream_usage.sse"),
        fixture!(Openai, ChatCompletions, "openai/chat_stream.sse"),
        fixture!(Openai, ChatCompletions, "openai/chat_stream_crlf.sse"),
        fixture!(Openai, ChatCompletions, "openai/chat_stream_tool_calls.sse"),
        fixture!(Openai, ChatCompletions, "openai/chat_stream_error.sse"),
        fixture!(Openai, ChatCompletions, "openai/azure_chat_stream.sse"),
        fixture!(Openai, ChatCompletions, "openai/chat.json"),
        fixture!(Openai, Completions, "openai/completions_stream.sse"),
        fixture!(Openai, Responses, "openai/responses_stream.sse"),
        fixture!(Openai, Responses, "openai/responses.json"),
        fixture!(Openai, Responses, "openai/responses_failed_stream.sse"),
        fixture!(Openai, Embeddings, "openai/embeddings.json"),
        fixture!(Anthropic, Messages, "anthropic/messages_stream.sse"),
        fixture!(Anthropic, Messages, "anthropic/messages_stream_tool_use.sse"),
        fixture!(Anthropic, Messages, "anthropic/messages_stream_thinking.sse"),
        fixture!(Anthropic, Messages, "anthropic/messages_stream_error.sse"),
        fixture!(Anthropic, Messages, "anthropic/message.json"),
        fixture!(Anthropic, Messages, "anthropic/error.json"),
    ];

    /// The fixture called `name`.
    pub(crate) fn fixture(name: &str) -> &'static Fixture {
        FIXTURES.iter().find(|f| f.name == name).expect("a known fixture")
    }

    #[test]
    fn every_fixture_parses_the_same_at_every_split() {
        for f in FIXTURES {
            let whole = f.run();
            assert_eq!(whole.2, Ok(()), "{}: parses without error", f.name);
            assert!(!whole.1.is_empty(), "{}: yields events", f.name);
            for at in 0..=f.body.len() {
                let (a, b) = f.body.split_at(at);
                let split = run(f.kind, Some(f.operation), f.content_type(), &[a, b]);
                assert_eq!(split, whole, "{}: split at {at} differs", f.name);
            }
            let bytes: Vec<&[u8]> = f.body.chunks(1).collect();
            let bytewise = run(f.kind, Some(f.operation), f.content_type(), &bytes);
            assert_eq!(bytewise, whole, "{}: byte-by-byte differs", f.name);
        }
    }

    #[test]
    fn every_fixture_parses_without_knowing_the_operation() {
        for f in FIXTURES.iter().filter(|f| f.operation != Operation::Embeddings) {
            let known = f.run();
            let unknown = run(f.kind, None, f.content_type(), &[f.body]);
            assert_eq!(unknown, known, "{}: operation should not matter", f.name);
        }
    }

    #[test]
    fn unknown_content_type_is_not_metered() {
        assert!(Parser::new(ProviderKind::Openai, None, "audio/mpeg", 1024).is_none());
        assert!(Parser::new(ProviderKind::Openai, None, "Text/Event-Stream", 1024).is_some());
    }

    #[test]
    fn oversized_json_body_is_rejected() {
        let mut parser = Parser::new(ProviderKind::Openai, None, "application/json", 8)
            .expect("a metered content type");
        let err = parser.feed(b"{\"model\":\"gpt\"}", &mut |_| {});
        assert_eq!(err, Err(ParseError::Framing(FramingError::TooLarge { limit: 8 })));
    }

    #[test]
    fn malformed_data_frame_is_an_adapter_error() {
        let (_, _, result) = run(
            ProviderKind::Openai,
            Some(Operation::ChatCompletions),
            "text/event-stream",
            &[b"data: {\"choices\": [\n\n"],
        );
        assert!(matches!(result, Err(ParseError::Adapter(_))), "got {result:?}");
    }
}
