//! SSE framing: `text/event-stream` bytes in, `Frame::Sse` events out.
//!
//! Follows the WHATWG event-stream interpretation rules: LF, CR and CRLF
//! line ends (a CRLF split across two chunks is one line end), `data` lines
//! joined with LF, `event`, `id` (ignored when it contains NUL), `retry`
//! (ASCII digits only), comments, a leading BOM at stream start only, one
//! optional space after the colon, and dispatch on a blank line.
//!
//! The common path allocates nothing: line ends are found with `memchr2`,
//! and when an event's single `data` line lies wholly inside the current
//! chunk the frame borrows it from the chunk. Only an incomplete line is
//! kept between chunks (in a reused buffer); multi-line data is joined into
//! a reused scratch buffer.

use memchr::memchr2;

use super::{Frame, FramingError};

const BOM: &[u8] = b"\xEF\xBB\xBF";

/// Incremental `text/event-stream` decoder with a cap on line and event size.
#[derive(Debug)]
pub struct SseDecoder {
    max: usize,
    /// The incomplete line carried over from the previous chunk.
    tail: Vec<u8>,
    /// The previous chunk ended in CR: a leading LF in the next chunk
    /// belongs to the same line end.
    skip_lf: bool,
    /// No line has been completed yet (a BOM may still be stripped).
    at_start: bool,
    /// Number of `data` lines in the pending event.
    data_lines: usize,
    /// The pending event's single data line, as a range of the current chunk.
    data_borrow: Option<(usize, usize)>,
    /// The pending event's data when it does not borrow from the chunk.
    data: Vec<u8>,
    /// The pending event type, as a range of the current chunk.
    event_borrow: Option<(usize, usize)>,
    /// The pending event type when it does not borrow from the chunk.
    event: Vec<u8>,
    /// The last event ID buffer.
    last_id: Vec<u8>,
    /// The reconnection time the stream asked for, in milliseconds.
    retry: Option<u64>,
    /// Set once the cap was exceeded; every later call returns it.
    pub(super) failed: super::Sticky,
}

/// Where a complete line lies: inside the current chunk (borrowable) or in
/// the carried-over tail.
#[derive(Clone, Copy)]
enum Origin {
    Chunk(usize),
    Tail,
}

impl SseDecoder {
    /// A decoder that rejects lines and events larger than `max_event_bytes`.
    pub fn new(max_event_bytes: usize) -> Self {
        SseDecoder {
            max: max_event_bytes,
            tail: Vec::new(),
            skip_lf: false,
            at_start: true,
            data_lines: 0,
            data_borrow: None,
            data: Vec::new(),
            event_borrow: None,
            event: Vec::new(),
            last_id: Vec::new(),
            retry: None,
            failed: super::Sticky::default(),
        }
    }

    /// The last event ID the stream set (empty when none).
    pub fn last_event_id(&self) -> &[u8] {
        &self.last_id
    }

    /// The reconnection time (ms) the stream asked for with `retry`.
    pub fn retry(&self) -> Option<u64> {
        self.retry
    }

    /// End of body. Per WHATWG, an event not yet terminated by a blank line
    /// is discarded, even when its last line was complete: a stream cut off
    /// before the blank line may have lost further `data` lines, so the
    /// event is not trustworthy. The decoder is reset for reuse.
    pub fn finish(&mut self, _on: &mut dyn FnMut(Frame<'_>)) -> Result<(), FramingError> {
        self.failed.check()?;
        let (max, last_id, retry) = (self.max, std::mem::take(&mut self.last_id), self.retry);
        *self = SseDecoder::new(max);
        self.last_id = last_id;
        self.retry = retry;
        Ok(())
    }

    /// `Decoder::feed`'s work, before its `Sticky` keeps the outcome.
    pub(super) fn feed_inner(
        &mut self,
        chunk: &[u8],
        on: &mut dyn FnMut(Frame<'_>),
    ) -> Result<(), FramingError> {
        let mut pos = 0;
        if self.skip_lf && !chunk.is_empty() {
            self.skip_lf = false;
            if chunk[0] == b'\n' {
                pos = 1;
            }
        }
        loop {
            // The end of the chunk, or a line end at the cursor (the blank
            // line after an event), needs no search.
            let found = match chunk.get(pos) {
                None => None,
                Some(b'\r' | b'\n') => Some(0),
                Some(_) => memchr2(b'\r', b'\n', &chunk[pos..]),
            };
            let Some(i) = found else { break };
            let end = pos + i;
            let next = if chunk[end] == b'\n' {
                end + 1
            } else if end + 1 == chunk.len() {
                self.skip_lf = true;
                end + 1
            } else if chunk[end + 1] == b'\n' {
                end + 2
            } else {
                end + 1
            };
            if self.tail.is_empty() {
                self.check_len(end - pos)?;
                self.line(&chunk[pos..end], Origin::Chunk(pos), chunk, on)?;
            } else {
                self.check_len(self.tail.len() + (end - pos))?;
                let mut line = std::mem::take(&mut self.tail);
                line.extend_from_slice(&chunk[pos..end]);
                let result = self.line(&line, Origin::Tail, chunk, on);
                line.clear();
                self.tail = line;
                result?;
            }
            pos = next;
        }
        let rest = &chunk[pos..];
        self.check_len(self.tail.len() + rest.len())?;
        self.tail.extend_from_slice(rest);
        self.detach(chunk);
        Ok(())
    }

    fn check_len(&self, len: usize) -> Result<(), FramingError> {
        if len > self.max {
            return Err(FramingError::TooLarge { limit: self.max });
        }
        Ok(())
    }

    /// Interpret one complete line (without its line end).
    fn line(
        &mut self,
        mut line: &[u8],
        mut origin: Origin,
        chunk: &[u8],
        on: &mut dyn FnMut(Frame<'_>),
    ) -> Result<(), FramingError> {
        if self.at_start {
            self.at_start = false;
            if let Some(rest) = line.strip_prefix(BOM) {
                line = rest;
                if let Origin::Chunk(at) = &mut origin {
                    *at += BOM.len();
                }
            }
        }
        if line.is_empty() {
            self.dispatch(chunk, on);
            return Ok(());
        }
        // A `data` line, nearly every line of a stream, needs no search.
        let colon = if line.starts_with(b"data:") {
            Some(4)
        } else {
            memchr::memchr(b':', line)
        };
        let (field, value_at) = match colon {
            Some(0) => return Ok(()), // comment
            Some(colon) if line.get(colon + 1) == Some(&b' ') => (&line[..colon], colon + 2),
            Some(colon) => (&line[..colon], colon + 1),
            None => (line, line.len()),
        };
        let value = &line[value_at..];
        let range = match origin {
            Origin::Chunk(at) => Some((at + value_at, at + line.len())),
            Origin::Tail => None,
        };
        match field {
            b"data" => self.push_data(value, range, chunk)?,
            b"event" => {
                self.event_borrow = range;
                self.event.clear();
                if range.is_none() {
                    self.event.extend_from_slice(value);
                }
            }
            b"id" if memchr::memchr(0, value).is_none() => {
                self.last_id.clear();
                self.last_id.extend_from_slice(value);
            }
            b"retry" if !value.is_empty() && value.iter().all(u8::is_ascii_digit) => {
                let ms = value.iter().fold(0u64, |acc, d| {
                    acc.saturating_mul(10).saturating_add(u64::from(d - b'0'))
                });
                self.retry = Some(ms);
            }
            _ => {}
        }
        Ok(())
    }

    fn push_data(
        &mut self,
        value: &[u8],
        range: Option<(usize, usize)>,
        chunk: &[u8],
    ) -> Result<(), FramingError> {
        if self.data_lines == 0 {
            self.data.clear();
            match range {
                Some(r) => self.data_borrow = Some(r),
                None => self.data.extend_from_slice(value),
            }
        } else {
            if let Some((a, b)) = self.data_borrow.take() {
                self.data.clear();
                self.data.extend_from_slice(&chunk[a..b]);
            }
            self.check_len(self.data.len() + 1 + value.len())?;
            self.data.push(b'\n');
            self.data.extend_from_slice(value);
        }
        self.data_lines += 1;
        Ok(())
    }

    fn dispatch(&mut self, chunk: &[u8], on: &mut dyn FnMut(Frame<'_>)) {
        if self.data_lines > 0 {
            let data = match self.data_borrow {
                Some((a, b)) => &chunk[a..b],
                None => &self.data[..],
            };
            let event = match self.event_borrow {
                Some((a, b)) => &chunk[a..b],
                None => &self.event[..],
            };
            on(Frame::Sse { event, data });
        }
        self.data_lines = 0;
        self.data_borrow = None;
        self.data.clear();
        self.event_borrow = None;
        self.event.clear();
    }

    /// The chunk is about to go away: copy what the pending event borrows.
    fn detach(&mut self, chunk: &[u8]) {
        if let Some((a, b)) = self.data_borrow.take() {
            self.data.clear();
            self.data.extend_from_slice(&chunk[a..b]);
        }
        if let Some((a, b)) = self.event_borrow.take() {
            self.event.clear();
            self.event.extend_from_slice(&chunk[a..b]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framing::Decoder;
    use crate::framing::testing::{self, text};

    type Frames = Vec<(String, String)>;

    fn render(f: Frame<'_>) -> (String, String) {
        match f {
            Frame::Sse { event, data } => (text(event), text(data)),
            other => panic!("SSE decoder produced a non-SSE frame: {other:?}"),
        }
    }

    fn decode(pieces: &[&[u8]], max: usize) -> (Frames, Result<(), FramingError>) {
        testing::decode(SseDecoder::new(max), pieces, render)
    }

    fn decode_all_ways(input: &[u8], max: usize) -> (Frames, Result<(), FramingError>) {
        testing::decode_all_ways(|| SseDecoder::new(max), input, render)
    }

    fn frames(input: &[u8]) -> Frames {
        testing::frames_ok(|| SseDecoder::new(1 << 16), input, render)
    }

    fn ev(event: &str, data: &str) -> (String, String) {
        (event.to_owned(), data.to_owned())
    }

    #[test]
    fn line_ends_lf_cr_crlf() {
        let expected = vec![ev("", "a"), ev("", "b"), ev("", "c")];
        assert_eq!(frames(b"data: a\n\ndata: b\n\ndata: c\n\n"), expected);
        assert_eq!(frames(b"data: a\r\rdata: b\r\rdata: c\r\r"), expected);
        assert_eq!(
            frames(b"data: a\r\n\r\ndata: b\r\n\r\ndata: c\r\n\r\n"),
            expected
        );
        assert_eq!(frames(b"data: a\r\n\ndata: b\r\rdata: c\n\r\n"), expected);
    }

    #[test]
    fn cr_then_lf_across_chunks_is_one_line_end() {
        let (f, r) = decode(&[b"data: a\r", b"\ndata: b\r", b"\n\r", b"\n"], 1024);
        assert_eq!(r, Ok(()));
        assert_eq!(
            f,
            vec![ev("", "a\nb")],
            "CR|LF across chunks must be one line end"
        );
        // An empty chunk between CR and LF does not break the pair.
        let (f, _) = decode(&[b"data: a\r", b"", b"\n\r", b"", b"\n"], 1024);
        assert_eq!(f, vec![ev("", "a")]);
    }

    #[test]
    fn multi_line_data_joined_with_lf() {
        assert_eq!(
            frames(b"data: x\ndata: y\ndata:z\n\n"),
            vec![ev("", "x\ny\nz")]
        );
        assert_eq!(
            frames(b"data: x\ndata\ndata: y\n\n"),
            vec![ev("", "x\n\ny")]
        );
    }

    #[test]
    fn event_type_is_per_event() {
        let input = b"event: foo\ndata: 1\n\ndata: 2\n\nevent: a\nevent: b\ndata: 3\n\n";
        assert_eq!(
            frames(input),
            vec![ev("foo", "1"), ev("", "2"), ev("b", "3")]
        );
    }

    #[test]
    fn event_without_data_is_not_dispatched_and_resets_type() {
        assert_eq!(frames(b"event: x\n\ndata: y\n\n"), vec![ev("", "y")]);
        assert_eq!(frames(b"id: 3\nretry: 10\n\n"), vec![]);
    }

    #[test]
    fn empty_data_field_is_dispatched() {
        assert_eq!(frames(b"data\n\n"), vec![ev("", "")]);
        assert_eq!(frames(b"data:\n\n"), vec![ev("", "")]);
        assert_eq!(frames(b"data: \n\n"), vec![ev("", "")]);
    }

    #[test]
    fn comments_unknown_fields_and_case() {
        let input = b": keep-alive\n:\nfoo: bar\nDATA: no\nData: no\ndata: yes\n\n";
        assert_eq!(frames(input), vec![ev("", "yes")]);
    }

    #[test]
    fn only_one_space_after_colon_is_stripped() {
        assert_eq!(frames(b"data:  two\n\n"), vec![ev("", " two")]);
        assert_eq!(frames(b"data:\tx\n\n"), vec![ev("", "\tx")]);
        assert_eq!(frames(b"data: a:b: c\n\n"), vec![ev("", "a:b: c")]);
        assert_eq!(frames(b"event:x\ndata:y\n\n"), vec![ev("x", "y")]);
    }

    #[test]
    fn bom_only_at_stream_start() {
        assert_eq!(frames(b"\xEF\xBB\xBFdata: 1\n\n"), vec![ev("", "1")]);
        // A second BOM belongs to the field name, which is then unknown.
        assert_eq!(frames(b"\xEF\xBB\xBF\xEF\xBB\xBFdata: 1\n\n"), vec![]);
        assert_eq!(
            frames(b"data: 1\n\n\xEF\xBB\xBFdata: 2\n\n"),
            vec![ev("", "1")]
        );
        assert_eq!(frames(b"\xEF\xBB\xBF\ndata: 1\n\n"), vec![ev("", "1")]);
    }

    #[test]
    fn blank_lines_dispatch_once() {
        assert_eq!(frames(b"\n\n\ndata: a\n\n\n\n\r\n"), vec![ev("", "a")]);
    }

    #[test]
    fn incomplete_event_at_eof_is_discarded() {
        assert_eq!(frames(b"data: a\n\ndata: b\n"), vec![ev("", "a")]);
        assert_eq!(frames(b"data: a\n\ndata: b"), vec![ev("", "a")]);
        assert_eq!(frames(b"data: a\n\ndata: b\r"), vec![ev("", "a")]);
        assert_eq!(frames(b"data: a\n\nevent: x\n"), vec![ev("", "a")]);
    }

    #[test]
    fn id_and_retry() {
        let mut dec = SseDecoder::new(1024);
        let mut n = 0;
        let mut on = |_: Frame<'_>| n += 1;
        dec.feed(b"id: 7\nretry: 1500\ndata: x\n\n", &mut on)
            .expect("valid stream");
        assert_eq!((dec.last_event_id(), dec.retry()), (&b"7"[..], Some(1500)));
        dec.feed(b"id: 8\0\nretry: 15x\nretry:\nid\ndata: y\n\n", &mut on)
            .expect("valid stream");
        assert_eq!(
            dec.last_event_id(),
            b"",
            "id with NUL ignored, bare id clears"
        );
        assert_eq!(dec.retry(), Some(1500), "non-digit retry ignored");
        dec.finish(&mut on).expect("finish");
        assert_eq!(n, 2);
    }

    #[test]
    fn single_line_event_borrows_from_chunk() {
        let chunk = b"event: e\ndata: {\"a\":1}\n\n";
        let mut dec = SseDecoder::new(1024);
        assert_eq!(testing::borrowed_frames(&mut dec, chunk), 1);
        assert!(dec.tail.is_empty() && dec.data.is_empty(), "nothing copied");
    }

    #[test]
    fn line_over_limit_fails_and_stays_failed() {
        let input = b"data: 1\n\ndata: 0123456789abcdef\n\ndata: 2\n\n";
        let (f, r) = decode_all_ways(input, 16);
        assert_eq!(f, vec![ev("", "1")]);
        assert_eq!(r, Err(FramingError::TooLarge { limit: 16 }));
        // An unterminated oversized line fails too.
        let (_, r) = decode_all_ways(b"data: 0123456789abcdef", 16);
        assert_eq!(r, Err(FramingError::TooLarge { limit: 16 }));

        let too_large = FramingError::TooLarge { limit: 8 };
        testing::assert_stays_failed(
            &mut SseDecoder::new(8),
            b"data: 0123456789",
            b"\n\n",
            too_large,
        );
    }

    #[test]
    fn event_over_limit_fails() {
        let (f, r) = decode_all_ways(b"data: 012345\ndata: 012345\ndata: 012345\n\n", 16);
        assert_eq!(f, vec![]);
        assert_eq!(r, Err(FramingError::TooLarge { limit: 16 }));
        let (f, r) = decode_all_ways(b"data: 0123456789\n\n", 16);
        assert_eq!(
            (f, r),
            (vec![ev("", "0123456789")], Ok(())),
            "exactly at the limit passes"
        );
    }

    const FIXTURES: &[(&str, &[u8])] = &[
        (
            "openai/chat_stream_usage",
            include_bytes!("../../tests/fixtures/openai/chat_stream_usage.sse"),
        ),
        (
            "openai/chat_stream",
            include_bytes!("../../tests/fixtures/openai/chat_stream.sse"),
        ),
        (
            "openai/chat_stream_crlf",
            include_bytes!("../../tests/fixtures/openai/chat_stream_crlf.sse"),
        ),
        (
            "openai/chat_stream_tool_calls",
            include_bytes!("../../tests/fixtures/openai/chat_stream_tool_calls.sse"),
        ),
        (
            "openai/chat_stream_error",
            include_bytes!("../../tests/fixtures/openai/chat_stream_error.sse"),
        ),
        (
            "openai/azure_chat_stream",
            include_bytes!("../../tests/fixtures/openai/azure_chat_stream.sse"),
        ),
        (
            "openai/completions_stream",
            include_bytes!("../../tests/fixtures/openai/completions_stream.sse"),
        ),
        (
            "openai/responses_stream",
            include_bytes!("../../tests/fixtures/openai/responses_stream.sse"),
        ),
        (
            "openai/responses_failed_stream",
            include_bytes!("../../tests/fixtures/openai/responses_failed_stream.sse"),
        ),
        (
            "anthropic/messages_stream",
            include_bytes!("../../tests/fixtures/anthropic/messages_stream.sse"),
        ),
        (
            "anthropic/messages_stream_tool_use",
            include_bytes!("../../tests/fixtures/anthropic/messages_stream_tool_use.sse"),
        ),
        (
            "anthropic/messages_stream_thinking",
            include_bytes!("../../tests/fixtures/anthropic/messages_stream_thinking.sse"),
        ),
        (
            "anthropic/messages_stream_error",
            include_bytes!("../../tests/fixtures/anthropic/messages_stream_error.sse"),
        ),
    ];

    #[test]
    fn fixtures_decode_the_same_at_every_split() {
        for (name, input) in FIXTURES {
            let frames = frames(input);
            let text = String::from_utf8_lossy(input).replace("\r\n", "\n");
            let events = text.matches("\n\n").count();
            assert_eq!(
                frames.len(),
                events,
                "{name}: one frame per blank-line-terminated event"
            );
            for (_, data) in &frames {
                assert!(
                    !data.contains('\r'),
                    "{name}: line ends must not leak into data"
                );
            }
        }
    }

    #[test]
    fn crlf_fixture_equals_lf_fixture() {
        let lf = frames(include_bytes!(
            "../../tests/fixtures/openai/chat_stream.sse"
        ));
        let crlf = frames(include_bytes!(
            "../../tests/fixtures/openai/chat_stream_crlf.sse"
        ));
        assert_eq!(lf, crlf);
    }
}
