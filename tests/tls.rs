//! TLS on tokentap's listeners, driven by a hyper + tokio-rustls client with
//! certificates made fresh per test (rcgen):
//! - `h1_and_h2_over_tls_reach_the_upstream`: a chat completion through the
//!   TLS proxy listener over HTTP/1.1 and over h2 (ALPN), byte-exact.
//! - `a_websocket_over_h2_with_alpn_is_relayed`: an RFC 8441 extended
//!   CONNECT on a TLS connection that agreed on `h2` reaches a WebSocket
//!   upstream, and messages cross both ways.
//! - `certificates_reload_live_and_a_bad_one_is_refused`: a reload serves
//!   the rotated certificate to new connections while an open connection
//!   keeps working; a broken certificate file is refused and the previous
//!   certificate keeps serving.
//! - `mtls_refuses_missing_unknown_and_expired_client_certificates`: with
//!   required client certificates only a valid one gets through, and its
//!   subject becomes the tenant (`tenant.sources = ["client_cert"]`).
//! - `sni_picks_the_certificate_by_server_name`.
//! - `admin_token_guards_everything_but_the_probes` and
//!   `admin_mtls_requires_a_client_certificate`.
//! - `hostile_tls_clients_do_not_stop_the_listener`: a flood of silent and
//!   half-finished handshakes, garbage before the ClientHello, plaintext
//!   HTTP, and a client that rejects the server name; the listener cuts
//!   each at the header read timeout (or at once) and keeps serving.
//! - `handshake_flood_keeps_memory_bounded_and_logs_no_secret`: the binary
//!   with mTLS and an admin token takes 800 hostile connections (garbage,
//!   half handshakes, unknown-CA and expired client certificates, plaintext)
//!   with flat memory and serves a valid client after; its debug log holds
//!   neither the admin token nor any key.
#![allow(
    clippy::disallowed_methods,
    reason = "tests time requests and set deadlines with the wall clock"
)]
#![allow(clippy::unwrap_used)] // a failed unwrap is a failed test

mod support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;

use support::proxy::{InProc, Scratch, Toml, q};
use support::tls::{Identity, PemFiles, TestCa, chain_pem, write_pem};
use support::upstream::Upstream;
use support::{STEP_TIMEOUT, within};

const BODY: &str = r#"{"id":"chatcmpl-1","object":"chat.completion","model":"gpt-4o","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}"#;
const REQUEST: &str = r#"{"model":"gpt-4o","messages":[{"role":"user","content":"hello"}]}"#;

/// The proxy listener's TLS set-up: a fresh CA, a scratch dir `tag` with
/// a leaf for `names` in it (server.pem / server.key), and a config that
/// serves it in front of `upstream`. Dropping the dir deletes the files:
/// a test holds it (`_dir`) while the proxy runs.
fn served(tag: &str, upstream: &str, names: &[&str]) -> (TestCa, Scratch, PemFiles, Toml) {
    let (ca, dir) = (TestCa::new(), Scratch::new(tag));
    let files = write_pem(&dir, "server", &ca.leaf(names));
    let toml = tls_toml(upstream, &files.cert, &files.key);
    (ca, dir, files, toml)
}

fn tls_toml(upstream: &str, cert: &std::path::Path, key: &std::path::Path) -> Toml {
    Toml::openai(upstream)
        .set("tls", "cert", &q(&cert.display().to_string()))
        .set("tls", "key", &q(&key.display().to_string()))
}

/// A TLS client connection to `addr` trusting `ca`, asking for `alpn`.
async fn connect(
    addr: SocketAddr,
    ca: &TestCa,
    server_name: &str,
    alpn: &[u8],
    identity: Option<Identity>,
) -> std::io::Result<TlsStream<TcpStream>> {
    support::tls::connect(addr, ca.der(), server_name, alpn, identity).await
}

/// [`connect`] to "localhost" without a client certificate, bounded by
/// `STEP_TIMEOUT`; panics unless the handshake succeeds.
async fn handshake(addr: SocketAddr, ca: &TestCa, alpn: &[u8]) -> TlsStream<TcpStream> {
    within(
        STEP_TIMEOUT,
        "TLS handshake",
        connect(addr, ca, "localhost", alpn, None),
    )
    .await
    .expect("TLS handshake with the proxy")
}

/// POST the chat request on `tls` (HTTP/1.1 or h2 by its ALPN); status and body.
async fn chat(tls: TlsStream<TcpStream>) -> Result<(u16, Bytes), hyper::Error> {
    let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
    let req = http::Request::post("https://localhost/v1/chat/completions")
        .header("content-type", "application/json")
        .header("host", "localhost")
        .body(Full::new(Bytes::from_static(REQUEST.as_bytes())))
        .unwrap();
    let res = if h2 {
        let (mut tx, conn) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tls)).await?;
        tokio::spawn(conn);
        let mut req = req;
        req.headers_mut().remove("host");
        tx.send_request(req).await?
    } else {
        let (mut tx, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls)).await?;
        tokio::spawn(conn);
        tx.send_request(req).await?
    };
    let status = res.status().as_u16();
    let body = res.into_body().collect().await?.to_bytes();
    Ok((status, body))
}

async fn upstream() -> Upstream {
    Upstream::fixed_json(BODY).await
}

#[tokio::test]
async fn h1_and_h2_over_tls_reach_the_upstream() {
    let up = upstream().await;
    let (ca, _dir, _, toml) = served("tls-h1-h2", &up.url(), &["localhost", "127.0.0.1"]);
    let proxy = InProc::start(&toml).await;
    for alpn in [&b"http/1.1"[..], b"h2"] {
        let tls = handshake(proxy.addr, &ca, alpn).await;
        assert_eq!(tls.get_ref().1.alpn_protocol(), Some(alpn), "ALPN agreed");
        let (status, body) = within(STEP_TIMEOUT, "chat over TLS", chat(tls))
            .await
            .expect("request over TLS");
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
        assert_eq!(&body[..], BODY.as_bytes(), "byte-exact over {alpn:?}");
    }
    assert_eq!(
        up.exchanges().len(),
        2,
        "both requests reached the upstream"
    );
    proxy.shutdown().await;
}

#[tokio::test]
async fn a_websocket_over_h2_with_alpn_is_relayed() {
    use futures_util::{SinkExt, StreamExt};
    use support::ws::{Script, h2_connect, h2_handshake, h2_upgraded, ws_upstream};
    use tokio_tungstenite::tungstenite::Message;
    use tokio_tungstenite::tungstenite::protocol::Role;
    let (upstream, seen) = ws_upstream(Script::Echo).await;
    let (ca, _dir, _, toml) = served("tls-h2-websocket", &upstream, &["localhost", "127.0.0.1"]);
    let proxy = InProc::start(&toml).await;
    let tls = handshake(proxy.addr, &ca, b"h2").await;
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let mut sender = h2_handshake(tls).await;
    let authority = format!("localhost:{}", proxy.addr.port());
    let headers = [("sec-websocket-version", "13")];
    let path = "/v1/realtime?model=gpt-realtime";
    let res = h2_connect(
        &mut sender,
        "https",
        &authority,
        path,
        Some("websocket"),
        &headers,
    )
    .await;
    let stream = h2_upgraded(res).await;
    let mut ws =
        tokio_tungstenite::WebSocketStream::from_raw_socket(stream, Role::Client, None).await;
    for m in [
        Message::text("over h2 and TLS"),
        Message::binary(vec![0u8, 255]),
    ] {
        ws.send(m.clone()).await.unwrap();
        let back = within(STEP_TIMEOUT, "echo", ws.next()).await;
        assert_eq!(back.unwrap().unwrap(), m, "echoed unchanged");
    }
    ws.close(None).await.unwrap();
    while let Some(Ok(_)) = within(STEP_TIMEOUT, "close echo", ws.next()).await {}
    drop((ws, sender));
    assert_eq!(seen.lock().unwrap().len(), 1, "one upstream handshake");
    proxy.shutdown().await;
}

#[tokio::test]
async fn certificates_reload_live_and_a_bad_one_is_refused() {
    let up = upstream().await;
    let (ca, dir, files, toml) = served("tls-reload", &up.url(), &["localhost"]);
    let first = files.leaf;
    let proxy = InProc::start(&toml).await;
    let running = proxy.running().unwrap();

    // An HTTP/1.1 connection opened before the rotation, kept alive.
    let old = connect(proxy.addr, &ca, "localhost", b"http/1.1", None)
        .await
        .unwrap();
    assert_eq!(old.get_ref().1.peer_certificates().unwrap()[0], first);
    let (mut tx, conn) = hyper::client::conn::http1::handshake(TokioIo::new(old))
        .await
        .unwrap();
    tokio::spawn(conn);

    // Rotate in place, as cert-manager does, and reload.
    let second = write_pem(&dir, "server", &ca.leaf(&["localhost"])).leaf;
    assert_ne!(first, second);
    running
        .reload(tokentap::config::from_toml(&toml.render()))
        .expect("reload with a rotated certificate");
    let new = connect(proxy.addr, &ca, "localhost", b"http/1.1", None)
        .await
        .unwrap();
    assert_eq!(
        new.get_ref().1.peer_certificates().unwrap()[0],
        second,
        "new connections get the rotated certificate"
    );
    let (status, _) = chat(new).await.unwrap();
    assert_eq!(status, 200);
    // The connection from before the reload still serves.
    let req = http::Request::post("/v1/chat/completions")
        .header("host", "localhost")
        .body(Full::new(Bytes::from_static(REQUEST.as_bytes())))
        .unwrap();
    let res = tx.send_request(req).await.expect("old connection survives");
    assert_eq!(res.status(), 200);

    // A broken certificate is refused; the rotated one keeps serving.
    dir.write(
        "server.pem",
        "-----BEGIN CERTIFICATE-----\nnot base64!\n-----END CERTIFICATE-----\n",
    );
    let err = running
        .reload(tokentap::config::from_toml(&toml.render()))
        .expect_err("a broken certificate must be refused");
    assert!(
        err.to_string().contains("server.pem"),
        "names the file: {err}"
    );
    let after = connect(proxy.addr, &ca, "localhost", b"http/1.1", None)
        .await
        .unwrap();
    assert_eq!(after.get_ref().1.peer_certificates().unwrap()[0], second);
    // A key that does not match the certificate is refused too.
    let (chain, _) = ca.leaf(&["localhost"]);
    dir.write("server.pem", &chain_pem(&chain));
    let err = running
        .reload(tokentap::config::from_toml(&toml.render()))
        .expect_err("a mismatched key must be refused");
    assert!(
        err.to_string().contains("server.key"),
        "names the key file: {err}"
    );
    assert!(
        !err.to_string().contains("PRIVATE KEY"),
        "no key material: {err}"
    );
    proxy.shutdown().await;
}

#[tokio::test]
async fn mtls_refuses_missing_unknown_and_expired_client_certificates() {
    let up = upstream().await;
    let (ca, dir, _, toml) = served("tls-mtls", &up.url(), &["localhost"]);
    let client_ca = dir.write("clients.pem", ca.pem());
    let toml = toml
        .set("tls", "client_ca", &q(&client_ca.display().to_string()))
        .set("tenant", "sources", r#"["client_cert", "header"]"#)
        .top("admin_listen", &q("127.0.0.1:0"));
    let proxy = InProc::start(&toml).await;

    let stranger = TestCa::new();
    let refused: [(&str, Option<Identity>); 3] = [
        ("no client certificate", None),
        ("an unknown CA", Some(stranger.client("team-x", false))),
        ("an expired certificate", Some(ca.client("team-old", true))),
    ];
    for (what, identity) in refused {
        // TLS 1.3 finishes the client's side before the server has checked
        // the certificate: the refusal shows on the first request.
        let outcome = match connect(proxy.addr, &ca, "localhost", b"http/1.1", identity).await {
            Err(_) => None,
            Ok(tls) => within(STEP_TIMEOUT, what, chat(tls)).await.ok(),
        };
        assert!(outcome.is_none(), "{what} must be refused, got {outcome:?}");
    }
    let tls = connect(
        proxy.addr,
        &ca,
        "localhost",
        b"h2",
        Some(ca.client("team-a", false)),
    )
    .await
    .expect("valid client certificate");
    let (status, body) = chat(tls)
        .await
        .expect("request with a valid client certificate");
    assert_eq!(status, 200);
    assert_eq!(&body[..], BODY.as_bytes());
    assert_eq!(up.exchanges().len(), 1, "only the valid client got through");

    let metrics = proxy
        .running()
        .unwrap()
        .telemetry()
        .scrape(tokentap::ship::prometheus::Format::Text)
        .unwrap();
    assert!(
        metrics.contains("tokentap_tenant=\"team-a\""),
        "the certificate's subject is the tenant:\n{}",
        metrics
            .lines()
            .filter(|l| l.contains("tenant"))
            .take(5)
            .collect::<Vec<_>>()
            .join("\n")
    );
    // The name and labels deploy/prometheus/alerts.yml uses.
    let expiry = metrics
        .lines()
        .find(|l| l.starts_with("tokentap_tls_certificate_expiry_seconds{"))
        .expect("certificate expiry gauge exported");
    assert!(
        expiry.contains("tokentap_listener=\"proxy\"")
            && expiry.contains("tokentap_tls_server_name=\"default\""),
        "{expiry}"
    );
    let left: f64 = expiry.rsplit(' ').next().unwrap().parse().unwrap();
    assert!(
        left > 86_400.0,
        "a fresh certificate has days left: {expiry}"
    );
    proxy.shutdown().await;
}

#[tokio::test]
async fn sni_picks_the_certificate_by_server_name() {
    let up = upstream().await;
    let (ca, dir, files, toml) = served("tls-sni", &up.url(), &["localhost"]);
    let default = files.leaf;
    let sni = write_pem(&dir, "other", &ca.leaf(&["api.example.test"]));
    let other = sni.leaf;
    let toml = toml.raw_route(&format!(
        "[[tls.sni]]\nname = \"api.example.test\"\ncert = {}\nkey = {}\n",
        q(&sni.cert.display().to_string()),
        q(&sni.key.display().to_string())
    ));
    let proxy = InProc::start(&toml).await;
    let named = connect(proxy.addr, &ca, "api.example.test", b"http/1.1", None)
        .await
        .expect("SNI certificate");
    assert_eq!(named.get_ref().1.peer_certificates().unwrap()[0], other);
    let plain = connect(proxy.addr, &ca, "localhost", b"http/1.1", None)
        .await
        .expect("default certificate");
    assert_eq!(plain.get_ref().1.peer_certificates().unwrap()[0], default);
    proxy.shutdown().await;
}

async fn admin_get(addr: SocketAddr, path: &str, auth: Option<&str>) -> (u16, String) {
    let auth = auth.map_or(String::new(), |a| format!("authorization: {a}\r\n"));
    let req = format!("GET {path} HTTP/1.1\r\nhost: admin\r\n{auth}connection: close\r\n\r\n");
    let raw = support::client::raw_http1(addr, req.as_bytes(), STEP_TIMEOUT).await;
    let (status, _, body) = support::client::parse_raw_response(&raw);
    (status, String::from_utf8_lossy(&body).into_owned())
}

#[tokio::test]
async fn admin_token_guards_everything_but_the_probes() {
    let up = upstream().await;
    let token = "s3cret-admin-token-0123456789";
    let toml = Toml::openai(&up.url())
        .top("admin_listen", &q("127.0.0.1:0"))
        .set("admin", "token", &q(token));
    let proxy = InProc::start(&toml).await;
    let admin = proxy.running().unwrap().admin_addr.expect("admin listener");
    for path in ["/metrics", "/config", "/api/live", "/"] {
        let (status, body) = admin_get(admin, path, None).await;
        assert_eq!(status, 401, "{path} without the token: {body}");
        assert!(!body.contains(token));
        let (status, _) = admin_get(admin, path, Some("Bearer wrong-token-wrong-token")).await;
        assert_eq!(status, 401, "{path} with a wrong token");
        let (status, body) = admin_get(admin, path, Some(&format!("Bearer {token}"))).await;
        assert_eq!(status, 200, "{path} with the token");
        assert!(!body.contains(token), "{path} must not show the token");
    }
    for path in ["/healthz", "/readyz"] {
        assert_eq!(
            admin_get(admin, path, None).await.0,
            200,
            "{path} stays open"
        );
    }
    // The browser login sets the cookie and sends the token out of the URL.
    let raw = support::client::raw_http1(
        admin,
        format!("GET /?token={token} HTTP/1.1\r\nhost: a\r\nconnection: close\r\n\r\n").as_bytes(),
        STEP_TIMEOUT,
    )
    .await;
    let (status, headers, _) = support::client::parse_raw_response(&raw);
    assert_eq!(status, 303);
    assert!(
        headers
            .iter()
            .any(|(k, v)| k == "set-cookie" && v.contains("HttpOnly"))
    );
    proxy.shutdown().await;

    // Probes can be closed too.
    let closed = Toml::openai(&up.url())
        .top("admin_listen", &q("127.0.0.1:0"))
        .set("admin", "token", &q(token))
        .set("admin", "open_probes", "false");
    let proxy = InProc::start(&closed).await;
    let admin = proxy.running().unwrap().admin_addr.unwrap();
    assert_eq!(admin_get(admin, "/healthz", None).await.0, 401);
    proxy.shutdown().await;
}

#[tokio::test]
async fn admin_mtls_requires_a_client_certificate() {
    let (ca, dir, up) = (TestCa::new(), Scratch::new("tls-admin"), upstream().await);
    let PemFiles { cert, key, .. } = write_pem(&dir, "admin", &ca.leaf(&["localhost"]));
    let client_ca = dir.write("clients.pem", ca.pem());
    let toml = Toml::openai(&up.url())
        .top("admin_listen", &q("0.0.0.0:0"))
        .set("admin.tls", "cert", &q(&cert.display().to_string()))
        .set("admin.tls", "key", &q(&key.display().to_string()))
        .set(
            "admin.tls",
            "client_ca",
            &q(&client_ca.display().to_string()),
        );
    let proxy = InProc::start(&toml).await;
    let port = proxy.running().unwrap().admin_addr.unwrap().port();
    let admin = SocketAddr::from(([127, 0, 0, 1], port));
    let get = |tls: TlsStream<TcpStream>| async move {
        let (mut tx, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls)).await?;
        tokio::spawn(conn);
        let req = http::Request::get("/config")
            .header("host", "localhost")
            .body(Full::new(Bytes::new()))
            .unwrap();
        let res = tx.send_request(req).await?;
        Ok::<_, hyper::Error>(res.status().as_u16())
    };
    let without = match connect(admin, &ca, "localhost", b"http/1.1", None).await {
        Err(_) => None,
        Ok(tls) => get(tls).await.ok(),
    };
    assert_eq!(without, None, "no client certificate: refused");
    let tls = connect(
        admin,
        &ca,
        "localhost",
        b"http/1.1",
        Some(ca.client("ops", false)),
    )
    .await
    .expect("admin handshake with a client certificate");
    assert_eq!(get(tls).await.unwrap(), 200);
    proxy.shutdown().await;
}

/// Reads until the peer closes (or `limit`); the bytes read and when it closed.
async fn until_closed(stream: &mut TcpStream, limit: Duration) -> (Vec<u8>, Option<Instant>) {
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return (out, Some(Instant::now())),
            Ok(Ok(n)) => out.extend_from_slice(&buf[..n]),
            Err(_) => return (out, None),
        }
    }
}

#[tokio::test]
async fn hostile_tls_clients_do_not_stop_the_listener() {
    let up = upstream().await;
    let (ca, _dir, _, toml) = served("tls-hostile", &up.url(), &["localhost"]);
    let toml =
        toml.set("server", "header_read_timeout", &q("1s"))
            .set("server", "max_connections", "64");
    let proxy = InProc::start(&toml).await;
    let addr = proxy.addr;

    // Plaintext HTTP to the TLS port: a plaintext 400 that says why.
    let mut plain = TcpStream::connect(addr).await.unwrap();
    plain
        .write_all(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    let (reply, closed) = until_closed(&mut plain, STEP_TIMEOUT).await;
    let reply = String::from_utf8_lossy(&reply);
    assert!(reply.starts_with("HTTP/1.1 400"), "{reply}");
    assert!(reply.contains("speaks TLS"), "{reply}");
    assert!(closed.is_some(), "closed after the 400");

    // Garbage after a handshake record header: refused at once.
    let mut garbage = TcpStream::connect(addr).await.unwrap();
    garbage
        .write_all(b"\x16\x03\x01\x00\x10garbage-garbage!")
        .await
        .unwrap();
    let (_, closed) = until_closed(&mut garbage, STEP_TIMEOUT).await;
    assert!(closed.is_some(), "garbage ClientHello: connection closed");

    // A flood of connections that never finish their handshake (silent,
    // or a ClientHello header with nothing after it) is cut at the header
    // read timeout, and the listener serves valid clients meanwhile.
    let t0 = Instant::now();
    let mut flood = Vec::new();
    for i in 0..48 {
        let mut s = TcpStream::connect(addr).await.unwrap();
        if i % 2 == 0 {
            s.write_all(b"\x16\x03\x01\x02\x00\x01").await.unwrap();
        }
        flood.push(s);
    }
    let tls = connect(addr, &ca, "localhost", b"h2", None)
        .await
        .expect("a valid client is served during the flood");
    assert_eq!(chat(tls).await.unwrap().0, 200);
    for s in &mut flood {
        let (_, closed) = until_closed(s, Duration::from_secs(5)).await;
        let at = closed
            .expect("a stalled handshake is cut")
            .duration_since(t0);
        assert!(
            at >= Duration::from_millis(900) && at < Duration::from_secs(4),
            "cut at the header read timeout (1 s), not at {at:?}"
        );
    }

    // A client that refuses the server's name fails its own handshake;
    // the listener does not mind.
    let wrong = connect(addr, &ca, "wrong.example.test", b"http/1.1", None).await;
    assert!(
        wrong.is_err(),
        "the client must refuse a certificate for another name"
    );
    let tls = connect(addr, &ca, "localhost", b"http/1.1", None)
        .await
        .unwrap();
    assert_eq!(chat(tls).await.unwrap().0, 200, "still serving");
    proxy.shutdown().await;
}

#[tokio::test]
async fn handshake_flood_keeps_memory_bounded_and_logs_no_secret() {
    let up = upstream().await;
    let (ca, dir, files, toml) = served("tls-flood", &up.url(), &["localhost"]);
    let key_text = files.key_pem;
    let client_ca = dir.write("clients.pem", ca.pem());
    let token = "flood-admin-token-0123456789";
    let toml = toml
        .set("tls", "client_ca", &q(&client_ca.display().to_string()))
        .set("server", "header_read_timeout", &q("1s"))
        .top("admin_listen", &q("127.0.0.1:0"))
        .set("admin", "token", &q(token));
    let bin = support::proxy::Bin::start(&toml, &[], &[("RUST_LOG", "debug")]).await;
    let pid = bin.child.id().unwrap();
    let valid = || ca.client("team-a", false);
    let tls = connect(bin.addr, &ca, "localhost", b"h2", Some(valid()))
        .await
        .unwrap();
    assert_eq!(chat(tls).await.unwrap().0, 200);
    let before = support::raw::rss_kib(pid);

    let stranger = TestCa::new();
    let (unknown, expired) = (stranger.client("x", false), ca.client("old", true));
    for round in 0..8 {
        let mut tasks = tokio::task::JoinSet::new();
        for i in 0..100 {
            let addr = bin.addr;
            let copy = |(chain, key): &Identity| (chain.clone(), key.clone_key());
            let identity = match i % 5 {
                0 => Some(copy(&unknown)),
                1 => Some(copy(&expired)),
                _ => None,
            };
            let ca = ca.der();
            tasks.spawn(async move {
                match i % 5 {
                    0 | 1 => {
                        let hello =
                            support::tls::connect(addr, ca, "localhost", b"http/1.1", identity);
                        if let Ok(tls) = hello.await {
                            let _ = tokio::time::timeout(Duration::from_secs(3), chat(tls)).await;
                        }
                    }
                    2 => {
                        let mut s = TcpStream::connect(addr).await.unwrap();
                        let _ = s.write_all(b"\x16\x03\x01\x02\x00\x01\x00").await;
                        let _ = until_closed(&mut s, Duration::from_secs(3)).await;
                    }
                    3 => {
                        let mut s = TcpStream::connect(addr).await.unwrap();
                        let _ = s
                            .write_all(&[0x16, 0x03, 0x03, 0x00, 0x05, 1, 2, 3, 4, 5])
                            .await;
                        let _ = until_closed(&mut s, Duration::from_secs(3)).await;
                    }
                    _ => {
                        let mut s = TcpStream::connect(addr).await.unwrap();
                        let _ = s.write_all(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n").await;
                        let _ = until_closed(&mut s, Duration::from_secs(3)).await;
                    }
                }
            });
        }
        within(
            Duration::from_secs(30),
            &format!("flood round {round}"),
            async { while tasks.join_next().await.is_some() {} },
        )
        .await;
    }
    let after = support::raw::rss_kib(pid);
    let tls = connect(bin.addr, &ca, "localhost", b"http/1.1", Some(valid()))
        .await
        .expect("a valid client after the flood");
    assert_eq!(
        chat(tls).await.unwrap().0,
        200,
        "still serving after the flood"
    );
    eprintln!("RSS before {before} KiB, after 800 hostile connections {after} KiB");
    assert!(
        after < before + 32 * 1024,
        "memory must stay bounded: {before} KiB -> {after} KiB"
    );
    let out = bin.output();
    assert!(
        out.contains("TLS handshake failed"),
        "the failures are logged at debug"
    );
    assert!(!out.contains(token), "the admin token must not be logged");
    for line in key_text.lines().filter(|l| !l.starts_with("-----")) {
        assert!(!out.contains(line), "key material must not be logged");
    }
}

/// A plain WebSocket upstream on 127.0.0.1 that echoes data messages.
async fn ws_echo_upstream() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            tokio::spawn(async move {
                use futures_util::{SinkExt, StreamExt};
                let Ok(mut ws) = tokio_tungstenite::accept_async(tcp).await else {
                    return;
                };
                while let Some(Ok(msg)) = ws.next().await {
                    let data = msg.is_text() || msg.is_binary();
                    if data && ws.send(msg).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    format!("http://{addr}")
}

#[tokio::test]
async fn websocket_over_tls_is_relayed_unchanged() {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;
    use tokio_tungstenite::tungstenite::handshake::client::generate_key;

    let up = ws_echo_upstream().await;
    let (ca, _dir, _, toml) = served("tls-wss", &up, &["localhost", "127.0.0.1"]);
    let toml = toml.set("server", "shutdown_grace", &q("1s"));
    let proxy = InProc::start(&toml).await;
    let tls = handshake(proxy.addr, &ca, b"http/1.1").await;
    let host = format!("localhost:{}", proxy.addr.port());
    let req = http::Request::get(format!("wss://{host}/v1/realtime?model=gpt-realtime"))
        .header("host", &host)
        .header("connection", "Upgrade")
        .header("upgrade", "websocket")
        .header("sec-websocket-version", "13")
        .header("sec-websocket-key", generate_key())
        .body(())
        .unwrap();
    let (mut ws, res) = within(
        STEP_TIMEOUT,
        "WebSocket handshake over TLS",
        tokio_tungstenite::client_async(req, tls),
    )
    .await
    .expect("the upgrade over TLS succeeds");
    assert_eq!(
        res.status(),
        101,
        "the upstream's 101 reaches the wss client"
    );
    for msg in [
        Message::text("hello over wss"),
        Message::binary(vec![0u8, 1, 2, 255]),
    ] {
        ws.send(msg.clone()).await.unwrap();
        let back = within(STEP_TIMEOUT, "the echo", ws.next())
            .await
            .expect("an answer")
            .expect("a message");
        assert_eq!(back, msg, "relayed unchanged both ways over TLS");
    }
    // The close handshake completes through the proxy too.
    ws.close(None).await.unwrap();
    within(STEP_TIMEOUT, "the close handshake", async {
        while let Some(Ok(_)) = ws.next().await {}
    })
    .await;
    drop(ws);
    proxy.shutdown().await;
}
