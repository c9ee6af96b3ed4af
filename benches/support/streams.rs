//! Bench inputs: recorded wire-format fixtures and generated 100-token
//! streams in, chunked the way a network delivers them out.

#![allow(dead_code)] // each bench uses a different part

use std::fmt::Write as _;

/// Tokens of a generated answer: mostly short words, some with JSON escapes
/// and non-ASCII text, as real completions have.
const WORDS: [&str; 16] = [
    " The",
    " proxy",
    " forwards",
    " every",
    " byte",
    ",",
    " then",
    " counts",
    " tokens",
    ".\\n\\n",
    " It",
    " says",
    " \\\"hello\\\"",
    " café",
    " —",
    " fast",
];

/// An OpenAI chat completion stream of `tokens` content chunks, shaped like
/// the API's (one role chunk, content chunks, a finish chunk, a usage chunk
/// for `stream_options.include_usage`, `[DONE]`).
pub(crate) fn openai_stream(tokens: usize) -> Vec<u8> {
    let head = r#"{"id":"chatcmpl-BxY8pQ2mKf3r7VtH1nZcL0aWdE9sJ","object":"chat.completion.chunk","created":1753600000,"model":"gpt-4o-mini-2024-07-18","service_tier":"default","system_fingerprint":"fp_34a54ae93c","choices":["#;
    let mut s = String::new();
    let _ = write!(
        s,
        "data: {head}{{\"index\":0,\"delta\":{{\"role\":\"assistant\",\"content\":\"\",\"refusal\":null}},\"logprobs\":null,\"finish_reason\":null}}],\"usage\":null,\"obfuscation\":\"oKrH\"}}\n\n"
    );
    for i in 0..tokens {
        let w = WORDS[i % WORDS.len()];
        let _ = write!(
            s,
            "data: {head}{{\"index\":0,\"delta\":{{\"content\":\"{w}\"}},\"logprobs\":null,\"finish_reason\":null}}],\"usage\":null,\"obfuscation\":\"3LhE\"}}\n\n"
        );
    }
    let _ = write!(
        s,
        "data: {head}{{\"index\":0,\"delta\":{{}},\"logprobs\":null,\"finish_reason\":\"stop\"}}],\"usage\":null,\"obfuscation\":\"Zx\"}}\n\n"
    );
    let _ = write!(
        s,
        "data: {head}],\"usage\":{{\"prompt_tokens\":19,\"completion_tokens\":{tokens},\"total_tokens\":{},\"prompt_tokens_details\":{{\"cached_tokens\":0,\"audio_tokens\":0}},\"completion_tokens_details\":{{\"reasoning_tokens\":0,\"audio_tokens\":0,\"accepted_prediction_tokens\":0,\"rejected_prediction_tokens\":0}}}},\"obfuscation\":\"q\"}}\n\n",
        tokens + 19
    );
    s.push_str("data: [DONE]\n\n");
    s.into_bytes()
}

/// An Anthropic Messages stream of `tokens` text deltas, shaped like the
/// API's (message_start, content_block_start, ping, deltas, stop events).
pub(crate) fn anthropic_stream(tokens: usize) -> Vec<u8> {
    let mut s = String::new();
    s.push_str("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_01XFDUDYJgAACzvnptvVoYEL\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-sonnet-4-20250514\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":472,\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":2048,\"output_tokens\":2,\"service_tier\":\"standard\"}}}\n\n");
    s.push_str("event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n");
    s.push_str("event: ping\ndata: {\"type\": \"ping\"}\n\n");
    for i in 0..tokens {
        let w = WORDS[i % WORDS.len()];
        let _ = write!(
            s,
            "event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":\"{w}\"}}}}\n\n"
        );
    }
    s.push_str(
        "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
    );
    let _ = write!(
        s,
        "event: message_delta\ndata: {{\"type\":\"message_delta\",\"delta\":{{\"stop_reason\":\"end_turn\",\"stop_sequence\":null}},\"usage\":{{\"output_tokens\":{tokens}}}}}\n\n"
    );
    s.push_str("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n");
    s.into_bytes()
}

/// Recorded OpenAI streams (tests/fixtures/openai).
pub(crate) const OPENAI_FIXTURES: &[&[u8]] = &[
    include_bytes!("../../tests/fixtures/openai/chat_stream_usage.sse"),
    include_bytes!("../../tests/fixtures/openai/chat_stream.sse"),
    include_bytes!("../../tests/fixtures/openai/chat_stream_tool_calls.sse"),
    include_bytes!("../../tests/fixtures/openai/azure_chat_stream.sse"),
];

/// Recorded Anthropic streams (tests/fixtures/anthropic).
pub(crate) const ANTHROPIC_FIXTURES: &[&[u8]] = &[
    include_bytes!("../../tests/fixtures/anthropic/messages_stream.sse"),
    include_bytes!("../../tests/fixtures/anthropic/messages_stream_tool_use.sse"),
    include_bytes!("../../tests/fixtures/anthropic/messages_stream_thinking.sse"),
];

/// The recorded streams of one family concatenated into one body, each
/// repeated until the body has at least `min_len` bytes.
pub(crate) fn fixture_body(fixtures: &[&[u8]], min_len: usize) -> Vec<u8> {
    let mut out = Vec::new();
    while out.len() < min_len {
        for f in fixtures {
            out.extend_from_slice(f);
        }
    }
    out
}

/// Split after every blank line (`\n\n`): one SSE event per chunk, as a
/// provider flushes them.
pub(crate) fn per_event(body: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut start = 0;
    for end in memchr::memmem::find_iter(body, b"\n\n") {
        out.push(&body[start..end + 2]);
        start = end + 2;
    }
    if start < body.len() {
        out.push(&body[start..]);
    }
    out
}

/// Split into `size`-byte pieces, as a busy connection's reads deliver them.
pub(crate) fn fixed(body: &[u8], size: usize) -> Vec<&[u8]> {
    body.chunks(size).collect()
}

/// Total bytes of a chunk list.
pub(crate) fn total(chunks: &[&[u8]]) -> u64 {
    chunks.iter().map(|c| c.len() as u64).sum()
}
