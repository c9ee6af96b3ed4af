//! WebSocket side-view harness: raw fuzzer input in, assertions about
//! `framing::websocket::WsDecoder` out.
//!
//! Control bytes (3): a configuration byte — bit 0 = client sender (masked
//! frames) else server, bit 1 = permessage-deflate negotiated, bit 2 = no
//! context takeover, bits 3-7 = a small message cap (`8 × n` bytes; 0 =
//! [`LARGE_CAP`](crate::LARGE_CAP)) — then a split point (u16 LE). The rest
//! is the bytes one peer sent. Invariants:
//! - nothing panics;
//! - whole, split in two, and byte by byte give the same messages followed
//!   by the same result, and a failed decoder stays failed;
//! - no handed-out data message is longer than the cap, and the decoder
//!   never holds more than `cap + 1` bytes of message data;
//! - a decoder that skips opaque binary (`skip_opaque_binary`) agrees with
//!   a plain one, except that a binary message that cannot be JSON comes
//!   out as `Opaque` (and one over the cap may), however the input is split.

use flate2::{Compress, Compression, FlushCompress};
use tokentap::framing::FramingError;
use tokentap::framing::websocket::{Deflate, Sender, WsDecoder, WsMessage, encode_frame};

/// Bytes at the start of an input that steer this harness.
pub const CONTROL_LEN: usize = 3;

/// How one input is run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    /// Whose bytes these are.
    pub sender: Sender,
    /// permessage-deflate negotiated for this sender.
    pub deflate: Option<Deflate>,
    /// The decoder's `max_message`.
    pub max: usize,
    /// Where to split the payload (taken modulo its length + 1).
    pub at: usize,
}

impl Plan {
    /// Split a fuzz input into its plan and payload.
    pub fn parse(input: &[u8]) -> (Plan, &[u8]) {
        let (control, payload) = input.split_at(input.len().min(CONTROL_LEN));
        let byte = |i: usize| control.get(i).copied().unwrap_or(0);
        let config = byte(0);
        let cap = usize::from(config >> 3) * 8;
        let plan = Plan {
            sender: if config & 1 == 1 {
                Sender::Client
            } else {
                Sender::Server
            },
            deflate: (config & 2 == 2).then_some(Deflate {
                no_context_takeover: config & 4 == 4,
                max_window_bits: 15,
            }),
            max: if cap == 0 { crate::LARGE_CAP } else { cap },
            at: usize::from(u16::from_le_bytes([byte(1), byte(2)])) % (payload.len() + 1),
        };
        (plan, payload)
    }

    /// The control bytes that parse back into this plan (for seeds); `max`
    /// must be `LARGE_CAP` or a multiple of 8 below 256.
    pub fn encode(self) -> [u8; CONTROL_LEN] {
        let cap = if self.max >= 256 { 0 } else { self.max / 8 } as u8;
        let deflate = match self.deflate {
            None => 0,
            Some(d) => 2 | u8::from(d.no_context_takeover) << 2,
        };
        let config = u8::from(self.sender == Sender::Client) | deflate | cap << 3;
        let [lo, hi] = u16::try_from(self.at).unwrap_or(u16::MAX).to_le_bytes();
        [config, lo, hi]
    }

    fn decoder(self) -> WsDecoder {
        WsDecoder::new(self.sender, self.max, self.deflate)
    }

    /// Whether skipping opaque binary may stop inflating a message early
    /// (so miss a DEFLATE error in its rest), as skipping over the cap does.
    fn skips_inflating(self) -> bool {
        self.deflate.is_some_and(|d| d.no_context_takeover)
    }
}

/// A message copied out of the decoder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Owned {
    Text(Vec<u8>),
    Binary(Vec<u8>),
    Close(Option<u16>, Vec<u8>),
    Ping,
    Pong,
    Skipped(u64),
    Opaque(u64),
}

/// Every message in order, then the first error.
pub type Outcome = (Vec<Owned>, Result<(), FramingError>);

/// Feed `pieces` in order to a fresh decoder, checking the caps as it goes.
pub fn decode(plan: Plan, pieces: &[&[u8]]) -> Outcome {
    decode_with(plan.decoder(), plan, pieces)
}

/// `decode` with a decoder that skips opaque binary.
pub fn decode_opaque(plan: Plan, pieces: &[&[u8]]) -> Outcome {
    decode_with(plan.decoder().skip_opaque_binary(), plan, pieces)
}

fn decode_with(mut dec: WsDecoder, plan: Plan, pieces: &[&[u8]]) -> Outcome {
    let mut out = Vec::new();
    let max = plan.max;
    let mut on = |m: WsMessage<'_>| {
        out.push(match m {
            WsMessage::Text(t) => {
                assert!(t.len() <= max, "a {}-byte text over the {max} cap", t.len());
                Owned::Text(t.to_vec())
            }
            WsMessage::Binary(b) => {
                assert!(
                    b.len() <= max,
                    "a {}-byte binary over the {max} cap",
                    b.len()
                );
                Owned::Binary(b.to_vec())
            }
            WsMessage::Close { code, reason } => {
                assert!(reason.len() <= 123, "a close reason fits a control frame");
                Owned::Close(code, reason.to_vec())
            }
            WsMessage::Ping => Owned::Ping,
            WsMessage::Pong => Owned::Pong,
            WsMessage::Skipped { len } => Owned::Skipped(len),
            WsMessage::Opaque { len } => Owned::Opaque(len),
        })
    };
    for piece in pieces {
        let result = dec.feed(piece, &mut on);
        assert!(
            dec.retained_bytes() <= max + 1,
            "the decoder holds {} bytes for a {max}-byte cap",
            dec.retained_bytes()
        );
        if let Err(e) = result {
            let again = dec.feed(b"\x81\x00", &mut on);
            assert_eq!(again, Err(e.clone()), "a failed decoder must stay failed");
            return (out, Err(e));
        }
    }
    (out, Ok(()))
}

/// The invariant: `data` whole, split at `at`, and byte by byte agree.
pub fn check_split(plan: Plan, data: &[u8], at: usize) {
    let whole = decode(plan, &[data]);
    let (a, b) = data.split_at(at.min(data.len()));
    assert_eq!(decode(plan, &[a, b]), whole, "split at {at} differs");
    let bytes: Vec<&[u8]> = data.chunks(1).collect();
    assert_eq!(decode(plan, &bytes), whole, "byte by byte differs");
}

/// The opaque-skipping invariant (see the module docs) for `data`.
pub fn check_opaque(plan: Plan, data: &[u8], at: usize) {
    let (plain, plain_result) = decode(plan, &[data]);
    let whole = decode_opaque(plan, &[data]);
    let (a, b) = data.split_at(at.min(data.len()));
    assert_eq!(
        decode_opaque(plan, &[a, b]),
        whole,
        "opaque: split at {at} differs"
    );
    let bytes: Vec<&[u8]> = data.chunks(1).collect();
    assert_eq!(
        decode_opaque(plan, &bytes),
        whole,
        "opaque: byte by byte differs"
    );
    let (opaque, opaque_result) = whole;
    if !plan.skips_inflating() {
        assert_eq!(opaque_result, plain_result, "opaque: the same result");
        assert_eq!(opaque.len(), plain.len(), "opaque: as many messages");
    }
    let json = |b: &[u8]| matches!(b.first(), Some(b'{' | b'[' | b' ' | b'\t' | b'\n' | b'\r'));
    for (p, o) in plain.iter().zip(&opaque) {
        match (p, o) {
            (Owned::Binary(b), o) if !json(b) => {
                assert!(matches!(o, Owned::Opaque(_)), "{o:?} for non-JSON binary")
            }
            (Owned::Skipped(_), Owned::Skipped(_) | Owned::Opaque(_)) => {}
            (p, o) => assert_eq!(p, o, "opaque: the same message"),
        }
    }
}

/// The fuzz entry point.
pub fn fuzz_one(input: &[u8]) {
    let (plan, payload) = Plan::parse(input);
    check_split(plan, payload, plan.at);
    check_opaque(plan, payload, plan.at);
}

/// Compress one message as a permessage-deflate sender does (sync flush,
/// tail stripped).
pub fn deflate_message(z: &mut Compress, message: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(message.len() + 64);
    let mut input = message;
    loop {
        let before = z.total_in();
        if out.capacity() - out.len() < 64 {
            out.reserve(out.capacity());
        }
        if z.compress_vec(input, &mut out, FlushCompress::Sync)
            .is_err()
        {
            return out;
        }
        input = input
            .get((z.total_in() - before) as usize..)
            .unwrap_or_default();
        if input.is_empty() && out.capacity() > out.len() {
            break;
        }
    }
    if out.ends_with(&[0, 0, 0xff, 0xff]) {
        out.truncate(out.len() - 4);
    }
    out
}

/// Hand-made seeds: (name, input with control bytes).
pub fn seeds() -> Vec<(&'static str, Vec<u8>)> {
    const MASK: Option<[u8; 4]> = Some([0x12, 0x34, 0x56, 0x78]);
    const DELTA: &[u8] = br#"{"type":"response.output_text.delta","delta":"Hi"}"#;
    let server = Plan {
        sender: Sender::Server,
        deflate: None,
        max: crate::LARGE_CAP,
        at: 9,
    };
    let client = Plan {
        sender: Sender::Client,
        ..server
    };
    let takeover = Some(Deflate {
        no_context_takeover: false,
        max_window_bits: 15,
    });
    let fresh = Some(Deflate {
        no_context_takeover: true,
        max_window_bits: 15,
    });
    let frame = |fin: bool, rsv1: bool, opcode: u8, mask: Option<[u8; 4]>, payload: &[u8]| {
        let mut out = Vec::new();
        encode_frame(fin, rsv1, opcode, mask, payload, &mut out);
        out
    };
    let seed =
        |plan: Plan, frames: Vec<Vec<u8>>| [plan.encode().to_vec(), frames.concat()].concat();
    let mut z = Compress::new(Compression::default(), false);
    let c1 = deflate_message(&mut z, DELTA);
    let c2 = deflate_message(&mut z, DELTA);
    let solo = deflate_message(&mut Compress::new(Compression::default(), false), DELTA);
    let bomb = deflate_message(
        &mut Compress::new(Compression::fast(), false),
        &[0; 1 << 16],
    );
    let (s1, s2) = solo.split_at(solo.len() / 2);
    let mut close = 1000u16.to_be_bytes().to_vec();
    close.extend_from_slice(b"done");
    vec![
        (
            "server_text_binary",
            seed(
                server,
                vec![
                    frame(true, false, 1, None, DELTA),
                    frame(true, false, 2, None, &[0, 1, 2]),
                ],
            ),
        ),
        (
            "client_masked_text",
            seed(
                client,
                vec![frame(
                    true,
                    false,
                    1,
                    MASK,
                    br#"{"type":"response.create"}"#,
                )],
            ),
        ),
        (
            "server_fragments_with_ping",
            seed(
                server,
                vec![
                    frame(false, false, 1, None, b"Hel"),
                    frame(true, false, 9, None, b"?"),
                    frame(true, false, 0, None, b"lo"),
                    frame(true, false, 10, None, b""),
                ],
            ),
        ),
        (
            "client_fragments_with_close",
            seed(
                client,
                vec![
                    frame(false, false, 2, MASK, b"ab"),
                    frame(true, false, 0, MASK, b"cd"),
                    frame(true, false, 8, MASK, &close),
                ],
            ),
        ),
        (
            "server_16bit_length",
            seed(server, vec![frame(true, false, 1, None, &[b'x'; 300])]),
        ),
        (
            "server_64bit_length",
            seed(
                server,
                vec![vec![0x81, 127, 0, 0, 0, 0, 0, 0, 0, 3, b'a', b'b', b'c']],
            ),
        ),
        (
            "server_deflate_takeover",
            seed(
                Plan {
                    deflate: takeover,
                    ..server
                },
                vec![
                    frame(true, true, 1, None, &c1),
                    frame(true, true, 1, None, &c2),
                ],
            ),
        ),
        (
            "client_deflate_no_takeover_fragmented",
            seed(
                Plan {
                    deflate: fresh,
                    ..client
                },
                vec![
                    frame(false, true, 1, MASK, s1),
                    frame(true, false, 9, MASK, b""),
                    frame(true, false, 0, MASK, s2),
                    frame(true, true, 1, MASK, &solo),
                ],
            ),
        ),
        (
            "server_small_cap_skipped",
            seed(
                Plan { max: 16, ..server },
                vec![
                    frame(true, false, 1, None, DELTA),
                    frame(true, false, 1, None, b"short"),
                ],
            ),
        ),
        (
            "server_deflate_bomb_small_cap",
            seed(
                Plan {
                    max: 64,
                    deflate: takeover,
                    ..server
                },
                vec![
                    frame(true, true, 2, None, &bomb),
                    frame(true, false, 1, None, b"next"),
                ],
            ),
        ),
        (
            "client_unmasked_error",
            seed(client, vec![frame(true, false, 1, None, b"hi")]),
        ),
        (
            "server_reserved_opcode_error",
            seed(
                server,
                vec![
                    frame(true, false, 1, None, b"ok"),
                    frame(true, false, 3, None, b""),
                ],
            ),
        ),
        (
            "server_long_control_error",
            seed(server, vec![frame(true, false, 9, None, &[b'p'; 126])]),
        ),
    ]
}
