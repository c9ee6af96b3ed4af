//! A client that goes away, end to end (scripted upstream, in-process proxy,
//! real OTLP receiver).
//!
//! Guarantees proven here:
//! * **Cancel** (the default, `on_client_disconnect = "cancel"`): whether the
//!   client leaves before the response head, in the middle of the stream, or
//!   right after the last content chunk (before the usage chunk and
//!   `[DONE]`), the upstream sees its connection close within a second, and
//!   exactly one span is exported with outcome `client_cancelled` and the
//!   token counts seen up to then.
//! * **Drain** (`on_client_disconnect = "drain"`): when the client leaves
//!   mid-stream, tokentap reads the upstream body to its end in the
//!   background, so the one `client_cancelled` span carries the exact usage
//!   the upstream sent after the client left (`error.type =
//!   client_cancelled_drained`); the drain is counted while it runs, stops at
//!   `drain_timeout` (then the upstream is cancelled), and does not hold up
//!   shutdown past `server.shutdown_grace`.
#![allow(
    clippy::disallowed_methods,
    reason = "tests time requests and set deadlines with the wall clock"
)]
#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

mod support;

use std::time::{Duration, Instant};

use support::client::{self, HttpClient};
use support::names::*;
use support::otlp::SpanRec;
use support::rig::Rig;
use support::script::{self, StreamSpec};
use support::upstream::{BodyEnd, Exchange, Reply, Step};
use support::within;

use support::CHAT;

/// How soon the upstream must see a cancelled request go away.
const CANCEL_WITHIN: Duration = Duration::from_secs(1);

#[track_caller]
fn assert_cancelled(span: &SpanRec, error_type: &str) {
    span.assert_outcome("client_cancelled", error_type);
}

/// Wait (bounded by `limit`) until `n` drains run.
async fn wait_drains(rig: &Rig, n: usize, limit: Duration) {
    let running = rig.proxy.running().unwrap();
    within(limit, &format!("{n} drain(s) counted"), async {
        while running.drains_active() != n {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
}

/// An OpenAI stream of `n` tokens `gap` apart whose finish chunk, usage
/// chunk `(input, output)` and `[DONE]` come `pause` after the last content chunk.
fn paused_before_usage(n: usize, gap: Duration, pause: Duration, usage: (u64, u64)) -> Reply {
    let spec = StreamSpec::tokens(n, Duration::ZERO, gap).with_usage(usage.0, usage.1);
    let mut r = script::openai_chat_sse(&spec);
    // The script ends with: finish chunk, usage chunk, [DONE].
    let at = r.steps.len() - 3;
    r.steps.insert(at, Step::Sleep(pause));
    r
}

/// Send a streaming chat request for `model` and read until `needle`; the
/// response body is returned still open.
async fn stream_until(
    rig: &Rig,
    c: &HttpClient,
    model: &str,
    needle: &str,
) -> hyper::body::Incoming {
    let req = rig.post(CHAT, script::openai_request(model, true, None));
    let (resp, _) = client::send(c, &req).await;
    assert_eq!(resp.status(), 200, "{model}: stream head");
    let mut body = resp.into_body();
    client::read_until(&mut body, needle).await;
    body
}

/// The upstream saw the request's connection close within `CANCEL_WITHIN`
/// of `left` (the moment the client went away).
async fn assert_upstream_closed(ex: &Exchange, left: Instant, what: &str) {
    let at = ex.wait_conn_closed(Duration::from_secs(5)).await;
    let at = at.unwrap_or_else(|| {
        panic!("{what}: upstream connection still open 5 s after the client went away")
    });
    let lag = at.saturating_duration_since(left);
    eprintln!("{what}: the upstream saw its connection close {lag:?} after the client left");
    assert!(
        lag < CANCEL_WITHIN,
        "{what}: upstream saw its connection close {lag:?} after the client left, want < {CANCEL_WITHIN:?}"
    );
}

#[tokio::test]
async fn cancel_before_response_head_closes_upstream_and_is_recorded() {
    // The upstream has the request but answers only after 30 s.
    let reply = script::openai_chat_sse(&StreamSpec::tokens(
        3,
        Duration::ZERO,
        Duration::from_millis(5),
    ))
    .head_delay(Duration::from_secs(30));
    let mut rig = Rig::openai(reply).await;
    let c = client::http1();
    let req = rig.post(CHAT, script::openai_request("m-gone-head", true, None));
    let ex = tokio::select! {
        (resp, _) = client::send(&c, &req) => {
            panic!("the response head should not arrive, got {}", resp.status())
        }
        ex = rig.up.nth(1) => ex,
    };
    // The request future is dropped by the select; closing the client too.
    let left = Instant::now();
    drop(c);
    assert_upstream_closed(&ex, left, "before head").await;
    assert_eq!(ex.sent(), b"", "no body was sent before the head");
    let span = rig.finish("chat m-gone-head").await;
    assert_cancelled(&span, "client_cancelled");
    assert!(
        !span.attrs.contains_key(OUTPUT_TOKENS),
        "no output tokens before the head: {:#?}",
        span.attrs
    );
    rig.assert_no_active_streams();
}

#[tokio::test]
async fn cancel_mid_stream_closes_upstream_and_is_recorded() {
    for h2 in [false, true] {
        let spec = StreamSpec::tokens(50, Duration::ZERO, Duration::from_millis(10));
        let mut rig = Rig::openai(script::openai_hang_after(&spec, 3)).await;
        let c = if h2 { client::h2c() } else { client::http1() };
        let model = if h2 { "m-cancel-h2" } else { "m-cancel-h1" };
        let body = stream_until(&rig, &c, model, "tok2").await;
        let left = Instant::now();
        drop(body);
        drop(c);
        let ex = rig.up.only().await;
        let end = ex.wait_end(Duration::from_secs(3)).await;
        let (how, _) = end.unwrap_or_else(|| {
            panic!("h2={h2}: upstream stream still open 3 s after the client went away: the proxy must cancel it")
        });
        assert_eq!(how, BodyEnd::Cancelled, "h2={h2}: upstream body end");
        assert_upstream_closed(&ex, left, &format!("mid-stream h2={h2}")).await;
        let span = rig.finish(&format!("chat {model}")).await;
        assert_cancelled(&span, "client_cancelled");
        assert_eq!(
            span.num(OUTPUT_TOKENS),
            3.0,
            "h2={h2}: partial output tokens (3 content chunks)"
        );
    }
}

#[tokio::test]
async fn cancel_after_last_content_chunk_closes_upstream_before_usage() {
    let reply = paused_before_usage(
        4,
        Duration::from_millis(10),
        Duration::from_secs(5),
        (21, 4),
    );
    let mut rig = Rig::openai_with(reply, "on_client_disconnect = \"cancel\"", &[]).await;
    let c = client::http1();
    let body = stream_until(&rig, &c, "m-gone-last", "tok3").await;
    let left = Instant::now();
    drop(body);
    drop(c);
    let ex = rig.up.only().await;
    assert_upstream_closed(&ex, left, "after the last content chunk").await;
    assert_eq!(
        ex.end(),
        Some(BodyEnd::Cancelled),
        "the upstream body was cut before its usage chunk"
    );
    let sent = String::from_utf8_lossy(&ex.sent()).into_owned();
    assert!(
        !sent.contains("\"usage\"") && !sent.contains("[DONE]"),
        "the usage chunk must not have been sent: {sent:?}"
    );
    let span = rig.finish("chat m-gone-last").await;
    assert_cancelled(&span, "client_cancelled");
    assert_eq!(span.num(OUTPUT_TOKENS), 4.0, "all 4 content chunks counted");
    assert_eq!(
        span.attr(ESTIMATED).as_bool(),
        Some(true),
        "no usage arrived: counts are estimates"
    );
    assert!(
        !span.attrs.contains_key(INPUT_TOKENS),
        "input tokens come only with the usage chunk"
    );
}

#[tokio::test]
async fn drain_reads_the_usage_sent_after_the_client_left() {
    let pause = Duration::from_millis(1500);
    let reply = paused_before_usage(4, Duration::from_millis(10), pause, (123, 456));
    let mut rig = Rig::openai_with(reply, "on_client_disconnect = \"drain\"", &[]).await;
    let c = client::http1();
    let body = stream_until(&rig, &c, "m-drain", "tok3").await;
    drop(body);
    drop(c);
    // Counted while it runs (the usage is still 1.5 s away).
    wait_drains(&rig, 1, Duration::from_secs(1)).await;
    let ex = rig.up.only().await;
    let end = ex.wait_end(Duration::from_secs(10)).await.map(|e| e.0);
    assert_eq!(
        end,
        Some(BodyEnd::Completed),
        "the drain reads the upstream body to its end"
    );
    let sent = String::from_utf8_lossy(&ex.sent()).into_owned();
    assert!(
        sent.contains("\"completion_tokens\":456") && sent.ends_with("data: [DONE]\n\n"),
        "the upstream sent its usage and [DONE] after the client left: {sent:?}"
    );
    wait_drains(&rig, 0, Duration::from_secs(5)).await;
    let span = rig.finish("chat m-drain").await;
    assert_cancelled(&span, "client_cancelled_drained");
    assert_eq!(span.num(OUTPUT_TOKENS), 456.0, "exact output tokens");
    assert_eq!(span.num(INPUT_TOKENS), 123.0, "exact input tokens");
    assert_eq!(
        span.attr(ESTIMATED).as_bool(),
        Some(false),
        "provider-reported usage"
    );
    let duration = Duration::from_nanos(span.end_ns - span.start_ns);
    assert!(
        duration >= pause,
        "the span lasts until the drain ended ({duration:?}), past the {pause:?} pause"
    );
    rig.assert_no_active_streams();
}

#[tokio::test]
async fn drain_stops_at_drain_timeout_and_cancels_upstream() {
    let spec = StreamSpec::tokens(50, Duration::ZERO, Duration::from_millis(10));
    let reply = script::openai_hang_after(&spec, 3);
    let extra = "on_client_disconnect = \"drain\"\ndrain_timeout = \"1s\"";
    let mut rig = Rig::openai_with(reply, extra, &[]).await;
    let c = client::http1();
    let body = stream_until(&rig, &c, "m-drain-bound", "tok2").await;
    let left = Instant::now();
    drop(body);
    drop(c);
    let ex = rig.up.only().await;
    let end = ex.wait_end(Duration::from_secs(6)).await;
    let (how, at) = end.unwrap_or_else(|| panic!("the drain did not stop at drain_timeout"));
    assert_eq!(
        how,
        BodyEnd::Cancelled,
        "the upstream is cancelled at the bound"
    );
    let lag = at.saturating_duration_since(left);
    assert!(
        lag >= Duration::from_millis(800) && lag < Duration::from_secs(4),
        "the drain kept the upstream for ~1 s after the client left, took {lag:?}"
    );
    let span = rig.finish("chat m-drain-bound").await;
    assert_cancelled(&span, "client_cancelled_drain_timeout");
    assert_eq!(span.num(OUTPUT_TOKENS), 3.0, "partial counts at the bound");
}

#[tokio::test]
async fn drain_does_not_delay_shutdown_past_the_grace_period() {
    let spec = StreamSpec::tokens(50, Duration::ZERO, Duration::from_millis(10));
    let reply = script::openai_hang_after(&spec, 3);
    let extra = "on_client_disconnect = \"drain\"\ndrain_timeout = \"60s\"";
    let mut rig = Rig::openai_with(reply, extra, &[("server", "shutdown_grace", "\"1s\"")]).await;
    let c = client::http1();
    let body = stream_until(&rig, &c, "m-drain-stop", "tok2").await;
    drop(body);
    drop(c);
    wait_drains(&rig, 1, Duration::from_secs(2)).await;
    let t0 = Instant::now();
    rig.proxy.stop().await;
    let took = t0.elapsed();
    // Grace (1 s) + the drain's stop (immediate) + telemetry flush.
    assert!(
        took < Duration::from_secs(5),
        "shutdown took {took:?} with a 60 s drain running; the grace period is 1 s"
    );
    let ex = rig.up.only().await;
    let end = ex.wait_end(Duration::from_secs(3)).await.map(|e| e.0);
    assert_eq!(
        end,
        Some(BodyEnd::Cancelled),
        "shutdown cancels the drained upstream"
    );
    let span = rig.finish("chat m-drain-stop").await;
    assert_cancelled(&span, "client_cancelled_drain_shutdown");
    assert_eq!(span.num(OUTPUT_TOKENS), 3.0, "partial counts at shutdown");
}
