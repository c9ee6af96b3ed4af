//! The fuzz targets' invariants on the stable toolchain: the committed
//! corpus of every target (`fuzz/corpus/<target>/`) and pseudo-random
//! inputs in, assertions out, through the same harness (`fuzz/src/`) the
//! cargo-fuzz targets run.
//!
//! Guarantees, per target:
//! - framing decoders (`sse`, `ndjson`, `json_array`, `eventstream`): every
//!   input decoded whole, split in two, and byte by byte gives the same
//!   frames and result, without panicking;
//! - `providers`: every kind × operation × content type the seeds pick
//!   gives the same events whole, split and byte by byte, and every text
//!   event is a JSON string literal;
//! - `meter`: one measurement per request, bytes counted, and compressed
//!   bodies meter exactly like plain ones, however chunked;
//! - `sniff`: the replayed request body is byte for byte what the client
//!   sent, and the sniffed facts match a full JSON parse;
//! - `config`: any TOML is a config or an error, and a config's redacted
//!   form loads back to itself;
//! - `rewrite`: the usage stripper's output does not depend on chunking and
//!   leaves usage-free streams untouched;
//! - `realtime`: WebSocket session messages never panic the parser, a
//!   rejected message yields nothing, and OpenAI messages keep no state.
//! - `websocket`: one direction of a WebSocket (either sender, with or
//!   without permessage-deflate) gives the same messages whole, split and
//!   byte by byte, within the message cap and its memory bound.
//!
//! Crash inputs found by fuzzing are kept in the corpus, so each is a
//! regression test here. `cargo test --test fuzz_corpus -- --ignored
//! write_seed_corpora` rewrites the fixture-derived seeds.

#[path = "../fuzz/src/lib.rs"]
// The harness is the fuzz crate's public API; included here it is private.
#[allow(unreachable_pub)]
mod harness;

use std::path::{Path, PathBuf};

use harness::{LARGE_CAP, Plan, Target, check_split, fix_crcs, fuzz_one};
use tokentap::framing::eventstream::{HeaderValue, encode};

/// Pseudo-random inputs generated per target.
const RANDOM_INPUTS: usize = 2_000;
/// Inputs up to this length are checked at every split offset.
const EVERY_SPLIT_MAX: usize = 64;

/// xorshift64: deterministic, dependency-free, good enough to pick tokens.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())]
    }

    /// Fewer than `limit` random bytes.
    fn bytes(&mut self, limit: usize) -> Vec<u8> {
        let n = self.below(limit);
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// Check `data` at every split offset when short, else at a few.
fn check_splits(rng: &mut Rng, target: Target, data: &[u8], max: usize) {
    if data.len() <= EVERY_SPLIT_MAX {
        for at in 0..=data.len() {
            check_split(target, data, at, max);
        }
    } else {
        for _ in 0..16 {
            check_split(target, data, rng.below(data.len() + 1), max);
        }
    }
}

#[test]
fn seed_corpus_holds_the_invariants() {
    for target in Target::ALL {
        let dir = format!(
            "{}/fuzz/corpus/{}",
            env!("CARGO_MANIFEST_DIR"),
            target.name()
        );
        let mut seeds = 0;
        for entry in std::fs::read_dir(&dir).expect("a seed corpus directory") {
            let path = entry.expect("a directory entry").path();
            let input = std::fs::read(&path).expect("a readable seed");
            fuzz_one(target, &input);
            let (plan, payload) = Plan::parse(&input);
            let mut payload = payload.to_vec();
            if target == Target::Eventstream && plan.fix_crcs {
                fix_crcs(&mut payload);
            }
            let step = (payload.len() / 256).max(1);
            for at in (0..=payload.len()).step_by(step) {
                check_split(target, &payload, at, plan.max);
            }
            let (_, small) = harness::decode(target, &[&payload], 24);
            let (_, large) = harness::decode(target, &[&payload], LARGE_CAP);
            assert!(
                small.is_err() || large.is_ok(),
                "{}: {path:?} fails with a large cap ({large:?}) but passes with a small one",
                target.name()
            );
            seeds += 1;
        }
        assert!(
            seeds >= 2,
            "{dir}: expected at least two seeds, found {seeds}"
        );
    }
}

/// Random concatenations of tokens that matter to each grammar.
fn token_input(rng: &mut Rng, tokens: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::new();
    for _ in 0..rng.below(24) {
        out.extend_from_slice(rng.pick(tokens));
    }
    out
}

const SSE_TOKENS: &[&[u8]] = &[
    b"data:",
    b"data: ",
    b"event: ",
    b"id: ",
    b"retry: ",
    b"5",
    b":",
    b" ",
    b"\n",
    b"\r",
    b"\r\n",
    b"x",
    b"{\"a\":1}",
    b"\xEF\xBB\xBF",
    b"\0",
    b"\xC3\xA9",
];
const NDJSON_TOKENS: &[&[u8]] = &[
    b"{",
    b"}",
    b"\"k\"",
    b":",
    b"1",
    b"\n",
    b"\r",
    b"\r\n",
    b" ",
    b"\t",
    b"[",
    b"]",
    b"x",
    b"{\"done\":true}",
];
const JSON_ARRAY_TOKENS: &[&[u8]] = &[
    b"[",
    b"]",
    b"{",
    b"}",
    b",",
    b"\"",
    b"\\",
    b"\\\"",
    b"a",
    b" ",
    b"\r\n",
    b"\n",
    b":",
    b"1",
    b"\"s\"",
    b"{\"t\":\"}]\"}",
];

/// One to three eventstream messages with random headers of every type,
/// then perhaps a mutation, then perhaps CRCs made valid again.
fn eventstream_input(rng: &mut Rng) -> Vec<u8> {
    const NAMES: &[&str] = &[
        ":event-type",
        ":message-type",
        ":exception-type",
        ":error-code",
        ":content-type",
        "x",
    ];
    const STRINGS: &[&str] = &[
        "event",
        "exception",
        "error",
        "chunk",
        "contentBlockDelta",
        "",
    ];
    let mut out = Vec::new();
    for _ in 0..rng.below(4) {
        let blob = rng.bytes(20);
        let mut headers = Vec::new();
        for _ in 0..rng.below(5) {
            let n = rng.next() as i64;
            let value = match rng.below(10) {
                0 => HeaderValue::Bool(n & 1 == 0),
                1 => HeaderValue::Byte(n as i8),
                2 => HeaderValue::Short(n as i16),
                3 => HeaderValue::Integer(n as i32),
                4 => HeaderValue::Long(n),
                5 => HeaderValue::ByteArray(&blob),
                6 => HeaderValue::Timestamp(n),
                7 => HeaderValue::Uuid([n as u8; 16]),
                _ => HeaderValue::String(rng.pick(STRINGS)),
            };
            headers.push((rng.pick(NAMES), value));
        }
        let payload = rng.bytes(24);
        encode(&headers, &payload, &mut out).expect("encodable message");
    }
    if !out.is_empty() && rng.below(2) == 0 {
        let at = rng.below(out.len());
        match rng.below(4) {
            0 => out[at] ^= 1 << rng.below(8),
            1 => out.truncate(at),
            2 => out.insert(at, rng.next() as u8),
            _ => {
                let extra = rng.bytes(20);
                out.extend(extra);
            }
        }
        if rng.below(2) == 0 {
            fix_crcs(&mut out);
        }
    }
    out
}

#[test]
fn pseudo_random_inputs_hold_the_invariants() {
    let mut rng = Rng(0x7057_7a9d_0bad_cafe);
    for target in Target::ALL {
        let mut errors = 0;
        for _ in 0..RANDOM_INPUTS {
            let data = match target {
                Target::Sse => token_input(&mut rng, SSE_TOKENS),
                Target::Ndjson => token_input(&mut rng, NDJSON_TOKENS),
                Target::JsonArray => token_input(&mut rng, JSON_ARRAY_TOKENS),
                Target::Eventstream => eventstream_input(&mut rng),
            };
            let max = if rng.below(2) == 0 {
                LARGE_CAP
            } else {
                rng.below(if target == Target::Eventstream {
                    160
                } else {
                    40
                })
            };
            check_splits(&mut rng, target, &data, max);
            // The raw fuzz entry point, with control bytes, must hold too.
            let mut input = Plan {
                at: rng.below(data.len() + 1),
                max,
                fix_crcs: rng.below(2) == 0,
            }
            .encode()
            .to_vec();
            input.extend_from_slice(&data);
            fuzz_one(target, &input);
            errors += usize::from(harness::decode(target, &[&data], max).1.is_err());
        }
        // The generators should reach both outcomes, or they test little.
        assert!(
            errors > RANDOM_INPUTS / 20 && errors < RANDOM_INPUTS * 19 / 20,
            "{}: {errors} of {RANDOM_INPUTS} inputs failed to decode; generator is lopsided",
            target.name()
        );
    }
}

#[test]
fn plan_round_trips_through_control_bytes() {
    for plan in [
        Plan {
            at: 0,
            max: LARGE_CAP,
            fix_crcs: false,
        },
        Plan {
            at: 7,
            max: 0,
            fix_crcs: true,
        },
        Plan {
            at: 300,
            max: 63,
            fix_crcs: false,
        },
    ] {
        let mut input = plan.encode().to_vec();
        input.extend_from_slice(&[b'x'; 400]);
        assert_eq!(Plan::parse(&input).0, plan, "control bytes for {plan:?}");
    }
}

/// A fuzz target's entry point.
type FuzzOne = fn(&[u8]);

/// The fuzz targets beside the framing decoders, with their entry points.
const STAGE_TARGETS: [(&str, FuzzOne); 7] = [
    ("providers", harness::providers::fuzz_one),
    ("realtime", harness::realtime::fuzz_one),
    ("meter", harness::meter::fuzz_one),
    ("sniff", harness::sniff::fuzz_one),
    ("config", harness::config::fuzz_one),
    ("rewrite", harness::rewrite::fuzz_one),
    ("websocket", harness::websocket::fuzz_one),
];

fn corpus_dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target)
}

#[test]
fn stage_corpora_hold_the_invariants() {
    for (target, fuzz) in STAGE_TARGETS {
        let dir = corpus_dir(target);
        let entries = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: a seed corpus directory: {e}", dir.display()));
        let mut seeds = 0;
        for entry in entries {
            let path = entry.expect("a directory entry").path();
            let input = std::fs::read(&path)
                .unwrap_or_else(|e| panic!("{}: a readable seed: {e}", path.display()));
            let run = std::panic::catch_unwind(|| fuzz(&input));
            assert!(run.is_ok(), "{target}: seed {} fails", path.display());
            seeds += 1;
        }
        assert!(
            seeds >= 4,
            "{}: expected at least four seeds, found {seeds}",
            dir.display()
        );
    }
}

/// Write `input` as seed `name` of `target`.
fn write_seed(target: &str, name: &str, input: &[u8]) {
    let dir = corpus_dir(target);
    std::fs::create_dir_all(&dir).expect("create the corpus directory");
    std::fs::write(dir.join(name.replace('/', "_")), input).expect("write a seed");
}

fn seed(control: &[u8], body: &[u8]) -> Vec<u8> {
    [control, body].concat()
}

/// One `realtime` seed per transcript fixture; the file name's prefix
/// gives the dialect.
fn write_realtime_seeds(dir: &Path) {
    use tokentap::providers::realtime::Dialect;
    for entry in std::fs::read_dir(dir).expect("the realtime fixtures") {
        let path = entry.expect("a directory entry").path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let dialect = if name.starts_with("gemini") {
            Dialect::GeminiLive
        } else if name.starts_with("responses") {
            Dialect::OpenaiResponses
        } else {
            Dialect::OpenaiRealtime
        };
        let transcript = std::fs::read_to_string(&path).expect("a readable fixture");
        let input = harness::realtime::seed_from_transcript(dialect, &transcript);
        write_seed("realtime", name, &input);
    }
}

/// Regenerate the seeds taken from `tests/fixtures` and a few hand-written
/// inputs. Fuzzer finds and crash regressions in the same directories are
/// left alone.
#[test]
#[ignore = "writes fuzz/corpus/; run by hand after changing fixtures"]
fn write_seed_corpora() {
    use harness::meter::Plan as MeterPlan;
    use harness::sniff::Plan as SniffPlan;
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let fixtures = harness::providers::fixtures(&root.join("tests/fixtures"));
    for f in &fixtures {
        write_seed("providers", &f.name, &seed(&f.plan.encode(), &f.body));
    }
    write_realtime_seeds(&root.join("tests/fixtures/realtime"));
    let fixture = |name: &str| {
        fixtures
            .iter()
            .find(|f| f.name == name)
            .unwrap_or_else(|| panic!("fixture {name}"))
    };
    let metered: [(&str, Option<&'static str>, bool, u16); 8] = [
        ("openai/chat_stream_usage.sse", Some("gzip"), false, 200),
        ("anthropic/messages_stream.sse", Some("br"), false, 200),
        ("ollama/chat_stream.ndjson", Some("deflate"), false, 200),
        (
            "bedrock/converse_stream.eventstream",
            Some("zstd"),
            false,
            200,
        ),
        ("gemini/stream_generate_array.json", None, false, 200),
        ("openai/chat.json", Some("deflate"), true, 200),
        ("openai/chat_stream.sse", Some("gzip"), true, 200),
        ("anthropic/error.json", None, false, 500),
    ];
    for (name, encoding, raw, status) in metered {
        let f = fixture(name);
        let plan = MeterPlan {
            parse: f.plan,
            encoding,
            raw,
            raw_deflate: false,
            status,
            stream: !name.ends_with(".json"),
        };
        let tag = format!(
            "{}_{}",
            encoding.unwrap_or("plain"),
            if raw { "raw" } else { "ok" }
        );
        write_seed(
            "meter",
            &format!("{name}_{tag}"),
            &seed(&plan.encode(), &f.body),
        );
    }
    // Name, content type, content length (see `SniffPlan`), limit (0 = large), body.
    type SniffSeed = (&'static str, Option<&'static str>, u8, usize, &'static [u8]);
    let sniffed: [SniffSeed; 7] = [
        (
            "openai_chat",
            Some("application/json"),
            1,
            0,
            br#"{"model":"gpt-4o","stream":true,"stream_options":{"include_usage":true},"user":"u1","messages":[{"role":"user","content":"hi"}]}"#,
        ),
        (
            "anthropic_messages",
            None,
            0,
            0,
            br#"{"model":"claude-sonnet-4-5","max_tokens":5,"metadata":{"user_id":"u2"},"messages":[]}"#,
        ),
        ("not_json", Some("text/plain"), 2, 0, b"model=gpt-4o&stream=true"),
        ("empty", Some("application/json"), 1, 0, b""),
        ("over_limit", Some("application/json"), 0, 16, br#"{"model":"m","stream":false,"x":[1,2,3]}"#),
        ("regression_array_is_not_a_request", None, 3, 0, br#"["m", true]"#),
        ("multipart", Some("multipart/form-data; boundary=x"), 1, 0, b"--x\r\n\r\n--x--"),
    ];
    for (name, content_type, content_length, limit, body) in sniffed {
        let plan = SniffPlan {
            content_type,
            content_length,
            limit: if limit == 0 { 1 << 20 } else { limit },
            at: body.len() / 3,
        };
        write_seed("sniff", name, &seed(&plan.encode(), body));
    }
    let config = std::fs::read(root.join("config/tokentap.toml")).expect("config/tokentap.toml");
    write_seed("config", "tokentap.toml", &config);
    let routes = "[[routes]]\nname = \"openai\"\nprefix = \"/openai/\"\nupstream = \"https://api.openai.com/v1/\"\nprovider = \"openai\"\ninject_usage = true\n";
    write_seed("config", "one_route", routes.as_bytes());
    write_seed(
        "config",
        "secrets_and_durations",
        format!("admin_listen = \"off\"\n[upstream]\ntotal_timeout = \"1h30m\"\n[tenant]\nsalt = \"pepper\"\n[telemetry.otlp_headers]\nauthorization = \"Bearer abc\"\n{routes}").as_bytes(),
    );
    write_seed("config", "unknown_key", b"[server]\nmax_conections = 5\n");
    for name in ["openai/chat_stream_usage.sse", "openai/chat_stream.sse"] {
        let body = &fixture(name).body;
        write_seed("rewrite", name, &seed(&[17, 0], body));
    }
    write_seed(
        "rewrite",
        "request_body",
        br#"..{"model":"m","stream":true,"messages":[]}"#,
    );
    write_seed("rewrite", "crlf_usage_null", b"\x05\x00data: {\"usage\":null,\"x\":2}\r\n\r\ndata: {\"choices\":[],\"usage\":{\"total_tokens\":3}}\r\n\r\n");
}

/// Write the hand-made WebSocket seeds (`fuzz/corpus/websocket/`).
#[test]
#[ignore = "writes fuzz/corpus/websocket/; run by hand after changing the seeds"]
fn write_websocket_seeds() {
    for (name, input) in harness::websocket::seeds() {
        write_seed("websocket", name, &input);
    }
}

#[test]
fn websocket_seeds_decode_as_named() {
    for (name, input) in harness::websocket::seeds() {
        let (plan, payload) = harness::websocket::Plan::parse(&input);
        let (messages, result) = harness::websocket::decode(plan, &[payload]);
        assert_eq!(
            result.is_err(),
            name.ends_with("_error"),
            "{name}: {result:?} after {messages:?}"
        );
        assert!(
            !messages.is_empty() || result.is_err(),
            "{name}: no messages"
        );
        let skipped = messages
            .iter()
            .any(|m| matches!(m, harness::websocket::Owned::Skipped { .. }));
        assert_eq!(skipped, name.contains("small_cap"), "{name}: {messages:?}");
    }
}

/// Random frame sequences (every opcode, FIN, RSV1, masked or not, plain
/// or compressed payloads), sometimes mutated, for both senders with and
/// without deflate.
#[test]
fn websocket_random_frames_hold_the_invariants() {
    use harness::websocket::{
        Plan as WsPlan, check_opaque as ws_check_opaque, check_split as ws_check_split,
        deflate_message,
    };
    use tokentap::framing::websocket::{Deflate, Sender, encode_frame};
    let mut rng = Rng(0x3c0f_fee5_ca11_ab1e);
    let mut errors = 0;
    for _ in 0..RANDOM_INPUTS {
        let config = rng.next() as u8;
        let mut plan = WsPlan::parse(&[config, 0, 0]).0;
        if rng.below(2) == 0 {
            plan.max = LARGE_CAP;
        }
        let mut z = flate2::Compress::new(flate2::Compression::fast(), false);
        let mut data = Vec::new();
        for _ in 0..rng.below(6) {
            let opcode = rng.pick(&[0u8, 1, 1, 2, 8, 9, 10, 3, 0xB]);
            let fin = rng.below(4) != 0;
            let masked = (plan.sender == Sender::Client) != (rng.below(16) == 0);
            let mask = masked.then(|| (rng.next() as u32).to_be_bytes());
            let mut payload = rng.bytes(if opcode >= 8 { 8 } else { 60 });
            let rsv1 = plan.deflate.is_some() && opcode != 0 && rng.below(2) == 0;
            if rsv1 {
                if plan.deflate.is_some_and(|d: Deflate| d.no_context_takeover) {
                    z.reset();
                }
                payload = deflate_message(&mut z, &payload.repeat(rng.below(8) + 1));
            }
            encode_frame(fin, rsv1, opcode, mask, &payload, &mut data);
        }
        if !data.is_empty() && rng.below(4) == 0 {
            let at = rng.below(data.len());
            data[at] ^= 1 << rng.below(8);
        }
        for _ in 0..4 {
            ws_check_split(plan, &data, rng.below(data.len() + 1));
        }
        ws_check_opaque(plan, &data, rng.below(data.len() + 1));
        errors += usize::from(harness::websocket::decode(plan, &[&data]).1.is_err());
    }
    assert!(
        errors > RANDOM_INPUTS / 20 && errors < RANDOM_INPUTS * 19 / 20,
        "websocket: {errors} of {RANDOM_INPUTS} inputs failed to decode; generator is lopsided"
    );
}
