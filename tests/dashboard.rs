//! The live dashboard end to end: a scripted upstream and the proxy with an
//! admin listener on 127.0.0.1:0; streamed requests for two models go
//! through the proxy, in two agent sessions; `/api/live` and
//! `/api/sessions` show them; then the page is opened in a
//! real headless chromium (`tests/browser/dashboard.test.mjs`, installed by
//! `scripts/setup-browser-test.sh`), which must show both models and save a
//! screenshot to `target/dashboard.png`; the sessions view must list
//! both sessions, the costlier first. `tokentap demo` is opened the same
//! way: its simulated models priced (demo prices, said so), its agent
//! sessions listed, export off said in plain text. The Compare view
//! (`tests/browser/compare.test.mjs`) picks two sides of `/api/compare`
//! and must show its cells, ratios, differences and chart lines. Missing node, chromium or
//! playwright-core fail the test with the install command; nothing is skipped.
#![allow(
    clippy::disallowed_methods,
    reason = "tests time requests and set deadlines with the wall clock"
)]
#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

mod support;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use bytes::Bytes;
use http::Method;
use support::client::{self, Req};
use support::proxy::{Toml, start_with_admin};
use support::script::{self, StreamSpec};
use support::upstream::Upstream;
use support::{STEP_TIMEOUT, within};

use support::CHAT;
const FAST: &str = "gpt-4o-mini";
const SLOW: &str = "gpt-4.1";
const SETUP: &str = "scripts/setup-browser-test.sh";
/// Agent sessions (Claude Code's header): four requests, then two.
const SESSION_BIG: &str = "claude-session-big";
const SESSION_SMALL: &str = "claude-session-small";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Fail (never skip) with the install hint when a browser-test tool is missing.
fn require_tools() -> PathBuf {
    let node = std::process::Command::new("node").arg("--version").output();
    match node {
        Ok(out) if out.status.success() => {}
        _ => panic!("`node` is not on PATH: the dashboard browser test needs it; run {SETUP}"),
    }
    let chromium =
        std::env::var_os("CHROMIUM").map_or_else(|| "/usr/bin/chromium".into(), PathBuf::from);
    assert!(
        chromium.exists(),
        "{} not found: the dashboard browser test needs Debian's chromium; run {SETUP}",
        chromium.display()
    );
    let pw = root().join("tests/browser/node_modules/playwright-core/package.json");
    assert!(
        pw.exists(),
        "playwright-core is not installed in tests/browser: run {SETUP} (npm ci there)"
    );
    chromium
}

/// Upstream: an OpenAI stream whose model and pace follow the request's model.
async fn upstream() -> Upstream {
    Upstream::start(|ex| {
        let model = ex.json()["model"].as_str().unwrap_or("unknown").to_owned();
        let spec = if model == SLOW {
            StreamSpec::tokens(24, Duration::from_millis(180), Duration::from_millis(20))
        } else {
            StreamSpec::tokens(32, Duration::from_millis(40), Duration::from_millis(5))
        };
        script::openai_chat_sse(&spec.model(&model))
    })
    .await
}

async fn get_json(addr: SocketAddr, path: &str) -> serde_json::Value {
    let req = Req {
        method: Method::GET,
        url: format!("http://{addr}{path}"),
        headers: Vec::new(),
        body: Bytes::new(),
    };
    let res = client::fetch(&client::http1(), &req).await;
    assert_eq!(res.status, 200, "GET {path}: {}", res.text());
    res.json()
}

/// Poll `/api/live` until it lists `sent` recent requests and none in flight
/// (a snapshot is published every second).
async fn wait_for_requests(admin: SocketAddr, sent: usize) -> serde_json::Value {
    let deadline = tokio::time::Instant::now() + STEP_TIMEOUT;
    loop {
        let snap = get_json(admin, "/api/live").await;
        let recent = snap["recent"].as_array().map_or(0, Vec::len);
        let series = snap["series"].as_array().cloned().unwrap_or_default();
        if recent == sent && series.iter().all(|s| s["in_flight"] == 0) {
            return snap;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "/api/live never listed {sent} finished requests within {STEP_TIMEOUT:?}: {snap}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_shows_requests_in_a_real_browser() {
    let chromium = require_tools();
    let up = upstream().await;
    let running = start_with_admin(Toml::openai(&up.url())).await;
    let admin = running.admin_addr.expect("admin listener bound");

    let http = client::http1();
    let sent = [FAST, SLOW, FAST, SLOW, FAST, SLOW];
    for (i, model) in sent.iter().enumerate() {
        let tenant = if i % 2 == 0 { "team-a" } else { "team-b" };
        // Two agent sessions: four requests in one, two in the other.
        let session = if i < 4 { SESSION_BIG } else { SESSION_SMALL };
        let req = Req::post_json(
            running.addr,
            CHAT,
            script::openai_request(model, true, None),
        )
        .header("x-tenant-id", tenant)
        .header("x-claude-code-session-id", session);
        let res = client::fetch(&http, &req).await;
        assert_eq!(res.status, 200, "{model} through the proxy: {}", res.text());
        assert!(res.text().contains("[DONE]"), "{model}: stream finished");
    }

    let snap = wait_for_requests(admin, sent.len()).await;
    assert_eq!(snap["websocket_sessions"], 0, "no WebSocket session open");
    for model in [FAST, SLOW] {
        let row = snap["series"]
            .as_array()
            .and_then(|s| s.iter().find(|r| r["model"] == model))
            .unwrap_or_else(|| panic!("no series row for {model}: {snap}"));
        assert_eq!(row["route"], "openai", "{row}");
        assert_eq!(
            row["requests"], 3,
            "3 requests of {model} in the last minute: {row}"
        );
        assert!(row["ttft_p50_s"].as_f64().unwrap_or(0.0) > 0.0, "{row}");
        assert!(row["tps_p50"].as_f64().unwrap_or(0.0) > 0.0, "{row}");
        assert_eq!(row["in_flight"], 0, "nothing left in flight: {row}");
        assert!(
            row["window"]["cost"]["usd"].as_f64().unwrap_or(0.0) > 0.0,
            "{model} is in the price table, so its requests have a cost: {row}"
        );
    }
    for r in snap["recent"].as_array().cloned().unwrap_or_default() {
        assert!(
            r["in_flight"].as_u64().unwrap_or(0) >= 1,
            "each recent request says how many were in flight when it started: {r}"
        );
        assert!(
            r["prefill_tps"].as_f64().unwrap_or(0.0) > 0.0,
            "input tokens are reported, so prefill is known: {r}"
        );
    }
    let ttft = |m: &str| -> f64 {
        snap["series"]
            .as_array()
            .and_then(|s| s.iter().find(|r| r["model"] == m))
            .and_then(|r| r["ttft_p50_s"].as_f64())
            .unwrap_or(0.0)
    };
    assert!(
        ttft(SLOW) > ttft(FAST),
        "the slow model's TTFT p50 ({}) exceeds the fast one's ({})",
        ttft(SLOW),
        ttft(FAST)
    );

    let sessions = get_json(admin, "/api/sessions?sort=cost").await;
    let listed: Vec<(&str, u64)> = sessions["sessions"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|s| {
                    (
                        s["id"].as_str().unwrap_or(""),
                        s["requests"].as_u64().unwrap_or(0),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(
        listed,
        [(SESSION_BIG, 4), (SESSION_SMALL, 2)],
        "both sessions, the costlier first: {sessions}"
    );

    let screenshot = root().join("target/dashboard.png");
    let _ = std::fs::remove_file(&screenshot);
    run_browser_with(
        &format!("http://{admin}/"),
        &chromium,
        &screenshot,
        &[FAST, SLOW],
        &[],
        &[SESSION_BIG, SESSION_SMALL],
        &[],
    )
    .await;
    assert_screenshot(&screenshot, "dashboard");

    running.shutdown().await;
}

/// The Compare view: requests for two models one at a time (load class
/// `1`) and in bursts (`2-8`); `/api/compare` for the two sides has cells
/// in both load classes; the page, opened in chromium
/// (`tests/browser/compare.test.mjs`), picks the two sides and must show
/// those cells with the API's figures, the ratio and spread, the sides'
/// differences, and a chart line per side against the load class; the
/// screenshot goes to `target/compare.png`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compare_view_shows_two_sides_in_a_real_browser() {
    let chromium = require_tools();
    let up = upstream().await;
    // Short windows and low minimums, so a few seconds of traffic is
    // enough data for a ratio.
    let toml = Toml::openai(&up.url())
        .set("compare", "window", "\"10s\"")
        .set("compare", "min_requests", "2")
        .set("compare", "min_windows", "1");
    let running = start_with_admin(toml).await;
    let admin = running.admin_addr.expect("admin listener bound");
    let send = |model: &'static str| {
        let proxy = running.addr;
        async move {
            let req = Req::post_json(proxy, CHAT, script::openai_request(model, true, None));
            let res = client::fetch(&client::http1(), &req).await;
            assert_eq!(res.status, 200, "{model} through the proxy: {}", res.text());
        }
    };
    let mut sent = 0;
    for model in [FAST, SLOW] {
        for _ in 0..3 {
            send(model).await;
        }
        // A burst: all but the first start with others in flight.
        let burst: Vec<_> = (0..4).map(|_| tokio::spawn(send(model))).collect();
        for b in burst {
            b.await.unwrap();
        }
        sent += 7;
    }
    wait_for_requests(admin, sent).await;
    let (a, b) = (format!("openai:{FAST}"), format!("openai:{SLOW}"));
    let listed = get_json(admin, "/api/compare").await;
    let names: Vec<String> = listed["sides"]
        .as_array()
        .map(|s| {
            s.iter()
                .map(|s| {
                    format!(
                        "{}:{}",
                        s["route"].as_str().unwrap_or(""),
                        s["model"].as_str().unwrap_or("")
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    assert!(
        names.contains(&a) && names.contains(&b),
        "both sides listed: {listed}"
    );
    let answer = get_json(admin, &format!("/api/compare?side={a}&side={b}")).await;
    let cells = answer["cells"].as_array().cloned().unwrap_or_default();
    let loads: std::collections::BTreeSet<&str> = cells
        .iter()
        .filter_map(|c| c["load_class"].as_str())
        .collect();
    assert!(
        loads.contains("1") && loads.contains("2-8"),
        "cells in load classes 1 and 2-8: {answer}"
    );
    let one = cells
        .iter()
        .find(|c| c["load_class"] == "1")
        .unwrap_or_else(|| panic!("a load class 1 cell: {answer}"));
    let decode = |i: usize| {
        one["sides"][i]["decode_tps"]["median"]
            .as_f64()
            .unwrap_or(0.0)
    };
    assert!(
        decode(0) > 2.0 * decode(1),
        "{FAST} decodes faster than {SLOW}: {one}"
    );
    assert!(
        one["ratio"]["decode_tps"].as_f64().is_some_and(|r| r < 0.5),
        "a ratio B/A, the slow model's decode under half the fast one's: {one}"
    );
    assert!(
        answer["differences"]
            .as_array()
            .is_some_and(|d| !d.is_empty()),
        "the sides differ in their model, and say so: {answer}"
    );

    let screenshot = root().join("target/compare.png");
    let _ = std::fs::remove_file(&screenshot);
    run_node(
        "compare.test.mjs",
        [
            ("TOKENTAP_DASHBOARD_URL", format!("http://{admin}/")),
            ("TOKENTAP_COMPARE_SIDES", format!("{a},{b}")),
            ("TOKENTAP_EXPECT_COMPARE", answer.to_string()),
            ("TOKENTAP_SCREENSHOT", screenshot.display().to_string()),
            ("CHROMIUM", chromium.display().to_string()),
        ],
    )
    .await;
    assert_screenshot(&screenshot, "compare view");
    running.shutdown().await;
}

/// The browser test saved a PNG at `path`.
fn assert_screenshot(path: &Path, what: &str) {
    let png = std::fs::read(path)
        .unwrap_or_else(|e| panic!("no {what} screenshot at {}: {e}", path.display()));
    assert!(
        png.starts_with(b"\x89PNG"),
        "the {what} screenshot is a PNG"
    );
    println!("{what} screenshot: {}", path.display());
}

async fn run_browser_with(
    url: &str,
    chromium: &Path,
    screenshot: &Path,
    models: &[&str],
    reasoners: &[&str],
    sessions: &[&str],
    extra: &[(&str, &str)],
) {
    let envs = [
        ("TOKENTAP_DASHBOARD_URL", url.to_owned()),
        ("TOKENTAP_EXPECT_MODELS", models.join(",")),
        ("TOKENTAP_EXPECT_REASONING", reasoners.join(",")),
        ("TOKENTAP_EXPECT_SESSIONS", sessions.join(",")),
        ("TOKENTAP_SCREENSHOT", screenshot.display().to_string()),
        ("CHROMIUM", chromium.display().to_string()),
    ];
    let extra = extra.iter().map(|(k, v)| (*k, (*v).to_owned()));
    run_node("dashboard.test.mjs", envs.into_iter().chain(extra)).await;
}

/// Run `tests/browser/{name}` with node and these variables; its stdout
/// is printed, a failure fails the test with both outputs.
async fn run_node(name: &str, envs: impl IntoIterator<Item = (&str, String)>) {
    let script = root().join("tests/browser").join(name);
    let child = tokio::process::Command::new("node")
        .arg(&script)
        .current_dir(root())
        .envs(envs)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start node {}: {e}", script.display()));
    let out = within(
        Duration::from_secs(120),
        &format!("the browser test (node tests/browser/{name})"),
        child.wait_with_output(),
    )
    .await
    .expect("browser test output");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        out.status.success(),
        "browser test failed ({}):\n--- stdout ---\n{stdout}\n--- stderr ---\n{stderr}",
        out.status
    );
    print!("{stdout}");
}

/// A model that reasons: `reasoning_content` deltas for ~300 ms, then text.
const REASONER: &str = "deepseek-reasoner";

fn reasoning_sse(model: &str) -> support::upstream::Reply {
    let chunk = |delta: &str| {
        format!(
            "data: {{\"id\":\"c\",\"model\":\"{model}\",\"choices\":[{{\"index\":0,\"delta\":{delta}}}]}}\n\n"
        )
    };
    let mut r = support::upstream::Reply::new(200)
        .header("content-type", "text/event-stream")
        .send(chunk(r#"{"role":"assistant","content":""}"#))
        .sleep(Duration::from_millis(50));
    for i in 0..3 {
        r = r
            .send(chunk(&format!(r#"{{"reasoning_content":"step {i}"}}"#)))
            .sleep(Duration::from_millis(100));
    }
    for i in 0..8 {
        r = r
            .send(chunk(&format!(r#"{{"content":"tok{i} "}}"#)))
            .sleep(Duration::from_millis(5));
    }
    // DeepSeek ends with a finish chunk and a usage chunk (reasoning
    // tokens inside the output).
    r.send(format!(
        "data: {{\"id\":\"c\",\"model\":\"{model}\",\"choices\":[{{\"index\":0,\"delta\":{{}},\"finish_reason\":\"stop\"}}]}}\n\n"
    ))
    .send(format!(
        "data: {{\"id\":\"c\",\"model\":\"{model}\",\"choices\":[],\"usage\":{{\"prompt_tokens\":40,\"completion_tokens\":11,\"completion_tokens_details\":{{\"reasoning_tokens\":3}}}}}}\n\n"
    ))
    .send("data: [DONE]\n\n")
}

/// The reasoning table: a reasoning model shows its visible TTFT after its
/// TTFT and a thinking time; a plain model gets no reasoning row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_shows_visible_ttft_for_reasoning_models() {
    let chromium = require_tools();
    let up = Upstream::start(|ex| {
        let model = ex.json()["model"].as_str().unwrap_or("unknown").to_owned();
        if model == REASONER {
            reasoning_sse(&model)
        } else {
            let spec = StreamSpec::tokens(16, Duration::from_millis(40), Duration::from_millis(5));
            script::openai_chat_sse(&spec.model(&model))
        }
    })
    .await;
    let running = start_with_admin(Toml::openai(&up.url())).await;
    let admin = running.admin_addr.expect("admin listener bound");
    let http = client::http1();
    let sent = [REASONER, FAST, REASONER];
    for model in sent {
        let req = Req::post_json(
            running.addr,
            CHAT,
            script::openai_request(model, true, None),
        );
        let res = client::fetch(&http, &req).await;
        assert_eq!(res.status, 200, "{model} through the proxy: {}", res.text());
    }
    let snap = wait_for_requests(admin, sent.len()).await;
    let row = |m: &str| {
        snap["series"]
            .as_array()
            .and_then(|s| s.iter().find(|r| r["model"] == m))
            .cloned()
            .unwrap_or_else(|| panic!("no series row for {m}: {snap}"))
    };
    let (r, f) = (row(REASONER), row(FAST));
    assert_eq!(r["reasoning_requests"], 2, "both reasoner requests: {r}");
    let (ttft, visible, thinking) = (
        r["ttft_p50_s"].as_f64().unwrap_or(0.0),
        r["visible_ttft_p50_s"].as_f64().unwrap_or(0.0),
        r["thinking_p50_s"].as_f64().unwrap_or(0.0),
    );
    assert!(
        (0.04..0.35).contains(&ttft),
        "TTFT p50 {ttft} s: the first reasoning delta (scripted 0.05 s)"
    );
    assert!(
        (0.33..0.65).contains(&visible),
        "visible TTFT p50 {visible} s (scripted 0.35 s)"
    );
    assert!(
        (0.28..0.6).contains(&thinking),
        "thinking p50 {thinking} s (scripted 0.3 s)"
    );
    assert_eq!(f["reasoning_requests"], 0, "{f}");
    assert!(f["thinking_p50_s"].is_null(), "no thinking time: {f}");
    assert_eq!(
        f["visible_ttft_p50_s"], f["ttft_p50_s"],
        "without reasoning, visible TTFT is TTFT: {f}"
    );
    let recent = snap["recent"].as_array().expect("recent");
    assert!(
        recent
            .iter()
            .any(|x| x["model"] == REASONER && x["thinking_s"].as_f64().is_some()),
        "a recent reasoner request carries its thinking time: {snap}"
    );

    let screenshot = root().join("target/dashboard-reasoning.png");
    let _ = std::fs::remove_file(&screenshot);
    run_browser_with(
        &format!("http://{admin}/"),
        &chromium,
        &screenshot,
        &[REASONER, FAST],
        &[REASONER],
        &[],
        &[],
    )
    .await;
    assert!(
        std::fs::read(&screenshot).is_ok_and(|png| png.starts_with(b"\x89PNG")),
        "screenshot saved at {}",
        screenshot.display()
    );
    running.shutdown().await;
}

/// `tokentap demo` as a new user first sees it: the dashboard shows the
/// three simulated models, priced with demo prices that it calls so (none
/// unpriced), the demo's agent sessions with a cost, the charts' title
/// naming the time they draw, and export off said once in plain text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_dashboard_shows_sessions_and_demo_prices() {
    use tokio::io::AsyncBufReadExt as _;
    let chromium = require_tools();
    let mut demo = tokio::process::Command::new(env!("CARGO_BIN_EXE_tokentap"))
        .args(["demo", "--duration", "90", "--listen", "127.0.0.1:0"])
        .args(["--admin-listen", "127.0.0.1:0"])
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("start tokentap demo");
    let mut lines = tokio::io::BufReader::new(demo.stdout.take().expect("demo stdout")).lines();
    let mut printed = String::new();
    let url = within(STEP_TIMEOUT, "the demo's dashboard line", async {
        while let Ok(Some(line)) = lines.next_line().await {
            printed.push_str(&line);
            printed.push('\n');
            if let Some(rest) = line.strip_prefix("dashboard: ") {
                return rest.split_whitespace().next().map(str::to_owned);
            }
        }
        None
    })
    .await
    .unwrap_or_else(|| panic!("the demo printed no dashboard URL:\n{printed}"));
    // Keep reading, so the demo never blocks on a full pipe.
    let rest = tokio::spawn(async move {
        let mut text = String::new();
        while let Ok(Some(line)) = lines.next_line().await {
            text.push_str(&line);
            text.push('\n');
        }
        text
    });
    let screenshot = root().join("target/dashboard-demo.png");
    let _ = std::fs::remove_file(&screenshot);
    run_browser_with(
        &url,
        &chromium,
        &screenshot,
        &["sim-gpt-fast", "sim-gpt-large", "sim-claude"],
        &[],
        &[],
        &[
            ("TOKENTAP_EXPECT_SESSION_ROWS", "3"),
            ("TOKENTAP_EXPECT_COST_NOTE", "demo prices"),
            // Its OpenAI requests without usage have no input count.
            ("TOKENTAP_EXPECT_PREFILL", "sim-claude"),
        ],
    )
    .await;
    assert!(
        std::fs::read(&screenshot).is_ok_and(|png| png.starts_with(b"\x89PNG")),
        "screenshot saved at {}",
        screenshot.display()
    );
    // Stop the demo we started (by its PID, via the handle) and read the rest.
    demo.start_kill().expect("stop the demo");
    let _ = within(STEP_TIMEOUT, "the demo to exit", demo.wait()).await;
    let tail = within(STEP_TIMEOUT, "the demo's output", rest)
        .await
        .unwrap_or_default();
    assert!(
        tail.contains("prices: made-up demo prices"),
        "the demo says its prices are made up:\n{printed}{tail}"
    );
}
