//! Parsing a stream allocates per stream, not per chunk: once a parser has
//! seen the first events of a stream (model name, buffers sized), feeding
//! it further content chunks (framing + provider adapter, the work done on
//! every chunk a client receives) allocates nothing, whether each chunk is
//! one event or events are split across reads.
//!
//! Counted with dhat's allocator in its testing mode.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

use tokentap::providers::{Event, Operation, Parser, ProviderKind};

#[path = "../benches/support/streams.rs"]
mod streams;

#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

/// Allocations (blocks) made while `f` runs; this file holds one test, so
/// nothing else allocates meanwhile but the test harness, which waits.
fn allocations(f: impl FnOnce()) -> u64 {
    let before = dhat::HeapStats::get().total_blocks;
    f();
    dhat::HeapStats::get().total_blocks - before
}

const WARM_UP: usize = 8;

/// Feed `chunks[..WARM_UP]`, then count the allocations of feeding the
/// rest; also returns how many content events the counted part produced.
fn count(kind: ProviderKind, op: Operation, chunks: &[&[u8]]) -> (u64, u64) {
    let mut parser =
        Parser::new(kind, Some(op), "text/event-stream", 4 << 20).expect("a metered content type");
    let mut content = 0u64;
    let mut on = |ev: Event<'_>| {
        if let Event::Content { pieces, .. } = ev {
            content += u64::from(pieces);
        }
    };
    for chunk in &chunks[..WARM_UP] {
        parser.feed(chunk, &mut on).expect("valid stream");
    }
    let mut counted = 0u64;
    let n = allocations(|| {
        let mut on = |ev: Event<'_>| {
            if let Event::Content { pieces, .. } = ev {
                counted += u64::from(pieces);
            }
        };
        // The last events (finish reason, usage, [DONE]) are once per stream.
        for chunk in &chunks[WARM_UP..chunks.len() - 4] {
            parser.feed(chunk, &mut on).expect("valid stream");
        }
    });
    (n, counted)
}

#[test]
fn content_chunks_are_parsed_without_allocating() {
    let _profiler = dhat::Profiler::builder().testing().build();
    assert_eq!(
        allocations(|| drop(std::hint::black_box(Vec::<u8>::with_capacity(64)))),
        1,
        "the counter sees an allocation"
    );
    let openai = streams::openai_stream(1500);
    let anthropic = streams::anthropic_stream(1500);
    for (name, kind, op, body) in [
        (
            "openai",
            ProviderKind::Openai,
            Operation::ChatCompletions,
            &openai,
        ),
        (
            "anthropic",
            ProviderKind::Anthropic,
            Operation::Messages,
            &anthropic,
        ),
    ] {
        for (how, chunks) in [
            ("one event per chunk", streams::per_event(body)),
            ("97-byte reads", streams::fixed(body, 97)),
            ("4 KiB reads", streams::fixed(body, 4096)),
        ] {
            let (n, content) = count(kind, op, &chunks);
            assert!(
                content >= 100,
                "{name}, {how}: the counted chunks carried content ({content} pieces)"
            );
            assert_eq!(
                n,
                0,
                "{name}, {how}: {n} allocations while parsing {} chunks with {content} content pieces",
                chunks.len() - WARM_UP - 4
            );
        }
    }
    websocket_messages_are_decoded_without_allocating();
}

/// The WebSocket side view: after the first messages, decoding server
/// text frames (whole or split across reads), masked client frames, and
/// permessage-deflate frames allocates nothing. Part of the one test above
/// (the counter is process-wide).
fn websocket_messages_are_decoded_without_allocating() {
    use tokentap::framing::websocket::{Deflate, Sender, WsDecoder, WsMessage, encode_frame};
    // Equal-sized events: a longer message later grows the buffer once
    // (per stream, geometrically), which is not what this counts.
    let events: Vec<String> = (0..400)
        .map(|i| {
            format!(
                r#"{{"type":"response.output_text.delta","event_id":"evt_{i:04}","delta":" tok{i:04}"}}"#
            )
        })
        .collect();
    let mut z = flate2::Compress::new(flate2::Compression::default(), false);
    let frames = |mask: Option<[u8; 4]>, deflate: bool, z: &mut flate2::Compress| {
        let mut all = Vec::new();
        for e in &events {
            let mut frame = Vec::new();
            if deflate {
                let mut data = Vec::with_capacity(e.len() + 64);
                z.compress_vec(e.as_bytes(), &mut data, flate2::FlushCompress::Sync)
                    .unwrap();
                data.truncate(data.len() - 4);
                encode_frame(true, true, 1, mask, &data, &mut frame);
            } else {
                encode_frame(true, false, 1, mask, e.as_bytes(), &mut frame);
            }
            all.push(frame);
        }
        all
    };
    let takeover = Some(Deflate {
        no_context_takeover: false,
        max_window_bits: 15,
    });
    let server = frames(None, false, &mut z);
    let server_stream = server.concat();
    let client = frames(Some([1, 2, 3, 4]), false, &mut z);
    let compressed = frames(None, true, &mut z);
    fn as_slices(v: &[Vec<u8>]) -> Vec<&[u8]> {
        v.iter().map(Vec::as_slice).collect()
    }
    for (how, sender, deflate, chunks) in [
        (
            "server, one frame per chunk",
            Sender::Server,
            None,
            as_slices(&server),
        ),
        (
            "server, 97-byte reads",
            Sender::Server,
            None,
            streams::fixed(&server_stream, 97),
        ),
        ("client, masked", Sender::Client, None, as_slices(&client)),
        (
            "server, deflate",
            Sender::Server,
            takeover,
            as_slices(&compressed),
        ),
    ] {
        let mut dec = WsDecoder::new(sender, 1 << 20, deflate);
        let mut texts = 0u64;
        for chunk in &chunks[..WARM_UP] {
            dec.feed(chunk, &mut |_| {}).unwrap();
        }
        let n = allocations(|| {
            for chunk in &chunks[WARM_UP..] {
                dec.feed(chunk, &mut |m| {
                    texts += u64::from(matches!(m, WsMessage::Text(_)))
                })
                .unwrap();
            }
        });
        assert!(
            texts >= 300,
            "websocket {how}: {texts} text messages decoded"
        );
        assert_eq!(
            n, 0,
            "websocket {how}: {n} allocations for {texts} messages"
        );
    }
}
