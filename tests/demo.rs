//! `tokentap demo` runs for a few seconds and its final table shows
//! non-zero tokens per second for every simulated model, labels the rows'
//! window and the footer's, and the demo says why export is off and that
//! its prices are made up.
#![allow(
    clippy::disallowed_methods,
    reason = "tests time requests and set deadlines with the wall clock"
)]

use std::process::Command;
use std::time::{Duration, Instant};

#[test]
fn demo_table_shows_every_model_decoding() {
    let started = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_tokentap"))
        .args([
            "demo",
            "--duration",
            "5",
            "--listen",
            "127.0.0.1:0",
            "--admin-listen",
            "127.0.0.1:0",
        ])
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .output()
        .expect("run tokentap demo");
    // `--duration 5` ends within a second of it; the rest is start-up
    // (binding, the first table) and a loaded test machine.
    assert!(
        started.elapsed() < Duration::from_secs(5 + 4),
        "the demo stops on time: {:?}",
        started.elapsed()
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "demo exits 0: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("dashboard: http://127.0.0.1:"),
        "prints the dashboard URL:\n{stdout}"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    let otlp = stderr
        .lines()
        .find(|l| l.contains("OTLP export is off"))
        .unwrap_or_else(|| panic!("the demo says export is off:\n{stderr}"));
    assert!(
        otlp.contains("no collector endpoint is configured")
            && !otlp.contains("otlp_enabled = false")
            && !otlp.contains("OTEL_SDK_DISABLED"),
        "export is off because no endpoint is set, not a switch the user never set: {otlp}"
    );
    assert!(
        stdout.contains("prices: made-up demo prices for the simulated models"),
        "the demo says its prices are made up:\n{stdout}"
    );
    let table = stdout.split("final figures").nth(1).expect("a final table");
    // The rows' window is labelled, the totals row adds them up, and the
    // footer labels its own count (since start).
    let window = table
        .lines()
        .find_map(|l| l.strip_prefix("per model, last "))
        .and_then(|l| l.strip_suffix(" s:"))
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or_else(|| panic!("the rows say their window:\n{table}"));
    assert!(
        (1..=60).contains(&window),
        "the rows' window is at most 60 s (the time run so far): {window}\n{table}"
    );
    let rows_total: u64 = ["sim-gpt-fast", "sim-gpt-large", "sim-claude"]
        .iter()
        .filter_map(|m| table.lines().find(|l| l.starts_with(m)))
        .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        .sum();
    let all = format!("all, last {window} s");
    let all_row: u64 = table
        .lines()
        .find_map(|l| l.strip_prefix(all.as_str()))
        .and_then(|rest| rest.trim().parse().ok())
        .unwrap_or_else(|| panic!("a totals row {all:?}:\n{table}"));
    assert_eq!(
        all_row, rows_total,
        "the totals row adds up the rows:\n{table}"
    );
    assert!(
        table
            .lines()
            .any(|l| l.contains("answers received through tokentap since the demo started")),
        "the footer says its count is since start:\n{table}"
    );
    for model in ["sim-gpt-fast", "sim-gpt-large", "sim-claude"] {
        let row = table
            .lines()
            .find(|l| l.starts_with(model))
            .unwrap_or_else(|| panic!("a row for {model}:\n{table}"));
        let cols: Vec<&str> = row.split_whitespace().collect();
        let requests: u64 = cols[1].parse().expect("requests column");
        assert!(requests > 0, "{model} served requests: {row}");
        let tps: f64 = cols[5]
            .parse()
            .unwrap_or_else(|_| panic!("tok/s p50 is a number for {model}: {row}"));
        assert!(tps > 0.0, "{model} decodes at a non-zero rate: {row}");
    }
}
