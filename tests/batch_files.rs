//! Batch result files through the real binary: a 100 MB OpenAI Batch
//! output file downloaded through `GET /v1/files/{id}/content` arrives
//! byte for byte and is metered (every line the generator wrote, its
//! tokens on the span) while the proxy's peak resident memory (`VmHWM`)
//! stays far below the file's size: the body is streamed, never buffered.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

mod support;

use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::BodyExt;
use support::client::{self, Req};
use support::otlp::Collector;
use support::proxy::{Bin, Toml};
use support::upstream::{Reply, Upstream};

/// One batch output line of the shape OpenAI writes (about 1 KiB).
fn line(i: usize) -> String {
    let text = "lorem ipsum dolor sit amet ".repeat(24);
    format!(
        r#"{{"id":"batch_req_{i:024}","custom_id":"request-{i}","response":{{"status_code":200,"request_id":"{i:032x}","body":{{"id":"chatcmpl-{i}","object":"chat.completion","created":1753610000,"model":"gpt-4o-mini-2024-07-18","choices":[{{"index":0,"message":{{"role":"assistant","content":"{text}","refusal":null}},"logprobs":null,"finish_reason":"stop"}}],"usage":{{"prompt_tokens":23,"completion_tokens":150,"total_tokens":173}},"service_tier":"default","system_fingerprint":"fp_8bda4d3a2c"}}}},"error":null}}"#
    ) + "\n"
}

/// Peak resident set size of `pid` in KiB (`VmHWM`).
fn peak_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_100_mb_result_file_streams_through_with_bounded_memory() {
    // Just under 1 MiB of whole lines, sent 101 times: over 100 MiB.
    let mut piece = String::new();
    let mut i = 0;
    while piece.len() < (1 << 20) - 2048 {
        piece.push_str(&line(i));
        i += 1;
    }
    let piece = Bytes::from(piece);
    const PIECES: usize = 101;
    let mut reply = Reply::new(200)
        .header("content-type", "application/octet-stream")
        .header("content-length", &(piece.len() * PIECES).to_string());
    for _ in 0..PIECES {
        reply = reply.send(piece.clone());
    }
    let up = Upstream::fixed(reply).await;
    let col = Collector::start().await;
    let toml = Toml::openai(&up.url()).otlp(&col.endpoint(), "grpc");
    let bin = Bin::start(&toml, &["--admin-listen", "off"], &[]).await;
    #[allow(
        clippy::disallowed_methods,
        reason = "the test reports how long the download took"
    )]
    let started = Instant::now();
    let pid = bin.child.id().unwrap();
    let before = peak_kib(pid);
    let req = Req::get(bin.addr, "/v1/files/file-abc123/content");
    let (resp, _) = client::send(&client::http1(), &req).await;
    assert_eq!(resp.status(), 200);
    let mut body = resp.into_body();
    let (mut got, mut mismatch) = (0usize, None);
    while let Some(frame) = body.frame().await {
        let frame = frame.unwrap();
        let Ok(data) = frame.into_data() else {
            continue;
        };
        for (k, b) in data.iter().enumerate() {
            let at = got + k;
            if mismatch.is_none() && *b != piece[at % piece.len()] {
                mismatch = Some(at);
            }
        }
        got += data.len();
    }
    assert_eq!(mismatch, None, "bytes arrive identical");
    assert_eq!(got, piece.len() * PIECES, "every byte arrives");
    let elapsed = started.elapsed();
    let peak = peak_kib(pid);
    eprintln!(
        "proxy peak RSS: {before} KiB before, {peak} KiB after a {} MiB download in {elapsed:?}",
        got >> 20
    );
    let lines = (i * PIECES) as f64;
    let mut span = None;
    for _ in 0..200 {
        span = col
            .spans()
            .into_iter()
            .find(|s| s.attrs.contains_key("tokentap.batch.lines"));
        if span.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let span = span.expect("the download's span, metered");
    assert_eq!(span.num("tokentap.batch.lines"), lines, "every line read");
    assert_eq!(span.num("tokentap.batch.succeeded"), lines);
    assert_eq!(span.num("gen_ai.usage.input_tokens"), 23.0 * lines);
    assert_eq!(span.num("gen_ai.usage.output_tokens"), 150.0 * lines);
    assert_eq!(span.str("tokentap.usage.counted"), "first");
    assert!(
        peak < 64 * 1024,
        "peak RSS {peak} KiB must stay well below the {} MiB file",
        got >> 20
    );
}
