//! Framing decoder throughput: realistic response bodies in network-sized
//! chunks in, frames/second and bytes/second out (goal: SSE ≥ 1 GB/s).
//! SSE runs over generated 100-token streams and recorded fixtures; NDJSON,
//! streamed JSON array and AWS eventstream over their recorded fixtures;
//! the WebSocket side view over a generated stream of small server text
//! frames (plain and permessage-deflate).
#![allow(
    missing_docs,
    reason = "criterion_group! generates a pub fn that cannot carry a doc"
)]

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use tokentap::framing::eventstream::EventStreamDecoder;
use tokentap::framing::json_array::JsonArrayDecoder;
use tokentap::framing::ndjson::NdjsonDecoder;
use tokentap::framing::sse::SseDecoder;
use tokentap::framing::websocket::{Deflate, Sender, WsDecoder, WsMessage, encode_frame};
use tokentap::framing::{Decoder, Frame};

#[path = "support/streams.rs"]
mod streams;

use streams::{
    ANTHROPIC_FIXTURES, OPENAI_FIXTURES, anthropic_stream, fixed, openai_stream, per_event, total,
};

const MAX_FRAME: usize = 4 << 20;

/// One benchmark input: several bodies, each already split into chunks.
struct Case<'a> {
    name: &'static str,
    bodies: Vec<Vec<&'a [u8]>>,
}

impl Case<'_> {
    fn bytes(&self) -> u64 {
        self.bodies.iter().map(|b| total(b)).sum()
    }
}

/// Count frames and their bytes so the optimiser keeps the work.
fn sink(frames: &mut u64) -> impl FnMut(Frame<'_>) + '_ {
    move |f| {
        let n = match f {
            Frame::Sse { event, data } => event.len() + data.len(),
            Frame::Json(doc) => doc.len(),
            Frame::AwsEvent { payload, .. } => payload.len(),
        };
        *frames += 1 + n as u64 % 2;
    }
}

/// Decode every body of `case` with a fresh decoder from `make`.
fn run<D: Decoder>(case: &Case<'_>, make: fn(usize) -> D) -> u64 {
    let mut frames = 0u64;
    let mut on = sink(&mut frames);
    for body in &case.bodies {
        let mut dec = make(MAX_FRAME);
        for chunk in body {
            dec.feed(black_box(chunk), &mut on).expect("valid body");
        }
        dec.finish(&mut on).expect("valid body");
    }
    drop(on);
    frames
}

fn sse_cases<'a>(openai: &'a [u8], anthropic: &'a [u8]) -> Vec<Case<'a>> {
    vec![
        Case {
            name: "openai_100tok/event_per_chunk",
            bodies: vec![per_event(openai)],
        },
        Case {
            name: "openai_100tok/16KiB_chunks",
            bodies: vec![fixed(openai, 16 * 1024)],
        },
        Case {
            name: "anthropic_100tok/event_per_chunk",
            bodies: vec![per_event(anthropic)],
        },
        Case {
            name: "anthropic_100tok/16KiB_chunks",
            bodies: vec![fixed(anthropic, 16 * 1024)],
        },
        Case {
            name: "openai_fixtures/event_per_chunk",
            bodies: OPENAI_FIXTURES.iter().map(|f| per_event(f)).collect(),
        },
        Case {
            name: "anthropic_fixtures/event_per_chunk",
            bodies: ANTHROPIC_FIXTURES.iter().map(|f| per_event(f)).collect(),
        },
        Case {
            // A worst case: reads split events at odd places, so lines are
            // carried over between chunks.
            name: "openai_100tok/97B_chunks",
            bodies: vec![fixed(openai, 97)],
        },
    ]
}

fn bench_sse(c: &mut Criterion) {
    let openai = openai_stream(100);
    let anthropic = anthropic_stream(100);
    let mut group = c.benchmark_group("framing/sse");
    for case in sse_cases(&openai, &anthropic) {
        group.throughput(Throughput::Bytes(case.bytes()));
        group.bench_function(case.name, |b| b.iter(|| run(&case, SseDecoder::new)));
    }
    group.finish();
}

const NDJSON: &[&[u8]] = &[
    include_bytes!("../tests/fixtures/framing/ollama_chat.ndjson"),
    include_bytes!("../tests/fixtures/framing/ollama_generate.ndjson"),
    include_bytes!("../tests/fixtures/ollama/chat_stream.ndjson"),
    include_bytes!("../tests/fixtures/ollama/generate_stream.ndjson"),
];
const JSON_ARRAY: &[&[u8]] = &[
    include_bytes!("../tests/fixtures/framing/gemini_stream.json"),
    include_bytes!("../tests/fixtures/gemini/stream_generate_array.json"),
];
const EVENTSTREAM: &[&[u8]] = &[
    include_bytes!("../tests/fixtures/framing/bedrock_converse_stream.eventstream"),
    include_bytes!("../tests/fixtures/framing/bedrock_invoke_stream.eventstream"),
    include_bytes!("../tests/fixtures/bedrock/converse_stream.eventstream"),
    include_bytes!("../tests/fixtures/bedrock/invoke_stream_claude.eventstream"),
];

/// Each recorded body whole-ish (16 KiB reads) and in small reads that split
/// frames at arbitrary places.
fn fixture_cases(fixtures: &[&'static [u8]], small: usize) -> [Case<'static>; 2] {
    [
        Case {
            name: "fixtures/16KiB_chunks",
            bodies: fixtures.iter().map(|f| fixed(f, 16 * 1024)).collect(),
        },
        Case {
            name: if small == 64 {
                "fixtures/64B_chunks"
            } else {
                "fixtures/256B_chunks"
            },
            bodies: fixtures.iter().map(|f| fixed(f, small)).collect(),
        },
    ]
}

fn bench_others(c: &mut Criterion) {
    let mut group = c.benchmark_group("framing/ndjson");
    for case in fixture_cases(NDJSON, 256) {
        group.throughput(Throughput::Bytes(case.bytes()));
        group.bench_function(case.name, |b| b.iter(|| run(&case, NdjsonDecoder::new)));
    }
    group.finish();
    let mut group = c.benchmark_group("framing/json_array");
    for case in fixture_cases(JSON_ARRAY, 256) {
        group.throughput(Throughput::Bytes(case.bytes()));
        group.bench_function(case.name, |b| b.iter(|| run(&case, JsonArrayDecoder::new)));
    }
    group.finish();
    let mut group = c.benchmark_group("framing/eventstream");
    for case in fixture_cases(EVENTSTREAM, 64) {
        group.throughput(Throughput::Bytes(case.bytes()));
        group.bench_function(case.name, |b| {
            b.iter(|| run(&case, EventStreamDecoder::new))
        });
    }
    group.finish();
}

/// 200 server frames of a streamed response over a WebSocket, one text
/// delta each (the shape of the OpenAI Realtime / Responses WebSocket
/// events); as frames and, when `deflate`, as context-takeover compressed
/// frames, one `Vec` per frame.
fn websocket_frames(deflate: bool) -> Vec<Vec<u8>> {
    let mut z = flate2::Compress::new(flate2::Compression::default(), false);
    (0..200)
        .map(|i| {
            let event = format!(
                r#"{{"type":"response.output_text.delta","event_id":"evt_{i:04}","response_id":"resp_0123456789","item_id":"msg_0123456789","output_index":0,"content_index":0,"delta":" tok{i}"}}"#
            );
            let mut frame = Vec::new();
            if deflate {
                let mut data = Vec::with_capacity(event.len() + 64);
                z.compress_vec(event.as_bytes(), &mut data, flate2::FlushCompress::Sync)
                    .expect("compressible");
                data.truncate(data.len() - 4);
                encode_frame(true, true, 1, None, &data, &mut frame);
            } else {
                encode_frame(true, false, 1, None, event.as_bytes(), &mut frame);
            }
            frame
        })
        .collect()
}

/// A WebSocket bench case: name, the chunks as read, the sender's deflate.
type WsCase<'a> = (&'static str, Vec<&'a [u8]>, Option<Deflate>);

fn bench_websocket(c: &mut Criterion) {
    let plain = websocket_frames(false);
    let compressed = websocket_frames(true);
    let plain_stream = plain.concat();
    let takeover = Deflate {
        no_context_takeover: false,
        max_window_bits: 15,
    };
    let cases: [WsCase<'_>; 4] = [
        (
            "server_text/frame_per_chunk",
            plain.iter().map(Vec::as_slice).collect(),
            None,
        ),
        (
            "server_text/16KiB_chunks",
            fixed(&plain_stream, 16 * 1024),
            None,
        ),
        ("server_text/97B_chunks", fixed(&plain_stream, 97), None),
        (
            "server_text_deflate/frame_per_chunk",
            compressed.iter().map(Vec::as_slice).collect(),
            Some(takeover),
        ),
    ];
    let mut group = c.benchmark_group("framing/websocket");
    for (name, chunks, deflate) in cases {
        group.throughput(Throughput::Bytes(total(&chunks)));
        group.bench_function(name, |b| {
            b.iter(|| {
                let mut seen = 0u64;
                let mut dec = WsDecoder::new(Sender::Server, MAX_FRAME, deflate);
                for chunk in &chunks {
                    dec.feed(black_box(chunk), &mut |m| {
                        if let WsMessage::Text(t) = m {
                            seen += 1 + t.len() as u64 % 2;
                        }
                    })
                    .expect("valid frames");
                }
                seen
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench_sse, bench_others, bench_websocket);
criterion_main!(benches);
