//! Provider harness: raw fuzzer input in, assertions about the public
//! `providers::Parser` (framing + adapter) out.
//!
//! The input's first bytes pick the provider kind, the operation (or none),
//! the response `Content-Type` and the frame cap, and where to split the
//! body; the rest is the body. Invariants:
//! - nothing panics, for any kind × operation × content type;
//! - the body fed whole, split in two, and byte by byte yields the same
//!   events in the same order, and fails or succeeds alike (which error
//!   is reported may differ: `drive` reports a framing error found later in
//!   the same chunk before an earlier adapter error, and the meter treats
//!   both as `malformed`);
//! - every `Event::Text` is a JSON string literal (the tokenizer relies on it).

use tokentap::providers::{Event, Operation, Parser, ProviderKind};

/// Bytes at the start of an input that steer this harness:
/// kind, operation, content type + cap, split point (u16 LE).
pub const CONTROL_LEN: usize = 5;

/// The frame cap unless the input asks for a small one.
pub const LARGE_CAP: usize = 1 << 16;

/// Every operation (generated with the enum, so none is missing); index
/// `OPERATIONS.len()` means "unknown operation".
pub const OPERATIONS: [Operation; Operation::ALL.len()] = Operation::ALL;

/// The response content types the parser meters (`""` = none sent).
pub const CONTENT_TYPES: [&str; 6] = [
    "text/event-stream; charset=utf-8",
    "application/json",
    "application/x-ndjson",
    "application/vnd.amazon.eventstream",
    "",
    "application/jsonl",
];

/// How an input is to be parsed, read from its control bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    pub kind: ProviderKind,
    pub operation: Option<Operation>,
    pub content_type: &'static str,
    pub max_frame: usize,
    /// Where to split the body (taken modulo its length + 1).
    pub at: usize,
}

impl Plan {
    /// Split an input into its plan and body.
    pub fn parse(input: &[u8]) -> (Plan, &[u8]) {
        let (control, body) = input.split_at(input.len().min(CONTROL_LEN));
        let byte = |i: usize| control.get(i).copied().unwrap_or(0);
        let kinds = ProviderKind::ALL;
        let ct = byte(2);
        let plan = Plan {
            kind: kinds[usize::from(byte(0)) % kinds.len()],
            operation: OPERATIONS
                .get(usize::from(byte(1)) % (OPERATIONS.len() + 1))
                .copied(),
            content_type: CONTENT_TYPES[usize::from(ct & 0x0f) % CONTENT_TYPES.len()],
            // A small cap (16..=240) when bit 7 is set, to reach the size checks.
            max_frame: if ct & 0x80 == 0 {
                LARGE_CAP
            } else {
                16 + usize::from((ct >> 4) & 7) * 32
            },
            at: usize::from(u16::from_le_bytes([byte(3), byte(4)])) % (body.len() + 1),
        };
        (plan, body)
    }

    /// The control bytes that parse back into this plan (for seeds; a cap
    /// that is not one of the small ones becomes the large one).
    pub fn encode(self) -> [u8; CONTROL_LEN] {
        let index = |found: Option<usize>| found.and_then(|i| u8::try_from(i).ok()).unwrap_or(0);
        let kind = index(ProviderKind::ALL.iter().position(|k| *k == self.kind));
        let op = match self.operation {
            None => OPERATIONS.len() as u8,
            Some(op) => index(OPERATIONS.iter().position(|o| *o == op)),
        };
        let mut ct = index(CONTENT_TYPES.iter().position(|c| *c == self.content_type));
        if self.max_frame < LARGE_CAP && self.max_frame >= 16 && (self.max_frame - 16) % 32 == 0 {
            ct |= 0x80 | ((((self.max_frame - 16) / 32) as u8 & 7) << 4);
        }
        let [lo, hi] = u16::try_from(self.at).unwrap_or(u16::MAX).to_le_bytes();
        [kind, op, ct, lo, hi]
    }
}

/// Every event rendered in order, and whether the parse failed.
pub type Outcome = (Vec<String>, bool);

/// Parse `pieces` in order with a fresh parser, then finish, stopping at
/// the first error as the meter does.
pub fn parse(plan: &Plan, pieces: &[&[u8]]) -> Outcome {
    let mut parser = Parser::new(plan.kind, plan.operation, plan.content_type, plan.max_frame)
        .unwrap_or_else(|| panic!("{plan:?}: a metered content type yields a parser"));
    let mut events = Vec::new();
    let mut on = |event: Event<'_>| {
        if let Event::Text(literal) = event {
            assert!(
                serde_json::from_str::<String>(literal).is_ok(),
                "{plan:?}: Event::Text must carry a JSON string literal, got {literal:?}"
            );
        }
        events.push(format!("{event:?}"));
    };
    for piece in pieces {
        if parser.feed(piece, &mut on).is_err() {
            return (events, true);
        }
    }
    let failed = parser.finish(&mut on).is_err();
    (events, failed)
}

/// The invariant: `body` parsed whole, split at `at`, and byte by byte
/// yields the same outcome. Returns the whole-body outcome.
pub fn check_split(plan: &Plan, body: &[u8], at: usize) -> Outcome {
    let whole = parse(plan, &[body]);
    let (a, b) = body.split_at(at.min(body.len()));
    assert_eq!(
        parse(plan, &[a, b]),
        whole,
        "{plan:?}: split at {at} differs from the whole body"
    );
    let bytes: Vec<&[u8]> = body.chunks(1).collect();
    assert_eq!(
        parse(plan, &bytes),
        whole,
        "{plan:?}: byte by byte differs from the whole body"
    );
    whole
}

/// The fuzz entry point.
pub fn fuzz_one(input: &[u8]) {
    let (plan, body) = Plan::parse(input);
    check_split(&plan, body, plan.at);
}

/// A response body from `tests/fixtures/<kind>/`, with the plan that
/// parses it: the directory names the kind (its config name), the
/// extension the content type; the operation is left unknown, as for a
/// route whose paths say nothing.
#[derive(Debug, Clone)]
pub struct Fixture {
    /// `<kind>/<file>`.
    pub name: String,
    pub plan: Plan,
    pub body: Vec<u8>,
}

/// Every provider fixture under `fixtures` (the `tests/fixtures` directory),
/// sorted by name.
pub fn fixtures(fixtures: &std::path::Path) -> Vec<Fixture> {
    let list = |dir: &std::path::Path| -> Vec<std::path::PathBuf> {
        let entries = std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("{}: cannot list: {e}", dir.display()));
        let mut paths: Vec<_> = entries.filter_map(|e| Some(e.ok()?.path())).collect();
        paths.sort();
        paths
    };
    let mut out = Vec::new();
    for dir in list(fixtures) {
        let dir_name = dir.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let Some(kind) = ProviderKind::ALL
            .into_iter()
            .find(|k| k.config_name() == dir_name)
        else {
            continue;
        };
        for path in list(&dir) {
            let file = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            let content_type = match path.extension().and_then(|e| e.to_str()) {
                Some("sse") => CONTENT_TYPES[0],
                Some("json") => CONTENT_TYPES[1],
                Some("ndjson") => CONTENT_TYPES[2],
                Some("eventstream") => CONTENT_TYPES[3],
                _ => continue,
            };
            let body = std::fs::read(&path)
                .unwrap_or_else(|e| panic!("{}: cannot read: {e}", path.display()));
            let plan = Plan {
                kind,
                operation: None,
                content_type,
                max_frame: LARGE_CAP,
                at: body.len() / 2,
            };
            out.push(Fixture {
                name: format!("{dir_name}/{file}"),
                plan,
                body,
            });
        }
    }
    out
}
