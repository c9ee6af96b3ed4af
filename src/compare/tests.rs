use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use super::report::{ServedBy, differences, parse_side};
use super::*;
use crate::meter::{RequestBody, RequestFacts};
use crate::providers::{Operation, ProviderKind};

fn settings() -> CompareConfig {
    CompareConfig {
        window: Duration::from_secs(1),
        windows: 4,
        min_requests: 4,
        min_windows: 2,
        ..CompareConfig::default()
    }
}

/// A complete streamed request that started at `start`: TTFT `ttft_ms`,
/// 11 output tokens over `decode_ms` (decode rate 10 / decode_ms),
/// `input` tokens.
fn request(start: Instant, ttft_ms: u64, decode_ms: u64, input: u64) -> Measurement {
    let facts = RequestFacts {
        route: Arc::from("r"),
        route_labels: RouteLabels::new([("hardware".to_owned(), "H100".to_owned())].into())
            .expect("valid labels"),
        provider: ProviderKind::Openai,
        operation: Some(Operation::ChatCompletions),
        request_model: Some("m".into()),
        stream: true,
        tenant: None,
        session: None,
        server_address: Arc::from("h"),
        server_port: 443,
        request_body: RequestBody::Sniffed,
        service_tier: None,
        start_wall: SystemTime::UNIX_EPOCH,
        start,
    };
    let mut m = Measurement::empty(facts);
    let ttft = Duration::from_millis(ttft_ms);
    m.time_to_first_token = Some(ttft);
    m.time_to_last_token = Some(ttft + Duration::from_millis(decode_ms));
    m.duration = ttft + Duration::from_millis(decode_ms + 1);
    m.output_tokens = Some(11);
    m.usage.input = Some(input);
    m.response_model = Some("m-2025".into());
    m
}

#[test]
fn cells_keep_prompt_sizes_and_loads_apart_and_ratios_follow_the_medians() {
    let epoch = Instant::now();
    let c = Compare::with_epoch(&settings(), epoch);
    let (route, a, b): (Arc<str>, Arc<str>, Arc<str>) = ("r".into(), "a".into(), "b".into());
    // Three windows, two requests each, per side; b has twice a's TTFT
    // and half its decode rate. A long prompt at load 2-8 for a only.
    for w in 0..3u64 {
        let at = epoch + Duration::from_millis(w * 1000 + 10);
        for _ in 0..2 {
            c.record(&route, &a, 0, &request(at, 100, 100, 500));
            c.record(&route, &b, 0, &request(at, 200, 200, 500));
        }
        c.record(&route, &a, 1, &request(at, 500, 100, 20_000));
    }
    let sides = [
        ("r".to_owned(), "a".to_owned()),
        ("r".to_owned(), "b".to_owned()),
    ];
    let r = c.report_at(2, &sides);
    let cells = r.cells.as_ref().expect("cells");
    let keys: Vec<(&str, &str)> = cells
        .iter()
        .map(|c| (c.prompt_size, c.load_class.as_str()))
        .collect();
    assert_eq!(keys, [("le_1k", "1"), ("le_32k", "2-8")]);
    let small = &cells[0];
    assert!(
        small
            .sides
            .iter()
            .all(|s| s.enough_data && s.requests == 6 && s.windows == 3)
    );
    let ratio = small.ratio.as_ref().expect("two sides");
    let near = |k: &str, want: f64| {
        let got = ratio[k].expect(k);
        assert!((got - want).abs() < 0.02, "{k}: {got}, want {want}");
    };
    near("ttft_ms", 2.0);
    near("prefill_tps", 0.5);
    near("decode_tps", 0.5);
    near("output_tokens", 1.0);
    let big = &cells[1];
    assert_eq!((big.sides[0].requests, big.sides[1].requests), (3, 0));
    assert!(!big.sides[0].enough_data, "3 requests < min_requests 4");
    assert!(
        big.ratio
            .as_ref()
            .expect("ratio")
            .values()
            .all(Option::is_none),
        "a cell without enough data on both sides has no ratio"
    );
    assert_eq!(r.like_with_like, Some(true), "only the model differs");
    assert_eq!(
        r.differences.as_deref(),
        Some(&["models differ".to_owned()][..])
    );
    let json = serde_json::to_value(&r).expect("json");
    assert_eq!(json["cells"][0]["sides"][0]["ttft_ms"]["median"], 100.0);
    assert_eq!(json["sides"][1]["served_by"]["response_model"], "m-2025");
    assert_eq!(json["sides"][1]["served_by"]["labels"]["hardware"], "H100");
    assert_eq!(json["load_classes"], serde_json::json!(["1", "2-8", "9+"]));
}

#[test]
fn listing_names_every_side_and_failed_requests_do_not_count() {
    let epoch = Instant::now();
    let c = Compare::with_epoch(&settings(), epoch);
    let route: Arc<str> = "r".into();
    let mut failed = request(epoch, 100, 100, 10);
    failed.outcome = Outcome::UpstreamError;
    c.record(&route, &"x".into(), 0, &failed);
    let mut no_token = request(epoch, 100, 100, 10);
    no_token.time_to_first_token = None;
    c.record(&route, &"x".into(), 0, &no_token);
    assert!(c.report_at(0, &[]).sides.is_empty(), "nothing counted");
    c.record(&route, &"x".into(), 0, &request(epoch, 100, 100, 10));
    let r = c.report_at(0, &[]);
    assert_eq!(r.sides.len(), 1);
    assert_eq!((r.sides[0].model.as_str(), r.sides[0].requests), ("x", 1));
    assert!(r.cells.is_none() && r.like_with_like.is_none());
    // A side asked for with no data: zero requests, no cells of its own.
    let r = c.report_at(0, &[("r".into(), "nope".into())]);
    assert_eq!(r.sides[0].requests, 0);
}

#[test]
fn sides_are_capped_and_memory_stays_under_its_bound() {
    let cfg = CompareConfig {
        max_sides: 3,
        windows: 2,
        samples: 8,
        ..settings()
    };
    let epoch = Instant::now();
    let c = Compare::with_epoch(&cfg, epoch);
    let route: Arc<str> = "r".into();
    for i in 0..10 {
        let model: Arc<str> = format!("m{i}").into();
        for w in 0..5u64 {
            for load in 0..4 {
                for input in [10, 5000, 20_000, 100_000, 200_000] {
                    for _ in 0..20 {
                        let at = epoch + Duration::from_millis(w * 1000);
                        c.record(&route, &model, load, &request(at, 10, 10, input));
                    }
                }
            }
        }
    }
    assert_eq!(c.report_at(4, &[]).sides.len(), 3, "max_sides");
    assert_eq!(c.memory_bound(), 3 * 6 * 3 * 2 * 8 * 20);
    assert!(
        c.memory_used() <= c.memory_bound(),
        "{} ≤ {}",
        c.memory_used(),
        c.memory_bound()
    );
    assert!(c.memory_used() > 0);
}

#[test]
fn differences_name_each_field_and_like_with_like_allows_one() {
    let base = ServedBy {
        response_model: Some("llama-3.1-8b".into()),
        serving_software: Some("vllm/0.6.3".into()),
        service_tier: None,
        labels: [("hardware".to_owned(), "H100".to_owned())].into(),
    };
    let a100 = ServedBy {
        labels: [("hardware".to_owned(), "A100".to_owned())].into(),
        ..base.clone()
    };
    let (d, n) = differences(&[("m", &base), ("m", &a100)]);
    assert_eq!((d, n), (vec!["labels differ: hardware".to_owned()], 1));
    let newer = ServedBy {
        response_model: Some("llama-3.1-8b-v2".into()),
        ..a100.clone()
    };
    let (d, n) = differences(&[("m", &base), ("m", &newer)]);
    assert_eq!(
        (d, n),
        (
            vec![
                "model versions differ".to_owned(),
                "labels differ: hardware".to_owned()
            ],
            2
        )
    );
    let other_sw = ServedBy {
        serving_software: None,
        ..base.clone()
    };
    let (d, n) = differences(&[("a", &base), ("b", &other_sw)]);
    assert_eq!(
        (d, n),
        (
            vec![
                "models differ".to_owned(),
                "serving software differs".to_owned()
            ],
            2
        ),
        "different requested models: versions are the thing compared"
    );
    assert_eq!(differences(&[("a", &base), ("a", &base)]).1, 0);
}

#[test]
fn side_parameter_splits_at_the_first_colon() {
    assert_eq!(
        parse_side("ollama:llama3:8b"),
        Ok(("ollama".to_owned(), "llama3:8b".to_owned()))
    );
    assert!(parse_side("nocolon").is_err());
    assert!(parse_side(":m").is_err());
    assert!(parse_side("r:").is_err());
}

#[test]
fn served_by_is_bounded_and_copied_only_on_change() {
    let mut s = Served::default();
    let long = "x".repeat(500);
    s.update(Some(&long), Some(b" vllm/0.6.3 "), Some("flex"));
    assert_eq!(s.response_model.as_deref().map(str::len), Some(128));
    assert_eq!(s.software.as_deref(), Some("vllm/0.6.3"));
    let before = s.software.as_deref().map(str::as_ptr);
    s.update(None, Some(b"vllm/0.6.3"), None);
    assert_eq!(
        s.software.as_deref().map(str::as_ptr),
        before,
        "same value: not copied again"
    );
    assert_eq!(s.tier, Some("flex"), "an absent tier keeps the last");
}
