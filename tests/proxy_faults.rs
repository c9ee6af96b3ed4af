//! Fault paths: each upstream or client failure yields the right status or
//! body for the client and exactly one span with the right outcome.
//! (Stalls and timeouts: `upstream_stall.rs`; clients that go away:
//! `client_disconnect.rs`.)
#![allow(
    clippy::disallowed_methods,
    reason = "tests time requests and set deadlines with the wall clock"
)]
#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

mod support;

use std::time::{Duration, Instant};

use support::client::{self, Req};
use support::names::*;
use support::otlp::SpanRec;
use support::rig::Rig;
use support::script::{self, StreamSpec};
use support::{STEP_TIMEOUT, assert_bytes_eq};

use support::CHAT;

#[track_caller]
fn assert_error_type(span: &SpanRec) {
    let e = span.str(ERROR_TYPE);
    assert!(
        !e.is_empty(),
        "error.type should be set on a failed request"
    );
}

#[tokio::test]
async fn abort_mid_stream_is_upstream_error_with_partial_counts() {
    let spec = StreamSpec::tokens(10, Duration::from_millis(20), Duration::from_millis(10));
    let mut rig = Rig::openai(script::openai_abort_after(&spec, 3)).await;
    let got = rig.chat("m-abort", true).await;
    assert_eq!(got.status, 200, "head was already sent as 200");
    assert!(
        got.error.is_some(),
        "the client must see the stream break off (not a clean end) when the upstream aborts; got {:?}",
        got.text()
    );
    assert_bytes_eq("partial body", &got.body, &rig.up.only().await.sent());
    let span = rig.finish("chat m-abort").await;
    span.assert_outcome_is("upstream_error");
    assert_error_type(&span);
    assert_eq!(
        span.num(OUTPUT_TOKENS),
        3.0,
        "partial output tokens counted from the 3 content chunks sent"
    );
}

#[tokio::test]
async fn status_429_passes_through_and_is_an_error() {
    let reply = script::openai_error(429, "requests", "rate_limit_exceeded", "Rate limit reached");
    let want = reply.body_bytes();
    let mut rig = Rig::openai(reply).await;
    let got = rig.chat("m-429", true).await;
    assert_eq!(got.status, 429, "429 passes through");
    assert_eq!(
        got.headers.get("retry-after").map(|v| v.as_bytes()),
        Some(&b"1"[..]),
        "retry-after kept"
    );
    assert_bytes_eq("429 body", &got.body, &want);
    let span = rig.finish("chat m-429").await;
    span.assert_outcome_is("upstream_error");
    assert_error_type(&span);
    assert_eq!(span.status_code, 2, "span status should be Error for a 429");
}

#[tokio::test]
async fn status_500_anthropic_passes_through_and_is_an_error() {
    let reply = script::anthropic_error(500, "api_error", "Internal server error");
    let want = reply.body_bytes();
    let mut rig = Rig::anthropic(reply).await;
    let got = rig.messages("c-500", true).await;
    assert_eq!(got.status, 500);
    assert_bytes_eq("500 body", &got.body, &want);
    let span = rig.finish("chat c-500").await;
    span.assert_outcome_is("upstream_error");
    assert_error_type(&span);
}

#[tokio::test]
async fn openai_midstream_error_under_200_is_upstream_error() {
    let spec = StreamSpec::tokens(5, Duration::ZERO, Duration::from_millis(5));
    let reply = script::openai_midstream_error(&spec, 2);
    let want = reply.body_bytes();
    let mut rig = Rig::openai(reply).await;
    let got = rig.chat("m-mid", true).await;
    assert_eq!(got.status, 200);
    assert_bytes_eq("stream with error event", &got.body, &want);
    let span = rig.finish("chat m-mid").await;
    span.assert_outcome_is("upstream_error");
    assert_error_type(&span);
}

#[tokio::test]
async fn anthropic_error_event_under_200_is_upstream_error() {
    let spec = StreamSpec::tokens(5, Duration::ZERO, Duration::from_millis(5))
        .model(script::ANTHROPIC_RESPONSE_MODEL);
    let reply = script::anthropic_midstream_error(&spec, 2);
    let want = reply.body_bytes();
    let mut rig = Rig::anthropic(reply).await;
    let got = rig.messages("c-mid", true).await;
    assert_bytes_eq("stream with error event", &got.body, &want);
    let span = rig.finish("chat c-mid").await;
    span.assert_outcome_is("upstream_error");
    assert_eq!(
        span.str(ERROR_TYPE),
        "overloaded_error",
        "error.type from the Anthropic error event"
    );
}

#[tokio::test]
async fn malformed_chunk_is_counted_skipped_and_still_passes_through() {
    let spec = StreamSpec::tokens(5, Duration::ZERO, Duration::from_millis(5));
    let reply = script::openai_malformed_after(&spec, 2);
    let want = reply.body_bytes();
    let mut rig = Rig::openai(reply).await;
    let got = rig.chat("m-bad", true).await;
    assert_eq!(got.status, 200);
    assert!(
        got.error.is_none(),
        "a malformed chunk must not break the client's stream"
    );
    assert_bytes_eq("malformed stream still byte-exact", &got.body, &want);
    let span = rig.finish("chat m-bad").await;
    // `[DONE]` follows the bad chunk: the stream ended properly, and the
    // bad chunk is counted, not the end of metering.
    span.assert_outcome_is("complete");
    assert_eq!(
        span.attr("tokentap.malformed_events").as_i64(),
        Some(1),
        "the bad chunk is counted on the span"
    );
}

#[tokio::test]
async fn connect_refused_is_502_with_openai_error_json() {
    // A port bound but not listening: connects are refused, and no test
    // running in parallel can be handed the port.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let dead = socket.local_addr().unwrap();
    let mut rig = Rig::start(
        |_| unreachable!("nothing should reach the live upstream"),
        move |t, _| t.route("openai", "/", &format!("http://{dead}"), "openai"),
    )
    .await;
    let t0 = Instant::now();
    let got = rig.chat("m-502", true).await;
    assert_eq!(
        got.status,
        502,
        "connection refused → 502; body {:?}",
        got.text()
    );
    assert!(
        t0.elapsed() < Duration::from_secs(5),
        "refusal should be reported quickly, took {:?}",
        t0.elapsed()
    );
    let ct = got
        .headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    assert!(
        ct.starts_with("application/json"),
        "502 body is JSON, content-type was {ct:?}"
    );
    let v = got.json();
    let err = &v["error"];
    assert!(
        err["message"].is_string(),
        "error.message is a string in {v}"
    );
    assert!(err["type"].is_string(), "error.type is a string in {v}");
    assert_eq!(err["code"], "upstream_unreachable", "error.code in {v}");
    let span = rig.finish("chat m-502").await;
    span.assert_outcome_is("upstream_error");
    assert_eq!(
        span.str(ERROR_TYPE),
        "upstream_unreachable",
        "error.type is the JSON body's code"
    );
}

#[tokio::test]
async fn collector_down_costs_no_latency() {
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    for protocol in ["grpc", "http/protobuf"] {
        let up =
            support::upstream::Upstream::fixed(script::openai_chat_json("m", "ok", (1, 1))).await;
        let toml = support::proxy::Toml::new()
            .route("openai", "/", &up.url(), "openai")
            .otlp(&format!("http://{dead}"), protocol);
        let proxy = support::proxy::InProc::start(&toml).await;
        let c = client::http1();
        for i in 0..10 {
            let t0 = Instant::now();
            let req = Req::post_json(
                proxy.addr,
                CHAT,
                script::openai_request("m-down", false, None),
            );
            let got = client::fetch(&c, &req).await;
            assert_eq!(
                got.status, 200,
                "{protocol}: request {i} with the collector down"
            );
            assert!(
                t0.elapsed() < Duration::from_millis(500),
                "{protocol}: request {i} took {:?} with the collector down; telemetry must not block",
                t0.elapsed()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let t0 = Instant::now();
        proxy.shutdown().await;
        assert!(
            t0.elapsed() < STEP_TIMEOUT,
            "{protocol}: shutdown with a dead collector should be bounded, took {:?}",
            t0.elapsed()
        );
    }
}
