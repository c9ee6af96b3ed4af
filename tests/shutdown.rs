//! Graceful SIGTERM of the real binary, beyond what `config_cli.rs` covers
//! (listener closed, in-flight streams finished or cut at the grace period).
//! What each test guarantees:
//!
//! - `sigterm_turns_readyz_unready_while_streams_drain`: from SIGTERM until
//!   the drain ends the admin listener keeps answering, `/readyz` says 503
//!   (so a load balancer stops routing here) while `/healthz` stays 200, and
//!   the stream in flight meanwhile still completes byte-identical.
//! - `sigterm_flushes_telemetry_finished_during_the_drain`: with periodic
//!   export pushed out to an hour, a request that finishes during the drain
//!   reaches the OTLP receiver (its span and its `tokentap.requests` point)
//!   before the process exits, over gRPC and over HTTP/protobuf: the last
//!   telemetry is flushed at exit, not lost.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

mod support;

use std::net::SocketAddr;
use std::time::Duration;

use support::client::{self, Req};
use support::otlp::Collector;
use support::proxy::{Bin, Toml, q};
use support::script::{self, StreamSpec};
use support::upstream::{BodyEnd, Upstream};
use support::{STEP_TIMEOUT, assert_bytes_eq, within};

use support::CHAT;

async fn status(addr: SocketAddr, path: &str) -> u16 {
    let got = client::fetch(&client::http1(), &Req::get(addr, path)).await;
    got.status.as_u16()
}

#[tokio::test]
async fn sigterm_turns_readyz_unready_while_streams_drain() {
    // 40 tokens 75 ms apart: ~3 s of stream, SIGTERM right after it starts.
    let spec = StreamSpec::tokens(40, Duration::ZERO, Duration::from_millis(75));
    let reply = script::openai_chat_sse(&spec);
    let want = reply.body_bytes();
    let up = Upstream::fixed(reply).await;
    let toml = Toml::openai(&up.url())
        .top("admin_listen", &q("127.0.0.1:0"))
        .set("server", "shutdown_grace", &q("20s"));
    let mut bin = Bin::start(&toml, &[], &[]).await;
    let admin = bin.admin_addr().await;
    assert_eq!(status(admin, "/readyz").await, 200, "ready before SIGTERM");

    let req = Req::post_json(
        bin.addr,
        CHAT,
        script::openai_request("m-ready", true, None),
    );
    let (resp, t0) = client::send(&client::http1(), &req).await;
    let reader = tokio::spawn(client::read_all(resp, t0, Duration::from_secs(30)));
    up.only().await;
    bin.sigterm();

    let unready = async {
        while status(admin, "/readyz").await != 503 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    within(STEP_TIMEOUT, "/readyz to answer 503 after SIGTERM", unready).await;
    assert_eq!(
        up.only().await.end(),
        None,
        "/readyz turned 503 while the stream was still in flight"
    );
    assert_eq!(status(admin, "/healthz").await, 200, "alive while draining");

    let got = within(STEP_TIMEOUT, "the draining stream", reader)
        .await
        .unwrap();
    assert!(got.error.is_none(), "stream cut: {:?}", got.error);
    assert_bytes_eq("stream finished during the drain", &got.body, &want);
    let exit = bin.wait_exit(STEP_TIMEOUT).await;
    assert!(
        exit.success(),
        "exit 0 after the drain; output:\n{}",
        bin.output()
    );
}

#[tokio::test]
async fn sigterm_flushes_telemetry_finished_during_the_drain() {
    for protocol in ["grpc", "http/protobuf"] {
        flush_at_exit(protocol).await;
    }
}

async fn flush_at_exit(protocol: &str) {
    let spec = StreamSpec::tokens(20, Duration::ZERO, Duration::from_millis(50));
    let up = Upstream::fixed(script::openai_chat_sse(&spec)).await;
    let col = Collector::start().await;
    // Nothing is exported on a schedule while the test runs: whatever
    // arrives was sent by the flush at exit.
    let toml = Toml::openai(&up.url()).otlp(&col.endpoint(), protocol).set(
        "telemetry",
        "metrics_export_interval",
        &q("1h"),
    );
    let mut bin = Bin::start(&toml, &[], &[("OTEL_BSP_SCHEDULE_DELAY", "3600000")]).await;

    let model = "m-flush";
    let req = Req::post_json(bin.addr, CHAT, script::openai_request(model, true, None));
    let (resp, _) = client::send(&client::http1(), &req).await;
    let mut body = resp.into_body();
    client::read_until(&mut body, "tok1").await;
    assert!(
        col.spans().is_empty() && col.metric_points().is_empty(),
        "{protocol}: nothing exported before SIGTERM (test premise)"
    );
    bin.sigterm();
    within(
        STEP_TIMEOUT,
        "the draining stream",
        http_body_util::BodyExt::collect(body),
    )
    .await
    .unwrap();
    let exit = bin.wait_exit(STEP_TIMEOUT).await;
    assert!(
        exit.success(),
        "{protocol}: exit 0; output:\n{}",
        bin.output()
    );
    assert_eq!(
        up.only().await.end(),
        Some(BodyEnd::Completed),
        "{protocol}: the stream finished during the drain"
    );

    // Checked once, right after exit: no waiting for a late export.
    let name = format!("chat {model}");
    assert!(
        col.spans().iter().any(|s| s.name == name),
        "{protocol}: the span of the request finished during the drain reached the receiver \
         before exit; spans: {:?}",
        col.spans().iter().map(|s| &s.name).collect::<Vec<_>>()
    );
    let requests = col.latest("tokentap.requests");
    assert!(
        requests
            .iter()
            .any(|p| p.attr_str("gen_ai.request.model") == Some(model) && p.number() >= 1.0),
        "{protocol}: its tokentap.requests point was flushed at exit: {requests:#?}"
    );
}
