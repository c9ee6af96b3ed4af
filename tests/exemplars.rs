//! Exemplars end to end: the proxy with an admin listener and OTLP export
//! to a real receiver, in front of a scripted stream; `/metrics` scraped as
//! OpenMetrics carries trace-id exemplars on the duration, TTFT, decode-rate
//! and stall buckets, each naming a trace the receiver got, with that
//! span's own figures; the text format carries none.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

mod support;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http::Method;
use support::client::{self, HttpClient, Req};
use support::otlp::SpanRec;
use support::proxy::q;
use support::rig::Rig;
use support::script::{self, StreamSpec};
use support::{STEP_TIMEOUT, within};

use support::CHAT;
const OPENMETRICS: &str = "application/openmetrics-text;version=1.0.0";

/// One exemplar as scraped: the family it sits on, its bucket and figures.
#[derive(Debug, Clone)]
struct Scraped {
    family: String,
    le: String,
    trace_id: String,
    value: f64,
    /// Seconds since the Unix epoch.
    time: f64,
}

async fn get(c: &HttpClient, admin: SocketAddr, accept: Option<&str>) -> String {
    let mut req = Req {
        method: Method::GET,
        url: format!("http://{admin}/metrics"),
        headers: Vec::new(),
        body: Bytes::new(),
    };
    if let Some(a) = accept {
        req = req.header("accept", a);
    }
    let got = client::fetch(c, &req).await;
    assert_eq!(got.status, 200, "/metrics: {}", got.text());
    got.text()
}

/// Every exemplar in an OpenMetrics scrape; panics on one off a `_bucket`
/// line or not in `# {trace_id="…"} value timestamp` form.
fn exemplars(om: &str) -> Vec<Scraped> {
    let mut out = Vec::new();
    for line in om.lines().filter(|l| !l.starts_with('#')) {
        let Some((sample, ex)) = line.split_once(" # ") else {
            continue;
        };
        let name = &sample[..sample.find('{').unwrap_or(sample.len())];
        let family = name
            .strip_suffix("_bucket")
            .unwrap_or_else(|| panic!("exemplar on a non-bucket line: {line}"));
        let le = sample
            .split("le=\"")
            .nth(1)
            .and_then(|r| r.split('"').next())
            .unwrap_or_else(|| panic!("bucket without le: {line}"));
        let (labels, rest) = ex
            .strip_prefix("{trace_id=\"")
            .and_then(|r| r.split_once("\"} "))
            .unwrap_or_else(|| panic!("exemplar not `{{trace_id=\"…\"}} v t`: {line}"));
        assert!(
            labels.len() == 32 && labels.chars().all(|c| c.is_ascii_hexdigit()),
            "trace id is 32 hex digits: {line}"
        );
        let nums: Vec<f64> = rest.split(' ').map(|n| n.parse().unwrap()).collect();
        assert_eq!(nums.len(), 2, "value and timestamp: {line}");
        out.push(Scraped {
            family: family.to_owned(),
            le: le.to_owned(),
            trace_id: labels.to_owned(),
            value: nums[0],
            time: nums[1],
        });
    }
    out
}

/// Families that keep exemplars, and the span attribute holding the same
/// figure (`None`: the span's duration).
const FAMILIES: [(&str, Option<&str>); 5] = [
    ("gen_ai_client_inference_duration_seconds", None),
    ("gen_ai_server_request_duration_seconds", None),
    (
        "gen_ai_server_time_to_first_token_seconds",
        Some("gen_ai.response.time_to_first_chunk"),
    ),
    (
        "tokentap_decode_tokens_per_second",
        Some("tokentap.decode.tokens_per_second"),
    ),
    (
        "tokentap_stream_max_stall_seconds",
        Some("tokentap.max_stall"),
    ),
];

/// Scrape OpenMetrics until every family in `FAMILIES` shows an exemplar
/// (they are kept when a response body ends, which can trail the client).
async fn scrape_exemplars(c: &HttpClient, admin: SocketAddr) -> (String, Vec<Scraped>) {
    let fut = async {
        loop {
            let om = get(c, admin, Some(OPENMETRICS)).await;
            let found = exemplars(&om);
            if FAMILIES
                .iter()
                .all(|(f, _)| found.iter().any(|e| e.family == *f))
            {
                return (om, found);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    within(STEP_TIMEOUT, "exemplars on every family", fut).await
}

#[tokio::test]
async fn scraped_exemplars_lead_to_exported_spans() {
    let spec = StreamSpec::tokens(6, Duration::from_millis(40), Duration::from_millis(5));
    let reply = script::openai_chat_sse(&spec);
    let mut rig = Rig::start(
        move |_| reply.clone(),
        |t, up| {
            t.route("openai", "/", up, "openai")
                .top("admin_listen", &q("127.0.0.1:0"))
        },
    )
    .await;
    let admin = rig
        .proxy
        .running()
        .and_then(|r| r.admin_addr)
        .expect("admin_listen is configured");
    let sent = 3;
    for _ in 0..sent {
        let body = script::openai_request("m-ex", true, None);
        let got = client::fetch(&rig.client, &rig.post(CHAT, body)).await;
        assert_eq!(got.status, 200, "proxied stream: {}", got.text());
    }

    let (om, found) = scrape_exemplars(&rig.client, admin).await;
    let text = get(&rig.client, admin, None).await;
    assert!(
        !text.contains("trace_id") && !text.lines().any(|l| l.contains(" # ")),
        "the text format carries no exemplars:\n{text}"
    );
    for e in &found {
        assert!(
            FAMILIES.iter().any(|(f, _)| *f == e.family),
            "exemplar on a histogram that keeps none: {e:?}"
        );
        let le: f64 = if e.le == "+Inf" {
            f64::INFINITY
        } else {
            e.le.parse().unwrap()
        };
        assert!(e.value <= le, "exemplar value within its bucket: {e:?}");
    }
    let per_family: BTreeMap<&str, usize> = found.iter().fold(BTreeMap::new(), |mut m, e| {
        *m.entry(e.family.as_str()).or_default() += 1;
        m
    });
    for (f, _) in FAMILIES {
        // All requests are alike, so they share buckets: at most one per
        // bucket they land in, never one per request.
        let n = per_family.get(f).copied().unwrap_or(0);
        assert!(
            (1..=sent).contains(&n),
            "{f}: {n} exemplars for {sent} alike requests:\n{om}"
        );
    }

    rig.proxy.stop().await;
    let spans = rig.col.spans();
    let by_trace: BTreeMap<&str, &SpanRec> =
        spans.iter().map(|s| (s.trace_id.as_str(), s)).collect();
    for e in &found {
        let span = by_trace.get(e.trace_id.as_str()).unwrap_or_else(|| {
            panic!(
                "exemplar {e:?} names a trace the receiver never got; traces: {:?}",
                by_trace.keys().collect::<Vec<_>>()
            )
        });
        let (_, attr) = FAMILIES.iter().find(|(f, _)| *f == e.family).unwrap();
        let want = match attr {
            Some(key) => span.num(key),
            None => (span.end_ns - span.start_ns) as f64 / 1e9,
        };
        assert!(
            (e.value - want).abs() <= 1e-6 * want.max(1.0),
            "{}: exemplar value {} is its span's {}",
            e.family,
            e.value,
            want
        );
        let end = span.end_ns as f64 / 1e9;
        assert!(
            (e.time - end).abs() < 0.002,
            "exemplar timestamp {} is its span's end {end}",
            e.time
        );
    }
    assert!(
        found
            .iter()
            .any(|e| e.family == "gen_ai_server_time_to_first_token_seconds" && e.value >= 0.04),
        "TTFT exemplar reflects the scripted 40 ms wait: {found:?}"
    );
}
