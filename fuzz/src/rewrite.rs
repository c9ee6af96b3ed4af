//! Usage-injection harness: raw fuzzer input in, assertions about
//! `rewrite::UsageStripper` and `rewrite::add_include_usage` out.
//!
//! The first two bytes are a split point (u16 LE); the rest is both a
//! response stream for the stripper and a request body for the injector.
//! Invariants:
//! - nothing panics;
//! - the stripper's output does not depend on how the stream was chunked
//!   (whole, split in two, byte by byte);
//! - a stream without `"usage"` passes through unchanged, and the output is
//!   never longer than the input;
//! - a body that is a JSON object with members stays a JSON object with the
//!   same members, plus `stream_options.include_usage = true`.

use bytes::Bytes;
use tokentap::rewrite::{UsageStripper, add_include_usage};

/// Bytes at the start of an input that steer this harness: split point.
pub const CONTROL_LEN: usize = 2;

/// The stripper's output for `pieces`, in order, then its finish.
pub fn strip(pieces: &[&[u8]]) -> Vec<u8> {
    let mut stripper = UsageStripper::default();
    let mut out = Vec::new();
    for piece in pieces {
        out.extend_from_slice(&stripper.push(&Bytes::copy_from_slice(piece)));
    }
    out.extend_from_slice(&stripper.finish());
    assert!(stripper.is_empty(), "finish leaves nothing held back");
    out
}

/// The invariants for one stream / body.
pub fn check(data: &[u8], at: usize) {
    let whole = strip(&[data]);
    let (a, b) = data.split_at(at.min(data.len()));
    assert_eq!(strip(&[a, b]), whole, "stripper: split at {at} differs");
    let bytes: Vec<&[u8]> = data.chunks(1).collect();
    assert_eq!(strip(&bytes), whole, "stripper: byte by byte differs");
    assert!(whole.len() <= data.len(), "stripper output grew");
    if memchr::memmem::find(data, b"\"usage\"").is_none() {
        assert_eq!(whole, data, "a stream without usage must pass unchanged");
    }
    check_injection(data);
}

fn check_injection(body: &[u8]) {
    let Ok(serde_json::Value::Object(before)) = serde_json::from_slice(body) else {
        return;
    };
    let Some(after) = add_include_usage(body) else {
        assert!(
            before.is_empty(),
            "a JSON object with members gets include_usage"
        );
        return;
    };
    let Ok(serde_json::Value::Object(mut after)) = serde_json::from_slice(&after) else {
        panic!(
            "the rewritten body must stay a JSON object: {:?}",
            String::from_utf8_lossy(&after)
        );
    };
    let options = after.remove("stream_options");
    if !before.contains_key("stream_options") {
        assert_eq!(
            options,
            Some(serde_json::json!({"include_usage": true})),
            "stream_options added"
        );
        assert_eq!(after, before, "every other member is kept");
    }
}

/// The fuzz entry point.
pub fn fuzz_one(input: &[u8]) {
    let (control, data) = input.split_at(input.len().min(CONTROL_LEN));
    let at = match control {
        [lo, hi] => usize::from(u16::from_le_bytes([*lo, *hi])),
        _ => 0,
    };
    check(data, at % (data.len() + 1));
}
