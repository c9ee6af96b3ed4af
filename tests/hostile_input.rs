//! Hostile HTTP input, sent over raw TCP to the real proxy.
//!
//! Guarantees:
//! - A request head with ambiguous framing (both `Content-Length` and
//!   `Transfer-Encoding`, a repeated or conflicting or list-valued
//!   `Content-Length`, a `Transfer-Encoding` other than one plain
//!   `chunked`, whitespace before a header's colon, a signed length,
//!   obsolete line folding, bare LF line ends) or over the header
//!   limits (`server.max_header_bytes`, `server.max_headers`) gets a 4xx, the
//!   connection is closed, and nothing reaches the upstream: zero
//!   connections. Where tokentap (not hyper) refuses, the body is an
//!   OpenAI-shaped JSON error naming the header or limit.
//! - The header limits are configurable and apply to HTTP/2 too.
//! - Ordinary keep-alive traffic (sized, chunked with extensions and
//!   trailers, bodiless) on one connection still passes, byte for byte.
//! - The upstream comes from configuration only: absolute-form targets,
//!   `Host` and `X-Forwarded-Host` naming 127.0.0.1 or 169.254.169.254
//!   choose among configured routes (or get 404 `no_route`), the forwarded
//!   `Host` is the configured upstream's, CONNECT is refused with 405, and a
//!   listener standing in for the "metadata" address sees zero connections.

mod support;

use std::time::Duration;

use http::Method;
use support::client::{self, Req};
use support::proxy::{InProc, Toml};
use support::raw::{self, Canary, RawReply};
use support::script;
use support::upstream::Upstream;

use support::CHAT;
const LIMIT: Duration = Duration::from_secs(10);

fn ok_reply() -> support::upstream::Reply {
    script::openai_chat_json("gpt-4o-mini", "hi", (1, 1))
}

/// A POST head to the chat endpoint with `extra` header lines (CRLF each).
fn post(extra: &str) -> String {
    format!("POST {CHAT} HTTP/1.1\r\nHost: tokentap\r\n{extra}\r\n")
}

/// A well-formed POST of `body` that asks for the connection to close.
fn clean_post(body: &str) -> String {
    let head = post(&format!(
        "Content-Length: {}\r\nConnection: close\r\n",
        body.len()
    ));
    format!("{head}{body}")
}

#[track_caller]
fn assert_refused(what: &str, got: &RawReply, names: Option<&str>) {
    let status = got.status();
    assert!(
        (400..500).contains(&status),
        "{what}: expected a 4xx, got {status}:\n{}",
        got.text()
    );
    assert!(
        got.closed,
        "{what}: expected the connection to be closed after the {status}:\n{}",
        got.text()
    );
    let text = got.text();
    match names {
        Some(name) => assert!(
            text.contains("\"code\":") && text.contains(name),
            "{what}: expected tokentap's JSON error naming {name:?}:\n{text}"
        ),
        // hyper checks its head size limit between reads, so a head over
        // it may reach tokentap's exact check first: same status, JSON body.
        None => assert!(
            text.to_ascii_lowercase().contains("content-length: 0\r\n")
                || (status == 431 && text.contains("server.max_header_bytes")),
            "{what}: expected hyper's own empty-bodied refusal:\n{text}"
        ),
    }
}

/// (what, raw request, text the JSON error must name; `None` where hyper
/// refuses the head itself with an empty-bodied 4xx).
fn ambiguous_requests() -> Vec<(&'static str, String, Option<&'static str>)> {
    let body = "{\"model\":\"m\"}";
    let n = body.len();
    let chunked = format!("{n:x}\r\n{body}\r\n0\r\n\r\n");
    vec![
        (
            "Content-Length then Transfer-Encoding",
            format!(
                "{}{chunked}",
                post(&format!(
                    "Content-Length: {n}\r\nTransfer-Encoding: chunked\r\n"
                ))
            ),
            Some("Content-Length and Transfer-Encoding"),
        ),
        (
            "Transfer-Encoding then Content-Length",
            format!(
                "{}{chunked}",
                post(&format!(
                    "Transfer-Encoding: chunked\r\nContent-Length: {n}\r\n"
                ))
            ),
            Some("Content-Length and Transfer-Encoding"),
        ),
        (
            "duplicate identical Content-Length",
            format!(
                "{}{body}",
                post(&format!("Content-Length: {n}\r\nContent-Length: {n}\r\n"))
            ),
            Some("Content-Length"),
        ),
        (
            "conflicting Content-Length",
            format!(
                "{}{body}",
                post(&format!(
                    "Content-Length: {n}\r\nContent-Length: {}\r\n",
                    n + 1
                ))
            ),
            None,
        ),
        (
            "list-valued Content-Length",
            format!("{}{body}", post(&format!("Content-Length: {n}, {n}\r\n"))),
            None,
        ),
        (
            "Transfer-Encoding: gzip, chunked",
            format!("{}{chunked}", post("Transfer-Encoding: gzip, chunked\r\n")),
            Some("Transfer-Encoding"),
        ),
        (
            "Transfer-Encoding: chunked twice",
            format!(
                "{}{chunked}",
                post("Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n")
            ),
            Some("Transfer-Encoding"),
        ),
        (
            "Transfer-Encoding: chunked, identity",
            format!(
                "{}{chunked}",
                post("Transfer-Encoding: chunked, identity\r\n")
            ),
            None,
        ),
        (
            "whitespace before the colon of Transfer-Encoding",
            format!("{}{chunked}", post("Transfer-Encoding : chunked\r\n")),
            None,
        ),
        (
            "signed Content-Length",
            format!("{}{body}", post(&format!("Content-Length: +{n}\r\n"))),
            None,
        ),
        (
            "obsolete line folding",
            format!(
                "{}{body}",
                post(&format!("Content-Length: {n}\r\nX-Folded: a\r\n  b\r\n"))
            ),
            None,
        ),
        (
            "bare LF line ends",
            format!("POST {CHAT} HTTP/1.1\nHost: tokentap\nContent-Length: {n}\n\n{body}"),
            Some("bare LF"),
        ),
        (
            "oversized header block",
            post(&format!("X-Big: {}\r\n", "a".repeat(100 * 1024))),
            None,
        ),
        (
            "absurd header count",
            post(
                &(0..1000)
                    .map(|i| format!("X-H{i}: v\r\n"))
                    .collect::<String>(),
            ),
            None,
        ),
    ]
}

#[tokio::test]
async fn ambiguous_framing_is_refused_before_the_upstream() {
    let up = Upstream::fixed(ok_reply()).await;
    let proxy = InProc::start(&Toml::openai(&up.url())).await;
    for (what, request, names) in ambiguous_requests() {
        let got = raw::exchange(proxy.addr, request.as_bytes(), LIMIT).await;
        assert_refused(what, &got, names);
        assert_eq!(
            up.connections(),
            0,
            "{what}: nothing may reach the upstream, yet it saw a connection"
        );
    }
    // The proxy still serves a well-formed request afterwards.
    let body = "{\"model\":\"m\"}";
    let got = raw::exchange(proxy.addr, clean_post(body).as_bytes(), LIMIT).await;
    assert_eq!(got.status(), 200, "a clean request passes:\n{}", got.text());
    assert_eq!(
        up.only().await.body,
        body.as_bytes(),
        "body forwarded intact"
    );
    proxy.shutdown().await;
}

#[tokio::test]
async fn header_limits_are_configurable_and_apply_to_h2() {
    let up = Upstream::fixed(ok_reply()).await;
    let toml = Toml::openai(&up.url())
        .set("server", "max_header_bytes", "\"16KiB\"")
        .set("server", "max_headers", "20");
    let proxy = InProc::start(&toml).await;
    let headers = |n: usize| -> String { (0..n).map(|i| format!("X-H{i}: v\r\n")).collect() };
    let get = |extra: String| format!("GET /v1/models HTTP/1.1\r\nHost: t\r\n{extra}\r\n");

    let too_many = raw::exchange(proxy.addr, get(headers(25)).as_bytes(), LIMIT).await;
    assert_refused("25 headers over max_headers = 20", &too_many, None);
    assert_eq!(too_many.status(), 431, "{}", too_many.text());
    // Between hyper's 8 KiB buffer floor and the limit: tokentap's own check.
    let big = format!("X-Big: {}\r\n", "a".repeat(17 * 1024));
    let too_big = raw::exchange(proxy.addr, get(big).as_bytes(), LIMIT).await;
    assert_refused(
        "a 17 KiB head over max_header_bytes = 16KiB",
        &too_big,
        None,
    );
    assert_eq!(too_big.status(), 431, "{}", too_big.text());
    assert_eq!(up.connections(), 0, "refused heads reach no upstream");

    let within = format!(
        "{}X-Big: {}\r\nConnection: close\r\n",
        headers(10),
        "a".repeat(12 * 1024)
    );
    let fine = raw::exchange(proxy.addr, get(within).as_bytes(), LIMIT).await;
    assert_eq!(fine.status(), 200, "a head within both limits passes");

    // HTTP/2: the same limits (header count in tokentap, bytes in h2).
    let h2 = client::h2c();
    let mut req = Req {
        method: Method::GET,
        url: format!("{}/v1/models", proxy.url()),
        headers: Vec::new(),
        body: Default::default(),
    };
    for i in 0..25 {
        req = req.header(&format!("x-h{i}"), "v");
    }
    let got = client::fetch(&h2, &req).await;
    assert_eq!(got.status, 431, "h2 over max_headers: {}", got.text());
    assert!(
        got.text().contains("server.max_headers"),
        "the error names the limit: {}",
        got.text()
    );
    let big_h2 = Req {
        headers: vec![("x-big".into(), "a".repeat(20 * 1024))],
        ..req.clone()
    };
    let got = client::fetch(&h2, &big_h2).await;
    assert_eq!(
        got.status,
        431,
        "h2 header list over max_header_bytes: {}",
        got.text()
    );
    assert_eq!(
        up.exchanges().len(),
        1,
        "only the request within the limits was forwarded"
    );
    proxy.shutdown().await;
}

#[tokio::test]
async fn a_head_limit_below_hypers_buffer_floor_is_enforced_exactly() {
    let up = Upstream::fixed(ok_reply()).await;
    let toml = Toml::openai(&up.url()).set("server", "max_header_bytes", "\"4KiB\"");
    let proxy = InProc::start(&toml).await;
    let head = |n: usize| {
        format!(
            "GET /v1/models HTTP/1.1\r\nHost: t\r\nX-Big: {}\r\nConnection: close\r\n\r\n",
            "a".repeat(n)
        )
    };
    let got = raw::exchange(proxy.addr, head(6 * 1024).as_bytes(), LIMIT).await;
    assert_refused(
        "a 6 KiB head over 4KiB",
        &got,
        Some("server.max_header_bytes"),
    );
    assert_eq!(got.status(), 431, "{}", got.text());
    assert_eq!(up.connections(), 0, "nothing forwarded");
    let got = raw::exchange(proxy.addr, head(3 * 1024).as_bytes(), LIMIT).await;
    assert_eq!(got.status(), 200, "a 3 KiB head passes: {}", got.text());
    proxy.shutdown().await;
}

#[tokio::test]
async fn keep_alive_sized_chunked_and_bodiless_requests_pass_byte_for_byte() {
    let up = Upstream::fixed(ok_reply()).await;
    let proxy = InProc::start(&Toml::openai(&up.url())).await;
    let sized = "{\"model\":\"a\"}";
    let chunked_body = "{\"model\":\"b\",\"messages\":[]}";
    let (c1, c2) = chunked_body.split_at(10);
    let stream = format!(
        "\r\n{}{sized}\
         POST {CHAT} HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n\
         {:x};ext=1\r\n{c1}\r\n{:X} \r\n{c2}\r\n0\r\nX-Trailer: t\r\n\r\n\
         GET /v1/models HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
        post(&format!("Content-Length: {}\r\n", sized.len())),
        c1.len(),
        c2.len(),
    );
    let got = raw::exchange(proxy.addr, stream.as_bytes(), LIMIT).await;
    assert!(got.closed, "Connection: close honoured");
    assert_eq!(
        got.text().matches("HTTP/1.1 200 OK").count(),
        3,
        "three responses on one connection:\n{}",
        got.text()
    );
    let ex = up.exchanges();
    assert_eq!(ex.len(), 3, "three requests forwarded");
    assert_eq!(ex[0].body, sized.as_bytes());
    assert_eq!(ex[1].body, chunked_body.as_bytes());
    assert_eq!(ex[2].method, Method::GET);
    proxy.shutdown().await;
}

#[tokio::test]
async fn absolute_form_and_host_headers_never_choose_the_upstream() {
    let metadata = Canary::start().await;
    let up = Upstream::fixed(ok_reply()).await;
    let toml = Toml::new().route("openai", "/v1", &up.url(), "openai");
    let proxy = InProc::start(&toml).await;
    let m = metadata.addr;
    let cases = [
        format!("GET http://{m}/v1/models HTTP/1.1\r\nHost: {m}\r\n"),
        "GET http://169.254.169.254/v1/models HTTP/1.1\r\nHost: 169.254.169.254\r\n".to_owned(),
        format!("GET /v1/models HTTP/1.1\r\nHost: 169.254.169.254\r\nX-Forwarded-Host: {m}\r\n"),
        format!("GET /v1/models HTTP/1.1\r\nHost: {m}\r\nX-Forwarded-Host: 169.254.169.254\r\n"),
    ];
    for (i, head) in cases.iter().enumerate() {
        let request = format!("{head}Connection: close\r\n\r\n");
        let got = raw::exchange(proxy.addr, request.as_bytes(), LIMIT).await;
        assert_eq!(
            got.status(),
            200,
            "{head:?}: served by the configured route"
        );
        let e = up.nth(i + 1).await;
        assert_eq!(
            e.path_and_query, "/models",
            "{head:?}: path forwarded, prefix stripped"
        );
        assert_eq!(
            e.header("host").as_deref(),
            Some(up.addr.to_string().as_str()),
            "{head:?}: the forwarded Host is the configured upstream's"
        );
    }
    let no_route = [
        format!("GET http://{m}/latest/meta-data/ HTTP/1.1\r\nHost: {m}\r\n"),
        "GET http://169.254.169.254/latest/meta-data/ HTTP/1.1\r\nHost: x\r\n".to_owned(),
    ];
    for head in &no_route {
        let request = format!("{head}Connection: close\r\n\r\n");
        let got = raw::exchange(proxy.addr, request.as_bytes(), LIMIT).await;
        assert_eq!(got.status(), 404, "{head:?}: {}", got.text());
        assert!(got.text().contains("no_route"), "{}", got.text());
    }
    let connect = format!("CONNECT {m} HTTP/1.1\r\nHost: {m}\r\n\r\n");
    let got = raw::exchange(proxy.addr, connect.as_bytes(), LIMIT).await;
    assert_refused("CONNECT to the metadata stand-in", &got, Some("CONNECT"));
    assert_eq!(got.status(), 405);
    assert_eq!(up.exchanges().len(), cases.len(), "nothing else forwarded");
    assert_eq!(
        metadata.connections(),
        0,
        "the metadata stand-in must never be contacted"
    );
    proxy.shutdown().await;
}

#[tokio::test]
async fn host_matching_chooses_among_configured_routes_only() {
    let metadata = Canary::start().await;
    let up = Upstream::fixed(ok_reply()).await;
    let toml = Toml::new().route_host("internal", "/", "api.internal", &up.url(), "openai");
    let proxy = InProc::start(&toml).await;
    let m = metadata.addr;
    for head in [
        format!("GET /v1/models HTTP/1.1\r\nHost: {m}\r\n"),
        "GET /v1/models HTTP/1.1\r\nHost: 169.254.169.254\r\n".to_owned(),
        format!("GET http://{m}/v1/models HTTP/1.1\r\nHost: api.internal\r\n"),
    ] {
        let request = format!("{head}Connection: close\r\n\r\n");
        let got = raw::exchange(proxy.addr, request.as_bytes(), LIMIT).await;
        assert_eq!(got.status(), 404, "{head:?}: no configured host matches");
    }
    // An absolute-form target naming the configured host matches its route
    // (RFC 9112 §3.2.2), and goes to the configured upstream.
    let request = format!(
        "GET http://api.internal/v1/models HTTP/1.1\r\nHost: {m}\r\nConnection: close\r\n\r\n"
    );
    let got = raw::exchange(proxy.addr, request.as_bytes(), LIMIT).await;
    assert_eq!(got.status(), 200, "{}", got.text());
    let e = up.only().await;
    assert_eq!(
        e.header("host").as_deref(),
        Some(up.addr.to_string().as_str()),
        "the forwarded Host is the configured upstream's, not the target's"
    );
    assert_eq!(
        metadata.connections(),
        0,
        "the metadata stand-in is never contacted"
    );
    proxy.shutdown().await;
}

/// The protocol is told from the first bytes without consuming them: a
/// request trickled byte by byte (its "P" could start the HTTP/2 preface)
/// is HTTP/1 as soon as a byte differs, and a preface split across writes
/// is still HTTP/2.
#[tokio::test]
async fn the_protocol_is_told_from_first_bytes_however_they_arrive() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let up = Upstream::fixed(ok_reply()).await;
    let proxy = InProc::start(&Toml::openai(&up.url())).await;

    let request = clean_post("{\"model\":\"m\"}");
    let mut s = tokio::net::TcpStream::connect(proxy.addr)
        .await
        .expect("connect");
    for piece in [&request[..1], &request[1..3], &request[3..]] {
        s.write_all(piece.as_bytes()).await.expect("write");
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    let got = raw::read_until_closed(&mut s, LIMIT).await;
    assert_eq!(got.status(), 200, "trickled HTTP/1 request: {}", got.text());
    assert_eq!(up.exchanges().len(), 1);

    let mut s = tokio::net::TcpStream::connect(proxy.addr)
        .await
        .expect("connect");
    s.write_all(b"PRI * HTTP/2.0\r\n").await.expect("write");
    tokio::time::sleep(Duration::from_millis(30)).await;
    s.write_all(b"\r\nSM\r\n\r\n").await.expect("write");
    // An HTTP/2 server's first frame is its SETTINGS (type 4, stream 0).
    let mut head = [0u8; 9];
    support::within(
        LIMIT,
        "the server's first HTTP/2 frame",
        s.read_exact(&mut head),
    )
    .await
    .expect("a frame header");
    assert_eq!(head[3], 4, "a SETTINGS frame, got header {head:?}");
    assert_eq!(&head[5..], [0, 0, 0, 0], "on stream 0");
}
