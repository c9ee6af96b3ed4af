//! The comparison from production traffic (`/api/compare`, issue 38,
//! part one) through the real server: a scripted upstream serves two models with
//! known timings (model `b` exactly twice as slow as `a` in every figure
//! but output length), at two prompt sizes and two loads, with 1 s windows.
//! Each cell's ratio b / a must be within 10 % of the script; a second
//! route (other labels, another response model version and serving
//! software) is flagged as not like with like, naming each field, and its
//! sparse cells say so.
#![allow(
    clippy::disallowed_methods,
    reason = "tests set deadlines with the clock"
)]
#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

mod support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http::Method;
use serde_json::Value;
use support::client::{self, Req};
use support::proxy::q;
use support::rig::Rig;
use support::script::{self, StreamSpec};
use support::upstream::{Exchange, Reply, Upstream};

const TOKENS: usize = 2;
/// Input tokens of the small and big prompts (`le_1k`, `le_8k`).
const SMALL: u64 = 500;
const BIG: u64 = 5000;

/// Model `a`'s script: TTFT 100 ms (small) or 200 ms (big) and 100 ms
/// between its two tokens; model `b` (and anything else) takes twice as
/// long. Waits of 100 ms and more keep the ratios clear of the scheduling
/// jitter of a loaded machine (10 ms per wait at a load of 10 on 2 cores).
fn reply(ex: &Exchange, response_model: Option<&str>, server: &str) -> Reply {
    let body = ex.json();
    let model = body["model"].as_str().unwrap_or("a").to_owned();
    let big = body["user"].as_str() == Some("big");
    let slow = if model == "a" { 1 } else { 2 };
    let ttft = Duration::from_millis(if big { 200 } else { 100 } * slow);
    let gap = Duration::from_millis(100 * slow);
    let spec = StreamSpec::tokens(TOKENS, ttft, gap)
        .with_usage(if big { BIG } else { SMALL }, TOKENS as u64)
        .model(&format!("{model}-{}", response_model.unwrap_or("2025")));
    script::openai_chat_sse(&spec).header("server", server)
}

fn admin(rig: &Rig) -> SocketAddr {
    rig.proxy.running().unwrap().admin_addr.unwrap()
}

/// `GET path` on the admin listener.
async fn fetch(admin: SocketAddr, path: &str) -> client::Streamed {
    let req = Req {
        method: Method::GET,
        url: format!("http://{admin}{path}"),
        headers: Vec::new(),
        body: bytes::Bytes::new(),
    };
    client::fetch(&client::http1(), &req).await
}

/// `GET path`'s JSON, which must come with a 200.
async fn get(admin: SocketAddr, path: &str) -> Value {
    let got = fetch(admin, path).await;
    assert_eq!(got.status, 200, "{path}: {}", got.text());
    got.json()
}

/// One streamed chat request to `prefix` for `model`, big prompt or not.
async fn chat(rig: &Rig, prefix: &str, model: &str, big: bool) {
    let user = if big { "big" } else { "small" };
    let body = script::openai_request(model, true, Some(user));
    let got = client::fetch(
        &rig.client,
        &rig.post(&format!("{prefix}/v1/chat/completions"), body),
    )
    .await;
    assert_eq!(got.status, 200);
}

/// For `run`, `workers` tasks per model each send small and big prompts
/// in turn: one worker is load class `1`, several are `2-8` (the first
/// request of each batch aside).
async fn traffic(rig: &Arc<Rig>, workers: usize, run: Duration) {
    let until = tokio::time::Instant::now() + run;
    let mut tasks = Vec::new();
    for model in ["a", "b"] {
        for _ in 0..workers {
            let rig = rig.clone();
            tasks.push(tokio::spawn(async move {
                while tokio::time::Instant::now() < until {
                    chat(&rig, "", model, false).await;
                    chat(&rig, "", model, true).await;
                }
            }));
        }
    }
    for t in tasks {
        t.await.unwrap();
    }
}

fn cell<'a>(report: &'a Value, prompt: &str, load: &str) -> &'a Value {
    report["cells"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["prompt_size"] == prompt && c["load_class"] == load)
        .unwrap_or_else(|| panic!("no cell {prompt}/{load}: {report:#}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ratios_follow_the_script_per_cell_and_differences_are_named() {
    let other = Upstream::start(|ex| reply(ex, Some("2026"), "vllm/0.6.4")).await;
    let other_url = other.url();
    let rig = Rig::start(
        |ex| reply(ex, None, "vllm/0.6.3"),
        move |t, up| {
            t.top("admin_listen", &q("127.0.0.1:0"))
                .set("compare", "window", &q("1s"))
                .set("compare", "windows", "12")
                .set("compare", "min_requests", "3")
                .set("compare", "min_windows", "2")
                .raw_route(&format!(
                    "[[routes]]\nname = \"two\"\nprefix = \"/two\"\nupstream = {}\n\
                     provider = \"openai\"\nlabels = {{ hardware = \"A100\" }}\n",
                    q(&other_url)
                ))
                .route_with(
                    "gpu",
                    "/",
                    up,
                    "openai",
                    "labels = { hardware = \"H100\", quantization = \"fp8\" }",
                )
        },
    )
    .await;
    let rig = Arc::new(rig);
    let admin = admin(&rig);

    // Load 1, then load 2-8 (three workers per model), 3.5 s each: every
    // cell has three requests or more over at least two 1 s windows.
    traffic(&rig, 1, Duration::from_millis(3500)).await;
    traffic(&rig, 3, Duration::from_millis(3500)).await;
    // A few requests of model a on the other route: a sparse cell.
    for _ in 0..2 {
        chat(&rig, "/two", "a", false).await;
    }

    let listed = get(admin, "/api/compare").await;
    let sides: Vec<String> = listed["sides"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            format!(
                "{}:{}",
                s["route"].as_str().unwrap(),
                s["model"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(sides, ["gpu:a", "gpu:b", "two:a"], "{listed:#}");
    assert_eq!(
        listed["load_classes"],
        serde_json::json!(["1", "2-8", "9+"])
    );
    assert!(listed.get("cells").is_none(), "a listing has no cells");

    let report = get(admin, "/api/compare?side=gpu:a&side=gpu%3Ab").await;
    assert_eq!(report["like_with_like"], true, "{report:#}");
    assert_eq!(report["differences"], serde_json::json!(["models differ"]));
    let served = &report["sides"][0]["served_by"];
    assert_eq!(served["response_model"], "a-2025");
    assert_eq!(served["serving_software"], "vllm/0.6.3");
    assert_eq!(served["labels"]["hardware"], "H100");
    let truth = [
        ("ttft_ms", 2.0),
        ("prefill_tps", 0.5),
        ("decode_tps", 0.5),
        ("duration_ms", 2.0),
        ("output_tokens", 1.0),
    ];
    let mut measured = Vec::new();
    for prompt in ["le_1k", "le_8k"] {
        for load in ["1", "2-8"] {
            let c = cell(&report, prompt, load);
            for side in c["sides"].as_array().unwrap() {
                assert_eq!(
                    side["enough_data"], true,
                    "{prompt}/{load} has enough data: {c:#}"
                );
                let spread = &side["ttft_ms"];
                assert!(
                    spread["min"].as_f64() <= spread["median"].as_f64()
                        && spread["median"].as_f64() <= spread["max"].as_f64(),
                    "spread brackets the median: {spread}"
                );
            }
            for (figure, want) in truth {
                let got = c["ratio"][figure]
                    .as_f64()
                    .unwrap_or_else(|| panic!("{prompt}/{load}: no {figure} ratio: {c:#}"));
                assert!(
                    (got / want - 1.0).abs() <= 0.10,
                    "{prompt}/{load} {figure}: ratio {got:.3}, scripted {want}: {c:#}"
                );
                measured.push(format!("{prompt}/{load} {figure} {got:.3}"));
            }
        }
    }
    eprintln!("measured ratios b/a: {measured:?}");

    // The same model on another route: other labels, another response
    // model version and serving software; too few requests to compare.
    let report = get(admin, "/api/compare?side=gpu:a&side=two:a").await;
    assert_eq!(report["like_with_like"], false, "{report:#}");
    assert_eq!(
        report["differences"],
        serde_json::json!([
            "model versions differ",
            "serving software differs",
            "labels differ: hardware, quantization"
        ])
    );
    let sparse = cell(&report, "le_1k", "1");
    assert_eq!(sparse["sides"][1]["requests"], 2);
    assert_eq!(sparse["sides"][1]["enough_data"], false, "{sparse:#}");
    assert!(
        sparse["ratio"]
            .as_object()
            .unwrap()
            .values()
            .all(Value::is_null),
        "no ratio where a side has too little data: {sparse:#}"
    );

    // A malformed side is refused by name.
    let got = fetch(admin, "/api/compare?side=nocolon").await;
    assert_eq!(got.status, 400);
    assert!(got.text().contains("nocolon"), "{}", got.text());
    if let Ok(rig) = Arc::try_unwrap(rig) {
        rig.proxy.shutdown().await;
    }
    drop(other);
}
