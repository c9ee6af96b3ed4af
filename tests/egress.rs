//! Egress through a forward proxy (`HTTPS_PROXY` and friends,
//! `routes[].proxy`), against a real CONNECT proxy on 127.0.0.1
//! (`support::forward`) in front of TLS and plain upstreams:
//! - `https_goes_through_the_tunnel_and_no_proxy_bypasses_it`: the bytes
//!   and the measurement arrive intact through the tunnel, TLS is verified
//!   against the upstream's CA inside it, Basic credentials from the proxy
//!   URL arrive percent-decoded, and a `NO_PROXY` entry goes direct.
//! - `http2_upstreams_work_through_the_tunnel`: ALPN picks h2 inside it.
//! - `a_refused_connect_is_a_clear_502`: 407 and 403 name the proxy and
//!   its status, with the credentials redacted.
//! - `a_route_choice_wins_over_the_environment`: `proxy = "none"` and an
//!   explicit proxy URL.
//! - `plain_http_goes_in_absolute_form`.
//! - `websocket_upstreams_go_through_the_tunnel`.
//! - `the_binary_reads_the_variables_and_config_shows_them_redacted`: the
//!   real binary with the variables in its environment only.
//! - `otlp_http_export_goes_through_the_proxy`,
//!   `otlp_grpc_export_goes_through_the_proxy`: spans reach a real OTLP
//!   receiver through the proxy while the route goes direct.
#![allow(
    clippy::disallowed_methods,
    reason = "tests set deadlines with the wall clock"
)]
#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokentap::config::proxy::ProxyEnv;

use support::client::{Req, fetch, http1};
use support::forward::{Asked, ForwardProxy, OnConnect};
use support::proxy::{Bin, Scratch, Toml, q};
use support::script::{self, StreamSpec};
use support::tls::{TestCa, TlsUpstream};
use support::upstream::Reply;
use support::{STEP_TIMEOUT, faulty, within};

const CHAT: &str =
    r#"{"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;

/// A TLS upstream for `localhost` serving HTTP/1.1 with `reply`.
async fn tls_upstream(ca: &TestCa, reply: Reply) -> (TlsUpstream, Arc<AtomicUsize>) {
    let requests = Arc::new(AtomicUsize::new(0));
    let r = requests.clone();
    let up = TlsUpstream::start(
        ca.server_config(&["localhost"], &[b"http/1.1"]),
        0,
        move |tls| faulty::serve_h1(tls, reply.clone(), r.clone()),
    )
    .await;
    (up, requests)
}

/// Start tokentap in this process with `toml` and the proxy variables
/// `vars` (injected: the test process's environment is never touched).
async fn start(toml: &Toml, vars: &[(&str, &str)]) -> tokentap::app::Running {
    let text = toml.render();
    let mut config = tokentap::config::from_toml(&text)
        .unwrap_or_else(|e| panic!("test config rejected: {e}\n{text}"));
    let vars: Vec<(String, String)> = vars
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    config.proxy_env = ProxyEnv::from_vars(&vars).expect("valid proxy variables");
    within(STEP_TIMEOUT, "start", tokentap::app::start(config))
        .await
        .unwrap_or_else(|e| panic!("start failed: {e:#}"))
}

/// The sum of `metric`'s samples for `route` in a Prometheus scrape.
fn sample(running: &tokentap::app::Running, metric: &str, route: &str) -> f64 {
    let text = running
        .telemetry()
        .scrape(tokentap::ship::prometheus::Format::Text)
        .unwrap();
    let route = format!("tokentap_route=\"{route}\"");
    text.lines()
        .filter(|l| l.starts_with(&format!("{metric}{{")) && l.contains(&route))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// One serving thread: connections are pooled per thread, and the tests
/// count them.
fn one_thread() -> Toml {
    Toml::new().set("server", "threads", "1")
}

/// A route `name` on `/name` to `upstream`, with extra TOML lines.
fn route(toml: Toml, name: &str, upstream: &str, extra: &str) -> Toml {
    toml.route_with(name, &format!("/{name}"), upstream, "openai", extra)
}

/// POST the streaming chat request to `/{route}/v1/chat/completions`.
async fn chat(running: &tokentap::app::Running, route: &str) -> support::client::Streamed {
    let req = Req::post_json(running.addr, &format!("/{route}/v1/chat/completions"), CHAT);
    fetch(&http1(), &req).await
}

fn connects(asked: &[Asked]) -> Vec<String> {
    asked
        .iter()
        .filter(|a| a.method == "CONNECT")
        .map(|a| a.target.clone())
        .collect()
}

#[tokio::test]
async fn https_goes_through_the_tunnel_and_no_proxy_bypasses_it() {
    let ca = TestCa::new();
    let scratch = Scratch::new("egress-tunnel");
    let ca_file = scratch.write("ca.pem", ca.pem());
    let spec = StreamSpec::text(&["Hel", "lo ", "there"]).with_usage(7, 3);
    let reply = script::openai_chat_sse(&spec);
    let (tunnelled, via_proxy) = tls_upstream(&ca, reply.clone()).await;
    let (bypassed, direct) = tls_upstream(&ca, reply.clone()).await;
    let proxy = ForwardProxy::start(OnConnect::Tunnel).await;
    let toml = one_thread().set("upstream", "ca_file", &q(&ca_file.display().to_string()));
    let toml = route(toml, "tunnelled", &tunnelled.url("localhost"), "");
    let toml = route(toml, "bypassed", &bypassed.url("localhost"), "");
    let no_proxy = format!("example.internal, localhost:{}", bypassed.addr.port());
    let running = start(
        &toml,
        &[
            ("https_proxy", &proxy.url(Some("team%2Fa:s3cr%40t"))),
            ("NO_PROXY", &no_proxy),
        ],
    )
    .await;

    for _ in 0..2 {
        let got = chat(&running, "tunnelled").await;
        assert_eq!(got.status, 200, "{}", got.text());
        support::assert_bytes_eq("body through the tunnel", &got.body, &reply.body_bytes());
    }
    let asked = proxy.asked();
    let target = format!("localhost:{}", tunnelled.addr.port());
    assert_eq!(
        connects(&asked),
        std::slice::from_ref(&target),
        "one CONNECT to the upstream; the second request reused the tunnelled connection"
    );
    // base64("team/a:s3cr@t")
    assert_eq!(
        asked[0].authorization.as_deref(),
        Some("Basic dGVhbS9hOnMzY3JAdA=="),
        "percent-decoded Basic credentials"
    );
    assert_eq!(via_proxy.load(Ordering::SeqCst), 2);
    assert_eq!(
        tunnelled.sni(),
        [Some("localhost".to_owned())],
        "TLS inside the tunnel names the upstream, not the proxy"
    );
    let out = sample(
        &running,
        "gen_ai_client_inference_usage_output_tokens_total",
        "tunnelled",
    );
    assert_eq!(
        out, 6.0,
        "3 output tokens per request, metered through the tunnel"
    );

    let got = chat(&running, "bypassed").await;
    assert_eq!(got.status, 200, "{}", got.text());
    support::assert_bytes_eq("body sent direct", &got.body, &reply.body_bytes());
    assert_eq!(direct.load(Ordering::SeqCst), 1);
    assert_eq!(
        connects(&proxy.asked()),
        [target],
        "NO_PROXY's host:port entry went direct"
    );
    running.shutdown().await;
}

#[tokio::test]
async fn http2_upstreams_work_through_the_tunnel() {
    use support::h2up::{H2Up, Plan};
    let ca = TestCa::new();
    let scratch = Scratch::new("egress-h2");
    let ca_file = scratch.write("ca.pem", ca.pem());
    let up = H2Up::start(&ca, 100, |_, _| Plan::Sse {
        more: 3,
        gap: std::time::Duration::ZERO,
    })
    .await;
    let proxy = ForwardProxy::start(OnConnect::Tunnel).await;
    let toml = one_thread().set("upstream", "ca_file", &q(&ca_file.display().to_string()));
    let toml = route(toml, "h2", &up.tls.url("localhost"), "");
    let running = start(&toml, &[("HTTPS_PROXY", &proxy.url(None))]).await;
    for _ in 0..3 {
        let got = chat(&running, "h2").await;
        assert_eq!(got.status, 200, "{}", got.text());
        assert!(got.text().contains("[DONE]"), "{}", got.text());
    }
    assert_eq!(
        up.tls.alpn(),
        [Some("h2".to_owned())],
        "h2 by ALPN inside the tunnel"
    );
    assert_eq!(up.seen.streams.load(Ordering::SeqCst), 3);
    assert_eq!(
        connects(&proxy.asked()).len(),
        1,
        "one shared HTTP/2 connection"
    );
    running.shutdown().await;
}

#[tokio::test]
async fn a_refused_connect_is_a_clear_502() {
    let ca = TestCa::new();
    let (up, requests) = tls_upstream(&ca, script::openai_chat_json("m", "x", (1, 1))).await;
    for (status, reason, says) in [
        (
            407,
            "Proxy Authentication Required",
            "rejected the credentials",
        ),
        (403, "Forbidden", "does not allow this destination"),
        (502, "Bad Gateway", "502 Bad Gateway"),
    ] {
        let proxy = ForwardProxy::start(OnConnect::Refuse(status, reason)).await;
        let toml = route(Toml::new(), "r", &up.url("localhost"), "");
        let url = proxy.url(Some("user:hunter2"));
        let running = start(&toml, &[("HTTPS_PROXY", &url)]).await;
        let got = chat(&running, "r").await;
        assert_eq!(got.status, 502, "{status}: {}", got.text());
        let body = got.json();
        assert_eq!(body["error"]["code"], "upstream_proxy_error", "{status}");
        let message = body["error"]["message"].as_str().unwrap();
        let named = format!(
            "proxy http://user:<redacted>@{} refused CONNECT localhost:{}: {status} {reason}",
            proxy.addr,
            up.addr.port()
        );
        assert!(message.contains(&named), "{status}: {message}");
        assert!(message.contains(says), "{status}: {message}");
        assert!(!message.contains("hunter2"), "no password: {message}");
        assert_eq!(connects(&proxy.asked()).len(), 1, "{status}: not retried");
        running.shutdown().await;
    }
    assert_eq!(up.accepted(), 0, "nothing reached the upstream");
    assert_eq!(requests.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_route_choice_wins_over_the_environment() {
    let ca = TestCa::new();
    let scratch = Scratch::new("egress-route");
    let ca_file = scratch.write("ca.pem", ca.pem());
    let reply = script::openai_chat_json("m", "ok", (2, 1));
    let (up, requests) = tls_upstream(&ca, reply.clone()).await;
    // The environment's proxy refuses everything: only the routes'
    // choices can get through.
    let env_proxy = ForwardProxy::start(OnConnect::Refuse(403, "Forbidden")).await;
    let own = ForwardProxy::start(OnConnect::Tunnel).await;
    let toml = Toml::new().set("upstream", "ca_file", &q(&ca_file.display().to_string()));
    let toml = route(toml, "direct", &up.url("localhost"), r#"proxy = "none""#);
    let own_line = format!("proxy = {}", q(&own.url(Some("svc:pw"))));
    let toml = route(toml, "own", &up.url("localhost"), &own_line);
    let toml = route(toml, "env", &up.url("localhost"), "");
    let running = start(
        &toml,
        &[
            ("HTTPS_PROXY", &env_proxy.url(None)),
            // An explicit proxy wins over NO_PROXY too.
            ("NO_PROXY", "localhost"),
        ],
    )
    .await;
    for r in ["direct", "own"] {
        let got = chat(&running, r).await;
        assert_eq!(got.status, 200, "{r}: {}", got.text());
        support::assert_bytes_eq(r, &got.body, &reply.body_bytes());
    }
    assert_eq!(requests.load(Ordering::SeqCst), 2);
    assert_eq!(env_proxy.asked(), [], "NO_PROXY and the routes kept it out");
    let asked = own.asked();
    assert_eq!(connects(&asked), [format!("localhost:{}", up.addr.port())]);
    assert_eq!(asked[0].authorization.as_deref(), Some("Basic c3ZjOnB3"));
    assert_eq!(
        up.accepted(),
        2,
        "direct and proxied connections are pooled apart"
    );
    running.shutdown().await;
}

#[tokio::test]
async fn plain_http_goes_in_absolute_form() {
    use support::upstream::Upstream;
    let up = Upstream::fixed_json(r#"{"id":"c","object":"chat.completion","model":"gpt-4o","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}"#).await;
    let proxy = ForwardProxy::start(OnConnect::Refuse(405, "Not Allowed")).await;
    let toml = route(Toml::new(), "plain", &up.url(), "");
    let running = start(&toml, &[("http_proxy", &proxy.url(Some("a:b")))]).await;
    let got = chat(&running, "plain").await;
    assert_eq!(got.status, 200, "{}", got.text());
    assert!(got.text().contains("\"content\":\"hi\""), "{}", got.text());
    let asked = proxy.asked();
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert_eq!(asked[0].method, "POST");
    let authority = up.url().trim_start_matches("http://").to_owned();
    assert_eq!(
        asked[0].target,
        format!("http://{authority}/v1/chat/completions"),
        "absolute form, no CONNECT"
    );
    assert_eq!(asked[0].authorization.as_deref(), Some("Basic YTpi"));
    let seen = up.exchanges();
    assert_eq!(seen.len(), 1);
    assert!(
        seen[0].headers.get("proxy-authorization").is_none(),
        "the proxy's credentials stop at the proxy"
    );
    running.shutdown().await;
}

#[tokio::test]
async fn websocket_upstreams_go_through_the_tunnel() {
    use futures_util::{SinkExt, StreamExt};
    use support::ws::{Script, ws_connect, ws_upstream};
    use tokio_tungstenite::tungstenite::Message;
    let (upstream, seen) = ws_upstream(Script::Echo).await;
    let proxy = ForwardProxy::start(OnConnect::Tunnel).await;
    let toml = Toml::openai(&upstream).set("server", "shutdown_grace", &q("1s"));
    let running = start(&toml, &[("ALL_PROXY", &proxy.url(None))]).await;
    let (mut ws, res) = within(
        STEP_TIMEOUT,
        "handshake",
        ws_connect(running.addr, "/v1/realtime?model=m", &[]),
    )
    .await
    .expect("handshake through tokentap and the proxy");
    assert_eq!(res.status(), 101);
    ws.send(Message::text("through the tunnel")).await.unwrap();
    let back = within(STEP_TIMEOUT, "echo", ws.next()).await;
    assert_eq!(back.unwrap().unwrap(), Message::text("through the tunnel"));
    ws.close(None).await.unwrap();
    drop(ws);
    let authority = upstream.trim_start_matches("http://").to_owned();
    assert_eq!(
        connects(&proxy.asked()),
        [authority],
        "the upgrade went in a CONNECT tunnel"
    );
    assert_eq!(seen.lock().unwrap().len(), 1, "one upstream handshake");
    running.shutdown().await;
}

#[tokio::test]
async fn the_binary_reads_the_variables_and_config_shows_them_redacted() {
    let ca = TestCa::new();
    let scratch = Scratch::new("egress-bin");
    let ca_file = scratch.write("ca.pem", ca.pem());
    let reply = script::openai_chat_json("m", "ok", (2, 1));
    let (up, requests) = tls_upstream(&ca, reply.clone()).await;
    let proxy = ForwardProxy::start(OnConnect::Tunnel).await;
    let toml = Toml::new().top("admin_listen", &q("127.0.0.1:0")).set(
        "upstream",
        "ca_file",
        &q(&ca_file.display().to_string()),
    );
    let toml = route(toml, "env", &up.url("localhost"), "");
    let toml = route(
        toml,
        "own",
        &up.url("localhost"),
        r#"proxy = "http://svc:topsecret@127.0.0.1:9""#,
    );
    let url = proxy.url(Some("u:envsecret"));
    let bin = Bin::start(
        &toml,
        &[],
        &[("HTTPS_PROXY", &url), ("no_proxy", "example.internal")],
    )
    .await;
    let req = Req::post_json(bin.addr, "/env/v1/chat/completions", CHAT);
    let got = fetch(&http1(), &req).await;
    assert_eq!(got.status, 200, "{}", got.text());
    assert_eq!(requests.load(Ordering::SeqCst), 1);
    assert_eq!(
        connects(&proxy.asked()),
        [format!("localhost:{}", up.addr.port())]
    );

    let admin = bin.admin_addr().await;
    let config = fetch(&http1(), &Req::get(admin, "/config")).await.text();
    assert!(
        config.contains(&format!(
            "(from HTTPS_PROXY): http://u:<redacted>@{}",
            proxy.addr
        )),
        "{config}"
    );
    assert!(config.contains("(no_proxy): example.internal"), "{config}");
    assert!(
        config.contains(r#"proxy = "http://svc:<redacted>@127.0.0.1:9""#),
        "{config}"
    );
    for secret in ["envsecret", "topsecret"] {
        assert!(!config.contains(secret), "{secret} in /config:\n{config}");
        assert!(!bin.output().contains(secret), "{secret} in the log");
    }
    drop(bin);
}

#[tokio::test]
async fn an_unsupported_proxy_variable_stops_the_binary_naming_it() {
    let toml = route(Toml::new(), "r", "https://localhost:1", "");
    let scratch = Scratch::new("egress-bad");
    let path = scratch.write("tokentap.toml", &toml.render());
    let mut cmd = support::proxy::bin_command();
    cmd.arg("check")
        .arg("--config")
        .arg(&path)
        .env("HTTPS_PROXY", "socks5://127.0.0.1:1080");
    let out = within(STEP_TIMEOUT, "tokentap check", cmd.output())
        .await
        .unwrap();
    assert!(!out.status.success(), "must refuse");
    let text = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        text.contains("HTTPS_PROXY") && text.contains("socks5:// proxies are not supported"),
        "{text}"
    );
}

/// Export to `http://localhost:PORT` (a real OTLP receiver) with
/// `HTTP_PROXY` set and the route itself going direct: the spans arrive
/// through the proxy, which saw the collector's address.
async fn otlp_export_goes_through_the_proxy(protocol: &str) -> Vec<Asked> {
    use support::otlp::Collector;
    use support::upstream::Upstream;
    let up = Upstream::fixed_json(r#"{"id":"c","object":"chat.completion","model":"gpt-4o","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}"#).await;
    let collector = Collector::start().await;
    let proxy = ForwardProxy::start(OnConnect::Tunnel).await;
    let endpoint = format!("http://localhost:{}", collector.addr.port());
    let toml = route(Toml::new(), "r", &up.url(), r#"proxy = "none""#).otlp(&endpoint, protocol);
    let bin = Bin::start(&toml, &[], &[("HTTP_PROXY", &proxy.url(None))]).await;
    let req = Req::post_json(bin.addr, "/r/v1/chat/completions", CHAT);
    let got = fetch(&http1(), &req).await;
    assert_eq!(got.status, 200, "{}", got.text());
    let span = collector
        .wait_span(STEP_TIMEOUT, "of the chat request", |s| {
            s.name == "chat gpt-4o"
        })
        .await;
    assert_eq!(span.num("gen_ai.usage.output_tokens"), 1.0, "{protocol}");
    assert_eq!(up.exchanges().len(), 1, "the route itself went direct");
    drop(bin);
    proxy.asked()
}

#[tokio::test]
async fn otlp_http_export_goes_through_the_proxy() {
    let asked = otlp_export_goes_through_the_proxy("http/protobuf").await;
    // A plain-HTTP collector is named in absolute form, as for upstreams.
    assert!(
        asked
            .iter()
            .any(|a| a.method == "POST" && a.target.starts_with("http://localhost:")),
        "export asked the proxy for the collector: {asked:?}"
    );
    assert!(connects(&asked).is_empty(), "{asked:?}");
}

#[tokio::test]
async fn otlp_grpc_export_goes_through_the_proxy() {
    let asked = otlp_export_goes_through_the_proxy("grpc").await;
    // HTTP/2 with prior knowledge needs a tunnel.
    let tunnels = connects(&asked);
    assert!(
        !tunnels.is_empty() && tunnels.iter().all(|t| t.starts_with("localhost:")),
        "export asked the proxy for a tunnel to the collector: {asked:?}"
    );
}

/// A proxy refusing the gRPC export's CONNECT: one WARN that names the
/// collector and says the proxy's refusal once, not twice.
#[tokio::test]
async fn a_refused_otlp_grpc_tunnel_is_said_once() {
    use support::upstream::Upstream;
    let up = Upstream::fixed_json(r#"{"id":"c","object":"chat.completion","model":"gpt-4o","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}"#).await;
    let proxy = ForwardProxy::start(OnConnect::Refuse(403, "Forbidden")).await;
    let endpoint = "http://localhost:9";
    let toml = route(Toml::new(), "r", &up.url(), r#"proxy = "none""#)
        .otlp(endpoint, "grpc")
        .set("telemetry", "otlp_timeout", &q("1s"));
    let bin = Bin::start(&toml, &[], &[("HTTP_PROXY", &proxy.url(None))]).await;
    let req = Req::post_json(bin.addr, "/r/v1/chat/completions", CHAT);
    assert_eq!(fetch(&http1(), &req).await.status, 200);
    let out = bin.wait_output("OTLP export failed", 1).await;
    let warn = out
        .lines()
        .find(|l| l.contains("OTLP export failed"))
        .unwrap();
    assert!(warn.contains(endpoint), "names the collector: {warn}");
    assert_eq!(
        warn.matches("refused CONNECT").count(),
        1,
        "the proxy's refusal, once: {warn}"
    );
}
