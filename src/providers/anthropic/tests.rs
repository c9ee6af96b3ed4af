//! Unit tests of `providers::anthropic`.

use super::*;
use crate::providers::ProviderKind;
use crate::providers::scan::differential::{
    Outcome, assert_same_sequence, each_mutation, fixture_bodies, fixture_payloads, json_outcome,
    mutations, outcome,
};
use crate::providers::tests::{Summary, expect_summary as expect, feed_sse, fixture};

/// Whole messages the scan must read exactly as serde does (or leave to it).
const BODIES: &[&str] = &[
    r#"{"id":"msg_1","type":"message","role":"assistant","model":"claude","content":[{"type":"text","text":"a \"text\":\"b\""}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":21,"cache_creation_input_tokens":2,"cache_read_input_tokens":3,"cache_creation":{"ephemeral_5m_input_tokens":1,"ephemeral_1h_input_tokens":1},"output_tokens":10,"service_tier":"standard"}}"#,
    r#"{"type":"message","content":[{"type":"thinking","thinking":"hm","signature":"s"},{"type":"text","text":"x"}],"usage":{"input_tokens":1,"output_tokens":2}}"#,
    r#"{"type":"message","content":[{"type":"redacted_thinking","data":"abc"}]}"#,
    r#"{"type":"message","content":[{"type":"tool_use","id":"t","name":"f","input":{"a":[1,{"b":null}]}}],"stop_reason":"tool_use"}"#,
    r#"{"type":"message","content":[{"type":"server_tool_use","name":"web_search","input":{}},{"type":"mcp_tool_use"}]}"#,
    r#"{"type":"message","content":[{"type":"text","text":""}],"stop_reason":""}"#,
    r#"{"type":"message","content":[],"stop_reason":null,"usage":null}"#,
    r#"{"content":null,"model":"","id":""}"#,
    r#"{"type":null,"content":[{"text":"x"}]}"#,
    r#"{"type":"message","content":[{"type":"text","text":"x","text":"y"}]}"#,
    r#"{"type":"message","content":[{"type":"tool_u\u0073e"}]}"#,
    r#"{"type":"message","content":[{"type":5,"text":"x"}]}"#,
    r#"{"type":"message","content":[null]}"#,
    r#"{"type":"message","content":{"type":"text","text":"x"}}"#,
    r#"{"type":"message","content":[{"type":"text","text":"caf\u00e9 \ud83d\ude00 \n"}]}"#,
    r#"{"type":"message","content":[{"type":"text","text":{"a":1}}]}"#,
    r#"{"type":"message","id":"m\u0031","model":"c"}"#,
    r#"{"type":"message","id":"a","id":"b"}"#,
    r#"{"type":"message","usage":{"input_tokens":1,"input_tokens":2}}"#,
    r#"{"type":"message","usage":{"input_tokens":1.5}}"#,
    r#"{"type":"message","usage":{"input_tokens":-1}}"#,
    r#"{"type":"message","usage":{"input_tokens":"1"}}"#,
    r#"{"type":"message","usage":{"output_tokens":18446744073709551616}}"#,
    r#"{"type":"message","usage":{"input_tokens":5,"cache_creation":null,"service_tier":null}}"#,
    r#"{"type":"message","usage":{"input_tokens":5,"cache_creation":{"ephemeral_5m_input_tokens":"x"}}}"#,
    r#"{"type":"message","usage":{"input_tokens":5,"cache_creation":[1]}}"#,
    r#"{"type":"message","usage":{"service_tier":"priority"}}"#,
    r#"{"type":"message","usage":{"service_tier":"batch","server_tool_use":{"web_search_requests":1}}}"#,
    r#"{"type":"message","usage":{"service_tier":7}}"#,
    r#"{"type":"message","usage":{"service_tier":{"a":1}}}"#,
    r#"{"type":"message","usage":{"service_tier":"prior\u0069ty"}}"#,
    r#"{"type":"message","usage":[1]}"#,
    r#"{"type":"message","error":null,"stop_reason":5}"#,
    r#"{"type":"error","error":{"type":"overloaded_error","message":"m"}}"#,
    r#"{"type":"message_start","message":{"id":"m","model":"c","usage":{"input_tokens":1}}}"#,
    r#"{"type":"content_block_delta","delta":{"text":"x"}}"#,
    r#"{"type":"message","delta":{"stop_reason":"x"}}"#,
    r#"{"type":"message","content":[]} x"#,
    r#" { "type" : "message" , "content" : [ { "type" : "text" , "text" : "x" } ] } "#,
    "",
    "  ",
    "{",
    "[]",
];

/// The same whole body through the scan and through serde alone.
fn whole_scan_and_serde(body: &[u8]) -> (Outcome, Outcome) {
    (
        json_outcome(|f, out| AnthropicAdapter::new().on_frame(f, out), body),
        json_outcome(
            |f, out| AnthropicAdapter::without_scan().on_frame(f, out),
            body,
        ),
    )
}

#[test]
fn whole_message_scan_reads_fixtures_and_tricky_shapes_as_serde_does() {
    let fixtures = fixture_bodies(&[ProviderKind::Anthropic]);
    let mut scanned = 0;
    for body in fixtures
        .iter()
        .copied()
        .chain(BODIES.iter().map(|s| s.as_bytes()))
    {
        let (scan, serde) = whole_scan_and_serde(body);
        assert_eq!(scan, serde, "{}", String::from_utf8_lossy(body));
        scanned += usize::from(WholeMessage::scan(body).is_some());
    }
    assert!(
        WholeMessage::scan(fixture("anthropic/message.json").body).is_some(),
        "the recorded message takes the scan"
    );
    // Most shapes above are there to be left to serde (tool blocks
    // too, to be counted and named); the plain ones must still take
    // the scan.
    assert!(scanned >= 12, "{scanned} bodies scanned");
}

#[test]
fn whole_message_scan_reads_mutated_bodies_as_serde_does() {
    let fixtures = fixture_bodies(&[ProviderKind::Anthropic]);
    let inputs = fixtures
        .iter()
        .copied()
        .chain(BODIES.iter().map(|s| s.as_bytes()));
    for (i, body) in inputs.enumerate() {
        for m in mutations(body, 2000 + i as u64, 200) {
            let (scan, serde) = whole_scan_and_serde(&m);
            assert_eq!(scan, serde, "{}", String::from_utf8_lossy(&m));
        }
    }
}

/// Events the scan must read exactly as serde does (or leave to it).
const SHAPES: &[&str] = &[
    r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}"#,
    r#"{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"a\":"}}"#,
    r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"hmm"}}"#,
    r#"{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"abc"}}"#,
    r#"{"type":"content_block_delta","delta":{"text":""}}"#,
    r#"{"type":"content_block_delta","delta":{"text":null}}"#,
    r#"{"type":"content_block_delta","delta":null}"#,
    r#"{"type":"content_block_delta"}"#,
    r#"{"delta":{"text":"x"},"type":"content_block_delta"}"#,
    r#"{"type":"content_block_delta","delta":{"text":"x","text":"y"}}"#,
    r#"{"type":"content_block_delta","type":"ping"}"#,
    r#"{"type":"content_block_delt\u0061","delta":{"text":"x"}}"#,
    r#"{"type":"content_block_delta","delta":{"text":"\"text\":\"y\""}}"#,
    r#"{"type":"content_block_delta","delta":{"text":["x"]}}"#,
    r#"{"type":"content_block_delta","delta":{"text":[],"partial_json":"x"}}"#,
    r#"{"type":"content_block_delta","delta":{"text":"x","stop_reason":1}}"#,
    r#"{"type":"content_block_delta","delta":{"text":"x","stop_reason":null}}"#,
    r#"{"type":"content_block_delta","delta":["x"]}"#,
    r#"{"type": "ping"}"#,
    r#"{"type":"message_stop"}"#,
    r#"{"type":"content_block_stop","index":0}"#,
    r#"{"type":"message_stop","usage":{"output_tokens":1}}"#,
    r#"{"type":"error","error":{"type":"overloaded_error"}}"#,
    r#"{"type":null}"#,
    r#"{"type":5}"#,
    r#"{"type":"content_block_delta","delta":{"text":"x"}} x"#,
];

/// The same payload through the scan and through serde alone.
fn scan_and_serde(data: &[u8]) -> (Outcome, Outcome) {
    (
        outcome(|f, out| AnthropicAdapter::new().on_frame(f, out), data),
        outcome(
            |f, out| AnthropicAdapter::without_scan().on_frame(f, out),
            data,
        ),
    )
}

#[test]
fn scan_reads_fixture_events_and_tricky_shapes_as_serde_does() {
    let payloads = fixture_payloads(&[ProviderKind::Anthropic]);
    let mut scanned = 0;
    for data in payloads
        .iter()
        .map(Vec::as_slice)
        .chain(SHAPES.iter().map(|s| s.as_bytes()))
    {
        let (scan, serde) = scan_and_serde(data);
        assert_eq!(scan, serde, "{}", String::from_utf8_lossy(data));
        scanned += usize::from(StreamEvent::scan(data.trim_ascii()).is_some());
    }
    assert!(
        scanned * 2 > payloads.len(),
        "the scan reads most events: {scanned} of {} fixture events and {} shapes",
        payloads.len(),
        SHAPES.len()
    );
    let (mut with, mut without) = (AnthropicAdapter::new(), AnthropicAdapter::without_scan());
    assert_same_sequence(&mut with, &mut without, &payloads);
}

#[test]
fn scan_reads_mutated_events_as_serde_does() {
    let payloads = fixture_payloads(&[ProviderKind::Anthropic]);
    each_mutation(&payloads, SHAPES, |m| {
        let (scan, serde) = scan_and_serde(m);
        assert_eq!(scan, serde, "{}", String::from_utf8_lossy(m));
    });
}

/// Usage as the recorded fixtures report it: every write for 5
/// minutes, at the standard tier.
fn usage(uncached: u64, output: u64, cache_read: u64, cache_creation: u64) -> Usage {
    Usage {
        input: Some(uncached + cache_read + cache_creation),
        output: Some(output),
        cache_read: Some(cache_read),
        cache_creation: Some(cache_creation),
        reasoning: None,
        cache_write_5m: Some(cache_creation),
        cache_write_1h: Some(0),
        service_tier: Some(ServiceTier::Default),
        ..Usage::default()
    }
}

#[test]
fn text_deltas_carry_their_text() {
    let (got, _, _) = fixture("anthropic/messages_stream.sse").run();
    assert_eq!(got.texts.len(), got.content_frames as usize);
    assert!(got.texts.iter().all(|t| !t.is_empty()));
}

#[test]
fn text_stream() {
    let s = Summary::of(
        3,
        "claude-sonnet-4-20250514",
        "msg_01XFDUDYJgAACzvnptvVoYEL",
        &["end_turn"],
    )
    .done()
    .usage(usage(472, 27, 2048, 0));
    expect("anthropic/messages_stream.sse", s);
}

#[test]
fn tool_use_stream() {
    // 2 text deltas; the tool_use start and the empty first partial_json
    // are not content; 4 argument pieces are.
    // One client tool call, named at its block start.
    let s = Summary::of(
        6,
        "claude-opus-4-1-20250805",
        "msg_014p7gG3wDgGV9EUtLvnow3U",
        &["tool_use"],
    )
    .done()
    .usage(usage(472, 89, 0, 1536))
    .tools(&["get_weather"]);
    expect("anthropic/messages_stream_tool_use.sse", s);
}

#[test]
fn thinking_stream() {
    // 3 thinking deltas and 1 text delta; the signature is not content.
    let s = Summary::of(
        4,
        "claude-3-7-sonnet-20250219",
        "msg_01Hn2rQa8Vt5LkZx3Wm7Pb9Y",
        &["end_turn"],
    )
    .done()
    .usage(usage(36, 118, 0, 0));
    expect("anthropic/messages_stream_thinking.sse", s);
}

#[test]
fn stream_with_error_event() {
    let s = Summary::of(
        2,
        "claude-sonnet-4-20250514",
        "msg_01Ab3Cd5Ef7Gh9Ij1Kl3Mn5P",
        &[],
    )
    .usage(usage(1024, 1, 0, 0))
    .errors(&["overloaded_error"]);
    expect("anthropic/messages_stream_error.sse", s);
}

#[test]
fn whole_message() {
    // a whole body that parsed is its own terminal event
    let s = Summary::of(
        1,
        "claude-sonnet-4-20250514",
        "msg_01EcyWo6m4hyW8KHs2y2pei5",
        &["end_turn"],
    )
    .done()
    .usage(usage(21, 10, 0, 0));
    expect("anthropic/message.json", s);
}

#[test]
fn error_body() {
    let s = Summary {
        errors: vec!["invalid_request_error".into()],
        done: 1,
        ..Summary::default()
    };
    expect("anthropic/error.json", s);
}

/// Feed SSE data payloads, without `event:` lines, to one adapter.
fn sse(payloads: &[&str]) -> Result<Summary, AdapterError> {
    feed_sse(&mut AnthropicAdapter::new(), payloads)
}

fn content(data: &str) -> u32 {
    sse(&[data]).expect("valid payload").pieces
}

#[test]
fn what_counts_as_content() {
    let start =
        |b: &str| format!(r#"{{"type":"content_block_start","index":0,"content_block":{b}}}"#);
    let delta = |d: &str| format!(r#"{{"type":"content_block_delta","index":0,"delta":{d}}}"#);
    for (payload, pieces, what) in [
        (start(r#"{"type":"text","text":""}"#), 0, "empty text start"),
        (
            start(r#"{"type":"text","text":"Hi"}"#),
            1,
            "text start with text",
        ),
        (
            start(r#"{"type":"tool_use","id":"toolu_1","name":"f","input":{}}"#),
            0,
            "tool_use start",
        ),
        (
            start(r#"{"type":"thinking","thinking":"","signature":""}"#),
            0,
            "thinking start",
        ),
        (
            start(r#"{"type":"redacted_thinking","data":"EmwKAhgB"}"#),
            1,
            "redacted thinking",
        ),
        (
            delta(r#"{"type":"text_delta","text":"a"}"#),
            1,
            "text_delta",
        ),
        (
            delta(r#"{"type":"text_delta","text":"\n\n"}"#),
            1,
            "escaped text",
        ),
        (
            delta(r#"{"type":"text_delta","text":""}"#),
            0,
            "empty text_delta",
        ),
        (
            delta(r#"{"type":"input_json_delta","partial_json":""}"#),
            0,
            "empty partial_json",
        ),
        (
            delta(r#"{"type":"input_json_delta","partial_json":"{\"a\""}"#),
            1,
            "partial_json",
        ),
        (
            delta(r#"{"type":"thinking_delta","thinking":"so"}"#),
            1,
            "thinking_delta",
        ),
        (
            delta(r#"{"type":"signature_delta","signature":"EqQB"}"#),
            0,
            "signature_delta",
        ),
    ] {
        assert_eq!(content(&payload), pieces, "{what}: {payload}");
    }
    for quiet in [
        r#"{"type": "ping"}"#,
        r#"{"type":"content_block_stop","index":0}"#,
        r#"{"type":"future_event","x":1}"#,
    ] {
        assert_eq!(sse(&[quiet]).expect("valid"), Summary::default(), "{quiet}");
    }
}

#[test]
fn usage_is_cumulative_and_later_reports_win() {
    let s = sse(&[
        r#"{"type":"message_start","message":{"id":"msg_1","model":"claude","usage":{"input_tokens":10,"cache_read_input_tokens":100,"output_tokens":1}}}"#,
        r#"{"type":"message_delta","delta":{"stop_reason":null},"usage":{"output_tokens":5}}"#,
        r#"{"type":"message_delta","delta":{"stop_reason":"max_tokens","stop_sequence":null},"usage":{"input_tokens":12,"output_tokens":9}}"#,
        r#"{"type":"message_stop"}"#,
    ])
    .expect("valid");
    let want = Usage {
        input: Some(112),
        output: Some(9),
        cache_read: Some(100),
        cache_creation: None,
        reasoning: None,
        ..Usage::default()
    };
    assert_eq!(
        (s.usage, s.finish, s.done),
        (want, vec!["max_tokens".to_owned()], 1)
    );
}

#[test]
fn error_kind_falls_back() {
    assert_eq!(
        sse(&[r#"{"type":"error","error":{"type":"api_error","message":"m"}}"#])
            .expect("valid")
            .errors,
        ["api_error"]
    );
    assert_eq!(
        sse(&[r#"{"type":"error","error":"boom"}"#])
            .expect("valid")
            .errors,
        ["error"]
    );
    assert_eq!(
        sse(&[r#"{"type":"error"}"#]).expect("valid").errors,
        ["error"]
    );
}

#[test]
fn whole_message_with_only_a_tool_call_is_content() {
    let body = r#"{"id":"msg_1","type":"message","model":"claude","content":[{"type":"text","text":""},{"type":"tool_use","id":"toolu_1","name":"f","input":{"a":1}}],"stop_reason":"tool_use","usage":{"input_tokens":3,"output_tokens":4}}"#;
    let mut adapter = AnthropicAdapter::new();
    let mut s = Summary::default();
    adapter
        .on_frame(Frame::Json(body.as_bytes()), &mut |e| s.record(e))
        .expect("valid");
    assert_eq!((s.pieces, s.finish), (1, vec!["tool_use".to_owned()]));
    let empty =
        r#"{"id":"msg_2","type":"message","model":"claude","content":[],"stop_reason":"end_turn"}"#;
    let mut s = Summary::default();
    adapter
        .on_frame(Frame::Json(empty.as_bytes()), &mut |e| s.record(e))
        .expect("valid");
    assert_eq!(s.pieces, 0, "no content blocks");
}

#[test]
fn malformed_payloads_are_errors() {
    assert!(sse(&[r#"{"type":"content_block_delta","delta":"#]).is_err());
    assert!(sse(&["event: ping"]).is_err());
    assert_eq!(
        sse(&["", " "]).expect("blank data is skipped"),
        Summary::default()
    );
}
