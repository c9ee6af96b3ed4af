//! Drop-in proof: the official `openai` and `anthropic` Python SDKs, pointed
//! at the proxy by base URL only, stream and fetch through it and assemble
//! exactly the text the scripted upstream sent.
//!
//! Needs the virtual environment made by `scripts/setup-test-env.sh`
//! (`.venv` at the repository root, or `$TOKENTAP_PYTHON`). Without it the
//! test fails: it is part of the suite, not optional.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

mod support;

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use support::names::OUTCOME;
use support::rig::Rig;
use support::script::{self, StreamSpec};

const PIECES: &[&str] = &[
    "Hello",
    ",",
    " wörld",
    " 🚀",
    " \"quoted\"",
    "\nline two",
    " done.",
];

fn python() -> PathBuf {
    if let Some(p) = std::env::var_os("TOKENTAP_PYTHON") {
        let p = PathBuf::from(p);
        assert!(
            p.exists(),
            "TOKENTAP_PYTHON={} does not exist; run scripts/setup-test-env.sh (it creates .venv with the SDKs)",
            p.display()
        );
        return p;
    }
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/python");
    assert!(
        p.exists(),
        "the Python SDK environment is missing ({} not found): run scripts/setup-test-env.sh \
         to create .venv with the pinned openai and anthropic packages, or set TOKENTAP_PYTHON",
        p.display()
    );
    p
}

#[tokio::test]
async fn official_python_sdks_work_through_the_proxy() {
    let py = python();
    let text = PIECES.concat();
    let spec = StreamSpec::text(PIECES).with_usage(12, PIECES.len() as u64);
    let aspec = spec.clone().model(script::ANTHROPIC_RESPONSE_MODEL);
    let joined = text.clone();
    let rig = Rig::start(
        move |ex| {
            let stream = ex.json()["stream"].as_bool().unwrap_or(false);
            let n = PIECES.len() as u64;
            match (ex.path_and_query.ends_with("/messages"), stream) {
                (false, true) => script::openai_chat_sse(&spec),
                (false, false) => {
                    script::openai_chat_json(script::OPENAI_RESPONSE_MODEL, &joined, (12, n))
                }
                (true, true) => script::anthropic_sse(&aspec),
                (true, false) => {
                    script::anthropic_json(script::ANTHROPIC_RESPONSE_MODEL, &joined, (12, n))
                }
            }
        },
        |t, up| {
            t.route("openai", "/openai", up, "openai").route(
                "anthropic",
                "/anthropic",
                up,
                "anthropic",
            )
        },
    )
    .await;

    let script_path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/sdk/drop_in.py");
    let mut cmd = tokio::process::Command::new(&py);
    cmd.arg(&script_path)
        .arg(format!("{}/openai/v1", rig.proxy.url()))
        .arg(format!("{}/anthropic", rig.proxy.url()))
        .stdin(Stdio::null())
        .kill_on_drop(true);
    for (k, _) in std::env::vars() {
        let l = k.to_ascii_lowercase();
        if l.ends_with("_proxy") || k.starts_with("OPENAI_") || k.starts_with("ANTHROPIC_") {
            cmd.env_remove(&k);
        }
    }
    cmd.env("NO_PROXY", "127.0.0.1,localhost");
    let out = match tokio::time::timeout(Duration::from_secs(90), cmd.output()).await {
        Ok(o) => o.expect("run the Python SDK script"),
        Err(_) => panic!("the Python SDK script did not finish within 90 s"),
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "SDK script failed ({}):\n{stderr}\n{stdout}",
        out.status
    );
    let v: serde_json::Value = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("SDK script printed no JSON ({e}): {stdout}\n{stderr}"));

    for key in [
        "openai_stream",
        "openai_json",
        "anthropic_stream",
        "anthropic_json",
    ] {
        assert_eq!(
            v[key].as_str(),
            Some(text.as_str()),
            "{key}: the SDK assembled exactly the upstream's text"
        );
    }
    for key in [
        "openai_stream_usage",
        "openai_json_usage",
        "anthropic_stream_usage",
        "anthropic_json_usage",
    ] {
        assert_eq!(
            v[key].as_u64(),
            Some(PIECES.len() as u64),
            "{key}: usage reached the SDK intact"
        );
    }

    let ex = rig.up.exchanges();
    assert_eq!(ex.len(), 4, "four SDK calls reached the upstream");
    let paths: Vec<&str> = ex.iter().map(|e| e.path_and_query.as_str()).collect();
    assert_eq!(
        paths,
        [
            "/v1/chat/completions",
            "/v1/chat/completions",
            "/v1/messages",
            "/v1/messages"
        ],
        "route prefixes stripped"
    );
    for m in ["chat gpt-4o-mini", "chat claude-3-5-haiku-latest"] {
        let s = rig.col.wait_span_named(m).await;
        assert_eq!(
            s.str(OUTCOME),
            "complete",
            "{m}: SDK request metered as complete"
        );
    }
    rig.proxy.shutdown().await;
}
