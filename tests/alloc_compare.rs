//! The comparison windows' per-request cost (`compare::Compare::record`):
//! once a side's cell has filled its windows' buffers, recording further
//! requests (a read lock, the side's mutex, one copy of five figures into
//! a reused buffer) allocates nothing, also while windows rotate and the
//! reservoir replaces kept requests; a new cell allocates its ring once.
//!
//! Counted with dhat's allocator in its testing mode. The number and the
//! command are in docs/BENCHMARKS.md ("The comparison windows").

#![allow(
    clippy::disallowed_methods,
    reason = "the test builds request timestamps"
)]
#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

#[path = "support/alloc.rs"]
mod alloc;
#[path = "support/facts.rs"]
mod facts;

use std::sync::Arc;
use std::time::{Duration, Instant};

use alloc::allocations;
use facts::chat_facts;
use tokentap::config::CompareConfig;
use tokentap::meter::{Measurement, TokenSource};
use tokentap::providers::Usage;
use tokentap::watch::compare::Compare;

#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

/// Request `i`: finishes `i` ms after `base`, with a response model and
/// a `server` header as a real one has.
fn measurement(base: Instant, i: u64) -> Measurement {
    let request = chat_facts(base + Duration::from_millis(i));
    Measurement {
        usage: Usage {
            input: Some(100 + (i % 3) * 2000),
            output: Some(10),
            ..Usage::default()
        },
        output_tokens: Some(10),
        token_source: Some(TokenSource::Provider),
        response_model: Some("gpt-4o-2024-08-06".into()),
        server_software: Some(http::HeaderValue::from_static("vllm/0.6.3")),
        time_to_first_token: Some(Duration::from_millis(150 + i % 500)),
        time_to_last_token: Some(Duration::from_millis(900)),
        duration: Duration::from_millis(950),
        ..Measurement::empty(request)
    }
}

#[test]
fn recording_into_known_cells_allocates_nothing() {
    let _profiler = dhat::Profiler::builder().testing().build();
    let cfg = CompareConfig {
        window: Duration::from_millis(100),
        windows: 4,
        samples: 16,
        ..CompareConfig::default()
    };
    let compare = Compare::new(&cfg);
    let (route, model): (Arc<str>, Arc<str>) = ("openai".into(), "gpt-4o".into());
    let base = Instant::now();
    // Built before counting: the requests as the meter hands them over,
    // 1 ms apart: 100 per window, past `samples`, over 20 windows.
    let requests: Vec<Measurement> = (0..2_000u64).map(|i| measurement(base, i)).collect();
    // Warm-up: the side, its three cells (three prompt sizes) and every
    // window's buffer at its cap.
    let (first, rest) = requests.split_at(400);
    let warm = allocations(|| {
        for m in first {
            compare.record(&route, &model, 0, m);
        }
    });
    let n = allocations(|| {
        for (i, m) in rest.iter().enumerate() {
            compare.record(&route, &model, i % 2, m);
        }
    });
    // Load class 1 is a new cell per prompt size: its ring and buffers.
    let bound = compare.memory_bound();
    assert!(
        n <= 3 * (1 + 4 * 3),
        "{} requests allocated {n} blocks: only the three new cells' rings and buffers may",
        rest.len()
    );
    let steady = allocations(|| {
        for (i, m) in rest.iter().enumerate() {
            compare.record(&route, &model, i % 2, m);
        }
    });
    assert_eq!(
        steady,
        0,
        "{} requests into known cells allocated {steady} blocks",
        rest.len()
    );
    assert!(compare.memory_used() <= bound);
    eprintln!(
        "compare: warm-up {warm} blocks for the side and 3 cells; {} requests into new \
         load-class cells {n} blocks; {} requests into known cells {steady} blocks; \
         sample buffers {} bytes (bound {bound})",
        rest.len(),
        rest.len(),
        compare.memory_used()
    );
    let report = compare.report(&[]);
    assert_eq!(report.sides.len(), 1);
    assert_eq!(report.sides[0].requests, 400 + 2 * 1600);
}
