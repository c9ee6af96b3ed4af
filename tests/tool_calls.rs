//! Tool calls through the real server: a scripted Anthropic upstream
//! answers with tool_use and web search (streamed, and whole), and the
//! span (OTLP receiver) carries the call count, the names, the web
//! searches and their fee inside the cost; `/metrics` counts calls per
//! tool name, with names past the cardinality cap under `other`.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

mod support;

use std::time::{Duration, SystemTime};

use support::client;
use support::inspect::scrape;
use support::proxy::q;
use support::rig::Rig;
use support::upstream::{Reply, Step};
use tokentap::pricing::{PriceBook, Priced, Request};
use tokentap::providers::{ProviderKind, Usage};

const MESSAGES: &str = "/v1/messages";
const MODEL: &str = "claude-sonnet-4-5-20250929";

fn fixture(name: &str) -> Vec<u8> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    std::fs::read(path.join(name)).unwrap()
}

/// The fixture's SSE events, one data frame each, a little apart.
fn streamed(body: &[u8]) -> Reply {
    let text = String::from_utf8(body.to_vec()).unwrap();
    let mut r = Reply::new(200).header("content-type", "text/event-stream; charset=utf-8");
    for event in text.split_inclusive("\n\n") {
        r.steps.push(Step::Send(event.as_bytes().to_vec().into()));
        r.steps.push(Step::Sleep(Duration::from_millis(2)));
    }
    r
}

fn whole(body: Vec<u8>) -> Reply {
    Reply::new(200)
        .header("content-type", "application/json")
        .header("content-length", &body.len().to_string())
        .send(body)
}

/// What the table alone charges for these tokens (no tool fees).
fn token_cost(input: u64, output: u64) -> f64 {
    let book = PriceBook::table_only().unwrap();
    let usage = Usage {
        input: Some(input),
        output: Some(output),
        ..Usage::default()
    };
    let priced = book.price(&Request {
        route: "claude",
        provider: ProviderKind::Anthropic,
        response_model: Some(MODEL),
        request_model: Some(MODEL),
        usage: &usage,
        counted_output: None,
        estimated: false,
        requested_tier: None,
        at: SystemTime::now(),
    });
    match priced {
        Priced::Cost(c) => c.usd,
        other => panic!("{MODEL} should be in the table: {other:?}"),
    }
}

#[track_caller]
fn close(what: &str, got: f64, want: f64) {
    assert!(
        (got - want).abs() <= want.abs() * 1e-9 + 1e-12,
        "{what}: got {got}, want {want}"
    );
}

#[tokio::test]
async fn tool_calls_and_web_search_fees_reach_the_span_and_the_counters() {
    let stream = streamed(&fixture("anthropic/messages_stream_web_search.sse"));
    let body = whole(fixture("anthropic/message_tools.json"));
    let mut rig = Rig::start(
        move |ex| {
            if String::from_utf8_lossy(&ex.body).contains("\"stream\":true") {
                stream.clone()
            } else {
                body.clone()
            }
        },
        |t, up| {
            t.top("admin_listen", &q("127.0.0.1:0"))
                // One tool name admitted as a label: the second is `other`.
                .set("telemetry", "max_models", "1")
                .route("claude", "/", up, "anthropic")
        },
    )
    .await;
    let admin = rig.proxy.running().unwrap().admin_addr.unwrap();
    for stream in [true, false] {
        let req = rig.post(
            MESSAGES,
            support::script::anthropic_request(MODEL, stream, None),
        );
        let got = client::fetch(&rig.client, &req).await;
        assert_eq!(got.status, 200, "stream={stream}: {}", got.text());
    }

    // /metrics: calls per tool name (capped), provider-run calls per tool.
    let c = client::http1();
    let mut scraped = None;
    for _ in 0..50 {
        let s = scrape(&c, admin).await;
        if s.named("tokentap_tool_server_calls_total").count() >= 1
            && s.named("tokentap_tool_calls_total").count() >= 2
        {
            scraped = Some(s);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let s = scraped.expect("tool counters in /metrics");
    assert_eq!(
        s.value(
            "tokentap_tool_calls_total",
            "gen_ai_tool_name",
            "get_weather"
        ),
        Some(2.0),
        "get_weather: once streamed, once whole"
    );
    assert_eq!(
        s.value("tokentap_tool_calls_total", "gen_ai_tool_name", "other"),
        Some(1.0),
        "get_time is past the cap of one name"
    );
    assert_eq!(
        s.value(
            "tokentap_tool_server_calls_total",
            "tokentap_tool_server",
            "web_search"
        ),
        Some(3.0),
        "1 search billed in the stream, 2 in the whole message"
    );

    rig.proxy.stop().await;
    let name = format!("chat {MODEL}");
    let is = |stream: bool| {
        let name = name.clone();
        move |s: &support::otlp::SpanRec| {
            s.name == name
                && s.attrs
                    .get("gen_ai.request.stream")
                    .and_then(|v| v.as_bool())
                    == Some(stream)
        }
    };
    let streamed = rig
        .col
        .wait_span(support::STEP_TIMEOUT, "streamed", is(true))
        .await;
    assert_eq!(streamed.num("tokentap.tool.calls"), 1.0);
    assert_eq!(
        streamed.attr("tokentap.tool.names").strings(),
        ["get_weather"]
    );
    assert_eq!(streamed.num("tokentap.tool.server.web_search"), 1.0);
    close("stream tool fee", streamed.num("tokentap.cost.tools"), 0.01);
    close(
        "stream cost = tokens + 1 search",
        streamed.num("tokentap.cost.amount"),
        token_cost(1900, 97) + 0.01,
    );

    let body = rig
        .col
        .wait_span(support::STEP_TIMEOUT, "whole", is(false))
        .await;
    assert_eq!(body.num("tokentap.tool.calls"), 2.0);
    assert_eq!(
        body.attr("tokentap.tool.names").strings(),
        ["get_weather", "get_time"]
    );
    assert_eq!(
        body.num("tokentap.tool.server.web_search"),
        2.0,
        "usage.server_tool_use wins over the one block seen"
    );
    close("whole tool fee", body.num("tokentap.cost.tools"), 0.02);
    close(
        "whole cost = tokens + 2 searches",
        body.num("tokentap.cost.amount"),
        token_cost(2310, 188) + 0.02,
    );
}
