//! Unit tests of `websocket`: its own code in, assertions out.

use super::*;
use crate::framing::testing::{all_ways, text};
use flate2::{Compress, Compression, FlushCompress};

/// A message copied out of the decoder, for comparison.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Owned {
    Text(String),
    Binary(Vec<u8>),
    Close(Option<u16>, String),
    Ping,
    Pong,
    Skipped(u64),
    Opaque(u64),
}

fn own(m: WsMessage<'_>) -> Owned {
    match m {
        WsMessage::Text(t) => Owned::Text(text(t)),
        WsMessage::Binary(b) => Owned::Binary(b.to_vec()),
        WsMessage::Close { code, reason } => Owned::Close(code, text(reason)),
        WsMessage::Ping => Owned::Ping,
        WsMessage::Pong => Owned::Pong,
        WsMessage::Skipped { len } => Owned::Skipped(len),
        WsMessage::Opaque { len } => Owned::Opaque(len),
    }
}

type Outcome = (Vec<Owned>, Result<(), FramingError>);

/// Feed `pieces` in order; messages, then the first error (a failed
/// decoder must stay failed).
fn decode(mut dec: WsDecoder, pieces: &[&[u8]]) -> Outcome {
    let mut out = Vec::new();
    let mut on = |m: WsMessage<'_>| out.push(own(m));
    for piece in pieces {
        if let Err(e) = dec.feed(piece, &mut on) {
            assert_eq!(
                dec.feed(b"\x81\x00", &mut on),
                Err(e.clone()),
                "a failed decoder must refuse further input"
            );
            return (out, Err(e));
        }
    }
    (out, Ok(()))
}

/// The same input whole, split in two at every offset, and byte by byte
/// must give the same messages and result (`framing::testing::all_ways`
/// over `decode`). Returns the whole-input outcome.
fn decode_all_ways(make: impl Fn() -> WsDecoder, input: &[u8]) -> Outcome {
    all_ways(input, |pieces| decode(make(), pieces))
}

/// Whole, byte by byte, and split at a few offsets (for long inputs).
fn decode_some_ways(make: impl Fn() -> WsDecoder, input: &[u8]) -> Outcome {
    let whole = decode(make(), &[input]);
    let n = input.len();
    for at in [1, 2, 7, n / 3, n / 2, n - 5, n - 1] {
        let (a, b) = input.split_at(at.min(n));
        assert_eq!(decode(make(), &[a, b]), whole, "split at {at} differs");
    }
    for size in [1, 3, 1000, 4097] {
        let pieces: Vec<&[u8]> = input.chunks(size).collect();
        assert_eq!(decode(make(), &pieces), whole, "{size}-byte pieces differ");
    }
    whole
}

#[track_caller]
fn messages(make: impl Fn() -> WsDecoder, input: &[u8]) -> Vec<Owned> {
    let (out, result) = decode_all_ways(make, input);
    assert_eq!(result, Ok(()), "expected no error");
    out
}

fn server() -> WsDecoder {
    WsDecoder::new(Sender::Server, 1 << 16, None)
}

fn client() -> WsDecoder {
    WsDecoder::new(Sender::Client, 1 << 16, None)
}

const MASK: [u8; 4] = [0x37, 0xfa, 0x21, 0x3d];

fn frame(fin: bool, opcode: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    encode_frame(fin, false, opcode, None, payload, &mut out);
    out
}

fn masked(fin: bool, opcode: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    encode_frame(fin, false, opcode, Some(MASK), payload, &mut out);
    out
}

fn t(s: &str) -> Owned {
    Owned::Text(s.into())
}

fn malformed(why: &'static str) -> Result<(), FramingError> {
    Err(FramingError::Malformed(why))
}

#[test]
fn small_text_and_binary() {
    let mut input = frame(
        true,
        1,
        br#"{"type":"response.output_text.delta","delta":"Hi"}"#,
    );
    input.extend(frame(true, 2, &[0, 1, 2, 0xff]));
    input.extend(frame(true, 1, b""));
    assert_eq!(
        messages(server, &input),
        vec![
            t(r#"{"type":"response.output_text.delta","delta":"Hi"}"#),
            Owned::Binary(vec![0, 1, 2, 0xff]),
            t(""),
        ]
    );
    assert_eq!(messages(server, b""), vec![], "no bytes, no messages");
}

#[test]
fn sixteen_and_sixty_four_bit_lengths() {
    let medium: String = (0..300)
        .map(|i| char::from(b'a' + (i % 26) as u8))
        .collect();
    let input = frame(true, 1, medium.as_bytes());
    assert_eq!(&input[1..4], &[126, 0x01, 0x2c], "a 16-bit length");
    assert_eq!(messages(server, &input), vec![t(&medium)]);
    // A short payload behind a 64-bit length (not minimal, but unambiguous).
    let mut input = vec![0x81, 127, 0, 0, 0, 0, 0, 0, 0, 5];
    input.extend_from_slice(b"hello");
    assert_eq!(messages(server, &input), vec![t("hello")]);
    // A payload that needs the 64-bit length, masked.
    let big: Vec<u8> = (0..70_000u32).map(|i| (i * 7) as u8).collect();
    let input = masked(true, 2, &big);
    assert_eq!(input[1], 0x80 | 127, "a masked 64-bit length");
    let (out, result) = decode_some_ways(|| WsDecoder::new(Sender::Client, 1 << 17, None), &input);
    assert_eq!(result, Ok(()));
    assert_eq!(out, vec![Owned::Binary(big)]);
}

#[test]
fn masked_client_frames() {
    let mut input = masked(true, 1, br#"{"type":"response.create"}"#);
    input.extend(masked(true, 1, b"a"));
    input.extend(masked(true, 9, b"ping body"));
    assert_ne!(
        &input[6..12],
        br#"{"type"#,
        "the payload is masked on the wire"
    );
    assert_eq!(
        messages(client, &input),
        vec![t(r#"{"type":"response.create"}"#), t("a"), Owned::Ping]
    );
}

#[test]
fn fragmented_message_with_a_ping_between_fragments() {
    for (make, enc) in [
        (
            server as fn() -> WsDecoder,
            frame as fn(bool, u8, &[u8]) -> Vec<u8>,
        ),
        (client, masked),
    ] {
        let mut input = enc(false, 1, b"Hel");
        input.extend(enc(true, 9, b"are you there"));
        input.extend(enc(false, 0, b"lo, "));
        input.extend(enc(true, 10, b""));
        input.extend(enc(true, 0, b"world"));
        input.extend(enc(false, 2, &[1]));
        input.extend(enc(true, 0, &[2]));
        assert_eq!(
            messages(make, &input),
            vec![
                Owned::Ping,
                Owned::Pong,
                t("Hello, world"),
                Owned::Binary(vec![1, 2])
            ]
        );
    }
}

#[test]
fn close_with_and_without_code() {
    let mut body = 1000u16.to_be_bytes().to_vec();
    body.extend_from_slice(b"bye");
    let mut input = frame(true, 8, &body);
    input.extend(frame(true, 8, &4000u16.to_be_bytes()));
    input.extend(frame(true, 8, b""));
    assert_eq!(
        messages(server, &input),
        vec![
            Owned::Close(Some(1000), "bye".into()),
            Owned::Close(Some(4000), String::new()),
            Owned::Close(None, String::new()),
        ]
    );
    assert_eq!(
        messages(client, &masked(true, 8, &body)),
        vec![Owned::Close(Some(1000), "bye".into())]
    );
    assert_eq!(
        decode_all_ways(server, &frame(true, 8, b"x")).1,
        malformed("websocket close frame with a 1-byte body")
    );
}

/// Compress `message` as a permessage-deflate sender would: sync flush,
/// the 0x00 0x00 0xff 0xff tail stripped (RFC 7692 §7.2.1).
fn deflate(z: &mut Compress, message: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(message.len() + 64);
    let mut input = message;
    loop {
        let before = z.total_in();
        if out.capacity() - out.len() < 64 {
            out.reserve(out.capacity());
        }
        z.compress_vec(input, &mut out, FlushCompress::Sync)
            .expect("compressible");
        input = &input[(z.total_in() - before) as usize..];
        if input.is_empty() && out.capacity() > out.len() {
            break;
        }
    }
    assert!(
        out.ends_with(&DEFLATE_TAIL),
        "a sync flush ends with the tail"
    );
    out.truncate(out.len() - 4);
    out
}

fn compressor() -> Compress {
    Compress::new(Compression::default(), false)
}

fn compressed(fin: bool, opcode: u8, mask: Option<[u8; 4]>, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    encode_frame(fin, true, opcode, mask, payload, &mut out);
    out
}

fn with_deflate(sender: Sender, max: usize, no_context_takeover: bool) -> WsDecoder {
    let params = Deflate {
        no_context_takeover,
        max_window_bits: 15,
    };
    WsDecoder::new(sender, max, Some(params))
}

const DELTA: &str =
    r#"{"type":"response.output_text.delta","item_id":"msg_1","output_index":0,"delta":"Hello"}"#;

#[test]
fn deflate_with_context_takeover() {
    let mut z = compressor();
    let first = deflate(&mut z, DELTA.as_bytes());
    let second = deflate(&mut z, DELTA.as_bytes());
    assert!(
        second.len() < first.len() / 2,
        "the second message refers back to the first"
    );
    let mut input = compressed(true, 1, None, &first);
    input.extend(compressed(true, 1, None, &second));
    input.extend(frame(true, 1, b"plain"));
    let make = || with_deflate(Sender::Server, 1 << 16, false);
    assert_eq!(messages(make, &input), vec![t(DELTA), t(DELTA), t("plain")]);
    // Without the carried window the second message cannot be inflated.
    let (out, _) = decode(with_deflate(Sender::Server, 1 << 16, true), &[&input]);
    assert_ne!(out.get(1), Some(&t(DELTA)), "the test needs the window");
}

#[test]
fn deflate_without_context_takeover_masked_and_fragmented() {
    let mut input = Vec::new();
    for _ in 0..2 {
        // A fresh window per message, as the sender promised.
        let data = deflate(&mut compressor(), DELTA.as_bytes());
        let (a, b) = data.split_at(data.len() / 2);
        input.extend(compressed(false, 1, Some(MASK), a));
        input.extend(masked(true, 9, b""));
        let mut last = Vec::new();
        encode_frame(true, false, 0, Some(MASK), b, &mut last);
        input.extend(last);
    }
    let make = || with_deflate(Sender::Client, 1 << 16, true);
    assert_eq!(
        messages(make, &input),
        vec![Owned::Ping, t(DELTA), Owned::Ping, t(DELTA)]
    );
    // A message ending with a final block (BFINAL) inflates too.
    let mut data = Vec::with_capacity(64);
    compressor()
        .compress_vec(b"final", &mut data, FlushCompress::Finish)
        .expect("compressible");
    // Twice: the inflater must be reset after a final block.
    let input = compressed(true, 1, Some(MASK), &data).repeat(2);
    assert_eq!(messages(make, &input), vec![t("final"), t("final")]);
}

#[test]
fn final_block_under_context_takeover_stops_at_the_next_compressed_message() {
    let mut data = Vec::with_capacity(64);
    compressor()
        .compress_vec(b"final", &mut data, FlushCompress::Finish)
        .expect("compressible");
    let mut input = compressed(true, 1, None, &data);
    input.extend(compressed(true, 1, None, &data));
    let (out, result) = decode_all_ways(|| with_deflate(Sender::Server, 1 << 16, false), &input);
    assert_eq!(out, vec![t("final")]);
    assert!(
        matches!(result, Err(FramingError::Malformed(m)) if m.contains("BFINAL")),
        "got {result:?}"
    );
}

#[test]
fn oversized_message_is_skipped_and_the_next_decodes() {
    let make = || WsDecoder::new(Sender::Server, 10, None);
    let mut input = frame(true, 1, b"0123456789A");
    input.extend(frame(true, 1, b"0123456789"));
    input.extend(frame(false, 1, b"01234"));
    input.extend(frame(true, 9, b""));
    input.extend(frame(true, 0, b"567890"));
    input.extend(frame(true, 2, b"ok"));
    assert_eq!(
        messages(make, &input),
        vec![
            Owned::Skipped(11),
            t("0123456789"),
            Owned::Ping,
            Owned::Skipped(11),
            Owned::Binary(b"ok".to_vec()),
        ]
    );
    let mut dec = make();
    dec.feed(&input, &mut |_| {}).expect("valid stream");
    assert!(dec.retained_bytes() <= 11, "buffer stays within the cap");
}

#[test]
fn oversized_compressed_message_keeps_the_window() {
    let long = DELTA.repeat(20);
    assert!(DELTA.len() <= 90);
    for max in [200, 90] {
        // 200: the wire size fits, the inflated size does not; 90: neither.
        let mut z = compressor();
        let first = deflate(&mut z, long.as_bytes());
        let second = deflate(&mut z, DELTA.as_bytes());
        assert!(first.len() < 200 && first.len() > 90, "{}", first.len());
        let mut input = compressed(true, 1, None, &first);
        input.extend(compressed(true, 1, None, &second));
        let make = || with_deflate(Sender::Server, max, false);
        assert_eq!(
            messages(make, &input),
            vec![Owned::Skipped(first.len() as u64), t(DELTA)],
            "max {max}"
        );
    }
}

/// Audio-like bytes: no byte can start JSON.
fn audio(n: usize) -> Vec<u8> {
    (0..n).map(|i| 0x80 | (i * 7 % 128) as u8).collect()
}

#[test]
fn opaque_binary_is_walked_not_kept() {
    let pcm = audio(300);
    let json = br#"{"serverContent":{"turnComplete":true}}"#;
    for sender in [Sender::Server, Sender::Client] {
        let f = |fin, op, payload: &[u8]| match sender {
            Sender::Server => frame(fin, op, payload),
            Sender::Client => masked(fin, op, payload),
        };
        let mut input = f(true, 2, &pcm);
        input.extend(f(false, 2, &pcm[..100]));
        input.extend(f(true, 9, b"p"));
        input.extend(f(false, 0, &pcm[100..200]));
        input.extend(f(true, 0, &pcm[200..]));
        input.extend(f(true, 2, json));
        input.extend(f(true, 2, b""));
        input.extend(f(false, 2, b""));
        input.extend(f(true, 0, &pcm));
        input.extend(f(false, 2, b"\n"));
        input.extend(f(true, 0, json));
        input.extend(f(true, 2, b"[1]"));
        input.extend(f(true, 1, b"\x80 text is never opaque"));
        let make = || WsDecoder::new(sender, 1 << 16, None).skip_opaque_binary();
        let mut json_nl = b"\n".to_vec();
        json_nl.extend(json);
        assert_eq!(
            messages(make, &input),
            vec![
                Owned::Opaque(300),
                Owned::Ping,
                Owned::Opaque(300),
                Owned::Binary(json.to_vec()),
                Owned::Opaque(0),
                Owned::Opaque(300),
                Owned::Binary(json_nl),
                Owned::Binary(b"[1]".to_vec()),
                Owned::Text(text(b"\x80 text is never opaque")),
            ],
            "{sender:?}"
        );
        // Without the option, the same binary messages are handed out.
        let plain = || WsDecoder::new(sender, 1 << 16, None);
        assert_eq!(
            messages(plain, &input)[0],
            Owned::Binary(pcm.clone()),
            "{sender:?}"
        );
    }
}

#[test]
fn opaque_binary_takes_no_reassembly_memory() {
    let pcm = audio(40_000);
    let mut input = masked(true, 2, &pcm);
    for (i, piece) in pcm.chunks(10_000).enumerate() {
        input.extend(masked(false, if i == 0 { 2 } else { 0 }, piece));
    }
    input.extend(masked(true, 0, b""));
    let mut dec = WsDecoder::new(Sender::Client, 1 << 20, None).skip_opaque_binary();
    let mut out = Vec::new();
    for chunk in input.chunks(1500) {
        dec.feed(chunk, &mut |m| out.push(own(m)))
            .expect("valid frames");
    }
    assert_eq!(out, vec![Owned::Opaque(40_000), Owned::Opaque(40_000)]);
    assert_eq!(
        dec.retained_bytes(),
        0,
        "nothing was unmasked or reassembled"
    );
    // Over the cap, an opaque message is still said to be opaque.
    let small = || WsDecoder::new(Sender::Client, 1000, None).skip_opaque_binary();
    assert_eq!(
        decode_some_ways(small, &input).0,
        vec![Owned::Opaque(40_000), Owned::Opaque(40_000)]
    );
}

#[test]
fn opaque_compressed_binary_keeps_the_window() {
    let pcm = audio(3000);
    for no_context_takeover in [false, true] {
        let mut z = compressor();
        let mut next = |m: &[u8]| {
            if no_context_takeover {
                z.reset();
            }
            deflate(&mut z, m)
        };
        let first = next(&pcm);
        let json = next(DELTA.as_bytes());
        let second = next(&pcm);
        let mut input = compressed(true, 2, None, &first);
        input.extend(compressed(true, 2, None, &json));
        input.extend(compressed(false, 2, None, &second[..10]));
        input.extend(frame(true, 0, &second[10..]));
        input.extend(compressed(true, 1, None, &next(DELTA.as_bytes())));
        let make =
            || with_deflate(Sender::Server, 1 << 16, no_context_takeover).skip_opaque_binary();
        // Under context takeover the last message refers back across
        // the skipped audio: it inflates right only if that was
        // inflated too.
        assert_eq!(
            messages(make, &input),
            vec![
                Owned::Opaque(first.len() as u64),
                Owned::Binary(DELTA.as_bytes().to_vec()),
                Owned::Opaque(second.len() as u64),
                t(DELTA),
            ],
            "no_context_takeover: {no_context_takeover}"
        );
    }
}

#[test]
fn decompression_bomb_is_skipped_with_bounded_memory() {
    let zeros = vec![0u8; 8 << 20];
    for no_context_takeover in [false, true] {
        let mut z = compressor();
        let bomb = deflate(&mut z, &zeros);
        if no_context_takeover {
            z = compressor();
        }
        let after = deflate(&mut z, b"after the bomb");
        assert!(bomb.len() < 16 << 10, "a bomb: {} bytes", bomb.len());
        let mut input = compressed(true, 1, None, &bomb);
        input.extend(compressed(true, 1, None, &after));
        let max = 64 << 10;
        let make = || with_deflate(Sender::Server, max, no_context_takeover);
        let (out, result) = decode_some_ways(make, &input);
        assert_eq!(result, Ok(()));
        assert_eq!(
            out,
            vec![Owned::Skipped(bomb.len() as u64), t("after the bomb")]
        );
        let mut dec = make();
        dec.feed(&input, &mut |_| {}).expect("valid stream");
        assert!(
            dec.retained_bytes() <= max + 1,
            "inflated bytes kept: {} for a {max}-byte cap",
            dec.retained_bytes()
        );
    }
}

#[test]
fn single_frame_message_in_one_chunk_is_borrowed() {
    let mut chunk = frame(true, 1, b"one");
    chunk.extend(frame(true, 1, b"two"));
    let range = chunk.as_ptr_range();
    let mut dec = server();
    let mut borrowed = 0;
    dec.feed(&chunk, &mut |m| {
        if let WsMessage::Text(t) = m {
            borrowed += usize::from(range.contains(&t.as_ptr()));
        }
    })
    .expect("valid frames");
    assert_eq!(borrowed, 2, "both messages borrowed from the chunk");
    assert_eq!(dec.retained_bytes(), 0, "nothing buffered");
}

/// A decoder constructor, for tables of cases.
type Make = fn() -> WsDecoder;

#[test]
fn protocol_violations_are_errors() {
    let cases: [(Make, Vec<u8>, &str); 12] = [
        (
            client,
            frame(true, 1, b"hi"),
            "websocket client frame is not masked",
        ),
        (
            server,
            masked(true, 1, b"hi"),
            "websocket server frame is masked",
        ),
        (
            server,
            frame(true, 3, b""),
            "websocket frame has a reserved opcode",
        ),
        (
            server,
            frame(true, 0xB, b""),
            "websocket frame has a reserved opcode",
        ),
        (
            server,
            frame(true, 9, &[b'p'; 126]),
            "websocket control frame longer than 125 bytes",
        ),
        (
            server,
            frame(false, 9, b""),
            "websocket control frame is fragmented",
        ),
        (
            server,
            compressed(true, 1, None, b"x"),
            "websocket frame has RSV1 set but permessage-deflate was not negotiated",
        ),
        (
            server,
            vec![0xA1, 0],
            "websocket frame has RSV2 or RSV3 set (no extension defines them)",
        ),
        (
            server,
            frame(true, 0, b"x"),
            "websocket continuation frame without a message to continue",
        ),
        (
            server,
            [frame(false, 1, b"a"), frame(true, 1, b"b")].concat(),
            "websocket data frame starts a new message inside a fragmented one",
        ),
        (
            server,
            vec![0x82, 127, 0x80, 0, 0, 0, 0, 0, 0, 1],
            "websocket 64-bit payload length has its top bit set",
        ),
        (
            server,
            frame(true, 8, b"x"),
            "websocket close frame with a 1-byte body",
        ),
    ];
    for (make, input, why) in cases {
        let mut with_good_first = frame(true, 1, b"first");
        if make().sender == Sender::Client {
            with_good_first = masked(true, 1, b"first");
        }
        with_good_first.extend(&input);
        assert_eq!(
            decode_all_ways(make, &with_good_first),
            (vec![t("first")], malformed(why)),
            "{why}"
        );
    }
}

#[test]
fn compression_violations_are_errors() {
    let make = || with_deflate(Sender::Server, 1 << 10, true);
    let mut input = compressed(false, 1, None, b"");
    input.extend(compressed(true, 0, None, b""));
    assert_eq!(
        decode_all_ways(make, &input).1,
        malformed("websocket continuation frame has RSV1 set")
    );
    assert_eq!(
        decode_all_ways(make, &compressed(true, 9, None, b"")).1,
        malformed("websocket control frame has RSV1 set")
    );
    assert_eq!(
        decode_all_ways(make, &compressed(true, 1, None, &[0xff; 8])).1,
        malformed("permessage-deflate data is not valid DEFLATE")
    );
}

#[test]
fn finish_says_whether_the_stream_stopped_inside_a_frame() {
    let mut dec = server();
    dec.feed(&frame(true, 1, b"ok"), &mut |_| {})
        .expect("valid");
    assert_eq!(dec.finish(), Ok(()));
    let mut dec = server();
    dec.feed(&frame(false, 1, b"part"), &mut |_| {})
        .expect("valid");
    assert_eq!(
        dec.finish(),
        malformed("websocket stream ended inside a frame or message")
    );
}

fn params(no_context_takeover: bool, max_window_bits: u8) -> Deflate {
    Deflate {
        no_context_takeover,
        max_window_bits,
    }
}

#[test]
fn negotiated_deflate_reads_real_responses() {
    assert_eq!(negotiated_deflate(&[]), Ok(None));
    assert_eq!(negotiated_deflate(&["", " , "]), Ok(None));
    assert_eq!(
        negotiated_deflate(&["permessage-deflate"]),
        Ok(Some((params(false, 15), params(false, 15))))
    );
    assert_eq!(
        negotiated_deflate(&[
            "permessage-deflate; client_max_window_bits=15; server_no_context_takeover"
        ]),
        Ok(Some((params(false, 15), params(true, 15))))
    );
    assert_eq!(
        negotiated_deflate(&[
            "Permessage-Deflate;Server_Max_Window_Bits=\"10\";client_no_context_takeover;client_max_window_bits=8"
        ]),
        Ok(Some((params(true, 8), params(false, 10))))
    );
    assert_eq!(
        negotiated_deflate(&["", "permessage-deflate; server_max_window_bits=12"]),
        Ok(Some((params(false, 15), params(false, 12))))
    );
}

#[test]
fn negotiated_deflate_rejects_what_it_cannot_read() {
    let rejected = [
        "permessage-deflate, x-webkit-deflate-frame",
        "x-custom-extension",
        "permessage-deflate, permessage-deflate",
        "; server_no_context_takeover",
        "permessage-deflate; client_max_window_bits",
        "permessage-deflate; server_max_window_bits=16",
        "permessage-deflate; server_max_window_bits=7",
        "permessage-deflate; server_max_window_bits=010",
        "permessage-deflate; server_max_window_bits=1a",
        "permessage-deflate; server_max_window_bits=\"10",
        "permessage-deflate; server_no_context_takeover=1",
        "permessage-deflate; server_no_context_takeover; server_no_context_takeover",
        "permessage-deflate; mystery_param",
    ];
    for value in rejected {
        let result = negotiated_deflate(&[value]);
        assert!(
            matches!(result, Err(FramingError::Malformed(_))),
            "{value:?} gave {result:?}"
        );
    }
    assert!(
        negotiated_deflate(&["permessage-deflate", "permessage-deflate"]).is_err(),
        "twice across header lines"
    );
    assert!(
        negotiated_deflate(&["permessage-deflate", "x-other; a=\"b,c\""]).is_err(),
        "an unknown extension on a second line"
    );
}

#[test]
fn unmask_matches_byte_by_byte_at_every_phase() {
    let data: Vec<u8> = (0..37).collect();
    for phase in 0..4 {
        let mut fast = data.clone();
        unmask(&mut fast, MASK, phase);
        let slow: Vec<u8> = data
            .iter()
            .enumerate()
            .map(|(i, b)| b ^ MASK[(phase + i) % 4])
            .collect();
        assert_eq!(fast, slow, "phase {phase}");
    }
}
