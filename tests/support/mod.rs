//! Shared integration-test harness: a scripted upstream, a real OTLP
//! receiver, client helpers and proxy launchers. Each test file pulls it in
//! with `mod support;` and uses the parts it needs.
#![allow(dead_code, clippy::unwrap_used)]
#![allow(
    clippy::disallowed_methods,
    reason = "test helpers wait with deadlines and time the proxy"
)]

pub(crate) mod client;
pub(crate) mod facts;
pub(crate) mod faulty;
pub(crate) mod forward;
pub(crate) mod frames;
pub(crate) mod h2up;
pub(crate) mod inspect;
pub(crate) mod otlp;
pub(crate) mod prometheus;
pub(crate) mod proxy;
pub(crate) mod raw;
pub(crate) mod redis;
pub(crate) mod rig;
pub(crate) mod script;
pub(crate) mod tls;
pub(crate) mod upstream;
pub(crate) mod ws;

use std::future::Future;
use std::time::Duration;

/// Every await in these tests is bounded by this unless it says otherwise.
pub(crate) const STEP_TIMEOUT: Duration = Duration::from_secs(10);

/// The OpenAI chat completions path, the one most tests send to.
pub(crate) const CHAT: &str = "/v1/chat/completions";

/// Start a server binary a test owns (a Debian package: redis-server,
/// prometheus): no stdio, killed with the test; a missing binary panics
/// with the install command.
pub(crate) fn spawn_server(
    cmd: &mut tokio::process::Command,
    package: &str,
) -> tokio::process::Child {
    cmd.stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run {package} ({e}): install it with \
                 `apt-get install -y --no-install-recommends {package}` \
                 (scripts/setup-test-env.sh does)"
            )
        })
}

/// Await `fut` for at most `limit`, panicking with `what` when it does not finish.
pub(crate) async fn within<F: Future>(limit: Duration, what: &str, fut: F) -> F::Output {
    match tokio::time::timeout(limit, fut).await {
        Ok(v) => v,
        Err(_) => panic!("timed out after {limit:?} waiting for {what}"),
    }
}

/// Short, stable fingerprint of a byte string for assertion messages.
pub(crate) fn fingerprint(bytes: &[u8]) -> String {
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
pub(crate) fn assert_bytes_eq(what: &str, got: &[u8], want: &[u8]) {
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
pub(crate) mod names {
    /// Request duration of chat and completions (`telemetry.semconv =
    /// latest`, the default).
    pub(crate) const OP_DURATION: &str = "gen_ai.client.inference.duration";
    pub(crate) const USAGE_INPUT: &str = "gen_ai.client.inference.usage.input_tokens";
    pub(crate) const USAGE_OUTPUT: &str = "gen_ai.client.inference.usage.output_tokens";
    pub(crate) const OP_INPUT_TOKENS: &str = "gen_ai.client.inference.operation.input_tokens";
    pub(crate) const OP_OUTPUT_TOKENS: &str = "gen_ai.client.inference.operation.output_tokens";
    pub(crate) const TOKEN_MODALITY: &str = "gen_ai.token.modality";
    /// Request duration of an unrecognised endpoint; of every request
    /// under `telemetry.semconv = legacy | both` (the v1.41.0 name).
    pub(crate) const OPERATION_DURATION: &str = "gen_ai.client.operation.duration";
    /// The v1.41.0 names (`telemetry.semconv = legacy | both`).
    pub(crate) const TOKEN_USAGE: &str = "gen_ai.client.token.usage";
    pub(crate) const SERVER_TTFT: &str = "gen_ai.server.time_to_first_token";
    pub(crate) const SERVER_TPOT: &str = "gen_ai.server.time_per_output_token";
    pub(crate) const DECODE_TPS_METRIC: &str = "tokentap.decode.tokens_per_second";
    pub(crate) const CHUNK_GAP: &str = "tokentap.chunk.gap";
    pub(crate) const REQUESTS: &str = "tokentap.requests";

    pub(crate) const OPERATION: &str = "gen_ai.operation.name";
    pub(crate) const PROVIDER: &str = "gen_ai.provider.name";
    pub(crate) const REQUEST_MODEL: &str = "gen_ai.request.model";
    pub(crate) const RESPONSE_MODEL: &str = "gen_ai.response.model";
    pub(crate) const REQUEST_STREAM: &str = "gen_ai.request.stream";
    pub(crate) const TOKEN_TYPE: &str = "gen_ai.token.type";
    pub(crate) const INPUT_TOKENS: &str = "gen_ai.usage.input_tokens";
    pub(crate) const OUTPUT_TOKENS: &str = "gen_ai.usage.output_tokens";
    pub(crate) const TTFC: &str = "gen_ai.response.time_to_first_chunk";
    pub(crate) const SERVER_ADDRESS: &str = "server.address";
    pub(crate) const SERVER_PORT: &str = "server.port";
    pub(crate) const ERROR_TYPE: &str = "error.type";
    pub(crate) const ROUTE: &str = "tokentap.route";
    pub(crate) const TENANT: &str = "tokentap.tenant";
    pub(crate) const OUTCOME: &str = "tokentap.outcome";
    pub(crate) const ESTIMATED: &str = "tokentap.tokens.estimated";
    pub(crate) const DECODE_TPS: &str = "tokentap.decode.tokens_per_second";
}

/// A spawned task that is aborted when dropped: a test server stops with
/// its handle (aborting an accept loop also drops the connection tasks it
/// owns in a `JoinSet`).
pub(crate) struct Background(tokio::task::JoinHandle<()>);

impl Background {
    pub(crate) fn spawn(task: impl Future<Output = ()> + Send + 'static) -> Background {
        Background(tokio::spawn(task))
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        self.0.abort();
    }
}
