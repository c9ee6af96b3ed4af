//! Each OpenAI endpoint family through the proxy: the span is named after
//! the operation (`chat`, `text_completion`, `embeddings`), usage is exact,
//! and the Responses API's own failure event is an error.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

mod support;

use std::time::Duration;

use serde_json::json;
use support::client;
use support::names::*;
use support::rig::Rig;
use support::script::{self, StreamSpec};

fn body(v: serde_json::Value) -> Vec<u8> {
    serde_json::to_vec(&v).unwrap()
}

#[tokio::test]
async fn responses_api_stream_is_chat_with_exact_usage() {
    let spec = StreamSpec::tokens(6, Duration::from_millis(150), Duration::from_millis(10))
        .with_usage(21, 6)
        .model("gpt-4o-2024-08-06");
    let reply = script::openai_responses_sse(&spec, false);
    let want = reply.body_bytes();
    let mut rig = Rig::openai(reply).await;
    let req = rig.post(
        "/v1/responses",
        body(json!({"model": "gpt-4o", "input": "hi", "stream": true})),
    );
    let got = client::fetch(&rig.client, &req).await;
    support::assert_bytes_eq("responses stream", &got.body, &want);
    let span = rig.finish("chat gpt-4o").await;
    assert_eq!(span.str(OUTCOME), "complete");
    assert_eq!(
        span.num(INPUT_TOKENS),
        21.0,
        "input tokens from response.completed"
    );
    assert_eq!(
        span.num(OUTPUT_TOKENS),
        6.0,
        "output tokens from response.completed"
    );
    assert_eq!(span.str(RESPONSE_MODEL), "gpt-4o-2024-08-06");
    let ttfc = span.num(TTFC);
    assert!(
        (0.13..=0.45).contains(&ttfc),
        "response.created must not count as the first token: TTFT {ttfc} s, scripted 0.15 s"
    );
}

#[tokio::test]
async fn responses_api_failed_event_is_upstream_error() {
    let spec =
        StreamSpec::tokens(2, Duration::ZERO, Duration::from_millis(5)).model("gpt-4o-2024-08-06");
    let mut rig = Rig::openai(script::openai_responses_sse(&spec, true)).await;
    let req = rig.post(
        "/v1/responses",
        body(json!({"model": "gpt-4o-fail", "input": "hi", "stream": true})),
    );
    assert_eq!(client::fetch(&rig.client, &req).await.status, 200);
    let span = rig.finish("chat gpt-4o-fail").await;
    assert_eq!(
        span.str(OUTCOME),
        "upstream_error",
        "response.failed under HTTP 200 is an error"
    );
    assert!(!span.str(ERROR_TYPE).is_empty());
}

#[tokio::test]
async fn legacy_completions_stream_is_text_completion() {
    let spec = StreamSpec::tokens(5, Duration::from_millis(50), Duration::from_millis(10))
        .with_usage(4, 5)
        .model("gpt-3.5-turbo-instruct");
    let mut rig = Rig::openai(script::openai_completions_sse(&spec)).await;
    let req = rig.post(
        "/v1/completions",
        body(
            json!({"model": "gpt-3.5-turbo-instruct", "prompt": "Say", "stream": true,
                    "stream_options": {"include_usage": true}}),
        ),
    );
    assert_eq!(client::fetch(&rig.client, &req).await.status, 200);
    let span = rig.finish("text_completion gpt-3.5-turbo-instruct").await;
    assert_eq!(span.str(OPERATION), "text_completion");
    assert_eq!(span.num(OUTPUT_TOKENS), 5.0);
    assert_eq!(span.num(INPUT_TOKENS), 4.0);
    assert_eq!(span.str(OUTCOME), "complete");
}

#[tokio::test]
async fn embeddings_are_metered_with_input_tokens() {
    let mut rig = Rig::openai(script::openai_embeddings_json("text-embedding-3-small", 8)).await;
    let req = rig.post(
        "/v1/embeddings",
        body(json!({"model": "text-embedding-3-small", "input": "hello world"})),
    );
    assert_eq!(client::fetch(&rig.client, &req).await.status, 200);
    let span = rig.finish("embeddings text-embedding-3-small").await;
    assert_eq!(span.str(OPERATION), "embeddings");
    assert_eq!(span.num(INPUT_TOKENS), 8.0);
    assert_eq!(span.str(OUTCOME), "complete");
}

#[tokio::test]
async fn provider_is_detected_from_the_path_when_not_configured() {
    let mut rig = Rig::start(
        |ex| {
            if ex.path_and_query.ends_with("/messages") {
                script::anthropic_json(script::ANTHROPIC_RESPONSE_MODEL, "hi", (3, 1))
            } else {
                script::openai_chat_json("gpt-4o-mini", "hi", (3, 1))
            }
        },
        // A route without `provider`: detected per request from the path.
        |t, up| {
            t.raw_route(&format!(
                "[[routes]]\nname = \"auto\"\nprefix = \"/\"\nupstream = {}\n",
                support::proxy::q(up)
            ))
        },
    )
    .await;
    let r = rig.post(
        "/v1/messages",
        script::anthropic_request("claude-detect", false, None),
    );
    assert_eq!(client::fetch(&rig.client, &r).await.status, 200);
    let r = rig.post(
        "/v1/chat/completions",
        script::openai_request("gpt-detect", false, None),
    );
    assert_eq!(client::fetch(&rig.client, &r).await.status, 200);
    rig.proxy.stop().await;
    assert_eq!(
        rig.col
            .wait_span_named("chat claude-detect")
            .await
            .str(PROVIDER),
        "anthropic"
    );
    assert_eq!(
        rig.col
            .wait_span_named("chat gpt-detect")
            .await
            .str(PROVIDER),
        "openai"
    );
}
