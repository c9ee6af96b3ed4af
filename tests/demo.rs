//! `tokentap demo` runs for a few seconds and its final table shows
//! non-zero tokens per second for every simulated model.
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
    let table = stdout.split("final figures").nth(1).expect("a final table");
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
