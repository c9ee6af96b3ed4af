//! `tokentap price`: the binary prints the price a model gets and why, and
//! refuses bad arguments with exit code 2.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use std::process::Command;

fn price(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tokentap"))
        .arg("price")
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn prints_the_table_entry_dated_price_and_rates() {
    let (code, out, err) = price(&["openai", "o3", "--at", "2025-06-01"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("price used: openai/o3 (source table)"),
        "{out}"
    );
    assert!(out.contains("table: genai-prices 0.2.3 (MIT"), "{out}");
    assert!(
        out.contains("input_mtok               10"),
        "before 2025-06-10 o3 cost 10/M input:\n{out}"
    );
    let (_, later, _) = price(&["openai", "o3", "--at", "2025-07-01"]);
    assert!(later.contains("dated price: from 2025-06-10"), "{later}");
    assert!(later.contains("input_mtok               2"), "{later}");
    let (_, batch, _) = price(&["anthropic", "claude-sonnet-4-5", "--service-tier", "batch"]);
    assert!(
        batch.contains("variant applied: processing=batch"),
        "{batch}"
    );
}

#[test]
fn overrides_and_unpriced_models_are_explained() {
    let dir = std::env::temp_dir().join(format!("tokentap-price-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("prices.toml");
    std::fs::write(
        &file,
        "[[prices]]\nmodel = \"llama*\"\ninput = 0.1\noutput = 0.2\n",
    )
    .unwrap();
    let path = file.to_str().unwrap();
    let (code, out, err) = price(&["ollama", "llama3.2", "--prices", path]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("override --prices[0] (model \"llama*\"): matches"),
        "{out}"
    );
    assert!(
        out.contains("price used: --prices[0] (source override)"),
        "{out}"
    );
    let (code, out, _) = price(&["ollama", "mistral-small"]);
    assert_eq!(code, 0);
    assert!(out.contains("price: none"), "{out}");
    assert!(out.contains("self-hosted"), "{out}");
    let (code, _, err) = price(&["nosuch", "m"]);
    assert_eq!(code, 2);
    assert!(err.contains("unknown provider `nosuch`"), "{err}");
    let (code, _, err) = price(&["openai", "gpt-4o", "--at", "June"]);
    assert_eq!(code, 2);
    assert!(err.contains("--at `June`"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A tier the table has no price for is not shown silently at the
/// standard rate: the account says the standard rates apply.
#[test]
fn a_tier_without_its_own_price_is_noted() {
    let (code, out, err) = price(&["openai", "gpt-4o", "--service-tier", "flex"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(
            "note: the table has no flex price for this model; the standard rates below apply"
        ),
        "gpt-4o has no flex price:\n{out}"
    );
    let (code, out, err) = price(&[
        "openai",
        "gpt-5",
        "--service-tier",
        "flex",
        "--at",
        "2026-11-01",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("variant applied: service_tier=flex")
            && !out.contains("note: the table has no"),
        "gpt-5 has a flex price, and no note:\n{out}"
    );
    let (_, out, _) = price(&["openai", "gpt-4o"]);
    assert!(!out.contains("note:"), "no tier asked, no note:\n{out}");
}

/// An override with only per-call tool rates says so, leaves the token
/// price to the table, and its rates are shown beside the built-in ones.
#[test]
fn per_call_tool_rates_are_shown_with_their_source() {
    let dir = std::env::temp_dir().join(format!("tokentap-price-calls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("prices.toml");
    std::fs::write(
        &file,
        "[[prices]]\nmodel = \"gpt-4o*\"\nweb_search_per_call = 0.02\n",
    )
    .unwrap();
    let (code, out, err) = price(&["openai", "gpt-4o", "--prices", file.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(
            "override --prices[0] (model \"gpt-4o*\"): matches, for per-call tool rates only"
        ),
        "{out}"
    );
    assert!(
        out.contains("(source table)"),
        "the token price is the table's: {out}"
    );
    assert!(
        out.contains("web_search               0.02 (override --prices[0])"),
        "the override's rate and where it comes from: {out}"
    );
    assert!(
        out.contains("file_search              0.0025 (built-in)"),
        "the built-in rate of a tool the override leaves alone: {out}"
    );
    let (_, plain, _) = price(&["openai", "gpt-4o"]);
    assert!(
        plain.contains("web_search               0.01 (built-in)"),
        "{plain}"
    );
    let (_, none, _) = price(&["ollama", "llama3.2"]);
    assert!(none.contains("per-call tool rates: none"), "{none}");
    let _ = std::fs::remove_dir_all(&dir);
}
