//! Hot reload of the real binary: SIGHUP and `--watch-config`. Each test
//! runs `tokentap --config FILE` against scripted upstreams, rewrites FILE
//! and checks what the running process does. What each one guarantees:
//!
//! - `sighup_moves_new_requests_and_lets_in_flight_streams_finish`: after
//!   SIGHUP with a route's upstream changed, new requests go to the new
//!   upstream, while a stream that started before the reload goes on from
//!   the old upstream and reaches the client byte-identical and complete.
//! - `sighup_with_an_invalid_file_keeps_the_old_config`: a file with an
//!   unknown key is refused with a log line naming the key and the file;
//!   requests still go where the old configuration says; `/config` shows
//!   the old configuration under a comment naming the key, and
//!   `tokentap_config_reloads_total` counts one failure. A corrected file
//!   then reloads (one success) and `/config` shows it.
//! - `sighup_refuses_a_restart_only_key`: a changed `listen` is refused with
//!   "`listen` cannot change without a restart", and the proxy keeps
//!   serving on its old address with its old routes.
//! - `watch_config_reloads_a_changed_file_without_a_signal`: with
//!   `--watch-config`, rewriting the file alone moves new requests to the
//!   new upstream within a few seconds.
//! - `keep_alive_connections_survive_a_reload`: an HTTP/1.1 and an h2c
//!   connection opened before the reload are not closed by it; their next
//!   request succeeds on the same connection and follows the new routes.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

mod support;

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use support::client::{self, Req};
use support::proxy::{Bin, Toml, q};
use support::script::{self, StreamSpec};
use support::upstream::{BodyEnd, Upstream};
use support::{STEP_TIMEOUT, assert_bytes_eq, within};

use support::CHAT;
const RELOADED: &str = "configuration reloaded";
const REFUSED: &str = "configuration reload refused";

/// An upstream answering every request with a small non-streamed reply.
async fn json_upstream(text: &str) -> Upstream {
    Upstream::fixed(script::openai_chat_json("m", text, (1, 1))).await
}

/// POST a non-streamed chat request; the response text.
async fn chat(addr: SocketAddr, model: &str) -> client::Streamed {
    let req = Req::post_json(addr, CHAT, script::openai_request(model, false, None));
    client::fetch(&client::http1(), &req).await
}

async fn admin_get(admin: SocketAddr, path: &str) -> String {
    let got = client::fetch(&client::http1(), &Req::get(admin, path)).await;
    assert_eq!(got.status, 200, "GET {path}: {}", got.text());
    got.text()
}

/// The value of the `tokentap_config_reloads_total` sample with `result`.
fn reloads(metrics: &str, result: &str) -> Option<f64> {
    metrics
        .lines()
        .filter(|l| l.starts_with("tokentap_config_reloads_total{"))
        .find(|l| l.contains(&format!("result=\"{result}\"")))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

#[tokio::test]
async fn sighup_moves_new_requests_and_lets_in_flight_streams_finish() {
    // 40 tokens 75 ms apart: the stream runs ~3 s; the reload happens early.
    let spec = StreamSpec::tokens(40, Duration::ZERO, Duration::from_millis(75));
    let reply = script::openai_chat_sse(&spec);
    let want = reply.body_bytes();
    let old = Upstream::fixed(reply).await;
    let new = json_upstream("from the new upstream").await;
    let bin = Bin::start(&Toml::openai(&old.url()), &[], &[]).await;

    let req = Req::post_json(bin.addr, CHAT, script::openai_request("m-old", true, None));
    let (resp, _) = client::send(&client::http1(), &req).await;
    assert_eq!(resp.status(), 200);
    let mut body = resp.into_body();
    let mut got = client::read_until(&mut body, "tok1").await;

    bin.rewrite_config(&Toml::openai(&new.url()));
    bin.sighup();
    bin.wait_output(RELOADED, 1).await;
    assert_eq!(
        old.only().await.end(),
        None,
        "the old stream must still be in flight when the reload lands (test premise)"
    );

    let after = chat(bin.addr, "m-new").await;
    assert_eq!(
        after.status,
        200,
        "request after the reload: {}",
        after.text()
    );
    assert!(
        after.text().contains("from the new upstream"),
        "a request after the reload is served by the new upstream: {}",
        after.text()
    );
    assert_eq!(new.only().await.path_and_query, CHAT);
    assert_eq!(
        old.exchanges().len(),
        1,
        "the old upstream saw only the stream that started before the reload"
    );

    let rest = within(STEP_TIMEOUT, "the rest of the old stream", body.collect())
        .await
        .unwrap_or_else(|e| panic!("the in-flight stream broke off across the reload: {e}"));
    got.extend_from_slice(&rest.to_bytes());
    assert_bytes_eq("stream that spanned the reload", &got, &want);
    assert_eq!(
        old.only().await.wait_end(STEP_TIMEOUT).await.map(|e| e.0),
        Some(BodyEnd::Completed),
        "the old upstream's stream ran to its end"
    );
    bin.stop().await;
}

#[tokio::test]
async fn sighup_with_an_invalid_file_keeps_the_old_config() {
    let old = json_upstream("old").await;
    let new = json_upstream("new").await;
    let base = |url: &str| Toml::openai(url).top("admin_listen", &q("127.0.0.1:0"));
    let bin = Bin::start(&base(&old.url()), &[], &[]).await;
    let admin = bin.admin_addr().await;

    let typo = base(&new.url()).set("upstream", "conect_timeout", &q("5s"));
    bin.rewrite_config(&typo);
    bin.sighup();
    let out = bin.wait_output(REFUSED, 1).await;
    let line = out
        .lines()
        .find(|l| l.contains(REFUSED))
        .unwrap_or_default();
    assert!(
        line.contains("upstream.conect_timeout") && line.contains("tokentap.toml"),
        "the refusal names the unknown key and the file: {line}"
    );
    assert!(
        line.contains("WARN") && !line.contains("ERROR"),
        "the old configuration keeps serving: a WARN, not an ERROR: {line}"
    );
    assert!(!out.contains(RELOADED), "nothing was reloaded:\n{out}");

    let got = chat(bin.addr, "m-kept").await;
    assert_eq!(got.status, 200, "still serving: {}", got.text());
    assert_eq!(old.exchanges().len(), 1, "served by the old upstream");
    assert!(
        new.exchanges().is_empty(),
        "the refused config was not applied"
    );

    let config = admin_get(admin, "/config").await;
    assert!(
        config.starts_with("# the last reload failed: unknown key `upstream.conect_timeout`"),
        "/config says why the reload failed:\n{config}"
    );
    assert!(
        config.contains(&old.addr.to_string()) && !config.contains(&new.addr.to_string()),
        "/config shows the configuration still active:\n{config}"
    );
    let metrics = admin_get(admin, "/metrics").await;
    assert_eq!(reloads(&metrics, "failure"), Some(1.0), "{metrics}");
    assert_eq!(reloads(&metrics, "success"), None, "{metrics}");

    // A corrected file reloads, and the failure note goes away.
    bin.rewrite_config(&base(&new.url()));
    bin.sighup();
    bin.wait_output(RELOADED, 1).await;
    let got = chat(bin.addr, "m-fixed").await;
    assert_eq!(got.status, 200, "{}", got.text());
    assert_eq!(new.exchanges().len(), 1, "served by the new upstream");
    let config = admin_get(admin, "/config").await;
    assert!(
        !config.contains("# the last reload failed") && config.contains(&new.addr.to_string()),
        "/config shows the reloaded configuration:\n{config}"
    );
    let metrics = admin_get(admin, "/metrics").await;
    assert_eq!(reloads(&metrics, "success"), Some(1.0), "{metrics}");
    bin.stop().await;
}

#[tokio::test]
async fn sighup_refuses_a_restart_only_key() {
    let old = json_upstream("old").await;
    let new = json_upstream("new").await;
    let bin = Bin::start(&Toml::openai(&old.url()), &[], &[]).await;

    let moved = Toml::openai(&new.url()).top("listen", &q("127.0.0.1:1"));
    bin.rewrite_config(&moved);
    bin.sighup();
    let out = bin.wait_output(REFUSED, 1).await;
    assert!(
        out.contains("`listen` cannot change without a restart"),
        "the refusal names `listen`:\n{out}"
    );
    let got = chat(bin.addr, "m-same").await;
    assert_eq!(got.status, 200, "still serving on the old address");
    assert_eq!(old.exchanges().len(), 1, "with the old routes");
    assert!(
        new.exchanges().is_empty(),
        "no part of the refused config applies"
    );
    bin.stop().await;
}

#[tokio::test]
async fn watch_config_reloads_a_changed_file_without_a_signal() {
    let old = json_upstream("old").await;
    let new = json_upstream("new").await;
    let bin = Bin::start(&Toml::openai(&old.url()), &["--watch-config"], &[]).await;
    assert_eq!(chat(bin.addr, "m-1").await.status, 200);
    assert_eq!(old.exchanges().len(), 1);

    bin.rewrite_config(&Toml::openai(&new.url()));
    let out = bin.wait_output(RELOADED, 1).await;
    assert!(
        out.contains("config file changed"),
        "the reload says the file watch triggered it:\n{out}"
    );
    let got = chat(bin.addr, "m-2").await;
    assert_eq!(got.status, 200, "{}", got.text());
    assert_eq!(new.exchanges().len(), 1, "served by the new upstream");
    assert_eq!(old.exchanges().len(), 1, "not by the old one");

    // An unchanged file is not reloaded again.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let out = bin.stop().await;
    assert_eq!(
        out.matches(RELOADED).count(),
        1,
        "one change, one reload:\n{out}"
    );
}

/// One client connection that is never swapped for another.
enum Conn {
    H1(hyper::client::conn::http1::SendRequest<Full<Bytes>>),
    H2(hyper::client::conn::http2::SendRequest<Full<Bytes>>),
}

impl Conn {
    async fn open(addr: SocketAddr, h2: bool) -> Conn {
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let io = TokioIo::new(tcp);
        if h2 {
            let (send, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
                .await
                .unwrap();
            tokio::spawn(conn);
            Conn::H2(send)
        } else {
            let (send, conn) = hyper::client::conn::http1::handshake(io).await.unwrap();
            tokio::spawn(conn);
            Conn::H1(send)
        }
    }

    /// POST a chat request on this connection; (status, body text).
    async fn chat(&mut self, addr: SocketAddr, model: &str) -> (u16, String) {
        let body = Full::new(Bytes::from(script::openai_request(model, false, None)));
        let req = Request::post(CHAT).header("content-type", "application/json");
        let closed = |e: hyper::Error| panic!("the kept connection was closed: {e}");
        let res = match self {
            Conn::H1(s) => {
                let req = req.header("host", addr.to_string()).body(body).unwrap();
                s.ready().await.unwrap_or_else(closed);
                s.send_request(req).await
            }
            Conn::H2(s) => {
                // HTTP/2 carries the authority in the URI (`:authority`).
                let req = req
                    .uri(format!("http://{addr}{CHAT}"))
                    .version(http::Version::HTTP_2)
                    .body(body)
                    .unwrap();
                s.ready().await.unwrap_or_else(closed);
                s.send_request(req).await
            }
        };
        let res = res.unwrap_or_else(|e| panic!("request on the kept connection failed: {e}"));
        let status = res.status().as_u16();
        let body = res.into_body().collect().await.unwrap().to_bytes();
        (status, String::from_utf8_lossy(&body).into_owned())
    }
}

#[tokio::test]
async fn keep_alive_connections_survive_a_reload() {
    let old = json_upstream("from old").await;
    let new = json_upstream("from new").await;
    let bin = Bin::start(&Toml::openai(&old.url()), &[], &[]).await;
    let addr = bin.addr;
    let mut h1 = Conn::open(addr, false).await;
    let mut h2 = Conn::open(addr, true).await;
    for (name, conn) in [("HTTP/1.1", &mut h1), ("h2c", &mut h2)] {
        let (status, text) = within(STEP_TIMEOUT, name, conn.chat(addr, "m-before")).await;
        assert_eq!(status, 200, "{name} before the reload: {text}");
        assert!(text.contains("from old"), "{name}: {text}");
    }

    bin.rewrite_config(&Toml::openai(&new.url()));
    bin.sighup();
    bin.wait_output(RELOADED, 1).await;

    for (name, conn) in [("HTTP/1.1", &mut h1), ("h2c", &mut h2)] {
        let (status, text) = within(STEP_TIMEOUT, name, conn.chat(addr, "m-after")).await;
        assert_eq!(
            status, 200,
            "{name} on the kept connection after the reload: {text}"
        );
        assert!(
            text.contains("from new"),
            "{name}: the kept connection follows the new routes: {text}"
        );
    }
    assert_eq!(old.exchanges().len(), 2);
    assert_eq!(new.exchanges().len(), 2);
    bin.stop().await;
}
