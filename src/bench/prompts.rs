//! Prompt sets: an input length (built-in) or a JSONL file in; one chat
//! prompt per request out, with its input tokens counted by the o200k
//! tokenizer. Built-in prompts start with the request's own number, so a
//! server's prefix cache cannot answer one prompt from another.

use std::path::Path;

use anyhow::Context as _;
use tiktoken_rs::{CoreBPE, Rank, o200k_base_singleton};

/// One request's prompt.
#[derive(Debug, Clone, PartialEq)]
pub struct Prompt {
    /// Chat messages (`[{"role":"user","content":…}]`).
    pub messages: serde_json::Value,
    /// Input tokens by the o200k tokenizer (the server's own count, with
    /// its chat template, is in the measurement).
    pub tokens: u64,
}

impl Prompt {
    /// A one-message prompt of `tokens` tokens.
    pub fn text(text: &str, tokens: u64) -> Prompt {
        Prompt {
            messages: serde_json::json!([{"role": "user", "content": text}]),
            tokens,
        }
    }
}

/// The prompts of one benchmark level.
#[derive(Debug, Clone)]
pub struct PromptSet {
    /// `builtin-128`, or the file name.
    pub name: String,
    /// Input tokens asked for (built-in sets).
    pub input_tokens: Option<usize>,
    source: Source,
}

#[derive(Debug, Clone)]
enum Source {
    /// Token ids of the built-in text, cut per request.
    Builtin { body: Vec<Rank> },
    /// The file's prompts, used in turn.
    File(Vec<Prompt>),
}

/// The built-in text: plain prose on varied subjects, repeated as needed.
const CORPUS: &str = "The harbour town woke before the sun. Fishing boats slipped out past the breakwater while \
the bakery on the corner pulled its first trays of rye bread from the oven. Engineers measuring a \
distributed system learn to distrust averages: a mean latency hides the slow tail that users remember. \
In 1854 John Snow traced a cholera outbreak to a single water pump on Broad Street by plotting cases on \
a map, an early triumph of data over theory. Photosynthesis converts light, water and carbon dioxide \
into sugar and oxygen; the reaction centres of chlorophyll capture photons within femtoseconds. A good \
recipe for tomato soup needs ripe tomatoes, an onion, garlic, olive oil, a pinch of sugar and patience. \
The committee reviewed the quarterly budget, noting that travel costs had doubled while training spend \
fell by a third, and asked each department for a revised forecast by Friday. Rust's ownership model \
lets the compiler prove that no two threads write the same memory at once, without a garbage collector. \
Glaciers carve U-shaped valleys; rivers cut V-shaped ones. Chess openings such as the Sicilian Defence \
trade central control for counter-attacking chances on the queen's side. When the orchestra tuned, the \
oboe gave the A, and the strings followed, section by section, until the hall settled into silence. ";

/// Instruction before the built-in text.
const ASK: &str =
    "Summarise the following notes in a few sentences, then list three questions they raise.\n\n";

/// Prompts a JSONL file may hold.
const MAX_FILE_PROMPTS: usize = 100_000;

impl PromptSet {
    /// The built-in set of `tokens` input tokens per prompt.
    pub fn builtin(tokens: usize) -> anyhow::Result<PromptSet> {
        let bpe = o200k_base_singleton();
        let once = bpe.encode_ordinary(CORPUS);
        let mut body = Vec::with_capacity(tokens + once.len());
        while body.len() < tokens {
            body.extend_from_slice(&once);
        }
        body.truncate(tokens);
        Ok(PromptSet {
            name: format!("builtin-{tokens}"),
            input_tokens: Some(tokens),
            source: Source::Builtin { body },
        })
    }

    /// The prompts of a JSONL file: one `{"prompt": "…"}` or
    /// `{"messages": […]}` object per line (blank lines skipped).
    pub fn from_jsonl(path: &Path) -> anyhow::Result<PromptSet> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("--prompts {}: cannot read", path.display()))?;
        let bpe = o200k_base_singleton();
        let mut prompts = Vec::new();
        for (n, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let at = || format!("--prompts {} line {}", path.display(), n + 1);
            let v: serde_json::Value =
                serde_json::from_str(line).with_context(|| format!("{}: not JSON", at()))?;
            let prompt = if let Some(p) = v.get("prompt").and_then(|p| p.as_str()) {
                Prompt::text(p, count(bpe, p))
            } else if let Some(m) = v.get("messages").filter(|m| m.is_array()) {
                let tokens = m
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|msg| msg.get("content").and_then(|c| c.as_str()))
                    .map(|c| count(bpe, c))
                    .sum();
                Prompt {
                    messages: m.clone(),
                    tokens,
                }
            } else {
                anyhow::bail!(
                    "{}: needs a \"prompt\" string or a \"messages\" array",
                    at()
                );
            };
            prompts.push(prompt);
            anyhow::ensure!(
                prompts.len() <= MAX_FILE_PROMPTS,
                "--prompts {}: more than {MAX_FILE_PROMPTS} prompts",
                path.display()
            );
        }
        anyhow::ensure!(
            !prompts.is_empty(),
            "--prompts {}: no prompts in the file",
            path.display()
        );
        let name = path.file_name().map_or_else(
            || path.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        Ok(PromptSet {
            name: format!("file:{name}"),
            input_tokens: None,
            source: Source::File(prompts),
        })
    }

    /// The prompt of request number `n` (numbers are unique within a run).
    pub fn prompt(&self, n: u64) -> Prompt {
        match &self.source {
            Source::File(prompts) => prompts[(n % prompts.len() as u64) as usize].clone(),
            Source::Builtin { body } => {
                let bpe = o200k_base_singleton();
                let mut head = bpe.encode_ordinary(&format!("Request {n}. {ASK}"));
                if head.len() > body.len() / 2 {
                    // A short prompt keeps only its number before the notes.
                    head = bpe.encode_ordinary(&format!("{n}. "));
                }
                let keep = body.len().saturating_sub(head.len());
                let mut ids = head;
                // Start the notes at a point that moves with `n`.
                let start = (n as usize * 37) % body.len().max(1);
                ids.extend(body.iter().cycle().skip(start).take(keep));
                let text = String::from_utf8_lossy(&bpe.decode_bytes(&ids).unwrap_or_default())
                    .into_owned();
                let tokens = count(bpe, &text);
                Prompt::text(&text, tokens)
            }
        }
    }

    /// Mean input tokens of the set's prompts (by the o200k tokenizer).
    pub fn mean_tokens(&self) -> f64 {
        match &self.source {
            Source::Builtin { body } => body.len() as f64,
            Source::File(p) => p.iter().map(|p| p.tokens as f64).sum::<f64>() / p.len() as f64,
        }
    }
}

fn count(bpe: &CoreBPE, text: &str) -> u64 {
    bpe.encode_ordinary(text).len() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_prompts_have_the_asked_length_and_differ_per_request() {
        for want in [16usize, 128, 1024] {
            let set = PromptSet::builtin(want).expect("set");
            assert_eq!(set.name, format!("builtin-{want}"));
            let (a, b) = (set.prompt(1), set.prompt(2));
            assert_ne!(a.messages, b.messages, "each request has its own prompt");
            for p in [a, b] {
                let diff = p.tokens.abs_diff(want as u64);
                assert!(
                    diff <= 2 + want as u64 / 100,
                    "{want} tokens asked, prompt has {}",
                    p.tokens
                );
            }
        }
    }

    #[test]
    fn jsonl_prompts_are_read_with_errors_naming_the_line() {
        let dir =
            std::env::temp_dir().join(format!("tokentap-bench-prompts-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let good = dir.join("good.jsonl");
        std::fs::write(
            &good,
            "{\"prompt\":\"hello world\"}\n\n{\"messages\":[{\"role\":\"user\",\"content\":\"hi there\"}]}\n",
        )
        .expect("write");
        let set = PromptSet::from_jsonl(&good).expect("set");
        assert_eq!(set.name, "file:good.jsonl");
        assert_eq!(set.prompt(0).tokens, 2);
        assert_eq!(set.prompt(1).messages[0]["content"], "hi there");
        assert_eq!(set.prompt(2), set.prompt(0), "used in turn");
        let bad = dir.join("bad.jsonl");
        std::fs::write(&bad, "{\"prompt\":\"ok\"}\n{\"text\":1}\n").expect("write");
        let err = format!("{:#}", PromptSet::from_jsonl(&bad).expect_err("bad"));
        assert!(
            err.contains("line 2") && err.contains("\"prompt\""),
            "{err}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
