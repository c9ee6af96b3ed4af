//! Fuzz harness: raw fuzzer input in, assertions out. Shared by the
//! cargo-fuzz targets and by `tests/fuzz_corpus.rs`, which runs the same
//! invariants on the stable toolchain.
//!
//! The invariant for every decoder: feeding the bytes whole, split in two
//! at any point, or byte by byte never panics and yields the same frames
//! followed by the same result.
//!
//! The other stages have a module each, with its own control bytes and
//! invariants: `providers` (framing + adapter), `meter` (the metered path),
//! `sniff` (request bodies), `config` (TOML), `rewrite` (usage injection),
//! `realtime` (WebSocket session messages),
//! `websocket` (one direction of a relayed WebSocket).

pub mod config;
pub mod meter;
pub mod providers;
pub mod realtime;
pub mod rewrite;
pub mod sniff;
pub mod websocket;

use tokentap::framing::Decoder as _;
use tokentap::framing::eventstream::EventStreamDecoder;
use tokentap::framing::json_array::JsonArrayDecoder;
use tokentap::framing::ndjson::NdjsonDecoder;
use tokentap::framing::sse::SseDecoder;
use tokentap::framing::{Frame, FramingError};

/// The frame cap used unless the input asks for a small one.
pub const LARGE_CAP: usize = 1 << 16;

/// Bytes at the start of a fuzz input that steer the harness:
/// split point (u16 LE), then an options byte.
pub const CONTROL_LEN: usize = 3;

/// One decoder under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Sse,
    Ndjson,
    JsonArray,
    Eventstream,
}

impl Target {
    /// Every target.
    pub const ALL: [Target; 4] = [
        Target::Sse,
        Target::Ndjson,
        Target::JsonArray,
        Target::Eventstream,
    ];

    /// The cargo-fuzz target name, also its corpus directory.
    pub fn name(self) -> &'static str {
        match self {
            Target::Sse => "sse",
            Target::Ndjson => "ndjson",
            Target::JsonArray => "json_array",
            Target::Eventstream => "eventstream",
        }
    }
}

/// A frame copied out of the decoder, for comparison.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OwnedFrame {
    Sse {
        event: Vec<u8>,
        data: Vec<u8>,
    },
    Json(Vec<u8>),
    AwsEvent {
        message_type: Vec<u8>,
        event_type: Vec<u8>,
        payload: Vec<u8>,
    },
}

impl From<Frame<'_>> for OwnedFrame {
    fn from(frame: Frame<'_>) -> Self {
        match frame {
            Frame::Sse { event, data } => OwnedFrame::Sse {
                event: event.to_vec(),
                data: data.to_vec(),
            },
            Frame::Json(json) => OwnedFrame::Json(json.to_vec()),
            Frame::AwsEvent {
                message_type,
                event_type,
                payload,
            } => OwnedFrame::AwsEvent {
                message_type: message_type.to_vec(),
                event_type: event_type.to_vec(),
                payload: payload.to_vec(),
            },
        }
    }
}

/// Every frame in order, then the first error (or `Ok` from `finish`).
pub type Outcome = (Vec<OwnedFrame>, Result<(), FramingError>);

enum Decoder {
    Sse(SseDecoder),
    Ndjson(NdjsonDecoder),
    JsonArray(JsonArrayDecoder),
    Eventstream(EventStreamDecoder),
}

impl Decoder {
    fn new(target: Target, max: usize) -> Decoder {
        match target {
            Target::Sse => Decoder::Sse(SseDecoder::new(max)),
            Target::Ndjson => Decoder::Ndjson(NdjsonDecoder::new(max)),
            Target::JsonArray => Decoder::JsonArray(JsonArrayDecoder::new(max)),
            Target::Eventstream => Decoder::Eventstream(EventStreamDecoder::new(max)),
        }
    }

    fn feed(&mut self, chunk: &[u8], on: &mut dyn FnMut(Frame<'_>)) -> Result<(), FramingError> {
        match self {
            Decoder::Sse(d) => d.feed(chunk, on),
            Decoder::Ndjson(d) => d.feed(chunk, on),
            Decoder::JsonArray(d) => d.feed(chunk, on),
            Decoder::Eventstream(d) => d.feed(chunk, on),
        }
    }

    fn finish(&mut self, on: &mut dyn FnMut(Frame<'_>)) -> Result<(), FramingError> {
        match self {
            Decoder::Sse(d) => d.finish(on),
            Decoder::Ndjson(d) => d.finish(on),
            Decoder::JsonArray(d) => d.finish(on),
            Decoder::Eventstream(d) => d.finish(on),
        }
    }
}

/// Feed `pieces` in order to a fresh decoder, then finish.
pub fn decode(target: Target, pieces: &[&[u8]], max: usize) -> Outcome {
    let mut decoder = Decoder::new(target, max);
    let mut frames = Vec::new();
    let mut on = |frame: Frame<'_>| frames.push(OwnedFrame::from(frame));
    for piece in pieces {
        if let Err(e) = decoder.feed(piece, &mut on) {
            // A failed decoder must stay failed.
            let again = decoder.feed(b"", &mut on);
            assert_eq!(again, Err(e.clone()), "a failed decoder must stay failed");
            return (frames, Err(e));
        }
    }
    let result = decoder.finish(&mut on);
    (frames, result)
}

/// The invariant: `data` decoded whole, split at `at`, and byte by byte
/// gives the same outcome.
pub fn check_split(target: Target, data: &[u8], at: usize, max: usize) {
    let whole = decode(target, &[data], max);
    let (a, b) = data.split_at(at.min(data.len()));
    let split = decode(target, &[a, b], max);
    assert_eq!(
        split,
        whole,
        "{}: split at {at} differs from whole input",
        target.name()
    );
    let bytes: Vec<&[u8]> = data.chunks(1).collect();
    let bytewise = decode(target, &bytes, max);
    assert_eq!(
        bytewise,
        whole,
        "{}: byte-by-byte differs from whole input",
        target.name()
    );
}

/// How a fuzz input is to be run, read from its control bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    /// Where to split the payload (taken modulo its length + 1).
    pub at: usize,
    /// The decoder's frame cap.
    pub max: usize,
    /// Eventstream only: rewrite the CRCs so the input reaches header
    /// parsing instead of failing the prelude check.
    pub fix_crcs: bool,
}

impl Plan {
    /// Split a fuzz input into its plan and payload.
    pub fn parse(input: &[u8]) -> (Plan, &[u8]) {
        let (control, payload) = input.split_at(input.len().min(CONTROL_LEN));
        let byte = |i: usize| control.get(i).copied().unwrap_or(0);
        let options = byte(2);
        let plan = Plan {
            at: usize::from(u16::from_le_bytes([byte(0), byte(1)])) % (payload.len() + 1),
            // A small cap (0..=63) when bit 0 is set, to reach the size checks.
            max: if options & 1 == 1 {
                usize::from(options >> 2)
            } else {
                LARGE_CAP
            },
            fix_crcs: options & 2 == 2,
        };
        (plan, payload)
    }

    /// The control bytes that parse back into this plan (for seeds).
    pub fn encode(self) -> [u8; CONTROL_LEN] {
        let [lo, hi] = u16::try_from(self.at).unwrap_or(u16::MAX).to_le_bytes();
        let small = self.max < 64;
        let cap = if small { 1 | (self.max as u8) << 2 } else { 0 };
        let options = cap | u8::from(self.fix_crcs) << 1;
        [lo, hi, options]
    }
}

/// The fuzz entry point shared by every target.
pub fn fuzz_one(target: Target, input: &[u8]) {
    let (plan, payload) = Plan::parse(input);
    if target == Target::Eventstream && plan.fix_crcs {
        let mut fixed = payload.to_vec();
        fix_crcs(&mut fixed);
        check_split(target, &fixed, plan.at, plan.max);
    } else {
        check_split(target, payload, plan.at, plan.max);
    }
}

/// Rewrite the prelude and message CRCs of each eventstream message in
/// `bytes`, following the declared lengths as far as they fit.
pub fn fix_crcs(bytes: &mut [u8]) {
    let mut at = 0;
    while let Some(message) = bytes.get_mut(at..) {
        let Some(prelude) = message.first_chunk_mut::<12>() else {
            return;
        };
        let [t0, t1, t2, t3, h0, h1, h2, h3, ..] = *prelude;
        let crc = crc32fast::hash(&[t0, t1, t2, t3, h0, h1, h2, h3]);
        prelude[8..].copy_from_slice(&crc.to_be_bytes());
        let total = u32::from_be_bytes([t0, t1, t2, t3]) as usize;
        let Some(message) = message.get_mut(..total).filter(|_| total >= 16) else {
            return;
        };
        let Some((covered, trailer)) = message.split_last_chunk_mut::<4>() else {
            return;
        };
        *trailer = crc32fast::hash(covered).to_be_bytes();
        at += total;
    }
}
