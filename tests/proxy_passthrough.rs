//! Byte-exact, unbuffered passthrough through the real server: status,
//! end-to-end headers and body bytes reach the client exactly as the
//! scripted upstream sent them; requests reach the upstream unchanged except
//! for Host and hop-by-hop headers.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

mod support;

use std::time::Duration;

use support::client::{self, Req};
use support::proxy::{InProc, Toml};
use support::script::{self, StreamSpec};
use support::upstream::{BodyEnd, Reply, Upstream};
use support::{assert_bytes_eq, within};

async fn proxy_for(up: &Upstream, provider: &str) -> InProc {
    InProc::start(&Toml::new().route(provider, "/", &up.url(), provider)).await
}

/// An OpenAI chat request for `model` sent to `proxy` on a new HTTP/1.1
/// client, read to its end.
async fn chat(proxy: &InProc, model: &str, stream: bool) -> client::Streamed {
    let body = script::openai_request(model, stream, None);
    let req = Req::post_json(proxy.addr, "/v1/chat/completions", body);
    client::fetch(&client::http1(), &req).await
}

/// The client sees exactly the upstream's status, end-to-end headers and body.
async fn assert_identical(reply: Reply, path: &str, body: Vec<u8>, provider: &str, h2: bool) {
    let want_body = reply.body_bytes();
    let up = Upstream::fixed(reply.clone()).await;
    let proxy = proxy_for(&up, provider).await;
    let c = if h2 { client::h2c() } else { client::http1() };
    let got = client::fetch(&c, &Req::post_json(proxy.addr, path, body)).await;

    // What the upstream actually put on the wire, fetched directly.
    let direct = client::fetch(&client::http1(), &Req::post_json(up.addr, path, Vec::new())).await;
    assert_eq!(got.status.as_u16(), reply.status, "status passes through");
    assert_eq!(
        client::end_to_end(&got.headers),
        client::end_to_end(&direct.headers),
        "end-to-end response headers pass through unchanged (client vs upstream)"
    );
    assert!(
        got.error.is_none(),
        "body should finish cleanly, got error {:?}",
        got.error
    );
    let sent = up.nth(1).await.sent();
    assert_bytes_eq("client body vs bytes the upstream sent", &got.body, &sent);
    assert_bytes_eq("client body vs script", &got.body, &want_body);
    proxy.shutdown().await;
}

#[tokio::test]
async fn openai_stream_is_byte_identical_http1() {
    let spec = StreamSpec::tokens(12, Duration::from_millis(50), Duration::from_millis(5));
    let body = script::openai_request("gpt-4o-mini", true, None);
    assert_identical(
        script::openai_chat_sse(&spec),
        "/v1/chat/completions",
        body,
        "openai",
        false,
    )
    .await;
}

#[tokio::test]
async fn openai_stream_is_byte_identical_h2c() {
    let spec = StreamSpec::tokens(12, Duration::from_millis(50), Duration::from_millis(5));
    let body = script::openai_request("gpt-4o-mini", true, None);
    assert_identical(
        script::openai_chat_sse(&spec),
        "/v1/chat/completions",
        body,
        "openai",
        true,
    )
    .await;
}

#[tokio::test]
async fn anthropic_stream_is_byte_identical() {
    let spec = StreamSpec::tokens(8, Duration::from_millis(30), Duration::from_millis(5))
        .model(script::ANTHROPIC_RESPONSE_MODEL);
    let body = script::anthropic_request("claude-3-5-haiku-latest", true, None);
    assert_identical(
        script::anthropic_sse(&spec),
        "/v1/messages",
        body,
        "anthropic",
        false,
    )
    .await;
}

#[tokio::test]
async fn non_streaming_json_is_byte_identical_with_content_length() {
    let reply = script::openai_chat_json("gpt-4o-mini", "Hello there, friend.", (9, 5));
    let body = script::openai_request("gpt-4o-mini", false, None);
    assert_identical(reply, "/v1/chat/completions", body, "openai", false).await;
}

#[tokio::test]
async fn anthropic_json_is_byte_identical() {
    let reply = script::anthropic_json(script::ANTHROPIC_RESPONSE_MODEL, "Hi!", (12, 3));
    let body = script::anthropic_request("claude-3-5-haiku-latest", false, None);
    assert_identical(reply, "/v1/messages", body, "anthropic", false).await;
}

#[tokio::test]
async fn error_statuses_pass_through_byte_exact() {
    for reply in [
        script::openai_error(
            429,
            "requests",
            "rate_limit_exceeded",
            "Rate limit reached for gpt-4o-mini",
        ),
        script::openai_error(
            500,
            "server_error",
            "internal_error",
            "The server had an error",
        ),
        script::anthropic_error(529, "overloaded_error", "Overloaded"),
    ] {
        let body = script::openai_request("gpt-4o-mini", true, None);
        assert_identical(reply, "/v1/chat/completions", body, "openai", false).await;
    }
}

#[tokio::test]
async fn gzip_body_passes_through_untouched() {
    let spec = StreamSpec::tokens(10, Duration::ZERO, Duration::from_millis(2));
    let plain = script::openai_chat_sse(&spec);
    let compressed = script::gzip(&plain.body_bytes());
    // Sent in three pieces so the proxy's decompressor sees partial input.
    let third = compressed.len() / 3;
    let reply = Reply::new(200)
        .header("content-type", "text/event-stream")
        .header("content-encoding", "gzip")
        .send(compressed[..third].to_vec())
        .sleep(Duration::from_millis(20))
        .send(compressed[third..2 * third].to_vec())
        .sleep(Duration::from_millis(20))
        .send(compressed[2 * third..].to_vec());
    let body = script::openai_request("gpt-4o-mini", true, None);
    assert_identical(reply, "/v1/chat/completions", body, "openai", false).await;
}

#[tokio::test]
async fn slow_trickle_is_byte_identical() {
    let spec = StreamSpec::tokens(6, Duration::ZERO, Duration::ZERO);
    let reply = script::openai_chat_sse(&spec).trickle(7, Duration::from_millis(2));
    let body = script::openai_request("gpt-4o-mini", true, None);
    assert_identical(reply, "/v1/chat/completions", body, "openai", false).await;
}

#[tokio::test]
async fn chunks_are_forwarded_as_they_arrive() {
    // Token k arrives upstream at 300 ms + k*100 ms; a buffering proxy would
    // deliver everything at the end (~1 s).
    let spec = StreamSpec::tokens(5, Duration::from_millis(300), Duration::from_millis(100));
    let up = Upstream::fixed(script::openai_chat_sse(&spec)).await;
    let proxy = proxy_for(&up, "openai").await;
    let got = chat(&proxy, "m", true).await;
    let first = got
        .first_containing("tok0")
        .expect("tok0 reaches the client");
    let last = got
        .first_containing("tok4")
        .expect("tok4 reaches the client");
    assert!(
        first >= Duration::from_millis(280) && first < Duration::from_millis(700),
        "first token should reach the client ~300 ms after the request (scripted TTFT), took {first:?}"
    );
    assert!(
        last - first >= Duration::from_millis(300),
        "tokens should arrive spread out (~400 ms between tok0 and tok4), got {:?}: the proxy buffers",
        last - first
    );
    assert!(
        got.head_after < Duration::from_millis(250),
        "response head should not wait for the first token"
    );
    proxy.shutdown().await;
}

#[tokio::test]
async fn request_reaches_upstream_unchanged_with_prefix_stripped_and_host_rewritten() {
    let up = Upstream::fixed(script::openai_chat_json("gpt-4o-mini", "ok", (1, 1))).await;
    let toml = Toml::new()
        .route("anthropic", "/anthropic", &up.url(), "anthropic")
        .route("openai", "/openai", &format!("{}/base", up.url()), "openai");
    let proxy = InProc::start(&toml).await;
    let body = script::openai_request("gpt-4o-mini", false, Some("u1"));
    let req = Req::post_json(
        proxy.addr,
        "/openai/v1/chat/completions?api-version=2024-06-01&x=%20y",
        body.clone(),
    )
    .header("x-e2e", "kept")
    .header("openai-organization", "org-123")
    .header("authorization", "Bearer sk-passthrough");
    let got = client::fetch(&client::http1(), &req).await;
    assert_eq!(got.status, 200, "request routed: {}", got.text());
    let e = up.only().await;
    assert_eq!(e.method, http::Method::POST);
    assert_eq!(
        e.path_and_query, "/base/v1/chat/completions?api-version=2024-06-01&x=%20y",
        "route prefix `/openai` stripped, upstream base path `/base` prepended, query kept"
    );
    assert_bytes_eq("request body reaching the upstream", &e.body, &body);
    assert_eq!(
        e.header("host").as_deref(),
        Some(up.addr.to_string().as_str()),
        "Host rewritten to the upstream"
    );
    assert_eq!(
        e.header("x-e2e").as_deref(),
        Some("kept"),
        "end-to-end request headers forwarded"
    );
    assert_eq!(e.header("openai-organization").as_deref(), Some("org-123"));
    assert_eq!(
        e.header("authorization").as_deref(),
        Some("Bearer sk-passthrough"),
        "credentials are forwarded to the upstream (only kept out of telemetry)"
    );
    proxy.shutdown().await;
}

#[tokio::test]
async fn hop_by_hop_request_headers_are_not_forwarded() {
    let up = Upstream::fixed(script::openai_chat_json("gpt-4o-mini", "ok", (1, 1))).await;
    let proxy = proxy_for(&up, "openai").await;
    let body = script::openai_request("gpt-4o-mini", false, None);
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: keep-alive, X-Hop-Custom\r\nX-Hop-Custom: drop-me\r\n\
         Keep-Alive: timeout=5\r\nTE: trailers, deflate\r\nUpgrade: example/1\r\n\
         Proxy-Authorization: Basic cHJveHk6c2VjcmV0\r\nProxy-Connection: keep-alive\r\n\
         X-E2E: kept\r\n\r\n",
        proxy.addr,
        body.len()
    );
    let mut raw = head.into_bytes();
    raw.extend_from_slice(&body);
    // Keep-alive connection: the read ends by timeout once the response is in.
    let resp = client::raw_http1(proxy.addr, &raw, Duration::from_millis(1500)).await;
    let (status, _, _) = client::parse_raw_response(&resp);
    assert_eq!(
        status,
        200,
        "raw request served; response: {:?}",
        String::from_utf8_lossy(&resp)
    );
    let e = up.only().await;
    for h in [
        "x-hop-custom",
        "keep-alive",
        "te",
        "upgrade",
        "proxy-authorization",
        "proxy-connection",
    ] {
        assert!(
            e.headers.get(h).is_none(),
            "hop-by-hop header {h:?} must not reach the upstream: {:?}",
            e.headers
        );
    }
    if let Some(c) = e.header("connection") {
        assert!(
            !c.to_ascii_lowercase().contains("x-hop-custom"),
            "client's Connection header forwarded: {c:?}"
        );
    }
    assert_eq!(
        e.header("x-e2e").as_deref(),
        Some("kept"),
        "end-to-end header forwarded"
    );
    assert_bytes_eq("request body", &e.body, &body);
    proxy.shutdown().await;
}

#[tokio::test]
async fn hop_by_hop_response_headers_are_not_forwarded() {
    let reply = script::openai_chat_json("gpt-4o-mini", "ok", (1, 1))
        .header("connection", "x-upstream-hop")
        .header("x-upstream-hop", "drop-me")
        .header("keep-alive", "timeout=5")
        .header("proxy-authenticate", "Basic realm=x")
        .header("x-e2e-resp", "kept");
    let up = Upstream::fixed(reply).await;
    let proxy = proxy_for(&up, "openai").await;
    let got = chat(&proxy, "m", false).await;
    for h in ["x-upstream-hop", "keep-alive", "proxy-authenticate"] {
        assert!(
            got.headers.get(h).is_none(),
            "hop-by-hop response header {h:?} reached the client: {:?}",
            got.headers
        );
    }
    assert_eq!(
        got.headers.get("x-e2e-resp").map(|v| v.as_bytes()),
        Some(&b"kept"[..])
    );
    proxy.shutdown().await;
}

#[tokio::test]
async fn upstream_sees_completed_body_after_a_full_stream() {
    let spec = StreamSpec::tokens(4, Duration::ZERO, Duration::from_millis(5));
    let up = Upstream::fixed(script::openai_chat_sse(&spec)).await;
    let proxy = proxy_for(&up, "openai").await;
    let got = chat(&proxy, "m", true).await;
    assert_eq!(got.status, 200);
    let end = within(
        support::STEP_TIMEOUT,
        "upstream body end",
        up.only().await.wait_end(Duration::from_secs(5)),
    )
    .await;
    assert_eq!(
        end.map(|e| e.0),
        Some(BodyEnd::Completed),
        "the upstream body ran to completion"
    );
    proxy.shutdown().await;
}
