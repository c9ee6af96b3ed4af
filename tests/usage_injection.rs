//! Opt-in `stream_options.include_usage` injection: the upstream is asked for
//! usage, the meter gets exact counts, and the client receives exactly the
//! bytes it would have received without injection.
#![allow(
    clippy::disallowed_methods,
    reason = "tests time requests and set deadlines with the wall clock"
)]

mod support;

use std::time::Duration;

use support::client::{self, Req};
use support::otlp::Collector;
use support::proxy::{InProc, Toml};
use tokentap::simulate::{Profile, Simulator};

/// The built-in simulator, OpenAI-faithful about `include_usage`
/// (`"usage":null` in every chunk plus a final usage-only chunk).
async fn simulator() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let profile = Profile {
        ttft_ms: 30.0,
        jitter: 0.0,
        tokens_per_second: 400.0,
        tokens: 12,
        error_rate: 0.0,
        slow_rate: 0.0,
    };
    tokio::spawn(tokentap::simulate::serve(
        listener,
        Simulator::new(profile, Vec::new()),
    ));
    format!("http://{addr}")
}

fn chat(addr: std::net::SocketAddr, body: &str, id: &str) -> Req {
    Req::post_json(addr, "/v1/chat/completions", body.as_bytes().to_vec())
        .header("x-request-id", id)
}

const ASK: &str =
    r#"{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn injected_usage_is_metered_and_invisible_to_the_client() {
    let up = simulator().await;
    let col = Collector::start().await;
    let base = || Toml::new().otlp(&col.endpoint(), "grpc");
    let mut plain = InProc::start(&base().route("plain", "/", &up, "openai")).await;
    let mut injecting =
        InProc::start(&base().route_with("injecting", "/", &up, "openai", "inject_usage = true"))
            .await;
    let http = client::http1();

    let without = client::fetch(&http, &chat(plain.addr, ASK, "req-1")).await;
    let with = client::fetch(&http, &chat(injecting.addr, ASK, "req-1")).await;
    assert_eq!(with.status, 200);
    support::assert_bytes_eq(
        "client bytes with injection vs without",
        &with.body,
        &without.body,
    );
    assert!(
        !String::from_utf8_lossy(&with.body).contains("usage"),
        "no usage reached the client"
    );

    // An explicit `include_usage: false` is respected: nothing is injected.
    let declined = r#"{"model":"gpt-4o-mini","stream":true,"stream_options":{"include_usage":false},"messages":[]}"#;
    let a = client::fetch(&http, &chat(plain.addr, declined, "req-2")).await;
    let b = client::fetch(&http, &chat(injecting.addr, declined, "req-2")).await;
    support::assert_bytes_eq("explicit include_usage=false", &b.body, &a.body);

    // A client that asked for usage itself gets it, untouched.
    let asked = r#"{"model":"gpt-4o-mini","stream":true,"stream_options":{"include_usage":true},"messages":[]}"#;
    let a = client::fetch(&http, &chat(plain.addr, asked, "req-3")).await;
    let b = client::fetch(&http, &chat(injecting.addr, asked, "req-3")).await;
    support::assert_bytes_eq("client-requested usage", &b.body, &a.body);
    assert!(String::from_utf8_lossy(&b.body).contains("\"completion_tokens\":12"));

    plain.stop().await;
    injecting.stop().await;
    let spans = {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let spans = col.spans();
            if spans.len() >= 6 || tokio::time::Instant::now() > deadline {
                break spans;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    // The simulator echoes x-request-id as the response id.
    let route_span = |route: &str, id: &str| {
        spans
            .iter()
            .find(|s| s.str("tokentap.route") == route && s.str("gen_ai.response.id") == id)
            .unwrap_or_else(|| panic!("span of {id} on route {route}: {spans:#?}"))
            .clone()
    };
    let injected = route_span("injecting", "req-1");
    assert_eq!(
        injected.num("gen_ai.usage.output_tokens"),
        12.0,
        "exact usage from the injected chunk"
    );
    assert_eq!(
        injected.attr("tokentap.tokens.estimated").as_bool(),
        Some(false)
    );
    let plain_span = route_span("plain", "req-1");
    assert_eq!(
        plain_span.attr("tokentap.tokens.estimated").as_bool(),
        Some(true),
        "without injection the count is estimated"
    );
    let declined_span = route_span("injecting", "req-2");
    assert_eq!(
        declined_span.attr("tokentap.tokens.estimated").as_bool(),
        Some(true),
        "include_usage=false was not overridden"
    );
}
