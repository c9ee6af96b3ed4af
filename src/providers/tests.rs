//! Unit tests of `providers`: its own code in, assertions out.

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
    /// 1 once a terminal event (`Event::Done`) was seen: the meter
    /// asks only whether (OpenAI sends one per chunk with a
    /// `finish_reason`).
    pub done: u32,
    /// Server timings merged field by field.
    pub timing: UpstreamTiming,
    /// Text pieces, decoded from their JSON string literals.
    pub texts: Vec<String>,
    /// Events skipped as malformed (`Parser::malformed_events`).
    pub malformed: u64,
    /// Client tool calls (`Event::ToolCall`).
    pub tool_calls: u32,
    /// Their names, in order, repeats kept (unnamed calls as "").
    pub tool_names: Vec<String>,
    /// Provider-run tool calls seen, per `ServerTool::ALL` index.
    pub server_seen: [u32; 5],
    /// The provider's billed counts, per `ServerTool::ALL` index.
    pub server_billed: [Option<u32>; 5],
}

/// The timing of an Ollama answer from its durations in nanoseconds:
/// `total_duration`, `load_duration`, `prompt_eval_duration`,
/// `eval_duration`.
pub(crate) fn ollama_timing([total, load, prompt_eval, decode]: [u64; 4]) -> UpstreamTiming {
    let ns = |n| Some(std::time::Duration::from_nanos(n));
    UpstreamTiming {
        total: ns(total),
        load: ns(load),
        prompt_eval: ns(prompt_eval),
        decode: ns(decode),
        ..UpstreamTiming::default()
    }
}

impl Summary {
    /// A response of `content` one-piece content events, naming `model`
    /// and `id` (none when empty), with `finish` reasons; the rest default.
    pub(crate) fn of(content: u32, model: &str, id: &str, finish: &[&str]) -> Summary {
        Summary {
            content_frames: content,
            pieces: content,
            model: Some(model.to_owned()),
            response_id: (!id.is_empty()).then(|| id.to_owned()),
            finish: finish.iter().map(|s| s.to_string()).collect(),
            ..Summary::default()
        }
    }

    /// The same, ended by a terminal event.
    pub(crate) fn done(mut self) -> Summary {
        self.done = 1;
        self
    }

    /// The same, with `usage`.
    pub(crate) fn usage(mut self, usage: Usage) -> Summary {
        self.usage = usage;
        self
    }

    /// The same, with `errors`.
    pub(crate) fn errors(mut self, errors: &[&str]) -> Summary {
        self.errors = errors.iter().map(|e| e.to_string()).collect();
        self
    }

    /// The same, with one client tool call per name.
    pub(crate) fn tools(mut self, names: &[&str]) -> Summary {
        self.tool_calls = names.len() as u32;
        self.tool_names = names.iter().map(|n| n.to_string()).collect();
        self
    }

    pub(crate) fn record(&mut self, event: Event<'_>) {
        match event {
            Event::Content { pieces, .. } => {
                self.content_frames += 1;
                self.pieces += pieces;
            }
            Event::Usage(u) => self.usage.merge(u),
            Event::Model(m) => self.model = Some(m.to_owned()),
            Event::ResponseId(id) => self.response_id = Some(id.to_owned()),
            Event::FinishReason(r) => self.finish.push(r.to_owned()),
            Event::Error { kind } => self.errors.push(kind.to_owned()),
            Event::UpstreamTiming(t) => self.timing.merge(t),
            Event::Text(literal) => self
                .texts
                .push(serde_json::from_str(literal).expect("Text carries a JSON string literal")),
            Event::Done => self.done = 1,
            Event::ToolCall { name } => {
                self.tool_calls += 1;
                self.tool_names.push(name.unwrap_or("").to_owned());
            }
            Event::ServerToolCalls { tool, calls } => self.server_seen[tool as usize] += calls,
            Event::ServerToolUsage { tool, calls } => {
                self.server_billed[tool as usize] = Some(calls)
            }
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
    summary.malformed = parser.malformed_events();
    (summary, log, result)
}

/// The kind of every `Content` event, in order, from parsing `pieces`.
pub(crate) fn kinds(
    kind: ProviderKind,
    operation: Option<Operation>,
    content_type: &str,
    pieces: &[&[u8]],
) -> Vec<ContentKind> {
    let mut parser =
        Parser::new(kind, operation, content_type, 1 << 20).expect("a metered content type");
    let mut kinds = Vec::new();
    let mut on = |e: Event<'_>| {
        if let Event::Content { kind, .. } = e {
            kinds.push(kind);
        }
    };
    for piece in pieces {
        parser.feed(piece, &mut on).expect("parses");
    }
    parser.finish(&mut on).expect("finishes");
    kinds
}

/// Feed `payloads` to `adapter` as SSE data without `event:` lines, in
/// order; the summary, or the first error.
pub(crate) fn feed_sse(
    adapter: &mut dyn FrameAdapter,
    payloads: &[&str],
) -> Result<Summary, AdapterError> {
    let frames = payloads.iter().map(|p| Frame::Sse {
        event: b"",
        data: p.as_bytes(),
    });
    feed(adapter, frames)
}

/// Feed `docs` to `adapter` as whole JSON documents (a body, NDJSON
/// lines), in order; the summary, or the first error.
pub(crate) fn feed_json(
    adapter: &mut dyn FrameAdapter,
    docs: &[&str],
) -> Result<Summary, AdapterError> {
    feed(adapter, docs.iter().map(|d| Frame::Json(d.as_bytes())))
}

fn feed<'a>(
    adapter: &mut dyn FrameAdapter,
    frames: impl Iterator<Item = Frame<'a>>,
) -> Result<Summary, AdapterError> {
    let mut s = Summary::default();
    for frame in frames {
        adapter.on_frame(frame, &mut |e| s.record(e))?;
    }
    Ok(s)
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
        } else if self.name.ends_with(".ndjson") {
            "application/x-ndjson"
        } else if self.name.ends_with(".eventstream") {
            "application/vnd.amazon.eventstream"
        } else {
            "text/event-stream; charset=utf-8"
        }
    }

    /// Parse the whole body in one piece.
    pub(crate) fn run(&self) -> Run {
        run(
            self.kind,
            Some(self.operation),
            self.content_type(),
            &[self.body],
        )
    }
}

/// `Kind Operation: "dir/file" …;` — the fixtures recorded on one route,
/// each read from tests/fixtures/ at compile time.
macro_rules! fixtures {
    ($($kind:ident $op:ident: $($path:literal)+;)+) => {
        &[$($(Fixture {
            name: $path,
            kind: ProviderKind::$kind,
            operation: Operation::$op,
            body: include_bytes!(concat!("../../tests/fixtures/", $path)),
        },)+)+]
    };
}

pub(crate) const FIXTURES: &[Fixture] = fixtures! {
    Openai ChatCompletions: "openai/chat_stream_usage.sse" "openai/chat_stream.sse"
        "openai/chat_stream_crlf.sse" "openai/chat_stream_tool_calls.sse"
        "openai/chat_stream_error.sse" "openai/azure_chat_stream.sse" "openai/chat.json"
        "openai/chat_stream_parallel_tool_calls.sse" "openai/chat_stream_function_call.sse"
        "openai/chat_tool_calls.json";
    Openai Completions: "openai/completions_stream.sse";
    Openai Responses: "openai/responses_stream.sse" "openai/responses.json"
        "openai/responses_failed_stream.sse" "openai/responses_background_stream.sse"
        "openai/responses_background_queued.json" "openai/responses_tools_stream.sse"
        "openai/responses_tools.json";
    Openai FetchResponse: "openai/responses_resume_stream.sse"
        "openai/responses_background_completed.json" "openai/responses_background_in_progress.json";
    Openai CancelResponse: "openai/responses_background_cancelled.json";
    Openai Embeddings: "openai/embeddings.json";
    Anthropic Messages: "anthropic/messages_stream.sse" "anthropic/messages_stream_tool_use.sse"
        "anthropic/messages_stream_thinking.sse" "anthropic/messages_stream_error.sse"
        "anthropic/message.json" "anthropic/error.json" "anthropic/message_tools.json"
        "anthropic/messages_stream_web_search.sse";
    Gemini StreamGenerateContent: "gemini/stream_generate.sse" "gemini/stream_generate_array.json"
        "gemini/stream_generate_error.sse" "gemini/stream_generate_error_array.json"
        "gemini/stream_generate_blocked_array.json" "gemini/stream_generate_tools.sse";
    Gemini GenerateContent: "gemini/generate.json" "gemini/error.json" "gemini/generate_tools.json";
    Vertex StreamGenerateContent: "vertex/stream_generate.sse" "vertex/stream_generate_array.json";
    Ollama OllamaChat: "ollama/chat.json" "ollama/chat_stream.ndjson"
        "ollama/chat_stream_error.ndjson" "ollama/chat_tools.json"
        "ollama/chat_stream_tools.ndjson";
    Ollama OllamaGenerate: "ollama/generate_stream.ndjson";
    Bedrock ConverseStream: "bedrock/converse_stream.eventstream"
        "bedrock/converse_stream_tool_use.eventstream"
        "bedrock/converse_stream_throttled.eventstream";
    Bedrock InvokeModelStream: "bedrock/invoke_stream_claude.eventstream"
        "bedrock/invoke_stream_llama.eventstream";
    Ollama OllamaEmbed: "ollama/embed.json";
    Bedrock Converse: "bedrock/converse.json" "bedrock/converse_tools.json";
    Bedrock InvokeModel: "bedrock/invoke_claude.json" "bedrock/invoke_titan.json";
    Azure ChatCompletions: "azure/chat_stream_usage.sse" "azure/content_filter_error.json";
    Vllm ChatCompletions: "vllm/chat_stream_continuous_usage.sse";
    Llamacpp ChatCompletions: "llamacpp/chat_stream_timings.sse" "llamacpp/chat.json";
    Tgi TgiGenerateStream: "tgi/generate_stream.sse" "tgi/generate_stream_error.sse";
    Tgi TgiGenerate: "tgi/generate.json";
    Mistral ChatCompletions: "mistral/chat_stream.sse";
    Groq ChatCompletions: "groq/chat_stream.sse";
    Deepseek ChatCompletions: "deepseek/chat_stream_reasoning.sse";
    Openrouter ChatCompletions: "openrouter/chat_stream.sse" "openrouter/chat_stream_error.sse";
    Together ChatCompletions: "together/chat_stream.sse";
    Lmstudio ChatCompletions: "lmstudio/chat_stream.sse" "lmstudio/chat_v0.json";
    Cohere CohereChat: "cohere/chat_stream.sse" "cohere/chat_stream_tool.sse" "cohere/chat.json"
        "cohere/chat_tools.json";
};

/// The fixture called `name`.
/// Parse fixture `name` whole and compare its summary (text pieces
/// aside: the text tests check those) with `expected`.
#[track_caller]
pub(crate) fn expect_summary(name: &str, expected: Summary) {
    let (mut got, _, result) = fixture(name).run();
    assert_eq!(result, Ok(()), "{name}: parses without error");
    got.texts.clear();
    assert_eq!(got, expected, "{name}: summary");
}

pub(crate) fn fixture(name: &str) -> &'static Fixture {
    FIXTURES
        .iter()
        .find(|f| f.name == name)
        .expect("a known fixture")
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
fn every_fixture_ends_with_its_terminal_event() {
    // A recorded body that parses ends the way its protocol says a
    // finished response ends; one that does not is either an error
    // body (an error event decides its outcome) or a wrong fixture.
    let mut missing = Vec::new();
    for f in FIXTURES {
        let (s, _, r) = f.run();
        if r.is_ok() && s.done == 0 && s.errors.is_empty() {
            missing.push(f.name);
        }
    }
    assert!(missing.is_empty(), "no terminal event in {missing:?}");
}

#[test]
fn every_fixture_parses_without_knowing_the_operation() {
    for f in FIXTURES
        .iter()
        .filter(|f| f.operation != Operation::Embeddings)
    {
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
    assert_eq!(
        err,
        Err(ParseError::Framing(FramingError::TooLarge { limit: 8 }))
    );
}

/// A malformed SSE event, NDJSON line or streamed JSON array element is
/// counted and skipped: the content, usage and terminal event around it
/// still count.
#[test]
fn a_malformed_event_line_or_element_is_counted_and_skipped() {
    let sse: &[&[u8]] = &[
        b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\n",
        b"data: {\"choices\": [\n\n",
        b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"b\"},\"finish_reason\":\"stop\"}]}\n\n",
        b"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":2}}\n\n",
        b"data: [DONE]\n\n",
    ];
    let ndjson: &[&[u8]] = &[
        b"{\"model\":\"m\",\"message\":{\"content\":\"a\"},\"done\":false}\n",
        b"{\"model\":\"m\",\"message\":{\"con\n",
        b"{\"model\":\"m\",\"message\":{\"content\":\"\"},\"done\":true,\"eval_count\":5}\n",
    ];
    let array = b"[{\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"a\"}]}}]},\n{\"candidates\": nope},\n{\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"b\"}]},\"finishReason\":\"STOP\"}],\"usageMetadata\":{\"candidatesTokenCount\":4}}]";
    for (kind, op, content_type, chunks, content, output) in [
        (
            ProviderKind::Openai,
            Operation::ChatCompletions,
            "text/event-stream",
            sse,
            2,
            2,
        ),
        (
            ProviderKind::Ollama,
            Operation::OllamaChat,
            "application/x-ndjson",
            ndjson,
            1,
            5,
        ),
        (
            ProviderKind::Gemini,
            Operation::StreamGenerateContent,
            "application/json",
            &[array],
            2,
            4,
        ),
    ] {
        let (summary, _, result) = run(kind, Some(op), content_type, chunks);
        assert_eq!(
            result,
            Ok(()),
            "{content_type}: a bad event is no parse error"
        );
        assert_eq!(
            summary.malformed, 1,
            "{content_type}: the bad one is counted"
        );
        assert_eq!(summary.content_frames, content, "{content_type}: content");
        assert_eq!(summary.usage.output, Some(output), "{content_type}: usage");
        assert_eq!(summary.done, 1, "{content_type}: the terminal event");
    }
}

#[test]
fn a_malformed_whole_body_is_a_parse_error() {
    let (summary, _, result) = run(
        ProviderKind::Openai,
        Some(Operation::ChatCompletions),
        "application/json",
        &[b"{\"choices\": ["],
    );
    assert!(
        matches!(result, Err(ParseError::Adapter(_))),
        "one document, nothing to go on with: {result:?}"
    );
    assert_eq!(
        summary.done, 0,
        "a body that did not parse did not end well"
    );
}

#[test]
fn a_whole_body_that_parses_is_its_own_terminal_event() {
    let (summary, _, result) = run(
        ProviderKind::Anthropic,
        Some(Operation::Messages),
        "application/json",
        &[b"{\"type\":\"message\",\"content\":[{\"type\":\"text\",\"text\":\"hi\"}],\"usage\":{\"input_tokens\":1,\"output_tokens\":1}}"],
    );
    assert_eq!(result, Ok(()));
    assert_eq!(summary.done, 1);
    let (empty, _, _) = run(
        ProviderKind::Openai,
        Some(Operation::ChatCompletions),
        "application/json",
        &[b""],
    );
    assert_eq!(empty.done, 0, "an empty body has no terminal event");
}

#[test]
fn the_registry_describes_every_kind_once_in_order() {
    assert_eq!(REGISTRY.len(), ProviderKind::ALL.len());
    for (spec, kind) in REGISTRY.iter().zip(ProviderKind::ALL) {
        assert_eq!(
            spec.kind, kind,
            "registry line for {kind:?} is out of order"
        );
        let serde_name = serde_json::to_value(kind).expect("a kind serializes");
        assert_eq!(
            serde_name.as_str(),
            Some(spec.config_name),
            "{kind:?}: config name is the kind's serde name"
        );
    }
}

#[test]
fn each_of_all_operations_belongs_to_exactly_one_wire_format() {
    assert_eq!(Operation::ALL.len(), 26, "every variant, none twice");
    for op in Operation::ALL {
        let owners = REGISTRY
            .iter()
            .filter(|s| s.wire.operations.contains(&op))
            .map(|s| s.wire.name)
            .collect::<std::collections::BTreeSet<_>>();
        assert_eq!(owners.len(), 1, "{op:?}: wire formats {owners:?}");
    }
}

/// The fixture tests cover `Operation::ALL`: every operation has a
/// recorded response in `FIXTURES`, or is named here as having none yet,
/// so a new operation fails this test until it gets one or is listed.
#[test]
fn every_operation_has_a_fixture_or_is_listed_without_one() {
    const WITHOUT: [Operation; 7] = [
        Operation::DeleteResponse,
        Operation::ResponseInputItems,
        Operation::FileContent,
        Operation::BatchResults,
        Operation::EmbedContent,
        Operation::RawPredict,
        Operation::StreamRawPredict,
    ];
    for op in Operation::ALL {
        let has = FIXTURES.iter().any(|f| f.operation == op);
        assert_ne!(
            has,
            WITHOUT.contains(&op),
            "{op:?}: a fixture in FIXTURES, or listed in WITHOUT (not both)"
        );
    }
}

#[test]
fn every_operation_has_exactly_one_wire_format() {
    let all = [
        "/v1/chat/completions",
        "/v1/completions",
        "/v1/responses",
        "/v1/responses/resp_1",
        "/v1/responses/resp_1/cancel",
        "/v1/responses/resp_1/input_items",
        "/v1/files/file-abc/content",
        "/v1/messages/batches/msgbatch_1/results",
        "/v1/embeddings",
        "/v1/messages",
        "/v1beta/models/m:generateContent",
        "/v1beta/models/m:streamGenerateContent",
        "/v1beta/models/m:embedContent",
        "/v1/publishers/anthropic/models/c:rawPredict",
        "/v1/publishers/anthropic/models/c:streamRawPredict",
        "/api/chat",
        "/api/generate",
        "/api/embed",
        "/model/m/converse",
        "/model/m/converse-stream",
        "/model/m/invoke",
        "/model/m/invoke-with-response-stream",
        "/v2/chat",
        "/generate",
        "/generate_stream",
    ];
    for path in all {
        let op = Operation::from_path(path).expect("a known operation");
        let owners = REGISTRY
            .iter()
            .filter(|s| s.wire.operations.contains(&op))
            .map(|s| s.wire.name)
            .collect::<std::collections::BTreeSet<_>>();
        assert_eq!(owners.len(), 1, "{path}: wire formats {owners:?}");
        let detected = REGISTRY
            .iter()
            .filter(|s| (s.detect_path)(path, Some(op)))
            .count();
        assert_eq!(detected, 1, "{path}: detected by {detected} specs");
    }
}
