//! Split invariance, as property tests on the stable toolchain: a valid
//! stream cut into any chunks (proptest picks the cut points and shrinks a
//! failure to the fewest cuts) gives the same result as the whole stream.
//!
//! Guarantees:
//! - `framing_decoders_*`: each decoder (SSE, NDJSON, JSON array, AWS
//!   eventstream) yields the same frames, and no error, for every fixture
//!   in `tests/fixtures/` of its format;
//! - `provider_adapters_*`: `providers::Parser` yields the same events in
//!   the same order, without error, for every provider fixture;
//! - `metered_path_*`: the `Meter` records the same figures (outcome,
//!   usage, tokens, content chunks, model, finish reasons, …) for every
//!   provider fixture sent plain or compressed (gzip, deflate, br, zstd),
//!   however the compressed bytes are chunked, as for the plain whole body;
//! - `usage_stripper_*`: removing injected usage gives the same stream
//!   however the upstream's stream was chunked;
//! - `sniff_*`: the request body tokentap forwards after sniffing is byte
//!   for byte the body the client sent, in any chunking, and the sniffed
//!   facts do not depend on the chunking and match a full JSON parse.
//!
//! The checks themselves live in the fuzz harness (`fuzz/src/`), shared
//! with the cargo-fuzz targets. Case counts keep this file to a few seconds.

#[path = "../fuzz/src/lib.rs"]
// The harness is the fuzz crate's public API; included here it is private.
#[allow(unreachable_pub)]
#[allow(dead_code)]
mod harness;

use std::path::Path;
use std::sync::OnceLock;

use harness::providers::Fixture;
use harness::{LARGE_CAP, Target};
use proptest::prelude::*;

/// Every provider fixture, read once.
fn fixtures() -> &'static [Fixture] {
    static FIXTURES: OnceLock<Vec<Fixture>> = OnceLock::new();
    FIXTURES.get_or_init(|| {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
        let all = harness::providers::fixtures(&dir);
        assert!(
            all.len() >= 40,
            "expected the provider fixtures, found {}",
            all.len()
        );
        all
    })
}

/// Up to 24 cut points, as fractions of the input (scaled by 2^-16).
fn cuts() -> impl Strategy<Value = Vec<u16>> {
    prop::collection::vec(any::<u16>(), 0..24)
}

/// `data` cut at the given fractions (repeats give empty chunks).
fn chunked<'a>(data: &'a [u8], cuts: &[u16]) -> Vec<&'a [u8]> {
    let mut at: Vec<usize> = cuts
        .iter()
        .map(|&c| (usize::from(c) * (data.len() + 1)) >> 16)
        .collect();
    at.sort_unstable();
    let mut pieces = Vec::with_capacity(at.len() + 1);
    let mut from = 0;
    for to in at {
        pieces.push(&data[from..to]);
        from = to;
    }
    pieces.push(&data[from..]);
    pieces
}

fn cases(n: u32) -> ProptestConfig {
    ProptestConfig {
        cases: n,
        ..ProptestConfig::default()
    }
}

/// The decoder for a fixture's format, if it is a streamed one.
fn decoder_for(f: &Fixture) -> Option<Target> {
    let ct = f.plan.content_type;
    if ct.starts_with("text/event-stream") {
        Some(Target::Sse)
    } else if ct == "application/x-ndjson" {
        Some(Target::Ndjson)
    } else if ct == "application/vnd.amazon.eventstream" {
        Some(Target::Eventstream)
    } else if f.body.trim_ascii_start().starts_with(b"[") {
        Some(Target::JsonArray)
    } else {
        None
    }
}

/// The framing fixtures (`tests/fixtures/framing/`) and their decoders.
fn framing_fixtures() -> &'static [(String, Target, Vec<u8>)] {
    static FRAMING: OnceLock<Vec<(String, Target, Vec<u8>)>> = OnceLock::new();
    FRAMING.get_or_init(|| {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/framing");
        let mut out: Vec<_> = fixtures()
            .iter()
            .filter_map(|f| Some((f.name.clone(), decoder_for(f)?, f.body.clone())))
            .collect();
        for entry in std::fs::read_dir(&dir).expect("tests/fixtures/framing") {
            let path = entry.expect("a directory entry").path();
            let target = match path.extension().and_then(|e| e.to_str()) {
                Some("eventstream") => Target::Eventstream,
                Some("ndjson") => Target::Ndjson,
                Some("json") => Target::JsonArray,
                _ => continue,
            };
            let body = std::fs::read(&path).expect("a readable fixture");
            out.push((path.display().to_string(), target, body));
        }
        for target in Target::ALL {
            assert!(
                out.iter().any(|(_, t, _)| *t == target),
                "no fixture for the {} decoder",
                target.name()
            );
        }
        out
    })
}

proptest! {
    #![proptest_config(cases(48))]

    #[test]
    fn framing_decoders_give_the_same_frames_in_any_chunking(cuts in cuts()) {
        for (name, target, body) in framing_fixtures() {
            let whole = harness::decode(*target, &[body], LARGE_CAP);
            prop_assert_eq!(&whole.1, &Ok(()), "{}: decodes without error", name);
            let pieces = chunked(body, &cuts);
            let got = harness::decode(*target, &pieces, LARGE_CAP);
            prop_assert_eq!(got, whole, "{} ({}) in {} chunks", name, target.name(), pieces.len());
        }
    }

    #[test]
    fn provider_adapters_give_the_same_events_in_any_chunking(cuts in cuts()) {
        for f in fixtures() {
            let whole = harness::providers::parse(&f.plan, &[&f.body]);
            prop_assert!(!whole.1, "{}: parses without error", f.name);
            prop_assert!(!whole.0.is_empty(), "{}: yields events", f.name);
            let pieces = chunked(&f.body, &cuts);
            let got = harness::providers::parse(&f.plan, &pieces);
            prop_assert_eq!(got, whole, "{} in {} chunks", &f.name, pieces.len());
        }
    }

    #[test]
    fn usage_stripper_gives_the_same_stream_in_any_chunking(cuts in cuts()) {
        for f in fixtures().iter().filter(|f| f.name.ends_with(".sse")) {
            let whole = harness::rewrite::strip(&[&f.body]);
            let pieces = chunked(&f.body, &cuts);
            prop_assert_eq!(harness::rewrite::strip(&pieces), whole, "{} in {} chunks", &f.name, pieces.len());
        }
    }
}

/// A fixture's body, plain and under each content coding.
struct Encoded {
    plain: String,
    bodies: Vec<(Option<&'static str>, Vec<u8>)>,
}

fn encoded() -> &'static [Encoded] {
    static ENCODED: OnceLock<Vec<Encoded>> = OnceLock::new();
    ENCODED.get_or_init(|| {
        fixtures()
            .iter()
            .map(|f| {
                let plan = meter_plan(f);
                let plain =
                    harness::meter::figures(&harness::meter::meter(&plan, None, &[&f.body]));
                let bodies = harness::meter::ENCODINGS
                    .iter()
                    .map(|&e| {
                        let body = match e {
                            Some(e) => harness::meter::compress(e, false, &f.body),
                            None => f.body.clone(),
                        };
                        (e, body)
                    })
                    .collect();
                Encoded { plain, bodies }
            })
            .collect()
    })
}

fn meter_plan(f: &Fixture) -> harness::meter::Plan {
    harness::meter::Plan {
        parse: f.plan,
        encoding: None,
        raw: false,
        raw_deflate: false,
        status: 200,
        stream: !f.name.ends_with(".json"),
    }
}

proptest! {
    #![proptest_config(cases(16))]

    #[test]
    fn metered_path_gives_the_same_figures_in_any_chunking(
        cuts in cuts(),
        coding in 0..harness::meter::ENCODINGS.len(),
    ) {
        for (f, enc) in fixtures().iter().zip(encoded()) {
            let (encoding, body) = &enc.bodies[coding];
            let pieces = chunked(body, &cuts);
            let m = harness::meter::meter(&meter_plan(f), *encoding, &pieces);
            prop_assert_eq!(
                harness::meter::figures(&m),
                enc.plain.clone(),
                "{} ({:?}) in {} chunks",
                &f.name,
                encoding,
                pieces.len()
            );
        }
    }
}

/// Request bodies: JSON objects with the fields the sniffer reads (of the
/// right and the wrong types, nested or not), or arbitrary bytes.
fn request_body() -> impl Strategy<Value = Vec<u8>> {
    let text = "[a-zA-Z0-9 ._\\-\"\\\\é]{0,12}";
    let value = prop_oneof![
        text.prop_map(serde_json::Value::from),
        any::<bool>().prop_map(serde_json::Value::from),
        any::<i32>().prop_map(serde_json::Value::from),
        Just(serde_json::Value::Null),
    ];
    let key = prop_oneof![
        Just("model".to_owned()),
        Just("stream".to_owned()),
        Just("user".to_owned()),
        Just("messages".to_owned()),
        "[a-z_]{1,8}",
    ];
    let object = (
        prop::collection::vec((key, value.clone()), 0..6),
        prop::option::of(value.clone()),
        prop::option::of(value),
    )
        .prop_map(|(members, include_usage, user_id)| {
            let mut map = serde_json::Map::new();
            for (k, v) in members {
                map.insert(k, v);
            }
            if let Some(v) = include_usage {
                map.insert(
                    "stream_options".into(),
                    serde_json::json!({ "include_usage": v }),
                );
            }
            if let Some(v) = user_id {
                map.insert("metadata".into(), serde_json::json!({ "user_id": v }));
            }
            serde_json::to_vec(&serde_json::Value::Object(map)).unwrap_or_default()
        });
    prop_oneof![
        4 => object,
        1 => prop::collection::vec(any::<u8>(), 0..64),
    ]
}

proptest! {
    #![proptest_config(cases(256))]

    #[test]
    fn sniff_replays_the_exact_body_in_any_chunking(
        body in request_body(),
        cuts in cuts(),
        content_type in 0..harness::sniff::CONTENT_TYPES.len(),
        content_length in 0u8..4,
        limit in prop_oneof![Just(1usize << 20), 0usize..96],
    ) {
        let plan = harness::sniff::Plan {
            content_type: harness::sniff::CONTENT_TYPES[content_type],
            content_length,
            limit,
            at: body.len() / 2,
        };
        // One split, the whole body, and a full-parse comparison.
        harness::sniff::check(&plan, &body);
        let whole = harness::sniff::sniff_pieces(&plan, &[&body]);
        let pieces = chunked(&body, &cuts);
        prop_assert_eq!(harness::sniff::sniff_pieces(&plan, &pieces), whole, "{} chunks", pieces.len());
    }
}
