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
//! - `streams_running_past_the_grace_are_recorded_as_cut_by_tokentap`: an
//!   HTTP/1 stream, an HTTP/2 stream and a WebSocket response still running
//!   when the grace ends are each recorded as cut by tokentap's drain
//!   (outcome `shutdown`, `error.type` `shutdown_grace_expired`, on the
//!   span, in `tokentap.requests` and in the access log), never as the
//!   client's or the upstream's; both WebSocket peers get close 1001.
//! - `a_second_sigterm_cuts_at_once`: while draining, a log line every
//!   10 s gives the streams left and the oldest one's age; a second SIGTERM
//!   during a 60 s grace ends the process at once, the stream recorded
//!   `shutdown_forced`.
//! - `streams_shorter_than_the_grace_finish_while_new_work_is_refused`:
//!   during a drain an HTTP/1 and an HTTP/2 stream finish byte for byte,
//!   the HTTP/2 client gets GOAWAY before its stream ends, an idle
//!   keep-alive connection is closed, new connections are refused,
//!   `/readyz` counts the streams left, and a response whose head goes out
//!   during the drain says `Connection: close`.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

mod support;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use support::client::{self, Req};
use support::names::OUTCOME;
use support::otlp::{Collector, SpanRec};
use support::proxy::{Bin, Toml, q};
use support::script::{self, StreamSpec};
use support::upstream::{BodyEnd, Upstream};
use support::ws::ws_connect;
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

/// A WebSocket upstream on 127.0.0.1 that echoes data messages and keeps
/// the close code each session received.
async fn closing_ws_upstream() -> (String, Arc<Mutex<Vec<u16>>>) {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let closes = Arc::new(Mutex::new(Vec::new()));
    let seen = closes.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let seen = seen.clone();
            tokio::spawn(async move {
                let Ok(mut ws) = tokio_tungstenite::accept_async(tcp).await else {
                    return;
                };
                while let Some(Ok(msg)) = ws.next().await {
                    if let Message::Close(frame) = &msg {
                        let code = frame.as_ref().map_or(1005, |f| u16::from(f.code));
                        seen.lock().unwrap().push(code);
                        continue;
                    }
                    // tungstenite answers pings and closes itself.
                    let data = msg.is_text() || msg.is_binary();
                    if data && ws.send(msg).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (format!("http://{addr}"), closes)
}

/// Spans whose `tokentap.outcome` is `outcome`.
fn with_outcome(col: &Collector, outcome: &str) -> Vec<SpanRec> {
    col.spans()
        .into_iter()
        .filter(|s| s.attrs.get(OUTCOME).and_then(|v| v.as_str()) == Some(outcome))
        .collect()
}

/// The shutdown-cut span of `model`, or a panic listing every span.
#[track_caller]
fn cut_span(col: &Collector, model: &str) -> SpanRec {
    let cut = with_outcome(col, "shutdown");
    let found = cut
        .iter()
        .find(|s| s.attr("gen_ai.request.model").as_str() == Some(model));
    match found {
        Some(s) => s.clone(),
        None => panic!(
            "no span of {model} recorded as cut by tokentap; spans: {:#?}",
            col.spans()
                .iter()
                .map(|s| (
                    s.name.clone(),
                    s.attrs
                        .get(OUTCOME)
                        .and_then(|v| v.as_str())
                        .map(str::to_owned)
                ))
                .collect::<Vec<_>>()
        ),
    }
}

#[tokio::test]
async fn streams_running_past_the_grace_are_recorded_as_cut_by_tokentap() {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;
    // 400 tokens 50 ms apart: 20 s of stream, far past the 2 s grace.
    let spec = StreamSpec::tokens(400, Duration::ZERO, Duration::from_millis(50));
    let up = Upstream::fixed(script::openai_chat_sse(&spec)).await;
    let (ws_up, upstream_closes) = closing_ws_upstream().await;
    let col = Collector::start().await;
    let toml = Toml::new()
        .route("ws", "/ws", &ws_up, "openai")
        .route("openai", "/", &up.url(), "openai")
        .otlp(&col.endpoint(), "grpc")
        .set("server", "shutdown_grace", &q("2s"));
    let mut bin = Bin::start(&toml, &[], &[]).await;

    let mut bodies = Vec::new();
    for (model, client) in [("m-cut-h1", client::http1()), ("m-cut-h2", client::h2c())] {
        let req = Req::post_json(bin.addr, CHAT, script::openai_request(model, true, None));
        let (resp, _) = client::send(&client, &req).await;
        let mut body = resp.into_body();
        client::read_until(&mut body, "tok1").await;
        bodies.push((model, body));
    }
    let path = "/ws/v1/realtime?model=gpt-realtime";
    let (mut ws, _) = within(STEP_TIMEOUT, "handshake", ws_connect(bin.addr, path, &[]))
        .await
        .expect("handshake through tokentap");
    // A response asked for and never finished: in flight at the cut.
    let create = Message::text("{\"type\":\"response.create\"}");
    ws.send(create.clone()).await.unwrap();
    let echo = within(STEP_TIMEOUT, "echo", ws.next()).await;
    assert_eq!(echo.unwrap().unwrap(), create, "relayed both ways");

    bin.sigterm();
    let close = within(STEP_TIMEOUT, "close frame at the deadline", ws.next()).await;
    match close {
        Some(Ok(Message::Close(Some(f)))) => {
            assert_eq!(u16::from(f.code), 1001, "the client gets going away")
        }
        other => panic!("expected close 1001 for the client, got {other:?}"),
    }
    for (model, body) in bodies {
        let got = within(
            STEP_TIMEOUT,
            "the cut stream",
            http_body_util::BodyExt::collect(body),
        )
        .await;
        assert!(got.is_err(), "{model}: cut at the grace, not finished");
    }
    let exit = bin.wait_exit(STEP_TIMEOUT).await;
    assert!(exit.success(), "exit 0; output:\n{}", bin.output());
    assert_eq!(
        *upstream_closes.lock().unwrap(),
        vec![1001],
        "the upstream gets going away too, not a TCP cut"
    );

    for model in ["m-cut-h1", "m-cut-h2", "gpt-realtime"] {
        cut_span(&col, model).assert_outcome("shutdown", "shutdown_grace_expired");
    }
    for blamed in ["client_cancelled", "upstream_error"] {
        let wrong = with_outcome(&col, blamed);
        assert!(
            wrong.is_empty(),
            "nothing blamed on the client or the upstream: {:#?}",
            wrong.iter().map(|s| &s.name).collect::<Vec<_>>()
        );
    }
    let requests = col.latest("tokentap.requests");
    let cut: f64 = requests
        .iter()
        .filter(|p| p.attr_str(OUTCOME) == Some("shutdown"))
        .map(|p| p.number())
        .sum();
    assert!(
        cut >= 2.0,
        "tokentap.requests counts the HTTP cuts as outcome shutdown: {requests:#?}"
    );
    let log = bin.output();
    assert!(
        log.contains("cut by drain: server.shutdown_grace ran out"),
        "the access log says the drain cut it:\n{log}"
    );
}

#[tokio::test]
async fn a_second_sigterm_cuts_at_once() {
    // A minute of stream under a minute of grace.
    let spec = StreamSpec::tokens(600, Duration::ZERO, Duration::from_millis(100));
    let up = Upstream::fixed(script::openai_chat_sse(&spec)).await;
    let col = Collector::start().await;
    let toml = Toml::openai(&up.url()).otlp(&col.endpoint(), "grpc").set(
        "server",
        "shutdown_grace",
        &q("60s"),
    );
    let mut bin = Bin::start(&toml, &[], &[]).await;
    let model = "m-forced";
    let req = Req::post_json(bin.addr, CHAT, script::openai_request(model, true, None));
    let (resp, _) = client::send(&client::http1(), &req).await;
    let mut body = resp.into_body();
    client::read_until(&mut body, "tok1").await;

    bin.sigterm();
    bin.wait_output("shutdown signal received; draining", 1)
        .await;
    client::read_until(&mut body, "tok3").await; // still streaming while draining
    // Every 10 s the drain says what it still waits for.
    let progress = async {
        loop {
            let out = bin.output();
            if let Some(line) = out
                .lines()
                .find(|l| l.contains("draining: streams still open"))
            {
                return line.to_owned();
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    let line = within(
        Duration::from_secs(20),
        "the drain's progress line",
        progress,
    )
    .await;
    assert!(
        line.contains("streams=1") && line.contains("oldest=1"),
        "one stream left, about 10 s old: {line}"
    );
    bin.sigterm();
    let exit = bin.wait_exit(STEP_TIMEOUT).await;
    assert!(exit.success(), "exit 0; output:\n{}", bin.output());
    let rest = within(
        STEP_TIMEOUT,
        "the cut stream",
        http_body_util::BodyExt::collect(body),
    )
    .await;
    assert!(rest.is_err(), "cut by the second signal");
    cut_span(&col, model).assert_outcome("shutdown", "shutdown_forced");
}

/// A minimal h2c client on a raw socket: one POST, then every frame the
/// server sends, by type, so the test sees exactly when GOAWAY comes.
mod raw_h2 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    pub(crate) const DATA: u8 = 0x0;
    pub(crate) const HEADERS: u8 = 0x1;
    pub(crate) const SETTINGS: u8 = 0x4;
    const PING: u8 = 0x6;
    pub(crate) const GOAWAY: u8 = 0x7;
    const END_STREAM: u8 = 0x1;
    const END_HEADERS: u8 = 0x4;

    pub(crate) struct Frame {
        pub(crate) kind: u8,
        pub(crate) flags: u8,
        pub(crate) stream: u32,
        pub(crate) payload: Vec<u8>,
    }

    impl Frame {
        pub(crate) fn ends_stream(&self) -> bool {
            matches!(self.kind, DATA | HEADERS) && self.flags & END_STREAM != 0
        }
    }

    fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let len = payload.len() as u32;
        let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
        f.extend_from_slice(&stream.to_be_bytes());
        f.extend_from_slice(payload);
        f
    }

    /// HPACK literal header fields without indexing, new names, no Huffman.
    fn headers(fields: &[(&str, &str)]) -> Vec<u8> {
        let mut out = Vec::new();
        for (k, v) in fields {
            out.push(0);
            out.push(k.len() as u8);
            out.extend_from_slice(k.as_bytes());
            out.push(v.len() as u8);
            out.extend_from_slice(v.as_bytes());
        }
        out
    }

    /// Open the connection and send `POST path` with `body` on stream 1.
    pub(crate) async fn post(addr: std::net::SocketAddr, path: &str, body: &[u8]) -> TcpStream {
        let mut s = TcpStream::connect(addr).await.unwrap();
        let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
        out.extend(frame(SETTINGS, 0, 0, &[]));
        let authority = addr.to_string();
        let block = headers(&[
            (":method", "POST"),
            (":scheme", "http"),
            (":path", path),
            (":authority", &authority),
            ("content-type", "application/json"),
        ]);
        out.extend(frame(HEADERS, END_HEADERS, 1, &block));
        out.extend(frame(DATA, END_STREAM, 1, body));
        s.write_all(&out).await.unwrap();
        s
    }

    /// The next frame (`None` at end of file); SETTINGS and PINGs are
    /// acknowledged (a graceful GOAWAY waits for the PING's answer).
    pub(crate) async fn next(s: &mut TcpStream) -> Option<Frame> {
        let mut head = [0u8; 9];
        s.read_exact(&mut head).await.ok()?;
        let len = (usize::from(head[0]) << 16) | (usize::from(head[1]) << 8) | usize::from(head[2]);
        let mut payload = vec![0; len];
        s.read_exact(&mut payload).await.ok()?;
        let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
        let f = Frame {
            kind: head[3],
            flags: head[4],
            stream,
            payload,
        };
        if f.kind == SETTINGS && f.flags & 1 == 0 {
            s.write_all(&frame(SETTINGS, 1, 0, &[])).await.ok()?;
        }
        if f.kind == PING && f.flags & 1 == 0 {
            s.write_all(&frame(PING, 1, 0, &f.payload)).await.ok()?;
        }
        Some(f)
    }
}

#[tokio::test]
async fn streams_shorter_than_the_grace_finish_while_new_work_is_refused() {
    // 40 tokens 125 ms apart: 5 s of stream, well inside the 30 s grace.
    let spec = StreamSpec::tokens(40, Duration::ZERO, Duration::from_millis(125));
    let reply = script::openai_chat_sse(&spec);
    let want = reply.body_bytes();
    let up = Upstream::fixed(reply).await;
    // A response whose head comes only after the drain began.
    let late = script::openai_chat_json("m-late", "late answer", (3, 2))
        .head_delay(Duration::from_millis(1500));
    let late_want = late.body_bytes();
    let late_up = Upstream::fixed(late).await;
    let quick_up = Upstream::fixed_json(r#"{"ok":true}"#).await;
    let toml = Toml::new()
        .route("late", "/late", &late_up.url(), "openai")
        .route("quick", "/quick", &quick_up.url(), "openai")
        .route("openai", "/", &up.url(), "openai")
        .top("admin_listen", &q("127.0.0.1:0"))
        .set("server", "shutdown_grace", &q("30s"));
    let mut bin = Bin::start(&toml, &[], &[]).await;
    let admin = bin.admin_addr().await;

    let req = Req::post_json(bin.addr, CHAT, script::openai_request("m-h1", true, None));
    let (resp, t0) = client::send(&client::http1(), &req).await;
    let h1 = tokio::spawn(client::read_all(resp, t0, Duration::from_secs(30)));
    let mut h2 = raw_h2::post(bin.addr, CHAT, &script::openai_request("m-h2", true, None)).await;
    let mut late_conn = tokio::net::TcpStream::connect(bin.addr).await.unwrap();
    let body = script::openai_request("m-late", false, None);
    let head = format!(
        "POST /late{CHAT} HTTP/1.1\r\nhost: tokentap\r\ncontent-type: application/json\r\n\
         content-length: {}\r\n\r\n",
        body.len()
    );
    tokio::io::AsyncWriteExt::write_all(&mut late_conn, &[head.as_bytes(), &body].concat())
        .await
        .unwrap();
    // The h2 stream has begun (its response head is in) before SIGTERM.
    let mut h2_body = Vec::new();
    loop {
        let f = within(STEP_TIMEOUT, "h2 response head", raw_h2::next(&mut h2))
            .await
            .expect("h2 connection open");
        if f.kind == raw_h2::HEADERS && f.stream == 1 {
            break;
        }
    }
    late_up.only().await;
    // A keep-alive connection whose one exchange ended before the drain.
    let mut idle = tokio::net::TcpStream::connect(bin.addr).await.unwrap();
    let first = keep_alive_exchange(&mut idle).await;
    assert!(
        !first.to_ascii_lowercase().contains("connection: close"),
        "before the drain the connection stays open: {first}"
    );

    bin.sigterm();
    // The idle keep-alive connection is closed, with nothing sent on it.
    let raw = support::raw::read_until_closed(&mut idle, STEP_TIMEOUT).await;
    assert!(
        raw.closed && raw.bytes.is_empty(),
        "an idle keep-alive connection closes when the drain starts: {:?}",
        raw.text()
    );
    // New connections are refused while the streams drain.
    let refused = async {
        while tokio::net::TcpStream::connect(bin.addr).await.is_ok() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    within(STEP_TIMEOUT, "new connections refused", refused).await;
    let readyz = client::fetch(&client::http1(), &Req::get(admin, "/readyz")).await;
    assert_eq!(readyz.status.as_u16(), 503, "unready while draining");
    let text = readyz.text();
    let left: u64 = text
        .strip_prefix("draining\nstreams: ")
        .and_then(|rest| rest.lines().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("/readyz says how many streams remain: {text:?}"));
    assert!(
        left >= 2 && text.contains("oldest_stream_age: "),
        "the HTTP/1 and HTTP/2 streams are still open: {text:?}"
    );
    // HTTP/2: GOAWAY comes while the stream still runs, then the stream
    // finishes on the same connection.
    let mut goaway_before_end = false;
    loop {
        let f = within(STEP_TIMEOUT, "h2 frames", raw_h2::next(&mut h2))
            .await
            .expect("the h2 connection stays open until its stream ends");
        match f.kind {
            raw_h2::GOAWAY => goaway_before_end = true,
            raw_h2::DATA if f.stream == 1 => h2_body.extend_from_slice(&f.payload),
            _ => {}
        }
        if f.stream == 1 && f.ends_stream() {
            break;
        }
    }
    assert!(
        goaway_before_end,
        "HTTP/2 client got GOAWAY at once, before its stream ended"
    );
    // Its stream over, the connection is closed by the server.
    let closed = async { while raw_h2::next(&mut h2).await.is_some() {} };
    within(STEP_TIMEOUT, "the h2 connection to close", closed).await;
    assert_bytes_eq("h2 stream finished during the drain", &h2_body, &want);

    let got = within(STEP_TIMEOUT, "the h1 stream", h1).await.unwrap();
    assert!(got.error.is_none(), "h1 stream cut: {:?}", got.error);
    assert_bytes_eq("h1 stream finished during the drain", &got.body, &want);

    let raw = support::raw::read_until_closed(&mut late_conn, STEP_TIMEOUT).await;
    let (status, headers, late_body) = client::parse_raw_response(&raw.bytes);
    assert_eq!(status, 200, "answered during the drain");
    assert!(
        headers
            .iter()
            .any(|(k, v)| k.eq_ignore_ascii_case("connection") && v == "close"),
        "a response whose head goes out during the drain says Connection: close: {headers:?}"
    );
    assert!(raw.closed, "the connection closes after the late answer");
    assert!(
        String::from_utf8_lossy(&late_body).contains("late answer"),
        "the late answer, whole: {:?} (sent {:?})",
        String::from_utf8_lossy(&late_body),
        String::from_utf8_lossy(&late_want)
    );
    let exit = bin.wait_exit(STEP_TIMEOUT).await;
    assert!(
        exit.success(),
        "exit 0 after the drain; output:\n{}",
        bin.output()
    );
}

/// One `GET /quick/...` on `conn`, read to the end of its response (by
/// `content-length`, or the last chunk) without closing the connection;
/// the response as text.
async fn keep_alive_exchange(conn: &mut tokio::net::TcpStream) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    conn.write_all(b"GET /quick/v1/models HTTP/1.1\r\nhost: tokentap\r\n\r\n")
        .await
        .unwrap();
    let mut got = Vec::new();
    let read = async {
        let mut buf = [0u8; 4096];
        loop {
            let n = conn.read(&mut buf).await.unwrap();
            assert!(
                n > 0,
                "closed mid-response: {:?}",
                String::from_utf8_lossy(&got)
            );
            got.extend_from_slice(&buf[..n]);
            let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") else {
                continue;
            };
            let head = String::from_utf8_lossy(&got[..end]).to_ascii_lowercase();
            let length = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok());
            let done = match length {
                Some(n) => got.len() >= end + 4 + n,
                None => got.ends_with(b"0\r\n\r\n"),
            };
            if done {
                return;
            }
        }
    };
    within(STEP_TIMEOUT, "the keep-alive exchange", read).await;
    String::from_utf8_lossy(&got).into_owned()
}
