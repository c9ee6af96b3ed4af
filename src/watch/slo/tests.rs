//! SLO tests: hand-built live snapshots (explicit times) through the
//! evaluator; marks; the rate limiter with explicit instants; the webhook
//! against a local hyper server (retries, rate limit, body shapes).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::ops::RangeInclusive;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use opentelemetry::{Array, Value};
use tokio::net::TcpListener;

use super::*;
use crate::config::{AlertFormat, AlertsConfig, LiveConfig, SloConfig};
use crate::meter::Outcome;
use crate::watch::live::Aggregator;
use crate::watch::live::tests::sample;

const S: Duration = Duration::from_secs(1);

fn slo(name: &str) -> SloConfig {
    SloConfig {
        name: name.into(),
        route: None,
        model: None,
        window: 10 * S,
        min_requests: 3,
        ttft_p95: None,
        decode_tps_p50_min: None,
        max_stall: None,
        error_ratio: None,
        decode_tps_drop: None,
        baseline_window: 600 * S,
    }
}

/// An SLO on TTFT p95 at 200 ms.
fn ttft_slo(name: &str) -> SloConfig {
    SloConfig {
        ttft_p95: Some(Duration::from_millis(200)),
        ..slo(name)
    }
}

fn key(route: &str, model: &str) -> SeriesKey {
    SeriesKey {
        route: Arc::from(route),
        model: Some(Arc::from(model)),
        tenant: None,
    }
}

/// Live windows driven with explicit times.
struct Rig {
    agg: Aggregator,
    t0: Instant,
}

impl Rig {
    fn new(window: Duration, bucket: Duration) -> Rig {
        let cfg = LiveConfig {
            window,
            bucket,
            max_series: 50,
            recent: 0,
        };
        let t0 = Instant::now();
        Rig {
            agg: Aggregator::new(&cfg, t0, Arc::new(AtomicU64::new(0))),
            t0,
        }
    }

    /// One complete request of `key` ending at `at` with this TTFT and rate.
    fn req(&mut self, key: &SeriesKey, at: Duration, ttft: f64, tps: f64) {
        let mut s = sample(key.clone(), self.t0 + at);
        s.ttft = Some(ttft);
        s.decode_tps = Some(tps);
        s.max_stall = Some(0.05);
        s.end_wall += at;
        self.agg.record(s);
    }

    /// One request a second for each second in `secs`.
    fn reqs(&mut self, key: &SeriesKey, secs: RangeInclusive<u32>, ttft: f64, tps: f64) {
        for i in secs {
            self.req(key, i * S, ttft, tps);
        }
    }

    fn snap(&mut self, at: Duration) -> Snapshot {
        let wall = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000) + at;
        self.agg.snapshot(self.t0 + at, wall)
    }
}

fn close(got: f64, want: f64) -> bool {
    ((got - want) / want).abs() <= crate::watch::live::RELATIVE_ERROR
}

#[test]
fn slo_ttft_breach_then_recovery_with_marks() {
    let mut r = Rig::new(60 * S, S);
    let mut cfg = ttft_slo("latency");
    cfg.route = Some("openai".into());
    let mut eval = Evaluator::new(&[cfg]);
    let k = key("openai", "gpt-4o");
    r.reqs(&k, 1..=5, 0.02, 50.0);
    assert_eq!(
        eval.evaluate(&r.snap(6 * S)),
        vec![],
        "fast traffic: no change"
    );

    r.reqs(&k, 6..=9, 0.4, 50.0);
    let t = eval.evaluate(&r.snap(10 * S));
    assert_eq!(t.len(), 1, "one breach expected: {t:#?}");
    let b = &t[0];
    assert_eq!(
        (
            b.change,
            b.objective,
            &*b.slo,
            b.route.as_deref(),
            b.model.as_deref()
        ),
        (
            Change::Breach,
            Objective::TtftP95,
            "latency",
            Some("openai"),
            None
        ),
        "breach of the whole selection (no model glob)"
    );
    assert!(
        close(b.observed, 0.4),
        "observed p95 ≈ 0.4 s, got {}",
        b.observed
    );
    assert_eq!((b.threshold, b.window), (0.2, 10 * S));
    assert_eq!(
        b.at,
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_010),
        "at = the snapshot's wall time"
    );
    assert_eq!(
        eval.evaluate(&r.snap(10 * S)),
        vec![],
        "still breached: no repeat"
    );
    assert_eq!(eval.breached_count(0, Objective::TtftP95), 1);
    let marks = eval.marks();
    assert_eq!(marks.len(), 1, "one mark: {marks:?}");
    assert!(
        marks[0].matches("openai", Some("anything")),
        "no model glob: every model"
    );
    assert!(
        marks[0].matches("openai", None),
        "even requests without a model"
    );
    assert!(
        !marks[0].matches("anthropic", Some("gpt-4o")),
        "other routes unmarked"
    );

    r.reqs(&k, 11..=25, 0.02, 50.0);
    let t = eval.evaluate(&r.snap(25 * S));
    assert_eq!(t.len(), 1, "one recovery expected: {t:#?}");
    assert_eq!(
        (t[0].change, t[0].objective),
        (Change::Recovery, Objective::TtftP95)
    );
    assert!(
        t[0].observed < 0.2,
        "recovered p95 below the threshold: {}",
        t[0].observed
    );
    assert!(eval.marks().is_empty(), "no marks after recovery");
    assert_eq!(eval.breached_count(0, Objective::TtftP95), 0);
}

#[test]
fn slo_min_requests_gives_no_verdict_and_holds_state() {
    let mut r = Rig::new(60 * S, S);
    let mut cfg = ttft_slo("thin");
    cfg.min_requests = 4;
    let mut eval = Evaluator::new(&[cfg]);
    let k = key("openai", "gpt-4o");
    r.reqs(&k, 1..=3, 0.9, 50.0);
    assert_eq!(
        eval.evaluate(&r.snap(4 * S)),
        vec![],
        "3 < min_requests 4: no verdict"
    );
    r.req(&k, 4 * S, 0.9, 50.0);
    let t = eval.evaluate(&r.snap(5 * S));
    assert_eq!(t.len(), 1, "4 slow requests: breach");
    // The slow requests leave the 10 s window; two fast ones are too few.
    r.req(&k, 20 * S, 0.01, 50.0);
    r.req(&k, 21 * S, 0.01, 50.0);
    assert_eq!(
        eval.evaluate(&r.snap(22 * S)),
        vec![],
        "thin data is no recovery: the breach holds"
    );
    assert_eq!(eval.marks().len(), 1, "still marked while held");
}

#[test]
fn slo_model_glob_fans_out_per_model() {
    let mut r = Rig::new(60 * S, S);
    let mut per_model = ttft_slo("per-model");
    per_model.model = Some("gpt-4o*".into());
    let whole = ttft_slo("whole");
    let mut eval = Evaluator::new(&[per_model, whole]);
    let (slow, fast, other) = (
        key("openai", "gpt-4o"),
        key("openai", "gpt-4o-mini"),
        key("anthropic", "claude-3-5-haiku"),
    );
    for i in 1..=5 {
        r.req(&slow, i * S, 0.5, 50.0);
        r.req(&fast, i * S, 0.02, 50.0);
        r.req(&other, i * S, 0.9, 50.0);
    }
    let mut t = eval.evaluate(&r.snap(6 * S));
    t.sort_by(|a, b| a.slo.cmp(&b.slo));
    let got: Vec<_> = t
        .iter()
        .map(|t| (&*t.slo, t.model.as_deref(), t.change))
        .collect();
    assert_eq!(
        got,
        vec![
            ("per-model", Some("gpt-4o"), Change::Breach),
            ("whole", None, Change::Breach),
        ],
        "the glob judges gpt-4o and gpt-4o-mini apart and never sees claude; \
         the SLO without a model judges everything at once"
    );
    let marks = eval.marks();
    let m = marks
        .iter()
        .find(|m| &*m.slo == "per-model")
        .expect("per-model mark");
    assert!(m.matches("openai", Some("gpt-4o")));
    assert!(
        m.matches("anthropic", Some("gpt-4o")),
        "no route selector: any route"
    );
    assert!(
        !m.matches("openai", Some("gpt-4o-mini")),
        "the fast model is not marked"
    );
}

#[test]
fn slo_relative_drop_against_own_baseline() {
    let mut r = Rig::new(600 * S, 5 * S);
    let mut cfg = slo("drop");
    cfg.model = Some("*".into());
    cfg.decode_tps_drop = Some(0.3);
    cfg.window = 60 * S;
    cfg.baseline_window = 600 * S;
    cfg.min_requests = 5;
    let mut eval = Evaluator::new(&[cfg]);
    let (dropping, steady, fresh) = (key("r", "a"), key("r", "b"), key("r", "c"));
    for i in 0..50 {
        let at = (5 + i * 10) * S;
        r.req(&dropping, at, 0.1, 50.0);
        r.req(&steady, at, 0.1, 100.0);
    }
    for i in 0..10 {
        let at = (545 + i * 5) * S;
        r.req(&dropping, at, 0.1, 30.0); // 40 % below its baseline
        r.req(&steady, at, 0.1, 90.0); // 10 % below: within the 30 % allowed
        r.req(&fresh, at, 0.1, 10.0); // no history outside the window
    }
    let t = eval.evaluate(&r.snap(599 * S));
    assert_eq!(t.len(), 1, "only model a dropped past 30 %: {t:#?}");
    let b = &t[0];
    assert_eq!(
        (b.model.as_deref(), b.objective, b.change),
        (Some("a"), Objective::DecodeTpsDrop, Change::Breach)
    );
    assert!(
        close(b.observed, 30.0),
        "observed p50 ≈ 30 tok/s: {}",
        b.observed
    );
    let base = b.baseline.expect("baseline reported");
    assert!(close(base, 50.0), "baseline p50 ≈ 50 tok/s: {base}");
    assert!(
        (b.threshold - base * 0.7).abs() < 1e-9,
        "threshold = baseline × (1 − 0.3): {} vs {base}",
        b.threshold
    );
    assert_eq!(b.baseline_window, Some(600 * S));
}

#[test]
fn slo_other_objectives() {
    let mut r = Rig::new(60 * S, S);
    let mut cfg = slo("all");
    cfg.decode_tps_p50_min = Some(40.0);
    cfg.max_stall = Some(Duration::from_secs(2));
    cfg.error_ratio = Some(0.2);
    let mut eval = Evaluator::new(&[cfg]);
    let k = key("openai", "m");
    r.reqs(&k, 1..=4, 0.1, 20.0);
    let mut s = sample(k.clone(), r.t0 + 5 * S);
    s.outcome = Outcome::UpstreamError;
    s.status = 500;
    s.error_type = Some(Arc::from("server_error"));
    (s.ttft, s.decode_tps) = (None, None);
    (s.tokens_in, s.tokens_out) = (None, None);
    s.max_stall = Some(3.0);
    s.duration = 0.1;
    r.agg.record(s.clone());
    s.end = r.t0 + 5 * S + Duration::from_millis(10);
    r.agg.record(s);
    let mut got: Vec<_> = eval
        .evaluate(&r.snap(6 * S))
        .into_iter()
        .map(|t| (t.objective, t.observed))
        .collect();
    got.sort_by_key(|a| a.0);
    assert_eq!(got.len(), 3, "three objectives breached: {got:?}");
    assert_eq!(got[0].0, Objective::DecodeTpsP50Min);
    assert!(close(got[0].1, 20.0), "p50 ≈ 20 tok/s: {}", got[0].1);
    assert_eq!(got[1], (Objective::MaxStall, 3.0), "largest stall 3 s");
    assert_eq!(got[2].0, Objective::ErrorRatio);
    assert!(
        (got[2].1 - 2.0 / 6.0).abs() < 1e-9,
        "2 errors of 6: {}",
        got[2].1
    );
}

#[test]
fn slo_marks_are_cheap_when_nothing_is_breached() {
    let marks = Marks::default();
    assert_eq!(marks.names("openai", Some("gpt-4o")), None, "empty set");
    marks.publish(vec![
        Mark {
            slo: Arc::from("a"),
            route: Some(Arc::from("openai")),
            model: Some(Arc::from("gpt-4o")),
        },
        Mark {
            slo: Arc::from("b"),
            route: None,
            model: None,
        },
    ]);
    let names = |route, model| {
        marks.names(route, model).map(|kv| {
            assert_eq!(kv.key.as_str(), SLO_BREACHED);
            match kv.value {
                Value::Array(Array::String(v)) => {
                    v.iter().map(|s| s.as_str().to_owned()).collect::<Vec<_>>()
                }
                other => panic!("expected a string array, got {other:?}"),
            }
        })
    };
    assert_eq!(
        names("openai", Some("gpt-4o")),
        Some(vec!["a".into(), "b".into()])
    );
    assert_eq!(names("openai", Some("gpt-4o-mini")), Some(vec!["b".into()]));
    marks.publish(Vec::new());
    assert_eq!(names("openai", Some("gpt-4o")), None, "cleared");
}

fn event(slo: &str, change: Change) -> Event {
    Event::from(&Transition {
        change,
        slo: Arc::from(slo),
        objective: Objective::TtftP95,
        route: Some(Arc::from("openai")),
        model: Some(Arc::from("gpt-4o")),
        observed: 0.412,
        threshold: 0.2,
        baseline: None,
        window: 120 * S,
        baseline_window: None,
        at: SystemTime::UNIX_EPOCH + Duration::from_millis(1_700_000_000_250),
    })
}

#[test]
fn slo_event_json_and_slack_bodies() {
    let e = event("latency", Change::Breach);
    let v: serde_json::Value =
        serde_json::from_slice(&e.body(AlertFormat::Json)).expect("JSON body");
    assert_eq!(
        v,
        serde_json::json!({
            "event": "breach", "slo": "latency", "objective": "ttft_p95",
            "route": "openai", "model": "gpt-4o", "observed": 0.412, "threshold": 0.2,
            "unit": "s", "window_s": 120.0, "at": "2023-11-14T22:13:20.250Z"
        })
    );
    let v: serde_json::Value =
        serde_json::from_slice(&e.body(AlertFormat::Slack)).expect("Slack body");
    let obj = v.as_object().expect("object");
    assert_eq!(obj.len(), 1, "Slack body is only {{\"text\"}}: {v}");
    assert_eq!(
        v["text"],
        ":rotating_light: SLO *latency* breached: ttft_p95 412 ms > 200 ms over 2m \
         (route `openai`, model `gpt-4o`)"
    );
    let r = event("latency", Change::Recovery);
    assert!(
        r.text().contains("recovered: ttft_p95 412 ms ≤ 200 ms"),
        "{}",
        r.text()
    );
}

#[test]
fn slo_rate_limit_holds_newest_event_per_slo() {
    let t0 = tokio::time::Instant::now();
    let mut l = Limiter::new(60 * S);
    let first = event("a", Change::Breach);
    assert_eq!(
        l.offer(first.clone(), t0),
        Offer::Send(Box::new(first)),
        "first event goes"
    );
    assert_eq!(
        l.offer(event("b", Change::Breach), t0),
        Offer::Send(Box::new(event("b", Change::Breach))),
        "per SLO"
    );
    assert_eq!(l.offer(event("a", Change::Recovery), t0 + S), Offer::Held);
    assert_eq!(
        l.offer(event("a", Change::Breach), t0 + 2 * S),
        Offer::Superseded
    );
    assert_eq!(l.next_due(), Some(t0 + 60 * S));
    assert!(l.due(t0 + 59 * S).is_empty(), "not before the interval");
    let due = l.due(t0 + 60 * S);
    assert_eq!(
        due,
        vec![event("a", Change::Breach)],
        "the newest held event goes"
    );
    assert_eq!(l.next_due(), None);
    assert_eq!(
        l.offer(event("a", Change::Recovery), t0 + 61 * S),
        Offer::Held,
        "interval restarts"
    );
}

#[test]
fn slo_backoff_grows_with_jitter_and_caps() {
    let b = Backoff {
        base: Duration::from_millis(100),
        cap: Duration::from_secs(1),
    };
    for (retry, full) in [
        (0, 100),
        (1, 200),
        (2, 400),
        (3, 800),
        (4, 1000),
        (30, 1000),
    ] {
        let d = b.delay(retry);
        let full = Duration::from_millis(full);
        assert!(
            d >= full / 2 && d <= full,
            "retry {retry}: {d:?} within [{:?}, {full:?}]",
            full / 2
        );
    }
}

/// A webhook receiver answering the scripted statuses in turn (then 200).
struct Receiver {
    addr: SocketAddr,
    got: Arc<Mutex<Vec<(tokio::time::Instant, http::HeaderMap, Bytes)>>>,
}

async fn receiver(statuses: Vec<u16>) -> Receiver {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let got = Arc::new(Mutex::new(Vec::new()));
    let script = Arc::new(Mutex::new(statuses.into_iter()));
    let g = got.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let (g, script) = (g.clone(), script.clone());
            let svc = hyper::service::service_fn(move |req: http::Request<Incoming>| {
                let (g, script) = (g.clone(), script.clone());
                async move {
                    let (parts, body) = req.into_parts();
                    let body = body
                        .collect()
                        .await
                        .map(|b| b.to_bytes())
                        .unwrap_or_default();
                    g.lock().expect("lock").push((
                        tokio::time::Instant::now(),
                        parts.headers,
                        body,
                    ));
                    let status = script.lock().expect("lock").next().unwrap_or(200);
                    let res = http::Response::builder()
                        .status(status)
                        .body(Full::new(Bytes::from_static(b"{}")))
                        .expect("response");
                    Ok::<_, Infallible>(res)
                }
            });
            tokio::spawn(
                hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc),
            );
        }
    });
    Receiver { addr, got }
}

fn alerts(addr: SocketAddr, format: AlertFormat) -> AlertsConfig {
    AlertsConfig {
        webhook_url: format!("http://{addr}/hook/secret").parse().expect("url"),
        format,
        min_interval: Duration::ZERO,
        timeout: 2 * S,
        max_retries: 3,
        headers: vec![(
            http::HeaderName::from_static("authorization"),
            http::HeaderValue::from_static("Bearer t0k"),
        )],
    }
}

/// A JSON webhook to `rx` that retries quickly.
fn json_hook(rx: &Receiver) -> Webhook {
    hook(&alerts(rx.addr, AlertFormat::Json))
}

fn hook(cfg: &AlertsConfig) -> Webhook {
    Webhook::new(cfg).expect("client").with_backoff(fast())
}

fn fast() -> Backoff {
    Backoff {
        base: Duration::from_millis(20),
        cap: Duration::from_millis(100),
    }
}

#[tokio::test]
async fn slo_webhook_retries_500_then_delivers() {
    let rx = receiver(vec![500, 503]).await;
    let hook = json_hook(&rx);
    let e = event("latency", Change::Breach);
    let attempts = tokio::time::timeout(10 * S, hook.deliver(&e))
        .await
        .expect("bounded")
        .expect("delivered after retries");
    assert_eq!(attempts, 3, "500, 503, then 200");
    let got = rx.got.lock().expect("lock").clone();
    assert_eq!(got.len(), 3, "three POSTs received");
    for (_, headers, body) in &got {
        assert_eq!(headers["content-type"], "application/json");
        assert_eq!(
            headers["authorization"], "Bearer t0k",
            "configured header sent"
        );
        assert_eq!(body, &e.body(AlertFormat::Json), "the same body each time");
    }
}

#[tokio::test]
async fn slo_webhook_gives_up_on_4xx_and_after_max_retries() {
    let rx = receiver(vec![400]).await;
    let hook = json_hook(&rx);
    let err = hook
        .deliver(&event("x", Change::Breach))
        .await
        .expect_err("400 fails");
    assert!(err.contains("400"), "{err}");
    assert_eq!(rx.got.lock().expect("lock").len(), 1, "4xx is not retried");

    let rx = receiver(vec![500; 10]).await;
    let hook = json_hook(&rx);
    let err = hook
        .deliver(&event("x", Change::Breach))
        .await
        .expect_err("gives up");
    assert!(err.contains("gave up after 4 attempts"), "{err}");
    assert_eq!(
        rx.got.lock().expect("lock").len(),
        4,
        "1 attempt + max_retries 3"
    );
}

#[tokio::test]
async fn slo_webhook_task_rate_limits_per_slo_and_posts_slack() {
    let rx = receiver(Vec::new()).await;
    let mut cfg = alerts(rx.addr, AlertFormat::Slack);
    cfg.min_interval = Duration::from_millis(400);
    let hook = hook(&cfg);
    let meter = opentelemetry::global::meter("slo-test");
    let (tx, queue) = tokio::sync::mpsc::channel(8);
    let task = tokio::spawn(webhook::run(
        hook,
        queue,
        cfg.min_interval,
        webhook::results_counter(&meter),
    ));
    let start = tokio::time::Instant::now();
    for e in [
        event("a", Change::Breach),
        event("a", Change::Recovery),
        event("a", Change::Breach), // supersedes the held recovery
        event("b", Change::Breach),
    ] {
        tx.send(e).await.expect("queue");
    }
    let wait = async {
        while rx.got.lock().expect("lock").len() < 3 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(5 * S, wait)
        .await
        .expect("three POSTs");
    tokio::time::sleep(Duration::from_millis(600)).await;
    drop(tx);
    tokio::time::timeout(5 * S, task)
        .await
        .expect("task ends")
        .expect("no panic");
    let got = rx.got.lock().expect("lock").clone();
    let texts: Vec<String> = got
        .iter()
        .map(|(_, _, b)| {
            let v: serde_json::Value = serde_json::from_slice(b).expect("JSON");
            assert_eq!(v.as_object().map(|o| o.len()), Some(1), "only text: {v}");
            v["text"].as_str().expect("text").to_owned()
        })
        .collect();
    assert_eq!(
        texts.len(),
        3,
        "a, b at once; a's newest held event later: {texts:#?}"
    );
    assert!(
        texts[0].contains("*a* breached") && texts[1].contains("*b* breached"),
        "{texts:#?}"
    );
    assert!(
        texts[2].contains("*a* breached"),
        "the newest held event of a: {texts:#?}"
    );
    let late = got[2].0 - start;
    assert!(
        late >= Duration::from_millis(380),
        "held for min_interval: {late:?}"
    );
}
