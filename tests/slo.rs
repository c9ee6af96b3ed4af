//! Slowdown detection end to end: a scripted upstream that answers fast,
//! then slow (TTFT 400 ms), then fast again, behind the proxy with small
//! live windows and one SLO (`ttft_p95 = "200ms"` over 2 s). A local
//! webhook receives exactly one breach and then one recovery event with the
//! expected JSON; `/metrics` on the admin listener counts the breach; the
//! span of a request finished during the breach carries
//! `tokentap.slo.breached`, spans before it do not.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

mod support;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::Method;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use support::client::{self, HttpClient, Req};
use support::otlp::{Collector, Val};
use support::proxy::{Toml, q, start_running};
use support::script::{self, StreamSpec};
use support::upstream::Upstream;
use support::{STEP_TIMEOUT, within};
use tokio::net::TcpListener;

use support::CHAT;
const MODEL: &str = "gpt-4o-mini";
const SLO: &str = "chat-latency";
/// Trace id of the request sent while the SLO is breached.
const MARKED_TRACE: &str = "5af7183fb1d4cf5f5af7183fb1d4cf5f";

/// A webhook receiver that records every JSON body and answers 200.
struct Hook {
    addr: SocketAddr,
    events: Arc<Mutex<Vec<serde_json::Value>>>,
}

impl Hook {
    async fn start() -> Hook {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let events = Arc::new(Mutex::new(Vec::new()));
        let ev = events.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let ev = ev.clone();
                let svc = hyper::service::service_fn(move |req: http::Request<Incoming>| {
                    let ev = ev.clone();
                    async move {
                        let body = req.into_body().collect().await.unwrap().to_bytes();
                        let v = serde_json::from_slice(&body)
                            .unwrap_or_else(|e| panic!("webhook body is not JSON ({e}): {body:?}"));
                        ev.lock().unwrap().push(v);
                        Ok::<_, Infallible>(http::Response::new(Full::new(Bytes::new())))
                    }
                });
                tokio::spawn(
                    hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc),
                );
            }
        });
        Hook { addr, events }
    }

    fn events(&self) -> Vec<serde_json::Value> {
        self.events.lock().unwrap().clone()
    }
}

async fn chat(client: &HttpClient, proxy: SocketAddr, traceparent: Option<&str>) {
    let mut req = Req::post_json(proxy, CHAT, script::openai_request(MODEL, true, None));
    if let Some(tp) = traceparent {
        req = req.header("traceparent", tp);
    }
    let res = client::fetch(client, &req).await;
    assert_eq!(res.status, 200, "proxied chat: {}", res.text());
}

/// Send requests one after another until the webhook holds `n` events
/// (bounded by `limit`).
async fn until_events(
    client: &HttpClient,
    proxy: SocketAddr,
    hook: &Hook,
    n: usize,
    limit: Duration,
) {
    within(limit, &format!("{n} webhook event(s)"), async {
        while hook.events().len() < n {
            chat(client, proxy, None).await;
            tokio::time::sleep(Duration::from_millis(30)).await;
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slo_breach_and_recovery_reach_log_metrics_spans_and_webhook() {
    let slow = Arc::new(AtomicBool::new(false));
    let s = slow.clone();
    let up = Upstream::start(move |_| {
        let ttft = if s.load(Ordering::SeqCst) { 400 } else { 5 };
        let spec = StreamSpec::tokens(4, Duration::from_millis(ttft), Duration::from_millis(2));
        script::openai_chat_sse(&spec.model(MODEL))
    })
    .await;
    let col = Collector::start().await;
    let hook = Hook::start().await;
    let toml = Toml::new()
        .otlp(&col.endpoint(), "grpc")
        .top("admin_listen", &q("127.0.0.1:0"))
        .set("live", "window", &q("10s"))
        .set("live", "bucket", &q("100ms"))
        .route("openai", "/", &up.url(), "openai")
        .raw(&format!(
            "[[slo]]\nname = {}\nroute = \"openai\"\nmodel = \"gpt-4o*\"\n\
             ttft_p95 = \"200ms\"\nwindow = \"2s\"\nmin_requests = 3\n",
            q(SLO)
        ))
        .raw(&format!(
            "[alerts]\nwebhook_url = {}\nmin_interval = \"0s\"\ntimeout = \"2s\"\n",
            q(&format!("http://{}/hooks/slo", hook.addr))
        ));
    let running = start_running(&toml).await;
    let (proxy, admin) = (running.addr, running.admin_addr.expect("admin listener"));
    let c = client::http1();

    // Fast: the objective holds, nothing is sent.
    for _ in 0..6 {
        chat(&c, proxy, None).await;
    }
    tokio::time::sleep(Duration::from_millis(1300)).await;
    assert_eq!(
        hook.events(),
        Vec::<serde_json::Value>::new(),
        "no event while fast"
    );

    // Slow: TTFT 400 ms breaches the 200 ms p95.
    slow.store(true, Ordering::SeqCst);
    until_events(&c, proxy, &hook, 1, Duration::from_secs(8)).await;

    // Fast again: a request finished during the breach is marked; the
    // breach ends once the slow requests leave the 2 s window.
    slow.store(false, Ordering::SeqCst);
    let tp = format!("00-{MARKED_TRACE}-00f067aa0ba902b7-01");
    chat(&c, proxy, Some(&tp)).await;
    until_events(&c, proxy, &hook, 2, Duration::from_secs(8)).await;
    tokio::time::sleep(Duration::from_millis(1200)).await;

    let events = hook.events();
    assert_eq!(
        events.len(),
        2,
        "exactly one breach and one recovery: {events:#?}"
    );
    for (e, kind) in events.iter().zip(["breach", "recovery"]) {
        assert_eq!(e["event"], kind, "{e}");
        assert_eq!(e["slo"], SLO, "{e}");
        assert_eq!(e["objective"], "ttft_p95", "{e}");
        assert_eq!(e["route"], "openai", "{e}");
        assert_eq!(e["model"], MODEL, "one verdict per concrete model: {e}");
        assert_eq!(e["threshold"], 0.2, "{e}");
        assert_eq!(e["unit"], "s", "{e}");
        assert_eq!(e["window_s"], 2.0, "{e}");
        let at = e["at"].as_str().unwrap_or_default();
        assert!(
            at.len() == 24 && at.ends_with('Z'),
            "RFC 3339 UTC `at`: {e}"
        );
    }
    let observed = |i: usize| events[i]["observed"].as_f64().unwrap();
    assert!(
        observed(0) >= 0.38,
        "breach: p95 ≈ 400 ms, got {}",
        observed(0)
    );
    assert!(
        observed(1) < 0.2,
        "recovery: p95 under 200 ms, got {}",
        observed(1)
    );

    let metrics = client::fetch(
        &c,
        &Req {
            method: Method::GET,
            url: format!("http://{admin}/metrics"),
            headers: Vec::new(),
            body: Bytes::new(),
        },
    )
    .await;
    let text = metrics.text();
    let breach_line = text
        .lines()
        .find(|l| l.starts_with("tokentap_slo_breaches_total{"))
        .unwrap_or_else(|| panic!("no tokentap_slo_breaches_total in /metrics:\n{text}"));
    for part in [
        "tokentap_slo_name=\"chat-latency\"",
        "tokentap_slo_objective=\"ttft_p95\"",
        "gen_ai_request_model=\"gpt-4o-mini\"",
    ] {
        assert!(breach_line.contains(part), "{part} in {breach_line}");
    }
    assert!(
        breach_line.ends_with(" 1"),
        "one breach counted: {breach_line}"
    );
    let gauge = text
        .lines()
        .find(|l| l.starts_with("tokentap_slo_breached{"))
        .unwrap_or_else(|| panic!("no tokentap_slo_breached gauge in /metrics:\n{text}"));
    assert!(gauge.ends_with(" 0"), "recovered: gauge back to 0: {gauge}");

    within(Duration::from_secs(20), "shutdown", running.shutdown()).await;
    let marked = col
        .wait_span(STEP_TIMEOUT, "of the request sent during the breach", |s| {
            s.trace_id == MARKED_TRACE
        })
        .await;
    assert_eq!(
        marked.attr("tokentap.slo.breached"),
        &Val::Array(vec![Val::Str(SLO.into())]),
        "the span finished during the breach names the SLO"
    );
    let spans = col.spans();
    let unmarked = spans
        .iter()
        .filter(|s| !s.attrs.contains_key("tokentap.slo.breached"))
        .count();
    assert!(
        unmarked >= 6,
        "the fast requests before the breach are not marked ({unmarked} unmarked of {})",
        spans.len()
    );
}
