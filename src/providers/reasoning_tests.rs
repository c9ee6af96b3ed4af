//! Reasoning versus visible output, per adapter: which frames are
//! reasoning, which visible, and that an empty or role-only frame is
//! neither (so it starts no clock).

use super::tests::{fixture, kinds};
use super::*;
use ContentKind::{Mixed, Reasoning, Visible};

/// The kind of a payload's one content event, for the tables below:
/// none, reasoning, visible, mixed.
const N: Option<ContentKind> = None;
const R: Option<ContentKind> = Some(Reasoning);
const V: Option<ContentKind> = Some(Visible);
const M: Option<ContentKind> = Some(Mixed);

/// Each payload fed alone to a fresh adapter of `kind` for `op`, framed
/// as `content_type` has it (an SSE event or an NDJSON line): the kind of
/// its content event is its place in `want`.
#[track_caller]
fn assert_kinds(
    kind: ProviderKind,
    op: Operation,
    content_type: &str,
    payloads: &[&str],
    want: &[Option<ContentKind>],
) {
    assert_eq!(payloads.len(), want.len(), "one kind per payload");
    for (payload, want) in payloads.iter().zip(want) {
        let frame = match content_type {
            "text/event-stream" => format!("data: {payload}\n\n"),
            _ => format!("{payload}\n"),
        };
        let got = kinds(kind, Some(op), content_type, &[frame.as_bytes()]);
        assert_eq!(got, Vec::from_iter(*want), "{kind:?} {op:?}: {payload}");
    }
}

#[test]
fn openai_chat_reasoning_deltas_are_reasoning() {
    assert_kinds(
        ProviderKind::Deepseek,
        Operation::ChatCompletions,
        "text/event-stream",
        &[
            r#"{"id":"c","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}"#,
            r#"{"id":"c","choices":[{"index":0,"delta":{"role":"assistant"}}]}"#,
            r#"{"id":"c","choices":[{"index":0,"delta":{"content":null,"reasoning_content":""}}]}"#,
            r#"{"id":"c","choices":[]}"#,
            r#"{"id":"c","choices":[{"index":0,"delta":{"reasoning_content":"Let"}}]}"#,
            r#"{"id":"c","choices":[{"index":0,"delta":{"reasoning":"me"}}]}"#,
            r#"{"id":"c","choices":[{"index":0,"delta":{"content":"Hi"}}]}"#,
            r#"{"id":"c","choices":[{"index":0,"delta":{"refusal":"No"}}]}"#,
            r#"{"id":"c","choices":[{"index":0,"delta":{"reasoning_content":"so","content":"Hi"}}]}"#,
            r#"{"id":"c","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{"}}]}}]}"#,
            r#"{"id":"c","choices":[{"index":0,"delta":{"audio":{"id":"a","transcript":"Hi"}}}]}"#,
            r#"{"id":"c","choices":[{"index":0,"delta":{"audio":{"id":"a"}}}]}"#,
            r#"{"id":"c","choices":[{"index":0,"delta":{"reasoning_content":"x"}},{"index":1,"delta":{"content":"y"}}]}"#,
        ],
        &[N, N, N, N, R, R, V, V, M, V, V, N, M],
    );
}

#[test]
fn openai_responses_reasoning_events_are_reasoning() {
    assert_kinds(
        ProviderKind::Openai,
        Operation::Responses,
        "text/event-stream",
        &[
            r#"{"type":"response.created","response":{"id":"r","model":"o4-mini","status":"in_progress"}}"#,
            r#"{"type":"response.reasoning_summary_text.delta","item_id":"rs","delta":"Plan"}"#,
            r#"{"type":"response.reasoning_text.delta","item_id":"rs","delta":"think"}"#,
            r#"{"type":"response.reasoning_summary_text.delta","item_id":"rs","delta":""}"#,
            r#"{"type":"response.output_text.delta","item_id":"m","delta":""}"#,
            r#"{"type":"response.output_text.delta","item_id":"m","delta":"Hi"}"#,
            r#"{"type":"response.function_call_arguments.delta","item_id":"f","delta":"{"}"#,
            r#"{"type":"response.audio.delta","delta":"UklGR"}"#,
        ],
        &[N, R, R, N, N, V, V, V],
    );
}

#[test]
fn anthropic_thinking_blocks_are_reasoning() {
    assert_kinds(
        ProviderKind::Anthropic,
        Operation::Messages,
        "text/event-stream",
        &[
            r#"{"type":"message_start","message":{"id":"m","model":"claude","content":[],"usage":{"input_tokens":3,"output_tokens":1}}}"#,
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}"#,
            r#"{"type":"ping"}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":""}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"hmm"}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"Eu8B"}}"#,
            r#"{"type":"content_block_start","index":1,"content_block":{"type":"redacted_thinking","data":"EmwKAhgB"}}"#,
            r#"{"type":"content_block_start","index":2,"content_block":{"type":"text","text":""}}"#,
            r#"{"type":"content_block_delta","index":2,"delta":{"type":"text_delta","text":"Hi"}}"#,
            r#"{"type":"content_block_delta","index":3,"delta":{"type":"input_json_delta","partial_json":"{"}}"#,
        ],
        &[N, N, N, N, R, N, R, N, V, V],
    );
}

#[test]
fn gemini_thought_parts_are_reasoning() {
    assert_kinds(
        ProviderKind::Gemini,
        Operation::StreamGenerateContent,
        "text/event-stream",
        &[
            r#"{"candidates":[{"content":{"role":"model","parts":[]}}]}"#,
            r#"{"candidates":[{"content":{"role":"model"}}]}"#,
            r#"{"candidates":[{"content":{"role":"model","parts":[{"text":"","thought":true}]}}]}"#,
            r#"{"candidates":[{"content":{"role":"model","parts":[{"thoughtSignature":"Cv4B"}]}}]}"#,
            r#"{"candidates":[{"content":{"role":"model","parts":[{"text":"Plan","thought":true}]}}]}"#,
            r#"{"candidates":[{"content":{"role":"model","parts":[{"text":"Hi"}]}}]}"#,
            r#"{"candidates":[{"content":{"role":"model","parts":[{"text":"Hi","thought":false}]}}]}"#,
            r#"{"candidates":[{"content":{"role":"model","parts":[{"text":"so","thought":true},{"text":"Hi"}]}}]}"#,
            r#"{"candidates":[{"content":{"role":"model","parts":[{"functionCall":{"name":"f","args":{}}}]}}]}"#,
        ],
        &[N, N, N, N, R, V, V, M, V],
    );
}

#[test]
fn ollama_thinking_is_reasoning() {
    assert_kinds(
        ProviderKind::Ollama,
        Operation::OllamaChat,
        "application/x-ndjson",
        &[
            r#"{"model":"m","message":{"role":"assistant","content":""},"done":false}"#,
            r#"{"model":"m","message":{"role":"assistant","content":"","thinking":""},"done":false}"#,
            r#"{"model":"m","message":{"role":"assistant","content":"","thinking":"hm"},"done":false}"#,
            r#"{"model":"m","message":{"role":"assistant","content":"Hi"},"done":false}"#,
            r#"{"model":"m","message":{"role":"assistant","content":"Hi","thinking":"so"},"done":false}"#,
            r#"{"model":"m","message":{"role":"assistant","content":"","tool_calls":[{"function":{"name":"f","arguments":{}}}]},"done":false}"#,
        ],
        &[N, N, R, V, M, V],
    );
    assert_kinds(
        ProviderKind::Ollama,
        Operation::OllamaGenerate,
        "application/x-ndjson",
        &[
            r#"{"model":"m","response":"","done":false}"#,
            r#"{"model":"m","response":"","thinking":"hm","done":false}"#,
            r#"{"model":"m","response":"Hi","done":false}"#,
        ],
        &[N, R, V],
    );
}

#[test]
fn bedrock_reasoning_content_is_reasoning() {
    let mut adapter = Adapter::new(ProviderKind::Bedrock, Some(Operation::ConverseStream));
    let mut event = |ty: &str, payload: &str| {
        let mut got = Vec::new();
        let frame = crate::framing::Frame::AwsEvent {
            message_type: b"event",
            event_type: ty.as_bytes(),
            payload: payload.as_bytes(),
        };
        adapter
            .on_frame(frame, &mut |e| {
                if let Event::Content { kind, .. } = e {
                    got.push(kind);
                }
            })
            .expect("a valid event");
        got
    };
    let got = [
        event("messageStart", r#"{"role":"assistant"}"#),
        event(
            "contentBlockDelta",
            r#"{"contentBlockIndex":0,"delta":{"reasoningContent":{"text":""}}}"#,
        ),
        event(
            "contentBlockDelta",
            r#"{"contentBlockIndex":0,"delta":{"reasoningContent":{"text":"Let me"}}}"#,
        ),
        event(
            "contentBlockDelta",
            r#"{"contentBlockIndex":0,"delta":{"reasoningContent":{"redactedContent":"AQID"}}}"#,
        ),
        event(
            "contentBlockDelta",
            r#"{"contentBlockIndex":0,"delta":{"reasoningContent":{"signature":"EqoB"}}}"#,
        ),
        event(
            "contentBlockDelta",
            r#"{"contentBlockIndex":1,"delta":{"text":""}}"#,
        ),
        event(
            "contentBlockDelta",
            r#"{"contentBlockIndex":1,"delta":{"text":"Hi"}}"#,
        ),
        event(
            "contentBlockDelta",
            r#"{"contentBlockIndex":2,"delta":{"toolUse":{"input":"{"}}}"#,
        ),
    ];
    assert_eq!(
        got.to_vec(),
        [N, N, R, R, N, N, V, V].map(Vec::from_iter),
        "Bedrock ConverseStream deltas"
    );
}

/// The recorded reasoning fixtures: reasoning first, then visible output,
/// and never a reasoning frame after the first visible one.
#[test]
fn recorded_reasoning_fixtures_think_then_answer() {
    for (name, reasoning) in [
        ("deepseek/chat_stream_reasoning.sse", 3),
        ("anthropic/messages_stream_thinking.sse", 3),
        ("gemini/stream_generate.sse", 1),
        ("gemini/stream_generate_array.json", 1),
        ("openai/responses_stream.sse", 3),
    ] {
        let f = fixture(name);
        let got = kinds(f.kind, Some(f.operation), f.content_type(), &[f.body]);
        let first_visible = got.iter().position(|k| k.is_visible());
        assert_eq!(
            got.iter().filter(|k| **k == Reasoning).count(),
            reasoning,
            "{name}: reasoning frames in {got:?}"
        );
        assert_eq!(
            got.first(),
            Some(&Reasoning),
            "{name}: reasoning comes first"
        );
        assert!(
            first_visible.is_some_and(|v| got[v..].iter().all(|k| *k == Visible)),
            "{name}: visible output after the reasoning: {got:?}"
        );
    }
}
