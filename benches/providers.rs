//! Event extraction (framing + provider adapter, i.e. `Parser`): response
//! bodies in network-sized chunks in, bytes/second and nanoseconds per
//! chunk out (goal: ≥ 300 MB/s, ≤ 1 µs per chunk).
#![allow(
    missing_docs,
    reason = "criterion_group! generates a pub fn that cannot carry a doc"
)]

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use tokentap::providers::{Event, Operation, Parser, ProviderKind};

#[path = "support/streams.rs"]
mod streams;

use streams::{
    ANTHROPIC_FIXTURES, OPENAI_FIXTURES, anthropic_stream, fixed, openai_stream, per_event, total,
};

const MAX_FRAME: usize = 4 << 20;

/// One benchmark input: a provider and several bodies, each in chunks.
struct Case<'a> {
    name: &'static str,
    kind: ProviderKind,
    operation: Operation,
    content_type: &'static str,
    bodies: Vec<Vec<&'a [u8]>>,
}

impl Case<'_> {
    fn bytes(&self) -> u64 {
        self.bodies.iter().map(|b| total(b)).sum()
    }

    fn chunks(&self) -> u64 {
        self.bodies.iter().map(|b| b.len() as u64).sum()
    }

    /// Parse every body once; returns a tally so the work is kept.
    fn run(&self) -> u64 {
        let mut tally = 0u64;
        let mut on = |ev: Event<'_>| {
            tally += match ev {
                Event::Content { pieces, .. } => u64::from(pieces),
                _ => 1,
            }
        };
        for body in &self.bodies {
            let mut parser = Parser::new(
                self.kind,
                Some(self.operation),
                self.content_type,
                MAX_FRAME,
            )
            .expect("a metered content type");
            for chunk in body {
                parser
                    .feed(black_box(chunk), &mut on)
                    .expect("valid stream");
            }
            parser.finish(&mut on).expect("valid stream");
        }
        tally
    }
}

const OPENAI_JSON: &[u8] = include_bytes!("../tests/fixtures/openai/chat.json");
const ANTHROPIC_JSON: &[u8] = include_bytes!("../tests/fixtures/anthropic/message.json");

fn cases<'a>(openai: &'a [u8], anthropic: &'a [u8]) -> Vec<Case<'a>> {
    let oa = |name, bodies| Case {
        name,
        kind: ProviderKind::Openai,
        operation: Operation::ChatCompletions,
        content_type: "text/event-stream",
        bodies,
    };
    let an = |name, bodies| Case {
        name,
        kind: ProviderKind::Anthropic,
        operation: Operation::Messages,
        content_type: "text/event-stream",
        bodies,
    };
    vec![
        oa("openai_100tok/event_per_chunk", vec![per_event(openai)]),
        oa("openai_100tok/16KiB_chunks", vec![fixed(openai, 16 * 1024)]),
        oa(
            "openai_fixtures/event_per_chunk",
            OPENAI_FIXTURES.iter().map(|f| per_event(f)).collect(),
        ),
        an(
            "anthropic_100tok/event_per_chunk",
            vec![per_event(anthropic)],
        ),
        an(
            "anthropic_100tok/16KiB_chunks",
            vec![fixed(anthropic, 16 * 1024)],
        ),
        an(
            "anthropic_fixtures/event_per_chunk",
            ANTHROPIC_FIXTURES.iter().map(|f| per_event(f)).collect(),
        ),
        Case {
            content_type: "application/json",
            ..oa("openai_whole_body", vec![vec![OPENAI_JSON]])
        },
        Case {
            content_type: "application/json",
            ..an("anthropic_whole_body", vec![vec![ANTHROPIC_JSON]])
        },
    ]
}

/// Bytes per second (criterion's MB/s column).
fn bench_bytes(c: &mut Criterion) {
    let (openai, anthropic) = (openai_stream(100), anthropic_stream(100));
    let mut group = c.benchmark_group("providers/bytes");
    for case in cases(&openai, &anthropic) {
        group.throughput(Throughput::Bytes(case.bytes()));
        group.bench_function(case.name, |b| b.iter(|| case.run()));
    }
    group.finish();
}

/// Chunks per second (criterion's elem/s column; 1e9 / that = ns per chunk).
fn bench_chunks(c: &mut Criterion) {
    let (openai, anthropic) = (openai_stream(100), anthropic_stream(100));
    let mut group = c.benchmark_group("providers/chunks");
    for case in cases(&openai, &anthropic)
        .into_iter()
        .filter(|c| c.name.ends_with("event_per_chunk"))
    {
        group.throughput(Throughput::Elements(case.chunks()));
        group.bench_function(case.name, |b| b.iter(|| case.run()));
    }
    group.finish();
}

criterion_group!(benches, bench_bytes, bench_chunks);
criterion_main!(benches);
