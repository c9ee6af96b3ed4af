//! Nothing billed that never reached the provider: tokens and cost belong
//! only to requests whose head was written to the upstream. Each way a
//! request can fail before it leaves tokentap, through the real server
//! with a real OTLP receiver and the admin listener, records no input
//! tokens (not even the tokenizer's estimate) and no cost on the span, in
//! `tokentap_cost_usd_total` and the input-token instruments, and in the
//! session's rollup:
//! - `connect_refused` (streamed, and `connect_refused_not_streamed`),
//!   `dns_failure` (a `.invalid` name), `tls_failure`
//!   (the upstream speaks plain HTTP), `proxy_connect_refused` (the route's
//!   egress proxy answers CONNECT with 403), `pool_wait_timeout` (every
//!   HTTP/2 stream slot taken, `http2_queue_timeout` passes),
//!   `client_leaves_first` (the client goes while the TLS handshake hangs).
//!
//! The control, `a_sent_stream_without_usage_is_estimated_and_priced`,
//! sends the same request to an upstream that answers without usage: it
//! gets estimated input tokens and a cost through every one of those
//! readings, so each zero above is a real zero.
#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test
#![allow(
    clippy::disallowed_methods,
    reason = "tests set deadlines with the clock"
)]

mod support;

use std::net::SocketAddr;
use std::time::Duration;

use serde_json::json;
use support::client::{self, Req};
use support::h2up::{H2Up, Plan};
use support::inspect::scrape;
use support::otlp::{Collector, SpanRec};
use support::proxy::{InProc, Scratch, Toml, q};
use support::script::{self, StreamSpec};
use support::tls::TestCa;
use support::upstream::Upstream;
use support::{Background, STEP_TIMEOUT, within};

const CHAT: &str = "/v1/chat/completions";
/// A priced model with an OpenAI encoding: the tokenizer would count it.
const MODEL: &str = "gpt-4o-mini";
const SESSION: &str = "never-sent-7c1e";

/// A streamed chat that does not ask for usage, so only the tokenizer
/// could give it input tokens.
fn chat_body(model: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "model": model,
        "stream": true,
        "messages": [{"role": "user", "content": "Count the words in this sentence, please."}],
    }))
    .unwrap()
}

fn chat(addr: SocketAddr, model: &str) -> Req {
    Req::post_json(addr, CHAT, chat_body(model)).header("x-claude-code-session-id", SESSION)
}

/// The same chat, not streamed.
fn whole_chat(addr: SocketAddr, model: &str) -> Req {
    let mut body: serde_json::Value = serde_json::from_slice(&chat_body(model)).unwrap();
    body["stream"] = json!(false);
    Req::post_json(addr, CHAT, serde_json::to_vec(&body).unwrap())
        .header("x-claude-code-session-id", SESSION)
}

/// tokentap with an admin listener and OTLP export to its own receiver,
/// one OpenAI route `/` to `upstream` (with `route_extra` lines).
struct Front {
    proxy: InProc,
    col: Collector,
    admin: SocketAddr,
}

impl Front {
    async fn start(upstream: &str, route_extra: &str, settings: &[(&str, &str, &str)]) -> Front {
        let col = Collector::start().await;
        let mut toml = Toml::new()
            .otlp(&col.endpoint(), "grpc")
            .top("admin_listen", &q("127.0.0.1:0"))
            .route_with("r", "/", upstream, "openai", route_extra);
        for (section, key, value) in settings {
            toml = toml.set(section, key, value);
        }
        let proxy = InProc::start(&toml).await;
        let admin = proxy.running().unwrap().admin_addr.unwrap();
        Front { proxy, col, admin }
    }

    /// Send the chat for `model` and read the answer to its end.
    async fn chat(&self, model: &str) -> client::Streamed {
        client::fetch(&client::http1(), &chat(self.proxy.addr, model)).await
    }
}

/// What one request for `model` was billed, read everywhere it shows.
#[derive(Debug)]
struct Billed {
    span_input: Option<i64>,
    span_cost: Option<f64>,
    outcome: String,
    error_type: String,
    /// `gen_ai_client_inference_usage_input_tokens_total` and the input
    /// tokens histogram's sum, for the model.
    metric_input: f64,
    /// `tokentap_cost_usd_total` for the model.
    metric_cost: f64,
    session_input: u64,
    session_cost: f64,
}

/// `GET path` on the admin listener, as JSON.
async fn admin_json(admin: SocketAddr, path: &str) -> (u16, serde_json::Value) {
    let mut req = Req::get(admin, path);
    req.headers.clear();
    let got = client::fetch(&client::http1(), &req).await;
    (got.status.as_u16(), got.json())
}

/// The session's rollup once it counts its one request.
async fn session(admin: SocketAddr) -> serde_json::Value {
    let deadline = tokio::time::Instant::now() + STEP_TIMEOUT;
    loop {
        let (status, s) = admin_json(admin, &format!("/api/sessions?id={SESSION}")).await;
        if status == 200 && s["requests"].as_u64() == Some(1) {
            return s;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the session never counted its request: {status} {s:#}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Read what the request for `model` was billed, then stop the proxy.
async fn billed(mut front: Front, model: &str) -> Billed {
    let s = session(front.admin).await;
    let metrics = scrape(&client::http1(), front.admin).await;
    let of_model = |pick: &dyn Fn(&str) -> bool| -> f64 {
        metrics
            .samples
            .iter()
            .filter(|x| pick(&x.name))
            .filter(|x| x.labels.get("gen_ai_request_model").map(String::as_str) == Some(model))
            .map(|x| x.value)
            .sum()
    };
    let metric_input = of_model(&|n| {
        n == "gen_ai_client_inference_usage_input_tokens_total"
            || (n.starts_with("gen_ai_client_inference_operation_input_tokens")
                && n.ends_with("_sum"))
    });
    let metric_cost = of_model(&|n| n == "tokentap_cost_usd_total");
    front.proxy.stop().await;
    let span: SpanRec = front
        .col
        .wait_span(STEP_TIMEOUT, "the request's span", |x| {
            x.attrs
                .get("gen_ai.conversation.id")
                .and_then(|v| v.as_str())
                == Some(SESSION)
        })
        .await;
    let text = |key: &str| {
        span.attrs
            .get(key)
            .and_then(|v| v.as_str())
            .unwrap_or("")
            .to_owned()
    };
    Billed {
        span_input: span
            .attrs
            .get("gen_ai.usage.input_tokens")
            .and_then(|v| v.as_i64()),
        span_cost: span
            .attrs
            .get("tokentap.cost.amount")
            .and_then(|v| v.as_f64()),
        outcome: text("tokentap.outcome"),
        error_type: text("error.type"),
        metric_input,
        metric_cost,
        session_input: s["input_tokens"].as_u64().unwrap_or(0),
        session_cost: s["cost_usd"].as_f64().unwrap_or(0.0),
    }
}

/// No tokens and no cost anywhere, and the span says how it ended.
#[track_caller]
fn assert_nothing_billed(case: &str, b: &Billed, outcome: &str, error_type: &str) {
    assert_eq!(b.outcome, outcome, "{case}: outcome {b:#?}");
    assert_eq!(b.error_type, error_type, "{case}: error.type {b:#?}");
    assert!(
        b.span_input.unwrap_or(0) == 0 && b.span_cost.is_none(),
        "{case}: the span has no input tokens and no cost: {b:#?}"
    );
    assert!(
        b.metric_input == 0.0 && b.metric_cost == 0.0,
        "{case}: the input-token and cost metrics stay at zero: {b:#?}"
    );
    assert!(
        b.session_input == 0 && b.session_cost == 0.0,
        "{case}: the session's rollup has no input tokens and no cost: {b:#?}"
    );
}

#[tokio::test]
async fn a_sent_stream_without_usage_is_estimated_and_priced() {
    let spec = StreamSpec::tokens(3, Duration::ZERO, Duration::ZERO)
        .without_usage()
        .model(MODEL);
    let reply = script::openai_chat_sse(&spec);
    let up = Upstream::start(move |_| reply.clone()).await;
    let front = Front::start(&up.url(), "", &[]).await;
    let got = front.chat(MODEL).await;
    assert_eq!(got.status, 200, "{}", got.text());
    let b = billed(front, MODEL).await;
    assert_eq!(b.outcome, "complete", "{b:#?}");
    let input = b.span_input.unwrap_or(0);
    assert!(input > 0, "the tokenizer estimated the input: {b:#?}");
    assert!(
        b.span_cost.unwrap_or(0.0) > 0.0,
        "the estimate is priced: {b:#?}"
    );
    assert_eq!(
        b.metric_input,
        2.0 * input as f64,
        "counter + histogram sum: {b:#?}"
    );
    assert!(b.metric_cost > 0.0, "{b:#?}");
    assert_eq!(b.session_input, input as u64, "{b:#?}");
    assert!(b.session_cost > 0.0, "{b:#?}");
}

#[tokio::test]
async fn connect_refused() {
    // Bound and never listening: connecting to it is refused.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let port = socket.local_addr().unwrap().port();
    let front = Front::start(&format!("http://127.0.0.1:{port}"), "", &[]).await;
    let got = front.chat(MODEL).await;
    assert_eq!(got.status, 502, "{}", got.text());
    let b = billed(front, MODEL).await;
    assert_nothing_billed(
        "connect refused",
        &b,
        "upstream_error",
        "upstream_unreachable",
    );
    drop(socket);
}

#[tokio::test]
async fn connect_refused_not_streamed() {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let port = socket.local_addr().unwrap().port();
    let front = Front::start(&format!("http://127.0.0.1:{port}"), "", &[]).await;
    let got = client::fetch(&client::http1(), &whole_chat(front.proxy.addr, MODEL)).await;
    assert_eq!(got.status, 502, "{}", got.text());
    let b = billed(front, MODEL).await;
    assert_nothing_billed(
        "connect refused, not streamed",
        &b,
        "upstream_error",
        "upstream_unreachable",
    );
    drop(socket);
}

#[tokio::test]
async fn dns_failure() {
    // `.invalid` never resolves (RFC 6761).
    let front = Front::start(
        "http://tokentap-never-sent.invalid",
        "",
        &[("upstream", "connect_timeout", "\"3s\"")],
    )
    .await;
    let got = front.chat(MODEL).await;
    let b = billed(front, MODEL).await;
    // A resolver that cannot be reached times out instead of failing.
    let (outcome, code) = match got.status.as_u16() {
        504 => ("upstream_timeout", "upstream_timeout"),
        _ => ("upstream_error", "upstream_unreachable"),
    };
    assert!(matches!(got.status.as_u16(), 502 | 504), "{}", got.text());
    assert_nothing_billed("DNS failure", &b, outcome, code);
}

#[tokio::test]
async fn tls_failure() {
    // A plain-HTTP server behind an https:// upstream URL.
    let reply = script::openai_chat_sse(&StreamSpec::tokens(1, Duration::ZERO, Duration::ZERO));
    let up = Upstream::start(move |_| reply.clone()).await;
    let front = Front::start(&format!("https://{}", up.addr), "", &[]).await;
    let got = front.chat(MODEL).await;
    assert_eq!(got.status, 502, "{}", got.text());
    let b = billed(front, MODEL).await;
    assert_nothing_billed("TLS failure", &b, "upstream_error", "upstream_tls_error");
}

#[tokio::test]
async fn proxy_connect_refused() {
    use support::forward::{ForwardProxy, OnConnect};
    let proxy = ForwardProxy::start(OnConnect::Refuse(403, "Forbidden")).await;
    let extra = format!("proxy = {}", q(&proxy.url(None)));
    let front = Front::start("https://localhost:9", &extra, &[]).await;
    let got = front.chat(MODEL).await;
    assert_eq!(got.status, 502, "{}", got.text());
    assert_eq!(proxy.asked().len(), 1, "the proxy was asked once");
    let b = billed(front, MODEL).await;
    assert_nothing_billed(
        "proxy CONNECT refused",
        &b,
        "upstream_error",
        "upstream_proxy_error",
    );
}

/// An HTTP/2 upstream allowing one stream per connection, one connection:
/// a long stream holds the only slot.
async fn full_pool(ca: &TestCa, scratch: &Scratch, queue_timeout: &str) -> (H2Up, Front) {
    let long = Plan::Sse {
        more: 40,
        gap: Duration::from_millis(100),
    };
    let up = H2Up::start(ca, 1, move |_, _| long.clone()).await;
    let ca_file = scratch.write("ca.pem", ca.pem());
    let settings = [
        ("upstream", "ca_file", q(&ca_file.display().to_string())),
        ("upstream", "http2_max_connections_per_host", "1".to_owned()),
        ("upstream", "http2_queue_timeout", q(queue_timeout)),
        ("server", "threads", "1".to_owned()),
    ];
    let settings: Vec<(&str, &str, &str)> = settings
        .iter()
        .map(|(s, k, v)| (*s, *k, v.as_str()))
        .collect();
    let front = Front::start(&up.url(), "", &settings).await;
    (up, front)
}

/// Start the long stream that holds the slot (another model, no session),
/// and wait until its first chunk arrived.
async fn hold_the_slot(front: &Front) -> Background {
    let req = Req::post_json(front.proxy.addr, CHAT, chat_body("gpt-4o"));
    let (mut res, _) = client::send(&client::http1(), &req).await;
    assert_eq!(res.status(), 200, "the first stream is served");
    within(
        STEP_TIMEOUT,
        "the first stream's first chunk",
        client::read_until(res.body_mut(), "data:"),
    )
    .await;
    Background::spawn(async move {
        let _ = client::read_all(res, std::time::Instant::now(), STEP_TIMEOUT).await;
    })
}

#[tokio::test]
async fn pool_wait_timeout() {
    let (ca, scratch) = (TestCa::new(), Scratch::new("never-sent-pool"));
    let (up, front) = full_pool(&ca, &scratch, "300ms").await;
    let _held = hold_the_slot(&front).await;
    let got = front.chat(MODEL).await;
    assert_eq!(got.status, 503, "{}", got.text());
    assert_eq!(
        up.streams(),
        1,
        "only the first stream reached the upstream"
    );
    let b = billed(front, MODEL).await;
    assert_nothing_billed(
        "pool wait timeout",
        &b,
        "upstream_error",
        "upstream_queue_timeout",
    );
}

#[tokio::test]
async fn client_leaves_first() {
    // Accepts TCP and never answers: the TLS handshake hangs.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = silent.local_addr().unwrap();
    let _accepting = Background::spawn(async move {
        let mut held = Vec::new();
        while let Ok((conn, _)) = silent.accept().await {
            held.push(conn);
        }
    });
    let front = Front::start(
        &format!("https://{addr}"),
        "",
        &[("upstream", "connect_timeout", "\"30s\"")],
    )
    .await;
    let req = chat(front.proxy.addr, MODEL);
    let c = client::http1();
    let left = tokio::time::timeout(Duration::from_millis(500), client::send(&c, &req)).await;
    assert!(left.is_err(), "no answer came before the client left");
    let b = billed(front, MODEL).await;
    assert_nothing_billed(
        "client left first",
        &b,
        "client_cancelled",
        "client_cancelled",
    );
}
