//! Stored and background responses (OpenAI Responses API) through the real
//! server, against a scripted upstream and a real OTLP receiver: a
//! response's usage is counted once however often it is streamed, resumed
//! or polled (spans, token counters and cost agree); a resumed stream is
//! metered as a stream with its own TTFT; a background stream the client
//! leaves counts nothing until the final usage is seen; cancel, delete and
//! input-item listings are recorded as what they are.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use support::client::{self, Req};
use support::names::*;
use support::otlp::SpanRec;
use support::rig::Rig;
use support::upstream::{Exchange, Reply};

const ID: &str = "resp_68b1c0d2e3f48193a5b6c7d8e9f0a1b20c3d4e5f6a7b8c9d";
const COUNTED: &str = "tokentap.usage.counted";
const COST: &str = "tokentap.cost.amount";
const RESPONSE_ID: &str = "gen_ai.response.id";
const STREAM: &[u8] = include_bytes!("fixtures/openai/responses_background_stream.sse");
const RESUME: &[u8] = include_bytes!("fixtures/openai/responses_resume_stream.sse");
const QUEUED: &[u8] = include_bytes!("fixtures/openai/responses_background_queued.json");
const RUNNING: &[u8] = include_bytes!("fixtures/openai/responses_background_in_progress.json");
const DONE: &[u8] = include_bytes!("fixtures/openai/responses_background_completed.json");
const CANCELLED: &[u8] = include_bytes!("fixtures/openai/responses_background_cancelled.json");
/// The fixtures' final usage.
const INPUT: f64 = 37.0;
const OUTPUT: f64 = 150.0;

fn sse(body: &'static [u8]) -> Reply {
    let mut r = Reply::new(200).header("content-type", "text/event-stream");
    for event in support::frames::sse(body) {
        r = r.send(event);
    }
    r
}

fn json(body: &'static [u8]) -> Reply {
    Reply::new(200)
        .header("content-type", "application/json")
        .send(body)
}

fn create(stream: bool) -> Vec<u8> {
    format!(r#"{{"model":"o4-mini","background":true,"stream":{stream},"input":"hi"}}"#)
        .into_bytes()
}

fn get(rig: &Rig, path: &str) -> Req {
    Req::get(rig.proxy.addr, path)
}

/// Sum of the latest points of counter `name`.
fn total(rig: &Rig, name: &str) -> f64 {
    rig.col.latest(name).iter().map(|p| p.number()).sum()
}

/// The span reports no usage and no cost.
fn assert_no_usage(span: &SpanRec, what: &str) {
    for key in [INPUT_TOKENS, OUTPUT_TOKENS, COST] {
        assert!(
            !span.attrs.contains_key(key),
            "{what}: no {key} once the usage was counted or while it is not final: {:#?}",
            span.attrs
        );
    }
}

/// The span counted the fixtures' final usage, and priced it.
fn assert_counted_here(span: &SpanRec, what: &str) {
    assert_eq!(span.str(COUNTED), "first", "{what}: {:#?}", span.attrs);
    assert_eq!(span.num(INPUT_TOKENS), INPUT, "{what}: input tokens");
    assert_eq!(span.num(OUTPUT_TOKENS), OUTPUT, "{what}: output tokens");
    assert!(span.num(COST) > 0.0, "{what}: priced");
}

#[tokio::test]
async fn stream_resume_and_polls_count_the_usage_once() {
    let mut rig = Rig::start(
        |ex: &Exchange| match (ex.method.as_str(), ex.path_and_query.as_str()) {
            ("POST", "/v1/responses") => sse(STREAM),
            ("GET", p) if p.contains("stream=true") => sse(RESUME),
            ("GET", _) => json(DONE),
            _ => Reply::new(404),
        },
        |t, up| t.route("openai", "/", up, "openai"),
    )
    .await;
    let got = client::fetch(&rig.client, &rig.post("/v1/responses", create(true))).await;
    assert_eq!(got.status, 200);
    support::assert_bytes_eq("original stream", &got.body, STREAM);
    let resume = format!("/v1/responses/{ID}?stream=true&starting_after=11");
    let got = client::fetch(&rig.client, &get(&rig, &resume)).await;
    support::assert_bytes_eq("resumed stream", &got.body, RESUME);
    for _ in 0..3 {
        let got = client::fetch(&rig.client, &get(&rig, &format!("/v1/responses/{ID}"))).await;
        support::assert_bytes_eq("poll", &got.body, DONE);
    }
    let spans = rig.finish_n(5).await;
    assert_eq!(spans[0].str(OPERATION), "chat");
    assert_counted_here(&spans[0], "the original stream");
    let resumed = &spans[1];
    assert_eq!(resumed.str(OPERATION), "fetch_response");
    assert_eq!(resumed.str(OUTCOME), "complete", "{:#?}", resumed.attrs);
    assert_eq!(
        resumed.attr(REQUEST_STREAM).as_bool(),
        Some(true),
        "a stream"
    );
    assert!(
        resumed.num(TTFC) > 0.0,
        "the resumed stream has its own TTFT: {:#?}",
        resumed.attrs
    );
    for (i, span) in spans[1..].iter().enumerate() {
        assert_eq!(span.str(OPERATION), "fetch_response", "request {}", i + 1);
        assert_eq!(span.str(COUNTED), "repeat", "request {}", i + 1);
        assert_eq!(span.str(RESPONSE_ID), ID);
        assert_no_usage(span, &format!("request {}", i + 1));
    }
    assert_eq!(total(&rig, USAGE_INPUT), INPUT, "input counted once");
    assert_eq!(total(&rig, USAGE_OUTPUT), OUTPUT, "output counted once");
}

#[tokio::test]
async fn a_dropped_background_stream_then_polled_counts_the_final_usage_once() {
    let polls = Arc::new(AtomicUsize::new(0));
    let seen = polls.clone();
    // The stream stops after its first text delta and hangs: the client
    // leaves there. Polls find the response running, then finished.
    let cut = STREAM
        .windows(5)
        .position(|w| w == b"\"Hi\",")
        .and_then(|at| {
            STREAM[at..]
                .windows(2)
                .position(|w| w == b"\n\n")
                .map(|e| at + e + 2)
        })
        .unwrap();
    let mut rig = Rig::start(
        move |ex: &Exchange| match (ex.method.as_str(), ex.json()["stream"].as_bool()) {
            ("POST", Some(true)) => Reply::new(200)
                .header("content-type", "text/event-stream")
                .send(&STREAM[..cut])
                .sleep(Duration::from_secs(30)),
            ("POST", _) => json(QUEUED),
            _ if seen.fetch_add(1, Ordering::SeqCst) == 0 => json(RUNNING),
            _ => json(DONE),
        },
        |t, up| t.route("openai", "/", up, "openai"),
    )
    .await;
    let got = client::fetch(&rig.client, &rig.post("/v1/responses", create(false))).await;
    assert_eq!(got.status, 200);
    let (resp, _) = client::send(&rig.client, &rig.post("/v1/responses", create(true))).await;
    let mut body = resp.into_body();
    client::read_until(&mut body, "output_text.delta").await;
    drop(body);
    // Let the proxy record the drop before the polls start.
    tokio::time::sleep(Duration::from_millis(300)).await;
    for _ in 0..3 {
        let got = client::fetch(&rig.client, &get(&rig, &format!("/v1/responses/{ID}"))).await;
        assert_eq!(got.status, 200);
    }
    assert_eq!(
        polls.load(Ordering::SeqCst),
        3,
        "three polls reached upstream"
    );
    let spans = rig.finish_n(5).await;
    let what = [
        "queued create",
        "dropped stream",
        "running poll",
        "finished poll",
        "repeat poll",
    ];
    for (span, what) in spans.iter().zip(what) {
        eprintln!("{what}: {:?} {:?}", span.str(OUTCOME), span.str(COUNTED));
    }
    assert_eq!(spans[0].str(COUNTED), "withheld", "queued: no usage yet");
    assert_no_usage(&spans[0], what[0]);
    assert_eq!(spans[1].str(OUTCOME), "client_cancelled");
    assert_eq!(
        spans[1].str(COUNTED),
        "withheld",
        "the response goes on after the client left: no estimate at the drop"
    );
    assert_no_usage(&spans[1], what[1]);
    assert_eq!(spans[2].str(COUNTED), "withheld");
    assert_no_usage(&spans[2], what[2]);
    assert_counted_here(&spans[3], what[3]);
    assert_eq!(spans[4].str(COUNTED), "repeat");
    assert_no_usage(&spans[4], what[4]);
    assert_eq!(total(&rig, USAGE_INPUT), INPUT, "input counted once");
    assert_eq!(total(&rig, USAGE_OUTPUT), OUTPUT, "output counted once");
}

#[tokio::test]
async fn cancel_delete_and_input_items_are_recorded_as_what_they_are() {
    let mut rig = Rig::start(
        |ex: &Exchange| {
            let path = ex.path_and_query.as_str();
            if path.ends_with("/cancel") {
                json(CANCELLED)
            } else if path.contains("/input_items") {
                json(br#"{"object":"list","data":[{"id":"msg_1","type":"message","role":"user","content":[{"type":"input_text","text":"hi"}]}],"first_id":"msg_1","last_id":"msg_1","has_more":false}"#)
            } else {
                json(br#"{"id":"resp_68b1c0d2e3f48193a5b6c7d8e9f0a1b20c3d4e5f6a7b8c9d","object":"response.deleted","deleted":true}"#)
            }
        },
        |t, up| t.route("openai", "/", up, "openai"),
    )
    .await;
    let cancel = rig.post(&format!("/v1/responses/{ID}/cancel"), Vec::new());
    assert_eq!(client::fetch(&rig.client, &cancel).await.status, 200);
    let items = get(&rig, &format!("/v1/responses/{ID}/input_items?limit=5"));
    assert_eq!(client::fetch(&rig.client, &items).await.status, 200);
    let mut delete = get(&rig, &format!("/v1/responses/{ID}"));
    delete.method = http::Method::DELETE;
    assert_eq!(client::fetch(&rig.client, &delete).await.status, 200);
    let spans = rig.finish_n(3).await;
    let ops: Vec<&str> = spans.iter().map(|s| s.str(OPERATION)).collect();
    assert_eq!(
        ops,
        ["cancel_response", "list_input_items", "delete_response"]
    );
    for span in &spans {
        assert_eq!(span.str(OUTCOME), "complete", "{:#?}", span.attrs);
        assert_no_usage(span, span.str(OPERATION));
        assert!(
            !span.attrs.contains_key(ESTIMATED) || span.attr(ESTIMATED).as_bool() == Some(false),
            "{}: nothing estimated",
            span.str(OPERATION)
        );
    }
    assert_eq!(
        spans[0].str(COUNTED),
        "withheld",
        "a cancelled response with no usage"
    );
}
