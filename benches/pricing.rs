//! Pricing one finished request (`PriceBook::price`): a provider, model and
//! usage in, nanoseconds per request out, for an exact-name table hit, a
//! model found by pattern, an override, a long-context tier and an
//! unpriced model; plus the one-time table load and index.
#![allow(
    missing_docs,
    reason = "criterion_group! generates a pub fn that cannot carry a doc"
)]
#![allow(
    clippy::unwrap_used,
    reason = "a bench with a broken table should stop"
)]

use std::hint::black_box;
use std::time::{Duration, UNIX_EPOCH};

use criterion::{Criterion, criterion_group, criterion_main};
use tokentap::pricing::table::Table;
use tokentap::pricing::{PriceBook, PriceOverride, Priced, Request};
use tokentap::providers::{ProviderKind, Usage};

fn usage(input: u64, cached: u64, output: u64) -> Usage {
    Usage {
        input: Some(input),
        cache_read: Some(cached),
        output: Some(output),
        ..Usage::default()
    }
}

fn bench(c: &mut Criterion) {
    let overrides = [PriceOverride {
        model: "llama-3.*".into(),
        input: Some(0.1),
        output: Some(0.2),
        ..PriceOverride::default()
    }];
    let book = PriceBook::new(&overrides, None, std::iter::empty()).unwrap();
    let at = UNIX_EPOCH + Duration::from_secs(1_790_000_000);
    let small = usage(1200, 1000, 300);
    let long = usage(250_000, 0, 1000);
    let cases: [(&str, ProviderKind, &str, &Usage); 6] = [
        ("openai_exact", ProviderKind::Openai, "gpt-4o-mini", &small),
        (
            "openai_dated_response_model",
            ProviderKind::Openai,
            "gpt-4o-2024-08-06",
            &small,
        ),
        (
            "anthropic_pattern",
            ProviderKind::Anthropic,
            "claude-sonnet-4-5-20250929",
            &small,
        ),
        (
            "gemini_long_context",
            ProviderKind::Gemini,
            "gemini-2.5-pro",
            &long,
        ),
        (
            "override_glob",
            ProviderKind::Ollama,
            "llama-3.1-8b",
            &small,
        ),
        ("unpriced", ProviderKind::Openai, "house-model-1", &small),
    ];
    let mut g = c.benchmark_group("price_request");
    for (name, provider, model, usage) in cases {
        let request = Request {
            route: "chat",
            provider,
            response_model: Some(model),
            request_model: Some(model),
            usage,
            counted_output: None,
            estimated: false,
            requested_tier: None,
            at,
        };
        // Each case must price (or not) as named before it is timed.
        let priced = matches!(book.price(&request), Priced::Cost(_));
        assert_eq!(priced, name != "unpriced", "{name}");
        g.bench_function(name, |b| {
            b.iter(|| match book.price(black_box(&request)) {
                Priced::Cost(c) => black_box(c.usd),
                _ => 0.0,
            })
        });
    }
    g.finish();
    let snapshot = include_bytes!("../data/prices/genai-prices.json");
    c.bench_function("table_parse_and_index", |b| {
        b.iter(|| black_box(Table::parse(black_box(snapshot)).unwrap().providers.len()))
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(Duration::from_millis(300)).measurement_time(Duration::from_secs(2));
    targets = bench
}
criterion_main!(benches);
