//! Request facts for tests that drive `Recorder`s or the watchers
//! directly. A leaf with no background work, so the allocation tests can
//! include it alone (`#[path]`) as well as through `support`.

#![allow(dead_code, reason = "each test uses what it needs")]

use std::sync::Arc;
use std::time::{Instant, SystemTime};

use tokentap::meter::{RequestBody, RequestFacts};
use tokentap::providers::{Operation, ProviderKind};

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
