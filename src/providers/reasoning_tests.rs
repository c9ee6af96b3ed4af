//! Reasoning versus visible output, per adapter: which frames are
//! reasoning, which visible, and that an empty or role-only frame is
//! neither (so it starts no clock).

use super::tests::{fixture, kinds};
use super::*;
use ContentKind::{Mixed, Reasoning, Visible};

/// The kinds of the content events of one SSE payload per line.
fn sse(kind: ProviderKind, op: Operation, payloads: &[&str]) -> Vec<Vec<ContentKind>> {
    payloads
        .iter()
        .map(|p| {
            let frame = format!("data: {p}\n\n");
            kinds(kind, Some(op), "text/event-stream", &[frame.as_bytes()])
        })
        .collect()
}

/// The kinds of the content events of one NDJSON line each.
fn ndjson(kind: ProviderKind, op: Operation, lines: &[&str]) -> Vec<Vec<ContentKind>> {
    lines
        .iter()
        .map(|l| {
            let line = format!("{l}\n");
            kinds(kind, Some(op), "application/x-ndjson", &[line.as_bytes()])
        })
        .collect()
}

#[test]
fn openai_chat_reasoning_deltas_are_reasoning() {
    let got = sse(
        ProviderKind::Deepseek,
        Operation::ChatCompletions,
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
    );
    let want: Vec<Vec<ContentKind>> = vec![
        vec![],
        vec![],
        vec![],
        vec![],
        vec![Reasoning],
        vec![Reasoning],
        vec![Visible],
        vec![Visible],
        vec![Mixed],
        vec![Visible],
        vec![Visible],
        vec![],
        vec![Mixed],
    ];
    assert_eq!(
        got, want,
        "chat deltas: role-only and empty frames are nothing"
    );
}

#[test]
fn openai_responses_reasoning_events_are_reasoning() {
    let got = sse(
        ProviderKind::Openai,
        Operation::Responses,
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
    );
    let want: Vec<Vec<ContentKind>> = vec![
        vec![],
        vec![Reasoning],
        vec![Reasoning],
        vec![],
        vec![],
        vec![Visible],
        vec![Visible],
        vec![Visible],
    ];
    assert_eq!(got, want, "Responses events");
}

#[test]
fn anthropic_thinking_blocks_are_reasoning() {
    let got = sse(
        ProviderKind::Anthropic,
        Operation::Messages,
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
    );
    let want: Vec<Vec<ContentKind>> = vec![
        vec![],
        vec![],
        vec![],
        vec![],
        vec![Reasoning],
        vec![],
        vec![Reasoning],
        vec![],
        vec![Visible],
        vec![Visible],
    ];
    assert_eq!(got, want, "Anthropic events");
}

#[test]
fn gemini_thought_parts_are_reasoning() {
    let got = sse(
        ProviderKind::Gemini,
        Operation::StreamGenerateContent,
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
    );
    let want: Vec<Vec<ContentKind>> = vec![
        vec![],
        vec![],
        vec![],
        vec![],
        vec![Reasoning],
        vec![Visible],
        vec![Visible],
        vec![Mixed],
        vec![Visible],
    ];
    assert_eq!(got, want, "Gemini chunks");
}

#[test]
fn ollama_thinking_is_reasoning() {
    let chat = ndjson(
        ProviderKind::Ollama,
        Operation::OllamaChat,
        &[
            r#"{"model":"m","message":{"role":"assistant","content":""},"done":false}"#,
            r#"{"model":"m","message":{"role":"assistant","content":"","thinking":""},"done":false}"#,
            r#"{"model":"m","message":{"role":"assistant","content":"","thinking":"hm"},"done":false}"#,
            r#"{"model":"m","message":{"role":"assistant","content":"Hi"},"done":false}"#,
            r#"{"model":"m","message":{"role":"assistant","content":"Hi","thinking":"so"},"done":false}"#,
            r#"{"model":"m","message":{"role":"assistant","content":"","tool_calls":[{"function":{"name":"f","arguments":{}}}]},"done":false}"#,
        ],
    );
    assert_eq!(
        chat,
        vec![
            vec![],
            vec![],
            vec![Reasoning],
            vec![Visible],
            vec![Mixed],
            vec![Visible]
        ],
        "Ollama chat lines"
    );
    let generate = ndjson(
        ProviderKind::Ollama,
        Operation::OllamaGenerate,
        &[
            r#"{"model":"m","response":"","done":false}"#,
            r#"{"model":"m","response":"","thinking":"hm","done":false}"#,
            r#"{"model":"m","response":"Hi","done":false}"#,
        ],
    );
    assert_eq!(
        generate,
        vec![vec![], vec![Reasoning], vec![Visible]],
        "Ollama generate lines"
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
        vec![
            vec![],
            vec![],
            vec![Reasoning],
            vec![Reasoning],
            vec![],
            vec![],
            vec![Visible],
            vec![Visible]
        ],
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
