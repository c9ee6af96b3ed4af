//! Metered-path harness: raw fuzzer input in, assertions about
//! `meter::body::Meter` (decompression + parser + tally) out.
//!
//! The input starts with the provider harness's control bytes, then one
//! more: the `Content-Encoding` (none, gzip, deflate, br, zstd), whether the
//! body is sent raw under that encoding (garbage for the decoder) or
//! compressed by the harness first, the status (200 or 500), and the
//! request's `stream` flag. Invariants:
//! - nothing panics, and exactly one `Measurement` is recorded;
//! - `response_bytes` is the number of bytes the upstream sent;
//! - for a body the harness compressed, the figures (outcome, error type,
//!   usage, tokens, content chunks, model, id, finish reasons, server
//!   timings, tools) equal those of the plain body, whole, split in two, and byte
//!   by byte: decompression and chunking change nothing.

use std::io::Write;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Instant, SystemTime};

use tokentap::meter::body::{End, Meter};
use tokentap::meter::{Measurement, Recorder, RequestBody, RequestFacts, Unmetered};
use tokentap::providers::Parser;

use super::providers;

/// Bytes at the start of an input that steer this harness.
pub const CONTROL_LEN: usize = providers::CONTROL_LEN + 1;

/// The `Content-Encoding` values tried (`None` = no header).
pub const ENCODINGS: [Option<&str>; 5] = [
    None,
    Some("gzip"),
    Some("deflate"),
    Some("br"),
    Some("zstd"),
];

/// How an input is to be metered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    pub parse: providers::Plan,
    pub encoding: Option<&'static str>,
    /// Send the body as it is under `encoding`, instead of compressing it.
    pub raw: bool,
    /// `deflate` only: compress without the zlib wrapper.
    pub raw_deflate: bool,
    pub status: u16,
    pub stream: bool,
}

impl Plan {
    /// Split an input into its plan and body.
    pub fn parse(input: &[u8]) -> (Plan, &[u8]) {
        let options = input.get(providers::CONTROL_LEN).copied().unwrap_or(0);
        let mut head = input[..input.len().min(providers::CONTROL_LEN)].to_vec();
        head.resize(providers::CONTROL_LEN, 0);
        let body = input.get(CONTROL_LEN..).unwrap_or_default();
        head.extend_from_slice(body);
        let (parse, _) = providers::Plan::parse(&head);
        let plan = Plan {
            parse,
            encoding: ENCODINGS[usize::from(options & 7) % ENCODINGS.len()],
            raw: options & 8 != 0,
            raw_deflate: options & 0x40 != 0,
            status: if options & 0x10 == 0 { 200 } else { 500 },
            stream: options & 0x20 != 0,
        };
        (plan, body)
    }

    /// The control bytes that parse back into this plan (for seeds).
    pub fn encode(self) -> [u8; CONTROL_LEN] {
        let mut out = [0; CONTROL_LEN];
        out[..providers::CONTROL_LEN].copy_from_slice(&self.parse.encode());
        let enc = ENCODINGS
            .iter()
            .position(|e| *e == self.encoding)
            .unwrap_or(0) as u8;
        out[providers::CONTROL_LEN] = enc
            | u8::from(self.raw) << 3
            | u8::from(self.status != 200) << 4
            | u8::from(self.stream) << 5
            | u8::from(self.raw_deflate) << 6;
        out
    }
}

/// Collects the measurements a meter records.
struct Capture(Arc<Mutex<Vec<Measurement>>>);

impl Recorder for Capture {
    fn chunk_gap(&mut self, _gap: std::time::Duration) {}

    fn finish(self: Box<Self>, measurement: Measurement) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(measurement);
    }
}

/// Meter `pieces` as one response; the single measurement it recorded.
#[allow(
    clippy::disallowed_methods,
    reason = "start instant of a fuzz input request; the harness measures nothing"
)]
pub fn meter(plan: &Plan, encoding: Option<&str>, pieces: &[&[u8]]) -> Measurement {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let facts = RequestFacts {
        route: Arc::from("fuzz"),
        route_labels: Default::default(),
        provider: plan.parse.kind,
        operation: plan.parse.operation,
        request_model: None,
        stream: plan.stream,
        tenant: None,
        session: None,
        server_address: Arc::from("127.0.0.1"),
        server_port: 9,
        request_body: RequestBody::Sniffed,
        service_tier: None,
        start_wall: SystemTime::now(),
        start: Instant::now(),
    };
    let p = &plan.parse;
    let parser = Parser::new(p.kind, p.operation, p.content_type, p.max_frame)
        .ok_or_else(|| Unmetered::UnknownFormat(p.content_type.to_owned()));
    let mut meter = Meter::new(facts, Box::new(Capture(Arc::clone(&seen))));
    meter.on_head(plan.status, plan.stream, parser, encoding);
    for piece in pieces {
        meter.on_data(piece);
    }
    meter.finish(End::Eos);
    drop(meter);
    let mut seen = std::mem::take(&mut *seen.lock().unwrap_or_else(PoisonError::into_inner));
    assert_eq!(
        seen.len(),
        1,
        "{plan:?}: exactly one measurement per request"
    );
    let m = seen.remove(0);
    let sent: usize = pieces.iter().map(|p| p.len()).sum();
    assert_eq!(m.response_bytes, sent as u64, "{plan:?}: response_bytes");
    m
}

/// What a measurement says that does not depend on the clock.
pub fn figures(m: &Measurement) -> String {
    format!(
        "{:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {} {:?} {:?} {:?}",
        m.outcome,
        m.error_type,
        m.status,
        m.usage,
        m.output_tokens,
        m.token_source,
        m.response_model,
        m.response_id,
        m.content_chunks,
        m.finish_reasons,
        m.upstream_timing,
        m.tools,
    )
}

/// `body` compressed with `encoding` (zlib-wrapped `deflate` unless `raw_deflate`).
pub fn compress(encoding: &str, raw_deflate: bool, body: &[u8]) -> Vec<u8> {
    use flate2::Compression;
    use flate2::write::{DeflateEncoder, GzEncoder, ZlibEncoder};
    let level = Compression::fast();
    let written = match encoding {
        "gzip" => finish(GzEncoder::new(Vec::new(), level), body, |e| e.finish()),
        "deflate" if raw_deflate => {
            finish(DeflateEncoder::new(Vec::new(), level), body, |e| e.finish())
        }
        "deflate" => finish(ZlibEncoder::new(Vec::new(), level), body, |e| e.finish()),
        "br" => {
            let mut out = Vec::new();
            let mut enc = brotli::CompressorWriter::new(&mut out, 4096, 1, 18);
            let done = enc.write_all(body).and_then(|()| enc.flush());
            drop(enc);
            done.map(|()| out)
        }
        "zstd" => zstd::stream::encode_all(body, 1),
        other => panic!("no compressor for {other}"),
    };
    written.unwrap_or_else(|e| panic!("compressing into memory with {encoding} failed: {e}"))
}

fn finish<W: Write>(
    mut enc: W,
    body: &[u8],
    done: impl FnOnce(W) -> std::io::Result<Vec<u8>>,
) -> std::io::Result<Vec<u8>> {
    enc.write_all(body)?;
    done(enc)
}

/// The invariants for one plan and body.
pub fn check(plan: &Plan, body: &[u8]) {
    let at = plan.parse.at;
    match plan.encoding {
        Some(encoding) if plan.raw => {
            // Garbage under an encoding: one measurement, bytes counted.
            meter(plan, Some(encoding), &[body]);
            let (a, b) = body.split_at(at.min(body.len()));
            meter(plan, Some(encoding), &[a, b]);
        }
        encoding => {
            let plain = figures(&meter(plan, None, &[body]));
            let sent = match encoding {
                Some(e) => compress(e, plan.raw_deflate, body),
                None => body.to_vec(),
            };
            let at = at.min(sent.len());
            let (a, b) = sent.split_at(at);
            let bytes: Vec<&[u8]> = sent.chunks(1).collect();
            for (how, pieces) in [
                ("whole", vec![&sent[..]]),
                ("split", vec![a, b]),
                ("bytewise", bytes),
            ] {
                assert_eq!(
                    figures(&meter(plan, encoding, &pieces)),
                    plain,
                    "{plan:?}: {how} ({encoding:?}) differs from the plain whole body"
                );
            }
        }
    }
}

/// The fuzz entry point.
pub fn fuzz_one(input: &[u8]) {
    let (plan, body) = Plan::parse(input);
    check(&plan, body);
}
