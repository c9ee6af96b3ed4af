//! Admin listener: the proxy with an admin address on 127.0.0.1:0 in front
//! of a scripted upstream; `/metrics` counts what was sent (text and
//! OpenMetrics), `/healthz`, `/readyz` through a graceful drain, `/config`
//! without secrets, 404s; the real binary with `--admin-listen`.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

mod support;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http::Method;
use support::client::{self, HttpClient, Req, Streamed};
use support::proxy::{Bin, Toml, q, start_with_admin};
use support::script::{self, StreamSpec};
use support::upstream::Upstream;
use support::{STEP_TIMEOUT, within};
use tokentap::app::Running;

use support::CHAT;
const TTFT: &str = "gen_ai_server_time_to_first_token_seconds";

fn admin(running: &Running) -> SocketAddr {
    running
        .admin_addr
        .expect("Running::admin_addr is set when admin_listen is configured")
}

async fn get(client: &HttpClient, addr: SocketAddr, path: &str, accept: Option<&str>) -> Streamed {
    let mut req = Req {
        method: Method::GET,
        url: format!("http://{addr}{path}"),
        headers: Vec::new(),
        body: Bytes::new(),
    };
    if let Some(a) = accept {
        req = req.header("accept", a);
    }
    client::fetch(client, &req).await
}

/// One exposition sample: `name{labels} value`.
#[derive(Debug, Clone)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// Parse sample lines (exemplars and comments skipped).
fn parse(text: &str) -> Vec<Sample> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|line| {
            let line = line.split(" # ").next().unwrap();
            let (name, rest) = match line.find('{') {
                Some(i) => (&line[..i], &line[i + 1..]),
                None => line.split_once(' ').unwrap(),
            };
            let mut labels = BTreeMap::new();
            let mut rest = rest;
            if line.contains('{') {
                while !rest.starts_with('}') {
                    let (k, after) = rest.split_once("=\"").unwrap();
                    let mut value = String::new();
                    let mut chars = after.char_indices();
                    let end = loop {
                        match chars.next().unwrap() {
                            (_, '\\') => match chars.next().unwrap().1 {
                                'n' => value.push('\n'),
                                c => value.push(c),
                            },
                            (i, '"') => break i,
                            (_, c) => value.push(c),
                        }
                    };
                    labels.insert(k.to_owned(), value);
                    rest = after[end + 1..].trim_start_matches(',');
                }
                rest = rest[1..].trim_start();
            }
            let value = match rest.trim() {
                "+Inf" => f64::INFINITY,
                v => v
                    .parse()
                    .unwrap_or_else(|_| panic!("bad value in {line:?}")),
            };
            Sample {
                name: name.to_owned(),
                labels,
                value,
            }
        })
        .collect()
}

/// Samples named `name` whose labels include every `(k, v)` in `want`.
fn select<'a>(samples: &'a [Sample], name: &str, want: &[(&str, &str)]) -> Vec<&'a Sample> {
    samples
        .iter()
        .filter(|s| s.name == name)
        .filter(|s| {
            want.iter()
                .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
        .collect()
}

/// The value of the one sample matching, or a panic showing the scrape.
#[track_caller]
fn one(samples: &[Sample], name: &str, want: &[(&str, &str)], text: &str) -> f64 {
    let got = select(samples, name, want);
    assert_eq!(
        got.len(),
        1,
        "expected exactly one {name} sample with {want:?}; scrape:\n{text}"
    );
    got[0].value
}

/// Scrape until `tokentap_requests_total` adds up to `n` (metrics are
/// recorded when a response body ends, which can trail the client by a hair).
async fn scrape_after(client: &HttpClient, addr: SocketAddr, n: f64) -> String {
    let fut = async {
        loop {
            let got = get(client, addr, "/metrics", None).await;
            assert_eq!(got.status, 200, "/metrics: {}", got.text());
            let text = got.text();
            let total: f64 = select(&parse(&text), "tokentap_requests_total", &[])
                .iter()
                .map(|s| s.value)
                .sum();
            if total >= n {
                return text;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    within(
        STEP_TIMEOUT,
        "tokentap_requests_total to count every request",
        fut,
    )
    .await
}

#[tokio::test]
async fn metrics_count_the_requests_sent() {
    let spec = StreamSpec::tokens(5, Duration::from_millis(30), Duration::from_millis(2));
    let up = Upstream::fixed(script::openai_chat_sse(&spec)).await;
    let running = start_with_admin(Toml::openai(&up.url())).await;
    let (proxy, admin) = (running.addr, admin(&running));
    assert_ne!(proxy.port(), admin.port(), "admin has its own port");
    let c = client::http1();
    let sent = 3;
    for _ in 0..sent {
        let body = script::openai_request("m-prom", true, None);
        let got = client::fetch(&c, &Req::post_json(proxy, CHAT, body)).await;
        assert_eq!(got.status, 200, "proxied stream: {}", got.text());
    }

    let text = scrape_after(&c, admin, f64::from(sent)).await;
    let samples = parse(&text);
    let series = [
        ("gen_ai_request_model", "m-prom"),
        ("gen_ai_provider_name", "openai"),
        ("gen_ai_operation_name", "chat"),
        ("gen_ai_request_stream", "true"),
        ("tokentap_route", "openai"),
        ("tokentap_outcome", "complete"),
        ("otel_scope_name", "tokentap"),
    ];
    let n = f64::from(sent);
    let with = |extra: &[(&'static str, &'static str)]| -> Vec<(&'static str, &'static str)> {
        series.iter().chain(extra).copied().collect()
    };
    assert_eq!(
        one(
            &samples,
            &format!("{TTFT}_bucket"),
            &with(&[("le", "+Inf")]),
            &text
        ),
        n,
        "TTFT +Inf bucket counts every request"
    );
    assert_eq!(
        one(
            &samples,
            &format!("{TTFT}_bucket"),
            &with(&[("le", "0.01")]),
            &text
        ),
        0.0,
        "no TTFT under 10 ms when the upstream waits 30 ms"
    );
    assert_eq!(one(&samples, &format!("{TTFT}_count"), &series, &text), n);
    let ttft_sum = one(&samples, &format!("{TTFT}_sum"), &series, &text);
    assert!(
        ttft_sum >= n * 0.03,
        "TTFT sum {ttft_sum} s should be at least {sent} × 30 ms"
    );
    let mut buckets: Vec<&Sample> = select(&samples, &format!("{TTFT}_bucket"), &series);
    assert_eq!(buckets.len(), 17, "16 TTFT bounds + +Inf");
    buckets.sort_by(|a, b| {
        let le = |s: &Sample| s.labels["le"].parse::<f64>().unwrap_or(f64::INFINITY);
        le(a).total_cmp(&le(b))
    });
    assert!(
        buckets.windows(2).all(|w| w[0].value <= w[1].value),
        "buckets are cumulative: {buckets:?}"
    );

    assert_eq!(one(&samples, "tokentap_requests_total", &series, &text), n);
    for (family, per_request) in [
        ("gen_ai_client_inference_operation_input_tokens", 17.0),
        ("gen_ai_client_inference_operation_output_tokens", 5.0),
    ] {
        assert_eq!(one(&samples, &format!("{family}_count"), &series, &text), n);
        assert_eq!(
            one(&samples, &format!("{family}_sum"), &series, &text),
            n * per_request,
            "{per_request} tokens per request in {family}"
        );
    }
    let unknown = with(&[("gen_ai_token_modality", "unknown")]);
    for (name, per_request) in [
        ("gen_ai_client_inference_usage_input_tokens_total", 17.0),
        ("gen_ai_client_inference_usage_output_tokens_total", 5.0),
    ] {
        assert_eq!(
            one(&samples, name, &unknown, &text),
            n * per_request,
            "{name}"
        );
    }
    for name in [
        "gen_ai_client_inference_duration_seconds_count",
        "gen_ai_server_request_duration_seconds_count",
        "gen_ai_client_inference_time_to_first_chunk_seconds_count",
        "gen_ai_server_time_per_output_token_seconds_count",
        "tokentap_decode_tokens_per_second_count",
        "tokentap_stream_max_stall_seconds_count",
    ] {
        assert_eq!(one(&samples, name, &series, &text), n, "{name}");
    }
    assert_eq!(
        one(
            &samples,
            "tokentap_streams_active",
            &[("tokentap_route", "openai")],
            &text
        ),
        0.0,
        "no stream left in flight"
    );
    let info = select(&samples, "target_info", &[]);
    assert_eq!(info.len(), 1, "one target_info:\n{text}");
    assert!(
        info[0].labels.contains_key("service_name"),
        "target_info carries the resource: {:?}",
        info[0].labels
    );
    for family in [TTFT, "tokentap_requests_total"] {
        for kind in ["# HELP", "# TYPE"] {
            let prefix = format!("{kind} {family} ");
            assert_eq!(
                text.lines().filter(|l| l.starts_with(&prefix)).count(),
                1,
                "exactly one `{prefix}` line:\n{text}"
            );
        }
    }

    let om = get(
        &c,
        admin,
        "/metrics",
        Some("application/openmetrics-text;version=1.0.0"),
    )
    .await;
    assert_eq!(
        om.headers["content-type"],
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    );
    let om_text = om.text();
    assert!(om_text.ends_with("# EOF\n"), "OpenMetrics ends with # EOF");
    assert!(
        om_text.contains(&format!("# TYPE {TTFT} histogram\n# UNIT {TTFT} seconds\n")),
        "OpenMetrics names the unit:\n{om_text}"
    );
    assert!(
        om_text.contains("# TYPE tokentap_requests counter\n"),
        "OpenMetrics counter family has no _total:\n{om_text}"
    );
    let om_samples = parse(&om_text);
    assert_eq!(
        one(
            &om_samples,
            &format!("{TTFT}_bucket"),
            &with(&[("le", "+Inf")]),
            &om_text
        ),
        n
    );
    running.shutdown().await;
}

/// The scrape-size knobs: `telemetry.prometheus_scope_labels = false`
/// leaves `otel_scope_*` off every series, and a scraper that takes gzip (as
/// Prometheus does) gets the same exposition compressed, many times smaller.
#[tokio::test]
async fn metrics_shrink_without_scope_labels_and_with_gzip() {
    let spec = StreamSpec::tokens(5, Duration::from_millis(5), Duration::from_millis(1));
    let up = Upstream::fixed(script::openai_chat_sse(&spec)).await;
    let toml = Toml::openai(&up.url()).set("telemetry", "prometheus_scope_labels", "false");
    let running = start_with_admin(toml).await;
    let (proxy, admin) = (running.addr, admin(&running));
    let c = client::http1();
    for _ in 0..2 {
        let body = script::openai_request("m-small", true, None);
        let got = client::fetch(&c, &Req::post_json(proxy, CHAT, body)).await;
        assert_eq!(got.status, 200, "proxied stream: {}", got.text());
    }
    let text = scrape_after(&c, admin, 2.0).await;
    assert!(
        !text.contains("otel_scope_"),
        "no scope labels with prometheus_scope_labels = false:\n{text}"
    );
    let samples = parse(&text);
    let requests = select(
        &samples,
        "tokentap_requests_total",
        &[("gen_ai_request_model", "m-small")],
    );
    assert!(
        !requests.is_empty()
            && !requests[0]
                .labels
                .keys()
                .any(|k| k.starts_with("otel_scope")),
        "the series are there, without scope labels:\n{text}"
    );

    let req = Req {
        method: Method::GET,
        url: format!("http://{admin}/metrics"),
        headers: Vec::new(),
        body: Bytes::new(),
    }
    .header("accept-encoding", "gzip, deflate");
    let zipped = client::fetch(&c, &req).await;
    assert_eq!(zipped.status, 200);
    assert_eq!(
        zipped.headers.get("content-encoding").map(|v| v.as_bytes()),
        Some(&b"gzip"[..]),
        "gzip asked for, gzip given: {:?}",
        zipped.headers
    );
    let mut plain = String::new();
    std::io::Read::read_to_string(
        &mut flate2::read::GzDecoder::new(&zipped.body[..]),
        &mut plain,
    )
    .expect("the body is gzip");
    assert!(
        plain.starts_with("# HELP target_info") && plain.contains("tokentap_requests_total{"),
        "the gzip body is the exposition:\n{plain}"
    );
    assert!(
        zipped.body.len() * 5 < plain.len(),
        "compressed {} bytes from {}",
        zipped.body.len(),
        plain.len()
    );
    let refused = get(&c, admin, "/metrics", None).await;
    assert!(
        refused.headers.get("content-encoding").is_none(),
        "no Accept-Encoding, no compression"
    );
    running.shutdown().await;
}

#[tokio::test]
async fn health_config_and_unknown_paths() {
    let up = Upstream::fixed(script::openai_chat_json("gpt", "hi", (1, 1))).await;
    let toml = Toml::openai(&up.url())
        .set("tenant", "salt", &q("pepper-salt-123"))
        .set(
            "telemetry.otlp_headers",
            "authorization",
            &q("Bearer hunter2-secret"),
        );
    let running = start_with_admin(toml).await;
    let (proxy, admin) = (running.addr, admin(&running));
    let c = client::http1();

    let health = get(&c, admin, "/healthz", None).await;
    assert_eq!(
        (health.status.as_u16(), health.text().as_str()),
        (200, "ok\n")
    );
    let ready = get(&c, admin, "/readyz", None).await;
    assert_eq!(ready.status, 200, "ready while serving: {}", ready.text());

    let config = get(&c, admin, "/config", None).await;
    assert_eq!(config.status, 200);
    let shown = config.text();
    for secret in ["pepper-salt-123", "hunter2-secret"] {
        assert!(
            !shown.contains(secret),
            "/config leaked {secret:?}:\n{shown}"
        );
    }
    assert!(
        shown.contains("<redacted>") && shown.contains(&up.url()),
        "/config shows the effective config with secrets redacted:\n{shown}"
    );
    tokentap::config::from_toml(&shown)
        .unwrap_or_else(|e| panic!("/config is loadable TOML: {e}\n{shown}"));

    let missing = get(&c, admin, "/nope", None).await;
    assert_eq!(missing.status, 404);
    assert_eq!(missing.headers["content-type"], "application/json");
    assert_eq!(missing.json()["error"]["code"], "not_found");

    // The proxy port is not the admin port: /healthz there goes upstream.
    let _ = get(&c, proxy, "/healthz", None).await;
    assert_eq!(
        up.only().await.path_and_query,
        "/healthz",
        "the proxy forwards /healthz; admin endpoints live only on the admin port"
    );
    running.shutdown().await;

    // A configured admin address that is taken is an error, not a silent skip.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let busy = taken.local_addr().unwrap().to_string();
    let text = Toml::openai(&up.url())
        .top("admin_listen", &q(&busy))
        .render();
    let config = tokentap::config::from_toml(&text).unwrap();
    let err = tokentap::app::start(config)
        .await
        .expect_err("a busy configured admin address must fail start-up");
    assert!(
        format!("{err:#}").contains(&busy),
        "the error names the address: {err:#}"
    );
}

#[tokio::test]
async fn readyz_is_503_while_draining() {
    // ~2 s stream: 20 tokens, 100 ms apart.
    let spec = StreamSpec::tokens(20, Duration::from_millis(20), Duration::from_millis(100));
    let up = Upstream::fixed(script::openai_chat_sse(&spec)).await;
    let running =
        start_with_admin(Toml::openai(&up.url()).set("server", "shutdown_grace", &q("10s"))).await;
    let (proxy, admin) = (running.addr, admin(&running));
    let c = client::http1();
    assert_eq!(get(&c, admin, "/readyz", None).await.status, 200);

    let body = script::openai_request("m-drain", true, None);
    let (resp, t0) = client::send(&c, &Req::post_json(proxy, CHAT, body)).await;
    let (parts, mut stream) = resp.into_parts();
    let mut seen = client::read_until(&mut stream, "tok0").await;
    let shutdown = tokio::spawn(running.shutdown());

    let draining = async {
        loop {
            let r = get(&c, admin, "/readyz", None).await;
            if r.status == 503 {
                return r.text();
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    let text = within(STEP_TIMEOUT, "/readyz to turn 503 after shutdown", draining).await;
    // The first line stays `draining`; then what the drain waits for.
    assert!(
        text.starts_with("draining\nstreams: 1\noldest_stream_age: ")
            && text.ends_with("websocket_sessions: 0\n"),
        "/readyz counts the one stream left: {text:?}"
    );
    assert!(!shutdown.is_finished(), "the drain is still running");
    assert_eq!(
        get(&c, admin, "/healthz", None).await.status,
        200,
        "/healthz stays 200 while draining"
    );
    assert_eq!(
        get(&c, admin, "/metrics", None).await.status,
        200,
        "/metrics answers while draining"
    );

    // The in-flight stream finishes untouched.
    let rest = client::read_all(http::Response::from_parts(parts, stream), t0, STEP_TIMEOUT).await;
    seen.extend_from_slice(&rest.body);
    assert!(
        rest.error.is_none(),
        "stream cut during drain: {:?}",
        rest.error
    );
    assert!(
        String::from_utf8_lossy(&seen).contains("tok19"),
        "the whole stream arrived"
    );
    within(STEP_TIMEOUT, "shutdown to finish", shutdown)
        .await
        .unwrap();
    assert!(
        tokio::net::TcpStream::connect(admin).await.is_err(),
        "the admin listener closes after the drain"
    );
}

#[tokio::test]
async fn binary_prints_and_serves_the_admin_address() {
    let up = Upstream::fixed(script::openai_chat_json("gpt", "hi", (1, 1))).await;
    let bin = Bin::start(
        &Toml::openai(&up.url()),
        &["--admin-listen", "127.0.0.1:0"],
        &[],
    )
    .await;
    let admin = bin.admin_addr().await;
    assert_ne!(admin, bin.addr, "the harness took the proxy's line first");
    let c = client::http1();
    assert_eq!(get(&c, admin, "/healthz", None).await.status, 200);
    let metrics = get(&c, admin, "/metrics", None).await;
    assert_eq!(metrics.status, 200);
    assert!(
        metrics.text().contains("target_info{"),
        "{}",
        metrics.text()
    );
    bin.stop().await;

    let bin = Bin::start(&Toml::openai(&up.url()), &["--admin-listen", "off"], &[]).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let out = bin.stop().await;
    assert!(
        !out.contains("admin listening on"),
        "--admin-listen off starts no admin listener:\n{out}"
    );
}
