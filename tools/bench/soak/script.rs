//! The soak's exchanges: the run seed and a request number in; the whole
//! exchange decided up front out (which fault, the exact response bytes in
//! the pieces and at the times the upstream sends them, how it ends, what
//! the client does and which outcome tokentap must measure). The upstream
//! and the client both derive it from the same two numbers, so the client
//! knows every byte it should receive.

use std::fmt::Write as _;
use std::time::Duration;

use bytes::Bytes;

use crate::load::Api;

/// tokentap's `upstream.idle_timeout` in the soak's configuration.
pub(super) const IDLE_TIMEOUT: Duration = Duration::from_secs(3);

/// What happens to one request. Weights are percentages of all requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(super) enum Kind {
    /// A normal stream (OpenAI with usage, or Anthropic).
    Stream,
    /// A normal non-streaming JSON answer.
    Whole,
    /// A stream or answer whose first token comes after 0.3–1.5 s.
    SlowTtft,
    /// 429, 500 or 503 with a JSON error body in the provider's shape.
    Status,
    /// A stream with one invalid JSON event in the middle.
    Malformed,
    /// A 200 stream that ends with the provider's error event.
    ErrorEvent,
    /// The upstream drops the connection mid-body.
    Reset,
    /// The upstream stops sending mid-stream for longer than the idle timeout.
    Stall,
    /// The upstream closes the connection without a response head.
    ResetBeforeHead,
    /// The client goes away mid-stream.
    CancelMid,
    /// The client goes away while waiting for the response head.
    CancelBeforeHead,
}

const WEIGHTS: [(Kind, u32); 11] = [
    (Kind::Stream, 38),
    (Kind::Whole, 14),
    (Kind::SlowTtft, 5),
    (Kind::Status, 8),
    (Kind::Malformed, 5),
    (Kind::ErrorEvent, 4),
    (Kind::Reset, 6),
    (Kind::Stall, 2),
    (Kind::ResetBeforeHead, 2),
    (Kind::CancelMid, 13),
    (Kind::CancelBeforeHead, 3),
];

impl Kind {
    pub(super) fn name(self) -> &'static str {
        match self {
            Kind::Stream => "stream",
            Kind::Whole => "whole",
            Kind::SlowTtft => "slow_ttft",
            Kind::Status => "error_status",
            Kind::Malformed => "malformed_chunk",
            Kind::ErrorEvent => "error_event",
            Kind::Reset => "reset_mid_body",
            Kind::Stall => "stall_past_idle",
            Kind::ResetBeforeHead => "reset_before_head",
            Kind::CancelMid => "client_cancel_mid",
            Kind::CancelBeforeHead => "client_cancel_head",
        }
    }

    /// The `tokentap.outcome` the request must be measured with.
    pub(super) fn outcome(self) -> &'static str {
        match self {
            // The bad event is counted and skipped; the stream still ends
            // with its terminal event, so it is complete.
            Kind::Stream | Kind::Whole | Kind::SlowTtft | Kind::Malformed => "complete",
            Kind::Status | Kind::ErrorEvent | Kind::Reset | Kind::ResetBeforeHead => {
                "upstream_error"
            }
            Kind::Stall => "upstream_timeout",
            Kind::CancelMid | Kind::CancelBeforeHead => "client_cancelled",
        }
    }
}

/// How the upstream ends the response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum End {
    /// The body ends normally.
    Eos,
    /// The connection is dropped after the last piece.
    Abort,
    /// Nothing more for this long, then the connection is dropped.
    Stall(Duration),
    /// No response head at all: the connection is closed.
    NoHead,
}

/// What the client does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Client {
    /// Read the whole response.
    Read,
    /// Drop the response once this many body bytes have arrived.
    CancelAfterBytes(usize),
    /// Drop the request if no head has come after this long.
    CancelBeforeHead(Duration),
}

/// One request's whole exchange.
#[derive(Debug, Clone)]
pub(super) struct Exchange {
    pub seq: u64,
    pub kind: Kind,
    pub api: Api,
    pub stream: bool,
    pub status: u16,
    pub content_type: &'static str,
    /// Send this `Content-Length` (the whole body's, even when the upstream
    /// drops the connection before the end) instead of chunked encoding.
    pub content_length: Option<u64>,
    /// Wait before the response head.
    pub head_delay: Duration,
    /// Body pieces, each sent after its delay.
    pub pieces: Vec<(Duration, Bytes)>,
    pub end: End,
    pub client: Client,
}

impl Exchange {
    /// The body bytes the upstream sends, in order.
    pub(super) fn body(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.pieces.iter().map(|p| p.1.len()).sum());
        for (_, p) in &self.pieces {
            out.extend_from_slice(p);
        }
        out
    }
}

/// Words of the answers: multi-byte UTF-8 and JSON escapes included, so a
/// split at any byte offset can land inside a character or an escape.
const WORDS: [&str; 16] = [
    " the",
    " proxy",
    " forwards",
    " every",
    " byte",
    " wörld",
    " 日本語",
    " 🦀",
    " \\\"quoted\\\"",
    " line\\nbreak",
    " tab\\t",
    " \\u00e9",
    " tokens",
    " ✓",
    " —",
    ".",
];

const OPENAI_MODEL: &str = "gpt-4o-mini-2024-07-18";
const ANTHROPIC_MODEL: &str = "claude-sonnet-4-20250514";

/// The exchange for request `seq` of the run seeded with `seed`.
pub(super) fn exchange(seed: u64, seq: u64) -> Exchange {
    let mut rng = fastrand::Rng::with_seed(seed ^ seq.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let kind = pick_kind(&mut rng);
    let api = if rng.bool() { Api::Chat } else { Api::Messages };
    let stream = match kind {
        Kind::Whole => false,
        Kind::Status
        | Kind::SlowTtft
        | Kind::ResetBeforeHead
        | Kind::CancelBeforeHead
        | Kind::Reset => rng.u8(..4) != 0,
        _ => true,
    };
    let mut b = Builder {
        rng,
        api,
        id: format!("soak-{seq}"),
        events: Vec::new(),
    };
    let mut x = Exchange {
        seq,
        kind,
        api,
        stream,
        status: 200,
        content_type: if stream {
            "text/event-stream"
        } else {
            "application/json"
        },
        content_length: None,
        head_delay: Duration::from_millis(b.rng.u64(0..20)),
        pieces: Vec::new(),
        end: End::Eos,
        client: Client::Read,
    };
    let tokens = b.rng.u32(3..60);
    let gap = [0, 0, 1, 2, 5][b.rng.usize(..5)];
    match kind {
        Kind::Stream => b.stream(tokens, None),
        Kind::Whole => {
            b.whole(tokens);
            if b.rng.bool() {
                x.content_length = Some(b.len());
            }
        }
        Kind::SlowTtft => {
            let ttft = Duration::from_millis(b.rng.u64(300..1500));
            if stream {
                b.stream(tokens, None);
            } else {
                b.whole(tokens);
            }
            if b.rng.bool() {
                x.head_delay = ttft;
            } else {
                // Head at once, first body byte late.
                x.pieces = b.pieces(gap, stream);
                if let Some(first) = x.pieces.first_mut() {
                    first.0 = ttft;
                }
                return x;
            }
        }
        Kind::Status => {
            x.status = [429, 500, 503][b.rng.usize(..3)];
            x.content_type = "application/json";
            b.error_body(x.status);
        }
        Kind::Malformed => {
            let at = b.rng.u32(0..tokens);
            b.stream(tokens, Some(Twist::Malformed(at)));
        }
        Kind::ErrorEvent => {
            let at = b.rng.u32(0..tokens);
            b.stream(tokens, Some(Twist::ErrorEvent(at)));
        }
        Kind::Reset | Kind::Stall => {
            if stream {
                b.stream(tokens, None);
            } else {
                b.whole(tokens);
                if b.rng.bool() {
                    x.content_length = Some(b.len());
                }
            }
            let mut pieces = b.pieces(gap, stream);
            if pieces.len() < 2 {
                // A body in one piece: cut it in two, so something is lost.
                let (d, whole) = pieces.pop().unwrap_or_default();
                let mid = whole.len() / 2;
                pieces.push((d, whole.slice(..mid)));
                pieces.push((d, whole.slice(mid..)));
            }
            // Keep at least one piece, drop at least one.
            let keep = 1 + b.rng.usize(..pieces.len().saturating_sub(1).max(1));
            pieces.truncate(keep.min(pieces.len().saturating_sub(1)).max(1));
            x.pieces = pieces;
            x.end = if kind == Kind::Reset {
                End::Abort
            } else {
                End::Stall(IDLE_TIMEOUT + Duration::from_millis(1500))
            };
            return x;
        }
        Kind::ResetBeforeHead => {
            x.end = End::NoHead;
            x.content_type = "application/json";
            return x;
        }
        Kind::CancelMid => {
            b.stream(tokens.max(12), None);
            // Paced, so the rest is still on its way when the client leaves.
            let pieces = b.pieces(8, true);
            let cut = b.rng.usize(1..pieces.len().saturating_sub(8).max(2));
            let before: usize = pieces[..cut].iter().map(|p| p.1.len()).sum();
            x.client = Client::CancelAfterBytes(before.max(1));
            x.pieces = pieces;
            return x;
        }
        Kind::CancelBeforeHead => {
            if stream {
                b.stream(tokens, None);
            } else {
                b.whole(tokens);
            }
            x.head_delay = Duration::from_millis(1200);
            x.client = Client::CancelBeforeHead(Duration::from_millis(b.rng.u64(200..700)));
        }
    }
    x.pieces = b.pieces(gap, stream);
    x
}

fn pick_kind(rng: &mut fastrand::Rng) -> Kind {
    let mut n = rng.u32(0..WEIGHTS.iter().map(|w| w.1).sum());
    for (kind, w) in WEIGHTS {
        if n < w {
            return kind;
        }
        n -= w;
    }
    Kind::Stream
}

/// A change to a normal stream.
#[derive(Clone, Copy)]
enum Twist {
    /// An invalid JSON event before token n.
    Malformed(u32),
    /// The provider's error event instead of token n and the rest.
    ErrorEvent(u32),
}

struct Builder {
    rng: fastrand::Rng,
    api: Api,
    id: String,
    /// Whole events (or the whole body), before splitting into pieces.
    events: Vec<String>,
}

impl Builder {
    /// Bytes in the events so far.
    fn len(&self) -> u64 {
        self.events.iter().map(|e| e.len() as u64).sum()
    }

    fn word(&mut self) -> &'static str {
        WORDS[self.rng.usize(..WORDS.len())]
    }

    fn stream(&mut self, tokens: u32, twist: Option<Twist>) {
        let (id, prompt) = (self.id.clone(), self.rng.u32(5..500));
        let chunk = |body: &str| {
            format!(
                "data: {{\"id\":\"chatcmpl-{id}\",\"object\":\"chat.completion.chunk\",\"created\":1700000000,\"model\":\"{OPENAI_MODEL}\",{body}}}\n\n"
            )
        };
        let delta = |text: &str| {
            format!(
                "event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":\"{text}\"}}}}\n\n"
            )
        };
        let head = match self.api {
            Api::Chat => chunk(
                "\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}],\"usage\":null",
            ),
            Api::Messages => format!(
                "event: message_start\ndata: {{\"type\":\"message_start\",\"message\":{{\"id\":\"msg_{id}\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"{ANTHROPIC_MODEL}\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{{\"input_tokens\":{prompt},\"output_tokens\":1}}}}}}\n\nevent: content_block_start\ndata: {{\"type\":\"content_block_start\",\"index\":0,\"content_block\":{{\"type\":\"text\",\"text\":\"\"}}}}\n\n"
            ),
        };
        self.events.push(head);
        for i in 0..tokens {
            match twist {
                Some(Twist::Malformed(at)) if at == i => self.events.push(match self.api {
                    Api::Chat => "data: {\"id\":\"chatcmpl-cut\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"cut\n\n".to_owned(),
                    Api::Messages => "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"cut\n\n".to_owned(),
                }),
                Some(Twist::ErrorEvent(at)) if at == i => {
                    self.events.push(match self.api {
                        Api::Chat => "data: {\"error\":{\"message\":\"The server had an error while processing your request.\",\"type\":\"server_error\",\"param\":null,\"code\":null}}\n\n".to_owned(),
                        Api::Messages => "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n".to_owned(),
                    });
                    return;
                }
                _ => {}
            }
            let w = self.word();
            self.events.push(match self.api {
                Api::Chat => chunk(&format!(
                    "\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{w}\"}},\"finish_reason\":null}}],\"usage\":null"
                )),
                Api::Messages => delta(w),
            });
        }
        match self.api {
            Api::Chat => {
                self.events.push(chunk(
                    "\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"length\"}],\"usage\":null",
                ));
                self.events.push(chunk(&format!(
                    "\"choices\":[],\"usage\":{{\"prompt_tokens\":{prompt},\"completion_tokens\":{tokens},\"total_tokens\":{}}}",
                    prompt + tokens
                )));
                self.events.push("data: [DONE]\n\n".to_owned());
            }
            Api::Messages => self.events.push(format!(
                "event: content_block_stop\ndata: {{\"type\":\"content_block_stop\",\"index\":0}}\n\nevent: message_delta\ndata: {{\"type\":\"message_delta\",\"delta\":{{\"stop_reason\":\"max_tokens\",\"stop_sequence\":null}},\"usage\":{{\"output_tokens\":{tokens}}}}}\n\nevent: message_stop\ndata: {{\"type\":\"message_stop\"}}\n\n"
            )),
        }
    }

    fn whole(&mut self, tokens: u32) {
        let mut text = String::new();
        for _ in 0..tokens {
            text.push_str(self.word());
        }
        let (id, p) = (&self.id, self.rng.u32(5..500));
        let mut s = String::new();
        let _ = match self.api {
            Api::Chat => write!(
                s,
                r#"{{"id":"chatcmpl-{id}","object":"chat.completion","created":1700000000,"model":"{OPENAI_MODEL}","choices":[{{"index":0,"message":{{"role":"assistant","content":"{text}","refusal":null}},"logprobs":null,"finish_reason":"length"}}],"usage":{{"prompt_tokens":{p},"completion_tokens":{tokens},"total_tokens":{}}}}}"#,
                p + tokens
            ),
            Api::Messages => write!(
                s,
                r#"{{"id":"msg_{id}","type":"message","role":"assistant","model":"{ANTHROPIC_MODEL}","content":[{{"type":"text","text":"{text}"}}],"stop_reason":"max_tokens","stop_sequence":null,"usage":{{"input_tokens":{p},"output_tokens":{tokens}}}}}"#
            ),
        };
        self.events.push(s);
    }

    fn error_body(&mut self, status: u16) {
        let (kind, msg) = match (self.api, status) {
            (Api::Chat, 429) => ("rate_limit_exceeded", "Rate limit reached for requests"),
            (Api::Messages, 429) => (
                "rate_limit_error",
                "Number of requests has exceeded your rate limit",
            ),
            (Api::Chat, _) => (
                "server_error",
                "The server had an error while processing your request.",
            ),
            (Api::Messages, 503) => ("overloaded_error", "Overloaded"),
            (Api::Messages, _) => ("api_error", "Internal server error"),
        };
        self.events.push(match self.api {
            Api::Chat => format!(
                r#"{{"error":{{"message":"{msg}","type":"{kind}","param":null,"code":"{kind}"}}}}"#
            ),
            Api::Messages => {
                format!(r#"{{"type":"error","error":{{"type":"{kind}","message":"{msg}"}}}}"#)
            }
        });
    }

    /// Split the events into pieces: mostly one event each, some merged
    /// with the next, some cut at a random byte offset (inside a line, a
    /// multi-byte character or an escape). Delays up to `gap` ms before each
    /// piece of a stream; whole bodies go in 1–4 pieces with short pauses.
    fn pieces(&mut self, gap: u64, stream: bool) -> Vec<(Duration, Bytes)> {
        let events = std::mem::take(&mut self.events);
        let mut out: Vec<(Duration, Bytes)> = Vec::new();
        let mut pending: Vec<u8> = Vec::new();
        let delay = |rng: &mut fastrand::Rng| {
            Duration::from_micros(if gap == 0 { 0 } else { rng.u64(0..=gap * 1000) })
        };
        for e in events {
            let bytes = e.into_bytes();
            let cuts = if stream { 1 } else { self.rng.usize(0..4) };
            let mut start = 0;
            let mut offsets = Vec::new();
            for _ in 0..cuts {
                if !stream || self.rng.u8(..4) == 0 {
                    offsets.push(self.rng.usize(0..=bytes.len()));
                }
            }
            offsets.sort_unstable();
            for at in offsets {
                pending.extend_from_slice(&bytes[start..at]);
                start = at;
                if !pending.is_empty() {
                    out.push((
                        delay(&mut self.rng),
                        Bytes::from(std::mem::take(&mut pending)),
                    ));
                }
            }
            pending.extend_from_slice(&bytes[start..]);
            // Sometimes merge with the next event.
            if !stream || self.rng.u8(..6) != 0 {
                out.push((
                    delay(&mut self.rng),
                    Bytes::from(std::mem::take(&mut pending)),
                ));
            }
        }
        if !pending.is_empty() {
            out.push((delay(&mut self.rng), Bytes::from(pending)));
        }
        out.retain(|p| !p.1.is_empty());
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exchanges_are_deterministic_and_cover_every_kind() {
        let mut seen = std::collections::BTreeSet::new();
        for seq in 0..2000 {
            let (a, b) = (exchange(7, seq), exchange(7, seq));
            assert_eq!(
                a.body(),
                b.body(),
                "request {seq} differs between two derivations"
            );
            assert_eq!(a.kind, b.kind);
            seen.insert(a.kind);
            if a.end != End::NoHead {
                assert!(
                    !a.pieces.is_empty(),
                    "request {seq} ({:?}) has no body",
                    a.kind
                );
            }
            if let Client::CancelAfterBytes(n) = a.client {
                assert!(n < a.body().len(), "cancel point {n} is inside the body");
            }
        }
        assert_eq!(seen.len(), WEIGHTS.len(), "kinds seen: {seen:?}");
    }
}
