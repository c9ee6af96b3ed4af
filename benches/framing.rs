//! Framing decoder throughput: realistic response bodies in network-sized
//! chunks in, frames/second and bytes/second out (goal: SSE ≥ 1 GB/s).
//! SSE runs over generated 100-token streams and recorded fixtures; NDJSON,
//! streamed JSON array and AWS eventstream over their recorded fixtures.

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use tokentap::framing::eventstream::EventStreamDecoder;
use tokentap::framing::json_array::JsonArrayDecoder;
use tokentap::framing::ndjson::NdjsonDecoder;
use tokentap::framing::sse::SseDecoder;
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

criterion_group!(benches, bench_sse, bench_others);
criterion_main!(benches);
