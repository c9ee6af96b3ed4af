//! Cost through the real server: a scripted upstream answers with usage,
//! and the request's cost is asserted on the exported span (OTLP receiver),
//! in the admin listener's `/metrics` and on `/api/live`, for a table
//! price, a route override and an unpriced model.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

mod support;

use std::time::Duration;

use support::client;
use support::inspect::{live, scrape};
use support::proxy::q;
use support::rig::Rig;
use support::script::{self, StreamSpec};

use support::CHAT;

#[track_caller]
fn close(what: &str, got: f64, want: f64) {
    assert!(
        (got - want).abs() <= want * 1e-9,
        "{what}: got {got}, want {want}"
    );
}

#[tokio::test]
async fn requests_show_their_cost_on_the_span_in_metrics_and_on_the_dashboard() {
    let spec = |model: &str| {
        StreamSpec::tokens(4, Duration::from_millis(20), Duration::from_millis(5))
            .with_usage(1000, 200)
            .model(model)
    };
    let table = script::openai_chat_sse(&spec("gpt-4o"));
    let house = script::openai_chat_sse(&spec("house-model-1"));
    let special = script::openai_chat_sse(&spec("special-7b"));
    let mut rig = Rig::start(
        move |ex| {
            let body = String::from_utf8_lossy(&ex.body);
            if body.contains("house-model") {
                house.clone()
            } else if body.contains("special-7b") {
                special.clone()
            } else {
                table.clone()
            }
        },
        |t, up| {
            t.top("admin_listen", &q("127.0.0.1:0")).route_with(
                "chat",
                "/",
                up,
                "openai",
                "[[routes.prices]]\nmodel = \"special-*\"\ninput = 1.0\noutput = 2.0\n",
            )
        },
    )
    .await;
    let admin = rig.proxy.running().unwrap().admin_addr.unwrap();
    for (model, tenant) in [
        ("gpt-4o", "acme"),
        ("house-model-1", "acme"),
        ("special-7b", "globex"),
    ] {
        let req = rig
            .post(CHAT, script::openai_request(model, true, None))
            .header("x-tenant-id", tenant);
        let got = client::fetch(&rig.client, &req).await;
        assert_eq!(got.status, 200, "{model}: {}", got.text());
    }

    // /metrics: the spend counter per route, model and tenant.
    let c = client::http1();
    let table_usd = (1000.0 * 2.5 + 200.0 * 10.0) / 1e6;
    let override_usd = (1000.0 * 1.0 + 200.0 * 2.0) / 1e6;
    let mut scraped = None;
    for _ in 0..50 {
        let s = scrape(&c, admin).await;
        if s.named("tokentap_cost_usd_total").count() >= 2 {
            scraped = Some(s);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let s = scraped.expect("tokentap_cost_usd_total has a series per priced model");
    let series = |model: &str| {
        s.named("tokentap_cost_usd_total")
            .find(|x| x.labels.get("gen_ai_request_model").map(String::as_str) == Some(model))
            .unwrap_or_else(|| panic!("no tokentap_cost_usd_total series for {model}"))
            .clone()
    };
    let gpt = series("gpt-4o");
    close("gpt-4o spend in /metrics", gpt.value, table_usd);
    assert_eq!(
        gpt.labels.get("tokentap_tenant").map(String::as_str),
        Some("acme")
    );
    assert_eq!(
        gpt.labels.get("tokentap_route").map(String::as_str),
        Some("chat")
    );
    assert_eq!(
        gpt.labels.get("tokentap_cost_source").map(String::as_str),
        Some("table")
    );
    let sp = series("special-7b");
    close("special-7b spend in /metrics", sp.value, override_usd);
    assert_eq!(
        sp.labels.get("tokentap_cost_source").map(String::as_str),
        Some("override")
    );
    assert!(
        s.named("tokentap_cost_usd_total").all(|x| x
            .labels
            .get("gen_ai_request_model")
            .map(String::as_str)
            != Some("house-model-1")),
        "an unpriced model gets no cost, not 0"
    );
    assert_eq!(
        s.value(
            "tokentap_cost_unpriced_total",
            "gen_ai_request_model",
            "house-model-1"
        ),
        Some(1.0),
        "the unpriced model is counted"
    );

    // /api/live: spend per series for the dashboard (published periodically).
    let sum = |snap: &serde_json::Value, key: &str| -> f64 {
        snap["series"]
            .as_array()
            .map(|rows| {
                rows.iter()
                    .map(|r| r["window"]["cost"][key].as_f64().unwrap_or(0.0))
                    .sum()
            })
            .unwrap_or(0.0)
    };
    let mut snap = live(&c, admin).await;
    for _ in 0..100 {
        if sum(&snap, "priced") + sum(&snap, "unpriced") >= 3.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        snap = live(&c, admin).await;
    }
    close(
        &format!("dashboard spend {snap:#}"),
        sum(&snap, "usd"),
        table_usd + override_usd,
    );
    assert_eq!(
        sum(&snap, "unpriced"),
        1.0,
        "dashboard counts the unpriced request: {snap:#}"
    );
    assert_eq!(
        sum(&snap, "priced_tokens_out"),
        400.0,
        "tokens bought by priced requests"
    );

    // The spans, once the proxy has flushed them.
    rig.proxy.stop().await;
    let span = rig
        .col
        .wait_span(support::STEP_TIMEOUT, "for gpt-4o", |s| {
            s.name == "chat gpt-4o"
        })
        .await;
    close(
        "span tokentap.cost.amount",
        span.num("tokentap.cost.amount"),
        table_usd,
    );
    assert_eq!(span.str("tokentap.cost.currency"), "USD");
    assert_eq!(span.str("tokentap.cost.source"), "table");
    assert_eq!(span.str("tokentap.cost.price_entry"), "openai/gpt-4o");
    assert_eq!(span.attr("tokentap.cost.estimated").as_bool(), Some(false));
    let house = rig
        .col
        .wait_span(support::STEP_TIMEOUT, "for house-model-1", |s| {
            s.name == "chat house-model-1"
        })
        .await;
    assert!(
        !house.attrs.contains_key("tokentap.cost.amount"),
        "no cost for an unpriced model"
    );
    assert_eq!(house.attr("tokentap.cost.unpriced").as_bool(), Some(true));
    let special = rig
        .col
        .wait_span(support::STEP_TIMEOUT, "for special-7b", |s| {
            s.name == "chat special-7b"
        })
        .await;
    close(
        "override cost on the span",
        special.num("tokentap.cost.amount"),
        override_usd,
    );
    assert_eq!(special.str("tokentap.cost.price_entry"), "route.prices[0]");
}
