//! Secrets never leave (DESIGN hard rule 5), checked end to end against the
//! real `tokentap` binary.
//!
//! Guarantee: credentials sent in every header tokentap knows as a
//! credential (`Authorization` Bearer and SigV4, `x-api-key`, `api-key`,
//! `x-goog-api-key`, Azure APIM's `ocp-apim-subscription-key`,
//! `proxy-authorization`, `cookie`, `x-amz-security-token`, a configured
//! `telemetry.redact_headers` entry) and in query strings (`?key=`,
//! `?api-key=`, `?access_token=`), plus the secrets in tokentap's own
//! configuration (SigV4 secret key and session token, tenant salt), appear
//! nowhere tokentap writes: not in exported spans or metrics (decoded, and
//! the raw OTLP bytes), not in the process's logs at `debug` level with the
//! access log on, not in the admin endpoints (`/metrics`, `/config`,
//! `/api/live`, the dashboard), and not in any response tokentap made —
//! over every path a request can take: success (HTTP/1.1 and h2c), upstream
//! 4xx and 5xx, connect refused (502), upstream timeout (504), no route
//! (404), refused framing (400), and a SigV4 re-signed route. An API-key
//! tenant is a salted hash, never the key. (This file absorbed the earlier
//! `secrets_appear_nowhere_in_exported_telemetry` and `logs_carry_no_secrets`
//! tests, which covered the success path only.)

mod support;

use std::time::Duration;

use http::Method;
use support::client::{self, Req, Streamed};
use support::otlp::{Collector, SpanRec};
use support::proxy::{Bin, Toml, q};
use support::raw;
use support::script::{self, StreamSpec};
use support::upstream::{Exchange, Reply, Upstream};
use support::{STEP_TIMEOUT, within};

/// Every secret contains this marker; finding it anywhere is a leak.
const MARK: &str = "ZZSECRETZZ";
const QUERY: &str =
    "?key=ZZSECRETZZ-qkey&api-key=ZZSECRETZZ-qapikey&access_token=ZZSECRETZZ-qtoken";
use support::CHAT;

fn secret_headers() -> Vec<(&'static str, String)> {
    vec![
        ("authorization", format!("Bearer sk-{MARK}-bearer")),
        ("x-api-key", format!("sk-ant-{MARK}-xapikey")),
        ("api-key", format!("{MARK}-azure")),
        ("x-goog-api-key", format!("{MARK}-goog")),
        ("ocp-apim-subscription-key", format!("{MARK}-apim")),
        ("proxy-authorization", format!("Basic {MARK}-proxyauth")),
        ("cookie", format!("session={MARK}-cookie")),
        ("x-amz-security-token", format!("{MARK}-amz-token")),
        ("x-custom-secret", format!("{MARK}-custom")),
    ]
}

/// A SigV4 `Authorization` a client would send (its signature is the secret).
fn sigv4_authorization() -> String {
    format!(
        "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20250101/us-east-1/bedrock/aws4_request, \
         SignedHeaders=host;x-amz-date, Signature={MARK}0123456789abcdef"
    )
}

/// The upstream's answer by route (the route prefix is kept as a base path).
fn reply_for(e: &Exchange) -> Reply {
    let p = e.path_and_query.as_str();
    let spec = StreamSpec::tokens(3, Duration::ZERO, Duration::from_millis(2));
    if p.starts_with("/e4") {
        script::openai_error(401, "invalid_request_error", "invalid_api_key", "bad key")
    } else if p.starts_with("/e5") {
        script::openai_error(500, "server_error", "internal", "upstream broke")
    } else if p.starts_with("/slow") {
        script::openai_chat_json("gpt-4o-mini", "late", (1, 1)).head_delay(Duration::from_secs(5))
    } else if p.starts_with("/bedrock") {
        script::json_reply(
            200,
            serde_json::json!({"output":{"message":{"role":"assistant","content":[{"text":"hi"}]}},
                "usage":{"inputTokens":3,"outputTokens":1,"totalTokens":4},"stopReason":"end_turn"}),
        )
    } else {
        script::openai_chat_sse(&spec)
    }
}

fn config(up: &str, refused: &str, col: &Collector) -> Toml {
    let route = |name: &str, upstream: &str, provider: &str| {
        format!(
            "[[routes]]\nname = {}\nprefix = {}\nupstream = {}\nprovider = {}\n",
            q(name),
            q(&format!("/{name}")),
            q(upstream),
            q(provider)
        )
    };
    let mut toml = Toml::new()
        .otlp(&col.endpoint(), "grpc")
        .set("telemetry", "access_log", "true")
        .set("telemetry", "redact_headers", "[\"x-custom-secret\"]")
        .set("tenant", "sources", "[\"api_key\"]")
        .set("tenant", "salt", &q(&format!("{MARK}-salt")))
        .set("upstream", "idle_timeout", &q("1s"));
    for name in ["ok", "e4", "e5", "slow"] {
        toml = toml.raw_route(&route(name, &format!("{up}/{name}"), "openai"));
    }
    toml.raw_route(&route("refused", refused, "openai"))
        .raw_route(&format!(
            "{}\n[routes.sigv4]\nregion = \"us-east-1\"\naccess_key_id = \"AKIDEXAMPLE\"\n\
             secret_access_key = {}\nsession_token = {}\n",
            route("bedrock", &format!("{up}/bedrock"), "bedrock"),
            q(&format!("{MARK}-aws-secret-key")),
            q(&format!("{MARK}-aws-session"))
        ))
}

/// A request to `path` (plus the secret query) carrying every secret header.
fn with_secrets(addr: std::net::SocketAddr, path: &str, body: Vec<u8>) -> Req {
    let mut req = Req::post_json(addr, &format!("{path}{QUERY}"), body);
    for (k, v) in secret_headers() {
        req = req.header(k, &v);
    }
    req
}

/// Everything a client can see of a response.
fn seen(got: &Streamed) -> String {
    let mut s = format!("{}\n", got.status);
    for (k, v) in &got.headers {
        s.push_str(&format!("{k}: {}\n", String::from_utf8_lossy(v.as_bytes())));
    }
    s.push_str(&got.text());
    s
}

#[track_caller]
fn assert_clean(place: &str, text: &str) {
    if let Some(at) = text.find(MARK) {
        let lo = text[..at]
            .char_indices()
            .rev()
            .nth(120)
            .map_or(0, |(i, _)| i);
        let hi = (at + 80).min(text.len());
        panic!(
            "a secret leaked into {place}: …{}…",
            text.get(lo..hi).unwrap_or(&text[at..])
        );
    }
}

#[tokio::test]
async fn secrets_appear_nowhere_on_any_path() {
    let up = Upstream::start(reply_for).await;
    let col = Collector::start().await;
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a port to close");
    let refused = format!("http://{}", closed.local_addr().expect("addr"));
    drop(closed);
    let bin = Bin::start(
        &config(&up.url(), &refused, &col),
        &["--admin-listen", "127.0.0.1:0"],
        &[("RUST_LOG", "debug,tokentap=trace")],
    )
    .await;
    let admin = bin.admin_addr().await;
    let (http, h2) = (client::http1(), client::h2c());
    let chat = || script::openai_request("gpt-4o-mini", true, None);

    let mut responses = Vec::new();
    let cases: [(&str, u16); 7] = [
        ("/ok", 200),
        ("/e4", 401),
        ("/e5", 500),
        ("/slow", 504),
        ("/refused", 502),
        ("/nowhere", 404),
        ("/bedrock", 200),
    ];
    for (prefix, want) in cases {
        let path = if prefix == "/bedrock" {
            "/bedrock/model/anthropic.claude-3-haiku/converse".to_owned()
        } else {
            format!("{prefix}{CHAT}")
        };
        let mut req = with_secrets(bin.addr, &path, chat());
        if prefix == "/bedrock" {
            req.headers.retain(|(k, _)| k != "authorization");
            req = req.header("authorization", &sigv4_authorization());
        }
        let got = client::fetch(&http, &req).await;
        assert_eq!(got.status, want, "{path}: {}", got.text());
        responses.push((path, seen(&got)));
    }
    let got = client::fetch(&h2, &with_secrets(bin.addr, &format!("/ok{CHAT}"), chat())).await;
    assert_eq!(got.status, 200, "h2c: {}", got.text());
    responses.push(("h2c /ok".into(), seen(&got)));

    // Refused framing, over a raw socket (by tokentap, then by hyper itself).
    let mut head = format!("POST /ok{CHAT}{QUERY} HTTP/1.1\r\nHost: t\r\n");
    for (k, v) in secret_headers() {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    for framing in [
        "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n",
        "Transfer-Encoding: gzip, chunked\r\n",
        "Content-Length: 5, 6\r\n",
    ] {
        let request = format!("{head}{framing}\r\n0\r\n\r\n");
        let got = raw::exchange(bin.addr, request.as_bytes(), STEP_TIMEOUT).await;
        assert_eq!(got.status(), 400, "{framing:?}: {}", got.text());
        responses.push((format!("refused {framing:?}"), got.text()));
    }

    let forwarded = up.nth(1).await;
    assert_eq!(
        forwarded.header("x-api-key").as_deref(),
        Some(format!("sk-ant-{MARK}-xapikey").as_str()),
        "credentials are still forwarded to the upstream"
    );
    assert!(
        forwarded.path_and_query.contains(QUERY),
        "query forwarded verbatim"
    );

    let mut admin_pages = Vec::new();
    for page in ["/metrics", "/config", "/api/live", "/"] {
        let req = Req {
            method: Method::GET,
            url: format!("http://{admin}{page}"),
            headers: Vec::new(),
            body: Default::default(),
        };
        let got = client::fetch(&http, &req).await;
        assert_eq!(got.status, 200, "admin {page}");
        admin_pages.push((page, got.text()));
    }

    let output = bin.stop().await;
    // Spans: the seven forwarded requests (ok ×2, e4, e5, slow, refused, bedrock).
    let spans = within(STEP_TIMEOUT, "seven exported spans", async {
        loop {
            let spans = col.spans();
            if spans.len() >= 7 {
                return spans;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;

    // Positive controls: each place searched holds real content.
    assert!(
        output.contains("tokentap::access"),
        "access log on:\n{output}"
    );
    assert!(output.contains("DEBUG"), "debug logging on");
    let metrics = &admin_pages[0].1;
    assert!(
        metrics.contains("gen_ai_client_inference_duration"),
        "{metrics}"
    );
    let cfg = &admin_pages[1].1;
    assert!(
        cfg.contains("<redacted>"),
        "/config shows redactions:\n{cfg}"
    );
    let raw_otlp = String::from_utf8_lossy(&col.raw_bytes()).into_owned();
    assert!(
        raw_otlp.contains("gpt-4o-mini"),
        "raw OTLP bytes were captured"
    );
    let tenants: Vec<&str> = spans
        .iter()
        .map(|s| s.str(support::names::TENANT))
        .collect();
    assert!(
        tenants.iter().any(|t| !t.is_empty()),
        "an API-key tenant was derived: {tenants:?}"
    );
    assert!(
        tenants.iter().all(|t| !t.contains("sk-")),
        "tenants are salted hashes, not keys: {tenants:?}"
    );

    for (what, text) in &responses {
        assert_clean(&format!("the response to {what}"), text);
    }
    for (page, text) in &admin_pages {
        assert_clean(&format!("admin {page}"), text);
    }
    assert_clean("the proxy's logs", &output);
    assert_clean("the raw OTLP payloads", &raw_otlp);
    for s in spans.iter().flat_map(SpanRec::all_strings) {
        assert_clean("a span", &s);
    }
    for s in col.metric_points().iter().flat_map(|p| p.all_strings()) {
        assert_clean("a metric point", &s);
    }
}
