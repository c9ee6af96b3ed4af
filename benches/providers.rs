//! Event extraction (framing + provider adapter, i.e. `Parser`): response
//! bodies in network-sized chunks in, bytes/second and nanoseconds per
//! chunk out (goal: ≥ 300 MB/s, ≤ 1 µs per chunk). Also WebSocket session
//! messages (`providers::realtime`): one OpenAI Realtime event in, its
//! session events out, per message.
#![allow(
    missing_docs,
    reason = "criterion_group! generates a pub fn that cannot carry a doc"
)]

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use tokentap::providers::realtime::{Dialect, RealtimeEvent, RealtimeParser};
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
const OPENAI_TOOL_CALLS: &[u8] =
    include_bytes!("../tests/fixtures/openai/chat_stream_parallel_tool_calls.sse");

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
        // Two parallel tool calls, each call's arguments in six deltas.
        oa(
            "openai_tool_calls/event_per_chunk",
            vec![per_event(OPENAI_TOOL_CALLS)],
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

/// A Realtime text delta as the bench upstream sends it (~170 bytes).
const RT_TEXT_DELTA: &str = r#"{"type":"response.output_text.delta","event_id":"event_bench0001","response_id":"resp_bench","item_id":"item_bench","output_index":0,"content_index":0,"delta":" token"}"#;
/// A Realtime `response.done` with usage and its text/audio split.
const RT_DONE: &str = r#"{"type":"response.done","event_id":"event_Dv1r","response":{"object":"realtime.response","id":"resp_Dv1f","status":"completed","status_details":null,"output":[{"id":"item_Dv1i","type":"message","status":"completed","role":"assistant","content":[{"type":"output_audio","transcript":"I can't check a clock."}]}],"conversation_id":"conv_Dv1a","output_modalities":["audio"],"usage":{"total_tokens":412,"input_tokens":318,"output_tokens":94,"input_token_details":{"text_tokens":251,"audio_tokens":67,"image_tokens":0,"cached_tokens":192,"cached_tokens_details":{"text_tokens":192,"audio_tokens":0,"image_tokens":0}},"output_token_details":{"text_tokens":22,"audio_tokens":72}}}}"#;

/// A message whose `delta` (or `audio`) is `n` bytes of base64, as an
/// output audio delta (server) or an `input_audio_buffer.append` (client).
fn rt_audio(kind: &str, field: &str, n: usize) -> String {
    let b64: String = (0..n)
        .map(|i| {
            char::from(
                b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"[i * 7 % 64],
            )
        })
        .collect();
    format!(
        r#"{{"type":"{kind}","event_id":"event_bench0003","response_id":"resp_bench","item_id":"item_bench","output_index":0,"content_index":0,"{field}":"{b64}"}}"#
    )
}

/// Messages per second (1e9 / elem/s = ns per message): one message parsed
/// per iteration by a session parser that lives across iterations.
fn bench_realtime(c: &mut Criterion) {
    let audio = rt_audio("response.output_audio.delta", "delta", 8 * 1024);
    let append = rt_audio("input_audio_buffer.append", "audio", 16 * 1024);
    let cases: [(&str, bool, &str); 4] = [
        ("text_delta", true, RT_TEXT_DELTA),
        ("audio_delta_8KiB", true, &audio),
        ("response_done", true, RT_DONE),
        ("client_audio_append_16KiB", false, &append),
    ];
    let mut group = c.benchmark_group("providers/realtime");
    group.throughput(Throughput::Elements(1));
    for (name, server, msg) in cases {
        let mut parser = RealtimeParser::new(Dialect::OpenaiRealtime);
        let mut tally = 0u64;
        group.bench_function(name, |b| {
            b.iter(|| {
                let on =
                    &mut |ev: RealtimeEvent<'_>| tally += u64::from(ev != RealtimeEvent::Closing);
                let msg = black_box(msg.as_bytes());
                parser.message(server, msg, on).expect("a valid message");
            })
        });
        black_box(tally);
    }
    group.finish();
}

criterion_group!(benches, bench_bytes, bench_chunks, bench_realtime);
criterion_main!(benches);
