//! Truth rules through the real server, against a scripted upstream and a
//! real OTLP receiver: a malformed event is counted and skipped (later
//! content and usage still count), and a stream that ends cleanly without
//! its protocol's terminal event is `incomplete`, never `complete`. The
//! client gets the upstream's bytes unchanged in every case. The shipped
//! alert rules and Grafana error ratios count the same outcomes as errors
//! as `Outcome::is_error`.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

mod support;

use support::assert_bytes_eq;
use support::client;
use support::frames;
use support::names::*;
use support::otlp::SpanRec;
use support::rig::Rig;
use support::upstream::{Reply, Step};

const MALFORMED_EVENTS: &str = "tokentap.malformed_events";

/// Send `body` to `path` through a route for `provider`; check the bytes
/// came through unchanged, then return the request's one span.
async fn run(provider: &str, reply: Reply, path: &str, body: &str) -> SpanRec {
    let want = reply.body_bytes();
    let mut rig = Rig::provider(provider, reply).await;
    let got = client::fetch(&rig.client, &rig.post(path, body.as_bytes().to_vec())).await;
    assert_eq!(got.status, 200, "{provider}: status passes through");
    assert!(got.error.is_none(), "{provider}: body ends cleanly");
    assert_bytes_eq(provider, &got.body, &want);
    rig.finish_only().await
}

/// A 200 reply sending `frames` one by one.
fn reply(content_type: &str, frames: impl IntoIterator<Item = Vec<u8>>) -> Reply {
    let mut r = Reply::new(200).header("content-type", content_type);
    for f in frames {
        r = r.step(Step::Send(f.into()));
    }
    r
}

/// SSE events with CRLF line ends made LF (each keeps its blank-line end).
fn sse_frames(body: &[u8]) -> Vec<Vec<u8>> {
    let text = std::str::from_utf8(body).unwrap().replace("\r\n", "\n");
    frames::sse(text.as_bytes())
}

/// Whether an eventstream message has the `:event-type` `name`.
fn is_event(message: &[u8], name: &str) -> bool {
    message.windows(name.len()).any(|w| w == name.as_bytes())
}

const OPENAI_CHAT: &str = r#"{"model":"gpt-4o-mini","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}"#;

fn openai_chunk(content: &str) -> Vec<u8> {
    format!("data: {{\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"model\":\"gpt-4o-mini\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{content}\"}},\"finish_reason\":null}}]}}\n\n").into_bytes()
}

/// `run` for an OpenAI chat stream sending `frames`.
async fn openai_chat(frames: Vec<Vec<u8>>) -> SpanRec {
    run(
        "openai",
        reply("text/event-stream", frames),
        "/v1/chat/completions",
        OPENAI_CHAT,
    )
    .await
}

#[tokio::test]
async fn a_malformed_event_does_not_end_metering() {
    let frames = vec![
        openai_chunk("Hel"),
        b"data: {\"id\":\"c1\",\"choices\":[{\"delta\":{\"content\":\"x\"\n\n".to_vec(),
        openai_chunk("lo"),
        b"data: {\"id\":\"c1\",\"model\":\"gpt-4o-mini\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n".to_vec(),
        b"data: {\"id\":\"c1\",\"model\":\"gpt-4o-mini\",\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":42,\"total_tokens\":49}}\n\n".to_vec(),
        b"data: [DONE]\n\n".to_vec(),
    ];
    let span = openai_chat(frames).await;
    assert_eq!(
        span.str(OUTCOME),
        "complete",
        "the terminal event arrived after the bad one: {:#?}",
        span.attrs
    );
    assert_eq!(
        span.attr(MALFORMED_EVENTS).as_i64(),
        Some(1),
        "the bad event is counted on the span"
    );
    assert_eq!(
        span.attr(OUTPUT_TOKENS).as_i64(),
        Some(42),
        "usage after the bad event is metered"
    );
    assert_eq!(span.attr(INPUT_TOKENS).as_i64(), Some(7));
    assert_eq!(span.str(RESPONSE_MODEL), "gpt-4o-mini");
}

#[tokio::test]
async fn an_eventstream_message_with_a_bad_crc_is_skipped() {
    let body = include_bytes!("fixtures/bedrock/converse_stream.eventstream");
    let mut frames = frames::eventstream(body);
    // Flip a byte past the first message's prelude: its CRC fails, its
    // length is still known, so the next message is found.
    frames[0][20] ^= 0xff;
    let span = run(
        "bedrock",
        reply("application/vnd.amazon.eventstream", frames),
        "/model/anthropic.claude-3-7-sonnet-20250219-v1%3A0/converse-stream",
        r#"{"messages":[{"role":"user","content":[{"text":"hi"}]}]}"#,
    )
    .await;
    assert_eq!(span.str(OUTCOME), "complete", "{:#?}", span.attrs);
    assert_eq!(span.attr(MALFORMED_EVENTS).as_i64(), Some(1));
    assert!(
        span.attr(OUTPUT_TOKENS).as_i64().unwrap_or(0) > 0,
        "the metadata event after the bad message still gives the usage"
    );
}

#[tokio::test]
async fn malformed_events_and_no_terminal_event_are_malformed() {
    let frames = vec![openai_chunk("a"), b"data: {not json\n\n".to_vec()];
    let span = openai_chat(frames).await;
    span.assert_outcome("malformed", "malformed_events");
    assert_eq!(span.attr(MALFORMED_EVENTS).as_i64(), Some(1));
}

/// One provider's stream with its terminal event(s) left out.
struct Cut {
    provider: &'static str,
    path: &'static str,
    body: &'static str,
    content_type: &'static str,
    frames: Vec<Vec<u8>>,
}

fn cuts() -> Vec<Cut> {
    let drop_last = |mut v: Vec<Vec<u8>>, n: usize| {
        v.truncate(v.len() - n);
        v
    };
    let openai = sse_frames(include_bytes!("fixtures/openai/chat_stream_usage.sse"));
    // Drop the finish chunk, the usage chunk and `[DONE]`.
    let openai = drop_last(openai, 3);
    let anthropic = sse_frames(include_bytes!("fixtures/anthropic/messages_stream.sse"))
        .into_iter()
        .filter(|e| !e.starts_with(b"event: message_stop"))
        .collect();
    let gemini = sse_frames(include_bytes!("fixtures/gemini/stream_generate.sse"))
        .into_iter()
        .filter(|e| !e.windows(12).any(|w| w == b"finishReason"))
        .collect();
    let bedrock = frames::eventstream(include_bytes!(
        "fixtures/bedrock/converse_stream.eventstream"
    ))
    .into_iter()
    .filter(|m| !is_event(m, "messageStop") && !is_event(m, "metadata"))
    .collect();
    let responses = sse_frames(include_bytes!("fixtures/openai/responses_stream.sse"))
        .into_iter()
        .filter(|e| !e.starts_with(b"event: response.completed"))
        .collect();
    let ollama = frames::ndjson(include_bytes!("fixtures/ollama/chat_stream.ndjson"));
    let ollama = drop_last(ollama, 1);
    vec![
        Cut {
            provider: "openai",
            path: "/v1/chat/completions",
            body: OPENAI_CHAT,
            content_type: "text/event-stream",
            frames: openai,
        },
        Cut {
            provider: "anthropic",
            path: "/v1/messages",
            body: r#"{"model":"claude-sonnet-4-20250514","stream":true,"max_tokens":64,"messages":[{"role":"user","content":"hi"}]}"#,
            content_type: "text/event-stream",
            frames: anthropic,
        },
        Cut {
            provider: "gemini",
            path: "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
            body: r#"{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}"#,
            content_type: "text/event-stream",
            frames: gemini,
        },
        Cut {
            provider: "bedrock",
            path: "/model/anthropic.claude-3-7-sonnet-20250219-v1%3A0/converse-stream",
            body: r#"{"messages":[{"role":"user","content":[{"text":"hi"}]}]}"#,
            content_type: "application/vnd.amazon.eventstream",
            frames: bedrock,
        },
        Cut {
            provider: "openai",
            path: "/v1/responses",
            // A model without an offline tokenizer: a stream without usage
            // would otherwise wait for the tokenizer (slow to load on a
            // busy machine), which this test is not about.
            body: r#"{"model":"scripted-model","stream":true,"input":"hi"}"#,
            content_type: "text/event-stream",
            frames: responses,
        },
        Cut {
            provider: "ollama",
            path: "/api/chat",
            body: r#"{"model":"llama3.2","messages":[{"role":"user","content":"hi"}]}"#,
            content_type: "application/x-ndjson",
            frames: ollama,
        },
    ]
}

#[tokio::test]
async fn a_stream_without_its_terminal_event_is_incomplete() {
    for cut in cuts() {
        let n = cut.frames.len();
        eprintln!("cut: {} {} ({n} frames)", cut.provider, cut.path);
        assert!(n > 0, "{}: frames left to send", cut.path);
        let span = run(
            cut.provider,
            reply(cut.content_type, cut.frames),
            cut.path,
            cut.body,
        )
        .await;
        assert_eq!(
            (span.str(OUTCOME), span.str(ERROR_TYPE)),
            ("incomplete", "missing_terminal_event"),
            "{} {}: {n} frames without the terminal event; attributes {:#?}",
            cut.provider,
            cut.path,
            span.attrs
        );
    }
}

#[tokio::test]
async fn an_empty_streamed_200_is_incomplete() {
    let span = openai_chat(Vec::new()).await;
    span.assert_outcome("incomplete", "missing_terminal_event");
}

/// One OpenAI-compatible stream, recorded whole.
struct Compatible {
    provider: &'static str,
    path: &'static str,
    fixture: &'static [u8],
}

/// Every OpenAI-compatible path whose streams end on a choice's
/// `finish_reason`: chat and legacy completions, Azure deployments, vLLM
/// (usage in every chunk) and llama.cpp (which sends `[DONE]` without a
/// finish reason when another request preempts the running one).
fn compatible() -> Vec<Compatible> {
    vec![
        Compatible {
            provider: "openai",
            path: "/v1/chat/completions",
            fixture: include_bytes!("fixtures/openai/chat_stream_usage.sse"),
        },
        Compatible {
            provider: "openai",
            path: "/v1/completions",
            fixture: include_bytes!("fixtures/openai/completions_stream.sse"),
        },
        Compatible {
            provider: "azure",
            path: "/openai/deployments/gpt-4o/chat/completions?api-version=2024-10-21",
            fixture: include_bytes!("fixtures/azure/chat_stream_usage.sse"),
        },
        Compatible {
            provider: "vllm",
            path: "/v1/chat/completions",
            fixture: include_bytes!("fixtures/vllm/chat_stream_continuous_usage.sse"),
        },
        Compatible {
            provider: "llamacpp",
            path: "/v1/chat/completions",
            fixture: include_bytes!("fixtures/llamacpp/chat_stream_timings.sse"),
        },
    ]
}

/// Whether an SSE event carries a non-null `finish_reason`.
fn has_finish_reason(event: &[u8]) -> bool {
    let needle = b"\"finish_reason\":\"";
    event.windows(needle.len()).any(|w| w == needle)
}

#[tokio::test]
async fn an_openai_style_stream_without_a_finish_reason_is_incomplete_on_done_and_at_eof() {
    // A model without an offline tokenizer: the streams left without
    // usage are not held up by loading one.
    let body = r#"{"model":"scripted-model","stream":true,"prompt":"hi","messages":[{"role":"user","content":"hi"}]}"#;
    for c in compatible() {
        let whole = sse_frames(c.fixture);
        assert!(
            whole.iter().any(|e| has_finish_reason(e)),
            "{} {}: the fixture has a finish reason to take away",
            c.provider,
            c.path
        );
        let span = run(
            c.provider,
            reply("text/event-stream", whole.clone()),
            c.path,
            body,
        )
        .await;
        assert_eq!(
            span.str(OUTCOME),
            "complete",
            "{} {}: the recorded stream as it is: {:#?}",
            c.provider,
            c.path,
            span.attrs
        );
        let unfinished: Vec<Vec<u8>> = whole
            .into_iter()
            .filter(|e| !has_finish_reason(e))
            .collect();
        assert!(
            unfinished.iter().any(|e| e.starts_with(b"data: [DONE]")),
            "{}: `[DONE]` is still sent",
            c.path
        );
        let at_eof: Vec<Vec<u8>> = unfinished
            .iter()
            .filter(|e| !e.starts_with(b"data: [DONE]"))
            .cloned()
            .collect();
        for (end, frames) in [("[DONE]", unfinished), ("EOF", at_eof)] {
            let span = run(c.provider, reply("text/event-stream", frames), c.path, body).await;
            assert_eq!(
                (span.str(OUTCOME), span.str(ERROR_TYPE)),
                ("incomplete", "missing_terminal_event"),
                "{} {}: no choice said why it stopped, stream ended at {end}; attributes {:#?}",
                c.provider,
                c.path,
                span.attrs
            );
        }
    }
}

#[tokio::test]
async fn an_aborted_stream_is_billed_for_the_input_it_used() {
    // Anthropic reports the input in `message_start`: a stream the
    // upstream breaks off after the first text delta has used it all.
    let events = sse_frames(include_bytes!("fixtures/anthropic/messages_stream.sse"));
    let first_delta = events
        .iter()
        .position(|e| e.starts_with(b"event: content_block_delta"))
        .unwrap();
    let mut r = Reply::new(200).header("content-type", "text/event-stream");
    for e in &events[..=first_delta] {
        r = r.step(Step::Send(e.clone().into()));
    }
    // The head and the events reach the client before the break.
    let r = r
        .step(Step::Sleep(std::time::Duration::from_millis(200)))
        .step(Step::Abort);
    let mut rig = Rig::provider("anthropic", r).await;
    let body = r#"{"model":"claude-sonnet-4-20250514","stream":true,"max_tokens":64,"messages":[{"role":"user","content":"hi"}]}"#;
    let got = client::fetch(&rig.client, &rig.post("/v1/messages", body.into())).await;
    assert_eq!(got.status, 200, "the stream started");
    let span = rig.finish_only().await;
    span.assert_outcome("upstream_error", "upstream_aborted");
    assert_eq!(
        span.attr(INPUT_TOKENS).as_i64(),
        Some(472 + 2048),
        "the input message_start reported (cache reads included) is kept: {:#?}",
        span.attrs
    );
    let cost = span.attr("tokentap.cost.amount").as_f64().unwrap_or(0.0);
    assert!(
        cost > 0.0,
        "the aborted stream is priced for its input: {:#?}",
        span.attrs
    );
}

/// Every `tokentap_outcome=~"…"` error selector in `text` (JSON-escaped
/// quotes included), as sets of outcomes.
fn error_selectors(text: &str) -> Vec<std::collections::BTreeSet<String>> {
    let text = text.replace("\\\"", "\"");
    text.match_indices("tokentap_outcome=~\"")
        .filter_map(|(at, m)| {
            let rest = &text[at + m.len()..];
            let end = rest.find('"')?;
            Some(rest[..end].split('|').map(str::to_owned).collect())
        })
        .collect()
}

#[test]
fn shipped_error_ratios_count_the_same_outcomes_as_is_error() {
    use tokentap::meter::Outcome;
    let errors: std::collections::BTreeSet<String> = Outcome::ALL
        .iter()
        .filter(|o| o.is_error())
        .map(|o| o.as_str().to_owned())
        .collect();
    assert!(errors.contains("incomplete"), "incomplete is an error");
    let root = env!("CARGO_MANIFEST_DIR");
    for file in [
        "deploy/prometheus/alerts.yml",
        "deploy/grafana/tokentap.json",
    ] {
        let text = std::fs::read_to_string(format!("{root}/{file}")).unwrap();
        let selectors = error_selectors(&text);
        assert!(!selectors.is_empty(), "{file}: has error selectors");
        for s in selectors {
            assert_eq!(
                s, errors,
                "{file}: an error selector differs from Outcome::is_error"
            );
        }
    }
}
