//! Token counting when the provider reports no usage: a finished
//! `Measurement` plus the output text the adapters saw (and the request body)
//! in; the same measurement with tokenizer counts out, recorded from a
//! background thread so the forwarding path never pays for a BPE.
//!
//! Only model families whose tokenizer ships offline in a well-kept crate
//! are counted (OpenAI's o200k/cl100k encodings via `tiktoken-rs`); others
//! keep the content-chunk estimate.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{SyncSender, TrySendError, channel, sync_channel};
use std::time::Duration;

use bytes::Bytes;
use serde::Deserialize;
use tiktoken_rs::tokenizer::{Tokenizer as Encoding, get_tokenizer};

use super::{Measurement, Recorder, TokenSource, cut_at_char};

/// Most text tokenized per request and side; beyond it bytes/4 is assumed.
pub const MAX_BYTES: usize = 1 << 20;

/// Jobs waiting for the tokenizer thread; a full queue falls back to chunks.
const QUEUE: usize = 1024;

/// The process's tokenizer worker.
#[derive(Debug)]
pub struct Tokenizer {
    tx: Option<SyncSender<Msg>>,
    /// Requests recorded with the chunk estimate because the queue was full.
    overflow: AtomicU64,
}

/// What one request needs to be counted later.
#[derive(Debug)]
pub struct Plan {
    tokenizer: Arc<Tokenizer>,
    encoding: Encoding,
    /// The request body, for input tokens (chat and legacy completions).
    request: Option<Bytes>,
}

enum Msg {
    Job(Box<Job>),
    /// Answer once every job queued before it is recorded.
    Flush(std::sync::mpsc::Sender<()>),
}

struct Job {
    measurement: Measurement,
    recorder: Box<dyn Recorder>,
    encoding: Encoding,
    /// Output text as a JSON array of string literals (`["a","b"`, unclosed).
    text: Vec<u8>,
    /// Content pieces that carried no plain text (tool calls): one token each.
    untexted: u64,
    request: Option<Bytes>,
}

impl Tokenizer {
    /// Start the worker thread (or a disabled tokenizer when `enabled` is false).
    pub fn start(enabled: bool) -> Arc<Tokenizer> {
        let tx = enabled.then(|| {
            let (tx, rx) = sync_channel::<Msg>(QUEUE);
            let spawned = std::thread::Builder::new()
                .name("tokentap-tokenizer".into())
                .spawn(move || {
                    while let Ok(msg) = rx.recv() {
                        match msg {
                            Msg::Job(job) => job.run(),
                            Msg::Flush(done) => {
                                let _ = done.send(());
                            }
                        }
                    }
                });
            spawned.ok().map(|_| tx)
        });
        Arc::new(Tokenizer {
            tx: tx.flatten(),
            overflow: AtomicU64::new(0),
        })
    }

    /// A plan for `model`, when tokens may need counting and its encoding is known.
    pub fn plan(self: &Arc<Self>, model: Option<&str>, request: Option<Bytes>) -> Option<Plan> {
        self.tx.as_ref()?;
        let encoding = get_tokenizer(model?)?;
        Some(Plan {
            tokenizer: self.clone(),
            encoding,
            request,
        })
    }

    /// Wait (blocking, at most `limit`) until every queued job is recorded;
    /// run before telemetry shuts down so no measurement is lost.
    pub fn flush(&self, limit: Duration) -> bool {
        let Some(tx) = &self.tx else { return true };
        let (done, wait) = channel();
        tx.send(Msg::Flush(done)).is_ok() && wait.recv_timeout(limit).is_ok()
    }

    /// Requests that fell back to the chunk estimate because the worker was busy.
    pub fn overflow(&self) -> u64 {
        self.overflow.load(Ordering::Relaxed)
    }
}

impl Plan {
    /// Count `measurement`'s tokens on the worker and record it there; when the
    /// worker cannot take the job, record it now as it is.
    pub fn submit(
        self,
        measurement: Measurement,
        recorder: Box<dyn Recorder>,
        text: Vec<u8>,
        untexted: u64,
    ) {
        let job = Job {
            measurement,
            recorder,
            encoding: self.encoding,
            text,
            untexted,
            request: self.request,
        };
        let Some(tx) = &self.tokenizer.tx else {
            return job.record_as_is();
        };
        match tx.try_send(Msg::Job(Box::new(job))) {
            Ok(()) => {}
            Err(TrySendError::Full(msg) | TrySendError::Disconnected(msg)) => {
                self.tokenizer.overflow.fetch_add(1, Ordering::Relaxed);
                if let Msg::Job(job) = msg {
                    job.record_as_is();
                }
            }
        }
    }
}

impl Job {
    fn record_as_is(self) {
        self.recorder.finish(self.measurement);
    }

    fn run(mut self) {
        let Ok(bpe) = tiktoken_rs::bpe_for_tokenizer(self.encoding) else {
            return self.record_as_is();
        };
        let count = |text: &str| {
            let (head, rest) = text.split_at(cut_at_char(text, MAX_BYTES).len());
            (bpe.encode_ordinary(head).len() + rest.len().div_ceil(4)) as u64
        };
        let m = &mut self.measurement;
        if m.usage.output.is_none() && m.content_chunks > 0 {
            if let Some(pieces) = output_text(&mut self.text) {
                let tokens: u64 = pieces.iter().map(|p| count(p)).sum::<u64>() + self.untexted;
                m.output_tokens = Some(tokens);
                m.token_source = Some(TokenSource::Tokenizer);
            }
        }
        if m.usage.input.is_none() {
            if let Some(input) = self
                .request
                .as_deref()
                .and_then(|b| input_tokens(b, &count))
            {
                m.usage.input = Some(input);
                m.token_source.get_or_insert(TokenSource::Tokenizer);
            }
        }
        self.record_as_is();
    }
}

/// Close the collected array and decode it (escapes resolved).
fn output_text(collected: &mut Vec<u8>) -> Option<Vec<String>> {
    if collected.last() == Some(&b',') {
        collected.pop();
    }
    collected.push(b']');
    serde_json::from_slice(collected).ok()
}

#[derive(Deserialize)]
struct Request {
    #[serde(default)]
    messages: Vec<Message>,
    #[serde(default)]
    prompt: Option<Prompt>,
}

#[derive(Deserialize)]
struct Message {
    #[serde(default)]
    content: Option<Content>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Content {
    Text(String),
    Parts(Vec<Part>),
}

#[derive(Deserialize)]
struct Part {
    #[serde(default)]
    text: Option<String>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Prompt {
    One(String),
    Many(Vec<String>),
}

/// Input tokens of a chat or legacy completions request, counted the way
/// OpenAI documents for its chat format: each message's text plus 3 tokens
/// of framing, plus 3 that prime the reply.
fn input_tokens(body: &[u8], count: &dyn Fn(&str) -> u64) -> Option<u64> {
    let req: Request = serde_json::from_slice(body).ok()?;
    if let Some(prompt) = req.prompt {
        return Some(match prompt {
            Prompt::One(p) => count(&p),
            Prompt::Many(ps) => ps.iter().map(|p| count(p)).sum(),
        });
    }
    if req.messages.is_empty() {
        return None;
    }
    let text = |m: &Message| match &m.content {
        Some(Content::Text(t)) => count(t),
        Some(Content::Parts(parts)) => parts
            .iter()
            .filter_map(|p| p.text.as_deref())
            .map(count)
            .sum(),
        None => 0,
    };
    Some(req.messages.iter().map(|m| 3 + text(m)).sum::<u64>() + 3)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bpe(model: &str) -> impl Fn(&str) -> u64 {
        let bpe = tiktoken_rs::bpe_for_model(model).expect("known model");
        move |t: &str| bpe.encode_ordinary(t).len() as u64
    }

    #[test]
    fn counts_match_the_known_encodings() {
        // Reference counts from OpenAI's tiktoken for these fixed texts.
        let o200k = bpe("gpt-4o");
        let cl100k = bpe("gpt-4");
        assert_eq!(o200k("Hello, world!"), 4);
        assert_eq!(cl100k("Hello, world!"), 4);
        assert_eq!(cl100k("tiktoken is great!"), 6);
        assert_eq!(o200k("The quick brown fox jumps over the lazy dog."), 10);
        assert_eq!(get_tokenizer("gpt-4o-mini"), Some(Encoding::O200kBase));
        assert_eq!(get_tokenizer("gpt-3.5-turbo"), Some(Encoding::Cl100kBase));
        assert_eq!(
            get_tokenizer("llama-3.1-8b"),
            None,
            "no offline tokenizer: chunks stay"
        );
    }

    #[test]
    fn collected_literals_are_unescaped_before_counting() {
        // As the meter collects them: `[` then each literal followed by `,`.
        let mut text = br#"["Hel","lo\n","\u00e9","","#.to_vec();
        let pieces = output_text(&mut text).expect("array");
        assert_eq!(pieces, ["Hel", "lo\n", "\u{e9}", ""]);
    }

    #[test]
    fn input_tokens_follow_the_chat_format() {
        let count = bpe("gpt-4o");
        let body = br#"{"model":"gpt-4o","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":[{"type":"text","text":"Hello, world!"}]}]}"#;
        let want = 3 + count("Be brief.") + 3 + count("Hello, world!") + 3;
        assert_eq!(input_tokens(body, &count), Some(want));
        assert_eq!(
            input_tokens(br#"{"prompt":"Hello, world!"}"#, &count),
            Some(4)
        );
        assert_eq!(input_tokens(b"{}", &count), None);
    }

    #[test]
    fn oversized_text_is_bounded() {
        let s = "é".repeat(MAX_BYTES);
        let cut = cut_at_char(&s, MAX_BYTES).len();
        assert!(cut <= MAX_BYTES && s.is_char_boundary(cut));
    }
}
