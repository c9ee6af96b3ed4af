//! Shared by the allocation tests (`tests/alloc_*.rs`), which include it
//! alone (`#[path]`): the whole `support` module would allocate in the
//! background of a test that counts allocations.

#![allow(dead_code, reason = "each test uses what it needs")]

use std::sync::Arc;
use std::time::{Instant, SystemTime};

use tokentap::meter::{RequestBody, RequestFacts};
use tokentap::providers::{Operation, ProviderKind};

/// Allocations (blocks) made while `f` runs under dhat's testing
/// allocator; each test file holds one test, so nothing else allocates
/// meanwhile but the test harness, which waits.
pub(crate) fn allocations(f: impl FnOnce()) -> u64 {
    let before = dhat::HeapStats::get().total_blocks;
    f();
    dhat::HeapStats::get().total_blocks - before
}

/// A streamed chat request to route `openai` for `gpt-4o` that started
/// at `start`.
pub(crate) fn chat_facts(start: Instant) -> RequestFacts {
    RequestFacts {
        route: Arc::from("openai"),
        route_labels: Default::default(),
        provider: ProviderKind::Openai,
        operation: Some(Operation::ChatCompletions),
        request_model: Some("gpt-4o".into()),
        stream: true,
        tenant: None,
        session: None,
        server_address: Arc::from("api.openai.com"),
        server_port: 443,
        request_body: RequestBody::Sniffed,
        service_tier: None,
        start_wall: SystemTime::now(),
        start,
    }
}
