//! Shared state on a real `redis-server` with two (and three) real
//! tokentap processes exporting to one OTLP receiver: a background
//! response streamed, resumed and polled across replicas counts its usage
//! once, a batch result file downloaded through both counts once, a
//! session split across both shows all its requests and their exact cost
//! on either replica, and all of that survives a replica's restart. A
//! store killed mid-traffic costs nothing: every request is answered byte
//! for byte and exported (`tokentap.state = local`), a replica started
//! meanwhile serves, and sessions are fleet-wide again once the store is
//! back. Without a store, `[state] path` keeps one instance's ledger and
//! sessions across its restart. A `rediss://` store with its password in
//! `state.password_file` works the same, and the password is never shown.
#![allow(
    clippy::disallowed_methods,
    reason = "tests set deadlines with the clock"
)]
#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

mod support;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use http::Method;
use support::STEP_TIMEOUT;
use support::client::{self, Req};
use support::names::*;
use support::otlp::{Collector, SpanRec};
use support::proxy::{Bin, Scratch, Toml, q};
use support::redis::Redis;
use support::script::{self, StreamSpec};
use support::upstream::{Exchange, Reply, Upstream};

const ID: &str = "resp_68b1c0d2e3f48193a5b6c7d8e9f0a1b20c3d4e5f6a7b8c9d";
const FILE: &str = "/v1/files/file-6F2ksmvXxt4VdoqmHRw6kL/content";
const COUNTED: &str = "tokentap.usage.counted";
const STATE: &str = "tokentap.state";
const COST: &str = "tokentap.cost.amount";
const CONVERSATION_ID: &str = "gen_ai.conversation.id";
const RESPONSE_ID: &str = "gen_ai.response.id";
const SESSION_HEADER: &str = "x-claude-code-session-id";
const STREAM: &[u8] = include_bytes!("fixtures/openai/responses_background_stream.sse");
const RESUME: &[u8] = include_bytes!("fixtures/openai/responses_resume_stream.sse");
const DONE: &[u8] = include_bytes!("fixtures/openai/responses_background_completed.json");
const BATCH: &[u8] = include_bytes!("fixtures/openai/batch_output.jsonl");
/// The background fixtures' final usage.
const INPUT: f64 = 37.0;
const OUTPUT: f64 = 150.0;

fn sse(body: &'static [u8]) -> Reply {
    let mut r = Reply::new(200).header("content-type", "text/event-stream");
    for event in support::frames::sse(body) {
        r = r.send(event);
    }
    r
}

fn chat() -> Reply {
    let spec = StreamSpec::tokens(4, Duration::from_millis(20), Duration::from_millis(2))
        .with_usage(1000, 200)
        .model("gpt-4o");
    script::openai_chat_sse(&spec)
}

/// The scripted provider: background responses, a batch output file and
/// streamed chat completions.
async fn upstream() -> Upstream {
    Upstream::start(
        |ex: &Exchange| match (ex.method.as_str(), ex.path_and_query.as_str()) {
            ("POST", "/v1/responses") => sse(STREAM),
            ("GET", p) if p.contains("stream=true") => sse(RESUME),
            ("GET", p) if p.starts_with("/v1/responses/") => Reply::new(200)
                .header("content-type", "application/json")
                .send(DONE),
            ("GET", FILE) => Reply::new(200)
                .header("content-type", "application/octet-stream")
                .send(BATCH),
            ("POST", "/v1/chat/completions") => chat(),
            _ => Reply::new(404),
        },
    )
    .await
}

fn config(col: &Collector, up: &Upstream, state: (&str, &str)) -> Toml {
    Toml::new()
        .otlp(&col.endpoint(), "grpc")
        .top("admin_listen", &q("127.0.0.1:0"))
        .route("openai", "/", &up.url(), "openai")
        .set("state", state.0, &q(state.1))
}

/// One replica, its metrics told apart by `service.instance.id`.
async fn replica(toml: &Toml, name: &str) -> (Bin, SocketAddr) {
    let attrs = format!("service.instance.id={name}");
    let bin = Bin::start(toml, &[], &[("OTEL_RESOURCE_ATTRIBUTES", &attrs)]).await;
    let admin = bin.admin_addr().await;
    (bin, admin)
}

async fn fetch(req: &Req) -> client::Streamed {
    client::fetch(&client::http1(), req).await
}

async fn get(addr: SocketAddr, path: &str) -> client::Streamed {
    fetch(&Req::get(addr, path)).await
}

/// A chat request of `session` through `proxy`, checked byte for byte
/// against what the upstream sent.
async fn session_request(proxy: SocketAddr, session: &str) -> Duration {
    let body = script::openai_request("gpt-4o", true, None);
    let req = Req::post_json(proxy, "/v1/chat/completions", body).header(SESSION_HEADER, session);
    let started = tokio::time::Instant::now();
    let got = fetch(&req).await;
    let took = started.elapsed();
    assert_eq!(got.status, 200, "through {proxy}: {}", got.text());
    support::assert_bytes_eq("chat stream", &got.body, &chat().body_bytes());
    took
}

fn api(addr: SocketAddr, query: &str) -> Req {
    Req {
        method: Method::GET,
        url: format!("http://{addr}/api/sessions{query}"),
        headers: Vec::new(),
        body: bytes::Bytes::new(),
    }
}

/// `/api/sessions?id=…` once it shows `requests` requests.
async fn session(admin: SocketAddr, id: &str, requests: u64) -> serde_json::Value {
    let deadline = tokio::time::Instant::now() + STEP_TIMEOUT;
    loop {
        let got = fetch(&api(admin, &format!("?id={id}"))).await;
        let json = got.json();
        if got.status == 200 && json["requests"].as_u64() == Some(requests) {
            return json;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "session {id} on {admin} never showed {requests} requests: {} {json:#}",
            got.status
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The request spans (one per request), once `n` arrived.
async fn spans(col: &Collector, n: usize) -> Vec<SpanRec> {
    let deadline = tokio::time::Instant::now() + STEP_TIMEOUT;
    loop {
        let spans: Vec<SpanRec> = col
            .spans()
            .into_iter()
            .filter(|s| s.attrs.contains_key(OPERATION))
            .collect();
        if spans.len() >= n || tokio::time::Instant::now() >= deadline {
            assert_eq!(spans.len(), n, "one span per request");
            return spans;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Counter `name` summed over the replicas (each one's latest export).
fn fleet_total(col: &Collector, name: &str) -> f64 {
    let mut last: BTreeMap<String, usize> = BTreeMap::new();
    let points: Vec<_> = col
        .metric_points()
        .into_iter()
        .filter(|p| p.name == name)
        .collect();
    let instance = |p: &support::otlp::MetricPoint| {
        p.resource
            .get("service.instance.id")
            .and_then(|v| v.as_str())
            .unwrap_or("")
            .to_owned()
    };
    for p in &points {
        let at = last.entry(instance(p)).or_default();
        *at = (*at).max(p.batch);
    }
    points
        .iter()
        .filter(|p| last.get(&instance(p)) == Some(&p.batch))
        .map(|p| p.number())
        .sum()
}

fn sum(spans: &[&SpanRec], key: &str) -> f64 {
    spans
        .iter()
        .map(|s| s.attrs.get(key).and_then(|v| v.as_f64()).unwrap_or(0.0))
        .sum()
}

fn counted(spans: &[SpanRec], pick: impl Fn(&SpanRec) -> bool) -> Vec<(&str, &SpanRec)> {
    spans
        .iter()
        .filter(|s| pick(s))
        .map(|s| (s.str(COUNTED), s))
        .collect()
}

#[tokio::test]
async fn two_replicas_count_once_and_share_sessions_across_a_restart() {
    let mut redis = Redis::start().await;
    let up = upstream().await;
    let col = Collector::start().await;
    let toml = config(&col, &up, ("url", &redis.url()));
    let (a, admin_a) = replica(&toml, "a").await;
    let (b, admin_b) = replica(&toml, "b").await;

    // A background response: streamed through A, resumed through B,
    // polled through both.
    let create = br#"{"model":"o4-mini","background":true,"stream":true,"input":"hi"}"#;
    let got = fetch(&Req::post_json(a.addr, "/v1/responses", &create[..])).await;
    support::assert_bytes_eq("original stream", &got.body, STREAM);
    let resume = format!("/v1/responses/{ID}?stream=true&starting_after=11");
    support::assert_bytes_eq("resumed", &get(b.addr, &resume).await.body, RESUME);
    for proxy in [a.addr, b.addr] {
        let poll = get(proxy, &format!("/v1/responses/{ID}")).await;
        support::assert_bytes_eq("poll", &poll.body, DONE);
    }
    // One batch result file, downloaded through both.
    for proxy in [a.addr, b.addr] {
        support::assert_bytes_eq("batch file", &get(proxy, FILE).await.body, BATCH);
    }
    // A session, two requests through each replica.
    let sid = "fleet-5c1e";
    for proxy in [a.addr, b.addr, a.addr, b.addr] {
        session_request(proxy, sid).await;
    }
    let on_a = session(admin_a, sid, 4).await;
    let on_b = session(admin_b, sid, 4).await;
    assert_eq!(on_a, on_b, "both replicas show the fleet's session");
    let list = fetch(&api(admin_b, "?sort=cost")).await.json();
    assert_eq!(list["source"], "store", "{list:#}");
    assert_eq!(list["sessions"][0]["id"], sid, "{list:#}");

    // A restarts; the client polls and downloads again through it.
    a.stop().await;
    let (a2, admin_a2) = replica(&toml, "a2").await;
    let poll = get(a2.addr, &format!("/v1/responses/{ID}")).await;
    support::assert_bytes_eq("poll after the restart", &poll.body, DONE);
    support::assert_bytes_eq(
        "file after the restart",
        &get(a2.addr, FILE).await.body,
        BATCH,
    );
    let after = session(admin_a2, sid, 4).await;
    assert_eq!(after, on_b, "the restarted replica finds the session");
    a2.stop().await;
    b.stop().await;

    let spans = spans(&col, 4 + 2 + 4 + 2).await;
    let background = counted(&spans, |s| {
        s.attrs.get(RESPONSE_ID).and_then(|v| v.as_str()) == Some(ID)
    });
    assert_eq!(
        background.len(),
        5,
        "create, resume, two polls, a poll after the restart"
    );
    let firsts: Vec<_> = background.iter().filter(|(c, _)| *c == "first").collect();
    assert_eq!(
        firsts.len(),
        1,
        "counted once across replicas: {background:#?}"
    );
    assert!(
        background
            .iter()
            .all(|(c, _)| matches!(*c, "first" | "repeat"))
    );
    let b_spans: Vec<&SpanRec> = background.iter().map(|(_, s)| *s).collect();
    assert_eq!(
        sum(&b_spans, INPUT_TOKENS),
        INPUT,
        "input tokens once in the spans"
    );
    assert_eq!(
        sum(&b_spans, OUTPUT_TOKENS),
        OUTPUT,
        "output tokens once in the spans"
    );
    let files = counted(&spans, |s| {
        s.str(OPERATION) != "chat"
            && !s.attrs.contains_key(RESPONSE_ID)
            && s.attrs.contains_key(COUNTED)
    });
    let file_firsts = files.iter().filter(|(c, _)| *c == "first").count();
    assert_eq!(
        (files.len(), file_firsts),
        (3, 1),
        "three downloads, counted once: {files:#?}"
    );
    for s in spans
        .iter()
        .filter(|s| s.attrs.contains_key(COUNTED) || s.attrs.contains_key(CONVERSATION_ID))
    {
        assert_eq!(s.str(STATE), "store", "the store decided: {:#?}", s.attrs);
    }
    // Counters, added up over the replicas, agree with the spans.
    let all: Vec<&SpanRec> = spans.iter().collect();
    for (counter, key) in [(USAGE_INPUT, INPUT_TOKENS), (USAGE_OUTPUT, OUTPUT_TOKENS)] {
        assert_eq!(
            fleet_total(&col, counter),
            sum(&all, key),
            "{counter} over the fleet is the spans' {key}, each usage once"
        );
    }
    // The session's rollup is its spans, exactly.
    let mine: Vec<&SpanRec> = spans
        .iter()
        .filter(|s| s.attrs.get(CONVERSATION_ID).and_then(|v| v.as_str()) == Some(sid))
        .collect();
    assert_eq!(mine.len(), 4);
    assert_eq!(
        after["input_tokens"].as_f64(),
        Some(sum(&mine, INPUT_TOKENS))
    );
    assert_eq!(
        after["output_tokens"].as_f64(),
        Some(sum(&mine, OUTPUT_TOKENS))
    );
    let (cost, spans_cost) = (after["cost_usd"].as_f64().unwrap(), sum(&mine, COST));
    assert!(spans_cost > 0.0, "priced");
    assert!(
        (cost - spans_cost).abs() <= spans_cost * 1e-12,
        "cost_usd {cost} is the sum of the spans' {COST} {spans_cost}"
    );
    redis.stop().await;
}

#[tokio::test]
async fn a_dead_store_costs_nothing_and_sessions_come_back_with_it() {
    let mut redis = Redis::start().await;
    let up = upstream().await;
    let col = Collector::start().await;
    let toml = config(&col, &up, ("url", &redis.url()));
    let (a, admin_a) = replica(&toml, "a").await;
    let (b, _) = replica(&toml, "b").await;
    let mut sent = 0;
    for proxy in [a.addr, b.addr] {
        session_request(proxy, "before").await;
        sent += 1;
    }
    session(admin_a, "before", 2).await;

    // The store dies in the middle of traffic through both replicas.
    let (pa, pb) = (a.addr, b.addr);
    let traffic = tokio::spawn(async move {
        let mut slowest = Duration::ZERO;
        for i in 0..6 {
            let proxy = if i % 2 == 0 { pa } else { pb };
            slowest = slowest.max(session_request(proxy, "across").await);
        }
        slowest
    });
    tokio::time::sleep(Duration::from_millis(150)).await;
    redis.stop().await;
    let mut slowest = traffic.await.unwrap();
    sent += 6;
    for _ in 0..2 {
        for proxy in [a.addr, b.addr] {
            slowest = slowest.max(session_request(proxy, "during").await);
            sent += 1;
        }
    }
    // A replica started while the store is down serves.
    let (c, admin_c) = replica(&toml, "c").await;
    slowest = slowest.max(session_request(c.addr, "during").await);
    sent += 1;
    // Each request is the upstream's 4 chunks 20 ms apart (about 0.1 s).
    assert!(
        slowest < Duration::from_secs(2),
        "a dead store adds no delay: the slowest request took {slowest:?}"
    );
    let local = fetch(&api(admin_c, "")).await.json();
    assert_eq!(local["source"], "replica", "{local:#}");

    // The store returns (empty): sessions are fleet-wide again.
    redis.restart().await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(40);
    let mut round = 0;
    loop {
        round += 1;
        let sid = format!("after-{round}");
        for proxy in [a.addr, b.addr, c.addr] {
            session_request(proxy, &sid).await;
            sent += 1;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        let got = fetch(&api(admin_c, &format!("?id={sid}"))).await;
        let listed = fetch(&api(admin_a, "")).await.json();
        if got.status == 200 && got.json()["requests"] == 3 && listed["source"] == "store" {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "sessions never became fleet-wide again: {} {listed:#}",
            got.text()
        );
    }

    // Another program's data under tokentap's keys: an error in the log,
    // no crash.
    redis
        .command(&["SET", "tokentap:session:squatted", "not a hash"])
        .await
        .expect("redis-cli SET");
    session_request(a.addr, "squatted").await;
    sent += 1;
    let log = a.wait_output("holds data tokentap did not write", 1).await;
    assert!(log.contains("tokentap:session:squatted"), "{log}");
    session_request(a.addr, "still-serving").await;
    sent += 1;

    let down = a.output();
    assert!(
        down.contains("state store unavailable") && down.contains(&redis.url()),
        "a WARN names the store: {down}"
    );
    for bin in [a, b, c] {
        bin.stop().await;
    }
    let spans = spans(&col, sent).await;
    let during: Vec<&SpanRec> = spans
        .iter()
        .filter(|s| s.attrs.get(CONVERSATION_ID).and_then(|v| v.as_str()) == Some("during"))
        .collect();
    assert_eq!(
        during.len(),
        5,
        "every request while the store was down was exported"
    );
    let across = spans
        .iter()
        .filter(|s| s.attrs.get(CONVERSATION_ID).and_then(|v| v.as_str()) == Some("across"))
        .count();
    assert_eq!(
        across, 6,
        "every request around the store's death was exported"
    );
    assert!(
        during.iter().all(|s| s.str(STATE) == "local"),
        "each says it stayed in process: {during:#?}"
    );
    assert!(
        fleet_total(&col, "tokentap.state.errors") >= 1.0,
        "store errors are counted"
    );
    redis.stop().await;
}

#[tokio::test]
async fn a_single_instance_keeps_its_ledger_and_sessions_in_its_state_file() {
    let up = upstream().await;
    let col = Collector::start().await;
    let dir = Scratch::new("state-file");
    let path = dir.0.join("state.json");
    let toml = config(&col, &up, ("path", path.to_str().unwrap()));
    let (one, admin) = replica(&toml, "one").await;
    let out = one.output();
    assert!(out.contains("no state file yet"), "{out}");
    let poll = get(one.addr, &format!("/v1/responses/{ID}")).await;
    support::assert_bytes_eq("poll", &poll.body, DONE);
    for _ in 0..2 {
        session_request(one.addr, "kept").await;
    }
    let before = session(admin, "kept", 2).await;
    one.stop().await;
    assert!(path.is_file(), "the state file is written on drain");

    let (again, admin) = replica(&toml, "again").await;
    let read = again.wait_output("state file read back", 1).await;
    assert!(read.contains("sessions=1"), "{read}");
    assert_eq!(
        session(admin, "kept", 2).await,
        before,
        "the session is back"
    );
    let poll = get(again.addr, &format!("/v1/responses/{ID}")).await;
    support::assert_bytes_eq("poll after the restart", &poll.body, DONE);
    again.stop().await;
    let spans = spans(&col, 1 + 2 + 1).await;
    let polls = counted(&spans, |s| s.attrs.contains_key(COUNTED));
    let kinds: Vec<&str> = polls.iter().map(|(c, _)| *c).collect();
    assert_eq!(
        kinds,
        ["first", "repeat"],
        "counted once across the restart"
    );

    // A torn file is reported and ignored; the instance serves.
    std::fs::write(&path, br#"{"format":"tokentap-state","version":1,"led"#).unwrap();
    let (torn, _) = replica(&toml, "torn").await;
    let out = torn
        .wait_output("is torn or not a tokentap state file", 1)
        .await;
    assert!(out.contains("state.json"), "names the file: {out}");
    session_request(torn.addr, "fresh").await;
    torn.stop().await;
}

#[tokio::test]
async fn a_tls_store_with_a_password_file_is_shared_and_its_password_never_shown() {
    let dir = Scratch::new("state-tls");
    let ca = support::tls::TestCa::new();
    let ca_file = dir.write("ca.pem", ca.pem());
    let pem = support::tls::write_pem(&dir, "redis", &ca.leaf(&["localhost", "127.0.0.1"]));
    let password = "s3cret-store-pw";
    let mut redis = Redis::start_tls(&pem.cert, &pem.key, &ca_file, password).await;
    let password_file = dir.write("password", &format!("{password}\n"));
    let up = upstream().await;
    let col = Collector::start().await;
    let url = format!("rediss://localhost:{}", redis.addr.port());
    let toml = config(&col, &up, ("url", &url))
        .set(
            "state",
            "password_file",
            &q(password_file.to_str().unwrap()),
        )
        .set("upstream", "ca_file", &q(ca_file.to_str().unwrap()));
    let (a, admin_a) = replica(&toml, "a").await;
    let (b, admin_b) = replica(&toml, "b").await;
    for proxy in [a.addr, b.addr] {
        session_request(proxy, "over-tls").await;
    }
    let on_a = session(admin_a, "over-tls", 2).await;
    assert_eq!(
        on_a,
        session(admin_b, "over-tls", 2).await,
        "shared over TLS"
    );
    let listed = fetch(&api(admin_a, "")).await.json();
    assert_eq!(listed["source"], "store", "{listed:#}");
    let shown = get(admin_a, "/config").await.text();
    assert!(shown.contains("password_file"), "{shown}");
    assert!(
        !shown.contains(password),
        "/config shows no password: {shown}"
    );
    for bin in [a, b] {
        let out = bin.stop().await;
        assert!(!out.contains(password), "the log shows no password: {out}");
    }
    redis.stop().await;
}

#[tokio::test]
async fn the_store_bounds_the_fleets_sessions_by_max_sessions() {
    let mut redis = Redis::start().await;
    let up = upstream().await;
    let col = Collector::start().await;
    let toml = config(&col, &up, ("url", &redis.url())).set("sessions", "max_sessions", "2");
    let (a, admin_a) = replica(&toml, "a").await;
    let (b, admin_b) = replica(&toml, "b").await;
    for (proxy, sid) in [(a.addr, "oldest"), (b.addr, "middle"), (a.addr, "newest")] {
        session_request(proxy, sid).await;
        // Apart in time, so the order of last_seen is the order sent.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    session(admin_b, "newest", 1).await;
    let listed = fetch(&api(admin_b, "")).await.json();
    assert_eq!(listed["source"], "store", "{listed:#}");
    assert_eq!(
        (listed["kept"].as_u64(), listed["evicted"].as_u64()),
        (Some(2), Some(1)),
        "{listed:#}"
    );
    let ids: Vec<&str> = listed["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["id"].as_str())
        .collect();
    assert_eq!(
        ids,
        ["newest", "middle"],
        "the least recently seen was evicted fleet-wide"
    );
    let gone = fetch(&api(admin_a, "?id=oldest")).await;
    assert_eq!(gone.status, 404, "{}", gone.text());
    for bin in [a, b] {
        bin.stop().await;
    }
    redis.stop().await;
}
