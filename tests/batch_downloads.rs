//! Batch result files downloaded through the real server, against a
//! scripted upstream and a real OTLP receiver: an OpenAI Batch output file
//! and Anthropic Message Batches results are metered per model at batch
//! rates (span, token counters, cost), a second download of the same file
//! counts nothing, and files that hold no batch results (an uploaded input
//! file, a binary file) pass byte for byte, unmetered.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

mod support;

use support::client::{self, Req};
use support::names::*;
use support::rig::Rig;
use support::upstream::{Exchange, Reply};

const OPENAI_OUTPUT: &[u8] = include_bytes!("fixtures/openai/batch_output.jsonl");
const ANTHROPIC_RESULTS: &[u8] = include_bytes!("fixtures/anthropic/batch_results.jsonl");
const COUNTED: &str = "tokentap.usage.counted";
const COST: &str = "tokentap.cost.amount";
const COST_METRIC: &str = "tokentap.cost.usd";
const RESPONSE_MODEL: &str = "gen_ai.response.model";

/// An uploaded batch *input* file: requests, not results.
const INPUT_FILE: &[u8] = b"{\"custom_id\":\"request-1\",\"method\":\"POST\",\"url\":\"/v1/chat/completions\",\"body\":{\"model\":\"gpt-4o-mini\",\"messages\":[{\"role\":\"user\",\"content\":\"Hello\"}]}}\n{\"custom_id\":\"request-2\",\"method\":\"POST\",\"url\":\"/v1/chat/completions\",\"body\":{\"model\":\"gpt-4o-mini\",\"messages\":[{\"role\":\"user\",\"content\":\"Bye\"}]}}\n";

fn file(body: &'static [u8], content_type: &str) -> Reply {
    // Split mid-line, as a network would.
    let (a, b) = body.split_at(body.len() / 3);
    Reply::new(200)
        .header("content-type", content_type)
        .send(a)
        .send(b)
}

/// Latest value of counter `name` per `gen_ai.response.model`, sorted.
fn per_model(rig: &Rig, name: &str) -> Vec<(String, f64)> {
    let mut v: Vec<(String, f64)> = rig
        .col
        .latest(name)
        .iter()
        .map(|p| {
            let model = p.attr_str(RESPONSE_MODEL).unwrap_or("").to_owned();
            (model, p.number())
        })
        .collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

fn total(rig: &Rig, name: &str) -> f64 {
    rig.col.latest(name).iter().map(|p| p.number()).sum()
}

#[track_caller]
fn close(got: f64, want: f64, what: &str) {
    assert!(
        (got - want).abs() <= want * 1e-9,
        "{what}: got {got}, expected {want}"
    );
}

async fn download_twice(rig: &Rig, path: &str, body: &[u8]) {
    for i in 0..2 {
        let got = client::fetch(&rig.client, &Req::get(rig.proxy.addr, path)).await;
        assert_eq!(got.status, 200);
        support::assert_bytes_eq(&format!("download {i}"), &got.body, body);
    }
}

#[tokio::test]
async fn an_openai_batch_output_file_is_metered_per_model_once() {
    let mut rig = Rig::start(
        |_: &Exchange| file(OPENAI_OUTPUT, "application/octet-stream"),
        |t, up| t.route("openai", "/", up, "openai"),
    )
    .await;
    download_twice(
        &rig,
        "/v1/files/file-6F2ksmvXxt4VdoqmHRw6kL/content",
        OPENAI_OUTPUT,
    )
    .await;
    let spans = rig.finish_n(2).await;
    let first = &spans[0];
    assert_eq!(first.str(OPERATION), "file_content");
    assert_eq!(first.str(COUNTED), "first", "{:#?}", first.attrs);
    assert_eq!(first.num(INPUT_TOKENS), 77.0, "46 + 31 input tokens");
    assert_eq!(first.num(OUTPUT_TOKENS), 29.0, "17 + 12 output tokens");
    assert_eq!(first.num("tokentap.batch.lines"), 4.0);
    assert_eq!(first.num("tokentap.batch.succeeded"), 3.0);
    assert_eq!(first.num("tokentap.batch.errored"), 1.0);
    // Batch rates: gpt-4o-mini $0.075/$0.30, gpt-4.1 $1/$4 per million.
    let batch_usd = (46.0 * 0.075 + 17.0 * 0.30 + 31.0 * 1.0 + 12.0 * 4.0) / 1e6;
    close(first.num(COST), batch_usd, "span cost at batch rates");
    let second = &spans[1];
    assert_eq!(second.str(COUNTED), "repeat", "{:#?}", second.attrs);
    assert!(
        !second.attrs.contains_key(INPUT_TOKENS) && !second.attrs.contains_key(COST),
        "a second download counts nothing: {:#?}",
        second.attrs
    );
    assert_eq!(
        per_model(&rig, USAGE_INPUT),
        [
            ("gpt-4.1-2025-04-14".to_owned(), 31.0),
            ("gpt-4o-mini-2024-07-18".to_owned(), 46.0)
        ],
        "input tokens per model, counted once"
    );
    assert_eq!(
        total(&rig, USAGE_OUTPUT),
        29.0,
        "output tokens counted once"
    );
    close(
        total(&rig, COST_METRIC),
        batch_usd,
        "cost counter at batch rates",
    );
}

#[tokio::test]
async fn anthropic_batch_results_are_metered_per_model_once() {
    let mut rig = Rig::start(
        |_: &Exchange| file(ANTHROPIC_RESULTS, "application/binary"),
        |t, up| t.route("anthropic", "/", up, "anthropic"),
    )
    .await;
    let path = "/v1/messages/batches/msgbatch_01HkcTjaV5uDC8jWR4ZsDV8d/results";
    download_twice(&rig, path, ANTHROPIC_RESULTS).await;
    let spans = rig.finish_n(2).await;
    let first = &spans[0];
    assert_eq!(first.str(OPERATION), "batch_results");
    assert_eq!(first.str(COUNTED), "first", "{:#?}", first.attrs);
    assert_eq!(first.num(INPUT_TOKENS), 27.0);
    assert_eq!(first.num(OUTPUT_TOKENS), 57.0);
    for (key, want) in [
        ("tokentap.batch.lines", 5.0),
        ("tokentap.batch.succeeded", 2.0),
        ("tokentap.batch.errored", 1.0),
        ("tokentap.batch.canceled", 1.0),
        ("tokentap.batch.expired", 1.0),
    ] {
        assert_eq!(first.num(key), want, "{key}");
    }
    // Batch rates: Sonnet 4.5 $1.50/$7.50, Haiku 4.5 $0.50/$2.50 per million.
    let batch_usd = (12.0 * 1.5 + 48.0 * 7.5 + 15.0 * 0.5 + 9.0 * 2.5) / 1e6;
    close(first.num(COST), batch_usd, "span cost at batch rates");
    assert_eq!(spans[1].str(COUNTED), "repeat");
    assert_eq!(
        per_model(&rig, USAGE_OUTPUT),
        [
            ("claude-haiku-4-5-20251001".to_owned(), 9.0),
            ("claude-sonnet-4-5-20250929".to_owned(), 48.0)
        ],
        "output tokens per model, counted once"
    );
    close(
        total(&rig, COST_METRIC),
        batch_usd,
        "cost counter at batch rates",
    );
}

#[tokio::test]
async fn files_without_batch_results_pass_untouched_and_unmetered() {
    let binary: &'static [u8] = Box::leak(
        (0..=255u8)
            .cycle()
            .take(70_000)
            .collect::<Vec<u8>>()
            .into_boxed_slice(),
    );
    let mut rig = Rig::start(
        move |ex: &Exchange| match ex.path_and_query.as_str() {
            p if p.contains("file-input") => file(INPUT_FILE, "application/octet-stream"),
            _ => file(binary, "application/octet-stream"),
        },
        |t, up| t.route("openai", "/", up, "openai"),
    )
    .await;
    for (path, body) in [
        ("/v1/files/file-input/content", INPUT_FILE),
        ("/v1/files/file-pdf/content", binary),
    ] {
        let got = client::fetch(&rig.client, &Req::get(rig.proxy.addr, path)).await;
        assert_eq!(got.status, 200);
        support::assert_bytes_eq(path, &got.body, body);
    }
    let spans = rig.finish_n(2).await;
    for span in &spans {
        assert_eq!(span.str(OPERATION), "file_content");
        assert_eq!(span.str("tokentap.unmetered"), "unknown_format");
        for key in [COUNTED, INPUT_TOKENS, COST, "tokentap.batch.lines"] {
            assert!(
                !span.attrs.contains_key(key),
                "no {key} for a file without batch results: {:#?}",
                span.attrs
            );
        }
    }
    assert_eq!(total(&rig, USAGE_INPUT), 0.0, "no tokens counted");
}
