//! Streamed JSON array framing: `[{...},{...}]` bytes in, one `Frame::Json`
//! per top-level element out.
//!
//! Serves Gemini `streamGenerateContent` without `alt=sse`, which streams
//! one JSON array whose elements (pretty-printed, separated by `,` and
//! CRLF or LF) arrive in arbitrary pieces. Each element is emitted as soon
//! as its closing bracket arrives, not when the array ends.
//!
//! The decoder delimits elements; it does not validate them (the adapter's
//! JSON parser does). It tracks only nesting depth, whether it is inside a
//! string, and whether the previous byte was a backslash, so the scan
//! resumes where the previous chunk stopped and every byte is looked at
//! once. Strings are skipped with `memchr2`. An element wholly inside one
//! chunk is borrowed from it; otherwise it is gathered in a reused buffer.
//! Elements must be objects or arrays: scalar elements carry nothing a
//! provider sends.
//!
//! Bytes that break the grammar inside the array (a scalar element, a
//! missing or doubled comma, stray bytes after an element) are skipped up
//! to the next top-level `,` or `]` and counted (`skipped`): the next
//! element is read as usual. Only a body that is not an array, data after
//! the closing `]`, an oversized element and a body cut short end the
//! stream.

use memchr::memchr2;

use super::{Frame, FramingError};

/// Where the decoder is in the array's grammar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Before the opening `[`; only whitespace seen so far.
    Start,
    /// After `[`: an element or `]` comes next.
    Open,
    /// After `,`: an element comes next.
    Comma,
    /// Inside an element.
    Element,
    /// After an element: `,` or `]` comes next.
    AfterElement,
    /// After the closing `]`: only whitespace may follow.
    Closed,
    /// Skipping bytes that break the grammar, up to the next top-level
    /// `,` or `]` (`depth`, `in_string` and `escape` track the skipped
    /// bytes' own nesting).
    Skip,
}

/// Incremental streamed-JSON-array decoder with a cap on element size.
#[derive(Debug)]
pub struct JsonArrayDecoder {
    max: usize,
    state: State,
    /// Bracket nesting depth inside the current element.
    depth: usize,
    /// The scan is inside a JSON string.
    in_string: bool,
    /// The previous byte was a backslash inside a string.
    escape: bool,
    /// The current element's bytes from earlier chunks.
    buf: Vec<u8>,
    /// Set once the decoder failed; every later call returns it.
    pub(super) failed: super::Sticky,
    /// Stretches of bytes skipped because they broke the grammar.
    skipped: u64,
}

impl JsonArrayDecoder {
    /// A decoder that rejects elements larger than `max_element_bytes`.
    pub fn new(max_element_bytes: usize) -> Self {
        JsonArrayDecoder {
            max: max_element_bytes,
            state: State::Start,
            depth: 0,
            in_string: false,
            escape: false,
            buf: Vec::new(),
            failed: super::Sticky::default(),
            skipped: 0,
        }
    }

    /// Stretches of bytes skipped so far because they broke the array's
    /// grammar (each up to the next top-level `,` or `]`).
    pub fn skipped(&self) -> u64 {
        self.skipped
    }

    /// End of body. An empty (or all-whitespace) body and a closed array
    /// are fine; an array or element cut short is malformed. The decoder is
    /// reset for reuse.
    pub fn finish(&mut self, _on: &mut dyn FnMut(Frame<'_>)) -> Result<(), FramingError> {
        self.failed.check()?;
        let result = match self.state {
            State::Start | State::Closed => Ok(()),
            State::Element => Err(FramingError::Malformed("JSON array element not terminated")),
            State::Open | State::Comma | State::AfterElement | State::Skip => {
                Err(FramingError::Malformed("JSON array not terminated"))
            }
        };
        if result.is_ok() {
            self.reset();
        }
        self.failed.keep(result)
    }

    fn reset(&mut self) {
        self.state = State::Start;
        self.depth = 0;
        self.in_string = false;
        self.escape = false;
        self.buf.clear();
    }

    /// `Decoder::feed`'s work, before its `Sticky` keeps the outcome.
    pub(super) fn feed_inner(
        &mut self,
        chunk: &[u8],
        on: &mut dyn FnMut(Frame<'_>),
    ) -> Result<(), FramingError> {
        // Where the current element starts in this chunk; `None` while the
        // element began in an earlier chunk (its bytes are in `buf`).
        let mut start = None;
        let mut pos = 0;
        loop {
            if self.state == State::Element {
                let Some(end) = self.scan(chunk, pos) else {
                    let from = start.unwrap_or(0);
                    self.check_len(self.buf.len() + (chunk.len() - from))?;
                    self.buf.extend_from_slice(&chunk[from..]);
                    return Ok(());
                };
                self.element(chunk, start.take(), end, on)?;
                pos = end;
                continue;
            }
            if self.state == State::Skip {
                let Some(end) = self.skip(chunk, pos) else {
                    return Ok(());
                };
                pos = end;
                continue;
            }
            let Some(&byte) = chunk.get(pos) else {
                return Ok(());
            };
            pos += 1;
            if matches!(byte, b' ' | b'\t' | b'\r' | b'\n') {
                continue;
            }
            self.state = match (self.state, byte) {
                (State::Start, b'[') => State::Open,
                (State::Start, _) => {
                    return Err(FramingError::Malformed("expected '[' to open the array"));
                }
                (State::Open, b']') | (State::AfterElement, b']') => State::Closed,
                (State::Open | State::Comma, b'{' | b'[') => {
                    start = Some(pos - 1);
                    self.depth = 1;
                    State::Element
                }
                (State::AfterElement, b',') => State::Comma,
                (State::Open | State::Comma | State::AfterElement, _) => {
                    // Not an element where one belongs: skip to the next
                    // top-level `,` or `]`, starting with this byte.
                    self.skipped += 1;
                    self.depth = 0;
                    self.in_string = false;
                    self.escape = false;
                    State::Skip.after_skipped(self, byte)
                }
                (State::Closed, _) => {
                    return Err(FramingError::Malformed("data after the closing ']'"));
                }
                (State::Element | State::Skip, _) => self.state, // handled above
            };
        }
    }

    /// Continue scanning the current element from `pos`; the index just
    /// past its closing bracket when the element ends inside `chunk`.
    fn scan(&mut self, chunk: &[u8], mut pos: usize) -> Option<usize> {
        while pos < chunk.len() {
            if self.escape {
                self.escape = false;
                pos += 1;
            } else if self.in_string {
                let at = pos + memchr2(b'"', b'\\', &chunk[pos..])?;
                if chunk[at] == b'"' {
                    self.in_string = false;
                } else {
                    self.escape = true;
                }
                pos = at + 1;
            } else {
                let byte = chunk[pos];
                pos += 1;
                match byte {
                    b'"' => self.in_string = true,
                    b'{' | b'[' => self.depth += 1,
                    b'}' | b']' => {
                        self.depth -= 1;
                        if self.depth == 0 {
                            return Some(pos);
                        }
                    }
                    _ => {}
                }
            }
        }
        None
    }

    /// Continue skipping from `pos`; the index just past the top-level `,`
    /// or `]` that ends the skip, when it is inside `chunk`.
    fn skip(&mut self, chunk: &[u8], mut pos: usize) -> Option<usize> {
        while let Some(&byte) = chunk.get(pos) {
            pos += 1;
            self.state = State::Skip.after_skipped(self, byte);
            if self.state != State::Skip {
                return Some(pos);
            }
        }
        None
    }

    /// The current element ends at `end` in `chunk`: emit it.
    fn element(
        &mut self,
        chunk: &[u8],
        start: Option<usize>,
        end: usize,
        on: &mut dyn FnMut(Frame<'_>),
    ) -> Result<(), FramingError> {
        self.state = State::AfterElement;
        self.check_len(match start {
            Some(start) => end - start,
            None => self.buf.len() + end,
        })?;
        let element = match start {
            Some(start) => &chunk[start..end],
            None => {
                self.buf.extend_from_slice(&chunk[..end]);
                &self.buf[..]
            }
        };
        on(Frame::Json(element));
        self.buf.clear();
        Ok(())
    }

    fn check_len(&self, len: usize) -> Result<(), FramingError> {
        if len > self.max {
            return Err(FramingError::TooLarge { limit: self.max });
        }
        Ok(())
    }
}

impl State {
    /// The state after one skipped `byte`: still `Skip`, or `Comma` /
    /// `Closed` at a top-level `,` / `]` outside a string.
    fn after_skipped(self, dec: &mut JsonArrayDecoder, byte: u8) -> State {
        if dec.escape {
            dec.escape = false;
        } else if dec.in_string {
            match byte {
                b'\\' => dec.escape = true,
                b'"' => dec.in_string = false,
                _ => {}
            }
        } else {
            match byte {
                b'"' => dec.in_string = true,
                b'{' | b'[' => dec.depth += 1,
                b'}' | b']' if dec.depth > 0 => dec.depth -= 1,
                b',' if dec.depth == 0 => return State::Comma,
                b']' => return State::Closed,
                _ => {}
            }
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framing::Decoder;
    use crate::framing::testing::{self, strs};

    type Frames = Vec<String>;

    fn decode_all_ways(input: &[u8], max: usize) -> (Frames, Result<(), FramingError>) {
        testing::decode_all_ways(|| JsonArrayDecoder::new(max), input, testing::json)
    }

    fn frames(input: &[u8]) -> Frames {
        testing::frames_ok(|| JsonArrayDecoder::new(1 << 16), input, testing::json)
    }

    fn error(input: &[u8]) -> (Frames, FramingError) {
        let (frames, result) = decode_all_ways(input, 1 << 16);
        let err = result.expect_err("expected an error");
        (frames, err)
    }

    #[test]
    fn elements_with_any_whitespace_between() {
        let expected = strs(&["{\"a\":1}", "{\"b\":[2,{}]}", "[3]"]);
        assert_eq!(frames(b"[{\"a\":1},{\"b\":[2,{}]},[3]]"), expected);
        assert_eq!(
            frames(b" \r\n[ {\"a\":1}\n,\r\n{\"b\":[2,{}]}\t, [3]\r\n]\r\n"),
            expected
        );
    }

    #[test]
    fn empty_body_and_empty_array() {
        assert_eq!(frames(b""), strs(&[]), "an empty body is fine");
        assert_eq!(
            frames(b" \r\n"),
            strs(&[]),
            "an all-whitespace body is fine"
        );
        assert_eq!(frames(b"[]"), strs(&[]));
        assert_eq!(frames(b"[ \n ]\n"), strs(&[]));
    }

    #[test]
    fn brackets_quotes_and_escapes_inside_strings() {
        let input = br#"[{"t":"} ] { [ , \" \\"},{"u":"\\\"}","v":"\u007d"},{"w":"\\"}]"#;
        assert_eq!(
            frames(input),
            strs(&[
                r#"{"t":"} ] { [ , \" \\"}"#,
                r#"{"u":"\\\"}","v":"\u007d"}"#,
                r#"{"w":"\\"}"#,
            ])
        );
    }

    #[test]
    fn element_is_emitted_as_soon_as_it_closes() {
        let mut dec = JsonArrayDecoder::new(1024);
        let mut seen = Vec::new();
        let mut on = |f: Frame<'_>| seen.push(format!("{f:?}"));
        dec.feed(b"[{\"a\":", &mut on).expect("valid");
        dec.feed(b"1}", &mut on).expect("valid");
        assert_eq!(
            seen.len(),
            1,
            "emitted on its closing brace, before any ',' or ']'"
        );
    }

    #[test]
    fn element_wholly_inside_a_chunk_borrows_it() {
        let chunk = b"[{\"a\":1},\n{\"b\":2},{\"c\"";
        let mut dec = JsonArrayDecoder::new(1024);
        assert_eq!(testing::borrowed_frames(&mut dec, chunk), 2);
        assert_eq!(dec.buf, b"{\"c\"", "only the incomplete element is kept");
    }

    #[test]
    fn scan_resumes_without_rescanning_the_buffer() {
        // A long string split into many chunks: the state after each chunk
        // must say "inside a string", so a quote-free chunk is not rescanned.
        let mut dec = JsonArrayDecoder::new(1 << 20);
        let mut n = 0;
        let mut on = |_: Frame<'_>| n += 1;
        dec.feed(b"[{\"text\":\"", &mut on).expect("valid");
        for _ in 0..100 {
            dec.feed(b"0123456789 } ] { [ ", &mut on).expect("valid");
            assert!(
                dec.in_string && dec.depth == 1,
                "scan state is carried over"
            );
        }
        dec.feed(b"\"}]", &mut on).expect("valid");
        dec.finish(&mut on).expect("finish");
        assert_eq!(n, 1);
    }

    #[test]
    fn malformed_streams() {
        let cases: &[(&[u8], &[&str], &str)] = &[
            (b"{\"a\":1}", &[], "expected '[' to open the array"),
            (b"x[{}]", &[], "expected '[' to open the array"),
            (b"[{}] x", &["{}"], "data after the closing ']'"),
            (b"[{}]]", &["{}"], "data after the closing ']'"),
            (b"[{}][{}]", &["{}"], "data after the closing ']'"),
            (
                b"[{\"a\":1},{\"b\"",
                &["{\"a\":1}"],
                "JSON array element not terminated",
            ),
            (b"[{\"a\":\"}]", &[], "JSON array element not terminated"),
            (b"[{\"a\":1}", &["{\"a\":1}"], "JSON array not terminated"),
            (b"[{\"a\":1},", &["{\"a\":1}"], "JSON array not terminated"),
            (b"[", &[], "JSON array not terminated"),
            (b"[1, \"a]", &[], "JSON array not terminated"),
        ];
        for (input, expected, why) in cases {
            let (f, e) = error(input);
            assert_eq!(
                (f, e),
                (strs(expected), FramingError::Malformed(why)),
                "input {:?}",
                String::from_utf8_lossy(input)
            );
        }
    }

    /// Frames and skipped stretches, fed whole, at every two-piece split
    /// and byte by byte (all must agree); the decode must succeed.
    fn skipping(input: &[u8]) -> (Frames, u64) {
        testing::all_ways(input, |pieces| {
            let mut dec = JsonArrayDecoder::new(1 << 16);
            let mut frames = Vec::new();
            for piece in pieces {
                dec.feed(piece, &mut |f| frames.push(testing::json(f)))
                    .expect("no framing error");
            }
            dec.finish(&mut |f| frames.push(testing::json(f)))
                .expect("no framing error at the end");
            (frames, dec.skipped())
        })
    }

    #[test]
    fn grammar_breaks_inside_the_array_are_skipped_to_the_next_element() {
        let cases: &[(&[u8], &[&str], u64)] = &[
            (b"[{\"a\":1} x, {\"b\":2}]", &["{\"a\":1}", "{\"b\":2}"], 1),
            (
                b"[{\"a\":1}{\"x\":[1,2]},{\"b\":2}]",
                &["{\"a\":1}", "{\"b\":2}"],
                1,
            ),
            (b"[{\"a\":1},]", &["{\"a\":1}"], 1),
            (b"[,{}]", &["{}"], 1),
            (b"[1,2]", &[], 2),
            (b"[\"s,]\\\"\", {\"b\":2}]", &["{\"b\":2}"], 1),
            (b"[null, {\"b\":2}\n]", &["{\"b\":2}"], 1),
            (b"[{\"a\":1},{\"b\":2}]", &["{\"a\":1}", "{\"b\":2}"], 0),
        ];
        for (input, expected, skipped) in cases {
            assert_eq!(
                skipping(input),
                (strs(expected), *skipped),
                "input {:?}",
                String::from_utf8_lossy(input)
            );
        }
    }

    #[test]
    fn failure_is_sticky_and_success_resets() {
        let mut dec = JsonArrayDecoder::new(1024);
        let mut on = |_: Frame<'_>| {};
        dec.feed(b"[{}]", &mut on).expect("valid");
        dec.finish(&mut on).expect("finish");
        dec.feed(b"[{}]", &mut on).expect("reusable after finish");
        assert!(dec.feed(b"x", &mut on).is_err());
        let err = Err(FramingError::Malformed("data after the closing ']'"));
        assert_eq!(dec.feed(b"", &mut on), err);
        assert_eq!(dec.finish(&mut on), err);
    }

    #[test]
    fn element_over_limit_fails() {
        let input = b"[{\"a\":1},{\"0123456789\":1},{\"b\":2}]";
        let (f, r) = decode_all_ways(input, 12);
        assert_eq!(f, strs(&["{\"a\":1}"]));
        assert_eq!(r, Err(FramingError::TooLarge { limit: 12 }));
        let (f, r) = decode_all_ways(b"[{\"a\":1},{\"0123456789\":", 12);
        assert_eq!(
            (f, r),
            (
                strs(&["{\"a\":1}"]),
                Err(FramingError::TooLarge { limit: 12 })
            ),
            "an unterminated oversized element fails before finish"
        );
        let (f, r) = decode_all_ways(b"[{\"0123456\":1}]", 15);
        assert_eq!(
            (f, r),
            (strs(&["{\"0123456\":1}"]), Ok(())),
            "exactly at the limit passes"
        );
    }

    const GEMINI_STREAM: &[u8] = include_bytes!("../../tests/fixtures/framing/gemini_stream.json");
    const GEMINI_STREAM_ERROR: &[u8] =
        include_bytes!("../../tests/fixtures/framing/gemini_stream_error.json");

    #[test]
    fn fixtures_decode_the_same_at_every_split() {
        for (name, input) in [
            ("gemini_stream", GEMINI_STREAM),
            ("gemini_stream_error", GEMINI_STREAM_ERROR),
        ] {
            let frames = frames(input);
            let whole: Vec<serde_json::Value> =
                serde_json::from_slice(input).expect("the fixture is one JSON array");
            assert_eq!(frames.len(), whole.len(), "{name}: one frame per element");
            for (frame, expected) in frames.iter().zip(&whole) {
                let element: serde_json::Value = serde_json::from_str(frame)
                    .unwrap_or_else(|e| panic!("{name}: frame {frame:?} is not JSON: {e}"));
                assert_eq!(&element, expected, "{name}: frame equals the array element");
            }
        }
    }
}
