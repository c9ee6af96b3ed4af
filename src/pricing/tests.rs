//! Golden tests: one response per provider usage shape, parsed by its real
//! adapter and priced from the embedded table. Expected figures were
//! computed with the reference implementation (genai-prices 0.2.3,
//! `calc_price`) from the same token counts.

use std::time::SystemTime;

use super::*;
use crate::providers::tests::run;
use crate::providers::{Operation, ProviderKind, ReportedCost};

fn at(rfc3339: &str) -> SystemTime {
    humantime::parse_rfc3339(rfc3339).expect("a timestamp")
}

const NOON: &str = "2026-11-01T12:00:00Z";

/// Which response a body is: the provider's answer to an operation, in a
/// content type.
type Reply = (ProviderKind, Operation, &'static str);

const JSON: &str = "application/json";
const SSE: &str = "text/event-stream";
const OPENAI_CHAT: Reply = (ProviderKind::Openai, Operation::ChatCompletions, JSON);
const OPENAI_RESPONSES: Reply = (ProviderKind::Openai, Operation::Responses, JSON);
const ANTHROPIC_SSE: Reply = (ProviderKind::Anthropic, Operation::Messages, SSE);
const GEMINI: Reply = (ProviderKind::Gemini, Operation::GenerateContent, JSON);
const BEDROCK_CONVERSE: Reply = (ProviderKind::Bedrock, Operation::Converse, JSON);
const DEEPSEEK_CHAT: Reply = (ProviderKind::Deepseek, Operation::ChatCompletions, JSON);
const OPENROUTER_SSE: Reply = (ProviderKind::Openrouter, Operation::ChatCompletions, SSE);

/// Parse `body` as `kind`'s response to `op` and price it at `when`.
fn priced(
    book: &PriceBook,
    (kind, op, content_type): Reply,
    body: &str,
    request_model: &str,
    when: &str,
) -> (f64, CostSource, bool, String, Usage) {
    let (summary, _, result) = run(kind, Some(op), content_type, &[body.as_bytes()]);
    assert_eq!(result, Ok(()), "{kind:?}: the body parses");
    let request = Request {
        route: "r",
        provider: kind,
        response_model: summary.model.as_deref(),
        request_model: Some(request_model),
        usage: &summary.usage,
        counted_output: None,
        estimated: false,
        requested_tier: None,
        at: at(when),
    };
    match book.price(&request) {
        Priced::Cost(c) => (
            c.usd,
            c.entry.source(),
            c.estimated,
            c.entry.to_string(),
            summary.usage,
        ),
        other => panic!("{kind:?} {request_model}: expected a cost, got {other:?}"),
    }
}

#[track_caller]
fn close(got: f64, want: f64) {
    assert!(
        (got - want).abs() <= want.abs() * 1e-9 + 1e-15,
        "cost {got} ≠ expected {want}"
    );
}

fn book() -> PriceBook {
    PriceBook::table_only().expect("the embedded table loads")
}

#[test]
fn the_embedded_table_loads_and_names_its_source() {
    let t = Table::embedded().expect("loads");
    assert_eq!(t.source.package, "genai-prices");
    assert!(t.providers.len() >= 10, "providers: {}", t.providers.len());
    for kind in ProviderKind::ALL {
        if let Some(id) = table_provider(kind) {
            assert!(
                t.provider(id).is_some(),
                "{kind:?} maps to {id}, which the table lacks"
            );
        }
    }
}

#[test]
fn every_lookup_finds_the_first_model_in_table_order() {
    // Exact names go through a hash index settled at load; the rest walk
    // the patterns. Both must agree with a plain walk of every model.
    let t = Table::embedded().expect("loads");
    let names = [
        "gpt-4o-mini",
        "gpt-4o-2024-08-06",
        "claude-sonnet-4-5-20250929",
        "gemini-2.5-pro-preview-06-05",
        "ft:gpt-4o-mini-2024-07-18:acme::abc",
        "computer-use-preview",
        "house-model-1",
    ];
    for p in t.providers.iter() {
        let wrong = table::tests_support::find_disagreements(p, &names);
        assert!(wrong.is_empty(), "{}: {wrong:?}", p.id);
        for m in p.models.iter() {
            assert_eq!(*m.reference, format!("{}/{}", p.id, m.id));
        }
    }
    // A pattern earlier in the table beats a later exact name.
    let snapshot = br#"{"source": {"package": "p", "version": "1", "license": "l", "url": "u"},
        "providers": [{"id": "x", "name": "X", "models": [
            {"id": "family", "match": {"starts_with": "m-"}, "prices": [{"prices": {"input_mtok": 1}}]},
            {"id": "exact", "match": {"equals": "m-1"}, "prices": [{"prices": {"input_mtok": 2}}]}]}]}"#;
    let t = Table::parse(snapshot).expect("parses");
    let p = &t.providers[0];
    assert!(table::tests_support::find_disagreements(p, &["m-1", "m-2"]).is_empty());
    let cx = table::Context::default();
    let found = t.lookup("x", "m-1", When::of(SystemTime::UNIX_EPOCH), &cx);
    assert_eq!(found.map(|r| &*r.model.id), Some("family"));
}

#[test]
fn openai_prompt_tokens_include_the_cached_ones() {
    // 2000 prompt tokens of which 1500 cached: 500 at 2.5, 1500 at 1.25,
    // 300 output at 10 (genai-prices: 0.006125). Billing the 2000 as
    // uncached on top of the cached 1500 would give 0.011875.
    let body = r#"{"id":"c1","object":"chat.completion","model":"gpt-4o","service_tier":"default","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":2000,"completion_tokens":300,"prompt_tokens_details":{"cached_tokens":1500}}}"#;
    let (usd, source, estimated, entry, usage) = priced(&book(), OPENAI_CHAT, body, "gpt-4o", NOON);
    close(usd, 0.006125);
    assert_eq!(
        (source, estimated, entry.as_str()),
        (CostSource::Table, false, "openai/gpt-4o")
    );
    assert_eq!(usage.service_tier, Some(ServiceTier::Default));
}

#[test]
fn openai_reasoning_is_billed_as_output_at_the_price_of_the_day() {
    // o3's price dropped on 2025-06-10: the same request costs 0.0281
    // before and 0.0057 after (genai-prices). 400 of the 500 output tokens
    // are reasoning and are billed as output, not again.
    let body = r#"{"id":"r1","object":"response","model":"o3","status":"completed","output":[{"type":"message"}],"usage":{"input_tokens":1000,"output_tokens":500,"input_tokens_details":{"cached_tokens":200},"output_tokens_details":{"reasoning_tokens":400}}}"#;
    let b = book();
    let price = |when| priced(&b, OPENAI_RESPONSES, body, "o3", when).0;
    close(price("2025-06-01T00:00:00Z"), 0.0281);
    close(price("2025-07-01T00:00:00Z"), 0.0057);
}

#[test]
fn openai_priority_tier_from_the_response() {
    let body = r#"{"id":"c2","object":"chat.completion","model":"gpt-4o-mini","service_tier":"priority","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1000,"completion_tokens":100}}"#;
    let (usd, ..) = priced(&book(), OPENAI_CHAT, body, "gpt-4o-mini", NOON);
    close(usd, 0.00035);
}

const ANTHROPIC_STREAM: &str = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-sonnet-4-5\",\"content\":[],\"usage\":{\"input_tokens\":100,\"cache_read_input_tokens\":1000,\"cache_creation_input_tokens\":3000,\"cache_creation\":{\"ephemeral_5m_input_tokens\":2000,\"ephemeral_1h_input_tokens\":1000},\"output_tokens\":1,\"service_tier\":\"TIER\"}}}\n\nevent: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\nevent: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":200}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";

#[test]
fn anthropic_input_excludes_cache_reads_and_writes_billed_at_5m_and_1h() {
    // input_tokens 100 are the uncached ones; 1000 read at 0.3, 2000
    // written for 5 minutes at 3.75, 1000 for an hour at 6, 200 out at 15
    // (genai-prices: 0.0171).
    let body = ANTHROPIC_STREAM.replace("TIER", "standard");
    let (usd, source, _, entry, usage) =
        priced(&book(), ANTHROPIC_SSE, &body, "claude-sonnet-4-5", NOON);
    close(usd, 0.0171);
    assert_eq!(
        (source, entry.as_str()),
        (CostSource::Table, "anthropic/claude-sonnet-4-5")
    );
    assert_eq!(
        (usage.input, usage.cache_write_5m, usage.cache_write_1h),
        (Some(4100), Some(2000), Some(1000))
    );
}

#[test]
fn anthropic_batch_tier_halves_every_rate() {
    let body = ANTHROPIC_STREAM.replace("TIER", "batch");
    let (usd, ..) = priced(&book(), ANTHROPIC_SSE, &body, "claude-sonnet-4-5", NOON);
    close(usd, 0.00855);
}

#[test]
fn gemini_long_context_moves_to_the_tier_price_and_thoughts_are_output() {
    let body = |prompt: u64| {
        format!(
            r#"{{"candidates":[{{"content":{{"parts":[{{"text":"hi"}}],"role":"model"}},"finishReason":"STOP"}}],"usageMetadata":{{"promptTokenCount":{prompt},"candidatesTokenCount":1000,"thoughtsTokenCount":500,"totalTokenCount":0}},"modelVersion":"gemini-2.5-pro"}}"#
        )
    };
    let b = book();
    let price = |prompt| priced(&b, GEMINI, &body(prompt), "gemini-2.5-pro", NOON).0;
    close(price(1000), 0.01625);
    close(price(250_000), 0.6475);
}

#[test]
fn bedrock_converse_input_excludes_the_cache() {
    let body = r#"{"output":{"message":{"role":"assistant","content":[{"text":"hi"}]}},"stopReason":"end_turn","usage":{"inputTokens":1000,"outputTokens":40,"cacheReadInputTokens":100,"cacheWriteInputTokens":50,"totalTokens":1190},"metrics":{"latencyMs":120}}"#;
    let (usd, source, ..) = priced(
        &book(),
        BEDROCK_CONVERSE,
        body,
        "anthropic.claude-3-5-sonnet-20240620-v1:0",
        NOON,
    );
    close(usd, 0.0038175);
    assert_eq!(source, CostSource::Table);
}

#[test]
fn deepseek_cache_hits_and_off_peak_hours() {
    let body = r#"{"id":"d","object":"chat.completion","model":"deepseek-chat","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1000,"completion_tokens":100,"prompt_cache_hit_tokens":600,"prompt_cache_miss_tokens":400}}"#;
    let b = book();
    let price = |when| priced(&b, DEEPSEEK_CHAT, body, "deepseek-chat", when).0;
    close(price(NOON), 0.000260);
    close(price("2026-11-01T20:00:00Z"), 0.000130);
}

#[test]
fn openrouter_reported_cost_is_used_and_marked_provider() {
    let body = "data: {\"id\":\"gen-1\",\"model\":\"openai/gpt-4o\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\ndata: {\"id\":\"gen-1\",\"model\":\"openai/gpt-4o\",\"choices\":[],\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":5,\"total_tokens\":15,\"cost\":0.00123,\"is_byok\":false}}\n\ndata: [DONE]\n\n";
    let (usd, source, estimated, entry, _) =
        priced(&book(), OPENROUTER_SSE, body, "openai/gpt-4o", NOON);
    close(usd, 0.00123);
    assert_eq!(
        (source, estimated, entry.as_str()),
        (CostSource::Provider, false, "provider")
    );
    // A cost some other router sends as an object is skipped, not an error.
    let odd = body.replace("\"cost\":0.00123", "\"cost\":{\"total\":1}");
    let (_, source, ..) = priced(&book(), OPENROUTER_SSE, &odd, "openai/gpt-4o", NOON);
    assert_eq!(source, CostSource::Table);
}

fn usage_request<'a>(u: &'a Usage, kind: ProviderKind, model: &'a str) -> Request<'a> {
    Request {
        route: "r",
        provider: kind,
        response_model: None,
        request_model: Some(model),
        usage: u,
        counted_output: None,
        estimated: false,
        requested_tier: None,
        at: at(NOON),
    }
}

#[test]
fn realtime_audio_and_cached_audio_have_their_own_rates() {
    let u = Usage {
        input: Some(1000),
        input_audio: Some(600),
        cache_read: Some(100),
        cache_read_audio: Some(50),
        output: Some(500),
        output_audio: Some(400),
        ..Usage::default()
    };
    let b = book();
    let Priced::Cost(c) = b.price(&usage_request(&u, ProviderKind::Openai, "gpt-realtime")) else {
        panic!("gpt-realtime is priced");
    };
    close(c.usd, 0.04624);
}

#[test]
fn unpriced_models_get_no_cost_and_estimates_are_marked() {
    let b = book();
    let u = Usage {
        input: Some(10),
        output: Some(5),
        ..Usage::default()
    };
    for (kind, model) in [
        (ProviderKind::Ollama, "llama3.2"),
        (ProviderKind::Openai, "my-own-model-x"),
    ] {
        assert!(
            matches!(b.price(&usage_request(&u, kind, model)), Priced::Unpriced),
            "{kind:?} {model} has no price"
        );
    }
    let none = Usage::default();
    assert!(matches!(
        b.price(&usage_request(&none, ProviderKind::Openai, "gpt-4o")),
        Priced::Nothing
    ));
    let mut counted = usage_request(&none, ProviderKind::Openai, "gpt-4o");
    counted.counted_output = Some(100);
    counted.estimated = true;
    let Priced::Cost(c) = b.price(&counted) else {
        panic!("counted output is priced");
    };
    assert!(c.estimated, "a cost from counted tokens is estimated");
    close(c.usd, 100.0 * 10.0 / 1e6);
    let reported = Usage {
        cost: ReportedCost::new(0.5),
        ..Usage::default()
    };
    let Priced::Cost(c) = b.price(&usage_request(&reported, ProviderKind::Ollama, "llama3.2"))
    else {
        panic!("a reported cost needs no price");
    };
    assert_eq!((c.usd, c.entry.source()), (0.5, CostSource::Provider));
}

#[test]
fn overrides_win_in_order_route_config_file() {
    let dir = std::env::temp_dir().join(format!("tokentap-prices-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let file = dir.join("prices.toml");
    std::fs::write(
        &file,
        "[[prices]]\nmodel = \"llama*\"\ninput = 0.1\noutput = 0.2\n",
    )
    .expect("write");
    let config = [PriceOverride {
        model: "gpt-4o".into(),
        provider: Some("openai".into()),
        scale: Some(0.5),
        ..PriceOverride::default()
    }];
    let route = [PriceOverride {
        model: "gpt-4o*".into(),
        input: Some(1.0),
        output: Some(2.0),
        ..PriceOverride::default()
    }];
    let book =
        PriceBook::new(&config, Some(&file), [("special", &route[..])].into_iter()).expect("loads");
    let u = Usage {
        input: Some(1_000_000),
        output: Some(1_000_000),
        ..Usage::default()
    };
    let cost = |route: &'static str, kind, model: &'static str| {
        let mut r = usage_request(&u, kind, model);
        r.route = route;
        match book.price(&r) {
            Priced::Cost(c) => {
                // The span's shared name is what `Display` writes.
                assert_eq!(*c.entry.reference(), c.entry.to_string());
                (c.usd, c.entry.to_string())
            }
            other => panic!("{model}: {other:?}"),
        }
    };
    // The route's own entry first.
    assert_eq!(
        cost("special", ProviderKind::Openai, "gpt-4o"),
        (3.0, "route.prices[0]".into())
    );
    // Elsewhere the config's discount of the table (2.5 + 10, halved).
    assert_eq!(
        cost("other", ProviderKind::Openai, "gpt-4o"),
        (6.25, "prices[0]".into())
    );
    // Restricted to openai: Azure keeps the table price (OpenAI's, its fallback).
    assert_eq!(
        cost("other", ProviderKind::Azure, "gpt-4o"),
        (12.5, "openai/gpt-4o".into())
    );
    // The --prices file prices a self-hosted model.
    let (usd, entry) = cost("other", ProviderKind::Ollama, "Llama3.2");
    close(usd, 0.3);
    assert_eq!(entry, "--prices[0]");
    let text = book.explain(&Query {
        route: "other",
        provider: ProviderKind::Openai,
        model: "gpt-4o",
        at: When::of(at(NOON)),
        tier: None,
    });
    assert!(
        text.contains("price used: prices[0] (source override)"),
        "{text}"
    );
    assert!(text.contains("table entry: openai/gpt-4o"), "{text}");
    assert!(text.contains("scaled by 0.5"), "{text}");
    let bad = std::fs::write(&file, "[[prices]]\nmodel = \"x\"\nimput = 1\n")
        .map(|_| PriceBook::new(&[], Some(&file), std::iter::empty()));
    let err = bad
        .expect("written")
        .expect_err("an unknown key is refused");
    assert!(err.to_string().contains("imput"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn compact_dates_are_read_the_dashed_way() {
    assert_eq!(
        table::tests_support::dash("gpt-5.2-20251211"),
        Some("gpt-5.2-2025-12-11".into())
    );
    assert_eq!(table::tests_support::dash("gpt-5.2-20251311"), None);
}

#[test]
fn model_patterns_use_ascii_classes_and_fall_back_to_unicode() {
    use super::table::tests_support::pattern;
    let dated = pattern(r"^claude-haiku-5-5-\d{8}$").expect("an ASCII pattern");
    assert!(dated.is_match("claude-haiku-5-5-20261101"));
    assert!(!dated.is_match("claude-haiku-5-5-2026110"));
    assert!(
        !dated.is_match("claude-haiku-5-5-２０２６１１０１"),
        "\\d is ASCII"
    );
    // `.` over a non-ASCII name needs Unicode mode: still accepted, and it
    // matches whole characters.
    let any = pattern("^gpt-.-mini$").expect("a pattern that needs Unicode");
    assert!(any.is_match("gpt-é-mini"));
    let err = pattern("^gpt-(").expect_err("a broken pattern");
    assert!(err.contains("^gpt-("), "{err}");
}
