//! Shared integration-test harness: a scripted upstream, a real OTLP
//! receiver, client helpers and proxy launchers. Each test file pulls it in
//! with `mod support;` and uses the parts it needs.
#![allow(dead_code, clippy::unwrap_used)]

pub mod client;
pub mod faulty;
pub mod h2up;
pub mod inspect;
pub mod otlp;
pub mod proxy;
pub mod raw;
pub mod rig;
pub mod script;
pub mod tls;
pub mod upstream;

use std::future::Future;
use std::time::Duration;

/// Every await in these tests is bounded by this unless it says otherwise.
pub const STEP_TIMEOUT: Duration = Duration::from_secs(10);

/// Await `fut` for at most `limit`, panicking with `what` when it does not finish.
pub async fn within<F: Future>(limit: Duration, what: &str, fut: F) -> F::Output {
    match tokio::time::timeout(limit, fut).await {
        Ok(v) => v,
        Err(_) => panic!("timed out after {limit:?} waiting for {what}"),
    }
}

/// Short, stable fingerprint of a byte string for assertion messages.
pub fn fingerprint(bytes: &[u8]) -> String {
    // FNV-1a 64: enough to tell bodies apart in a message; equality is
    // asserted on the full bytes.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x} ({} bytes)", bytes.len())
}

/// Assert two byte strings are equal, with a readable diff position.
#[track_caller]
pub fn assert_bytes_eq(what: &str, got: &[u8], want: &[u8]) {
    if got == want {
        return;
    }
    let at = got.iter().zip(want).take_while(|(a, b)| a == b).count();
    let ctx = |b: &[u8]| {
        let lo = at.saturating_sub(40);
        let hi = (at + 80).min(b.len());
        String::from_utf8_lossy(&b[lo.min(b.len())..hi]).into_owned()
    };
    panic!(
        "{what}: bytes differ at offset {at}: got {} want {}\n  got  …{:?}…\n  want …{:?}…",
        fingerprint(got),
        fingerprint(want),
        ctx(got),
        ctx(want)
    );
}

/// The contract's attribute and metric names, in one place.
pub mod names {
    pub const OP_DURATION: &str = "gen_ai.client.operation.duration";
    pub const TOKEN_USAGE: &str = "gen_ai.client.token.usage";
    pub const SERVER_TTFT: &str = "gen_ai.server.time_to_first_token";
    pub const SERVER_TPOT: &str = "gen_ai.server.time_per_output_token";
    pub const DECODE_TPS_METRIC: &str = "tokentap.decode.tokens_per_second";
    pub const CHUNK_GAP: &str = "tokentap.chunk.gap";
    pub const REQUESTS: &str = "tokentap.requests";

    pub const OPERATION: &str = "gen_ai.operation.name";
    pub const PROVIDER: &str = "gen_ai.provider.name";
    pub const REQUEST_MODEL: &str = "gen_ai.request.model";
    pub const RESPONSE_MODEL: &str = "gen_ai.response.model";
    pub const REQUEST_STREAM: &str = "gen_ai.request.stream";
    pub const TOKEN_TYPE: &str = "gen_ai.token.type";
    pub const INPUT_TOKENS: &str = "gen_ai.usage.input_tokens";
    pub const OUTPUT_TOKENS: &str = "gen_ai.usage.output_tokens";
    pub const TTFC: &str = "gen_ai.response.time_to_first_chunk";
    pub const SERVER_ADDRESS: &str = "server.address";
    pub const SERVER_PORT: &str = "server.port";
    pub const ERROR_TYPE: &str = "error.type";
    pub const ROUTE: &str = "tokentap.route";
    pub const TENANT: &str = "tokentap.tenant";
    pub const OUTCOME: &str = "tokentap.outcome";
    pub const ESTIMATED: &str = "tokentap.tokens.estimated";
    pub const DECODE_TPS: &str = "tokentap.decode.tokens_per_second";
}

/// A spawned task that is aborted when dropped: a test server stops with
/// its handle (aborting an accept loop also drops the connection tasks it
/// owns in a `JoinSet`).
pub struct Background(tokio::task::JoinHandle<()>);

impl Background {
    pub fn spawn(task: impl Future<Output = ()> + Send + 'static) -> Background {
        Background(tokio::spawn(task))
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        self.0.abort();
    }
}
