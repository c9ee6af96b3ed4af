//! Framing decoder throughput: realistic response bodies in network-sized
//! chunks in, frames/second and bytes/second out (goal: SSE ≥ 1 GB/s).

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use tokentap::framing::Frame;
use tokentap::framing::sse::SseDecoder;

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

/// Count frames and their data bytes so the optimiser keeps the work.
fn sink(frames: &mut u64) -> impl FnMut(Frame<'_>) + '_ {
    move |f| {
        if let Frame::Sse { event, data } = f {
            *frames += 1 + (event.len() + data.len()) as u64 % 2;
        }
    }
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
        group.bench_function(case.name, |b| {
            b.iter(|| {
                let mut frames = 0u64;
                let mut on = sink(&mut frames);
                for body in &case.bodies {
                    let mut dec = SseDecoder::new(MAX_FRAME);
                    for chunk in body {
                        dec.feed(black_box(chunk), &mut on).expect("valid SSE");
                    }
                    dec.finish(&mut on).expect("valid SSE");
                }
                drop(on);
                frames
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench_sse);
criterion_main!(benches);
