//! The shipped Grafana dashboards (`deploy/grafana/tokentap.json` and
//! `deploy/grafana/compare.json`) and
//! Prometheus rules (`deploy/prometheus/alerts.yml`) name only metrics and
//! labels that tokentap really exports: the proxy runs in this process with
//! an admin listener in front of a scripted upstream, a few requests go
//! through it (streamed, non-streamed, failed, cancelled, with and without a
//! tenant; an `[[slo]]` that breaches at once, with a webhook that accepts
//! its events; so every family and label exists), `/metrics` is scraped,
//! and every PromQL expression in both files is checked against the scrape.
//! The same scrape holds docs/METRICS.md to its word: every family it
//! exposes is a row of the Prometheus mapping table there.
//!
//! The check, per expression:
//! - every metric name must be a sample name in the scrape
//!   (`…_bucket`/`_sum`/`_count`, `…_total`, gauges); a bare histogram
//!   family name is an error, because it selects nothing in PromQL;
//! - recording-rule names (they contain `:`), `up`, `ALERTS` and
//!   `ALERTS_FOR_STATE` (made by Prometheus, not by tokentap) are skipped;
//! - every label in a selector `{label=…}` must exist on that metric, and
//!   every label in `by (…)`, `without (…)`, `on (…)`, `ignoring (…)`,
//!   `group_left/right (…)` and `label_values(…, label)` on at least one
//!   metric it applies to; `job` and `instance` (added by Prometheus at
//!   scrape time) always exist.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http::Method;
use serde_json::Value;
use support::client::{self, HttpClient, Req};
use support::proxy::{Toml, q, start_with_admin};
use support::script::{self, StreamSpec};
use support::upstream::{Reply, Upstream};
use support::{STEP_TIMEOUT, within};

use support::CHAT;
const DASHBOARD: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/grafana/tokentap.json");
/// The side-by-side dashboard (two routes and models, per prompt size and load class).
const COMPARE_DASHBOARD: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/grafana/compare.json");
const RULES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/prometheus/alerts.yml");

const METRICS_DOC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/METRICS.md");

/// The Prometheus families docs/METRICS.md's mapping table names: the first
/// code span of each row's third column, under `## Prometheus`.
fn mapped_families(doc: &str) -> BTreeSet<String> {
    let section = doc
        .split("\n## ")
        .find(|s| s.starts_with("Prometheus\n"))
        .expect("METRICS.md has a Prometheus section");
    section
        .lines()
        .filter(|l| l.starts_with("| "))
        .filter_map(|l| l.split(" | ").nth(2))
        .filter_map(|cell| cell.split('`').nth(1))
        .map(str::to_owned)
        .collect()
}

/// Series Prometheus makes itself; never in tokentap's /metrics.
const PROMETHEUS_OWN: &[&str] = &["up", "ALERTS", "ALERTS_FOR_STATE"];
/// Exported only when a listener serves TLS (this test's proxy is
/// plaintext); `tests/tls.rs` checks the name and its labels in a scrape.
const TLS_ONLY: &[&str] = &["tokentap_tls_certificate_expiry_seconds"];
/// Labels Prometheus adds to every scraped series.
const TARGET_LABELS: &[&str] = &["job", "instance", "__name__"];

// ---------------------------------------------------------------- the scrape

/// Sample name → every label key seen on it.
#[derive(Debug, Default)]
struct Exported {
    samples: BTreeMap<String, BTreeSet<String>>,
    /// `# TYPE` family names, to explain a bare histogram family.
    families: BTreeSet<String>,
}

impl Exported {
    fn parse(text: &str) -> Exported {
        let mut out = Exported::default();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                if let Some(name) = rest.split_whitespace().next() {
                    out.families.insert(name.to_owned());
                }
                continue;
            }
            if line.starts_with('#') || line.trim().is_empty() {
                continue;
            }
            let (name, labels) = match line.find(['{', ' ']) {
                Some(i) if line.as_bytes()[i] == b'{' => (&line[..i], label_keys(&line[i + 1..])),
                Some(i) => (&line[..i], Vec::new()),
                None => (line, Vec::new()),
            };
            out.samples
                .entry(name.to_owned())
                .or_default()
                .extend(labels);
        }
        out
    }

    fn has_label(&self, metric: &str, label: &str) -> bool {
        TARGET_LABELS.contains(&label)
            || self
                .samples
                .get(metric)
                .is_some_and(|keys| keys.contains(label))
    }
}

/// The keys of `k="v",k2="v2"}…` (values may hold escaped quotes).
fn label_keys(mut rest: &str) -> Vec<String> {
    let mut keys = Vec::new();
    while !rest.starts_with('}') && !rest.is_empty() {
        let Some((k, after)) = rest.split_once("=\"") else {
            break;
        };
        keys.push(k.trim().to_owned());
        let mut escaped = false;
        let mut end = after.len();
        for (i, c) in after.char_indices() {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => {
                    end = i;
                    break;
                }
                _ => {}
            }
        }
        rest = after[(end + 1).min(after.len())..].trim_start_matches(',');
    }
    keys
}

// ---------------------------------------------------------------- PromQL

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    Open(char),
    Close(char),
    Comma,
    /// String literal, number, duration, Grafana `$variable`, operator.
    Other,
}

/// PromQL (with Grafana `$variables`) as tokens; enough to find names.
fn tokenize(expr: &str) -> Vec<Tok> {
    let b: Vec<char> = expr.chars().collect();
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        match c {
            c if c.is_whitespace() => i += 1,
            '#' => {
                while i < b.len() && b[i] != '\n' {
                    i += 1;
                }
            }
            '"' | '\'' | '`' => {
                i += 1;
                while i < b.len() && b[i] != c {
                    if b[i] == '\\' {
                        i += 1;
                    }
                    i += 1;
                }
                i += 1;
                out.push(Tok::Other);
            }
            '$' => {
                i += 1;
                if b.get(i) == Some(&'{') {
                    while i < b.len() && b[i] != '}' {
                        i += 1;
                    }
                    i += 1;
                } else {
                    while i < b.len() && ident(b[i]) {
                        i += 1;
                    }
                }
                out.push(Tok::Other);
            }
            '(' | '{' | '[' => {
                out.push(Tok::Open(c));
                i += 1;
            }
            ')' | '}' | ']' => {
                out.push(Tok::Close(c));
                i += 1;
            }
            ',' => {
                out.push(Tok::Comma);
                i += 1;
            }
            c if c.is_ascii_digit() || c == '.' => {
                // Numbers and durations: 0.95, 5m, 1h30m, 1e-9.
                i += 1;
                while i < b.len()
                    && (b[i].is_ascii_alphanumeric()
                        || b[i] == '.'
                        || (matches!(b[i], '+' | '-') && matches!(b[i - 1], 'e' | 'E')))
                {
                    i += 1;
                }
                out.push(Tok::Other);
            }
            c if c.is_ascii_alphabetic() || c == '_' || c == ':' => {
                let start = i;
                while i < b.len() && ident(b[i]) {
                    i += 1;
                }
                out.push(Tok::Ident(b[start..i].iter().collect()));
            }
            _ => {
                out.push(Tok::Other);
                i += 1;
            }
        }
    }
    out
}

const AGGREGATORS: &[&str] = &[
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
];
const GROUPING: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];
const KEYWORDS: &[&str] = &[
    "and", "or", "unless", "offset", "bool", "inf", "nan", "Inf", "NaN", "atan2",
];

/// What one expression names.
#[derive(Debug, Default)]
struct Names {
    /// (token index, metric name, labels in its selector).
    metrics: Vec<(usize, String, Vec<String>)>,
    /// (labels, token range they apply to).
    clauses: Vec<(Vec<String>, std::ops::Range<usize>)>,
}

fn names(expr: &str) -> Names {
    let toks = tokenize(expr);
    // Matching close for every open.
    let mut close = vec![usize::MAX; toks.len()];
    let mut open_of = vec![usize::MAX; toks.len()];
    let mut stack = Vec::new();
    for (i, t) in toks.iter().enumerate() {
        match t {
            Tok::Open(_) => stack.push(i),
            Tok::Close(_) => {
                if let Some(o) = stack.pop() {
                    close[o] = i;
                    open_of[i] = o;
                }
            }
            _ => {}
        }
    }
    // The identifiers inside the group opened at `open`.
    let ident_list = |open: usize| -> Vec<String> {
        toks[open + 1..close[open].min(toks.len())]
            .iter()
            .filter_map(|t| match t {
                Tok::Ident(s) => Some(s.clone()),
                _ => None,
            })
            .collect()
    };
    let mut out = Names::default();
    let mut skip = BTreeSet::new();
    let mut i = 0;
    while i < toks.len() {
        let Tok::Ident(name) = &toks[i] else {
            i += 1;
            continue;
        };
        let next_open = toks.get(i + 1) == Some(&Tok::Open('('));
        if skip.contains(&i) {
            i += 1;
        } else if GROUPING.contains(&name.as_str()) {
            if !next_open {
                i += 1;
                continue;
            }
            let labels = ident_list(i + 1);
            let after = close[i + 1].saturating_add(1);
            let scope = if matches!(name.as_str(), "by" | "without") {
                if toks.get(after) == Some(&Tok::Open('(')) {
                    // sum by (l) (expr)
                    after..close[after]
                } else if i > 0 && toks[i - 1] == Tok::Close(')') {
                    // sum (expr) by (l)
                    open_of[i - 1]..i
                } else {
                    0..toks.len()
                }
            } else {
                0..toks.len()
            };
            out.clauses.push((labels, scope));
            i = after;
        } else if name == "label_values" && next_open {
            // label_values(metric{…}, label)
            let (open, end) = (i + 1, close[i + 1]);
            if let Some(comma) = (open..end).find(|&j| toks[j] == Tok::Comma) {
                let labels = (comma..end)
                    .filter(|&j| matches!(toks[j], Tok::Ident(_)))
                    .inspect(|&j| {
                        skip.insert(j);
                    })
                    .filter_map(|j| match &toks[j] {
                        Tok::Ident(s) => Some(s.clone()),
                        _ => None,
                    })
                    .collect();
                out.clauses.push((labels, open..comma));
            }
            i += 1;
        } else if next_open
            || AGGREGATORS.contains(&name.as_str())
            || KEYWORDS.contains(&name.as_str())
        {
            i += 1; // a function, an aggregation or a keyword
        } else {
            let mut labels = Vec::new();
            let mut next = i + 1;
            if toks.get(next) == Some(&Tok::Open('{')) {
                let end = close[next];
                // label op value, …: the identifier after `{` or `,`.
                for j in next + 1..end {
                    if let (Tok::Open('{') | Tok::Comma, Tok::Ident(l)) = (&toks[j - 1], &toks[j]) {
                        labels.push(l.clone());
                    }
                }
                next = end + 1;
            }
            out.metrics.push((i, name.clone(), labels));
            i = next;
        }
    }
    out
}

fn is_own(name: &str) -> bool {
    !name.contains(':') && !PROMETHEUS_OWN.contains(&name) && !TLS_ONLY.contains(&name)
}

/// Problems with one expression, or none.
fn check(place: &str, expr: &str, exported: &Exported) -> Vec<String> {
    let found = names(expr);
    let mut problems = Vec::new();
    for (_, metric, labels) in &found.metrics {
        if !is_own(metric) {
            continue;
        }
        if !exported.samples.contains_key(metric) {
            let why = if exported.families.contains(metric) {
                " (a family name: select its _bucket, _sum or _count samples)"
            } else {
                ""
            };
            problems.push(format!(
                "{place}: metric {metric} is not in tokentap's /metrics{why}"
            ));
            continue;
        }
        for l in labels {
            if !exported.has_label(metric, l) {
                problems.push(format!("{place}: {metric} has no label {l}"));
            }
        }
    }
    for (labels, scope) in &found.clauses {
        let in_scope: Vec<&str> = found
            .metrics
            .iter()
            .filter(|(i, m, _)| scope.contains(i) && is_own(m) && exported.samples.contains_key(m))
            .map(|(_, m, _)| m.as_str())
            .collect();
        if in_scope.is_empty() {
            continue; // only recorded series or Prometheus's own
        }
        for l in labels {
            if !in_scope.iter().any(|m| exported.has_label(m, l)) {
                problems.push(format!(
                    "{place}: label {l} (by/on/label_values) is on none of {in_scope:?}"
                ));
            }
        }
    }
    problems
}

// ---------------------------------------------------------------- the files

/// Every `expr` of the rules file, with its rule name. A small reader for
/// the subset of YAML the file uses (plain or block-scalar `expr:`), so the
/// test needs no YAML crate; `promtool check rules` validates the YAML.
fn rule_exprs(yaml: &str) -> Vec<(String, String)> {
    let lines: Vec<&str> = yaml.lines().collect();
    let mut out = Vec::new();
    let mut rule = String::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let t = line.trim_start();
        let indent = line.len() - t.len();
        if let Some(n) = t
            .strip_prefix("- record:")
            .or_else(|| t.strip_prefix("- alert:"))
        {
            rule = n.trim().to_owned();
        }
        if let Some(v) = t.strip_prefix("expr:") {
            let v = v.trim();
            if v.starts_with('|') || v.starts_with('>') {
                let mut body = String::new();
                i += 1;
                while i < lines.len() {
                    let l = lines[i];
                    let lt = l.trim_start();
                    if !lt.is_empty() && l.len() - lt.len() <= indent {
                        break;
                    }
                    body.push_str(l);
                    body.push('\n');
                    i += 1;
                }
                out.push((format!("alerts.yml {rule}"), body));
                continue;
            }
            let v = if let Some(s) = v.strip_prefix('\'').and_then(|s| s.strip_suffix('\'')) {
                s.replace("''", "'")
            } else if let Some(s) = v.strip_prefix('"').and_then(|s| s.strip_suffix('"')) {
                s.replace("\\\"", "\"")
            } else {
                v.to_owned()
            };
            out.push((format!("alerts.yml {rule}"), v));
        }
        i += 1;
    }
    out
}

/// Every PromQL string of the dashboard: panel targets, annotations, and
/// template variable queries.
fn dashboard_exprs(dash: &Value, file: &str) -> Vec<(String, String)> {
    fn walk(v: &Value, place: &str, out: &mut Vec<(String, String)>) {
        match v {
            Value::Object(map) => {
                let here = match (map.get("title"), map.get("name"), map.get("refId")) {
                    (Some(Value::String(t)), _, _) => format!("{place} / {t}"),
                    (_, Some(Value::String(n)), _) => format!("{place} / {n}"),
                    (_, _, Some(Value::String(r))) => format!("{place} {r}"),
                    _ => place.to_owned(),
                };
                for (k, v) in map {
                    match (k.as_str(), v) {
                        ("expr" | "definition", Value::String(s)) if !s.is_empty() => {
                            out.push((here.clone(), s.clone()));
                        }
                        ("query", Value::String(s))
                            if map.get("type") == Some(&Value::String("query".into())) =>
                        {
                            out.push((here.clone(), s.clone()));
                        }
                        _ => walk(v, &here, out),
                    }
                }
            }
            Value::Array(items) => items.iter().for_each(|v| walk(v, place, out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(dash, file, &mut out);
    out
}

// ---------------------------------------------------------------- the proxy

async fn scrape(c: &HttpClient, admin: SocketAddr) -> String {
    let req = Req {
        method: Method::GET,
        url: format!("http://{admin}/metrics"),
        headers: Vec::new(),
        body: Bytes::new(),
    };
    let got = client::fetch(c, &req).await;
    assert_eq!(got.status, 200, "/metrics: {}", got.text());
    got.text()
}

/// Scrape until `n` requests are counted, none is in flight, and the SLO
/// breach and its webhook event are counted.
async fn scrape_after(c: &HttpClient, admin: SocketAddr, n: f64) -> String {
    let fut = async {
        loop {
            let text = scrape(c, admin).await;
            let value = |prefix: &str| -> f64 {
                text.lines()
                    .filter(|l| l.starts_with(prefix))
                    .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                    .sum()
            };
            if value("tokentap_requests_total{") >= n
                && value("tokentap_streams_active{") == 0.0
                && value("tokentap_slo_breaches_total{") >= 1.0
                && value("tokentap_slo_webhook_events_total{") >= 1.0
            {
                return text;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    within(STEP_TIMEOUT, "every request to be counted", fut).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_and_rules_name_only_exported_metrics() {
    let quick = StreamSpec::tokens(6, Duration::from_millis(15), Duration::from_millis(3));
    let endless = StreamSpec::tokens(50, Duration::ZERO, Duration::from_millis(10));
    let up = Upstream::start(move |ex| match ex.json()["model"].as_str() {
        Some("m-error") => script::openai_error(500, "server_error", "boom", "scripted failure"),
        Some("m-midstream") => script::openai_midstream_error(&quick, 3),
        Some("m-cancel") => script::openai_hang_after(&endless, 3),
        Some("m-json") => script::openai_chat_json("m-json", "hello there", (7, 2)),
        // Reasoning deltas, then text: the reasoning histograms exist.
        Some("m-reason") => Reply::new(200)
            .header("content-type", "text/event-stream")
            .send(
                "data: {\"choices\":[{\"index\":0,\"delta\":{\"reasoning_content\":\"hm\"}}]}\n\n",
            )
            .sleep(Duration::from_millis(5))
            .send("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n"),
        _ => script::openai_chat_sse(&quick),
    })
    .await;
    // An SLO every request breaches (TTFT p95 over 1 ms), judged per model
    // over small live windows, and a webhook that takes its events.
    let hook = Upstream::fixed(Reply::new(200)).await;
    // An HTTP/2 upstream, so the upstream pool gauges have a host.
    let ca = support::tls::TestCa::new();
    let h2 = support::h2up::H2Up::start(&ca, 100, |_, _| support::h2up::Plan::Sse {
        more: 1,
        gap: Duration::ZERO,
    })
    .await;
    let scratch = support::proxy::Scratch::new("names-h2");
    let ca_file = scratch.write("ca.pem", ca.pem());
    // The HTTP/2 route first: routes are tried in order, and "/" takes all.
    let toml = Toml::new()
        .route("h2", "/h2", &h2.url(), "openai")
        .route("openai", "/", &up.url(), "openai")
        .set("upstream", "ca_file", &q(&ca_file.display().to_string()))
        .set("live", "window", &q("10s"))
        .set("live", "bucket", &q("100ms"))
        .raw(
            "[[slo]]\nname = \"names-check\"\nmodel = \"*\"\nttft_p95 = \"1ms\"\n\
             window = \"2s\"\nmin_requests = 1\n",
        )
        .raw(&format!(
            "[alerts]\nwebhook_url = {}\nmin_interval = \"0s\"\ntimeout = \"2s\"\n",
            q(&format!("{}/hook", hook.url()))
        ))
        // m-json priced (tokentap_cost_usd_total), m-stream not (…_unpriced_total).
        .raw("[[prices]]\nmodel = \"m-json\"\ninput = 1.0\noutput = 2.0\n");
    let running = start_with_admin(toml).await;
    let (proxy, admin) = (
        running.addr,
        running
            .admin_addr
            .expect("admin_addr is set when admin_listen is configured"),
    );
    let c = client::http1();
    let send = |model: &str, stream: bool, tenant: Option<&str>| {
        let mut req = Req::post_json(proxy, CHAT, script::openai_request(model, stream, None));
        if let Some(t) = tenant {
            req = req.header("x-tenant-id", t);
        }
        req
    };
    let mut sent = 0.0;
    for (model, stream, tenant, status) in [
        ("m-stream", true, Some("team-a"), 200),
        ("m-stream", true, None, 200),
        ("m-json", false, Some("team-b"), 200),
        ("m-error", true, Some("team-a"), 500),
        ("m-midstream", true, Some("team-b"), 200),
        ("m-reason", true, Some("team-a"), 200),
    ] {
        let got = client::fetch(&c, &send(model, stream, tenant)).await;
        assert_eq!(got.status, status, "{model}: {}", got.text());
        sent += 1.0;
    }
    let h2_req = Req::post_json(
        proxy,
        "/h2/v1/chat/completions",
        script::openai_request("m-h2", true, None),
    );
    let got = client::fetch(&c, &h2_req).await;
    assert_eq!(got.status, 200, "h2 route: {}", got.text());
    sent += 1.0;
    // A client that goes away mid-stream.
    let gone = client::http1();
    let (resp, _) = client::send(&gone, &send("m-cancel", true, Some("team-a"))).await;
    let mut body = resp.into_body();
    client::read_until(&mut body, "tok2").await;
    drop(body);
    drop(gone);
    sent += 1.0;

    let text = scrape_after(&c, admin, sent).await;
    running.shutdown().await;
    let exported = Exported::parse(&text);
    for outcome in ["complete", "upstream_error", "client_cancelled"] {
        assert!(
            text.contains(&format!("tokentap_outcome=\"{outcome}\"")),
            "the scrape has outcome {outcome}:\n{text}"
        );
    }
    for (metric, label) in [
        ("tokentap_requests_total", "tokentap_tenant"),
        ("tokentap_requests_total", "error_type"),
        ("tokentap_requests_total", "gen_ai_response_model"),
        ("tokentap_slo_breached", "tokentap_slo_objective"),
        ("tokentap_slo_breaches_total", "gen_ai_request_model"),
        (
            "tokentap_slo_webhook_events_total",
            "tokentap_slo_webhook_result",
        ),
    ] {
        assert!(
            exported.has_label(metric, label),
            "{metric} carries {label}:\n{text}"
        );
    }

    let mapped = mapped_families(&std::fs::read_to_string(METRICS_DOC).unwrap());
    let unmapped: Vec<&String> = exported
        .families
        .iter()
        .filter(|f| !mapped.contains(f.as_str()))
        .collect();
    assert!(
        unmapped.is_empty(),
        "docs/METRICS.md's Prometheus mapping lacks families /metrics exposes: {unmapped:?} \
         (mapped: {mapped:?})"
    );
    assert!(
        exported.families.len() > 25,
        "the scrape had the families: {:?}",
        exported.families
    );

    let dash: Value = serde_json::from_str(&std::fs::read_to_string(DASHBOARD).unwrap())
        .expect("tokentap.json is JSON");
    let dash_exprs = dashboard_exprs(&dash, "tokentap.json");
    let compare: Value = serde_json::from_str(&std::fs::read_to_string(COMPARE_DASHBOARD).unwrap())
        .expect("compare.json is JSON");
    let compare_exprs = dashboard_exprs(&compare, "compare.json");
    assert!(
        compare_exprs.len() >= 15,
        "the compare dashboard's queries were found: {compare_exprs:#?}"
    );
    let rules_text = std::fs::read_to_string(RULES).unwrap();
    let rules = rule_exprs(&rules_text);
    let declared = rules_text
        .lines()
        .filter(|l| {
            let t = l.trim_start();
            t.starts_with("- record:") || t.starts_with("- alert:")
        })
        .count();
    assert_eq!(rules.len(), declared, "one expr read per rule: {rules:#?}");
    assert!(
        dash_exprs.len() >= 30,
        "the dashboard's queries were found: {dash_exprs:#?}"
    );

    let mut problems = Vec::new();
    let mut used = BTreeSet::new();
    for (place, expr) in dash_exprs.iter().chain(&compare_exprs).chain(&rules) {
        problems.extend(check(place, expr, &exported));
        used.extend(
            names(expr)
                .metrics
                .into_iter()
                .map(|(_, m, _)| m)
                .filter(|m| is_own(m)),
        );
    }
    assert!(
        problems.is_empty(),
        "names tokentap does not export:\n  {}\n\nexported samples and their labels:\n{:#?}",
        problems.join("\n  "),
        exported.samples
    );
    // The check saw the families the dashboard is about.
    for needed in [
        "gen_ai_server_time_to_first_token_seconds_bucket",
        "tokentap_decode_tokens_per_second_bucket",
        "tokentap_requests_total",
        "tokentap_stream_max_stall_seconds_bucket",
        "tokentap_chunk_gap_seconds_bucket",
        "tokentap_telemetry_dropped_total",
        "tokentap_streams_active",
        "gen_ai_client_inference_usage_output_tokens_total",
        "gen_ai_client_inference_duration_seconds_bucket",
        "tokentap_slo_breached",
        "tokentap_slo_breaches_total",
        "tokentap_prefill_tokens_per_second_bucket",
    ] {
        assert!(used.contains(needed), "no query uses {needed}: {used:?}");
    }
}

/// The checker itself: it must catch what it is there to catch.
#[test]
fn checker_finds_unknown_metrics_and_labels() {
    let exported = Exported::parse(
        "# TYPE h_seconds histogram\n\
         h_seconds_bucket{route=\"r\",model=\"m\",le=\"+Inf\"} 1\n\
         h_seconds_sum{route=\"r\",model=\"m\"} 1\n\
         h_seconds_count{route=\"r\",model=\"m\"} 1\n\
         # TYPE c_total counter\n\
         c_total{route=\"r\",outcome=\"ok\",note=\"a \\\"quoted\\\" , value\"} 3\n\
         g 1\n",
    );
    let ok = [
        "histogram_quantile(0.95, sum by (le, route, model) (rate(h_seconds_bucket{route=~\"$route\",model=~\"$model\"}[$__rate_interval])))",
        "sum(rate(c_total{outcome=~\"a|b\"}[5m] offset 1h)) by (route) / on () group_left () g",
        "(sum by (route) (rate(c_total[5m])) or 0 * sum by (route) (rate(c_total[5m]))) > scalar(x:objective:y) and up{job=\"tokentap\"} == 0",
        "label_values(c_total{route=~\"$route\"}, note)",
        "increase(c_total[10m]) > 0 and absent(ALERTS{alertname=\"A\"}) and sum by (instance) (g) > 1e-9",
        "x:recorded:rate5m{anything=\"x\"} < 0.7 * (x:recorded:rate5m offset 1h)",
    ];
    for e in ok {
        assert_eq!(check("ok", e, &exported), Vec::<String>::new(), "{e}");
    }
    let bad = [
        ("rate(c_totl[5m])", "c_totl is not"),
        ("rate(h_seconds[5m])", "a family name"),
        (
            "sum by (le) (rate(h_seconds_bucket{tenant=\"t\"}[5m]))",
            "no label tenant",
        ),
        ("sum by (tenant) (rate(c_total[5m]))", "label tenant"),
        ("sum(rate(c_total[5m])) by (le)", "label le"),
        ("label_values(g, route)", "label route"),
    ];
    for (e, want) in bad {
        let got = check("bad", e, &exported);
        assert!(
            got.iter().any(|p| p.contains(want)),
            "{e}: expected a problem containing {want:?}, got {got:?}"
        );
    }
}

#[test]
fn rule_reader_reads_plain_and_block_exprs() {
    let yaml = "groups:\n  - name: g\n    rules:\n      - record: a:b:c\n        expr: vector(2)\n      - alert: X\n        expr: |\n          sum(\n            y_total)\n\n          > 1\n        for: 5m\n      - alert: Y\n        expr: 'up{job=\"t\"} == 0'\n";
    let got = rule_exprs(yaml);
    assert_eq!(got.len(), 3, "{got:?}");
    assert_eq!(got[0].1, "vector(2)");
    assert!(
        got[1].1.contains("y_total)") && got[1].1.contains("> 1"),
        "{got:?}"
    );
    assert!(!got[1].1.contains("for:"), "{got:?}");
    assert_eq!(got[2].1, "up{job=\"t\"} == 0");
}
