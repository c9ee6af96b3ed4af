//! Agent sessions through the real server: a scripted upstream answers
//! with known usage, tokentap exports to a real OTLP receiver, and the
//! admin listener serves `/api/sessions`. Every default agent header, a
//! configured header and a body field name the session; each span carries
//! `gen_ai.conversation.id`; a session's rollup equals the sum of its
//! spans' `gen_ai.usage.*` and cost; the id never becomes a metric label.
#![allow(
    clippy::disallowed_methods,
    reason = "tests set deadlines with the clock"
)]
#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

mod support;

use std::net::SocketAddr;
use std::time::Duration;

use http::Method;
use serde_json::json;
use support::STEP_TIMEOUT;
use support::client::{self, Req};
use support::inspect::scrape;
use support::otlp::SpanRec;
use support::proxy::{Toml, q};
use support::rig::Rig;
use support::script::{self, StreamSpec};

use support::CHAT;
const CONVERSATION_ID: &str = "gen_ai.conversation.id";

/// The usage the upstream reports for each model: (input, output).
fn usage_of(model: &str) -> (u64, u64) {
    match model {
        "gpt-4o-mini" => (500, 50),
        _ => (1000, 200),
    }
}

/// A rig whose upstream streams OpenAI chat with `usage_of` the model,
/// with an admin listener and `extra` applied to the config.
async fn rig(extra: impl FnOnce(Toml) -> Toml) -> Rig {
    Rig::start(
        |ex| {
            let model = ex.json()["model"].as_str().unwrap_or("gpt-4o").to_owned();
            let (input, output) = usage_of(&model);
            let spec = StreamSpec::tokens(4, Duration::from_millis(30), Duration::from_millis(2))
                .with_usage(input, output)
                .model(&model);
            script::openai_chat_sse(&spec)
        },
        |t, up| {
            extra(
                t.top("admin_listen", &q("127.0.0.1:0"))
                    .route("openai", "/", up, "openai"),
            )
        },
    )
    .await
}

fn admin(rig: &Rig) -> SocketAddr {
    rig.proxy.running().unwrap().admin_addr.unwrap()
}

async fn get(admin: SocketAddr, path: &str) -> client::Streamed {
    let req = Req {
        method: Method::GET,
        url: format!("http://{admin}{path}"),
        headers: Vec::new(),
        body: bytes::Bytes::new(),
    };
    client::fetch(&client::http1(), &req).await
}

/// `/api/sessions` once it counts `requests` requests in all (rollups
/// are written when each request finishes).
async fn sessions(admin: SocketAddr, requests: u64) -> serde_json::Value {
    let deadline = tokio::time::Instant::now() + STEP_TIMEOUT;
    loop {
        let got = get(admin, "/api/sessions").await;
        assert_eq!(got.status, 200, "/api/sessions: {}", got.text());
        let json = got.json();
        let seen: u64 = json["sessions"]
            .as_array()
            .map(|s| s.iter().filter_map(|x| x["requests"].as_u64()).sum())
            .unwrap_or(0);
        if seen >= requests {
            return json;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "/api/sessions never counted {requests} requests: {json:#}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn send(rig: &Rig, body: Vec<u8>, headers: &[(&str, &str)]) {
    let mut req = rig.post(CHAT, body);
    for (k, v) in headers {
        req = req.header(k, v);
    }
    let got = client::fetch(&rig.client, &req).await;
    assert_eq!(got.status, 200, "through the proxy: {}", got.text());
    assert!(got.text().contains("[DONE]"), "the stream finished");
}

fn conversation(s: &SpanRec) -> Option<&str> {
    s.attrs.get(CONVERSATION_ID).and_then(|v| v.as_str())
}

#[tokio::test]
async fn every_default_agent_header_names_the_session() {
    let mut rig = rig(|t| t).await;
    let headers = [
        "x-claude-code-session-id",
        "session_id",
        "conversation_id",
        "x-session-affinity",
        "x-litellm-session-id",
    ];
    for (i, name) in headers.iter().enumerate() {
        let id = format!("agent-{i}-{name}");
        send(
            &rig,
            script::openai_request("gpt-4o", true, None),
            &[(name, &id)],
        )
        .await;
    }
    send(&rig, script::openai_request("gpt-4o", true, None), &[]).await;
    let listed = sessions(admin(&rig), headers.len() as u64).await;
    let ids: Vec<&str> = listed["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["id"].as_str())
        .collect();
    for (i, name) in headers.iter().enumerate() {
        let id = format!("agent-{i}-{name}");
        assert!(ids.contains(&id.as_str()), "{name}: {id} listed in {ids:?}");
    }
    assert_eq!(ids.len(), headers.len(), "no session without a header");
    assert_eq!(
        ids[0], "agent-4-x-litellm-session-id",
        "newest (last seen) first: {ids:?}"
    );
    let spans = rig.finish_n(headers.len() + 1).await;
    let mut named: Vec<&str> = spans.iter().filter_map(conversation).collect();
    named.sort_unstable();
    let mut want: Vec<String> = headers
        .iter()
        .enumerate()
        .map(|(i, n)| format!("agent-{i}-{n}"))
        .collect();
    want.sort_unstable();
    assert_eq!(named, want, "each span carries its session id");
    assert_eq!(
        spans.iter().filter(|s| conversation(s).is_none()).count(),
        1,
        "the request without a session header has no gen_ai.conversation.id"
    );
}

#[tokio::test]
async fn a_configured_header_and_a_body_field_name_the_session() {
    let mut rig = rig(|t| {
        t.set("sessions", "sources", r#"["header", "body", "agents"]"#)
            .set("sessions", "header", &q("x-my-session"))
            .set("sessions", "body_field", &q("metadata.session_id"))
    })
    .await;
    let body_with = |session: &str| {
        serde_json::to_vec(&json!({
            "model": "gpt-4o",
            "stream": true,
            "stream_options": {"include_usage": true},
            "metadata": {"user_id": "u-1", "session_id": session},
            "messages": [{"role": "user", "content": "hi"}],
        }))
        .unwrap()
    };
    let plain = || script::openai_request("gpt-4o", true, None);
    send(&rig, plain(), &[("x-my-session", "from-header")]).await;
    send(&rig, body_with("from-body"), &[]).await;
    // Sources are tried in order: the header before the body.
    send(
        &rig,
        body_with("ignored"),
        &[("x-my-session", "from-header")],
    )
    .await;
    // A header value that is not printable ASCII is refused: the next
    // source (the body) names the session.
    send(
        &rig,
        body_with("from-body"),
        &[("x-my-session", "tab\there")],
    )
    .await;
    send(
        &rig,
        plain(),
        &[("x-claude-code-session-id", "from-agent-header")],
    )
    .await;
    let listed = sessions(admin(&rig), 5).await;
    let requests = |id: &str| {
        listed["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["id"] == id)
            .and_then(|s| s["requests"].as_u64())
    };
    assert_eq!(requests("from-header"), Some(2), "{listed:#}");
    assert_eq!(requests("from-body"), Some(2), "{listed:#}");
    assert_eq!(requests("from-agent-header"), Some(1), "{listed:#}");
    assert_eq!(requests("ignored"), None, "{listed:#}");
    let spans = rig.finish_n(5).await;
    let mut named: Vec<&str> = spans.iter().filter_map(conversation).collect();
    named.sort_unstable();
    assert_eq!(
        named,
        [
            "from-agent-header",
            "from-body",
            "from-body",
            "from-header",
            "from-header"
        ]
    );
}

#[tokio::test]
async fn a_sessions_rollup_is_the_sum_of_its_spans_and_never_a_metric_label() {
    let mut rig = rig(|t| t).await;
    let session = "rollup-7f3a";
    let models = ["gpt-4o", "gpt-4o-mini", "gpt-4o"];
    for model in models {
        send(
            &rig,
            script::openai_request(model, true, None),
            &[("x-claude-code-session-id", session)],
        )
        .await;
    }
    send(
        &rig,
        script::openai_request("gpt-4o", true, None),
        &[("x-claude-code-session-id", "someone-else")],
    )
    .await;
    let admin = admin(&rig);
    sessions(admin, 4).await;
    let one = get(admin, &format!("/api/sessions?id={session}")).await;
    assert_eq!(one.status, 200, "{}", one.text());
    let s = one.json();
    assert_eq!(s["id"], session, "{s:#}");
    assert_eq!(s["requests"], 3, "{s:#}");
    assert_eq!(s["errors"], 0, "{s:#}");
    let wait = s["wait_seconds"].as_f64().unwrap();
    let ttft = s["ttft_p50_seconds"].as_f64().unwrap();
    assert!(
        ttft >= 0.03 / 1.13 && ttft < wait,
        "TTFT p50 {ttft} s: the upstream waits 30 ms; the session waited {wait} s"
    );
    for key in ["first_seen", "last_seen"] {
        assert!(
            s[key].as_str().is_some_and(|t| t.ends_with('Z')),
            "{key} is an RFC 3339 time: {s:#}"
        );
    }
    let unknown = get(admin, "/api/sessions?id=nobody").await;
    assert_eq!(unknown.status, 404, "{}", unknown.text());
    assert_eq!(unknown.json()["error"]["code"], "unknown_session");
    let by_cost = get(admin, "/api/sessions?sort=cost&limit=1").await.json();
    assert_eq!(
        by_cost["sessions"][0]["id"], session,
        "three requests cost more than one: {by_cost:#}"
    );
    assert_eq!(by_cost["sessions"].as_array().map(Vec::len), Some(1));
    assert_eq!(get(admin, "/api/sessions?sort=tokens").await.status, 400);

    // The id is on spans and in the rollup, never a metric label.
    let metrics = scrape(&client::http1(), admin).await;
    for (family, series) in metrics.series_per_family() {
        for labels in series {
            for (k, v) in labels {
                assert!(
                    !v.contains(session) && !v.contains("someone-else"),
                    "{family} has a session id as label {k}={v}"
                );
            }
        }
    }

    let spans = rig.finish_n(4).await;
    let mine: Vec<&SpanRec> = spans
        .iter()
        .filter(|x| conversation(x) == Some(session))
        .collect();
    assert_eq!(mine.len(), 3, "three spans of the session");
    let sum = |key: &str| -> f64 {
        mine.iter()
            .map(|x| x.attrs.get(key).and_then(|v| v.as_f64()).unwrap_or(0.0))
            .sum()
    };
    for (field, key) in [
        ("input_tokens", "gen_ai.usage.input_tokens"),
        ("output_tokens", "gen_ai.usage.output_tokens"),
    ] {
        assert_eq!(
            s[field].as_f64().unwrap(),
            sum(key),
            "{field} is the sum of the spans' {key}"
        );
    }
    assert_eq!(
        s["input_tokens"], 2500,
        "1000 + 500 + 1000 reported by the upstream"
    );
    assert_eq!(s["output_tokens"], 450);
    let cost = s["cost_usd"].as_f64().unwrap();
    let spans_cost = sum("tokentap.cost.amount");
    assert!(spans_cost > 0.0, "the models are priced");
    assert!(
        (cost - spans_cost).abs() <= spans_cost * 1e-12,
        "cost_usd {cost} is the sum of the spans' tokentap.cost.amount {spans_cost}"
    );
    let durations: f64 = mine
        .iter()
        .map(|x| (x.end_ns - x.start_ns) as f64 / 1e9)
        .sum();
    assert!(
        (wait - durations).abs() < 0.005,
        "wait_seconds {wait} is the sum of the spans' durations {durations}"
    );
}
