//! Cardinality and memory under abuse: requests that each name a new model
//! and a new tenant.
//!
//! Guarantees checked:
//! * In process, 100,000 requests through the real `Telemetry::begin` /
//!   `Recorder::finish` path: every instrument in the Prometheus scrape
//!   carries at most `max_models` + 1 (`other`) model values and
//!   `max_tenants` + 1 tenant values, so each instrument has at most
//!   cap + 1 series per combination of its other labels (exactly cap + 1 for
//!   `gen_ai.client.inference.duration`); the live statistics keep at most
//!   `live.max_series` + 1 series; an `[[slo]]` judged per model (`model =
//!   "*"`, breached for every model) reports breaches for capped model values
//!   only; and the process's RSS grows less than 20 MiB between request
//!   10,000 and request 100,000.
//! * End to end, 6,000 requests through the real binary (distinct model in
//!   the body, distinct `x-tenant-id`): the same bounds hold in the admin
//!   `/metrics`, in the OTLP metric points and in `/api/live`; spans keep the
//!   real model name; the proxy's RSS grows less than 20 MiB after the
//!   caps have filled.
#![allow(
    clippy::disallowed_methods,
    reason = "tests time requests and set deadlines with the wall clock"
)]
#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::HeaderMap;
use tokentap::meter::{Measurement, Recorder, RequestFacts, TokenSource};
use tokentap::providers::Usage;
use tokentap::ship::prometheus::Format;
use tokentap::telemetry::Telemetry;

use support::client::{self, Req};
use support::inspect::{self, Scrape};
use support::otlp::Collector;
use support::proxy::{Bin, Toml, q};
use support::script;
use support::upstream::Upstream;
use support::within;

/// Default caps (`telemetry.max_models`, `telemetry.max_tenants`).
const CAP: usize = 100;
/// `live.max_series`, below the caps so the live statistics' own cap shows.
const LIVE_SERIES: usize = 50;
const MODEL_LABEL: &str = "gen_ai_request_model";
const RESPONSE_MODEL_LABEL: &str = "gen_ai_response_model";
const TENANT_LABEL: &str = "tokentap_tenant";
/// RSS growth allowed once the caps are full.
const RSS_GROWTH_KIB: u64 = 20 * 1024;

/// Both tests measure RSS; run them one at a time so neither sees the
/// other's allocations (the in-process one measures this very process).
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// An SLO judged per model that every model breaches (TTFT p95 over 1 ms).
const SLO: &str = "[[slo]]\nname = \"abuse\"\nmodel = \"*\"\nttft_p95 = \"1ms\"\n\
                   window = \"1m\"\nmin_requests = 1\n";

fn config_toml(upstream: &str) -> Toml {
    Toml::openai(upstream)
        .set("telemetry", "access_log", "false")
        .set("live", "max_series", &LIVE_SERIES.to_string())
        .raw(SLO)
}

/// The label sets of every instrument that carries a model label obey the
/// caps: at most cap + 1 model, response-model and tenant values, and at
/// most cap + 1 series per combination of the other labels.
fn assert_capped(s: &Scrape, what: &str) {
    let families = s.series_per_family();
    let mut checked = 0;
    for (family, sets) in &families {
        if !sets
            .iter()
            .any(|set| set.iter().any(|(k, _)| k == MODEL_LABEL))
        {
            continue;
        }
        checked += 1;
        for key in [MODEL_LABEL, RESPONSE_MODEL_LABEL, TENANT_LABEL] {
            let values = s.label_values(family, key);
            assert!(
                values.len() <= CAP + 1,
                "{what}: {family} has {} distinct {key} values, cap {CAP} + `other`",
                values.len()
            );
        }
        let mut per_rest: BTreeMap<Vec<(String, String)>, usize> = BTreeMap::new();
        for set in sets {
            let rest = set
                .iter()
                .filter(|(k, _)| {
                    ![MODEL_LABEL, RESPONSE_MODEL_LABEL, TENANT_LABEL].contains(&k.as_str())
                })
                .cloned()
                .collect();
            *per_rest.entry(rest).or_default() += 1;
        }
        for (rest, n) in per_rest {
            assert!(
                n <= CAP + 1,
                "{what}: {family} has {n} series for {rest:?}, more than cap {CAP} + `other`"
            );
        }
    }
    assert!(
        checked >= 5,
        "{what}: expected the GenAI instruments in the scrape, found {checked}"
    );
    let duration = &families["gen_ai_client_inference_duration_seconds"];
    assert_eq!(
        duration.len(),
        CAP + 1,
        "{what}: one series per admitted model/tenant pair plus `other`"
    );
    let models = s.label_values("gen_ai_client_inference_duration_seconds", MODEL_LABEL);
    assert!(
        models.contains("other"),
        "{what}: values past the cap are `other`: {models:?}"
    );
}

/// `tokentap.slo.breaches` names capped models only.
fn assert_slo_capped(s: &Scrape, what: &str) {
    let models = s.label_values("tokentap_slo_breaches", MODEL_LABEL);
    assert!(
        !models.is_empty(),
        "{what}: the per-model SLO should have breached (it is set to): /metrics:\n{}",
        s.text
    );
    assert!(
        models.len() <= LIVE_SERIES + 1,
        "{what}: SLO verdicts for {} models; the live series they come from are capped at {LIVE_SERIES} + `other`",
        models.len()
    );
}

/// `/api/live` (or the snapshot it serializes) keeps at most
/// `max_series` + 1 series and folds the rest into `other`.
fn assert_live_capped(live: &serde_json::Value, what: &str) {
    let series = live["series"].as_array().map_or(0, Vec::len);
    assert!(
        series <= LIVE_SERIES + 1,
        "{what}: {series} live series, cap {LIVE_SERIES} + `other`"
    );
    assert!(
        live["overflowed"].as_u64().unwrap_or(0) > 0,
        "{what}: samples past the live cap are folded into `other`: {}",
        live["overflowed"]
    );
    let recent = live["recent"].as_array().map_or(0, Vec::len);
    assert!(
        recent <= 50,
        "{what}: {recent} recent requests kept, cap 50"
    );
}

fn facts(model: usize, tenant: usize) -> RequestFacts {
    RequestFacts {
        request_model: Some(format!("abuse-model-{model}")),
        tenant: Some(format!("abuse-tenant-{tenant}")),
        ..support::facts::chat_facts(Instant::now())
    }
}

fn measurement(request: RequestFacts) -> Measurement {
    let model = request.request_model.clone();
    Measurement {
        response_model: model,
        response_id: Some("chatcmpl-abuse".into()),
        finish_reasons: vec!["stop".into()],
        usage: Usage {
            input: Some(12),
            output: Some(3),
            ..Usage::default()
        },
        output_tokens: Some(3),
        token_source: Some(TokenSource::Provider),
        content_chunks: 3,
        time_to_headers: Some(Duration::from_millis(10)),
        time_to_first_byte: Some(Duration::from_millis(15)),
        time_to_first_token: Some(Duration::from_millis(20)),
        time_to_last_token: Some(Duration::from_millis(40)),
        duration: Duration::from_millis(45),
        max_gap: Some(Duration::from_millis(10)),
        response_bytes: 300,
        ..Measurement::empty(request)
    }
}

/// One finished streaming request per `(model, tenant)` index pair.
fn record(t: &Telemetry, pairs: impl Iterator<Item = (usize, usize)>) {
    let headers = HeaderMap::new();
    for (model, tenant) in pairs {
        let f = facts(model, tenant);
        let mut rec = Box::new(t.begin(&f, &headers));
        rec.chunk_gap(Duration::from_millis(10));
        rec.chunk_gap(Duration::from_millis(10));
        rec.finish(measurement(f));
    }
}

fn self_rss() -> u64 {
    inspect::rss_kib(std::process::id())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_process_100k_models_and_tenants_stay_capped() {
    let _serial = SERIAL.lock().await;
    let text = config_toml("http://127.0.0.1:9").render();
    let config = tokentap::config::from_toml(&text).unwrap();
    let t = Telemetry::init_with_prometheus(&config.telemetry).unwrap();

    // Warm up past the caps, then measure over the remaining 90,000.
    record(&t, (0..10_000).map(|i| (i, i)));
    let before = self_rss();
    let started = Instant::now();
    record(&t, (10_000..100_000).map(|i| (i, i)));
    let after = self_rss();
    eprintln!(
        "in process: 90,000 requests in {:?}; RSS {before} KiB -> {after} KiB",
        started.elapsed()
    );

    let s = Scrape::parse(&t.scrape(Format::Text).unwrap());
    assert_capped(&s, "in process");
    let requests: f64 = s.named("tokentap_requests_total").map(|x| x.value).sum();
    assert_eq!(
        requests, 100_000.0,
        "every request counted across the capped series"
    );

    // The live statistics publish once a second and the SLO evaluator runs
    // on each snapshot: wait for one that has seen the samples.
    let live = within(
        Duration::from_secs(10),
        "a live snapshot with the samples",
        async {
            loop {
                let snap = t.live().snapshot();
                if snap.overflowed > 0 {
                    return snap;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        },
    )
    .await;
    assert_live_capped(&serde_json::to_value(&*live).unwrap(), "in process");
    let s = within(Duration::from_secs(10), "an SLO breach", async {
        loop {
            let s = Scrape::parse(&t.scrape(Format::Text).unwrap());
            if s.named("tokentap_slo_breaches_total").next().is_some() {
                return s;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    assert_slo_capped(&s, "in process");
    t.shutdown();

    let growth = after.saturating_sub(before);
    assert!(
        growth < RSS_GROWTH_KIB,
        "RSS grew {growth} KiB ({before} -> {after}) over 90,000 requests with new models and tenants"
    );
}

/// Session ids are unbounded: 5,000 distinct ones through the real
/// `begin` / `finish` path keep `sessions.max_sessions` rollups (the most
/// recent), and none becomes a metric label.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn distinct_session_ids_stay_in_bounded_rollups_and_out_of_metrics() {
    use tokentap::watch::rollups::SortBy;
    let _serial = SERIAL.lock().await;
    let text = config_toml("http://127.0.0.1:9")
        .set("sessions", "max_sessions", "100")
        .render();
    let config = tokentap::config::from_toml(&text).unwrap();
    let t = Telemetry::init_with_prometheus(&config.telemetry).unwrap();
    let headers = HeaderMap::new();
    let started = Instant::now();
    for i in 0..5_000 {
        let mut f = facts(0, 0);
        f.session = Some(Arc::from(format!("abuse-session-{i}")));
        let rec = Box::new(t.begin(&f, &headers));
        rec.finish(measurement(f));
    }
    eprintln!(
        "5,000 requests with new session ids in {:?}",
        started.elapsed()
    );
    let rollups = t.sessions();
    assert_eq!(
        rollups.counts(),
        (100, 4_900),
        "100 sessions kept, the other 4,900 evicted"
    );
    let listed = rollups.list(SortBy::LastSeen, 1_000);
    assert_eq!(listed.len(), 100, "the list is bounded too");
    assert_eq!(listed[0].id, "abuse-session-4999", "the newest first");
    assert!(
        listed
            .iter()
            .all(|s| s.requests == 1 && s.input_tokens == 12),
        "each kept session has its one request"
    );
    let scrape = t.scrape(Format::Text).unwrap();
    assert!(
        !scrape.contains("abuse-session"),
        "a session id reached /metrics"
    );
    let requests: f64 = Scrape::parse(&scrape)
        .named("tokentap_requests_total")
        .map(|x| x.value)
        .sum();
    assert_eq!(requests, 5_000.0, "metrics still count every request");
    t.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn model_tenant_cross_product_stops_at_the_series_limit() {
    const LIMIT: usize = 500;
    let _serial = SERIAL.lock().await;
    let text = Toml::openai("http://127.0.0.1:9")
        .set("telemetry", "max_series", &LIMIT.to_string())
        .render();
    let config = tokentap::config::from_toml(&text).unwrap();
    let t = Telemetry::init_with_prometheus(&config.telemetry).unwrap();
    // Every admitted model with every admitted tenant: 10,000 pairs, each
    // label within its cap of 100.
    record(&t, (0..CAP).flat_map(|m| (0..CAP).map(move |n| (m, n))));
    let s = Scrape::parse(&t.scrape(Format::Text).unwrap());
    t.shutdown();
    let families = s.series_per_family();
    for (family, sets) in &families {
        assert!(
            sets.len() <= LIMIT + 1,
            "{family}: {} series; max_series {LIMIT} + the overflow series",
            sets.len()
        );
    }
    let duration = &families["gen_ai_client_inference_duration_seconds"];
    assert_eq!(
        duration.len(),
        LIMIT + 1,
        "the limit is reached, plus one overflow series"
    );
    let overflow = s
        .named("gen_ai_client_inference_duration_seconds_count")
        .find(|x| x.labels.get("otel_metric_overflow").map(String::as_str) == Some("true"))
        .unwrap_or_else(|| panic!("an otel_metric_overflow=\"true\" series:\n{}", s.text));
    assert!(
        overflow.value > 0.0,
        "requests past the limit are counted in the overflow series"
    );
    let requests: f64 = s.named("tokentap_requests_total").map(|x| x.value).sum();
    assert_eq!(requests, (CAP * CAP) as f64, "no request lost to the limit");
    assert!(
        s.named("gen_ai_server_time_to_first_token_seconds_bucket")
            .any(|x| x.labels.get("le").map(String::as_str) == Some("0.001")),
        "the limit's view keeps the instruments' bucket boundaries"
    );
}

/// Non-streaming requests `from..to`, `concurrency` at a time, request `i`
/// naming model `abuse-model-{i}` and tenant `abuse-tenant-{i}`.
async fn abuse(addr: SocketAddr, from: usize, to: usize, concurrency: usize) {
    client::load(from..to, concurrency, move |i| {
        let body = script::openai_request(&format!("abuse-model-{i}"), false, None);
        Req::post_json(addr, "/v1/chat/completions", body)
            .header("x-tenant-id", &format!("abuse-tenant-{i}"))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_under_6k_models_and_tenants_stays_capped() {
    const WARM_UP: usize = 1_000;
    const TOTAL: usize = 6_000;
    let _serial = SERIAL.lock().await;
    // The upstream answers with the model it was asked for, so the
    // response-model label is attacked too.
    let up = Upstream::start(|ex| {
        let model = ex.json()["model"].as_str().unwrap_or("m").to_owned();
        script::openai_chat_json(&model, "ok", (1, 1))
    })
    .await;
    let col = Collector::start().await;
    let toml = config_toml(&up.url()).otlp(&col.endpoint(), "grpc").set(
        "telemetry",
        "metrics_export_interval",
        &q("1s"),
    );
    let mut bin = Bin::start(&toml, &["--admin-listen", "127.0.0.1:0"], &[]).await;
    let admin = inspect::admin_addr(&bin).await;
    let pid = bin.child.id().unwrap();

    // The first requests one at a time, so model, tenant and response model
    // fill their caps in the same order (concurrent requests near the cap
    // could pair an admitted model with an `other` tenant).
    abuse(bin.addr, 0, 2 * CAP, 1).await;
    abuse(bin.addr, 2 * CAP, WARM_UP, 32).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = inspect::rss_kib(pid);
    let started = Instant::now();
    abuse(bin.addr, WARM_UP, TOTAL, 32).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = inspect::rss_kib(pid);
    eprintln!(
        "binary: {} requests in {:?}; RSS {before} KiB -> {after} KiB",
        TOTAL - WARM_UP,
        started.elapsed()
    );

    let c = client::http1();
    let s = inspect::scrape(&c, admin).await;
    assert_capped(&s, "admin /metrics");
    let requests: f64 = s.named("tokentap_requests_total").map(|x| x.value).sum();
    assert_eq!(
        requests, TOTAL as f64,
        "every request counted across the capped series"
    );

    // OTLP: the latest export of the duration histogram, same bounds.
    let last = format!("abuse-model-{}", TOTAL - 1);
    col.wait_span_named(&format!("chat {last}")).await;
    let p = col
        .wait_point(
            Duration::from_secs(15),
            "gen_ai.client.inference.duration",
            |p| p.attr_str("gen_ai.request.model") == Some("other"),
        )
        .await;
    assert_eq!(p.unit, "s");
    let points = col.latest("gen_ai.client.inference.duration");
    let models: BTreeSet<_> = points
        .iter()
        .filter_map(|p| p.attr_str("gen_ai.request.model"))
        .collect();
    let tenants: BTreeSet<_> = points
        .iter()
        .filter_map(|p| p.attr_str("tokentap.tenant"))
        .collect();
    assert!(
        points.len() <= CAP + 1 && models.len() <= CAP + 1 && tenants.len() <= CAP + 1,
        "OTLP: {} points, {} models, {} tenants for gen_ai.client.inference.duration; cap {CAP} + `other`",
        points.len(),
        models.len(),
        tenants.len()
    );

    let live = inspect::live(&c, admin).await;
    assert_live_capped(&live, "/api/live");
    let s = within(
        Duration::from_secs(10),
        "an SLO breach in /metrics",
        async {
            loop {
                let s = inspect::scrape(&c, admin).await;
                if s.named("tokentap_slo_breaches_total").next().is_some() {
                    return s;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        },
    )
    .await;
    assert_slo_capped(&s, "admin /metrics");

    bin.sigterm();
    bin.wait_exit(Duration::from_secs(30)).await;
    let growth = after.saturating_sub(before);
    assert!(
        growth < RSS_GROWTH_KIB,
        "proxy RSS grew {growth} KiB ({before} -> {after}) over {} requests with new models and tenants",
        TOTAL - WARM_UP
    );
}

#[test]
fn scrape_parser_reads_labels_escapes_and_families() {
    let text = "# HELP x y\n\
        a_total{otel_scope_name=\"t\",signal=\"spans\"} 3\n\
        h_bucket{m=\"q\\\"x\",le=\"0.1\"} 1\n\
        h_bucket{m=\"q\\\"x\",le=\"+Inf\"} 2\n\
        h_sum{m=\"q\\\"x\"} 0.5\n\
        h_count{m=\"q\\\"x\"} 2\n\
        target_info{service_name=\"s\"} 1\n\
        plain 7\n";
    let s = Scrape::parse(text);
    assert_eq!(s.value("a_total", "signal", "spans"), Some(3.0));
    let families = s.series_per_family();
    assert_eq!(
        families["h"].len(),
        1,
        "buckets, sum and count are one series"
    );
    assert!(
        !families.contains_key("target_info"),
        "target_info is no instrument"
    );
    assert_eq!(
        s.label_values("h", "m"),
        BTreeSet::from(["q\"x".to_owned()])
    );
    assert_eq!(s.named("plain").next().map(|x| x.value), Some(7.0));
}
