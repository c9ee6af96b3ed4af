//! Opt-in usage injection, the one documented exception to byte-exact
//! passthrough: a streaming OpenAI-format request body in, the same body
//! asking for `stream_options.include_usage` out; on the way back, the
//! stream the upstream sent in, the stream the client asked for out (the
//! usage-only chunk dropped and the `"usage":null` members removed).

use bytes::{Bytes, BytesMut};
use memchr::memmem;

/// The member inserted into the request object.
const INCLUDE_USAGE: &[u8] = br#""stream_options":{"include_usage":true},"#;

/// `body` with `"stream_options":{"include_usage":true}` as its first member,
/// or `None` when `body` is not a non-empty JSON object.
pub fn add_include_usage(body: &[u8]) -> Option<Bytes> {
    let open = body.iter().position(|b| !b.is_ascii_whitespace())?;
    if body[open] != b'{' {
        return None;
    }
    let rest = &body[open + 1..];
    // `{}` has no member to put a comma before.
    if rest.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'}') {
        return None;
    }
    let mut out = Vec::with_capacity(body.len() + INCLUDE_USAGE.len());
    out.extend_from_slice(&body[..=open]);
    out.extend_from_slice(INCLUDE_USAGE);
    out.extend_from_slice(rest);
    Some(Bytes::from(out))
}

/// Removes what `include_usage` added to an OpenAI SSE stream. Works on whole
/// events: bytes after the last event boundary wait for the next chunk, up to
/// `MAX_HELD` bytes; an event longer than that is no usage chunk, so what is
/// held goes out unchanged and the rest of the stream passes through as is.
#[derive(Debug, Default)]
pub struct UsageStripper {
    tail: BytesMut,
    /// The held bytes outgrew `MAX_HELD`: stripping stopped for this stream.
    passthrough: bool,
}

/// Most bytes held back waiting for an event boundary.
pub const MAX_HELD: usize = 1 << 20;

const USAGE: &[u8] = b"\"usage\"";

impl UsageStripper {
    /// The client's share of `chunk`: possibly empty while an event is incomplete.
    pub fn push(&mut self, chunk: &Bytes) -> Bytes {
        if self.passthrough {
            return chunk.clone();
        }
        if self.tail.is_empty() {
            if let Some(end) = last_event_end(chunk, 0) {
                let (done, rest) = chunk.split_at(end);
                self.tail.extend_from_slice(rest);
                if memmem::find(done, USAGE).is_none() {
                    // Nothing to strip: hand the upstream's bytes on as they are.
                    return chunk.slice(..end);
                }
                return strip_events(done);
            }
        }
        // The tail holds no complete event, so the first blank line ends
        // in the new bytes: the search starts three bytes before them (a
        // boundary split across chunks). Rescanning the whole tail made a
        // long event split into many small chunks cost quadratic time.
        let from = self.tail.len().saturating_sub(3);
        self.tail.extend_from_slice(chunk);
        match last_event_end(&self.tail, from) {
            Some(end) => {
                let done = self.tail.split_to(end);
                strip_events(&done)
            }
            None if self.tail.len() > MAX_HELD => {
                self.passthrough = true;
                self.tail.split().freeze()
            }
            None => Bytes::new(),
        }
    }

    /// Nothing is held back.
    pub fn is_empty(&self) -> bool {
        self.tail.is_empty()
    }

    /// The stream ended: whatever is left is passed on unchanged.
    pub fn finish(&mut self) -> Bytes {
        self.tail.split().freeze()
    }
}

/// Where the events in `buf` end, in order, scanning from `from` (which
/// must not be inside an event's blank line): each end is just past the
/// first blank line (`\n\n` or `\r\n\r\n`) after the previous end. Events
/// are found from the front, so the same stream gives the same events
/// however it was cut into chunks. Each pattern's next occurrence is
/// remembered, so a buffer is scanned about once however many events it
/// holds.
struct EventEnds<'a> {
    buf: &'a [u8],
    at: usize,
    lf: Next,
    crlf: Next,
}

/// The next occurrence of a pattern at or after some position.
#[derive(Clone, Copy)]
enum Next {
    Unknown,
    At(usize),
    None,
}

impl<'a> EventEnds<'a> {
    fn new(buf: &'a [u8], from: usize) -> EventEnds<'a> {
        EventEnds {
            buf,
            at: from,
            lf: Next::Unknown,
            crlf: Next::Unknown,
        }
    }

    /// Start of the first `pat` at or after `at`, using and updating `next`.
    fn find(buf: &[u8], at: usize, pat: &[u8], next: &mut Next) -> Option<usize> {
        match *next {
            Next::At(p) if p >= at => return Some(p),
            Next::None => return None,
            _ => {}
        }
        *next = match memmem::find(&buf[at..], pat) {
            Some(i) => Next::At(at + i),
            None => Next::None,
        };
        match *next {
            Next::At(p) => Some(p),
            _ => None,
        }
    }
}

impl Iterator for EventEnds<'_> {
    type Item = usize;

    fn next(&mut self) -> Option<usize> {
        let lf = Self::find(self.buf, self.at, b"\n\n", &mut self.lf).map(|i| i + 2);
        let crlf = Self::find(self.buf, self.at, b"\r\n\r\n", &mut self.crlf).map(|i| i + 4);
        let end = match (lf, crlf) {
            (Some(a), Some(b)) => a.min(b),
            (a, b) => a.or(b)?,
        };
        self.at = end;
        Some(end)
    }
}

/// End of the last complete event in `buf` (see `EventEnds`).
fn last_event_end(buf: &[u8], from: usize) -> Option<usize> {
    EventEnds::new(buf, from).last()
}

/// Rewrite complete events: drop the usage-only chunk, remove `"usage":null`.
fn strip_events(buf: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(buf.len());
    let mut start = 0;
    for end in EventEnds::new(buf, 0).chain(std::iter::once(buf.len())) {
        if end <= start {
            continue;
        }
        let event = &buf[start..end];
        start = end;
        if !is_usage_only(event) {
            strip_null_usage(event, &mut out);
        }
    }
    Bytes::from(out)
}

/// The extra chunk `include_usage` adds: no choices, a usage object.
fn is_usage_only(event: &[u8]) -> bool {
    memmem::find(event, br#""choices":[]"#).is_some()
        && memmem::find(event, br#""usage":{"#).is_some()
}

/// Copy `event` into `out` without its `"usage":null` member (and the comma
/// that joined it to its neighbour).
fn strip_null_usage(event: &[u8], out: &mut Vec<u8>) {
    for pat in [&b",\"usage\":null"[..], b"\"usage\":null,"] {
        if let Some(at) = memmem::find(event, pat) {
            out.extend_from_slice(&event[..at]);
            out.extend_from_slice(&event[at + pat.len()..]);
            return;
        }
    }
    out.extend_from_slice(event);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_without_boundary_is_held_only_up_to_the_cap() {
        let mut s = UsageStripper::default();
        let piece = Bytes::from(vec![b'x'; 64 * 1024]);
        let mut out = Vec::new();
        for _ in 0..(MAX_HELD / piece.len() + 2) {
            out.extend_from_slice(&s.push(&piece));
        }
        assert!(!out.is_empty(), "held bytes are released past the cap");
        let after = Bytes::from_static(b"data: {\"usage\":null}\n\n");
        assert_eq!(s.push(&after), after, "then the stream passes unchanged");
        out.extend_from_slice(&after);
        out.extend_from_slice(&s.finish());
        assert_eq!(
            out.len(),
            (MAX_HELD / piece.len() + 2) * piece.len() + after.len()
        );
    }

    #[test]
    fn inserts_include_usage_as_the_first_member() {
        let body = br#" {"model":"m","stream":true}"#;
        let got = add_include_usage(body).expect("object");
        assert_eq!(
            &got[..],
            br#" {"stream_options":{"include_usage":true},"model":"m","stream":true}"#
        );
        let v: serde_json::Value = serde_json::from_slice(&got).expect("still JSON");
        assert_eq!(v["stream_options"]["include_usage"], true);
        assert_eq!(add_include_usage(b"[1]"), None);
        assert_eq!(add_include_usage(b" { } "), None);
    }

    const WITHOUT: &str = "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"},\"finish_reason\":null}]}\n\n\
data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n\
data: [DONE]\n\n";

    const WITH: &str = "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"},\"finish_reason\":null}],\"usage\":null}\n\n\
data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}],\"usage\":null}\n\n\
data: {\"id\":\"c\",\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":1,\"total_tokens\":4}}\n\n\
data: [DONE]\n\n";

    fn run(parts: &[&[u8]]) -> Vec<u8> {
        let mut s = UsageStripper::default();
        let mut out = Vec::new();
        for p in parts {
            out.extend_from_slice(&s.push(&Bytes::copy_from_slice(p)));
        }
        out.extend_from_slice(&s.finish());
        out
    }

    #[test]
    fn extra_blank_lines_split_into_the_same_events_at_every_split() {
        // A third newline, or a CRLF blank line after an LF one, makes event
        // ends that a search from the back would place differently.
        let stream = "data: {\"choices\":[{}],\"usage\":null}\n\n\n\
data: {\"choices\":[],\"usage\":{\"total_tokens\":3}}\r\n\r\n\n\n\
data: {\"x\":1,\"usage\":null}\n\n";
        let whole = run(&[stream.as_bytes()]);
        assert_eq!(
            String::from_utf8_lossy(&whole),
            "data: {\"choices\":[{}]}\n\n\n\ndata: {\"x\":1}\n\n"
        );
        for at in 0..=stream.len() {
            let (a, b) = stream.as_bytes().split_at(at);
            assert_eq!(run(&[a, b]), whole, "split at {at}");
        }
    }

    #[test]
    fn restores_the_stream_without_usage_at_every_split() {
        let with = WITH.as_bytes();
        assert_eq!(run(&[with]), WITHOUT.as_bytes());
        for i in 0..=with.len() {
            assert_eq!(
                run(&[&with[..i], &with[i..]]),
                WITHOUT.as_bytes(),
                "split at {i}"
            );
        }
        let bytes: Vec<&[u8]> = with.chunks(1).collect();
        assert_eq!(run(&bytes), WITHOUT.as_bytes(), "byte by byte");
    }

    #[test]
    fn passes_streams_without_usage_untouched_and_keeps_an_unfinished_tail() {
        assert_eq!(run(&[WITHOUT.as_bytes()]), WITHOUT.as_bytes());
        assert_eq!(
            run(&[b"data: {\"a\":1}\n\ndata: {\"usage\":null,\"x\":2}"]),
            b"data: {\"a\":1}\n\ndata: {\"usage\":null,\"x\":2}",
            "an incomplete last event passes unchanged"
        );
        assert_eq!(
            run(&[b"data: {\"usage\":null,\"x\":2}\r\n\r\n"]),
            b"data: {\"x\":2}\r\n\r\n"
        );
    }
}
