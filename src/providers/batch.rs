//! Batch result files: one JSONL line of an OpenAI Batch output file or of
//! Anthropic Message Batches results in; its outcome, model and usage,
//! folded into per-model totals, out.
//!
//! A line wraps a whole response of the provider's ordinary API (OpenAI
//! `response.body`, Anthropic `result.message`), so its usage is read by
//! that API's own adapter: the same normalisation as a live request.

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::framing::Decoder;
use crate::framing::ndjson::NdjsonDecoder;

use super::anthropic::AnthropicAdapter;
use super::openai::OpenaiAdapter;
use super::{Event, FrameAdapter, Usage};
use crate::framing::Frame;

/// Most models kept apart per file; the rest are summed under `other`.
pub const MAX_MODELS: usize = 16;

/// The model name totals beyond `MAX_MODELS` are kept under.
pub const OTHER_MODEL: &str = "other";

/// What one batch result line said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineResult {
    /// A response with usage (OpenAI status 2xx, Anthropic `succeeded`).
    Succeeded,
    /// The request failed (OpenAI `error` or a non-2xx status, Anthropic
    /// `errored`).
    Errored,
    /// Anthropic `canceled`.
    Canceled,
    /// Anthropic `expired` (OpenAI reports expiry in the error file).
    Expired,
}

/// A file's totals so far.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BatchTally {
    /// Lines read as batch results.
    pub lines: u64,
    /// Lines by result: succeeded, errored, canceled, expired.
    pub succeeded: u64,
    /// See `succeeded`.
    pub errored: u64,
    /// See `succeeded`.
    pub canceled: u64,
    /// See `succeeded`.
    pub expired: u64,
    /// Lines that were not batch results (skipped, counted).
    pub unreadable: u64,
    /// Lines over the line cap (skipped, counted).
    pub oversize: u64,
    /// Usage per model, in order of first appearance; at most
    /// `MAX_MODELS` names, then `OTHER_MODEL`.
    pub models: Vec<(String, Usage)>,
}

/// Whether a downloaded file holds batch results, as far as read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    /// Nothing but whitespace read yet.
    Undecided,
    /// The file opens a JSON object; its first line is not complete yet.
    Opened,
    /// The first line was a batch result line: every line is read.
    Results,
    /// Anything else (an uploaded input file, a PDF, binary): nothing more
    /// is read.
    Other,
}

/// A downloaded file read on the side: body chunks in, a `BatchTally` out
/// when the file holds batch results. The first byte that is not
/// whitespace must open a JSON object and the first line must be a batch
/// result line, else the file is left alone; a line over the cap is
/// counted (`BatchTally::oversize`) and skipped, never an error.
#[derive(Debug)]
pub struct BatchFile {
    lines: NdjsonDecoder,
    tally: BatchTally,
    verdict: Verdict,
}

impl BatchFile {
    /// A reader holding at most `max_line` bytes of a line.
    pub fn new(max_line: usize) -> BatchFile {
        BatchFile {
            lines: NdjsonDecoder::skipping_oversize(max_line),
            tally: BatchTally::default(),
            verdict: Verdict::Undecided,
        }
    }

    /// Read one chunk of the file.
    pub fn feed(&mut self, chunk: &[u8]) {
        if self.verdict == Verdict::Undecided {
            match chunk.iter().find(|b| !b.is_ascii_whitespace()) {
                None => return,
                Some(b'{') => self.verdict = Verdict::Opened,
                Some(_) => {
                    self.verdict = Verdict::Other;
                    return;
                }
            }
        }
        if self.verdict == Verdict::Other {
            return;
        }
        let (tally, verdict) = (&mut self.tally, &mut self.verdict);
        // A skipping decoder returns no error for an oversized line; any
        // other framing error cannot happen on NDJSON, and would only stop
        // the count.
        let _ = self
            .lines
            .feed(chunk, &mut |f| read_line(tally, verdict, f));
        self.tally.oversize = self.lines.skipped();
    }

    /// The file ended: read a last line without a line end.
    pub fn finish(&mut self) {
        if self.verdict == Verdict::Other {
            return;
        }
        let (tally, verdict) = (&mut self.tally, &mut self.verdict);
        let _ = self.lines.finish(&mut |f| read_line(tally, verdict, f));
        self.tally.oversize = self.lines.skipped();
    }

    /// Whether the file is known not to hold batch results.
    pub fn is_other(&self) -> bool {
        self.verdict == Verdict::Other
    }

    /// The totals, when the file held batch results.
    pub fn tally(&self) -> Option<&BatchTally> {
        (self.verdict == Verdict::Results).then_some(&self.tally)
    }
}

fn read_line(tally: &mut BatchTally, verdict: &mut Verdict, frame: Frame<'_>) {
    let Frame::Json(line) = frame else { return };
    match verdict {
        Verdict::Other => {}
        Verdict::Results => {
            tally.line(line);
        }
        Verdict::Undecided | Verdict::Opened => {
            let mut first = BatchTally::default();
            *verdict = if first.line(line) {
                *tally = first;
                Verdict::Results
            } else {
                Verdict::Other
            };
        }
    }
}

#[derive(Deserialize)]
struct OpenaiLine<'a> {
    #[serde(borrow, default)]
    response: Option<OpenaiResponse<'a>>,
    #[serde(borrow, default)]
    error: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct OpenaiResponse<'a> {
    #[serde(default)]
    status_code: Option<u16>,
    #[serde(borrow, default)]
    body: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct AnthropicLine<'a> {
    #[serde(borrow)]
    result: AnthropicResult<'a>,
}

#[derive(Deserialize)]
struct AnthropicResult<'a> {
    #[serde(rename = "type", borrow)]
    kind: std::borrow::Cow<'a, str>,
    #[serde(borrow, default)]
    message: Option<&'a RawValue>,
}

impl BatchTally {
    /// Fold one line (without its line end); `false` when it is not a
    /// batch result line of either provider (counted as unreadable).
    pub fn line(&mut self, line: &[u8]) -> bool {
        let read = match serde_json::from_slice::<AnthropicLine<'_>>(line) {
            Ok(l) => self.anthropic(&l),
            Err(_) => match serde_json::from_slice::<OpenaiLine<'_>>(line) {
                Ok(l) if l.response.is_some() || l.error.is_some() => {
                    self.openai(&l);
                    true
                }
                _ => false,
            },
        };
        if read {
            self.lines += 1;
        } else {
            self.unreadable += 1;
        }
        read
    }

    /// Total usage over every model.
    pub fn total(&self) -> Usage {
        let mut total = Usage::default();
        for (_, u) in &self.models {
            add(&mut total, u);
        }
        total
    }

    fn openai(&mut self, l: &OpenaiLine<'_>) {
        let ok = l.error.is_none_or(|e| e.get() == "null")
            && l.response
                .as_ref()
                .is_some_and(|r| r.status_code.is_none_or(|s| (200..300).contains(&s)));
        if !ok {
            self.count(LineResult::Errored);
            return;
        }
        self.count(LineResult::Succeeded);
        if let Some(body) = l.response.as_ref().and_then(|r| r.body) {
            self.fold(&mut OpenaiAdapter::new(None), body);
        }
    }

    fn anthropic(&mut self, l: &AnthropicLine<'_>) -> bool {
        let result = match l.result.kind.as_ref() {
            "succeeded" => LineResult::Succeeded,
            "errored" => LineResult::Errored,
            "canceled" => LineResult::Canceled,
            "expired" => LineResult::Expired,
            _ => return false,
        };
        self.count(result);
        if let (LineResult::Succeeded, Some(message)) = (result, l.result.message) {
            self.fold(&mut AnthropicAdapter::new(), message);
        }
        true
    }

    fn count(&mut self, result: LineResult) {
        let n = match result {
            LineResult::Succeeded => &mut self.succeeded,
            LineResult::Errored => &mut self.errored,
            LineResult::Canceled => &mut self.canceled,
            LineResult::Expired => &mut self.expired,
        };
        *n += 1;
    }

    /// Read one whole response body with its API's adapter and add its
    /// usage under its model.
    fn fold(&mut self, adapter: &mut dyn FrameAdapter, body: &RawValue) {
        let (mut model, mut usage) = (None, Usage::default());
        let _ = adapter.on_frame(Frame::Json(body.get().as_bytes()), &mut |ev| match ev {
            Event::Model(m) => model = Some(m.to_owned()),
            Event::Usage(u) => usage.merge(u),
            _ => {}
        });
        if usage.input.is_none() && usage.output.is_none() {
            return;
        }
        let model = model.unwrap_or_default();
        let at = match self.models.iter().position(|(m, _)| *m == model) {
            Some(at) => at,
            None if self.models.len() < MAX_MODELS => {
                self.models.push((model, Usage::default()));
                self.models.len() - 1
            }
            None => match self.models.iter().position(|(m, _)| m == OTHER_MODEL) {
                Some(at) => at,
                None => {
                    self.models.push((OTHER_MODEL.to_owned(), Usage::default()));
                    self.models.len() - 1
                }
            },
        };
        add(&mut self.models[at].1, &usage);
    }
}

/// Add `b`'s token counts to `a` (a field stays `None` until one reports it).
fn add(a: &mut Usage, b: &Usage) {
    let sum = |x: Option<u64>, y: Option<u64>| match (x, y) {
        (None, None) => None,
        (x, y) => Some(x.unwrap_or(0).saturating_add(y.unwrap_or(0))),
    };
    a.input = sum(a.input, b.input);
    a.output = sum(a.output, b.output);
    a.cache_read = sum(a.cache_read, b.cache_read);
    a.cache_creation = sum(a.cache_creation, b.cache_creation);
    a.reasoning = sum(a.reasoning, b.reasoning);
    a.cache_write_5m = sum(a.cache_write_5m, b.cache_write_5m);
    a.cache_write_1h = sum(a.cache_write_1h, b.cache_write_1h);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tally(file: &[u8]) -> BatchTally {
        let mut t = BatchTally::default();
        for line in file.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            t.line(line);
        }
        t
    }

    /// (model, input, output) per model, in the tally's order.
    fn per_model(t: &BatchTally) -> Vec<(&str, Option<u64>, Option<u64>)> {
        t.models
            .iter()
            .map(|(m, u)| (m.as_str(), u.input, u.output))
            .collect()
    }

    #[test]
    fn openai_batch_output_is_counted_per_model() {
        let t = tally(include_bytes!(
            "../../tests/fixtures/openai/batch_output.jsonl"
        ));
        assert_eq!((t.lines, t.succeeded, t.errored), (4, 3, 1));
        let per_model = per_model(&t);
        assert_eq!(
            per_model,
            [
                ("gpt-4o-mini-2024-07-18", Some(46), Some(17)),
                ("gpt-4.1-2025-04-14", Some(31), Some(12)),
            ],
            "two chat lines of one model, one of another; the error line has none"
        );
        assert_eq!(t.total().input, Some(77));
    }

    #[test]
    fn anthropic_batch_results_are_counted_per_model_and_result() {
        let t = tally(include_bytes!(
            "../../tests/fixtures/anthropic/batch_results.jsonl"
        ));
        assert_eq!(
            (t.lines, t.succeeded, t.errored, t.canceled, t.expired),
            (5, 2, 1, 1, 1)
        );
        let per_model = per_model(&t);
        assert_eq!(
            per_model,
            [
                ("claude-sonnet-4-5-20250929", Some(12), Some(48)),
                ("claude-haiku-4-5-20251001", Some(15), Some(9)),
            ]
        );
    }

    fn read_split(file: &[u8], at: usize, max_line: usize) -> BatchFile {
        let mut f = BatchFile::new(max_line);
        f.feed(&file[..at]);
        f.feed(&file[at..]);
        f.finish();
        f
    }

    #[test]
    fn a_results_file_reads_the_same_at_every_split() {
        for file in [
            &include_bytes!("../../tests/fixtures/openai/batch_output.jsonl")[..],
            &include_bytes!("../../tests/fixtures/anthropic/batch_results.jsonl")[..],
        ] {
            let whole = tally(file);
            for at in 0..=file.len() {
                let f = read_split(file, at, 1 << 16);
                assert_eq!(f.tally(), Some(&whole), "split at {at}");
            }
        }
    }

    #[test]
    fn other_files_are_left_alone_at_every_split() {
        let input: &[u8] = b"{\"custom_id\":\"r1\",\"method\":\"POST\",\"url\":\"/v1/chat/completions\",\"body\":{\"model\":\"m\"}}\n";
        let pdf: &[u8] = b"%PDF-1.7\n{\"result\":{\"type\":\"succeeded\"}}\n";
        for file in [input, pdf] {
            for at in 0..=file.len() {
                let f = read_split(file, at, 1 << 16);
                assert!(f.is_other() && f.tally().is_none(), "split at {at}");
            }
        }
    }

    #[test]
    fn an_oversized_line_is_counted_and_skipped() {
        let file = include_bytes!("../../tests/fixtures/openai/batch_output.jsonl");
        let longest = file
            .split(|b| *b == b'\n')
            .map(<[u8]>::len)
            .max()
            .unwrap_or(0);
        let shortest = file
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .map(<[u8]>::len)
            .min()
            .unwrap_or(0);
        let f = read_split(file, 7, longest - 1);
        let t = f.tally().expect("the first line fits: read as results");
        assert!(t.oversize >= 1, "the longest line is skipped: {t:?}");
        assert_eq!(t.lines + t.oversize, 4, "every line read or skipped");
        assert!(shortest < longest);
    }

    #[test]
    fn other_lines_are_unreadable_and_models_are_capped() {
        let mut t = BatchTally::default();
        assert!(!t.line(b"%PDF-1.7"), "not JSON");
        assert!(
            !t.line(br#"{"custom_id":"x","method":"POST","url":"/v1/chat/completions","body":{}}"#),
            "an input line"
        );
        assert_eq!((t.lines, t.unreadable), (0, 2));
        for i in 0..MAX_MODELS + 3 {
            let line = format!(
                r#"{{"id":"r","custom_id":"c","response":{{"status_code":200,"request_id":"q","body":{{"id":"c","object":"chat.completion","model":"m{i}","choices":[],"usage":{{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}}}}},"error":null}}"#
            );
            assert!(t.line(line.as_bytes()));
        }
        assert_eq!(t.models.len(), MAX_MODELS + 1, "capped, plus other");
        let other = t.models.last().expect("other");
        assert_eq!((other.0.as_str(), other.1.input), (OTHER_MODEL, Some(3)));
    }
}
