//! Unit tests of `realtime`: its own code in, assertions out.

use super::*;

/// One line of a transcript fixture: who sent it, the message as sent
/// (its bytes are handed to the parser untouched), and whether it came
/// in a binary frame (Gemini Live sends JSON in binary frames).
#[derive(Deserialize)]
struct Line<'a> {
    dir: &'a str,
    #[serde(borrow)]
    msg: &'a RawValue,
    #[serde(default)]
    binary: bool,
}

/// What a replay saw: each event in its `Debug` form (usage as just
/// "Usage", its numbers in `usages`), and the lines that failed.
#[derive(Debug, Default)]
struct Replay {
    events: Vec<String>,
    usages: Vec<RealtimeUsage>,
    errors: Vec<usize>,
    binary_lines: usize,
}

fn record(r: &mut Replay, e: RealtimeEvent<'_>) {
    match e {
        RealtimeEvent::Usage(u) => {
            r.usages.push(u);
            r.events.push("Usage".to_owned());
        }
        other => r.events.push(format!("{other:?}")),
    }
}

/// One message from the server (`server`) or the client through
/// `parser`, its events recorded in `r`.
fn feed(
    parser: &mut RealtimeParser,
    server: bool,
    json: &[u8],
    r: &mut Replay,
) -> Result<(), AdapterError> {
    parser.message(server, json, &mut |e| record(r, e))
}

fn replay(dialect: Dialect, transcript: &str) -> Replay {
    let mut parser = RealtimeParser::new(dialect);
    let mut r = Replay::default();
    for (n, text) in transcript.lines().enumerate() {
        let line: Line<'_> = serde_json::from_str(text).expect("a fixture line");
        r.binary_lines += usize::from(line.binary);
        let server = match line.dir {
            "client" => false,
            "server" => true,
            other => panic!("line {}: unknown direction {other}", n + 1),
        };
        if feed(&mut parser, server, line.msg.get().as_bytes(), &mut r).is_err() {
            r.errors.push(n + 1);
        }
    }
    r
}

/// The transcript `tests/fixtures/realtime/{name}`.
fn fixture(name: &str) -> String {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/realtime");
    std::fs::read_to_string(format!("{dir}/{name}")).expect("the fixture file")
}

#[track_caller]
fn expect(dialect: Dialect, name: &str, events: &[&str], usages: &[RealtimeUsage]) {
    let r = replay(dialect, &fixture(name));
    assert_eq!(r.errors, Vec::<usize>::new(), "{name}: no malformed lines");
    assert_eq!(r.events, events, "{name}: event sequence");
    assert_eq!(r.usages, usages, "{name}: usage numbers");
}

const TEXT: &str = "Output { kind: Text, pieces: 1 }";
const AUDIO: &str = "Output { kind: Audio, pieces: 1 }";
const TRANSCRIPT: &str = "Output { kind: Transcript, pieces: 1 }";
const TOOL: &str = "Output { kind: ToolArgs, pieces: 1 }";
const REASONING: &str = "Output { kind: Reasoning, pieces: 1 }";
const REQUESTED: &str = "ResponseRequested { model: None }";
const COMMITTED: &str = "InputCommitted";
const USAGE: &str = "Usage";
const CALL_WEATHER: &str = r#"ToolCall { name: Some("get_weather") }"#;

/// Realtime usage with every split reported.
#[allow(clippy::too_many_arguments)]
fn rt_usage(
    input: u64,
    output: u64,
    total: u64,
    cached: u64,
    cached_text: u64,
    input_text: u64,
    input_audio: u64,
    output_text: u64,
    output_audio: u64,
) -> RealtimeUsage {
    RealtimeUsage {
        input: Some(input),
        output: Some(output),
        total: Some(total),
        cached_input: Some(cached),
        cached_input_text: Some(cached_text),
        cached_input_audio: Some(0),
        input_text: Some(input_text),
        input_audio: Some(input_audio),
        output_text: Some(output_text),
        output_audio: Some(output_audio),
        reasoning: None,
    }
}

/// `u` without the cached text/audio split (the provider reported none).
fn no_cached_split(u: RealtimeUsage) -> RealtimeUsage {
    RealtimeUsage {
        cached_input_text: None,
        cached_input_audio: None,
        ..u
    }
}

fn totals(input: u64, output: u64, total: u64) -> RealtimeUsage {
    RealtimeUsage {
        input: Some(input),
        output: Some(output),
        total: Some(total),
        ..RealtimeUsage::default()
    }
}

#[test]
fn openai_realtime_text_response() {
    expect(
        Dialect::OpenaiRealtime,
        "openai_text.jsonl",
        &[
            r#"Model("gpt-realtime-2025-08-28")"#,
            r#"Model("gpt-realtime-2025-08-28")"#,
            REQUESTED,
            r#"ResponseStarted { id: Some("resp_Cq1d") }"#,
            TEXT,
            TEXT,
            USAGE,
            r#"ResponseDone { id: Some("resp_Cq1d"), status: Completed }"#,
        ],
        &[rt_usage(190, 11, 201, 128, 128, 190, 0, 11, 0)],
    );
}

#[test]
fn openai_realtime_audio_with_transcript_under_server_vad() {
    // No response.create: speech_stopped then committed start the clock.
    expect(
        Dialect::OpenaiRealtime,
        "openai_audio_vad.jsonl",
        &[
            r#"Model("gpt-realtime-mini-2025-10-06")"#,
            COMMITTED,
            COMMITTED,
            r#"ResponseStarted { id: Some("resp_Dv1f") }"#,
            TRANSCRIPT,
            AUDIO,
            TRANSCRIPT,
            AUDIO,
            USAGE,
            r#"ResponseDone { id: Some("resp_Dv1f"), status: Completed }"#,
        ],
        &[rt_usage(318, 94, 412, 192, 192, 251, 67, 21, 73)],
    );
}

#[test]
fn openai_realtime_function_call_then_answer() {
    let second = no_cached_split(rt_usage(105, 8, 113, 64, 0, 105, 0, 8, 0));
    expect(
        Dialect::OpenaiRealtime,
        "openai_function_call.jsonl",
        &[
            r#"Model("gpt-realtime")"#,
            REQUESTED,
            r#"ResponseStarted { id: Some("resp_Fc1b") }"#,
            CALL_WEATHER,
            TOOL,
            TOOL,
            USAGE,
            r#"ResponseDone { id: Some("resp_Fc1b"), status: Completed }"#,
            REQUESTED,
            r#"ResponseStarted { id: Some("resp_Fc1h") }"#,
            TEXT,
            USAGE,
            r#"ResponseDone { id: Some("resp_Fc1h"), status: Completed }"#,
        ],
        &[rt_usage(81, 15, 96, 0, 0, 81, 0, 15, 0), second],
    );
}

#[test]
fn openai_realtime_cancelled_incomplete_and_failed_responses() {
    let cancelled = no_cached_split(rt_usage(120, 20, 140, 0, 0, 100, 20, 5, 15));
    expect(
        Dialect::OpenaiRealtime,
        "openai_cancelled_failed.jsonl",
        &[
            r#"Model("gpt-realtime")"#,
            r#"Error { kind: "invalid_request_error" }"#,
            REQUESTED,
            r#"ResponseStarted { id: Some("resp_Cx1c") }"#,
            AUDIO,
            USAGE,
            r#"ResponseDone { id: Some("resp_Cx1c"), status: Cancelled { reason: Some("turn_detected") } }"#,
            REQUESTED,
            r#"ResponseStarted { id: Some("resp_Cx1g") }"#,
            USAGE,
            r#"ResponseDone { id: Some("resp_Cx1g"), status: Cancelled { reason: Some("client_cancelled") } }"#,
            REQUESTED,
            r#"ResponseStarted { id: Some("resp_Cx1i") }"#,
            TRANSCRIPT,
            USAGE,
            r#"ResponseDone { id: Some("resp_Cx1i"), status: Incomplete { reason: Some("max_output_tokens") } }"#,
            REQUESTED,
            r#"ResponseStarted { id: Some("resp_Cx1l") }"#,
            USAGE,
            r#"ResponseDone { id: Some("resp_Cx1l"), status: Failed { kind: "server_error" } }"#,
        ],
        &[
            cancelled,
            totals(121, 0, 121),
            totals(121, 16, 137),
            totals(0, 0, 0),
        ],
    );
}

#[test]
fn openai_realtime_beta_event_names() {
    let usage = |input, output, total, cached, text_in, text_out, audio_out| RealtimeUsage {
        input: Some(input),
        output: Some(output),
        total: Some(total),
        cached_input: Some(cached),
        input_text: Some(text_in),
        input_audio: Some(0),
        output_text: Some(text_out),
        output_audio: Some(audio_out),
        ..RealtimeUsage::default()
    };
    expect(
        Dialect::OpenaiRealtime,
        "openai_beta.jsonl",
        &[
            r#"Model("gpt-4o-realtime-preview-2024-12-17")"#,
            REQUESTED,
            r#"ResponseStarted { id: Some("resp_Bt1b") }"#,
            TRANSCRIPT,
            AUDIO,
            AUDIO,
            USAGE,
            r#"ResponseDone { id: Some("resp_Bt1b"), status: Completed }"#,
            REQUESTED,
            r#"ResponseStarted { id: Some("resp_Bt1h") }"#,
            TEXT,
            USAGE,
            r#"ResponseDone { id: Some("resp_Bt1h"), status: Completed }"#,
        ],
        &[
            usage(52, 35, 87, 0, 52, 9, 26),
            usage(95, 4, 99, 64, 95, 4, 0),
        ],
    );
}

fn responses_usage(input: u64, cached: u64, output: u64, reasoning: u64) -> RealtimeUsage {
    RealtimeUsage {
        input: Some(input),
        output: Some(output),
        total: Some(input + output),
        cached_input: Some(cached),
        reasoning: Some(reasoning),
        ..RealtimeUsage::default()
    }
}

#[test]
fn responses_websocket_reasoning_tool_call_text_and_error() {
    expect(
        Dialect::OpenaiResponses,
        "responses_ws.jsonl",
        &[
            r#"ResponseRequested { model: Some("gpt-5.2") }"#,
            r#"Model("gpt-5.2-2025-12-11")"#,
            r#"ResponseStarted { id: Some("resp_Rw1a") }"#,
            REASONING,
            REASONING,
            CALL_WEATHER,
            TOOL,
            TOOL,
            USAGE,
            r#"ResponseDone { id: Some("resp_Rw1a"), status: Completed }"#,
            r#"ResponseRequested { model: Some("gpt-5.2") }"#,
            r#"Model("gpt-5.2-2025-12-11")"#,
            r#"ResponseStarted { id: Some("resp_Rw1d") }"#,
            REASONING,
            TEXT,
            TEXT,
            USAGE,
            r#"ResponseDone { id: Some("resp_Rw1d"), status: Completed }"#,
            r#"ResponseRequested { model: Some("gpt-5.2") }"#,
            r#"Error { kind: "invalid_request_error" }"#,
        ],
        &[
            responses_usage(312, 0, 58, 40),
            responses_usage(402, 256, 24, 12),
        ],
    );
}

#[test]
fn responses_websocket_lanes_failed_and_incomplete() {
    expect(
        Dialect::OpenaiResponses,
        "responses_ws_lanes.jsonl",
        &[
            r#"Lane("lane-a")"#,
            r#"ResponseRequested { model: Some("gpt-5-mini") }"#,
            r#"Lane("lane-b")"#,
            r#"ResponseRequested { model: Some("gpt-5-nano") }"#,
            r#"Lane("lane-a")"#,
            r#"Model("gpt-5-mini-2025-08-07")"#,
            r#"ResponseStarted { id: Some("resp_La1") }"#,
            r#"Lane("lane-b")"#,
            r#"Model("gpt-5-nano-2025-08-07")"#,
            r#"ResponseStarted { id: Some("resp_Lb1") }"#,
            r#"Lane("lane-b")"#,
            TEXT,
            r#"Lane("lane-a")"#,
            TEXT,
            r#"Lane("lane-b")"#,
            r#"ResponseDone { id: Some("resp_Lb1"), status: Failed { kind: "server_error" } }"#,
            r#"Lane("lane-a")"#,
            USAGE,
            r#"ResponseDone { id: Some("resp_La1"), status: Incomplete { reason: Some("max_output_tokens") } }"#,
        ],
        &[responses_usage(11, 0, 32, 28)],
    );
}

#[test]
fn gemini_live_text_turns_with_usage() {
    let first = RealtimeUsage {
        input: Some(41),
        output: Some(12),
        total: Some(53),
        input_text: Some(41),
        output_text: Some(12),
        ..RealtimeUsage::default()
    };
    // Output = response + thoughts, as for generateContent.
    let second = RealtimeUsage {
        input: Some(60),
        output: Some(10),
        total: Some(70),
        cached_input: Some(32),
        cached_input_text: Some(32),
        input_text: Some(60),
        output_text: Some(4),
        reasoning: Some(6),
        ..RealtimeUsage::default()
    };
    expect(
        Dialect::GeminiLive,
        "gemini_text.jsonl",
        &[
            r#"Model("gemini-live-2.5-flash-preview")"#,
            REQUESTED,
            "ResponseStarted { id: None }",
            TEXT,
            "Output { kind: Text, pieces: 2 }",
            USAGE,
            "ResponseDone { id: None, status: Completed }",
            REQUESTED,
            "ResponseStarted { id: None }",
            TEXT,
            USAGE,
            "ResponseDone { id: None, status: Completed }",
        ],
        &[first, second],
    );
}

#[test]
fn gemini_live_audio_turns_interruption_and_tool_call() {
    let usage = |input, output, total, text_in, audio_in, audio_out| RealtimeUsage {
        input: Some(input),
        output: Some(output),
        total: Some(total),
        input_text: text_in,
        input_audio: audio_in,
        output_audio: Some(audio_out),
        ..RealtimeUsage::default()
    };
    expect(
        Dialect::GeminiLive,
        "gemini_audio.jsonl",
        &[
            r#"Model("gemini-live-2.5-flash")"#,
            COMMITTED,
            "ResponseStarted { id: None }",
            AUDIO,
            TRANSCRIPT,
            AUDIO,
            TRANSCRIPT,
            USAGE,
            "ResponseDone { id: None, status: Completed }",
            COMMITTED,
            "ResponseStarted { id: None }",
            AUDIO,
            USAGE,
            r#"ResponseDone { id: None, status: Cancelled { reason: Some("interrupted") } }"#,
            COMMITTED,
            "ResponseStarted { id: None }",
            TOOL,
            CALL_WEATHER,
            "ResponseDone { id: None, status: Completed }",
            REQUESTED,
            "ResponseStarted { id: None }",
            AUDIO,
            TRANSCRIPT,
            USAGE,
            "ResponseDone { id: None, status: Completed }",
            "Closing",
        ],
        &[
            usage(180, 75, 255, Some(120), Some(60), 75),
            usage(260, 10, 270, Some(150), Some(110), 10),
            // Tool-use prompt tokens count as input.
            usage(308, 20, 328, None, None, 20),
        ],
    );
}

#[test]
fn gemini_fixtures_carry_binary_frames() {
    let r = replay(Dialect::GeminiLive, &fixture("gemini_audio.jsonl"));
    assert!(r.binary_lines > 10, "server messages are marked binary");
}

/// Events of one message, in `Debug` form; `Err` when it is rejected.
fn one(dialect: Dialect, server: bool, json: &str) -> Result<Vec<String>, AdapterError> {
    let mut r = Replay::default();
    feed(
        &mut RealtimeParser::new(dialect),
        server,
        json.as_bytes(),
        &mut r,
    )
    .map(|()| r.events)
}

#[test]
fn empty_and_null_deltas_are_not_output() {
    for json in [
        r#"{"type":"response.output_audio.delta","response_id":"r","delta":""}"#,
        r#"{"type":"response.output_text.delta","delta":null}"#,
        r#"{"type":"response.function_call_arguments.delta","delta":""}"#,
        r#"{"type":"response.audio_transcript.delta"}"#,
    ] {
        assert_eq!(
            one(Dialect::OpenaiRealtime, true, json),
            Ok(vec![]),
            "{json}"
        );
    }
    for json in [
        r#"{"serverContent":{"modelTurn":{"parts":[{"text":""},{"inlineData":{"mimeType":"audio/pcm","data":""}}]}}}"#,
        r#"{"serverContent":{"outputTranscription":{"text":""}}}"#,
        r#"{"serverContent":{"inputTranscription":{"text":"user speech is input"}}}"#,
    ] {
        assert_eq!(one(Dialect::GeminiLive, true, json), Ok(vec![]), "{json}");
    }
}

#[test]
fn output_items_that_call_tools_are_counted_and_others_are_not() {
    let item = |item: &str| format!(r#"{{"type":"response.output_item.added","item":{item}}}"#);
    for (json, want) in [
        (
            item(r#"{"type":"custom_tool_call","name":"apply_patch"}"#),
            vec![r#"ToolCall { name: Some("apply_patch") }"#],
        ),
        (
            item(r#"{"type":"function_call","name":""}"#),
            vec!["ToolCall { name: None }"],
        ),
        (
            item(r#"{"type":"web_search_call"}"#),
            vec!["ServerToolCall(WebSearch)"],
        ),
        (
            item(r#"{"type":"file_search_call"}"#),
            vec!["ServerToolCall(FileSearch)"],
        ),
        (
            item(r#"{"type":"code_interpreter_call"}"#),
            vec!["ServerToolCall(CodeInterpreter)"],
        ),
        (item(r#"{"type":"message","role":"assistant"}"#), vec![]),
        (item(r#"{"type":"reasoning"}"#), vec![]),
        // Only a new output item counts: its `.done` would count it twice.
        (
            r#"{"type":"response.output_item.done","item":{"type":"function_call","name":"f"}}"#
                .to_owned(),
            vec![],
        ),
    ] {
        for dialect in [Dialect::OpenaiRealtime, Dialect::OpenaiResponses] {
            let want: Vec<String> = want.iter().map(|e| e.to_string()).collect();
            assert_eq!(one(dialect, true, &json), Ok(want), "{json}");
        }
    }
    // An item of the wrong shape is the message's error, as for any field.
    assert!(one(Dialect::OpenaiRealtime, true, &item(r#"{"type":7}"#)).is_err());
    // Gemini Live: each of `toolCall`'s calls, named.
    let calls = r#"{"toolCall":{"functionCalls":[{"id":"1","name":"a","args":{}},{"id":"2"}]}}"#;
    assert_eq!(
        one(Dialect::GeminiLive, true, calls),
        Ok(vec![
            "ResponseStarted { id: None }".to_owned(),
            "Output { kind: ToolArgs, pieces: 2 }".to_owned(),
            r#"ToolCall { name: Some("a") }"#.to_owned(),
            "ToolCall { name: None }".to_owned(),
        ])
    );
}

#[test]
fn input_transcription_is_not_output() {
    for json in [
        r#"{"type":"conversation.item.input_audio_transcription.delta","item_id":"i","delta":"hello"}"#,
        r#"{"type":"conversation.item.input_audio_transcription.completed","item_id":"i","transcript":"hello"}"#,
    ] {
        assert_eq!(
            one(Dialect::OpenaiRealtime, true, json),
            Ok(vec![]),
            "{json}"
        );
    }
}

#[test]
fn unknown_event_types_are_ignored_and_unknown_deltas_count_as_other() {
    let ignored = r#"{"type":"output_audio_buffer.started","response_id":"r"}"#;
    assert_eq!(one(Dialect::OpenaiRealtime, true, ignored), Ok(vec![]));
    let in_lane = r#"{"type":"response.in_progress","stream_id":"a","response":{"id":"r"}}"#;
    assert_eq!(one(Dialect::OpenaiResponses, true, in_lane), Ok(vec![]));
    let other = r#"{"type":"response.image_generation_call.partial.delta","delta":"abc"}"#;
    assert_eq!(
        one(Dialect::OpenaiResponses, true, other),
        Ok(vec!["Output { kind: Other, pieces: 1 }".to_owned()])
    );
    let refusal = r#"{"type":"response.refusal.delta","delta":"No."}"#;
    assert_eq!(
        one(Dialect::OpenaiResponses, true, refusal),
        Ok(vec![TEXT.to_owned()])
    );
    assert_eq!(
        one(
            Dialect::GeminiLive,
            true,
            r#"{"sessionResumptionUpdate":{"newHandle":"h","resumable":true}}"#
        ),
        Ok(vec![])
    );
}

#[test]
fn malformed_messages_are_errors_and_the_session_goes_on() {
    let mut parser = RealtimeParser::new(Dialect::OpenaiRealtime);
    let mut events = Vec::new();
    for bad in [
        &b"{\"type\":"[..],
        b"not json",
        b"{}",
        b"{\"type\":\"response.output_text.delta\",\"delta\":}",
        b"{\"type\":7}",
        b"[1,2]",
        b"",
    ] {
        assert!(
            parser
                .server_message(bad, &mut |e| events.push(format!("{e:?}")))
                .is_err(),
            "{:?} is rejected",
            String::from_utf8_lossy(bad)
        );
        assert!(
            parser
                .client_message(bad, &mut |e| events.push(format!("{e:?}")))
                .is_err()
        );
    }
    assert!(events.is_empty(), "a rejected message yields nothing");
    let good = br#"{"type":"response.output_text.delta","delta":"x"}"#;
    assert_eq!(
        parser.server_message(good, &mut |e| events.push(format!("{e:?}"))),
        Ok(())
    );
    assert_eq!(events, [TEXT]);

    let mut gemini = RealtimeParser::new(Dialect::GeminiLive);
    for bad in [&b"\"text\""[..], b"{\"serverContent\":", b"{\"setup\""] {
        assert!(gemini.server_message(bad, &mut |_| {}).is_err());
        assert!(gemini.client_message(bad, &mut |_| {}).is_err());
    }
    // Known fields of the wrong shape, for the side that reads them.
    let bad_usage = br#"{"usageMetadata":{"promptTokenCount":"x"}}"#;
    assert!(gemini.server_message(bad_usage, &mut |_| {}).is_err());
    assert!(
        gemini
            .client_message(br#"{"setup":7}"#, &mut |_| {})
            .is_err()
    );
    assert_eq!(one(Dialect::GeminiLive, true, "{}"), Ok(vec![]));
}

#[test]
fn escaped_strings_are_read() {
    let json = r#"{"type":"session.created","session":{"model":"gpt\u002drealtime"}}"#;
    assert_eq!(
        one(Dialect::OpenaiRealtime, true, json),
        Ok(vec![r#"Model("gpt-realtime")"#.to_owned()])
    );
}

/// OpenAI messages the scan must read exactly as serde does (or leave
/// to it): escapes, nested `type` keys, key order, whitespace,
/// duplicates, wrong shapes, malformed deltas.
const SHAPES: &[&str] = &[
    r#"{"type":"response.output_text.delta","delta":"Hi"}"#,
    r#"{"delta":"Hi","event_id":"e","type":"response.output_text.delta"}"#,
    r#"{"item":{"type":"message","delta":""},"type":"response.output_text.delta","delta":"x"}"#,
    r#"{"item":{"type":"response.output_text.delta","delta":"x"},"type":"conversation.item.created"}"#,
    r#"{"part":{"type":"audio"},"type":"response.output_audio.delta","delta":""}"#,
    r#"{"content":[{"type":"x"},{"type":"response.done"}],"type":"response.text.delta","delta":"a"}"#,
    " \n\t{ \"type\" : \"response.output_text.delta\" ,\r\n \"delta\" : \"x\" } \n",
    r#"{"type":"response.output_text.delta","delta":"say \"type\":\"error\" \\ \n \u00e9"}"#,
    r#"{"type":"response.output_text.delta","delta":"\"\""}"#,
    r#"{"type":"response.output_text.delta","delta":"\ud83d\ude00"}"#,
    r#"{"type":"response.output_text.delt\u0061","delta":"x"}"#,
    r#"{"\u0074ype":"response.output_text.delta","delta":"x"}"#,
    r#"{"type":"response.output_text.delta","d\u0065lta":"x"}"#,
    r#"{"type":"response.output_text.delta","delta":"x","delta":"y"}"#,
    r#"{"type":"response.output_text.delta","type":"error"}"#,
    r#"{"type":"response.output_text.delta","delta":{"a":[1,2]}}"#,
    r#"{"type":"response.output_text.delta","delta":[]}"#,
    r#"{"type":"response.output_text.delta","delta":null}"#,
    r#"{"type":"response.output_text.delta","delta":7}"#,
    r#"{"type":"response.output_text.delta","delta":"bad \x escape"}"#,
    "{\"type\":\"response.output_text.delta\",\"delta\":\"raw\ttab\"}",
    r#"{"type":"response.output_text.delta","delta":"unterminated}"#,
    r#"{"type":"response.output_text.delta","delta":"x"} trailing"#,
    r#"{"type":"response.output_text.delta","delta":"x",}"#,
    r#"{"type":"response.output_text.delta","delta":"x","response":7}"#,
    r#"{"type":"response.output_text.delta","delta":"x","model":7}"#,
    r#"{"type":"response.output_text.delta","delta":"x","stream_id":7}"#,
    r#"{"type":"response.output_text.delta","delta":"x","stream_id":"a"}"#,
    r#"{"type":"response.output_text.delta","delta":"x","stream_id":""}"#,
    r#"{"type":"response.output_text.delta","delta":"x","stream_id":null}"#,
    r#"{"type":"response.output_text.delta","delta":"x","stream_id":"\u0061"}"#,
    r#"{"type":"response.output_audio.delta","delta":"AAAA/+8="}"#,
    r#"{"type":"response.function_call_arguments.delta","delta":"{\"city\":"}"#,
    r#"{"type":"input_audio_buffer.speech_stopped","audio_end_ms":1200,"item_id":"i"}"#,
    r#"{"type":"input_audio_buffer.committed","stream_id":"l"}"#,
    r#"{"type":"input_audio_buffer.append","audio":"AAAA"}"#,
    r#"{"type":"response.create","stream_id":"l"}"#,
    r#"{"type":"response.create","model":"gpt-5"}"#,
    r#"{"type":"response.create","response":{"model":"m"}}"#,
    r#"{"type":"response.created","response":{"id":"r","model":"m"}}"#,
    r#"{"type":"response.created"}"#,
    r#"{"type":"response.done"}"#,
    r#"{"type":"response.done","response":{"status":"completed","usage":{"input_tokens":1}}}"#,
    r#"{"type":"session.created","session":{"model":"m"}}"#,
    r#"{"type":"session.updated"}"#,
    r#"{"type":"error","error":{"type":"invalid_request_error"}}"#,
    r#"{"type":"error"}"#,
    r#"{"type":"rate_limits.updated","rate_limits":[{"name":"tokens","limit":1}]}"#,
    r#"{"type":null,"delta":"x"}"#,
    r#"{"type":7}"#,
    r#"{"delta":"x"}"#,
    r#"{}"#,
    r#"[{"type":"response.output_text.delta","delta":"x"}]"#,
    r#""response.output_text.delta""#,
    r#"{"type":"response.output_text.delta","x":[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]}"#,
];

/// Every OpenAI message of the recorded transcripts, with its side.
fn openai_fixture_messages() -> Vec<(bool, Vec<u8>)> {
    let mut out = Vec::new();
    for name in [
        "openai_audio_vad.jsonl",
        "openai_beta.jsonl",
        "openai_cancelled_failed.jsonl",
        "openai_function_call.jsonl",
        "openai_text.jsonl",
        "responses_ws.jsonl",
        "responses_ws_lanes.jsonl",
    ] {
        for line in fixture(name).lines() {
            let line: Line<'_> = serde_json::from_str(line).expect("a fixture line");
            out.push((line.dir == "server", line.msg.get().as_bytes().to_vec()));
        }
    }
    out
}

type Outcome = Result<Vec<String>, AdapterError>;

/// One message through a parser, as events in `Debug` form.
fn through(parser: &mut RealtimeParser, server: bool, json: &[u8]) -> Outcome {
    let mut r = Replay::default();
    feed(parser, server, json, &mut r).map(|()| {
        let mut events = r.events;
        events.extend(r.usages.iter().map(|u| format!("{u:?}")));
        events
    })
}

/// The same message through the scan and through serde alone, in both
/// OpenAI dialects.
#[track_caller]
fn same_as_serde(server: bool, json: &[u8]) {
    for dialect in [Dialect::OpenaiRealtime, Dialect::OpenaiResponses] {
        let scan = through(&mut RealtimeParser::new(dialect), server, json);
        let serde = through(&mut RealtimeParser::without_scan(dialect), server, json);
        assert_eq!(
            scan,
            serde,
            "{dialect:?} server={server}: {}",
            String::from_utf8_lossy(json)
        );
    }
}

#[test]
fn scan_reads_fixture_messages_and_tricky_shapes_as_serde_does() {
    let messages = openai_fixture_messages();
    let mut deltas = 0;
    for (server, json) in &messages {
        same_as_serde(*server, json);
        let view = scan_openai(json);
        if let Some(view) = &view {
            assert!(view.full.is_none());
        }
        let kind = view.as_ref().map(|v| v.kind);
        if kind.is_some_and(|k| k.ends_with(".delta")) {
            deltas += 1;
        } else if std::str::from_utf8(json).is_ok_and(|j| j.contains(".delta\"")) {
            panic!("a delta left to serde: {}", String::from_utf8_lossy(json));
        }
    }
    assert!(deltas > 20, "fixture deltas read by the scan: {deltas}");
    for shape in SHAPES {
        same_as_serde(true, shape.as_bytes());
        same_as_serde(false, shape.as_bytes());
    }
}

#[test]
fn scan_reads_mutated_messages_as_serde_does() {
    let messages = openai_fixture_messages();
    let inputs = messages
        .iter()
        .map(|(server, json)| (*server, json.as_slice()))
        .chain(SHAPES.iter().map(|s| (true, s.as_bytes())));
    for (i, (server, json)) in inputs.enumerate() {
        for m in crate::providers::scan::differential::mutations(json, i as u64, 60) {
            same_as_serde(server, &m);
        }
    }
}

#[test]
fn only_top_level_keys_count_in_any_order() {
    let realtime = |json: &str| one(Dialect::OpenaiRealtime, true, json);
    let nested_first = r#"{"event_id":"e","item":{"type":"message","role":"assistant"},"output_index":0,"type":"response.output_audio_transcript.delta","delta":"Hel"}"#;
    assert_eq!(realtime(nested_first), Ok(vec![TRANSCRIPT.to_owned()]));
    let delta_inside = r#"{"type":"conversation.item.created","item":{"type":"response.output_text.delta","delta":"x"}}"#;
    assert_eq!(realtime(delta_inside), Ok(vec![]));
    let spaced = "{ \"delta\" :\n\"x\" ,\t\"type\" : \"response.output_text.delta\" }";
    assert_eq!(realtime(spaced), Ok(vec![TEXT.to_owned()]));
    let escaped = r#"{"type":"response.output_text.delta","delta":"\"\\\n\u00e9\ud83d\ude00"}"#;
    assert_eq!(realtime(escaped), Ok(vec![TEXT.to_owned()]));
    let escaped_type = r#"{"type":"response.output_text\u002edelta","delta":"x"}"#;
    assert_eq!(realtime(escaped_type), Ok(vec![TEXT.to_owned()]));
    let empty_string_literal = r#"{"type":"response.output_text.delta","delta":"\"\""}"#;
    assert_eq!(realtime(empty_string_literal), Ok(vec![TEXT.to_owned()]));
    let commit = r#"{"audio_end_ms":1200,"type":"input_audio_buffer.speech_stopped"}"#;
    assert_eq!(realtime(commit), Ok(vec![COMMITTED.to_owned()]));
}

#[test]
fn malformed_deltas_are_still_malformed() {
    for bad in [
        r#"{"type":"response.output_text.delta","delta":"bad \q escape"}"#,
        "{\"type\":\"response.output_audio.delta\",\"delta\":\"AAAA\nAAAA\"}",
        r#"{"type":"response.output_audio.delta","delta":"AAAA"#,
        r#"{"type":"response.output_audio.delta","delta":"AAAA"}}"#,
        r#"{"type":"response.output_text.delta","delta":"x","delta":"y"}"#,
        r#"{"type":"response.output_text.delta","delta":"x","stream_id":7}"#,
        r#"{"type":"response.output_text.delta","delta":"x","response":"r"}"#,
    ] {
        for server in [true, false] {
            assert!(
                one(Dialect::OpenaiRealtime, server, bad).is_err(),
                "server={server}: {bad} is rejected"
            );
        }
    }
    let bytes = b"{\"type\":\"response.output_text.delta\",\"delta\":\"\xff\"}";
    let mut parser = RealtimeParser::new(Dialect::OpenaiRealtime);
    assert!(
        parser.server_message(bytes, &mut |_| {}).is_err(),
        "not UTF-8"
    );
}

#[test]
fn large_audio_is_read_by_the_scan() {
    let audio = "QUJD".repeat(4096);
    let delta =
        format!(r#"{{"type":"response.output_audio.delta","response_id":"r","delta":"{audio}"}}"#);
    let view = scan_openai(delta.as_bytes()).expect("the scan reads it");
    assert_eq!(view.kind, "response.output_audio.delta");
    assert_eq!(view.delta.map(str::len), Some(audio.len() + 2));
    assert_eq!(
        one(Dialect::OpenaiRealtime, true, &delta),
        Ok(vec![AUDIO.to_owned()])
    );
    let append = format!(r#"{{"type":"input_audio_buffer.append","audio":"{audio}"}}"#);
    assert!(scan_openai(append.as_bytes()).is_some());
    assert_eq!(one(Dialect::OpenaiRealtime, false, &append), Ok(vec![]));
}

#[test]
fn a_response_done_without_status_is_not_complete() {
    let json = r#"{"type":"response.done","response":{"id":"r1"}}"#;
    assert_eq!(
        one(Dialect::OpenaiRealtime, true, json),
        Ok(vec![
            r#"ResponseDone { id: Some("r1"), status: Incomplete { reason: None } }"#.to_owned()
        ])
    );
    let failed =
        r#"{"type":"response.failed","response":{"id":"r2","status":"failed","error":null}}"#;
    assert_eq!(
        one(Dialect::OpenaiResponses, true, failed),
        Ok(vec![
            r#"ResponseDone { id: Some("r2"), status: Failed { kind: "response_failed" } }"#
                .to_owned()
        ])
    );
}

#[test]
fn gemini_client_messages() {
    let ask = |json| one(Dialect::GeminiLive, false, json);
    assert_eq!(
        ask(r#"{"realtimeInput":{"activityEnd":{}}}"#),
        Ok(vec![REQUESTED.to_owned()])
    );
    assert_eq!(ask(r#"{"realtimeInput":{"activityStart":{}}}"#), Ok(vec![]));
    assert_eq!(
        ask(r#"{"realtimeInput":{"audioStreamEnd":true}}"#),
        Ok(vec![COMMITTED.to_owned()])
    );
    assert_eq!(ask(r#"{"realtimeInput":{"text":""}}"#), Ok(vec![]));
    assert_eq!(ask(r#"{"clientContent":{"turns":[]}}"#), Ok(vec![]));
    assert_eq!(
        ask(r#"{"setup":{"model":"models/gemini-2.0-flash-live-001"}}"#),
        Ok(vec![r#"Model("gemini-2.0-flash-live-001")"#.to_owned()])
    );
}

#[test]
fn gemini_turn_complete_reason_marks_incomplete() {
    let json =
        r#"{"serverContent":{"turnComplete":true,"turnCompleteReason":"RESPONSE_REJECTED"}}"#;
    assert_eq!(
        one(Dialect::GeminiLive, true, json),
        Ok(vec![
            "ResponseStarted { id: None }".to_owned(),
            r#"ResponseDone { id: None, status: Incomplete { reason: Some("RESPONSE_REJECTED") } }"#.to_owned(),
        ])
    );
}

#[test]
fn dialects_from_real_paths() {
    use Dialect::*;
    let cases = [
        ("/v1/realtime?model=gpt-realtime", Some(OpenaiRealtime)),
        ("/v1/realtime/", Some(OpenaiRealtime)),
        (
            "/openai/realtime?api-version=2024-10-01-preview&deployment=gpt-4o-realtime-preview",
            Some(OpenaiRealtime),
        ),
        (
            "/openai/v1/realtime?model=my-realtime",
            Some(OpenaiRealtime),
        ),
        ("/v1/responses", Some(OpenaiResponses)),
        ("/openai/v1/responses", Some(OpenaiResponses)),
        (
            "/ws/google.ai.generativelanguage.v1beta.GenerativeService.BidiGenerateContent?key=AIzaSECRET",
            Some(GeminiLive),
        ),
        (
            "/ws/google.ai.generativelanguage.v1alpha.GenerativeService.BidiGenerateContent",
            Some(GeminiLive),
        ),
        (
            "/ws/google.ai.generativelanguage.v1alpha.GenerativeService.BidiGenerateContentConstrained",
            Some(GeminiLive),
        ),
        (
            "/ws/google.cloud.aiplatform.v1beta1.LlmBidiService/BidiGenerateContent",
            Some(GeminiLive),
        ),
        ("/v1/realtime/calls", None),
        ("/v1/chat/completions", None),
        ("/", None),
        ("", None),
    ];
    for (path, want) in cases {
        assert_eq!(dialect_for_path(path), want, "{path}");
    }
}

#[test]
fn models_from_handshake_queries() {
    let cases = [
        ("/v1/realtime?model=gpt-realtime", Some("gpt-realtime")),
        (
            "/openai/realtime?api-version=2024-10-01-preview&deployment=gpt-4o-realtime-preview",
            Some("gpt-4o-realtime-preview"),
        ),
        (
            "/openai/v1/realtime?model=my%20deploy%2Fv2",
            Some("my deploy/v2"),
        ),
        ("/x?deployment=d&model=m", Some("m")),
        ("/x?model=&deployment=d", Some("d")),
        (
            "/ws/google.ai.generativelanguage.v1beta.GenerativeService.BidiGenerateContent?key=AIzaSECRET",
            None,
        ),
        ("/v1/realtime", None),
        ("/v1/realtime?model", None),
        ("/v1/realtime?amodel=x", None),
    ];
    for (path, want) in cases {
        assert_eq!(model_from_query(path).as_deref(), want, "{path}");
    }
}

#[test]
fn realtime_usage_maps_onto_usage() {
    let u = RealtimeUsage {
        input: Some(10),
        output: Some(5),
        cached_input: Some(4),
        reasoning: Some(2),
        output_audio: Some(3),
        ..RealtimeUsage::default()
    };
    assert_eq!(
        u.to_usage(),
        Usage {
            input: Some(10),
            output: Some(5),
            cache_read: Some(4),
            cache_creation: None,
            reasoning: Some(2),
            output_audio: Some(3),
            ..Usage::default()
        }
    );
}
