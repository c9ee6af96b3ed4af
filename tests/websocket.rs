//! WebSocket sessions through tokentap: a scripted WebSocket upstream on
//! 127.0.0.1 (tokio-tungstenite), tokentap in process, and raw clients.
//! Every frame is compared both ways; close codes, subprotocol, handshake
//! headers, a non-101 answer, a 5 MB message, 100 sessions at once, the
//! session cap and shutdown's close 1001 are checked; so are hostile inputs
//! (a message over `max_message_bytes`, a handshake head that never ends, a
//! reserved opcode from the upstream) and the session count on `/readyz`
//! and `/api/live`. The `over_http2_*` tests open sessions with HTTP/2
//! extended CONNECT (RFC 8441) over h2c instead: frames, metering, a 401,
//! permessage-deflate, the cap, shutdown, and the CONNECTs that are refused.
#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_tungstenite::tungstenite::http;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::Frame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::{CloseCode, Data, OpCode};
use tokio_tungstenite::tungstenite::{Error as WsError, Message};

use support::proxy::{InProc, Toml, q};
use support::ws::{
    H2Sender, H2Stream, Script, WsClient, h2_connect, h2_handshake, h2_upgraded, ws_connect,
    ws_upstream,
};
use support::{STEP_TIMEOUT, within};

/// One OpenAI route to `upstream`; sessions still open at shutdown get
/// one second.
fn toml(upstream: &str) -> Toml {
    Toml::openai(upstream).set("server", "shutdown_grace", &q("1s"))
}

type Client = WsClient;

/// Open a WebSocket to `path` on `proxy` with extra handshake headers.
async fn connect(
    proxy: &InProc,
    path: &str,
    extra: &[(&str, &str)],
) -> Result<(Client, http::Response<Option<Vec<u8>>>), WsError> {
    ws_connect(proxy.addr, path, extra).await
}

#[tokio::test]
async fn frames_close_codes_and_handshake_headers_pass_unchanged() {
    let (upstream, seen) = ws_upstream(Script::Echo).await;
    let proxy = InProc::start(&toml(&upstream)).await;
    let (mut ws, res) = within(
        STEP_TIMEOUT,
        "handshake",
        connect(
            &proxy,
            "/v1/realtime?model=gpt-realtime&key=SECRETKEY",
            &[
                ("authorization", "Bearer sk-test"),
                ("sec-websocket-protocol", "chat, superchat"),
                ("openai-beta", "realtime=v1"),
            ],
        ),
    )
    .await
    .expect("handshake through tokentap");
    assert_eq!(res.status(), 101);
    assert_eq!(
        res.headers().get("sec-websocket-protocol").unwrap(),
        "chat",
        "subprotocol negotiated end to end"
    );
    assert_eq!(res.headers().get("x-upstream").unwrap(), "yes");
    {
        let seen = seen.lock().unwrap();
        let h = &seen[0];
        assert_eq!(h.get("authorization").unwrap(), "Bearer sk-test");
        assert_eq!(h.get("sec-websocket-protocol").unwrap(), "chat, superchat");
        assert_eq!(h.get("openai-beta").unwrap(), "realtime=v1");
        assert_eq!(h.get("upgrade").unwrap(), "websocket");
        assert!(h.get("sec-websocket-key").is_some(), "key forwarded");
    }
    exchange_frames(&mut ws).await;
    proxy.shutdown().await;
}

/// Text, binary, empty and fragmented messages echoed, a ping answered and
/// a close code with its reason relayed both ways, over any transport.
async fn exchange_frames<S>(ws: &mut tokio_tungstenite::WebSocketStream<S>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let sent = vec![
        Message::text("{\"type\":\"response.create\"}"),
        Message::binary(vec![0u8, 1, 2, 255]),
        Message::text("é ünïcödé"),
        Message::text(""),
    ];
    for m in &sent {
        ws.send(m.clone()).await.unwrap();
        let back = within(STEP_TIMEOUT, "echo", ws.next())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(&back, m, "echoed message unchanged");
    }
    // A message in two fragments reaches the upstream whole (it echoes it).
    let first = Frame::message("frag", OpCode::Data(Data::Text), false);
    let rest = Frame::message("mented", OpCode::Data(Data::Continue), true);
    ws.send(Message::Frame(first)).await.unwrap();
    ws.send(Message::Frame(rest)).await.unwrap();
    let back = within(STEP_TIMEOUT, "fragmented echo", ws.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        back,
        Message::text("fragmented"),
        "fragments relayed in order"
    );
    ws.send(Message::Ping(b"p1".to_vec().into())).await.unwrap();
    let pong = within(STEP_TIMEOUT, "pong", ws.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        pong,
        Message::Pong(b"p1".to_vec().into()),
        "ping answered end to end"
    );
    ws.close(Some(CloseFrame {
        code: CloseCode::Library(4000),
        reason: "bye now".into(),
    }))
    .await
    .unwrap();
    let close = within(STEP_TIMEOUT, "close echo", ws.next())
        .await
        .unwrap()
        .unwrap();
    match close {
        Message::Close(Some(f)) => {
            assert_eq!(u16::from(f.code), 4000, "close code relayed both ways");
            assert_eq!(f.reason.as_str(), "bye now");
        }
        other => panic!("expected the upstream's close frame, got {other:?}"),
    }
}

#[tokio::test]
async fn a_five_megabyte_message_crosses_both_ways() {
    let (upstream, _) = ws_upstream(Script::Echo).await;
    let proxy = InProc::start(&toml(&upstream)).await;
    let (ws, _) = connect(&proxy, "/v1/realtime", &[]).await.unwrap();
    five_megabytes_echo(ws, proxy).await;
}

/// A 5 MB binary message goes out and comes back from the echo upstream
/// unchanged.
async fn five_megabytes_echo<S>(mut ws: tokio_tungstenite::WebSocketStream<S>, proxy: InProc)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let big: Vec<u8> = (0..5 * 1024 * 1024u32).map(|i| (i * 7) as u8).collect();
    ws.send(Message::binary(big.clone())).await.unwrap();
    let back = within(STEP_TIMEOUT, "5 MB echo", ws.next())
        .await
        .unwrap()
        .unwrap();
    assert!(back == Message::binary(big), "5 MB message unchanged");
    proxy.shutdown().await;
}

#[tokio::test]
async fn upstream_1011_mid_session_reaches_the_client() {
    let (upstream, _) = ws_upstream(Script::FailMidway).await;
    let proxy = InProc::start(&toml(&upstream)).await;
    let (mut ws, _) = connect(&proxy, "/v1/realtime", &[]).await.unwrap();
    let first = within(STEP_TIMEOUT, "partial", ws.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(first, Message::text("partial"));
    let close = within(STEP_TIMEOUT, "close", ws.next())
        .await
        .unwrap()
        .unwrap();
    match close {
        Message::Close(Some(f)) => assert_eq!(u16::from(f.code), 1011, "1011 relayed"),
        other => panic!("expected close 1011, got {other:?}"),
    }
    proxy.shutdown().await;
}

/// A plain HTTP upstream on 127.0.0.1 that refuses every upgrade with a
/// 401 in OpenAI's error shape; returns its URL.
async fn refusing_upstream() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        while let Ok((mut tcp, _)) = listener.accept().await {
            let mut buf = vec![0; 4096];
            let _ = tcp.read(&mut buf).await;
            let body = r#"{"error":{"message":"bad key","type":"invalid_request_error","code":"invalid_api_key"}}"#;
            let res = format!(
                "HTTP/1.1 401 Unauthorized\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            );
            let _ = tcp.write_all(res.as_bytes()).await;
        }
    });
    format!("http://{addr}")
}

#[tokio::test]
async fn a_non_101_answer_reaches_the_client_unchanged() {
    let proxy = InProc::start(&toml(&refusing_upstream().await)).await;
    match connect(&proxy, "/v1/realtime", &[]).await {
        Err(WsError::Http(res)) => {
            assert_eq!(res.status(), 401, "upstream status relayed");
            let body = res.body().clone().unwrap_or_default();
            assert!(
                String::from_utf8_lossy(&body).contains("invalid_api_key"),
                "upstream body relayed: {}",
                String::from_utf8_lossy(&body)
            );
        }
        other => panic!("expected HTTP 401 from the upstream, got {other:?}"),
    }
    proxy.shutdown().await;
}

#[tokio::test]
async fn a_hundred_sessions_at_once() {
    let (upstream, _) = ws_upstream(Script::Echo).await;
    let proxy = Arc::new(InProc::start(&toml(&upstream)).await);
    let mut tasks = Vec::new();
    for i in 0..100 {
        let proxy = proxy.clone();
        tasks.push(tokio::spawn(async move {
            let (mut ws, _) = connect(&proxy, "/v1/realtime", &[]).await.unwrap();
            for j in 0..5 {
                let m = Message::text(format!("session {i} message {j}"));
                ws.send(m.clone()).await.unwrap();
                assert_eq!(ws.next().await.unwrap().unwrap(), m);
            }
            ws.close(None).await.unwrap();
        }));
    }
    for t in tasks {
        within(Duration::from_secs(30), "session", t).await.unwrap();
    }
    let proxy = Arc::into_inner(proxy).unwrap();
    proxy.shutdown().await;
}

#[tokio::test]
async fn sessions_over_the_cap_get_503() {
    let (upstream, _) = ws_upstream(Script::Echo).await;
    let toml = toml(&upstream).set("websocket", "max_sessions", "1");
    let proxy = InProc::start(&toml).await;
    let (mut first, _) = connect(&proxy, "/v1/realtime", &[]).await.unwrap();
    match connect(&proxy, "/v1/realtime", &[]).await {
        Err(WsError::Http(res)) => assert_eq!(res.status(), 503, "over the cap"),
        other => panic!("expected 503, got {other:?}"),
    }
    assert_eq!(proxy.running().unwrap().ws_sessions_active(), 1);
    first.send(Message::text("still works")).await.unwrap();
    assert_eq!(
        first.next().await.unwrap().unwrap(),
        Message::text("still works")
    );
    proxy.shutdown().await;
}

#[tokio::test]
async fn shutdown_sends_going_away_to_the_client() {
    let (upstream, _) = ws_upstream(Script::Echo).await;
    let toml = Toml::openai(&upstream).set("server", "shutdown_grace", &q("300ms"));
    let proxy = InProc::start(&toml).await;
    let (ws, _) = connect(&proxy, "/v1/realtime", &[]).await.unwrap();
    echo_then_going_away_on_shutdown(ws, proxy).await;
}

/// One echo through the session, then shutdown: the client gets close
/// 1001 (going away) and the shutdown finishes.
async fn echo_then_going_away_on_shutdown<S>(
    mut ws: tokio_tungstenite::WebSocketStream<S>,
    proxy: InProc,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    ws.send(Message::text("hi")).await.unwrap();
    assert_eq!(ws.next().await.unwrap().unwrap(), Message::text("hi"));
    let stopping = tokio::spawn(proxy.shutdown());
    let close = within(STEP_TIMEOUT, "close 1001", ws.next()).await;
    match close {
        Some(Ok(Message::Close(Some(f)))) => {
            assert_eq!(u16::from(f.code), 1001, "going away on shutdown")
        }
        other => panic!("expected close 1001, got {other:?}"),
    }
    within(Duration::from_secs(20), "shutdown", stopping)
        .await
        .unwrap();
}

#[tokio::test]
async fn idle_sessions_are_closed_when_configured() {
    let (upstream, _) = ws_upstream(Script::Echo).await;
    let toml = toml(&upstream).set("websocket", "idle_timeout", &q("200ms"));
    let proxy = InProc::start(&toml).await;
    let (mut ws, _) = connect(&proxy, "/v1/realtime", &[]).await.unwrap();
    let end = within(STEP_TIMEOUT, "idle close", ws.next()).await;
    assert!(
        matches!(end, Some(Ok(Message::Close(Some(ref f)))) if u16::from(f.code) == 1001)
            || matches!(end, None | Some(Err(_))),
        "idle session ended: {end:?}"
    );
    proxy.shutdown().await;
}

/// A recorded realtime transcript (`tests/fixtures/realtime/`): each
/// message in order, and whether the client sent it.
fn transcript(fixture: &str) -> Vec<(bool, serde_json::Value)> {
    let text = std::fs::read_to_string(format!(
        "{}/tests/fixtures/realtime/{fixture}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
            (v["dir"] == "client", v["msg"].take())
        })
        .collect()
}

/// A WebSocket upstream that replays a recorded transcript: it sends the
/// `server` lines in order, and waits for one client message at each
/// `client` line. Sleeps `ttft` before the first output delta so TTFT is
/// measurable, and returns when each session's server-side TTFT started.
async fn replay_upstream(fixture: &'static str, ttft: Duration) -> String {
    let lines: Vec<(bool, String)> = transcript(fixture)
        .into_iter()
        .map(|(from_client, msg)| (from_client, msg.to_string()))
        .collect();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let lines = lines.clone();
            tokio::spawn(async move {
                let Ok(mut ws) = tokio_tungstenite::accept_async(tcp).await else {
                    return;
                };
                let mut first_delta = true;
                for (client, msg) in lines {
                    if client {
                        if !matches!(ws.next().await, Some(Ok(_))) {
                            return;
                        }
                        continue;
                    }
                    if first_delta && msg.contains(".delta\"") {
                        first_delta = false;
                        tokio::time::sleep(ttft).await;
                    }
                    if ws.send(Message::text(msg)).await.is_err() {
                        return;
                    }
                }
                while let Some(Ok(_)) = ws.next().await {}
            });
        }
    });
    format!("http://{addr}")
}

#[tokio::test]
async fn a_realtime_response_is_measured_inside_its_session_span() {
    use support::otlp::Collector;
    let col = Collector::start().await;
    let upstream = replay_upstream("openai_text.jsonl", Duration::from_millis(150)).await;
    let proxy = InProc::start(&toml(&upstream).otlp(&col.endpoint(), "grpc")).await;
    let (mut ws, _) = connect(
        &proxy,
        "/v1/realtime?model=gpt-realtime&key=SECRETKEY",
        &[("authorization", "Bearer sk-secret-handshake")],
    )
    .await
    .unwrap();
    let mut got_done = false;
    for (from_client, msg) in transcript("openai_text.jsonl") {
        if from_client {
            ws.send(Message::text(msg.to_string())).await.unwrap();
        } else {
            let m = within(STEP_TIMEOUT, "server event", ws.next())
                .await
                .unwrap()
                .unwrap();
            let got: serde_json::Value = serde_json::from_str(m.to_text().unwrap()).unwrap();
            assert_eq!(got, msg, "server event relayed unchanged");
            got_done |= got["type"] == "response.done";
        }
    }
    assert!(got_done);
    ws.close(None).await.unwrap();
    while let Some(Ok(_)) = ws.next().await {}
    drop(ws);
    let session = col
        .wait_span(STEP_TIMEOUT, "session", |s| s.name.starts_with("websocket"))
        .await;
    let response = col
        .wait_span(STEP_TIMEOUT, "response", |s| {
            s.parent_span_id == session.span_id && s.name.starts_with("chat")
        })
        .await;
    assert_eq!(response.trace_id, session.trace_id);
    assert_eq!(
        response.attr("gen_ai.usage.input_tokens").as_i64(),
        Some(190)
    );
    assert_eq!(
        response.attr("gen_ai.usage.output_tokens").as_i64(),
        Some(11)
    );
    assert_eq!(response.attr("tokentap.outcome").as_str(), Some("complete"));
    assert_eq!(
        response.attr("gen_ai.response.model").as_str(),
        Some("gpt-realtime-2025-08-28")
    );
    assert_eq!(
        response.attr("gen_ai.response.id").as_str(),
        Some("resp_Cq1d")
    );
    let ttft = response
        .attr("gen_ai.response.time_to_first_chunk")
        .as_f64()
        .unwrap();
    assert!(
        (0.15..0.5).contains(&ttft),
        "TTFT {ttft}s: the upstream waited 150 ms before its first delta"
    );
    assert_eq!(session.attr("tokentap.session.responses").as_i64(), Some(1));
    assert_eq!(
        session.attr("tokentap.session.output_tokens").as_i64(),
        Some(11)
    );
    assert_eq!(
        session.attr("tokentap.session.end").as_str(),
        Some("client_closed")
    );
    proxy.shutdown().await;
    let raw = String::from_utf8_lossy(&col.raw_bytes()).into_owned();
    for secret in ["SECRETKEY", "sk-secret-handshake"] {
        assert!(!raw.contains(secret), "{secret} leaked into telemetry");
    }
}

/// The session id from the handshake (here Claude Code's header) is on the
/// session span and on each response span inside it.
#[tokio::test]
async fn a_websocket_session_and_its_responses_carry_the_session_id() {
    use support::otlp::Collector;
    let col = Collector::start().await;
    let upstream = replay_upstream("openai_text.jsonl", Duration::from_millis(20)).await;
    let proxy = InProc::start(&toml(&upstream).otlp(&col.endpoint(), "grpc")).await;
    let (ws, _) = connect(
        &proxy,
        "/v1/realtime?model=gpt-realtime",
        &[("x-claude-code-session-id", "ws-session-42")],
    )
    .await
    .unwrap();
    play_transcript(ws, "openai_text.jsonl").await;
    let session = col
        .wait_span(STEP_TIMEOUT, "session", |s| s.name.starts_with("websocket"))
        .await;
    let response = col
        .wait_span(STEP_TIMEOUT, "response", |s| {
            s.parent_span_id == session.span_id && s.name.starts_with("chat")
        })
        .await;
    for span in [&session, &response] {
        assert_eq!(
            span.attr("gen_ai.conversation.id").as_str(),
            Some("ws-session-42"),
            "{} carries the session id",
            span.name
        );
    }
    proxy.shutdown().await;
}

/// Play the client side of a recorded transcript against `proxy`: send
/// each `client` line, read each `server` line and check it arrived
/// unchanged; then close.
async fn play_fixture(proxy: &InProc, fixture: &str, path: &str) {
    let (ws, _) = connect(proxy, path, &[]).await.unwrap();
    play_transcript(ws, fixture).await;
}

/// [`play_fixture`] on a WebSocket already open, over any transport.
async fn play_transcript<S>(mut ws: tokio_tungstenite::WebSocketStream<S>, fixture: &str)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    for (from_client, msg) in transcript(fixture) {
        if from_client {
            ws.send(Message::text(msg.to_string())).await.unwrap();
        } else {
            let m = within(STEP_TIMEOUT, "server event", ws.next())
                .await
                .unwrap()
                .unwrap();
            let got: serde_json::Value = serde_json::from_str(m.to_text().unwrap()).unwrap();
            assert_eq!(got, msg, "server event relayed unchanged");
        }
    }
    ws.close(None).await.unwrap();
    while let Some(Ok(_)) = ws.next().await {}
}

/// Replay `fixture` through a proxy exporting to a fresh OTLP receiver,
/// the session opened at `path`; the proxy is returned to keep it running.
async fn exported_session(fixture: &'static str, path: &str) -> (support::otlp::Collector, InProc) {
    let col = support::otlp::Collector::start().await;
    let upstream = replay_upstream(fixture, Duration::from_millis(20)).await;
    let proxy = InProc::start(&toml(&upstream).otlp(&col.endpoint(), "grpc")).await;
    play_fixture(&proxy, fixture, path).await;
    (col, proxy)
}

#[tokio::test]
async fn realtime_function_calls_are_counted_on_their_response() {
    let (col, _proxy) = exported_session(
        "openai_function_call.jsonl",
        "/v1/realtime?model=gpt-realtime",
    )
    .await;
    let response = |id: &'static str| {
        col.wait_span(STEP_TIMEOUT, id, move |s| {
            s.attrs.get("gen_ai.response.id").and_then(|v| v.as_str()) == Some(id)
        })
    };
    // The first response calls get_weather; the answer after it calls nothing.
    let call = response("resp_Fc1b").await;
    assert_eq!(call.num("tokentap.tool.calls"), 1.0);
    assert_eq!(call.attr("tokentap.tool.names").strings(), ["get_weather"]);
    let session = col
        .wait_span(STEP_TIMEOUT, "session", |s| s.name.starts_with("websocket"))
        .await;
    assert_eq!(session.num("tokentap.session.tool_calls"), 1.0);
    let answer = response("resp_Fc1h").await;
    assert!(
        !answer.attrs.contains_key("tokentap.tool.calls"),
        "{answer:?}"
    );
    col.wait_point(STEP_TIMEOUT, "tokentap.tool.calls", |p| {
        p.attrs.get("gen_ai.tool.name").and_then(|v| v.as_str()) == Some("get_weather")
            && p.number() == 1.0
    })
    .await;
}

#[tokio::test]
async fn realtime_text_and_audio_tokens_are_split_on_spans_and_metrics() {
    use support::otlp::PointValue;
    let (col, proxy) = exported_session(
        "openai_audio_vad.jsonl",
        "/v1/realtime?model=gpt-realtime-mini",
    )
    .await;
    let session = col
        .wait_span(STEP_TIMEOUT, "session", |s| s.name.starts_with("websocket"))
        .await;
    let response = col
        .wait_span(STEP_TIMEOUT, "response", |s| {
            s.parent_span_id == session.span_id && s.name.starts_with("chat")
        })
        .await;
    // The fixture's response.done: input 318 (text 251, audio 67; cached
    // 192, all text), output 94 (text 21, audio 73).
    for (key, want) in [
        ("gen_ai.usage.input_tokens", 318),
        ("gen_ai.usage.output_tokens", 94),
        ("gen_ai.usage.cache_read.input_tokens", 192),
        ("gen_ai.usage.text.input_tokens", 251),
        ("gen_ai.usage.audio.input_tokens", 67),
        ("tokentap.usage.cache_read.text.input_tokens", 192),
        ("tokentap.usage.cache_read.audio.input_tokens", 0),
        ("gen_ai.usage.text.output_tokens", 21),
        ("gen_ai.usage.audio.output_tokens", 73),
    ] {
        assert_eq!(
            response.attr(key).as_i64(),
            Some(want),
            "response span {key}"
        );
    }
    for (key, want) in [
        ("tokentap.session.input_tokens", 318),
        ("tokentap.session.output_tokens", 94),
        ("tokentap.session.cache_read.input_tokens", 192),
        ("tokentap.session.text.input_tokens", 251),
        ("tokentap.session.audio.input_tokens", 67),
        ("tokentap.session.cache_read.text.input_tokens", 192),
        ("tokentap.session.cache_read.audio.input_tokens", 0),
        ("tokentap.session.text.output_tokens", 21),
        ("tokentap.session.audio.output_tokens", 73),
    ] {
        assert_eq!(session.attr(key).as_i64(), Some(want), "session span {key}");
    }
    // Metrics: the usage counters per modality; each counter's points add
    // up to its total (no other kind of token was reported).
    let counter = |kind: &str| format!("gen_ai.client.inference.usage.{kind}_tokens");
    col.wait_point(STEP_TIMEOUT, &counter("output"), |p| {
        p.attrs
            .get("gen_ai.token.modality")
            .and_then(|v| v.as_str())
            == Some("audio")
    })
    .await;
    let mut seen = std::collections::BTreeMap::new();
    for kind in [
        "input",
        "output",
        "cache_read.input",
        "cache_write.input",
        "reasoning.output",
    ] {
        let name = counter(kind);
        for p in col.latest(&name) {
            let modality = p
                .attrs
                .get("gen_ai.token.modality")
                .and_then(|v| v.as_str())
                .unwrap_or("-")
                .to_owned();
            let PointValue::Sum(v) = p.value else {
                panic!("{name} is a counter: {p:?}")
            };
            *seen.entry(format!("{kind}/{modality}")).or_insert(0.0) += v;
        }
    }
    let want: std::collections::BTreeMap<String, f64> = [
        ("input/audio", 67.0),
        ("input/text", 251.0),
        ("output/audio", 73.0),
        ("output/text", 21.0),
        ("cache_read.input/audio", 0.0),
        ("cache_read.input/text", 192.0),
        ("cache_write.input/unknown", 0.0),
        ("reasoning.output/unknown", 0.0),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    assert_eq!(seen, want, "usage counters by kind/modality");
    assert!(
        col.latest("tokentap.token.modality.usage").is_empty(),
        "the legacy modality counter stays behind telemetry.semconv"
    );
    proxy.shutdown().await;
}

/// A frame as raw bytes: `mask` set for client frames, `rsv1` for a
/// compressed message.
fn raw_frame(opcode: u8, rsv1: bool, payload: &[u8], mask: Option<[u8; 4]>) -> Vec<u8> {
    let mut f = vec![0x80 | if rsv1 { 0x40 } else { 0 } | opcode];
    let m = if mask.is_some() { 0x80 } else { 0 };
    match payload.len() {
        n if n < 126 => f.push(m | n as u8),
        n if n <= 0xffff => {
            f.push(m | 126);
            f.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            f.push(m | 127);
            f.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    match mask {
        Some(k) => {
            f.extend_from_slice(&k);
            f.extend(payload.iter().enumerate().map(|(i, b)| b ^ k[i % 4]));
        }
        None => f.extend_from_slice(payload),
    }
    f
}

/// One message compressed as permessage-deflate sends it (no context
/// takeover: a fresh compressor per message, the sync-flush tail cut).
fn deflate(msg: &[u8]) -> Vec<u8> {
    let mut z = flate2::Compress::new(flate2::Compression::fast(), false);
    let mut out = Vec::with_capacity(msg.len() + 64);
    z.compress_vec(msg, &mut out, flate2::FlushCompress::Sync)
        .unwrap();
    assert!(out.ends_with(&[0, 0, 0xff, 0xff]));
    out.truncate(out.len() - 4);
    out
}

/// A raw WebSocket upstream: answers the handshake (accepting
/// permessage-deflate without context takeover when offered), waits for
/// the client's first bytes, sends `frames`, then records every byte the
/// client sends until it closes. Returns its URL and those bytes.
async fn raw_upstream(frames: Vec<Vec<u8>>) -> (String, Arc<Mutex<Vec<u8>>>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let got = Arc::new(Mutex::new(Vec::new()));
    let log = got.clone();
    tokio::spawn(async move {
        let (mut tcp, _) = listener.accept().await.unwrap();
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            tcp.read_exact(&mut byte).await.unwrap();
            head.push(byte[0]);
        }
        let head = String::from_utf8(head).unwrap();
        let key = head
            .lines()
            .find_map(|l| l.strip_prefix("sec-websocket-key: "))
            .unwrap()
            .trim();
        let accept = tokio_tungstenite::tungstenite::handshake::derive_accept_key(key.as_bytes());
        let ext = if head.contains("permessage-deflate") {
            "sec-websocket-extensions: permessage-deflate; server_no_context_takeover; client_no_context_takeover\r\n"
        } else {
            ""
        };
        let res = format!(
            "HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: Upgrade\r\nsec-websocket-accept: {accept}\r\n{ext}\r\n"
        );
        tcp.write_all(res.as_bytes()).await.unwrap();
        let mut buf = vec![0; 65536];
        let n = tcp.read(&mut buf).await.unwrap();
        log.lock().unwrap().extend_from_slice(&buf[..n]);
        for f in frames {
            tcp.write_all(&f).await.unwrap();
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        loop {
            match tcp.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => log.lock().unwrap().extend_from_slice(&buf[..n]),
            }
        }
    });
    (format!("http://{addr}"), got)
}

/// A raw client: sends the handshake (with `extensions` offered), returns
/// the socket once the `101` head is read, and that head.
async fn raw_client(proxy: &InProc, extensions: Option<&str>) -> (TcpStream, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut tcp = TcpStream::connect(proxy.addr).await.unwrap();
    let ext = extensions
        .map(|e| format!("sec-websocket-extensions: {e}\r\n"))
        .unwrap_or_default();
    let req = format!(
        "GET /v1/realtime?model=gpt-realtime HTTP/1.1\r\nhost: {}\r\nconnection: Upgrade\r\nupgrade: websocket\r\nsec-websocket-version: 13\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n{ext}\r\n",
        proxy.addr
    );
    tcp.write_all(req.as_bytes()).await.unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        tcp.read_exact(&mut byte).await.unwrap();
        head.push(byte[0]);
    }
    (tcp, String::from_utf8(head).unwrap())
}

#[tokio::test]
async fn permessage_deflate_as_browsers_offer_it_is_relayed_and_metered() {
    deflate_session(Transport::Http1).await;
}

#[tokio::test]
async fn over_http2_permessage_deflate_is_negotiated_end_to_end_and_metered() {
    deflate_session(Transport::Http2).await;
}

/// How a test client reaches tokentap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Transport {
    /// HTTP/1.1 `Upgrade: websocket`.
    Http1,
    /// h2c with an extended CONNECT.
    Http2,
}

/// A byte stream both ways (TCP after a 101, or an HTTP/2 stream).
trait Duplex: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send> Duplex for T {}

/// Compressed frames from a raw upstream reach a raw client byte for byte
/// (and back), with the extension negotiated end to end, and the response
/// they carry is metered through the inflater.
async fn deflate_session(via: Transport) {
    use support::otlp::Collector;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let col = Collector::start().await;
    let events = [
        r#"{"type":"session.created","session":{"model":"gpt-realtime-2025-08-28"}}"#.to_owned(),
        r#"{"type":"response.created","response":{"id":"resp_z","status":"in_progress"}}"#.to_owned(),
        r#"{"type":"response.output_text.delta","response_id":"resp_z","delta":"Hel"}"#.to_owned(),
        r#"{"type":"response.output_text.delta","response_id":"resp_z","delta":"lo"}"#.to_owned(),
        r#"{"type":"response.done","response":{"id":"resp_z","status":"completed","usage":{"total_tokens":12,"input_tokens":9,"output_tokens":3,"input_token_details":{"cached_tokens":4}}}}"#.to_owned(),
    ];
    let mut frames: Vec<Vec<u8>> = events
        .iter()
        .map(|e| raw_frame(1, true, &deflate(e.as_bytes()), None))
        .collect();
    frames.push(raw_frame(8, false, &1000u16.to_be_bytes(), None));
    let sent_down: Vec<u8> = frames.concat();
    let (upstream, got_up) = raw_upstream(frames).await;
    let proxy = InProc::start(&toml(&upstream).otlp(&col.endpoint(), "grpc")).await;
    let offer = "permessage-deflate; client_max_window_bits";
    let (mut tcp, head, _conn): (Box<dyn Duplex>, String, _) = match via {
        Transport::Http1 => {
            let (tcp, head) = raw_client(&proxy, Some(offer)).await;
            assert!(head.starts_with("HTTP/1.1 101"), "{head}");
            (Box::new(tcp), head, None)
        }
        Transport::Http2 => {
            let path = "/v1/realtime?model=gpt-realtime";
            let extra = [("sec-websocket-extensions", offer)];
            let (stream, head, conn) = h2_open(&proxy, path, &extra).await;
            (Box::new(stream), format!("{:?}", head.headers), Some(conn))
        }
    };
    assert!(
        head.to_ascii_lowercase()
            .contains("permessage-deflate; server_no_context_takeover"),
        "extension negotiated end to end: {head}"
    );
    let mut sent_up = raw_frame(
        1,
        true,
        &deflate(br#"{"type":"response.create"}"#),
        Some([1, 2, 3, 4]),
    );
    tcp.write_all(&sent_up).await.unwrap();
    let mut got_down = vec![0; sent_down.len()];
    within(STEP_TIMEOUT, "server frames", tcp.read_exact(&mut got_down))
        .await
        .unwrap();
    support::assert_bytes_eq("upstream → client bytes", &got_down, &sent_down);
    let close = raw_frame(8, false, &1000u16.to_be_bytes(), Some([5, 6, 7, 8]));
    let _ = tcp.write_all(&close).await;
    sent_up.extend_from_slice(&close);
    drop(tcp);
    let response = col
        .wait_span(STEP_TIMEOUT, "response", |s| s.name.starts_with("chat"))
        .await;
    assert_eq!(response.attr("gen_ai.usage.input_tokens").as_i64(), Some(9));
    assert_eq!(
        response.attr("gen_ai.usage.output_tokens").as_i64(),
        Some(3)
    );
    assert_eq!(
        response
            .attr("gen_ai.usage.cache_read.input_tokens")
            .as_i64(),
        Some(4)
    );
    assert_eq!(response.attr("tokentap.outcome").as_str(), Some("complete"));
    proxy.shutdown().await;
    let up = got_up.lock().unwrap().clone();
    assert!(
        sent_up.starts_with(&up) && !up.is_empty(),
        "client → upstream bytes arrive unchanged"
    );
}

#[tokio::test]
async fn unmasked_client_frames_pass_and_metering_says_why_it_stopped() {
    use support::otlp::Collector;
    use tokio::io::AsyncWriteExt;
    let col = Collector::start().await;
    let down = vec![raw_frame(1, false, b"{\"type\":\"x\"}", None)];
    let (upstream, got_up) = raw_upstream(down.clone()).await;
    let proxy = InProc::start(&toml(&upstream).otlp(&col.endpoint(), "grpc")).await;
    let (mut tcp, head) = raw_client(&proxy, None).await;
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    // Unmasked (a protocol violation by the client) and then garbage.
    let mut sent = raw_frame(1, false, br#"{"type":"response.create"}"#, None);
    sent.extend_from_slice(&[0xff; 40]);
    tcp.write_all(&sent).await.unwrap();
    let mut back = vec![0; down[0].len()];
    use tokio::io::AsyncReadExt;
    within(STEP_TIMEOUT, "server frame", tcp.read_exact(&mut back))
        .await
        .unwrap();
    assert_eq!(back, down[0], "server frame relayed");
    tcp.shutdown().await.unwrap();
    drop(tcp);
    let session = col
        .wait_span(STEP_TIMEOUT, "session", |s| s.name.starts_with("websocket"))
        .await;
    let why = session
        .attr("tokentap.session.unmetered")
        .as_str()
        .unwrap()
        .to_owned();
    assert!(why.contains("client frames"), "{why}");
    proxy.shutdown().await;
    let up = got_up.lock().unwrap().clone();
    support::assert_bytes_eq("client → upstream bytes", &up, &sent);
}

#[tokio::test]
async fn a_client_leaving_mid_response_is_client_cancelled() {
    use support::otlp::Collector;
    let col = Collector::start().await;
    // The upstream waits 2 s before its first delta; the client leaves first.
    let upstream = replay_upstream("openai_text.jsonl", Duration::from_secs(2)).await;
    let proxy = InProc::start(&toml(&upstream).otlp(&col.endpoint(), "grpc")).await;
    let (mut ws, _) = connect(&proxy, "/v1/realtime?model=gpt-realtime", &[])
        .await
        .unwrap();
    for (from_client, msg) in transcript("openai_text.jsonl") {
        if from_client {
            ws.send(Message::text(msg.to_string())).await.unwrap();
        } else {
            let m = within(STEP_TIMEOUT, "server event", ws.next())
                .await
                .unwrap()
                .unwrap();
            if m.to_text().unwrap().contains("response.created") {
                break;
            }
        }
    }
    drop(ws); // mid-response: no close frame, just gone
    let response = col
        .wait_span(STEP_TIMEOUT, "response", |s| s.name.starts_with("chat"))
        .await;
    assert_eq!(
        response.attr("tokentap.outcome").as_str(),
        Some("client_cancelled")
    );
    let session = col
        .wait_span(STEP_TIMEOUT, "session", |s| s.name.starts_with("websocket"))
        .await;
    assert_eq!(session.attr("tokentap.session.responses").as_i64(), Some(1));
    proxy.shutdown().await;
}

/// The SDK virtualenv (scripts/setup-test-env.sh), or `$TOKENTAP_PYTHON`.
fn python() -> std::path::PathBuf {
    if let Some(p) = std::env::var_os("TOKENTAP_PYTHON") {
        return p.into();
    }
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/python");
    assert!(
        p.exists(),
        "the Python SDK environment is missing ({} not found): run scripts/setup-test-env.sh",
        p.display()
    );
    p
}

/// Run `tests/sdk/NAME` with the SDK environment against `proxy`'s `/v1`;
/// the JSON it prints. Fails the test when the script fails.
async fn run_sdk_script(name: &str, proxy: &InProc) -> serde_json::Value {
    let script = format!("{}/tests/sdk/{name}", env!("CARGO_MANIFEST_DIR"));
    let out = within(
        Duration::from_secs(60),
        name,
        tokio::process::Command::new(python())
            .arg(script)
            .arg(format!("{}/v1", proxy.url()))
            .kill_on_drop(true)
            .output(),
    )
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{name} failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.trim()).unwrap()
}

#[tokio::test]
async fn the_official_python_realtime_client_works_through_tokentap() {
    use support::otlp::Collector;
    let col = Collector::start().await;
    let upstream = replay_upstream("openai_text.jsonl", Duration::from_millis(100)).await;
    let proxy = InProc::start(&toml(&upstream).otlp(&col.endpoint(), "grpc")).await;
    let got = run_sdk_script("realtime.py", &proxy).await;
    assert_eq!(got["text"], "Mars, the \"red\" planet.");
    assert_eq!(got["input_tokens"], 190);
    assert_eq!(got["output_tokens"], 11);
    let response = col
        .wait_span(STEP_TIMEOUT, "response", |s| s.name.starts_with("chat"))
        .await;
    assert_eq!(
        response.attr("gen_ai.usage.output_tokens").as_i64(),
        Some(11),
        "usage equal to the upstream's"
    );
    assert_eq!(response.attr("tokentap.outcome").as_str(), Some("complete"));
    proxy.shutdown().await;
    let raw = String::from_utf8_lossy(&col.raw_bytes()).into_owned();
    assert!(
        !raw.contains("sk-sdk-secret"),
        "API key leaked into telemetry"
    );
}

#[tokio::test]
async fn the_official_python_responses_websocket_client_works_through_tokentap() {
    use support::otlp::Collector;
    let col = Collector::start().await;
    let upstream = replay_upstream("responses_ws.jsonl", Duration::from_millis(50)).await;
    let proxy = InProc::start(&toml(&upstream).otlp(&col.endpoint(), "grpc")).await;
    let got = run_sdk_script("responses_ws.py", &proxy).await;
    assert_eq!(got["output_tokens"], 58, "{got}");
    let response = col
        .wait_span(STEP_TIMEOUT, "response", |s| s.name.starts_with("chat"))
        .await;
    assert_eq!(
        response.attr("gen_ai.usage.output_tokens").as_i64(),
        Some(58)
    );
    assert_eq!(
        response.attr("gen_ai.usage.input_tokens").as_i64(),
        got["input_tokens"].as_i64()
    );
    assert_eq!(
        response.attr("gen_ai.request.model").as_str(),
        Some("gpt-5.2")
    );
    proxy.shutdown().await;
}

#[tokio::test]
async fn a_message_over_max_message_bytes_passes_unread_and_is_counted() {
    use support::otlp::Collector;
    let col = Collector::start().await;
    let (upstream, _) = ws_upstream(Script::Echo).await;
    let toml = toml(&upstream)
        .set("websocket", "max_message_bytes", &q("1KiB"))
        .otlp(&col.endpoint(), "grpc");
    let proxy = InProc::start(&toml).await;
    let (mut ws, _) = connect(&proxy, "/v1/realtime?model=gpt-realtime", &[])
        .await
        .unwrap();
    // Valid JSON, so only its size keeps metering from reading it.
    let small = Message::text(r#"{"type":"session.update"}"#);
    let big = Message::text(format!(
        r#"{{"type":"session.update","pad":"{}"}}"#,
        "x".repeat(4096)
    ));
    for m in [&small, &big, &small] {
        ws.send(m.clone()).await.unwrap();
        let back = within(STEP_TIMEOUT, "echo", ws.next())
            .await
            .unwrap()
            .unwrap();
        assert!(&back == m, "message relayed unchanged both ways");
    }
    ws.close(None).await.unwrap();
    let _ = within(STEP_TIMEOUT, "close echo", ws.next()).await;
    drop(ws);
    let session = col
        .wait_span(STEP_TIMEOUT, "session", |s| s.name.starts_with("websocket"))
        .await;
    assert_eq!(
        session.attr("tokentap.session.errors").as_i64(),
        Some(2),
        "the oversized message is skipped once each way, the small ones are read"
    );
    assert!(
        !session.attrs.contains_key("tokentap.session.unmetered"),
        "a skipped message does not stop metering"
    );
    proxy.shutdown().await;
}

#[tokio::test]
async fn a_slow_handshake_is_cut_after_header_read_timeout() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (upstream, _) = ws_upstream(Script::Echo).await;
    let toml = toml(&upstream).set("server", "header_read_timeout", &q("300ms"));
    let proxy = InProc::start(&toml).await;
    let mut tcp = TcpStream::connect(proxy.addr).await.unwrap();
    // Half an Upgrade request head, never finished.
    tcp.write_all(
        b"GET /v1/realtime HTTP/1.1\r\nhost: x\r\nconnection: Upgrade\r\nupgrade: websocket\r\n",
    )
    .await
    .unwrap();
    let mut rest = Vec::new();
    let read = within(
        STEP_TIMEOUT,
        "the proxy to close a slow handshake",
        tcp.read_to_end(&mut rest),
    )
    .await;
    // Closed (EOF or reset); whatever was said before is no 101.
    let said = String::from_utf8_lossy(&rest);
    assert!(
        read.is_err() || !said.starts_with("HTTP/1.1 101"),
        "no session from half a head: {said}"
    );
    let (mut ws, _) = connect(&proxy, "/v1/realtime", &[]).await.unwrap();
    ws.send(Message::text("after")).await.unwrap();
    let back = within(STEP_TIMEOUT, "echo", ws.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(back, Message::text("after"), "a normal session still works");
    ws.close(None).await.unwrap();
    proxy.shutdown().await;
}

#[tokio::test]
async fn a_reserved_opcode_from_the_upstream_passes_and_metering_says_why() {
    use support::otlp::Collector;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let col = Collector::start().await;
    // Opcode 3 is reserved (RFC 6455 §5.2).
    let down = vec![raw_frame(3, false, b"not a known frame", None)];
    let (upstream, got_up) = raw_upstream(down.clone()).await;
    let proxy = InProc::start(&toml(&upstream).otlp(&col.endpoint(), "grpc")).await;
    let (mut tcp, head) = raw_client(&proxy, None).await;
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    let sent = raw_frame(
        1,
        false,
        br#"{"type":"response.create"}"#,
        Some([9, 8, 7, 6]),
    );
    tcp.write_all(&sent).await.unwrap();
    let mut back = vec![0; down[0].len()];
    within(STEP_TIMEOUT, "reserved frame", tcp.read_exact(&mut back))
        .await
        .unwrap();
    support::assert_bytes_eq("upstream → client bytes", &back, &down[0]);
    tcp.shutdown().await.unwrap();
    drop(tcp);
    let session = col
        .wait_span(STEP_TIMEOUT, "session", |s| s.name.starts_with("websocket"))
        .await;
    let why = session
        .attr("tokentap.session.unmetered")
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        why.contains("upstream frames") && why.contains("reserved opcode"),
        "{why}"
    );
    proxy.shutdown().await;
    let up = got_up.lock().unwrap().clone();
    support::assert_bytes_eq("client → upstream bytes", &up, &sent);
}

/// The body of `GET path` on the admin listener at `addr`.
async fn admin_body(addr: std::net::SocketAddr, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    let req = format!("GET {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n\r\n");
    tcp.write_all(req.as_bytes()).await.unwrap();
    let mut res = Vec::new();
    within(STEP_TIMEOUT, path, tcp.read_to_end(&mut res))
        .await
        .unwrap();
    let res = String::from_utf8(res).unwrap();
    assert!(res.starts_with("HTTP/1.1 200"), "{path}: {res}");
    res.split_once("\r\n\r\n").unwrap().1.to_owned()
}

#[tokio::test]
async fn readyz_and_api_live_count_open_sessions() {
    let (upstream, _) = ws_upstream(Script::Echo).await;
    let toml = toml(&upstream).top("admin_listen", &q("127.0.0.1:0"));
    let proxy = InProc::start(&toml).await;
    let admin = proxy.running().unwrap().admin_addr.unwrap();
    let live = |body: String| -> serde_json::Value { serde_json::from_str(&body).unwrap() };
    assert_eq!(
        admin_body(admin, "/readyz").await,
        "ready\nwebsocket_sessions: 0\n"
    );
    let (mut ws, _) = connect(&proxy, "/v1/realtime", &[]).await.unwrap();
    ws.send(Message::text("hi")).await.unwrap();
    within(STEP_TIMEOUT, "echo", ws.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        admin_body(admin, "/readyz").await,
        "ready\nwebsocket_sessions: 1\n",
        "first line unchanged, the open session counted"
    );
    assert_eq!(
        live(admin_body(admin, "/api/live").await)["websocket_sessions"],
        1
    );
    ws.close(None).await.unwrap();
    let _ = within(STEP_TIMEOUT, "close echo", ws.next()).await;
    drop(ws);
    let closed = async {
        while live(admin_body(admin, "/api/live").await)["websocket_sessions"] != 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    within(
        STEP_TIMEOUT,
        "the closed session to leave the count",
        closed,
    )
    .await;
    proxy.shutdown().await;
}

// ---- WebSockets over HTTP/2 (RFC 8441 extended CONNECT), h2c ----

/// An h2c (prior knowledge) connection to `proxy` that may send extended
/// CONNECT.
async fn h2_client(proxy: &InProc) -> H2Sender {
    h2_handshake(TcpStream::connect(proxy.addr).await.unwrap()).await
}

/// A WebSocket to `path` over HTTP/2 through `proxy` (`sec-websocket-version`
/// 13 plus `extra` headers): the raw stream after the `200`, its head, and
/// the connection's handle (the connection lives as long as it does).
async fn h2_open(
    proxy: &InProc,
    path: &str,
    extra: &[(&str, &str)],
) -> (H2Stream, http::response::Parts, H2Sender) {
    let mut sender = h2_client(proxy).await;
    let mut headers = vec![("sec-websocket-version", "13")];
    headers.extend_from_slice(extra);
    let authority = proxy.addr.to_string();
    let res = h2_connect(
        &mut sender,
        "http",
        &authority,
        path,
        Some("websocket"),
        &headers,
    )
    .await;
    let (head, body) = res.into_parts();
    let stream = h2_upgraded(http::Response::from_parts(head.clone(), body)).await;
    (stream, head, sender)
}

/// [`h2_open`] with a WebSocket client on the stream.
async fn h2_websocket(
    proxy: &InProc,
    path: &str,
    extra: &[(&str, &str)],
) -> (
    tokio_tungstenite::WebSocketStream<H2Stream>,
    http::response::Parts,
    H2Sender,
) {
    use tokio_tungstenite::tungstenite::protocol::Role;
    let (stream, head, sender) = h2_open(proxy, path, extra).await;
    let ws = tokio_tungstenite::WebSocketStream::from_raw_socket(stream, Role::Client, None).await;
    (ws, head, sender)
}

#[tokio::test]
async fn over_http2_frames_close_codes_and_handshake_headers_pass_unchanged() {
    let (upstream, seen) = ws_upstream(Script::Echo).await;
    let proxy = InProc::start(&toml(&upstream)).await;
    let (mut ws, head, _conn) = h2_websocket(
        &proxy,
        "/v1/realtime?model=gpt-realtime",
        &[
            ("authorization", "Bearer sk-test"),
            ("sec-websocket-protocol", "chat, superchat"),
            ("sec-websocket-extensions", "x-made-up; a=1"),
            ("openai-beta", "realtime=v1"),
        ],
    )
    .await;
    assert_eq!(
        head.headers.get("sec-websocket-protocol").unwrap(),
        "chat",
        "subprotocol negotiated end to end"
    );
    assert_eq!(head.headers.get("x-upstream").unwrap(), "yes");
    for h1_only in ["upgrade", "connection", "sec-websocket-accept"] {
        assert!(
            head.headers.get(h1_only).is_none(),
            "{h1_only} is not sent to an HTTP/2 client: {:?}",
            head.headers
        );
    }
    {
        let seen = seen.lock().unwrap();
        let h = &seen[0];
        assert_eq!(h.get("authorization").unwrap(), "Bearer sk-test");
        assert_eq!(h.get("sec-websocket-protocol").unwrap(), "chat, superchat");
        assert_eq!(h.get("sec-websocket-extensions").unwrap(), "x-made-up; a=1");
        assert_eq!(h.get("sec-websocket-version").unwrap(), "13");
        assert_eq!(h.get("openai-beta").unwrap(), "realtime=v1");
        assert_eq!(h.get("upgrade").unwrap(), "websocket");
        assert_eq!(h.get("connection").unwrap(), "Upgrade");
        let key = h.get("sec-websocket-key").expect("tokentap makes a key");
        assert_eq!(key.len(), 24, "16 bytes in base64: {key:?}");
    }
    // The upstream's accept was checked by tokentap; tungstenite's server
    // checked the rest of the handshake tokentap made.
    exchange_frames(&mut ws).await;
    proxy.shutdown().await;
}

#[tokio::test]
async fn over_http2_a_realtime_response_is_metered_inside_its_session_span() {
    use support::otlp::Collector;
    let col = Collector::start().await;
    let upstream = replay_upstream("openai_text.jsonl", Duration::from_millis(20)).await;
    let proxy = InProc::start(&toml(&upstream).otlp(&col.endpoint(), "grpc")).await;
    let (ws, _, conn) = h2_websocket(&proxy, "/v1/realtime?model=gpt-realtime", &[]).await;
    play_transcript(ws, "openai_text.jsonl").await;
    drop(conn);
    let session = col
        .wait_span(STEP_TIMEOUT, "session", |s| s.name.starts_with("websocket"))
        .await;
    assert_eq!(session.name, "websocket gpt-realtime");
    assert_eq!(
        session.attr("tokentap.session.end").as_str(),
        Some("client_closed")
    );
    let responses: Vec<_> = col
        .spans()
        .into_iter()
        .filter(|s| s.parent_span_id == session.span_id)
        .collect();
    assert_eq!(responses.len(), 1, "one response span: {responses:?}");
    let response = &responses[0];
    assert_eq!(
        response.attr("gen_ai.usage.input_tokens").as_i64(),
        Some(190),
        "the upstream's usage"
    );
    assert_eq!(
        response.attr("gen_ai.usage.output_tokens").as_i64(),
        Some(11)
    );
    assert_eq!(response.attr("tokentap.outcome").as_str(), Some("complete"));
    assert_eq!(session.attr("tokentap.session.responses").as_i64(), Some(1));
    proxy.shutdown().await;
}

#[tokio::test]
async fn over_http2_a_401_from_the_upstream_is_relayed_and_recorded() {
    use support::otlp::Collector;
    let col = Collector::start().await;
    let upstream = refusing_upstream().await;
    let proxy = InProc::start(&toml(&upstream).otlp(&col.endpoint(), "grpc")).await;
    let mut sender = h2_client(&proxy).await;
    let headers = [("sec-websocket-version", "13")];
    let authority = proxy.addr.to_string();
    let path = "/v1/realtime";
    let res = h2_connect(
        &mut sender,
        "http",
        &authority,
        path,
        Some("websocket"),
        &headers,
    )
    .await;
    assert_eq!(res.status(), 401, "upstream status relayed");
    assert_eq!(
        res.headers().get("content-type").unwrap(),
        "application/json"
    );
    let body = http_body_util::BodyExt::collect(res.into_body())
        .await
        .unwrap()
        .to_bytes();
    assert!(
        String::from_utf8_lossy(&body).contains("invalid_api_key"),
        "upstream body relayed: {}",
        String::from_utf8_lossy(&body)
    );
    let session = col
        .wait_span(STEP_TIMEOUT, "session", |s| s.name.starts_with("websocket"))
        .await;
    let response = col
        .wait_span(STEP_TIMEOUT, "error response", |s| {
            s.parent_span_id == session.span_id
        })
        .await;
    assert_eq!(
        response.attr("http.response.status_code").as_i64(),
        Some(401),
        "recorded like any error response: {response:?}"
    );
    proxy.shutdown().await;
}

#[tokio::test]
async fn over_http2_a_connect_that_is_not_websocket_is_refused() {
    let (upstream, seen) = ws_upstream(Script::Echo).await;
    let proxy = InProc::start(&toml(&upstream)).await;
    let mut sender = h2_client(&proxy).await;
    for (protocol, says) in [
        (None, "CONNECT is not supported"),
        (Some("connect-udp"), "websocket"),
    ] {
        let res = h2_connect(
            &mut sender,
            "http",
            &proxy.addr.to_string(),
            "/v1/realtime",
            protocol,
            &[],
        )
        .await;
        assert_eq!(res.status(), 405, "{protocol:?} refused");
        let body = http_body_util::BodyExt::collect(res.into_body())
            .await
            .unwrap()
            .to_bytes();
        let body = String::from_utf8_lossy(&body);
        assert!(body.contains(says), "{protocol:?}: {body}");
        assert!(body.contains("method_not_allowed"), "{body}");
    }
    assert!(
        seen.lock().unwrap().is_empty(),
        "nothing reached the upstream"
    );
    proxy.shutdown().await;
}

#[tokio::test]
async fn over_http2_shutdown_sends_going_away_to_the_client() {
    let (upstream, _) = ws_upstream(Script::Echo).await;
    let toml = Toml::openai(&upstream).set("server", "shutdown_grace", &q("300ms"));
    let proxy = InProc::start(&toml).await;
    let (ws, _, _conn) = h2_websocket(&proxy, "/v1/realtime", &[]).await;
    echo_then_going_away_on_shutdown(ws, proxy).await;
}

#[tokio::test]
async fn over_http2_the_session_cap_holds_and_an_http2_only_upstream_is_a_clear_502() {
    let (upstream, seen) = ws_upstream(Script::Echo).await;
    let toml = toml(&upstream).set("websocket", "max_sessions", "1");
    let proxy = InProc::start(&toml).await;
    let (mut first, _, _conn) = h2_websocket(&proxy, "/v1/realtime", &[]).await;
    let mut sender = h2_client(&proxy).await;
    let authority = proxy.addr.to_string();
    let path = "/v1/realtime";
    let res = h2_connect(
        &mut sender,
        "http",
        &authority,
        path,
        Some("websocket"),
        &[],
    )
    .await;
    assert_eq!(res.status(), 503, "over the cap, HTTP/2 or not");
    first.send(Message::text("still works")).await.unwrap();
    assert_eq!(
        first.next().await.unwrap().unwrap(),
        Message::text("still works")
    );
    proxy.shutdown().await;
    assert_eq!(seen.lock().unwrap().len(), 1, "one handshake went upstream");

    let h2_only = Toml::new().route_with("openai", "/", &upstream, "openai", "http2 = \"always\"");
    let proxy = InProc::start(&h2_only).await;
    let mut sender = h2_client(&proxy).await;
    let authority = proxy.addr.to_string();
    let res = h2_connect(
        &mut sender,
        "http",
        &authority,
        path,
        Some("websocket"),
        &[],
    )
    .await;
    assert_eq!(res.status(), 502);
    let body = http_body_util::BodyExt::collect(res.into_body())
        .await
        .unwrap()
        .to_bytes();
    let body = String::from_utf8_lossy(&body);
    assert!(body.contains("websocket_upstream_http2_only"), "{body}");
    assert_eq!(seen.lock().unwrap().len(), 1, "nothing more went upstream");
    proxy.shutdown().await;
}

#[tokio::test]
async fn over_http2_a_five_megabyte_message_crosses_both_ways() {
    // Far past HTTP/2's 64 KiB initial windows: flow control both ways.
    let (upstream, _) = ws_upstream(Script::Echo).await;
    let proxy = InProc::start(&toml(&upstream)).await;
    let (ws, _, _conn) = h2_websocket(&proxy, "/v1/realtime", &[]).await;
    five_megabytes_echo(ws, proxy).await;
}

#[tokio::test]
async fn over_http2_idle_sessions_are_closed_when_configured() {
    let (upstream, _) = ws_upstream(Script::Echo).await;
    let toml = toml(&upstream).set("websocket", "idle_timeout", &q("200ms"));
    let proxy = InProc::start(&toml).await;
    let (mut ws, _, _conn) = h2_websocket(&proxy, "/v1/realtime", &[]).await;
    let end = within(STEP_TIMEOUT, "idle close", ws.next()).await;
    match end {
        Some(Ok(Message::Close(Some(f)))) => assert_eq!(u16::from(f.code), 1001),
        other => panic!("expected close 1001 after the idle timeout, got {other:?}"),
    }
    let closed = async {
        while proxy.running().unwrap().ws_sessions_active() != 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    within(STEP_TIMEOUT, "session count back to 0", closed).await;
    proxy.shutdown().await;
}

/// Realtime audio is billed at its own rates through a live session: the
/// response span of a metered voice response carries the cost of the
/// fixture's usage under a route price that gives audio, cached and text
/// tokens different rates.
#[tokio::test]
async fn a_realtime_voice_response_is_priced_with_its_audio_rates() {
    use support::otlp::Collector;
    let col = Collector::start().await;
    let upstream = replay_upstream("openai_audio_vad.jsonl", Duration::from_millis(20)).await;
    let prices = "[[routes.prices]]\nmodel = \"gpt-realtime-mini*\"\ninput = 1.0\n\
                  cache_read = 0.1\ninput_audio = 10.0\noutput = 2.0\noutput_audio = 20.0\n";
    let proxy = InProc::start(
        &toml(&upstream)
            .raw_route(prices)
            .otlp(&col.endpoint(), "grpc"),
    )
    .await;
    play_fixture(
        &proxy,
        "openai_audio_vad.jsonl",
        "/v1/realtime?model=gpt-realtime-mini",
    )
    .await;
    let response = col
        .wait_span(STEP_TIMEOUT, "priced response", |s| {
            s.name.starts_with("chat") && s.attrs.contains_key("tokentap.cost.amount")
        })
        .await;
    // Usage: input 318 = 192 cached (text) + 67 audio + 59 other text;
    // output 94 = 73 audio + 21 text. Each token is billed once, at the
    // most specific rate that has a price.
    let want = (192.0 * 0.1 + 67.0 * 10.0 + 59.0 * 1.0 + 73.0 * 20.0 + 21.0 * 2.0) / 1e6;
    let got = response.attr("tokentap.cost.amount").as_f64().unwrap();
    assert!(
        (got - want).abs() <= want * 1e-9,
        "cost: got {got}, want {want}"
    );
    assert_eq!(
        response.attr("tokentap.cost.currency").as_str(),
        Some("USD")
    );
    assert_eq!(
        response.attr("tokentap.cost.source").as_str(),
        Some("override")
    );
    proxy.shutdown().await;
}
