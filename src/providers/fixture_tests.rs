//! What each provider fixture amounts to (content chunks, usage, finish
//! reasons, errors, server timings), and how paths and content types pick
//! the provider, operation and model.

use std::borrow::Cow;
use std::time::Duration;

use super::tests::{Summary, fixture, ollama_timing};
use super::*;

/// What each fixture amounts to, parsed whole, one fixture a line:
/// content chunks, input and output tokens (`-`: none reported), the
/// finish reasons and `!`errors in order (`-`: none), and the model where
/// it is checked. `#` starts a comment line.
const FIGURES: &str = "
# A thought summary and three text chunks; output = 19 + 87 thoughts.
gemini/stream_generate.sse                    4  12   106  STOP                 gemini-2.5-flash
gemini/stream_generate_array.json             4  12   106  STOP                 gemini-2.5-flash
gemini/stream_generate_error.sse              2  12   91   !UNAVAILABLE
gemini/stream_generate_error_array.json       2  12   91   !UNAVAILABLE
gemini/stream_generate_blocked_array.json     0  9    -    !PROHIBITED_CONTENT
gemini/generate.json                          1  64   100  STOP                 gemini-2.5-pro
gemini/error.json                             0  -    -    !RESOURCE_EXHAUSTED
vertex/stream_generate.sse                    3  5    9    STOP                 gemini-2.0-flash-001
vertex/stream_generate_array.json             3  5    9    STOP                 gemini-2.0-flash-001
ollama/chat.json                              1  31   5    stop                 llama3.2
ollama/embed.json                             0  8    0    -
ollama/chat_stream.ndjson                     5  31   5    stop                 llama3.2
# Three thinking lines, two response lines.
ollama/generate_stream.ndjson                 5  14   28   stop                 qwen3:4b
ollama/chat_stream_error.ndjson               2  -    -    !error
bedrock/converse.json                         1  17   9    end_turn
bedrock/invoke_claude.json                    1  10   6    end_turn             claude-3-5-haiku-20241022
bedrock/invoke_titan.json                     1  6    11   FINISH
# Two reasoning deltas (the signature is not output), five text deltas.
bedrock/converse_stream.eventstream           7  45   88   end_turn
# The empty first tool input is not content; cache reads count as input.
bedrock/converse_stream_tool_use.eventstream  2  2444 40   tool_use
bedrock/converse_stream_throttled.eventstream 2  -    -    !throttlingException
bedrock/invoke_stream_claude.eventstream      3  14   9    end_turn             claude-3-5-haiku-20241022
bedrock/invoke_stream_llama.eventstream       7  19   7    stop
# Azure's content-filter annotations are not content.
azure/chat_stream_usage.sse                   4  23   4    stop                 gpt-4o-mini-2024-07-18
azure/content_filter_error.json               0  -    -    !content_filter
# vLLM: usage rides on every chunk, cumulative: the last report wins, and
# a chunk carrying both usage and text still counts as content.
vllm/chat_stream_continuous_usage.sse         7  42   8    stop
# No usage in the stream: counts come from `timings` (prompt_n + cache_n).
llamacpp/chat_stream_timings.sse              3  15   3    stop
llamacpp/chat.json                            1  15   3    stop
tgi/generate_stream.sse                       3  6    4    eos_token
tgi/generate_stream_error.sse                 2  -    -    !generation
tgi/generate.json                             1  -    8    length
mistral/chat_stream.sse                       3  8    4    stop                 mistral-small-latest
groq/chat_stream.sse                          3  44   4    stop                 llama-3.3-70b-versatile
deepseek/chat_stream_reasoning.sse            5  18   45   stop
openrouter/chat_stream.sse                    3  10   3    stop                 openai/gpt-4o-mini
openrouter/chat_stream_error.sse              1  -    -    error,!server_error
together/chat_stream.sse                      4  39   5    eos
lmstudio/chat_stream.sse                      3  24   4    stop
lmstudio/chat_v0.json                         1  24   4    stop
cohere/chat_stream.sse                        4  69   7    COMPLETE
# Two plan deltas, the tool's name, two argument pieces.
cohere/chat_stream_tool.sse                   5  1012 21   TOOL_CALL
cohere/chat.json                              1  71   9    COMPLETE
";

/// The lines of a fixture table (`FIGURES`, `TOOLS`): its fixture name
/// and the other words of each line that is not blank or a comment.
fn table_rows(table: &'static str) -> impl Iterator<Item = (&'static str, Vec<&'static str>)> {
    table
        .lines()
        .filter(|line| !line.trim().is_empty() && !line.starts_with('#'))
        .map(|line| {
            let mut words = line.split_whitespace();
            let name = words.next().expect("a fixture name");
            (name, words.collect())
        })
}

/// A comma-separated list of a table (`-`: empty).
fn list(word: &str) -> Vec<&str> {
    match word {
        "-" => Vec::new(),
        _ => word.split(',').collect(),
    }
}

/// Parse fixture `name` whole, check it against its line of `FIGURES`,
/// return the summary.
#[track_caller]
fn check(name: &str) -> Summary {
    let (_, words) = table_rows(FIGURES)
        .find(|(n, _)| *n == name)
        .unwrap_or_else(|| panic!("{name} has a line in FIGURES"));
    let count = |w: &str| w.parse::<u64>().ok();
    let (outcome, model) = (list(words[3]), words.get(4).copied());
    let finish: Vec<&str> = outcome
        .iter()
        .filter(|o| !o.starts_with('!'))
        .copied()
        .collect();
    let errors: Vec<&str> = outcome.iter().filter_map(|o| o.strip_prefix('!')).collect();
    let (s, log, result) = fixture(name).run();
    assert_eq!(result, Ok(()), "{name}: parses without error");
    assert_eq!(
        s.content_frames.to_string(),
        words[0],
        "{name}: content chunks\n{log:#?}"
    );
    assert_eq!(
        (s.usage.input, s.usage.output),
        (count(words[1]), count(words[2])),
        "{name}: usage (input, output)"
    );
    assert_eq!(s.finish, finish, "{name}: finish reasons");
    assert_eq!(s.errors, errors, "{name}: errors");
    if let Some(m) = model {
        assert_eq!(s.model.as_deref(), Some(m), "{name}: model");
    }
    s
}

fn ms(v: f64) -> Option<Duration> {
    Some(Duration::from_secs_f64(v / 1000.0))
}

#[test]
fn every_fixture_yields_its_figures() {
    let mut rows = 0;
    for (name, _) in table_rows(FIGURES) {
        check(name);
        rows += 1;
    }
    assert_eq!(rows, 41, "every line of FIGURES is read");
}

#[test]
fn gemini_reasoning_ids_and_cache_reads() {
    for name in [
        "gemini/stream_generate.sse",
        "gemini/stream_generate_array.json",
    ] {
        let s = check(name);
        assert_eq!(s.usage.reasoning, Some(87), "{name}: reasoning");
        assert_eq!(s.response_id.as_deref(), Some("qVlGaPKzLp6n1PIPpO3B6AQ"));
    }
    let s = check("gemini/generate.json");
    assert_eq!(
        (s.usage.cache_read, s.usage.reasoning),
        (Some(32), Some(83))
    );
}

#[test]
fn done_markers_are_counted_once() {
    for name in [
        "ollama/chat.json",
        "ollama/chat_stream.ndjson",
        "azure/chat_stream_usage.sse",
        "tgi/generate_stream.sse",
        "cohere/chat_stream.sse",
        "bedrock/converse_stream.eventstream",
    ] {
        assert_eq!(check(name).done, 1, "{name}");
    }
}

#[test]
fn server_timings_and_cache_reads() {
    let s = check("ollama/chat.json");
    assert_eq!(s.timing.prompt_eval, Some(Duration::from_millis(112)));
    assert_eq!(s.timing.decode, Some(Duration::from_millis(1690)));
    assert_eq!(
        check("ollama/chat_stream.ndjson").timing,
        ollama_timing([1_835_468_459, 21_473_125, 112_000_000, 1_690_000_000])
    );
    assert_eq!(check("bedrock/converse.json").timing.total, ms(2045.0));
    assert_eq!(
        check("bedrock/converse_stream.eventstream").timing.total,
        ms(1421.0)
    );
    let s = check("bedrock/converse_stream_tool_use.eventstream");
    assert_eq!(s.usage.cache_read, Some(2048));
    let s = check("bedrock/invoke_stream_claude.eventstream");
    assert_eq!((s.timing.ttft, s.timing.total), (ms(402.0), ms(688.0)));
    let s = check("llamacpp/chat_stream_timings.sse");
    assert_eq!(s.usage.cache_read, Some(11));
    assert_eq!(
        (s.timing.prompt_eval, s.timing.decode),
        (ms(31.12), ms(48.7))
    );
    let s = check("llamacpp/chat.json");
    assert_eq!(
        (s.timing.prompt_eval, s.timing.decode),
        (ms(95.3), ms(51.2))
    );
    assert_eq!(
        check("groq/chat_stream.sse").timing,
        UpstreamTiming {
            queue: seconds(0.051234),
            prompt_eval: seconds(0.002817),
            decode: seconds(0.010256),
            total: seconds(0.013073),
            ..UpstreamTiming::default()
        }
    );
    let s = check("deepseek/chat_stream_reasoning.sse");
    assert_eq!((s.usage.reasoning, s.usage.cache_read), (Some(40), Some(0)));
    let s = check("lmstudio/chat_v0.json");
    assert_eq!(
        (s.timing.ttft, s.timing.decode),
        (seconds(0.111), seconds(0.0778))
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

/// The client tool calls of each fixture with tools, by name in order
/// (`-`: none), and its provider-run tool counts: web search, web fetch,
/// file search, code interpreter, grounding. `#` starts a comment line.
const TOOLS: &str = "
# OpenAI chat: one call per index, however many argument deltas.
openai/chat_stream_tool_calls.sse             get_weather                      0,0,0,0,0
openai/chat_stream_parallel_tool_calls.sse    get_weather,get_time             0,0,0,0,0
openai/chat_stream_function_call.sse          lookup_order                     0,0,0,0,0
openai/chat_tool_calls.json                   get_weather,get_weather,get_time 0,0,0,0,0
# Responses: function_call items; web search, file search and code
# interpreter items are provider-run.
openai/responses_tools_stream.sse             get_weather                      2,0,0,0,0
openai/responses_tools.json                   open_ticket,open_ticket          1,0,1,1,0
# Anthropic: usage.server_tool_use is authoritative (2 searches billed,
# one block seen).
anthropic/message_tools.json                  get_weather,get_time             2,0,0,0,0
anthropic/messages_stream_web_search.sse      get_weather                      1,0,0,0,0
anthropic/messages_stream_tool_use.sse        get_weather                      0,0,0,0,0
# Gemini: each functionCall part is a call; grounding counts queries.
gemini/generate_tools.json                    get_weather,get_weather          0,0,0,0,2
gemini/stream_generate_tools.sse              get_time,get_weather             0,0,0,0,0
# Bedrock Converse, whole and streamed (one contentBlockStart.toolUse).
bedrock/converse_tools.json                   get_weather,get_time             0,0,0,0,0
bedrock/converse_stream_tool_use.eventstream  top_song                         0,0,0,0,0
# Ollama sends each call whole.
ollama/chat_tools.json                        get_weather,get_time             0,0,0,0,0
ollama/chat_stream_tools.ndjson               get_weather,get_weather          0,0,0,0,0
# Cohere v2: tool-call-start once per call; whole message.tool_calls.
cohere/chat_stream_tool.sse                   get_weather                      0,0,0,0,0
cohere/chat_tools.json                        get_weather,get_weather          0,0,0,0,0
# Text only.
openai/chat_stream.sse                        -                                0,0,0,0,0
openai/responses_stream.sse                   -                                0,0,0,0,0
anthropic/messages_stream.sse                 -                                0,0,0,0,0
gemini/stream_generate.sse                    -                                0,0,0,0,0
ollama/chat_stream.ndjson                     -                                0,0,0,0,0
cohere/chat_stream.sse                        -                                0,0,0,0,0
";

#[test]
fn tool_calls_in_every_family_streamed_and_whole() {
    let mut rows = 0;
    for (name, words) in table_rows(TOOLS) {
        let (names, server) = (list(words[0]), list(words[1]).join(","));
        let (s, log, result) = fixture(name).run();
        assert_eq!(result, Ok(()), "{name}: parses without error");
        assert_eq!(
            s.tool_calls as usize,
            names.len(),
            "{name}: client tool calls\n{log:#?}"
        );
        assert_eq!(s.tool_names, names, "{name}: tool names, in order");
        // The meter's rule: the provider's billed count wins over blocks seen.
        let got: Vec<String> = (0..5)
            .map(|i| s.server_billed[i].unwrap_or(s.server_seen[i]).to_string())
            .collect();
        assert_eq!(
            got.join(","),
            server,
            "{name}: provider-run tools\n{log:#?}"
        );
        rows += 1;
    }
    assert_eq!(rows, 23, "every line of TOOLS is read");
}
