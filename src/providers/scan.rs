//! Validating JSON scan: one SSE `data` payload in, the few borrowed fields
//! of the common streamed chunk out, without serde.
//!
//! Adapters use it for the frames that make up almost all of a stream (an
//! OpenAI content delta, an Anthropic `content_block_delta`) and fall back
//! to their serde path for everything else. The scan is stricter than
//! `serde_json`, never looser: it walks and checks the whole document
//! (grammar, string escapes, control characters, UTF-8, nothing after the
//! value) and gives up (`None`) on anything it is not sure serde reads the
//! same way — an escaped key or wanted string, a `\u` surrogate, deep
//! nesting, a field the adapter did not ask for. Giving up costs only the
//! work done so far; the serde path then decides, errors included.

/// Nesting deeper than this gives up (serde_json's own limit is 128).
const MAX_DEPTH: u32 = 16;

/// Words of a string read eight bytes at a time before the rest of it is
/// left to `memchr` (long strings: base64 audio, long text). Keys, event
/// types and ids fit, where a `memchr` call would cost more than it saves.
const SHORT_WORDS: u32 = 8;

/// A cursor over one JSON document. Every method returns `None` to give up.
pub(crate) struct Scan<'a> {
    bytes: &'a [u8],
    text: &'a str,
    at: usize,
}

impl<'a> Scan<'a> {
    /// A scan of `data`; `None` unless it is UTF-8 (serde checks that only
    /// where it borrows, so non-UTF-8 data is left to it).
    pub(crate) fn new(data: &'a [u8]) -> Option<Scan<'a>> {
        let text = std::str::from_utf8(data).ok()?;
        Some(Scan {
            bytes: data,
            text,
            at: 0,
        })
    }

    /// A whole document that is one object: `member` as `object` calls it
    /// (at depth 0), then nothing but whitespace.
    pub(crate) fn document(
        data: &'a [u8],
        member: impl FnMut(&mut Self, &'a str) -> Option<()>,
    ) -> Option<()> {
        let mut s = Scan::new(data)?;
        s.object(0, member)?;
        s.end()
    }

    /// Nothing but whitespace is left.
    pub(crate) fn end(mut self) -> Option<()> {
        self.skip_ws();
        (self.at == self.bytes.len()).then_some(())
    }

    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.bytes.get(self.at) {
            self.at += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        // Streamed JSON has no whitespace between tokens: one look decides.
        match self.bytes.get(self.at) {
            Some(&b) if b > b' ' => Some(b),
            _ => {
                self.skip_ws();
                self.bytes.get(self.at).copied()
            }
        }
    }

    fn eat(&mut self, byte: u8) -> Option<()> {
        (self.peek()? == byte).then(|| self.at += 1)
    }

    /// An object: `member` is called with each key (keys with escapes give
    /// up) and must consume the value.
    pub(crate) fn object(
        &mut self,
        depth: u32,
        mut member: impl FnMut(&mut Self, &'a str) -> Option<()>,
    ) -> Option<()> {
        self.items(depth, [b'{', b'}'], |s| {
            if s.peek()? != b'"' {
                return None;
            }
            let key = s.plain_string()?;
            s.eat(b':')?;
            s.skip_ws();
            member(s, key)
        })
    }

    /// An object whose members named in `keys` are each read by `read`,
    /// given the key's place in `keys` (a repeated one gives up: serde
    /// rejects a repeated struct field); other members are skipped.
    pub(crate) fn fields<const N: usize>(
        &mut self,
        depth: u32,
        keys: [&str; N],
        mut read: impl FnMut(&mut Self, usize) -> Option<()>,
    ) -> Option<()> {
        let mut seen = Seen::default();
        self.object(depth, |s, key| match keys.iter().position(|k| *k == key) {
            Some(at) => {
                seen.first(at as u32)?;
                read(s, at)
            }
            None => s.skip(depth + 1),
        })
    }

    /// An object of counts: the member named `keys[i]` at `[i]`, as
    /// `u64_or_null` reads it (`fields`).
    pub(crate) fn counts<const N: usize>(
        &mut self,
        depth: u32,
        keys: [&str; N],
    ) -> Option<[Option<u64>; N]> {
        let mut counts = [None; N];
        self.fields(depth, keys, |s, at| {
            counts[at] = s.u64_or_null()?;
            Some(())
        })?;
        Some(counts)
    }

    /// An array: `element` is called at each element and must consume it.
    pub(crate) fn array(
        &mut self,
        depth: u32,
        mut element: impl FnMut(&mut Self) -> Option<()>,
    ) -> Option<()> {
        self.items(depth, [b'[', b']'], |s| {
            s.skip_ws();
            element(s)
        })
    }

    /// An object or array between `open` and `close`: `item` is called at
    /// each member or element and must consume it; the commas between them
    /// are checked here. Nesting deeper than `MAX_DEPTH` gives up.
    #[inline(always)]
    fn items(
        &mut self,
        depth: u32,
        [open, close]: [u8; 2],
        mut item: impl FnMut(&mut Self) -> Option<()>,
    ) -> Option<()> {
        if depth > MAX_DEPTH {
            return None;
        }
        self.eat(open)?;
        if self.peek()? == close {
            self.at += 1;
            return Some(());
        }
        loop {
            item(self)?;
            match self.peek()? {
                b',' => self.at += 1,
                b if b == close => {
                    self.at += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// Whether the value at the cursor is `null` (consumed if so).
    pub(crate) fn null(&mut self) -> Option<bool> {
        if self.peek()? == b'n' {
            self.literal(b"null")?;
            return Some(true);
        }
        Some(false)
    }

    /// `null` (as `None`), or what `read` makes of the value at the cursor.
    pub(crate) fn or_null<T>(
        &mut self,
        read: impl FnOnce(&mut Self) -> Option<T>,
    ) -> Option<Option<T>> {
        if self.null()? {
            return Some(None);
        }
        read(self).map(Some)
    }

    /// Any value, as its raw text (what serde's `RawValue` borrows);
    /// `None` inside for `null`, as serde's `Option<&RawValue>` has it.
    pub(crate) fn raw(&mut self, depth: u32) -> Option<Option<&'a str>> {
        let raw = self.value(depth)?;
        Some((raw != "null").then_some(raw))
    }

    /// A string without escapes (its content), or `null`.
    #[inline]
    pub(crate) fn str_or_null(&mut self) -> Option<Option<&'a str>> {
        if self.null()? {
            return Some(None);
        }
        if self.peek()? != b'"' {
            return None;
        }
        self.plain_string().map(Some)
    }

    /// `true`, `false` or `null` (as `None`).
    pub(crate) fn bool_or_null(&mut self) -> Option<Option<bool>> {
        match self.peek()? {
            b't' => self.literal(b"true").map(|()| Some(true)),
            b'f' => self.literal(b"false").map(|()| Some(false)),
            b'n' => self.literal(b"null").map(|()| None),
            _ => None,
        }
    }

    /// A count: `null`, or an integer that fits `u64` written without a
    /// sign, fraction or exponent (what serde reads into `Option<u64>`;
    /// anything else gives up, and serde decides).
    pub(crate) fn u64_or_null(&mut self) -> Option<Option<u64>> {
        if self.null()? {
            return Some(None);
        }
        let start = self.at;
        let mut n: u64 = 0;
        while let Some(d) = self.bytes.get(self.at).filter(|b| b.is_ascii_digit()) {
            n = n.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
            self.at += 1;
        }
        let digits = self.at - start;
        if digits == 0 || (digits > 1 && self.bytes[start] == b'0') {
            return None;
        }
        match self.bytes.get(self.at) {
            Some(b'.' | b'e' | b'E') => None,
            _ => Some(Some(n)),
        }
    }

    /// Skip any value, checking it.
    pub(crate) fn skip(&mut self, depth: u32) -> Option<()> {
        self.value(depth).map(drop)
    }

    fn value(&mut self, depth: u32) -> Option<&'a str> {
        let start = {
            self.skip_ws();
            self.at
        };
        match *self.bytes.get(self.at)? {
            b'"' => {
                self.string()?;
            }
            b'{' => self.object(depth + 1, |s, _| s.skip(depth + 1))?,
            b'[' => self.array(depth + 1, |s| s.skip(depth + 1))?,
            b't' => self.literal(b"true")?,
            b'f' => self.literal(b"false")?,
            b'n' => self.literal(b"null")?,
            b'-' | b'0'..=b'9' => self.number()?,
            _ => return None,
        }
        self.text.get(start..self.at)
    }

    fn literal(&mut self, word: &[u8]) -> Option<()> {
        let end = self.at + word.len();
        (self.bytes.get(self.at..end)? == word).then(|| self.at = end)
    }

    /// `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`, exactly.
    fn number(&mut self) -> Option<()> {
        if self.bytes.get(self.at) == Some(&b'-') {
            self.at += 1;
        }
        match self.bytes.get(self.at)? {
            b'0' => self.at += 1,
            b'1'..=b'9' => self.digits(),
            _ => return None,
        }
        if self.bytes.get(self.at) == Some(&b'.') {
            self.at += 1;
            self.some_digits()?;
        }
        if let Some(b'e' | b'E') = self.bytes.get(self.at) {
            self.at += 1;
            if let Some(b'+' | b'-') = self.bytes.get(self.at) {
                self.at += 1;
            }
            self.some_digits()?;
        }
        Some(())
    }

    fn digits(&mut self) {
        while self.bytes.get(self.at).is_some_and(u8::is_ascii_digit) {
            self.at += 1;
        }
    }

    fn some_digits(&mut self) -> Option<()> {
        let start = self.at;
        self.digits();
        (self.at > start).then_some(())
    }

    /// A string literal without escapes: its content. Inlined with
    /// `string`: most strings of a chunk are keys read here.
    #[inline(always)]
    fn plain_string(&mut self) -> Option<&'a str> {
        let (literal, escaped) = self.string()?;
        (!escaped).then(|| &literal[1..literal.len() - 1])
    }

    /// The string literal at the cursor (quotes included) and whether it
    /// has escapes. Eight bytes at a time: the first quote, backslash or
    /// control byte of a word is found from its flag mask, then handled.
    /// Past the first `SHORT_WORDS` words, `memchr` finds the next quote or
    /// backslash and one branch-free pass checks the bytes before it for
    /// control bytes (both vectorised, where words cost a branch each).
    /// Inlined: a chunk has a dozen short strings (mostly keys), and the
    /// call itself cost a fifth of each.
    #[inline(always)]
    fn string(&mut self) -> Option<(&'a str, bool)> {
        // The cursor is kept in a local and stored back where `self` is
        // needed (or the string ends), not read and written at every step.
        let bytes = self.bytes;
        let start = self.at;
        let mut at = start + 1;
        let mut escaped = false;
        loop {
            let mut words = 0;
            while let Some(word) = bytes.get(at..at + 8) {
                let word: [u8; 8] = word.try_into().ok()?;
                let flags = special(u64::from_le_bytes(word));
                if flags != 0 {
                    at += (flags.trailing_zeros() / 8) as usize;
                    break;
                }
                at += 8;
                words += 1;
                if words == SHORT_WORDS {
                    self.at = at;
                    self.long_run()?;
                    at = self.at;
                    break;
                }
            }
            match *bytes.get(at)? {
                b'"' => {
                    at += 1;
                    self.at = at;
                    return Some((self.text.get(start..at)?, escaped));
                }
                b'\\' => {
                    escaped = true;
                    self.at = at;
                    self.escape()?;
                    at = self.at;
                }
                0..=0x1f => return None, // serde rejects raw control characters
                _ => at += 1,
            }
        }
    }

    /// The rest of a long run inside a string: on to its next quote or
    /// backslash; `None` at a control byte or the end of the input. Kept
    /// out of line so that short strings pay nothing for it.
    #[inline(never)]
    fn long_run(&mut self) -> Option<()> {
        let rest = self.bytes.get(self.at..)?;
        let n = memchr::memchr2(b'"', b'\\', rest)?;
        if has_control(rest.get(..n)?) {
            return None; // serde rejects raw control characters
        }
        self.at += n;
        Some(())
    }

    /// One escape at the cursor (on the backslash). `\u` surrogates give
    /// up: whether serde accepts them depends on their pairing.
    fn escape(&mut self) -> Option<()> {
        match self.bytes.get(self.at + 1)? {
            b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => self.at += 2,
            b'u' => {
                let hex = self.bytes.get(self.at + 2..self.at + 6)?;
                let mut code = 0u32;
                for &h in hex {
                    code = code * 16 + char::from(h).to_digit(16)?;
                }
                if (0xD800..0xE000).contains(&code) {
                    return None;
                }
                self.at += 6;
            }
            _ => return None,
        }
        Some(())
    }
}

/// The JSON string literal (quotes included) `data` starts with, checked
/// as the scan checks strings: valid escapes (a `\u` surrogate gives up),
/// no raw control byte, UTF-8. `None` when `data` does not start with a
/// whole, valid one.
pub(crate) fn string_literal(data: &[u8]) -> Option<&str> {
    if *data.first()? != b'"' {
        return None;
    }
    let mut at = 1;
    loop {
        at += memchr::memchr2(b'"', b'\\', data.get(at..)?)?;
        if data[at] == b'"' {
            break;
        }
        let mut escape = Scan {
            bytes: data,
            text: "",
            at,
        };
        escape.escape()?;
        at = escape.at;
    }
    let literal = &data[..=at];
    if has_control(literal) {
        return None; // serde rejects raw control characters
    }
    std::str::from_utf8(literal).ok()
}

/// Whether any byte is below 0x20: a minimum with no early exit, so it
/// vectorises (one unsigned-minimum instruction per vector).
fn has_control(bytes: &[u8]) -> bool {
    bytes.iter().fold(u8::MAX, |least, &b| least.min(b)) < 0x20
}

/// The high bit of each byte of `word` that is `"`, `\\` or below 0x20,
/// by the classic "has a zero byte" test. Bits above the lowest may be
/// false (borrows run upward); the lowest is exact, and none means none.
fn special(word: u64) -> u64 {
    const ONES: u64 = u64::from_le_bytes([1; 8]);
    const HIGH: u64 = u64::from_le_bytes([0x80; 8]);
    let zero = |v: u64| v.wrapping_sub(ONES) & !v & HIGH;
    let quote = zero(word ^ (ONES * u64::from(b'"')));
    let backslash = zero(word ^ (ONES * u64::from(b'\\')));
    let control = word.wrapping_sub(ONES * 0x20) & !word & HIGH;
    quote | backslash | control
}

/// A set of field names seen in one object, to give up on duplicates
/// (serde rejects a repeated struct field).
#[derive(Default)]
pub(crate) struct Seen(u32);

impl Seen {
    /// Mark field number `bit`; `None` when it was already there.
    pub(crate) fn first(&mut self, bit: u32) -> Option<()> {
        let mask = 1 << bit;
        if self.0 & mask != 0 {
            return None;
        }
        self.0 |= mask;
        Some(())
    }
}

/// Helpers for the adapters' scan-versus-serde tests.
#[cfg(test)]
pub(crate) mod differential {
    use crate::framing::Decoder;
    use crate::framing::Frame;
    use crate::framing::sse::SseDecoder;
    use crate::providers::tests::FIXTURES;
    use crate::providers::{AdapterError, Event, FrameAdapter, ProviderKind};

    /// The `data` of every SSE event of the recorded fixtures of `kinds`.
    pub(in crate::providers) fn fixture_payloads(kinds: &[ProviderKind]) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        for f in FIXTURES.iter().filter(|f| kinds.contains(&f.kind)) {
            if !f.name.ends_with(".sse") {
                continue;
            }
            let mut dec = SseDecoder::new(1 << 20);
            let mut on = |frame: Frame<'_>| {
                if let Frame::Sse { data, .. } = frame {
                    out.push(data.to_vec());
                }
            };
            dec.feed(f.body, &mut on).expect("fixture frames");
            dec.finish(&mut on).expect("fixture frames");
        }
        out
    }

    /// The whole JSON bodies (`.json` fixtures) of `kinds`.
    pub(in crate::providers) fn fixture_bodies(kinds: &[ProviderKind]) -> Vec<&'static [u8]> {
        FIXTURES
            .iter()
            .filter(|f| kinds.contains(&f.kind) && f.name.ends_with(".json"))
            .map(|f| f.body)
            .collect()
    }

    /// Run `on_frame` on a whole JSON body, logging the events.
    pub(in crate::providers) fn json_outcome(
        on_frame: impl FnOnce(Frame<'_>, &mut dyn FnMut(Event<'_>)) -> Result<(), AdapterError>,
        body: &[u8],
    ) -> Outcome {
        let mut log = Vec::new();
        let result = on_frame(Frame::Json(body), &mut |e| log.push(format!("{e:?}")));
        (log, result)
    }

    /// Bytes that matter to a JSON scanner, for mutations.
    const SPECIAL: &[u8] = b"\"\\{}[],: n0-.e1tu\x01\x7f/\xc3";

    /// `data` cut at every offset, and `n` random edits of it (a byte
    /// replaced, inserted or removed; seeded, so failures repeat).
    pub(crate) fn mutations(data: &[u8], seed: u64, n: usize) -> Vec<Vec<u8>> {
        let mut out: Vec<Vec<u8>> = (0..data.len()).map(|i| data[..i].to_vec()).collect();
        let mut rng = fastrand::Rng::with_seed(seed);
        out.extend((0..n).map(|_| edited(data, SPECIAL, 2, &mut rng)));
        out
    }

    /// `data` with one to `max` bytes replaced by, or inserted from,
    /// `special`, or removed, at random.
    pub(crate) fn edited(
        data: &[u8],
        special: &[u8],
        max: usize,
        rng: &mut fastrand::Rng,
    ) -> Vec<u8> {
        let mut m = data.to_vec();
        for _ in 0..rng.usize(1..=max) {
            let at = rng.usize(0..=m.len());
            let byte = special[rng.usize(0..special.len())];
            match rng.u8(0..3) {
                0 if at < m.len() => m[at] = byte,
                1 if at < m.len() => {
                    m.remove(at);
                }
                _ => m.insert(at, byte),
            }
        }
        m
    }

    /// `payloads`, then `shapes`, each cut at every offset and edited 200
    /// ways (seeded by its place): `agree` asserts that the scan reads
    /// every one as serde does.
    pub(in crate::providers) fn each_mutation(
        payloads: &[Vec<u8>],
        shapes: &[&str],
        agree: impl Fn(&[u8]),
    ) {
        let inputs = payloads
            .iter()
            .map(Vec::as_slice)
            .chain(shapes.iter().map(|s| s.as_bytes()));
        for (i, data) in inputs.enumerate() {
            for m in mutations(data, i as u64, 200) {
                agree(&m);
            }
        }
    }

    /// SSE `payloads` fed in order to an adapter that scans (`with`) and
    /// to one that does not: the same events and results, as one sequence
    /// (model and id once per stream, whichever path read them).
    #[track_caller]
    pub(in crate::providers) fn assert_same_sequence(
        with: &mut dyn FrameAdapter,
        without: &mut dyn FrameAdapter,
        payloads: &[Vec<u8>],
    ) {
        let (a, b): (Vec<Outcome>, Vec<Outcome>) = payloads
            .iter()
            .map(|d| {
                (
                    outcome(|f, out| with.on_frame(f, out), d),
                    outcome(|f, out| without.on_frame(f, out), d),
                )
            })
            .unzip();
        assert_eq!(a, b, "the whole sequence of fixture payloads");
    }

    /// Events (as text) and the result of one adapter call.
    pub(in crate::providers) type Outcome = (Vec<String>, Result<(), AdapterError>);

    /// Run `on_frame` on an SSE frame carrying `data`, logging the events.
    pub(in crate::providers) fn outcome(
        on_frame: impl FnOnce(Frame<'_>, &mut dyn FnMut(Event<'_>)) -> Result<(), AdapterError>,
        data: &[u8],
    ) -> Outcome {
        let mut log = Vec::new();
        let result = on_frame(Frame::Sse { event: b"", data }, &mut |e| {
            log.push(format!("{e:?}"))
        });
        (log, result)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn skip_all(data: &str) -> Option<()> {
        let mut s = Scan::new(data.as_bytes())?;
        s.skip(0)?;
        s.end()
    }

    #[test]
    fn accepts_what_json_allows() {
        for ok in [
            r#"{}"#,
            r#" { "a" : [ 1 , -0.5e+3 , true , false , null , "x\"\\\/\b\f\n\r\t\u00e9" , {} , [] ] } "#,
            r#"{"a":{"b":{"c":[0,1E9,-12.25]}}}"#,
            "\"caf\u{e9} \u{2014}\"",
        ] {
            assert_eq!(skip_all(ok), Some(()), "{ok}");
            assert!(
                serde_json::from_str::<serde_json::Value>(ok).is_ok(),
                "{ok}"
            );
        }
    }

    #[test]
    fn gives_up_on_what_json_forbids_or_serde_may_read_otherwise() {
        for bad in [
            "",
            "{",
            r#"{"a":1,}"#,
            r#"{"a":01}"#,
            r#"{"a":1.}"#,
            r#"{"a":1e}"#,
            r#"{"a":-}"#,
            r#"{"a":tru}"#,
            r#"{"a":"x"} x"#,
            r#"{"a" 1}"#,
            r#"{a:1}"#,
            r#"[1 2]"#,
            "{\"a\":\"tab\there\"}",
            r#"{"a":"\x"}"#,
            r#"{"a":"\u12"}"#,
            r#"{"a":"\ud83d\ude00"}"#,
            r#"{"\u0061":1}"#,
            r#"{"a":"unterminated}"#,
            "[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]",
        ] {
            let mut s = Scan::new(bad.as_bytes()).expect("UTF-8");
            let keys = s.object(0, |s, _| s.skip(1)).and_then(|()| s.end());
            assert_eq!(keys, None, "object scan of {bad}");
            assert_eq!(skip_all(bad), None, "{bad}");
        }
        assert!(Scan::new(b"{\"a\":\"\xff\"}").is_none(), "not UTF-8");
    }

    #[test]
    fn long_strings_are_checked_like_short_ones() {
        let run = "x".repeat(90);
        for ok in [
            format!(r#"{{"a":"{run}\"{run}\n{run}\u00e9{run}","b":"{run}"}}"#),
            format!(r#"{{"a":"{run}{run}"}}"#),
            format!("{{\"a\":\"{run}caf\u{e9} {run}\"}}"),
        ] {
            assert_eq!(skip_all(&ok), Some(()), "{ok}");
            assert!(
                serde_json::from_str::<serde_json::Value>(&ok).is_ok(),
                "{ok}"
            );
        }
        for at in [0, 7, 8, 63, 64, 65, 71, 72, 100, 179] {
            let mut bad = format!(r#"{{"a":"{run}{run}"}}"#).into_bytes();
            bad[6 + at] = b'\t';
            let bad = String::from_utf8(bad).expect("UTF-8");
            assert_eq!(skip_all(&bad), None, "a tab at {at}");
            assert!(serde_json::from_str::<serde_json::Value>(&bad).is_err());
        }
        for bad in [
            format!(r#"{{"a":"{run}"#),
            format!(r#"{{"a":"{run}\"#),
            format!(r#"{{"a":"{run}\q{run}"}}"#),
        ] {
            assert_eq!(skip_all(&bad), None, "{bad}");
        }
        let mut s = Scan::new(format!(r#""{run}\"{run}""#).as_bytes())
            .expect("UTF-8")
            .string()
            .map(|(_, escaped)| escaped);
        assert_eq!(
            s.take(),
            Some(true),
            "escapes after the first words are seen"
        );
    }

    #[test]
    fn raw_values_are_what_serde_borrows() {
        let data = r#"{"a": "x\"y" ,"b":null,"c": [ 1 ],"d":{"e":"}"}}"#;
        let mut s = Scan::new(data.as_bytes()).expect("UTF-8");
        let mut got = Vec::new();
        s.object(0, |s, key| {
            got.push((key, s.raw(1)?));
            Some(())
        })
        .expect("valid");
        assert_eq!(
            got,
            [
                ("a", Some(r#""x\"y""#)),
                ("b", None),
                ("c", Some("[ 1 ]")),
                ("d", Some(r#"{"e":"}"}"#)),
            ]
        );
        #[derive(serde::Deserialize)]
        struct D<'a> {
            #[serde(borrow)]
            a: &'a serde_json::value::RawValue,
            #[serde(borrow)]
            c: &'a serde_json::value::RawValue,
            #[serde(borrow)]
            d: &'a serde_json::value::RawValue,
        }
        let d: D<'_> = serde_json::from_str(data).expect("valid");
        assert_eq!(
            [d.a.get(), d.c.get(), d.d.get()],
            [r#""x\"y""#, "[ 1 ]", r#"{"e":"}"}"#]
        );
    }

    #[test]
    fn wanted_strings_must_be_plain() {
        let mut s = Scan::new(br#""a\nb""#).expect("UTF-8");
        assert_eq!(s.str_or_null(), None, "escaped");
        let mut s = Scan::new(br#" null"#).expect("UTF-8");
        assert_eq!(s.str_or_null(), Some(None));
        let mut s = Scan::new(br#"3"#).expect("UTF-8");
        assert_eq!(s.str_or_null(), None, "not a string");
    }

    #[test]
    fn string_literals_are_measured_as_the_scan_reads_them() {
        for (data, want) in [
            (&br#""abc","x""#[..], Some(5)),
            (&br#""""#[..], Some(2)),
            (&br#""a\"b"}"#[..], Some(6)),
            (&br#""\u00e9\n"rest"#[..], Some(10)),
            (&br#""\ud800""#[..], None),
            (&br#""\x""#[..], None),
            (&b"\"a\x01\""[..], None),
            (&b"\"\xc3\""[..], None),
            (&br#""open"#[..], None),
            (&br#"x"a""#[..], None),
            (&b""[..], None),
        ] {
            assert_eq!(
                string_literal(data).map(str::len),
                want,
                "{}",
                String::from_utf8_lossy(data)
            );
            if let Some(n) = want {
                let mut s = Scan::new(&data[..n]).expect("UTF-8");
                assert!(s.value(0).is_some() && s.end().is_some(), "the scan agrees");
            }
        }
    }

    #[test]
    fn word_flags_find_the_first_special_byte() {
        let is_special = |b: u8| b == b'"' || b == b'\\' || b < 0x20;
        let mut rng = fastrand::Rng::with_seed(3);
        let pool = b"ab\"\\\x00\x1f \x7f\x80\xc3\xff!#[]";
        for _ in 0..20_000 {
            let word: [u8; 8] = std::array::from_fn(|_| pool[rng.usize(0..pool.len())]);
            let first = word.iter().position(|&b| is_special(b));
            let flags = special(u64::from_le_bytes(word));
            let got = (flags != 0).then(|| (flags.trailing_zeros() / 8) as usize);
            assert_eq!(got, first, "{word:?}");
        }
    }

    #[test]
    fn duplicates_are_caught() {
        let mut seen = Seen::default();
        assert_eq!(seen.first(3), Some(()));
        assert_eq!(seen.first(4), Some(()));
        assert_eq!(seen.first(3), None);
    }
}
