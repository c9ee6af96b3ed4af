//! Slow and stalled upstreams, end to end (scripted upstream, in-process
//! proxy, real OTLP receiver).
//!
//! Guarantees proven here:
//! * An upstream that stalls mid-stream is cut `upstream.idle_timeout` after
//!   its last byte: the client sees the stream break, the upstream request is
//!   cancelled, and the one span has outcome `upstream_timeout`
//!   (`error.type = upstream_idle_timeout`) with the tokens seen before the stall.
//! * An upstream that sends no response head within `upstream.idle_timeout`
//!   gets the client a 504 with an OpenAI-shaped error, outcome `upstream_timeout`.
//! * `upstream.total_timeout` cuts a stream that keeps trickling, outcome
//!   `upstream_timeout` (`error.type = upstream_timeout`).
//! * With the default configuration (no idle or total timeout), a long time
//!   to first token (head 3 s late, first token 3 s after that) followed by a
//!   3 s stream is NOT cut; and the timers that are on by default
//!   (`server.header_read_timeout`, `upstream.connect_timeout`,
//!   `upstream.pool_idle_timeout`) do not apply to a response in flight: set
//!   to 1 s each, a 3 s TTFT and a 2 s stream still complete.
#![allow(
    clippy::disallowed_methods,
    reason = "tests time requests and set deadlines with the wall clock"
)]
#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

mod support;

use std::time::{Duration, Instant};

use support::client;
use support::names::*;
use support::otlp::SpanRec;
use support::rig::Rig;
use support::script::{self, StreamSpec};
use support::upstream::BodyEnd;
use support::{assert_bytes_eq, within};

use support::CHAT;

#[track_caller]
fn assert_timeout(span: &SpanRec, error_type: &str) {
    span.assert_outcome("upstream_timeout", error_type);
    assert_eq!(span.status_code, 2, "a timeout is a span error");
}

#[tokio::test]
async fn stall_mid_stream_trips_idle_timeout_as_upstream_timeout() {
    let spec = StreamSpec::tokens(6, Duration::ZERO, Duration::from_millis(5));
    let reply = script::openai_hang_after(&spec, 2);
    let mut rig = Rig::openai_with(reply, "", &[("upstream", "idle_timeout", "\"500ms\"")]).await;
    let t0 = Instant::now();
    let got = rig.chat("m-stall", true).await;
    let took = t0.elapsed();
    assert!(
        took >= Duration::from_millis(400) && took < Duration::from_secs(4),
        "the stream should be cut ~0.5 s after going silent, took {took:?}"
    );
    assert!(
        got.error.is_some(),
        "the client sees the stream break off, not a clean end: {:?}",
        got.text()
    );
    assert!(
        got.text().contains("tok1"),
        "tokens before the stall reached the client"
    );
    let end = rig.up.only().await.wait_end(Duration::from_secs(3)).await;
    assert_eq!(
        end.map(|e| e.0),
        Some(BodyEnd::Cancelled),
        "the proxy drops the stalled upstream stream"
    );
    let span = rig.finish("chat m-stall").await;
    assert_timeout(&span, "upstream_idle_timeout");
    assert_eq!(
        span.num(OUTPUT_TOKENS),
        2.0,
        "the 2 tokens before the stall"
    );
}

#[tokio::test]
async fn silent_upstream_before_head_is_504_upstream_timeout() {
    let reply = script::openai_chat_json("m", "late", (1, 1)).head_delay(Duration::from_secs(4));
    let mut rig = Rig::openai_with(reply, "", &[("upstream", "idle_timeout", "\"500ms\"")]).await;
    let t0 = Instant::now();
    let got = rig.chat("m-504", false).await;
    assert_eq!(
        got.status,
        504,
        "an upstream silent past idle_timeout → 504; body {:?}",
        got.text()
    );
    assert!(
        t0.elapsed() < Duration::from_secs(3),
        "504 should come after ~0.5 s, took {:?}",
        t0.elapsed()
    );
    assert_eq!(
        got.json()["error"]["code"],
        "upstream_timeout",
        "504 body is an OpenAI-shaped error with the code"
    );
    let span = rig.finish("chat m-504").await;
    assert_timeout(&span, "upstream_timeout");
    assert_eq!(span.num("http.response.status_code"), 504.0);
}

#[tokio::test]
async fn total_timeout_cuts_a_trickling_stream_as_upstream_timeout() {
    let spec = StreamSpec::tokens(50, Duration::ZERO, Duration::from_millis(100));
    let reply = script::openai_chat_sse(&spec);
    let mut rig = Rig::openai_with(reply, "", &[("upstream", "total_timeout", "\"1s\"")]).await;
    let t0 = Instant::now();
    let got = rig.chat("m-total", true).await;
    let took = t0.elapsed();
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(4),
        "total_timeout = 1s should cut the 5 s stream after ~1 s, took {took:?}"
    );
    assert!(got.error.is_some(), "the client sees the stream break off");
    let span = rig.finish("chat m-total").await;
    assert_timeout(&span, "upstream_timeout");
    let n = span.num(OUTPUT_TOKENS);
    assert!(
        (3.0..50.0).contains(&n),
        "partial output tokens counted before the cut, got {n}"
    );
}

/// Send a stream whose head comes `head` late and first token `ttft` after
/// that, then `tokens` tokens `gap` apart; assert it completes byte-exact
/// and that the span saw the whole wait.
async fn long_generation_completes(
    settings: &[(&str, &str, &str)],
    model: &str,
    head: Duration,
    ttft: Duration,
    tokens: usize,
    gap: Duration,
) {
    let spec = StreamSpec::tokens(tokens, ttft, gap);
    let reply = script::openai_chat_sse(&spec).head_delay(head);
    let want = reply.body_bytes();
    let mut rig = Rig::openai_with(reply, "", settings).await;
    let req = rig.post(CHAT, script::openai_request(model, true, None));
    let limit = head + ttft + gap * tokens as u32 + Duration::from_secs(10);
    let got = within(limit, "the long generation", async {
        let (resp, t0) = client::send(&rig.client, &req).await;
        client::read_all(resp, t0, limit).await
    })
    .await;
    assert_eq!(got.status, 200);
    assert!(
        got.error.is_none(),
        "{model}: the stream was cut: {:?}",
        got.error
    );
    assert_bytes_eq(model, &got.body, &want);
    let first = got.first_containing("tok0").unwrap();
    assert!(first >= head + ttft, "{model}: first token after {first:?}");
    let span = rig.finish(&format!("chat {model}")).await;
    assert_eq!(span.str(OUTCOME), "complete", "{model}: {:#?}", span.attrs);
    assert_eq!(span.num(OUTPUT_TOKENS), tokens as f64);
    let ttft_seen = span.num(TTFC);
    assert!(
        ttft_seen >= (head + ttft).as_secs_f64(),
        "{model}: TTFT {ttft_seen} s covers the whole wait"
    );
}

#[tokio::test]
async fn long_ttft_and_long_stream_are_not_cut_by_default() {
    long_generation_completes(
        &[],
        "m-long-default",
        Duration::from_secs(3),
        Duration::from_secs(3),
        30,
        Duration::from_millis(100),
    )
    .await;
}

#[tokio::test]
async fn default_on_timers_do_not_apply_to_a_response_in_flight() {
    let one = "\"1s\"";
    long_generation_completes(
        &[
            ("server", "header_read_timeout", one),
            ("upstream", "connect_timeout", one),
            ("upstream", "pool_idle_timeout", one),
        ],
        "m-long-short-timers",
        Duration::from_millis(1500),
        Duration::from_millis(1500),
        20,
        Duration::from_millis(100),
    )
    .await;
}
