//! Prefill vs decode, served throughput and proxy overhead (issue 14,
//! parts 2–4), against a scripted upstream with known timings, as a real
//! OTLP receiver decodes them: the prefill rate and prompt-size class,
//! the `gen_ai.client.inference.usage.*` token counters (which replaced
//! `tokentap.tokens`), requests in flight per route and
//! model, and `tokentap.proxy.overhead` (which must leave out the
//! upstream's scripted waits). Tolerances are those of the TTFT tests in
//! `telemetry_export.rs` (scripted 0.3 s TTFT accepted as 0.28–0.6 s).

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test
#![allow(clippy::disallowed_methods, reason = "tests wait with deadlines")]

mod support;

use std::time::Duration;

use serde_json::json;
use support::STEP_TIMEOUT;
use support::client::{self, Req};
use support::otlp::{Collector, MetricPoint};
use support::rig::Rig;
use support::script::{self, StreamSpec};

use support::CHAT;
const PREFILL: &str = "tokentap.prefill.tokens_per_second";
const DECODE: &str = "tokentap.decode.tokens_per_second";
const LOAD_CLASS: &str = "tokentap.load_class";
/// The usage counter of each kind of token.
const USAGE: [(&str, &str); 5] = [
    ("input", "gen_ai.client.inference.usage.input_tokens"),
    ("output", "gen_ai.client.inference.usage.output_tokens"),
    (
        "cache_read",
        "gen_ai.client.inference.usage.cache_read.input_tokens",
    ),
    (
        "cache_write",
        "gen_ai.client.inference.usage.cache_write.input_tokens",
    ),
    (
        "reasoning",
        "gen_ai.client.inference.usage.reasoning.output_tokens",
    ),
];
const OVERHEAD: &str = "tokentap.proxy.overhead";
const IN_FLIGHT: &str = "tokentap.requests.in_flight";
const SIZE_CLASS: &str = "tokentap.prompt.size_class";
const STAGE: &str = "tokentap.proxy.stage";
const SERVER_TTFT: &str = "gen_ai.server.time_to_first_token";
const TTFC_METRIC: &str = "gen_ai.client.inference.time_to_first_chunk";
const TTFC_SPAN: &str = "gen_ai.response.time_to_first_chunk";

/// Scripted TTFT (s) and the range the TTFT tests accept for it.
const TTFT: f64 = 0.3;
const TTFT_RANGE: (f64, f64) = (0.28, 0.6);

fn usage_counter(kind: &str) -> &'static str {
    USAGE
        .iter()
        .find(|(k, _)| *k == kind)
        .map(|(_, name)| *name)
        .unwrap_or_else(|| panic!("no usage counter for {kind}"))
}

/// Sum of the latest points of one kind's usage counter.
fn served(col: &Collector, kind: &str) -> f64 {
    col.latest(usage_counter(kind))
        .iter()
        .map(MetricPoint::number)
        .sum()
}

async fn wait_served(col: &Collector, kind: &str, want: f64) {
    let deadline = std::time::Instant::now() + STEP_TIMEOUT;
    while served(col, kind) != want && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        served(col, kind),
        want,
        "{kind}: points {:#?}",
        col.latest(usage_counter(kind))
    );
}

async fn overhead_point(col: &Collector, stage: &str, count: u64) -> MetricPoint {
    col.wait_point(STEP_TIMEOUT, OVERHEAD, |p| {
        p.attr_str(STAGE) == Some(stage) && p.hist().count >= count
    })
    .await
}

#[tokio::test]
async fn prefill_rate_prompt_class_tokens_served_and_overhead_follow_the_script() {
    // 3,000 input tokens, first token after 0.3 s: prefill 10,000 tokens/s;
    // 20 tokens 20 ms apart.
    let spec = StreamSpec::tokens(20, Duration::from_millis(300), Duration::from_millis(20))
        .with_usage(3000, 20);
    let rig = Rig::openai(script::openai_chat_sse(&spec)).await;
    for _ in 0..2 {
        let got = rig.chat("gpt-4o-mini", true).await;
        assert_eq!(got.status, 200);
    }
    let span = rig.col.wait_span_named("chat gpt-4o-mini").await;
    let ttfc = span.num(TTFC_SPAN);
    assert!(
        (TTFT_RANGE.0..=TTFT_RANGE.1).contains(&ttfc),
        "TTFT {ttfc} s, scripted {TTFT} s"
    );
    let (lo, hi) = (3000.0 / TTFT_RANGE.1, 3000.0 / TTFT_RANGE.0);
    let prefill = span.num(PREFILL);
    assert!(
        (lo..=hi).contains(&prefill),
        "span {PREFILL} = {prefill}, scripted 3000 / {TTFT} s = 10000 (accept {lo:.0}–{hi:.0})"
    );
    assert!(
        (prefill * ttfc - 3000.0).abs() < 1.0,
        "prefill rate is input tokens / TTFT exactly: {prefill} × {ttfc}"
    );
    assert_eq!(
        span.num(IN_FLIGHT),
        1.0,
        "one request at a time: in flight at start = itself"
    );
    assert_eq!(
        span.str(LOAD_CLASS),
        "1",
        "one request at a time: load class 1"
    );
    let request_overhead = span.num("tokentap.proxy.overhead.request");
    assert!(
        (0.0..0.25).contains(&request_overhead),
        "request overhead {request_overhead} s leaves out the upstream's 0.3 s"
    );

    let col = &rig.col;
    let p = col.wait_hist(PREFILL, 2).await;
    assert_eq!(p.unit, "{token}/s", "{PREFILL} unit");
    assert_eq!(p.attr_str(SIZE_CLASS), Some("le_8k"), "3,000 tokens: ≤ 8k");
    assert_eq!(p.attr_str(LOAD_CLASS), Some("1"), "{PREFILL} load class");
    let mean = p.hist().sum / p.hist().count as f64;
    assert!((lo..=hi).contains(&mean), "{PREFILL} mean {mean}");
    assert_eq!(p.hist().bounds.first(), Some(&10.0), "prefill buckets");
    for name in [SERVER_TTFT, TTFC_METRIC] {
        let t = col.wait_hist(name, 2).await;
        assert_eq!(
            t.attr_str(SIZE_CLASS),
            Some("le_8k"),
            "{name} is readable by prompt size"
        );
    }
    let tpot = col
        .wait_hist("gen_ai.server.time_per_output_token", 2)
        .await;
    assert_eq!(
        tpot.attr_str(SIZE_CLASS),
        None,
        "the class is on TTFT and prefill only"
    );
    assert_eq!(tpot.attr_str(LOAD_CLASS), None, "no load class on TPOT");
    let decode = col.wait_hist(DECODE, 2).await;
    assert_eq!(
        (decode.attr_str(LOAD_CLASS), decode.attr_str(SIZE_CLASS)),
        (Some("1"), None),
        "the decode rate has the load class, not the prompt size"
    );

    // Served throughput: counters, so rate() is tokens per second.
    wait_served(col, "input", 6000.0).await;
    wait_served(col, "output", 40.0).await;
    for (_, name) in USAGE {
        let tokens = col.latest(name);
        assert!(
            !tokens.is_empty()
                && tokens.iter().all(|p| p.unit == "{token}"
                    && p.attr_str("tokentap.route") == Some("openai")
                    && p.attr_str("gen_ai.token.modality") == Some("unknown")),
            "{name} points carry the route and modality: {tokens:#?}"
        );
    }
    assert!(
        col.latest("tokentap.tokens").is_empty(),
        "tokentap.tokens only under telemetry.semconv = legacy | both"
    );

    // Overhead: before the request left, and per sampled response frame;
    // neither includes the upstream's 0.3 s TTFT or 20 ms gaps.
    let req = overhead_point(col, "request", 2).await;
    assert_eq!(req.unit, "s");
    assert_eq!(req.hist().count, 2, "one request overhead per request");
    assert!(
        req.hist().max.unwrap() < 0.25,
        "request overhead {:?} s excludes the upstream",
        req.hist().max
    );
    let frames = overhead_point(col, "response_frame", 2).await;
    assert!(
        (2..=6).contains(&frames.hist().count),
        "about 24 frames per stream, one in 16 sampled (first included): {}",
        frames.hist().count
    );
    let max = frames.hist().max.unwrap();
    assert!(
        max < 0.02,
        "per-frame overhead {max} s is below the scripted 20 ms gaps"
    );
    eprintln!(
        "measured: TTFT {:.1} ms, prefill {prefill:.0} tok/s (scripted 10000), request overhead \
         max {:.3} ms, response-frame overhead max {:.3} ms over {} sampled frames",
        ttfc * 1e3,
        req.hist().max.unwrap() * 1e3,
        max * 1e3,
        frames.hist().count
    );
    assert_eq!(
        frames.attr_str("gen_ai.request.model"),
        None,
        "overhead is the proxy's: route and stage only"
    );
    rig.proxy.shutdown().await;
}

#[tokio::test]
async fn prompt_size_class_can_be_switched_off() {
    let spec = StreamSpec::tokens(3, Duration::from_millis(10), Duration::from_millis(5))
        .with_usage(200_000, 3);
    let rig = Rig::openai_with(
        script::openai_chat_sse(&spec),
        "",
        &[("telemetry", "prompt_size_class", "false")],
    )
    .await;
    let got = rig.chat("m", true).await;
    assert_eq!(got.status, 200);
    for name in [SERVER_TTFT, PREFILL] {
        let p = rig.col.wait_hist(name, 1).await;
        assert_eq!(p.attr_str(SIZE_CLASS), None, "{name}: class switched off");
        assert_eq!(p.attr_str(LOAD_CLASS), Some("1"), "{name}: load class on");
    }
    rig.proxy.shutdown().await;
}

#[tokio::test]
async fn load_class_can_be_switched_off() {
    let spec = StreamSpec::tokens(3, Duration::from_millis(10), Duration::from_millis(5))
        .with_usage(200, 3);
    let rig = Rig::openai_with(
        script::openai_chat_sse(&spec),
        "",
        &[("telemetry", "load_class", "false")],
    )
    .await;
    assert_eq!(rig.chat("m", true).await.status, 200);
    for name in [SERVER_TTFT, PREFILL, DECODE] {
        let p = rig.col.wait_hist(name, 1).await;
        assert_eq!(p.attr_str(LOAD_CLASS), None, "{name}: class switched off");
    }
    let span = rig.col.wait_span_named("chat m").await;
    assert_eq!(span.str(LOAD_CLASS), "1", "the span keeps its load class");
    rig.proxy.shutdown().await;
}

#[tokio::test]
async fn prompt_size_class_is_gt_128k_and_unknown_without_usage() {
    let big =
        StreamSpec::tokens(3, Duration::ZERO, Duration::from_millis(5)).with_usage(131_073, 3);
    let none = StreamSpec::tokens(3, Duration::ZERO, Duration::from_millis(5)).without_usage();
    let (big, none) = (
        script::openai_chat_sse(&big),
        script::openai_chat_sse(&none),
    );
    let rig = Rig::start(
        move |ex| {
            if String::from_utf8_lossy(&ex.body).contains("\"big\"") {
                big.clone()
            } else {
                none.clone()
            }
        },
        |t, up| t.route("openai", "/", up, "openai"),
    )
    .await;
    for model in ["big", "small"] {
        let got = rig.chat(model, true).await;
        assert_eq!(got.status, 200);
    }
    for (model, class) in [("big", "gt_128k"), ("small", "unknown")] {
        let p = rig
            .col
            .wait_point(STEP_TIMEOUT, SERVER_TTFT, |p| {
                p.attr_str("gen_ai.request.model") == Some(model)
            })
            .await;
        assert_eq!(p.attr_str(SIZE_CLASS), Some(class), "model {model}");
    }
    rig.proxy.shutdown().await;
}

#[tokio::test]
async fn in_flight_counts_concurrent_requests_to_the_same_route_and_model() {
    // Each stream lasts over 0.4 s, so three sent together overlap.
    let spec = StreamSpec::tokens(3, Duration::from_millis(400), Duration::from_millis(10));
    let rig = Rig::openai(script::openai_chat_sse(&spec)).await;
    let send = |model: &str| {
        let req: Req = rig.post(CHAT, script::openai_request(model, true, None));
        let client = rig.client.clone();
        async move { client::fetch(&client, &req).await.status.as_u16() }
    };
    let (a, b, c) = tokio::join!(send("m"), send("m"), send("m"));
    assert_eq!((a, b, c), (200, 200, 200));
    assert_eq!(send("other").await, 200, "then one to another model");
    let deadline = std::time::Instant::now() + STEP_TIMEOUT;
    let mut seen: Vec<f64>;
    loop {
        seen = rig
            .col
            .spans()
            .iter()
            .filter(|s| s.name == "chat m")
            .map(|s| s.num(IN_FLIGHT))
            .collect();
        if seen.len() == 3 || std::time::Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    seen.sort_by(f64::total_cmp);
    assert_eq!(
        seen,
        [1.0, 2.0, 3.0],
        "three overlapping requests found 0, 1 and 2 others in flight"
    );
    let mut classes: Vec<String> = rig
        .col
        .spans()
        .iter()
        .filter(|s| s.name == "chat m")
        .map(|s| s.str(LOAD_CLASS).to_owned())
        .collect();
    classes.sort();
    assert_eq!(classes, ["1", "2-8", "2-8"], "load classes of 1, 2 and 3");
    let other = rig.col.wait_span_named("chat other").await;
    assert_eq!(other.num(IN_FLIGHT), 1.0, "another model is its own count");
    let gauge = rig
        .col
        .wait_point(STEP_TIMEOUT, IN_FLIGHT, |p| {
            p.attr_str("gen_ai.request.model") == Some("m") && p.number() == 0.0
        })
        .await;
    assert_eq!(gauge.attr_str("tokentap.route"), Some("openai"));
    rig.proxy.shutdown().await;
}

#[tokio::test]
async fn whole_body_counts_cache_and_reasoning_tokens_and_overhead_leaves_out_the_upstream() {
    // The upstream takes 250 ms before its head; tokentap's own share of
    // that must stay far below it.
    let body = json!({
        "id": "chatcmpl-x", "object": "chat.completion", "created": 1_700_000_000,
        "model": "gpt-4o-mini",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"},
                     "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 9, "total_tokens": 109,
                  "prompt_tokens_details": {"cached_tokens": 40},
                  "completion_tokens_details": {"reasoning_tokens": 5}}
    });
    let reply = script::json_reply(200, body).head_delay(Duration::from_millis(250));
    let rig = Rig::openai(reply).await;
    let got = rig.chat("gpt-4o-mini", false).await;
    assert_eq!(got.status, 200);
    for (kind, want) in [
        ("input", 100.0),
        ("output", 9.0),
        ("cache_read", 40.0),
        ("reasoning", 5.0),
    ] {
        wait_served(&rig.col, kind, want).await;
    }
    let cache_write = rig.col.latest(usage_counter("cache_write"));
    assert_eq!(
        cache_write
            .iter()
            .map(MetricPoint::number)
            .collect::<Vec<_>>(),
        [0.0],
        "nothing reported: a 0, as the conventions ask ({cache_write:#?})"
    );
    let req = overhead_point(&rig.col, "request", 1).await;
    assert!(
        req.hist().max.unwrap() < 0.2,
        "request overhead {:?} s leaves out the 0.25 s head delay",
        req.hist().max
    );
    let frame = overhead_point(&rig.col, "response_frame", 1).await;
    assert_eq!(
        frame.hist().count,
        1,
        "a one-frame body has its one frame timed"
    );
    let span = rig.col.wait_span_named("chat gpt-4o-mini").await;
    // The pool wait is overhead too, with the span's very value.
    let pool = overhead_point(&rig.col, "pool_wait", 1).await;
    let waited = span.num("tokentap.upstream.pool.wait");
    assert!(
        (pool.hist().sum - waited).abs() < 1e-6 && waited < 0.2,
        "overhead stage pool_wait {:?} s = the span's pool wait {waited} s",
        pool.hist().sum
    );
    let prefill = span.num(PREFILL);
    assert!(
        (100.0 / 0.6..=100.0 / 0.25).contains(&prefill),
        "whole body: prefill = 100 input tokens / TTFT (the whole body, ≥ 0.25 s): {prefill}"
    );
    rig.proxy.shutdown().await;
}
