//! Sniff harness: raw fuzzer input in, assertions about `sniff::sniff` and
//! its `Replay` body out.
//!
//! The input's first bytes pick the `Content-Type` and `Content-Length`
//! headers, the sniff limit, and where to split the body into two frames;
//! the rest is the request body. Invariants:
//! - nothing panics, and the sniff never waits on a body that is ready;
//! - the replayed body is byte for byte the body the client sent, its size
//!   hint is exact once the body was read whole, and `whole()` agrees;
//! - the sniffed facts do not depend on how the body was split into frames;
//! - a body reported as sniffed is a JSON object, and its `model`,
//!   `stream`, `stream_options.include_usage` and end user equal what a
//!   full `serde_json::Value` parse of those members finds (serde reads a
//!   struct from a JSON array too; such bodies must be `not_json`). Invalid
//!   UTF-8 and out-of-range numbers inside members the sniffer skips are
//!   tolerated, as serde_json does.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::Future;
use std::pin::{Pin, pin};
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, header};
use http_body::{Body, Frame};
use tokentap::meter::RequestBody;
use tokentap::sniff::{Replay, Sniffed, sniff};

/// Bytes at the start of an input that steer this harness:
/// content type, content length, limit, split point (u16 LE).
pub const CONTROL_LEN: usize = 5;

/// `Content-Type` values tried (`None` = no header).
pub const CONTENT_TYPES: [Option<&str>; 6] = [
    None,
    Some("application/json"),
    Some("application/json; charset=utf-8"),
    Some("text/plain"),
    Some("multipart/form-data; boundary=x"),
    Some("application/x-www-form-urlencoded"),
];

/// How an input is to be sniffed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    pub content_type: Option<&'static str>,
    /// 0: no `Content-Length`; 1: the true length; 2: one more; 3: garbage.
    pub content_length: u8,
    pub limit: usize,
    /// Where to split the body into two frames (modulo its length + 1).
    pub at: usize,
}

impl Plan {
    /// Split an input into its plan and body.
    pub fn parse(input: &[u8]) -> (Plan, &[u8]) {
        let (control, body) = input.split_at(input.len().min(CONTROL_LEN));
        let byte = |i: usize| control.get(i).copied().unwrap_or(0);
        let plan = Plan {
            content_type: CONTENT_TYPES[usize::from(byte(0)) % CONTENT_TYPES.len()],
            content_length: byte(1) % 4,
            // 0 means no practical limit; else a small one, to reach `TooLarge`.
            limit: match byte(2) {
                0 => 1 << 20,
                n => usize::from(n),
            },
            at: usize::from(u16::from_le_bytes([byte(3), byte(4)])) % (body.len() + 1),
        };
        (plan, body)
    }

    /// The control bytes that parse back into this plan (for seeds).
    pub fn encode(self) -> [u8; CONTROL_LEN] {
        let ct = CONTENT_TYPES
            .iter()
            .position(|c| *c == self.content_type)
            .unwrap_or(0) as u8;
        let limit = u8::try_from(self.limit).unwrap_or(0);
        let [lo, hi] = u16::try_from(self.at).unwrap_or(u16::MAX).to_le_bytes();
        [ct, self.content_length, limit, lo, hi]
    }

    fn headers(&self, len: usize) -> HeaderMap {
        let mut headers = HeaderMap::new();
        if let Some(ct) = self.content_type {
            headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(ct));
        }
        let length = match self.content_length {
            1 => Some(len.to_string()),
            2 => Some((len + 1).to_string()),
            3 => Some("12x".to_owned()),
            _ => None,
        };
        if let Some(length) = length {
            let value = HeaderValue::from_str(&length)
                .unwrap_or_else(|e| panic!("{length:?} is a header value: {e}"));
            headers.insert(header::CONTENT_LENGTH, value);
        }
        headers
    }
}

/// A request body that delivers the given frames, each ready at once.
#[derive(Debug)]
pub struct Frames(VecDeque<Bytes>);

impl Body for Frames {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Poll::Ready(self.0.pop_front().map(|b| Ok(Frame::data(b))))
    }
}

/// Poll `fut` once; everything here is ready, so it must finish.
fn ready<F: Future>(fut: F) -> F::Output {
    let mut cx = Context::from_waker(Waker::noop());
    match pin!(fut).poll(&mut cx) {
        Poll::Ready(out) => out,
        Poll::Pending => panic!("sniffing a body whose frames are all ready must not wait"),
    }
}

/// Everything a replay yields, in order.
fn replayed(mut body: Replay<Frames>) -> Vec<u8> {
    let mut out = Vec::new();
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        match Pin::new(&mut body).poll_frame(&mut cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Ok(data) = frame.into_data() {
                    out.extend_from_slice(&data);
                }
            }
            Poll::Ready(None) => return out,
            Poll::Ready(Some(Err(e))) => match e {},
            Poll::Pending => panic!("a replay of ready frames must not wait"),
        }
    }
}

/// Sniff `pieces` as one request body; assert the replay is exact.
pub fn sniff_pieces(plan: &Plan, pieces: &[&[u8]]) -> Sniffed {
    let body: Vec<u8> = pieces.concat();
    let headers = plan.headers(body.len());
    let frames = Frames(pieces.iter().map(|p| Bytes::copy_from_slice(p)).collect());
    let (sniffed, replay) = match ready(sniff(&headers, frames, plan.limit)) {
        Ok(done) => done,
        Err(e) => match e {},
    };
    if let Some(whole) = replay.whole() {
        assert_eq!(&whole[..], &body[..], "{plan:?}: whole() is the body sent");
        assert_eq!(
            replay.size_hint().exact(),
            Some(body.len() as u64),
            "{plan:?}: a body read whole has an exact size hint"
        );
    }
    let lower = replay.size_hint().lower();
    assert!(
        lower <= body.len() as u64,
        "{plan:?}: size hint lower bound {lower} exceeds the {} bytes sent",
        body.len()
    );
    assert_eq!(
        replayed(replay),
        body,
        "{plan:?}: the replay differs from the body the client sent"
    );
    sniffed
}

/// `model`, `stream`, `include_usage`, end user.
type Facts = (Option<String>, Option<bool>, Option<bool>, Option<String>);

/// The members the facts come from, as full `serde_json::Value`s (the last
/// one wins, as in a `Value` map); every other member is skipped unparsed.
/// A number like `5E955555` is valid JSON that `Value` cannot hold, and a
/// request body is still an object when an unrelated member holds one.
#[derive(Default)]
struct Members(serde_json::Map<String, serde_json::Value>);

const FACT_MEMBERS: [&str; 5] = ["model", "stream", "stream_options", "user", "metadata"];

impl<'de> serde::Deserialize<'de> for Members {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = Members;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Members, A::Error> {
                let mut members = Members::default();
                while let Some(key) = map.next_key::<String>()? {
                    if FACT_MEMBERS.contains(&key.as_str()) {
                        members.0.insert(key, map.next_value()?);
                    } else {
                        map.next_value::<serde::de::IgnoredAny>()?;
                    }
                }
                Ok(members)
            }
        }
        d.deserialize_map(Visit)
    }
}

/// The facts a full parse of the members that carry them finds in a JSON
/// object. serde_json does not check UTF-8 inside values it skips, so a
/// body with invalid UTF-8 only there is sniffed: compare it after a lossy
/// repair.
fn oracle(body: &[u8]) -> Option<Facts> {
    let Members(obj) = serde_json::from_slice(body)
        .or_else(|_| serde_json::from_str(&String::from_utf8_lossy(body)))
        .ok()?;
    let text = |v: Option<&serde_json::Value>| v.and_then(|v| v.as_str()).map(str::to_owned);
    let user =
        text(obj.get("user")).or_else(|| text(obj.get("metadata").and_then(|m| m.get("user_id"))));
    Some((
        text(obj.get("model")),
        obj.get("stream").and_then(serde_json::Value::as_bool),
        obj.get("stream_options")
            .and_then(|o| o.get("include_usage"))
            .and_then(serde_json::Value::as_bool),
        user,
    ))
}

/// The invariants for one plan and body.
pub fn check(plan: &Plan, body: &[u8]) {
    let whole = sniff_pieces(plan, &[body]);
    let (a, b) = body.split_at(plan.at.min(body.len()));
    assert_eq!(
        sniff_pieces(plan, &[a, b]),
        whole,
        "{plan:?}: split at {} changes what was sniffed",
        plan.at
    );
    if body.len() <= 64 {
        let bytes: Vec<&[u8]> = body.chunks(1).collect();
        assert_eq!(sniff_pieces(plan, &bytes), whole, "{plan:?}: byte by byte");
    }
    if whole.body == RequestBody::Sniffed {
        let found = oracle(body)
            .unwrap_or_else(|| panic!("{plan:?}: a sniffed body must be a JSON object: {body:?}"));
        let got = (
            whole.model.clone(),
            whole.stream,
            whole.include_usage,
            whole.user.clone(),
        );
        assert_eq!(
            got, found,
            "{plan:?}: sniffed facts differ from a full parse"
        );
    }
}

/// The fuzz entry point.
pub fn fuzz_one(input: &[u8]) {
    let (plan, body) = Plan::parse(input);
    check(&plan, body);
}
