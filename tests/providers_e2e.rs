//! Provider wire formats through the real server: a scripted upstream sends
//! a recorded fixture frame by frame with a scripted time to first token;
//! the client must get exactly the upstream's bytes, and the exported span
//! must carry the provider's name, the exact token counts and a TTFT close
//! to the script.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

mod support;

use std::time::Duration;

use support::assert_bytes_eq;
use support::client;
use support::frames;
use support::names::*;
use support::otlp::SpanRec;
use support::rig::Rig;
use support::upstream::{Reply, Step};

/// Scripted time to first token and gap between later frames.
const TTFT: Duration = Duration::from_millis(250);
const GAP: Duration = Duration::from_millis(15);

/// A streamed JSON array cut at element boundaries (`,` starts a piece),
/// as Gemini sends it.
fn array_frames(body: &[u8]) -> Vec<Vec<u8>> {
    let text = std::str::from_utf8(body).unwrap();
    let mut out: Vec<Vec<u8>> = Vec::new();
    for (i, piece) in text.split("\n,").enumerate() {
        let piece = if i == 0 {
            piece.to_owned()
        } else {
            format!("\n,{piece}")
        };
        out.push(piece.into_bytes());
    }
    out
}

/// A reply sending `frames`: those before `first_content` at once, then
/// the first content frame after `TTFT`, then the rest `GAP` apart.
fn scripted(content_type: &str, frames: Vec<Vec<u8>>, first_content: usize) -> Reply {
    let mut r = Reply::new(200).header("content-type", content_type);
    for (i, f) in frames.into_iter().enumerate() {
        if i == first_content {
            r = r.step(Step::Sleep(TTFT));
        } else if i > first_content {
            r = r.step(Step::Sleep(GAP));
        }
        r = r.step(Step::Send(f.into()));
    }
    r
}

/// Send `body` to `path` through a route for `provider`; check the bytes,
/// then return the request's one span.
async fn run(provider: &str, reply: Reply, path: &str, body: &str) -> SpanRec {
    let want = reply.body_bytes();
    let mut rig = Rig::provider(provider, reply).await;
    let got = client::fetch(&rig.client, &rig.post(path, body.as_bytes().to_vec())).await;
    assert_eq!(got.status, 200, "status passes through");
    assert!(
        got.error.is_none(),
        "body finished cleanly: {:?}",
        got.error
    );
    let sent = rig.up.only().await.sent();
    assert_bytes_eq("client body vs upstream bytes", &got.body, &sent);
    assert_bytes_eq("client body vs script", &got.body, &want);
    rig.finish_only().await
}

/// TTFT from the span's `first_token` event.
fn ttft(span: &SpanRec) -> Duration {
    let ev = span
        .events
        .iter()
        .find(|e| e.name == "first_token")
        .unwrap_or_else(|| panic!("span {:?} has a first_token event", span.name));
    Duration::from_nanos(ev.time_ns - span.start_ns)
}

#[track_caller]
fn assert_ttft(span: &SpanRec) {
    let got = ttft(span);
    assert!(
        got >= TTFT && got < TTFT + Duration::from_millis(150),
        "TTFT {got:?} should be the scripted {TTFT:?} (+ < 150 ms of local overhead)"
    );
}

#[track_caller]
fn assert_tokens(span: &SpanRec, input: i64, output: i64) {
    assert_eq!(
        span.attr(INPUT_TOKENS).as_i64(),
        Some(input),
        "{INPUT_TOKENS}"
    );
    assert_eq!(
        span.attr(OUTPUT_TOKENS).as_i64(),
        Some(output),
        "{OUTPUT_TOKENS}"
    );
    assert_eq!(
        span.attr(ESTIMATED).as_bool(),
        Some(false),
        "provider-reported"
    );
    assert_eq!(span.str(OUTCOME), "complete", "{OUTCOME}");
}

const GEMINI_REQUEST: &str =
    r#"{"contents":[{"role":"user","parts":[{"text":"What is the capital of France?"}]}]}"#;

#[tokio::test]
async fn gemini_sse_stream() {
    let body = include_bytes!("fixtures/gemini/stream_generate.sse");
    let reply = scripted("text/event-stream", frames::sse(body), 0);
    let span = run(
        "gemini",
        reply,
        "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
        GEMINI_REQUEST,
    )
    .await;
    assert_eq!(span.str(PROVIDER), "gcp.gemini");
    assert_eq!(span.str(OPERATION), "generate_content");
    assert_eq!(span.str(RESPONSE_MODEL), "gemini-2.5-flash");
    assert_tokens(&span, 12, 106);
    assert_eq!(
        span.attr("gen_ai.usage.reasoning.output_tokens").as_i64(),
        Some(87)
    );
    assert_ttft(&span);
}

#[tokio::test]
async fn gemini_json_array_stream() {
    let body = include_bytes!("fixtures/gemini/stream_generate_array.json");
    let reply = scripted("application/json; charset=UTF-8", array_frames(body), 0);
    let span = run(
        "gemini",
        reply,
        "/v1beta/models/gemini-2.5-flash:streamGenerateContent",
        GEMINI_REQUEST,
    )
    .await;
    assert_eq!(span.str(PROVIDER), "gcp.gemini");
    assert_eq!(span.str(RESPONSE_MODEL), "gemini-2.5-flash");
    assert_tokens(&span, 12, 106);
    assert_ttft(&span);
}

#[tokio::test]
async fn gemini_midstream_error_is_an_upstream_error() {
    let body = include_bytes!("fixtures/gemini/stream_generate_error_array.json");
    let reply = scripted("application/json; charset=UTF-8", array_frames(body), 0);
    let span = run(
        "gemini",
        reply,
        "/v1beta/models/gemini-2.5-flash:streamGenerateContent",
        GEMINI_REQUEST,
    )
    .await;
    assert_eq!(span.str(OUTCOME), "upstream_error");
    assert_eq!(span.str(ERROR_TYPE), "UNAVAILABLE");
}

#[tokio::test]
async fn ollama_chat_stream_with_server_timings() {
    let body = include_bytes!("fixtures/ollama/chat_stream.ndjson");
    let reply = scripted("application/x-ndjson", frames::ndjson(body), 0);
    let span = run(
        "ollama",
        reply,
        "/api/chat",
        r#"{"model":"llama3.2","messages":[{"role":"user","content":"Why is the sky blue?"}]}"#,
    )
    .await;
    assert_eq!(span.str(PROVIDER), "ollama");
    assert_eq!(span.str(OPERATION), "chat");
    assert_eq!(span.str(RESPONSE_MODEL), "llama3.2");
    assert_tokens(&span, 31, 5);
    assert_ttft(&span);
    // Ollama's own timings, beside tokentap's.
    assert_eq!(
        span.attr("tokentap.upstream.prompt_eval_duration").as_f64(),
        Some(0.112),
        "prompt_eval_duration in seconds"
    );
    assert_eq!(
        span.attr("tokentap.upstream.decode_duration").as_f64(),
        Some(1.69)
    );
}

#[tokio::test]
async fn bedrock_converse_stream() {
    let body = include_bytes!("fixtures/bedrock/converse_stream.eventstream");
    // messageStart first; the first reasoning delta is the first token.
    let reply = scripted(
        "application/vnd.amazon.eventstream",
        frames::eventstream(body),
        1,
    )
    .header("x-amzn-requestid", "4c1d8a3e-5b6f-4e7a-9c2d-1f0e3b4a5c6d");
    let span = run(
        "bedrock",
        reply,
        "/model/anthropic.claude-3-7-sonnet-20250219-v1%3A0/converse-stream",
        r#"{"messages":[{"role":"user","content":[{"text":"Write a haiku"}]}],"inferenceConfig":{"maxTokens":512}}"#,
    )
    .await;
    assert_eq!(span.str(PROVIDER), "aws.bedrock");
    assert_eq!(span.str(OPERATION), "chat");
    assert_tokens(&span, 45, 88);
    // ConverseStream streams by path, not by a body flag: TTFT is the first delta.
    assert_eq!(span.attr(REQUEST_STREAM).as_bool(), Some(true));
    assert_ttft(&span);
}

#[tokio::test]
async fn bedrock_throttling_exception_is_an_upstream_error() {
    let body = include_bytes!("fixtures/bedrock/converse_stream_throttled.eventstream");
    let reply = scripted(
        "application/vnd.amazon.eventstream",
        frames::eventstream(body),
        1,
    );
    let span = run(
        "bedrock",
        reply,
        "/model/amazon.nova-lite-v1:0/converse-stream",
        r#"{"messages":[{"role":"user","content":[{"text":"hi"}]}]}"#,
    )
    .await;
    assert_eq!(span.str(OUTCOME), "upstream_error");
    assert_eq!(span.str(ERROR_TYPE), "throttlingException");
}

#[tokio::test]
async fn azure_deployment_stream() {
    let body = include_bytes!("fixtures/azure/chat_stream_usage.sse");
    // The prompt-filter chunk and the role chunk come first; "Deploy" is
    // the first token.
    let reply = scripted("text/event-stream", frames::sse(body), 2)
        .header("apim-request-id", "6e3f1a2b-9c8d-4e7f-a6b5-c4d3e2f1a0b9");
    let span = run(
        "azure",
        reply,
        "/openai/deployments/gpt-4o-mini-prod/chat/completions?api-version=2024-10-21",
        r#"{"messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true}}"#,
    )
    .await;
    assert_eq!(span.str(PROVIDER), "azure.ai.openai");
    assert_eq!(span.str(OPERATION), "chat");
    assert_eq!(span.str(RESPONSE_MODEL), "gpt-4o-mini-2024-07-18");
    assert_tokens(&span, 23, 4);
    assert_ttft(&span);
}

/// One route `/` named `auto` that names no provider, to a fixed reply.
async fn unconfigured(reply: Reply) -> Rig {
    Rig::start(
        move |_| reply.clone(),
        |t, up| {
            t.raw_route(&format!(
                "[[routes]]\nname = \"auto\"\nprefix = \"/\"\nupstream = \"{up}\"\n"
            ))
        },
    )
    .await
}

#[tokio::test]
async fn provider_detected_from_the_path_without_configuration() {
    let body = include_bytes!("fixtures/ollama/chat_stream.ndjson");
    let reply = scripted("application/x-ndjson", frames::ndjson(body), 0);
    // A route with no provider: detection from `/api/chat`.
    let mut rig = unconfigured(reply).await;
    let got = client::fetch(
        &rig.client,
        &rig.post("/api/chat", br#"{"model":"llama3.2"}"#.to_vec()),
    )
    .await;
    assert_eq!(got.status, 200);
    let span = rig.stop_first_span().await;
    assert_eq!(span.str(PROVIDER), "ollama");
    assert_tokens(&span, 31, 5);
}

/// A route with no provider and a path that names none: the response's
/// eventstream content type picks the Bedrock parser, and the span and the
/// metrics are labelled with the provider that parser reads (not the
/// request-time fallback `openai`).
#[tokio::test]
async fn provider_detected_from_the_response_labels_span_and_metrics() {
    let body = include_bytes!("fixtures/bedrock/converse_stream.eventstream");
    let reply = scripted(
        "application/vnd.amazon.eventstream",
        frames::eventstream(body),
        1,
    );
    let mut rig = unconfigured(reply).await;
    let got = client::fetch(
        &rig.client,
        &rig.post("/v1/custom/generate-things", br#"{"messages":[]}"#.to_vec()),
    )
    .await;
    assert_eq!(got.status, 200);
    assert!(
        got.error.is_none(),
        "body finished cleanly: {:?}",
        got.error
    );
    let span = rig.stop_first_span().await;
    assert_eq!(
        span.str(PROVIDER),
        "aws.bedrock",
        "span label follows the parser"
    );
    assert_tokens(&span, 45, 88);
    // An endpoint tokentap does not recognise: its duration goes under the
    // conventions' name for operations other than inference.
    let point = rig
        .col
        .wait_point(support::STEP_TIMEOUT, OPERATION_DURATION, |_| true)
        .await;
    assert_eq!(
        point.attr_str(PROVIDER),
        Some("aws.bedrock"),
        "{OPERATION_DURATION} label follows the parser"
    );
    let labels: Vec<_> = rig
        .col
        .latest(OPERATION_DURATION)
        .iter()
        .map(|p| p.attr_str(PROVIDER).map(str::to_owned))
        .collect();
    assert_eq!(
        labels,
        [Some("aws.bedrock".to_owned())],
        "one {OPERATION_DURATION} series, labelled aws.bedrock"
    );
}

/// A route with `[routes.sigv4]` re-signs what the client sent for the
/// upstream's host: the client's own signature (made for tokentap's address)
/// is replaced, the body is forwarded unchanged.
#[tokio::test]
async fn sigv4_route_re_signs_for_the_upstream() {
    let body = include_bytes!("fixtures/bedrock/converse_stream.eventstream");
    let reply = scripted(
        "application/vnd.amazon.eventstream",
        frames::eventstream(body),
        1,
    );
    let rig = Rig::start(
        move |_| reply.clone(),
        |t, up| {
            t.route_with(
                "bedrock",
                "/",
                up,
                "bedrock",
                "[routes.sigv4]\nregion = \"us-east-1\"\naccess_key_id = \"AKIDEXAMPLE\"\nsecret_access_key = \"wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY\"",
            )
        },
    )
    .await;
    let request = r#"{"messages":[{"role":"user","content":[{"text":"hi"}]}]}"#;
    let req = rig
        .post("/model/anthropic.claude-3-haiku-20240307-v1%3A0/converse-stream", request.as_bytes().to_vec())
        .header("authorization", "AWS4-HMAC-SHA256 Credential=CLIENT/20250101/us-east-1/bedrock/aws4_request, SignedHeaders=host, Signature=00")
        .header("x-amz-date", "20250101T000000Z");
    let got = client::fetch(&rig.client, &req).await;
    assert_eq!(got.status, 200);
    let seen = rig.up.only().await;
    let auth = seen.header("authorization").expect("signed request");
    assert!(
        auth.starts_with("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/")
            && auth.contains("/us-east-1/bedrock/aws4_request"),
        "re-signed with the route's credentials: {auth}"
    );
    assert!(
        auth.contains("SignedHeaders=") && auth.contains("host"),
        "the upstream host is signed: {auth}"
    );
    assert_ne!(
        seen.header("x-amz-date").as_deref(),
        Some("20250101T000000Z"),
        "a fresh signing time"
    );
    assert_eq!(
        &seen.body[..],
        request.as_bytes(),
        "body forwarded unchanged"
    );
    assert!(!auth.contains("wJalrXUtnFEMI"), "the secret is never sent");
}
