//! Unit tests of `framing::eventstream`.

use super::*;
use crate::framing::Decoder;
use crate::framing::testing::{self, text};

/// (message type, event type, payload) of one frame.
type Frames = Vec<(String, String, String)>;

fn render(f: Frame<'_>) -> (String, String, String) {
    match f {
        Frame::AwsEvent {
            message_type,
            event_type,
            payload,
        } => (text(message_type), text(event_type), text(payload)),
        other => panic!("eventstream decoder produced {other:?}"),
    }
}

fn decode_all_ways(input: &[u8], max: usize) -> (Frames, Result<(), FramingError>) {
    testing::decode_all_ways(|| EventStreamDecoder::new(max), input, render)
}

fn frames(input: &[u8]) -> Frames {
    let (frames, result) = decode_all_ways(input, 1 << 20);
    assert_eq!(result, Ok(()), "expected no error");
    frames
}

fn frame(message_type: &str, event_type: &str, payload: &str) -> (String, String, String) {
    (message_type.into(), event_type.into(), payload.into())
}

fn message(headers: &[(&str, HeaderValue<'_>)], payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    encode(headers, payload, &mut out).expect("encodable message");
    out
}

fn event(event_type: &str, payload: &str) -> Vec<u8> {
    message(
        &[
            (":event-type", HeaderValue::String(event_type)),
            (":content-type", HeaderValue::String("application/json")),
            (":message-type", HeaderValue::String("event")),
        ],
        payload.as_bytes(),
    )
}

/// A message with the given prelude fields and body, both CRCs correct.
fn raw(total: u32, headers_len: u32, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&total.to_be_bytes());
    out.extend_from_slice(&headers_len.to_be_bytes());
    out.extend_from_slice(&crc32fast::hash(&out).to_be_bytes());
    out.extend_from_slice(body);
    out.extend_from_slice(&crc32fast::hash(&out).to_be_bytes());
    out
}

fn malformed(why: &'static str) -> Result<(), FramingError> {
    Err(FramingError::Malformed(why))
}

#[test]
fn events_in_sequence() {
    let mut input = event("messageStart", r#"{"role":"assistant"}"#);
    input.extend(event("contentBlockDelta", r#"{"delta":{"text":"Hi"}}"#));
    assert_eq!(
        frames(&input),
        vec![
            frame("event", "messageStart", r#"{"role":"assistant"}"#),
            frame("event", "contentBlockDelta", r#"{"delta":{"text":"Hi"}}"#),
        ]
    );
}

#[test]
fn minimal_message_and_default_message_type() {
    assert_eq!(
        frames(&raw(16, 0, b"")),
        vec![frame("event", "", "")],
        "no headers: message type defaults to event"
    );
    let input = message(&[(":event-type", HeaderValue::String("chunk"))], b"x");
    assert_eq!(frames(&input), vec![frame("event", "chunk", "x")]);
    assert_eq!(frames(b""), vec![], "an empty body has no frames");
}

#[test]
fn every_header_value_type_is_parsed() {
    let input = message(
        &[
            ("t", HeaderValue::Bool(true)),
            ("f", HeaderValue::Bool(false)),
            ("byte", HeaderValue::Byte(-3)),
            ("short", HeaderValue::Short(-300)),
            ("int", HeaderValue::Integer(70_000)),
            ("long", HeaderValue::Long(-5_000_000_000)),
            ("bytes", HeaderValue::ByteArray(&[0, 7, 0xFF])),
            ("empty", HeaderValue::ByteArray(&[])),
            ("str", HeaderValue::String("ünïcödé")),
            ("ts", HeaderValue::Timestamp(1_753_600_020_000)),
            ("id", HeaderValue::Uuid([0xAB; 16])),
            (":event-type", HeaderValue::String("contentBlockStop")),
            (":message-type", HeaderValue::String("event")),
        ],
        b"{}",
    );
    assert_eq!(
        frames(&input),
        vec![frame("event", "contentBlockStop", "{}")]
    );
}

#[test]
fn failure_messages_take_their_type_from_the_failure_header() {
    let exception = message(
        &[
            (
                ":exception-type",
                HeaderValue::String("throttlingException"),
            ),
            (":content-type", HeaderValue::String("application/json")),
            (":message-type", HeaderValue::String("exception")),
        ],
        br#"{"message":"Too many requests"}"#,
    );
    let error = message(
        &[
            (":error-code", HeaderValue::String("InternalFailure")),
            (":error-message", HeaderValue::String("boom")),
            (":message-type", HeaderValue::String("error")),
        ],
        b"",
    );
    let mut input = exception;
    input.extend(error);
    assert_eq!(
        frames(&input),
        vec![
            frame(
                "exception",
                "throttlingException",
                r#"{"message":"Too many requests"}"#
            ),
            frame("error", "InternalFailure", ""),
        ]
    );
}

#[test]
fn non_string_well_known_headers_are_ignored() {
    let input = message(&[(":event-type", HeaderValue::Integer(1))], b"p");
    assert_eq!(frames(&input), vec![frame("event", "", "p")]);
}

#[test]
fn message_wholly_inside_a_chunk_borrows_it() {
    let mut chunk = event("contentBlockDelta", r#"{"delta":{"text":"a"}}"#);
    chunk.extend(event("contentBlockDelta", r#"{"delta":{"text":"b"}}"#));
    let partial = event("messageStop", "{}");
    chunk.extend_from_slice(&partial[..20]);
    let mut dec = EventStreamDecoder::new(1024);
    assert_eq!(testing::borrowed_frames(&mut dec, &chunk), 2);
    assert_eq!(
        dec.buf,
        &partial[..20],
        "only the incomplete message is kept"
    );
}

#[test]
fn buffer_is_reserved_once_for_the_declared_length() {
    let input = event("contentBlockDelta", &"x".repeat(300));
    let mut dec = EventStreamDecoder::new(1024);
    let mut n = 0;
    let mut on = |_: Frame<'_>| n += 1;
    dec.feed(&input[..PRELUDE_LEN], &mut on).expect("valid");
    let cap = dec.buf.capacity();
    assert!(
        cap >= input.len(),
        "reserved {cap} for a {}-byte message",
        input.len()
    );
    for byte in input[PRELUDE_LEN..].chunks(1) {
        assert_eq!(dec.buf.capacity(), cap, "no regrowth while filling");
        dec.feed(byte, &mut on).expect("valid");
    }
    dec.finish(&mut on).expect("finish");
    assert_eq!(n, 1);
}

/// How many messages a decode skipped, fed whole, at every two-piece
/// split and byte by byte (all must agree).
fn skipped_all_ways(input: &[u8]) -> u64 {
    testing::all_ways(input, |pieces| {
        let mut dec = EventStreamDecoder::new(1024);
        for piece in pieces {
            if dec.feed(piece, &mut |_| {}).is_err() {
                break;
            }
        }
        dec.skipped()
    })
}

#[test]
fn a_bad_prelude_crc_ends_the_stream() {
    let good = event("messageStart", "{}");
    let mut bad_prelude = good.clone();
    bad_prelude[9] ^= 1;
    let mut input = good.clone();
    input.extend(bad_prelude);
    input.extend(&good);
    let (f, r) = decode_all_ways(&input, 1024);
    assert_eq!(
        (f, r),
        (
            vec![frame("event", "messageStart", "{}")],
            malformed("eventstream prelude CRC mismatch")
        ),
        "frames before the bad prelude survive; none after (no length to trust)"
    );
}

#[test]
fn a_bad_message_crc_skips_only_that_message() {
    let good = event("messageStart", "{}");
    let after = event("messageStop", "{}");
    let mut bad_message = good.clone();
    let last = bad_message.len() - 6;
    bad_message[last] ^= 0x20;
    let mut bad_trailer = good.clone();
    if let Some(b) = bad_trailer.last_mut() {
        *b ^= 1;
    }
    for bad in [bad_message, bad_trailer] {
        let mut input = good.clone();
        input.extend(bad);
        input.extend(&after);
        let (f, r) = decode_all_ways(&input, 1024);
        assert_eq!(
            (f, r),
            (
                vec![
                    frame("event", "messageStart", "{}"),
                    frame("event", "messageStop", "{}")
                ],
                Ok(())
            ),
            "the message after the bad one is decoded"
        );
        assert_eq!(skipped_all_ways(&input), 1, "the bad message is counted");
    }
    assert_eq!(skipped_all_ways(&good), 0);
}

#[test]
fn bad_lengths() {
    let cases: Vec<(Vec<u8>, Result<(), FramingError>)> = vec![
        (
            raw(15, 0, b""),
            malformed("eventstream message shorter than 16 bytes"),
        ),
        (
            raw(0, 0, b""),
            malformed("eventstream message shorter than 16 bytes"),
        ),
        (
            raw(17, 2, b"x"),
            malformed("eventstream headers longer than the message"),
        ),
        (
            raw(16, u32::MAX, b""),
            malformed("eventstream headers longer than the message"),
        ),
        (
            raw(u32::MAX, 0, b""),
            Err(FramingError::TooLarge { limit: 1024 }),
        ),
        (
            raw(1025, 0, &[0; 1009]),
            Err(FramingError::TooLarge { limit: 1024 }),
        ),
    ];
    for (input, expected) in cases {
        let (f, r) = decode_all_ways(&input, 1024);
        assert_eq!((f, r), (vec![], expected), "input {input:?}");
    }
    let at_limit = raw(1024, 0, &[b'a'; 1008]);
    let (f, r) = decode_all_ways(&at_limit, 1024);
    assert_eq!((f.len(), r), (1, Ok(())), "exactly at the limit passes");
}

#[test]
fn bad_headers() {
    let cases: &[(&[u8], &str)] = &[
        (b"\x00\x07", "eventstream header name is empty"),
        (b"\x05ab", "eventstream header truncated"),
        (b"\x01a", "eventstream header truncated"),
        (b"\x01a\x02", "eventstream header truncated"),
        (b"\x01a\x03\x00", "eventstream header truncated"),
        (b"\x01a\x04\x00\x00\x00", "eventstream header truncated"),
        (
            b"\x01a\x05\x00\x00\x00\x00\x00\x00\x00",
            "eventstream header truncated",
        ),
        (b"\x01a\x06\x00", "eventstream header truncated"),
        (b"\x01a\x07\x00\x05abc", "eventstream header truncated"),
        (b"\x01a\x08\x00", "eventstream header truncated"),
        (
            b"\x01a\x09\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00",
            "eventstream header truncated",
        ),
        (b"\x01a\x0a", "eventstream header has an unknown value type"),
        (b"\x01a\xff", "eventstream header has an unknown value type"),
        (
            b"\x01a\x07\x00\x02\xc3\x28",
            "eventstream string header is not UTF-8",
        ),
    ];
    for (headers, why) in cases {
        let headers_len = u32::try_from(headers.len()).expect("short");
        let mut body = headers.to_vec();
        body.extend_from_slice(b"payload");
        let total = u32::try_from(16 + body.len()).expect("short");
        let mut input = raw(total, headers_len, &body);
        input.extend(event("messageStop", "{}"));
        let (f, r) = decode_all_ways(&input, 1024);
        assert_eq!(
            (f, r),
            (vec![frame("event", "messageStop", "{}")], Ok(())),
            "headers {headers:?} ({why}): that message is skipped, the next one read"
        );
        assert_eq!(skipped_all_ways(&input), 1, "headers {headers:?}");
    }
}

#[test]
fn truncated_stream_is_malformed_at_finish() {
    let mut input = event("messageStart", "{}");
    let good = input.len();
    input.extend(event("messageStop", "{}"));
    for cut in [good + 1, good + 11, good + 12, input.len() - 1] {
        let (f, r) = decode_all_ways(&input[..cut], 1024);
        assert_eq!(
            (f, r),
            (
                vec![frame("event", "messageStart", "{}")],
                malformed("eventstream message truncated")
            ),
            "cut at {cut}"
        );
    }
}

#[test]
fn failure_is_sticky_and_success_resets() {
    let good = event("messageStart", "{}");
    let mut dec = EventStreamDecoder::new(1024);
    let mut n = 0;
    let mut on = |_: Frame<'_>| n += 1;
    dec.feed(&good, &mut on).expect("valid");
    dec.finish(&mut on).expect("finish");
    dec.feed(&good, &mut on).expect("reusable after finish");
    let err = dec.feed(&[0; 16], &mut on);
    assert_eq!(err, malformed("eventstream prelude CRC mismatch"));
    assert_eq!(dec.feed(&good, &mut on), err);
    assert_eq!(dec.finish(&mut on), err);
    assert_eq!(n, 2);
}

#[test]
fn encode_rejects_what_the_format_cannot_hold() {
    let long = "n".repeat(256);
    let mut out = Vec::new();
    assert!(encode(&[(&long, HeaderValue::Bool(true))], b"", &mut out).is_err());
    let big = vec![0; 65_536];
    assert!(encode(&[("b", HeaderValue::ByteArray(&big))], b"", &mut out).is_err());
}

/// Bedrock pads payloads with a `p` field of varying length.
fn pad(n: usize) -> String {
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
        .chars()
        .cycle()
        .take(n)
        .collect()
}

/// A Bedrock `ConverseStream` body.
fn converse_stream() -> Vec<u8> {
    let mut out = event(
        "messageStart",
        &format!(r#"{{"p":"{}","role":"assistant"}}"#, pad(43)),
    );
    let deltas = [
        "The sky looks blue",
        " because air molecules scatter",
        " short (blue) wavelengths of sunlight",
        " much more than long (red) ones —",
        " \"Rayleigh scattering\".",
    ];
    for (i, text) in deltas.iter().enumerate() {
        let delta = format!(
            r#"{{"contentBlockIndex":0,"delta":{{"text":"{}"}},"p":"{}"}}"#,
            text.replace('"', "\\\""),
            pad(5 + 7 * i)
        );
        out.extend(event("contentBlockDelta", &delta));
    }
    out.extend(event(
        "contentBlockStop",
        &format!(r#"{{"contentBlockIndex":0,"p":"{}"}}"#, pad(38)),
    ));
    out.extend(event(
        "messageStop",
        &format!(r#"{{"p":"{}","stopReason":"end_turn"}}"#, pad(21)),
    ));
    out.extend(event(
        "metadata",
        &format!(
            r#"{{"metrics":{{"latencyMs":1152}},"p":"{}","usage":{{"inputTokens":18,"outputTokens":31,"totalTokens":49}}}}"#,
            pad(12)
        ),
    ));
    out
}

/// A Bedrock `ConverseStream` body cut off by a throttling exception.
fn converse_stream_exception() -> Vec<u8> {
    let mut out = event(
        "messageStart",
        &format!(r#"{{"p":"{}","role":"assistant"}}"#, pad(17)),
    );
    out.extend(event(
        "contentBlockDelta",
        &format!(
            r#"{{"contentBlockIndex":0,"delta":{{"text":"Once upon"}},"p":"{}"}}"#,
            pad(9)
        ),
    ));
    out.extend(message(
        &[
            (
                ":exception-type",
                HeaderValue::String("throttlingException"),
            ),
            (":content-type", HeaderValue::String("application/json")),
            (":message-type", HeaderValue::String("exception")),
        ],
        br#"{"message":"Too many tokens, please wait before trying again."}"#,
    ));
    out
}

fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for group in bytes.chunks(3) {
        let b = [
            group[0],
            *group.get(1).unwrap_or(&0),
            *group.get(2).unwrap_or(&0),
        ];
        let n = u32::from_be_bytes([0, b[0], b[1], b[2]]);
        for i in 0..4 {
            if i <= group.len() {
                out.push(char::from(ALPHABET[(n >> (18 - 6 * i) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// A Bedrock `InvokeModelWithResponseStream` body for an Anthropic model:
/// each `chunk` carries the model's own event as base64 JSON.
fn invoke_stream() -> Vec<u8> {
    let inner = [
        r#"{"type":"message_start","message":{"id":"msg_bdrk_01Lq8vWfVb2h7nXk3Ypz9QmR","type":"message","role":"assistant","model":"claude-3-5-haiku-20241022","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":14,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":1}}}"#,
        r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello"}}"#,
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"! How can I help"}}"#,
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":" you today?"}}"#,
        r#"{"type":"content_block_stop","index":0}"#,
        r#"{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":12}}"#,
        r#"{"type":"message_stop","amazon-bedrock-invocationMetrics":{"inputTokenCount":14,"outputTokenCount":12,"invocationLatency":845,"firstByteLatency":402}}"#,
    ];
    let mut out = Vec::new();
    for (i, json) in inner.iter().enumerate() {
        let payload = format!(
            r#"{{"bytes":"{}","p":"{}"}}"#,
            base64(json.as_bytes()),
            pad(3 + 5 * i)
        );
        out.extend(event("chunk", &payload));
    }
    out
}

struct Fixture {
    name: &'static str,
    build: fn() -> Vec<u8>,
    committed: &'static [u8],
    types: &'static [(&'static str, &'static str)],
}

const FIXTURES: &[Fixture] = &[
    Fixture {
        name: "bedrock_converse_stream.eventstream",
        build: converse_stream,
        committed: include_bytes!(
            "../../../tests/fixtures/framing/bedrock_converse_stream.eventstream"
        ),
        types: &[
            ("event", "messageStart"),
            ("event", "contentBlockDelta"),
            ("event", "contentBlockDelta"),
            ("event", "contentBlockDelta"),
            ("event", "contentBlockDelta"),
            ("event", "contentBlockDelta"),
            ("event", "contentBlockStop"),
            ("event", "messageStop"),
            ("event", "metadata"),
        ],
    },
    Fixture {
        name: "bedrock_converse_stream_exception.eventstream",
        build: converse_stream_exception,
        committed: include_bytes!(
            "../../../tests/fixtures/framing/bedrock_converse_stream_exception.eventstream"
        ),
        types: &[
            ("event", "messageStart"),
            ("event", "contentBlockDelta"),
            ("exception", "throttlingException"),
        ],
    },
    Fixture {
        name: "bedrock_invoke_stream.eventstream",
        build: invoke_stream,
        committed: include_bytes!(
            "../../../tests/fixtures/framing/bedrock_invoke_stream.eventstream"
        ),
        types: &[("event", "chunk"); 8],
    },
];

/// The binary fixtures are generated by the builders above; run with
/// `TOKENTAP_REGENERATE_FIXTURES=1` to rewrite them after a change.
#[test]
fn fixtures_match_their_builders() {
    let regenerate = std::env::var_os("TOKENTAP_REGENERATE_FIXTURES").is_some();
    for f in FIXTURES {
        let built = (f.build)();
        if regenerate {
            let path = format!(
                "{}/tests/fixtures/framing/{}",
                env!("CARGO_MANIFEST_DIR"),
                f.name
            );
            std::fs::write(&path, &built).expect("write fixture");
        } else {
            assert!(
                built == f.committed,
                "{}: stale fixture, regenerate it",
                f.name
            );
        }
    }
}

#[test]
fn fixtures_decode_the_same_at_every_split() {
    for f in FIXTURES {
        let frames = frames(f.committed);
        let types: Vec<(&str, &str)> = frames
            .iter()
            .map(|(m, e, _)| (m.as_str(), e.as_str()))
            .collect();
        assert_eq!(
            types, f.types,
            "{}: message and event types in order",
            f.name
        );
        for (_, _, payload) in &frames {
            serde_json::from_str::<serde_json::Value>(payload)
                .unwrap_or_else(|e| panic!("{}: payload {payload:?} is not JSON: {e}", f.name));
        }
    }
}

#[test]
fn invoke_stream_chunks_hold_base64_model_events() {
    let frames = frames(FIXTURES[2].committed);
    let last = &frames.last().expect("frames").2;
    let outer: serde_json::Value = serde_json::from_str(last).expect("JSON payload");
    let bytes = outer["bytes"].as_str().expect("a bytes field");
    assert!(
        bytes.starts_with("eyJ0eXBlIjoibWVzc2FnZV9zdG9wIi"),
        "base64 of {{\"type\":\"message_stop\"..., got {bytes}"
    );
}
