//! Unit tests of `openai`: its own code in, assertions out.

use super::*;
use crate::providers::ProviderKind;
use crate::providers::scan::differential::{
    Outcome, assert_same_sequence, each_mutation, edited, fixture_bodies, fixture_payloads,
    json_outcome, mutations, outcome,
};
use crate::providers::tests::{Summary, expect_summary as expect, feed_json, feed_sse, fixture};

fn usage(input: u64, output: u64, cached: u64, reasoning: u64) -> Usage {
    Usage {
        input: Some(input),
        output: Some(output),
        cache_read: Some(cached),
        cache_creation: None,
        reasoning: Some(reasoning),
        ..Usage::default()
    }
}

/// `usage` at the default service tier, as the response reports it.
fn tier_usage(input: u64, output: u64, cached: u64, reasoning: u64) -> Usage {
    Usage {
        service_tier: Some(ServiceTier::Default),
        ..usage(input, output, cached, reasoning)
    }
}

/// `tier_usage` of a chat response, whose details count no audio.
fn chat_usage(input: u64, output: u64, cached: u64, reasoning: u64) -> Usage {
    Usage {
        input_audio: Some(0),
        output_audio: Some(0),
        ..tier_usage(input, output, cached, reasoning)
    }
}

#[test]
fn text_pieces_reassemble_the_answer() {
    let (got, _, _) = fixture("openai/chat_stream.sse").run();
    assert_eq!(
        got.texts.len(),
        got.pieces as usize,
        "one text per content piece"
    );
    assert!(!got.texts.concat().is_empty());
    let (tools, _, _) = fixture("openai/chat_stream_tool_calls.sse").run();
    assert!(
        tools.texts.is_empty(),
        "tool-call arguments inside tool_calls are counted as pieces, not text"
    );
}

#[test]
fn chat_stream_with_usage() {
    let s = Summary::of(
        9,
        "gpt-4o-mini-2024-07-18",
        "chatcmpl-BxY8pQ2mKf3r7VtH1nZcL0aWdE9sJ",
        &["stop"],
    )
    .usage(chat_usage(19, 9, 0, 0))
    .done();
    expect("openai/chat_stream_usage.sse", s);
}

#[test]
fn chat_stream_without_usage() {
    let s = Summary::of(
        6,
        "gpt-4o-2024-08-06",
        "chatcmpl-BxYA1k9sVb2MwTq7Rr3eLhU0cNg5X",
        &["stop"],
    )
    .done();
    expect("openai/chat_stream.sse", s.clone());
    expect("openai/chat_stream_crlf.sse", s);
}

#[test]
fn chat_stream_with_tool_calls() {
    // The first chunk names the tool (content), then 11 argument pieces.
    // One call however many argument deltas repeat its index.
    let s = Summary::of(
        12,
        "gpt-4o-2024-08-06",
        "chatcmpl-BxYB7nR2dQw0pLk4Hs9Jt1Ve6Yc3M",
        &["tool_calls"],
    )
    .usage(chat_usage(85, 18, 0, 0))
    .done()
    .tools(&["get_weather"]);
    expect("openai/chat_stream_tool_calls.sse", s);
}

#[test]
fn chat_stream_with_mid_stream_error() {
    let s = Summary::of(
        3,
        "gpt-4o-2024-08-06",
        "chatcmpl-BxYC3aB8eT5qWn1Kz6Lp0Xr9Dm2Fs",
        &[],
    )
    .errors(&["server_error"]);
    expect("openai/chat_stream_error.sse", s);
}

#[test]
fn azure_filter_chunks_are_not_content() {
    let s = Summary::of(
        4,
        "gpt-4o-2024-11-20",
        "chatcmpl-BxYDq4Kc7Nh2Ze8Wv5Ta1Ur3Ps6Jm",
        &["stop"],
    )
    .done();
    expect("openai/azure_chat_stream.sse", s);
}

#[test]
fn chat_whole_body() {
    // a whole body that parsed is its own terminal event
    let s = Summary::of(
        1,
        "o4-mini-2025-04-16",
        "chatcmpl-BxYFa2Ts8Lk5Wq0Rn3Ve7Hc1Mz9Pj",
        &["stop"],
    )
    .usage(chat_usage(1536, 210, 1024, 192))
    .done();
    expect("openai/chat.json", s);
}

#[test]
fn legacy_completions_stream() {
    let s = Summary::of(
        6,
        "gpt-3.5-turbo-instruct:20230824-v2",
        "cmpl-BxYEw7Lm3Qa9Vt2Rk5Hn0Jc8Zp4Xs",
        &["length"],
    )
    .done();
    expect("openai/completions_stream.sse", s);
}

#[test]
fn responses_stream() {
    // 3 reasoning-summary deltas and 4 output-text deltas.
    let id = "resp_6887a1f3c2e08191b5a7d4e2f90c13ab0d9e4f6a7b8c9d01";
    let s = Summary::of(7, "o4-mini-2025-04-16", id, &["completed"])
        .usage(tier_usage(37, 150, 0, 128))
        .done();
    expect("openai/responses_stream.sse", s);
}

#[test]
fn background_stream_resume_and_polls() {
    let id = "resp_68b1c0d2e3f48193a5b6c7d8e9f0a1b20c3d4e5f6a7b8c9d";
    let final_usage = tier_usage(37, 150, 0, 128);
    let s = Summary::of(7, "o4-mini-2025-04-16", id, &["completed"])
        .usage(final_usage)
        .done();
    expect("openai/responses_background_stream.sse", s);
    // Resumed after event 11: the four text deltas, then completion.
    let s = Summary::of(4, "o4-mini-2025-04-16", id, &["completed"])
        .usage(final_usage)
        .done();
    expect("openai/responses_resume_stream.sse", s);
    for (file, status) in [
        ("openai/responses_background_queued.json", "queued"),
        (
            "openai/responses_background_in_progress.json",
            "in_progress",
        ),
    ] {
        let s = fixture(file).run().0;
        assert_eq!(
            (s.usage, s.content_frames, s.finish),
            (Usage::default(), 0, vec![status.to_owned()]),
            "{file}: no usage and no output before the response finishes"
        );
    }
    let s = fixture("openai/responses_background_completed.json")
        .run()
        .0;
    assert_eq!(
        s.usage, final_usage,
        "the finished poll carries the final usage"
    );
}

#[test]
fn responses_whole_body() {
    let id = "resp_6887a1f3c2e08191b5a7d4e2f90c13ab0d9e4f6a7b8c9d01";
    let s = Summary::of(1, "o4-mini-2025-04-16", id, &["completed"])
        .usage(tier_usage(37, 150, 0, 128))
        .done();
    expect("openai/responses.json", s);
}

#[test]
fn responses_failed_stream() {
    let id = "resp_6887a2b0e5f48190a9b8c7d6e5f4a3b20c1d2e3f4a5b6c7d";
    let s = Summary::of(2, "gpt-4.1-2025-04-14", id, &[]).errors(&["server_error"]);
    expect("openai/responses_failed_stream.sse", s);
}

#[test]
fn embeddings_have_input_and_no_output() {
    let mut s = Summary::of(0, "text-embedding-3-small", "", &[]);
    s.usage = Usage {
        input: Some(8),
        output: Some(0),
        ..Usage::default()
    };
    s.done = 1;
    expect("openai/embeddings.json", s);
}

/// Feed SSE data payloads (and optionally whole bodies) to one adapter.
fn sse(payloads: &[&str]) -> Result<Summary, AdapterError> {
    feed_sse(
        &mut OpenaiAdapter::new(Some(Operation::ChatCompletions)),
        payloads,
    )
}

fn json(body: &str) -> Result<Summary, AdapterError> {
    feed_json(&mut OpenaiAdapter::new(None), &[body])
}

fn content(data: &str) -> u32 {
    sse(&[data]).expect("valid payload").pieces
}

#[test]
fn what_counts_as_content() {
    let delta =
        |d: &str| format!(r#"{{"choices":[{{"index":0,"delta":{d},"finish_reason":null}}]}}"#);
    let tool = |f: &str| {
        delta(&format!(
            r#"{{"tool_calls":[{{"index":0,"function":{f}}}]}}"#
        ))
    };
    let legacy = |t: &str| format!(r#"{{"choices":[{{"text":{t},"index":0}}]}}"#);
    for (payload, pieces, what) in [
        (
            delta(r#"{"role":"assistant","content":""}"#),
            0,
            "role only",
        ),
        (delta(r#"{"content":null}"#), 0, "null content"),
        (delta("{}"), 0, "empty delta"),
        (r#"{"choices":[]}"#.to_owned(), 0, "no choices"),
        (delta(r#"{"content":"\n"}"#), 1, "escaped newline"),
        (delta(r#"{"content":"\"q\""}"#), 1, "escaped quotes"),
        (delta(r#"{"refusal":"I can't"}"#), 1, "refusal"),
        (
            delta(r#"{"reasoning_content":"hmm"}"#),
            1,
            "reasoning_content",
        ),
        (delta(r#"{"reasoning":"hmm"}"#), 1, "reasoning"),
        (delta(r#"{"content":[]}"#), 0, "empty content parts"),
        (tool(r#"{"arguments":""}"#), 0, "empty arguments"),
        (tool(r#"{"arguments":"{\"a"}"#), 1, "arguments"),
        (tool(r#"{"name":"f","arguments":""}"#), 1, "tool name"),
        (
            delta(r#"{"function_call":{"arguments":"x"}}"#),
            1,
            "legacy function_call",
        ),
        (legacy(r#""""#), 0, "empty legacy text"),
        (legacy(r#""hi""#), 1, "legacy text"),
    ] {
        assert_eq!(content(&payload), pieces, "{what}: {payload}");
    }
    let azure = r#"{"choices":[{"content_filter_offsets":{"check_offset":1},"content_filter_results":{"hate":{"filtered":false}},"finish_reason":null,"index":0}],"id":"","model":""}"#;
    assert_eq!(
        sse(&[azure]).expect("valid"),
        Summary::default(),
        "Azure annotation"
    );
    let two =
        r#"{"choices":[{"index":0,"delta":{"content":"a"}},{"index":1,"delta":{"content":"b"}}]}"#;
    assert_eq!(content(two), 2, "one piece per choice with content");
}

#[test]
fn usage_null_is_ignored_and_done_alone_is_no_terminal_event() {
    let s = sse(&[r#"{"choices":[],"usage":null}"#, " [DONE] "]).expect("valid");
    assert_eq!(
        (s.usage, s.done),
        (Usage::default(), 0),
        "`[DONE]` without any finish_reason: the answer was cut short"
    );
    let s = sse(&[
        r#"{"choices":[{"index":0,"delta":{"content":"x"},"finish_reason":"length"}]}"#,
        "[DONE]",
    ])
    .expect("valid");
    assert_eq!(s.done, 1, "a finish_reason is the terminal event");
}

#[test]
fn model_and_id_are_reported_once() {
    let chunk = r#"{"id":"c1","model":"m","choices":[{"index":0,"delta":{"content":"x"}}]}"#;
    let mut adapter = OpenaiAdapter::new(None);
    let mut log = Vec::new();
    for _ in 0..3 {
        let frame = Frame::Sse {
            event: b"",
            data: chunk.as_bytes(),
        };
        adapter
            .on_frame(frame, &mut |e| log.push(format!("{e:?}")))
            .expect("valid");
    }
    assert_eq!(
        log.iter().filter(|e| e.starts_with("Model")).count(),
        1,
        "{log:?}"
    );
    assert_eq!(
        log.iter().filter(|e| e.starts_with("ResponseId")).count(),
        1,
        "{log:?}"
    );
}

#[test]
fn error_kinds() {
    let kind = |body: &str| json(body).expect("valid").errors;
    assert_eq!(
        kind(r#"{"error":{"message":"m","type":"invalid_request_error","code":"x"}}"#),
        ["invalid_request_error"]
    );
    assert_eq!(
        kind(r#"{"error":{"message":"m","type":null,"code":"rate_limit_exceeded"}}"#),
        ["rate_limit_exceeded"]
    );
    assert_eq!(kind(r#"{"error":{"message":"m","code":429}}"#), ["429"]);
    assert_eq!(kind(r#"{"error":{"message":"m"}}"#), ["error"]);
    assert_eq!(kind(r#"{"error":"upstream exploded"}"#), ["error"]);
    assert_eq!(
        kind(
            r#"{"type":"error","code":"ERR_SOMETHING","message":"m","param":null,"sequence_number":4}"#
        ),
        ["ERR_SOMETHING"]
    );
    assert_eq!(
        kind(r#"{"type":"error","error":{"type":"server_error","message":"m"}}"#),
        ["server_error"]
    );
    assert!(
        kind(r#"{"id":"resp_1","object":"response","error":null,"output":[]}"#).is_empty(),
        "error: null"
    );
    let failed =
        r#"{"type":"response.failed","response":{"id":"r","status":"failed","error":null}}"#;
    assert_eq!(sse(&[failed]).expect("valid").errors, ["response_failed"]);
}

#[test]
fn responses_incomplete_reports_its_reason() {
    let ev = r#"{"type":"response.incomplete","response":{"id":"r","model":"m","status":"incomplete","incomplete_details":{"reason":"max_output_tokens"},"usage":{"input_tokens":5,"output_tokens":16}}}"#;
    let s = sse(&[ev]).expect("valid");
    assert_eq!(s.finish, ["max_output_tokens"]);
    assert_eq!(
        (s.usage.input, s.usage.output, s.done),
        (Some(5), Some(16), 1)
    );
}

#[test]
fn responses_events_without_text_are_not_content() {
    for ev in [
        r#"{"type":"response.output_text.delta","delta":""}"#,
        r#"{"type":"response.output_text.done","text":"Hello"}"#,
        r#"{"type":"response.content_part.added","part":{"type":"output_text","text":""}}"#,
        r#"{"type":"response.output_item.added","item":{"type":"function_call","name":"f"}}"#,
    ] {
        assert_eq!(content(ev), 0, "{ev}");
    }
    assert_eq!(
        content(r#"{"type":"response.function_call_arguments.delta","delta":"{\""}"#),
        1
    );
    assert_eq!(
        content(r#"{"type":"response.reasoning_text.delta","delta":"so"}"#),
        1
    );
}

#[test]
fn whole_body_with_several_choices() {
    let body = r#"{"id":"c","model":"m","choices":[{"index":0,"message":{"content":"a"},"finish_reason":"stop"},{"index":1,"message":{"content":"b"},"finish_reason":"length"}]}"#;
    let s = json(body).expect("valid");
    assert_eq!(
        (s.pieces, s.finish.clone()),
        (1, vec!["stop".to_owned(), "length".to_owned()])
    );
    let tool = r#"{"choices":[{"index":0,"message":{"content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{}"}}]},"finish_reason":"tool_calls"}]}"#;
    assert_eq!(
        json(tool).expect("valid").pieces,
        1,
        "a tool call is content"
    );
}

/// Chunks the scan must read exactly as serde does (or leave to it).
const SHAPES: &[&str] = &[
    r#"{"id":"c","model":"m","choices":[{"index":0,"delta":{"content":"a \"content\":\"b\" c"},"finish_reason":null}]}"#,
    r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null}}]}"#,
    r#"{"choices":[{"index":0,"delta":{"content":null}}]}"#,
    r#"{"choices":[{"index":0,"delta":{"content":"\n\"q\"\\"}}]}"#,
    r#"{"choices":[{"index":0,"delta":{"content":"x","content":"y"}}]}"#,
    r#"{"choices":[{"index":0,"delta":{"content":[{"type":"text","text":"x"}]}}]}"#,
    r#"{"choices":[{"index":0,"delta":{"content":[],"reasoning":"r"}}]}"#,
    r#"{"choices":[{"index":0,"delta":{"content":{"a":"}"},"reasoning_content":"r"}}]}"#,
    r#"{"choices":[{"index":0,"delta":{"content":1}}]}"#,
    r#"{"choices":[{"index":0,"delta":{"refusal":"no","content":""}}]}"#,
    r#"{"choices":[{"index":0,"delta":{"tool_calls":null,"content":"x"}}]}"#,
    r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{}"}}]}}]}"#,
    r#"{"choices":[{"index":0,"delta":{"function_call":{"arguments":"x"}}}]}"#,
    r#"{"id":"c\u0031","model":"m","choices":[{"delta":{"content":"x"}}]}"#,
    r#"{"id":1,"choices":[]}"#,
    r#"{"model":null,"choices":[{"delta":{"content":"x"},"finish_reason":"stop"}]}"#,
    r#"{"choices":[{"delta":{"content":"x"},"finish_reason":""}]}"#,
    r#"{"choices":[{"delta":{"content":"x"},"finish_reason":5}]}"#,
    r#"{"choices":[{"delta":{"content":"x"}},{"delta":{"content":"y"}}]}"#,
    r#"{"choices":null}"#,
    r#"{"choices":[null]}"#,
    r#"{"choices":[{"delta":null}]}"#,
    r#"{"choices":[{"delta":["x"]}]}"#,
    r#"{"choices":[{"delta":{"content":"x"}}],"usage":null,"error":null}"#,
    r#"{"choices":[{"delta":{"content":"x"}}],"usage":{"prompt_tokens":1}}"#,
    r#"{"choices":[{"delta":{"content":"x"}}],"error":{"type":"e"}}"#,
    r#"{"choices":[{"delta":{"content":"x"}}]} trailing"#,
    r#"{"object":"response","output":[1]}"#,
    r#"{"object":"response","choices":[{"delta":{"content":"x"}}]}"#,
    r#"{"choices":[{"delta":{"content":"caf\u00e9 😀"}}]}"#,
    r#"{"choices":[{"delta":{"content":"\ud83d\ude00"}}]}"#,
    r#"{"choices":[{"delta":{"content":"x"}}],"x_groq":{"id":"g"}}"#,
    r#"{"choices":[{"delta":{"content":"x"}}],"type":"chunk"}"#,
    r#"{"choices":[{"text":"x"}]}"#,
    r#" { "choices" : [ { "delta" : { "content" : "x" } , "logprobs" : null } ] , "created" : -1.5e3 } "#,
    r#"{"choices":[{"delta":{"content":"x"}}],"choices":[]}"#,
];

/// The same payload through the scan and through serde alone.
fn scan_and_serde(data: &[u8]) -> (Outcome, Outcome) {
    let op = Some(Operation::ChatCompletions);
    (
        outcome(|f, out| OpenaiAdapter::new(op).on_frame(f, out), data),
        outcome(
            |f, out| OpenaiAdapter::without_scan(op).on_frame(f, out),
            data,
        ),
    )
}

const OPENAI_FAMILY: &[ProviderKind] = &[
    ProviderKind::Openai,
    ProviderKind::Azure,
    ProviderKind::Vllm,
    ProviderKind::Llamacpp,
    ProviderKind::Mistral,
    ProviderKind::Groq,
    ProviderKind::Deepseek,
    ProviderKind::Openrouter,
    ProviderKind::Together,
    ProviderKind::Lmstudio,
];

#[test]
fn scan_reads_fixture_chunks_and_tricky_shapes_as_serde_does() {
    let payloads = fixture_payloads(OPENAI_FAMILY);
    let mut scanned = 0;
    for data in payloads
        .iter()
        .map(Vec::as_slice)
        .chain(SHAPES.iter().map(|s| s.as_bytes()))
    {
        let (scan, serde) = scan_and_serde(data);
        assert_eq!(scan, serde, "{}", String::from_utf8_lossy(data));
        scanned += usize::from(ChatChunk::scan(data.trim_ascii()).is_some());
    }
    // Tool-call chunks and Responses events are serde's by design.
    let serde_only = |p: &&Vec<u8>| {
        let has = |needle: &[u8]| p.windows(needle.len()).any(|w| w == needle);
        has(b"\"tool_calls\":[{") || has(b"\"function_call\":{") || has(b"\"type\":\"response.")
    };
    let plain = payloads.iter().filter(|p| !serde_only(p)).count();
    assert!(
        scanned * 2 > plain,
        "the scan reads most chunks: {scanned} of {} fixture chunks and {} shapes",
        payloads.len(),
        SHAPES.len()
    );
    let op = Some(Operation::ChatCompletions);
    let (mut with, mut without) = (OpenaiAdapter::new(op), OpenaiAdapter::without_scan(op));
    assert_same_sequence(&mut with, &mut without, &payloads);
}

#[test]
fn scan_reads_mutated_chunks_as_serde_does() {
    let payloads = fixture_payloads(OPENAI_FAMILY);
    each_mutation(&payloads, SHAPES, |m| {
        let (scan, serde) = scan_and_serde(m);
        assert_eq!(scan, serde, "{}", String::from_utf8_lossy(m));
    });
}

/// `data` with its `delta.content` string literal replaced by `with`.
fn with_content(data: &[u8], with: &[u8]) -> Option<Vec<u8>> {
    let key = b"\"content\":";
    let at = data.windows(key.len()).position(|w| w == key)? + key.len();
    let len = scan::string_literal(&data[at..])?.len();
    Some([&data[..at], with, &data[at + len..]].concat())
}

/// Literals (and things that are not) to put where the content was.
const CONTENTS: &[&[u8]] = &[
    b"\"x\"",
    b"\"\"",
    b"\"a longer piece of text, past a few words of eight bytes\"",
    b"\"q\\\"uote\\\\\"",
    b"\"\\u00e9\\n\"",
    b"\"\\ud83d\\ude00\"",
    b"\"\\x\"",
    b"\"a\x01\"",
    b"\"\xc3\"",
    b"\"open",
    b"null",
    b"7",
    b"\"a\",\"b\"",
];

/// A stream with OpenAI's `obfuscation` padding, before and after the
/// choices.
const PADDED: &[&str] = &[
    r#"{"id":"c","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}],"obfuscation":"a"}"#,
    r#"{"id":"c","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[{"index":0,"delta":{"content":"Hel"},"finish_reason":null}],"obfuscation":"abcd"}"#,
    r#"{"id":"c","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[{"index":0,"delta":{"content":"lo, there"},"finish_reason":null}],"obfuscation":"ab"}"#,
    r#"{"id":"c","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[{"index":0,"delta":{"content":"!"},"finish_reason":null}],"obfuscation":""}"#,
    r#"{"obfuscation":"xyz","id":"c","model":"gpt-4o","choices":[{"index":0,"delta":{"content":"a"},"finish_reason":null}]}"#,
    r#"{"obfuscation":"x","id":"c","model":"gpt-4o","choices":[{"index":0,"delta":{"content":"bcd"},"finish_reason":null}]}"#,
    r#"{"id":"c","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"obfuscation":"abcdef"}"#,
];

/// Chunks read by comparison with the last one agree with serde: each
/// fixture stream in order, each chunk followed by the same chunk with
/// other content (valid or not) and by random edits, through one
/// adapter of each kind, so that most reads are by comparison.
#[test]
fn chunks_read_by_the_last_ones_shape_read_as_serde_does() {
    let op = Some(Operation::ChatCompletions);
    let (mut fast, mut serde) = (OpenaiAdapter::new(op), OpenaiAdapter::without_scan(op));
    let padded = PADDED.iter().map(|p| p.as_bytes().to_vec());
    let mut rng = fastrand::Rng::with_seed(30);
    let (mut variants, mut by_shape) = (0, 0);
    for data in fixture_payloads(OPENAI_FAMILY).into_iter().chain(padded) {
        let other = CONTENTS.iter().filter_map(|c| with_content(&data, c));
        let inputs: Vec<Vec<u8>> = std::iter::once(data.clone()).chain(other).collect();
        variants += inputs.len() - 1;
        let edits = (0..20).map(|_| edited(&data, b"\"\\{}[],: n0-.e1tu\x01\xc3", 2, &mut rng));
        for (n, m) in inputs
            .iter()
            .cloned()
            .chain(edits)
            .chain([data.clone()])
            .enumerate()
        {
            let hit = fast.last.read(m.trim_ascii(), true).is_some();
            by_shape += usize::from(hit && (1..inputs.len()).contains(&n));
            let a = outcome(|f, out| fast.on_frame(f, out), &m);
            let b = outcome(|f, out| serde.on_frame(f, out), &m);
            assert_eq!(a, b, "{}", String::from_utf8_lossy(&m));
        }
    }
    // Content variants are read by shape where the chunk is plain.
    assert!(
        by_shape * 4 > variants,
        "{by_shape} of {variants} content variants read by the last chunk's shape"
    );
}

#[test]
fn a_padded_stream_is_read_by_shape_after_its_first_content_chunk() {
    let mut a = OpenaiAdapter::new(Some(Operation::ChatCompletions));
    let mut texts = Vec::new();
    let mut by_shape = Vec::new();
    for p in &PADDED[..4] {
        by_shape.push(a.last.read(p.as_bytes(), true).is_some());
        a.on_frame(
            Frame::Sse {
                event: b"",
                data: p.as_bytes(),
            },
            &mut |e| {
                if let Event::Text(t) = e {
                    texts.push(t.to_owned());
                }
            },
        )
        .expect("valid chunk");
    }
    assert_eq!(texts, [r#""Hel""#, r#""lo, there""#, r#""!""#]);
    assert_eq!(by_shape, [false, false, true, true]);
}

/// Whole bodies the scan must read exactly as serde does (or leave to it).
const BODIES: &[&str] = &[
    r#"{"id":"c","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"a \"content\":\"b\" c","refusal":null},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7}}"#,
    r#"{"id":"c","model":"m","choices":[{"index":0,"message":{"content":"a"},"finish_reason":"stop"},{"index":1,"message":{"content":"b"},"finish_reason":"length"}]}"#,
    r#"{"choices":[{"message":{"content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{}"}}]},"finish_reason":"tool_calls"}]}"#,
    r#"{"choices":[{"message":{"content":null,"tool_calls":[{"function":{"name":"","arguments":""}},{"function":null}]}}]}"#,
    r#"{"choices":[{"message":{"content":"","tool_calls":[]}},{"message":{"reasoning_content":"r","content":"x"}}]}"#,
    r#"{"choices":[{"message":{"content":[{"type":"text","text":"x"}],"reasoning":"r"}}]}"#,
    r#"{"choices":[{"message":{"content":{"a":"}"},"refusal":"no"}}]}"#,
    r#"{"choices":[{"message":{"content":"x","content":"y"}}]}"#,
    r#"{"choices":[{"message":{"content":"\n\"q\"\\ caf\u00e9"}}]}"#,
    r#"{"choices":[{"message":{"content":"\ud83d\ude00"}}]}"#,
    r#"{"choices":[{"message":{"content":"x","audio":{"transcript":"t"}}}]}"#,
    r#"{"choices":[{"message":{"content":"x","audio":null,"function_call":null}}]}"#,
    r#"{"choices":[{"message":{"function_call":{"arguments":"x"}}}]}"#,
    r#"{"choices":[{"delta":{"content":"x"}}]}"#,
    r#"{"choices":[{"text":"x","finish_reason":"stop"}]}"#,
    r#"{"choices":[null]}"#,
    r#"{"choices":[{"message":null,"finish_reason":null}],"usage":null,"error":null}"#,
    r#"{"choices":[{"message":["x"]}]}"#,
    r#"{"choices":[{"message":{"content":"x"},"finish_reason":""}]}"#,
    r#"{"choices":[{"message":{"content":"x"},"finish_reason":5}]}"#,
    r#"{"choices":[{"message":{"content":"x"},"finish_reason":"a\u0062"}]}"#,
    r#"{"choices":[{"message":{"content":"x"},"finish_reason":"s"},{"finish_reason":"t"},{"finish_reason":"u"},{"finish_reason":"v"},{"finish_reason":"w"},{"finish_reason":"x"},{"finish_reason":"y"},{"finish_reason":"z"},{"finish_reason":"a"},{"finish_reason":"b"},{"finish_reason":"c"},{"finish_reason":"d"},{"finish_reason":"e"},{"finish_reason":"f"},{"finish_reason":"g"},{"finish_reason":"h"},{"finish_reason":"i"}]}"#,
    r#"{"id":"c\u0031","model":"m","choices":[]}"#,
    r#"{"id":1,"choices":[]}"#,
    r#"{"model":"","id":"","choices":[]}"#,
    r#"{"model":"m","model":"n","choices":[]}"#,
    r#"{"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":0,"prompt_tokens_details":{"cached_tokens":1,"audio_tokens":null},"completion_tokens_details":null}}"#,
    r#"{"choices":[],"usage":{"input_tokens":5,"output_tokens":6,"input_tokens_details":{"cached_tokens":2},"output_tokens_details":{"reasoning_tokens":3,"audio_tokens":1}}}"#,
    r#"{"choices":[],"usage":{"prompt_tokens":5,"input_tokens":6,"prompt_tokens_details":null,"input_tokens_details":{"cached_tokens":2}}}"#,
    r#"{"choices":[],"usage":{"prompt_tokens":5,"prompt_cache_hit_tokens":4,"prompt_cache_miss_tokens":1}}"#,
    r#"{"choices":[],"usage":{"prompt_tokens":-1}}"#,
    r#"{"choices":[],"usage":{"prompt_tokens":1.0}}"#,
    r#"{"choices":[],"usage":{"prompt_tokens":1e2}}"#,
    r#"{"choices":[],"usage":{"prompt_tokens":01}}"#,
    r#"{"choices":[],"usage":{"prompt_tokens":18446744073709551615}}"#,
    r#"{"choices":[],"usage":{"prompt_tokens":18446744073709551616}}"#,
    r#"{"choices":[],"usage":{"prompt_tokens":"1"}}"#,
    r#"{"choices":[],"usage":{"prompt_tokens":1,"prompt_tokens":2}}"#,
    r#"{"choices":[],"usage":{"prompt_tokens":1,"cost":0.5}}"#,
    r#"{"choices":[],"usage":{"prompt_tokens":1,"queue_time":0.5}}"#,
    r#"{"choices":[],"usage":{"prompt_tokens_details":{"cached_tokens":1,"cached_tokens":1}}}"#,
    r#"{"choices":[],"usage":[1]}"#,
    r#"{"choices":[],"usage":{"prompt_tokens":1},"service_tier":"flex"}"#,
    r#"{"choices":[],"usage":{"prompt_tokens":1},"service_tier":"unknown"}"#,
    r#"{"choices":[],"usage":{"prompt_tokens":1},"service_tier":3}"#,
    r#"{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.1,-2.5e-3,0]}],"model":"e","usage":{"prompt_tokens":8,"total_tokens":8}}"#,
    r#"{"object":"list","data":[],"usage":{"prompt_tokens":8,"completion_tokens":2}}"#,
    r#"{"id":"r","object":"response","status":"completed","error":null,"incomplete_details":null,"model":"m","output":[{"type":"message","content":[{"type":"output_text","text":"hi"}]}],"usage":{"input_tokens":1,"output_tokens":2}}"#,
    r#"{"id":"r","object":"response","status":"incomplete","incomplete_details":{"reason":"max_output_tokens"},"output":[]}"#,
    r#"{"object":"response","status":"incomplete","incomplete_details":{"reason":""}}"#,
    r#"{"object":"response","status":"incomplete","incomplete_details":{}}"#,
    r#"{"object":"response","status":"","incomplete_details":{"reason":null},"output":null}"#,
    r#"{"object":"response","incomplete_details":"x"}"#,
    r#"{"object":"response","error":{"type":"server_error"}}"#,
    r#"{"object":"response","choices":[{"message":{"content":"x"}}],"output":{}}"#,
    r#"{"error":{"message":"m","type":"invalid_request_error"}}"#,
    r#"{"type":"error","code":"E"}"#,
    r#"{"choices":[],"x_groq":{"id":"g"}}"#,
    r#"{"choices":[],"timings":{"prompt_n":1}}"#,
    r#"{"choices":[],"stats":{}}"#,
    r#"{"choices":[]} trailing"#,
    r#" { "choices" : [ { "message" : { "content" : "x" } , "logprobs" : null } ] , "created" : -1.5e3 } "#,
    r#"{"choices":[],"choices":[]}"#,
    "",
    "   ",
    "{",
    "not json",
];

/// The same whole body through the scan and through serde alone.
fn whole_scan_and_serde(body: &[u8], op: Option<Operation>) -> (Outcome, Outcome) {
    (
        json_outcome(|f, out| OpenaiAdapter::new(op).on_frame(f, out), body),
        json_outcome(
            |f, out| OpenaiAdapter::without_scan(op).on_frame(f, out),
            body,
        ),
    )
}

const OPERATIONS: [Option<Operation>; 4] = [
    None,
    Some(Operation::ChatCompletions),
    Some(Operation::Responses),
    Some(Operation::Embeddings),
];

#[test]
fn whole_body_scan_reads_fixtures_and_tricky_shapes_as_serde_does() {
    let fixtures = fixture_bodies(OPENAI_FAMILY);
    assert!(
        fixtures.len() >= 5,
        "whole-body fixtures: {}",
        fixtures.len()
    );
    let mut scanned = 0;
    for body in fixtures
        .iter()
        .copied()
        .chain(BODIES.iter().map(|s| s.as_bytes()))
    {
        for op in OPERATIONS {
            let (scan, serde) = whole_scan_and_serde(body, op);
            assert_eq!(scan, serde, "{op:?} {}", String::from_utf8_lossy(body));
        }
        scanned += usize::from(WholeBody::scan(body).is_some());
    }
    // The plain OpenAI bodies take the scan; Azure's error, llama.cpp's
    // timings and LM Studio's stats are left to serde.
    for name in [
        "openai/chat.json",
        "openai/responses.json",
        "openai/embeddings.json",
    ] {
        assert!(
            WholeBody::scan(fixture(name).body).is_some(),
            "{name} scanned"
        );
    }
    // Most shapes above are there to be left to serde; the plain ones
    // (32 when written) must still take the scan.
    assert!(scanned >= 30, "{scanned} bodies scanned");
}

#[test]
fn whole_body_scan_reads_mutated_bodies_as_serde_does() {
    let fixtures = fixture_bodies(OPENAI_FAMILY);
    let inputs = fixtures
        .iter()
        .copied()
        .chain(BODIES.iter().map(|s| s.as_bytes()));
    for (i, body) in inputs.enumerate() {
        for m in mutations(body, 1000 + i as u64, 200) {
            let op = OPERATIONS[i % OPERATIONS.len()];
            let (scan, serde) = whole_scan_and_serde(&m, op);
            assert_eq!(scan, serde, "{op:?} {}", String::from_utf8_lossy(&m));
        }
    }
}

#[test]
fn whole_body_scan_takes_the_bench_body() {
    // The simulator's answer, the shape of most non-streamed traffic.
    let body = br#"{"id":"chatcmpl-1","object":"chat.completion","created":1700000000,"model":"sim-1","choices":[{"index":0,"message":{"role":"assistant","content":"lorem ipsum dolor","refusal":null},"logprobs":null,"finish_reason":"length"}],"usage":{"prompt_tokens":12,"completion_tokens":100,"total_tokens":112}}"#;
    assert!(WholeBody::scan(body).is_some(), "scanned");
    let s = json(std::str::from_utf8(body).expect("UTF-8")).expect("valid");
    assert_eq!(
        (s.pieces, s.usage.input, s.usage.output, s.finish),
        (1, Some(12), Some(100), vec!["length".to_owned()])
    );
}

#[test]
fn malformed_payloads_are_errors() {
    assert!(sse(&["{\"choices\":"]).is_err(), "truncated JSON");
    assert!(sse(&["not json"]).is_err(), "not JSON");
    assert!(
        sse(&[r#"{"usage":{"prompt_tokens":-1}}"#]).is_err(),
        "negative count"
    );
    assert_eq!(
        sse(&["", "  "]).expect("blank data is skipped"),
        Summary::default()
    );
}
