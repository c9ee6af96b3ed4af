//! NDJSON framing: newline-delimited JSON bytes in, one `Frame::Json` per line out.
//!
//! Serves `application/x-ndjson` and JSON-lines bodies (Ollama `/api/chat`,
//! `/api/generate`). Lines end in LF or CRLF; a trailing CR is stripped, so
//! a CRLF split across two chunks is still one line end. Blank lines (empty
//! or only JSON whitespace) are skipped. A final line without a line end is
//! emitted by `finish`, since many servers close the body right after it.
//!
//! The common path allocates nothing: line ends are found with `memchr`,
//! a line wholly inside the current chunk is borrowed from it, and only an
//! incomplete line is kept between chunks, in a reused buffer.

use memchr::memchr;

use super::{Frame, FramingError};

/// Incremental NDJSON decoder with a cap on line size.
#[derive(Debug)]
pub struct NdjsonDecoder {
    max: usize,
    /// The incomplete line carried over from earlier chunks.
    tail: Vec<u8>,
    /// Set once the cap was exceeded; every later call returns it.
    pub(super) failed: super::Sticky,
    /// Oversize policy: skip a line over the cap (counted) instead of
    /// failing (long batch result files, where one line must not end
    /// the metering of the rest).
    skip_oversize: bool,
    /// Inside a line over the cap: its bytes are dropped up to its LF.
    discarding: bool,
    /// Lines skipped for being over the cap.
    skipped: u64,
}

impl NdjsonDecoder {
    /// A decoder that rejects lines longer than `max_line_bytes`, counted
    /// without the line end.
    pub fn new(max_line_bytes: usize) -> Self {
        NdjsonDecoder {
            max: max_line_bytes,
            tail: Vec::new(),
            failed: super::Sticky::default(),
            skip_oversize: false,
            discarding: false,
            skipped: 0,
        }
    }

    /// A decoder that skips (and counts) lines longer than
    /// `max_line_bytes` instead of failing; at most that much of a line
    /// is held.
    pub fn skipping_oversize(max_line_bytes: usize) -> Self {
        NdjsonDecoder {
            skip_oversize: true,
            ..NdjsonDecoder::new(max_line_bytes)
        }
    }

    /// Lines skipped so far for being over the cap (skipping decoders).
    pub fn skipped(&self) -> u64 {
        self.skipped
    }

    /// Under the skipping policy, turn a cap error into a skipped line.
    fn oversize(&mut self, result: Result<(), FramingError>) -> Result<(), FramingError> {
        match result {
            Err(FramingError::TooLarge { .. }) if self.skip_oversize => {
                self.skipped += 1;
                Ok(())
            }
            other => other,
        }
    }

    /// End of body: emit a final line that had no line end, then reset the
    /// decoder for reuse.
    pub fn finish(&mut self, on: &mut dyn FnMut(Frame<'_>)) -> Result<(), FramingError> {
        self.failed.check()?;
        let result = if self.discarding {
            Ok(())
        } else {
            let r = self.line_from_tail(on);
            self.oversize(r)
        };
        self.tail.clear();
        self.discarding = false;
        self.failed.keep(result)
    }

    /// `Decoder::feed`'s work, before its `Sticky` keeps the outcome.
    pub(super) fn feed_inner(
        &mut self,
        chunk: &[u8],
        on: &mut dyn FnMut(Frame<'_>),
    ) -> Result<(), FramingError> {
        let mut pos = 0;
        while let Some(i) = memchr(b'\n', &chunk[pos..]) {
            let end = pos + i;
            if self.discarding {
                // The rest of a line already counted as skipped.
                self.discarding = false;
            } else if self.tail.is_empty() {
                let r = self.line(&chunk[pos..end], on);
                self.oversize(r)?;
            } else {
                self.tail.extend_from_slice(&chunk[pos..end]);
                let result = self.line_from_tail(on);
                self.tail.clear();
                self.oversize(result)?;
            }
            pos = end + 1;
        }
        if self.discarding {
            return Ok(());
        }
        let rest = &chunk[pos..];
        let partial = self.check_partial(
            self.tail.len() + rest.len(),
            rest.last().or(self.tail.last()),
        );
        if partial.is_err() && self.skip_oversize {
            // Never hold more than the cap: drop the line now, count it,
            // and drop its bytes up to its line end.
            self.skipped += 1;
            self.tail.clear();
            self.discarding = true;
            return Ok(());
        }
        partial?;
        self.tail.extend_from_slice(rest);
        Ok(())
    }

    /// An incomplete line may hold one byte more than the cap when that
    /// byte is a CR, which the line end will strip.
    fn check_partial(&self, len: usize, last: Option<&u8>) -> Result<(), FramingError> {
        if len > self.max && !(len == self.max + 1 && last == Some(&b'\r')) {
            return Err(FramingError::TooLarge { limit: self.max });
        }
        Ok(())
    }

    fn line_from_tail(&self, on: &mut dyn FnMut(Frame<'_>)) -> Result<(), FramingError> {
        self.line(&self.tail, on)
    }

    /// Interpret one complete line (without its LF).
    fn line(&self, line: &[u8], on: &mut dyn FnMut(Frame<'_>)) -> Result<(), FramingError> {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.len() > self.max {
            return Err(FramingError::TooLarge { limit: self.max });
        }
        if !line.iter().all(|b| matches!(b, b' ' | b'\t' | b'\r')) {
            on(Frame::Json(line));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framing::Decoder;
    use crate::framing::testing::{self, strs};

    type Frames = Vec<String>;

    fn decode_all_ways(input: &[u8], max: usize) -> (Frames, Result<(), FramingError>) {
        testing::decode_all_ways(|| NdjsonDecoder::new(max), input, testing::json)
    }

    fn frames(input: &[u8]) -> Frames {
        testing::frames_ok(|| NdjsonDecoder::new(1 << 16), input, testing::json)
    }

    #[test]
    fn lf_and_crlf_line_ends() {
        let expected = strs(&["{\"a\":1}", "{\"b\":2}", "{\"c\":3}"]);
        assert_eq!(frames(b"{\"a\":1}\n{\"b\":2}\n{\"c\":3}\n"), expected);
        assert_eq!(frames(b"{\"a\":1}\r\n{\"b\":2}\r\n{\"c\":3}\r\n"), expected);
        assert_eq!(frames(b"{\"a\":1}\r\n{\"b\":2}\n{\"c\":3}\r\n"), expected);
    }

    #[test]
    fn final_line_without_newline_is_emitted_at_finish() {
        assert_eq!(
            frames(b"{\"a\":1}\n{\"b\":2}"),
            strs(&["{\"a\":1}", "{\"b\":2}"])
        );
        assert_eq!(
            frames(b"{\"a\":1}\r"),
            strs(&["{\"a\":1}"]),
            "a lone CR at EOF is stripped"
        );
        let mut dec = NdjsonDecoder::new(64);
        let mut seen = Vec::new();
        dec.feed(b"{\"x\":1}", &mut |f| seen.push(format!("{f:?}")))
            .expect("valid stream");
        assert!(seen.is_empty(), "an unterminated line waits for more bytes");
        dec.finish(&mut |f| seen.push(format!("{f:?}")))
            .expect("finish");
        assert_eq!(seen.len(), 1, "finish emits the unterminated line");
    }

    #[test]
    fn blank_lines_are_skipped() {
        assert_eq!(
            frames(b"\n\r\n  \n\t\r\n{\"a\":1}\n\n\n{\"b\":2}\n\r\n \t"),
            strs(&["{\"a\":1}", "{\"b\":2}"])
        );
        assert_eq!(frames(b""), strs(&[]), "an empty body has no frames");
        assert_eq!(frames(b"\n\n"), strs(&[]));
    }

    #[test]
    fn only_one_trailing_cr_is_stripped_and_inner_whitespace_kept() {
        assert_eq!(frames(b" {\"a\": 1} \r\r\n"), strs(&[" {\"a\": 1} \r"]));
        assert_eq!(frames(b"{\"a\":\"x\ry\"}\n"), strs(&["{\"a\":\"x\ry\"}"]));
    }

    #[test]
    fn decoder_is_reusable_after_finish() {
        let mut dec = NdjsonDecoder::new(64);
        let mut n = 0;
        let mut on = |_: Frame<'_>| n += 1;
        dec.feed(b"{}\n{", &mut on).expect("valid stream");
        dec.finish(&mut on).expect("finish");
        dec.feed(b"{}\n", &mut on).expect("reuse after finish");
        dec.finish(&mut on).expect("finish");
        assert_eq!(n, 3, "two lines from the first body, one from the second");
    }

    #[test]
    fn line_wholly_inside_a_chunk_borrows_it() {
        let chunk = b"{\"a\":1}\n{\"b\":2}\r\n{\"c\"";
        let mut dec = NdjsonDecoder::new(1024);
        assert_eq!(testing::borrowed_frames(&mut dec, chunk), 2);
        assert_eq!(dec.tail, b"{\"c\"", "only the incomplete line is kept");
    }

    #[test]
    fn tail_buffer_is_reused() {
        let mut dec = NdjsonDecoder::new(1024);
        let mut on = |_: Frame<'_>| {};
        dec.feed(b"{\"long\":\"0123456789\"", &mut on)
            .expect("valid");
        dec.feed(b"}\n{", &mut on).expect("valid");
        let cap = dec.tail.capacity();
        dec.feed(b"}\n{\"b\"", &mut on).expect("valid");
        assert_eq!(dec.tail.capacity(), cap, "the tail keeps its allocation");
    }

    #[test]
    fn line_over_limit_fails_and_stays_failed() {
        let input = b"{\"a\":1}\n{\"0123456789\":1}\n{\"b\":2}\n";
        let (f, r) = decode_all_ways(input, 12);
        assert_eq!(f, strs(&["{\"a\":1}"]));
        assert_eq!(r, Err(FramingError::TooLarge { limit: 12 }));
        let (f, r) = decode_all_ways(b"{\"a\":1}\n{\"0123456789\":1}", 12);
        assert_eq!(
            (f, r),
            (
                strs(&["{\"a\":1}"]),
                Err(FramingError::TooLarge { limit: 12 })
            ),
            "an unterminated oversized line fails too"
        );

        let too_large = FramingError::TooLarge { limit: 4 };
        testing::assert_stays_failed(&mut NdjsonDecoder::new(4), b"{\"abc\"", b"}\n", too_large);
    }

    #[test]
    fn limit_counts_the_line_without_its_line_end() {
        let exact = b"{\"a\":123}\r\n{\"b\":456}\n{\"c\":789}\r";
        let (f, r) = decode_all_ways(exact, 9);
        assert_eq!(
            (f, r),
            (strs(&["{\"a\":123}", "{\"b\":456}", "{\"c\":789}"]), Ok(())),
            "lines exactly at the limit pass, with any line end"
        );
        let (_, r) = decode_all_ways(b"{\"a\":1234}\r\n", 9);
        assert_eq!(r, Err(FramingError::TooLarge { limit: 9 }));
    }

    const OLLAMA_CHAT: &[u8] = include_bytes!("../../tests/fixtures/framing/ollama_chat.ndjson");
    const OLLAMA_GENERATE: &[u8] =
        include_bytes!("../../tests/fixtures/framing/ollama_generate.ndjson");
    const OLLAMA_ERROR: &[u8] =
        include_bytes!("../../tests/fixtures/framing/ollama_chat_error.ndjson");

    #[test]
    fn fixtures_decode_the_same_at_every_split() {
        for (name, input, lines) in [
            ("ollama_chat", OLLAMA_CHAT, 12),
            ("ollama_generate", OLLAMA_GENERATE, 9),
            ("ollama_chat_error", OLLAMA_ERROR, 4),
        ] {
            let frames = frames(input);
            assert_eq!(frames.len(), lines, "{name}: one frame per line");
            for line in &frames {
                serde_json::from_str::<serde_json::Value>(line)
                    .unwrap_or_else(|e| panic!("{name}: frame {line:?} is not JSON: {e}"));
            }
            let last = frames.last().expect("at least one frame");
            assert!(
                last.contains("\"done\":true") || last.contains("\"error\""),
                "{name}: the last frame is the final one, got {last}"
            );
        }
    }

    #[test]
    fn crlf_fixture_equals_lf_fixture() {
        let crlf = String::from_utf8_lossy(OLLAMA_CHAT).replace('\n', "\r\n");
        assert_eq!(frames(crlf.as_bytes()), frames(OLLAMA_CHAT));
    }

    #[test]
    fn skipping_decoder_counts_oversize_lines_and_goes_on_at_every_split() {
        let long = format!("{{\"x\":\"{}\"}}", "a".repeat(40));
        let input = format!("{{\"a\":1}}\n{long}\r\n{{\"b\":2}}\n{long}\n{{\"c\":3}}\n{long}");
        let input = input.as_bytes();
        for at in 0..=input.len() {
            for second in at..=input.len() {
                let mut dec = NdjsonDecoder::skipping_oversize(16);
                let mut seen = Vec::new();
                let mut on = |f: Frame<'_>| {
                    if let Frame::Json(line) = f {
                        seen.push(String::from_utf8_lossy(line).into_owned());
                    }
                };
                for piece in [&input[..at], &input[at..second], &input[second..]] {
                    dec.feed(piece, &mut on)
                        .expect("oversize lines are not errors");
                }
                dec.finish(&mut on).expect("finish");
                assert_eq!(
                    seen,
                    strs(&["{\"a\":1}", "{\"b\":2}", "{\"c\":3}"]),
                    "split at {at} and {second}"
                );
                assert_eq!(dec.skipped(), 3, "split at {at} and {second}");
                assert!(
                    dec.tail.capacity() <= 64,
                    "the held tail stays near the cap"
                );
            }
        }
    }
}
