//! A new user's first hour, against the real binary: the README's drop-in
//! example with the shipped config, a request that matches no route, the
//! log stream and its JSON form, `tokentap check`, per-subcommand flags,
//! and a taken admin port.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use support::STEP_TIMEOUT;
use support::client::{self, Req};
use support::proxy::{Bin, Scratch, bin_command, listening_addr, run_bin};
use support::script;
use support::upstream::Upstream;
use tokio::io::{AsyncBufReadExt as _, BufReader};

const README: &str = include_str!("../README.md");
const SHIPPED: &str = include_str!("../config/tokentap.toml");

/// The shipped config with both providers' upstreams pointed at `up`.
fn shipped_against(up: &str) -> String {
    SHIPPED
        .replace("https://api.openai.com", up)
        .replace("https://api.anthropic.com", up)
}

/// The path of the first `http://127.0.0.1:8080/…` URL after `marker` in the README.
fn readme_path_after(marker: &str) -> String {
    let at = README
        .find(marker)
        .unwrap_or_else(|| panic!("README has `{marker}`"));
    let rest = &README[at..];
    let url = rest
        .split_whitespace()
        .find_map(|w| w.split_once("http://127.0.0.1:8080").map(|(_, p)| p))
        .unwrap_or_else(|| panic!("a URL after `{marker}`"));
    url.trim_end_matches(['`', ')', '\\']).to_owned()
}

#[tokio::test]
async fn readme_drop_in_example_works_with_the_shipped_config() {
    let drop_in = &README[README.find("## Drop-in examples").unwrap()..];
    assert!(
        drop_in.contains("--config config/tokentap.toml"),
        "the drop-in examples run the shipped config"
    );
    let up = Upstream::fixed(script::openai_chat_json("m", "hi", (1, 1))).await;
    let scratch = Scratch::new("readme");
    let path = scratch.write("tokentap.toml", &shipped_against(&up.url()));
    let bin = Bin::start_args(
        &["--config", path.to_str().unwrap()],
        &[
            ("TOKENTAP_LISTEN", "127.0.0.1:0"),
            ("TOKENTAP_ADMIN_LISTEN", "off"),
            ("OTEL_SDK_DISABLED", "true"),
        ],
    )
    .await;
    let base = readme_path_after("## Drop-in examples\n\nRun tokentap");
    let sdk = format!("{}/chat/completions", readme_path_after("OPENAI_BASE_URL="));
    let curl = readme_path_after("curl -N");
    assert!(base.is_empty() || base.starts_with('/'), "{base}");
    for path in [&sdk, &curl] {
        let got = client::fetch(
            &client::http1(),
            &Req::post_json(bin.addr, path, script::openai_request("m", false, None)),
        )
        .await;
        assert_eq!(
            got.status,
            200,
            "the README's {path} reaches the upstream: {}",
            got.text()
        );
    }
    bin.stop().await;
}

#[tokio::test]
async fn a_request_without_a_route_is_logged_counted_and_told_the_routes() {
    let up = Upstream::fixed(script::openai_chat_json("m", "hi", (1, 1))).await;
    let scratch = Scratch::new("noroute");
    let path = scratch.write("tokentap.toml", &shipped_against(&up.url()));
    let bin = Bin::start_args(
        &["--config", path.to_str().unwrap()],
        &[
            ("TOKENTAP_LISTEN", "127.0.0.1:0"),
            ("TOKENTAP_ADMIN_LISTEN", "127.0.0.1:0"),
            ("OTEL_SDK_DISABLED", "true"),
        ],
    )
    .await;
    let got = client::fetch(
        &client::http1(),
        &Req::post_json(
            bin.addr,
            "/v1/chat/completions?key=secret",
            script::openai_request("m", false, None),
        ),
    )
    .await;
    assert_eq!(got.status, 404, "{}", got.text());
    let message = got.json()["error"]["message"].as_str().unwrap().to_owned();
    for needle in ["/v1/chat/completions", "/openai", "/anthropic"] {
        assert!(
            message.contains(needle),
            "the 404 names `{needle}`: {message}"
        );
    }
    let admin = bin.admin_addr().await;
    let scrape = client::fetch(&client::http1(), &Req::get(admin, "/metrics")).await;
    assert!(
        scrape
            .text()
            .lines()
            .any(|l| l.starts_with("tokentap_requests_total{")
                && l.contains("tokentap_outcome=\"no_route\"")
                && l.ends_with(" 1")),
        "counted once as no_route:\n{}",
        scrape.text()
    );
    let out = bin.stop().await;
    let line = out
        .lines()
        .find(|l| l.contains("no_route"))
        .unwrap_or_else(|| panic!("an access-log line for the 404:\n{out}"));
    assert!(
        line.contains("/v1/chat/completions") && line.contains("404"),
        "{line}"
    );
    assert!(!out.contains("secret"), "the query is never logged:\n{out}");
    assert_eq!(up.exchanges().len(), 0, "nothing forwarded");
}

/// Output of one binary run, stdout and stderr apart.
#[derive(Default)]
struct Streams {
    stdout: String,
    stderr: String,
}

#[tokio::test]
async fn json_logs_are_json_on_every_line_and_all_on_stderr() {
    let up = Upstream::fixed(script::openai_chat_json("m", "hi", (1, 1))).await;
    let mut cmd = bin_command();
    cmd.args([
        "--upstream",
        &up.url(),
        "--listen",
        "127.0.0.1:0",
        "--admin-listen",
        "127.0.0.1:0",
        "--log-format",
        "json",
    ])
    .env("OTEL_SDK_DISABLED", "true");
    let mut child = cmd.spawn().unwrap();
    let streams = Arc::new(Mutex::new(Streams::default()));
    let mut readers = Vec::new();
    for is_err in [false, true] {
        let pipe: Box<dyn tokio::io::AsyncRead + Send + Unpin> = if is_err {
            Box::new(child.stderr.take().unwrap())
        } else {
            Box::new(child.stdout.take().unwrap())
        };
        let streams = streams.clone();
        readers.push(tokio::spawn(async move {
            let mut lines = BufReader::new(pipe).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let mut s = streams.lock().unwrap();
                let out = if is_err { &mut s.stderr } else { &mut s.stdout };
                out.push_str(&line);
                out.push('\n');
            }
        }));
    }
    let addr = support::within(STEP_TIMEOUT, "the listening line", async {
        loop {
            let found = streams.lock().unwrap().stderr.lines().find_map(|l| {
                l.contains("admin listening on")
                    .then_some(())
                    .and(listening_addr(l))
            });
            if found.is_some() {
                let s = streams.lock().unwrap();
                return s.stderr.lines().find_map(listening_addr).unwrap();
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    for path in ["/v1/chat/completions", "/nowhere/x"] {
        client::fetch(
            &client::http1(),
            &Req::post_json(addr, path, script::openai_request("m", false, None)),
        )
        .await;
    }
    let pid = child.id().unwrap();
    std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    support::within(STEP_TIMEOUT, "exit", child.wait())
        .await
        .unwrap();
    for r in readers {
        support::within(STEP_TIMEOUT, "pipes closed", r)
            .await
            .unwrap();
    }
    let s = streams.lock().unwrap();
    assert_eq!(s.stdout, "", "nothing on stdout");
    let mut messages = Vec::new();
    for line in s.stderr.lines() {
        let v: serde_json::Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {line}\nall:\n{}", s.stderr));
        messages.push(v["message"].as_str().unwrap_or_default().to_owned());
    }
    for want in [
        "tokentap listening on",
        "tokentap admin listening on",
        "request",
        "draining",
    ] {
        assert!(
            messages.iter().any(|m| m.starts_with(want)),
            "a `{want}` record:\n{}",
            s.stderr
        );
    }
    assert_eq!(
        messages.iter().filter(|m| *m == "request").count(),
        2,
        "one access line per request:\n{}",
        s.stderr
    );
    assert!(
        s.stderr.contains("dashboard http://"),
        "the banner names the dashboard:\n{}",
        s.stderr
    );
    assert!(
        s.stderr.contains("\"thread\":\"tokentap-serve-"),
        "drain lines name their serving thread:\n{}",
        s.stderr
    );
}

#[tokio::test]
async fn check_prints_the_effective_config_or_the_errors() {
    let (status, out) = run_bin(&["check", "--config", "config/tokentap.toml"], &[]).await;
    assert_eq!(status.code(), Some(0), "shipped config is valid:\n{out}");
    assert!(
        out.contains("[[routes]]") && out.contains("prefix = \"/openai\""),
        "prints the effective config:\n{out}"
    );
    assert!(!out.contains("listening on"), "check binds nothing:\n{out}");
    let (status, out) = run_bin(
        &["check", "--config", "config/tokentap.toml"],
        &[("TOKENTAP_SERVER__MAX_CONNECTIONS", "lots")],
    )
    .await;
    assert_eq!(status.code(), Some(2), "env is applied:\n{out}");
    assert!(out.contains("server.max_connections"), "{out}");
    let scratch = Scratch::new("check");
    let path = scratch.write(
        "ca.toml",
        &format!("{SHIPPED}\n").replace(
            "[upstream]\n",
            "[upstream]\nca_file = \"/nonexistent/ca.pem\"\n",
        ),
    );
    let (status, out) = run_bin(&["check", "--config", path.to_str().unwrap()], &[]).await;
    assert_eq!(status.code(), Some(2), "a missing CA file fails:\n{out}");
    assert!(
        out.contains("/nonexistent/ca.pem"),
        "names the file:\n{out}"
    );
    let (status, out) = run_bin(
        &[
            "check",
            "--upstream",
            "http://127.0.0.1:9",
            "--listen",
            "127.0.0.1:1",
        ],
        &[],
    )
    .await;
    assert_eq!(status.code(), Some(0), "flags apply:\n{out}");
    assert!(out.contains("listen = \"127.0.0.1:1\""), "{out}");
}

#[tokio::test]
async fn each_subcommand_lists_and_accepts_only_its_own_flags() {
    let (status, help) = run_bin(&["simulate", "--help"], &[]).await;
    assert!(status.success(), "{help}");
    for flag in [
        "--upstream",
        "--provider",
        "--admin-listen",
        "--watch-config",
        "--otlp-endpoint",
        "--otlp-protocol",
        "--config",
    ] {
        assert!(
            !help.contains(flag),
            "simulate --help lists {flag}:\n{help}"
        );
    }
    assert!(help.contains("--ttft-ms"), "{help}");
    let (status, out) = run_bin(&["simulate", "--upstream", "http://x"], &[]).await;
    assert_eq!(status.code(), Some(2), "a foreign flag is an error:\n{out}");
    assert!(out.contains("--upstream"), "{out}");
    let (status, help) = run_bin(&["demo", "--help"], &[]).await;
    assert!(status.success(), "{help}");
    assert!(
        !help.contains("--upstream") && help.contains("--duration"),
        "{help}"
    );
}

#[tokio::test]
async fn a_taken_admin_port_is_one_error_line_and_exit_code_2() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let (status, out) = run_bin(
        &[
            "--upstream",
            "http://127.0.0.1:9",
            "--listen",
            "127.0.0.1:0",
            "--admin-listen",
            &addr,
        ],
        &[],
    )
    .await;
    assert_eq!(status.code(), Some(2), "{out}");
    let lines: Vec<&str> = out.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "one line:\n{out}");
    assert!(lines[0].contains(&addr), "{out}");
    assert_eq!(
        lines[0].matches("in use").count(),
        1,
        "the OS error once:\n{out}"
    );
    drop(taken);
}
