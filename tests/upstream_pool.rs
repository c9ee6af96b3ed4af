//! Upstream connection reuse (`src/upstream/conn.rs`): HTTP/1 connections
//! are driven by the response body that reads them and go back to the pool
//! only once that body was read to its end; HTTP/2 connections (by ALPN)
//! are shared.
//!
//! - `sequential_http1_requests_share_one_connection`: streamed and whole
//!   responses, one after another, all travel on one upstream connection,
//!   byte for byte.
//! - `concurrent_streams_open_connections_that_are_reused`: a second wave
//!   of concurrent streams opens no connection the first did not.
//! - `each_serving_thread_keeps_its_own_connections`: two client
//!   connections land on different serving threads, and each thread reuses
//!   its own upstream connection.
//! - `pool_max_idle_per_host_zero_never_reuses`: the key is honoured.
//! - `idle_connections_are_closed_after_pool_idle_timeout`: the upstream
//!   sees an idle connection closed once the timeout passed, and the next
//!   request opens a new one.
//! - `a_cancelled_stream_never_returns_its_connection`: the client leaves
//!   mid-stream, the upstream sees that connection close, and the next
//!   request gets a fresh connection and a whole answer.
//! - `an_h2_upstream_carries_every_request_on_one_connection`: sequential
//!   and concurrent requests to a TLS upstream that negotiates h2 share one
//!   TLS handshake.
#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use support::client::{self, Req};
use support::faulty::{self, H2Act};
use support::proxy::{InProc, Scratch, Toml, q};
use support::script::{self, StreamSpec};
use support::tls::{TestCa, TlsUpstream};
use support::upstream::{Exchange, Reply, Upstream};
use support::{STEP_TIMEOUT, assert_bytes_eq, within};

use support::CHAT;

fn stream_reply(tokens: usize, gap: Duration) -> Reply {
    script::openai_chat_sse(&StreamSpec::tokens(tokens, Duration::ZERO, gap))
}

/// Streams for requests that ask for one, a JSON answer otherwise.
fn answer(ex: &Exchange) -> Reply {
    if ex.json()["stream"] == true {
        stream_reply(20, Duration::ZERO)
    } else {
        script::openai_chat_json("m", "whole answer", (3, 2))
    }
}

fn chat(proxy: &InProc, model: &str, stream: bool) -> Req {
    Req::post_json(
        proxy.addr,
        CHAT,
        script::openai_request(model, stream, None),
    )
}

#[tokio::test]
async fn sequential_http1_requests_share_one_connection() {
    let up = Upstream::start(answer).await;
    // One serving thread: the client may open a second connection, which
    // another thread (with a pool of its own) would serve.
    let proxy = InProc::start(&Toml::openai(&up.url()).set("server", "threads", "1")).await;
    let c = client::http1();
    for i in 0..6 {
        let stream = i % 2 == 0;
        let got = client::fetch(&c, &chat(&proxy, &format!("m{i}"), stream)).await;
        assert_eq!(got.status, 200, "request {i}: {}", got.text());
        assert!(got.error.is_none(), "request {i}: {:?}", got.error);
        let ex = up.nth(i + 1).await;
        assert_bytes_eq(&format!("request {i}"), &got.body, &ex.sent());
    }
    assert_eq!(up.exchanges().len(), 6);
    assert_eq!(
        up.connections(),
        1,
        "every request reused the first connection"
    );
}

#[tokio::test]
async fn concurrent_streams_open_connections_that_are_reused() {
    // Slow enough that the streams of a wave overlap.
    let up = Upstream::start(|_: &Exchange| stream_reply(5, Duration::from_millis(20))).await;
    // One serving thread: with more, which client connections a wave reuses
    // decides which thread's pool it draws on.
    let proxy = InProc::start(&Toml::openai(&up.url()).set("server", "threads", "1")).await;
    let c = client::http1();
    let wave = |n: usize| {
        let tasks: Vec<_> = (0..n)
            .map(|i| {
                let (c, req) = (c.clone(), chat(&proxy, &format!("w{i}"), true));
                tokio::spawn(async move { client::fetch(&c, &req).await })
            })
            .collect();
        async move {
            for t in tasks {
                let got = t.await.unwrap();
                assert_eq!(got.status, 200, "{}", got.text());
                assert!(got.error.is_none(), "{:?}", got.error);
                assert!(got.text().ends_with("data: [DONE]\n\n"), "{}", got.text());
            }
        }
    };
    wave(8).await;
    let first = up.connections();
    assert!(
        (2..=8).contains(&first),
        "8 overlapping streams used {first} connections"
    );
    wave(first).await;
    assert_eq!(
        up.connections(),
        first,
        "the second wave reused the first's connections"
    );
    assert_eq!(up.exchanges().len(), 8 + first);
}

#[tokio::test]
async fn each_serving_thread_keeps_its_own_connections() {
    let up = Upstream::start(answer).await;
    let toml = Toml::openai(&up.url()).set("server", "threads", "2");
    let proxy = InProc::start(&toml).await;
    // Two client connections, open at once: the second goes to the thread
    // the first is not on, and each thread pools its upstream connection.
    let (a, b) = (client::http1(), client::http1());
    for i in 0..8 {
        let c = if i % 2 == 0 { &a } else { &b };
        let got = client::fetch(c, &chat(&proxy, &format!("m{i}"), i % 3 == 0)).await;
        assert_eq!(got.status, 200, "request {i}: {}", got.text());
        assert_bytes_eq(
            &format!("request {i}"),
            &got.body,
            &up.nth(i + 1).await.sent(),
        );
    }
    assert_eq!(
        up.connections(),
        2,
        "one upstream connection per serving thread, each reused"
    );
}

#[tokio::test]
async fn pool_max_idle_per_host_zero_never_reuses() {
    let up = Upstream::start(answer).await;
    let toml = Toml::openai(&up.url()).set("upstream", "pool_max_idle_per_host", "0");
    let proxy = InProc::start(&toml).await;
    let c = client::http1();
    for i in 0..3 {
        let got = client::fetch(&c, &chat(&proxy, &format!("m{i}"), i == 1)).await;
        assert_eq!(got.status, 200, "{}", got.text());
    }
    assert_eq!(up.connections(), 3);
}

#[tokio::test]
async fn idle_connections_are_closed_after_pool_idle_timeout() {
    let up = Upstream::start(answer).await;
    let toml = Toml::openai(&up.url()).set("upstream", "pool_idle_timeout", &q("300ms"));
    let proxy = InProc::start(&toml).await;
    let c = client::http1();
    let got = client::fetch(&c, &chat(&proxy, "first", true)).await;
    assert_eq!(got.status, 200, "{}", got.text());
    let first = up.nth(1).await;
    assert!(
        first.wait_conn_closed(STEP_TIMEOUT).await.is_some(),
        "the idle connection was closed after pool_idle_timeout"
    );
    let got = client::fetch(&c, &chat(&proxy, "second", false)).await;
    assert_eq!(got.status, 200, "{}", got.text());
    assert_eq!(up.connections(), 2);
}

#[tokio::test]
async fn a_cancelled_stream_never_returns_its_connection() {
    let up = Upstream::start(|ex: &Exchange| {
        if ex.json()["model"] == "leaves" {
            stream_reply(50, Duration::from_millis(50))
        } else {
            answer(ex)
        }
    })
    .await;
    let proxy = InProc::start(&Toml::openai(&up.url())).await;
    let c = client::http1();
    let (res, _) = client::send(&c, &chat(&proxy, "leaves", true)).await;
    let mut body = res.into_body();
    client::read_until(&mut body, "tok1 ").await;
    drop(body);
    let left = up.nth(1).await;
    assert!(
        left.wait_conn_closed(STEP_TIMEOUT).await.is_some(),
        "the upstream saw the cancelled stream's connection close"
    );
    let got = client::fetch(&c, &chat(&proxy, "next", true)).await;
    assert_eq!(got.status, 200, "{}", got.text());
    assert_bytes_eq("after the cancel", &got.body, &up.nth(2).await.sent());
    assert_eq!(
        up.connections(),
        2,
        "the cancelled connection was not reused"
    );
}

#[tokio::test]
async fn an_h2_upstream_carries_every_request_on_one_connection() {
    let ca = TestCa::new();
    let scratch = Scratch::new("pool-h2");
    let body = stream_reply(10, Duration::ZERO).body_bytes();
    let acts = vec![
        H2Act::Head(
            200,
            vec![("content-type".into(), "text/event-stream".into())],
        ),
        H2Act::Data(Bytes::from(body.clone())),
        H2Act::End,
    ];
    let requests = Arc::new(AtomicUsize::new(0));
    let r = requests.clone();
    let up = TlsUpstream::start(ca.server_config(&["localhost"], &[b"h2"]), 0, move |tls| {
        faulty::serve_h2(tls, acts.clone(), r.clone())
    })
    .await;
    let ca_file = scratch.write("ca.pem", ca.pem());
    let toml = Toml::openai(&up.url("localhost")).set(
        "upstream",
        "ca_file",
        &q(&ca_file.display().to_string()),
    );
    // One serving thread: each keeps its own HTTP/2 connection per host.
    let proxy = InProc::start(&toml.set("server", "threads", "1")).await;
    let c = client::http1();
    for i in 0..3 {
        let got = client::fetch(&c, &chat(&proxy, &format!("s{i}"), true)).await;
        assert_eq!(got.status, 200, "{}", got.text());
        assert_bytes_eq("h2 stream", &got.body, &body);
    }
    let tasks: Vec<_> = (0..4)
        .map(|i| {
            let (c, req) = (c.clone(), chat(&proxy, &format!("c{i}"), true));
            tokio::spawn(async move { client::fetch(&c, &req).await })
        })
        .collect();
    within(STEP_TIMEOUT, "4 concurrent h2 streams", async {
        for t in tasks {
            let got = t.await.unwrap();
            assert_eq!(got.status, 200, "{}", got.text());
            assert_bytes_eq("concurrent h2 stream", &got.body, &body);
        }
    })
    .await;
    assert_eq!(requests.load(Ordering::SeqCst), 7);
    assert_eq!(
        up.handshakes(),
        1,
        "one TLS connection carried all 7 streams"
    );
    assert_eq!(up.alpn(), [Some("h2".to_owned())]);
}
