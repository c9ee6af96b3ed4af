//! What each provider fixture amounts to (content chunks, usage, finish
//! reasons, errors, server timings), and how paths and content types pick
//! the provider, operation and model.

use std::borrow::Cow;
use std::time::Duration;

use super::tests::{Summary, fixture};
use super::*;

/// The figures a fixture must yield; fields left `None` are not checked.
#[derive(Default)]
struct Want {
    content: u32,
    input: Option<u64>,
    output: Option<u64>,
    finish: &'static [&'static str],
    errors: &'static [&'static str],
    model: Option<&'static str>,
}

fn want(content: u32, input: Option<u64>, output: Option<u64>) -> Want {
    Want {
        content,
        input,
        output,
        ..Want::default()
    }
}

impl Want {
    fn finish(mut self, f: &'static [&'static str]) -> Want {
        self.finish = f;
        self
    }
    fn errors(mut self, e: &'static [&'static str]) -> Want {
        self.errors = e;
        self
    }
    fn model(mut self, m: &'static str) -> Want {
        self.model = Some(m);
        self
    }
}

/// Parse fixture `name` whole, check it against `w`, return the summary.
#[track_caller]
fn check(name: &str, w: Want) -> Summary {
    let (s, log, result) = fixture(name).run();
    assert_eq!(result, Ok(()), "{name}: parses without error");
    assert_eq!(
        s.content_frames, w.content,
        "{name}: content chunks\n{log:#?}"
    );
    assert_eq!(
        (s.usage.input, s.usage.output),
        (w.input, w.output),
        "{name}: usage (input, output)"
    );
    assert_eq!(s.finish, w.finish, "{name}: finish reasons");
    assert_eq!(s.errors, w.errors, "{name}: errors");
    if let Some(m) = w.model {
        assert_eq!(s.model.as_deref(), Some(m), "{name}: model");
    }
    s
}

fn ms(v: f64) -> Option<Duration> {
    Some(Duration::from_secs_f64(v / 1000.0))
}

#[test]
fn gemini_streams_both_shapes() {
    for name in [
        "gemini/stream_generate.sse",
        "gemini/stream_generate_array.json",
    ] {
        // A thought summary and three text chunks; output = 19 + 87 thoughts.
        let s = check(
            name,
            want(4, Some(12), Some(106))
                .finish(&["STOP"])
                .model("gemini-2.5-flash"),
        );
        assert_eq!(s.usage.reasoning, Some(87), "{name}: reasoning");
        assert_eq!(s.response_id.as_deref(), Some("qVlGaPKzLp6n1PIPpO3B6AQ"));
    }
    for name in [
        "gemini/stream_generate_error.sse",
        "gemini/stream_generate_error_array.json",
    ] {
        check(name, want(2, Some(12), Some(91)).errors(&["UNAVAILABLE"]));
    }
    check(
        "gemini/stream_generate_blocked_array.json",
        want(0, Some(9), None).errors(&["PROHIBITED_CONTENT"]),
    );
}

#[test]
fn gemini_whole_bodies() {
    let s = check(
        "gemini/generate.json",
        want(1, Some(64), Some(100))
            .finish(&["STOP"])
            .model("gemini-2.5-pro"),
    );
    assert_eq!(
        (s.usage.cache_read, s.usage.reasoning),
        (Some(32), Some(83))
    );
    check(
        "gemini/error.json",
        want(0, None, None).errors(&["RESOURCE_EXHAUSTED"]),
    );
}

#[test]
fn vertex_streams() {
    for name in [
        "vertex/stream_generate.sse",
        "vertex/stream_generate_array.json",
    ] {
        check(
            name,
            want(3, Some(5), Some(9))
                .finish(&["STOP"])
                .model("gemini-2.0-flash-001"),
        );
    }
}

#[test]
fn ollama_whole_bodies() {
    let s = check(
        "ollama/chat.json",
        want(1, Some(31), Some(5))
            .finish(&["stop"])
            .model("llama3.2"),
    );
    assert_eq!(s.timing.prompt_eval, Some(Duration::from_millis(112)));
    assert_eq!(s.timing.decode, Some(Duration::from_millis(1690)));
    assert_eq!(s.done, 1);
    check("ollama/embed.json", want(0, Some(8), Some(0)));
}

#[test]
fn bedrock_whole_bodies() {
    let s = check(
        "bedrock/converse.json",
        want(1, Some(17), Some(9)).finish(&["end_turn"]),
    );
    assert_eq!(s.timing.total, ms(2045.0));
    check(
        "bedrock/invoke_claude.json",
        want(1, Some(10), Some(6))
            .finish(&["end_turn"])
            .model("claude-3-5-haiku-20241022"),
    );
    check(
        "bedrock/invoke_titan.json",
        want(1, Some(6), Some(11)).finish(&["FINISH"]),
    );
}

#[test]
fn azure_filter_annotations_are_not_content() {
    let s = check(
        "azure/chat_stream_usage.sse",
        want(4, Some(23), Some(4))
            .finish(&["stop"])
            .model("gpt-4o-mini-2024-07-18"),
    );
    assert_eq!(s.done, 1);
    check(
        "azure/content_filter_error.json",
        want(0, None, None).errors(&["content_filter"]),
    );
}

#[test]
fn vllm_continuous_usage_is_not_double_counted() {
    // Usage rides on every chunk, cumulative: the last report wins, and a
    // chunk carrying both usage and text still counts as content.
    check(
        "vllm/chat_stream_continuous_usage.sse",
        want(7, Some(42), Some(8)).finish(&["stop"]),
    );
}

#[test]
fn llamacpp_timings() {
    // No usage in the stream: counts come from `timings` (prompt_n + cache_n).
    let s = check(
        "llamacpp/chat_stream_timings.sse",
        want(3, Some(15), Some(3)).finish(&["stop"]),
    );
    assert_eq!(s.usage.cache_read, Some(11));
    assert_eq!(
        (s.timing.prompt_eval, s.timing.decode),
        (ms(31.12), ms(48.7))
    );
    let s = check(
        "llamacpp/chat.json",
        want(1, Some(15), Some(3)).finish(&["stop"]),
    );
    assert_eq!(
        (s.timing.prompt_eval, s.timing.decode),
        (ms(95.3), ms(51.2))
    );
}

#[test]
fn tgi_native_endpoints() {
    let s = check(
        "tgi/generate_stream.sse",
        want(3, Some(6), Some(4)).finish(&["eos_token"]),
    );
    assert_eq!(s.done, 1);
    check(
        "tgi/generate_stream_error.sse",
        want(2, None, None).errors(&["generation"]),
    );
    check(
        "tgi/generate.json",
        want(1, None, Some(8)).finish(&["length"]),
    );
}

#[test]
fn openai_compatible_flavours() {
    check(
        "mistral/chat_stream.sse",
        want(3, Some(8), Some(4))
            .finish(&["stop"])
            .model("mistral-small-latest"),
    );
    let s = check(
        "groq/chat_stream.sse",
        want(3, Some(44), Some(4))
            .finish(&["stop"])
            .model("llama-3.3-70b-versatile"),
    );
    assert_eq!(
        s.timing,
        UpstreamTiming {
            queue: seconds(0.051234),
            prompt_eval: seconds(0.002817),
            decode: seconds(0.010256),
            total: seconds(0.013073),
            ..UpstreamTiming::default()
        }
    );
    let s = check(
        "deepseek/chat_stream_reasoning.sse",
        want(5, Some(18), Some(45)).finish(&["stop"]),
    );
    assert_eq!((s.usage.reasoning, s.usage.cache_read), (Some(40), Some(0)));
    check(
        "openrouter/chat_stream.sse",
        want(3, Some(10), Some(3))
            .finish(&["stop"])
            .model("openai/gpt-4o-mini"),
    );
    check(
        "openrouter/chat_stream_error.sse",
        want(1, None, None)
            .finish(&["error"])
            .errors(&["server_error"]),
    );
    check(
        "together/chat_stream.sse",
        want(4, Some(39), Some(5)).finish(&["eos"]),
    );
    check(
        "lmstudio/chat_stream.sse",
        want(3, Some(24), Some(4)).finish(&["stop"]),
    );
    let s = check(
        "lmstudio/chat_v0.json",
        want(1, Some(24), Some(4)).finish(&["stop"]),
    );
    assert_eq!(
        (s.timing.ttft, s.timing.decode),
        (seconds(0.111), seconds(0.0778))
    );
}

#[test]
fn cohere_chat() {
    let s = check(
        "cohere/chat_stream.sse",
        want(4, Some(69), Some(7)).finish(&["COMPLETE"]),
    );
    assert_eq!(s.done, 1);
    // Two plan deltas, the tool's name, two argument pieces.
    check(
        "cohere/chat_stream_tool.sse",
        want(5, Some(1012), Some(21)).finish(&["TOOL_CALL"]),
    );
    check(
        "cohere/chat.json",
        want(1, Some(71), Some(9)).finish(&["COMPLETE"]),
    );
}

#[test]
fn operations_from_paths() {
    use Operation as Op;
    for (path, op) in [
        (
            "/v1beta/models/gemini-2.5-flash:generateContent",
            Some(Op::GenerateContent),
        ),
        (
            "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
            Some(Op::StreamGenerateContent),
        ),
        (
            "/v1/projects/p-1/locations/us-central1/publishers/google/models/gemini-2.0-flash-001:streamGenerateContent",
            Some(Op::StreamGenerateContent),
        ),
        (
            "/v1beta/models/text-embedding-004:embedContent",
            Some(Op::EmbedContent),
        ),
        (
            "/v1/projects/p/locations/us-east5/publishers/anthropic/models/claude-sonnet-4@20250514:streamRawPredict",
            Some(Op::StreamRawPredict),
        ),
        ("/v1beta/models/gemini-2.5-flash:countTokens", None),
        ("/api/chat", Some(Op::OllamaChat)),
        ("/api/generate", Some(Op::OllamaGenerate)),
        ("/api/embed", Some(Op::OllamaEmbed)),
        ("/api/embeddings", Some(Op::OllamaEmbed)),
        ("/v1/chat/completions", Some(Op::ChatCompletions)),
        (
            "/model/anthropic.claude-3-5-haiku-20241022-v1%3A0/converse-stream",
            Some(Op::ConverseStream),
        ),
        (
            "/model/meta.llama3-8b-instruct-v1:0/converse",
            Some(Op::Converse),
        ),
        (
            "/model/amazon.titan-text-express-v1/invoke",
            Some(Op::InvokeModel),
        ),
        (
            "/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A123456789012%3Ainference-profile%2Fus.anthropic.claude-3-5-haiku-20241022-v1%3A0/invoke-with-response-stream",
            Some(Op::InvokeModelStream),
        ),
        (
            "/openai/deployments/gpt-4o-prod/chat/completions?api-version=2024-10-21",
            Some(Op::ChatCompletions),
        ),
        ("/openai/v1/chat/completions", Some(Op::ChatCompletions)),
        ("/openai/deployments/emb/embeddings", Some(Op::Embeddings)),
        ("/v2/chat", Some(Op::CohereChat)),
        ("/generate_stream", Some(Op::TgiGenerateStream)),
        ("/generate", Some(Op::TgiGenerate)),
        ("/v1/messages", Some(Op::Messages)),
        ("/v1/models", None),
        // Bedrock is a `model` segment with a `/` before and after it.
        ("//model//converse", Some(Op::Converse)),
        ("/model/m/converse/", Some(Op::Converse)),
        ("model/m/converse", None),
        ("/models/m/converse", None),
        ("/a/model", None),
        ("/a/model:generateContent", Some(Op::GenerateContent)),
        ("/v1/model/m:generateContent", None),
    ] {
        assert_eq!(Operation::from_path(path), op, "{path}");
    }
    assert_eq!(Operation::GenerateContent.name(), "generate_content");
    assert_eq!(Operation::ConverseStream.name(), "chat");
    assert_eq!(Operation::OllamaGenerate.name(), "text_completion");
}

#[test]
fn stored_response_paths_name_their_own_operations() {
    use Operation as Op;
    for (request, want) in [
        ("POST /v1/responses", Some(Op::Responses)),
        ("GET /v1/responses/resp_1", Some(Op::FetchResponse)),
        (
            "GET /v1/responses/resp_1?stream=true&starting_after=7",
            Some(Op::FetchResponse),
        ),
        ("DELETE /v1/responses/resp_1", Some(Op::DeleteResponse)),
        ("POST /v1/responses/resp_1/cancel", Some(Op::CancelResponse)),
        (
            "GET /openai/v1/responses/resp_1/input_items?limit=5",
            Some(Op::ResponseInputItems),
        ),
        ("GET /v1/files/file-abc/content", Some(Op::FileContent)),
        (
            "GET /anthropic/v1/messages/batches/msgbatch_1/results",
            Some(Op::BatchResults),
        ),
        ("GET /v1/files/file-abc", None),
        ("GET /v1/batches/b/results", None),
        ("POST /v1/responses/resp_1/other", None),
        ("POST /v1/cancel", None),
        ("POST cancel", None),
        ("POST responses/cancel", Some(Op::FetchResponse)),
        ("GET responses/r", Some(Op::FetchResponse)),
        ("GET /responses//cancel", None),
        ("GET files/f/content", Some(Op::FileContent)),
        ("GET /v1/files//content", None),
        ("GET batches/b/results", None),
        ("GET /model/converse", Some(Op::Converse)),
        ("GET model/x/converse", None),
        ("POST /model/m:0/invoke", Some(Op::InvokeModel)),
        (
            "POST /v1/models/g:generateContent?alt=sse",
            Some(Op::GenerateContent),
        ),
        ("POST /v1/chat/completions/", Some(Op::ChatCompletions)),
        ("POST ", None),
    ] {
        let (method, path) = request.split_once(' ').expect("method, space, path");
        assert_eq!(Operation::from_request(method, path), want, "{request}");
    }
    let names: Vec<&str> = [
        Operation::FetchResponse,
        Operation::CancelResponse,
        Operation::DeleteResponse,
        Operation::ResponseInputItems,
    ]
    .iter()
    .map(|op| op.name())
    .collect();
    assert_eq!(
        names,
        [
            "fetch_response",
            "cancel_response",
            "delete_response",
            "list_input_items"
        ]
    );
}

#[test]
fn providers_from_paths_and_content_types() {
    use ProviderKind as K;
    for (path, kind) in [
        (
            "/v1beta/models/gemini-2.5-flash:streamGenerateContent",
            Some(K::Gemini),
        ),
        (
            "/v1/projects/p/locations/global/publishers/google/models/gemini-2.5-pro:generateContent",
            Some(K::Vertex),
        ),
        (
            "/v1/projects/p/locations/us-east5/publishers/anthropic/models/claude-sonnet-4@20250514:rawPredict",
            Some(K::Vertex),
        ),
        (
            "/model/amazon.nova-lite-v1:0/converse-stream",
            Some(K::Bedrock),
        ),
        ("/api/chat", Some(K::Ollama)),
        (
            "/openai/deployments/gpt-4o/chat/completions",
            Some(K::Azure),
        ),
        ("/v2/chat", Some(K::Cohere)),
        ("/generate_stream", Some(K::Tgi)),
        ("/v1/messages", Some(K::Anthropic)),
        ("/v1/complete", Some(K::Anthropic)),
        ("/v1/chat/completions", Some(K::Openai)),
        ("/v1/responses", Some(K::Openai)),
        ("/healthz", None),
    ] {
        assert_eq!(ProviderKind::detect(path), kind, "{path}");
    }
    let ct = ProviderKind::detect_response;
    assert_eq!(ct("application/vnd.amazon.eventstream"), Some(K::Bedrock));
    assert_eq!(ct("application/x-ndjson; charset=utf-8"), Some(K::Ollama));
    assert_eq!(ct("application/json"), None);
    assert_eq!(ct("text/event-stream"), None);
}

#[test]
fn adapters_follow_the_operation_then_the_kind() {
    use ProviderKind as K;
    let adapter = |k, op| Adapter::new(k, op).wire().name;
    // Ollama's and Gemini's OpenAI-compatible endpoints speak OpenAI.
    assert_eq!(
        adapter(K::Ollama, Some(Operation::ChatCompletions)),
        "openai"
    );
    assert_eq!(
        adapter(K::Gemini, Some(Operation::ChatCompletions)),
        "openai"
    );
    assert_eq!(adapter(K::Vertex, Some(Operation::RawPredict)), "anthropic");
    assert_eq!(adapter(K::Tgi, Some(Operation::ChatCompletions)), "openai");
    assert_eq!(adapter(K::Tgi, None), "tgi");
    assert_eq!(adapter(K::Bedrock, None), "bedrock");
    assert_eq!(adapter(K::Groq, None), "openai");
    assert_eq!(adapter(K::Openai, Some(Operation::OllamaChat)), "ollama");
}

#[test]
fn models_from_paths() {
    let m = |p| model_from_path(p).map(Cow::into_owned);
    assert_eq!(
        m("/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse").as_deref(),
        Some("gemini-2.5-flash")
    );
    assert_eq!(
        m("/v1/projects/p/locations/l/publishers/google/models/gemini-2.0-flash-001:generateContent").as_deref(),
        Some("gemini-2.0-flash-001")
    );
    assert_eq!(
        m("/v1beta/tunedModels/my-tuned-7x:generateContent").as_deref(),
        Some("my-tuned-7x")
    );
    assert_eq!(
        m("/model/anthropic.claude-3-5-haiku-20241022-v1%3A0/converse-stream").as_deref(),
        Some("anthropic.claude-3-5-haiku-20241022-v1:0")
    );
    assert_eq!(
        m("/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A1%3Ainference-profile%2Fus.meta.llama3-2-1b-instruct-v1%3A0/invoke").as_deref(),
        Some("arn:aws:bedrock:us-east-1:1:inference-profile/us.meta.llama3-2-1b-instruct-v1:0")
    );
    assert_eq!(
        m("/openai/deployments/gpt-4o-prod/chat/completions?api-version=2024-10-21").as_deref(),
        Some("gpt-4o-prod")
    );
    assert!(
        matches!(
            model_from_path("/v1beta/models/m:generateContent"),
            Some(Cow::Borrowed("m"))
        ),
        "no escapes: borrowed"
    );
    assert_eq!(m("/v1/chat/completions"), None);
    assert_eq!(m("/openai/v1/chat/completions"), None);
    assert_eq!(
        m("/model/%ZZ/converse").as_deref(),
        Some("%ZZ"),
        "bad escape kept"
    );
}

#[test]
fn config_names_round_trip_and_provider_names_are_well_known() {
    for kind in ProviderKind::ALL {
        let de =
            serde::de::value::StrDeserializer::<serde::de::value::Error>::new(kind.config_name());
        let parsed: ProviderKind = serde::Deserialize::deserialize(de).expect("a config name");
        assert_eq!(parsed, kind, "{}", kind.config_name());
    }
    let names: Vec<&str> = ProviderKind::ALL.iter().map(|k| k.as_str()).collect();
    for well_known in [
        "openai",
        "anthropic",
        "gcp.gemini",
        "gcp.vertex_ai",
        "aws.bedrock",
        "azure.ai.openai",
        "cohere",
        "mistral_ai",
        "groq",
        "deepseek",
        "perplexity",
        "x_ai",
    ] {
        assert!(names.contains(&well_known), "{well_known} is used");
    }
}

#[test]
fn server_first_token_equivalent() {
    let ollama = UpstreamTiming {
        load: ms(20.0),
        prompt_eval: ms(100.0),
        decode: ms(900.0),
        total: ms(1100.0),
        ..UpstreamTiming::default()
    };
    assert_eq!(
        ollama.first_token_equivalent(true),
        ms(120.0),
        "load + prompt eval"
    );
    assert_eq!(
        ollama.first_token_equivalent(false),
        ms(1100.0),
        "whole body: total"
    );
    let bedrock = UpstreamTiming {
        ttft: ms(402.0),
        total: ms(688.0),
        ..UpstreamTiming::default()
    };
    assert_eq!(bedrock.first_token_equivalent(true), ms(402.0));
    let converse = UpstreamTiming {
        total: ms(1421.0),
        ..UpstreamTiming::default()
    };
    assert_eq!(
        converse.first_token_equivalent(true),
        None,
        "no server TTFT"
    );
    let llamacpp_whole = UpstreamTiming {
        prompt_eval: ms(95.0),
        decode: ms(51.0),
        ..UpstreamTiming::default()
    };
    assert_eq!(llamacpp_whole.first_token_equivalent(false), ms(146.0));
    let mut merged = bedrock;
    merged.merge(UpstreamTiming {
        total: ms(700.0),
        ..UpstreamTiming::default()
    });
    assert_eq!(
        (merged.ttft, merged.total),
        (ms(402.0), ms(700.0)),
        "field-wise last wins"
    );
    assert_eq!(millis(-1.0), None);
    assert_eq!(millis(f64::NAN), None);
}

#[test]
fn ollama_ndjson_streams() {
    let s = check(
        "ollama/chat_stream.ndjson",
        want(5, Some(31), Some(5))
            .finish(&["stop"])
            .model("llama3.2"),
    );
    assert_eq!(
        s.timing,
        UpstreamTiming {
            total: Some(Duration::from_nanos(1_835_468_459)),
            load: Some(Duration::from_nanos(21_473_125)),
            prompt_eval: Some(Duration::from_millis(112)),
            decode: Some(Duration::from_millis(1690)),
            ..UpstreamTiming::default()
        }
    );
    assert_eq!(s.done, 1);
    // Three thinking lines, two response lines.
    check(
        "ollama/generate_stream.ndjson",
        want(5, Some(14), Some(28))
            .finish(&["stop"])
            .model("qwen3:4b"),
    );
    check(
        "ollama/chat_stream_error.ndjson",
        want(2, None, None).errors(&["error"]),
    );
}

#[test]
fn bedrock_eventstreams() {
    // Two reasoning deltas (the signature is not output), five text deltas.
    let s = check(
        "bedrock/converse_stream.eventstream",
        want(7, Some(45), Some(88)).finish(&["end_turn"]),
    );
    assert_eq!((s.timing.total, s.done), (ms(1421.0), 1));
    // The empty first tool input is not content; cache reads count as input.
    let s = check(
        "bedrock/converse_stream_tool_use.eventstream",
        want(2, Some(2444), Some(40)).finish(&["tool_use"]),
    );
    assert_eq!(s.usage.cache_read, Some(2048));
    check(
        "bedrock/converse_stream_throttled.eventstream",
        want(2, None, None).errors(&["throttlingException"]),
    );
    let s = check(
        "bedrock/invoke_stream_claude.eventstream",
        want(3, Some(14), Some(9))
            .finish(&["end_turn"])
            .model("claude-3-5-haiku-20241022"),
    );
    assert_eq!((s.timing.ttft, s.timing.total), (ms(402.0), ms(688.0)));
    check(
        "bedrock/invoke_stream_llama.eventstream",
        want(7, Some(19), Some(7)).finish(&["stop"]),
    );
}

#[test]
fn gemini_json_body_is_an_array_or_an_object() {
    let run = |body: &[u8]| {
        let pieces: Vec<&[u8]> = body.chunks(3).collect();
        super::tests::run(
            ProviderKind::Gemini,
            Some(Operation::StreamGenerateContent),
            "application/json; charset=UTF-8",
            &pieces,
        )
    };
    let (s, _, r) = run(b"  \r\n{\"error\":{\"code\":400,\"status\":\"INVALID_ARGUMENT\"}}");
    assert_eq!((r, s.errors), (Ok(()), vec!["INVALID_ARGUMENT".to_owned()]));
    let (s, _, r) = run(b"[{\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"a\"}]}}]}]");
    assert_eq!((r, s.content_frames), (Ok(()), 1));
    let (_, _, r) = run(b"[{\"candidates\":[]}");
    assert!(
        matches!(r, Err(ParseError::Framing(_))),
        "an unterminated array is malformed: {r:?}"
    );
}

#[test]
fn truncated_or_corrupt_eventstream_is_malformed() {
    let body = fixture("bedrock/converse_stream.eventstream").body;
    let (_, _, r) = super::tests::run(
        ProviderKind::Bedrock,
        Some(Operation::ConverseStream),
        "application/vnd.amazon.eventstream",
        &[&body[..body.len() - 5]],
    );
    assert!(matches!(r, Err(ParseError::Framing(_))), "truncated: {r:?}");
    let (whole, _, _) = super::tests::run(
        ProviderKind::Bedrock,
        Some(Operation::ConverseStream),
        "application/vnd.amazon.eventstream",
        &[body],
    );
    // Byte 40 is inside the first message (past its 12-byte prelude): its
    // CRC fails, its length is known, the rest of the stream is read.
    let mut corrupt = body.to_vec();
    corrupt[40] ^= 0xff;
    let (s, _, r) = super::tests::run(
        ProviderKind::Bedrock,
        Some(Operation::ConverseStream),
        "application/vnd.amazon.eventstream",
        &[&corrupt],
    );
    assert_eq!(r, Ok(()), "a bad message CRC is skipped, not fatal");
    assert_eq!(s.malformed, 1, "and counted");
    assert_eq!(
        (s.usage, s.done, s.content_frames),
        (whole.usage, 1, whole.content_frames),
        "everything after the bad message is still metered"
    );
    let mut bad_prelude = body.to_vec();
    bad_prelude[9] ^= 0xff;
    let (_, _, r) = super::tests::run(
        ProviderKind::Bedrock,
        Some(Operation::ConverseStream),
        "application/vnd.amazon.eventstream",
        &[&bad_prelude],
    );
    assert!(
        matches!(r, Err(ParseError::Framing(_))),
        "a bad prelude CRC leaves no length to trust: {r:?}"
    );
}

#[test]
fn streaming_follows_the_path_then_the_body() {
    use Operation as Op;
    assert!(request_streams(Some(Op::StreamGenerateContent), None));
    assert!(request_streams(Some(Op::ConverseStream), Some(false)));
    assert!(!request_streams(Some(Op::GenerateContent), Some(true)));
    assert!(
        request_streams(Some(Op::OllamaChat), None),
        "Ollama streams by default"
    );
    assert!(!request_streams(Some(Op::OllamaGenerate), Some(false)));
    assert!(!request_streams(Some(Op::ChatCompletions), None));
    assert!(request_streams(Some(Op::ChatCompletions), Some(true)));
    assert!(!request_streams(None, None));
}

#[test]
fn streamed_content_types() {
    assert!(is_stream_content_type("text/event-stream; charset=utf-8"));
    assert!(is_stream_content_type("application/x-ndjson"));
    assert!(is_stream_content_type("application/vnd.amazon.eventstream"));
    assert!(!is_stream_content_type("application/json"));
    assert!(!is_stream_content_type(""));
}

/// Client tool calls, their names, and provider-run tool counts (web
/// search, web fetch, file search, code interpreter, grounding) of a
/// fixture.
#[track_caller]
fn check_tools(name: &str, calls: u32, names: &[&str], server: [u32; 5]) {
    let (s, log, result) = fixture(name).run();
    assert_eq!(result, Ok(()), "{name}: parses without error");
    assert_eq!(s.tool_calls, calls, "{name}: client tool calls\n{log:#?}");
    assert_eq!(s.tool_names, names, "{name}: tool names, in order");
    // The meter's rule: the provider's billed count wins over blocks seen.
    let got: Vec<u32> = (0..5)
        .map(|i| s.server_billed[i].unwrap_or(s.server_seen[i]))
        .collect();
    assert_eq!(got, server, "{name}: provider-run tools\n{log:#?}");
}

#[test]
fn tool_calls_in_every_family_streamed_and_whole() {
    let none = [0; 5];
    // OpenAI chat: one call per index, however many argument deltas.
    check_tools(
        "openai/chat_stream_tool_calls.sse",
        1,
        &["get_weather"],
        none,
    );
    check_tools(
        "openai/chat_stream_parallel_tool_calls.sse",
        2,
        &["get_weather", "get_time"],
        none,
    );
    check_tools(
        "openai/chat_stream_function_call.sse",
        1,
        &["lookup_order"],
        none,
    );
    check_tools(
        "openai/chat_tool_calls.json",
        3,
        &["get_weather", "get_weather", "get_time"],
        none,
    );
    // Responses: function_call items; web search, file search and code
    // interpreter items are provider-run.
    check_tools(
        "openai/responses_tools_stream.sse",
        1,
        &["get_weather"],
        [2, 0, 0, 0, 0],
    );
    check_tools(
        "openai/responses_tools.json",
        2,
        &["open_ticket", "open_ticket"],
        [1, 0, 1, 1, 0],
    );
    // Anthropic: usage.server_tool_use is authoritative (2 searches billed,
    // one block seen).
    check_tools(
        "anthropic/message_tools.json",
        2,
        &["get_weather", "get_time"],
        [2, 0, 0, 0, 0],
    );
    check_tools(
        "anthropic/messages_stream_web_search.sse",
        1,
        &["get_weather"],
        [1, 0, 0, 0, 0],
    );
    check_tools(
        "anthropic/messages_stream_tool_use.sse",
        1,
        &["get_weather"],
        none,
    );
    // Gemini: each functionCall part is a call; grounding counts queries.
    check_tools(
        "gemini/generate_tools.json",
        2,
        &["get_weather", "get_weather"],
        [0, 0, 0, 0, 2],
    );
    check_tools(
        "gemini/stream_generate_tools.sse",
        2,
        &["get_time", "get_weather"],
        none,
    );
    // Bedrock Converse, whole and streamed (contentBlockStart.toolUse).
    check_tools(
        "bedrock/converse_tools.json",
        2,
        &["get_weather", "get_time"],
        none,
    );
    let (stream, _, _) = fixture("bedrock/converse_stream_tool_use.eventstream").run();
    assert_eq!(stream.tool_calls, 1, "ConverseStream: one toolUse start");
    // Ollama sends each call whole.
    check_tools(
        "ollama/chat_tools.json",
        2,
        &["get_weather", "get_time"],
        none,
    );
    check_tools(
        "ollama/chat_stream_tools.ndjson",
        2,
        &["get_weather", "get_weather"],
        none,
    );
    // Cohere v2: tool-call-start once per call; whole message.tool_calls.
    check_tools("cohere/chat_stream_tool.sse", 1, &["get_weather"], none);
    check_tools(
        "cohere/chat_tools.json",
        2,
        &["get_weather", "get_weather"],
        none,
    );
}

#[test]
fn text_only_fixtures_have_no_tool_calls() {
    for name in [
        "openai/chat_stream.sse",
        "openai/responses_stream.sse",
        "anthropic/messages_stream.sse",
        "gemini/stream_generate.sse",
        "ollama/chat_stream.ndjson",
        "cohere/chat_stream.sse",
    ] {
        check_tools(name, 0, &[], [0; 5]);
    }
}
