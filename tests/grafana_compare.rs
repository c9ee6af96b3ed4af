//! The compare dashboard (`deploy/grafana/compare.json`) and
//! `tokentap compare --prometheus` against a real Prometheus scraping
//! tokentap, as the alert rules are tested against promtool.
//!
//! Two tokentap replicas (in this process, each with an admin listener)
//! proxy a scripted upstream serving two models: `m-fast` (5 ms to the
//! first token, 2 ms between tokens) and `m-slow` (60 ms, 20 ms). A real
//! `prometheus` (Debian's package, installed by `scripts/setup-test-env.sh`)
//! scrapes both replicas' `/metrics` every second into a temporary TSDB.
//! Traffic goes to both replicas one request at a time (load class `1`)
//! and in bursts; then every query of compare.json, its variables
//! substituted (side A = m-fast, side B = m-slow, prompt size `le_1k`,
//! load class `1`), runs through Prometheus's HTTP API and must return
//! one series per cell (buckets summed across the two replicas) with the
//! right figures: A's decode p50 above B's, A's TTFT below B's, the ratios
//! on the right side of 1. Then `tokentap compare` prints the same cells
//! from the same Prometheus, as JSON and as a table, and fails clearly on
//! a bad side, a side without data and an unreachable Prometheus.
//! Prometheus is stopped by its PID.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test
#![allow(clippy::disallowed_methods, reason = "test timing")]

mod support;

use std::time::Duration;

use serde_json::Value;
use support::CHAT;
use support::client::{self, HttpClient, Req};
use support::prometheus::Prometheus;
use support::proxy::{Toml, bin_command, start_with_admin};
use support::script::{self, StreamSpec};
use support::upstream::Upstream;
use support::within;

const DASHBOARD: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/grafana/compare.json");

/// The dashboard's variables and Grafana's own, as this test sets them.
const SUBST: &[(&str, &str)] = &[
    ("$route_a", "chat"),
    ("$model_a", "m-fast"),
    ("$route_b", "chat"),
    ("$model_b", "m-slow"),
    ("$prompt_size", "le_1k"),
    ("$load_class", "1"),
    ("$__rate_interval", "2m"),
    ("$__range", "2m"),
];

/// Every query of the dashboard: (panel title, legend or variable name, PromQL).
fn dashboard_queries(v: &Value, title: &str, out: &mut Vec<(String, String, String)>) {
    match v {
        Value::Object(map) => {
            let title = map.get("title").and_then(Value::as_str).unwrap_or(title);
            if let Some(Value::String(expr)) = map.get("expr") {
                let legend = map.get("legendFormat").and_then(Value::as_str);
                out.push((
                    title.to_owned(),
                    legend.unwrap_or("").to_owned(),
                    expr.clone(),
                ));
            } else if let (Some(Value::String(def)), Some(Value::String(name))) =
                (map.get("definition"), map.get("name"))
            {
                out.push((title.to_owned(), format!("${name}"), def.clone()));
            } else {
                map.values().for_each(|v| dashboard_queries(v, title, out));
            }
        }
        Value::Array(items) => items.iter().for_each(|v| dashboard_queries(v, title, out)),
        _ => {}
    }
}

fn substitute(expr: &str) -> String {
    SUBST
        .iter()
        .fold(expr.to_owned(), |e, (k, v)| e.replace(k, v))
}

/// `label_values(selector, label)` as PromQL that returns one series per value.
fn label_values(expr: &str) -> Option<(String, String)> {
    let inner = expr
        .trim()
        .strip_prefix("label_values(")?
        .strip_suffix(')')?;
    let (selector, label) = inner.rsplit_once(',')?;
    let label = label.trim().to_owned();
    Some((format!("count by ({label}) ({})", selector.trim()), label))
}

fn values(result: &[Value]) -> Vec<f64> {
    result
        .iter()
        .map(|r| {
            r["value"][1]
                .as_str()
                .and_then(|s| s.parse().ok())
                .unwrap_or(f64::NAN)
        })
        .collect()
}

async fn chat(c: &HttpClient, proxy: std::net::SocketAddr, model: &str) {
    let req = Req::post_json(proxy, CHAT, script::openai_request(model, true, None));
    let got = client::fetch(c, &req).await;
    assert_eq!(got.status, 200, "{model}: {}", got.text());
}

/// One request per model per replica in turn (load class 1), then a
/// burst of three per model on one replica (load class 2-8 for all but
/// the first).
async fn round(c: &HttpClient, proxies: &[std::net::SocketAddr; 2]) -> usize {
    for p in proxies {
        for m in ["m-fast", "m-slow"] {
            chat(c, *p, m).await;
        }
    }
    for m in ["m-fast", "m-slow"] {
        let burst: Vec<_> = (0..3)
            .map(|_| {
                let (c, p) = (client::http1(), proxies[0]);
                tokio::spawn(async move { chat(&c, p, m).await })
            })
            .collect();
        for b in burst {
            b.await.unwrap();
        }
    }
    10
}

/// Until Prometheus has scraped `n` requests from the replicas, then one
/// more scrape interval so the last sample is in every window.
async fn scraped(prom: &Prometheus, n: usize) {
    let total = "sum(gen_ai_server_time_to_first_token_seconds_count{tokentap_route=\"chat\"})";
    let fut = async {
        while prom.sum(total).await < n as f64 {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    };
    within(
        Duration::from_secs(20),
        "prometheus to scrape every request",
        fut,
    )
    .await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
}

async fn tokentap_compare(args: &[&str]) -> (bool, String, String) {
    let out = within(
        Duration::from_secs(30),
        "tokentap compare to finish",
        bin_command().arg("compare").args(args).output(),
    )
    .await
    .expect("run tokentap compare");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compare_dashboard_and_cli_against_a_real_prometheus() {
    within(Duration::from_secs(120), "the whole comparison", run()).await;
}

async fn run() {
    let fast = StreamSpec::tokens(20, Duration::from_millis(5), Duration::from_millis(2))
        .with_usage(200, 20)
        .model("m-fast");
    let slow = StreamSpec::tokens(10, Duration::from_millis(60), Duration::from_millis(20))
        .with_usage(200, 10)
        .model("m-slow");
    let up = Upstream::start(move |ex| match ex.json()["model"].as_str() {
        Some("m-slow") => script::openai_chat_sse(&slow),
        _ => script::openai_chat_sse(&fast),
    })
    .await;
    let toml = || Toml::new().route("chat", "/", &up.url(), "openai");
    let (one, two) = (
        start_with_admin(toml()).await,
        start_with_admin(toml()).await,
    );
    let proxies = [one.addr, two.addr];
    let admins = [one.admin_addr.unwrap(), two.admin_addr.unwrap()];
    let mut prom = Prometheus::start(&admins).await;
    let c = client::http1();

    // Warm-up: every series exists in a scrape before the measured
    // traffic, so rate() and increase() see all of it.
    let mut sent = round(&c, &proxies).await;
    scraped(&prom, sent).await;
    let started = std::time::Instant::now();
    for _ in 0..6 {
        sent += round(&c, &proxies).await;
        tokio::time::sleep(Duration::from_millis(400)).await;
    }
    scraped(&prom, sent).await;
    eprintln!(
        "{sent} requests; measured traffic took {:?}",
        started.elapsed()
    );

    // ---- every dashboard query, variables substituted
    let dash: Value = serde_json::from_str(&std::fs::read_to_string(DASHBOARD).unwrap()).unwrap();
    let mut queries = Vec::new();
    dashboard_queries(&dash, "compare.json", &mut queries);
    assert!(queries.len() >= 15, "queries found: {queries:#?}");
    let mut figures = std::collections::BTreeMap::new();
    for (title, legend, expr) in &queries {
        let expr = substitute(expr);
        assert!(
            !expr.contains('$'),
            "{title} {legend}: a variable left in {expr}"
        );
        if let Some((promql, label)) = label_values(&expr) {
            let got = prom.query(&promql).await;
            let seen: Vec<&str> = got
                .iter()
                .filter_map(|r| r["metric"][&label].as_str())
                .collect();
            let want = match label.as_str() {
                "tokentap_route" => vec!["chat"],
                "gen_ai_request_model" => vec!["m-fast", "m-slow"],
                "tokentap_prompt_size_class" => vec!["le_1k"],
                _ => vec!["1", "2-8"],
            };
            for w in want {
                assert!(
                    seen.contains(&w),
                    "variable {legend} ({promql}): {w} not in {seen:?}"
                );
            }
            continue;
        }
        let got = prom.query(&expr).await;
        let vals = values(&got);
        assert_eq!(
            vals.len(),
            1,
            "{title} / {legend}: one series for the one cell, buckets summed across both replicas: {expr}\n{got:#?}"
        );
        assert!(
            vals[0].is_finite() && vals[0] > 0.0,
            "{title} / {legend}: a figure: {expr} = {vals:?}"
        );
        figures.insert(format!("{title} / {legend}"), vals[0]);
    }
    eprintln!("dashboard figures: {figures:#?}");
    let fig = |title: &str, legend: &str| -> f64 {
        *figures
            .iter()
            .find(|(k, _)| k.starts_with(title) && k.ends_with(&format!("/ {legend}")))
            .unwrap_or_else(|| panic!("no figure {title} / {legend} in {figures:#?}"))
            .1
    };
    let (ttft, decode) = (
        "TTFT and prefill per cell",
        "Decode tokens/s per load class",
    );
    assert!(
        fig(decode, "Decode tokens/s p50 A") > 3.0 * fig(decode, "Decode tokens/s p50 B"),
        "the fast model decodes faster: {figures:#?}"
    );
    assert!(
        fig(decode, "Decode tokens/s p50 B/A") < 0.34,
        "{figures:#?}"
    );
    assert!(
        fig(ttft, "TTFT p50 B") > 3.0 * fig(ttft, "TTFT p50 A"),
        "the slow model is slower to its first token: {figures:#?}"
    );
    assert!(fig(ttft, "TTFT p50 B/A") > 3.0, "{figures:#?}");
    assert!(
        fig(ttft, "Prefill tokens/s p50 A") > fig(ttft, "Prefill tokens/s p50 B"),
        "{figures:#?}"
    );
    // Two requests per model per round one at a time (one per replica),
    // and the first of each burst: 12 to 30 in load class 1 over the six
    // measured rounds (increase() extrapolates a little past them).
    let n = fig(ttft, "Requests A");
    assert!((11.5..=33.0).contains(&n), "requests in the cell: {n}");
    let panel = |prefix: &str, side: &str| -> f64 {
        *figures
            .iter()
            .find(|(k, _)| k.starts_with(prefix) && k.contains(&format!("/ {side} $route_")))
            .unwrap_or_else(|| panic!("no {prefix} panel figure for {side}: {figures:#?}"))
            .1
    };
    assert!(
        panel("Decode tokens/s p50 ·", "A") > 3.0 * panel("Decode tokens/s p50 ·", "B"),
        "{figures:#?}"
    );
    assert!(
        panel("TTFT p50/p90 ·", "B") > 3.0 * panel("TTFT p50/p90 ·", "A"),
        "{figures:#?}"
    );

    // ---- tokentap compare: the same cells from the same Prometheus
    let url = prom.url();
    let sides = ["--side", "chat:m-fast", "--side", "chat:m-slow"];
    let common = [
        "--range",
        "2m",
        "--window",
        "5s",
        "--min-requests",
        "3",
        "--min-windows",
        "1",
    ];
    let mut args = vec!["--prometheus", url.as_str()];
    args.extend(sides);
    args.extend(common);
    let (ok, out, err) = tokentap_compare(&[args.as_slice(), &["--json"]].concat()).await;
    assert!(ok, "tokentap compare --json failed: {err}\n{out}");
    let json: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    let cell = json["cells"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["prompt_size"] == "le_1k" && c["load_class"] == "1")
        .unwrap_or_else(|| panic!("no le_1k / 1 cell: {json:#}"))
        .clone();
    let (a, b) = (&cell["sides"][0], &cell["sides"][1]);
    let median = |s: &Value, k: &str| s[k]["median"].as_f64().unwrap_or(f64::NAN);
    assert!(
        median(a, "decode_tps") > 3.0 * median(b, "decode_tps"),
        "{cell:#}"
    );
    assert!(
        median(b, "ttft_ms") > 3.0 * median(a, "ttft_ms") && median(a, "ttft_ms") > 1.0,
        "TTFT in ms: {cell:#}"
    );
    for s in [a, b] {
        for k in ["ttft_ms", "prefill_tps", "decode_tps"] {
            let (lo, mid, hi) = (
                s[k]["min"].as_f64().unwrap_or(f64::NAN),
                median(s, k),
                s[k]["max"].as_f64().unwrap_or(f64::NAN),
            );
            assert!(lo <= mid && mid <= hi, "{k}: min ≤ median ≤ max: {cell:#}");
        }
        let n = s["requests"].as_u64().unwrap();
        assert!((12..=33).contains(&n), "requests in the cell: {cell:#}");
        assert!(s["windows"].as_u64().unwrap() >= 1, "{cell:#}");
        assert_eq!(s["enough_data"], true, "{cell:#}");
    }
    let ratio = cell["ratio"]["decode_tps"].as_f64().unwrap();
    assert!(ratio < 0.34, "decode B/A: {cell:#}");
    assert!(cell["ratio"]["ttft_ms"].as_f64().unwrap() > 3.0, "{cell:#}");
    // The CLI's median of windows and the dashboard's figure over the
    // whole range come from the same buckets: the same side of each other's
    // bucket, within a factor of two.
    let dash_decode = fig(decode, "Decode tokens/s p50 A");
    assert!(
        (0.5..2.0).contains(&(median(a, "decode_tps") / dash_decode)),
        "CLI {} vs dashboard {dash_decode}",
        median(a, "decode_tps")
    );

    let (ok, table, err) = tokentap_compare(&args).await;
    assert!(ok, "tokentap compare failed: {err}\n{table}");
    assert!(
        table.contains("A: chat:m-fast") && table.contains("B: chat:m-slow"),
        "{table}"
    );
    let row = table
        .lines()
        .find(|l| l.starts_with("le_1k") && l.split_whitespace().nth(1) == Some("1"))
        .unwrap_or_else(|| panic!("no le_1k / 1 row:\n{table}"));
    assert!(
        row.contains(&format!(
            "{:.2}",
            cell["ratio"]["decode_tps"].as_f64().unwrap()
        )),
        "the table's decode B/A is the JSON's: {row}"
    );
    eprintln!("{table}");

    // ---- clear errors
    let (ok, _, err) = tokentap_compare(&[
        "--prometheus",
        &url,
        "--side",
        "chat",
        "--side",
        "chat:m-slow",
    ])
    .await;
    assert!(!ok && err.contains("ROUTE:MODEL"), "bad side syntax: {err}");
    let (ok, _, err) = tokentap_compare(&["--prometheus", &url, "--side", "chat:m-fast"]).await;
    assert!(!ok && err.contains("exactly two sides"), "one side: {err}");
    let (ok, _, err) = tokentap_compare(
        &[
            &[
                "--prometheus",
                url.as_str(),
                "--side",
                "chat:m-fast",
                "--side",
                "chat:m-none",
            ][..],
            &common,
        ]
        .concat(),
    )
    .await;
    assert!(
        !ok && err.contains("no data for side chat:m-none"),
        "no data: {err}"
    );
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let gone = format!("http://{closed}");
    let (ok, _, err) =
        tokentap_compare(&[&["--prometheus", gone.as_str()][..], &sides].concat()).await;
    assert!(
        !ok && err.contains(&format!("cannot reach Prometheus at {gone}")),
        "unreachable: {err}"
    );

    prom.stop().await;
    one.shutdown().await;
    two.shutdown().await;
}
