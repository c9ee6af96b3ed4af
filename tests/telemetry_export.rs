//! What the proxy exports over OTLP, decoded by a real receiver: span names
//! and attributes, measured timing against the script, token counts, metric
//! names/units/buckets, trace context, tenants, cardinality caps, secrets.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

mod support;

use std::collections::BTreeSet;
use std::time::Duration;

use support::STEP_TIMEOUT;
use support::client::{self, Req};
use support::names::*;
use support::otlp::Protocol;
use support::proxy::q;
use support::rig::Rig;
use support::script::{self, StreamSpec};

use support::CHAT;

/// Semantic-conventions bucket boundaries.
const DURATION_BUCKETS: [f64; 14] = [
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
];
const TOKEN_BUCKETS: [f64; 14] = [
    1.0, 4.0, 16.0, 64.0, 256.0, 1024.0, 4096.0, 16384.0, 65536.0, 262144.0, 1048576.0, 4194304.0,
    16777216.0, 67108864.0,
];
const TTFT_BUCKETS: [f64; 16] = [
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
];
const TPOT_BUCKETS: [f64; 13] = [
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5,
];

#[track_caller]
fn within_pct(what: &str, got: f64, want: f64, pct: f64) {
    let lo = want * (1.0 - pct);
    let hi = want * (1.0 + pct);
    assert!(
        got >= lo && got <= hi,
        "{what}: got {got}, want {want} ±{:.0}% [{lo}, {hi}]",
        pct * 100.0
    );
}

async fn streamed_rig(protocol: &str) -> (Rig, StreamSpec) {
    // Scripted TTFT 300 ms, then 20 tokens 20 ms apart: decode TPS = 19/0.38 = 50.
    let spec = StreamSpec::tokens(20, Duration::from_millis(300), Duration::from_millis(20))
        .with_usage(17, 20);
    let reply = script::openai_chat_sse(&spec);
    let rig = Rig::start_with(
        move |_| reply.clone(),
        protocol,
        |t, up| t.route("chat-route", "/", up, "openai"),
    )
    .await;
    (rig, spec)
}

#[tokio::test]
async fn streamed_chat_span_has_scripted_timing_and_exact_usage_grpc() {
    let (rig, spec) = streamed_rig("grpc").await;
    let got = rig.chat("gpt-4o-mini", true).await;
    assert_eq!(got.status, 200);
    assert_eq!(
        got.text().matches("\"tok").count(),
        spec.tokens.len(),
        "all tokens reached the client"
    );

    let span = rig.col.wait_span_named("chat gpt-4o-mini").await;
    assert_eq!(span.protocol, Protocol::Grpc, "exported over gRPC");
    assert_eq!(span.str(OPERATION), "chat");
    assert_eq!(span.str(PROVIDER), "openai");
    assert_eq!(span.str(REQUEST_MODEL), "gpt-4o-mini");
    assert_eq!(span.str(RESPONSE_MODEL), script::OPENAI_RESPONSE_MODEL);
    assert_eq!(
        span.attr(REQUEST_STREAM).as_bool(),
        Some(true),
        "gen_ai.request.stream = true"
    );
    assert_eq!(span.str(SERVER_ADDRESS), "127.0.0.1");
    assert_eq!(span.num(SERVER_PORT), f64::from(rig.up.addr.port()));
    assert_eq!(span.str(ROUTE), "chat-route");
    assert_eq!(span.str(OUTCOME), "complete");
    assert!(
        !span.attrs.contains_key(ERROR_TYPE),
        "no error.type on a complete request"
    );
    assert_eq!(
        span.num(INPUT_TOKENS),
        17.0,
        "input tokens from provider usage"
    );
    assert_eq!(
        span.num(OUTPUT_TOKENS),
        20.0,
        "output tokens from provider usage"
    );
    if let Some(v) = span.attrs.get(ESTIMATED) {
        assert_eq!(
            v.as_bool(),
            Some(false),
            "provider-reported usage is not estimated"
        );
    }

    let ttfc = span.num(TTFC);
    assert!(
        (0.28..=0.6).contains(&ttfc),
        "gen_ai.response.time_to_first_chunk = {ttfc} s, scripted TTFT is 0.3 s (accept 0.28–0.6)"
    );
    within_pct("span decode tokens/s", span.num(DECODE_TPS), 50.0, 0.4);
    eprintln!(
        "measured: TTFT {:.1} ms (scripted 300 ms, error {:+.1} ms); decode {:.1} tok/s (scripted 50)",
        ttfc * 1e3,
        (ttfc - 0.3) * 1e3,
        span.num(DECODE_TPS)
    );
    assert!(
        span.events
            .iter()
            .any(|e| e.name == "first_token" || e.name.contains("first")),
        "span should carry a first-token event; events: {:?}",
        span.events.iter().map(|e| &e.name).collect::<Vec<_>>()
    );
    assert_eq!(span.kind, 3, "span kind CLIENT");
    assert_eq!(span.num("http.response.status_code"), 200.0);
    assert_eq!(span.str("tokentap.tokens.source"), "provider");
    let ttfb = span.num("tokentap.ttfb");
    assert!(
        ttfb < ttfc,
        "time to first byte {ttfb} s precedes the first token {ttfc} s (role chunk comes first)"
    );
    let stall = span.num("tokentap.max_stall");
    assert!(
        (0.015..0.2).contains(&stall),
        "max stall {stall} s, scripted gaps are 0.02 s"
    );
    assert_eq!(
        span.attr("gen_ai.response.finish_reasons"),
        &support::otlp::Val::Array(vec![support::otlp::Val::Str("stop".into())]),
        "finish reasons"
    );
    let dur = (span.end_ns - span.start_ns) as f64 / 1e9;
    assert!(
        (0.6..3.0).contains(&dur),
        "span duration {dur} s should cover the ~0.68 s stream"
    );

    // Metrics: names, units, buckets, values.
    let m = &rig.col;
    let ttft = m.wait_hist(SERVER_TTFT, 1).await;
    assert_eq!(ttft.unit, "s", "{SERVER_TTFT} unit");
    assert_eq!(
        ttft.hist().bounds,
        TTFT_BUCKETS.to_vec(),
        "{SERVER_TTFT} uses the semconv buckets"
    );
    let mean = ttft.hist().sum / ttft.hist().count as f64;
    assert!(
        (0.28..=0.6).contains(&mean),
        "{SERVER_TTFT} value {mean} s, scripted 0.3 s"
    );
    assert_eq!(ttft.attr_str(OPERATION), Some("chat"));
    assert_eq!(ttft.attr_str(PROVIDER), Some("openai"));
    assert_eq!(ttft.attr_str(REQUEST_MODEL), Some("gpt-4o-mini"));

    let dur = m.wait_hist(OP_DURATION, 1).await;
    assert_eq!(dur.unit, "s", "{OP_DURATION} unit");
    assert_eq!(
        dur.hist().bounds,
        DURATION_BUCKETS.to_vec(),
        "{OP_DURATION} uses the semconv buckets"
    );

    for (name, want) in [(OP_INPUT_TOKENS, 17.0), (OP_OUTPUT_TOKENS, 20.0)] {
        let p = m.wait_hist(name, 1).await;
        assert_eq!(p.unit, "{token}", "{name} unit");
        assert_eq!(
            p.hist().bounds,
            TOKEN_BUCKETS.to_vec(),
            "{name} uses the semconv buckets"
        );
        assert_eq!((p.hist().count, p.hist().sum), (1, want), "{name}");
    }
    for (name, want) in [(USAGE_INPUT, 17.0), (USAGE_OUTPUT, 20.0)] {
        let p = m.wait_point(STEP_TIMEOUT, name, |_| true).await;
        assert_eq!(p.unit, "{token}", "{name} unit");
        assert_eq!(p.number(), want, "{name}");
        assert_eq!(p.attr_str(TOKEN_MODALITY), Some("unknown"), "{name}");
        assert_eq!(p.attr_str(TOKEN_TYPE), None, "{name} has no token type");
    }
    // Default names only: the v1.41.0 ones and the tokentap counters the
    // usage counters replaced stay behind `telemetry.semconv`.
    let names = m.metric_names();
    for old in [
        OPERATION_DURATION,
        TOKEN_USAGE,
        "gen_ai.client.operation.time_to_first_chunk",
        "gen_ai.client.operation.time_per_output_chunk",
        "tokentap.tokens",
        "tokentap.token.modality.usage",
    ] {
        assert!(!names.iter().any(|n| n == old), "{old} exported: {names:?}");
    }
    for new in [
        "gen_ai.client.inference.time_to_first_chunk",
        "gen_ai.client.inference.time_per_output_chunk",
    ] {
        assert!(names.iter().any(|n| n == new), "{new} missing: {names:?}");
    }

    let tpot = m.wait_hist(SERVER_TPOT, 1).await;
    assert_eq!(tpot.unit, "s");
    assert_eq!(
        tpot.hist().bounds,
        TPOT_BUCKETS.to_vec(),
        "{SERVER_TPOT} uses the semconv buckets"
    );
    within_pct(
        "time per output token",
        tpot.hist().sum / tpot.hist().count as f64,
        0.02,
        0.4,
    );

    let tps = m.wait_hist(DECODE_TPS_METRIC, 1).await;
    within_pct(
        "decode tokens/s metric",
        tps.hist().sum / tps.hist().count as f64,
        50.0,
        0.4,
    );

    let gap = m.wait_hist(CHUNK_GAP, 19).await;
    assert_eq!(gap.unit, "s", "{CHUNK_GAP} unit");
    let fine = gap
        .hist()
        .bounds
        .iter()
        .filter(|b| (0.001..=0.05).contains(*b))
        .count();
    assert!(
        fine >= 5,
        "{CHUNK_GAP} needs buckets fine enough for 1–50 ms gaps: {:?}",
        gap.hist().bounds
    );
    let gmean = gap.hist().sum / gap.hist().count as f64;
    assert!(
        (0.01..0.06).contains(&gmean),
        "mean chunk gap {gmean} s, scripted 0.02 s"
    );

    let req = m
        .wait_point(STEP_TIMEOUT, REQUESTS, |p| {
            p.attr_str(OUTCOME) == Some("complete")
        })
        .await;
    assert!(req.number() >= 1.0, "{REQUESTS} counts the request");
    rig.proxy.shutdown().await;
}

#[tokio::test]
async fn streamed_chat_exports_over_http_protobuf() {
    let (rig, _) = streamed_rig("http/protobuf").await;
    let got = rig.chat("gpt-4o-mini", true).await;
    assert_eq!(got.status, 200);
    let span = rig.col.wait_span_named("chat gpt-4o-mini").await;
    assert_eq!(
        span.protocol,
        Protocol::HttpProtobuf,
        "exported over http/protobuf"
    );
    assert_eq!(span.str(OUTCOME), "complete");
    let ttfc = span.num(TTFC);
    assert!(
        (0.28..=0.6).contains(&ttfc),
        "time_to_first_chunk {ttfc} s, scripted 0.3 s"
    );
    let p = rig.col.wait_hist(OP_DURATION, 1).await;
    assert_eq!(p.protocol, Protocol::HttpProtobuf);
    assert_eq!(
        span.resource.get("service.name").and_then(|v| v.as_str()),
        Some("tokentap-test"),
        "service name"
    );
    rig.proxy.shutdown().await;
}

/// `telemetry.semconv = "legacy"`: the v1.41.0 names and tokentap's own
/// token counters, with the same figures, and none of the current names.
#[tokio::test]
async fn legacy_semconv_exports_the_old_names() {
    let spec = StreamSpec::tokens(5, Duration::from_millis(50), Duration::from_millis(10))
        .with_usage(17, 5);
    let reply = script::openai_chat_sse(&spec);
    let rig = Rig::start(
        move |_| reply.clone(),
        |t, up| {
            t.set("telemetry", "semconv", &q("legacy"))
                .route("chat-route", "/", up, "openai")
        },
    )
    .await;
    let got = rig.chat("gpt-4o-mini", true).await;
    assert_eq!(got.status, 200);
    let m = &rig.col;
    let dur = m.wait_hist(OPERATION_DURATION, 1).await;
    assert_eq!(dur.attr_str(OPERATION), Some("chat"));
    let usage = m.latest(TOKEN_USAGE);
    let sum = |kind: &str| {
        usage
            .iter()
            .find(|p| p.attr_str(TOKEN_TYPE) == Some(kind))
            .map(|p| p.hist().sum)
    };
    assert_eq!(
        (sum("input"), sum("output")),
        (Some(17.0), Some(5.0)),
        "{TOKEN_USAGE}: {usage:#?}"
    );
    let served: f64 = m
        .latest("tokentap.tokens")
        .iter()
        .filter(|p| p.attr_str(TOKEN_TYPE) == Some("output"))
        .map(|p| p.number())
        .sum();
    assert_eq!(served, 5.0, "tokentap.tokens output");
    let names = m.metric_names();
    for old in [
        "gen_ai.client.operation.time_to_first_chunk",
        "gen_ai.client.operation.time_per_output_chunk",
    ] {
        assert!(names.iter().any(|n| n == old), "{old} missing: {names:?}");
    }
    for new in [
        OP_DURATION,
        USAGE_INPUT,
        USAGE_OUTPUT,
        OP_INPUT_TOKENS,
        OP_OUTPUT_TOKENS,
        "gen_ai.client.inference.time_to_first_chunk",
        "gen_ai.client.inference.time_per_output_chunk",
    ] {
        assert!(!names.iter().any(|n| n == new), "{new} exported: {names:?}");
    }
    rig.proxy.shutdown().await;
}

#[tokio::test]
async fn anthropic_stream_usage_and_timing() {
    let spec = StreamSpec::tokens(10, Duration::from_millis(200), Duration::from_millis(20))
        .with_usage(25, 10)
        .model(script::ANTHROPIC_RESPONSE_MODEL);
    let rig = Rig::anthropic(script::anthropic_sse(&spec)).await;
    let req = rig.post(
        "/v1/messages",
        script::anthropic_request("claude-3-5-haiku-latest", true, None),
    );
    let got = client::fetch(&rig.client, &req).await;
    assert_eq!(got.status, 200);
    let span = rig
        .col
        .wait_span_named("chat claude-3-5-haiku-latest")
        .await;
    assert_eq!(span.str(PROVIDER), "anthropic");
    assert_eq!(span.str(RESPONSE_MODEL), script::ANTHROPIC_RESPONSE_MODEL);
    assert_eq!(span.str(OUTCOME), "complete");
    assert_eq!(
        span.num(INPUT_TOKENS),
        25.0,
        "input tokens from message_start"
    );
    assert_eq!(
        span.num(OUTPUT_TOKENS),
        10.0,
        "output tokens from the last message_delta (cumulative)"
    );
    let ttfc = span.num(TTFC);
    assert!(
        (0.18..=0.5).contains(&ttfc),
        "TTFT {ttfc} s: message_start/ping must not count as the first token (scripted 0.2 s)"
    );
    within_pct("anthropic decode tokens/s", span.num(DECODE_TPS), 50.0, 0.4);
    rig.proxy.shutdown().await;
}

#[tokio::test]
async fn tokens_without_usage_are_estimated_from_chunks() {
    let spec = StreamSpec::tokens(7, Duration::ZERO, Duration::from_millis(5)).without_usage();
    let rig = Rig::openai(script::openai_chat_sse(&spec)).await;
    let mut body: serde_json::Value =
        serde_json::from_slice(&script::openai_request("m-est", true, None)).unwrap();
    body.as_object_mut().unwrap().remove("stream_options");
    let got = client::fetch(
        &rig.client,
        &rig.post(CHAT, serde_json::to_vec(&body).unwrap()),
    )
    .await;
    assert_eq!(got.status, 200);
    let span = rig.col.wait_span_named("chat m-est").await;
    assert_eq!(
        span.num(OUTPUT_TOKENS),
        7.0,
        "estimated output tokens = 7 content chunks"
    );
    assert_eq!(
        span.attr(ESTIMATED).as_bool(),
        Some(true),
        "counts without provider usage are flagged estimated"
    );
    rig.proxy.shutdown().await;
}

#[tokio::test]
async fn non_streaming_has_ttft_equal_to_body_time_and_exact_usage() {
    let reply = script::openai_chat_json("gpt-4o-mini", "Hello.", (9, 2))
        .head_delay(Duration::from_millis(250));
    let rig = Rig::openai(reply).await;
    let got = rig.chat("m-json", false).await;
    assert_eq!(got.status, 200);
    let span = rig.col.wait_span_named("chat m-json").await;
    assert_eq!(
        span.attr(REQUEST_STREAM).as_bool(),
        Some(false),
        "gen_ai.request.stream = false"
    );
    assert_eq!(span.num(INPUT_TOKENS), 9.0);
    assert_eq!(span.num(OUTPUT_TOKENS), 2.0);
    assert_eq!(span.str(OUTCOME), "complete");
    if let Some(t) = span.attrs.get(TTFC).and_then(|v| v.as_f64()) {
        assert!(
            (0.23..=0.6).contains(&t),
            "non-streaming TTFT = time to the whole body (~0.25 s), got {t}"
        );
    }
    rig.proxy.shutdown().await;
}

#[tokio::test]
async fn client_traceparent_is_continued_and_injected_upstream() {
    let rig = Rig::openai(script::openai_chat_json("m", "ok", (1, 1))).await;
    let trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
    let parent = "00f067aa0ba902b7";
    let req = rig
        .post(CHAT, script::openai_request("m-trace", false, None))
        .header("traceparent", &format!("00-{trace_id}-{parent}-01"));
    let got = client::fetch(&rig.client, &req).await;
    assert_eq!(got.status, 200);
    let span = rig.col.wait_span_named("chat m-trace").await;
    assert_eq!(
        span.trace_id, trace_id,
        "the proxy's span continues the client's trace"
    );
    assert_eq!(
        span.parent_span_id, parent,
        "the proxy's span is a child of the client's span"
    );
    let up_tp = rig
        .up
        .only()
        .await
        .header("traceparent")
        .expect("upstream request carries traceparent");
    let parts: Vec<&str> = up_tp.split('-').collect();
    assert_eq!(parts.len(), 4, "traceparent format: {up_tp}");
    assert_eq!(
        parts[1], trace_id,
        "upstream traceparent keeps the trace id"
    );
    assert_ne!(
        parts[2], parent,
        "upstream traceparent's parent is the proxy's span, not the client's"
    );
    let ids: BTreeSet<String> = rig
        .col
        .spans()
        .into_iter()
        .filter(|s| s.trace_id == trace_id)
        .map(|s| s.span_id)
        .collect();
    assert!(
        ids.contains(parts[2]),
        "upstream traceparent parent {} should be an exported span of the trace: {ids:?}",
        parts[2]
    );
    rig.proxy.shutdown().await;
}

#[tokio::test]
async fn without_traceparent_a_new_root_trace_is_started() {
    let rig = Rig::openai(script::openai_chat_json("m", "ok", (1, 1))).await;
    rig.chat("m-root", false).await;
    let span = rig.col.wait_span_named("chat m-root").await;
    assert!(
        span.parent_span_id.is_empty(),
        "a request without traceparent gets a root span"
    );
    assert_eq!(span.trace_id.len(), 32);
    let tp = rig
        .up
        .only()
        .await
        .header("traceparent")
        .expect("traceparent injected upstream");
    assert!(
        tp.contains(&span.trace_id),
        "upstream traceparent {tp} carries the span's trace id"
    );
    rig.proxy.shutdown().await;
}

async fn tenant_of(
    config: impl FnOnce(support::proxy::Toml) -> support::proxy::Toml,
    req: impl FnOnce(&Rig) -> Req,
    model: &str,
) -> String {
    let rig = Rig::start(
        |ex| script::openai_chat_json(ex.json()["model"].as_str().unwrap_or("m"), "ok", (1, 1)),
        |t, up| config(t.route("openai", "/", up, "openai")),
    )
    .await;
    let got = client::fetch(&rig.client, &req(&rig)).await;
    assert_eq!(got.status, 200);
    let span = rig.col.wait_span_named(&format!("chat {model}")).await;
    let t = span.str(TENANT).to_owned();
    let p = rig.col.wait_point(STEP_TIMEOUT, REQUESTS, |_| true).await;
    if let Some(mt) = p.attr_str(TENANT) {
        assert_eq!(mt, t, "{REQUESTS} carries the same tenant as the span");
    }
    rig.proxy.shutdown().await;
    t
}

#[tokio::test]
async fn tenant_from_header_then_body_then_api_key() {
    let order = |t: support::proxy::Toml| {
        t.set("tenant", "sources", "[\"header\", \"body\", \"api_key\"]")
            .set("tenant", "salt", &q("pepper"))
    };
    let t = tenant_of(
        order,
        |r| {
            r.post(
                CHAT,
                script::openai_request("m-t1", false, Some("body-user")),
            )
            .header("x-tenant-id", "team-a")
            .header("authorization", "Bearer sk-tenantkey-A")
        },
        "m-t1",
    )
    .await;
    assert_eq!(t, "team-a", "the header wins when first in order");

    let t = tenant_of(
        order,
        |r| {
            r.post(
                CHAT,
                script::openai_request("m-t2", false, Some("body-user")),
            )
            .header("authorization", "Bearer sk-tenantkey-A")
        },
        "m-t2",
    )
    .await;
    assert_eq!(t, "body-user", "the body's `user` is used when no header");

    let k1 = tenant_of(
        order,
        |r| {
            r.post(CHAT, script::openai_request("m-t3", false, None))
                .header("authorization", "Bearer sk-tenantkey-A")
        },
        "m-t3",
    )
    .await;
    let k1b = tenant_of(
        order,
        |r| {
            r.post(CHAT, script::openai_request("m-t4", false, None))
                .header("authorization", "Bearer sk-tenantkey-A")
        },
        "m-t4",
    )
    .await;
    let k2 = tenant_of(
        order,
        |r| {
            r.post(CHAT, script::openai_request("m-t5", false, None))
                .header("x-api-key", "sk-tenantkey-B")
        },
        "m-t5",
    )
    .await;
    assert!(
        !k1.contains("tenantkey"),
        "API-key tenant {k1:?} must not contain the key"
    );
    assert_eq!(k1, k1b, "the same key gives the same tenant");
    assert_ne!(k1, k2, "different keys give different tenants");
}

#[tokio::test]
async fn anthropic_tenant_from_metadata_user_id() {
    let rig = Rig::start(
        |_| script::anthropic_json(script::ANTHROPIC_RESPONSE_MODEL, "ok", (1, 1)),
        |t, up| {
            t.route("anthropic", "/", up, "anthropic")
                .set("tenant", "sources", "[\"body\"]")
        },
    )
    .await;
    let req = rig.post(
        "/v1/messages",
        script::anthropic_request("c-tenant", false, Some("anthropic-user-7")),
    );
    client::fetch(&rig.client, &req).await;
    let span = rig.col.wait_span_named("chat c-tenant").await;
    assert_eq!(span.str(TENANT), "anthropic-user-7");
    rig.proxy.shutdown().await;
}

#[tokio::test]
async fn model_cardinality_is_capped_in_metrics_not_in_spans() {
    let rig = Rig::start(
        |ex| script::openai_chat_json(ex.json()["model"].as_str().unwrap_or("m"), "ok", (1, 1)),
        |t, up| {
            t.route("openai", "/", up, "openai")
                .set("telemetry", "max_models", "2")
        },
    )
    .await;
    let models = ["cap-a", "cap-b", "cap-c", "cap-d", "cap-e"];
    for m in models {
        let got = rig.chat(m, false).await;
        assert_eq!(got.status, 200);
    }
    for m in models {
        let s = rig.col.wait_span_named(&format!("chat {m}")).await;
        assert_eq!(s.str(REQUEST_MODEL), m, "spans always carry the real model");
    }
    let p = rig
        .col
        .wait_point(STEP_TIMEOUT, OP_DURATION, |p| {
            p.attr_str(REQUEST_MODEL) == Some("other")
        })
        .await;
    assert_eq!(p.unit, "s");
    let seen: BTreeSet<String> = rig
        .col
        .latest(OP_DURATION)
        .iter()
        .filter_map(|p| p.attr_str(REQUEST_MODEL).map(str::to_owned))
        .collect();
    let real: Vec<_> = seen.iter().filter(|m| *m != "other").collect();
    assert!(
        real.len() <= 2,
        "at most max_models=2 distinct model values before `other`: {seen:?}"
    );
    let total: u64 = rig
        .col
        .latest(OP_DURATION)
        .iter()
        .map(|p| p.hist().count)
        .sum();
    assert_eq!(
        total, 5,
        "all 5 requests counted across the capped attribute sets"
    );
    rig.proxy.shutdown().await;
}

fn gzip_sse(spec: &StreamSpec) -> support::upstream::Reply {
    let compressed = script::gzip(&script::openai_chat_sse(spec).body_bytes());
    let half = compressed.len() / 2;
    support::upstream::Reply::new(200)
        .header("content-type", "text/event-stream")
        .header("content-encoding", "gzip")
        .send(compressed[..half].to_vec())
        .sleep(Duration::from_millis(20))
        .send(compressed[half..].to_vec())
}

#[tokio::test]
async fn gzip_stream_is_metered_through_decompression() {
    let spec = StreamSpec::tokens(10, Duration::ZERO, Duration::from_millis(2)).with_usage(5, 10);
    let mut rig = Rig::openai(gzip_sse(&spec)).await;
    let got = rig.chat("m-gz", true).await;
    assert_eq!(
        got.headers.get("content-encoding").map(|v| v.as_bytes()),
        Some(&b"gzip"[..])
    );
    let span = rig.finish("chat m-gz").await;
    assert_eq!(span.str(OUTCOME), "complete");
    assert_eq!(
        span.num(OUTPUT_TOKENS),
        10.0,
        "usage read from the decompressed metering copy"
    );
    assert!(
        !span.attrs.contains_key("tokentap.unmetered"),
        "a decodable gzip body is metered"
    );
}

#[tokio::test]
async fn undecodable_body_is_unmetered_not_zero_tokens() {
    let reply = support::upstream::Reply::new(200)
        .header("content-type", "text/event-stream")
        .header("content-encoding", "gzip")
        .send("this is not gzip at all, just bytes that claim to be");
    let want = reply.body_bytes();
    let mut rig = Rig::openai(reply).await;
    let got = rig.chat("m-ungz", true).await;
    support::assert_bytes_eq("undecodable body still passes through", &got.body, &want);
    let span = rig.finish("chat m-ungz").await;
    assert_eq!(
        span.str("tokentap.unmetered"),
        "encoding",
        "a body that cannot be decoded is recorded as unmetered"
    );
    assert!(
        !span.attrs.contains_key(OUTPUT_TOKENS),
        "an unmetered body must not report output tokens (never zero): {:?}",
        span.attrs.get(OUTPUT_TOKENS)
    );
}

#[tokio::test]
async fn unknown_content_type_is_unmetered() {
    let reply = support::upstream::Reply::new(200)
        .header("content-type", "application/octet-stream")
        .send(vec![0u8, 1, 2, 3]);
    let mut rig = Rig::openai(reply).await;
    let got = rig.chat("m-bin", true).await;
    assert_eq!(got.body, vec![0u8, 1, 2, 3]);
    let span = rig.finish("chat m-bin").await;
    assert_eq!(span.str("tokentap.unmetered"), "unknown_format");
}

#[tokio::test]
async fn request_bodies_over_the_sniff_limit_are_forwarded_unread() {
    let mut rig = Rig::start(
        |_| script::openai_chat_json("m", "ok", (1, 1)),
        |t, up| {
            t.route("openai", "/", up, "openai")
                .set("sniff", "max_body_bytes", "64")
        },
    )
    .await;
    let mut v: serde_json::Value =
        serde_json::from_slice(&script::openai_request("m-big", false, None)).unwrap();
    v["messages"][0]["content"] = serde_json::json!("x".repeat(4096));
    let body = serde_json::to_vec(&v).unwrap();
    let got = client::fetch(&rig.client, &rig.post(CHAT, body.clone())).await;
    assert_eq!(got.status, 200);
    support::assert_bytes_eq(
        "oversized request body reaches the upstream intact",
        &rig.up.only().await.body,
        &body,
    );
    rig.proxy.stop().await;
    let span = rig
        .col
        .wait_span(STEP_TIMEOUT, "with tokentap.request.body", |s| {
            s.attrs.contains_key("tokentap.request.body")
        })
        .await;
    assert_eq!(
        span.str("tokentap.request.body"),
        "too_large",
        "span {:?}",
        span.name
    );
}

#[tokio::test]
async fn routes_match_by_host_and_prefix() {
    let mut rig = Rig::start(
        |_| script::openai_chat_json("m", "ok", (1, 1)),
        |t, up| {
            t.route_host("by-host", "/", "llm.internal.test", up, "openai")
                .route("fallback", "/", up, "openai")
        },
    )
    .await;
    let req = rig
        .post(CHAT, script::openai_request("m-host", false, None))
        .header("host", "LLM.internal.test:8080");
    assert_eq!(client::fetch(&rig.client, &req).await.status, 200);
    let req = rig.post(CHAT, script::openai_request("m-nohost", false, None));
    assert_eq!(client::fetch(&rig.client, &req).await.status, 200);
    let up_host = rig.up.nth(1).await.header("host");
    assert_eq!(
        up_host.as_deref(),
        Some(rig.up.addr.to_string().as_str()),
        "Host rewritten to the upstream"
    );
    rig.proxy.stop().await;
    assert_eq!(
        rig.col.wait_span_named("chat m-host").await.str(ROUTE),
        "by-host",
        "Host match (case-insensitive, port ignored)"
    );
    assert_eq!(
        rig.col.wait_span_named("chat m-nohost").await.str(ROUTE),
        "fallback"
    );
}

/// `routes[].labels` go on every span of the route as
/// `tokentap.route.label.<key>`, and on no metric point; an unlabelled
/// route's spans carry none.
#[tokio::test]
async fn route_labels_are_span_attributes_never_metric_labels() {
    let rig = Rig::start(
        |_| script::openai_chat_json("m", "ok", (3, 1)),
        |t, up| {
            t.route_with(
                "labelled",
                "/lab",
                up,
                "openai",
                r#"labels = { hardware = "H100", quantization = "fp8", "serving.stack" = "vllm 0.6" }"#,
            )
            .route("plain", "/", up, "openai")
        },
    )
    .await;
    let labelled = rig.post(
        &format!("/lab{CHAT}"),
        script::openai_request("m-labelled", false, None),
    );
    assert_eq!(client::fetch(&rig.client, &labelled).await.status, 200);
    assert_eq!(rig.chat("m-plain", false).await.status, 200);
    let span = rig.col.wait_span_named("chat m-labelled").await;
    let labels: Vec<(&str, &str)> = (span.attrs.iter())
        .filter(|(k, _)| k.starts_with("tokentap.route.label."))
        .map(|(k, v)| (k.as_str(), v.as_str().unwrap_or("(not a string)")))
        .collect();
    assert_eq!(
        labels,
        [
            ("tokentap.route.label.hardware", "H100"),
            ("tokentap.route.label.quantization", "fp8"),
            ("tokentap.route.label.serving.stack", "vllm 0.6"),
        ],
        "every label, as a string attribute"
    );
    assert_eq!(span.str(ROUTE), "labelled");
    let plain = rig.col.wait_span_named("chat m-plain").await;
    assert_eq!(plain.str(ROUTE), "plain");
    assert!(
        !plain
            .attrs
            .keys()
            .any(|k| k.starts_with("tokentap.route.label.")),
        "no labels on an unlabelled route's span: {:?}",
        plain.attrs
    );
    let labelled_point = rig
        .col
        .wait_point(STEP_TIMEOUT, OP_DURATION, |p| {
            p.attr_str(ROUTE) == Some("labelled")
        })
        .await;
    assert_eq!(labelled_point.hist().count, 1);
    let points = rig.col.metric_points();
    assert!(!points.is_empty());
    for p in &points {
        let strings = p.all_strings();
        assert!(
            !strings
                .iter()
                .any(|s| s.contains("route.label") || s == "H100"),
            "metric {} carries a route label: {:?}",
            p.name,
            p.attrs
        );
    }
    rig.proxy.shutdown().await;
}

#[tokio::test]
async fn concurrent_streams_each_yield_one_span_and_exact_bytes() {
    let mut rig = Rig::start(
        |ex| {
            let model = ex.json()["model"].as_str().unwrap_or("m").to_owned();
            let spec = StreamSpec::tokens(8, Duration::from_millis(30), Duration::from_millis(10))
                .model(&model);
            script::openai_chat_sse(&spec)
        },
        |t, up| t.route("openai", "/", up, "openai"),
    )
    .await;
    let h2 = client::h2c();
    let mut tasks = Vec::new();
    for i in 0..24 {
        // Half share one HTTP/2 connection, half use their own HTTP/1.1 ones.
        let c = if i % 2 == 0 {
            h2.clone()
        } else {
            client::http1()
        };
        let req = rig.post(CHAT, script::openai_request(&format!("cc-{i}"), true, None));
        tasks.push(tokio::spawn(async move { client::fetch(&c, &req).await }));
    }
    let mut bodies = Vec::new();
    for t in tasks {
        bodies.push(
            support::within(STEP_TIMEOUT, "a concurrent stream", t)
                .await
                .unwrap(),
        );
    }
    rig.proxy.stop().await;
    let exchanges = rig.up.exchanges();
    assert_eq!(
        exchanges.len(),
        24,
        "every request reached the upstream once"
    );
    for (i, got) in bodies.iter().enumerate() {
        let model = format!("cc-{i}");
        let ex = exchanges
            .iter()
            .find(|e| e.json()["model"] == model.as_str())
            .unwrap_or_else(|| panic!("upstream saw no request for {model}"));
        support::assert_bytes_eq(&format!("stream {model}"), &got.body, &ex.sent());
        let span = rig.col.wait_span_named(&format!("chat {model}")).await;
        assert_eq!(span.str(OUTCOME), "complete", "{model}");
        assert_eq!(span.num(OUTPUT_TOKENS), 8.0, "{model}");
    }
    let spans = rig.col.spans();
    assert_eq!(spans.len(), 24, "exactly one span per request, no more");
    rig.assert_no_active_streams();
}

/// One span export path: the same request exported over gRPC and over
/// http/protobuf reaches the receiver as the same span (every attribute
/// key and type, every string, bool and integer value, the events, kind,
/// status and resource), apart from what was measured (times, the
/// scripted upstream's port).
#[tokio::test]
async fn both_protocols_export_identical_spans() {
    use support::otlp::{SpanRec, Val};
    async fn one(protocol: &str) -> SpanRec {
        let (rig, _) = streamed_rig(protocol).await;
        let got = rig.chat("gpt-4o-mini", true).await;
        assert_eq!(got.status, 200);
        let span = rig.col.wait_span_named("chat gpt-4o-mini").await;
        rig.proxy.shutdown().await;
        span
    }
    fn shape(v: &Val) -> std::mem::Discriminant<Val> {
        std::mem::discriminant(v)
    }
    let (grpc, http) = (one("grpc").await, one("http/protobuf").await);
    assert_eq!(grpc.protocol, Protocol::Grpc);
    assert_eq!(http.protocol, Protocol::HttpProtobuf);
    let keys = |s: &SpanRec| s.attrs.keys().cloned().collect::<BTreeSet<_>>();
    assert_eq!(keys(&grpc), keys(&http), "the same attribute keys");
    for (k, g) in &grpc.attrs {
        let h = &http.attrs[k];
        assert_eq!(shape(g), shape(h), "{k}: the same type ({g:?} vs {h:?})");
        if k != SERVER_PORT && !matches!(g, Val::Double(_)) {
            assert_eq!(g, h, "{k}: the same value");
        }
    }
    let events = |s: &SpanRec| {
        (s.events.iter())
            .map(|e| (e.name.clone(), e.attrs.keys().cloned().collect::<Vec<_>>()))
            .collect::<Vec<_>>()
    };
    assert_eq!(events(&grpc), events(&http), "the same events");
    assert_eq!(
        (
            grpc.kind,
            grpc.status_code,
            &grpc.status_message,
            &grpc.trace_state
        ),
        (
            http.kind,
            http.status_code,
            &http.status_message,
            &http.trace_state
        ),
        "kind, status and trace state"
    );
    assert_eq!(grpc.resource, http.resource, "the same resource");
}
