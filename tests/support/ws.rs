//! WebSockets in tests: a scripted WebSocket upstream on 127.0.0.1
//! (tokio-tungstenite) that logs each handshake's headers, and an HTTP/2
//! client that opens WebSockets with extended CONNECT (RFC 8441) over any
//! transport (h2c, or TLS with ALPN `h2`).
#![allow(clippy::result_large_err)] // tungstenite's handshake callback type

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use tokio::net::TcpListener;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::handshake::server::{Request, Response};
use tokio_tungstenite::tungstenite::http;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

use super::{STEP_TIMEOUT, within};

/// A client WebSocket over plain TCP.
pub(crate) type WsClient = tokio_tungstenite::WebSocketStream<tokio::net::TcpStream>;

/// Open a WebSocket (HTTP/1.1 upgrade) to `path` on `addr`, with extra
/// handshake headers.
pub(crate) async fn ws_connect(
    addr: std::net::SocketAddr,
    path: &str,
    extra: &[(&str, &str)],
) -> Result<(WsClient, http::Response<Option<Vec<u8>>>), tokio_tungstenite::tungstenite::Error> {
    use tokio_tungstenite::tungstenite::handshake::client::generate_key;
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut req = http::Request::get(format!("ws://{addr}{path}"))
        .header("host", addr.to_string())
        .header("connection", "Upgrade")
        .header("upgrade", "websocket")
        .header("sec-websocket-version", "13")
        .header("sec-websocket-key", generate_key());
    for (k, v) in extra {
        req = req.header(*k, *v);
    }
    tokio_tungstenite::client_async(req.body(()).unwrap(), tcp).await
}

/// What the scripted upstream does with each session.
#[derive(Clone, Copy)]
pub(crate) enum Script {
    /// Echo every data message; answer a close with the same code.
    Echo,
    /// Send one text message, then close with 1011.
    FailMidway,
}

/// Handshake request headers the upstream saw, one list per session.
pub(crate) type Seen = Arc<Mutex<Vec<http::HeaderMap>>>;

/// A WebSocket upstream on 127.0.0.1: returns its address and the headers
/// of each handshake it saw. Answers `chat` as subprotocol when offered.
pub(crate) async fn ws_upstream(script: Script) -> (String, Seen) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Seen::default();
    let log = seen.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let log = log.clone();
            tokio::spawn(async move {
                let cb = |req: &Request, mut res: Response| {
                    log.lock().unwrap().push(req.headers().clone());
                    let offered = req
                        .headers()
                        .get("sec-websocket-protocol")
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or("");
                    if offered.split(',').any(|p| p.trim() == "chat") {
                        res.headers_mut()
                            .insert("sec-websocket-protocol", "chat".parse().unwrap());
                    }
                    res.headers_mut()
                        .insert("x-upstream", "yes".parse().unwrap());
                    Ok(res)
                };
                let Ok(mut ws) = tokio_tungstenite::accept_hdr_async(tcp, cb).await else {
                    return;
                };
                match script {
                    Script::Echo => {
                        while let Some(Ok(msg)) = ws.next().await {
                            // tungstenite answers pings and closes itself.
                            let data = msg.is_text() || msg.is_binary();
                            if data && ws.send(msg).await.is_err() {
                                return;
                            }
                        }
                    }
                    Script::FailMidway => {
                        let _ = ws.send(Message::text("partial")).await;
                        let _ = ws
                            .close(Some(CloseFrame {
                                code: CloseCode::Error,
                                reason: "boom".into(),
                            }))
                            .await;
                        while let Some(Ok(_)) = ws.next().await {}
                    }
                }
            });
        }
    });
    (format!("http://{addr}"), seen)
}

/// An HTTP/2 client connection's handle for CONNECT requests.
pub(crate) type H2Sender =
    hyper::client::conn::http2::SendRequest<http_body_util::Empty<bytes::Bytes>>;

/// The stream of an HTTP/2 WebSocket once the CONNECT is answered.
pub(crate) type H2Stream = hyper_util::rt::TokioIo<hyper::upgrade::Upgraded>;

/// An HTTP/2 client connection on `io` (h2c, or TLS that agreed on `h2`),
/// returned once the server's SETTINGS have allowed extended CONNECT.
pub(crate) async fn h2_handshake<I>(io: I) -> H2Sender
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let io = hyper_util::rt::TokioIo::new(io);
    let exec = hyper_util::rt::TokioExecutor::new();
    let (sender, conn) = hyper::client::conn::http2::handshake(exec, io)
        .await
        .unwrap();
    // hyper reads the connection in a task of its own, which wakes no one
    // when SETTINGS arrive: look again every few milliseconds.
    let mut conn = Box::pin(conn);
    let settings = async {
        while !conn.is_extended_connect_protocol_enabled() {
            tokio::select! {
                end = conn.as_mut() => panic!("h2 connection ended before its SETTINGS: {end:?}"),
                _ = tokio::time::sleep(Duration::from_millis(2)) => {}
            }
        }
    };
    within(STEP_TIMEOUT, "SETTINGS_ENABLE_CONNECT_PROTOCOL", settings).await;
    tokio::spawn(conn);
    sender
}

/// A CONNECT for `scheme://authority/path` with `:protocol` set to
/// `protocol`, or a plain CONNECT to `authority` without one.
pub(crate) async fn h2_connect(
    sender: &mut H2Sender,
    scheme: &str,
    authority: &str,
    path: &str,
    protocol: Option<&'static str>,
    headers: &[(&str, &str)],
) -> http::Response<hyper::body::Incoming> {
    let uri = match protocol {
        Some(_) => format!("{scheme}://{authority}{path}"),
        None => authority.to_owned(),
    };
    let mut req = http::Request::connect(uri).version(http::Version::HTTP_2);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let mut req = req.body(http_body_util::Empty::new()).unwrap();
    if let Some(p) = protocol {
        req.extensions_mut()
            .insert(hyper::ext::Protocol::from_static(p));
    }
    within(STEP_TIMEOUT, "h2 ready", sender.ready())
        .await
        .unwrap();
    within(STEP_TIMEOUT, "CONNECT answer", sender.send_request(req))
        .await
        .unwrap()
}

/// The WebSocket's stream once `res` (a CONNECT's answer) says `200`.
pub(crate) async fn h2_upgraded(res: http::Response<hyper::body::Incoming>) -> H2Stream {
    assert_eq!(res.status(), 200, "extended CONNECT accepted: {res:?}");
    let upgraded = within(STEP_TIMEOUT, "h2 stream", hyper::upgrade::on(res))
        .await
        .unwrap();
    hyper_util::rt::TokioIo::new(upgraded)
}
