//! Rolling a finished request into its session allocates only for a new
//! session: once the session is known, recording its further requests
//! (one lock, one lookup, a few additions) allocates nothing.
//!
//! Counted with dhat's allocator in its testing mode.

#![allow(
    clippy::disallowed_methods,
    reason = "the test builds request timestamps"
)]
#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokentap::config::SessionLimits;
use tokentap::meter::{Measurement, RequestFacts, TokenSource};
use tokentap::providers::Usage;
use tokentap::watch::rollups::{RequestCost, SessionRollups, SortBy};

#[path = "support/alloc.rs"]
mod alloc;
#[path = "support/facts.rs"]
mod facts;

use alloc::allocations;

#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

fn measurement(session: Arc<str>, base: Instant, i: u64) -> Measurement {
    let request = RequestFacts {
        session: Some(session),
        ..facts::chat_facts(base + Duration::from_millis(i))
    };
    Measurement {
        usage: Usage {
            input: Some(100),
            output: Some(10),
            cache_read: Some(60),
            ..Usage::default()
        },
        output_tokens: Some(10),
        token_source: Some(TokenSource::Provider),
        content_chunks: 10,
        time_to_headers: Some(Duration::from_millis(100)),
        time_to_first_byte: Some(Duration::from_millis(120)),
        time_to_first_token: Some(Duration::from_millis(150 + i % 500)),
        time_to_last_token: Some(Duration::from_millis(900)),
        duration: Duration::from_millis(950),
        response_bytes: 1000,
        ..Measurement::empty(request)
    }
}

#[test]
fn a_known_sessions_requests_are_rolled_up_without_allocating() {
    let _profiler = dhat::Profiler::builder().testing().build();
    let rollups = SessionRollups::new(SessionLimits::default());
    let base = Instant::now();
    let ids: Vec<Arc<str>> = (0..8).map(|i| Arc::from(format!("session-{i}"))).collect();
    // Built before counting: the requests as the meter hands them over.
    let requests: Vec<Measurement> = (0..4_000u64)
        .map(|i| measurement(ids[(i % 8) as usize].clone(), base, i))
        .collect();
    let (first, rest) = requests.split_at(8);
    for m in first {
        rollups.record(m, RequestCost::Priced(0.001));
    }
    let n = allocations(|| {
        for m in rest {
            rollups.record(m, RequestCost::Priced(0.001));
        }
    });
    assert_eq!(
        n,
        0,
        "{} requests of known sessions allocated {n} blocks",
        rest.len()
    );
    let listed = rollups.list(SortBy::Cost, 10);
    assert_eq!(listed.len(), 8);
    assert!(
        listed
            .iter()
            .all(|s| s.requests == 500 && s.input_tokens == 50_000),
        "every request was rolled up: {listed:?}"
    );
}
