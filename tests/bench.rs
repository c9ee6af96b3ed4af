//! `tokentap bench` end to end, with the real binary: against two
//! `tokentap simulate` processes with known TTFT and decode rates (no
//! jitter), the report's medians of three runs reproduce both rates within
//! 5 % at concurrency 1 and 8; its HTML report renders in a real headless
//! chromium (`tests/browser/bench_report.test.mjs`, installed by
//! `scripts/setup-browser-test.sh`; a missing tool fails the test with the
//! install command, nothing is skipped); `bench compare` refuses two
//! reports that are not like with like, naming each differing field.
//! Against a scripted vLLM-like server, the request carries what was asked
//! (key, `max_tokens`, `ignore_eos`, usage) and the report what the server
//! said it runs.
#![allow(
    clippy::disallowed_methods,
    reason = "tests bound child processes with the wall clock"
)]

mod support;

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const SETUP: &str = "scripts/setup-browser-test.sh";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tokentap-bench-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

/// A `tokentap simulate` process, stopped (by its PID) when dropped.
struct Simulator {
    child: Child,
    addr: String,
}

impl Simulator {
    fn start(ttft_ms: u32, tokens_per_second: u32) -> Simulator {
        let mut child = Command::new(env!("CARGO_BIN_EXE_tokentap"))
            .args([
                "simulate",
                "--listen",
                "127.0.0.1:0",
                "--jitter",
                "0",
                "--tokens",
                "100",
            ])
            .args(["--ttft-ms", &ttft_ms.to_string()])
            .args(["--tokens-per-second", &tokens_per_second.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start tokentap simulate");
        let stderr = child.stderr.take().expect("simulator stderr");
        let mut line = String::new();
        BufReader::new(stderr)
            .read_line(&mut line)
            .expect("simulator's first line");
        let addr = line
            .split("http://")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or_else(|| panic!("no address in the simulator's line {line:?}"))
            .to_owned();
        Simulator { child, addr }
    }
}

impl Drop for Simulator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Run `tokentap ARGS`, killed (by PID) past `limit`; stdout and stderr
/// go through files in `dir` so nothing blocks on a full pipe.
fn tokentap(args: &[&str], dir: &Path, limit: Duration) -> Output {
    tokentap_with_env(args, &[], dir, limit)
}

/// [`tokentap`] with `env` set for the child.
fn tokentap_with_env(args: &[&str], env: &[(&str, &str)], dir: &Path, limit: Duration) -> Output {
    let (out, err) = (dir.join("stdout"), dir.join("stderr"));
    let mut child = Command::new(env!("CARGO_BIN_EXE_tokentap"))
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).expect("stdout file"))
        .stderr(std::fs::File::create(&err).expect("stderr file"))
        .spawn()
        .expect("start tokentap");
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "tokentap {args:?} ran past {limit:?}; stderr:\n{}",
                std::fs::read_to_string(&err).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    Output {
        status,
        stdout: std::fs::read(&out).expect("stdout"),
        stderr: std::fs::read(&err).expect("stderr"),
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn read_json(path: &Path) -> serde_json::Value {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("report {}: {e}", path.display()));
    serde_json::from_str(&text).expect("the report is JSON")
}

/// Two simulators (TTFT 250 and 400 ms: the loopback round trip, a few
/// ms in a debug build on a busy machine, stays well inside 5 %); `bench`
/// at concurrency 1 and 8, 3 runs.
/// Returns the JSON and HTML report paths.
fn two_simulator_bench(dir: &Path) -> (PathBuf, PathBuf) {
    let fast = Simulator::start(250, 50);
    let slow = Simulator::start(400, 25);
    let (json, html) = (dir.join("report.json"), dir.join("report.html"));
    let targets = [
        format!("http://{}/v1,openai,model-fast", fast.addr),
        format!("http://{}/v1,openai,model-slow", slow.addr),
    ];
    let out = tokentap(
        &[
            "bench",
            "--target",
            &targets[0],
            "--target",
            &targets[1],
            "--concurrency",
            "1,8",
            "--runs",
            "3",
            "--requests",
            "8",
            "--warmup",
            "1",
            "--max-tokens",
            "6",
            "--timeout",
            "30",
            "--label",
            "hardware=loopback",
            "--json",
            json.to_str().expect("path"),
            "--html",
            html.to_str().expect("path"),
        ],
        dir,
        Duration::from_secs(240),
    );
    assert!(
        out.status.success(),
        "bench exits 0: {}\n{}",
        text(&out.stderr),
        text(&out.stdout)
    );
    let table = text(&out.stdout);
    for want in [
        "model-fast",
        "model-slow",
        "c=1",
        "c=8",
        "TTFT p50 ms",
        "decode/s p50",
    ] {
        assert!(table.contains(want), "the table shows {want}:\n{table}");
    }
    (json, html)
}

fn within(got: f64, want: f64, share: f64, what: &str) {
    assert!(
        (got - want).abs() <= want * share,
        "{what}: measured {got:.4}, known {want:.4} (more than {:.0} % apart)",
        share * 100.0
    );
}

#[test]
fn bench_reproduces_known_rates_renders_in_chromium_and_compare_refuses_mismatches() {
    let dir = scratch("rates");
    let (json, html) = two_simulator_bench(&dir);
    let report = read_json(&json);
    assert_eq!(report["schema"], "tokentap.bench/1");
    assert_eq!(report["settings"]["labels"]["hardware"], "loopback");
    // (model, TTFT s, decode tokens/s) as the simulators were started.
    let known = [("model-fast", 0.250, 50.0), ("model-slow", 0.400, 25.0)];
    let targets = report["targets"].as_array().expect("targets");
    assert_eq!(targets.len(), 2, "one entry per target");
    for (t, (model, ttft, decode)) in targets.iter().zip(known) {
        assert_eq!(t["model"], model);
        assert_eq!(
            t["served"]["models"],
            serde_json::json!([model]),
            "model as served"
        );
        let levels = t["levels"].as_array().expect("levels");
        assert_eq!(levels.len(), 2, "{model}: concurrency 1 and 8");
        for (level, c) in levels.iter().zip([1, 8]) {
            let what = format!("{model} at concurrency {c}");
            assert_eq!(level["load"]["concurrency"], c, "{what}");
            assert_eq!(level["errors"], 0, "{what}: no errors");
            assert_eq!(level["requests"], 24, "{what}: 3 runs of 8");
            assert_eq!(level["runs"].as_array().map(Vec::len), Some(3), "{what}");
            let s = &level["summary"];
            let got = |f: &str| s[f]["p50"]["median"].as_f64().expect(f);
            println!(
                "{what}: TTFT p50 {:.1} ms (known {:.0}), decode p50 {:.2} tokens/s (known {decode})",
                got("ttft_s") * 1000.0,
                ttft * 1000.0,
                got("decode_tps")
            );
            within(got("ttft_s"), ttft, 0.05, &format!("{what}: TTFT p50"));
            within(
                got("decode_tps"),
                decode,
                0.05,
                &format!("{what}: decode tokens/s p50"),
            );
            let out_tokens = s["output_tokens_mean"]["median"]
                .as_f64()
                .expect("output tokens");
            assert_eq!(out_tokens, 6.0, "{what}: max_tokens 6 received");
        }
        let tput = |i: usize| levels[i]["summary"]["output_tokens_per_s"]["median"].as_f64();
        let (c1, c8) = (tput(0).expect("c1"), tput(1).expect("c8"));
        assert!(
            c8 > 3.0 * c1,
            "{model}: 8 in flight serve more than 1 ({c8:.1} vs {c1:.1} tokens/s)"
        );
    }

    html_renders_in_chromium(&html);
    compare_refuses_what_is_not_like_with_like(&dir, &json);
}

fn html_renders_in_chromium(html: &Path) {
    let page = std::fs::read_to_string(html).expect("HTML report");
    for external in ["<script", "<link", "src=", "url(", "@import"] {
        assert!(
            !page.contains(external),
            "the report is self-contained: found {external}"
        );
    }
    let chromium = require_browser();
    let screenshot = root().join("target/bench-report.png");
    let _ = std::fs::remove_file(&screenshot);
    // Target names carry the simulators' ports: the script gets them exact.
    let report = read_json(&html.with_file_name("report.json"));
    let names: Vec<String> = report["targets"]
        .as_array()
        .expect("targets")
        .iter()
        .map(|t| t["name"].as_str().expect("name").to_owned())
        .collect();
    let out = Command::new("node")
        .arg(root().join("tests/browser/bench_report.test.mjs"))
        .current_dir(root())
        .env("TOKENTAP_BENCH_REPORT", html)
        .env("TOKENTAP_EXPECT_TARGETS", names.join(","))
        .env("TOKENTAP_EXPECT_POINTS", "2")
        .env("TOKENTAP_SCREENSHOT", &screenshot)
        .env("CHROMIUM", &chromium)
        .stdin(Stdio::null())
        .output()
        .expect("run node");
    assert!(
        out.status.success(),
        "browser test failed ({}):\n--- stdout ---\n{}\n--- stderr ---\n{}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    let png = std::fs::read(&screenshot).expect("screenshot");
    assert!(png.starts_with(b"\x89PNG"), "screenshot is a PNG");
    println!("bench report screenshot: {}", screenshot.display());
}

/// Fail (never skip) with the install hint when a browser-test tool is missing.
fn require_browser() -> PathBuf {
    let node = Command::new("node").arg("--version").output();
    assert!(
        node.is_ok_and(|o| o.status.success()),
        "`node` is not on PATH: the bench report browser test needs it; run {SETUP}"
    );
    let chromium =
        std::env::var_os("CHROMIUM").map_or_else(|| "/usr/bin/chromium".into(), PathBuf::from);
    assert!(
        chromium.exists(),
        "{} not found: the bench report browser test needs Debian's chromium; run {SETUP}",
        chromium.display()
    );
    let pw = root().join("tests/browser/node_modules/playwright-core/package.json");
    assert!(
        pw.exists(),
        "playwright-core is not installed in tests/browser: run {SETUP} (npm ci there)"
    );
    chromium
}

fn compare_refuses_what_is_not_like_with_like(dir: &Path, a: &Path) {
    let a_str = a.to_str().expect("path");
    let same = tokentap(
        &["bench", "compare", a_str, a_str],
        dir,
        Duration::from_secs(30),
    );
    assert!(
        same.status.success(),
        "a report compares with itself: {}",
        text(&same.stderr)
    );
    let table = text(&same.stdout);
    assert!(
        table.contains("B/A") && table.contains("1.00"),
        "side by side, ratio 1:\n{table}"
    );

    // B: the same run with a longer output and other hardware.
    let mut b = read_json(a);
    b["settings"]["max_tokens"] = serde_json::json!(64);
    b["settings"]["labels"]["hardware"] = serde_json::json!("H100");
    b["targets"][0]["served"]["models"] = serde_json::json!(["model-fast-2025-01-01"]);
    let b_path = dir.join("b.json");
    std::fs::write(&b_path, b.to_string()).expect("write B");
    let b_str = b_path.to_str().expect("path");

    let refused = tokentap(
        &["bench", "compare", a_str, b_str],
        dir,
        Duration::from_secs(30),
    );
    let err = text(&refused.stderr);
    assert!(
        !refused.status.success(),
        "a mismatched compare is refused:\n{err}"
    );
    for field in [
        "not like with like",
        "max_tokens differs (A: 6, B: 64)",
        "labels.hardware differs (A: loopback, B: H100)",
        "targets[0].model_version differs (A: model-fast, B: model-fast-2025-01-01)",
    ] {
        assert!(err.contains(field), "the refusal names {field:?}:\n{err}");
    }
    assert!(refused.stdout.is_empty(), "nothing compared when refused");

    // What the comparison is about may differ; the rest still refuses.
    let vs = tokentap(
        &[
            "bench",
            "compare",
            a_str,
            b_str,
            "--vs",
            "labels.hardware",
            "--vs",
            "model_version",
        ],
        dir,
        Duration::from_secs(30),
    );
    let err = text(&vs.stderr);
    assert!(
        !vs.status.success() && err.contains("max_tokens differs"),
        "{err}"
    );
    assert!(
        !err.contains("labels.hardware"),
        "--vs lets the label differ: {err}"
    );

    let forced = tokentap(
        &["bench", "compare", a_str, b_str, "--force"],
        dir,
        Duration::from_secs(30),
    );
    assert!(
        forced.status.success(),
        "--force compares anyway: {}",
        text(&forced.stderr)
    );
    assert!(
        text(&forced.stderr).contains("max_tokens differs"),
        "and still says what differs"
    );
    assert!(
        text(&forced.stdout).contains("model-fast"),
        "{}",
        text(&forced.stdout)
    );
}

#[test]
fn bench_simulate_needs_no_key_and_bad_flags_name_themselves() {
    let dir = scratch("simulate");
    let json = dir.join("sim.json");
    let out = tokentap(
        &[
            "bench",
            "--simulate",
            "--concurrency",
            "2",
            "--runs",
            "1",
            "--requests",
            "2",
            "--warmup",
            "0",
            "--max-tokens",
            "4",
            "--json",
            json.to_str().expect("path"),
        ],
        &dir,
        Duration::from_secs(60),
    );
    assert!(
        out.status.success(),
        "bench --simulate exits 0: {}",
        text(&out.stderr)
    );
    let report = read_json(&json);
    let models: Vec<&str> = report["targets"]
        .as_array()
        .expect("targets")
        .iter()
        .map(|t| t["model"].as_str().expect("model"))
        .collect();
    assert_eq!(models, ["sim-gpt-fast", "sim-gpt-large"]);
    for t in report["targets"].as_array().expect("targets") {
        let level = &t["levels"][0];
        let ok = level["requests"].as_u64().expect("requests")
            - level["errors"].as_u64().expect("errors");
        let errors: u64 = level["error_types"]
            .as_object()
            .expect("error types")
            .values()
            .map(|n| n.as_u64().expect("count"))
            .sum();
        assert_eq!(level["requests"], 2, "{t}");
        assert_eq!(
            errors,
            level["errors"].as_u64().expect("errors"),
            "every error is counted by type"
        );
        assert!(ok + errors == 2, "{t}");
        assert_eq!(t["served"]["software"], "tokentap simulate");
    }

    for (args, says) in [
        (&["bench"][..], "give --target"),
        (
            &["bench", "--target", "http://x/v1,grpc,m"],
            "not an API family",
        ),
        (
            &[
                "bench",
                "--target",
                "http://127.0.0.1:9/v1,openai,m,TOKENTAP_BENCH_NO_SUCH_KEY",
            ],
            "TOKENTAP_BENCH_NO_SUCH_KEY",
        ),
        (&["bench", "--simulate", "--label", "hardware"], "KEY=VALUE"),
        (&["bench", "--simulate", "--rate", "0"], "request rate > 0"),
        (
            &["bench", "--prompts", "/nonexistent/p.jsonl", "--simulate"],
            "--prompts /nonexistent/p.jsonl",
        ),
        (
            &[
                "bench",
                "compare",
                "/nonexistent/a.json",
                "/nonexistent/b.json",
            ],
            "/nonexistent/a.json",
        ),
    ] {
        let out = tokentap(args, &dir, Duration::from_secs(30));
        let err = text(&out.stderr);
        assert!(!out.status.success(), "{args:?} fails");
        assert!(
            err.contains(says),
            "{args:?}: the error says {says:?}:\n{err}"
        );
    }
}

#[test]
fn bench_runs_request_rates_with_jsonl_prompts_for_openai_and_anthropic() {
    let dir = scratch("rates-jsonl");
    let sim = Simulator::start(60, 100);
    let prompts = dir.join("p.jsonl");
    std::fs::write(
        &prompts,
        "{\"prompt\":\"Say hello.\"}\n{\"messages\":[{\"role\":\"user\",\"content\":\"And goodbye.\"}]}\n",
    )
    .expect("prompts");
    let json = dir.join("r.json");
    let targets = [
        format!("http://{}/v1,openai,chat-model", sim.addr),
        format!("http://{},anthropic,claude-model", sim.addr),
    ];
    let out = tokentap(
        &[
            "bench",
            "--target",
            &targets[0],
            "--target",
            &targets[1],
            "--rate",
            "5",
            "--requests",
            "5",
            "--runs",
            "2",
            "--warmup",
            "0",
            "--max-tokens",
            "4",
            "--prompts",
            prompts.to_str().expect("path"),
            "--json",
            json.to_str().expect("path"),
        ],
        &dir,
        Duration::from_secs(60),
    );
    assert!(out.status.success(), "bench exits 0: {}", text(&out.stderr));
    let report = read_json(&json);
    assert_eq!(report["settings"]["prompt_sets"][0]["name"], "file:p.jsonl");
    assert_eq!(
        report["settings"]["loads"],
        serde_json::json!([{"rate": 5.0}])
    );
    for (t, (model, family)) in report["targets"]
        .as_array()
        .expect("targets")
        .iter()
        .zip([("chat-model", "openai"), ("claude-model", "anthropic")])
    {
        assert_eq!(
            (t["model"].as_str(), t["family"].as_str()),
            (Some(model), Some(family))
        );
        assert_eq!(
            t["served"]["models"],
            serde_json::json!([model]),
            "{family}: model as served"
        );
        let level = &t["levels"][0];
        assert_eq!(
            (level["requests"].as_u64(), level["errors"].as_u64()),
            (Some(10), Some(0)),
            "{family}: {level}"
        );
        let s = &level["summary"];
        assert_eq!(
            s["output_tokens_mean"]["median"], 4.0,
            "{family}: 4 tokens received"
        );
        let ttft = s["ttft_s"]["p50"]["median"].as_f64().expect("ttft");
        within(ttft, 0.060, 0.25, &format!("{family}: TTFT p50"));
        let decode = s["decode_tps"]["p50"]["median"].as_f64().expect("decode");
        within(
            decode,
            100.0,
            0.25,
            &format!("{family}: decode tokens/s p50"),
        );
        assert!(
            s["input_tokens_mean"]["median"]
                .as_f64()
                .is_some_and(|n| n > 0.0),
            "{family}: input tokens from the answer's usage"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_sends_what_was_asked_and_records_what_the_server_runs() {
    use support::script::{StreamSpec, openai_chat_sse};
    use support::upstream::{Reply, Upstream};
    let spec = StreamSpec {
        model: "llama-3.1-8b-2025-01".to_owned(),
        ..StreamSpec::tokens(5, Duration::from_millis(80), Duration::from_millis(20))
    };
    let up = Upstream::start(move |ex| match ex.path_and_query.as_str() {
        "/version" => Reply::new(200)
            .header("content-type", "application/json")
            .send(r#"{"version":"0.9.1"}"#),
        "/v1/models" => Reply::new(200)
            .header("content-type", "application/json")
            .send(r#"{"object":"list","data":[{"id":"llama","max_model_len":32768}]}"#),
        "/v1/chat/completions" => openai_chat_sse(&spec).header("server", "uvicorn"),
        _ => Reply::new(404),
    })
    .await;
    let dir = scratch("vllm");
    let json = dir.join("v.json");
    let target = format!("{}/v1,openai,llama,TOKENTAP_BENCH_TEST_KEY", up.url());
    let args: Vec<String> = [
        "bench",
        "--target",
        &target,
        "--concurrency",
        "2",
        "--runs",
        "1",
        "--requests",
        "2",
        "--warmup",
        "0",
        "--max-tokens",
        "5",
        "--ignore-eos",
        "--input-tokens",
        "64",
        "--json",
        json.to_str().expect("path"),
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    let d = dir.clone();
    let out = tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        tokentap_with_env(
            &args,
            &[("TOKENTAP_BENCH_TEST_KEY", "secret-key")],
            &d,
            Duration::from_secs(60),
        )
    })
    .await
    .expect("bench");
    assert!(out.status.success(), "bench exits 0: {}", text(&out.stderr));

    let chats: Vec<_> = up
        .exchanges()
        .into_iter()
        .filter(|e| e.path_and_query == "/v1/chat/completions")
        .collect();
    assert_eq!(chats.len(), 2, "two measured requests, no warm-up");
    for ex in &chats {
        assert_eq!(
            ex.header("authorization").as_deref(),
            Some("Bearer secret-key"),
            "key from KEY_ENV"
        );
        let body = ex.json();
        assert_eq!(body["model"], "llama");
        assert_eq!(
            (body["max_tokens"].as_u64(), body["ignore_eos"].as_bool()),
            (Some(5), Some(true))
        );
        assert_eq!(body["stream"], true);
        assert_eq!(
            body["stream_options"]["include_usage"], true,
            "usage asked for"
        );
    }
    assert_ne!(
        chats[0].json()["messages"],
        chats[1].json()["messages"],
        "each request its own prompt"
    );

    let report = read_json(&json);
    let t = &report["targets"][0];
    assert_eq!(t["served"]["software"], "vllm", "from /version");
    assert_eq!(t["served"]["software_version"], "0.9.1");
    assert_eq!(
        t["served"]["context_length"], 32768,
        "max_model_len from /v1/models"
    );
    assert_eq!(
        t["served"]["server_header"], "uvicorn",
        "the answers' Server header, apart"
    );
    assert_eq!(
        t["served"]["models"],
        serde_json::json!(["llama-3.1-8b-2025-01"]),
        "model as served"
    );
    let level = &t["levels"][0];
    assert_eq!(level["errors"], 0, "{level}");
    assert_eq!(
        level["summary"]["input_tokens_mean"]["median"], 17.0,
        "the server's input count"
    );
    assert_eq!(report["settings"]["ignore_eos"], true);
}
