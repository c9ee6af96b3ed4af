//! WebSocket sessions: an HTTP/1.1 upgrade request or an HTTP/2 extended
//! CONNECT (RFC 8441) in; the upstream's answer to the handshake out to the
//! client (its `101` and headers, or `200` to an HTTP/2 client; its error
//! response unchanged), then a WebSocket session task that relays the bytes both
//! ways untouched (`relay`) while metering reads a side view. tokentap
//! never terminates the WebSocket: the client and the upstream negotiate
//! subprotocol and extensions end to end.

mod boundary;
mod metering;
mod relay;

use std::sync::Arc;

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderValue};
use http::{Method, Request, Response, StatusCode, Uri, Version};
use http_body_util::{Empty, Full};
use hyper::body::Incoming;
use hyper::upgrade::{OnUpgrade, Upgraded};
use hyper_util::rt::TokioIo;
use tokio::sync::watch;

use crate::config::WebsocketConfig;
use crate::meter::RequestFacts;
use crate::meter::body::Meter;
use crate::meter::ws_sessions::{Slot, WsSessions};
use crate::providers::ProviderKind;
use crate::providers::realtime::{self, Dialect};
use crate::telemetry::Telemetry;
use crate::upstream::{self, Client};

pub use relay::BUFFER_BYTES;

/// Whether `req` asks for a WebSocket: an HTTP/1.1 upgrade (RFC 6455 §4.1:
/// `Connection` naming `upgrade` and `Upgrade` naming `websocket`) or an
/// HTTP/2 extended CONNECT with `:protocol` websocket (RFC 8441). Other
/// upgrades (h2c) are not relayed: their headers are dropped as hop-by-hop.
pub fn is_upgrade<B>(req: &Request<B>) -> bool {
    Via::of(req).is_some()
}

/// How the client asked for its WebSocket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Via {
    /// HTTP/1.1 `Upgrade: websocket`, answered `101`.
    Upgrade,
    /// HTTP/2 extended CONNECT, answered `200`; the upstream still gets an
    /// HTTP/1.1 upgrade, with a key of tokentap's own.
    Connect,
}

impl Via {
    fn of<B>(req: &Request<B>) -> Option<Via> {
        if crate::server::is_websocket_connect(req) {
            return Some(Via::Connect);
        }
        let upgrade = req.version() == Version::HTTP_11
            && has_token(req.headers(), header::CONNECTION, "upgrade")
            && has_token(req.headers(), header::UPGRADE, "websocket");
        upgrade.then_some(Via::Upgrade)
    }
}

/// Whether a comma-separated header lists `token` (any case).
fn has_token(headers: &HeaderMap, name: header::HeaderName, token: &str) -> bool {
    headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case(token))
}

/// The model a WebSocket session asks for in its URL (`model=`, `deployment=`).
pub fn model_from_path(path_and_query: &str) -> Option<String> {
    realtime::model_from_query(path_and_query)
}

/// The provider a WebSocket session's URL implies when the route names none.
pub fn provider_for_path(path_and_query: &str) -> Option<ProviderKind> {
    match realtime::dialect_for_path(path_and_query)? {
        Dialect::GeminiLive => Some(ProviderKind::Gemini),
        Dialect::OpenaiRealtime | Dialect::OpenaiResponses => Some(ProviderKind::Openai),
    }
}

/// What an upgrade needs from the instance and the route.
pub struct Handshake<'a> {
    /// Upstream client that opens the upstream WebSocket connection.
    pub client: &'a Client,
    /// Telemetry the WebSocket session and its responses are recorded into.
    pub telemetry: &'a Arc<Telemetry>,
    /// The instance's WebSocket sessions: count, cap and shutdown signal.
    pub ws_sessions: &'a Arc<WsSessions>,
    /// The configuration the WebSocket session keeps for its whole life.
    pub config: WebsocketConfig,
    /// Upstream URI the handshake is forwarded to.
    pub upstream_uri: Uri,
    /// Request facts shared by the WebSocket session's measurements.
    pub facts: RequestFacts,
    /// The path and query the client asked for (after the route prefix).
    pub path_and_query: String,
    /// The route's upstream speaks only HTTP/2 (`http2 = "always"`): the
    /// HTTP/1.1 upgrade tokentap sends upstream cannot reach it.
    pub upstream_http2_only: bool,
    /// The route's egress proxy choice (`routes[].proxy`).
    pub proxy: crate::config::proxy::RouteProxy,
}

/// The answer to an upgrade request.
pub enum Answer {
    /// The upstream switched protocols (its `101`), or tokentap refused or
    /// failed the handshake (a JSON error); sent as is.
    Local(Response<Full<Bytes>>),
    /// The upstream answered with something other than `101`: relayed
    /// unchanged and metered like any response, by `meter`.
    Upstream(Response<Incoming>, Box<Meter>),
}

/// Forward the handshake; on `101`, start the WebSocket session's relay task on the
/// current runtime.
pub async fn upgrade(h: Handshake<'_>, mut req: Request<Incoming>) -> Answer {
    let via = Via::of(&req).unwrap_or(Via::Upgrade);
    let ws_session = h.telemetry.begin_ws_session(&h.facts, req.headers());
    let Some(slot) = h.ws_sessions.enter(h.config.max_sessions, h.facts.start) else {
        let (status, code) = (StatusCode::SERVICE_UNAVAILABLE, "websocket_sessions_full");
        record_refusal(&h.facts, ws_session, status, code);
        let message = "websocket.max_sessions sessions are running; try again later";
        return Answer::Local(crate::error::error_response(status, message, code));
    };
    if h.upstream_http2_only {
        let (status, code) = (StatusCode::BAD_GATEWAY, "websocket_upstream_http2_only");
        record_refusal(&h.facts, ws_session, status, code);
        let message = "the route's upstream is HTTP/2 only (http2 = \"always\"); \
            tokentap opens WebSockets upstream with an HTTP/1.1 upgrade and does not send \
            extended CONNECT upstream";
        return Answer::Local(crate::error::error_response(status, message, code));
    }
    let client_side = hyper::upgrade::on(&mut req);
    let (mut parts, _body) = req.into_parts();
    let upgrade_to = match via {
        Via::Upgrade => parts.headers.get(header::UPGRADE).cloned(),
        Via::Connect => Some(HeaderValue::from_static("websocket")),
    };
    upstream::strip_hop_by_hop(&mut parts.headers);
    // The GET carries no body (RFC 6455 §4.1); none is forwarded.
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.remove(header::HOST);
    restore_upgrade(&mut parts.headers, upgrade_to);
    let key = (via == Via::Connect).then(|| as_http1_upgrade(&mut parts));
    ws_session.inject(&mut parts.headers);
    parts.uri = h.upstream_uri.clone();
    parts.version = Version::HTTP_11;
    let request = Request::from_parts(parts, Empty::<Bytes>::new());

    let mut res = match h.client.upgrade(request, &h.proxy).await {
        Ok(res) => res,
        Err(e) => {
            tracing::debug!(route = %h.facts.route, error = %e, "upstream upgrade failed");
            record_refusal(&h.facts, ws_session, e.status(), e.code());
            return Answer::Local(e.to_response());
        }
    };
    if let Err((code, message)) = check_switch(via, &res, key.as_ref()) {
        tracing::debug!(route = %h.facts.route, code, "upstream handshake answer unusable");
        let status = StatusCode::BAD_GATEWAY;
        record_refusal(&h.facts, ws_session, status, code);
        return Answer::Local(crate::error::error_response(status, &message, code));
    }
    if res.status() != StatusCode::SWITCHING_PROTOCOLS {
        let mut meter = Meter::new(h.facts.clone(), Box::new(ws_session.begin_child(&h.facts)));
        meter.watch_shutdown(h.ws_sessions.shutdown());
        ws_session.refused(&h.facts, "handshake_refused");
        upstream::strip_hop_by_hop(res.headers_mut());
        return Answer::Upstream(res, Box::new(meter));
    }
    let upstream_side = hyper::upgrade::on(&mut res);
    let (mut head, _) = res.into_parts();
    let upgrade_to = head.headers.get(header::UPGRADE).cloned();
    let deflate_offered: Vec<String> = head
        .headers
        .get_all(header::SEC_WEBSOCKET_EXTENSIONS)
        .iter()
        .filter_map(|v| v.to_str().ok().map(str::to_owned))
        .collect();
    upstream::strip_hop_by_hop(&mut head.headers);
    let status = match via {
        Via::Upgrade => {
            restore_upgrade(&mut head.headers, upgrade_to);
            StatusCode::SWITCHING_PROTOCOLS
        }
        Via::Connect => {
            // The accept answered tokentap's key, not anything the client
            // sent; a length on a 2xx to CONNECT makes hyper reset the stream.
            head.headers.remove(header::SEC_WEBSOCKET_ACCEPT);
            head.headers.remove(header::CONTENT_LENGTH);
            StatusCode::OK
        }
    };
    let metering = metering::Metering::new(
        &h.facts,
        &h.path_and_query,
        &deflate_offered,
        h.config.max_message_bytes,
        ws_session,
        h.ws_sessions.shutdown().clone(),
    );
    let run = Run {
        client: client_side,
        upstream: upstream_side,
        idle: h.config.idle_timeout,
        stop: h.ws_sessions.stopping(),
        slot,
    };
    tokio::spawn(run.relay(metering));
    let mut res = Response::new(Full::new(Bytes::new()));
    *res.status_mut() = status;
    *res.headers_mut() = head.headers;
    Answer::Local(res)
}

/// A handshake that ends before the upstream switched: one failed
/// response (`status`, `code`) inside the WebSocket session span, which ends with `code`.
fn record_refusal(
    facts: &RequestFacts,
    ws_session: crate::telemetry::WsSessionTelemetry,
    status: StatusCode,
    code: &str,
) {
    let mut meter = Meter::new(facts.clone(), Box::new(ws_session.begin_child(facts)));
    meter.fail(status.as_u16(), code);
    ws_session.refused(facts, code);
}

/// Turn an extended CONNECT's head into an HTTP/1.1 upgrade GET (RFC 8441
/// §5 maps one onto the other): HTTP/2 has no `Sec-WebSocket-Key`, so a
/// fresh one goes upstream. Returns that key; every `Sec-WebSocket-*`
/// header the client sent (version, protocols, extensions) is kept as is.
fn as_http1_upgrade(parts: &mut http::request::Parts) -> HeaderValue {
    parts.method = Method::GET;
    parts.extensions.remove::<hyper::ext::Protocol>();
    let key = new_key();
    parts.headers.insert(header::SEC_WEBSOCKET_KEY, key.clone());
    key
}

/// A `Sec-WebSocket-Key`: 16 random bytes in base64 (RFC 6455 §4.1).
fn new_key() -> HeaderValue {
    use base64::Engine as _;
    let mut nonce = [0u8; 16];
    fastrand::fill(&mut nonce);
    let encoded = base64::engine::general_purpose::STANDARD.encode(nonce);
    // Base64 is always a valid header value.
    HeaderValue::from_str(&encoded)
        .unwrap_or_else(|_| HeaderValue::from_static("AAAAAAAAAAAAAAAAAAAAAA=="))
}

/// The `Sec-WebSocket-Accept` that answers `key` (RFC 6455 §4.2.2).
fn accept_for(key: &[u8]) -> String {
    use base64::Engine as _;
    use sha1::Digest as _;
    const GUID: &[u8] = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
    let mut sha = sha1::Sha1::new();
    sha.update(key);
    sha.update(GUID);
    base64::engine::general_purpose::STANDARD.encode(sha.finalize())
}

/// Whether the upstream's answer can go back to a client that came `via`:
/// for an HTTP/2 client tokentap made the handshake, so a `101` must carry
/// the accept for tokentap's `key`, and any other success status would read
/// as an open tunnel on HTTP/2 (it is refused). The error is the code and
/// message of the `502` the client gets.
fn check_switch<B>(
    via: Via,
    res: &Response<B>,
    key: Option<&HeaderValue>,
) -> Result<(), (&'static str, String)> {
    let (Via::Connect, Some(key)) = (via, key) else {
        return Ok(());
    };
    let status = res.status();
    if status.is_success() {
        let message = format!(
            "upstream answered the WebSocket handshake with {status} instead of 101 Switching Protocols"
        );
        return Err(("websocket_not_switched", message));
    }
    if status != StatusCode::SWITCHING_PROTOCOLS {
        return Ok(());
    }
    let expected = accept_for(key.as_bytes());
    match res.headers().get(header::SEC_WEBSOCKET_ACCEPT) {
        Some(got) if got.as_bytes() == expected.as_bytes() => Ok(()),
        Some(_) => Err((
            "websocket_accept_mismatch",
            "upstream's Sec-WebSocket-Accept does not answer the Sec-WebSocket-Key tokentap sent"
                .to_owned(),
        )),
        None => Err((
            "websocket_accept_missing",
            "upstream switched protocols without a Sec-WebSocket-Accept header".to_owned(),
        )),
    }
}

/// Put back the two hop-by-hop headers an upgrade needs on its next hop.
fn restore_upgrade(headers: &mut HeaderMap, upgrade_to: Option<HeaderValue>) {
    headers.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    if let Some(to) = upgrade_to {
        headers.insert(header::UPGRADE, to);
    }
}

/// A WebSocket session between the handshake and its end.
struct Run {
    client: OnUpgrade,
    upstream: OnUpgrade,
    idle: Option<std::time::Duration>,
    stop: watch::Receiver<bool>,
    slot: Slot,
}

impl Run {
    async fn relay(self, mut metering: metering::Metering) {
        let (client, upstream) = match tokio::try_join!(self.client, self.upstream) {
            Ok(pair) => pair,
            Err(e) => {
                tracing::debug!(error = %e, "websocket upgrade did not complete");
                metering.not_upgraded();
                return;
            }
        };
        let (client, client_prefix) = client_io(client);
        let (upstream, upstream_prefix) = upstream_io(upstream);
        let end = relay::relay(
            client,
            client_prefix,
            upstream,
            upstream_prefix,
            self.idle,
            self.stop,
            &mut metering,
        )
        .await;
        tracing::debug!(?end, "websocket session ended");
        metering.finish(end);
        drop(self.slot);
    }
}

/// The client's socket itself when hyper hands it back (no screening of
/// request heads, no dynamic dispatch), else the upgraded stream.
fn client_io(up: Upgraded) -> (Io<tokio::net::TcpStream>, Bytes) {
    match up.downcast::<TokioIo<crate::server::ClientStream<tokio::net::TcpStream>>>() {
        Ok(parts) => (Io::Own(parts.io.into_inner().into_inner()), parts.read_buf),
        Err(up) => (Io::Upgraded(TokioIo::new(up)), Bytes::new()),
    }
}

/// The upstream transport (TCP or TLS) when hyper hands it back.
fn upstream_io(up: Upgraded) -> (Io<TokioIo<upstream::UpstreamIo>>, Bytes) {
    match up.downcast::<upstream::UpstreamIo>() {
        Ok(parts) => (Io::Own(TokioIo::new(parts.io)), parts.read_buf),
        Err(up) => (Io::Upgraded(TokioIo::new(up)), Bytes::new()),
    }
}

/// A transport: the original one, or hyper's boxed upgraded stream.
enum Io<T> {
    Own(T),
    Upgraded(TokioIo<Upgraded>),
}

impl<T: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for Io<T> {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match self.get_mut() {
            Io::Own(t) => std::pin::Pin::new(t).poll_read(cx, buf),
            Io::Upgraded(u) => std::pin::Pin::new(u).poll_read(cx, buf),
        }
    }
}

impl<T: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for Io<T> {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Io::Own(t) => std::pin::Pin::new(t).poll_write(cx, buf),
            Io::Upgraded(u) => std::pin::Pin::new(u).poll_write(cx, buf),
        }
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match self.get_mut() {
            Io::Own(t) => std::pin::Pin::new(t).poll_flush(cx),
            Io::Upgraded(u) => std::pin::Pin::new(u).poll_flush(cx),
        }
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match self.get_mut() {
            Io::Own(t) => std::pin::Pin::new(t).poll_shutdown(cx),
            Io::Upgraded(u) => std::pin::Pin::new(u).poll_shutdown(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(headers: &[(&str, &str)]) -> Request<()> {
        let mut b = Request::get("/v1/realtime");
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        b.body(()).expect("test step")
    }

    #[test]
    fn only_websocket_upgrades_are_relayed() {
        assert!(is_upgrade(&req(&[
            ("connection", "keep-alive, Upgrade"),
            ("upgrade", "websocket")
        ])));
        assert!(is_upgrade(&req(&[
            ("connection", "upgrade"),
            ("upgrade", "WebSocket")
        ])));
        assert!(!is_upgrade(&req(&[
            ("connection", "upgrade"),
            ("upgrade", "h2c")
        ])));
        assert!(
            !is_upgrade(&req(&[("upgrade", "websocket")])),
            "no Connection: upgrade"
        );
        let mut h2 = req(&[("connection", "upgrade"), ("upgrade", "websocket")]);
        *h2.version_mut() = Version::HTTP_2;
        assert!(
            !is_upgrade(&h2),
            "HTTP/2 uses extended CONNECT, not Upgrade"
        );
    }

    #[test]
    fn http2_websocket_connect_is_an_upgrade() {
        let connect = |protocol: Option<&'static str>| {
            let mut r = Request::connect("https://example.com/v1/realtime")
                .version(Version::HTTP_2)
                .body(())
                .expect("test step");
            if let Some(p) = protocol {
                r.extensions_mut()
                    .insert(hyper::ext::Protocol::from_static(p));
            }
            r
        };
        assert_eq!(Via::of(&connect(Some("websocket"))), Some(Via::Connect));
        assert!(
            is_upgrade(&connect(Some("WebSocket"))),
            "token without case"
        );
        assert!(!is_upgrade(&connect(None)), "plain CONNECT");
        assert!(!is_upgrade(&connect(Some("connect-udp"))), "other protocol");
    }

    #[test]
    fn accept_answers_the_key_as_rfc_6455_shows() {
        // RFC 6455 §1.3's worked example.
        assert_eq!(
            accept_for(b"dGhlIHNhbXBsZSBub25jZQ=="),
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
        let key = new_key();
        assert_eq!(key.len(), 24, "16 bytes in base64");
        assert_ne!(key, new_key(), "a fresh nonce each time");
    }

    #[test]
    fn an_http2_client_gets_only_a_verified_switch() {
        let key = new_key();
        let answer = |status: u16, accept: Option<String>| {
            let mut b = Response::builder().status(status);
            if let Some(a) = accept {
                b = b.header("sec-websocket-accept", a);
            }
            b.body(()).expect("test step")
        };
        let right = Some(accept_for(key.as_bytes()));
        let ok = check_switch(Via::Connect, &answer(101, right.clone()), Some(&key));
        assert_eq!(ok, Ok(()));
        let wrong = Some(accept_for(b"another key"));
        let code = |r: Result<(), (&'static str, String)>| r.err().map(|(c, _)| c);
        assert_eq!(
            code(check_switch(Via::Connect, &answer(101, wrong), Some(&key))),
            Some("websocket_accept_mismatch")
        );
        assert_eq!(
            code(check_switch(Via::Connect, &answer(101, None), Some(&key))),
            Some("websocket_accept_missing")
        );
        assert_eq!(
            code(check_switch(Via::Connect, &answer(200, None), Some(&key))),
            Some("websocket_not_switched"),
            "a 200 would read as an open tunnel on HTTP/2"
        );
        assert_eq!(
            check_switch(Via::Connect, &answer(401, None), Some(&key)),
            Ok(()),
            "errors are relayed"
        );
        assert_eq!(
            check_switch(Via::Upgrade, &answer(101, None), None),
            Ok(()),
            "HTTP/1.1 clients check their own accept"
        );
    }
}
