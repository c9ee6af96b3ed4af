//! Span sampling end to end: the proxy at `telemetry.sampling.ratio =
//! 0.25`, with keep thresholds, in front of a scripted upstream that
//! answers ordinary streams, errors, slow first tokens, stalls, long
//! streams, cut streams, incomplete streams, malformed events and a
//! client that gives up. Every special request is exported with its
//! reason and weight 1 (`ot=th:0`); ordinary ones exactly when their trace
//! id's randomness passes the threshold (weight 4, `ot=th:c`); the
//! counters count every request; OpenMetrics exemplars name only exported
//! traces; `/api/live` marks each request's trace id exported or not.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use bytes::Bytes;
use http::Method;
use support::client::{self, Req};
use support::otlp::SpanRec;
use support::proxy::q;
use support::rig::Rig;
use support::script::{self, StreamSpec};
use support::upstream::{Reply, Step};

use support::CHAT;
const OPENMETRICS: &str = "application/openmetrics-text;version=1.0.0";
/// Ordinary requests sent; with a fixed seed for their trace ids the
/// ratio's picks are known in advance.
const ORDINARY: usize = 160;
/// Threshold of ratio 0.25: `rv >= 0xc0…` is kept.
const TH_QUARTER: u64 = 0xc0_0000_0000_0000;
/// Requests of each special kind.
const EACH: usize = 2;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// The scripted reply for a request's model.
fn reply_for(body: &[u8]) -> Reply {
    let body = String::from_utf8_lossy(body);
    let has = |m: &str| body.contains(&format!("\"{m}\""));
    let quick = StreamSpec::tokens(3, ms(1), ms(1));
    if has("m-error") {
        script::openai_error(500, "server_error", "boom", "the server failed")
    } else if has("m-slow") {
        script::openai_chat_sse(&StreamSpec::tokens(3, ms(1_500), ms(1)))
    } else if has("m-stall") {
        script::openai_chat_sse(&StreamSpec::tokens(3, ms(1), ms(800)))
    } else if has("m-long") {
        script::openai_chat_sse(&StreamSpec::tokens(14, ms(1), ms(200)))
    } else if has("m-cut") {
        script::openai_abort_after(&quick, 1)
    } else if has("m-incomplete") {
        // One token, then a clean end: no finish reason, no `[DONE]`.
        let mut r = script::openai_abort_after(&quick, 1);
        r.steps.retain(|s| matches!(s, Step::Send(_)));
        r
    } else if has("m-malformed") {
        script::openai_malformed_after(&quick, 1)
    } else if has("m-gone") {
        script::openai_chat_sse(&quick).head_delay(Duration::from_secs(30))
    } else {
        script::openai_chat_sse(&quick)
    }
}

/// Special models, the reason their spans must carry, and whether the
/// client reads the answer (the `m-gone` client gives up).
const SPECIAL: [(&str, &str); 8] = [
    ("m-error", "error"),
    ("m-slow", "slow_ttft"),
    ("m-stall", "stall"),
    ("m-long", "slow_duration"),
    ("m-cut", "error"),
    ("m-incomplete", "incomplete"),
    ("m-malformed", "malformed"),
    ("m-gone", "cancelled"),
];

/// Seeded trace ids for the ordinary requests.
fn trace_ids() -> Vec<u128> {
    let mut rng = fastrand::Rng::with_seed(28);
    (0..ORDINARY).map(|_| rng.u128(1..)).collect()
}

fn picked_by_ratio(trace: u128) -> bool {
    (trace as u64 & ((1 << 56) - 1)) >= TH_QUARTER
}

async fn scrape(rig: &Rig, admin: std::net::SocketAddr) -> String {
    let req = Req {
        method: Method::GET,
        url: format!("http://{admin}/metrics"),
        headers: Vec::new(),
        body: Bytes::new(),
    }
    .header("accept", OPENMETRICS);
    let got = client::fetch(&rig.client, &req).await;
    assert_eq!(got.status, 200, "/metrics: {}", got.text());
    got.text()
}

/// Trace ids of every exemplar in an OpenMetrics scrape.
fn exemplar_traces(om: &str) -> BTreeSet<String> {
    om.lines()
        .filter_map(|l| l.split_once(" # {trace_id=\""))
        .map(|(_, rest)| rest[..32].to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn special_requests_are_all_exported_and_ordinary_ones_by_the_ratio() {
    let mut rig = Rig::start(
        |ex| reply_for(&ex.body),
        |t, up| {
            t.route("openai", "/", up, "openai")
                .top("admin_listen", &q("127.0.0.1:0"))
                .set("telemetry.sampling", "ratio", "0.25")
                .set("telemetry.sampling", "keep_ttft_over", &q("1s"))
                .set("telemetry.sampling", "keep_stall_over", &q("500ms"))
                .set("telemetry.sampling", "keep_duration_over", &q("2s"))
                .set("live", "recent", "500")
        },
    )
    .await;
    let admin = rig.proxy.running().and_then(|r| r.admin_addr).unwrap();

    // Special requests, a few of each kind at once.
    let mut tasks = Vec::new();
    for (model, _) in SPECIAL {
        for _ in 0..EACH {
            let req = rig.post(CHAT, script::openai_request(model, true, None));
            tasks.push(tokio::spawn(async move {
                let c = client::http1();
                if model == "m-gone" {
                    // Give up while the upstream holds the head back.
                    let _ = tokio::time::timeout(ms(300), client::fetch(&c, &req)).await;
                } else {
                    client::fetch(&c, &req).await;
                }
            }));
        }
    }
    // Ordinary requests, on the seeded traces, their parents unsampled
    // (respect_parent is off: the flag does not drop them either).
    let traces = trace_ids();
    for t in &traces {
        let req = rig
            .post(CHAT, script::openai_request("m-plain", true, None))
            .header("traceparent", &format!("00-{t:032x}-00f067aa0ba902b7-00"));
        let got = client::fetch(&rig.client, &req).await;
        assert_eq!(got.status, 200, "ordinary stream: {}", got.text());
    }
    for t in tasks {
        t.await.unwrap();
    }
    let total = ORDINARY + SPECIAL.len() * EACH;
    // Every request ends (the cancelled ones when the proxy notices).
    let mut om = String::new();
    for _ in 0..200 {
        om = scrape(&rig, admin).await;
        let counted: f64 = om
            .lines()
            .filter(|l| l.starts_with("gen_ai_client_inference_duration_seconds_count{"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum();
        if counted as usize == total {
            break;
        }
        tokio::time::sleep(ms(50)).await;
    }

    // The live table's rows, once its snapshot holds every request.
    let mut recent = Vec::new();
    for _ in 0..100 {
        recent = live_recent(&rig, admin).await;
        if recent.len() == total {
            break;
        }
        tokio::time::sleep(ms(50)).await;
    }
    assert_eq!(recent.len(), total, "/api/live lists every request");

    rig.proxy.stop().await;
    let spans = rig.col.spans();
    let by_trace: BTreeMap<&str, &SpanRec> =
        spans.iter().map(|s| (s.trace_id.as_str(), s)).collect();
    assert_eq!(by_trace.len(), spans.len(), "one span per trace");

    // Every special request is exported, with its reason and weight 1.
    for (model, reason) in SPECIAL {
        let got: Vec<&SpanRec> = spans
            .iter()
            .filter(|s| s.name == format!("chat {model}"))
            .collect();
        let seen: Vec<&str> = om
            .lines()
            .filter(|l| l.starts_with("tokentap_requests_total") && l.contains(model))
            .collect();
        assert_eq!(
            got.len(),
            EACH,
            "every {model} request exported; counted: {seen:#?}; exported: {got:#?}"
        );
        for s in got {
            assert_eq!(s.str("tokentap.sampling.reason"), reason, "{model}");
            assert_eq!(s.num("tokentap.sampling.weight"), 1.0, "{model}");
            assert_eq!(s.trace_state, "ot=th:0", "{model}: kept whatever the ratio");
        }
    }

    // Ordinary ones: exactly the ratio's picks, plus the pair's first
    // request; one slowed past a threshold by a loaded machine may be
    // kept for that, with the figure to show it.
    let mut by_ratio = 0;
    for (i, t) in traces.iter().enumerate() {
        let id = format!("{t:032x}");
        let span = by_trace.get(id.as_str());
        let reason = span.map(|s| s.str("tokentap.sampling.reason"));
        match (i, picked_by_ratio(*t), reason) {
            (0, _, r) => assert_eq!(r, Some("first_of_pair"), "the pair's first request"),
            (_, true, Some("ratio")) => {
                let s = span.unwrap();
                by_ratio += 1;
                assert_eq!(s.num("tokentap.sampling.weight"), 4.0, "1 / 0.25");
                assert_eq!(s.trace_state, "ot=th:c", "the ratio's threshold");
            }
            (_, false, None) => {}
            (_, _, Some("slow_ttft" | "stall" | "slow_duration")) => {
                eprintln!(
                    "ordinary request {id} kept as slow: {:?}",
                    span.unwrap().attrs
                );
            }
            (_, picked, r) => panic!("trace {id}: picked by the ratio {picked}, exported as {r:?}"),
        }
    }
    let picked = traces
        .iter()
        .skip(1)
        .filter(|t| picked_by_ratio(**t))
        .count();
    assert!(
        by_ratio + 3 >= picked && by_ratio <= picked,
        "{by_ratio} kept by the ratio of {picked} picked"
    );
    // Binomial(159, 0.25): mean 39.75, sd 5.5; the seed fixes the draw.
    assert!(
        (20..=60).contains(&picked),
        "{picked} of {} picked at 0.25",
        ORDINARY - 1
    );

    // Metrics count every request.
    let counted: u64 = rig
        .col
        .latest("gen_ai.client.inference.duration")
        .iter()
        .map(|p| p.hist().count)
        .sum();
    assert_eq!(counted as usize, total, "the duration histogram counts all");
    let requests: f64 = rig
        .col
        .latest("tokentap.requests")
        .iter()
        .map(|p| p.number())
        .sum();
    assert_eq!(requests as usize, total, "tokentap.requests counts all");

    // Exemplars lead only to exported spans.
    let ex = exemplar_traces(&om);
    assert!(!ex.is_empty(), "some exemplars:\n{om}");
    for id in &ex {
        assert!(
            by_trace.contains_key(id.as_str()),
            "exemplar names trace {id}, which was not exported"
        );
    }
    for t in &traces {
        let id = format!("{t:032x}");
        if !by_trace.contains_key(id.as_str()) {
            assert!(!om.contains(&id), "dropped trace {id} appears in /metrics");
        }
    }

    // The live table says which trace ids lead to an exported span.
    let mut shown = [0, 0];
    for row in &recent {
        let id = row["trace_id"].as_str().expect("every row has a trace id");
        let exported = row["span_exported"].as_bool().expect("span_exported");
        assert_eq!(
            exported,
            by_trace.contains_key(id),
            "/api/live row of trace {id}: {row}"
        );
        shown[usize::from(exported)] += 1;
    }
    assert!(shown[0] > 0 && shown[1] > 0, "both kinds of row: {shown:?}");
}

/// `recent[]` of `/api/live`.
async fn live_recent(rig: &Rig, admin: std::net::SocketAddr) -> Vec<serde_json::Value> {
    let req = Req {
        method: Method::GET,
        url: format!("http://{admin}/api/live"),
        headers: Vec::new(),
        body: Bytes::new(),
    };
    let got = client::fetch(&rig.client, &req).await;
    assert_eq!(got.status, 200, "/api/live: {}", got.text());
    let live: serde_json::Value = serde_json::from_str(&got.text()).unwrap();
    live["recent"].as_array().cloned().unwrap_or_default()
}
