//! Upstream faults, end to end: for each way an upstream can fail, what the
//! client gets and the single measurement tokentap exports.
//!
//! Every test checks three things: the client-visible result (the
//! upstream's own status and body bytes where it sent a response, else
//! tokentap's OpenAI-shaped JSON error with a specific `code`), exactly one
//! span per request with the right `tokentap.outcome` and `error.type`
//! (and a `tokentap.requests` total equal to the requests made), and how
//! often the upstream saw the request (never more than once).
//!
//! Guarantees, one per test:
//! - `reset_or_close_before_the_head_is_502_upstream_reset_and_not_retried`:
//!   the upstream reads the whole request, then resets (SO_LINGER 0) or
//!   closes → 502 `upstream_reset`; even with `connect_retries` set the
//!   upstream sees one connection and one request.
//! - `malformed_head_is_502_upstream_protocol_error`: an unparsable
//!   response head → 502 `upstream_protocol_error`, sent once.
//! - `reset_mid_stream_cuts_the_client_stream`: a TCP reset after two SSE
//!   chunks → the client has the exact bytes sent so far, then the stream
//!   breaks off (no terminating chunk); `upstream_aborted`, partial tokens.
//! - `tls_certificate_for_another_name_is_502_without_fallback`: a
//!   certificate for another name (CA trusted), or for the right name from
//!   an untrusted CA → 502 `upstream_tls_error`; no HTTP request is ever
//!   sent (no insecure or plaintext fallback), TLS failures are not retried
//!   even with `connect_retries`, and the SNI sent was the upstream host.
//! - `tls_certificate_for_the_upstream_host_succeeds`: the same CA, a
//!   certificate for `localhost`, upstream `https://localhost:PORT` → 200
//!   with the upstream's bytes; the SNI the server saw was `localhost`.
//! - `h2_rst_stream_mid_stream_cuts_the_client_stream` and
//!   `h2_goaway_mid_stream_cuts_the_client_stream`: an HTTP/2 upstream (TLS,
//!   ALPN h2, on the `h2` crate) sends RST_STREAM or GOAWAY(INTERNAL_ERROR)
//!   after two DATA frames → HTTP/1 and h2c clients get the exact bytes
//!   sent, then a broken stream; one `upstream_aborted` measurement each.
//! - `h2_rst_stream_before_the_head_is_502_upstream_reset`.
//! - `error_statuses_with_bodies_pass_through_untouched_and_once`: 429,
//!   500, 502, 503, 504 with JSON, HTML and plain bodies → the same status,
//!   content type and body bytes (never replaced by tokentap's own error),
//!   `error.type` from the body (or the status), one upstream request each
//!   with `connect_retries` set. (`tests/proxy_faults.rs` covers streamed
//!   429 with `retry-after`, Anthropic 500, connection refused, 504 on a
//!   silent upstream and a scripted abort mid-stream.)
//! - `connect_retries_recover_from_connections_dropped_in_the_handshake`:
//!   a TLS upstream resets its first two connections before the handshake;
//!   with `connect_retries = 2` the third attempt serves the request (one
//!   request, three connections); with 1 it is 502 `upstream_unreachable`
//!   after exactly two connections and no request.
//! - `connect_retries_wait_for_an_upstream_that_comes_up`: nothing listens
//!   at first; the upstream binds 250 ms later → 200, one request.
//! - `connect_retries_are_bounded`: a dead port with 2 retries → 502
//!   `upstream_unreachable`, after at least the two backoff waits.
//! - `a_pooled_connection_closed_by_the_upstream_is_not_reused`: hyper's
//!   own `retry_canceled_requests` never sends a request twice: after the
//!   upstream closes an idle keep-alive connection, the next request goes
//!   out once, on a new connection.
#![allow(
    clippy::disallowed_methods,
    reason = "tests time requests and set deadlines with the wall clock"
)]
#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

mod support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use support::client::{self, HttpClient, Req, Streamed};
use support::faulty::{self, Act, H2Act, RawUpstream};
use support::names::*;
use support::otlp::{Collector, SpanRec};
use support::proxy::{InProc, Scratch, Toml, q};
use support::script::{self, StreamSpec};
use support::tls::{TestCa, TlsUpstream};
use support::upstream::Reply;
use support::{STEP_TIMEOUT, assert_bytes_eq, within};

use support::CHAT;

/// An OTLP receiver and tokentap with one OpenAI route to `upstream`.
struct Front {
    col: Collector,
    proxy: InProc,
    client: HttpClient,
}

/// What one request should have been recorded as.
struct Want<'a> {
    model: &'a str,
    outcome: &'a str,
    error_type: Option<&'a str>,
}

fn failed<'a>(model: &'a str, error_type: &'a str) -> Want<'a> {
    Want {
        model,
        outcome: "upstream_error",
        error_type: Some(error_type),
    }
}

fn complete(model: &str) -> Want<'_> {
    Want {
        model,
        outcome: "complete",
        error_type: None,
    }
}

impl Front {
    async fn start(upstream: &str, config: impl FnOnce(Toml) -> Toml) -> Front {
        let col = Collector::start().await;
        // One serving thread: these tests count upstream connections, and
        // a client connection opened after an error may land on another
        // thread, which pools connections of its own.
        let toml = Toml::new()
            .set("server", "threads", "1")
            .otlp(&col.endpoint(), "grpc")
            .route("openai", "/", upstream, "openai");
        let proxy = InProc::start(&config(toml)).await;
        Front {
            col,
            proxy,
            client: client::http1(),
        }
    }

    fn req(&self, model: &str, stream: bool) -> Req {
        Req::post_json(
            self.proxy.addr,
            CHAT,
            script::openai_request(model, stream, None),
        )
    }

    async fn chat(&self, model: &str, stream: bool) -> Streamed {
        client::fetch(&self.client, &self.req(model, stream)).await
    }

    /// Stop the proxy (which flushes telemetry), then check each request
    /// left exactly one span with its outcome and `error.type`, and that
    /// `tokentap.requests` counted exactly these requests.
    async fn finish(mut self, want: &[Want<'_>]) -> Vec<SpanRec> {
        self.proxy.stop().await;
        let mut spans = Vec::new();
        for w in want {
            let name = format!("chat {}", w.model);
            let span = self.col.wait_span_named(&name).await;
            let n = self.col.spans().iter().filter(|s| s.name == name).count();
            assert_eq!(n, 1, "exactly one span per request: {n} named {name:?}");
            assert_eq!(span.str(OUTCOME), w.outcome, "{name}: outcome");
            assert_eq!(
                span.attrs.get(ERROR_TYPE).and_then(|v| v.as_str()),
                w.error_type,
                "{name}: error.type; attributes {:#?}",
                span.attrs
            );
            spans.push(span);
        }
        let points = self.col.latest(REQUESTS);
        let total: f64 = points.iter().map(|p| p.number()).sum();
        assert_eq!(
            total,
            want.len() as f64,
            "tokentap.requests should count each request once: {points:#?}"
        );
        for w in want {
            let n: f64 = points
                .iter()
                .filter(|p| p.attr_str(REQUEST_MODEL) == Some(w.model))
                .inspect(|p| {
                    assert_eq!(
                        p.attr_str(OUTCOME),
                        Some(w.outcome),
                        "{}: metric outcome",
                        w.model
                    );
                    assert_eq!(
                        p.attr_str(ERROR_TYPE),
                        w.error_type,
                        "{}: metric error.type",
                        w.model
                    );
                })
                .map(|p| p.number())
                .sum();
            assert_eq!(n, 1.0, "{}: one tokentap.requests count", w.model);
        }
        spans
    }
}

/// Retries on, with a short backoff, for tests that prove none happens.
fn with_retries(t: Toml) -> Toml {
    t.set("upstream", "connect_retries", "3")
        .set("upstream", "connect_retry_backoff", &q("20ms"))
}

/// tokentap's own error: `status`, JSON in the OpenAI error shape, `code`.
#[track_caller]
fn assert_proxy_error(got: &Streamed, status: u16, code: &str) -> String {
    assert_eq!(got.status, status, "status; body {:?}", got.text());
    let ct = got
        .headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    assert!(ct.starts_with("application/json"), "content-type {ct:?}");
    let v = got.json();
    let err = &v["error"];
    assert_eq!(err["code"], code, "error.code in {v}");
    assert_eq!(err["type"], "tokentap_error", "error.type in {v}");
    let message = err["message"].as_str().unwrap_or_default().to_owned();
    assert!(
        message.starts_with("tokentap: "),
        "error.message names tokentap: {v}"
    );
    message
}

/// An SSE stream cut into the part sent before a fault (role chunk and
/// two content chunks) and the rest, which is never sent.
fn sse_before_cut() -> (Vec<Bytes>, usize) {
    let spec = StreamSpec::tokens(6, Duration::ZERO, Duration::ZERO);
    let body = script::openai_chat_sse(&spec).body_bytes();
    let text = String::from_utf8(body).unwrap();
    let events: Vec<Bytes> = text
        .split_inclusive("\n\n")
        .take(3)
        .map(|e| Bytes::from(e.to_owned()))
        .collect();
    (events, 2)
}

/// A stream that broke off after exactly `sent`.
#[track_caller]
fn assert_cut(what: &str, got: &Streamed, sent: &[u8]) {
    assert_eq!(got.status, 200, "{what}: the head was already sent as 200");
    assert!(
        got.error.is_some(),
        "{what}: the client must see the stream break off, not end cleanly; got {:?}",
        got.text()
    );
    assert_bytes_eq(what, &got.body, sent);
}

fn sse_headers() -> Vec<(String, String)> {
    vec![("content-type".into(), "text/event-stream".into())]
}

#[tokio::test]
async fn reset_or_close_before_the_head_is_502_upstream_reset_and_not_retried() {
    for (how, last) in [("rst", Act::Reset), ("fin", Act::Close)] {
        let up = RawUpstream::start(move |_| vec![Act::ReadRequest, last.clone()]).await;
        let front = Front::start(&up.url(), with_retries).await;
        let model = format!("m-before-head-{how}");
        let got = front.chat(&model, true).await;
        let message = assert_proxy_error(&got, 502, "upstream_reset");
        assert!(
            message.contains("before the response head"),
            "{how}: message says when it failed: {message}"
        );
        front.finish(&[failed(&model, "upstream_reset")]).await;
        assert_eq!(
            up.connections(),
            1,
            "{how}: no second connection (no retry)"
        );
        let requests = up.requests();
        assert_eq!(
            requests.len(),
            1,
            "{how}: the request was sent exactly once"
        );
        assert!(
            String::from_utf8_lossy(&requests[0]).contains(&model),
            "{how}: the upstream got the whole request"
        );
    }
}

#[tokio::test]
async fn malformed_head_is_502_upstream_protocol_error() {
    let garbage = Bytes::from_static(b"HTTP/1.1 two hundred\r\n\r\n");
    let up = RawUpstream::start(move |_| vec![Act::ReadRequest, Act::Write(garbage.clone())]).await;
    let front = Front::start(&up.url(), with_retries).await;
    let got = front.chat("m-garbage", false).await;
    assert_proxy_error(&got, 502, "upstream_protocol_error");
    front
        .finish(&[failed("m-garbage", "upstream_protocol_error")])
        .await;
    assert_eq!(up.requests().len(), 1, "sent once");
}

/// The head, some events and the end of the connection all in one write:
/// the proxy reads them together, and the client must still get the head
/// and every byte before the break (hyper's server drops what it buffered
/// when a body fails at once; found by the soak).
#[tokio::test]
async fn a_break_in_the_same_read_as_the_head_still_forwards_what_came_before() {
    let (events, tokens) = sse_before_cut();
    let sent: Vec<u8> = events.concat();
    let mut all = faulty::chunked_head(200, "text/event-stream").to_vec();
    for e in &events {
        all.extend_from_slice(&faulty::chunk(e));
    }
    let all = Bytes::from(all);
    let up =
        RawUpstream::start(move |_| vec![Act::ReadRequest, Act::Write(all.clone()), Act::Close])
            .await;
    let front = Front::start(&up.url(), with_retries).await;
    let models: Vec<String> = (0..20).map(|i| format!("m-one-read-{i}")).collect();
    for model in &models {
        let got = front.chat(model, true).await;
        assert_cut(model, &got, &sent);
    }
    let want: Vec<Want<'_>> = models
        .iter()
        .map(|m| failed(m, "upstream_aborted"))
        .collect();
    let spans = front.finish(&want).await;
    for span in &spans {
        assert_eq!(
            span.num(OUTPUT_TOKENS),
            tokens as f64,
            "the tokens before the break are counted"
        );
    }
}

#[tokio::test]
async fn reset_mid_stream_cuts_the_client_stream() {
    let (events, tokens) = sse_before_cut();
    let sent: Vec<u8> = events.concat();
    let mut acts = vec![
        Act::ReadRequest,
        Act::Write(faulty::chunked_head(200, "text/event-stream")),
    ];
    acts.extend(events.iter().map(|e| Act::Write(faulty::chunk(e))));
    // Let the proxy read what was sent before the reset discards it.
    acts.extend([Act::Sleep(Duration::from_millis(100)), Act::Reset]);
    let up = RawUpstream::start(move |_| acts.clone()).await;
    let front = Front::start(&up.url(), with_retries).await;

    let got = front.chat("m-rst-mid", true).await;
    assert_cut("HTTP/1 client", &got, &sent);

    // The same on the wire: the chunked body has no terminating chunk.
    let body = script::openai_request("m-rst-mid-raw", true, None);
    let mut raw = format!(
        "POST {CHAT} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    raw.extend_from_slice(&body);
    let out = client::raw_http1(front.proxy.addr, &raw, STEP_TIMEOUT).await;
    let (status, headers, rest) = client::parse_raw_response(&out);
    assert_eq!(status, 200);
    assert!(
        headers
            .iter()
            .any(|(k, v)| k == "transfer-encoding" && v == "chunked"),
        "stream forwarded chunked: {headers:?}"
    );
    assert!(
        String::from_utf8_lossy(&rest).contains("tok1"),
        "the chunks sent reached the raw client"
    );
    assert!(
        !rest.ends_with(b"0\r\n\r\n"),
        "the connection must close without the terminating chunk; got {:?}",
        String::from_utf8_lossy(&rest)
    );

    let spans = front
        .finish(&[
            failed("m-rst-mid", "upstream_aborted"),
            failed("m-rst-mid-raw", "upstream_aborted"),
        ])
        .await;
    assert_eq!(
        spans[0].num(OUTPUT_TOKENS),
        tokens as f64,
        "partial output tokens: the content chunks that arrived"
    );
    assert_eq!(
        up.requests().len(),
        2,
        "one upstream request per client request"
    );
}

/// tokentap in front of a TLS upstream, trusting `ca` when given.
async fn tls_front(upstream: &str, ca: Option<&TestCa>, scratch: &Scratch, retries: u32) -> Front {
    let ca_file = ca.map(|ca| scratch.write("ca.pem", ca.pem()));
    Front::start(upstream, |t| {
        let t = t
            .set("upstream", "connect_retries", &retries.to_string())
            .set("upstream", "connect_retry_backoff", &q("20ms"));
        match &ca_file {
            Some(p) => t.set("upstream", "ca_file", &q(&p.display().to_string())),
            None => t,
        }
    })
    .await
}

/// A TLS upstream serving HTTP/1.1 with `reply`; counts requests.
async fn tls_h1(
    ca: &TestCa,
    names: &[&str],
    drop_first: usize,
    reply: Reply,
) -> (TlsUpstream, Arc<AtomicUsize>) {
    let requests = Arc::new(AtomicUsize::new(0));
    let r = requests.clone();
    let up = TlsUpstream::start(
        ca.server_config(names, &[b"http/1.1"]),
        drop_first,
        move |tls| faulty::serve_h1(tls, reply.clone(), r.clone()),
    )
    .await;
    (up, requests)
}

#[tokio::test]
async fn tls_certificate_for_another_name_is_502_without_fallback() {
    let ca = TestCa::new();
    let scratch = Scratch::new("tls-wrong");
    let reply = script::openai_chat_json("m", "must never be served", (1, 1));
    // (case, certificate names, CA trusted, what the message names)
    let cases = [
        (
            "wrong-name",
            ["upstream.invalid"],
            true,
            "not valid for name",
        ),
        ("untrusted-ca", ["localhost"], false, "UnknownIssuer"),
    ];
    for (case, names, trusted, says) in cases {
        let (up, requests) = tls_h1(&ca, &names, 0, reply.clone()).await;
        let front = tls_front(&up.url("localhost"), trusted.then_some(&ca), &scratch, 2).await;
        let model = format!("m-tls-{case}");
        let got = front.chat(&model, false).await;
        let message = assert_proxy_error(&got, 502, "upstream_tls_error");
        assert!(
            message.contains(says),
            "{case}: message {message:?} should name the certificate problem ({says})"
        );
        front.finish(&[failed(&model, "upstream_tls_error")]).await;
        assert_eq!(
            up.sni(),
            [Some("localhost".to_owned())],
            "{case}: one ClientHello, SNI = the upstream host"
        );
        assert_eq!(up.accepted(), 1, "{case}: a TLS failure is not retried");
        assert_eq!(up.handshakes(), 0, "{case}: the handshake must fail");
        assert_eq!(
            requests.load(Ordering::SeqCst),
            0,
            "{case}: no request may be sent over an unverified connection"
        );
    }
}

#[tokio::test]
async fn tls_certificate_for_the_upstream_host_succeeds() {
    let ca = TestCa::new();
    let scratch = Scratch::new("tls-right");
    let reply = script::openai_chat_json("m", "over verified TLS", (3, 4));
    let want = reply.body_bytes();
    let (up, requests) = tls_h1(&ca, &["localhost"], 0, reply).await;
    let front = tls_front(&up.url("localhost"), Some(&ca), &scratch, 0).await;
    let got = front.chat("m-tls-ok", false).await;
    assert_eq!(got.status, 200, "body {:?}", got.text());
    assert_bytes_eq("body over TLS", &got.body, &want);
    front.finish(&[complete("m-tls-ok")]).await;
    assert_eq!(
        up.sni(),
        [Some("localhost".to_owned())],
        "SNI = the upstream host"
    );
    assert_eq!(up.alpn(), [Some("http/1.1".to_owned())], "ALPN agreed");
    assert_eq!(requests.load(Ordering::SeqCst), 1);
}

/// An HTTP/2-only TLS upstream (ALPN h2) running `acts` on every stream.
async fn tls_h2(ca: &TestCa, acts: Vec<H2Act>) -> (TlsUpstream, Arc<AtomicUsize>) {
    let requests = Arc::new(AtomicUsize::new(0));
    let r = requests.clone();
    let up = TlsUpstream::start(ca.server_config(&["localhost"], &[b"h2"]), 0, move |tls| {
        faulty::serve_h2(tls, acts.clone(), r.clone())
    })
    .await;
    (up, requests)
}

/// Head, the SSE events before the cut, a pause to flush them, then `cut`.
fn h2_cut_script(events: &[Bytes], cut: H2Act) -> Vec<H2Act> {
    let mut acts = vec![H2Act::Head(200, sse_headers())];
    acts.extend(events.iter().cloned().map(H2Act::Data));
    acts.extend([H2Act::Sleep(Duration::from_millis(100)), cut]);
    acts
}

/// Over an HTTP/1 and an h2c client: the stream breaks off after `sent`.
async fn h2_cut_case(name: &str, cut: H2Act) -> TlsUpstream {
    let ca = TestCa::new();
    let scratch = Scratch::new("h2-cut");
    let (events, tokens) = sse_before_cut();
    let sent: Vec<u8> = events.concat();
    let (up, requests) = tls_h2(&ca, h2_cut_script(&events, cut)).await;
    let mut front = tls_front(&up.url("localhost"), Some(&ca), &scratch, 3).await;
    let models = [format!("m-{name}-h1"), format!("m-{name}-h2c")];
    for (model, c) in models.iter().zip([client::http1(), client::h2c()]) {
        front.client = c;
        let got = front.chat(model, true).await;
        assert_cut(model, &got, &sent);
    }
    let spans = front
        .finish(&[
            failed(&models[0], "upstream_aborted"),
            failed(&models[1], "upstream_aborted"),
        ])
        .await;
    for s in &spans {
        assert_eq!(
            s.num(OUTPUT_TOKENS),
            tokens as f64,
            "{}: partial tokens",
            s.name
        );
    }
    assert_eq!(
        requests.load(Ordering::SeqCst),
        2,
        "{name}: one upstream stream per request"
    );
    assert!(
        up.alpn().iter().all(|a| a.as_deref() == Some("h2")),
        "{name}: tokentap spoke HTTP/2 upstream: {:?}",
        up.alpn()
    );
    up
}

#[tokio::test]
async fn h2_rst_stream_mid_stream_cuts_the_client_stream() {
    let up = h2_cut_case("rst", H2Act::Reset(h2::Reason::INTERNAL_ERROR)).await;
    assert_eq!(
        up.handshakes(),
        1,
        "RST_STREAM ends one stream; the pooled HTTP/2 connection serves the next request"
    );
}

#[tokio::test]
async fn h2_goaway_mid_stream_cuts_the_client_stream() {
    let up = h2_cut_case("goaway", H2Act::GoAway(h2::Reason::INTERNAL_ERROR)).await;
    assert_eq!(
        up.handshakes(),
        2,
        "after GOAWAY the next request needs a new connection"
    );
}

#[tokio::test]
async fn h2_rst_stream_before_the_head_is_502_upstream_reset() {
    let ca = TestCa::new();
    let scratch = Scratch::new("h2-rst-head");
    let acts = vec![H2Act::Reset(h2::Reason::INTERNAL_ERROR)];
    let (up, requests) = tls_h2(&ca, acts).await;
    let front = tls_front(&up.url("localhost"), Some(&ca), &scratch, 3).await;
    let got = front.chat("m-h2-rst-head", true).await;
    assert_proxy_error(&got, 502, "upstream_reset");
    front
        .finish(&[failed("m-h2-rst-head", "upstream_reset")])
        .await;
    assert_eq!(requests.load(Ordering::SeqCst), 1, "sent once, not retried");
}

#[tokio::test]
async fn error_statuses_with_bodies_pass_through_untouched_and_once() {
    let html = "<html><body><h1>502 Bad Gateway</h1></body></html>\n";
    let cases: Vec<(&str, Reply, &str)> = vec![
        (
            "m-429",
            script::openai_error(429, "requests", "rate_limit_exceeded", "Rate limit reached"),
            "requests",
        ),
        (
            "m-500",
            script::openai_error(500, "server_error", "internal", "The server had an error"),
            "server_error",
        ),
        (
            "m-502",
            Reply::new(502)
                .header("content-type", "text/html")
                .header("content-length", &html.len().to_string())
                .send(html),
            "502",
        ),
        (
            "m-503",
            script::openai_error(
                503,
                "service_unavailable",
                "overloaded",
                "The engine is overloaded",
            ),
            "service_unavailable",
        ),
        (
            "m-504",
            Reply::new(504)
                .header("content-type", "text/plain")
                .send("upstream request timeout"),
            "504",
        ),
    ];
    let replies = cases.clone();
    let up = support::upstream::Upstream::start(move |ex| {
        let model = ex.json()["model"].as_str().unwrap_or_default().to_owned();
        let found = replies.iter().find(|(m, _, _)| *m == model);
        found.map_or_else(|| Reply::new(404), |(_, r, _)| r.clone())
    })
    .await;
    let front = Front::start(&up.url(), with_retries).await;
    for (model, reply, _) in &cases {
        let got = front.chat(model, false).await;
        assert_eq!(
            got.status.as_u16(),
            reply.status,
            "{model}: status passes through"
        );
        assert_bytes_eq(model, &got.body, &reply.body_bytes());
        let ct = |h: &http::HeaderMap| h.get("content-type").map(|v| v.as_bytes().to_vec());
        let want_ct = reply
            .headers
            .iter()
            .find(|(k, _)| k == "content-type")
            .map(|(_, v)| v.as_bytes().to_vec());
        assert_eq!(ct(&got.headers), want_ct, "{model}: content-type kept");
        assert!(got.error.is_none(), "{model}: a complete body");
    }
    let want: Vec<Want> = cases.iter().map(|(m, _, e)| failed(m, e)).collect();
    front.finish(&want).await;
    assert_eq!(
        up.exchanges().len(),
        cases.len(),
        "each request reached the upstream exactly once"
    );
}

#[tokio::test]
async fn connect_retries_recover_from_connections_dropped_in_the_handshake() {
    let ca = TestCa::new();
    let scratch = Scratch::new("retry-handshake");
    let reply = script::openai_chat_json("m", "third time lucky", (1, 3));
    let want = reply.body_bytes();
    for retries in [2, 1] {
        // The first two TCP connections are reset before any TLS byte.
        let (up, requests) = tls_h1(&ca, &["localhost"], 2, reply.clone()).await;
        let front = tls_front(&up.url("localhost"), Some(&ca), &scratch, retries).await;
        let model = format!("m-retry-{retries}");
        let got = front.chat(&model, false).await;
        if retries == 2 {
            assert_eq!(got.status, 200, "body {:?}", got.text());
            assert_bytes_eq("served after two retries", &got.body, &want);
            front.finish(&[complete(&model)]).await;
            assert_eq!(
                up.accepted(),
                3,
                "two dropped connections, then the one that served"
            );
            assert_eq!(
                requests.load(Ordering::SeqCst),
                1,
                "the request was sent once"
            );
        } else {
            assert_proxy_error(&got, 502, "upstream_unreachable");
            front
                .finish(&[failed(&model, "upstream_unreachable")])
                .await;
            assert_eq!(up.accepted(), 2, "one attempt plus one retry");
            assert_eq!(requests.load(Ordering::SeqCst), 0, "nothing was sent");
        }
    }
}

/// A port of our own where nothing listens: the socket is bound (so no
/// other test can be given the port) but not listening, so connects to it
/// are refused until `listen` is called.
fn refusing_port() -> (tokio::net::TcpSocket, SocketAddr) {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = socket.local_addr().unwrap();
    (socket, addr)
}

#[tokio::test]
async fn connect_retries_wait_for_an_upstream_that_comes_up() {
    let (socket, addr) = refusing_port();
    let reply = script::openai_chat_json("m", "came up", (1, 2));
    let want = reply.body_bytes();
    // Backoff 100, 200, 400, 800, 1600 ms: the upstream appears in the first.
    let front = Front::start(&format!("http://{addr}"), |t| {
        t.set("upstream", "connect_retries", "5").set(
            "upstream",
            "connect_retry_backoff",
            &q("100ms"),
        )
    })
    .await;
    let requests = Arc::new(AtomicUsize::new(0));
    let r = requests.clone();
    let late = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let listener = socket.listen(16).unwrap();
        loop {
            let (s, _) = listener.accept().await.unwrap();
            tokio::spawn(faulty::serve_h1(s, reply.clone(), r.clone()));
        }
    });
    let t0 = Instant::now();
    let got = front.chat("m-late", false).await;
    assert_eq!(got.status, 200, "body {:?}", got.text());
    assert!(
        t0.elapsed() >= Duration::from_millis(250),
        "the first attempts were refused, so it cannot have answered before the upstream existed"
    );
    assert_bytes_eq("late upstream body", &got.body, &want);
    front.finish(&[complete("m-late")]).await;
    assert_eq!(requests.load(Ordering::SeqCst), 1);
    late.abort();
}

#[tokio::test]
async fn connect_retries_are_bounded() {
    let (_socket, addr) = refusing_port();
    let front = Front::start(&format!("http://{addr}"), |t| {
        t.set("upstream", "connect_retries", "2").set(
            "upstream",
            "connect_retry_backoff",
            &q("100ms"),
        )
    })
    .await;
    let t0 = Instant::now();
    let got = front.chat("m-dead", false).await;
    let took = t0.elapsed();
    assert_proxy_error(&got, 502, "upstream_unreachable");
    assert!(
        took >= Duration::from_millis(300),
        "two retries wait 100 ms + 200 ms first; took {took:?}"
    );
    assert!(took < STEP_TIMEOUT, "bounded: took {took:?}");
    front
        .finish(&[failed("m-dead", "upstream_unreachable")])
        .await;
}

#[tokio::test]
async fn a_pooled_connection_closed_by_the_upstream_is_not_reused() {
    let json = |text: &str| {
        let body = format!(
            "{{\"id\":\"x\",\"object\":\"chat.completion\",\"model\":\"m\",\"choices\":[{{\"index\":0,\"message\":{{\"role\":\"assistant\",\"content\":\"{text}\"}},\"finish_reason\":\"stop\"}}]}}"
        );
        Bytes::from(format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        ))
    };
    let (first, second) = (json("first"), json("second"));
    let up = RawUpstream::start(move |n| match n {
        // Answer, stay idle in the pool a moment, then close.
        0 => vec![
            Act::ReadRequest,
            Act::Write(first.clone()),
            Act::Sleep(Duration::from_millis(100)),
            Act::Close,
        ],
        _ => vec![Act::ReadRequest, Act::Write(second.clone())],
    })
    .await;
    let front = Front::start(&up.url(), |t| t).await;
    let got = front.chat("m-pool-1", false).await;
    assert_eq!(got.status, 200, "{:?}", got.text());
    within(
        STEP_TIMEOUT,
        "the upstream to close the idle connection",
        async {
            while up.closed() == 0 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        },
    )
    .await;
    // Let the proxy's connection task read the FIN (ordering, not an assertion).
    tokio::time::sleep(Duration::from_millis(100)).await;
    let got = front.chat("m-pool-2", false).await;
    assert_eq!(got.status, 200, "{:?}", got.text());
    assert!(
        got.text().contains("second"),
        "served by the second connection"
    );
    front
        .finish(&[complete("m-pool-1"), complete("m-pool-2")])
        .await;
    assert_eq!(up.connections(), 2);
    let requests = up.requests();
    for model in ["m-pool-1", "m-pool-2"] {
        let n = requests
            .iter()
            .filter(|r| String::from_utf8_lossy(r).contains(&format!("\"{model}\"")))
            .count();
        assert_eq!(n, 1, "{model} reached the upstream exactly once");
    }
}
