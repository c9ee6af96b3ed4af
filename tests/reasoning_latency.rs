//! Reasoning-aware latency through the real server, one test per provider
//! family: a scripted upstream sends empty and role-only frames at once,
//! reasoning after `FIRST` for `THINKING`, then visible output; the
//! exported span must carry TTFT (first output of any kind), the time to
//! first visible output and the thinking time close to the script, with
//! the tolerances of the other TTFT tests (−20 ms, +300 ms).

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

mod support;

use std::time::Duration;

use support::client;
use support::names::*;
use support::otlp::SpanRec;
use support::rig::Rig;
use support::upstream::{Reply, Step};

/// Scripted time to the first reasoning output.
const FIRST: Duration = Duration::from_millis(100);
/// Scripted reasoning before the first visible output.
const THINKING: Duration = Duration::from_millis(300);
/// Reasoning frames, spread evenly over `THINKING`.
const REASONING_FRAMES: u32 = 3;

const VISIBLE: &str = "tokentap.time_to_first_visible_token";
const FIRST_REASONING: &str = "tokentap.time_to_first_reasoning_token";
const THINKING_TIME: &str = "tokentap.reasoning.duration";
const REASONING_TOKENS: &str = "gen_ai.usage.reasoning.output_tokens";
const REASONING_ESTIMATED: &str = "tokentap.reasoning.tokens.estimated";

/// One provider's stream, as frames: sent at once before the reasoning
/// (`preamble`), `reasoning` frames, `visible` frames and a `tail` (usage,
/// end markers).
struct Script {
    content_type: &'static str,
    preamble: Vec<Vec<u8>>,
    reasoning: Vec<Vec<u8>>,
    visible: Vec<Vec<u8>>,
    tail: Vec<Vec<u8>>,
}

impl Script {
    /// Preamble at once; the first reasoning frame after `FIRST`; the
    /// others `THINKING / REASONING_FRAMES` apart, the first visible frame
    /// `THINKING` after the first reasoning one; the rest 10 ms apart.
    fn reply(self) -> Reply {
        assert_eq!(self.reasoning.len(), REASONING_FRAMES as usize);
        let step = THINKING / REASONING_FRAMES;
        let mut r = Reply::new(200).header("content-type", self.content_type);
        for f in self.preamble {
            r = r.step(Step::Send(f.into()));
        }
        r = r.step(Step::Sleep(FIRST));
        for (i, f) in self.reasoning.into_iter().enumerate() {
            if i > 0 {
                r = r.step(Step::Sleep(step));
            }
            r = r.step(Step::Send(f.into()));
        }
        r = r.step(Step::Sleep(step));
        for f in self.visible.into_iter().chain(self.tail) {
            r = r.step(Step::Send(f.into()));
            r = r.step(Step::Sleep(Duration::from_millis(10)));
        }
        r
    }
}

fn sse(payloads: &[&str]) -> Vec<Vec<u8>> {
    payloads
        .iter()
        .map(|p| format!("data: {p}\n\n").into_bytes())
        .collect()
}

fn lines(payloads: &[&str]) -> Vec<Vec<u8>> {
    payloads
        .iter()
        .map(|p| format!("{p}\n").into_bytes())
        .collect()
}

/// Send `body` to `path` through a route for `provider`; return its span.
async fn run(provider: &str, script: Script, path: &str, body: &str) -> (SpanRec, Rig) {
    let reply = script.reply();
    let want = reply.body_bytes();
    let mut rig = Rig::provider(provider, reply).await;
    let got = client::fetch(&rig.client, &rig.post(path, body.as_bytes().to_vec())).await;
    assert_eq!(got.status, 200, "status passes through");
    assert_eq!(got.body, want, "the client gets the upstream's bytes");
    let span = rig.finish_only().await;
    (span, rig)
}

#[track_caller]
fn near(what: &str, got: f64, want: Duration) {
    let want = want.as_secs_f64();
    assert!(
        (want - 0.02..=want + 0.3).contains(&got),
        "{what} = {got} s, scripted {want} s (accept −20 ms, +300 ms)"
    );
}

/// TTFT at the first reasoning frame, visible TTFT and thinking time as
/// scripted, and the reasoning count (exact or estimated).
#[track_caller]
fn assert_reasoning(span: &SpanRec, tokens: i64, estimated: bool) {
    assert_eq!(span.str(OUTCOME), "complete", "{OUTCOME}");
    let ttft = span.num(TTFC);
    near("TTFT (first output, reasoning)", ttft, FIRST);
    near(FIRST_REASONING, span.num(FIRST_REASONING), FIRST);
    let visible = span.num(VISIBLE);
    near(VISIBLE, visible, FIRST + THINKING);
    let thinking = span.num(THINKING_TIME);
    near(THINKING_TIME, thinking, THINKING);
    assert!(
        (thinking - (visible - span.num(FIRST_REASONING))).abs() < 1e-6,
        "thinking time = visible TTFT − first reasoning"
    );
    assert_eq!(
        span.attr(REASONING_TOKENS).as_i64(),
        Some(tokens),
        "{REASONING_TOKENS}"
    );
    assert_eq!(
        span.attr(REASONING_ESTIMATED).as_bool(),
        Some(estimated),
        "{REASONING_ESTIMATED}"
    );
    eprintln!(
        "{}: TTFT {:.1} ms, visible {:.1} ms, thinking {:.1} ms (scripted {} / {} / {})",
        span.name,
        ttft * 1e3,
        visible * 1e3,
        thinking * 1e3,
        FIRST.as_millis(),
        (FIRST + THINKING).as_millis(),
        THINKING.as_millis()
    );
}

#[tokio::test]
async fn openai_chat_reasoning_content() {
    let script = Script {
        content_type: "text/event-stream",
        preamble: sse(&[
            r#"{"id":"c","model":"deepseek-reasoner","choices":[{"index":0,"delta":{"role":"assistant","content":null,"reasoning_content":""}}]}"#,
            r#"{"id":"c","model":"deepseek-reasoner","choices":[{"index":0,"delta":{"role":"assistant"}}]}"#,
        ]),
        reasoning: sse(&[
            r#"{"id":"c","model":"deepseek-reasoner","choices":[{"index":0,"delta":{"content":null,"reasoning_content":"Hmm"}}]}"#,
            r#"{"id":"c","model":"deepseek-reasoner","choices":[{"index":0,"delta":{"content":null,"reasoning_content":", 9.11"}}]}"#,
            r#"{"id":"c","model":"deepseek-reasoner","choices":[{"index":0,"delta":{"content":null,"reasoning":" vs 9.8"}}]}"#,
        ]),
        visible: sse(&[
            r#"{"id":"c","model":"deepseek-reasoner","choices":[{"index":0,"delta":{"content":"9.8","reasoning_content":null}}]}"#,
            r#"{"id":"c","model":"deepseek-reasoner","choices":[{"index":0,"delta":{"content":" is larger."},"finish_reason":"stop"}]}"#,
        ]),
        tail: sse(&[
            r#"{"id":"c","model":"deepseek-reasoner","choices":[],"usage":{"prompt_tokens":12,"completion_tokens":30,"total_tokens":42,"completion_tokens_details":{"reasoning_tokens":26}}}"#,
            "[DONE]",
        ]),
    };
    let (span, rig) = run(
        "deepseek",
        script,
        "/v1/chat/completions",
        r#"{"model":"deepseek-reasoner","stream":true,"messages":[{"role":"user","content":"9.11 or 9.8?"}]}"#,
    )
    .await;
    assert_eq!(span.str(PROVIDER), "deepseek");
    assert_reasoning(&span, 26, false);
    // The same figures as histograms.
    for name in [VISIBLE, THINKING_TIME, "tokentap.reasoning.tokens"] {
        let p = rig
            .col
            .wait_point(support::STEP_TIMEOUT, name, |p| p.hist().count == 1)
            .await;
        assert_eq!(p.attr_str(PROVIDER), Some("deepseek"), "{name} provider");
    }
    let visible = rig
        .col
        .wait_point(support::STEP_TIMEOUT, VISIBLE, |p| p.hist().count == 1)
        .await;
    assert_eq!(visible.unit, "s");
    near(
        "visible TTFT histogram sum",
        visible.hist().sum,
        FIRST + THINKING,
    );
    let thinking = rig
        .col
        .wait_point(support::STEP_TIMEOUT, THINKING_TIME, |p| {
            p.hist().count == 1
        })
        .await;
    near("thinking histogram sum", thinking.hist().sum, THINKING);
    let tokens = rig
        .col
        .wait_point(support::STEP_TIMEOUT, "tokentap.reasoning.tokens", |p| {
            p.hist().count == 1
        })
        .await;
    assert_eq!(tokens.hist().sum, 26.0, "the provider's reasoning count");
}

#[tokio::test]
async fn openai_responses_reasoning_summary() {
    let script = Script {
        content_type: "text/event-stream",
        preamble: sse(&[
            r#"{"type":"response.created","sequence_number":0,"response":{"id":"resp_1","object":"response","model":"o4-mini","status":"in_progress","output":[]}}"#,
            r#"{"type":"response.output_item.added","sequence_number":1,"output_index":0,"item":{"id":"rs_1","type":"reasoning","summary":[]}}"#,
            r#"{"type":"response.reasoning_summary_text.delta","sequence_number":2,"item_id":"rs_1","output_index":0,"summary_index":0,"delta":""}"#,
        ]),
        reasoning: sse(&[
            r#"{"type":"response.reasoning_summary_text.delta","sequence_number":3,"item_id":"rs_1","output_index":0,"summary_index":0,"delta":"**Plan**"}"#,
            r#"{"type":"response.reasoning_text.delta","sequence_number":4,"item_id":"rs_1","output_index":0,"content_index":0,"delta":"compare"}"#,
            r#"{"type":"response.reasoning_summary_text.delta","sequence_number":5,"item_id":"rs_1","output_index":0,"summary_index":0,"delta":" digits"}"#,
        ]),
        visible: sse(&[
            r#"{"type":"response.output_text.delta","sequence_number":6,"item_id":"msg_1","output_index":1,"content_index":0,"delta":"9.8"}"#,
            r#"{"type":"response.output_text.delta","sequence_number":7,"item_id":"msg_1","output_index":1,"content_index":0,"delta":" is larger."}"#,
        ]),
        tail: sse(&[
            r#"{"type":"response.completed","sequence_number":8,"response":{"id":"resp_1","object":"response","model":"o4-mini","status":"completed","usage":{"input_tokens":12,"output_tokens":40,"output_tokens_details":{"reasoning_tokens":35},"total_tokens":52}}}"#,
        ]),
    };
    let (span, _rig) = run(
        "openai",
        script,
        "/v1/responses",
        r#"{"model":"o4-mini","stream":true,"input":"9.11 or 9.8?","reasoning":{"summary":"auto"}}"#,
    )
    .await;
    assert_eq!(span.str(OPERATION), "chat");
    assert_reasoning(&span, 35, false);
}

#[tokio::test]
async fn anthropic_thinking_blocks() {
    let script = Script {
        content_type: "text/event-stream",
        preamble: sse(&[
            r#"{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[],"stop_reason":null,"usage":{"input_tokens":12,"output_tokens":1}}}"#,
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}"#,
            r#"{"type":"ping"}"#,
        ]),
        reasoning: sse(&[
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Compare"}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":" decimals."}}"#,
            r#"{"type":"content_block_start","index":1,"content_block":{"type":"redacted_thinking","data":"EmwKAhgB"}}"#,
        ]),
        visible: sse(&[
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"EqQBCgIYAh"}}"#,
            r#"{"type":"content_block_start","index":2,"content_block":{"type":"text","text":""}}"#,
            r#"{"type":"content_block_delta","index":2,"delta":{"type":"text_delta","text":"9.8 is larger."}}"#,
        ]),
        tail: sse(&[
            r#"{"type":"content_block_stop","index":2}"#,
            r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":60}}"#,
            r#"{"type":"message_stop"}"#,
        ]),
    };
    let (span, _rig) = run(
        "anthropic",
        script,
        "/v1/messages",
        r#"{"model":"claude-sonnet-4-5","stream":true,"max_tokens":2048,"thinking":{"type":"enabled","budget_tokens":1024},"messages":[{"role":"user","content":"9.11 or 9.8?"}]}"#,
    )
    .await;
    // The signature delta and the empty text block start are not output:
    // the visible clock starts at the text delta, 20 ms after them.
    assert_eq!(span.str(PROVIDER), "anthropic");
    let visible = span.num(VISIBLE);
    assert!(
        visible >= (FIRST + THINKING).as_secs_f64() + 0.015,
        "visible TTFT {visible} s starts at the text delta, not the signature"
    );
    // Anthropic reports no reasoning count: three reasoning frames, estimated.
    assert_eq!(span.attr(REASONING_TOKENS).as_i64(), Some(3));
    assert_eq!(span.attr(REASONING_ESTIMATED).as_bool(), Some(true));
    near("TTFT (first output, reasoning)", span.num(TTFC), FIRST);
    near(
        THINKING_TIME,
        span.num(THINKING_TIME),
        THINKING + Duration::from_millis(20),
    );
}

#[tokio::test]
async fn gemini_thought_parts() {
    let chunk = |parts: &str| {
        format!(
            r#"{{"candidates":[{{"content":{{"role":"model","parts":{parts}}},"index":0}}],"modelVersion":"gemini-2.5-flash","responseId":"r1"}}"#
        )
    };
    let preamble = [chunk("[]"), chunk(r#"[{"text":"","thought":true}]"#)];
    let reasoning = [
        chunk(r#"[{"text":"**Comparing**","thought":true}]"#),
        chunk(r#"[{"text":" the decimals","thought":true}]"#),
        chunk(r#"[{"text":" digit by digit","thought":true}]"#),
    ];
    let visible = [chunk(r#"[{"text":"9.8 is larger."}]"#)];
    let tail = [
        r#"{"candidates":[{"content":{"role":"model","parts":[{"text":""}]},"finishReason":"STOP","index":0}],"usageMetadata":{"promptTokenCount":12,"candidatesTokenCount":6,"thoughtsTokenCount":44,"totalTokenCount":62},"modelVersion":"gemini-2.5-flash","responseId":"r1"}"#.to_owned(),
    ];
    let strs = |v: &[String]| sse(&v.iter().map(String::as_str).collect::<Vec<_>>());
    let script = Script {
        content_type: "text/event-stream",
        preamble: strs(&preamble),
        reasoning: strs(&reasoning),
        visible: strs(&visible),
        tail: strs(&tail),
    };
    let (span, _rig) = run(
        "gemini",
        script,
        "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
        r#"{"contents":[{"role":"user","parts":[{"text":"9.11 or 9.8?"}]}],"generationConfig":{"thinkingConfig":{"includeThoughts":true}}}"#,
    )
    .await;
    assert_eq!(span.str(PROVIDER), "gcp.gemini");
    assert_reasoning(&span, 44, false);
}

#[tokio::test]
async fn ollama_thinking() {
    let line = |content: &str, thinking: &str| {
        format!(
            r#"{{"model":"qwen3","created_at":"2025-06-01T00:00:00Z","message":{{"role":"assistant","content":"{content}","thinking":"{thinking}"}},"done":false}}"#
        )
    };
    let preamble = [line("", "")];
    let reasoning = [line("", "Compare"), line("", " the"), line("", " decimals")];
    let visible = [line("9.8 is larger.", "")];
    let tail = [
        r#"{"model":"qwen3","created_at":"2025-06-01T00:00:01Z","message":{"role":"assistant","content":""},"done_reason":"stop","done":true,"prompt_eval_count":12,"eval_count":20}"#.to_owned(),
    ];
    let strs = |v: &[String]| lines(&v.iter().map(String::as_str).collect::<Vec<_>>());
    let script = Script {
        content_type: "application/x-ndjson",
        preamble: strs(&preamble),
        reasoning: strs(&reasoning),
        visible: strs(&visible),
        tail: strs(&tail),
    };
    let (span, _rig) = run(
        "ollama",
        script,
        "/api/chat",
        r#"{"model":"qwen3","think":true,"messages":[{"role":"user","content":"9.11 or 9.8?"}]}"#,
    )
    .await;
    assert_eq!(span.str(PROVIDER), "ollama");
    // Ollama reports no reasoning count: the three thinking lines, estimated.
    assert_reasoning(&span, 3, true);
}

/// One AWS eventstream message: `:event-type`, `:content-type` and
/// `:message-type` headers and a JSON payload, with both CRCs.
fn aws_event(event_type: &str, payload: &str) -> Vec<u8> {
    let mut headers = Vec::new();
    for (name, value) in [
        (":event-type", event_type),
        (":content-type", "application/json"),
        (":message-type", "event"),
    ] {
        headers.push(name.len() as u8);
        headers.extend_from_slice(name.as_bytes());
        headers.push(7); // string
        headers.extend_from_slice(&(value.len() as u16).to_be_bytes());
        headers.extend_from_slice(value.as_bytes());
    }
    let total = 12 + headers.len() + payload.len() + 4;
    let mut msg = Vec::with_capacity(total);
    msg.extend_from_slice(&(total as u32).to_be_bytes());
    msg.extend_from_slice(&(headers.len() as u32).to_be_bytes());
    let prelude_crc = crc32fast::hash(&msg);
    msg.extend_from_slice(&prelude_crc.to_be_bytes());
    msg.extend_from_slice(&headers);
    msg.extend_from_slice(payload.as_bytes());
    let crc = crc32fast::hash(&msg);
    msg.extend_from_slice(&crc.to_be_bytes());
    msg
}

#[tokio::test]
async fn bedrock_reasoning_content() {
    let delta = |i: u32, delta: &str| {
        aws_event(
            "contentBlockDelta",
            &format!(r#"{{"contentBlockIndex":{i},"delta":{delta},"p":"abcd"}}"#),
        )
    };
    let script = Script {
        content_type: "application/vnd.amazon.eventstream",
        preamble: vec![
            aws_event("messageStart", r#"{"role":"assistant","p":"ab"}"#),
            delta(0, r#"{"reasoningContent":{"text":""}}"#),
        ],
        reasoning: vec![
            delta(0, r#"{"reasoningContent":{"text":"Compare"}}"#),
            delta(0, r#"{"reasoningContent":{"text":" decimals."}}"#),
            delta(0, r#"{"reasoningContent":{"redactedContent":"AQID"}}"#),
        ],
        visible: vec![
            delta(0, r#"{"reasoningContent":{"signature":"EqoB"}}"#),
            delta(1, r#"{"text":"9.8 is larger."}"#),
        ],
        tail: vec![
            aws_event("contentBlockStop", r#"{"contentBlockIndex":1,"p":"a"}"#),
            aws_event("messageStop", r#"{"stopReason":"end_turn","p":"a"}"#),
            aws_event(
                "metadata",
                r#"{"metrics":{"latencyMs":900},"usage":{"inputTokens":12,"outputTokens":40,"totalTokens":52},"p":"a"}"#,
            ),
        ],
    };
    let (span, _rig) = run(
        "bedrock",
        script,
        "/model/anthropic.claude-sonnet-4-5-v1%3A0/converse-stream",
        r#"{"messages":[{"role":"user","content":[{"text":"9.11 or 9.8?"}]}],"additionalModelRequestFields":{"thinking":{"type":"enabled","budget_tokens":1024}}}"#,
    )
    .await;
    assert_eq!(span.str(PROVIDER), "aws.bedrock");
    // The signature delta is not output: visible output starts 10 ms later.
    near(TTFC, span.num(TTFC), FIRST);
    near(
        THINKING_TIME,
        span.num(THINKING_TIME),
        THINKING + Duration::from_millis(10),
    );
    // Bedrock reports no reasoning count: three reasoning deltas, estimated.
    assert_eq!(span.attr(REASONING_TOKENS).as_i64(), Some(3));
    assert_eq!(span.attr(REASONING_ESTIMATED).as_bool(), Some(true));
}
